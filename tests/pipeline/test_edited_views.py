"""The newest view of every file the agent edited stays in the context (issue 11).

An agent rewrites a scratch script between two failing test runs: the script's newest
version (the heredoc write) is what the next step needs, the two tracebacks score 5 (error
output) and the script's own content scores low. Before this change the tracebacks went
first and the summary reserve took the rest, so at these budgets the newest version was only
in a summary; now it is tried right after the task statement and the user's hard
constraints, the reserve yields to it, and the older version is archived — marked
superseded, restorable, never lost.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from invariants import assert_invariants

from relevance_memory import RelevanceMemoryManager
from relevance_memory.pipeline import OrderPolicy
from relevance_memory.pipeline.order import DEFAULT_ORDER

SCRIPT_V1 = "import sys\n" + "".join(f"print('case {n}', {n} * 3)\n" for n in range(12))
SCRIPT_V2 = "import sys\n" + "".join(
    f"value_{n} = {n} * 3\nprint('case {n}', value_{n}, value_{n} == {n * 3})\n" for n in range(14)
)
TRACE = (
    "Traceback (most recent call last):\n"
    + "".join(f'  File "app/util.py", line {n}, in helper_{n}\n    return helper_{n + 1}(x)\n' for n in range(10))
    + "AssertionError: helper_7(3) returned 10, expected 21\n"
)
CONSTRAINT = (
    "Hard rules for this fix — you must follow every one:\n"
    + "".join(f"{n}. You must never modify tests/test_util.py or any file under tests/ (rule {n}); "
              f"the fix belongs in app/util.py only, and helper_{n} must keep its signature.\n" for n in range(1, 7))
)


def call(call_id: str, command: str) -> dict[str, Any]:
    return {"role": "assistant", "content": f"THOUGHT: run {command.split()[0]}.", "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": command})}}]}


def result(call_id: str, output: str, code: int = 0) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": f"<returncode>{code}</returncode>\n<output>\n{output}</output>"}


def write(call_id: str, path: str, body: str) -> dict[str, Any]:
    return call(call_id, f"cat <<'EOF' > {path}\n{body}EOF")


def history(*, constraint: bool = False) -> list[dict[str, Any]]:
    """m2 writes check_values.py, m6 rewrites it (its newest view); m5 and m9 are tracebacks."""
    turns = [
        {"role": "system", "content": "You are a coding agent. Use the bash tool."},
        {"role": "user", "content": "Fix helper_7 in app/util.py: it must multiply by 7, not add. "
                                    "Run tests/test_util.py when done."},
        write("c1", "check_values.py", SCRIPT_V1), result("c1", ""),                       # m2, m3
        call("c2", "python -m pytest -q tests/test_util.py"), result("c2", TRACE, 1),     # m4, m5
        write("c3", "check_values.py", SCRIPT_V2), result("c3", ""),                       # m6, m7
        call("c4", "python -m pytest -q tests/test_util.py -k helper_7"),                  # m8, m9
        result("c4", TRACE.replace("returned 10", "returned 11"), 1),
    ]
    if constraint:
        turns.append({"role": "user", "content": CONSTRAINT})                              # m10
    turns += [
        call("c5", "git status --short"), result("c5", " M app/util.py\n?? check_values.py\n"),
        call("c6", "git diff --stat"), result("c6", " app/util.py | 2 +-\n 1 file changed, 1 insertion(+)\n"),
        call("c7", "ls tests"), result("c7", "test_util.py\n__init__.py\n"),
    ]
    if constraint:
        turns.append({"role": "user", "content": "Please go on."})
    return turns


VIEWS_FIRST = OrderPolicy(core=DEFAULT_ORDER.core, working=DEFAULT_ORDER.working)


def build(turns: list[dict[str, Any]], budget: int) -> tuple[RelevanceMemoryManager, Any]:
    # issue 11's setting (no excerpts, a 10 % summary reserve): at these tiny budgets issue 21
    # would cut the 431-token view and the tracebacks to their share and hold a third of the room
    # for the summary's names; the order of whole chains is what is tested here, in the chat core
    # order (an agent's history orders its core chains newest first by default, issue 21: the
    # views-first order is one line away and is what this module pins)
    memory = RelevanceMemoryManager(keep_recent=1, excerpt_share=1.0, graded_fidelity=False, tool_summary_share=0.1,
                                    order=VIEWS_FIRST)
    memory.extend(turns)
    built = memory.build_context(budget=budget)
    assert_invariants(turns, built, budget, memory.tokenizer)
    return memory, built


@pytest.mark.parametrize("budget", [900, 1100, 1300])
def test_the_newest_view_beats_score_5_error_outputs_and_the_older_view_is_archived(budget: int) -> None:
    memory, built = build(history(), budget)
    record = built.record
    assert memory.store.edited_views() == {"check_values.py": "m6"}
    view, older = record.decision_for("m6"), record.decision_for("m2")
    # the newest version is kept verbatim, with its call's result (the chain stays whole)
    assert view.decision == "kept" and record.decision_for("m7").decision == "kept"
    assert view.tier == "core" and "newest view of check_values.py, a file the agent edited" in view.note
    commands = [json.loads(c["function"]["arguments"])["command"] for m in built.messages for c in m.get("tool_calls", ())]
    assert any(SCRIPT_V2 in c for c in commands) and not any(SCRIPT_V1 in c for c in commands)
    # the competing score-5 tracebacks: at least one could not fit and was summarised
    tracebacks = [record.decision_for(i) for i in ("m5", "m9")]
    assert all(d.score == 5 and d.tier == "core" for d in tracebacks)
    assert any(d.decision == "summarised" and "over budget" in d.note for d in tracebacks)
    # the older version: marked superseded (linked both ways), archived, still in the store
    assert older.superseded_by == "m6" and "written whole" in older.supersede_reason
    assert view.supersedes == ["m2"]
    assert older.decision == "summarised" and "superseded by m6" in older.note
    assert SCRIPT_V1 in json.loads(memory.store.get("m2").tool_calls[0].arguments)["command"]
    # the task statement stays verbatim
    assert record.decision_for("m1").decision in ("kept", "recent")


def test_the_summary_reserve_yields_to_the_newest_view() -> None:
    """At 900 tokens the view and the summaries cannot both have their room: the view keeps its
    room and the summaries fold into less (here one level-2 summary)."""
    _, built = build(history(), 900)
    record = built.record
    assert record.decision_for("m6").decision == "kept"
    breakdown = record.budget_breakdown
    assert breakdown is not None
    assert breakdown.spent["core"] >= record.decision_for("m6").tokens + record.decision_for("m7").tokens
    assert record.summaries and breakdown.spent["summaries"] > 0  # the archive is still summarised
    assert record.tokens_after <= 900


def test_a_hard_user_constraint_comes_before_the_newest_view() -> None:
    """A user's constraint scored 5 is tried before the newest views: at 800 tokens the view
    would fit without the constraint but not beside it, so the constraint stays verbatim and
    the view is summarised; at 900 both stay. (Before, the constraint tied with the score-5
    tracebacks and a newer one went first: at 700 the constraint was only in a summary.)"""
    turns = history(constraint=True)
    memory, built = build(turns, 800)
    record = built.record
    constraint, task, view = record.decision_for("m10"), record.decision_for("m1"), record.decision_for("m6")
    assert constraint.score == 5 and constraint.decision == "kept" and constraint.tier == "core"
    assert view.decision == "summarised" and "over budget" in view.note
    breakdown = record.budget_breakdown
    assert breakdown is not None
    room = 800 - sum(breakdown.spent[p] for p in ("reply_priming", "pinned", "goal_block", "working_memory"))
    view_chain = view.tokens + record.decision_for("m7").tokens
    assert task.tokens + view_chain <= room < task.tokens + constraint.tokens + view_chain
    assert memory.store.get("m10").content == CONSTRAINT
    for budget in (700, 900):
        _, other = build(turns, budget)
        assert other.record.decision_for("m10").decision == "kept", budget
    _, roomy = build(turns, 900)
    assert roomy.record.decision_for("m6").decision == "kept"


def test_a_view_larger_than_the_room_left_is_summarised_never_cut() -> None:
    """At 525 tokens the newest view's chain (450 tokens) cannot fit beside what every context
    holds: it is not truncated — it goes to the summary (restorable by id) and a smaller
    chain may take the room; the context stays valid (checked by ``build``)."""
    memory, built = build(history(), 525)
    record = built.record
    view = record.decision_for("m6")
    assert view.decision == "summarised" and "over budget" in view.note
    assert any("m6" in s.covered_ids for s in record.summaries)
    commands = [json.loads(c["function"]["arguments"])["command"] for m in built.messages for c in m.get("tool_calls", ())]
    assert not any("check_values.py" in c for c in commands)  # no partial copy of the view
    assert memory.store.get("m6").tool_calls[0].arguments == history()[6]["tool_calls"][0]["function"]["arguments"]


def test_the_file_edited_last_goes_first() -> None:
    """Two files edited, room for the newest view of one: the file edited last is kept."""
    body_a = "".join(f"def alpha_{n}():\n    return {n}\n" for n in range(40))
    body_b = "".join(f"def beta_{n}():\n    return {n}\n" for n in range(40))
    turns: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent. Use the bash tool."},
        {"role": "user", "content": "Make the helpers return strings."},
        write("c1", "pkg/b.py", body_b), result("c1", ""),                                 # m2: b written
        write("c2", "pkg/a.py", body_a), result("c2", ""),                                 # m4: a written
        call("c3", "sed -i 's/return 3$/return 33/' pkg/b.py"), result("c3", ""),          # b edited last
        call("c4", "git status --short"), result("c4", " M pkg/a.py\n M pkg/b.py\n"),
        call("c5", "ls pkg"), result("c5", "a.py\nb.py\n"),
    ]
    memory, built = build(turns, 800)
    assert memory.store.edited_views() == {"pkg/a.py": "m4", "pkg/b.py": "m2"}
    assert memory.store.file_edits() == {"pkg/b.py": "m6", "pkg/a.py": "m4"}
    record = built.record
    assert record.decision_for("m2").decision == "kept"  # pkg/b.py: edited last (m6), shown by m2
    assert record.decision_for("m4").decision == "summarised" and "over budget" in record.decision_for("m4").note

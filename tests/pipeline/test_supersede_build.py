"""Superseded facts and tool results through whole builds (issue 11).

Histories where a preference, a name, an amount or a file's content changes, built at
several budgets: the newest value is in the context (verbatim or in a summary), the older
message is marked in the record (``superseded_by``, linked both ways) and never lost; an
identical repeat links nothing; a goal that asks for the earlier value keeps it. Also the
semantic scorer in the default build and the lexical build without the model.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import pytest
from invariants import assert_invariants

from relevance_memory import SUMMARY_MARKER, RelevanceMemoryManager
from relevance_memory._models import content_text
from relevance_memory.scoring import _embedding

CLOCK = datetime(2026, 12, 1, tzinfo=timezone.utc)
FILLER = [
    "Can you recommend a podcast about history?",
    "Sure - 'Hardcore History' by Dan Carlin is a classic long-form history podcast.",
    "What's a good stretch for a stiff back after long flights?",
    "Try a gentle cat-cow stretch and a standing forward fold, holding each for thirty seconds.",
    "How do I keep basil alive on a windowsill?",
    "Give it six hours of sun, water when the top inch of soil is dry, and pinch off the flowers.",
]


def chat_history(old: str, new: str, question: str, filler_rounds: int = 4) -> list[dict[str, Any]]:
    turns: list[dict[str, Any]] = [{"role": "system", "content": "You are a helpful personal assistant."}]
    turns.append({"role": "user", "content": "Hi! I'd like help planning my week."})
    turns.append({"role": "assistant", "content": "Happy to help with your week."})
    turns.append({"role": "user", "content": old})
    turns.append({"role": "assistant", "content": "Noted, thanks for telling me."})
    for n in range(filler_rounds):
        for k, text in enumerate(FILLER):
            turns.append({"role": "user" if k % 2 == 0 else "assistant", "content": f"{text} ({n})"})
    turns.append({"role": "user", "content": new})
    turns.append({"role": "assistant", "content": "Got it, I'll keep that in mind."})
    for n in range(filler_rounds):
        for k, text in enumerate(FILLER[:4]):
            turns.append({"role": "user" if k % 2 == 0 else "assistant", "content": f"{text} [{n}]"})
    turns.append({"role": "user", "content": question})
    return turns


FACTS = [
    ("preference", "I love sushi, it's my favourite food.", "Honestly, I don't like sushi anymore.",
     "What should I eat for dinner tonight?", "dislikes sushi"),
    ("name", "My name is Sam, by the way.", "My name is Samantha now, please use that.",
     "How should you address me in the email?", "samantha"),
    ("amount", "My budget for the trip is $500.", "Update: my budget for the trip is now $700.",
     "Plan a weekend trip for me within my budget.", "$700"),
]


def build(history: list[dict[str, Any]], budget: int, **overrides: Any) -> tuple[RelevanceMemoryManager, Any]:
    memory = RelevanceMemoryManager(keep_recent=1, clock=lambda: CLOCK, **overrides)
    memory.extend(history)
    if history[-1]["role"] == "user" and "Summarise" not in history[-1]["content"]:
        memory.set_goal(final=history[-1]["content"])  # a chat: the newest question is the task
    built = memory.build_context(budget=budget)
    assert_invariants(history, built, budget, memory.tokenizer)
    return memory, built


def texts_of(built: Any) -> list[str]:
    return [content_text(m.get("content")) for m in built.messages]


@pytest.mark.parametrize(("kind", "old", "new", "question", "new_value"), FACTS, ids=[f[0] for f in FACTS])
@pytest.mark.parametrize("budget", [260, 400, 700])
def test_newest_fact_wins_and_the_older_is_marked_not_lost(
    kind: str, old: str, new: str, question: str, new_value: str, budget: int
) -> None:
    history = chat_history(old, new, question)
    memory, built = build(history, budget, supersede_archives_facts=True)
    old_id = next(m.id for m in memory.messages if content_text(m.content) == old)
    new_id = next(m.id for m in memory.messages if content_text(m.content) == new)
    older, newer = built.record.decision_for(old_id), built.record.decision_for(new_id)
    # marked both ways, never deleted
    assert older.superseded_by == new_id and "restated with a new value" in older.supersede_reason
    assert newer.supersedes == [old_id]
    assert memory.store.get(old_id).content == old
    # the newest value is in the context, verbatim or in a summary
    everything = "\n".join(texts_of(built))
    assert new in everything or (newer.decision == "summarised" and new_value in everything.lower())
    # the older one is not kept verbatim next to it
    assert old not in texts_of(built)
    assert older.decision in ("summarised", "dropped") and "superseded by" in older.note
    # in a summary the older value is shown only as earlier (or given up first under pressure)
    summary_lines = [line for t in texts_of(built) if t.startswith(SUMMARY_MARKER) for line in t.splitlines()]
    head = old.split(",")[0].rstrip(".")
    for line in summary_lines:
        if head in line:
            assert "(earlier; since step" in line, line


def test_goal_asking_for_the_earlier_value_keeps_it() -> None:
    history = chat_history(FACTS[0][1], FACTS[0][2], "What food did I initially say was my favourite?")
    memory, built = build(history, 400, supersede_archives_facts=True)
    old_id = next(m.id for m in memory.messages if content_text(m.content) == FACTS[0][1])
    decision = built.record.decision_for(old_id)
    assert decision.superseded_by is not None
    assert "the goal asks for earlier values" in decision.note
    assert decision.decision == "kept" and FACTS[0][1] in texts_of(built)


def test_by_default_a_superseded_fact_is_marked_not_archived() -> None:
    history = chat_history(FACTS[0][1], FACTS[0][2], FACTS[0][3])
    memory, built = build(history, 700)
    old_id = next(m.id for m in memory.messages if content_text(m.content) == FACTS[0][1])
    decision = built.record.decision_for(old_id)
    assert decision.superseded_by is not None and "superseded by" not in decision.note


def test_identical_repeat_adds_nothing_and_deletes_nothing() -> None:
    history = chat_history("My favourite colour is blue.", "My favourite colour is blue.", "Pick a colour for my mug.")
    memory, built = build(history, 400)
    assert memory.store.superseded_by == {}
    assert all(d.superseded_by is None and not d.supersedes for d in built.record.messages)


def call(call_id: str, command: str) -> dict[str, Any]:
    return {"role": "assistant", "content": f"THOUGHT: run {command.split()[0]}.", "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": command})}}]}


def result(call_id: str, output: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": f"<returncode>0</returncode>\n<output>\n{output}</output>"}


def agent_history() -> list[dict[str, Any]]:
    body_old = "".join(f"def helper_{n}(x):\n    return x + {n}  # old implementation line\n" for n in range(40))
    body_new = body_old.replace("return x + 7  # old implementation line", "return x * 7  # fixed")
    return [
        {"role": "system", "content": "You are a coding agent. Use the bash tool."},
        {"role": "user", "content": "Fix helper_7 in app/util.py: it must multiply by 7, not add."},
        call("c1", "cat app/util.py"), result("c1", body_old),
        call("c2", "grep -n helper_7 app/util.py"), result("c2", "15:def helper_7(x):"),
        call("c3", "sed -i 's/return x + 7  # old implementation line/return x * 7  # fixed/' app/util.py"),
        result("c3", ""),
        call("c4", "cat app/util.py"), result("c4", body_new),
        call("c5", "python -m pytest -q tests/test_util.py"), result("c5", "1 passed in 0.01s"),
        {"role": "user", "content": "Looks good. Summarise the change."},
    ]


@pytest.mark.parametrize("budget", [1800, 2600, 4000])
def test_file_read_edit_read_keeps_the_newest_view(budget: int) -> None:
    history = agent_history()
    memory, built = build(history, budget)
    ids = {m.tool_call_id: m.id for m in memory.messages if m.role == "tool"}
    old, new = built.record.decision_for(ids["c1"]), built.record.decision_for(ids["c4"])
    assert old.superseded_by == ids["c4"] and "the same call" in old.supersede_reason
    assert new.supersedes == [ids["c1"]]
    assert new.decision in ("kept", "recent")  # the newest view of the edited file stays
    assert old.decision != "kept"  # the stale view does not sit next to it
    assert "fix helper_7" in texts_of(built)[1].lower()  # the task statement stays


def test_default_build_reads_meaning_and_says_which_signal_fired() -> None:
    if _embedding.default_embedder() is None:
        pytest.skip(_embedding.embedder_unavailable_reason())
    history = chat_history("I bought a portable power bank for my travels last month.", "My sister visits on Friday.",
                           "Any tips for my phone's battery life on long trips?", filler_rounds=6)
    memory, built = build(history, 320)
    power = next(m.id for m in memory.messages if "power bank" in content_text(m.content))
    decision = built.record.decision_for(power)
    assert "semantic match" in decision.reason and "to the goal" in decision.reason
    assert decision.score is not None and decision.score >= 3
    assert built.record.embedder.startswith("wordllama-l2_supercat-256@wordllama-0.4")
    assert "wordllama" in built.record.scorer_model
    # deterministic: the same history gives the same record
    _, again = build(history, 320)
    assert again.record.to_json() == built.record.to_json()


def test_without_the_model_the_build_is_lexical_and_says_so_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_embedding, "_cached", {})
    monkeypatch.setattr(_embedding, "_package_dir", lambda package: None)
    history = chat_history("I bought a portable power bank.", "My sister visits on Friday.",
                           "Any tips for my phone's battery life?")
    memory = RelevanceMemoryManager(keep_recent=1, clock=lambda: CLOCK)
    memory.extend(history)
    with pytest.warns(RuntimeWarning, match="lexical") if not _semantic_warned() else _nothing():
        first = memory.build_context(budget=300)
    second = memory.build_context(budget=280)
    assert any("wordllama" in w and "lexical" in w for w in first.record.warnings)
    assert not any("wordllama" in w for w in second.record.warnings)
    assert first.record.embedder == "" and first.record.scorer_model == "offline-v2"
    assert memory.vectors is None


def test_embeddings_off_is_the_lexical_scorer() -> None:
    history = chat_history(FACTS[0][1], FACTS[0][2], FACTS[0][3])
    _, built = build(history, 400, embeddings=False, supersede=False)
    assert built.record.scorer_model == "offline-v2" and built.record.embedder == ""
    assert all(d.superseded_by is None for d in built.record.messages)


def _semantic_warned() -> bool:
    from relevance_memory.scoring import _semantic

    return bool(_semantic._WARNED_PROCESS)


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *args: object) -> None:
        return None

"""Pheromone memory is scoped to the task it was earned for, strength orders tiers in bands,
and the offline scorer's scores are cached per message (LoCoMo follow-up to issue 5).

Each of these cost evidence recall on LoCoMo when every question is a new final goal:
strength earned for earlier questions ordered and carried the current one's working tier,
sub-deposit strength differences (type priors, one reinforcement) outranked a better lexical
match, and two messages with the same text shared one cached offline score although the
offline scorer also reads their place in the history.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from scorers import WrappedOfflineScorer

from relevance_memory import RelevanceMemoryManager, RelevanceScore
from relevance_memory._config import PheromoneConfig
from relevance_memory._models import Message, MessageType
from relevance_memory.pheromone._field import PheromoneField
from relevance_memory.pipeline import Chain
from relevance_memory.pipeline.select import select_chains
from relevance_memory.scoring._scorer import message_cache_key


def _field_with(kind: str = "tool_result") -> PheromoneField:
    field = PheromoneField(PheromoneConfig())
    role = "tool" if kind == "tool_result" else "user"
    field.observe([Message(id="m0", index=0, role=role, content="x", msg_type=MessageType(kind), step=0,
                           token_count=1)])  # type: ignore[arg-type]
    return field


def test_deposits_earned_under_another_final_goal_do_not_count() -> None:
    field = _field_with()  # tool result: initial strength 3.0
    field.deposit({"m0": 5}, "sub", "task A")  # 3 + 4·(1 − 3/10) = 5.8
    assert field.strength("m0") == pytest.approx(5.8)
    assert field.strength_for("m0", "task A") == pytest.approx(5.8)
    assert field.strength_for("m0", "task B") == pytest.approx(3.0)  # the base only
    field.deposit({"m0": 3}, "sub", "task B")  # drops A's 2.8, then 3 + 1·(1 − 0.3) = 3.7
    assert field.strength("m0") == pytest.approx(3.7)
    assert field.goal_of("m0") == "task B"
    field.deposit({"m0": 3}, "sub", "task A")  # back to A: a new deposit, B's 0.7 dropped
    assert field.strength("m0") == pytest.approx(3.7)


def test_strength_for_the_current_subtask_leaves_out_its_own_deposit() -> None:
    field = _field_with()
    field.deposit({"m0": 5}, "first", "task")  # 5.8
    field.deposit({"m0": 3}, "second", "task")  # 5.8 + 1·(1 − 0.58) = 6.22
    assert field.strength_for("m0", "task", "second") == pytest.approx(5.8)  # carried in from "first"
    assert field.strength_for("m0", "task", "first") == pytest.approx(6.22)
    assert field.strength_for("m0", "task") == pytest.approx(6.22)


def _score(i: int, score: int, weight: float) -> RelevanceScore:
    return RelevanceScore(id=f"m{i}", score=score, weight=weight)


def test_working_tier_orders_by_strength_band_then_weight() -> None:
    chains = {i: Chain(root=i, members=(i,), tokens=10) for i in range(3)}
    scores = {0: _score(0, 3, 0.9), 1: _score(1, 3, 0.1), 2: _score(2, 3, 0.5)}
    common = dict(available=20, core_score=4, archive_score=2, referenced_by={}, promote_after_references=2)
    # 1.2 and 1.9 share a band: the better match (weight 0.9) wins over the stronger one
    banded = select_chains(chains, scores, strengths={0: 1.2, 1: 1.9, 2: 0.4}, **common)  # type: ignore[arg-type]
    assert banded.kept == {0, 1}
    # a whole deposit apart, strength decides (SPEC §3: working "by strength then recency")
    apart = select_chains(chains, scores, strengths={0: 0.9, 1: 2.1, 2: 1.5}, **common)  # type: ignore[arg-type]
    assert apart.kept == {1, 2}
    exact = select_chains(chains, scores, strengths={0: 1.2, 1: 1.9, 2: 0.4}, strength_resolution=1e-9,
                          **common)  # type: ignore[arg-type]
    assert exact.kept == {0, 1} and select_chains(
        chains, scores, strengths={0: 1.2, 1: 1.9, 2: 1.5}, strength_resolution=1e-9, **common  # type: ignore[arg-type]
    ).kept == {1, 2}


def test_offline_scores_are_cached_per_message_not_per_text() -> None:
    key = message_cache_key("p", content_hash="h", role="tool", msg_type="tool_result")
    assert key == "p:h:tool:tool_result"
    assert message_cache_key("p", content_hash="h", role="tool", msg_type="tool_result", message_id="m7") == key + ":m7"
    # τ-bench airline run 13: the same tool error comes back four times; later messages
    # name its identifiers, and references resolve to the first occurrence, so only that one
    # earns the offline scorer's "+1 referenced"; under a text-only key the later copies'
    # score overwrote it and the rebuild selected differently
    error = "Error: flight HAT030 not available on date 2024-05-13"
    memory = RelevanceMemoryManager(max_input_tokens=260, keep_recent=1, goal_block=False)
    memory.add({"role": "user", "content": "Please help me move my trip to a later day."})
    for n in range(4):
        call = {"id": f"c{n}", "type": "function",
                "function": {"name": "update_reservation_flights", "arguments": "{\"flight\": \"HAT030\"}"}}
        memory.add({"role": "assistant", "content": None, "tool_calls": [call]})
        memory.add({"role": "tool", "tool_call_id": f"c{n}", "content": error})
        memory.add({"role": "assistant", "content": f"HAT030 is not available then (try {n})."})
    memory.add({"role": "user", "content": "Then look for another flight."})
    first = memory.build_context()
    scores = {d.id: d.score for d in first.record.messages if d.role == "tool"}
    assert len(set(scores.values())) > 1  # same text, different scores: the place counts
    again = memory.build_context()
    assert [(d.id, d.score) for d in again.record.messages] == [(d.id, d.score) for d in first.record.messages]
    assert again.messages == first.messages


def _call(i: int, cmd: str) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": f"c{i}", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"cmd": cmd})}}]}


def _result(i: int, output: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": f"c{i}", "content": output}


def _subtask_switch_history() -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Fix the bug in parser.py where parse_date fails on ISO strings."},
        {"role": "assistant", "content": "The zebra quokka function frobnicate_widget is key."},
    ]
    for i in range(30):
        history += [_call(i, f"ls dir{i}"), _result(i, " ".join(f"file{i}_{k}.txt" for k in range(40)))]
    return [*history, {"role": "user", "content": "continue"}]


@pytest.mark.parametrize("how", ["prefilter_on", "custom_scorer_auto"])
def test_rebuild_after_a_subtask_switch_admits_the_same_chains(how: str) -> None:
    # m2 scored 5 under the first subtask: the prefilter lets it pass under the next one.
    # That build's own deposit (score 1) must not change what the rebuild admits.
    scorer = WrappedOfflineScorer() if how == "custom_scorer_auto" else None
    memory = RelevanceMemoryManager(
        max_input_tokens=600, keep_recent=1, prefilter_top_n=5, scorer=scorer,
        prefilter=True if how == "prefilter_on" else "auto",
    )
    memory.extend(_subtask_switch_history())
    memory.set_goal(subtask="inspect frobnicate_widget zebra quokka")
    assert memory.build_context().record.decision_for("m2").score == 5
    memory.set_goal(subtask="run the failing test")
    first = memory.build_context()
    assert first.record.decision_for("m2").decision == "kept"
    assert not first.record.decision_for("m2").reason.startswith("prefiltered out")
    again = memory.build_context()
    assert again.messages == first.messages
    assert again.record.decision_for("m2").decision == "kept"
    if scorer is not None:
        before = scorer.items
        memory.build_context()
        assert scorer.items == before  # nothing re-scored


def test_wrapped_offline_scorer_rebuilds_identically_with_repeated_texts() -> None:
    # the repeated tool error of τ-bench run 13, scored by a wrapper that does not declare
    # context_dependent: the per-message entry is read before the shared content entry
    scorer = WrappedOfflineScorer()
    memory = RelevanceMemoryManager(max_input_tokens=260, keep_recent=1, goal_block=False, scorer=scorer,
                                    prefilter=False)
    memory.add({"role": "user", "content": "Please help me move my trip to a later day."})
    for n in range(4):
        memory.add(_call(n, "update_reservation_flights HAT030"))
        memory.add(_result(n, "Error: flight HAT030 not available on date 2024-05-13"))
        memory.add({"role": "assistant", "content": f"HAT030 is not available then (try {n})."})
    memory.add({"role": "user", "content": "Then look for another flight."})
    first = memory.build_context()
    assert len({d.score for d in first.record.messages if d.role == "tool"}) > 1
    again = memory.build_context()
    assert [(d.id, d.score) for d in again.record.messages] == [(d.id, d.score) for d in first.record.messages]
    assert again.messages == first.messages


def test_offline_score_is_recomputed_when_new_references_arrive() -> None:
    config = "port = 8123\nhost = alpha.internal\ntoken_id = ZX99Q"
    history: list[dict[str, Any]] = [{"role": "system", "content": "agent"},
                                     {"role": "user", "content": "Fix the bug in parser.py."}]
    history += [_call(0, "cat config.ini"), _result(0, config), _call(1, "cat config.ini"), _result(1, config)]
    for i in range(2, 8):
        history += [_call(i, f"ls d{i}"), _result(i, f"x{i}")]
    rebuild = {"always_rebuild": True}  # both managers build from scratch: the scores are compared
    memory = RelevanceMemoryManager(max_input_tokens=5000, keep_recent=1, cache_policy=rebuild)
    memory.extend(history)
    # the task, stated: with a second user turn the goal would follow the user's requests (issue 21)
    memory.set_goal(final="Fix the bug in parser.py.")
    early = memory.build_context(budget=200).record
    assert (early.decision_for("m3").score, early.decision_for("m5").score) == (3, 1)
    memory.extend([_call(9, "curl alpha.internal:8123 -H ZX99Q"), _result(9, "ok"),
                   {"role": "user", "content": "use token ZX99Q on port 8123"}])
    later = memory.build_context(budget=200)
    cold = RelevanceMemoryManager(max_input_tokens=5000, keep_recent=1, cache_policy=rebuild)
    cold.extend([m.to_openai() for m in memory.messages])
    cold.set_goal(final="Fix the bug in parser.py.")
    cold_built = cold.build_context(budget=200)
    for mid in ("m3", "m5"):  # scored again with the new references, as a cold manager scores them
        assert later.record.decision_for(mid).score == cold_built.record.decision_for(mid).score == 3
        assert later.record.decision_for(mid).score_source.value == "offline"
    assert later.messages == cold_built.messages


NOTICE = "Please always provide EXACTLY ONE action in triple backticks. You MUST follow this format."


def test_older_copies_of_a_repeated_user_notice_yield_to_the_newest() -> None:
    memory = RelevanceMemoryManager(max_input_tokens=420, keep_recent=2)
    memory.add({"role": "user", "content": "Fix the date parser in parser.py."})
    for n in range(6):
        memory.add({"role": "assistant", "content": f"Thinking about step {n} without an action."})
        memory.add({"role": "user", "content": NOTICE})
        memory.add(_call(n, f"grep -n parse_date parser.py # {n}"))
        memory.add(_result(n, f"{n * 10}: def parse_date(value):"))
    memory.add({"role": "user", "content": "Go on with the fix."})
    built = memory.build_context()
    copies = [d for d in built.record.messages if d.role == "user" and memory.store.get(d.id).text == NOTICE]
    assert len(copies) == 6
    newest, older = copies[-1], copies[:-1]
    assert newest.decision in ("kept", "recent")
    assert all(d.decision == "dropped" and d.note == f"repeat of {newest.id}, which is kept verbatim" for d in older)
    assert sum(1 for m in built.messages if m.get("content") == NOTICE) == 1
    assert not any(d.id in s.covered_ids for s in built.record.summaries for d in older)  # not summarised either
    assert memory.build_context().messages == built.messages


def test_sphinx_run_keeps_one_copy_of_its_notice_and_warns_consistently(data_dir: Path) -> None:
    run = json.loads((data_dir / "swebench_trajectories" / "sphinx-doc__sphinx-9229.json").read_text("utf-8"))
    memory = RelevanceMemoryManager(max_input_tokens=8_000, keep_recent=4)
    memory.extend(run["messages"])
    built = memory.build_context()
    repeats = [d for d in built.record.messages if d.note.startswith("repeat of")]
    # the harness notice appears 10 times (8 word for word, 2 with another count of actions):
    # one format notice (issue 21), its newest copy shown, the 9 others its repeats
    assert len(repeats) == 9
    assert {d.note for d in repeats} == {"repeat of m275, which is kept verbatim"}
    assert all(d.score == 2 and "format notice" in d.reason for d in repeats)
    assert built.record.decision_for("m1").decision == "kept"  # the task statement
    # a tighter budget: the 2,078-token task statement cannot be kept verbatim; the warnings
    # say where it went, never "only in a summary" and "dropped" about the same message
    tight = RelevanceMemoryManager(max_input_tokens=2_500, keep_recent=4)
    tight.extend(run["messages"][:180])
    record = tight.build_context().record
    where = record.decision_for("m1").decision
    text = " ".join(record.warnings)
    assert ("only in a summary" in text) == (where == "summarised")
    assert ("nor in a summary" in text) == (where == "dropped")


CONSTRAINT = "You must never modify tests/test_api.py; the constraint is binding."


def _constraint_run(repeat: bool) -> Any:
    memory = RelevanceMemoryManager(max_input_tokens=700, keep_recent=2)
    memory.add({"role": "user", "content": "Fix the bug in the date parser in parser.py."})
    memory.add({"role": "user", "content": CONSTRAINT})
    for n in range(6):
        memory.add({"role": "assistant", "content": f"Looking at step {n}."})
        memory.add({"role": "user", "content": f"ok {n}"})
    if repeat:  # the later copy sits in a long trace chain (kept only as an excerpt, issue 21)
        memory.add({"role": "user", "content": CONSTRAINT}, trace_id="T")
    memory.add({"role": "assistant", "content": "LOG " + " ".join(f"line{k}" for k in range(600))}, trace_id="T")
    for n in range(3):
        memory.add({"role": "assistant", "content": f"later {n}"})
        memory.add({"role": "user", "content": f"go {n}"})
    return memory.build_context()


def test_an_older_copy_yields_only_to_a_newer_copy_that_is_kept() -> None:
    built = _constraint_run(False)
    assert built.record.decision_for("m1").decision == "kept"
    assert sum(1 for m in built.messages if m.get("content") == CONSTRAINT) == 1
    # the later copy's chain holds a 1,205-token message, larger than the whole budget: it
    # enters as an excerpt (issue 21), so the later copy is kept and the older one yields to it
    built = _constraint_run(True)
    later = built.record.decision_for("m14")
    assert (later.decision, later.fidelity) == ("kept", "verbatim")
    assert built.record.decision_for("m15").fidelity == "excerpt"
    assert built.record.decision_for("m1").note == "repeat of m14, which is kept verbatim"
    assert sum(1 for m in built.messages if m.get("content") == CONSTRAINT) == 1


def test_same_text_from_another_speaker_is_not_a_repeat() -> None:
    allergy = "I am allergic to peanuts, so no peanut dishes for me."
    memory = RelevanceMemoryManager(max_input_tokens=300, keep_recent=1)
    memory.set_goal(final="Plan the team dinner menu respecting everyone's allergies")
    memory.add({"role": "user", "name": "carol", "content": "Let's plan the dinner."})
    memory.add({"role": "user", "name": "alice", "content": allergy})
    for n in range(8):
        memory.add({"role": "assistant",
                    "content": f"Thinking about dish option {n} with several ingredients for the dinner menu."})
        memory.add({"role": "user", "name": "carol", "content": f"Dish idea {n}: rice and vegetables {n}."})
    memory.add({"role": "user", "name": "bob", "content": allergy})
    for n in range(3):
        memory.add({"role": "assistant", "content": f"More thinking {n} about dinner logistics."})
        memory.add({"role": "user", "name": "carol", "content": f"Idea {n}: soup."})
    built = memory.build_context()
    speakers = {m.get("name") for m in built.messages if m.get("content") == allergy}
    assert speakers == {"alice", "bob"}
    assert not built.record.decision_for("m1").note.startswith("repeat of")


def test_fresh_keeps_the_summarizer() -> None:
    from relevance_memory.summary._summary import OfflineSummarizer

    class MySummarizer(OfflineSummarizer):
        pass

    memory = RelevanceMemoryManager(max_input_tokens=300, summarizer=MySummarizer())
    other = memory.fresh([{"role": "user", "content": "hi"}])
    assert type(other.summarizer) is MySummarizer and other.score_cache is memory.score_cache

"""Selection, assembly and the decision record on small hand-made histories."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import pytest
from invariants import assert_invariants

from relevance_memory import (
    GOAL_BLOCK_MARKER,
    ConfigError,
    DecisionRecord,
    MemoryConfig,
    OfflineScorer,
    RelevanceMemoryManager,
    ScoreItem,
    ScoreSource,
    ScoringResult,
    TaskGoal,
    TiktokenCounter,
)
from relevance_memory._markers import SUBTASK_MARKER
from relevance_memory.testing import FixedScorer

CLOCK = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)


def call(call_id: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "bash", "arguments": arguments}}


def agent_history(steps: int = 12) -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the failing date parser in utils/dates.py. You must not change the public API."},
    ]
    for n in range(steps):
        if n == steps // 2:
            history.append({"role": "user", "content": "Status?"})
        history.append({"role": "assistant", "content": f"Step {n}: inspect", "tool_calls": [call(f"c{n}", json.dumps({"command": f"cat file_{n}.txt"}))]})
        history.append({"role": "tool", "tool_call_id": f"c{n}", "content": f"contents of file {n} " + "lorem ipsum " * 40})
    return history


def build(history: list[dict[str, Any]], budget: int, **kwargs: Any):  # type: ignore[no-untyped-def]
    memory = RelevanceMemoryManager(max_input_tokens=budget, clock=lambda: CLOCK, **kwargs)
    memory.extend(history)
    built = memory.build_context()
    assert_invariants(history, built, budget, memory.tokenizer)
    return memory, built


def test_tiers_and_budget_fill_follow_scores() -> None:
    history = agent_history()
    scorer = FixedScorer(1, scores={"m1": 5, "m5": 4, "m9": 3, "m13": 3, "m3": 2})
    # SPEC §3 step 6 to the letter: no archived chain takes the room left (fill_from_archive)
    _memory, built = build(history, 1000, keep_recent=2, scorer=scorer, fill_from_archive=False)
    record = built.record
    by_id = {d.id: d for d in record.messages}
    assert by_id["m0"].decision == "kept" and by_id["m0"].tier == "pinned"
    assert by_id["m1"].decision == "kept" and by_id["m1"].tier == "core" and by_id["m1"].score == 5
    # the result m5 scored 4 drags its call m4 along: a chain's score is the max of its members
    assert (by_id["m4"].tier, by_id["m5"].tier) == ("core", "core")
    assert by_id["m4"].decision == by_id["m5"].decision == "kept"
    assert by_id["m4"].chain_id == by_id["m5"].chain_id == "m4"
    assert by_id["m8"].tier == by_id["m9"].tier == "working"
    assert by_id["m2"].tier == by_id["m3"].tier == "archive"
    # archived chains are folded into the summary pyramid; the originals stay restorable
    assert by_id["m3"].decision == "summarised" and "restorable from the store" in by_id["m3"].note
    # working memory: the last 2 steps verbatim, plus the newest user message
    assert [d.id for d in record.messages if d.decision == "recent"] == ["m14", "m23", "m24", "m25", "m26"]
    assert record.working_steps == 3
    assert record.goal_block is True
    # the stable head (SPEC §3.1): the kept task statement stays right after the system
    # prompt, the goal block and summaries follow it
    assert built.messages[1] == history[1]
    assert built.messages[2]["content"].startswith(GOAL_BLOCK_MARKER)
    assert built.sources[:3] == (0, 1, None)
    assert scorer.calls and "m23" not in scorer.calls[0].ids  # working memory is never scored


def test_working_tier_fills_by_recency_and_skips_what_does_not_fit() -> None:
    history = agent_history()
    scorer = FixedScorer(3)
    _, built = build(history, 1300, keep_recent=1, scorer=scorer)
    kept = [d.id for d in built.record.messages if d.decision == "kept" and d.tier == "working"]
    # newest working chains first: the kept ones are the most recent older chains
    assert kept and kept == sorted(kept, key=lambda x: int(x[1:]))
    newest_older = max(int(d.id[1:]) for d in built.record.messages if d.tier == "working")
    assert f"m{newest_older}" in kept


def test_task_statement_is_scored_five_and_kept_first() -> None:
    history = agent_history()
    _, built = build(history, 900, keep_recent=1)
    decision = built.record.decision_for("m1")
    assert (decision.score, decision.reason, decision.decision) == (5, "task statement", "kept")


def test_oversized_task_statement_enters_as_an_excerpt_and_the_goal_block_says_so() -> None:
    """Issue 21 (SPEC §11): a task statement larger than its share of the budget (half of it, for
    what a person wrote) enters as an excerpt of itself — head and tail, with a marker naming
    m1 — and the goal block points at that excerpt; it used to be clipped into the goal block."""
    history = agent_history(4)
    history[1] = {"role": "user", "content": "Fix the parser. " + "Details: " + "x y z " * 600 + " END-MARKER"}
    memory, built = build(history, 900, keep_recent=1)
    task = next(m for m in built.messages if m.get("role") == "user")
    assert task["content"].startswith("[relevance-memory: excerpt of m1")
    assert "Fix the parser." in task["content"] and "END-MARKER" in task["content"]
    decision = built.record.decision_for("m1")
    assert decision.fidelity == "excerpt" and decision.sent_tokens is not None
    assert decision.sent_tokens <= 450 < decision.tokens  # 900 × 1/16 × 8
    goal_block = next(m["content"] for m in built.messages if str(m["content"]).startswith(GOAL_BLOCK_MARKER))
    assert "first user message (m1), kept here as an excerpt" in goal_block
    assert memory.restore(["m1"])[0] == history[1]


def test_explicit_goal_is_in_the_goal_block() -> None:
    memory = RelevanceMemoryManager(max_input_tokens=700, keep_recent=1)
    memory.extend(agent_history())
    memory.set_goal(final="Make tests pass without API changes", subtask="read file 3")
    built = memory.build_context()
    block = next(m["content"] for m in built.messages if m["content"].startswith(GOAL_BLOCK_MARKER))
    assert "Final goal: Make tests pass without API changes" in block
    assert "read file 3" not in block  # the subtask never rewrites the prefix (SPEC §3.1)


def test_subtask_at_end_is_the_last_message_and_not_part_of_the_next_prefix() -> None:
    # the policy of issue 10 pinned (a half target, no excerpts): the test is about the note
    memory = RelevanceMemoryManager(max_input_tokens=1200, keep_recent=1, excerpt_share=1.0, tool_summary_share=0.1,
                                    cache_policy={"subtask_at_end": True, "target_fraction": 0.5, "steps_ahead": 0})
    history = agent_history()
    memory.extend(history[:-4])
    memory.set_goal(subtask="read file 3")
    assert memory.build_context().record.mode == "full_rebuild"  # the first build fills the whole budget
    memory.extend(history[-4:-2])
    first = memory.build_context()  # appending would exceed it: a compaction down to the target
    assert first.record.mode == "compacted" and first.record.target == 600
    assert first.messages[-1] == {"role": "system", "content": f"{SUBTASK_MARKER}\nread file 3"}
    assert first.sources[-1] is None and first.record.budget_breakdown is not None
    assert first.record.budget_breakdown.spent["subtask"] > 0
    memory.extend(history[-2:])
    memory.set_goal(subtask="read file 4")
    second = memory.build_context()
    assert second.record.mode == "appended"
    assert second.messages[: len(first.messages) - 1] == first.messages[:-1]
    assert second.messages[-3:-1] == history[-2:]
    assert second.messages[-1]["content"].endswith("read file 4")
    assert second.record.prefix_tokens == first.record.tokens_after - 3 - memory.tokenizer.count_message(
        first.messages[-1]
    )


def test_failing_scorer_degrades_to_offline_with_a_warning() -> None:
    class Broken(FixedScorer):
        def score(self, goal: TaskGoal, items: Any, context: Any = None) -> ScoringResult:
            raise RuntimeError("endpoint down")

    with pytest.warns(RuntimeWarning, match="endpoint down"):
        _, built = build(agent_history(), 1200, keep_recent=1, scorer=Broken())
    scored = [d for d in built.record.messages if d.score is not None]
    assert scored and all(d.score_source == ScoreSource.FALLBACK for d in scored)
    assert any("endpoint down" in w for w in built.record.warnings)
    assert built.record.usage.fallbacks == len(scored)


def test_scorer_missing_ids_get_fallback_scores() -> None:
    class Partial(FixedScorer):
        def score(self, goal: TaskGoal, items: Any, context: Any = None) -> ScoringResult:
            result = super().score(goal, items, context)
            return ScoringResult(scores=result.scores[1:])  # drops the first id

    _, built = build(agent_history(), 1200, keep_recent=1, scorer=Partial(2))
    sources = {d.score_source for d in built.record.messages if d.score is not None}
    assert sources == {ScoreSource.LLM, ScoreSource.FALLBACK}
    assert any("no score for 1 message" in w for w in built.record.warnings)


def test_rebuild_uses_the_score_cache() -> None:
    scorer = FixedScorer(2)
    memory = RelevanceMemoryManager(
        max_input_tokens=1200, keep_recent=1, scorer=scorer, cache_policy={"always_rebuild": True}
    )
    memory.extend(agent_history())
    first = memory.build_context()
    second = memory.build_context()
    assert len(scorer.calls) == 1
    assert second.messages == first.messages
    assert second.record.cache_hits == first.record.cache_misses > 0
    assert second.record.cache_hit_rate == 1.0
    assert {d.score_source for d in second.record.messages if d.score is not None} == {ScoreSource.CACHE}
    memory.set_goal(subtask="something else")
    memory.build_context()
    assert len(scorer.calls) == 2  # a new subtask is a new cache key


def test_record_json_round_trip() -> None:
    _, built = build(agent_history(), 1200, keep_recent=1)
    text = built.record.to_json()
    again = DecisionRecord.from_json(text)
    assert again == built.record
    data = json.loads(text)
    assert data["created_at"].startswith("2026-11-30T12:00:00")
    assert {"build_id", "goal", "budget", "tokens_before", "tokens_after", "messages", "usage", "rubric_version"} <= set(data)
    first = data["messages"][3]
    assert {"id", "step", "score", "score_source", "reason", "strength", "tier", "decision", "chain_id"} <= set(first)


def test_keep_recent_zero_still_keeps_newest_user_message() -> None:
    history = [*agent_history(6), {"role": "user", "content": "What did you find?"}]
    _, built = build(history, 400, keep_recent=0)
    assert built.messages[-1] == history[-1]


def test_budget_from_model_window() -> None:
    config = MemoryConfig(model="gpt-4o")
    assert config.token_budget() == int(128_000 * 0.6)
    assert MemoryConfig(model="gpt-4", input_fraction=0.5).token_budget() == 4096
    assert MemoryConfig(model="gpt-4-turbo").resolved_encoding == "cl100k_base"
    assert MemoryConfig(model="gpt-4o-mini").resolved_encoding == "o200k_base"
    assert MemoryConfig(max_input_tokens=5000).token_budget() == 5000


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"input_fraction": 0.95, "output_reserve": 0.1}, "must not exceed 1"),
        ({"keep_recent": -1}, "keep_recent"),
        ({"core_score": 2, "archive_score": 3}, "must be below core_score"),
        ({"budget_tokens": 5}, "Extra inputs are not permitted"),
    ],
)
def test_bad_config_is_a_clear_error(overrides: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        RelevanceMemoryManager(**overrides)


def test_offline_scorer_is_deterministic_and_explains_itself() -> None:
    scorer = OfflineScorer()
    goal = TaskGoal(final="Fix the date parser in utils/dates.py", subtask="run the date tests")
    items = [
        ScoreItem(id="a", role="tool", msg_type="tool_result", source="bash", text="Traceback (most recent call last):\nValueError: bad date in utils/dates.py"),
        ScoreItem(id="b", role="assistant", msg_type="assistant_reasoning", source="assistant", text="Nice weather today."),
        # the store types a user message with a constraint cue as an instruction (see below)
        ScoreItem(id="c", role="user", msg_type="user_instruction", source="user", text="Never push to main."),
    ]
    first = scorer.score(goal, items)
    assert first == scorer.score(goal, items)
    scores = {s.id: s for s in first.scores}
    assert scores["a"].score >= 4 and "error output" in scores["a"].reason
    assert scores["b"].score == 1 and "unrelated" in scores["b"].reason
    assert scores["c"].score == 5 and "hard constraint" in scores["c"].reason
    memory = RelevanceMemoryManager()
    memory.extend([{"role": "user", "content": "Fix it."}, {"role": "user", "content": "Never push to main."}])
    assert memory.messages[1].msg_type.value == "user_instruction"


def test_cjk_history_is_counted_and_kept_valid() -> None:
    history = [{"role": "system", "content": "你是助理。"}]
    for n in range(30):
        history.append({"role": "user", "content": f"第 {n} 轮：今天天气怎么样？我家猫叫豆豆。"})
        history.append({"role": "assistant", "content": "今天多云，适合出门散步。" * 3})
    counter = TiktokenCounter()
    total = sum(counter.count_message(m) for m in history)
    _, built = build(history, total // 3, keep_recent=2)
    assert built.record.tokens_after <= total // 3


@pytest.mark.parametrize("budget", [1000, 1200, 1400, 1600, 1800])
def test_a_newest_user_message_too_large_for_the_room_keeps_its_lines(budget: int) -> None:
    """A newcomer's trial (2026-12-06): the django run's task statement (1,679 tokens, its only
    and so newest user message) did not fit what the system prompt leaves at 1,000–1,600 tokens,
    and was sent as a bare marker — its excerpt was capped by that room *less itself* (1 token)
    — while the goal block pointed at it and hundreds of tokens went unused. Now its excerpt is
    capped by the room itself: the task's opening lines are sent, within the budget."""
    from pathlib import Path

    from relevance_memory import load_transcript

    fixture = Path(__file__).resolve().parents[2] / "fixtures" / "django__django-15280.json"
    history = load_transcript(fixture).messages
    memory = RelevanceMemoryManager(max_input_tokens=budget)
    memory.extend(history)
    built = memory.build_context()
    task = next(m for m in built.messages if m.get("role") == "user")
    assert task["content"].startswith("[relevance-memory: excerpt of m1")
    assert "lines kept" in task["content"].splitlines()[0]  # not "all 1,679 tokens left out"
    assert "<pr_description>" in task["content"] and "Deferred fields incorrect" in task["content"]
    decision = built.record.decision_for("m1")
    assert decision.fidelity == "excerpt" and decision.sent_tokens is not None and decision.sent_tokens > budget // 3
    assert_invariants(history, built, budget, memory.tokenizer)  # within the budget, chains whole

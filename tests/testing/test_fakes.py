"""relevance_memory.testing: the fakes users test their own agent code with."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from relevance_memory import RelevanceMemoryManager, RelevanceScore, ScoreSource
from relevance_memory.testing import (
    FixedScorer,
    FunctionScorer,
    ScriptedScorer,
    ScriptExhaustedError,
    assert_valid_context,
)


def _history() -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a travel agent."},
        {"role": "user", "content": "Book a flight to Oslo. The total must stay under 900 EUR."},
    ]
    for n in range(12):
        history.append({"role": "assistant", "content": f"Option {n}: " + "a long description of a fare " * 12})
        history.append({"role": "user", "content": f"What about option {n + 1}?"})
    return history


def _build(scorer: Any, budget: int = 700, *, rebuild: bool = False) -> tuple[RelevanceMemoryManager, Any]:
    """``rebuild=True``: every build re-scores (by default a build with nothing new is an append, issue 10)."""
    policy = {"always_rebuild": rebuild}
    memory = RelevanceMemoryManager(max_input_tokens=budget, keep_recent=2, scorer=scorer, cache_policy=policy)
    history = _history()
    memory.extend(history)
    built = memory.build_context()
    assert_valid_context(history, built, memory.tokenizer)
    return memory, built


def test_fixed_scorer_keeps_what_it_scores_high_and_records_the_calls() -> None:
    scorer = FixedScorer(1, scores={"m5": 5})
    _, built = _build(scorer)
    record = built.record
    assert record.decision_for("m5").decision == "kept"
    assert record.decision_for("m5").score == 5 and record.decision_for("m5").score_source == ScoreSource.LLM
    assert record.decision_for("m3").decision in ("summarised", "dropped")
    assert record.scorer == "fixed" and len(scorer.calls) == 1
    assert scorer.calls[0].ids == scorer.asked and "m5" in scorer.asked
    assert scorer.calls[0].goal.final.startswith("Book a flight to Oslo")


def test_fixed_scorer_rejects_an_out_of_range_score_up_front() -> None:
    with pytest.raises(ValidationError):
        FixedScorer(3, scores={"m1": 9})


def test_function_scorer_decides_per_message_and_none_means_no_score() -> None:
    def rule(item: Any, goal: Any) -> Any:
        if "Option 3" in item.text:
            return 5, "the option the user liked"
        if "Option 4" in item.text:
            return None  # unscored: the memory falls back for it
        return RelevanceScore(id="ignored", score=2, reason="weak", source=ScoreSource.LLM, weight=0.5)

    _, built = _build(FunctionScorer(rule))
    option3 = built.record.messages[8]
    assert (option3.score, option3.reason, option3.decision) == (5, "the option the user liked", "kept")
    option4 = built.record.messages[10]
    assert option4.score_source == ScoreSource.FALLBACK
    assert built.record.messages[3].reason == "weak"
    assert any("no score for 1 message" in w for w in built.record.warnings)


def test_scripted_scorer_replies_in_order_and_an_exception_falls_back() -> None:
    scorer = ScriptedScorer([{"m3": 5}, RuntimeError("endpoint down")], then=2)
    memory, built = _build(scorer, rebuild=True)  # each build asks the scorer
    assert built.record.decision_for("m3").score == 5
    assert built.record.usage.fallbacks == len(scorer.calls[0].ids) - 1  # every id it left out
    memory.set_goal(subtask="compare the prices")
    with pytest.warns(RuntimeWarning, match="scorer scripted failed .RuntimeError: endpoint down"):
        second = memory.build_context()
    assert {d.score_source for d in second.record.messages if d.score is not None} <= {ScoreSource.FALLBACK}
    assert scorer.remaining == 0
    scorer.assert_done()
    memory.set_goal(subtask="pay")
    third = memory.build_context()
    assert {d.score for d in third.record.messages if d.score_source == ScoreSource.LLM} == {2}


def test_scripted_scorer_exhausted_without_then_fails_loudly_but_never_breaks_the_build() -> None:
    scorer = ScriptedScorer([{"m1": 5}, lambda items, goal: {i.id: 3 for i in items}])
    memory, _ = _build(scorer, rebuild=True)  # each build asks the scorer
    memory.set_goal(subtask="two")
    assert {d.score for d in memory.build_context().record.messages if d.score_source == ScoreSource.LLM} == {3}
    memory.set_goal(subtask="three")
    with pytest.warns(RuntimeWarning, match="ScriptExhaustedError: the script has 2 repl"):
        memory.build_context()
    with pytest.raises(AssertionError, match="1 scripted reply not used"):
        ScriptedScorer([{"m1": 5}]).assert_done()
    assert issubclass(ScriptExhaustedError, Exception)


async def test_fakes_are_async_scorers_too() -> None:
    scorer = FixedScorer(2, scores={"m5": 5})
    memory = RelevanceMemoryManager(max_input_tokens=700, keep_recent=2, scorer=scorer)
    memory.extend(_history())
    built = await memory.abuild_context()
    assert built.record.decision_for("m5").decision == "kept" and len(scorer.calls) == 1


def test_assert_valid_context_names_the_broken_invariant() -> None:
    memory, built = _build(FixedScorer(2))
    history = _history()
    broken = type(built)(messages=built.messages[1:], record=built.record)
    with pytest.raises(AssertionError, match=r"tokens, the record says|not first"):
        assert_valid_context(history, broken, memory.tokenizer)
    with pytest.raises(AssertionError, match="exceed the budget of 10"):
        assert_valid_context(history, built, memory.tokenizer, budget=10)

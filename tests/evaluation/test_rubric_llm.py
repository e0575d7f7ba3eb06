"""Rubric metrics through the LLM scorer, replayed from a cassette (issue 5 × issue 3).

The cassette ``tests/cassettes/test_rubric_llm/`` is synthetic: recorded with
``--record-mode=rewrite`` from the scripted transport below (see ``llm_fakes``); in CI it
replays with ``--record-mode=none`` and the script is unused.
"""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest
from llm_fakes import content, requested_ids, scripted_transport

from relevance_memory import LLMScorer, TaskGoal
from relevance_memory.evaluation import LabelledExample, LabelledMessage, LabelledSet, evaluate_rubric

GOLD_RELEVANT = {"a1", "b2"}


def labelled() -> LabelledSet:
    def example(eid: str, question: str, turns: list[tuple[str, str]], gold: dict[str, int]) -> LabelledExample:
        return LabelledExample(
            id=eid,
            goal=TaskGoal(final=question, subtask=question),
            messages=[LabelledMessage(id=i, role="user", content=text) for i, text in turns],
            gold=gold,
        )

    return LabelledSet(name="tiny", examples=[
        example("q1", "When did Caroline go to the LGBTQ support group?",
                [("a1", "I went to the LGBTQ support group on 7 May."), ("a2", "The weather was nice."), ("a3", "I like pizza.")],
                {"a1": 5, "a2": 1, "a3": 1}),
        example("q2", "What instrument does Melanie play?",
                [("b1", "We went camping."), ("b2", "I have played the violin for years."), ("b3", "Work was busy.")],
                {"b1": 1, "b2": 5, "b3": 1}),
    ])


def reply(request_json: dict[str, Any]) -> dict[str, Any]:
    """A scorer model that gets the gold right: relevant ids 5, the rest 1."""
    scores = [{"id": i, "reason": "matches" if i in GOLD_RELEVANT else "unrelated", "score": 5 if i in GOLD_RELEVANT else 1}
              for i in requested_ids(request_json)]
    return content(json.dumps(scores), prompt_tokens=200, completion_tokens=40)


@pytest.mark.vcr
def test_rubric_eval_with_the_llm_scorer_from_a_cassette(record_mode: str) -> None:
    transport = scripted_transport([reply] * 4) if record_mode != "none" else None
    scorer = LLMScorer(
        "synthetic-model", base_url="http://127.0.0.1:8765/v1", api_key="sk-test-not-a-real-key", mode="json",
        http_client=httpx2.Client(transport=transport),
    )
    report = evaluate_rubric(labelled(), scorer, repeats=2)
    assert (report.scorer, report.rubric_version) == ("llm", "score_v1")
    assert (report.examples, report.messages, report.relevant) == (2, 6, 2)
    assert report.auroc == 1.0 and report.precision_at_4 == 1.0 and report.recall_at_4 == 1.0
    assert report.histogram == {"relevant": [0, 0, 0, 0, 2], "other": [4, 0, 0, 0, 0]}
    assert report.agreement == 1.0
    assert (report.llm_calls, report.prompt_tokens, report.completion_tokens, report.fallbacks) == (4, 800, 160, 0)


def test_judge_metrics_leave_fallbacks_out() -> None:
    """A judge that answers only for the first example: the with-fallback metrics mix in
    offline scores; the judge's own metrics count only what it scored (issue 14, defect 7)."""

    def first_only(request_json: dict[str, Any]) -> dict[str, Any]:
        ids = requested_ids(request_json)
        if ids[0].startswith("a"):
            return reply(request_json)
        return content("I cannot help with that.")

    transport = scripted_transport([first_only] * 4)
    scorer = LLMScorer(
        "synthetic-model", base_url="http://127.0.0.1:8765/v1", api_key="sk-test", mode="json", max_retries=2,
        http_client=httpx2.Client(transport=transport),
    )
    report = evaluate_rubric(labelled(), scorer)
    assert report.messages == 6 and report.fallbacks == 3
    assert (report.judge.messages, report.judge.relevant, report.judged_share) == (3, 1, 0.5)
    assert report.judge.histogram == {"relevant": [0, 0, 0, 0, 1], "other": [2, 0, 0, 0, 0]}
    assert report.judge.auroc == 1.0 and report.judge.precision_at_4 == 1.0
    assert report.llm_calls == 4 and report.batches == 2 and report.reasks == 2
    assert report.parse_rate == 0.25

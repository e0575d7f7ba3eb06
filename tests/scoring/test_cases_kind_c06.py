"""Cases C06 and C07's kind (``shared/cases``): more reply shapes real models send, and more
ways a reply fails to decode (each asked again, C07).

C06's shapes (fenced, ``{"scores": [...]}``, prose with braces) parse; these did not, and
each cost a re-ask and then offline fallback scores for a reply that held the answer:

- a reasoning model's ``<think>`` block holding a draft list before the answer (the parser
  saw two different score lists: "ambiguous"), or a closing ``</think>`` whose opening the
  server cut;
- the array wrapped deeper (``{"result": {"scores": [...]}}``) or beside other values
  (``{"ratings": [...], "note": "…"}``);
- ids mapped to scores (``{"m1": 5, "m2": 1}``, also under ``scores``);
- the whole answer JSON-encoded once more as one string.

What must stay a failure still is one: a score 9 or "4" in a mapping is rejected as in a list
(re-asked, never clipped), a mapping with an id that was not requested is not taken, and
single quotes are a decode error (C07).
"""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest
from llm_fakes import content, scripted_transport

from relevance_memory import LLMScorer, ScoreItem, ScoreSource, TaskGoal
from relevance_memory.scoring._llm_reply import reply_model
from relevance_memory.scoring._llm_steps import CORRECTION

ENTRIES = [{"id": "m1", "reason": "constraint", "score": 5}, {"id": "m2", "reason": "chat", "score": 1}]
ARRAY = json.dumps(ENTRIES)
DRAFT = '[{"id": "m1", "reason": "first thought", "score": 3}, {"id": "m2", "reason": "x", "score": 2}]'

SHAPES = {
    "think_block_with_a_draft": f"<think>Draft: {DRAFT}. Hmm, m1 is a hard rule.</think>\n{ARRAY}",
    "thinking_tag": f"<thinking>m1 is {{important}}; {DRAFT}</thinking>```json\n{ARRAY}\n```",
    "think_opening_cut": f"m1 looks like a rule: {DRAFT}</think>\n\n{ARRAY}",
    "nested_wrap": json.dumps({"result": {"scores": ENTRIES}}),
    "wrap_beside_other_values": json.dumps({"ratings": ENTRIES, "note": "done", "count": 2}),
    "ids_to_scores": json.dumps({"m1": 5, "m2": 1}),
    "ids_to_scores_under_scores": json.dumps({"scores": {"m1": 5, "[m2]": 1}}),
    "json_in_a_string": json.dumps(ARRAY),
    "fence_then_prose": f"```json\n{ARRAY}\n```\nLet me know if you need anything else {{:}}",
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_reply_shapes_parse(shape: str) -> None:
    reply = reply_model(["m1", "m2"]).model_validate_json(SHAPES[shape])
    assert {s.id: s.score for s in reply.scores} == {"m1": 5, "m2": 1}
    assert reply.rejected == {}


@pytest.mark.parametrize(
    ("raw", "taken", "rejected"),
    [
        (json.dumps({"m1": 9, "m2": 3}), {"m2": 3}, {"m1": "score 9 is outside 1..5"}),
        (json.dumps({"m1": "4", "m2": 3}), {"m2": 3}, {"m1": 'score "4" is not an integer'}),
        (json.dumps({"scores": {"m1": True, "m2": 2}}), {"m2": 2}, {"m1": "score true is not an integer"}),
    ],
)
def test_a_mapping_is_judged_like_a_list(raw: str, taken: dict[str, int], rejected: dict[str, str]) -> None:
    reply = reply_model(["m1", "m2"]).model_validate_json(raw)
    assert {s.id: s.score for s in reply.scores} == taken
    assert reply.rejected == rejected


@pytest.mark.parametrize(
    "raw",
    [
        json.dumps({"m1": 5, "m7": 1}),  # an id that was not requested: not a score mapping
        json.dumps({"total": 3}),
        json.dumps({"a": ENTRIES, "b": [{"id": "m1", "reason": "r", "score": 2}]}),  # two lists: a guess
    ],
)
def test_what_is_not_an_answer_stays_a_failure(raw: str) -> None:
    with pytest.raises(ValueError):
        reply_model(["m1", "m2"]).model_validate_json(raw)


def test_single_quotes_stay_a_decode_error() -> None:
    """C07: single quotes are not JSON, inside or outside a think block."""
    with pytest.raises(json.JSONDecodeError):
        reply_model(["m1"]).model_validate_json("<think>ok</think>[{'id': 'm1', 'reason': 'r', 'score': 4}]")


GOAL = TaskGoal(final="Buy office chairs under 50,000 CNY from VENDOR-K only", subtask="compare offers", source="explicit")
ITEMS = [
    ScoreItem(id="m1", role="user", msg_type="user_instruction", source="user", text="Only VENDOR-K, under 50,000."),
    ScoreItem(id="m2", role="user", msg_type="user_chat", source="user", text="nice weather today"),
]


def _scorer(replies: list[str], sent: list[dict[str, Any]]) -> LLMScorer:
    def log(request: httpx2.Request) -> None:
        sent.append(json.loads(request.content or b"{}"))

    transport = scripted_transport([content(r) for r in replies])
    return LLMScorer("synthetic-model", base_url="http://llm.test/v1", api_key="sk-test-not-a-real-key", mode="json",
                     http_client=httpx2.Client(transport=transport, event_hooks={"request": [log]}),
                     sleep=lambda _s: None, max_retries=2)


@pytest.mark.parametrize("shape", ["think_block_with_a_draft", "nested_wrap", "ids_to_scores"])
def test_one_call_and_real_scores_through_the_scorer(shape: str) -> None:
    """End to end: one HTTP call, the model's scores with source=llm, no warning (they were
    fallback scores after 3 calls)."""
    sent: list[dict[str, Any]] = []
    result = _scorer([SHAPES[shape]], sent).score(GOAL, ITEMS)
    assert {s.id: (s.score, s.source) for s in result.scores} == {"m1": (5, ScoreSource.LLM), "m2": (1, ScoreSource.LLM)}
    assert len(sent) == 1 and result.usage.llm_calls == 1 and result.usage.fallbacks == 0
    assert result.warnings == []


# --------------------------------------------------------------------------- C07's kind
def _message(message: dict[str, Any]) -> dict[str, Any]:
    return {"status": 200, "json": {"id": "chatcmpl-test", "object": "chat.completion", "created": 0, "model": "synthetic-model",
                                    "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                                    "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}}


MALFORMED = {
    "single_quotes": content("[{'id': 'm1', 'reason': 'r', 'score': 4}]"),
    "python_literals": content('[{"id": "m1", "reason": None, "score": 4, "ok": True}]'),
    "unquoted_keys": content('[{id: "m1", reason: "r", score: 4}]'),
    "trailing_comma": content('{"scores": [{"id": "m1", "reason": "r", "score": 4,}]}'),
    "unterminated": content('[{"id": "m1", "reason": "r'),
    "empty": content(""),
    "null_content": _message({"role": "assistant", "content": None}),
    "refusal_field": _message({"role": "assistant", "content": None, "refusal": "I can't help with that."}),
}


@pytest.mark.parametrize("first", list(MALFORMED))
def test_c07_kind_every_unusable_reply_is_asked_again(first: str) -> None:
    """C07's must lines for other ways a reply fails to decode: m1 is 4 with source=llm after
    exactly 2 HTTP calls, the second asked with the fixed correction."""
    sent: list[dict[str, Any]] = []
    good = content('[{"id": "m1", "reason": "r", "score": 4}]')
    transport = scripted_transport([MALFORMED[first], good])
    scorer = LLMScorer("synthetic-model", base_url="http://llm.test/v1", api_key="sk-test-not-a-real-key", mode="json",
                       http_client=httpx2.Client(transport=transport, event_hooks={"request": [lambda r: sent.append(json.loads(r.content))]}),
                       sleep=lambda _s: None, max_retries=2)
    result = scorer.score(GOAL, ITEMS[:1])
    (m1,) = result.scores
    assert (m1.score, m1.source) == (4, ScoreSource.LLM)
    assert len(sent) == 2 and result.usage.llm_calls == 2
    assert [c.outcome for c in result.calls] == ["unparsed", "parsed"]
    assert "\n".join(m["content"] for m in sent[1]["messages"] if m["role"] == "user").startswith(CORRECTION)

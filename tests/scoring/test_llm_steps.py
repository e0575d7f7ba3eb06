"""The LLM scorer's reply schema, reply caps, batching, truncation, ambiguity, re-asks,
response-format detection and usage (issue 14 defects 1–8; issue 13 item 9).

Mock transports only (no cassette): every request body the SDK sent is kept and checked.
The genuine recordings of a real model are in ``test_llm_scorer_live.py``.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx2
import pytest
from llm_fakes import Step, content, requested_ids, scripted_transport, status, tool

from relevance_memory import ConfigError, LLMScorer, ScoreItem, ScoreSource, TaskGoal, TransportPolicy
from relevance_memory.scoring._llm_reply import (
    AmbiguousReplyError,
    ScoreReply,
    extract_json_reply,
    reply_model,
    reply_schema,
)
from relevance_memory.scoring._llm_steps import CORRECTION

GOAL = TaskGoal(final="Write the quarterly report in French", subtask="draft section 1", source="explicit")
ITEMS = [ScoreItem(id=f"m{i}", role="user", msg_type="user_chat", source="user", text=f"note {i} about the report")
         for i in range(1, 5)]


def scorer(script: list[Step], sent: list[dict[str, Any]], **kwargs: Any) -> LLMScorer:
    transport = scripted_transport(script, seen=sent)
    options: dict[str, Any] = {"base_url": "http://llm.test/v1", "api_key": "sk-test", "mode": "json",
                               "http_client": httpx2.Client(transport=transport),
                               "async_http_client": httpx2.AsyncClient(transport=transport),
                               "sleep": lambda s: None}
    options.update(kwargs)
    return LLMScorer("synthetic-model", **options)


def answer(score: int = 3) -> Step:
    def reply(body: dict[str, Any]) -> dict[str, Any]:
        return content(json.dumps({"scores": [{"id": i, "reason": "r", "score": score} for i in requested_ids(body)]}))
    return reply


# --------------------------------------------------------------------------- defect 1: schema
def test_reply_schema_is_enforceable_by_a_grammar() -> None:
    schema = reply_schema(["m1", "m2", "m1"])
    scores = schema["properties"]["scores"]
    entry = scores["items"]
    assert entry["properties"]["id"]["enum"] == ["m1", "m2"]
    assert entry["properties"]["score"] == {"type": "integer", "enum": [1, 2, 3, 4, 5],
                                            "description": "relevance 1 (unrelated) to 5 (decides the task)"}
    assert (scores["minItems"], scores["maxItems"]) == (2, 2)
    assert entry["required"] == ["id", "reason", "score"] and entry["additionalProperties"] is False
    assert "minimum" not in json.dumps(schema) and "maximum" not in json.dumps(schema)
    assert reply_model(["m1"]).model_json_schema()["properties"]["scores"]["maxItems"] == 1


def test_tools_mode_sends_the_batch_schema_as_the_tool() -> None:
    sent: list[dict[str, Any]] = []
    reply = tool({"scores": [{"id": i.id, "reason": "r", "score": 2} for i in ITEMS[:2]]})
    result = scorer([reply], sent, mode="tools").score(GOAL, ITEMS[:2])
    assert [s.source for s in result.scores] == [ScoreSource.LLM] * 2
    params = sent[0]["tools"][0]["function"]["parameters"]
    assert params["properties"]["scores"]["items"]["properties"]["id"]["enum"] == ["m1", "m2"]
    assert params["properties"]["scores"]["minItems"] == 2


def test_json_mode_sends_the_schema_in_response_format() -> None:
    sent: list[dict[str, Any]] = []
    scorer([answer()], sent, mode="json").score(GOAL, ITEMS[:2])
    fmt = sent[0]["response_format"]
    assert fmt["type"] == "json_object" and fmt["schema"]["properties"]["scores"]["maxItems"] == 2


# --------------------------------------------------------------------------- defect 2: reply cap
def test_max_tokens_is_bounded_by_the_batch_size() -> None:
    sent: list[dict[str, Any]] = []
    scorer([answer()] * 3, sent, batch_max_messages=2, max_tokens_per_message=50).score(GOAL, ITEMS[:3])
    assert [b["max_tokens"] for b in sent] == [24 + 2 * 50, 24 + 50]
    sent.clear()
    scorer([answer()], sent, max_tokens=100).score(GOAL, ITEMS[:3])
    assert sent[0]["max_tokens"] == 100


# --------------------------------------------------------------------------- defect 3: timeouts
def test_a_timed_out_request_is_retried_and_its_tokens_counted() -> None:
    sent: list[dict[str, Any]] = []
    script: list[Step] = [httpx2.ReadTimeout("timed out"), answer(4)]
    result = scorer(script, sent, timeout=600.0).score(GOAL, ITEMS[:2])
    assert [s.score for s in result.scores] == [4, 4]
    timeout_call, ok_call = result.calls
    assert (timeout_call.outcome, timeout_call.estimated) == ("timeout", True)
    assert timeout_call.prompt_tokens > 100 and ok_call.kind == "retry" and ok_call.prompt_tokens == 120
    assert result.usage.prompt_tokens == timeout_call.prompt_tokens + 120
    assert any("got no reply" in w for w in result.warnings)


def test_a_retry_budget_not_above_one_timeout_is_refused() -> None:
    assert TransportPolicy().budget_s(600.0) > 600.0
    with pytest.raises(ConfigError, match="never be retried"):
        LLMScorer("m", base_url="http://llm.test/v1", timeout=120.0, transport=TransportPolicy(max_total_s=60.0))


# --------------------------------------------------------------------------- defect 4: window and margin
def test_batches_fit_the_models_window_with_a_tokenizer_margin() -> None:
    items = [ScoreItem(id=f"m{i}", role="tool", msg_type="tool_result", source="x", text="word " * 150)
             for i in range(12)]
    wide = LLMScorer("local-model", base_url="http://llm.test/v1", batch_max_messages=50, batch_max_tokens=100_000)
    narrow = LLMScorer("local-model", base_url="http://llm.test/v1", batch_max_messages=50, batch_max_tokens=100_000,
                       context_length=2048)
    assert wide.plan.token_margin == 1.25
    assert LLMScorer("gpt-4o-mini", api_key="sk-test").plan.token_margin == 1.0
    assert len(wide.batches(GOAL, items)) == 1
    batches = narrow.plan.batches(GOAL, items)
    assert len(batches) > 1 and sum(len(b) for b, _, _ in batches) == 12
    for batch, _, counted in batches:
        assert counted * 1.25 + narrow.plan.reply_cap(len(batch)) <= 2048


# --------------------------------------------------------------------------- defect 5: cut at the cap
def test_a_reply_cut_at_the_cap_splits_the_batch() -> None:
    sent: list[dict[str, Any]] = []
    cap = 24 + 64 * 4
    cut = content('{"scores": [{"id": "m1", "reason": "the report must be in Fren', completion_tokens=cap)
    result = scorer([cut, answer(2), answer(5)], sent).score(GOAL, ITEMS)
    assert [requested_ids(b) for b in sent] == [["m1", "m2", "m3", "m4"], ["m1", "m2"], ["m3", "m4"]]
    assert [c.kind for c in result.calls] == ["ask", "split", "split"] and result.calls[0].outcome == "cut"
    assert [s.score for s in result.scores] == [2, 2, 5, 5]
    assert all(s.source == ScoreSource.LLM for s in result.scores)


def test_a_single_message_cut_off_falls_back_with_the_reason() -> None:
    sent: list[dict[str, Any]] = []
    cut = {"status": 200, "json": {**content('{"scores": [{"id": "m1", "reason": "')["json"]}}
    cut["json"]["choices"][0]["finish_reason"] = "length"
    result = scorer([cut], sent).score(GOAL, ITEMS[:1])
    assert result.scores[0].source == ScoreSource.FALLBACK
    assert result.scores[0].reason.startswith("fallback (reply cut off at max_tokens=88")


# --------------------------------------------------------------------------- defect 6 / issue 13 item 9
def test_an_ambiguous_reply_is_a_parse_failure_then_reasked() -> None:
    example = json.dumps({"scores": [{"id": "m1", "reason": "example", "score": 1}]})
    real = json.dumps({"scores": [{"id": "m1", "reason": "real", "score": 5}]})
    with pytest.raises(AmbiguousReplyError):
        extract_json_reply(f"For example {example}. My answer: {real}")
    assert extract_json_reply(f"{real}\n{real}") == json.loads(real)  # the same list twice is not ambiguous
    sent: list[dict[str, Any]] = []
    script: list[Step] = [content(f"For example {example}. My answer: {real}")] * 3
    result = scorer(script, sent, max_retries=2).score(GOAL, ITEMS[:1])
    (only,) = result.scores
    assert only.source == ScoreSource.FALLBACK
    assert only.reason.startswith("fallback (no valid reply after 3 attempt(s): ambiguous reply: 2 different")
    assert [c.outcome for c in result.calls] == ["unparsed"] * 3
    assert all(requested_ids(b) == ["m1"] for b in sent) and all(CORRECTION in json.dumps(b) for b in sent[1:])


def test_loose_entries_are_one_list_but_a_quoted_entry_beside_a_list_is_ambiguous() -> None:
    assert extract_json_reply('{"id": "m1", "score": 4}\n{"id": "m2", "score": 1}') == [
        {"id": "m1", "score": 4}, {"id": "m2", "score": 1}]
    with pytest.raises(AmbiguousReplyError):
        extract_json_reply('like {"id": "m1", "score": 3} -> [{"id": "m1", "score": 4}]')


def test_entries_are_judged_one_by_one() -> None:
    bound = reply_model(["m1", "m2", "m3", "m4", "m5"])
    reply = bound.from_value({"scores": [
        {"id": "m1", "reason": "r", "score": 4}, {"id": "[m2]", "reason": "r", "score": 9},
        {"id": "m3", "reason": "r", "score": "4"}, {"id": "m4", "reason": "r", "score": 2},
        {"id": "m4", "reason": "r", "score": 3}, {"id": "m9", "reason": "r", "score": 1},
        {"id": "m5", "reason": "r", "score": 1978699999999999}]})
    assert [(e.id, e.score) for e in reply.scores] == [("m1", 4)]
    assert reply.rejected == {"m2": "score 9 is outside 1..5", "m3": 'score "4" is not an integer',
                              "m4": "two different scores (2 and 3)", "m9": "not a requested id",
                              "m5": "score 1978699999999999 is outside 1..5"}
    assert isinstance(ScoreReply.from_value([{"id": "x", "reason": "", "score": 1}]), ScoreReply)


def test_reasks_carry_only_the_missing_ids_and_never_grow() -> None:
    sent: list[dict[str, Any]] = []
    first = content(json.dumps({"scores": [{"id": "m1", "reason": "r", "score": 5},
                                           {"id": "m2", "reason": "r", "score": 6}]}))
    result = scorer([first, answer(1)], sent, max_reasks=1).score(GOAL, ITEMS[:3])
    assert [s.score for s in result.scores] == [5, 1, 1]
    assert requested_ids(sent[1]) == ["m2", "m3"]
    user = next(m["content"] for m in sent[1]["messages"] if m["role"] == "user")
    assert user.startswith(CORRECTION + "\n\n") and "outside" not in user
    assert len(json.dumps(sent[1]["messages"])) < len(json.dumps(sent[0]["messages"])) + len(CORRECTION) + 10


def test_ids_still_rejected_after_the_reasks_say_why() -> None:
    sent: list[dict[str, Any]] = []
    bad = content(json.dumps({"scores": [{"id": "m1", "reason": "r", "score": 7}]}))
    result = scorer([bad, bad], sent, max_reasks=1).score(GOAL, ITEMS[:1])
    assert result.scores[0].reason.startswith("fallback (score 7 is outside 1..5 in 2 valid replies)")


# --------------------------------------------------------------------------- response_format detection
def test_response_format_steps_down_when_the_endpoint_rejects_it() -> None:
    sent: list[dict[str, Any]] = []
    script: list[Step] = [status(422, message="response_format.type: Input should be 'text' or 'json_object'"),
                          answer(4), answer(2)]
    sc = scorer(script, sent, mode="json_schema", batch_max_messages=2)
    result = sc.score(GOAL, ITEMS)
    assert [b["response_format"]["type"] for b in sent] == ["json_schema", "json_object", "json_object"]
    assert "schema" in sent[1]["response_format"] and sc.formats.current == "json_object_schema"
    assert [c.kind for c in result.calls] == ["ask", "format", "ask"]
    assert [s.score for s in result.scores] == [4, 4, 2, 2]


def test_a_server_error_naming_the_response_format_steps_down_without_retries() -> None:
    """llama-cpp-python's server answers an unknown response_format type with HTTP 500."""
    sent: list[dict[str, Any]] = []
    body = "1 validation error: ('body', 'response_format', 'type') Input should be 'text' or 'json_object'"
    result = scorer([status(500, message=body), answer(3)], sent, mode="json_schema").score(GOAL, ITEMS[:1])
    assert [b["response_format"]["type"] for b in sent] == ["json_schema", "json_object"]
    assert [(c.kind, c.status) for c in result.calls] == [("ask", 500), ("format", None)]
    assert result.scores[0].source == ScoreSource.LLM


def test_a_pinned_format_is_not_stepped_down() -> None:
    sent: list[dict[str, Any]] = []
    result = scorer([status(400, message="bad response_format")], sent, mode="json_schema",
                    response_format="json_schema").score(GOAL, ITEMS[:1])
    assert len(sent) == 1 and result.scores[0].source == ScoreSource.FALLBACK
    assert "HTTP 400" in result.warnings[0]
    with pytest.raises(ConfigError, match="unknown response_format"):
        LLMScorer("m", base_url="http://llm.test/v1", response_format="grammar")


# --------------------------------------------------------------------------- one implementation, two paths
def test_sync_and_async_take_the_same_steps() -> None:
    cap = 24 + 64 * 4
    cut = content('{"scores": [{"id": "m1", "reason": "cut', completion_tokens=cap)
    half = content(json.dumps({"scores": [{"id": "m1", "reason": "r", "score": 4}]}))

    def run(use_async: bool) -> tuple[list[tuple[str, int, str]], list[tuple[str, str]], list[list[str]]]:
        sent: list[dict[str, Any]] = []
        sc = scorer([cut, half, answer(2), answer(3)], sent)
        result = asyncio.run(sc.ascore(GOAL, ITEMS)) if use_async else sc.score(GOAL, ITEMS)
        return ([(s.id, s.score, s.source.value) for s in result.scores], [(c.kind, c.outcome) for c in result.calls],
                [requested_ids(b) for b in sent])

    assert run(False) == run(True)
    scores, calls, asked = run(False)
    assert asked == [["m1", "m2", "m3", "m4"], ["m1", "m2"], ["m3", "m4"], ["m2"]]
    assert calls == [("ask", "cut"), ("split", "parsed"), ("split", "parsed"), ("reask", "parsed")]
    assert scores == [("m1", 4, "llm"), ("m2", 3, "llm"), ("m3", 2, "llm"), ("m4", 2, "llm")]


# --------------------------------------------------------------------------- score_v2
def test_score_v2_is_versioned_in_the_record_and_the_cache_key() -> None:
    from relevance_memory import RelevanceMemoryManager
    from relevance_memory.scoring._prompts import available_prompts, load_prompt
    from relevance_memory.scoring._scorer import score_cache_key

    assert {"score_v1", "score_v2"} <= set(available_prompts())
    v2 = load_prompt("score_v2")
    text = v2.render_user(GOAL, ITEMS[:2])
    assert "<goal>\n" + GOAL.final in text and '<data id="m1">' in text
    assert text.endswith("Rate exactly these ids, each once: m1, m2")
    sent: list[dict[str, Any]] = []
    memory = RelevanceMemoryManager(scorer=scorer([answer(4)] * 4, sent, rubric_version="score_v2"),
                                    max_input_tokens=200, keep_recent=1)
    memory.add({"role": "user", "content": "Write the quarterly report in French."})
    for n in range(4):
        memory.add({"role": "assistant", "content": f"figure set {n} " + "x " * 40})
    memory.add({"role": "user", "content": "Now draft section 1."})
    record = memory.build_context().record
    assert record.rubric_version == "score_v2"
    assert sent and sent[0]["messages"][0]["content"].startswith(v2.system)
    keys = {score_cache_key(rubric_version=v, model="m", goal=GOAL, content_hash="h", role="user", msg_type="x")
            for v in ("score_v1", "score_v2")}
    assert len(keys) == 2

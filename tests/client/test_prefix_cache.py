"""The managed client is prefix-stable by default (issue 10, SPEC §3.1): consecutive requests
share their beginning, the provider's cached tokens land in the record, ``prompt_cache_key``
passes through untouched."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from relevance_memory import ManagedOpenAI, TiktokenCounter, check_context, load_transcript
from relevance_memory._cache_policy import CachePolicy
from relevance_memory.clients._session import provider_cached_tokens
from relevance_memory.pipeline._prefix import shared_prefix_tokens

try:  # openai>=3 talks through httpx2; older versions through httpx
    import httpx2 as httpx
except ImportError:  # pragma: no cover
    import httpx  # type: ignore[no-redef]

from pathlib import Path

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "django__django-15280.json"
COUNTER = TiktokenCounter()


class CachingEndpoint:
    """A mock OpenAI endpoint with a prompt cache: each reply reports as
    ``usage.prompt_tokens_details.cached_tokens`` the exact prefix it shares with the previous
    request, counted as OpenAI does (from 1,024 tokens, in steps of 128). With ``anthropic``,
    it reports ``usage.cache_read_input_tokens`` instead. Streams end with a usage chunk."""

    def __init__(self, replies: list[dict[str, Any]], *, anthropic: bool = False) -> None:
        self.replies = replies
        self.anthropic = anthropic
        self.bodies: list[dict[str, Any]] = []
        self.cached: list[int] = []

    def __call__(self, request: Any) -> Any:
        body = json.loads(request.content)
        assert check_context(body["messages"]) == []
        previous = self.bodies[-1]["messages"] if self.bodies else []
        prefix = shared_prefix_tokens(previous, body["messages"], count_message=COUNTER.count_message,
                                      count_text=COUNTER.count_text)
        cached = CachePolicy().cacheable(prefix)
        self.cached.append(cached)
        self.bodies.append(body)
        reply = self.replies[len(self.bodies) - 1]
        usage: dict[str, Any] = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
        if self.anthropic:
            usage["cache_read_input_tokens"] = cached
        else:
            usage["prompt_tokens_details"] = {"cached_tokens": cached}
        if body.get("stream"):
            chunks = [
                {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
                 "choices": [{"index": 0, "delta": {k: v for k, v in reply.items() if k != "tool_calls"} | (
                     {"tool_calls": [{**c, "index": n} for n, c in enumerate(reply["tool_calls"])]}
                     if reply.get("tool_calls") else {}), "finish_reason": None}]},
                {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
                 "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
                {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m", "choices": [],
                 "usage": usage},
            ]
            text = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
            return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=text.encode())
        return httpx.Response(200, json={
            "id": "c", "object": "chat.completion", "created": 0, "model": "m", "usage": usage,
            "choices": [{"index": 0, "finish_reason": "stop", "message": reply}],
        })


def _agent_run() -> tuple[list[dict[str, Any]], list[tuple[dict[str, Any], list[dict[str, Any]]]]]:
    messages = load_transcript(FIXTURE).messages
    first = next(i for i, m in enumerate(messages) if m["role"] == "assistant")
    steps: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
    for message in messages[first:]:
        if message["role"] == "assistant":
            steps.append((message, []))
        else:
            steps[-1][1].append(message)
    return messages[:first], steps


def _replay(endpoint: CachingEndpoint, steps: list[Any], opening: list[dict[str, Any]], *, stream: bool = False,
            **kwargs: Any) -> ManagedOpenAI:
    http = httpx.Client(transport=httpx.MockTransport(endpoint))
    client = ManagedOpenAI(openai.OpenAI(api_key="sk-test", base_url="https://api.openai.com/v1", http_client=http,
                                         max_retries=0), max_input_tokens=8000, keep_recent=2)
    history = list(opening)
    for reply, after in steps:
        if stream:
            out = client.chat.completions.create(model="gpt-4o", messages=history, stream=True,
                                                 stream_options={"include_usage": True}, **kwargs)
            for _ in out:
                pass
        else:
            client.chat.completions.create(model="gpt-4o", messages=history, **kwargs)
        history += [reply, *after]
        record = client.last_record
        assert record is not None and record.provider_cached_tokens == endpoint.cached[-1]
        assert record.provider_cached_tokens == record.cacheable_tokens  # our estimate is the provider's count
    return client


def test_consecutive_requests_extend_each_other_and_the_cache_hits() -> None:
    opening, steps = _agent_run()
    steps = steps[:30]
    endpoint = CachingEndpoint([r for r, _ in steps])
    client = _replay(endpoint, steps, opening, prompt_cache_key="run-15280")
    assert client.last_record is not None
    assert all(body["prompt_cache_key"] == "run-15280" for body in endpoint.bodies)  # passed through untouched
    bodies = [b["messages"] for b in endpoint.bodies]
    appended = [n for n in range(1, len(bodies)) if bodies[n][: len(bodies[n - 1])] == bodies[n - 1]]
    assert len(appended) >= 25  # almost every request is the previous one plus the new messages
    assert sum(endpoint.cached) > 0.8 * sum(COUNTER.count_message(m) for b in bodies for m in b)
    # the history outgrew the 8k budget: some requests were compactions, and they were rare
    sent = sum(COUNTER.count_message(m) for m in bodies[-1])
    assert sent <= 8000 and len(bodies) - 1 - len(appended) >= 1


def test_stream_usage_and_anthropic_style_cached_tokens_reach_the_record() -> None:
    opening, steps = _agent_run()
    steps = steps[:12]
    _replay(CachingEndpoint([r for r, _ in steps], anthropic=True), steps, opening)
    endpoint = CachingEndpoint([r for r, _ in steps])
    _replay(endpoint, steps, opening, stream=True)
    assert max(endpoint.cached) > 0


@pytest.mark.parametrize(
    ("usage", "cached"),
    [
        (None, None),
        ({"prompt_tokens": 5}, None),
        ({"prompt_tokens_details": {"cached_tokens": 1152}}, 1152),
        ({"prompt_tokens_details": None, "cache_read_input_tokens": 2048}, 2048),
        ({"prompt_cache_hit_tokens": 640}, 640),
    ],
)
def test_provider_cached_tokens(usage: Any, cached: int | None) -> None:
    assert provider_cached_tokens(usage) == cached

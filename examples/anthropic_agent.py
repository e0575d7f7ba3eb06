"""Replay a real SWE-bench agent run through the managed Anthropic client, step by step.

The agent loop is the usual Anthropic one — ``messages.create`` with the whole history,
append the reply, run its ``tool_use`` blocks, append a user turn of ``tool_result``
blocks, repeat — wrapped in one line::

    client = manage(anthropic.Anthropic(...), max_input_tokens=budget)

The model is **scripted**: an ``httpx`` mock transport (:class:`ScriptedClaude`) answers
each ``/v1/messages`` request with the run's next assistant turn (its tool_use blocks
under the recorded ids) and the loop appends the recorded tool results, so the history
grows exactly as in the run (the OpenAI-format transcript in ``fixtures/`` converted to
Anthropic blocks by :func:`anthropic_run`). The endpoint checks every request as the API
would (:func:`check_anthropic_context`: alternation, tool_result right after its tool_use,
ids matching, at most 4 breakpoints) and simulates Anthropic's prompt cache from the
request's ``cache_control`` breakpoints (:class:`PromptCache`), so ``usage`` reports
``cache_read_input_tokens`` / ``cache_creation_input_tokens`` as a cache would.

Per step it prints the full history's size against the request actually sent (tokens as
:func:`anthropic_request_tokens` counts them), how the context was built (``appended``,
``compacted``, ``full_rebuild``; SPEC §3.1), where the breakpoints went and the cache's
read / write tokens; at the end the largest request against the budget::

    python examples/anthropic_agent.py                                # django run, 6k budget
    python examples/anthropic_agent.py fixtures/sympy__sympy-20590.json --budget 4000 --stream
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic

from relevance_memory import (
    TiktokenCounter,
    anthropic_request_tokens,
    check_anthropic_context,
    load_transcript,
    manage,
    tools_tokens,
)
from relevance_memory.clients._anthropic_messages import MAX_CACHE_BREAKPOINTS, _items

try:  # anthropic>=2 talks through httpx2; older versions through httpx
    import httpx2 as httpx
except ImportError:  # pragma: no cover - depends on the installed anthropic
    import httpx  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TRANSCRIPT = ROOT / "fixtures" / "django__django-15280.json"
MODEL = "claude-sonnet-4-5"


# --------------------------------------------------------------------------- the recorded run
def anthropic_run(path: Path) -> tuple[str, list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """An OpenAI-format transcript as an Anthropic run: ``(system, tools, first_user, steps)``.

    ``steps[k]`` is ``{"assistant": content blocks, "user": the next user turn or None}``:
    the assistant's text and tool_use blocks, then one user turn with its tool_result blocks
    (and any user message that followed them, as text blocks) — strictly alternating turns.
    """
    messages = load_transcript(path).messages
    raw_tools = json.loads(path.read_text(encoding="utf-8")).get("tools") or []
    tools = [{"name": t["function"]["name"], "description": t["function"].get("description", ""),
              "input_schema": t["function"]["parameters"]} for t in raw_tools]
    system = "\n".join(m["content"] for m in messages if m["role"] == "system")
    turns: list[dict[str, Any]] = []
    for message in messages:
        if message["role"] == "system":
            continue
        if message["role"] == "assistant":
            blocks: list[dict[str, Any]] = [{"type": "text", "text": message["content"]}] if message.get("content") else []
            blocks += [{"type": "tool_use", "id": c["id"], "name": c["function"]["name"],
                        "input": json.loads(c["function"]["arguments"] or "{}")} for c in message.get("tool_calls") or ()]
            turns.append({"role": "assistant", "content": blocks})
            continue
        block = ({"type": "tool_result", "tool_use_id": message["tool_call_id"], "content": message["content"]}
                 if message["role"] == "tool" else {"type": "text", "text": message["content"]})
        if turns and turns[-1]["role"] == "user":
            turns[-1]["content"].append(block)
        else:
            turns.append({"role": "user", "content": [block]})
    first, rest = turns[0], turns[1:]
    steps = [{"assistant": rest[i]["content"], "user": rest[i + 1] if i + 1 < len(rest) else None}
             for i in range(0, len(rest), 2)]
    return system, tools, [first], steps


# --------------------------------------------------------------------------- the endpoint
class PromptCache:
    """Anthropic's prompt cache, simulated from a request's ``cache_control`` breakpoints.

    A breakpoint writes the prefix up to its block (when it reaches ``min_tokens``); a later
    request reads the longest cached prefix found at one of its breakpoints or up to 20
    blocks before one (Anthropic's prompt-caching guide). Tokens are counted with ``counter``.
    """

    LOOKBACK = 20

    def __init__(self, counter: TiktokenCounter, min_tokens: int = 1024) -> None:
        self.counter = counter
        self.min_tokens = min_tokens
        self.entries: set[str] = set()

    def _block_tokens(self, where: str, block: Any) -> int:
        if where == "tools":
            return tools_tokens(self.counter, [block])
        empty = self.counter.count_message({"role": "user", "content": ""})
        return self.counter.count_message({"role": "user", "content": [block]}) - empty

    def usage(self, body: dict[str, Any]) -> dict[str, int]:
        system, messages, tools = body.get("system"), body["messages"], body.get("tools") or []
        items = _items(system, messages, tools)
        raw = list(tools) + ([{"type": "text", "text": system}] if isinstance(system, str) else list(system or []))
        for message in messages:
            content = message["content"]
            raw += [{"type": "text", "text": content}] if isinstance(content, str) else content
        sizes = [self._block_tokens(i.where, b) for i, b in zip(items, raw, strict=True)]
        ends, total = [], 0
        for size in sizes:
            total += size
            ends.append(total)
        marks = [n for n, block in enumerate(raw) if isinstance(block, dict) and block.get("cache_control")]
        if body.get("cache_control") and items:
            marks.append(max(n for n, i in enumerate(items) if i.cacheable))
        keys = [hashlib.sha256("\x1f".join(i.key for i in items[: n + 1]).encode()).hexdigest() for n in range(len(items))]
        read = 0
        for mark in marks:
            for n in range(mark, max(-1, mark - self.LOOKBACK - 1), -1):
                if keys[n] in self.entries:
                    read = max(read, ends[n])
                    break
        written = 0
        for mark in marks:
            if ends[mark] >= self.min_tokens:
                self.entries.add(keys[mark])
                written = max(written, ends[mark])
        request = anthropic_request_tokens(self.counter, system=system, messages=messages, tools=tools or None)
        created = max(0, written - read)
        return {"input_tokens": max(0, request - read - created), "output_tokens": 1,
                "cache_read_input_tokens": read, "cache_creation_input_tokens": created}


class ScriptedClaude:
    """An Anthropic Messages endpoint that replays recorded assistant turns.

    Used as ``httpx.MockTransport(ScriptedClaude(turns))``. Each POST to ``/v1/messages``
    returns the next turn as a ``message`` (or as server-sent events when the request asks
    for ``stream``), with ``usage`` from :class:`PromptCache`. Every request body is kept in
    ``requests`` and the usage it reported in ``usages``.

    Raises:
        AssertionError: more requests than turns, or a request the API would reject.
    """

    def __init__(self, turns: list[list[dict[str, Any]]], model: str = MODEL) -> None:
        self.turns = turns
        self.model = model
        self.requests: list[dict[str, Any]] = []
        self.usages: list[dict[str, int]] = []
        self.cache = PromptCache(TiktokenCounter())

    def __call__(self, request: Any) -> Any:
        body = json.loads(request.content)
        assert request.url.path.endswith("/v1/messages"), request.url
        assert len(self.requests) < len(self.turns), "the scripted model ran out of turns"
        problems = check_anthropic_context(body["messages"], system=body.get("system"), tools=body.get("tools"),
                                           automatic_cache=bool(body.get("cache_control")))
        assert not problems, problems
        n = len(self.requests)
        self.requests.append(body)
        content = self.turns[n]
        stop = "tool_use" if any(b["type"] == "tool_use" for b in content) else "end_turn"
        usage = self.cache.usage(body)
        self.usages.append(usage)
        if body.get("stream"):
            return httpx.Response(200, headers={"content-type": "text/event-stream"},
                                  content=b"".join(self._events(n, content, stop, usage)))
        return httpx.Response(200, json={
            "id": f"msg_replay_{n}", "type": "message", "role": "assistant", "model": self.model,
            "content": content, "stop_reason": stop, "stop_sequence": None, "usage": usage,
        })

    def _events(self, n: int, content: list[dict[str, Any]], stop: str, usage: dict[str, int]) -> Iterator[bytes]:
        def event(kind: str, data: dict[str, Any]) -> bytes:
            return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()

        start_usage = {**usage, "output_tokens": 0}
        yield event("message_start", {"message": {
            "id": f"msg_replay_{n}", "type": "message", "role": "assistant", "model": self.model, "content": [],
            "stop_reason": None, "stop_sequence": None, "usage": start_usage}})
        for index, block in enumerate(content):
            if block["type"] == "text":
                yield event("content_block_start", {"index": index, "content_block": {"type": "text", "text": ""}})
                for at in range(0, len(block["text"]), 40):  # text in pieces, as a real stream sends it
                    yield event("content_block_delta", {"index": index, "delta": {
                        "type": "text_delta", "text": block["text"][at : at + 40]}})
            else:
                yield event("content_block_start", {"index": index, "content_block": {**block, "input": {}}})
                arguments = json.dumps(block["input"])
                for at in range(0, len(arguments), 16):
                    yield event("content_block_delta", {"index": index, "delta": {
                        "type": "input_json_delta", "partial_json": arguments[at : at + 16]}})
            yield event("content_block_stop", {"index": index})
        yield event("message_delta", {"delta": {"stop_reason": stop, "stop_sequence": None},
                                      "usage": {"output_tokens": usage["output_tokens"]}})
        yield event("message_stop", {})


# --------------------------------------------------------------------------- the loop
def _reply(client: Any, stream: bool, **request: Any) -> Any:
    if not stream:
        return client.messages.create(**request)
    with client.messages.stream(**request) as events:
        for _ in events.text_stream:
            pass
        return events.get_final_message()


def plain(turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``turns`` with the SDK's block objects (a reply's ``content``) as dicts, for counting."""
    return [{"role": t["role"], "content": t["content"] if isinstance(t["content"], str) else
             [b.model_dump(exclude_none=True) if hasattr(b, "model_dump") else b for b in t["content"]]} for t in turns]


def run(path: Path, budget: int, steps: int | None = None, *, stream: bool = False, quiet: bool = False) -> dict[str, Any]:
    """Replay ``path`` through ``manage(anthropic.Anthropic(...))`` at ``budget`` tokens.

    Returns ``{"requests", "usages", "history_tokens", "records", "budget", "largest", "client"}``:
    the bodies the endpoint received and the usage it reported, the full history's size at
    each call, the decision records, the budget, the largest request sent (tokens) and the
    managed client.
    """
    system, tools, history, recorded = anthropic_run(path)
    recorded = recorded[:steps] if steps else recorded
    model = ScriptedClaude([step["assistant"] for step in recorded])
    http = httpx.Client(transport=httpx.MockTransport(model))
    client = manage(anthropic.Anthropic(api_key="test", http_client=http, max_retries=0),
                    max_input_tokens=budget, model=MODEL)
    counter = TiktokenCounter()
    sizes, records = [], []
    if not quiet:
        print(f"{'step':>4} {'history':>8} {'sent':>6} {'mode':<12} {'read':>6} {'write':>6}  breakpoints")
    for k, step in enumerate(recorded):
        sizes.append(anthropic_request_tokens(counter, system=system, messages=plain(history), tools=tools))
        reply = _reply(client, stream, model=MODEL, system=system, messages=history, tools=tools, max_tokens=1024)
        record = client.last_record
        assert record is not None
        records.append(record)
        sent = model.requests[-1]
        if not quiet:
            size = anthropic_request_tokens(counter, system=sent.get("system"), messages=sent["messages"], tools=tools)
            marks = ",".join(b.reason for b in client.last_breakpoints)
            print(f"{k:>4} {sizes[-1]:>8} {size:>6} {record.mode:<12} {record.provider_cached_tokens or 0:>6} "
                  f"{record.provider_cache_creation_tokens or 0:>6}  {marks}")
        history = [*history, {"role": "assistant", "content": reply.content}]
        if step["user"] is None:
            break
        history.append(step["user"])
    largest = max(anthropic_request_tokens(counter, system=r.get("system"), messages=r["messages"], tools=tools)
                  for r in model.requests)
    if not quiet:
        read = sum(r.provider_cached_tokens or 0 for r in records)
        sent_total = sum(anthropic_request_tokens(counter, system=r.get("system"), messages=r["messages"], tools=tools)
                         for r in model.requests)
        print(f"TOTAL {len(model.requests)} requests; largest {largest} tokens for a budget of {budget} "
              f"(full history at the end: {sizes[-1]}); cache read {read} of {sent_total} tokens sent "
              f"({read / max(1, sent_total):.0%}); at most {MAX_CACHE_BREAKPOINTS} breakpoints a request")
    return {"requests": model.requests, "usages": model.usages, "history_tokens": sizes, "records": records,
            "budget": budget, "largest": largest, "client": client}


async def arun(path: Path, budget: int, steps: int) -> list[dict[str, Any]]:
    """The same loop on ``anthropic.AsyncAnthropic`` (no printing); returns the request bodies."""
    system, tools, history, recorded = anthropic_run(path)
    model = ScriptedClaude([step["assistant"] for step in recorded[:steps]])
    http = httpx.AsyncClient(transport=httpx.MockTransport(model))
    client = manage(anthropic.AsyncAnthropic(api_key="test", http_client=http, max_retries=0),
                    max_input_tokens=budget, model=MODEL)
    for step in recorded[:steps]:
        reply = await client.messages.create(model=MODEL, system=system, messages=history, tools=tools, max_tokens=1024)
        history = [*history, {"role": "assistant", "content": reply.content}]
        if step["user"] is None:
            break
        history.append(step["user"])
    return model.requests


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("transcript", nargs="?", type=Path, default=DEFAULT_TRANSCRIPT)
    parser.add_argument("--budget", type=int, default=6000, help="max_input_tokens (default 6000)")
    parser.add_argument("--steps", type=int, default=None, help="stop after this many model calls")
    parser.add_argument("--stream", action="store_true", help="use messages.stream instead of messages.create")
    parser.add_argument("--async", dest="use_async", action="store_true", help="run on AsyncAnthropic (quiet)")
    args = parser.parse_args(argv)
    if args.use_async:
        requests = asyncio.run(arun(args.transcript, args.budget, args.steps or 10**6))
        print(f"{len(requests)} async requests, all valid Anthropic requests")
        return 0
    run(args.transcript, args.budget, args.steps, stream=args.stream)
    return 0


if __name__ == "__main__":
    sys.exit(main())

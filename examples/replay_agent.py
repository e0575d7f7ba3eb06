"""Replay a real SWE-bench agent run through the managed OpenAI client, step by step.

The agent loop is the usual one — call the model with the whole history, run the tool
calls, append the results, repeat — wrapped in one line::

    client = manage(openai.OpenAI(...), max_input_tokens=budget)

Without an API key the model is **scripted**: an ``httpx`` mock transport answers each
``chat.completions`` request with the run's next assistant message (tool calls
included), so the history grows exactly as it did in the recorded run. When an endpoint
is configured — ``OPENAI_API_KEY`` set, and ``OPENAI_BASE_URL`` for a non-OpenAI server —
the same loop talks to it (``--scripted`` forces the scripted model; ``--model`` picks
the model, default ``$OPENAI_MODEL`` or ``gpt-4o-mini``; ``--steps`` defaults to 10 there
to bound the cost). The tool results are still replayed from the transcript (step k's
recorded output answers the model's step-k tool calls, under the model's own call ids),
and the loop stops when the model answers without a tool call.

Per step it prints the history size vs the built-context size (messages, tokens), how the
context was built (``appended`` to the previous request, ``compacted`` or ``full rebuild``;
SPEC §3.1), the tokens a provider serves from its prompt cache (the endpoint's own
``usage.prompt_tokens_details.cached_tokens`` when it reports them — the scripted model
reports what OpenAI's rule gives: the exact prefix shared with the previous request, from
1,024 tokens in steps of 128 — else relevance-memory's estimate), the reusable-prefix
share, and the running cost against sending the full history every call, at cached-price
ratios 0.1 and 0.5 (cost units = uncached + p × cached); at the end a ``TOTAL`` line::

    python examples/replay_agent.py --scripted                       # django run, 8k budget
    python examples/replay_agent.py fixtures/sympy__sympy-20590.json --budget 6000 --stream --scripted
    OPENAI_API_KEY=... python examples/replay_agent.py --model gpt-4o-mini --steps 10
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai

from relevance_memory import BuiltContext, TiktokenCounter, check_context, load_transcript, manage
from relevance_memory._cache_policy import CachePolicy
from relevance_memory._tokenizer import REPLY_PRIMING_TOKENS
from relevance_memory.pipeline._prefix import CacheMeter, shared_prefix_tokens

try:  # openai>=3 talks through httpx2; older versions through httpx
    import httpx2 as httpx
except ImportError:  # pragma: no cover - depends on the installed openai
    import httpx  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TRANSCRIPT = ROOT / "fixtures" / "django__django-15280.json"


def steps_of(messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[tuple[dict[str, Any], list[dict[str, Any]]]]]:
    """Split a transcript into its opening (system + first user) and the assistant steps.

    Returns ``(opening, steps)``; each step is ``(assistant message, the messages that
    follow it up to the next assistant message)`` — its tool results, or a user turn.
    """
    first = next(i for i, m in enumerate(messages) if m["role"] == "assistant")
    opening, rest = messages[:first], messages[first:]
    steps: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
    for message in rest:
        if message["role"] == "assistant":
            steps.append((message, []))
        else:
            steps[-1][1].append(message)
    return opening, steps


class ScriptedModel:
    """An OpenAI-compatible chat endpoint that replays recorded assistant messages.

    Used as ``httpx.MockTransport(ScriptedModel(replies))``. Each POST to
    ``/chat/completions`` returns the next reply as a ``chat.completion`` (or as
    ``chat.completion.chunk`` server-sent events when the request asks for
    ``stream``). Every request body is kept in ``requests`` (parsed JSON).

    Raises:
        AssertionError: more requests than replies, or a request the API would reject.
    """

    def __init__(self, replies: list[dict[str, Any]], model: str = "scripted-replay") -> None:
        self.replies = replies
        self.model = model
        self.requests: list[dict[str, Any]] = []
        self._counter = TiktokenCounter()

    def _usage(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        """``usage`` as OpenAI reports it, with a prompt cache: the exact prefix shared with the
        previous request counts as cached from 1,024 tokens on, in steps of 128."""
        previous = self.requests[-2]["messages"] if len(self.requests) > 1 else []
        counter = self._counter
        prompt = REPLY_PRIMING_TOKENS + sum(counter.count_message(m) for m in messages)
        prefix = shared_prefix_tokens(previous, messages, count_message=counter.count_message,
                                      count_text=counter.count_text)
        return {"prompt_tokens": prompt, "completion_tokens": 1, "total_tokens": prompt + 1,
                "prompt_tokens_details": {"cached_tokens": CachePolicy().cacheable(prefix)}}

    def __call__(self, request: Any) -> Any:
        body = json.loads(request.content)
        assert request.url.path.endswith("/chat/completions"), request.url
        assert len(self.requests) < len(self.replies), "the scripted model ran out of replies"
        problems = check_context(body["messages"])
        assert not problems, problems
        n = len(self.requests)
        self.requests.append(body)
        reply = {k: v for k, v in self.replies[n].items() if k in ("role", "content", "tool_calls")}
        finish = "tool_calls" if reply.get("tool_calls") else "stop"
        usage = self._usage(body["messages"])
        if body.get("stream"):
            return httpx.Response(
                200, headers={"content-type": "text/event-stream"},
                content=b"".join(self._events(n, reply, finish, usage if body.get("stream_options") else None)),
            )
        return httpx.Response(
            200,
            json={
                "id": f"chatcmpl-replay-{n}",
                "object": "chat.completion",
                "created": 0,
                "model": self.model,
                "choices": [{"index": 0, "finish_reason": finish, "message": reply, "logprobs": None}],
                "usage": usage,
            },
        )

    def _events(self, n: int, reply: dict[str, Any], finish: str, usage: dict[str, Any] | None) -> Iterator[bytes]:
        def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
            data = {
                "id": f"chatcmpl-replay-{n}",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": self.model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
            }
            return f"data: {json.dumps(data)}\n\n".encode()

        yield chunk({"role": "assistant", "content": ""})
        content = reply.get("content") or ""
        for start in range(0, len(content), 40):  # content in pieces, as a real stream does
            yield chunk({"content": content[start : start + 40]})
        for index, call in enumerate(reply.get("tool_calls") or ()):
            arguments = call["function"]["arguments"]
            head = {"index": index, "id": call["id"], "type": "function",
                    "function": {"name": call["function"]["name"], "arguments": arguments[:10]}}
            yield chunk({"tool_calls": [head]})
            if arguments[10:]:
                yield chunk({"tool_calls": [{"index": index, "function": {"arguments": arguments[10:]}}]})
        yield chunk({}, finish)
        if usage is not None:  # stream_options={"include_usage": True}: a last chunk with no choices
            data = {"id": f"chatcmpl-replay-{n}", "object": "chat.completion.chunk", "created": 0,
                    "model": self.model, "choices": [], "usage": usage}
            yield f"data: {json.dumps(data)}\n\n".encode()
        yield b"data: [DONE]\n\n"


def scripted_client(replies: list[dict[str, Any]]) -> tuple[openai.OpenAI, ScriptedModel]:
    """An ``openai.OpenAI`` whose HTTP transport is a :class:`ScriptedModel` (no network, no key)."""
    model = ScriptedModel(replies)
    http = httpx.Client(transport=httpx.MockTransport(model))
    client = openai.OpenAI(api_key="sk-scripted", base_url="https://scripted.invalid/v1", http_client=http)
    return client, model


def _reply_dict(message: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": message.content, **(
        {"tool_calls": [{"id": c.id, "type": "function",
                         "function": {"name": c.function.name, "arguments": c.function.arguments}}
                        for c in message.tool_calls]} if message.tool_calls else {})}


def _stream_reply(stream: Any) -> dict[str, Any]:
    """Consume a chat stream and rebuild the assistant message (what an agent loop does)."""
    content: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    for chunk in stream:
        for choice in chunk.choices:
            delta = choice.delta
            content.append(delta.content or "")
            for call in delta.tool_calls or ():
                slot = calls.setdefault(call.index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}})
                slot["id"] = call.id or slot["id"]
                if call.function is not None:
                    slot["function"]["name"] += call.function.name or ""
                    slot["function"]["arguments"] += call.function.arguments or ""
    reply: dict[str, Any] = {"role": "assistant", "content": "".join(content) or None}
    if calls:
        reply["tool_calls"] = [calls[i] for i in sorted(calls)]
    return reply


def run(
    transcript: Path = DEFAULT_TRANSCRIPT,
    *,
    budget: int = 8000,
    keep_recent: int = 4,
    steps: int | None = None,
    stream: bool = False,
    real: bool = False,
    model: str | None = None,
    out: Any = None,
) -> dict[str, Any]:
    """Run the replay; print per step and a TOTAL line to ``out`` (default stdout).

    Returns the totals: ``calls``, ``history_tokens`` and ``sent_tokens`` summed over
    the calls (tokens), ``saved`` (share of tokens not sent, 0..1), ``final_history``
    (messages), ``max_sent`` (the largest context sent, tokens), ``budget``,
    ``cached_tokens`` (served from the prompt cache, tokens), ``cached_share`` (0..1),
    ``cost_ratio_0.1`` / ``cost_ratio_0.5`` (cost against sending the full history every
    call at those cached-price ratios) and ``modes`` (builds per mode).
    """
    out = out or sys.stdout
    run_ = load_transcript(transcript)
    tools = json.loads(Path(transcript).read_text(encoding="utf-8")).get("tools") or None
    opening, recorded = steps_of(run_.messages)
    if steps is not None:
        recorded = recorded[:steps]
    if real:
        base = openai.OpenAI()  # OPENAI_API_KEY / OPENAI_BASE_URL from the environment
        model_name = model or os.environ.get("OPENAI_MODEL", "gpt-4o-mini")
    else:
        base, _ = scripted_client([reply for reply, _ in recorded])
        model_name = model or "gpt-4o"
    builds: list[BuiltContext] = []
    client = manage(base, max_input_tokens=budget, keep_recent=keep_recent, model=model_name, on_build=builds.append)

    history: list[Any] = list(opening)
    totals: dict[str, Any] = {"calls": 0, "history_tokens": 0, "sent_tokens": 0, "max_sent": 0, "budget": budget}
    meter = CacheMeter()
    policy = CachePolicy()
    modes = {"appended": 0, "compacted": 0, "full_rebuild": 0}
    previous_history: int | None = None
    print(f"replaying {Path(transcript).name}: {len(recorded)} model calls, budget {budget} tokens, "
          f"keep_recent {keep_recent}, {'real endpoint ' + model_name if real else 'scripted model'}", file=out)
    print(f"{'step':>4} {'history msgs':>12} {'tokens':>8} {'sent msgs':>9} {'tokens':>7} {'saved so far':>12} "
          f"{'mode':<12} {'cached':>7} {'prefix':>6} {'cost vs full @0.1':>17} {'@0.5':>6}", file=out)
    started = time.perf_counter()
    for k, (_, recorded_after) in enumerate(recorded):
        kwargs: dict[str, Any] = {"model": model_name, "messages": history, "temperature": 0}
        if tools:
            kwargs["tools"] = tools
        if stream:
            reply = _stream_reply(client.chat.completions.create(
                stream=True, stream_options={"include_usage": True}, **kwargs))
        else:
            reply = _reply_dict(client.chat.completions.create(**kwargs).choices[0].message)
        record = builds[-1].record
        totals["calls"] += 1
        totals["history_tokens"] += record.tokens_before
        totals["sent_tokens"] += record.tokens_after
        totals["max_sent"] = max(totals["max_sent"], record.tokens_after)
        saved = 1 - totals["sent_tokens"] / totals["history_tokens"]
        # the provider's own count when it reports one, else the estimate from the exact shared prefix
        cached = record.provider_cached_tokens if record.provider_cached_tokens is not None else record.cacheable_tokens
        cached = min(cached, record.tokens_after)
        full_cached = policy.cacheable(previous_history - REPLY_PRIMING_TOKENS) if previous_history is not None else 0
        meter.add(record.tokens_after, cached, record.tokens_before, full_cached)
        previous_history = record.tokens_before
        modes[record.mode] += 1
        share = cached / record.tokens_after if record.tokens_after else 0.0
        print(f"{k + 1:>4} {record.messages_before:>12} {record.tokens_before:>8} {record.messages_after:>9} "
              f"{record.tokens_after:>7} {saved:>11.1%} {record.mode.replace('_', ' '):<12} {cached:>7} {share:>6.0%} "
              f"{meter.ratio(0.1):>16.2f}× {meter.ratio(0.5):>5.2f}×", file=out)
        history.append(reply)
        calls = reply.get("tool_calls") or []
        if real and not calls:
            break
        if real:  # answer the model's own call ids with the run's recorded outputs of this step
            outputs = [m for m in recorded_after if m["role"] == "tool"] or [{"content": "(no recorded output)"}]
            for n, call in enumerate(calls):
                history.append({"role": "tool", "tool_call_id": call["id"], "name": call["function"]["name"],
                                "content": outputs[min(n, len(outputs) - 1)]["content"]})
        else:
            history.extend(recorded_after)
    totals["saved"] = 1 - totals["sent_tokens"] / max(1, totals["history_tokens"])
    totals["final_history"] = len(history)
    totals["cached_tokens"] = meter.cached
    totals["cached_share"] = meter.share
    totals["cost_ratio_0.1"] = meter.ratio(0.1)
    totals["cost_ratio_0.5"] = meter.ratio(0.5)
    totals["modes"] = modes
    print(f"TOTAL calls={totals['calls']} history_tokens={totals['history_tokens']} "
          f"sent_tokens={totals['sent_tokens']} saved={totals['saved']:.1%} max_sent={totals['max_sent']} "
          f"budget={budget} final_history={len(history)} cached_tokens={meter.cached} "
          f"cached_share={meter.share:.1%} cost_vs_full@0.1={meter.ratio(0.1):.2f}x "
          f"cost_vs_full@0.5={meter.ratio(0.5):.2f}x appended={modes['appended']} compacted={modes['compacted']} "
          f"full_rebuild={modes['full_rebuild']} seconds={time.perf_counter() - started:.1f}", file=out)
    return totals


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("transcript", nargs="?", type=Path, default=DEFAULT_TRANSCRIPT)
    parser.add_argument("--budget", type=int, default=8000, help="token budget of each built context (tokens)")
    parser.add_argument("--keep-recent", type=int, default=4, help="working memory in steps")
    parser.add_argument("--steps", type=int, default=None, help="replay at most this many model calls")
    parser.add_argument("--stream", action="store_true", help="stream the replies (recorded once consumed)")
    parser.add_argument("--scripted", action="store_true", help="use the scripted model even when OPENAI_API_KEY is set")
    parser.add_argument("--model", default=None, help="model name (real endpoint; default $OPENAI_MODEL or gpt-4o-mini)")
    args = parser.parse_args(argv)
    real = bool(os.environ.get("OPENAI_API_KEY")) and not args.scripted
    steps = args.steps if args.steps is not None or not real else 10
    run(args.transcript, budget=args.budget, keep_recent=args.keep_recent, steps=steps,
        stream=args.stream, real=real, model=args.model)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

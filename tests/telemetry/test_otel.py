"""OpenTelemetry spans and log records at the seams (manager, managed client), read back
from the SDK's in-memory exporter."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import logging
import sys
from pathlib import Path
from typing import Any

import openai
import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from relevance_memory import RelevanceMemoryManager, load_transcript, manage
from relevance_memory import _telemetry as telemetry
from relevance_memory.testing import FixedScorer, ScriptedScorer

try:  # openai>=3 talks through httpx2; older versions through httpx
    import httpx2 as httpx
except ImportError:  # pragma: no cover
    import httpx  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "fixtures" / "django__django-15280.json"


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> InMemorySpanExporter:
    """The library's tracer, pointed at an SDK provider with an in-memory exporter (no global provider)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(telemetry, "_tracer", lambda: provider.get_tracer("relevance_memory"))
    return exporter


def replay() -> Any:
    spec = importlib.util.spec_from_file_location("replay_agent", ROOT / "examples" / "replay_agent.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("replay_agent", module)
    spec.loader.exec_module(module)
    return module


def history(n: int = 30) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the date parser in utils/dates.py; never change the public API."},
    ]
    for k in range(n):
        call = {"id": f"c{k}", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"cmd": f"cat f{k}.py"})}}
        out.append({"role": "assistant", "content": f"step {k}", "tool_calls": [call]})
        out.append({"role": "tool", "tool_call_id": f"c{k}", "content": f"contents of f{k}.py\n" + "x = 1\n" * 60})
    return out


def by_name(exporter: InMemorySpanExporter, prefix: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name.startswith(prefix)]


def test_a_build_is_one_span_with_the_records_numbers(spans: InMemorySpanExporter) -> None:
    memory = RelevanceMemoryManager(max_input_tokens=2500, keep_recent=2)
    memory.extend(history(20))
    first = memory.build_context()
    memory.extend(history(21)[-2:])
    second = memory.build_context()
    builds = by_name(spans, "search_memory")
    assert len(builds) == 2
    attributes = dict(builds[0].attributes or {})
    record = first.record
    assert attributes["gen_ai.operation.name"] == "search_memory"
    assert attributes["relevance_memory.build.id"] == record.build_id
    assert attributes["relevance_memory.build.mode"] == record.mode == "full_rebuild"
    assert attributes["relevance_memory.tokens.before"] == record.tokens_before > 2500
    assert attributes["relevance_memory.tokens.after"] == record.tokens_after <= 2500
    assert attributes["relevance_memory.messages.before"] == 42
    assert attributes["relevance_memory.messages.after"] == len(first.messages)
    assert attributes["gen_ai.conversation.compacted"] is True
    counts = record.decision_counts()
    assert attributes["relevance_memory.messages.summarised"] == counts["summarised"]
    cut = {f: sum(1 for d in record.messages if d.fidelity == f) for f in ("excerpt", "elided")}
    assert (attributes["relevance_memory.messages.excerpted"], attributes["relevance_memory.messages.elided"]) == (
        cut["excerpt"], cut["elided"])
    assert counts["summarised"] + cut["excerpt"] + cut["elided"] > 0  # the 20 outputs did not all fit whole
    assert attributes["relevance_memory.messages.dropped"] == counts["dropped"]
    assert attributes["relevance_memory.messages.kept"] + attributes["relevance_memory.messages.recent"] == (
        attributes["gen_ai.memory.record.count"]
    )
    assert attributes["relevance_memory.messages.archived"] == sum(d.tier == "archive" for d in record.messages)
    assert attributes["relevance_memory.summaries"] == len(record.summaries)
    later = dict(builds[1].attributes or {})
    assert later["relevance_memory.build.mode"] == second.record.mode
    assert later["relevance_memory.prefix.tokens"] == second.record.prefix_tokens > 0
    assert later["relevance_memory.prefix.cacheable_tokens"] == second.record.cacheable_tokens


def test_a_whole_history_is_not_flagged_compacted(spans: InMemorySpanExporter) -> None:
    memory = RelevanceMemoryManager(max_input_tokens=50_000)
    memory.extend(history(2))
    assert memory.build_context().record.identity
    (build,) = by_name(spans, "search_memory")
    assert "gen_ai.conversation.compacted" not in (build.attributes or {})  # the convention: only ever true


def test_scorer_calls_are_child_spans_with_usage(spans: InMemorySpanExporter) -> None:
    scorer = FixedScorer(2, scores={"m1": 5}, model="fake-scorer-1")
    memory = RelevanceMemoryManager(max_input_tokens=2500, keep_recent=2, scorer=scorer)
    memory.extend(history(20))
    memory.build_context()
    (build,) = by_name(spans, "search_memory")
    (score,) = by_name(spans, "score ")
    assert score.name == "score fixed"
    assert score.parent is not None and score.parent.span_id == build.context.span_id
    attributes = dict(score.attributes or {})
    assert attributes["gen_ai.request.model"] == "fake-scorer-1"
    assert attributes["relevance_memory.scorer.items"] == len(scorer.calls[0].ids)
    assert attributes["relevance_memory.scorer.llm_calls"] == 1
    assert attributes["gen_ai.usage.input_tokens"] == 0 and attributes["gen_ai.usage.output_tokens"] == 0


async def test_async_builds_parent_their_scorer_spans(spans: InMemorySpanExporter) -> None:
    scorer = ScriptedScorer([], then=3)
    memory = RelevanceMemoryManager(max_input_tokens=2500, keep_recent=2, scorer=scorer)
    memory.extend(history(20))
    await memory.abuild_context()
    (build,) = by_name(spans, "search_memory")
    (score,) = by_name(spans, "score ")
    assert score.parent is not None and score.parent.span_id == build.context.span_id


def test_record_warnings_are_log_records_once(spans: InMemorySpanExporter, caplog: pytest.LogCaptureFixture) -> None:
    scorer = ScriptedScorer([{}], then=3)  # the first call scores nothing: offline fallback, said in the record
    memory = RelevanceMemoryManager(max_input_tokens=2500, keep_recent=2, scorer=scorer)
    memory.extend(history(20))
    with caplog.at_level(logging.DEBUG, logger="relevance_memory"):
        built = memory.build_context()
        memory.extend(history(21)[-2:])
        again = memory.build_context()
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [r.getMessage() for r in warned] == built.record.warnings != []
    assert all(r.name == "relevance_memory" for r in caplog.records)
    assert warned[0].relevance_memory_build_id == built.record.build_id  # type: ignore[attr-defined]
    debug = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert len(debug) == 2 and debug[1].startswith(f"build {again.record.build_id}: {again.record.mode}")


def test_a_failing_build_ends_its_span_with_the_error(spans: InMemorySpanExporter) -> None:
    from relevance_memory import ContextOverflowError

    memory = RelevanceMemoryManager(max_input_tokens=200)
    memory.extend([{"role": "system", "content": "rule " * 400}, {"role": "user", "content": "go"}])
    with pytest.raises(ContextOverflowError):
        memory.build_context()
    (build,) = by_name(spans, "search_memory")
    assert build.status.status_code is StatusCode.ERROR
    assert [e.name for e in build.events] == ["exception"]


def test_the_managed_clients_model_call_carries_the_compacted_flag_and_usage(spans: InMemorySpanExporter) -> None:
    example = replay()
    opening, steps = example.steps_of(load_transcript(FIXTURE).messages)
    steps = steps[:12]
    model = example.ScriptedModel([recorded for recorded, _ in steps])
    http = httpx.Client(transport=httpx.MockTransport(model))
    client = manage(openai.OpenAI(api_key="k", base_url="https://scripted.invalid/v1", http_client=http),
                    max_input_tokens=4000, keep_recent=2)
    messages = list(opening)
    for n, (recorded, after) in enumerate(steps):
        if n == len(steps) - 1:  # the last call streams
            stream = client.chat.completions.create(model="gpt-4o", messages=messages, stream=True,
                                                    stream_options={"include_usage": True})
            for _ in stream:
                pass
        else:
            client.chat.completions.create(model="gpt-4o", messages=messages)
        messages += [recorded, *after]
    calls = by_name(spans, "chat ")
    builds = by_name(spans, "search_memory")
    assert len(calls) == len(builds) == 12
    for call, build, body in zip(calls, builds, model.requests, strict=True):
        attributes = dict(call.attributes or {})
        built = dict(build.attributes or {})
        assert call.name == "chat gpt-4o" and call.kind is SpanKind.CLIENT
        assert attributes["gen_ai.operation.name"] == "chat" and attributes["gen_ai.request.model"] == "gpt-4o"
        assert attributes["relevance_memory.build.id"] == built["relevance_memory.build.id"]
        assert attributes.get("gen_ai.conversation.compacted") == built.get("gen_ai.conversation.compacted")
        assert attributes["gen_ai.usage.input_tokens"] == model._usage(body["messages"])["prompt_tokens"]
        assert attributes["gen_ai.usage.input_tokens"] == built["relevance_memory.tokens.after"]
        assert attributes["gen_ai.response.model"] == "scripted-replay"
    assert sum("gen_ai.conversation.compacted" in (c.attributes or {}) for c in calls) >= 6
    cached = [c.attributes["gen_ai.usage.cache_read.input_tokens"] for c in calls]  # type: ignore[index]
    assert cached[-1] == client.last_record.provider_cached_tokens  # type: ignore[union-attr]
    assert max(cached) >= 1024
    assert dict(calls[-1].attributes or {})["gen_ai.request.stream"] is True
    assert dict(calls[0].attributes or {})["gen_ai.response.finish_reasons"] == ("tool_calls",)


def test_an_async_model_call_that_fails_is_an_error_span(spans: InMemorySpanExporter) -> None:
    def refuse(request: Any) -> Any:
        return httpx.Response(400, json={"error": {"message": "bad request", "type": "invalid_request_error"}})

    async def main() -> None:
        http = httpx.AsyncClient(transport=httpx.MockTransport(refuse))
        client = manage(openai.AsyncOpenAI(api_key="k", base_url="https://x.invalid/v1", http_client=http, max_retries=0),
                        max_input_tokens=3000)
        with pytest.raises(openai.BadRequestError):
            await client.chat.completions.create(model="gpt-4o", messages=history(1))
        with pytest.raises(openai.BadRequestError):  # the stream helper sends on entering
            async with client.chat.completions.stream(model="gpt-4o", messages=history(1)):
                pass

    asyncio.run(main())
    calls = by_name(spans, "chat ")
    assert len(calls) == 2
    for call in calls:
        assert call.status.status_code is StatusCode.ERROR
        assert dict(call.attributes or {})["error.type"] == "BadRequestError"


def anthropic_example() -> Any:
    spec = importlib.util.spec_from_file_location("anthropic_agent", ROOT / "examples" / "anthropic_agent.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("anthropic_agent", module)
    spec.loader.exec_module(module)
    return module


@pytest.mark.filterwarnings("ignore:token counts are approximate")
def test_the_anthropic_clients_model_call_is_a_chat_span_with_anthropics_usage(spans: InMemorySpanExporter) -> None:
    anthropic = pytest.importorskip("anthropic")
    example = anthropic_example()
    system, tools, history, steps = example.anthropic_run(FIXTURE)
    steps = steps[:10]
    model = example.ScriptedClaude([s["assistant"] for s in steps])
    http = httpx.Client(transport=httpx.MockTransport(model))
    client = manage(anthropic.Anthropic(api_key="k", http_client=http, max_retries=0), max_input_tokens=4000)
    messages = list(history)
    for n, step in enumerate(steps):
        request = {"model": example.MODEL, "system": system, "messages": messages, "tools": tools, "max_tokens": 64}
        if n == len(steps) - 2:  # the SDK's stream helper
            with client.messages.stream(**request) as stream:
                reply = stream.get_final_message()
        elif n == len(steps) - 1:  # raw events
            with client.messages.create(**request, stream=True) as events:
                for _ in events:
                    pass
            reply = None
        else:
            reply = client.messages.create(**request)
        content = reply.content if reply is not None else step["assistant"]
        messages = [*messages, {"role": "assistant", "content": content}, step["user"]]
    calls = by_name(spans, "chat ")
    builds = by_name(spans, "search_memory")
    assert len(calls) == len(builds) == len(model.usages) == 10
    for n, (call, build, usage) in enumerate(zip(calls, builds, model.usages, strict=True)):
        attributes = dict(call.attributes or {})
        built = dict(build.attributes or {})
        assert call.name == f"chat {example.MODEL}" and call.kind is SpanKind.CLIENT
        assert attributes["gen_ai.provider.name"] == "anthropic" and attributes["gen_ai.operation.name"] == "chat"
        assert attributes["gen_ai.request.model"] == example.MODEL
        assert attributes["gen_ai.request.stream"] is (n >= 8)
        assert attributes["relevance_memory.build.id"] == built["relevance_memory.build.id"]
        assert attributes.get("gen_ai.conversation.compacted") == built.get("gen_ai.conversation.compacted")
        assert attributes["gen_ai.response.id"] == f"msg_replay_{n}"
        assert attributes["gen_ai.response.model"] == example.MODEL
        assert attributes["gen_ai.response.finish_reasons"] == ("tool_use",)
        # the convention's input tokens count every input token; Anthropic's leave the cached ones out
        assert attributes["gen_ai.usage.input_tokens"] == (
            usage["input_tokens"] + usage["cache_read_input_tokens"] + usage["cache_creation_input_tokens"]
        )
        assert attributes["gen_ai.usage.output_tokens"] == usage["output_tokens"] == 1
        assert attributes["gen_ai.usage.cache_read.input_tokens"] == usage["cache_read_input_tokens"]
        assert attributes["gen_ai.usage.cache_creation.input_tokens"] == usage["cache_creation_input_tokens"]
    assert sum("gen_ai.conversation.compacted" in (c.attributes or {}) for c in calls) >= 3
    assert max(u["cache_read_input_tokens"] for u in model.usages) >= 1024


@pytest.mark.filterwarnings("ignore:token counts are approximate")
def test_an_anthropic_call_that_fails_or_a_stream_left_early_still_ends_its_span(spans: InMemorySpanExporter) -> None:
    anthropic = pytest.importorskip("anthropic")
    example = anthropic_example()
    system, tools, history, steps = example.anthropic_run(FIXTURE)

    def refuse(request: Any) -> Any:
        return httpx.Response(400, json={"type": "error", "error": {"type": "invalid_request_error", "message": "no"}})

    async def main() -> None:
        failing = httpx.AsyncClient(transport=httpx.MockTransport(refuse))
        client = manage(anthropic.AsyncAnthropic(api_key="k", http_client=failing, max_retries=0), max_input_tokens=4000)
        with pytest.raises(anthropic.BadRequestError):
            await client.messages.create(model=example.MODEL, system=system, messages=history, max_tokens=16)
        with pytest.raises(anthropic.BadRequestError):
            async with client.messages.stream(model=example.MODEL, system=system, messages=history, max_tokens=16):
                pass
        model = example.ScriptedClaude([steps[0]["assistant"]])
        working = httpx.AsyncClient(transport=httpx.MockTransport(model))
        client = manage(anthropic.AsyncAnthropic(api_key="k", http_client=working, max_retries=0), max_input_tokens=4000)
        async with client.messages.stream(model=example.MODEL, system=system, messages=history, tools=tools,
                                          max_tokens=16) as stream:
            async for _ in stream:
                break

    asyncio.run(main())
    failed, helper, left = by_name(spans, "chat ")
    for call in (failed, helper):
        assert call.status.status_code is StatusCode.ERROR
        assert dict(call.attributes or {})["error.type"] == "BadRequestError"
    assert left.status.status_code is StatusCode.UNSET  # ended on exit, without a reply to report
    assert "gen_ai.usage.input_tokens" not in (left.attributes or {})


def untraced_build(caplog: pytest.LogCaptureFixture) -> tuple[RelevanceMemoryManager, Any]:
    """With no tracer to use: the scorer is not wrapped, and a build still logs its warnings."""
    scorer = ScriptedScorer([{}], then=3)
    assert telemetry.traced_scorer(scorer) is scorer
    memory = RelevanceMemoryManager(max_input_tokens=2500, keep_recent=2, scorer=scorer)
    memory.extend(history(20))
    with caplog.at_level(logging.WARNING, logger="relevance_memory"):
        built = memory.build_context()
    assert [r.getMessage() for r in caplog.records] == built.record.warnings
    return memory, built


def test_without_opentelemetry_nothing_is_traced_and_builds_still_log(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    telemetry._tracer.cache_clear()
    try:
        assert telemetry._tracer() is None
        _, built = untraced_build(caplog)
        span = telemetry.model_call("gpt-4o", built)
        with span.current():
            pass
        span.end({"id": "x"})
    finally:
        telemetry._tracer.cache_clear()


def test_without_a_tracer_provider_no_span_is_started_and_a_later_provider_is_followed(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from opentelemetry import trace

    telemetry._tracer.cache_clear()
    try:
        proxy = telemetry._tracer()
        assert isinstance(proxy, trace.ProxyTracer)  # no global provider in the test process
        assert telemetry._live_tracer() is None
        memory, _ = untraced_build(caplog)

        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        monkeypatch.setattr(trace, "_TRACER_PROVIDER", provider)  # as trace.set_tracer_provider(provider) would now
        assert telemetry._live_tracer() is proxy
        memory.extend(history(22)[20:])
        memory.build_context()
        names = [span.name for span in exporter.get_finished_spans()]
        assert "search_memory" in names
    finally:
        telemetry._tracer.cache_clear()

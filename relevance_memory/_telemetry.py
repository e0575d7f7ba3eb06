"""Traces and log records at the seams: one span per build, scorer calls, the model call after.

OpenTelemetry is optional (``pip install 'relevance-memory[otel]'``: ``opentelemetry-api``).
Without it nothing here does anything but logging; with the API and no SDK configured (no
global tracer provider), no span is started either — the API's would be no-op spans, at ~20 µs
a build (checked when each build starts: a provider set later is followed from the next build
on; a build and its scorer calls are traced together or not at all — a provider set while a
build waits for another build's lock traces the builds after it). Only the manager (builds, its scorer seam) and the managed client
(the model call) call this module — the pipeline's stages stay pure.

Spans, named after the OpenTelemetry GenAI semantic conventions where they define a name
(``open-telemetry/semantic-conventions-genai``, ``docs/registry/attributes/gen-ai.md`` and
``docs/gen-ai/gen-ai-spans.md``; status *Development*):

- **a build** (:meth:`RelevanceMemoryManager.build_context` / ``abuild_context``): span
  ``search_memory``, kind ``INTERNAL`` — the GenAI memory operation
  ``gen_ai.operation.name = "search_memory"`` (retrieve the memory records relevant to the
  request), with ``gen_ai.memory.store.id`` (the agent, when the memory has one) and
  ``gen_ai.memory.record.count`` (stored messages the context carries); and
  ``gen_ai.conversation.compacted = true`` when the context is not the whole history (the
  convention sets this flag only when true). What the conventions do not define is under
  ``relevance_memory.*``: ``build.id``, ``build.mode`` (``appended`` / ``compacted`` /
  ``full_rebuild``), ``build.mode_reason``, ``budget``, ``tokens.before`` / ``tokens.after``,
  ``messages.before`` / ``messages.after``, ``prefix.tokens`` (tokens shared exactly with the
  previous request) and ``prefix.cacheable_tokens`` (what of them a provider bills as cached),
  ``summaries``, ``warnings``, ``appended``; on a compaction or full rebuild also
  ``messages.kept`` / ``recent`` / ``summarised`` / ``dropped`` / ``excerpted`` / ``elided`` / ``archived``.
- **a scorer call** (child of the build span): span ``score {scorer name}``, with
  ``gen_ai.request.model``, ``gen_ai.usage.input_tokens`` / ``gen_ai.usage.output_tokens``
  (the scorer's LLM usage) and ``relevance_memory.scorer.*`` (``items``, ``llm_calls``,
  ``requests``, ``retries``, ``fallbacks``).
- **the model call that follows** (the managed client, :func:`relevance_memory.manage`): span
  ``chat {model}``, kind ``CLIENT``, ``gen_ai.operation.name = "chat"``,
  ``gen_ai.provider.name`` (``"openai"`` or ``"anthropic"``), ``gen_ai.request.model``,
  ``gen_ai.request.stream``, ``gen_ai.conversation.compacted``, and from the response
  ``gen_ai.response.id`` / ``model`` / ``finish_reasons`` (OpenAI's ``finish_reason`` of each
  choice, Anthropic's ``stop_reason``), ``gen_ai.usage.input_tokens`` / ``output_tokens`` and
  ``gen_ai.usage.cache_read.input_tokens`` (the provider's cached prompt tokens; for Anthropic
  also ``gen_ai.usage.cache_creation.input_tokens``, and ``input_tokens`` is the sum of
  Anthropic's ``input_tokens`` and both cache counts, as the convention asks: every input
  token, cached ones included); ``relevance_memory.build.id`` links it to its build.

Logging: logger ``relevance_memory`` (a ``NullHandler`` is attached, as libraries do: nothing
shows until the application configures logging). Each warning a build's decision record gains
is one ``WARNING`` record (an appended build repeats its base's warnings in the record; they
are logged once); every build is one ``DEBUG`` record.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import weakref
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol

from ._models import TaskGoal
from .scoring._scorer import ScoreItem, Scorer, ScoringContext, ScoringResult
from .store._history import field_of

if TYPE_CHECKING:
    from ._record import DecisionRecord
    from .pipeline._state import BuiltContext

__all__ = [
    "ModelCallSpan",
    "abuild_span",
    "build_attributes",
    "build_span",
    "log_record",
    "logger",
    "model_call",
    "provider_cached_tokens",
    "traced_scorer",
]

logger = logging.getLogger("relevance_memory")
logger.addHandler(logging.NullHandler())

_SCOPE = "relevance_memory"


class _Memory(Protocol):
    """What a build's span reads of the memory that builds (:class:`RelevanceMemoryManager`)."""

    agent: str | None


@functools.lru_cache(maxsize=1)
def _tracer() -> Any:
    """The library's tracer (a proxy that follows the global provider), or ``None`` without the API."""
    try:
        from opentelemetry import trace
    except ImportError:
        return None
    from ._version import __version__

    return trace.get_tracer(_SCOPE, __version__)


@functools.lru_cache(maxsize=1)
def _trace_api() -> Any:
    """The ``opentelemetry.trace`` module, imported once (``None`` without the API)."""
    try:
        from opentelemetry import trace
    except ImportError:
        return None
    return trace


_UNKNOWN: Any = object()
_BUILD_TRACER: contextvars.ContextVar[Any] = contextvars.ContextVar("relevance_memory_build_tracer", default=_UNKNOWN)
""":func:`_live_tracer` as the sync build in progress (in this thread or task) found it; ``_UNKNOWN`` outside one."""


def _live_tracer() -> Any:
    """:func:`_tracer`, or ``None`` while it is the API's proxy and no tracer provider is set
    (every span it started would be a no-op span)."""
    tracer = _tracer()
    if tracer is None:
        return None
    trace = _trace_api()
    if isinstance(tracer, trace.ProxyTracer) and isinstance(
        trace.get_tracer_provider(), (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
    ):
        return None
    return tracer


# --------------------------------------------------------------------------- attributes
def _compacted(record: DecisionRecord) -> bool:
    return not record.identity


def build_attributes(record: DecisionRecord) -> dict[str, Any]:
    """The attributes of a build's span (module doc) from its decision record."""
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "search_memory",
        "relevance_memory.build.id": record.build_id,
        "relevance_memory.build.mode": record.mode,
        "relevance_memory.build.mode_reason": record.mode_reason,
        "relevance_memory.budget": record.budget,
        "relevance_memory.tokens.before": record.tokens_before,
        "relevance_memory.tokens.after": record.tokens_after,
        "relevance_memory.messages.before": record.messages_before,
        "relevance_memory.messages.after": record.messages_after,
        "relevance_memory.prefix.tokens": record.prefix_tokens,
        "relevance_memory.prefix.cacheable_tokens": record.cacheable_tokens,
        "relevance_memory.summaries": len(record.summaries),
        "relevance_memory.warnings": len(record.warnings),
        "relevance_memory.appended": len(record.appended_ids),
    }
    if _compacted(record):
        attributes["gen_ai.conversation.compacted"] = True
    if record.mode != "appended":  # an append's per-message record is built on first use: O(history)
        decisions = record.messages
        counts: Counter[str] = Counter(str(d.decision) for d in decisions)
        for name in ("kept", "recent", "summarised", "dropped"):
            attributes[f"relevance_memory.messages.{name}"] = counts.get(name, 0)
        # graded fidelity (SPEC §11): messages sent cut to an excerpt, or with their output elided
        attributes["relevance_memory.messages.excerpted"] = sum(1 for d in decisions if d.fidelity == "excerpt")
        attributes["relevance_memory.messages.elided"] = sum(1 for d in decisions if d.fidelity == "elided")
        attributes["relevance_memory.messages.archived"] = sum(1 for d in decisions if d.tier == "archive")
        attributes["gen_ai.memory.record.count"] = counts.get("kept", 0) + counts.get("recent", 0)
    return attributes


# --------------------------------------------------------------------------- logging
_logged: weakref.WeakKeyDictionary[Any, frozenset[str]] = weakref.WeakKeyDictionary()


def log_record(owner: object, record: DecisionRecord) -> None:
    """Log a build (``DEBUG``) and each warning its record gained since ``owner``'s previous build (``WARNING``)."""
    before = _logged.get(owner, frozenset())
    for warning in record.warnings:
        if warning not in before:
            logger.warning("%s", warning, extra={"relevance_memory_build_id": record.build_id})
    _logged[owner] = frozenset(record.warnings)
    if logger.isEnabledFor(logging.DEBUG):
        logger.debug(
            "build %s: %s, %d → %d tokens (budget %d), %d → %d messages, %d prefix tokens shared",
            record.build_id, record.mode, record.tokens_before, record.tokens_after, record.budget,
            record.messages_before, record.messages_after, record.prefix_tokens,
        )


# --------------------------------------------------------------------------- builds
def _start_attributes(manager: _Memory) -> dict[str, Any]:
    attributes: dict[str, Any] = {"gen_ai.operation.name": "search_memory"}
    if manager.agent:
        attributes["gen_ai.memory.store.id"] = manager.agent
    return attributes


@contextmanager
def _span(manager: _Memory, tracer: Any) -> Iterator[Callable[[BuiltContext], None]]:
    """A build's span around the body (``tracer``: :func:`_live_tracer`, as the build found it);
    yields ``finish(built)``, which sets the record's attributes."""
    if tracer is None:
        yield lambda built: log_record(manager, built.record)
        return
    with tracer.start_as_current_span("search_memory", attributes=_start_attributes(manager)) as span:

        def finish(built: BuiltContext) -> None:
            if span.is_recording():
                span.set_attributes(build_attributes(built.record))
            log_record(manager, built.record)

        yield finish


def build_span(method: Callable[..., BuiltContext]) -> Callable[..., BuiltContext]:
    """Decorates :meth:`RelevanceMemoryManager.build_context`: one span and log records per build."""

    @functools.wraps(method)
    def traced(self: _Memory, *args: Any, **kwargs: Any) -> BuiltContext:
        tracer = _live_tracer()
        token = _BUILD_TRACER.set(tracer)  # the build's scorer seam reads it: the provider is checked once a build
        try:
            if tracer is None:  # no span to start: the build and its log records only
                built = method(self, *args, **kwargs)
                log_record(self, built.record)
                return built
            with _span(self, tracer) as finish:
                built = method(self, *args, **kwargs)
                finish(built)
                return built
        finally:
            _BUILD_TRACER.reset(token)

    return traced


def abuild_span(method: Callable[..., Awaitable[BuiltContext]]) -> Callable[..., Awaitable[BuiltContext]]:
    """Decorates :meth:`RelevanceMemoryManager.abuild_context` (see :func:`build_span`)."""

    @functools.wraps(method)
    async def traced(self: _Memory, *args: Any, **kwargs: Any) -> BuiltContext:
        with _span(self, _live_tracer()) as finish:
            built = await method(self, *args, **kwargs)
            finish(built)
            return built

    return traced


# --------------------------------------------------------------------------- scorer calls
class _TracedScorer:
    """A scorer whose calls are child spans (module doc); every other attribute is the scorer's."""

    def __init__(self, scorer: Scorer, tracer: Any) -> None:
        self._scorer = scorer
        self._tracer = tracer
        self.name = scorer.name  # made per build: a copy of the scorer's labels is current
        self.model = scorer.model
        self.rubric_version = scorer.rubric_version

    def __getattr__(self, name: str) -> Any:  # local, context_dependent, …: as the scorer declares them
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._scorer, name)

    @contextmanager
    def _call(self, items: Sequence[ScoreItem]) -> Iterator[Callable[[ScoringResult], None]]:
        attributes = {"gen_ai.request.model": self.model, "relevance_memory.scorer.items": len(items)}
        with self._tracer.start_as_current_span(f"score {self.name}", attributes=attributes) as span:

            def finish(result: ScoringResult) -> None:
                if span.is_recording():
                    usage = result.usage
                    span.set_attributes({
                        "gen_ai.usage.input_tokens": usage.prompt_tokens,
                        "gen_ai.usage.output_tokens": usage.completion_tokens,
                        "relevance_memory.scorer.llm_calls": usage.llm_calls,
                        "relevance_memory.scorer.requests": len(result.calls),
                        "relevance_memory.scorer.retries": usage.retries,
                        "relevance_memory.scorer.fallbacks": usage.fallbacks,
                    })

            yield finish

    def score(self, goal: TaskGoal, items: Sequence[ScoreItem], context: ScoringContext | None = None) -> ScoringResult:
        with self._call(items) as finish:
            result = self._scorer.score(goal, items, context)
            finish(result)
            return result


class _TracedAsyncScorer(_TracedScorer):
    async def ascore(
        self, goal: TaskGoal, items: Sequence[ScoreItem], context: ScoringContext | None = None
    ) -> ScoringResult:
        with self._call(items) as finish:
            result: ScoringResult = await self._scorer.ascore(goal, items, context)  # type: ignore[attr-defined]
            finish(result)
            return result


def traced_scorer(scorer: Scorer) -> Scorer:
    """``scorer`` with each call a child span (module doc); ``scorer`` itself without OpenTelemetry
    (or without a tracer provider, as :func:`build_span` found it for the build in progress)."""
    tracer = _BUILD_TRACER.get()
    if tracer is _UNKNOWN:
        tracer = _live_tracer()
    if tracer is None:
        return scorer
    kind = _TracedAsyncScorer if callable(getattr(scorer, "ascore", None)) else _TracedScorer
    return kind(scorer, tracer)


# --------------------------------------------------------------------------- the model call
class ModelCallSpan:
    """The span of one managed model call (module doc), ended once by :meth:`end`."""

    def __init__(self, model: str | None, built: BuiltContext, *, stream: bool, provider: str = "openai") -> None:
        tracer = _live_tracer()
        self._span: Any = None
        self._provider = provider
        if tracer is None:
            return
        from opentelemetry.trace import SpanKind

        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider,
            "gen_ai.request.stream": stream,
            "relevance_memory.build.id": built.record.build_id,
            "relevance_memory.build.mode": built.record.mode,
        }
        if model:
            attributes["gen_ai.request.model"] = model
        if _compacted(built.record):
            attributes["gen_ai.conversation.compacted"] = True
        self._span = tracer.start_span(f"chat {model}" if model else "chat", kind=SpanKind.CLIENT, attributes=attributes)

    @contextmanager
    def current(self) -> Iterator[None]:
        """The span as the current one (the HTTP request's spans become its children)."""
        if self._span is None:
            yield
            return
        from opentelemetry import trace

        with trace.use_span(self._span, end_on_exit=False, record_exception=False, set_status_on_exception=False):
            yield

    @contextmanager
    def sending(self) -> Iterator[None]:
        """Around sending the request: the span is current (:meth:`current`) and an exception
        ends it with the error (:meth:`end`) before it propagates."""
        try:
            with self.current():
                yield
        except BaseException as exc:
            self.end(error=exc)
            raise

    def end(self, response: Any = None, *, usage: Any = None, error: BaseException | None = None) -> None:
        """Set what ``response`` (or a stream's ``usage``) reports, or the error, and end the span (once)."""
        span, self._span = self._span, None
        if span is None:
            return
        if error is not None:
            from opentelemetry.trace import Status, StatusCode

            span.record_exception(error)
            span.set_status(Status(StatusCode.ERROR, str(error)))
            span.set_attribute("error.type", type(error).__qualname__)
        if span.is_recording():
            reply = _anthropic_attributes if self._provider == "anthropic" else _openai_attributes
            span.set_attributes({**_response_head(response), **reply(response, usage)})
        span.end()


def _response_head(response: Any) -> dict[str, Any]:
    """``gen_ai.response.id`` / ``model`` of a response (either provider's, SDK object or dict)."""
    out: dict[str, Any] = {}
    for key, name in (("id", "gen_ai.response.id"), ("model", "gen_ai.response.model")):
        value = field_of(response, key) if response is not None else None
        if isinstance(value, str):
            out[name] = value
    return out


def provider_cached_tokens(usage: Any) -> int | None:
    """Cached prompt tokens a provider reports in a response's ``usage``, or ``None``.

    Read, first found: ``usage.prompt_tokens_details.cached_tokens`` (OpenAI and compatible
    servers), ``usage.cache_read_input_tokens`` (Anthropic-style, e.g. through a proxy),
    ``usage.prompt_cache_hit_tokens`` (DeepSeek). Works on SDK objects and plain dicts.
    """
    if usage is None:
        return None
    details = field_of(usage, "prompt_tokens_details")
    if details is not None and field_of(details, "cached_tokens") is not None:
        return int(field_of(details, "cached_tokens"))
    for key in ("cache_read_input_tokens", "prompt_cache_hit_tokens"):
        value = field_of(usage, key)
        if value is not None:
            return int(value)
    return None


def _openai_attributes(response: Any, usage: Any) -> dict[str, Any]:
    """Finish reasons and usage of a chat completion (or a stream's ``usage``)."""
    out: dict[str, Any] = {}
    if response is not None:
        reasons = [field_of(c, "finish_reason") for c in field_of(response, "choices") or ()]
        if reasons and all(isinstance(r, str) for r in reasons):
            out["gen_ai.response.finish_reasons"] = reasons
        usage = field_of(response, "usage") if usage is None else usage
    if usage is not None:
        for key, name in (("prompt_tokens", "gen_ai.usage.input_tokens"), ("completion_tokens", "gen_ai.usage.output_tokens")):
            value = field_of(usage, key)
            if isinstance(value, int):
                out[name] = value
        cached = provider_cached_tokens(usage)
        if cached is not None:
            out["gen_ai.usage.cache_read.input_tokens"] = cached
    return out


def _anthropic_attributes(response: Any, usage: Any) -> dict[str, Any]:
    """Stop reason and usage of an Anthropic ``Message`` (module doc): Anthropic's
    ``input_tokens`` leaves out the tokens read from and written to the cache; the
    convention's ``gen_ai.usage.input_tokens`` counts every input token, so it is the sum."""
    out: dict[str, Any] = {}
    if response is not None:
        reason = field_of(response, "stop_reason")
        if isinstance(reason, str):
            out["gen_ai.response.finish_reasons"] = [reason]
        usage = field_of(response, "usage") if usage is None else usage
    if usage is None:
        return out
    counts = {key: field_of(usage, key) for key in
              ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")}
    read, created = counts["cache_read_input_tokens"], counts["cache_creation_input_tokens"]
    if isinstance(counts["input_tokens"], int):
        out["gen_ai.usage.input_tokens"] = sum(c for c in (counts["input_tokens"], read, created) if isinstance(c, int))
    if isinstance(counts["output_tokens"], int):
        out["gen_ai.usage.output_tokens"] = counts["output_tokens"]
    if isinstance(read, int):
        out["gen_ai.usage.cache_read.input_tokens"] = read
    if isinstance(created, int):
        out["gen_ai.usage.cache_creation.input_tokens"] = created
    return out


def model_call(model: str | None, built: BuiltContext, *, stream: bool = False, provider: str = "openai") -> ModelCallSpan:
    """Start the span of the model call that sends ``built`` (module doc) to ``provider``
    (``gen_ai.provider.name``: ``"openai"`` or ``"anthropic"``; its response is read as that
    provider's)."""
    return ModelCallSpan(model, built, stream=stream, provider=provider)

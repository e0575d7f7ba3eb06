"""Managed Anthropic client: an Anthropic agent loop gets a managed context with one line.

    client = manage(anthropic.Anthropic(), max_input_tokens=20_000)   # or AsyncAnthropic()
    reply = client.messages.create(model="claude-sonnet-4-5", system=SYSTEM, messages=history,
                                   tools=tools, max_tokens=1024)
    client.last_record                                               # the DecisionRecord of that call

``messages.create`` (``stream=True`` too), ``messages.parse`` and the SDK's ``messages.stream``
helper convert ``system=`` and ``messages`` to the store's form
(:func:`~relevance_memory.clients._anthropic_messages.from_anthropic`: tool_use / tool_result blocks become
one chain, never split), record the new messages into the memory (synced by prefix, as
the OpenAI wrapper does: :mod:`relevance_memory.clients._session`), build the context, send it back
in Anthropic's shape (:func:`~relevance_memory.clients._anthropic_messages.to_anthropic`: ``system=`` the
pinned prompt, strictly alternating turns, every tool_result right after its tool_use) with
``cache_control`` breakpoints placed (:func:`~relevance_memory.clients._anthropic_messages.place_cache_breakpoints`),
check it (:func:`~relevance_memory.clients._anthropic_messages.check_anthropic_context`; an invalid request is
never sent), and record the reply and its usage: ``cache_read_input_tokens`` in
``record.provider_cached_tokens``, ``cache_creation_input_tokens`` in
``record.provider_cache_creation_tokens``. A streamed reply is recorded once the stream is
read to the end (or ``get_final_message()`` / ``until_done()`` / ``text_stream`` ran out).
With OpenTelemetry installed each call is a ``chat {model}`` span with
``gen_ai.provider.name = "anthropic"``, as the OpenAI client's (:mod:`relevance_memory._telemetry`).

The budget of each build is the memory's budget minus the ``tools`` schema (taken by the build
itself, ``build_context(tools=)``), the tool-use system prompt Anthropic adds with tools
(:data:`~relevance_memory.clients._anthropic_messages.TOOL_USE_SYSTEM_PROMPT_TOKENS`) and the few tokens of a
continuation turn (:meth:`_AnthropicSession.reserved_tokens`); the default memory counts messages at their
Anthropic cost (:class:`~relevance_memory.clients._anthropic_messages.AnthropicTokenCounter`), so every
request, as :func:`~relevance_memory.clients._anthropic_messages.anthropic_request_tokens` counts it, is within
the budget. Counts use an OpenAI encoding in place of Claude's tokenizer (not public): leave
a margin. Everything else — ``messages.count_tokens``, ``messages.batches``, ``beta``, other
keyword arguments — passes through unchanged and unmanaged.

One wrapper manages one conversation. This module imports nothing from ``anthropic``.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import warnings
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any, ClassVar

from .._config import MemoryConfig
from .._exceptions import InvalidMessageError, RelevanceMemoryError
from .._manager import BuiltContext, RelevanceMemoryManager
from .._telemetry import ModelCallSpan, model_call
from ._anthropic_messages import (
    CONTINUATION_TEXT,
    TOOL_USE_SYSTEM_PROMPT_TOKENS,
    AnthropicTokenCounter,
    CacheBreakpoint,
    _block,
    check_anthropic_context,
    convert_history,
    final_turn_thinking,
    from_anthropic,
    place_cache_breakpoints,
    starts_thinking,
    thinking_first,
    thinking_reserve,
    thinking_turn,
    to_anthropic,
)
from ._openai import _AsyncFedStream, _FedStream, _HelperStreamManager, _Passthrough, _Recorded
from ._session import MemorySession, OnDivergence, SessionView, field_of

__all__ = ["AsyncManagedAnthropic", "ManagedAnthropic"]


def _tools(kwargs: Mapping[str, Any]) -> list[Any] | None:
    tools = kwargs.get("tools")
    return list(tools) if isinstance(tools, (list, tuple)) else None


_FORMAT_TYPE = "output_format"
"""``type`` of the entry :func:`_counted_tools` adds for a structured-output schema (counted, never sent)."""


def _counted_tools(kwargs: Mapping[str, Any]) -> list[Any] | None:
    """What the build counts besides the messages: the request's ``tools``, plus its
    structured-output JSON schema when it has one (``messages.parse(output_format=Model)`` or
    ``output_config={"format": {...}}``: sent with every request, as the tools' schema is)."""
    tools = _tools(kwargs)
    fmt = kwargs.get("output_format")
    config = kwargs.get("output_config")
    schema: Any = None
    model_schema = getattr(fmt, "model_json_schema", None) if isinstance(fmt, type) else None
    if callable(model_schema):
        schema = model_schema()
    elif isinstance(config, Mapping) and isinstance(config.get("format"), Mapping):
        schema = dict(config["format"])
    if schema is None:
        return tools
    return [*(tools or []), {"type": _FORMAT_TYPE, "input_schema": schema}]


def _loop_thinking(memory: RelevanceMemoryManager, kwargs: Mapping[str, Any]) -> tuple[str, list[dict[str, Any]]] | None:
    """:func:`final_turn_thinking` of the memory when the request has extended thinking on
    (``thinking={"type": "enabled" | "adaptive", ...}``); ``None`` otherwise."""
    thinking = kwargs.get("thinking")
    if not isinstance(thinking, Mapping) or thinking.get("type") not in ("enabled", "adaptive"):
        return None
    return final_turn_thinking(memory.messages)


def _thinking_reserve(memory: RelevanceMemoryManager, built: BuiltContext, kwargs: Mapping[str, Any]) -> int:
    """:func:`thinking_reserve` of ``built`` for the request's :func:`_loop_thinking` (tokens)."""
    return thinking_reserve(_loop_thinking(memory, kwargs), built.messages, memory.tokenizer)


def record_anthropic_usage(built: BuiltContext, usage: Any) -> None:
    """Put Anthropic's ``cache_read_input_tokens`` / ``cache_creation_input_tokens`` (from a
    response's ``usage``) into the decision record of ``built``; nothing when absent."""
    read = field_of(usage, "cache_read_input_tokens") if usage is not None else None
    created = field_of(usage, "cache_creation_input_tokens") if usage is not None else None
    if read is not None:
        built.record.provider_cached_tokens = int(read)
    if created is not None:
        built.record.provider_cache_creation_tokens = int(created)


class _AnthropicSession(MemorySession):
    """A :class:`MemorySession` whose requests go out in Anthropic's shape (module doc)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.previous_keys: list[str] | None = None
        self.last_request: dict[str, Any] | None = None
        self.last_breakpoints: list[CacheBreakpoint] = []

    def _new_memory(self, overrides: dict[str, Any]) -> RelevanceMemoryManager:
        """The default memory counts messages at their Anthropic cost (:class:`AnthropicTokenCounter`)."""
        fields = {k: v for k, v in overrides.items() if k in MemoryConfig.model_fields}
        rest = {k: v for k, v in overrides.items() if k not in fields}
        base = rest.pop("config", None)
        config = MemoryConfig.create(**{**(base.model_dump() if base is not None else {}), **fields})
        inner = rest.pop("tokenizer", None)
        tokenizer = inner if isinstance(inner, AnthropicTokenCounter) else AnthropicTokenCounter(
            inner, encoding=config.resolved_encoding, image_tokens=config.image_tokens
        )
        return RelevanceMemoryManager(config, tokenizer=tokenizer, **rest)

    def reserved_tokens(self, memory: RelevanceMemoryManager, tools: Any) -> int:
        """What a request carries besides its messages and the tools schema (tokens): the
        tool-use system prompt Anthropic adds with tools, and a continuation turn (the build
        takes the schema itself)."""
        continuation = memory.tokenizer.count_message({"role": "user", "content": CONTINUATION_TEXT})
        real = [t for t in tools or () if not (isinstance(t, Mapping) and t.get("type") == _FORMAT_TYPE)]
        return (TOOL_USE_SYSTEM_PROMPT_TOKENS if real else 0) + continuation

    def budget_without(self, memory: RelevanceMemoryManager, tools: Any, tokens: int) -> int:
        """The build's budget (:meth:`MemorySession._budget`) less ``tokens`` more (tokens)."""
        budget = self._budget(memory, tools)
        return (memory.config.token_budget() if budget is None else budget) - tokens

    def request(self, memory: RelevanceMemoryManager, built: BuiltContext, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """``system``, ``messages`` and ``tools`` to send for ``built``, breakpoints placed, checked.

        Raises:
            RelevanceMemoryError: the request would be invalid (never expected: please report).
        """
        context = to_anthropic(built.messages)
        loop = _loop_thinking(memory, kwargs)
        turn = thinking_turn(context.messages, loop[0], anthropic=True) if loop is not None else None
        if loop is not None and isinstance(turn, dict) and not starts_thinking(turn):
            # the turn went out shortened (room for its thinking blocks was kept: _prepare)
            turn["content"] = thinking_first(turn["content"], loop[1])
        automatic = isinstance(kwargs.get("cache_control"), Mapping)
        with self.lock:
            placed = place_cache_breakpoints(
                context, _tools(kwargs), previous=self.previous_keys, counter=memory.tokenizer,
                min_tokens=memory.config.cache_policy.cache_min_tokens, automatic=automatic,
            )
            problems = check_anthropic_context(placed.messages, system=placed.system, tools=placed.tools,
                                               automatic_cache=automatic, thinking=loop is not None)
            if problems:
                raise RelevanceMemoryError(
                    f"internal error: the Anthropic request made from this context is invalid ({problems}); "
                    "please report this with the decision record"
                )
            sent: dict[str, Any] = {"messages": placed.messages}
            if placed.system is not None:
                sent["system"] = placed.system
            if placed.tools is not None:
                sent["tools"] = placed.tools
            self.previous_keys = placed.keys
            self.last_request = sent
            self.last_breakpoints = placed.breakpoints
            self.built(built)
        return sent

    def record_message(self, memory: RelevanceMemoryManager, message: Any, built: BuiltContext, span: ModelCallSpan) -> None:
        """Record an Anthropic ``Message`` (its usage in the record of ``built``, its content as
        the reply) and end the model call's ``span`` with it."""
        record_anthropic_usage(built, field_of(message, "usage"))
        span.end(message)
        content = field_of(message, "content")
        if content is None:
            return
        try:
            reply = from_anthropic([{"role": "assistant", "content": content}])[0]
        except InvalidMessageError as exc:
            warnings.warn(f"the model's reply was not recorded: {exc}", RuntimeWarning, stacklevel=3)
            return
        self.record_reply(memory, reply)


@contextlib.contextmanager
def _named(origins: list[int | None]) -> Iterator[None]:
    """Re-raise an ingest error with the index of the caller's Anthropic message."""
    try:
        yield
    except InvalidMessageError as exc:
        if type(exc) is not InvalidMessageError or exc.index is None or not 0 <= exc.index < len(origins):
            raise
        origin = origins[exc.index]
        where = "the system prompt" if origin is None else f"messages[{origin}]"
        raise InvalidMessageError(f"{exc.reason} (in {where})", index=origin) from None


def _split(kwargs: dict[str, Any]) -> tuple[list[dict[str, Any]], list[int | None], dict[str, Any]]:
    """The store form of ``messages`` / ``system`` and the other arguments."""
    rest = dict(kwargs)
    history = rest.pop("messages")
    system = rest.pop("system", None)
    store, origins = convert_history(list(history), system)
    return store, origins, rest


def _prepare(session: _AnthropicSession, kwargs: dict[str, Any]) -> tuple[RelevanceMemoryManager, BuiltContext, dict[str, Any]]:
    store, origins, rest = _split(kwargs)
    tools = _counted_tools(rest)
    with _named(origins):
        memory, built = session.prepare(store, rest.get("model"), tools)
    reserve = _thinking_reserve(memory, built, rest)
    if reserve:  # built again with room for the final turn's thinking blocks, put back by request()
        with session.lock:
            built = memory.build_context(budget=session.budget_without(memory, tools, reserve), tools=tools)
    return memory, built, {**rest, **session.request(memory, built, rest)}


async def _aprepare(
    session: _AnthropicSession, kwargs: dict[str, Any]
) -> tuple[RelevanceMemoryManager, BuiltContext, dict[str, Any]]:
    store, origins, rest = _split(kwargs)
    tools = _counted_tools(rest)
    with _named(origins):
        memory, built = await session.aprepare(store, rest.get("model"), tools)
    reserve = _thinking_reserve(memory, built, rest)
    if reserve:  # as _prepare
        built = await memory.abuild_context(budget=session.budget_without(memory, tools, reserve), tools=tools)
    return memory, built, {**rest, **session.request(memory, built, rest)}


def _span(call: Mapping[str, Any], built: BuiltContext, *, stream: bool) -> ModelCallSpan:
    """The span of the model call that sends ``call`` (:func:`~relevance_memory._telemetry.model_call`)."""
    return model_call(call.get("model"), built, stream=stream, provider="anthropic")


# --------------------------------------------------------------------------- streamed replies
class _EventAccumulator:
    """Rebuilds the reply from raw stream events (``message_start`` … ``message_stop``)."""

    def __init__(self) -> None:
        self.blocks: dict[int, dict[str, Any]] = {}
        self.partial_json: dict[int, str] = {}
        self.usage: dict[str, Any] = {}
        self.head: dict[str, Any] = {}  # id, model and stop reason, for the model call's trace span
        self.started = False

    def _take_usage(self, usage: Any) -> None:
        if usage is None:
            return
        for key in ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"):
            value = field_of(usage, key)
            if value is not None:
                self.usage[key] = value

    def feed(self, event: Any) -> None:
        kind = field_of(event, "type")
        index = field_of(event, "index")
        if kind == "message_start":
            self.started = True
            message = field_of(event, "message")
            self.head.update({key: field_of(message, key) for key in ("id", "model")})
            self._take_usage(field_of(message, "usage"))
        elif kind == "content_block_start":
            self.blocks[index] = _block(field_of(event, "content_block"), "content_block")
        elif kind == "content_block_delta" and index in self.blocks:
            self._delta(self.blocks[index], index, field_of(event, "delta"))
        elif kind == "content_block_stop" and self.partial_json.get(index):
            with contextlib.suppress(ValueError):  # a cut-off stream: the input stays as the block started
                self.blocks[index]["input"] = json.loads(self.partial_json[index])
        elif kind == "message_delta":
            self.head["stop_reason"] = field_of(field_of(event, "delta"), "stop_reason")
            self._take_usage(field_of(event, "usage"))

    def _delta(self, block: dict[str, Any], index: int, delta: Any) -> None:
        kind = field_of(delta, "type")
        if kind == "text_delta":
            block["text"] = block.get("text", "") + field_of(delta, "text", "")
        elif kind == "input_json_delta":
            self.partial_json[index] = self.partial_json.get(index, "") + field_of(delta, "partial_json", "")
        elif kind == "thinking_delta":
            block["thinking"] = block.get("thinking", "") + field_of(delta, "thinking", "")
        elif kind == "signature_delta":
            block["signature"] = field_of(delta, "signature")
        elif kind == "citations_delta":
            block.setdefault("citations", []).append(_block(field_of(delta, "citation"), "citation"))

    def message(self) -> dict[str, Any] | None:
        """The reply as ``{"id", "model", "stop_reason", "content": [...], "usage": {...}}``, or
        ``None`` when nothing started."""
        if not self.started:
            return None
        return {**self.head, "content": [self.blocks[i] for i in sorted(self.blocks)], "usage": self.usage}


class _EventStreamBase(_Recorded):
    """What the sync and async raw-event streams share: the accumulator, the record-once step."""

    _session: _AnthropicSession

    def __init__(
        self, stream: Any, session: _AnthropicSession, memory: RelevanceMemoryManager, build: BuiltContext, span: ModelCallSpan
    ) -> None:
        super().__init__(stream, session, memory, build, span)
        self._acc = _EventAccumulator()

    def _finish(self) -> None:
        if not self._claim():
            return
        reply = self._acc.message()
        if reply is None:
            self._span.end()
        else:
            self._session.record_message(self._memory, reply, self.build, self._span)


class _EventStream(_EventStreamBase, _FedStream):
    """Wraps the SDK's ``Stream`` of raw events (``create(stream=True)``): events pass unchanged;
    the reply is recorded once the stream is exhausted."""


class _MessageStream(_Recorded):
    """Wraps the SDK's ``MessageStream`` (``messages.stream``): its events and ``text_stream``
    pass unchanged; the final message is recorded once the stream is read to the end."""

    _session: _AnthropicSession

    def _finish(self) -> None:
        if self._claim():
            self._session.record_message(self._memory, self._wrapped.get_final_message(), self.build, self._span)

    def __iter__(self) -> Iterator[Any]:
        yield from self._wrapped
        self._finish()

    def __next__(self) -> Any:
        try:
            return next(self._wrapped)
        except StopIteration:
            self._finish()
            raise

    @property
    def text_stream(self) -> Iterator[str]:
        """The SDK's text deltas; the reply is recorded when they run out."""
        yield from self._wrapped.text_stream
        self._finish()

    def get_final_message(self) -> Any:
        """The SDK's accumulated message (reads the rest of the stream); records the reply."""
        message = self._wrapped.get_final_message()
        self._finish()
        return message

    def get_final_text(self) -> str:
        """The reply's text (reads the rest of the stream); records the reply."""
        self.until_done()
        return str(self._wrapped.get_final_text())

    def until_done(self) -> None:
        """Read the stream to the end and record the reply."""
        self._wrapped.until_done()
        self._finish()

    def __enter__(self) -> _MessageStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self._span.end()
        self._wrapped.close()


class _AsyncEventStream(_EventStreamBase, _AsyncFedStream):
    """Wraps the SDK's ``AsyncStream`` of raw events (``await create(stream=True)``)."""


class _AsyncMessageStream(_Recorded):
    """Wraps the SDK's ``AsyncMessageStream``; the final message is recorded once read to the end."""

    _session: _AnthropicSession

    async def _finish(self) -> None:
        if self._claim():
            self._session.record_message(self._memory, await self._wrapped.get_final_message(), self.build, self._span)

    async def __aiter__(self) -> AsyncIterator[Any]:
        async for event in self._wrapped:
            yield event
        await self._finish()

    @property
    async def text_stream(self) -> AsyncIterator[str]:
        """The SDK's text deltas; the reply is recorded when they run out."""
        async for text in self._wrapped.text_stream:
            yield text
        await self._finish()

    async def get_final_message(self) -> Any:
        """The SDK's accumulated message (reads the rest of the stream); records the reply."""
        message = await self._wrapped.get_final_message()
        await self._finish()
        return message

    async def get_final_text(self) -> str:
        """The reply's text (reads the rest of the stream); records the reply."""
        await self.until_done()
        return str(await self._wrapped.get_final_text())

    async def until_done(self) -> None:
        """Read the stream to the end and record the reply."""
        await self._wrapped.until_done()
        await self._finish()

    async def __aenter__(self) -> _AsyncMessageStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._span.end()
        await self._wrapped.close()


# --------------------------------------------------------------------------- resources
class _Messages(_Passthrough):
    def __init__(self, wrapped: Any, session: _AnthropicSession) -> None:
        self._wrapped = wrapped
        self._session = session

    def create(self, **kwargs: Any) -> Any:
        """``messages.create`` with the managed context (module doc); same arguments and result."""
        memory, built, call = _prepare(self._session, kwargs)
        streamed = call.get("stream") is True
        span = _span(call, built, stream=streamed)
        with span.sending():
            out = self._wrapped.create(**call)
        if streamed:
            return _EventStream(out, self._session, memory, built, span)
        self._session.record_message(memory, out, built, span)
        return out

    def parse(self, **kwargs: Any) -> Any:
        """``messages.parse`` with the managed context (module doc); same arguments and result."""
        memory, built, call = _prepare(self._session, kwargs)
        span = _span(call, built, stream=False)
        with span.sending():
            out = self._wrapped.parse(**call)
        self._session.record_message(memory, out, built, span)
        return out

    def stream(self, **kwargs: Any) -> Any:
        """``messages.stream`` (the SDK's streaming helper) with the managed context: a context
        manager like the SDK's, whose stream records the reply once read to the end."""
        session = self._session
        memory, built, call = _prepare(session, kwargs)
        span = _span(call, built, stream=True)
        manager = self._wrapped.stream(**call)
        return _HelperStreamManager(manager, lambda stream: _MessageStream(stream, session, memory, built, span), span)


class _AsyncMessages(_Passthrough):
    def __init__(self, wrapped: Any, session: _AnthropicSession) -> None:
        self._wrapped = wrapped
        self._session = session

    async def create(self, **kwargs: Any) -> Any:
        """Async ``messages.create`` with the managed context (built with ``abuild_context``)."""
        memory, built, call = await _aprepare(self._session, kwargs)
        streamed = call.get("stream") is True
        span = _span(call, built, stream=streamed)
        with span.sending():
            out = await self._wrapped.create(**call)
        if streamed:
            return _AsyncEventStream(out, self._session, memory, built, span)
        self._session.record_message(memory, out, built, span)
        return out

    async def parse(self, **kwargs: Any) -> Any:
        """Async ``messages.parse`` with the managed context (built with ``abuild_context``)."""
        memory, built, call = await _aprepare(self._session, kwargs)
        span = _span(call, built, stream=False)
        with span.sending():
            out = await self._wrapped.parse(**call)
        self._session.record_message(memory, out, built, span)
        return out

    def stream(self, **kwargs: Any) -> _AsyncStreamManager:
        """Async ``messages.stream``, used like the SDK's: ``async with client.messages.stream(...)
        as stream``; the history is recorded and the context built (awaited) on ``async with``."""
        return _AsyncStreamManager(self, kwargs)


class _AsyncStreamManager:
    """``async with`` target of the managed async ``stream``: records, builds, sends, yields a
    recording stream; closes the SDK's manager (and the model call's span) on exit."""

    def __init__(self, messages: _AsyncMessages, kwargs: dict[str, Any]) -> None:
        self._messages = messages
        self._kwargs = kwargs
        self._manager: Any = None
        self._span: ModelCallSpan | None = None

    async def __aenter__(self) -> _AsyncMessageStream:
        session = self._messages._session
        memory, built, call = await _aprepare(session, self._kwargs)
        self._span = span = _span(call, built, stream=True)
        self._manager = manager = self._messages._wrapped.stream(**call)
        with span.sending():
            stream = await manager.__aenter__()
        return _AsyncMessageStream(stream, session, memory, built, span)

    async def __aexit__(self, *exc: Any) -> Any:
        if self._span is not None:
            self._span.end()  # a stream left before its end: the span ends without a reply
        if self._manager is not None:
            return await self._manager.__aexit__(*exc)
        return None


# --------------------------------------------------------------------------- clients
class _ManagedAnthropicBase(SessionView, _Passthrough):
    _messages_class: ClassVar[type[_Messages] | type[_AsyncMessages]]
    _session: _AnthropicSession

    def __init__(
        self,
        client: Any,
        memory: RelevanceMemoryManager | None = None,
        *,
        on_build: Callable[[BuiltContext], None] | None = None,
        on_divergence: OnDivergence = "resync",
        **config: Any,
    ) -> None:
        if memory is not None and config:
            raise ValueError("pass either memory= or MemoryConfig fields, not both")
        if memory is not None and not isinstance(memory.tokenizer, AnthropicTokenCounter):
            warnings.warn(
                "this memory counts tool results as OpenAI tool messages, below their cost as Anthropic "
                "tool_result blocks, so a request may exceed the budget by a few tokens per tool result; "
                "make the memory with tokenizer=AnthropicTokenCounter()",
                UserWarning,
                stacklevel=3,
            )
        self._wrapped = client
        self._session = _AnthropicSession(memory, on_build=on_build, on_divergence=on_divergence, overrides=config)
        self.messages = type(self)._messages_class(client.messages, self._session)

    @property
    def client(self) -> Any:
        """The wrapped Anthropic client."""
        return self._wrapped

    @property
    def last_request(self) -> dict[str, Any] | None:
        """``system``, ``messages`` and ``tools`` of the latest request as sent (breakpoints
        included; ``None`` before the first)."""
        return self._session.last_request

    @property
    def last_breakpoints(self) -> list[CacheBreakpoint]:
        """Where the latest request's ``cache_control`` breakpoints went, and why."""
        return list(self._session.last_breakpoints)


class ManagedAnthropic(_ManagedAnthropicBase):
    """An ``anthropic.Anthropic`` client whose ``messages.create`` sends a managed context.

    Args:
        client: an ``anthropic.Anthropic`` (or any object with the same ``messages``).
        memory: the memory to use (make it with ``tokenizer=AnthropicTokenCounter()``); default
            a new :class:`RelevanceMemoryManager` built with ``**config`` and, unless ``model``
            is given there, the ``model`` of the first request.
        on_build: called with each :class:`BuiltContext` before its request is sent.
        on_divergence: ``"resync"`` (default) or ``"raise"`` when the history no longer
            extends the memory (:mod:`relevance_memory.clients._session`).
        **config: :class:`MemoryConfig` fields for the default memory, e.g.
            ``max_input_tokens=20_000``, ``keep_recent=4``.

    Raises (before sending): :class:`InvalidMessageError` (``index`` the caller's message),
    :class:`ContextOverflowError`, :class:`HistoryDivergedError`; and whatever the client raises.
    """

    _messages_class = _Messages


class AsyncManagedAnthropic(_ManagedAnthropicBase):
    """An ``anthropic.AsyncAnthropic`` client whose ``messages.create`` sends a managed context.

    Same arguments and behaviour as :class:`ManagedAnthropic`; builds are awaited
    (:meth:`RelevanceMemoryManager.abuild_context`) and streams are async.
    """

    _messages_class = _AsyncMessages


def manage_anthropic(
    client: Any,
    memory: RelevanceMemoryManager | None = None,
    *,
    on_build: Callable[[BuiltContext], None] | None = None,
    on_divergence: OnDivergence = "resync",
    **config: Any,
) -> ManagedAnthropic | AsyncManagedAnthropic:
    """:func:`~relevance_memory.manage` for an Anthropic client: :class:`AsyncManagedAnthropic`
    for ``anthropic.AsyncAnthropic`` (or a client whose ``messages.create`` is a coroutine
    function), else :class:`ManagedAnthropic`."""
    create = inspect.unwrap(client.messages.create)
    is_async = inspect.iscoroutinefunction(create) or any(
        kind.__name__.startswith("Async") for kind in type(client).__mro__
    )
    cls = AsyncManagedAnthropic if is_async else ManagedAnthropic
    return cls(client, memory, on_build=on_build, on_divergence=on_divergence, **config)

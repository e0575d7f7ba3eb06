"""Managed OpenAI client: an existing agent loop gets a managed context with one line.

    client = manage(openai.OpenAI(), model="gpt-4o")        # or AsyncOpenAI() (clients/_manage.py)
    reply = client.chat.completions.create(model="gpt-4o", messages=history, tools=tools)
    client.last_record                                     # the DecisionRecord of that call

``chat.completions.create`` (and ``parse``, and the SDK's ``stream`` helper) record the new
messages of ``messages`` into the memory, send the **built context** in their place, record
the model's reply (choice 0, tool calls included; a streamed reply once the stream is read to
the end, or once ``get_final_completion()`` / ``until_done()`` returns) and keep the decision
record on the wrapper (``last_build`` / ``last_record``, and the ``on_build`` callback).
Everything else — other resources (the Responses API among them), other keyword arguments,
``with_raw_response`` — passes through unchanged and unmanaged (so does a client made by
``with_options``: wrap that one too).

This module is a thin seam: it imports nothing from ``openai`` (the client is duck-typed)
and all context logic stays in :class:`RelevanceMemoryManager`. With OpenTelemetry installed,
each model call is a ``chat {model}`` span carrying ``gen_ai.conversation.compacted`` when its
context is not the whole history, and the response's usage (:mod:`relevance_memory._telemetry`).

The history is synced with the memory by prefix (:mod:`relevance_memory.clients._session`: an
edited or trimmed history resyncs, or raises :class:`HistoryDivergedError` with
``on_divergence="raise"``). One wrapper manages one conversation (concurrent requests of it,
from threads or asyncio tasks, are safe: see :mod:`relevance_memory.clients._session`); do not share
it between different conversations.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from typing import Any, ClassVar, TypeVar

from .._exceptions import InvalidMessageError
from .._manager import BuiltContext, RelevanceMemoryManager
from .._record import DecisionRecord
from .._telemetry import ModelCallSpan, model_call
from ._session import MemorySession, OnDivergence, SessionView, field_of, record_usage

__all__ = ["AsyncManagedOpenAI", "ManagedOpenAI"]


def _history(messages: Iterable[Any]) -> list[Any]:
    """The request's ``messages`` as a list, refused before anything is recorded or sent when
    it cannot be a chat history.

    Raises:
        InvalidMessageError: ``messages`` is empty (the API would reject it; an empty history
            would also reset the memory), or one message (a mapping, a string) instead of a list.
    """
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Iterable):
        raise InvalidMessageError(
            f"messages must be a list of chat messages, got {type(messages).__name__}; wrap one message in a list"
        )
    history = list(messages)
    if not history:
        raise InvalidMessageError(
            "messages is empty: a request needs at least one message (pass the whole history, "
            "system prompt and user message included, on every call)"
        )
    return history


def _format_schema(response_format: Any) -> Any:
    """The JSON schema a ``response_format`` sends (a pydantic model given to ``parse``, or a
    ``json_schema`` format dict); ``None`` for none, ``text`` or ``json_object``."""
    if isinstance(response_format, type):
        schema = getattr(response_format, "model_json_schema", None)
        return {"name": response_format.__name__, "schema": schema()} if callable(schema) else None
    if isinstance(response_format, Mapping) and isinstance(response_format.get("json_schema"), Mapping):
        return dict(response_format["json_schema"])
    return None


def counted_tools(kwargs: Mapping[str, Any]) -> Any:
    """What the budget counts besides the messages (the build takes its tokens off): the
    request's ``tools``, plus its ``response_format`` JSON schema when it has one (sent with
    every request, as the tools' schema is)."""
    tools = kwargs.get("tools")
    schema = _format_schema(kwargs.get("response_format"))
    if schema is None:
        return tools
    listed = list(tools) if isinstance(tools, (list, tuple)) else []
    return [*listed, {"type": "function", "function": {"name": "response_format", "parameters": schema}}]


class _ReplyAccumulator:
    """Rebuilds choice 0's assistant message from streamed ``ChatCompletionChunk`` deltas."""

    def __init__(self) -> None:
        self.content: list[str] = []
        self.refusal: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.seen = False
        self.usage: Any = None
        self.head: dict[str, Any] = {}  # id, model and finish reason, for the model call's trace span

    def feed(self, chunk: Any) -> None:
        if field_of(chunk, "usage") is not None:  # the last chunk, with stream_options={"include_usage": True}
            self.usage = field_of(chunk, "usage")
        for key in ("id", "model"):
            self.head.setdefault(key, field_of(chunk, key))
        for choice in field_of(chunk, "choices") or ():
            if (field_of(choice, "index") or 0) != 0:
                continue
            if field_of(choice, "finish_reason"):
                self.head["choices"] = [{"finish_reason": field_of(choice, "finish_reason")}]
            delta = field_of(choice, "delta")
            if delta is None:
                continue
            self.seen = True
            if field_of(delta, "content"):
                self.content.append(field_of(delta, "content"))
            if field_of(delta, "refusal"):
                self.refusal.append(field_of(delta, "refusal"))
            for call in field_of(delta, "tool_calls") or ():
                slot = self.calls.setdefault(
                    field_of(call, "index") or 0, {"id": None, "type": "function", "name": "", "arguments": ""}
                )
                if field_of(call, "id"):
                    slot["id"] = field_of(call, "id")
                if field_of(call, "type"):
                    slot["type"] = field_of(call, "type")
                function = field_of(call, "function")
                if function is not None:
                    slot["name"] += field_of(function, "name") or ""
                    slot["arguments"] += field_of(function, "arguments") or ""

    def message(self) -> dict[str, Any] | None:
        """The accumulated reply as a request dict, or ``None`` when no delta arrived."""
        if not self.seen:
            return None
        content: str | None = "".join(self.content) or None
        out: dict[str, Any] = {"role": "assistant", "content": content}
        if self.calls:
            out["tool_calls"] = [
                {"id": c["id"], "type": c["type"], "function": {"name": c["name"], "arguments": c["arguments"]}}
                for _, c in sorted(self.calls.items())
            ]
        elif content is None:
            out["content"] = "".join(self.refusal)
        return out


class _Passthrough:
    """Attribute access falls through to the wrapped object."""

    _wrapped: Any

    def __getattr__(self, name: str) -> Any:
        if name == "_wrapped":  # not set yet (e.g. during copy): no recursion
            raise AttributeError(name)
        return getattr(self._wrapped, name)


# --------------------------------------------------------------------------- sync
_S = TypeVar("_S", bound="_FedStream")
_A = TypeVar("_A", bound="_AsyncFedStream")


class _Recorded(_Passthrough):
    """What every recording stream shares: the wrapped SDK stream, the context sent with the
    request, and a record-once guard (:meth:`_claim`)."""

    def __init__(
        self, stream: Any, session: MemorySession, memory: RelevanceMemoryManager, build: BuiltContext, span: ModelCallSpan
    ) -> None:
        self._wrapped = stream
        self._session = session
        self._memory = memory
        self._done = False
        self._span = span  # the model call's trace span, ended when the reply is recorded or the stream closed
        self.build = build
        """The :class:`BuiltContext` sent with this request."""

    @property
    def record(self) -> DecisionRecord:
        """The decision record of the context sent with this request."""
        return self.build.record

    def _claim(self) -> bool:
        """``True`` the first time only: the reply is recorded once."""
        first, self._done = not self._done, True
        return first


class _StreamBase(_Recorded):
    """What the sync and async ``create(stream=True)`` streams share: the reply accumulator
    and the record-once step run when the stream is exhausted."""

    def __init__(
        self, stream: Any, session: MemorySession, memory: RelevanceMemoryManager, build: BuiltContext, span: ModelCallSpan
    ) -> None:
        super().__init__(stream, session, memory, build, span)
        self._acc = _ReplyAccumulator()

    def _finish(self) -> None:
        if self._claim():
            record_usage(self.build, self._acc.usage)
            self._session.record_reply(self._memory, self._acc.message())
            self._span.end(self._acc.head, usage=self._acc.usage)


class _FedStream(_Recorded):
    """A sync SDK stream whose items (chunks, raw events) pass unchanged, each fed to the
    subclass's reply accumulator ``_acc``; the reply is recorded (``_finish``) once the stream is
    exhausted. Shared by the OpenAI and Anthropic clients."""

    _acc: Any

    def _finish(self) -> None:
        raise NotImplementedError

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        try:
            item = next(self._wrapped)
        except StopIteration:
            self._finish()
            raise
        self._acc.feed(item)
        return item

    def __enter__(self: _S) -> _S:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the HTTP response; a reply not read to the end is not recorded."""
        self._span.end()
        self._wrapped.close()


class _AsyncFedStream(_Recorded):
    """The async twin of :class:`_FedStream` (an SDK ``AsyncStream``)."""

    _acc: Any

    def _finish(self) -> None:
        raise NotImplementedError

    def __aiter__(self) -> AsyncIterator[Any]:
        return self

    async def __anext__(self) -> Any:
        try:
            item = await self._wrapped.__anext__()
        except StopAsyncIteration:
            self._finish()
            raise
        self._acc.feed(item)
        return item

    async def __aenter__(self: _A) -> _A:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the HTTP response; a reply not read to the end is not recorded."""
        self._span.end()
        await self._wrapped.close()


class _RecordingStream(_StreamBase, _FedStream):
    """Wraps an SDK ``Stream``: yields its chunks unchanged, records the reply when exhausted."""


class _HelperStream(_Recorded):
    """Wraps the SDK's ``ChatCompletionStream`` (``chat.completions.stream``): its events pass
    unchanged; the final completion is recorded once the stream is read to the end."""

    def _finish(self) -> None:
        if self._claim():
            completion = self._wrapped.get_final_completion()
            self._session.record_response(self._memory, completion, self.build)
            self._span.end(completion)

    def __iter__(self) -> Iterator[Any]:
        yield from self._wrapped
        self._finish()

    def __next__(self) -> Any:
        try:
            return next(self._wrapped)
        except StopIteration:
            self._finish()
            raise

    def get_final_completion(self) -> Any:
        """The SDK's accumulated completion (reads the rest of the stream); records the reply."""
        completion = self._wrapped.get_final_completion()
        self._finish()
        return completion

    def until_done(self) -> _HelperStream:
        """Read the stream to the end and record the reply."""
        self._wrapped.until_done()
        self._finish()
        return self

    def __enter__(self) -> _HelperStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self._span.end()
        self._wrapped.close()


class _HelperStreamManager:
    """Wraps the SDK's stream manager (OpenAI's ``ChatCompletionStreamManager``, Anthropic's
    ``MessageStreamManager``): entering it sends the request (with the context built when
    ``stream`` was called) and yields a recording stream; a request that fails ends the
    model call's span with the error."""

    def __init__(self, manager: Any, wrap: Callable[[Any], Any], span: ModelCallSpan) -> None:
        self._manager = manager
        self._wrap = wrap
        self._span = span

    def __enter__(self) -> Any:
        with self._span.sending():
            stream = self._manager.__enter__()
        return self._wrap(stream)

    def __exit__(self, *exc: Any) -> Any:
        self._span.end()  # a stream left before its end: the span ends without a reply
        return self._manager.__exit__(*exc)


class _Completions(_Passthrough):
    def __init__(self, wrapped: Any, session: MemorySession) -> None:
        self._wrapped = wrapped
        self._session = session

    def _build(self, messages: Iterable[Any], kwargs: dict[str, Any]) -> tuple[RelevanceMemoryManager, BuiltContext]:
        """Record the new messages of ``messages`` and build the context for this request."""
        return self._session.prepare(_history(messages), kwargs.get("model"), counted_tools(kwargs))

    def _call(self, method: str, *, messages: Iterable[Any], **kwargs: Any) -> Any:
        session = self._session
        memory, built = self._build(messages, kwargs)
        span = model_call(kwargs.get("model"), built, stream=bool(kwargs.get("stream")))
        with span.sending():
            out = getattr(self._wrapped, method)(messages=session.built(built), **kwargs)
        if kwargs.get("stream"):
            return _RecordingStream(out, session, memory, built, span)
        session.record_response(memory, out, built)
        span.end(out)
        return out

    def create(self, *, messages: Iterable[Any], **kwargs: Any) -> Any:
        """``chat.completions.create`` with the managed context (module doc); same arguments and result."""
        return self._call("create", messages=messages, **kwargs)

    def parse(self, *, messages: Iterable[Any], **kwargs: Any) -> Any:
        """``chat.completions.parse`` with the managed context (module doc); same arguments and result."""
        return self._call("parse", messages=messages, **kwargs)

    def stream(self, *, messages: Iterable[Any], **kwargs: Any) -> Any:
        """``chat.completions.stream`` (the SDK's streaming helper) with the managed context.

        Returns a context manager like the SDK's; the stream it yields records the reply once
        read to the end (or after ``get_final_completion()`` / ``until_done()``).
        """
        session = self._session
        memory, built = self._build(messages, kwargs)
        span = model_call(kwargs.get("model"), built, stream=True)
        manager = self._wrapped.stream(messages=session.built(built), **kwargs)
        return _HelperStreamManager(manager, lambda stream: _HelperStream(stream, session, memory, built, span), span)


_CompletionsFactory = Callable[[Any, MemorySession], _Passthrough]


class _Chat(_Passthrough):
    def __init__(self, wrapped: Any, session: MemorySession, completions: _CompletionsFactory) -> None:
        self._wrapped = wrapped
        self.completions = completions(wrapped.completions, session)


class _ManagedBase(SessionView, _Passthrough):
    """What the sync and async managed clients share: the session, the wrapped ``chat``."""

    _completions: ClassVar[type[_Completions] | type[_AsyncCompletions]]

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
        self._wrapped = client
        self._session = MemorySession(memory, on_build=on_build, on_divergence=on_divergence, overrides=config)
        self.chat = _Chat(client.chat, self._session, type(self)._completions)

    @property
    def client(self) -> Any:
        """The wrapped OpenAI client."""
        return self._wrapped


class ManagedOpenAI(_ManagedBase):
    """An ``openai.OpenAI`` client whose ``chat.completions.create`` sends a managed context.

    Args:
        client: an ``openai.OpenAI`` (or any object with the same ``chat.completions``).
        memory: the memory to use; default a new :class:`RelevanceMemoryManager` built
            with ``**config`` and, unless ``model`` is given there, the ``model`` of the
            first request (its context window sets the budget: SPEC §3 defaults).
        on_build: called with each :class:`BuiltContext` before its request is sent.
        on_divergence: ``"resync"`` (default) or ``"raise"``; see the module doc.
        **config: :class:`MemoryConfig` fields for the default memory, e.g.
            ``model="gpt-4o"``, ``max_input_tokens=8000``, ``keep_recent=4``.

    The budget of each build is the memory's budget minus the tokens of the request's
    ``tools`` schema (tokens). Raises before sending: :class:`InvalidMessageError` for an
    empty ``messages`` (or one message not in a list), :class:`ConfigError` when the ``tools``
    schema leaves no room, and what the memory raises (:class:`InvalidMessageError`,
    :class:`ContextOverflowError`, :class:`HistoryDivergedError`); then whatever the client raises.
    """

    _completions = _Completions


# --------------------------------------------------------------------------- async
class _AsyncRecordingStream(_StreamBase, _AsyncFedStream):
    """Wraps an SDK ``AsyncStream``: yields its chunks unchanged, records the reply when exhausted."""


class _AsyncHelperStream(_Recorded):
    """Wraps the SDK's ``AsyncChatCompletionStream``: events pass unchanged; the final
    completion is recorded once the stream is read to the end."""

    async def _finish(self) -> None:
        if self._claim():
            completion = await self._wrapped.get_final_completion()
            self._session.record_response(self._memory, completion, self.build)
            self._span.end(completion)

    async def __aiter__(self) -> AsyncIterator[Any]:
        async for event in self._wrapped:
            yield event
        await self._finish()

    async def get_final_completion(self) -> Any:
        """The SDK's accumulated completion (reads the rest of the stream); records the reply."""
        completion = await self._wrapped.get_final_completion()
        await self._finish()
        return completion

    async def until_done(self) -> _AsyncHelperStream:
        """Read the stream to the end and record the reply."""
        await self._wrapped.until_done()
        await self._finish()
        return self

    async def __aenter__(self) -> _AsyncHelperStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._span.end()
        await self._wrapped.close()


class _AsyncCompletions(_Passthrough):
    def __init__(self, wrapped: Any, session: MemorySession) -> None:
        self._wrapped = wrapped
        self._session = session

    async def _abuild(self, memory: RelevanceMemoryManager, kwargs: dict[str, Any]) -> BuiltContext:
        """Build the context for this request (awaited: no blocking call)."""
        return await memory.abuild_context(tools=counted_tools(kwargs))

    async def _call(self, method: str, *, messages: Iterable[Any], **kwargs: Any) -> Any:
        session = self._session
        memory, built = await session.aprepare(_history(messages), kwargs.get("model"), counted_tools(kwargs))
        span = model_call(kwargs.get("model"), built, stream=bool(kwargs.get("stream")))
        with span.sending():
            out = await getattr(self._wrapped, method)(messages=session.built(built), **kwargs)
        if kwargs.get("stream"):
            return _AsyncRecordingStream(out, session, memory, built, span)
        session.record_response(memory, out, built)
        span.end(out)
        return out

    async def create(self, *, messages: Iterable[Any], **kwargs: Any) -> Any:
        """Async ``chat.completions.create`` with the managed context (built with ``abuild_context``)."""
        return await self._call("create", messages=messages, **kwargs)

    async def parse(self, *, messages: Iterable[Any], **kwargs: Any) -> Any:
        """Async ``chat.completions.parse`` with the managed context (built with ``abuild_context``)."""
        return await self._call("parse", messages=messages, **kwargs)

    def stream(self, *, messages: Iterable[Any], **kwargs: Any) -> _AsyncHelperStreamManager:
        """Async ``chat.completions.stream`` with the managed context, used like the SDK's:
        ``async with client.chat.completions.stream(...) as stream``. The history is recorded
        now; the context is built (awaited, ``abuild_context``) and sent on ``async with``."""
        return _AsyncHelperStreamManager(self, messages, kwargs)


class _AsyncHelperStreamManager:
    """``async with`` target of the managed async ``stream``: builds, sends, yields a
    recording stream; closes the SDK's manager on exit."""

    def __init__(self, completions: _AsyncCompletions, messages: Iterable[Any], kwargs: dict[str, Any]) -> None:
        session = completions._session
        self._completions = completions
        self._memory = session.sync(_history(messages), kwargs.get("model"))
        self._kwargs = kwargs
        self._manager: Any = None
        self._span: ModelCallSpan | None = None

    async def __aenter__(self) -> _AsyncHelperStream:
        session = self._completions._session
        built = await self._completions._abuild(self._memory, self._kwargs)
        self._span = span = model_call(self._kwargs.get("model"), built, stream=True)
        self._manager = self._completions._wrapped.stream(messages=session.built(built), **self._kwargs)
        with span.sending():
            stream = await self._manager.__aenter__()
        return _AsyncHelperStream(stream, session, self._memory, built, span)

    async def __aexit__(self, *exc: Any) -> Any:
        if self._span is not None:
            self._span.end()  # a stream left before its end: the span ends without a reply
        if self._manager is not None:
            return await self._manager.__aexit__(*exc)
        return None


class AsyncManagedOpenAI(_ManagedBase):
    """An ``openai.AsyncOpenAI`` client whose ``chat.completions.create`` sends a managed context.

    Same arguments and behaviour as :class:`ManagedOpenAI`; builds are awaited with
    :meth:`RelevanceMemoryManager.abuild_context` (no blocking call in the request path)
    and streams are ``AsyncStream`` wrappers recorded once consumed.
    """

    _completions = _AsyncCompletions

"""One managed conversation: the memory kept in sync with the caller's growing history.

Used by every wrapper — the managed OpenAI client (:mod:`relevance_memory.clients._openai`), the
LangChain hook and the OpenAI Agents session (:mod:`relevance_memory.adapters`):

- :class:`MemorySession` holds the memory, records the new messages of each call's
  history (sync by prefix), keeps the latest build and records the model's reply;
- :class:`SessionView` is what each wrapper exposes about it (``memory``, ``last_build``,
  ``last_record``, ``set_goal``);
- :func:`message_to_dict` (from :mod:`relevance_memory._io`, shared with ingest) turns SDK
  message objects into request dicts, and
  :func:`project_built` maps a built context back onto the caller's own objects.

Sync rule (by prefix). The caller passes its whole, growing history on every call. The
memory holds every message recorded so far (earlier inputs and the replies recorded
here). Messages are compared by role, content, tool calls (id, name, arguments),
``tool_call_id`` and ``name`` — so a reply appended as the SDK's message object, its
``model_dump()`` or a hand-written dict all match the recorded one; ``content`` ``None``
and ``""`` are equal. Then:

- the history starts with every recorded message → the rest is new and is recorded. A
  message object passed on an earlier call is recognised by identity, without reading it
  (:mod:`relevance_memory.store._history`), so a call costs O(new messages) plus one pointer
  comparison per recorded message; an object edited in place after it was recorded is not
  read again (the memory keeps the copy it took, as ``add`` does) — pass a new object to
  edit a message;
- otherwise the history *diverged* (an edited, trimmed or reordered message, or a reply
  that was not appended, e.g. a retry). With ``on_divergence="resync"`` (default) the
  memory starts over from the given history (:meth:`RelevanceMemoryManager.fresh`:
  same config, scorer and goal; the score and summary caches and the pheromone memory of
  the unchanged leading messages are kept, so they are not re-scored nor forgotten)
  and a :class:`RuntimeWarning` names the first differing position; with ``"raise"``,
  :class:`HistoryDivergedError` is raised before any request is sent. A message is
  never recorded twice or out of place.

One session manages one conversation; do not share it between concurrent conversations.
Concurrent requests of that conversation (threads, or asyncio tasks) are safe: each
request's sync and build run as one step under the session's lock (tasks take turns on a
per-loop ``asyncio.Lock`` without blocking the loop), so no message is recorded twice and
every context is built from its own history; a request whose history no longer extends
the memory (another request's reply was recorded first) resyncs as above.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Literal, TypeVar

from .._exceptions import (
    ConfigError,
    ContextOverflowError,
    HistoryDivergedError,
    InvalidMessageError,
    RelevanceMemoryError,
)
from .._io import message_to_dict
from .._manager import BuiltContext, RelevanceMemoryManager
from .._models import TaskGoal
from .._record import DecisionRecord
from .._telemetry import provider_cached_tokens
from ..pipeline.fidelity import is_rendition
from ..store._history import HistoryTracker, field_of

__all__ = [
    "MemorySession",
    "OnDivergence",
    "SessionView",
    "field_of",
    "message_to_dict",
    "project_built",
    "provider_cached_tokens",
    "record_usage",
]

OnDivergence = Literal["resync", "raise"]
T = TypeVar("T")


# --------------------------------------------------------------------------- session
class MemorySession:
    """The memory of one conversation, its sync with the caller's history, and the last build (module doc).

    Args:
        memory: the memory to use; ``None`` makes one on first use from ``overrides``
            (plus the first request's model unless ``overrides`` names one).
        on_build: called with each :class:`BuiltContext` before its request is sent.
        on_divergence: ``"resync"`` or ``"raise"`` (module doc).
        overrides: :class:`MemoryConfig` fields for the default memory.
        quiet: resync without a warning (the history was edited through an API of ours).

    Raises:
        ValueError: ``on_divergence`` is neither ``"resync"`` nor ``"raise"``.
    """

    def __init__(
        self,
        memory: RelevanceMemoryManager | None,
        *,
        on_build: Callable[[BuiltContext], None] | None,
        on_divergence: OnDivergence,
        overrides: dict[str, Any],
        quiet: bool = False,
    ) -> None:
        if on_divergence not in ("resync", "raise"):
            raise ValueError(f"on_divergence must be 'resync' or 'raise', got {on_divergence!r}")
        self._memory = memory
        self._overrides = overrides
        self._pending_goal: tuple[str | None, str | None] | None = None
        self.on_build = on_build
        self.on_divergence: OnDivergence = on_divergence
        self._tracker = HistoryTracker()
        self.last_build: BuiltContext | None = None
        self.quiet = quiet  # resync without a warning (the history was edited through an API of ours)
        # one request's sync + build (and each reply's recording) at a time: threads wait on
        # the lock, asyncio tasks on a per-loop asyncio.Lock (waiting never blocks the loop)
        self.lock = threading.RLock()
        self._async_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )

    def prepare(self, history: Iterable[Any], model: str | None, tools: Any = None) -> tuple[RelevanceMemoryManager, BuiltContext]:
        """Sync ``history`` and build this request's context, as one step: a concurrent request
        of the same session (another thread) waits, so each context is built from its own
        history and no message is recorded twice."""
        with self.lock:
            memory = self.sync(history, model)
            with self._caller_budget(memory, tools):
                return memory, memory.build_context(budget=self._budget(memory, tools), tools=tools)

    async def aprepare(
        self, history: Iterable[Any], model: str | None, tools: Any = None
    ) -> tuple[RelevanceMemoryManager, BuiltContext]:
        """Async :meth:`prepare`: concurrent tasks of the same session take turns (the build is
        awaited, ``abuild_context``)."""
        loop = asyncio.get_running_loop()
        with self.lock:
            turn = self._async_locks.get(loop)
            if turn is None:
                turn = self._async_locks[loop] = asyncio.Lock()
        async with turn:
            memory = self.sync(history, model)
            with self._caller_budget(memory, tools):
                return memory, await memory.abuild_context(budget=self._budget(memory, tools), tools=tools)

    @contextlib.contextmanager
    def _caller_budget(self, memory: RelevanceMemoryManager, tools: Any) -> Iterator[None]:
        """A :class:`ContextOverflowError` of a build made with less than the caller's budget (the
        provider's framing reserved, :meth:`reserved_tokens`, and the tools' schema) re-raised
        with the caller's budget, what was taken counted as pinned: its message then names the
        budget the caller set."""
        try:
            yield
        except ContextOverflowError as exc:
            total = memory.config.token_budget()
            if not self.reserved_tokens(memory, tools) or exc.budget >= total:
                raise
            taken = total - exc.budget  # the framing, and the tools' schema the build took itself
            raise ContextOverflowError(
                budget=total, pinned_tokens=exc.pinned_tokens + taken,
                newest_step_tokens=exc.newest_step_tokens, least_newest_step_tokens=exc.least_newest_step_tokens,
            ) from None

    def reserved_tokens(self, memory: RelevanceMemoryManager, tools: Any) -> int:
        """Tokens a request carries besides its messages and its ``tools`` schema (tokens): 0
        here; a provider's session adds what its API puts around them (the Anthropic session:
        the tool-use system prompt and a continuation turn). The schema is not counted here:
        the build takes it from the budget itself (``build_context(tools=)``)."""
        return 0

    def _budget(self, memory: RelevanceMemoryManager, tools: Any) -> int | None:
        """The budget to build with before the tools schema (tokens): the memory's minus
        :meth:`reserved_tokens`; ``None`` (the memory's own) when nothing is reserved.

        Raises:
            ConfigError: the reserved tokens take the whole budget.
        """
        reserved = self.reserved_tokens(memory, tools)
        if not reserved:
            return None
        total = memory.config.token_budget()
        if total - reserved <= 0:
            raise ConfigError(
                f"each request carries {reserved:,} tokens besides its messages and tools (the provider's "
                f"framing), {'more than' if reserved > total else 'all of'} the budget of {total:,}: nothing "
                "is left for the messages; raise the budget (max_input_tokens)"
            )
        return total - reserved

    def memory_for(self, model: str | None) -> RelevanceMemoryManager:
        with self.lock:
            return self._memory_for(model)

    def _memory_for(self, model: str | None) -> RelevanceMemoryManager:
        if self._memory is None:
            overrides = dict(self._overrides)
            if model and "model" not in overrides:
                overrides["model"] = model
            self._memory = self._new_memory(overrides)
            if self._pending_goal is not None:
                self._memory.set_goal(*self._pending_goal)
                self._pending_goal = None
        return self._memory

    def _new_memory(self, overrides: dict[str, Any]) -> RelevanceMemoryManager:
        """The default memory, made from ``overrides`` (a wrapper may make it differently)."""
        return RelevanceMemoryManager(**overrides)

    def set_goal(self, final: str | None, subtask: str | None) -> TaskGoal | None:
        with self.lock:
            return self._set_goal(final, subtask)

    def _set_goal(self, final: str | None, subtask: str | None) -> TaskGoal | None:
        if self._memory is not None:
            return self._memory.set_goal(final=final, subtask=subtask)
        old_final, old_subtask = self._pending_goal or (None, None)
        self._pending_goal = (final if final is not None else old_final, subtask if subtask is not None else old_subtask)
        return None

    def sync(self, history: Iterable[Any], model: str | None) -> RelevanceMemoryManager:
        """Record the new messages of ``history`` (see the module doc); returns the memory.
        Holds the session's lock: concurrent syncs never record a message twice."""
        given = list(history)
        with self.lock:
            return self._sync(given, model)

    def _sync(self, given: list[Any], model: str | None) -> RelevanceMemoryManager:
        memory = self._memory_for(model)
        stored = memory.messages
        n = len(stored)
        # objects matched on an earlier call are compared by identity, the others with their
        # recorded copy (relevance_memory.store._history): O(new) plus a pointer comparison a message
        diverged_at = self._tracker.diverged_at(stored, given)
        if diverged_at is None:
            memory._extend_new([message_to_dict(m) for m in given[n:]])
            self._tracker.matched(given, n)
            return memory
        messages = [message_to_dict(m) for m in given]
        expected = memory.messages[diverged_at].to_openai()
        got = messages[diverged_at] if diverged_at < len(messages) else None
        what = (
            f"the history has {len(messages)} message(s) but the memory already holds {n} "
            "(trimmed, or the recorded reply was not appended)"
            if got is None
            else f"message {diverged_at} of the history differs from the recorded one "
            f"({expected.get('role')} → {got.get('role')})"
        )
        if self.on_divergence == "raise":
            raise HistoryDivergedError(
                f"history diverged from the memory: {what}; pass the full history with every earlier "
                "message unchanged, or use on_divergence='resync'",
                index=diverged_at,
                expected=expected,
                got=got,
            )
        if not self.quiet:
            warnings.warn(
                f"history diverged from the memory: {what}; the memory starts over from this history "
                "(scores are reused from the cache)",
                RuntimeWarning,
                stacklevel=5,
            )
        self._memory = memory.fresh(messages)
        self._tracker = HistoryTracker()
        self._tracker.matched(given, 0)
        return self._memory

    def built(self, built: BuiltContext) -> list[dict[str, Any]]:
        self.last_build = built
        if self.on_build is not None:
            self.on_build(built)
        return built.messages

    def record_reply(self, memory: RelevanceMemoryManager, reply: Mapping[str, Any] | None) -> None:
        """Record the model's reply unless the memory was replaced meanwhile.

        A reply the store rejects is not recorded (a :class:`RuntimeWarning` says why)
        rather than losing the caller's response; when the caller appends it to the
        history, the next call's sync raises the :class:`InvalidMessageError` before sending.
        """
        with self.lock:
            if reply is None or memory is not self._memory:
                return
            try:
                memory.add(reply)
            except InvalidMessageError as exc:
                warnings.warn(f"the model's reply was not recorded: {exc}", RuntimeWarning, stacklevel=3)

    def record_response(self, memory: RelevanceMemoryManager, response: Any, built: BuiltContext | None = None) -> None:
        """Record choice 0's message of ``response``, and the provider's cached prompt tokens
        (from its ``usage``) in the record of ``built``, the context it answered."""
        if built is not None:
            record_usage(built, field_of(response, "usage"))
        choices = field_of(response, "choices") or ()
        if choices:
            message = field_of(choices[0], "message")
            if message is not None:
                self.record_reply(memory, message_to_dict(message))


def record_usage(built: BuiltContext, usage: Any) -> None:
    """Put the provider's cached prompt tokens (:func:`provider_cached_tokens`) into the
    decision record of ``built`` (``provider_cached_tokens``); nothing when ``usage`` has none."""
    cached = provider_cached_tokens(usage)
    if cached is not None:
        built.record.provider_cached_tokens = cached


class SessionView:
    """What every managed wrapper exposes about its memory (client, LangChain hook, Agents session).

    Subclasses set ``self._session`` (a :class:`MemorySession`).
    """

    _session: MemorySession

    @property
    def memory(self) -> RelevanceMemoryManager:
        """The memory in force (created on first use with the configured or first-called model).

        After a resync (a diverging history) this is a new manager; do not hold on to an old one.
        """
        return self._session.memory_for(None)

    @property
    def last_build(self) -> BuiltContext | None:
        """The latest :class:`BuiltContext` (OpenAI dicts and the decision record; ``None`` before the first)."""
        return self._session.last_build

    @property
    def last_record(self) -> DecisionRecord | None:
        """The decision record of the latest build (``None`` before the first)."""
        build = self._session.last_build
        return build.record if build is not None else None

    def set_goal(self, final: str | None = None, subtask: str | None = None) -> None:
        """Set the final goal and/or the current subtask (``None`` leaves a layer as it is).

        Until a final goal is set, the first user message is the goal. Call this whenever
        the agent's plan advances; the next build is for the new subtask.
        """
        self._session.set_goal(final, subtask)


# --------------------------------------------------------------------------- projection
def project_built(
    built: BuiltContext, memory: RelevanceMemoryManager, sources: list[T], synthetic: Callable[[dict[str, Any]], T]
) -> list[T]:
    """Map a built context back onto the caller's own message objects.

    ``sources[i]`` is the caller's object for the memory's message ``i`` (after a prefix
    sync the history *is* aligned with the store). Emitted store messages come back as
    their source objects (identity, ids and metadata preserved); messages the build made
    (the goal block, summaries) go through ``synthetic`` (an OpenAI dict in, an object out), and
    so does a stored message sent as an excerpt or with its output elided (SPEC §11): the caller's
    object holds the whole, the request must carry the cut.

    Raises:
        RelevanceMemoryError: the built messages do not match the decision record.
    """
    stored = memory.messages
    if built.sources and len(built.sources) == len(built.messages):  # O(context): no per-message record needed
        # an excerpt or elided output (SPEC §11) is sent as built, not as the caller's whole object
        return [sources[i] if i is not None and not is_rendition(m) else synthetic(m)
                for m, i in zip(built.messages, built.sources, strict=True)]
    emitted = sorted(d.index for d in built.record.messages if d.decision in ("kept", "recent"))
    out: list[T] = []
    n = 0
    for message in built.messages:
        if n < len(emitted) and message == stored[emitted[n]].raw:
            out.append(sources[emitted[n]])
            n += 1
        elif n < len(emitted) and is_rendition(message):
            out.append(synthetic(message))
            n += 1
        else:
            out.append(synthetic(message))
    if n != len(emitted):
        raise RelevanceMemoryError(
            f"internal error: {len(emitted) - n} kept message(s) not found in the built context; please report this"
        )
    return out

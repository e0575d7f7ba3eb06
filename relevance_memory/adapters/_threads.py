"""One memory per conversation thread, least recently used evicted first.

Shared by the LangChain adapters (:class:`~relevance_memory.adapters.langchain.ManagedContextHook`
and :class:`~relevance_memory.adapters.langchain.RelevanceMemoryMiddleware`): LangGraph runs
many conversations through one graph, each under its ``configurable.thread_id``, so each
thread gets its own :class:`~relevance_memory.clients._session.MemorySession` (interleaved threads
never resync each other). A thread's memory lives until ``max_threads`` newer threads have
been used; an evicted thread rebuilds its memory from the graph state on its next call (the
state holds every message, so nothing is lost, only re-ingested and re-scored).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

from .._manager import RelevanceMemoryManager
from ..clients._session import MemorySession, OnDivergence

__all__ = ["ThreadSessions"]


class ThreadSessions:
    """The :class:`MemorySession` of each thread id, bounded (module doc).

    Args:
        default: the memory of calls without a thread id (``None``: made on first use from ``config``).
        new_memory: makes the memory of a new thread (``None``: made on first use from ``config``).
        on_divergence: ``"resync"`` or ``"raise"`` (see :class:`MemorySession`).
        max_threads: most thread memories kept (least recently used evicted first).
        config: :class:`MemoryConfig` fields for memories made on first use.

    Raises:
        ValueError: ``max_threads`` is below 1.
    """

    def __init__(
        self,
        default: RelevanceMemoryManager | None,
        new_memory: Callable[[], RelevanceMemoryManager | None],
        *,
        on_divergence: OnDivergence,
        max_threads: int,
        config: dict[str, Any],
    ) -> None:
        if max_threads < 1:
            raise ValueError(f"max_threads must be at least 1, got {max_threads}")
        self._new_memory = new_memory
        self._config = config
        self._on_divergence: OnDivergence = on_divergence
        self.default = MemorySession(default, on_build=None, on_divergence=on_divergence, overrides=config)
        self._threads: OrderedDict[Hashable, MemorySession] = OrderedDict()
        self._lock = threading.Lock()
        self.max_threads = max_threads

    def session_for(self, thread: Hashable | None) -> MemorySession:
        """The session of ``thread`` (made on first use; ``None``: the default session)."""
        if thread is None:
            return self.default
        with self._lock:
            session = self._threads.get(thread)
            if session is None:
                session = MemorySession(
                    self._new_memory(), on_build=None, on_divergence=self._on_divergence, overrides=self._config
                )
                self._threads[thread] = session
                while len(self._threads) > self.max_threads:
                    self._threads.popitem(last=False)
            else:
                self._threads.move_to_end(thread)
            return session

    def existing(self, thread: Hashable | None) -> MemorySession:
        """The session of ``thread`` without making one.

        Raises:
            KeyError: no call has used that thread yet (or it was evicted).
        """
        if thread is None:
            return self.default
        with self._lock:
            if thread not in self._threads:
                raise KeyError(f"no memory for thread {thread!r} (not used yet, or evicted)")
            return self._threads[thread]

    @property
    def threads(self) -> list[Hashable]:
        """Thread ids with a memory, least recently used first."""
        with self._lock:
            return list(self._threads)

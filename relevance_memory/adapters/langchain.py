"""LangChain / LangGraph adapter: LangChain messages in, the managed context out.

    from relevance_memory.adapters.langchain import ManagedContextHook

    hook = ManagedContextHook(max_input_tokens=8000)
    agent = create_react_agent(model, tools, pre_model_hook=hook)   # LangGraph
    chain = hook.as_runnable() | model                              # plain LangChain

The hook takes the whole, growing message list on every call (a list of
``BaseMessage``, or a LangGraph state dict with ``"messages"``), records what is new in
its memory (sync by prefix, exactly as :class:`relevance_memory.ManagedOpenAI` does:
an edited or trimmed history resyncs, or raises with ``on_divergence="raise"``), builds
the context and returns LangChain messages: the caller's own objects for every kept
message (ids, tool calls and metadata untouched) plus a ``SystemMessage`` (or
``HumanMessage``, per ``context_role``) for the goal block. A graph state gets
``{"llm_input_messages": [...]}`` back — LangGraph's ``pre_model_hook`` contract, which
feeds the model without rewriting the graph state.

One memory per conversation: LangGraph passes the run config to the hook, and each
``config["configurable"]["thread_id"]`` gets its own memory, so interleaved threads never
resync each other (calls without a thread id share one default memory). A thread's
memory lives until ``max_threads`` newer threads have been used (least recently used
first); an evicted thread rebuilds its memory from the graph state on its next call —
the state holds every message, so nothing is lost, only re-ingested and re-scored.

Tool calls are converted with
``langchain_core.messages.convert_to_openai_messages`` / ``convert_to_messages``, so
parallel calls and their ``ToolMessage`` results stay whole.

Needs the ``langchain`` extra: ``pip install 'relevance-memory[langchain]'``.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .._manager import BuiltContext, RelevanceMemoryManager
from .._session import MemorySession, OnDivergence, SessionView, project_built

if TYPE_CHECKING:
    from langchain_core.messages import BaseMessage
    from langchain_core.runnables import RunnableConfig, RunnableLambda

__all__ = ["ManagedContextHook", "from_openai_messages", "thread_id_of", "to_openai_messages"]

_EXTRA_HINT = "the LangChain adapter needs langchain-core: pip install 'relevance-memory[langchain]'"


def _messages_module() -> Any:
    try:
        from langchain_core import messages
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise ImportError(_EXTRA_HINT) from exc
    return messages


def to_openai_messages(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """LangChain messages as OpenAI chat dicts (``AIMessage.tool_calls`` → ``tool_calls`` with JSON arguments).

    Raises:
        ImportError: ``langchain-core`` is not installed (names the extra).
    """
    converted = _messages_module().convert_to_openai_messages(list(messages))
    return [dict(m) for m in converted]


def from_openai_messages(messages: Sequence[Mapping[str, Any]]) -> list[BaseMessage]:
    """OpenAI chat dicts as LangChain messages (``tool_calls`` → ``AIMessage.tool_calls`` with parsed args).

    Raises:
        ImportError: ``langchain-core`` is not installed (names the extra).
    """
    return list(_messages_module().convert_to_messages([dict(m) for m in messages]))


def thread_id_of(config: Mapping[str, Any] | None) -> Hashable | None:
    """The conversation key of a LangChain/LangGraph run config: ``configurable.thread_id``
    (``None`` when absent)."""
    if not config:
        return None
    configurable = config.get("configurable") or {}
    thread = configurable.get("thread_id") if isinstance(configurable, Mapping) else None
    return thread if isinstance(thread, Hashable) else str(thread)


class ManagedContextHook(SessionView):
    """Turns a LangChain message list into the managed context (module doc).

    Args:
        memory: the memory for calls without a thread id; each LangGraph thread gets
            ``memory.fresh()`` (same config, scorer, score cache and summarizer, its own
            messages). Default: new managers built with ``**config``
            (budget from ``model``'s context window, SPEC defaults).
        budget: token budget of each build (tokens); default the memory's budget.
        on_divergence: ``"resync"`` (default) or ``"raise"`` (:class:`HistoryDivergedError`).
        max_threads: most thread memories kept (least recently used evicted first; an
            evicted thread re-ingests its graph state on its next call).
        **config: :class:`MemoryConfig` fields, e.g. ``model="gpt-4o"``, ``max_input_tokens=8000``.

    Calling it (``hook(messages)`` or ``hook(state, config)``; ``await hook.ainvoke(...)``
    for async graphs) raises what the memory raises: :class:`InvalidMessageError`,
    :class:`ContextOverflowError`, :class:`HistoryDivergedError`. ``memory``,
    ``last_build`` and ``last_record`` describe the thread of the latest call;
    :meth:`memory_for` gives a thread's own.
    """

    def __init__(
        self,
        memory: RelevanceMemoryManager | None = None,
        *,
        budget: int | None = None,
        on_divergence: OnDivergence = "resync",
        max_threads: int = 256,
        **config: Any,
    ) -> None:
        _messages_module()
        if memory is not None and config:
            raise ValueError("pass either memory= or MemoryConfig fields, not both")
        if max_threads < 1:
            raise ValueError(f"max_threads must be at least 1, got {max_threads}")
        self._template = memory
        self._config = config
        self._on_divergence: OnDivergence = on_divergence
        self._session = MemorySession(memory, on_build=None, on_divergence=on_divergence, overrides=config)
        self._default = self._session
        self._threads: OrderedDict[Hashable, MemorySession] = OrderedDict()
        self._lock = threading.Lock()
        self.max_threads = max_threads
        self.budget = budget

    def _session_for(self, thread: Hashable | None) -> MemorySession:
        if thread is None:
            return self._default
        with self._lock:
            session = self._threads.get(thread)
            if session is None:
                memory = self._template.fresh() if self._template is not None else None
                session = MemorySession(memory, on_build=None, on_divergence=self._on_divergence, overrides=self._config)
                self._threads[thread] = session
                while len(self._threads) > self.max_threads:
                    self._threads.popitem(last=False)
            else:
                self._threads.move_to_end(thread)
            return session

    @property
    def threads(self) -> list[Hashable]:
        """Thread ids with a memory, least recently used first."""
        with self._lock:
            return list(self._threads)

    def memory_for(self, thread_id: Hashable | None) -> RelevanceMemoryManager:
        """The memory of LangGraph thread ``thread_id`` (``None``: the default memory).

        Raises:
            KeyError: no call has used that thread yet (or it was evicted).
        """
        if thread_id is None:
            return self._default.memory_for(None)
        with self._lock:
            if thread_id not in self._threads:
                raise KeyError(f"no memory for thread {thread_id!r} (not used yet, or evicted)")
            session = self._threads[thread_id]
        return session.memory_for(None)

    def _prepare(
        self, value: Any, config: Mapping[str, Any] | None
    ) -> tuple[MemorySession, list[Any], RelevanceMemoryManager, int]:
        if isinstance(value, Mapping):
            messages = list(value["messages"])
        elif hasattr(value, "messages") and not isinstance(value, Sequence):  # a state object
            messages = list(value.messages)
        else:
            messages = list(value)
        session = self._session_for(thread_id_of(config))
        self._session = session
        memory = session.sync(to_openai_messages(messages), None)
        return session, messages, memory, self.budget if self.budget is not None else memory.config.token_budget()

    def _finish(
        self, session: MemorySession, value: Any, messages: list[Any], memory: RelevanceMemoryManager, built: BuiltContext
    ) -> Any:
        session.built(built)
        out = project_built(built, memory, messages, lambda m: from_openai_messages([m])[0])
        return out if isinstance(value, Sequence) else {"llm_input_messages": out}

    def __call__(
        self, value: Sequence[BaseMessage] | Mapping[str, Any], config: RunnableConfig | None = None
    ) -> Any:
        """Managed context for ``value``: a message list → a list; a state (a dict with
        ``messages`` or an object with a ``messages`` attribute) → ``{"llm_input_messages": list}``.
        ``config`` is the run config LangGraph / ``RunnableLambda`` pass in; its
        ``configurable.thread_id`` picks the memory."""
        session, messages, memory, budget = self._prepare(value, config)
        return self._finish(session, value, messages, memory, memory.build_context(budget=budget))

    async def ainvoke(
        self, value: Sequence[BaseMessage] | Mapping[str, Any], config: RunnableConfig | None = None
    ) -> Any:
        """Async :meth:`__call__`; builds with :meth:`RelevanceMemoryManager.abuild_context`."""
        session, messages, memory, budget = self._prepare(value, config)
        return self._finish(session, value, messages, memory, await memory.abuild_context(budget=budget))

    def as_runnable(self) -> RunnableLambda[Any, Any]:
        """The hook as a ``RunnableLambda`` (sync and async; the run config reaches the hook),
        e.g. ``hook.as_runnable() | model``."""
        from langchain_core.runnables import RunnableLambda

        return RunnableLambda(self.__call__, afunc=self.ainvoke, name="relevance_memory")

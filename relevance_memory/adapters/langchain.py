"""LangChain / LangGraph adapters: LangChain messages in, the managed context out.

Two ways in:

- :class:`RelevanceMemoryMiddleware` (LangChain v1 ``create_agent``; the current path):
  ``create_agent(model, tools, middleware=[RelevanceMemoryMiddleware(max_input_tokens=8000)])``
  manages every model call of the agent loop (see :mod:`relevance_memory.adapters._langchain_agent`).
- :class:`ManagedContextHook` (the **legacy** path): LangGraph's ``create_react_agent``
  ``pre_model_hook`` (deprecated since LangGraph 1.0, removal planned for 2.0) and plain
  LangChain chains::

    hook = ManagedContextHook(max_input_tokens=8000, tools=tools, prompt=prompt)
    agent = create_react_agent(model, tools, prompt=prompt, pre_model_hook=hook)   # LangGraph
    chain = hook.as_runnable() | model                                           # plain LangChain

The hook takes the whole, growing message list on every call (a list of
``BaseMessage``, or a LangGraph state dict with ``"messages"``), records what is new in
its memory (sync by prefix, exactly as :class:`relevance_memory.ManagedOpenAI` does:
an edited or trimmed history resyncs, or raises with ``on_divergence="raise"``), builds
the context and returns LangChain messages: the caller's own objects for every kept
message (ids, tool calls and metadata untouched) plus a ``SystemMessage`` (or
``HumanMessage``, per ``context_role``) for the goal block. A graph state gets
``{"llm_input_messages": [...]}`` back — LangGraph's ``pre_model_hook`` contract, which
feeds the model without rewriting the graph state.

The hook does not see what ``create_react_agent`` adds to each request: give it the same
``tools=`` and ``prompt=`` and their tokens (the tools' schema, the prompt's system message)
are taken from the budget, so the request the model receives fits ``max_input_tokens``.

One memory per conversation: LangGraph passes the run config to the hook (its ``config``
parameter is annotated so that LangGraph recognises it), and each
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

from collections.abc import Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Optional

from .._manager import BuiltContext, RelevanceMemoryManager
from ..clients._session import MemorySession, OnDivergence, SessionView
from ._langchain_messages import (
    _messages_module,
    _openai_tools,
    budget_after_prompt,
    from_openai_messages,
    loop_thinking_reserve,
    project_to_messages,
    thread_id_of,
    to_openai_messages,
    to_store_messages,
)
from ._threads import ThreadSessions

if TYPE_CHECKING:
    from langchain_core.messages import BaseMessage
    from langchain_core.runnables import RunnableConfig, RunnableLambda

    from ._langchain_agent import RelevanceMemoryMiddleware

__all__ = [
    "ManagedContextHook",
    "RelevanceMemoryMiddleware",
    "from_openai_messages",
    "thread_id_of",
    "to_openai_messages",
]

def __getattr__(name: str) -> Any:
    if name == "RelevanceMemoryMiddleware":  # imports langchain (v1) itself: only on first use
        from ._langchain_agent import RelevanceMemoryMiddleware

        return RelevanceMemoryMiddleware
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class ManagedContextHook(SessionView):
    """Turns a LangChain message list into the managed context (module doc; the legacy path).

    Args:
        memory: the memory for calls without a thread id; each LangGraph thread gets
            ``memory.fresh()`` (same config, scorer, score cache and summarizer, its own
            messages). Default: new managers built with ``**config``
            (budget from ``model``'s context window, SPEC defaults).
        budget: token budget of each request (tokens): prompt, tools' schema and messages
            together; default the memory's budget.
        tools: the tools the agent binds to its model (``BaseTool``, functions or dicts, as
            given to ``create_react_agent``): their schema's tokens are taken from the budget.
        prompt: the ``prompt=`` of ``create_react_agent`` when it is a string or a
            ``SystemMessage``: its tokens are taken from the budget.
        on_divergence: ``"resync"`` (default) or ``"raise"`` (:class:`HistoryDivergedError`).
        max_threads: most thread memories kept (least recently used evicted first; an
            evicted thread re-ingests its graph state on its next call).
        **config: :class:`MemoryConfig` fields, e.g. ``model="gpt-4o"``, ``max_input_tokens=8000``.

    Raises:
        ValueError: both ``memory`` and config fields given, or ``max_threads`` below 1.
        ImportError: ``langchain-core`` is not installed (names the extra).

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
        tools: Sequence[Any] = (),
        prompt: str | BaseMessage | None = None,
        on_divergence: OnDivergence = "resync",
        max_threads: int = 256,
        **config: Any,
    ) -> None:
        _messages_module()
        if memory is not None and config:
            raise ValueError("pass either memory= or MemoryConfig fields, not both")
        template = memory
        self._sessions = ThreadSessions(
            memory,
            lambda: template.fresh() if template is not None else None,
            on_divergence=on_divergence,
            max_threads=max_threads,
            config=config,
        )
        self._session: MemorySession = self._sessions.default
        self.budget = budget
        self._tools = _openai_tools(tools)
        self._prompt = _system_prompt(prompt)

    @property
    def max_threads(self) -> int:
        """Most thread memories kept."""
        return self._sessions.max_threads

    @property
    def threads(self) -> list[Hashable]:
        """Thread ids with a memory, least recently used first."""
        return self._sessions.threads

    def memory_for(self, thread_id: Hashable | None) -> RelevanceMemoryManager:
        """The memory of LangGraph thread ``thread_id`` (``None``: the default memory).

        Raises:
            KeyError: no call has used that thread yet (or it was evicted).
        """
        return self._sessions.existing(thread_id).memory_for(None)

    def request_overhead(self, memory: RelevanceMemoryManager) -> int:
        """Tokens every request spends outside the built messages: the ``prompt`` message (tokens)."""
        return memory.tokenizer.count_message(self._prompt) if self._prompt is not None else 0

    def _prepare(
        self, value: Any, config: Mapping[str, Any] | None
    ) -> tuple[MemorySession, list[Any], list[int], RelevanceMemoryManager, int]:
        if isinstance(value, Mapping):
            messages = list(value["messages"])
        elif hasattr(value, "messages") and not isinstance(value, Sequence):  # a state object
            messages = list(value.messages)
        else:
            messages = list(value)
        session = self._sessions.session_for(thread_id_of(config))
        self._session = session
        history, owners = to_store_messages(messages)
        memory = session.sync(history, None)
        budget = self.budget if self.budget is not None else memory.config.token_budget()
        return session, messages, owners, memory, budget_after_prompt(budget, self.request_overhead(memory))

    def _finish(
        self,
        session: MemorySession,
        value: Any,
        messages: list[Any],
        owners: list[int],
        memory: RelevanceMemoryManager,
        built: BuiltContext,
    ) -> Any:
        session.built(built)
        out = project_to_messages(built, memory, messages, owners)
        return out if isinstance(value, Sequence) else {"llm_input_messages": out}

    # ``config`` is annotated ``Optional[RunnableConfig]`` on purpose: LangGraph injects the run
    # config into a node only when the annotation is one it recognises, and under postponed
    # evaluation it compares the annotation's text ("RunnableConfig | None" is not recognised).
    def __call__(
        self,
        value: Sequence[BaseMessage] | Mapping[str, Any],
        config: Optional[RunnableConfig] = None,  # noqa: UP045 - LangGraph matches this text
    ) -> Any:
        """Managed context for ``value``: a message list → a list; a state (a dict with
        ``messages`` or an object with a ``messages`` attribute) → ``{"llm_input_messages": list}``.
        ``config`` is the run config LangGraph / ``RunnableLambda`` pass in; its
        ``configurable.thread_id`` picks the memory."""
        session, messages, owners, memory, budget = self._prepare(value, config)
        built = memory.build_context(budget=budget, tools=self._tools)
        reserve = loop_thinking_reserve(memory, built)
        if reserve:  # again, with room for the final tool-loop turn's thinking blocks
            built = memory.build_context(budget=budget - reserve, tools=self._tools)
        return self._finish(session, value, messages, owners, memory, built)

    async def ainvoke(
        self,
        value: Sequence[BaseMessage] | Mapping[str, Any],
        config: Optional[RunnableConfig] = None,  # noqa: UP045 - LangGraph matches this text
    ) -> Any:
        """Async :meth:`__call__`; builds with :meth:`RelevanceMemoryManager.abuild_context`."""
        session, messages, owners, memory, budget = self._prepare(value, config)
        built = await memory.abuild_context(budget=budget, tools=self._tools)
        reserve = loop_thinking_reserve(memory, built)
        if reserve:  # as __call__
            built = await memory.abuild_context(budget=budget - reserve, tools=self._tools)
        return self._finish(session, value, messages, owners, memory, built)

    def as_runnable(self) -> RunnableLambda[Any, Any]:
        """The hook as a ``RunnableLambda`` (sync and async; the run config reaches the hook),
        e.g. ``hook.as_runnable() | model``, or ``pre_model_hook=hook.as_runnable()`` in an async graph."""
        from langchain_core.runnables import RunnableLambda

        return RunnableLambda(self.__call__, afunc=self.ainvoke, name="relevance_memory")


def _system_prompt(prompt: str | BaseMessage | None) -> dict[str, Any] | None:
    """``create_react_agent``'s ``prompt=`` (a string or a message) as the OpenAI message it sends."""
    if prompt is None:
        return None
    if isinstance(prompt, str):
        return {"role": "system", "content": prompt}
    return to_openai_messages([prompt])[0]

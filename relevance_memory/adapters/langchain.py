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
feeds the model without rewriting the graph state. Tool calls are converted with
``langchain_core.messages.convert_to_openai_messages`` / ``convert_to_messages``, so
parallel calls and their ``ToolMessage`` results stay whole.

Needs the ``langchain`` extra: ``pip install 'relevance-memory[langchain]'``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .._manager import BuiltContext, RelevanceMemoryManager
from .._session import MemorySession, OnDivergence, SessionView, project_built

if TYPE_CHECKING:
    from langchain_core.messages import BaseMessage
    from langchain_core.runnables import RunnableLambda

__all__ = ["ManagedContextHook", "from_openai_messages", "to_openai_messages"]

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


class ManagedContextHook(SessionView):
    """Turns a LangChain message list into the managed context (module doc).

    Args:
        memory: the memory to use; default a new :class:`RelevanceMemoryManager` built
            with ``**config`` (budget from ``model``'s context window, SPEC defaults).
        budget: token budget of each build (tokens); default the memory's budget.
        on_divergence: ``"resync"`` (default) or ``"raise"`` (:class:`HistoryDivergedError`).
        **config: :class:`MemoryConfig` fields, e.g. ``model="gpt-4o"``, ``max_input_tokens=8000``.

    Calling it (``hook(messages)`` or ``hook(state)``; ``await hook.ainvoke(...)`` for
    async graphs) raises what the memory raises: :class:`InvalidMessageError`,
    :class:`ContextOverflowError`, :class:`HistoryDivergedError`.
    """

    def __init__(
        self,
        memory: RelevanceMemoryManager | None = None,
        *,
        budget: int | None = None,
        on_divergence: OnDivergence = "resync",
        **config: Any,
    ) -> None:
        _messages_module()
        if memory is not None and config:
            raise ValueError("pass either memory= or MemoryConfig fields, not both")
        self._session = MemorySession(memory, on_build=None, on_divergence=on_divergence, overrides=config)
        self.budget = budget

    def _prepare(self, value: Any) -> tuple[list[Any], RelevanceMemoryManager, int]:
        if isinstance(value, Mapping):
            messages = list(value["messages"])
        elif hasattr(value, "messages") and not isinstance(value, Sequence):  # a state object
            messages = list(value.messages)
        else:
            messages = list(value)
        memory = self._session.sync(to_openai_messages(messages), None)
        return messages, memory, self.budget if self.budget is not None else memory.config.token_budget()

    def _finish(self, value: Any, messages: list[Any], memory: RelevanceMemoryManager, built: BuiltContext) -> Any:
        self._session.built(built)
        out = project_built(built, memory, messages, lambda m: from_openai_messages([m])[0])
        return out if isinstance(value, Sequence) else {"llm_input_messages": out}

    def __call__(self, value: Sequence[BaseMessage] | Mapping[str, Any]) -> Any:
        """Managed context for ``value``: a message list → a list; a state (a dict with
        ``messages`` or an object with a ``messages`` attribute) → ``{"llm_input_messages": list}``."""
        messages, memory, budget = self._prepare(value)
        return self._finish(value, messages, memory, memory.build_context(budget=budget))

    async def ainvoke(self, value: Sequence[BaseMessage] | Mapping[str, Any]) -> Any:
        """Async :meth:`__call__`; builds with :meth:`RelevanceMemoryManager.abuild_context`."""
        messages, memory, budget = self._prepare(value)
        return self._finish(value, messages, memory, await memory.abuild_context(budget=budget))

    def as_runnable(self) -> RunnableLambda[Any, Any]:
        """The hook as a ``RunnableLambda`` (sync and async), e.g. ``hook.as_runnable() | model``."""
        from langchain_core.runnables import RunnableLambda

        return RunnableLambda(self.__call__, afunc=self.ainvoke, name="relevance_memory")

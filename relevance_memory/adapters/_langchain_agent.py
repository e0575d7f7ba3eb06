"""LangChain v1 ``create_agent`` middleware: every model call gets the managed context.

    from langchain.agents import create_agent
    from relevance_memory.adapters.langchain import RelevanceMemoryMiddleware

    memory = RelevanceMemoryMiddleware(max_input_tokens=8000)
    agent = create_agent(model, tools, system_prompt="You fix bugs.", middleware=[memory],
                         checkpointer=InMemorySaver())
    agent.invoke({"messages": [("user", "Fix the date parser")]}, {"configurable": {"thread_id": "t1"}})
    memory.last_record("t1")          # the DecisionRecord of that thread's latest model call

It implements ``wrap_model_call`` / ``awrap_model_call`` (LangChain's
``langchain.agents.middleware.types.AgentMiddleware``), the hook that runs around each model
call of the agent loop, tool loop included:

1. the request's messages (the whole conversation from the graph state; the system message
   travels separately as ``request.system_message``) are recorded append-only into the
   thread's memory (sync by prefix, :mod:`relevance_memory.clients._session`);
2. the context is built within the budget **minus** the system message and the tools' schema,
   a ``response_format``'s schema included (all are sent with every request: they count);
3. the handler (the model call) runs with ``request.override(messages=…)``: the caller's own
   message objects for every kept message, plus new ``SystemMessage`` objects (or
   ``HumanMessage``, per ``context_role``) for the goal block and summaries — always
   ``HumanMessage`` past the head of the conversation for a Claude model, whose LangChain
   binding refuses a system message there.

The graph state is never written: the checkpointed ``messages`` stay the whole conversation
and only the model's input changes (as LangChain's own context-editing middleware does). The
decision record stays outside the graph, on the middleware: :meth:`last_record` /
:meth:`last_build` per thread (it is not part of the agent's input or output schema, and a
checkpoint never carries it).

One memory per conversation: each ``thread_id`` (from the run's execution info, or the run
config's ``configurable.thread_id``) gets its own memory, bounded by ``max_threads`` (least
recently used evicted first; an evicted thread re-ingests its state on its next call). Runs
without a checkpointer have no thread id and share the default memory.

The restore tool (``restore_messages``; :meth:`RelevanceMemoryManager.restore_tool`) is
registered through the middleware's ``tools``, so the model can fetch archived messages by
id: its answers read the calling thread's append-only store.

Needs the ``langchain`` extra: ``pip install 'relevance-memory[langchain]'``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable
from typing import Any

try:
    from langchain.agents.middleware import AgentMiddleware, ModelRequest
    from langchain_core.runnables import RunnableConfig
    from langchain_core.tools import BaseTool, StructuredTool
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "RelevanceMemoryMiddleware needs LangChain v1: pip install 'relevance-memory[langchain]'"
    ) from exc

from .._manager import BuiltContext, RelevanceMemoryManager
from .._record import DecisionRecord
from ..clients._session import MemorySession, OnDivergence
from ..store._restore import RESTORE_TOOL_NAME
from ._langchain_messages import (
    _openai_tools,
    _response_format_tools,
    budget_after_prompt,
    loop_thinking_reserve,
    project_to_messages,
    thread_id_of,
    to_openai_messages,
    to_store_messages,
)
from ._threads import ThreadSessions

__all__ = ["RelevanceMemoryMiddleware"]

_RESTORE_DESCRIPTION = (
    "Fetch archived messages of this conversation by id, verbatim. Ids appear in the context's "
    "summaries and pointers (e.g. m12) and as spans (m12–m20). Use it when a summary says a detail "
    "exists but does not show it."
)


def _thread_of(request: ModelRequest[Any]) -> Hashable | None:
    """The conversation key of a model request: the run's thread id, or ``None``."""
    info = getattr(request.runtime, "execution_info", None)
    thread = getattr(info, "thread_id", None)
    if thread is not None:
        return thread if isinstance(thread, Hashable) else str(thread)
    try:  # older LangGraph: read it from the run config of the current node
        from langgraph.config import get_config

        return thread_id_of(get_config())
    except (ImportError, RuntimeError):
        return None


def _one_system_prompt(model: Any) -> bool:
    """Whether ``model`` refuses a system message after the conversation has started: Claude
    through LangChain (``ChatAnthropic``, Claude on Bedrock: ``_llm_type`` names anthropic),
    whose binding raises "Received multiple non-consecutive system messages"."""
    return "anthropic" in str(getattr(model, "_llm_type", "") or "").lower()


def _late_system_as_human(messages: list[Any], sources: list[Any]) -> list[Any]:
    """``messages`` with each system message the build made (goal block, summaries, subtask
    note) that comes after a non-system message sent as a ``HumanMessage`` instead (the
    caller's own messages are never changed)."""
    from langchain_core.messages import HumanMessage, SystemMessage

    own = {id(m) for m in sources}
    out: list[Any] = []
    started = False
    for message in messages:
        if isinstance(message, SystemMessage) and started and id(message) not in own:
            message = HumanMessage(content=message.content, id=message.id)
        started = started or not isinstance(message, SystemMessage)
        out.append(message)
    return out


class RelevanceMemoryMiddleware(AgentMiddleware):  # type: ignore[type-arg]
    """LangChain v1 agent middleware that sends the managed context to the model (module doc).

    Args:
        memory: the memory of runs without a thread id; each thread gets ``memory.fresh()``
            (same config, scorer, score cache and summarizer, its own messages). Default:
            new managers built with ``**config``.
        budget: token budget of each model request (tokens) — system message, tools' schema
            and messages together; default the memory's budget
            (:meth:`MemoryConfig.token_budget`).
        on_divergence: ``"resync"`` (default: an edited or trimmed state starts the thread's
            memory over, with a warning) or ``"raise"`` (:class:`HistoryDivergedError`).
        max_threads: most thread memories kept (least recently used evicted first).
        restore_tool: register the ``restore_messages`` tool (default ``True``; its schema,
            113 tokens, is sent with every request and counts against the budget).
        restore_max_tokens: most tokens one answer of the restore tool carries (tokens).
        **config: :class:`MemoryConfig` fields, e.g. ``max_input_tokens=8000``, ``keep_recent=4``.

    Raises:
        ValueError: both ``memory`` and config fields given, or ``max_threads`` below 1.

    A model call raises what the memory raises before the model is called:
    :class:`InvalidMessageError`, :class:`ContextOverflowError` (the system message, tools and
    newest step cannot fit), :class:`HistoryDivergedError`.
    """

    def __init__(
        self,
        memory: RelevanceMemoryManager | None = None,
        *,
        budget: int | None = None,
        on_divergence: OnDivergence = "resync",
        max_threads: int = 256,
        restore_tool: bool = True,
        restore_max_tokens: int = 4000,
        **config: Any,
    ) -> None:
        super().__init__()
        if memory is not None and config:
            raise ValueError("pass either memory= or MemoryConfig fields, not both")
        self.budget = budget
        self.restore_max_tokens = restore_max_tokens
        self._offer = restore_tool
        if memory is None:
            memory = RelevanceMemoryManager(**config)
        template = memory

        def new_memory() -> RelevanceMemoryManager:
            return self._offered(template.fresh())

        self._sessions = ThreadSessions(
            self._offered(memory), new_memory, on_divergence=on_divergence, max_threads=max_threads, config={}
        )
        self.tools: list[BaseTool] = [self._restore_tool()] if restore_tool else []

    # ------------------------------------------------------------------ what it exposes
    def _offered(self, memory: RelevanceMemoryManager) -> RelevanceMemoryManager:
        if self._offer:
            memory.restore_tool(RESTORE_TOOL_NAME)  # the goal block now names the tool
        return memory

    @property
    def threads(self) -> list[Hashable]:
        """Thread ids with a memory, least recently used first."""
        return self._sessions.threads

    def memory_for(self, thread_id: Hashable | None = None) -> RelevanceMemoryManager:
        """The memory of thread ``thread_id`` (``None``: runs without a thread id).

        Raises:
            KeyError: no model call has used that thread yet (or it was evicted).
        """
        return self._sessions.existing(thread_id).memory_for(None)

    def last_build(self, thread_id: Hashable | None = None) -> BuiltContext | None:
        """The latest :class:`BuiltContext` of thread ``thread_id`` (``None`` before its first model call)."""
        try:
            return self._sessions.existing(thread_id).last_build
        except KeyError:
            return None

    def last_record(self, thread_id: Hashable | None = None) -> DecisionRecord | None:
        """The decision record of thread ``thread_id``'s latest model call (``None`` before the first)."""
        build = self.last_build(thread_id)
        return build.record if build is not None else None

    def set_goal(self, thread_id: Hashable | None = None, *, final: str | None = None, subtask: str | None = None) -> None:
        """Set the final goal and/or subtask of thread ``thread_id`` (``None`` leaves a layer as it is).

        Until a final goal is set, the thread's first user message is its goal.
        """
        self._sessions.session_for(thread_id).set_goal(final, subtask)

    # ------------------------------------------------------------------ the model call
    def _prepare(
        self, request: ModelRequest[Any]
    ) -> tuple[MemorySession, list[dict[str, Any]], list[int], int, list[dict[str, Any]]]:
        """The thread's session, the request's messages as the memory keeps them with the
        index of each one's message (:func:`to_store_messages`), the messages' budget (the
        request budget minus the system message) and the tools as OpenAI dicts, the
        structured-output schema included (the agent binds it after every middleware)."""
        session = self._sessions.session_for(_thread_of(request))
        memory = session.memory_for(None)
        budget = self.budget if self.budget is not None else memory.config.token_budget()
        if request.system_message is not None:
            prompt = memory.tokenizer.count_message(to_openai_messages([request.system_message])[0])
            budget = budget_after_prompt(budget, prompt)
        history, owners = to_store_messages(request.messages)
        tools = _openai_tools(request.tools) + _response_format_tools(getattr(request, "response_format", None))
        return session, history, owners, budget, tools

    def _override(
        self, request: ModelRequest[Any], session: MemorySession, owners: list[int], built: BuiltContext
    ) -> ModelRequest[Any]:
        session.built(built)
        memory = session.memory_for(None)
        messages = project_to_messages(built, memory, list(request.messages), owners)
        if _one_system_prompt(request.model):
            messages = _late_system_as_human(messages, list(request.messages))
        return request.override(messages=messages)

    def wrap_model_call(self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], Any]) -> Any:
        """Record the request's messages, build the context, call the model with it (module doc)."""
        if not request.messages:
            return handler(request)
        session, history, owners, budget, tools = self._prepare(request)
        with session.lock:  # this request's sync and build as one step
            memory = session.sync(history, None)
            built = memory.build_context(budget=budget, tools=tools)
            reserve = loop_thinking_reserve(memory, built)
            if reserve:  # again, with room for the final tool-loop turn's thinking blocks
                built = memory.build_context(budget=budget - reserve, tools=tools)
        return handler(self._override(request, session, owners, built))

    async def awrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], Awaitable[Any]]
    ) -> Any:
        """Async :meth:`wrap_model_call`; builds with :meth:`RelevanceMemoryManager.abuild_context`."""
        if not request.messages:
            return await handler(request)
        session, history, owners, budget, tools = self._prepare(request)
        memory = session.sync(history, None)
        built = await memory.abuild_context(budget=budget, tools=tools)
        reserve = loop_thinking_reserve(memory, built)
        if reserve:  # as wrap_model_call
            built = await memory.abuild_context(budget=budget - reserve, tools=tools)
        return await handler(self._override(request, session, owners, built))

    # ------------------------------------------------------------------ the restore tool
    def _restore_tool(self) -> BaseTool:
        def restore_messages(ids: list[str], config: RunnableConfig) -> str:
            """Fetch archived messages of this conversation by id."""
            try:
                memory = self.memory_for(thread_id_of(config))
            except KeyError:
                return "(this conversation has no archived messages yet)"
            return memory.restore_handler(max_tokens=self.restore_max_tokens).restore([str(i) for i in ids])

        return StructuredTool.from_function(restore_messages, name=RESTORE_TOOL_NAME, description=_RESTORE_DESCRIPTION)

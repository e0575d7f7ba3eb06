"""OpenAI Agents SDK adapter: every model call of a run, tool loop included, gets the managed context.

    from agents import Agent, RunConfig, Runner
    from relevance_memory.adapters.openai_agents import ManagedInputFilter, ManagedSession

    managed = ManagedInputFilter(max_input_tokens=8000)
    await Runner.run(agent, "Fix the date parser", max_turns=50,
                     run_config=RunConfig(call_model_input_filter=managed))

    session = ManagedSession("user-42", max_input_tokens=8000)   # persisted history, managed too:
    await Runner.run(agent, "Fix the date parser", session=session,
                     run_config=RunConfig(call_model_input_filter=session.input_filter()))

**The model-call filter** (:class:`ManagedInputFilter`) is the SDK's
``RunConfig.call_model_input_filter``: it runs immediately before each model call with the
run's whole input (session history, new input, and every item the run produced so far:
calls, outputs, reasoning) and returns what is sent instead — the managed context. Every
call of the run is managed, the tool loop included (a ``Session`` alone is read only when a
run starts, so a long tool loop grows unmanaged). Per call:

- the items are grouped into chat messages (below) and recorded append-only into the
  memory (sync by prefix, as :class:`relevance_memory.ManagedOpenAI` does);
- the context is built within the budget minus what every request also carries: the
  agent's instructions, its tools' schema (function tools and handoffs; hosted tools by
  name; MCP tools are listed by the SDK at run time and are not counted: leave room with
  ``budget=``), and the items it cannot interpret (below);
- kept messages come back as the **original items**, in order; the goal block and summaries
  are new ``{"role": context_role, "content": …}`` items.

Items it cannot interpret are **kept whole**: a ``reasoning`` item travels with the output
it led to (the API needs them together: both are kept, or both are left out); any other
item with no chat form (a provider ``compaction`` item, hosted-tool calls, ``item_reference``,
types this module does not know) is always sent, unchanged, in its place. Their tokens
(counted as the memory counts a content part it does not know: the text they carry, each
encoded payload at the image placeholder cost) are taken from the budget up front.

**The session** (:class:`ManagedSession`): the SDK's ``Session`` protocol (``get_items / add_items / pop_item / clear_session``)
fits: every item is kept in an inner session (default an in-memory ``SQLiteSession``;
pass any ``Session`` for persistence), and ``get_items()`` — what the runner sends to
the model as history — returns the **managed context** instead of everything:

- Responses-API items are grouped into chat messages for the memory: ``message`` items
  (``user``/``system``/``developer``/``assistant``) one each; consecutive
  ``function_call`` items join the assistant message before them (parallel calls stay
  one message, as in chat format) or start one; each ``function_call_output`` becomes a
  ``tool`` message. Items with no chat equivalent (``reasoning``, hosted-tool calls,
  ``item_reference`` …) travel with the next message (the last one, at the end), so a
  reasoning item is kept or dropped with the call it led to.
- Kept messages come back as the **original items**, in order; the goal block is a new
  ``{"role": context_role, "content": …}`` item at the front (after the system items).
- ``get_items(limit=N)`` returns the raw last ``N`` items. The runner uses limits for its
  own bookkeeping (write recovery, rewinding a retried turn), which must see what is
  stored, so limits are not compacted.
- ``pop_item``/``clear_session`` act on the inner session; the memory, which is
  append-only, starts over on the next build (scores reused from the cache).

The agent's ``instructions`` and tool schemas are sent by the SDK outside these items:
leave room for them in ``max_input_tokens`` — or use the model-call filter, which counts them.
With the filter, ``session.input_filter()`` shares the session's memory and ``get_items()``
then returns every stored item (the filter manages each call, the first included).

Needs the ``agents`` extra: ``pip install 'relevance-memory[agents]'``.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .._exceptions import ContextOverflowError
from .._manager import BuiltContext, RelevanceMemoryManager
from .._models import content_text
from .._tokenizer import REPLY_PRIMING_TOKENS, TokenCounter, tools_tokens
from ..clients._session import MemorySession, OnDivergence, SessionView, project_built

if TYPE_CHECKING:
    from agents.items import TResponseInputItem
    from agents.memory import Session, SessionSettings
    from agents.run_config import CallModelData, ModelInputData

__all__ = ["ManagedInputFilter", "ManagedSession", "agent_tools", "items_to_chat", "request_tokens"]

_EXTRA_HINT = "the OpenAI Agents SDK adapter needs openai-agents: pip install 'relevance-memory[agents]'"
_ROLES = ("user", "system", "developer", "assistant")
_TRAVELS = ("reasoning",)
"""Item types with no chat form that belong to the output after them (kept or left out with it)."""


def _import_agents() -> Any:
    try:
        import agents
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise ImportError(_EXTRA_HINT) from exc
    return agents


def _as_dict(item: Any) -> dict[str, Any]:
    if isinstance(item, Mapping):
        return dict(item)
    dump = getattr(item, "model_dump", None)
    if callable(dump):
        return dict(dump(exclude_unset=True))
    raise TypeError(f"expected a Responses input item (dict or model), got {type(item).__name__}")


def _chat_content(content: Any) -> str | list[dict[str, Any]]:
    """Responses content (a string or input/output parts) as chat content."""
    if isinstance(content, str):
        return content
    parts: list[dict[str, Any]] = []
    for part in content or ():
        part = _as_dict(part)
        kind = part.get("type")
        if kind in ("input_text", "output_text", "text"):
            parts.append({"type": "text", "text": str(part.get("text", ""))})
        elif kind == "refusal":
            parts.append({"type": "text", "text": str(part.get("refusal", ""))})
        elif kind == "input_image" and part.get("image_url"):
            parts.append({"type": "image_url", "image_url": {"url": part["image_url"], "detail": part.get("detail", "auto")}})
        else:
            parts.append({"type": "text", "text": f"[{kind}]"})
    if all(p["type"] == "text" for p in parts):
        return "\n".join(p["text"] for p in parts)
    return parts


def _output_content(output: Any) -> str | list[dict[str, Any]]:
    """A ``function_call_output``'s output as a tool message's content: a string as it is; a
    list of parts (a tool returning ``ToolOutputImage`` / ``ToolOutputFileContent``) as text
    parts plus its image and file parts unchanged, so they are counted and scored as the media
    they are (an image at its image cost, never its base64 URL as text); anything else as JSON."""
    if isinstance(output, str):
        return output
    if not isinstance(output, list):
        return json.dumps(output, default=str)
    parts: list[dict[str, Any]] = []
    for part in output:
        part = _as_dict(part)
        if part.get("type") in ("input_text", "output_text", "text"):
            parts.append({"type": "text", "text": str(part.get("text", ""))})
        else:
            parts.append(part)
    if all(p["type"] == "text" for p in parts):
        return "\n".join(p["text"] for p in parts)
    return parts


def items_to_chat(items: Sequence[Any]) -> tuple[list[dict[str, Any]], list[list[Any]]]:
    """Group Responses-API items into OpenAI chat messages (module doc).

    Returns ``(messages, groups)``: ``groups[i]`` holds the original items behind
    ``messages[i]``, in order; every item is in exactly one group, except that items
    when there is no chat message at all come back as ``([], [items])``.
    """
    messages: list[dict[str, Any]] = []
    groups: list[list[Any]] = []
    pending: list[Any] = []  # items without a chat form, waiting for the next message
    calls_open = False  # the last message is an assistant message that may take more calls

    def start(message: dict[str, Any], item: Any) -> None:
        nonlocal pending
        messages.append(message)
        groups.append([*pending, item])
        pending = []

    for item in items:
        data = _as_dict(item)
        kind = data.get("type")
        role = data.get("role")
        if kind in (None, "message") and role in _ROLES:
            start({"role": role, "content": _chat_content(data.get("content"))}, item)
            calls_open = role == "assistant"
        elif kind == "function_call":
            call = {
                "id": data["call_id"],
                "type": "function",
                "function": {"name": data.get("name", ""), "arguments": data.get("arguments") or ""},
            }
            if calls_open and not pending:
                last = messages[-1]
                if not last.get("tool_calls") and last.get("content") == "":
                    last["content"] = None
                last.setdefault("tool_calls", []).append(call)
                groups[-1].append(item)
            else:
                start({"role": "assistant", "content": None, "tool_calls": [call]}, item)
                calls_open = True
        elif kind == "function_call_output":
            start({"role": "tool", "tool_call_id": data["call_id"], "content": _output_content(data.get("output"))}, item)
            calls_open = False
        else:
            pending.append(item)
    if pending:
        if groups:
            groups[-1].extend(pending)
        else:
            groups.append(pending)
    return messages, groups


def _interpretable(data: Mapping[str, Any]) -> bool:
    kind = data.get("type")
    return (kind in (None, "message") and data.get("role") in _ROLES) or kind in (
        "function_call", "function_call_output", *_TRAVELS,
    )


def _outside_tokens(counter: TokenCounter, items: Sequence[Any], instructions: str | None) -> int:
    """Tokens of a request that the memory does not hold (tokens): the instructions as a system
    message, and each item with no chat form (reasoning included) counted as the memory counts
    a content part it does not know (the text it carries, each encoded payload at the image
    placeholder cost)."""
    total = counter.count_message({"role": "system", "content": instructions}) if instructions else 0
    for item in items:
        data = _as_dict(item)
        if not _interpretable(data) or data.get("type") in _TRAVELS:
            total += counter.count_message({"role": "user", "content": [data]})
    return total


def _chat_to_items(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A message the build made (goal block, summary, or a shortened message) as Responses items."""
    role = message.get("role")
    text = content_text(message.get("content"))
    if role == "tool":
        return [{"type": "function_call_output", "call_id": message.get("tool_call_id"), "output": text}]
    calls = message.get("tool_calls") or []
    items: list[dict[str, Any]] = [{"role": role, "content": text}] if text or not calls else []
    items += [
        {"type": "function_call", "call_id": c["id"], "name": c["function"]["name"], "arguments": c["function"]["arguments"]}
        for c in calls
    ]
    return items


def agent_tools(agent: Any) -> list[dict[str, Any]]:
    """The tools an Agents SDK ``agent`` sends with each request, as OpenAI ``tools=`` entries
    for counting: function tools and handoffs with their JSON schema, hosted tools by name.
    MCP tools (listed at run time) are not included."""
    agents = _import_agents()
    out: list[dict[str, Any]] = []
    for tool in getattr(agent, "tools", ()) or ():
        if isinstance(tool, agents.FunctionTool):
            out.append({"type": "function", "function": {
                "name": tool.name, "description": tool.description, "parameters": tool.params_json_schema}})
        else:
            out.append({"type": str(getattr(tool, "name", type(tool).__name__))})
    for target in getattr(agent, "handoffs", ()) or ():
        handoff = target if isinstance(target, agents.Handoff) else agents.handoff(target)
        out.append({"type": "function", "function": {
            "name": handoff.tool_name, "description": handoff.tool_description, "parameters": handoff.input_json_schema}})
    return out


def request_tokens(
    counter: TokenCounter, items: Sequence[Any], *, instructions: str | None = None, tools: Sequence[Any] = ()
) -> int:
    """Tokens of one model request as the filter budgets it (tokens): the instructions as a system
    message, the chat-shaped items as the chat messages they form, every other item as an
    unknown content part, the reply priming and the tools' schema (:func:`~relevance_memory.tools_tokens`)."""
    messages, _ = items_to_chat(items)
    chat = sum(counter.count_message(m) for m in messages) + REPLY_PRIMING_TOKENS
    return chat + tools_tokens(counter, list(tools)) + _outside_tokens(counter, items, instructions)


class ManagedInputFilter(SessionView):
    """A ``RunConfig.call_model_input_filter`` that sends the managed context on every model call (module doc).

    Args:
        memory: the memory to use; default a new one built with ``**config``.
        budget: token budget of each model request (tokens): instructions, tools' schema and
            items together; default the memory's budget (:meth:`MemoryConfig.token_budget`).
        on_divergence: ``"resync"`` (default) or ``"raise"``; see :class:`relevance_memory.ManagedOpenAI`.
        **config: :class:`MemoryConfig` fields, e.g. ``max_input_tokens=8000``. As for
            :class:`ManagedSession`, ``on_invalid`` defaults to ``"repair"``.

    One filter manages one conversation (the items of consecutive runs extend each other, as
    with a session); a run whose input does not extend the memory resyncs (see ``on_divergence``).
    A run that keeps its conversation on the server (``previous_response_id``,
    ``conversation_id``, ``auto_previous_response_id``) sends each call only its new items; an
    input of tool outputs alone is then sent unchanged (a ``RuntimeWarning`` says so once).

    Calling it (the SDK does, awaiting the result) raises what the memory raises:
    :class:`InvalidMessageError`, :class:`HistoryDivergedError`, and
    :class:`ContextOverflowError` when the instructions, tools and kept-whole items alone
    leave no room, or the newest step cannot fit.

    Raises:
        ImportError: ``openai-agents`` is not installed (names the extra).
        ValueError: both ``memory`` and config fields given.
    """

    def __init__(
        self,
        memory: RelevanceMemoryManager | None = None,
        *,
        budget: int | None = None,
        on_divergence: OnDivergence = "resync",
        _session: MemorySession | None = None,
        **config: Any,
    ) -> None:
        _import_agents()
        if memory is not None and config:
            raise ValueError("pass either memory= or MemoryConfig fields, not both")
        if memory is None:
            config.setdefault("on_invalid", "repair")
        self.budget = budget
        self._session = _session or MemorySession(memory, on_build=None, on_divergence=on_divergence, overrides=config)
        self._server_side = False  # warned that the run keeps its conversation on the server

    async def __call__(self, data: CallModelData[Any]) -> ModelInputData:
        """The model input of one call with its items replaced by the managed context (module doc)."""
        from agents.run_config import ModelInputData

        model_data = data.model_data
        items = list(model_data.input)
        chat_items = [i for i in items if _interpretable(_as_dict(i))]
        messages, groups = items_to_chat(chat_items)
        if not messages:
            return model_data
        if all(m["role"] == "tool" for m in messages):  # outputs of calls this input does not hold
            if not self._server_side:
                self._server_side = True
                warnings.warn(
                    "this model call's input holds only tool outputs, whose calls are kept on the server "
                    "(previous_response_id, conversation_id or auto_previous_response_id): the server adds "
                    "the earlier items itself, so the filter cannot manage them; the input is sent unchanged",
                    RuntimeWarning,
                    stacklevel=2,
                )
            return model_data
        memory = self._session.sync(messages, None)
        self._session.quiet = False
        tools = agent_tools(data.agent)
        budget = self._budget(memory, items, model_data.instructions, tools)
        built = await memory.abuild_context(budget=budget, tools=tools)
        self._session.built(built)
        return ModelInputData(input=self._emit(built, memory, items, groups), instructions=model_data.instructions)

    def _budget(self, memory: RelevanceMemoryManager, items: list[Any], instructions: str | None, tools: list[Any]) -> int:
        """The messages' budget: the request budget minus the instructions and the kept-whole
        items (the tools' schema is taken by the build itself)."""
        total = self.budget if self.budget is not None else memory.config.token_budget()
        outside = _outside_tokens(memory.tokenizer, items, instructions)
        schema = tools_tokens(memory.tokenizer, tools)
        if total - outside - schema <= REPLY_PRIMING_TOKENS:
            raise ContextOverflowError(budget=total, pinned_tokens=outside + schema, newest_step_tokens=REPLY_PRIMING_TOKENS)
        return total - outside

    @staticmethod
    def _emit(built: BuiltContext, memory: RelevanceMemoryManager, items: list[Any], groups: list[list[Any]]) -> list[Any]:
        """The built context as items: kept groups as the original items, new messages as new
        items, and every item with no chat form in its original place."""
        position = {id(item): n for n, item in enumerate(items)}
        kept = project_built(built, memory, groups, _chat_to_items)
        pinned = [(n, item) for n, item in enumerate(items) if not _interpretable(_as_dict(item))]
        # each emitted group sorts at its first original item; a new one at the next original group
        keys: list[float] = []
        following = float(len(items))
        for group in reversed(kept):
            first = position.get(id(group[0])) if group else None
            if first is not None and group[0] is items[first]:
                following = first
            keys.append(following)
        keys.reverse()
        out: list[Any] = []
        for key, group in zip(keys, kept, strict=True):
            while pinned and pinned[0][0] < key:
                out.append(pinned.pop(0)[1])
            out.extend(group)
        out.extend(item for _, item in pinned)
        return out


class ManagedSession(SessionView):
    """An OpenAI Agents SDK ``Session`` whose ``get_items()`` is the managed context (module doc).

    Args:
        session_id: id of the conversation; default the inner session's id.
        inner: where items are stored; default ``agents.SQLiteSession(session_id)`` (in memory).
        memory: the memory to use; default a new one built with ``**config``.
        budget: token budget of each build (tokens); default the memory's budget.
        on_divergence: what to do when the stored items were changed behind the
            session's back (see :class:`relevance_memory.ManagedOpenAI`); removals
            through ``pop_item``/``clear_session`` always resync quietly.
        **config: :class:`MemoryConfig` fields, e.g. ``max_input_tokens=8000``. Unlike the
            core default, ``on_invalid`` defaults to ``"repair"`` here: a function call still
            waiting for its output (an interrupted or approval-gated turn) is left out of
            the context, and said so in the decision record, instead of failing the run.

    Raises:
        ImportError: ``openai-agents`` is not installed (names the extra).
        ValueError: neither ``session_id`` nor ``inner`` given, or both ``memory`` and config.
    """

    def __init__(
        self,
        session_id: str | None = None,
        inner: Session | None = None,
        memory: RelevanceMemoryManager | None = None,
        *,
        budget: int | None = None,
        on_divergence: OnDivergence = "resync",
        **config: Any,
    ) -> None:
        agents = _import_agents()
        if memory is not None and config:
            raise ValueError("pass either memory= or MemoryConfig fields, not both")
        if inner is None:
            if session_id is None:
                raise ValueError("give a session_id or an inner session")
            inner = agents.SQLiteSession(session_id)
        self.inner: Session = inner
        self.session_id: str = session_id or inner.session_id
        self.session_settings: SessionSettings | None = getattr(inner, "session_settings", None)
        self.budget = budget
        if memory is None:
            config.setdefault("on_invalid", "repair")
        self._session = MemorySession(memory, on_build=None, on_divergence=on_divergence, overrides=config)
        self._filtered = False

    def input_filter(self) -> ManagedInputFilter:
        """A :class:`ManagedInputFilter` sharing this session's memory and budget, for
        ``RunConfig(call_model_input_filter=session.input_filter())``: every model call of a run
        is then managed, and from now on ``get_items()`` returns every stored item (the filter
        manages the run's first call too, so the history is not managed twice)."""
        self._filtered = True
        return ManagedInputFilter(budget=self.budget, _session=self._session)

    async def all_items(self) -> list[TResponseInputItem]:
        """Every stored item, oldest first (the inner session's full history)."""
        return await self.inner.get_items()

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The managed context as Responses items; with ``limit``, the raw last ``limit`` items.

        Raises:
            InvalidMessageError, ContextOverflowError: as the memory's build raises them.
        """
        if limit is not None or self._filtered:
            return await self.inner.get_items(limit=limit)
        items = await self.inner.get_items()
        messages, groups = items_to_chat(items)
        if not messages:
            return items
        memory = self._session.sync(messages, None)
        self._session.quiet = False
        budget = self.budget if self.budget is not None else memory.config.token_budget()
        built = await memory.abuild_context(budget=budget)
        self._session.built(built)
        kept = project_built(built, memory, groups, _chat_to_items)
        return [item for group in kept for item in group]

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Store new items (recorded into the memory at the next ``get_items()``)."""
        await self.inner.add_items(items)

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove and return the newest stored item; the memory resyncs at the next build."""
        self._session.quiet = True
        return await self.inner.pop_item()

    async def clear_session(self) -> None:
        """Remove every stored item; the memory starts over at the next build."""
        self._session.quiet = True
        await self.inner.clear_session()

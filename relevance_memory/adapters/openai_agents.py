"""OpenAI Agents SDK adapter: a ``Session`` whose history is the managed context.

    from agents import Agent, Runner
    from relevance_memory.adapters.openai_agents import ManagedSession

    session = ManagedSession("user-42", max_input_tokens=8000)   # or ManagedSession(inner=SQLiteSession(...))
    await Runner.run(agent, "Fix the date parser", session=session)

The SDK's ``Session`` protocol (``get_items / add_items / pop_item / clear_session``)
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
leave room for them in ``max_input_tokens``.

Needs the ``agents`` extra: ``pip install 'relevance-memory[agents]'``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .._manager import RelevanceMemoryManager
from .._session import MemorySession, OnDivergence, SessionView, project_built

if TYPE_CHECKING:
    from agents.items import TResponseInputItem
    from agents.memory import Session, SessionSettings

__all__ = ["ManagedSession", "items_to_chat"]

_EXTRA_HINT = "the OpenAI Agents SDK adapter needs openai-agents: pip install 'relevance-memory[agents]'"
_ROLES = ("user", "system", "developer", "assistant")


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


def _output_text(output: Any) -> str:
    if isinstance(output, str):
        return output
    content = _chat_content(output) if isinstance(output, list) else json.dumps(output, default=str)
    return content if isinstance(content, str) else json.dumps(content, default=str)


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
            start({"role": "tool", "tool_call_id": data["call_id"], "content": _output_text(data.get("output"))}, item)
            calls_open = False
        else:
            pending.append(item)
    if pending:
        if groups:
            groups[-1].extend(pending)
        else:
            groups.append(pending)
    return messages, groups


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

    async def all_items(self) -> list[TResponseInputItem]:
        """Every stored item, oldest first (the inner session's full history)."""
        return await self.inner.get_items()

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The managed context as Responses items; with ``limit``, the raw last ``limit`` items.

        Raises:
            InvalidMessageError, ContextOverflowError: as the memory's build raises them.
        """
        if limit is not None:
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
        kept = project_built(built, memory, groups, lambda m: [{"role": m["role"], "content": m["content"]}])
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

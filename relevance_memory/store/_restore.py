"""Restorable compression: a tool the model can call to fetch archived messages by id.

The context a build emits names what it left out — summaries list the ids they cover, a
pointer names the span, the goal block says the rest is restorable by message id. This
module makes that promise true for an agent loop (the "restorable compression" the Manus
team describes: drop the content, keep the reference, let the agent fetch it back):

    tools = [*my_tools, restore_tool_definition()]
    handler = RestoreHandler(memory)
    reply = client.chat.completions.create(model=..., messages=built.messages, tools=tools)
    for call in reply.choices[0].message.tool_calls or []:
        if handler.handles(call):
            history.append(handler.answer(call))          # a tool message with the originals

The handler reads the append-only store, so every message ever added can be restored,
whatever the latest build kept. Pure apart from that read; no network.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from .._io import _get
from .._models import Message, content_text
from .._tokenizer import TiktokenCounter, TokenCounter
from ._store import MessageStore

__all__ = ["RESTORE_TOOL_NAME", "RestoreHandler", "restore_tool_definition"]

RESTORE_TOOL_NAME = "restore_messages"
"""Default name of the restore tool."""

_SPAN_RE = re.compile(r"^\s*(?:from\s+)?(\S+?)\s*(?:–|—|-|\.\.|\s+to\s+)\s*(\S+)\s*$")
"""A span of ids as contexts write them: ``m12–m20``, ``m12-m20``, ``m12..m20``, ``from m12 to m20``."""


class _HasStore(Protocol):
    store: MessageStore


def restore_tool_definition(name: str = RESTORE_TOOL_NAME) -> dict[str, Any]:
    """The OpenAI ``tools=`` entry of the restore tool (strict JSON schema: ``{"ids": [str]}``).

    Raises:
        ValueError: ``name`` is not a valid tool name (``^[a-zA-Z0-9_-]{1,64}$``).
    """
    if not re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", name):
        raise ValueError(f"tool names match ^[a-zA-Z0-9_-]{{1,64}}$, got {name!r}")
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": (
                "Fetch archived messages of this conversation by id, verbatim. Ids appear in the "
                "context's summaries and pointers (e.g. m12) and as spans (m12–m20). Use it when a "
                "summary says a detail exists but does not show it."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "ids": {
                        "type": "array",
                        "items": {"type": "string"},
                        "description": "message ids (m12) or spans of ids (m12–m20), as written in the context",
                    }
                },
                "required": ["ids"],
                "additionalProperties": False,
            },
            "strict": True,
        },
    }


class RestoreHandler:
    """Answers calls of the restore tool from a memory's append-only store.

    Args:
        source: a :class:`RelevanceMemoryManager` (or anything with ``.``), a
            :class:`MessageStore`, or a callable returning one of those (a managed client's
            memory changes after a resync: pass ``lambda: client.memory``).
        max_tokens: most tokens one answer carries (tokens); messages past it are named, not
            shown, and the answer says to ask for fewer.
        name: the tool's name (as in :func:`restore_tool_definition`).
        counter: token counter for ``max_tokens`` (default ``o200k_base``).
    """

    def __init__(
        self,
        source: _HasStore | MessageStore | Callable[[], _HasStore | MessageStore],
        *,
        max_tokens: int = 4000,
        name: str = RESTORE_TOOL_NAME,
        counter: TokenCounter | None = None,
    ) -> None:
        if max_tokens < 50:
            raise ValueError(f"max_tokens must be at least 50, got {max_tokens}")
        self._source = source
        self.max_tokens = max_tokens
        self.name = name
        self._counter = counter or TiktokenCounter()

    def _store(self) -> MessageStore:
        source: Any = self._source
        if callable(source) and not isinstance(source, MessageStore) and not hasattr(source, "store"):
            source = source()
        return source if isinstance(source, MessageStore) else source.store

    def resolve(self, ids: Sequence[str]) -> tuple[list[Message], list[str]]:
        """The stored messages ``ids`` name (ids or spans ``a–b``, in store order, each once),
        and the ids or spans that name nothing."""
        store = self._store()
        found: dict[int, Message] = {}
        missing: list[str] = []
        for raw in ids:
            text = str(raw).strip().strip("[]")
            try:
                message = store.get(text)  # an id first: ids may hold a hyphen themselves
                found[message.index] = message
                continue
            except KeyError:
                pass
            span = _SPAN_RE.match(text)
            try:
                if span is None:
                    raise KeyError(text)
                first, last = store.get(span.group(1)).index, store.get(span.group(2)).index
            except KeyError:
                missing.append(text)
                continue
            for i in range(min(first, last), max(first, last) + 1):
                found[i] = store[i]
        return [found[i] for i in sorted(found)], missing

    def restore(self, ids: Sequence[str]) -> str:
        """The text of the tool's answer for ``ids``: each message as ``[id] role …: content``,
        in store order, within ``max_tokens``; unknown ids and left-out ones are named."""
        messages, missing = self.resolve(ids)
        lines: list[str] = []
        used = 0
        for shown, message in enumerate(messages):
            block = _render(message)
            cost = self._counter.count_text(block) + 1
            if used + cost > self.max_tokens and shown:
                rest = [m.id for m in messages[shown:]]
                lines.append(f"(not shown for length: {', '.join(rest)} — ask for fewer ids at a time)")
                break
            if used + cost > self.max_tokens:  # one message longer than the limit: its head
                block = block[: self.max_tokens * 3] + " …[cut for length]"
                cost = self.max_tokens
            lines.append(block)
            used += cost
        if missing:
            lines.append(f"(no message with id: {', '.join(missing)})")
        if not lines:
            lines.append("(no ids given)")
        return "\n\n".join(lines)

    def handles(self, tool_call: Any) -> bool:
        """Whether ``tool_call`` (SDK object or dict) calls this tool."""
        function = _get(tool_call, "function")
        return bool(_get(function, "name") == self.name)

    def answer(self, tool_call: Any) -> dict[str, Any]:
        """The ``tool`` message answering ``tool_call`` (its arguments: ``{"ids": [...]}``).

        Malformed arguments get an answer that says so (the model can retry), never an exception.
        """
        function = _get(tool_call, "function")
        arguments = _get(function, "arguments") or "{}"
        try:
            parsed = json.loads(arguments) if isinstance(arguments, str) else arguments
            ids = parsed.get("ids") if isinstance(parsed, Mapping) else None
            if isinstance(ids, str):
                ids = [ids]
            if not isinstance(ids, list):
                raise ValueError("'ids' must be a list of message ids")
            content = self.restore([str(i) for i in ids])
        except ValueError as exc:  # json.JSONDecodeError is a ValueError
            content = f"(could not read the arguments: {exc}; call {self.name} with {{\"ids\": [\"m12\", \"m20–m24\"]}})"
        return {"role": "tool", "tool_call_id": _get(tool_call, "id"), "content": content}


def _render(message: Message) -> str:
    """``[m14] tool bash: <output>`` / ``[m13] assistant: <text>`` + one line per tool call."""
    who: str = message.role
    if message.role == "tool" and message.name:
        who = f"tool {message.name}"
    body = [content_text(message.content)] if message.content else []
    body += [f"called {call.name}({call.arguments}) [call id {call.id}]" for call in message.tool_calls]
    return f"[{message.id}] {who}: " + "\n".join(body)

"""What an agent publishes to which scope, and how another agent reads it (pure functions).

A message an agent adds to its memory lives in its private scope unless a
:class:`PublishRule` (or an explicit ``scope=``) puts it in a shared one. Published
messages travel on the scope's log as :func:`log_entry` fields; another agent imports
one with :func:`imported_message`: as a ``user`` message named after its producer
(``name="coder"``), its text marked with who produced it and what it is — an assistant's
tool call or a tool result of *another* agent is not this agent's own turn, and a tool
message without this agent's call before it would not be a valid request.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .._models import Message

__all__ = ["PublishRule", "imported_message", "log_entry"]


@dataclass(frozen=True)
class PublishRule:
    """Which scope an agent's message goes to (SPEC §10: publish explicitly or by rule).

    Attributes:
        shared_types: message types published to ``scope`` (default: tool results and
            user instructions — the facts and constraints every agent needs; seed 000 §5.3:
            an agent's own reasoning stays in its private workspace).
        scope: where they go (default ``"shared"``).
    """

    shared_types: frozenset[str] = frozenset({"tool_result", "user_instruction"})
    scope: str = "shared"

    def scope_for(self, msg_type: str, agent: str) -> str:
        """The scope of an agent's new message of type ``msg_type``: the rule's scope for
        :attr:`shared_types`, else ``private:<agent>``."""
        if msg_type in self.shared_types:
            return self.scope
        return f"private:{agent}"


def log_entry(message: Message, agent: str, scope: str, call: Mapping[str, str] | None = None) -> dict[str, str]:
    """The log fields of a published message (all strings, as a Redis stream wants).

    Args:
        message: the message (its ``id`` must be unique across agents).
        agent: its producer.
        scope: the scope it is published to.
        call: for a tool result, the call it answers (``{"name", "arguments"}``), so a
            reader sees what was run.
    """
    fields = {
        "id": message.id, "producer": agent, "scope": scope, "role": message.role,
        "msg_type": message.msg_type.value, "text": message.text,
    }
    if message.name:
        fields["name"] = message.name
    if call:
        fields["call"] = json.dumps(dict(call), ensure_ascii=False)
    return fields


def imported_message(fields: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Another agent's published message as ``(OpenAI dict, metadata)`` for ``add``.

    The dict is a ``user`` message named after the producer whose content says who
    produced it and what it was (``[coder · tool result of bash(...)]``); the metadata
    keeps the original id, producer, scope and message type.

    Raises:
        KeyError: a required field (``id``, ``producer``, ``text``) is missing.
    """
    producer, kind = fields["producer"], fields.get("msg_type", "user_chat")
    label = kind.replace("_", " ")
    if fields.get("call"):
        call = json.loads(fields["call"])
        label += f" of {call.get('name', 'a tool')}({call.get('arguments', '')})"
    content = f"[{producer} · {label}]\n{fields['text']}"
    msg_type = kind if kind in ("user_instruction", "tool_result") else "user_chat"
    meta = {"id": fields["id"], "producer": producer, "scope": fields.get("scope", "shared"), "msg_type": msg_type}
    return {"role": "user", "name": producer, "content": content}, meta

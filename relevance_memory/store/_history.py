"""A caller's whole, growing history matched against the messages a memory holds (prefix sync).

Agent loops pass their whole message list on every step. The memory stores each message once,
so each step it must find which of the list is new — and notice when the list no longer
starts with what it holds (an edited, trimmed or reordered message, a reply not appended).
:class:`HistoryTracker` does this for :meth:`RelevanceMemoryManager.sync_history` and for
every managed wrapper (:mod:`relevance_memory.clients._session`).

Comparison, position by position over the messages already held:

- the very object matched at that position before (``is``; or an object equal to it) is
  unchanged — checked for the whole prefix in one list comparison (pointer comparisons in C,
  ~10 ns a message), no message is read. An object already recorded and edited in place
  afterwards is not read again: as with :meth:`~RelevanceMemoryManager.add`, the memory keeps
  the copy it took (pass a new object to change a message, and the change is seen);
- any other object is compared with the stored copy: equal as a chat dict
  (:func:`~relevance_memory._io.message_to_dict` for SDK objects), or with the same
  :func:`fingerprint` — role, content (``None`` and ``""`` alike), tool calls (id, name,
  arguments), ``tool_call_id`` and ``name`` — so a reply appended as the SDK's object, its
  ``model_dump()`` or a hand-written dict all match the recorded one. Once matched, that
  object is the one remembered for the position.

So a step costs one pointer comparison per held message plus the new messages, instead of
comparing every dict with its stored copy (issue 24: ~1.5 µs a message, 0.15 s at 100k).
"""

from __future__ import annotations

import json
import operator
from collections.abc import Mapping, Sequence
from typing import Any

from .._io import message_to_dict
from .._models import Message

__all__ = ["HistoryTracker", "field_of", "fingerprint"]


def field_of(obj: Any, key: str, default: Any = None) -> Any:
    """``obj[key]`` for a mapping, else ``obj.key``; ``default`` when absent (dicts and SDK objects alike)."""
    if isinstance(obj, Mapping):
        return obj.get(key, default)
    return getattr(obj, key, default)


def fingerprint(message: Mapping[str, Any]) -> str:
    """Comparison key of a chat dict for the prefix sync (see the module doc)."""
    content = message.get("content")
    key: dict[str, Any] = {
        "role": message.get("role"),
        "content": None if content in (None, "") else content,
        "tool_calls": [
            [field_of(c, "id"), field_of(field_of(c, "function"), "name"), field_of(field_of(c, "function"), "arguments") or ""]
            for c in (message.get("tool_calls") or ())
        ],
    }
    for field in ("tool_call_id", "name"):
        if message.get(field):
            key[field] = message[field]
    return json.dumps(key, sort_keys=True, ensure_ascii=False, default=str)


def same_message(item: Any, stored: Message) -> bool:
    """Whether the caller's ``item`` is the stored message (module doc: equal, or the same fingerprint)."""
    raw = stored.raw
    plain = item if isinstance(item, dict) else message_to_dict(item)
    return plain == raw or fingerprint(plain) == fingerprint(raw)


_UNMATCHED = object()


class HistoryTracker:
    """Which of a caller's growing history a memory already holds (module doc).

    Not thread-safe on its own: the caller holds the lock that orders its syncs (the
    session's lock, or the store's).
    """

    __slots__ = ("_objects",)

    def __init__(self) -> None:
        self._objects: list[Any] = []  # per held position, the caller's object matched there

    def diverged_at(self, stored: Sequence[Message], history: Sequence[Any]) -> int | None:
        """The first position where ``history`` does not repeat ``stored`` (``len(history)``
        when it is shorter and repeats all of it), or ``None`` when it starts with every
        stored message — then ``history[len(stored):]`` is new."""
        held = len(stored)
        objects = self._objects
        if len(objects) > held:  # another memory (a resync): nothing is known of this one
            objects.clear()
        if len(objects) < held:  # held messages this tracker never matched (replies, other writers)
            objects.extend([_UNMATCHED] * (held - len(objects)))
        if len(history) >= held and history[:held] == objects:
            return None  # every position holds the object matched before (or one equal to it): C speed
        identical = list(map(operator.is_, history, objects))  # stops at the shorter
        position = 0
        while True:
            try:
                position = identical.index(False, position)
            except ValueError:
                break
            item = history[position]
            if not same_message(item, stored[position]):
                return position
            objects[position] = item
            position += 1
        return len(history) if len(history) < held else None

    def matched(self, history: Sequence[Any], start: int) -> None:
        """``history[start:]`` is now stored at the same positions: remember its objects."""
        objects = self._objects
        del objects[start:]
        objects.extend(history[start:])

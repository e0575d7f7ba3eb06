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
import warnings
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from .._exceptions import HistoryDivergedError
from .._io import message_to_dict
from .._models import Message

__all__ = [
    "HistoryTracker",
    "diverged_error",
    "field_of",
    "fingerprint",
    "kept_stamps",
    "repeated_prefix",
    "same_message",
    "unchanged_prefix",
]


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


def diverged_error(stored: Sequence[Message], history: Sequence[Any], index: int) -> HistoryDivergedError:
    """The error :meth:`RelevanceMemoryManager.sync_history` raises when ``history`` stops
    repeating ``stored`` at ``index`` (:meth:`HistoryTracker.diverged_at`)."""
    expected = stored[index].to_openai()
    got = message_to_dict(history[index]) if index < len(history) else None
    what = (
        f"it has {len(history)} message(s) but the memory already holds {len(stored)}"
        if got is None
        else f"message {index} differs from the stored one ({expected.get('role')} → {got.get('role')})"
    )
    return HistoryDivergedError(
        f"history diverged from the memory: {what}; pass the whole history with every earlier message "
        "unchanged, or start over with memory.fresh(history)",
        index=index, expected=expected, got=got,
    )


def repeated_prefix(items: Sequence[Any], stored: Sequence[Message]) -> int:
    """How many leading messages of an ``extend()`` batch repeat the whole history at the same
    positions (0 when they do not; warns when they do). The caller is one frame above the
    ``extend`` that calls this (the warning's ``stacklevel``).

    Raises:
        HistoryDivergedError: the batch repeats two or more stored messages, then differs.
    """
    held = len(stored)
    if not held or not items:
        return 0
    same = 0
    for item, message in zip(items, stored, strict=False):
        try:
            if not same_message(item, message):
                break
        except TypeError:  # not a message at all: ingest names the problem
            break
        same += 1
    whole = same == held and (held >= 2 or stored[0].role in ("system", "developer"))
    if whole:
        warnings.warn(
            f"extend() was given the {held} message(s) this memory already holds, at the same positions: "
            f"only the {len(items) - held} after them are stored (a loop passing its whole history each "
            "step wants memory.sync_history(history))",
            RuntimeWarning, stacklevel=3,
        )
        return held
    if same >= 2:
        got = message_to_dict(items[same]) if same < len(items) else None
        raise HistoryDivergedError(
            f"extend() was given a copy of the first {same} stored message(s) followed by "
            + (f"a different message {same}" if got is not None else "nothing more")
            + f", while the memory holds {held}: storing it would duplicate the history; pass only new "
            "messages, memory.sync_history(history) for a growing list, or memory.fresh(history) to start over",
            index=same, expected=stored[same].to_openai(), got=got,
        )
    return 0


def kept_stamps(
    messages: Sequence[Mapping[str, Any]], before: Sequence[Message], clock_stamped: Sequence[bool]
) -> list[dict[str, datetime | None]]:
    """The timestamps the leading ``messages`` equal to ``before``'s keep in a fresh memory (the
    caller's or the clock's, as they were: ``timestamp`` or ``clock_timestamp``), so a resync
    neither restamps the history "now" nor merges its episodes; one per leading equal message."""
    stamps: list[dict[str, datetime | None]] = []
    for given, old, by_clock in zip(messages, before, clock_stamped, strict=False):
        if given != old.raw:
            break
        stamps.append({"clock_timestamp" if by_clock else "timestamp": old.timestamp})
    return stamps


def unchanged_prefix(ours: Sequence[Message], theirs: Sequence[Message]) -> int:
    """How many leading messages two stores share: the same id, content hash (role, content
    and tool calls), tool call id and name."""
    for n, (a, b) in enumerate(zip(ours, theirs, strict=False)):
        if (a.id, a.content_hash, a.tool_call_id, a.name) != (b.id, b.content_hash, b.tool_call_id, b.name):
            return n
    return min(len(ours), len(theirs))

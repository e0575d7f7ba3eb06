"""Message validation for ingest (SPEC §3 step 1): ``content`` parts and ``tool_calls``
checked against the OpenAI chat message types (the rules are listed in the
:mod:`relevance_memory.store._store` docstring), the API's pattern for ``name``, and the records
a batch carries while it is validated (:class:`_Stage`) and once a message is ready to
commit (:class:`_Draft`). :class:`~relevance_memory.store._store.MessageStore` applies them.
"""

from __future__ import annotations

import re
from array import array
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, overload

import numpy as np
import numpy.typing as npt

from .._exceptions import InvalidMessageError
from .._io import message_to_dict
from .._models import RAW_FIELDS, FrozenDict, FrozenList, freeze

_NAME_RE = re.compile(r"^[^\s<|\\/>]+$")
"""The API's pattern for a message's ``name`` (no whitespace, ``<``, ``|``, ``\\``, ``/``, ``>``)."""


class _NotPlain(Exception):
    """A value :func:`own_message`'s one-pass copy does not handle (the general path does)."""


def _own(value: Any) -> Any:
    kind = type(value)
    if kind is str or value is None or kind is int or kind is float or kind is bool:
        return value
    if kind is dict:
        return FrozenDict({k: _own(v) for k, v in value.items()})
    if kind is list or kind is tuple:
        return FrozenList([_own(v) for v in value])
    raise _NotPlain


def own_message(given: Any) -> FrozenDict:
    """The store's read-only deep copy of a message: ``freeze(message_to_dict(given))``.

    A plain ``dict`` of strings, numbers, lists and dicts (what agent loops hold) is copied
    in one pass; anything else — an SDK message object, a typed mapping, a model inside a
    dict — takes :func:`~relevance_memory._io.message_to_dict` first. Either way the result
    is equal (issue 24: converting and then freezing walked every message twice).

    Raises:
        TypeError: ``given`` is neither a mapping nor a message object (from ``message_to_dict``).
    """
    if type(given) is dict:
        try:
            return FrozenDict({k: _own(v) for k, v in given.items()})
        except _NotPlain:
            pass
    frozen: FrozenDict = freeze(message_to_dict(given))
    return frozen


_PLAIN_CALL_KEYS = frozenset({"id", "type", "function"})
_PLAIN_FUNCTION_KEYS = frozenset({"name", "arguments"})


def plain_message(given: Any) -> bool:
    """Whether ``given`` is a plain ``dict`` that holds only what a stored message's fields
    hold (``role``, ``content``, ``tool_calls``, ``tool_call_id``, ``name``), of immutable
    values: a string or ``None`` content, function calls of strings. Ingest then reads it
    without a read-only copy (it keeps none of the caller's containers: only their strings,
    and the dict's :class:`~relevance_memory._models.RawShape`; issue 24: the copy was ~400
    bytes a message, freed only after the whole batch was checked). Pure; O(keys)."""
    if type(given) is not dict or not RAW_FIELDS.issuperset(given):
        return False
    content = given.get("content")
    if content is not None and type(content) is not str:
        return False
    for key in ("role", "tool_call_id", "name"):
        value = given.get(key)
        if value is not None and type(value) is not str:
            return False
    calls = given.get("tool_calls")
    if calls is None:
        return "tool_calls" not in given
    if type(calls) is not list:
        return False
    for call in calls:
        if type(call) is not dict or call.keys() != _PLAIN_CALL_KEYS:
            return False
        function = call["function"]
        if (type(function) is not dict or not _PLAIN_FUNCTION_KEYS.issuperset(function)
                or type(call["id"]) is not str or type(call["type"]) is not str):
            return False
        for value in function.values():
            if type(value) is not str:
                return False
    return True


def _checked_types(fields: Mapping[str, Any]) -> bool:
    """Whether the fields ingest did not make itself are of the exact types
    :class:`~relevance_memory._models.Message` declares (then it is built without validation)."""
    for key in ("trace_id", "parent_id", "producer"):
        value = fields[key]
        if value is not None and type(value) is not str:
            return False
    count, stamp = fields["token_count"], fields["timestamp"]
    return (
        type(fields["scope"]) is str
        and type(count) is int
        and count >= 0
        and (stamp is None or isinstance(stamp, datetime))
    )


_SHORT_CODES = 65_536
"""Vocabulary numbers :class:`StringRows` keeps in two bytes each."""


class StringRows(Sequence[frozenset[str]]):
    """Per message (by index), a set of strings — its lexical terms, or its identifiers —
    kept compact: each distinct string once in a vocabulary, and every row's strings as
    vocabulary numbers in one flat ``array`` (2 bytes a string while the vocabulary has fewer
    than 65,536 strings, then 4; 4 bytes a row for its end; a tuple per message cost 40 bytes
    plus 8 a string). Read as a ``frozenset`` (a new one per read).
    Append-only; a row keeps its strings' first-seen order."""

    __slots__ = ("_codes", "_ends", "_number", "_vocabulary")

    def __init__(self) -> None:
        self._vocabulary: list[str] = []
        self._number: dict[str, int] = {}
        self._codes = array("H")  # widened to "I" when the vocabulary outgrows it
        self._ends = array("I")

    def append(self, row: Sequence[str]) -> None:
        """Add the next message's strings (each string once per row)."""
        number, vocabulary = self._number, self._vocabulary
        codes = list(map(number.get, row))
        if None in codes:
            for n, code in enumerate(codes):
                if code is None:
                    text = row[n]
                    code = codes[n] = number.get(text)
                    if code is None:
                        code = codes[n] = number[text] = len(vocabulary)
                        vocabulary.append(text)
            if len(vocabulary) > _SHORT_CODES and self._codes.typecode == "H":
                self._codes = array("I", self._codes)
        self._codes.extend(codes)  # type: ignore[arg-type]  # no None is left
        self._ends.append(len(self._codes))

    def repeat(self, index: int) -> None:
        """Add the next message's strings as those of message ``index`` (``0 <= index < len(self)``):
        its numbers copied (O(its strings), in C), not looked up again (issue 24: ingest reads a
        repeated text's rows from the message that said it first)."""
        codes, ends = self._codes, self._ends
        codes.extend(codes[ends[index - 1] if index > 0 else 0 : ends[index]])
        ends.append(len(codes))

    def row(self, index: int) -> tuple[str, ...]:
        """The strings of message ``index``, in the order appended."""
        if index < 0:
            index += len(self._ends)
        start = self._ends[index - 1] if index > 0 else 0
        return tuple(map(self._vocabulary.__getitem__, self._codes[start : self._ends[index]]))

    def __len__(self) -> int:
        return len(self._ends)

    def coded(self, start: int, stop: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """Rows ``start`` to ``stop`` (``0 <= start <= stop <= len(self)``) as vocabulary numbers:
        ``(codes, lengths)``, every row's numbers end to end (int64, in each row's order) and
        how many each row has (int64, one per row) — what the prefilter's BM25 index reads,
        with no string or set made per row (issue 24). Copies; nothing of this object is
        shared, so appending stays possible."""
        ends = self._ends
        lo = ends[start - 1] if start > 0 else 0
        hi = ends[stop - 1] if stop > 0 else 0
        codes = np.frombuffer(self._codes[lo:hi], dtype=f"u{self._codes.itemsize}").astype(np.int64)
        bounds = np.frombuffer(ends[start:stop], dtype=f"u{ends.itemsize}").astype(np.int64)
        return codes, np.diff(bounds, prepend=np.int64(lo))

    def code(self, text: str) -> int | None:
        """The vocabulary number of ``text``, or ``None`` when no row holds it."""
        return self._number.get(text)

    def code_space(self) -> StringRows:
        """The object whose vocabulary :meth:`coded` and :meth:`code` number (this one)."""
        return self

    @overload
    def __getitem__(self, index: int) -> frozenset[str]: ...

    @overload
    def __getitem__(self, index: slice) -> list[frozenset[str]]: ...

    def __getitem__(self, index: int | slice) -> frozenset[str] | list[frozenset[str]]:
        if isinstance(index, slice):
            return [frozenset(self.row(i)) for i in range(*index.indices(len(self)))]
        if not -len(self._ends) <= index < len(self._ends):
            raise IndexError(index)
        return frozenset(self.row(index))

    def __iter__(self) -> Iterator[frozenset[str]]:
        for index in range(len(self._ends)):
            yield frozenset(self.row(index))


def _validate_tool_calls(raw: Any, index: int) -> list[dict[str, Any]]:
    """``tool_calls`` checked against ``ChatCompletionMessageToolCallUnionParam``; returns
    ``[{id, type, name, arguments}]`` (a custom call's ``input`` as its ``arguments``)."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise InvalidMessageError(f"tool_calls must be a list, got {type(raw).__name__}", index=index)
    if not raw:
        raise InvalidMessageError(
            "tool_calls is an empty list, which the API rejects; leave the key out when there are no calls",
            index=index,
        )
    calls: list[dict[str, Any]] = []
    for n, call in enumerate(raw):
        if not isinstance(call, Mapping):
            raise InvalidMessageError(f"tool_calls[{n}] must be an object, got {type(call).__name__}", index=index)
        call_id = call.get("id")
        if not isinstance(call_id, str) or not call_id:
            raise InvalidMessageError(f"tool_calls[{n}] has no string 'id'", index=index)
        kind = call.get("type")
        payload_key = "custom" if kind == "custom" else "function"
        argument_key = "input" if kind == "custom" else "arguments"
        payload = call.get(payload_key)
        if not isinstance(payload, Mapping):
            raise InvalidMessageError(f"tool_calls[{n}] ({call_id}) has no '{payload_key}' object", index=index)
        name = payload.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidMessageError(f"tool_calls[{n}] ({call_id}) has no function name", index=index)
        if argument_key not in payload or payload[argument_key] is None:
            raise InvalidMessageError(
                f"tool_calls[{n}] ({call_id}) has no '{payload_key}.{argument_key}'; the API requires it "
                f"(a JSON string; '{{}}' for a call without arguments)",
                index=index,
            )
        arguments = payload[argument_key]
        if not isinstance(arguments, str):
            raise InvalidMessageError(
                f"tool_calls[{n}] ({call_id}) {argument_key} must be a JSON string, got "
                f"{type(arguments).__name__} (serialise it with json.dumps first)",
                index=index,
            )
        if kind not in ("function", "custom"):
            problem = "has no 'type'" if kind is None else f"has type {kind!r}"
            raise InvalidMessageError(
                f"tool_calls[{n}] ({call_id}) {problem}; the API requires type 'function' (or 'custom')",
                index=index,
            )
        calls.append({"id": call_id, "type": kind, "name": name, "arguments": arguments})
    return calls


_PART_PAYLOAD: dict[str, tuple[str, type | tuple[type, ...]]] = {
    "text": ("text", str),
    "input_text": ("text", str),
    "output_text": ("text", str),
    "refusal": ("refusal", str),
    "image_url": ("image_url", Mapping),
    "input_audio": ("input_audio", Mapping),
    "file": ("file", Mapping),
}


_PART_ROLES: dict[str, frozenset[str]] = {
    "text": frozenset({"system", "developer", "user", "assistant", "tool"}),
    "refusal": frozenset({"assistant"}),
    "image_url": frozenset({"user"}),
    "input_audio": frozenset({"user"}),
    "file": frozenset({"user"}),
}
"""Roles whose content may hold each chat part type (``ChatCompletion*MessageParam``)."""


def _validate_content(content: Any, role: str, index: int) -> None:
    if content is None or isinstance(content, str):
        return
    if not isinstance(content, list):
        raise InvalidMessageError(
            f"content must be a string, null or a list of parts, got {type(content).__name__}", index=index
        )
    for n, part in enumerate(content):
        if not isinstance(part, Mapping):
            hint = ' (write {"type": "text", "text": ...})' if isinstance(part, str) else ""
            raise InvalidMessageError(
                f"content[{n}] must be an object with a 'type', got {type(part).__name__}{hint}", index=index
            )
        kind = part.get("type")
        if not isinstance(kind, str) or not kind:
            raise InvalidMessageError(f"content[{n}] has no string 'type'", index=index)
        if kind in ("tool_use", "tool_result"):
            raise InvalidMessageError(
                f"content[{n}] is an Anthropic {kind!r} block; the store keeps OpenAI chat messages, where a "
                "call is an assistant's tool_calls entry and its result a tool message, so the two stay one chain: "
                "convert the history with relevance_memory.from_anthropic(messages, system=...), or wrap the "
                "client with manage(anthropic.Anthropic())",
                index=index,
            )
        expected = _PART_PAYLOAD.get(kind)
        if expected is not None:
            key, types = expected
            if not isinstance(part.get(key), types):
                what = "a string" if types is str else "an object"
                raise InvalidMessageError(f"content[{n}] of type {kind!r} needs {what} '{key}'", index=index)
        allowed = _PART_ROLES.get(kind)
        if allowed is not None and role not in allowed:
            raise InvalidMessageError(
                f"content[{n}] is a {kind!r} part, which the API accepts only in "
                f"{' and '.join(sorted(allowed))} messages, not in a {role} message",
                index=index,
            )
        if kind == "image_url" and not isinstance(part["image_url"].get("url"), str):
            raise InvalidMessageError(f"content[{n}] of type 'image_url' needs a string 'image_url.url'", index=index)
        if kind == "input_audio" and not (
            isinstance(part["input_audio"].get("data"), str) and isinstance(part["input_audio"].get("format"), str)
        ):
            raise InvalidMessageError(
                f"content[{n}] of type 'input_audio' needs string 'input_audio.data' and 'input_audio.format'",
                index=index,
            )


@dataclass(slots=True)
class _Stage:
    """What the messages of a batch validated so far would change (nothing is stored yet).

    Reads fall through to the store; ``_check`` records here, ``_commit`` applies.
    """

    index: int
    step: int
    block_owner: int | None
    leading_system: bool
    first_user: int | None
    steps: list[int] = field(default_factory=list)  # step of each staged message
    ids: list[str] = field(default_factory=list)
    id_set: set[str] = field(default_factory=set)
    call_owner: dict[str, int] = field(default_factory=dict)
    answered: dict[str, int] = field(default_factory=dict)  # tool_call_id → latest answered owner
    now: datetime | None = None  # the store clock's reading for this batch (read once: one moment)


@dataclass(slots=True)
class _Draft:
    """A validated message ready to commit (commit cannot fail): ``fields`` are the
    :class:`~relevance_memory._models.Message`'s, checked, all but ``references``."""

    fields: dict[str, Any]
    parent_index: int | None
    excluded_reason: str | None
    next_step: int
    block_owner: int | None
    clock_stamped: bool = False  # the timestamp is the store clock's, not the caller's (episode cuts)


"""Value objects: messages with their metadata, the task goal, relevance scores.

Names follow SPEC §2. These models are pure data: no I/O, no clock.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from collections.abc import Iterable, Mapping
from datetime import datetime
from enum import Enum
from typing import Annotated, Any, Literal, NoReturn, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_serializer,
    field_validator,
    model_validator,
)

from ._memo import remember

__all__ = [
    "FrozenDict",
    "FrozenList",
    "Message",
    "MessageType",
    "RelevanceScore",
    "Role",
    "ScoreSource",
    "TaskGoal",
    "ToolCall",
    "content_hash",
    "content_text",
    "freeze",
    "is_blob",
    "leaf_texts",
    "part_text",
    "thaw",
    "user_authored",
]

_Model = TypeVar("_Model", bound=BaseModel)

Role = Literal["system", "developer", "user", "assistant", "tool"]
"""OpenAI chat roles we accept. ``developer`` is OpenAI's newer name for ``system``."""

ROLES: frozenset[str] = frozenset({"system", "developer", "user", "assistant", "tool"})


# --------------------------------------------------------------------------- owned data
def _refuse(self: object, *args: object, **kwargs: object) -> NoReturn:
    raise TypeError(
        f"{type(self).__name__} is read-only: a stored message never changes after ingest "
        "(its token count and hash were computed from it); export a copy with Message.to_openai()"
    )


class FrozenList(list):  # type: ignore[type-arg]
    """A read-only ``list`` (equal to, and JSON-encoded as, a plain list).

    Stored messages own their content: ingest copies the caller's lists into these, so
    editing the caller's objects afterwards — or the stored ones — cannot change what a
    token count or content hash was computed from. Every mutator raises ``TypeError``;
    :func:`thaw`, ``copy.copy`` and ``copy.deepcopy`` give a plain, mutable copy.
    """

    __slots__ = ()
    append = extend = insert = remove = pop = clear = sort = reverse = _refuse
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse

    def __copy__(self) -> list[Any]:
        return thaw(self)  # type: ignore[no-any-return]

    def __deepcopy__(self, memo: dict[int, Any]) -> list[Any]:
        return thaw(self)  # type: ignore[no-any-return]

    def __reduce__(self) -> tuple[Any, ...]:
        return (FrozenList, (list(self),))

    def __hash__(self) -> int:  # type: ignore[override]
        raise TypeError("unhashable type: 'FrozenList'")


class FrozenDict(dict):  # type: ignore[type-arg]
    """A read-only ``dict`` (equal to, and JSON-encoded as, a plain dict); see :class:`FrozenList`."""

    __slots__ = ()
    __setitem__ = __delitem__ = __ior__ = clear = pop = popitem = setdefault = update = _refuse

    def __copy__(self) -> dict[str, Any]:
        return thaw(self)  # type: ignore[no-any-return]

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        return thaw(self)  # type: ignore[no-any-return]

    def __reduce__(self) -> tuple[Any, ...]:
        return (FrozenDict, (dict(self),))

    def __hash__(self) -> int:  # type: ignore[override]
        raise TypeError("unhashable type: 'FrozenDict'")


def freeze(value: Any) -> Any:
    """A read-only deep copy of JSON-like ``value``: mappings → :class:`FrozenDict`,
    lists and tuples → :class:`FrozenList`; strings, numbers, ``None`` and other
    objects are kept (they are immutable, or opaque to us). Linear in the size of ``value``.
    """
    kind = type(value)
    if kind is str or value is None or kind is FrozenDict or kind is FrozenList:
        return value  # immutable, or already a frozen copy (its items are frozen too)
    if kind is dict:  # the common case first: no ABC check
        return FrozenDict({k: freeze(v) for k, v in value.items()})
    if kind is list:
        return FrozenList([freeze(v) for v in value])
    if isinstance(value, (str, int, float, bool, FrozenDict, FrozenList)):
        return value
    if isinstance(value, Mapping):
        return FrozenDict({k: freeze(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return FrozenList([freeze(v) for v in value])
    return value


def thaw(value: Any) -> Any:
    """A plain, mutable deep copy of ``value`` (the inverse of :func:`freeze`)."""
    kind = type(value)
    if kind is str or value is None:
        return value
    if kind is FrozenDict or kind is dict:  # the common cases first: no ABC check
        copy = dict(value)  # one C copy; then only the values that are not strings (or None)
        for k, v in copy.items():
            if type(v) is not str and v is not None:
                copy[k] = thaw(v)
        return copy
    if kind is FrozenList or kind is list:
        return [thaw(v) for v in value]
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [thaw(v) for v in value]
    return value


_Frozen = AfterValidator(freeze)


class MessageType(str, Enum):
    """What a message is, beyond its role (SPEC §2). Drives score priors and half-lives."""

    USER_INSTRUCTION = "user_instruction"
    USER_CHAT = "user_chat"
    ASSISTANT_REASONING = "assistant_reasoning"
    TOOL_CALL = "tool_call"
    TOOL_RESULT = "tool_result"
    SYSTEM = "system"
    SUMMARY = "summary"


USER_AUTHORED_TYPES: frozenset[str] = frozenset({MessageType.USER_INSTRUCTION.value, MessageType.USER_CHAT.value})
"""Types of ``user`` messages a person wrote (an instruction or chat), as opposed to other
agents' tool results, calls or reasoning imported from a memory board as ``user`` messages."""


def user_authored(role: str, msg_type: str) -> bool:
    """Whether a message is a user's own words: role ``user`` and type ``user_instruction`` or
    ``user_chat``. Only these can be the task statement or a user constraint (SPEC §7: a user
    constraint scored ≥ 4 is never only in a summary); a ``user`` message imported from a memory
    board that carries another agent's tool result (``msg_type="tool_result"``, SPEC §10) is
    scored and kept like any tool result, not protected as a constraint."""
    return role == "user" and msg_type in USER_AUTHORED_TYPES


class ScoreSource(str, Enum):
    """Where a message's score in a decision record came from (SPEC §8)."""

    LLM = "llm"
    CACHE = "cache"
    OFFLINE = "offline"
    FALLBACK = "fallback"
    PINNED = "pinned"
    RECENT = "recent"


class ToolCall(BaseModel):
    """One entry of an assistant message's ``tool_calls`` (OpenAI format).

    ``arguments`` is the raw JSON string the model produced; it is counted as tokens
    but never parsed, because models emit invalid JSON and the API still accepts it.
    """

    model_config = ConfigDict(frozen=True)

    id: str = Field(min_length=1)
    type: str = "function"
    name: str
    arguments: str = ""


class Message(BaseModel):
    """One chat message plus the metadata assigned on ingest (SPEC §2).

    Build messages with :meth:`RelevanceMemoryManager.add` or :func:`ingest`, which
    validate, classify, count and link them; the constructor alone does not.

    Attributes:
        id: stable id inside one memory (``m0``, ``m1`` … unless given).
        index: 0-based position in the append-only store.
        role: OpenAI role.
        content: the content exactly as given (string, ``None`` or a list of parts).
        tool_calls: parsed view of the assistant's ``tool_calls`` (empty if none).
        tool_call_id: for ``tool`` messages, the call they answer.
        name: the optional ``name`` field (tool name on tool messages).
        msg_type: see :class:`MessageType`.
        step: the step this message belongs to (SPEC §2); ``-1`` for pinned system prompts.
        token_count: tokens this message costs in a request, counted once on ingest,
            framing overhead included (tokens).
        trace_id: explicit grouping given by the caller; messages sharing it form one chain.
        chain_id: id of the trace chain (SPEC §2) this message belongs to.
        parent_id: the message this one answers (a tool result's call), if known.
        producer: name of the agent that produced it (multi-agent provenance).
        scope: visibility scope (``private`` by default; shared boards come later).
        timestamp: when the message was added (clock injected into the manager; the messages
            of one ``extend`` share its one reading).
        content_hash: sha256 over role, content and tool calls (hex, 16 chars).
        references: ids of earlier messages this one refers to (identifiers, paths,
            numbers, or the tool call it answers).
        raw: the original OpenAI dict, exported unchanged by :meth:`to_openai`.

    A message is immutable: the model is frozen, and ``content`` and ``raw`` are deep,
    read-only copies (:class:`FrozenList` / :class:`FrozenDict`) taken on ingest, so
    ``token_count`` and ``content_hash`` always describe what will be sent.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)

    id: str
    index: int
    role: Role
    content: Annotated[str | list[Any] | None, _Frozen] = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    msg_type: MessageType
    step: int
    token_count: int = Field(ge=0)
    trace_id: str | None = None
    chain_id: str = ""
    parent_id: str | None = None
    producer: str | None = None
    scope: str = "private"
    timestamp: datetime | None = None
    content_hash: str = ""
    references: tuple[str, ...] = ()
    raw: Annotated[dict[str, Any], _Frozen] = Field(default_factory=dict, repr=False)

    @model_validator(mode="before")
    @classmethod
    def _raw_of_shape(cls, data: Any) -> Any:
        """A :class:`RawShape` given for ``raw`` (``Message(**vars(message))``) stands for the
        dict it makes of the other fields given; ``tool_calls`` given as the store keeps them
        (rows, :func:`stored_fields`) stand for their :class:`ToolCall` objects."""
        if isinstance(data, Mapping) and _is_rows(data.get("tool_calls")):
            data = {**data, "tool_calls": _calls_of_rows(data["tool_calls"])}
        if isinstance(data, Mapping) and _is_shape(data.get("raw")):
            data = {**data, "raw": rebuild_raw(data["raw"], data)}
        return data

    def to_openai(self) -> dict[str, Any]:
        """The message as an OpenAI chat dict, exactly as it was given (a plain, mutable deep copy)."""
        kept = self.__dict__["raw"]
        if type(kept) is RawShape:
            return rebuild_raw(kept, self, dict, list)  # type: ignore[no-any-return]
        return thaw(kept)  # type: ignore[no-any-return]

    def __eq__(self, other: object) -> bool:
        """Equal fields, :attr:`raw` compared as the dicts it stands for (a :class:`RawShape`
        kept in its place equals the dict it makes), :attr:`tool_calls` as :class:`ToolCall` objects."""
        if not isinstance(other, Message):
            return NotImplemented
        mine, theirs = self.__dict__, other.__dict__
        if not _kept_apart(mine) and not _kept_apart(theirs):
            return super().__eq__(other)
        return (type(self) is type(other) and self.raw == other.raw and self.tool_calls == other.tool_calls
                and all(value == theirs[key] for key, value in mine.items() if key not in ("raw", "tool_calls"))
                and self.__pydantic_private__ == other.__pydantic_private__
                and self.__pydantic_extra__ == other.__pydantic_extra__)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Message:
        """pydantic's ``model_copy``; :attr:`raw` stays the dict as given when ``update`` changes
        a field it is made of (a :class:`RawShape` kept in its place is made into the dict first)."""
        if update and "raw" not in update and type(self.__dict__["raw"]) is RawShape and not RAW_FIELDS.isdisjoint(update):
            update = {**update, "raw": self.raw}
        return super().model_copy(update=update, deep=deep)

    def __iter__(self) -> Any:
        """``(field, value)`` pairs, as pydantic gives them (``dict(message)``), with :attr:`raw`
        the dict (a :class:`RawShape` kept in its place made again), :attr:`msg_type` the
        :class:`MessageType` and :attr:`tool_calls` :class:`ToolCall` objects. ``vars(message)``
        is the instance's own storage: there ``raw`` may be the shape, ``msg_type`` its value (a
        string) and ``tool_calls`` rows (:func:`stored_fields`)."""
        for key, value in super().__iter__():
            yield (key, getattr(self, key)) if key in _KEPT_APART else (key, value)

    def __repr_args__(self) -> Any:
        """pydantic's repr fields, :attr:`msg_type` the :class:`MessageType` and
        :attr:`tool_calls` the :class:`ToolCall` objects (the store keeps their values)."""
        for key, value in super().__repr_args__():
            yield (key, getattr(self, key)) if key in _KEPT_APART else (key, value)

    def __hash__(self) -> int:
        """pydantic's hash of a frozen model (of every field, in order), :attr:`raw` the dict it
        is: a stored message is unhashable, its dict kept or only its shape."""
        fields = self.__dict__
        return hash(tuple(getattr(self, name) if name in _KEPT_APART else fields[name] for name in type(self).model_fields))

    @field_serializer("raw", mode="wrap")
    def _serialize_raw(self, value: Any, handler: SerializerFunctionWrapHandler) -> Any:
        return handler(self.raw if type(value) is RawShape else value)  # a shape: the dict it stands for

    @field_serializer("tool_calls", mode="wrap")
    def _serialize_tool_calls(self, value: Any, handler: SerializerFunctionWrapHandler) -> Any:
        return handler(self.tool_calls if _is_rows(value) else value)  # rows: the calls they stand for

    @field_serializer("msg_type", mode="wrap")
    def _serialize_msg_type(self, value: Any, handler: SerializerFunctionWrapHandler) -> Any:
        return handler(_MESSAGE_TYPES.get(value, value) if type(value) is str else value)  # the store keeps the value

    @property
    def text(self) -> str:
        """Plain text of the content plus tool-call names and arguments (for scoring)."""
        parts = [content_text(self.content)]
        for _, _, name, arguments in call_rows(self):
            parts.append(f"{name}({arguments})")
        return "\n".join(p for p in parts if p)

    @property
    def source(self) -> str:
        """Short provenance label used in scoring prompts: tool name or role."""
        rows = call_rows(self)
        if rows:
            return ",".join(sorted({name for _, _, name, _ in rows}))
        if self.role == "tool" and self.name:
            return self.name
        return self.producer or self.role


RawShape: type[str] = str
"""How a stored message's OpenAI dict (:attr:`Message.raw`) is made again from the
message's own fields, when it held nothing else: its keys in the order given, and of each tool
call its keys (the payload's: ``function``, or ``custom``) and its payload's keys, written in one
string (:func:`_interned_shape`; :func:`rebuild_raw` makes the dict). The store keeps this shape
in place of the dict when the dict's values are the fields' very objects (issue 24: the read-only
copy of the caller's dict was ~400 of the ~2,000 bytes a message kept); equal shapes are one
object (:func:`raw_shape`). A string, not an object of a class of ours nor nested tuples: the
garbage collector never tracks it, and stops tracking a message's dict that holds only such
values in its first pass over it (issue 24).

Reading :attr:`Message.raw` of such a message makes the :class:`FrozenDict` again (a new
object each read, equal to the one given: the same keys, in the same order, and values).
"""

_ShapeCalls = tuple[tuple[tuple[str, ...], tuple[str, ...]], ...]


def rebuild_raw(shape: str, message: Message | Mapping[str, Any],
                mapping: Any = FrozenDict, sequence: Any = FrozenList) -> Any:
    """The dict ``shape`` (a :data:`RawShape`) stands for, of ``message``'s fields (or of a
    mapping of them, its ``tool_calls`` :class:`ToolCall` objects): ``mapping`` for each dict,
    ``sequence`` for ``tool_calls`` (frozen by default; ``dict``/``list`` give a plain copy; a
    list content is thawed then too).

    Raises:
        ValueError: a mapping's fields do not fit the shape (a missing field, or fewer tool
            calls than the shape has).
    """
    keys, shape_calls = _parsed_shape(shape)
    if isinstance(message, Message):
        fields: Mapping[str, Any] = message.__dict__
    else:
        fields = message
        missing = [key for key in keys if key not in fields]
        calls = fields.get("tool_calls", ())
        if missing or len(calls) != len(shape_calls) or not all(isinstance(c, ToolCall) for c in calls):
            problem = f"fields {missing} missing" if missing else f"{len(calls)} tool call(s) for {len(shape_calls)}"
            raise ValueError(f"raw: the fields given do not make the dict its shape stands for ({problem})")
    out: dict[str, Any] = {}
    for key in keys:
        if key == "tool_calls":
            calls = []
            rows = _kept_rows(fields["tool_calls"])
            for (ident, kind, tool, arguments), (call_keys, payload_keys) in zip(rows, shape_calls, strict=True):
                made: dict[str, Any] = {}
                for name in call_keys:
                    if name == "id":
                        made[name] = ident
                    elif name == "type":
                        made[name] = kind
                    else:
                        made[name] = mapping({k: tool if k == "name" else arguments for k in payload_keys})
                calls.append(mapping(made))
            out[key] = sequence(calls)
        elif key == "content" and mapping is dict:
            out[key] = thaw(fields["content"])
        else:
            out[key] = fields[key]
    return out if mapping is dict else mapping(out)


_SHAPES: dict[tuple[Any, ...], str] = {}  # (keys, calls) → the shape
_PARSED: dict[str, tuple[tuple[str, ...], _ShapeCalls]] = {}  # the shape → (keys, calls)
_SHAPE_MARK = "\x1e"
"""How a :data:`RawShape` starts (a string given for ``raw`` that does not is no shape)."""
_MOST_SHAPES = 4096
"""Distinct :class:`RawShape` objects kept; a message of another shape keeps its dict."""
RAW_FIELDS = frozenset({"role", "content", "tool_calls", "tool_call_id", "name"})
"""The fields a message's OpenAI dict is made of (all a :class:`RawShape` rebuilds)."""


def _interned_shape(keys: tuple[str, ...], calls: _ShapeCalls) -> str:
    """The one :data:`RawShape` of ``keys`` and ``calls`` (``(call keys, payload keys)`` of each
    tool call): :data:`_SHAPE_MARK`, the keys ``,``-joined, then for each call ``;``, its keys,
    ``:`` and its payload's keys (the keys are field names and tool-call keys: no ``,;:``). The
    first :data:`_MOST_SHAPES` distinct ones are kept; a message pickled with a shape of the
    class it once was loads through here."""
    shape = _SHAPES.get((keys, calls))
    if shape is None:
        shape = _SHAPE_MARK + ",".join(keys) + "".join(f";{','.join(c)}:{','.join(p)}" for c, p in calls)
        if len(_SHAPES) < _MOST_SHAPES:
            _SHAPES[(keys, calls)] = shape
            _PARSED[shape] = (keys, calls)
    return shape


def _parsed_shape(shape: str) -> tuple[tuple[str, ...], _ShapeCalls]:
    """``(keys, calls)`` of a :data:`RawShape` (:func:`_interned_shape` reversed)."""
    known = _PARSED.get(shape)
    if known is not None:
        return known

    def names(text: str) -> tuple[str, ...]:
        return tuple(text.split(",")) if text else ()

    first, *calls = shape[len(_SHAPE_MARK):].split(";")
    return names(first), tuple((names(c), names(p)) for c, _, p in (call.partition(":") for call in calls))


def raw_shape(raw: Mapping[str, Any], fields: Mapping[str, Any]) -> str | None:
    """The :class:`RawShape` that makes ``raw`` (read-only or plain) again from ``fields`` (a
    :class:`Message`'s fields, as ingest made them of ``raw``), or ``None`` when it cannot: a key that is no
    field (``refusal``, ``audio`` …), or a value that is not the field's very object (the
    field was converted or validated). Pure; O(keys)."""
    keys = tuple(raw)
    calls: list[tuple[tuple[str, ...], tuple[str, ...]]] = []
    for key in keys:
        if key not in RAW_FIELDS:
            return None
        if key == "tool_calls":
            given, parsed = raw[key], fields["tool_calls"]
            if type(given) not in _LISTS or len(given) != len(parsed):
                return None
            for call, made in zip(given, parsed, strict=True):
                if type(call) not in _DICTS or call.get("id") is not made.id or call.get("type") is not made.type:
                    return None
                payload_key = "custom" if made.type == "custom" else "function"
                payload = call.get(payload_key)
                if type(payload) not in _DICTS or len(call) != 3:
                    return None
                argument_key = "input" if made.type == "custom" else "arguments"
                for name, value in payload.items():
                    if value is not (made.name if name == "name" else made.arguments if name == argument_key else _NOTHING):
                        return None
                calls.append((tuple(call), tuple(payload)))
        elif raw[key] is not fields[key]:
            return None
    return _interned_shape(keys, tuple(calls))


def plain_shape(raw: Mapping[str, Any]) -> str:
    """:func:`raw_shape` of a plain message (``plain_message`` in the store's validation) that
    ingest validated, and whose fields it made without conversion: the same shape, without
    comparing each value with its field (there, each field is the dict's own object; issue 24).
    Pure; O(keys)."""
    calls = raw.get("tool_calls")
    return _interned_shape(tuple(raw), tuple([(tuple(c), tuple(c["function"])) for c in calls]) if calls else ())


_NOTHING = object()
_LISTS = (FrozenList, list)
_DICTS = (FrozenDict, dict)


def _message_raw(self: Message) -> dict[str, Any]:
    kept = self.__dict__["raw"]
    return rebuild_raw(kept, self) if type(kept) is RawShape else kept  # type: ignore[no-any-return]


_message_raw.__doc__ = """The original OpenAI dict, read-only (:class:`FrozenDict`), exported unchanged by
:meth:`Message.to_openai`; made again from the fields when the store kept only its
:class:`RawShape`."""
setattr(Message, "raw", property(_message_raw))  # noqa: B010  # a pydantic field: set after the class is made

_MESSAGE_TYPES: dict[str, MessageType] = {kind.value: kind for kind in MessageType}


def _message_msg_type(self: Message) -> MessageType:
    kept = self.__dict__["msg_type"]
    return _MESSAGE_TYPES[kept] if type(kept) is str else kept  # type: ignore[no-any-return]


_message_msg_type.__doc__ = """See :class:`MessageType`. The store keeps its value (a string: issue 24, a
message's dict that holds no enum member, nor any other object of a class, is one the
garbage collector stops tracking); this is the member."""
setattr(Message, "msg_type", property(_message_msg_type))  # noqa: B010  # a pydantic field: set after the class is made


def _is_shape(value: Any) -> bool:
    """Whether ``value`` is a :data:`RawShape` (a string that starts with :data:`_SHAPE_MARK`)."""
    return type(value) is RawShape and value.startswith(_SHAPE_MARK)


def stored_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """``fields`` of a :class:`Message` as the store keeps them (in place; returned): its
    ``msg_type`` the member's value, and its ``tool_calls`` one flat tuple of strings, ``id, type,
    name, arguments`` of each call in turn (a tuple of strings only, which one pass of the
    collector untracks; :attr:`Message.tool_calls` gives the :class:`ToolCall` objects, these ones while
    :data:`_CALLS_KEPT` newer calls have not been read), so the message's dict holds no object
    of a class when its ``raw`` is a :data:`RawShape` and it has no content parts — a dict
    CPython's collector stops tracking, and no call objects nor a tuple of them are kept
    (issue 24: one to three objects fewer a message for every full collection)."""
    kind = fields["msg_type"]
    if type(kind) is MessageType:
        fields["msg_type"] = kind.value
    calls = fields["tool_calls"]
    if calls and type(calls[0]) is ToolCall:
        flat: list[str] = []
        for call in calls:
            row = (call.id, call.type, call.name, call.arguments)
            remember(_CALLS, row, call, _CALLS_KEPT)
            flat.extend(row)
        fields["tool_calls"] = tuple(flat)
    return fields


_CALLS: dict[tuple[str, str, str, str], ToolCall] = {}
_CALLS_KEPT = 4096
"""Tool calls (by their row) whose :class:`ToolCall` objects are kept for the next read of the
messages making them (a build reads the newest messages' calls again and again); only speed
depends on it."""


def _tool_call(row: tuple[str, str, str, str]) -> ToolCall:
    """The :class:`ToolCall` of a stored row ``(id, type, name, arguments)``."""
    call = _CALLS.get(row)
    if call is None:  # trusted(ToolCall, …) without its calls: a first build reads every message's calls
        ident, kind, name, arguments = row
        call = _new_call(ToolCall)
        _set(call, "__dict__", {"id": ident, "type": kind, "name": name, "arguments": arguments})
        _set(call, "__pydantic_fields_set__", _CALL_FIELDS)
        _set(call, "__pydantic_extra__", None)
        _set(call, "__pydantic_private__", None)
        remember(_CALLS, row, call, _CALLS_KEPT)
    return call


_new_call = ToolCall.__new__
_set = object.__setattr__
_CALL_FIELDS = set(ToolCall.model_fields)  # shared by every call made here, as trusted() shares its set


def call_rows(message: Message) -> list[tuple[str, str, str, str]]:
    """``(id, type, name, arguments)`` of each of ``message``'s tool calls, in order, read without
    making :class:`ToolCall` objects (issue 24: the store keeps them as strings)."""
    return _kept_rows(message.__dict__["tool_calls"])


def _kept_rows(kept: tuple[Any, ...]) -> list[tuple[str, str, str, str]]:
    """The ``(id, type, name, arguments)`` rows of ``tool_calls`` as a message's dict holds them:
    rows (:func:`stored_fields`) or :class:`ToolCall` objects."""
    if not kept:
        return []
    if type(kept[0]) is str:
        return _rows_of(kept)
    return [(call.id, call.type, call.name, call.arguments) for call in kept]


def has_tool_calls(message: Message) -> bool:
    """Whether ``message`` makes tool calls (``bool(message.tool_calls)``, without making them)."""
    return bool(message.__dict__["tool_calls"])


def _rows_of(flat: tuple[str, ...]) -> list[tuple[str, str, str, str]]:
    """The ``(id, type, name, arguments)`` rows of ``tool_calls`` as the store keeps them (:func:`stored_fields`)."""
    return [flat[at:at + 4] for at in range(0, len(flat), 4)]  # type: ignore[misc]


def _calls_of_rows(flat: tuple[str, ...]) -> tuple[ToolCall, ...]:
    """The :class:`ToolCall` objects of ``tool_calls`` as the store keeps them."""
    return tuple(map(_tool_call, _rows_of(flat)))


def _message_tool_calls(self: Message) -> tuple[ToolCall, ...]:
    kept = self.__dict__["tool_calls"]
    return _calls_of_rows(kept) if kept and type(kept[0]) is str else kept  # type: ignore[no-any-return]


_message_tool_calls.__doc__ = """Parsed view of the assistant's ``tool_calls`` (empty if none). The store keeps
each call as a row of strings (:func:`stored_fields`); this gives their :class:`ToolCall` objects."""
setattr(Message, "tool_calls", property(_message_tool_calls))  # noqa: B010  # a pydantic field: set after the class is made


def _is_rows(value: Any) -> bool:
    """Whether ``value`` is ``tool_calls`` as the store keeps them: a non-empty flat tuple of strings."""
    return type(value) is tuple and len(value) % 4 == 0 and bool(value) and type(value[0]) is str


_KEPT_APART = frozenset({"raw", "msg_type", "tool_calls"})
"""Fields a stored message's dict may hold in another form than the field's (read through the
field's property)."""


def _kept_apart(fields: Mapping[str, Any]) -> bool:
    """Whether a message's dict holds ``raw`` as a shape or ``tool_calls`` as rows."""
    return type(fields["raw"]) is RawShape or _is_rows(fields["tool_calls"])


_TRUSTED_FIELDS: dict[type[BaseModel], tuple[set[str], dict[str, Any] | None]] = {}


def _shared_keys(names: Iterable[str]) -> dict[str, Any] | None:
    """A dict of ``names`` (values ``None``) whose copies share one key table — an ordinary
    class's instance dict, which CPython keeps split (PEP 412), so a copy holds only its
    values — or ``None`` when such a copy is no smaller than a dict of its own (few keys).
    For a :class:`Message` that is 296 bytes, not 464."""
    holder = type("_Fields", (), {})()
    for name in names:
        setattr(holder, name, None)
    keys: dict[str, Any] = holder.__dict__
    return keys if sys.getsizeof(keys.copy()) < sys.getsizeof(dict(keys)) else None


def _trusted_keys(cls: type[BaseModel]) -> tuple[set[str], dict[str, Any] | None]:
    known = _TRUSTED_FIELDS.get(cls)
    if known is None:
        known = _TRUSTED_FIELDS[cls] = (set(cls.model_fields), _shared_keys(cls.model_fields))
    return known


def trusted_fields(cls: type[BaseModel], fields: dict[str, Any]) -> dict[str, Any]:
    """``fields`` (every field of ``cls``, in declaration order) copied under the key table
    shared by the instances :func:`trusted` makes: the dict an instance will hold, made when
    its values are known (issue 24: ingest checks a whole batch before committing it; a
    per-message dict of its own held until then, and freed after, left ~0.7 KB a message of
    unused heap). Pass it to ``trusted(cls, fields, owned=True)``."""
    keys = _trusted_keys(cls)[1]
    if keys is None:
        return fields
    values = keys.copy()
    values.update(fields)
    return values


def trusted(cls: type[_Model], fields: dict[str, Any], *, owned: bool = False) -> _Model:
    """An instance of the pydantic model ``cls`` made from ``fields`` without validating them
    again: what ingest builds after checking every value itself (issue 24: validating a
    :class:`Message` cost more than counting its tokens).

    ``fields`` must hold every field of ``cls``, in declaration order, each already of its
    declared type; the instance's dict holds them under a key table shared by every instance
    of ``cls`` made here (:func:`_shared_keys`) — ``fields`` itself when ``owned`` (made by
    :func:`trusted_fields`, and given up to the instance). This is pydantic's
    ``model_construct`` without its per-field default handling, and with one fields-set
    shared by every instance made this way (a set per message cost 0.7 KB).
    """
    instance = cls.__new__(cls)
    if not owned:  # the fields' values under the model's one shared key table
        fields = trusted_fields(cls, fields)
    object.__setattr__(instance, "__dict__", fields)
    object.__setattr__(instance, "__pydantic_fields_set__", _trusted_keys(cls)[0])
    object.__setattr__(instance, "__pydantic_extra__", None)
    object.__setattr__(instance, "__pydantic_private__", None)
    return instance


class TaskGoal(BaseModel):
    """The two-layer task goal (SPEC §2): the whole job and what is being done now.

    Attributes:
        final: the whole job with every hard requirement.
        subtask: what is being done now; defaults to the final goal when empty.
        source: ``"explicit"`` when set by the caller, ``"first_user_message"`` when
            derived from the first user message, ``"user_requests"`` when formed from the
            user's requests as they arrive (a chat-style agent whose first message is an
            opener, SPEC §11), ``"none"`` when there is none yet.
    """

    model_config = ConfigDict(frozen=True)

    final: str = ""
    subtask: str = ""
    source: Literal["explicit", "first_user_message", "user_requests", "none"] = "none"

    @property
    def effective_subtask(self) -> str:
        """The subtask, or the final goal when no subtask was given."""
        return self.subtask or self.final

    @property
    def key(self) -> str:
        """What must stay the same for the next build to extend the previous context (SPEC
        §3.1): the final goal — or, for a goal formed from the user's requests, only that it
        is one (each new request conditions scoring at the next compaction and never forces
        a rebuild)."""
        return "(the user's requests)" if self.source == "user_requests" else self.final


class RelevanceScore(BaseModel):
    """A 1–5 relevance score with its reason (SPEC §4 rubric).

    5 decides the task's success; 4 needed for upcoming key steps; 3 useful
    background; 2 weakly related; 1 unrelated.
    """

    model_config = ConfigDict(frozen=True)

    id: str
    score: int = Field(ge=1, le=5)
    reason: str = ""
    source: ScoreSource = ScoreSource.OFFLINE
    weight: float = Field(
        default=0.0,
        description="finer relevance within the same score (higher first; 0 when the scorer gives none); "
        "selection breaks ties between equal scores by it before recency",
    )

    @field_validator("score", mode="before")
    @classmethod
    def _no_bool_or_float(cls, value: Any) -> Any:
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ValueError(f"score must be an integer 1..5, got {value!r}")
        return value


_BLOB_RE = re.compile(r"[A-Za-z0-9+/=_-]{256,}")
"""A run this long without spaces or punctuation is a payload (base64 data), not text."""


def is_blob(text: str) -> bool:
    """Whether ``text`` is an encoded payload (base64 image, audio, file) rather than text."""
    return len(text) >= 256 and _BLOB_RE.fullmatch(text) is not None


def leaf_texts(value: Any) -> list[str]:
    """The string values inside a JSON-like ``value`` (keys and ``type`` tags left out,
    encoded payloads left out), in order; for content parts of a shape we do not know."""
    out: list[str] = []
    if isinstance(value, str):
        if value and not is_blob(value):
            out.append(value)
    elif isinstance(value, Mapping):
        for key, item in value.items():
            if key not in ("type", "id", "tool_use_id", "signature", "cache_control", "media_type"):
                out.extend(leaf_texts(item))
    elif isinstance(value, (list, tuple)):
        for item in value:
            out.extend(leaf_texts(item))
    return out


def part_text(part: Mapping[str, Any]) -> str:
    """Text of one content part, for scoring and summaries.

    OpenAI chat and Responses parts (``text``, ``input_text``, ``output_text``,
    ``refusal``), Anthropic parts (``tool_use`` → ``name(input as JSON)``,
    ``tool_result`` → the text inside it, ``thinking``, ``document`` with a text source),
    placeholders for media (``[image]``, ``[audio]``, ``[file]``), and for any other shape
    the strings inside it (else ``[type]``).
    """
    kind = part.get("type")
    if kind in ("text", "input_text", "output_text"):
        return str(part.get("text", ""))
    if kind == "refusal":
        return str(part.get("refusal", ""))
    if kind in ("image_url", "image", "input_image"):
        return "[image]"
    if kind in ("input_audio", "audio"):
        return "[audio]"
    if kind == "tool_use":
        arguments = json.dumps(part.get("input", {}), ensure_ascii=False, sort_keys=True, default=str)
        return f"{part.get('name', 'tool')}({arguments})"
    if kind == "tool_result":
        inner = part.get("content")
        return content_text(inner) if isinstance(inner, (str, list, tuple)) else ""
    if kind == "thinking":
        return str(part.get("thinking", ""))
    if kind == "document":
        source = part.get("source")
        if isinstance(source, Mapping) and source.get("type") == "text" and isinstance(source.get("data"), str):
            return str(source["data"])
        if isinstance(source, Mapping) and source.get("type") == "content":
            return content_text(source.get("content"))
        return "[file]"
    if kind in ("file", "input_file"):
        return "[file]"
    texts = leaf_texts(part)
    return "\n".join(texts) if texts else f"[{kind}]"


def content_text(content: str | list[Any] | tuple[Any, ...] | None) -> str:
    """Text of an OpenAI ``content`` value: the string, or each part's text joined
    (:func:`part_text`; media as ``[image]``/``[audio]``/``[file]`` placeholders)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    out: list[str] = []
    for part in content:
        if isinstance(part, Mapping):
            out.append(part_text(part))
        elif isinstance(part, str):
            out.append(part)
    return "\n".join(out)


_HASH_JSON = json.JSONEncoder(sort_keys=True, ensure_ascii=False, default=str)
"""``json.dumps(…, sort_keys=True, ensure_ascii=False, default=str)``, built once (not per call)."""


def content_hash(role: str, content: Any, tool_calls: Any = None) -> str:
    """Stable 16-hex-digit sha256 over role, content and tool calls (SPEC §2, §6)."""
    if isinstance(content, str) and not tool_calls:
        payload = f"{role}\x1f{content}"
    else:
        payload = _HASH_JSON.encode([role, content, tool_calls])
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:16]

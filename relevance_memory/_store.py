"""Ingest (SPEC §3 step 1) and the append-only message store.

On ``add``/``extend`` each message is converted to a plain OpenAI chat dict
(:func:`message_to_dict`: dicts, typed dicts and the SDK's message objects alike),
copied into a read-only deep copy the store owns (:func:`freeze`), validated, given an id,
classified (:class:`MessageType`), counted once, assigned to a step, linked into its trace
chain, hashed, and checked for references to earlier messages. Nothing is ever removed.

Validation rules, taken from the OpenAI chat message types
(``openai.types.chat.ChatCompletionMessageParam``); errors name the message index and the
problem:

- ``role`` must be one of ``system``, ``developer``, ``user``, ``assistant``, ``tool``.
- ``content`` must be a string, ``None`` (assistant with tool calls only) or a list of
  parts; each part an object with a string ``type``, and the known part types carry
  their payload (``text`` → a string ``text``; ``image_url`` → ``{url: str}``;
  ``refusal`` → a string ``refusal``; ``input_audio`` → ``{data, format}``; ``file`` →
  an object), in a role whose message type allows it (``image_url``, ``input_audio`` and
  ``file`` only from the user, ``refusal`` only from the assistant). Other part types
  (Responses API, Anthropic ``tool_use``/``tool_result``) are kept and counted by their text.
- ``name``, when present, is a string without whitespace or ``< | \\ / >`` (the API's
  pattern).
- ``tool_calls`` only on assistant messages: a non-empty list of
  ``{id: str, type: "function", function: {name: str, arguments: str}}`` or
  ``{id: str, type: "custom", custom: {name: str, input: str}}``; every key required,
  ids unique among the calls still waiting for a result.
- A ``tool`` message must carry a ``tool_call_id`` answering a call of the assistant
  message it follows (only tool messages in between), once.

An orphan tool message breaks the last rule. With ``on_invalid="raise"`` (default) it
raises :class:`InvalidMessageError`. With ``on_invalid="repair"`` it is stored and marked
``excluded`` with the reason; the build leaves it out of the context and lists it in the
decision record as ``dropped`` with that reason — never a silent drop.

Atomic and thread-safe. ``extend`` validates the whole batch first (each message against
the store *and* the batch messages before it), then stores it whole: an invalid message
anywhere leaves the store unchanged, so a retry never stores anything twice. Every write
holds the store's lock (:attr:`MessageStore.lock`, re-entrant), so many threads (or
asyncio tasks handing ingest to threads) may add at once: ids stay unique, a batch stays
contiguous, and every message is reachable by :meth:`MessageStore.get`. A message is
published (visible through ``len``/``get``/iteration) only after every index about it is
written.
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from ._exceptions import InvalidMessageError
from ._io import message_to_dict
from ._models import ROLES, Message, MessageType, content_hash, content_text, freeze
from ._text import has_constraint, identifiers, lexical_terms
from ._tokenizer import TokenCounter

__all__ = ["MessageStore", "StoreSnapshot"]

_MAX_REFERENCES = 8
_NAME_RE = re.compile(r"^[^\s<|\\/>]+$")
"""The API's pattern for a message's ``name`` (no whitespace, ``<``, ``|``, ``\\``, ``/``, ``>``)."""


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
    answered: set[tuple[int, str]] = field(default_factory=set)


@dataclass(slots=True)
class _Draft:
    """A validated message ready to commit (commit cannot fail)."""

    message: Message
    calls: list[dict[str, Any]]
    parent_index: int | None
    excluded_reason: str | None
    next_step: int
    block_owner: int | None
    idents: set[str]
    text_for_refs: str


class MessageStore:
    """Append-only store of messages with the indexes the pipeline needs.

    Args:
        counter: the token counter; each message is counted once, on ingest.
        on_invalid: ``"raise"`` or ``"repair"`` for orphan tool messages (module doc).
        reference_max_df: identifiers held by more earlier messages than this are too
            common to count as references.
        clock: returns the timestamp stamped on new messages (injected; default: none).

    Attributes:
        messages: every message in arrival order (read-only by convention).
        excluded: message id → reason, for messages kept in the store but never emitted.
        referenced_by: message id → ids of later messages that reference it.
        terms: per message (by index), its distinct lexical terms (for the offline scorer).
        idents: per message (by index), its identifiers (paths, ids, numbers, code names).
        doc_freq: term → number of messages containing it (incremental IDF statistics).
    """

    def __init__(
        self,
        counter: TokenCounter,
        *,
        on_invalid: Literal["raise", "repair"] = "raise",
        reference_max_df: int = 4,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self._counter = counter
        self._on_invalid = on_invalid
        self._max_df = reference_max_df
        self._clock = clock
        self.messages: list[Message] = []
        self._by_id: dict[str, int] = {}
        self.excluded: dict[str, str] = {}
        self.referenced_by: dict[str, list[str]] = {}
        self._call_owner: dict[str, int] = {}  # tool_call_id → index of the latest assistant calling it
        self._answered: set[tuple[int, str]] = set()  # (assistant index, tool_call_id) with a result
        self._pending: set[int] = set()  # assistant indices with a call still unanswered
        self._parent: list[int] = []  # union-find over indices (trace chains)
        self._trace_root: dict[str, int] = {}
        self._ident_holders: dict[str, list[int]] = {}
        self.terms: list[frozenset[str]] = []
        self.idents: list[frozenset[str]] = []
        self.doc_freq: Counter[str] = Counter()
        self._step = -1
        self._leading_system = True
        self._first_user: int | None = None
        self._tool_block_owner: int | None = None  # assistant whose tool block is open
        self._lock = threading.RLock()

    # ----------------------------------------------------------------- access
    def __len__(self) -> int:
        return len(self.messages)

    def __iter__(self) -> Iterator[Message]:
        return iter(self.messages)

    def __getitem__(self, index: int) -> Message:
        return self.messages[index]

    def get(self, message_id: str) -> Message:
        """The message with ``message_id``. Raises ``KeyError`` naming the id. Safe while
        other threads write (a message is published only once fully indexed)."""
        try:
            return self.messages[self._by_id[message_id]]
        except KeyError:
            raise KeyError(f"no message with id {message_id!r}") from None

    def message_type(self, message: Mapping[str, Any], msg_type: MessageType | str | None = None) -> MessageType:
        """The type :meth:`add` would give ``message`` if it were added now (a publish rule
        reads it before the message is stored; the store is append-only and frozen).

        Raises:
            InvalidMessageError: an unknown ``msg_type`` or malformed ``tool_calls``.
        """
        calls = message.get("tool_calls") or []
        return self._classify(str(message.get("role")), message.get("content"),
                              calls if isinstance(calls, list) else [], len(self.messages), msg_type, self._first_user)

    @property
    def first_user_index(self) -> int | None:
        """Index of the first user message (the task statement of an agent run)."""
        return self._first_user

    @property
    def step_count(self) -> int:
        """Number of steps so far (steps are numbered 0 … step_count-1)."""
        return self._step + 1

    def chain_root(self, index: int) -> int:
        """Index of the first message of the trace chain holding ``index``."""
        parent = self._parent
        root = index
        while parent[root] != root:
            root = parent[root]
        while parent[index] != root:  # path compression
            parent[index], index = root, parent[index]
        return root

    def _union(self, a: int, b: int) -> None:
        ra, rb = self.chain_root(a), self.chain_root(b)
        if ra != rb:
            lo, hi = min(ra, rb), max(ra, rb)
            self._parent[hi] = lo

    @property
    def pending_calls(self) -> list[int]:
        """Indices of assistant messages with a tool call that has no result yet, in order."""
        return sorted(self._pending)

    def unanswered_calls(self, index: int) -> list[str]:
        """Tool call ids of the assistant message at ``index`` that have no result yet."""
        return [c.id for c in self.messages[index].tool_calls if (index, c.id) not in self._answered]

    # ----------------------------------------------------------------- ingest
    def add(
        self,
        message: Any,
        *,
        id: str | None = None,
        msg_type: MessageType | str | None = None,
        trace_id: str | None = None,
        parent_id: str | None = None,
        producer: str | None = None,
        scope: str = "private",
        timestamp: datetime | None = None,
    ) -> Message:
        """Validate and append one message; returns the stored :class:`Message`.

        Args:
            message: an OpenAI chat dict, a typed dict, or an SDK message object
                (:func:`message_to_dict`); the store keeps its own read-only deep copy.
            id, msg_type, trace_id, parent_id, producer, scope, timestamp: metadata
                (SPEC §2); ``id`` defaults to ``m<index>``.

        Raises:
            InvalidMessageError: the message breaks a rule in the module docstring (the
                store is unchanged).
        """
        meta = {
            "id": id, "msg_type": msg_type, "trace_id": trace_id, "parent_id": parent_id,
            "producer": producer, "scope": scope, "timestamp": timestamp,
        }
        with self._lock:
            draft = self._check(message, self._stage(), meta)
            return self._commit(draft)

    def extend(self, messages: Iterable[Any]) -> list[Message]:
        """Append many messages in order, atomically: the whole batch is validated first
        (each message against the store and the batch before it), then stored whole.

        Raises:
            InvalidMessageError: a message of the batch is invalid; nothing of the batch
                was stored (the error names the message and its position in the batch).
        """
        items = list(messages)
        with self._lock:
            stage = self._stage()
            drafts: list[_Draft] = []
            for position, message in enumerate(items):
                try:
                    drafts.append(self._check(message, stage, {}))
                except InvalidMessageError as exc:
                    if len(items) == 1:
                        raise
                    raise InvalidMessageError(
                        f"{exc.reason} (batch item {position} of {len(items)}; nothing of this batch was stored)",
                        index=exc.index,
                    ) from None
            return [self._commit(d) for d in drafts]

    def snapshot(self) -> StoreSnapshot:
        """A consistent read-only view of the store as it is now (:class:`StoreSnapshot`);
        builds read through one, so concurrent writers never change what a build sees."""
        return StoreSnapshot(self)

    @property
    def lock(self) -> threading.RLock:
        """The re-entrant lock every write holds; hold it to read a view no writer changes."""
        return self._lock

    def _stage(self) -> _Stage:
        return _Stage(
            index=len(self.messages),
            step=self._step,
            block_owner=self._tool_block_owner,
            leading_system=self._leading_system,
            first_user=self._first_user,
        )

    def _check(self, given: Any, stage: _Stage, meta: Mapping[str, Any]) -> _Draft:
        """Validate ``given`` as the next message after ``stage``; record it in ``stage``.

        Touches nothing of the store, so an error leaves it unchanged.
        """
        index = stage.index
        base = len(self.messages)
        if not isinstance(given, Mapping):
            try:
                given = message_to_dict(given)
            except TypeError:
                raise InvalidMessageError(
                    f"expected an OpenAI chat dict or SDK message object, got {type(given).__name__}", index=index
                ) from None
        # the store's own deep, read-only copy: later edits of the caller's objects change nothing
        message = freeze(message_to_dict(given))
        role = message.get("role")
        if role not in ROLES:
            hint = " (legacy 'function' messages: convert them to 'tool')" if role == "function" else ""
            raise InvalidMessageError(
                f"unknown role {role!r}; expected one of {', '.join(sorted(ROLES))}{hint}", index=index
            )
        content = message.get("content")
        _validate_content(content, role, index)
        name = message.get("name")
        if name is not None and (not isinstance(name, str) or not _NAME_RE.match(name)):
            raise InvalidMessageError(
                f"name must be a string without spaces or < | \\ / > (the API's pattern), got {name!r}", index=index
            )
        calls = _validate_tool_calls(message.get("tool_calls"), index)
        if calls and role != "assistant":
            raise InvalidMessageError(f"only assistant messages may carry tool_calls (role {role!r})", index=index)
        if content is None and not calls and role != "assistant":
            raise InvalidMessageError(f"{role} message has null content", index=index)
        if content is None and not calls:
            raise InvalidMessageError("assistant message has neither content nor tool_calls", index=index)

        def owner_of(call_id: str) -> int | None:
            staged = stage.call_owner.get(call_id)
            return staged if staged is not None else self._call_owner.get(call_id)

        def is_answered(pair: tuple[int, str]) -> bool:
            return pair in stage.answered or pair in self._answered

        seen: set[str] = set()
        for call in calls:
            owner = owner_of(call["id"])
            # ids may be reused once the earlier call was answered (τ-bench runs do this)
            if call["id"] in seen or (owner is not None and not is_answered((owner, call["id"]))):
                raise InvalidMessageError(
                    f"duplicate tool call id {call['id']!r} (the earlier call with this id has no result yet)"
                    if call["id"] not in seen
                    else f"duplicate tool call id {call['id']!r} in one message",
                    index=index,
                )
            seen.add(call["id"])
        message_id = meta.get("id") or f"m{index}"
        if not isinstance(message_id, str):
            raise InvalidMessageError(f"message id must be a string, got {type(message_id).__name__}", index=index)
        if message_id in self._by_id or message_id in stage.id_set:
            raise InvalidMessageError(f"duplicate message id {message_id!r}", index=index)

        excluded_reason: str | None = None
        tool_call_id = message.get("tool_call_id")
        parent_index: int | None = None
        if role == "tool":
            call_owner = owner_of(tool_call_id) if isinstance(tool_call_id, str) else None
            if not isinstance(tool_call_id, str) or not tool_call_id:
                excluded_reason = "tool message without tool_call_id"
            elif call_owner is None:
                excluded_reason = f"tool message answers {tool_call_id!r}, which no earlier assistant message called"
            elif is_answered((call_owner, tool_call_id)):
                excluded_reason = f"second result for tool call {tool_call_id!r}"
            elif stage.block_owner != call_owner:
                excluded_reason = f"tool result for {tool_call_id!r} does not directly follow its assistant message"
            else:
                parent_index = call_owner
            if excluded_reason is not None and self._on_invalid == "raise":
                raise InvalidMessageError(
                    f"{excluded_reason} (set on_invalid='repair' to keep it in the store but out of the context)",
                    index=index,
                )

        kind = self._classify(role, content, calls, index, meta.get("msg_type"), stage.first_user)
        # steps: a user message, or an assistant message with the tool messages answering it
        next_step = stage.step
        if role in ("system", "developer") and stage.leading_system:
            step = -1
        elif role == "tool" and parent_index is not None:
            step = self.messages[parent_index].step if parent_index < base else stage.steps[parent_index - base]
        else:
            next_step += 1
            step = next_step
        if role == "assistant":
            block_owner: int | None = index if calls else None
        elif role == "tool":
            block_owner = stage.block_owner
        else:
            block_owner = None

        parent_id = meta.get("parent_id")
        if parent_id is None and parent_index is not None:
            parent_id = self.messages[parent_index].id if parent_index < base else stage.ids[parent_index - base]
        text_for_refs = content_text(content) + "".join(f"\n{c['name']}({c['arguments']})" for c in calls)
        timestamp = meta.get("timestamp")
        token_count = self._counter.count_message(message)
        try:
            stored = Message(
                id=message_id,
                index=index,
                role=role,
                content=content,
                tool_calls=tuple(calls),  # type: ignore[arg-type]
                tool_call_id=tool_call_id if isinstance(tool_call_id, str) else None,
                name=name,
                msg_type=kind,
                step=step,
                token_count=token_count,
                trace_id=meta.get("trace_id"),
                parent_id=parent_id,
                producer=meta.get("producer"),
                scope=meta.get("scope") or "private",
                timestamp=timestamp or (self._clock() if self._clock else None),
                content_hash=content_hash(role, content, message.get("tool_calls")),
                raw=message,
            )
        except ValueError as exc:  # pydantic's ValidationError: metadata of the wrong type
            raise InvalidMessageError(f"invalid metadata: {exc}", index=index) from None

        # record in the stage: the next message of the batch is checked against this one
        stage.index += 1
        stage.step = next_step
        stage.block_owner = block_owner
        if role not in ("system", "developer"):
            stage.leading_system = False
        if role == "user" and stage.first_user is None:
            stage.first_user = index
        stage.steps.append(step)
        stage.ids.append(message_id)
        stage.id_set.add(message_id)
        for call in calls:
            stage.call_owner[call["id"]] = index
        if parent_index is not None and isinstance(tool_call_id, str):
            stage.answered.add((parent_index, tool_call_id))
        return _Draft(
            message=stored,
            calls=calls,
            parent_index=parent_index,
            excluded_reason=excluded_reason,
            next_step=next_step,
            block_owner=block_owner,
            idents=identifiers(text_for_refs),
            text_for_refs=text_for_refs,
        )

    def _commit(self, draft: _Draft) -> Message:
        """Apply a checked draft (called with the lock held, in batch order; cannot fail).

        Every index is written before the message is published in ``messages``/``get``.
        """
        stored = draft.message
        index = stored.index
        assert index == len(self.messages), "drafts are committed in order"
        references = self._references(draft.idents, draft.parent_index)
        if references:
            stored = stored.model_copy(update={"references": tuple(references)})
        message_id = stored.id
        terms = frozenset(lexical_terms(draft.text_for_refs))
        self._parent.append(index)
        self.terms.append(terms)
        self.idents.append(frozenset(draft.idents))
        self.doc_freq.update(terms)
        for call in draft.calls:
            self._call_owner[call["id"]] = index
        if draft.calls:
            self._pending.add(index)
        parent_index = draft.parent_index
        if parent_index is not None and stored.tool_call_id is not None:
            self._answered.add((parent_index, stored.tool_call_id))
            if not self.unanswered_calls(parent_index):
                self._pending.discard(parent_index)
            self._union(index, parent_index)
        trace_id = stored.trace_id
        if trace_id is not None:
            if trace_id in self._trace_root:
                self._union(index, self._trace_root[trace_id])
            else:
                self._trace_root[trace_id] = index
        if draft.excluded_reason is not None:
            self.excluded[message_id] = draft.excluded_reason
        for ref in references:
            self.referenced_by.setdefault(ref, []).append(message_id)
        self._index_identifiers(index, draft.idents)
        self._step = draft.next_step
        self._tool_block_owner = draft.block_owner
        if stored.role not in ("system", "developer"):
            self._leading_system = False
        if stored.role == "user" and self._first_user is None:
            self._first_user = index
        # publish last: a reader that sees the message finds every index about it
        self.messages.append(stored)
        self._by_id[message_id] = index
        return stored

    # ----------------------------------------------------------------- helpers
    def _classify(
        self,
        role: str,
        content: Any,
        calls: list[dict[str, Any]],
        index: int,
        given: MessageType | str | None,
        first_user: int | None,
    ) -> MessageType:
        if given is not None:
            try:
                return MessageType(given)
            except ValueError:
                raise InvalidMessageError(
                    f"unknown msg_type {given!r}; expected one of {', '.join(t.value for t in MessageType)}",
                    index=index,
                ) from None
        if role in ("system", "developer"):
            return MessageType.SYSTEM
        if role == "tool":
            return MessageType.TOOL_RESULT
        if role == "assistant":
            return MessageType.TOOL_CALL if calls else MessageType.ASSISTANT_REASONING
        if first_user is None or has_constraint(content_text(content)):
            return MessageType.USER_INSTRUCTION
        return MessageType.USER_CHAT

    def _references(self, idents: set[str], parent_index: int | None) -> list[str]:
        refs: list[str] = []
        if parent_index is not None:
            refs.append(self.messages[parent_index].id)
        found: dict[int, int] = {}
        for ident in idents:
            holders = self._ident_holders.get(ident)
            if holders and len(holders) <= self._max_df:
                for holder in holders:
                    if holder != parent_index:
                        found[holder] = found.get(holder, 0) + 1
        # strongest evidence first, then the most recent
        for holder in sorted(found, key=lambda h: (-found[h], -h))[: _MAX_REFERENCES]:
            refs.append(self.messages[holder].id)
        return refs

    def _index_identifiers(self, index: int, idents: set[str]) -> None:
        limit = self._max_df + 1
        for ident in idents:
            holders = self._ident_holders.setdefault(ident, [])
            if len(holders) < limit:
                holders.append(index)


class _Prefix(Sequence[Any]):
    """The first ``n`` items of an append-only list (a read-only view; no copy)."""

    __slots__ = ("_items", "_n")

    def __init__(self, items: list[Any], n: int) -> None:
        self._items, self._n = items, n

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return self._items[: self._n][index]
        if index < 0:
            index += self._n
        if not 0 <= index < self._n:
            raise IndexError(index)
        return self._items[index]

    def __iter__(self) -> Iterator[Any]:
        items = self._items
        for i in range(self._n):
            yield items[i]


class _RefsView(Mapping[str, Sequence[str]]):
    """``referenced_by`` as it was when the snapshot was taken: only referencing messages
    with an index below the snapshot's length count."""

    __slots__ = ("_by_id", "_n", "_refs")

    def __init__(self, refs: dict[str, list[str]], by_id: dict[str, int], n: int) -> None:
        self._refs, self._by_id, self._n = refs, by_id, n

    def _visible(self, ids: list[str]) -> list[str]:
        by_id, n = self._by_id, self._n
        if not ids or by_id.get(ids[-1], n) < n:  # appended in index order: the common case is "all"
            return list(ids)
        return [i for i in ids if by_id.get(i, n) < n]

    def __getitem__(self, key: str) -> Sequence[str]:
        if self._by_id.get(key, self._n) >= self._n:
            raise KeyError(key)
        visible = self._visible(self._refs[key])
        if not visible:
            raise KeyError(key)
        return visible

    def __iter__(self) -> Iterator[str]:
        for key in list(self._refs):
            if self._by_id.get(key, self._n) < self._n and self._visible(self._refs[key]):
                yield key

    def __len__(self) -> int:
        return sum(1 for _ in self)


class StoreSnapshot:
    """A consistent, read-only view of a :class:`MessageStore` as it was at one moment.

    A build reads the store through one of these (:meth:`MessageStore.snapshot`), so
    messages added by other threads or tasks while it runs are neither half-seen nor
    summarised as if they were old: they wait for the next build. Taking one is O(pending
    calls + excluded), not O(messages): the message list and per-message indexes are
    append-only and are read up to the snapshot's length. ``doc_freq`` is the live counter
    (term statistics may include a message added meanwhile; lookups stay safe).
    """

    def __init__(self, store: MessageStore) -> None:
        with store.lock:
            self._store = store
            self._n = n = len(store.messages)
            self.messages: Sequence[Message] = _Prefix(store.messages, n)
            self.terms: Sequence[frozenset[str]] = _Prefix(store.terms, n)
            self.idents: Sequence[frozenset[str]] = _Prefix(store.idents, n)
            self.excluded: Mapping[str, str] = dict(store.excluded)
            self.referenced_by: Mapping[str, Sequence[str]] = _RefsView(store.referenced_by, store._by_id, n)
            self.doc_freq: Mapping[str, int] = store.doc_freq
            self.first_user_index: int | None = store.first_user_index
            self.step_count: int = store.step_count
            self._unanswered = {i: store.unanswered_calls(i) for i in store.pending_calls}
            self.pending_calls: list[int] = sorted(self._unanswered)

    def __len__(self) -> int:
        return self._n

    def __iter__(self) -> Iterator[Message]:
        return iter(self.messages)

    def __getitem__(self, index: int) -> Message:
        return self.messages[index]

    def get(self, message_id: str) -> Message:
        """The message with ``message_id`` if it was in the store when the snapshot was taken.
        Raises ``KeyError`` naming the id."""
        index = self._store._by_id.get(message_id)
        if index is None or index >= self._n:
            raise KeyError(f"no message with id {message_id!r}")
        return self._store.messages[index]

    def chain_root(self, index: int) -> int:
        """Index of the first message of the trace chain holding ``index`` (appending never
        moves an older message's root, so the live union-find answers for the snapshot too)."""
        if not 0 <= index < self._n:
            raise IndexError(index)
        return self._store.chain_root(index)

    def unanswered_calls(self, index: int) -> list[str]:
        """Tool call ids of the assistant message at ``index`` that had no result at the snapshot."""
        return list(self._unanswered.get(index, ()))

"""Ingest (SPEC §3 step 1) and the append-only message store.

On ``add``/``extend`` each OpenAI chat dict is validated, given an id, classified
(:class:`MessageType`), counted once, assigned to a step, linked into its trace chain,
hashed, and checked for references to earlier messages. Nothing is ever removed.

Validation rules (errors name the message index and the problem):

- ``role`` must be one of ``system``, ``developer``, ``user``, ``assistant``, ``tool``.
- ``content`` must be a string, ``None`` (assistant with tool calls only) or a list of parts.
- ``tool_calls`` must be a list of ``{id, type, function: {name, arguments: str}}`` with
  ids unique in the store, and only on assistant messages.
- A ``tool`` message must carry a ``tool_call_id`` answering a call of the assistant
  message it follows (only tool messages in between), once.

An orphan tool message breaks the last rule. With ``on_invalid="raise"`` (default) it
raises :class:`InvalidMessageError`. With ``on_invalid="repair"`` it is stored and marked
``excluded`` with the reason; the build leaves it out of the context and lists it in the
decision record as ``dropped`` with that reason — never a silent drop.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any, Literal

from ._embedding import VectorIndex
from ._exceptions import InvalidMessageError
from ._models import ROLES, Message, MessageType, content_hash, content_text
from ._supersede import SupersedeDetector, SupersedeItem, SupersedeLink
from ._text import has_constraint, identifiers, lexical_terms
from ._tokenizer import TokenCounter

__all__ = ["MessageStore"]

_MAX_REFERENCES = 8
VECTOR_BATCH = 256
"""Messages embedded together on ingest (one tokenizer batch): a build embeds the rest."""


def _validate_tool_calls(raw: Any, index: int) -> list[dict[str, Any]]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise InvalidMessageError(f"tool_calls must be a list, got {type(raw).__name__}", index=index)
    calls: list[dict[str, Any]] = []
    for n, call in enumerate(raw):
        if not isinstance(call, Mapping):
            raise InvalidMessageError(f"tool_calls[{n}] must be an object", index=index)
        call_id = call.get("id")
        if not isinstance(call_id, str) or not call_id:
            raise InvalidMessageError(f"tool_calls[{n}] has no string 'id'", index=index)
        function = call.get("function")
        if not isinstance(function, Mapping):
            raise InvalidMessageError(f"tool_calls[{n}] ({call_id}) has no 'function' object", index=index)
        name = function.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidMessageError(f"tool_calls[{n}] ({call_id}) has no function name", index=index)
        arguments = function.get("arguments", "")
        if arguments is None:
            arguments = ""
        if not isinstance(arguments, str):
            raise InvalidMessageError(
                f"tool_calls[{n}] ({call_id}) arguments must be a JSON string, got "
                f"{type(arguments).__name__} (serialise it with json.dumps first)",
                index=index,
            )
        calls.append({"id": call_id, "type": str(call.get("type") or "function"), "name": name, "arguments": arguments})
    return calls


class MessageStore:
    """Append-only store of messages with the indexes the pipeline needs.

    Args:
        counter: the token counter; each message is counted once, on ingest.
        on_invalid: ``"raise"`` or ``"repair"`` for orphan tool messages (module doc).
        reference_max_df: identifiers held by more earlier messages than this are too
            common to count as references.
        clock: returns the timestamp stamped on new messages (injected; default: none).
        vectors: where each message's embedding is kept, by content hash (issue 11): each
            distinct content is embedded once, in batches of :data:`VECTOR_BATCH` on ingest
            (the rest when a build asks, :meth:`message_vectors`); ``None``: no vectors.
        supersede: detect on ingest which older messages a new one supersedes (the same call
            again, the same file shown again, a fact restated with a new value; issue 11).

    Attributes:
        messages: every message in arrival order (read-only by convention).
        excluded: message id → reason, for messages kept in the store but never emitted.
        referenced_by: message id → ids of later messages that reference it.
        terms: per message (by index), its distinct lexical terms (for the offline scorer).
        idents: per message (by index), its identifiers (paths, ids, numbers, code names).
        doc_freq: term → number of messages containing it (incremental IDF statistics).
        superseded_by: older message id → the :class:`SupersedeLink` to the first newer message
            that superseded it (never deleted; the decision record shows both ends).
        supersedes: newer message id → ids of the older messages it superseded.
    """

    def __init__(
        self,
        counter: TokenCounter,
        *,
        on_invalid: Literal["raise", "repair"] = "raise",
        reference_max_df: int = 4,
        clock: Callable[[], datetime] | None = None,
        vectors: VectorIndex | None = None,
        supersede: bool = True,
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
        self.vectors = vectors
        self._pending_vectors: list[tuple[str, str]] = []
        self._detector = SupersedeDetector() if supersede else None
        self.superseded_by: dict[str, SupersedeLink] = {}
        self.supersedes: dict[str, list[str]] = {}

    # ----------------------------------------------------------------- access
    def __len__(self) -> int:
        return len(self.messages)

    def __iter__(self) -> Iterator[Message]:
        return iter(self.messages)

    def __getitem__(self, index: int) -> Message:
        return self.messages[index]

    def get(self, message_id: str) -> Message:
        """The message with ``message_id``. Raises ``KeyError`` naming the id."""
        try:
            return self.messages[self._by_id[message_id]]
        except KeyError:
            raise KeyError(f"no message with id {message_id!r}") from None

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
        message: Mapping[str, Any],
        *,
        id: str | None = None,
        msg_type: MessageType | str | None = None,
        trace_id: str | None = None,
        parent_id: str | None = None,
        producer: str | None = None,
        scope: str = "private",
        timestamp: datetime | None = None,
    ) -> Message:
        """Validate and append one OpenAI chat dict; returns the stored :class:`Message`.

        Raises:
            InvalidMessageError: the message breaks a rule in the module docstring.
        """
        index = len(self.messages)
        if not isinstance(message, Mapping):
            raise InvalidMessageError(f"expected an OpenAI chat dict, got {type(message).__name__}", index=index)
        role = message.get("role")
        if role not in ROLES:
            hint = " (legacy 'function' messages: convert them to 'tool')" if role == "function" else ""
            raise InvalidMessageError(
                f"unknown role {role!r}; expected one of {', '.join(sorted(ROLES))}{hint}", index=index
            )
        content = message.get("content")
        if content is not None and not isinstance(content, (str, list)):
            raise InvalidMessageError(
                f"content must be a string, null or a list of parts, got {type(content).__name__}", index=index
            )
        calls = _validate_tool_calls(message.get("tool_calls"), index)
        if calls and role != "assistant":
            raise InvalidMessageError(f"only assistant messages may carry tool_calls (role {role!r})", index=index)
        if content is None and not calls and role != "assistant":
            raise InvalidMessageError(f"{role} message has null content", index=index)
        if content is None and not calls:
            raise InvalidMessageError("assistant message has neither content nor tool_calls", index=index)
        seen: set[str] = set()
        for call in calls:
            owner = self._call_owner.get(call["id"])
            # ids may be reused once the earlier call was answered (τ-bench runs do this)
            if call["id"] in seen or (owner is not None and (owner, call["id"]) not in self._answered):
                raise InvalidMessageError(
                    f"duplicate tool call id {call['id']!r} (the earlier call with this id has no result yet)"
                    if call["id"] not in seen
                    else f"duplicate tool call id {call['id']!r} in one message",
                    index=index,
                )
            seen.add(call["id"])
        message_id = id or f"m{index}"
        if message_id in self._by_id:
            raise InvalidMessageError(f"duplicate message id {message_id!r}", index=index)

        excluded_reason: str | None = None
        tool_call_id = message.get("tool_call_id")
        parent_index: int | None = None
        if role == "tool":
            if not isinstance(tool_call_id, str) or not tool_call_id:
                excluded_reason = "tool message without tool_call_id"
            elif tool_call_id not in self._call_owner:
                excluded_reason = f"tool message answers {tool_call_id!r}, which no earlier assistant message called"
            elif (self._call_owner[tool_call_id], tool_call_id) in self._answered:
                excluded_reason = f"second result for tool call {tool_call_id!r}"
            elif self._tool_block_owner != self._call_owner[tool_call_id]:
                excluded_reason = (
                    f"tool result for {tool_call_id!r} does not directly follow its assistant message"
                )
            else:
                parent_index = self._call_owner[tool_call_id]
            if excluded_reason is not None and self._on_invalid == "raise":
                raise InvalidMessageError(
                    f"{excluded_reason} (set on_invalid='repair' to keep it in the store but out of the context)",
                    index=index,
                )

        kind = self._classify(role, content, calls, index, msg_type)
        # steps: a user message, or an assistant message with the tool messages answering it
        next_step = self._step
        if role in ("system", "developer") and self._leading_system:
            step = -1
        elif role == "tool" and parent_index is not None:
            step = self.messages[parent_index].step
        else:
            next_step += 1
            step = next_step
        if role == "assistant":
            block_owner: int | None = index if calls else None
        elif role == "tool":
            block_owner = self._tool_block_owner
        else:
            block_owner = None

        raw = dict(message)
        text_for_refs = content_text(content) + "".join(f"\n{c['name']}({c['arguments']})" for c in calls)
        idents = identifiers(text_for_refs)
        references = self._references(idents, parent_index)
        stored = Message(
            id=message_id,
            index=index,
            role=role,
            content=content,
            tool_calls=tuple(calls),  # type: ignore[arg-type]
            tool_call_id=tool_call_id if isinstance(tool_call_id, str) else None,
            name=message.get("name") if isinstance(message.get("name"), str) else None,
            msg_type=kind,
            step=step,
            token_count=self._counter.count_message(message),
            trace_id=trace_id,
            parent_id=parent_id or (self.messages[parent_index].id if parent_index is not None else None),
            producer=producer,
            scope=scope,
            timestamp=timestamp or (self._clock() if self._clock else None),
            content_hash=content_hash(role, content, message.get("tool_calls")),
            references=tuple(references),
            raw=raw,
        )
        # commit: nothing above mutated the store, so a raised error leaves it unchanged
        self.messages.append(stored)
        self._step = next_step
        self._tool_block_owner = block_owner
        if role not in ("system", "developer"):
            self._leading_system = False
        self._by_id[message_id] = index
        self._parent.append(index)
        for call in calls:
            self._call_owner[call["id"]] = index
        if calls:
            self._pending.add(index)
        if parent_index is not None and isinstance(tool_call_id, str):
            self._answered.add((parent_index, tool_call_id))
            if not self.unanswered_calls(parent_index):
                self._pending.discard(parent_index)
            self._union(index, parent_index)
        if trace_id is not None:
            if trace_id in self._trace_root:
                self._union(index, self._trace_root[trace_id])
            else:
                self._trace_root[trace_id] = index
        if excluded_reason is not None:
            self.excluded[message_id] = excluded_reason
        if role == "user" and self._first_user is None:
            self._first_user = index
        for ref in references:
            self.referenced_by.setdefault(ref, []).append(message_id)
        self._index_identifiers(index, idents)
        terms = frozenset(lexical_terms(text_for_refs))
        self.terms.append(terms)
        self.idents.append(frozenset(idents))
        self.doc_freq.update(terms)
        if excluded_reason is None:
            self._observe_supersede(stored, text_for_refs, parent_index)
        if self.vectors is not None and stored.content_hash not in self.vectors:
            self._pending_vectors.append((stored.content_hash, text_for_refs))
            if len(self._pending_vectors) >= VECTOR_BATCH:
                self._flush_vectors()
        return stored

    def _observe_supersede(self, stored: Message, text: str, parent_index: int | None) -> None:
        if self._detector is None:
            return
        call: tuple[str, str] | None = None
        if stored.role == "tool" and parent_index is not None:
            parent = self.messages[parent_index]
            call = next(((c.name, c.arguments) for c in parent.tool_calls if c.id == stored.tool_call_id), None)
        item = SupersedeItem(
            id=stored.id, index=stored.index, step=stored.step, role=stored.role,
            text=content_text(stored.content) if stored.role != "assistant" else text,
            content_hash=stored.content_hash, speaker=stored.name or stored.role, call=call,
            calls=tuple((c.name, c.arguments) for c in stored.tool_calls),
        )
        for link in self._detector.observe(item):
            if link.older in self.superseded_by or link.older in self.excluded:
                continue
            self.superseded_by[link.older] = link
            self.supersedes.setdefault(link.newer, []).append(link.older)

    def _flush_vectors(self) -> None:
        if self.vectors is not None and self._pending_vectors:
            pending, self._pending_vectors = self._pending_vectors, []
            self.vectors.add(pending)

    def message_vectors(self) -> VectorIndex | None:
        """The vector index with every stored message embedded (embeds what ingest left
        pending, once), or ``None`` when the store keeps no vectors."""
        self._flush_vectors()
        return self.vectors

    def extend(self, messages: Iterable[Mapping[str, Any]]) -> list[Message]:
        """Append many messages in order; stops at the first invalid one (earlier ones stay)."""
        return [self.add(m) for m in messages]

    # ----------------------------------------------------------------- helpers
    def _classify(
        self, role: str, content: Any, calls: list[dict[str, Any]], index: int, given: MessageType | str | None
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
        if self._first_user is None or has_constraint(content_text(content)):
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

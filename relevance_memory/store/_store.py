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
  ``file`` only from the user, ``refusal`` only from the assistant). Anthropic ``tool_use`` /
  ``tool_result`` blocks are refused (they would split a chain: convert the history with
  :func:`~relevance_memory.clients._anthropic_messages.from_anthropic`); other part types (Responses API,
  Anthropic images, documents, thinking) are kept and counted by what they carry.
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

Issue 11: with ``vectors`` each distinct content is embedded once, in batches on ingest (the
rest when a build asks, :meth:`MessageStore.message_vectors`), keyed by content hash; with
``supersede`` each stored message is checked against earlier ones
(:class:`~relevance_memory.store._supersede.SupersedeDetector`) and the links are kept both ways
(``superseded_by`` / ``supersedes``). Neither deletes anything.
"""

from __future__ import annotations

import math
import threading
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime, timezone
from typing import Any, Literal

from .._collector import paused_collector
from .._config import EPISODE_GAP_S
from .._exceptions import ConfigError, InvalidMessageError
from .._memo import remember
from .._models import (
    RAW_FIELDS,
    ROLES,
    Message,
    MessageType,
    ToolCall,
    call_rows,
    content_hash,
    content_text,
    plain_shape,
    raw_shape,
    stored_fields,
    trusted,
    trusted_fields,
)
from .._text import distinct_terms, has_constraint, identifiers
from .._tokenizer import TiktokenCounter, TokenCounter
from ..scoring._embedding import VectorIndex
from ._supersede import SupersedeDetector, SupersedeItem, SupersedeLink
from ._validate import (
    _NAME_RE,
    StringRows,
    _checked_types,
    _Draft,
    _Stage,
    _validate_content,
    _validate_tool_calls,
    own_message,
    plain_message,
)

__all__ = ["MessageStore"]

_MAX_REFERENCES = 8
VECTOR_BATCH = 256
"""Messages embedded together on ingest (one tokenizer batch): a build embeds the rest. An
embedder with a ``batch_size`` attribute sets its own (the minilm one: 16, so a batch holds
the store's lock for about a second, not five)."""


_ROWS_MEMO = 256
"""Texts (by their ``hash``, the text compared on a hit) whose lexical terms and identifiers ingest memoises (an agent reads the same file,
runs the same command, gets the same output again) by the index of a message of that text: a repeat reads that
message's rows, and shares its vector (:meth:`VectorIndex.share`) rather than embedding the text again. Only
speed depends on it."""


_COUNT_MEMO = 256
"""Messages (by role, content, name and calls) whose token counts ingest memoises."""


def _add_id(index: dict[str, tuple[str] | list[str]], key: str, message_id: str) -> None:
    """Append ``message_id`` to ``index[key]``: a 1-tuple for the first (a list is two blocks;
    issue 24), a list from the second on."""
    held = index.get(key)
    if held is None:
        index[key] = (message_id,)
    elif isinstance(held, tuple):
        index[key] = [*held, message_id]
    else:
        held.append(message_id)


def _message_text(content: Any, calls: Iterable[tuple[str, str]]) -> str:
    """What a message says, for its lexical terms, identifiers, supersede detection and vector:
    its content's text, then each tool call ``(name, arguments)`` as ``\nname(arguments)``."""
    return content_text(content) + "".join([f"\n{name}({arguments})" for name, arguments in calls])


def _text_rows(text: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A message text's distinct lexical terms (first-seen order) and its identifiers (sorted)."""
    return distinct_terms(text), tuple(sorted(identifiers(text)))


class MessageStore:
    """Append-only store of messages with the indexes the pipeline needs.

    Args:
        counter: the token counter; each message is counted once, on ingest.
        on_invalid: ``"raise"`` or ``"repair"`` for orphan tool messages (module doc).
        reference_max_df: identifiers held by more earlier messages than this are too
            common to count as references.
        clock: returns the timestamp stamped on new messages (injected; default: none), read
            once a batch (``add``: one message; ``extend``: all of them).
        vectors: where each message's embedding is kept, by content hash (issue 11): each
            distinct content is embedded once, in batches of :data:`VECTOR_BATCH` on ingest
            (the rest when a build asks, :meth:`message_vectors`); ``None``: no vectors.
        supersede: detect on ingest which older messages a new one supersedes (the same call
            again, the same file shown again, a fact restated with a new value; issue 11).
        episode_gap_s: silence between two messages that starts a new episode (seconds;
            default :data:`~relevance_memory._config.EPISODE_GAP_S`, the 30-minute inactivity timeout web analytics
            use to cut sessions).

    Attributes:
        messages: every message in arrival order (read-only by convention).
        excluded: message id → reason, for messages kept in the store but never emitted.
        referenced_by: message id → ids of later messages that reference it (a tuple while
            there is one, then a list).
        terms: per message (by index), its distinct lexical terms (for the offline scorer), a
            ``frozenset`` on each read (:class:`StringRows`).
        idents: per message (by index), its identifiers (paths, ids, numbers, code names), a
            ``frozenset`` on each read.
        episodes: per message (by index), its episode number from 0: a new episode starts
            when a message's timestamp is ``episode_gap_s`` or more away from the previous
            timestamped message's (a conversation session; a message without a timestamp
            stays in the episode of the message before it). Once the caller gives timestamps,
            the clock's stamps no longer cut (two timelines: an imported chat of 2023 whose
            replies the clock stamps today); a naive datetime is taken as UTC. The offline
            scorer reads it (episode context).
        clock_stamped: per message (by index), whether its timestamp is the clock's (or a
            replayed clock stamp) rather than the caller's.
        doc_freq: term → number of messages containing it (incremental IDF statistics).
        superseded_by: older message id → the :class:`SupersedeLink` to the first newer message
            that superseded it (never deleted; the decision record shows both ends).
        supersedes: newer message id → ids of the older messages it superseded (a tuple while
            there is one, then a list).
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
        episode_gap_s: float = EPISODE_GAP_S,
    ) -> None:
        if not (isinstance(episode_gap_s, (int, float)) and not isinstance(episode_gap_s, bool)
                and math.isfinite(episode_gap_s) and episode_gap_s > 0):
            raise ConfigError(f"episode_gap_s must be a positive number of seconds, got {episode_gap_s!r}")
        self._counter = counter
        self._episode_gap = float(episode_gap_s)
        self.episodes: list[int] = []
        self._last_stamp: datetime | None = None  # the last timestamp that counts for episode cuts (aware)
        self._caller_stamped = False  # a caller-given timestamp was seen: the clock's no longer cut
        self.clock_stamped: list[bool] = []
        self._on_invalid = on_invalid
        self._max_df = reference_max_df
        self._clock = clock
        self.messages: list[Message] = []
        self._by_id: dict[str, int] = {}
        self.excluded: dict[str, str] = {}
        self.referenced_by: dict[str, tuple[str] | list[str]] = {}
        # tool_call_id → index of the latest assistant calling it while the call waits for its result
        # (then the id's owner is in _answered: one entry per id, not two)
        self._call_owner: dict[str, int] = {}
        # tool_call_id → index of the latest assistant whose call with that id has a result: a
        # call (index, id) has one when the index is at most that (an id is reused only once the
        # earlier call with it has its result); a dict entry per id, not a tuple per result
        self._answered: dict[str, int] = {}
        self._pending: set[int] = set()  # assistant indices with a call still unanswered
        self._chain_merges = 0
        self._parent = array("i")  # union-find over indices (trace chains): 4 bytes a message, not a list slot
        self._trace_root: dict[str, int] = {}
        # identifier → index of the one message holding it, or the indices of the first
        # reference_max_df + 1 holding it (most identifiers have one holder: no list for them)
        self._ident_holders: dict[str, int | list[int]] = {}
        self.terms = StringRows()
        self.idents = StringRows()
        self.doc_freq: Counter[str] = Counter()
        self._step = -1
        self._leading_system = True
        self._first_user: int | None = None
        self._tool_block_owner: int | None = None  # assistant whose tool block is open
        self._lock = threading.RLock()
        self.vectors = vectors
        self._pending_vectors: list[tuple[str, str]] = []
        # a text's hash → index of a message with this text (its terms, identifiers and vector are the text's)
        self._rows_memo: dict[int, int] = {}
        self._detector = SupersedeDetector() if supersede else None
        # (role, content, name, *calls) → tokens, for the package's counter (its count reads only these)
        self._count_memo: dict[tuple[Any, ...], int] | None = {} if type(counter) is TiktokenCounter else None
        self.superseded_by: dict[str, SupersedeLink] = {}
        self.supersedes: dict[str, tuple[str] | list[str]] = {}

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

    def indices(self, message_ids: Iterable[str]) -> list[int]:
        """The store indices of ``message_ids``, in their order (one dict read each: no message
        fetched). Raises ``KeyError`` naming the first id the store does not hold."""
        by_id = self._by_id
        try:
            return [by_id[message_id] for message_id in message_ids]
        except KeyError as missing:
            raise KeyError(f"no message with id {missing.args[0]!r}") from None

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
        """Join the chain of the new message ``a`` to that of the older ``b`` (the older root
        stays the root). When ``a`` had already joined another older chain, two older chains
        merge and one of their roots moves: :attr:`chain_merges` counts that."""
        ra, rb = self.chain_root(a), self.chain_root(b)
        if ra != rb:
            lo, hi = min(ra, rb), max(ra, rb)
            self._parent[hi] = lo
            if hi != a:
                self._chain_merges += 1

    @property
    def chain_merges(self) -> int:
        """How many times a new message joined two older chains, moving an older message's
        chain root (otherwise appending never moves one: what per-memory chain indexes rely on)."""
        return self._chain_merges

    @property
    def pending_calls(self) -> list[int]:
        """Indices of assistant messages with a tool call that has no result yet, in order."""
        return sorted(self._pending)

    def unanswered_calls(self, index: int) -> list[str]:
        """Tool call ids of the assistant message at ``index`` that have no result yet."""
        answered = self._answered
        return [row[0] for row in call_rows(self.messages[index]) if answered.get(row[0], -1) < index]

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
        clock_timestamp: datetime | None = None,
    ) -> Message:
        """Validate and append one message; returns the stored :class:`Message`.

        Args:
            message: an OpenAI chat dict, a typed dict, or an SDK message object
                (:func:`message_to_dict`); the store keeps its own read-only deep copy.
            id, msg_type, trace_id, parent_id, producer, scope, timestamp: metadata
                (SPEC §2); ``id`` defaults to ``m<index>``.
            clock_timestamp: the clock's stamp recorded for a message replayed from a journal
                (a restarted agent): used when ``timestamp`` is ``None`` instead of the clock,
                and counts as the clock's for episode cuts (``episodes``).

        Raises:
            InvalidMessageError: the message breaks a rule in the module docstring (the
                store is unchanged).
        """
        meta = {
            "id": id, "msg_type": msg_type, "trace_id": trace_id, "parent_id": parent_id,
            "producer": producer, "scope": scope, "timestamp": timestamp,
            "clock_timestamp": clock_timestamp,
        }
        with self._lock:
            draft = self._check(message, self._stage(), meta)
            stored = self._commit(draft)
            self._embed_full_batches()
            return stored

    def extend(self, messages: Iterable[Any]) -> list[Message]:
        """Append many messages in order, atomically: the whole batch is validated first
        (each message against the store and the batch before it), then stored whole.

        Raises:
            InvalidMessageError: a message of the batch is invalid; nothing of the batch
                was stored (the error names the message and its position in the batch).
        """
        items = list(messages)
        with self._lock, paused_collector(len(items), full=True):  # a large batch: no collector passes meanwhile
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
            stored: list[Message] = []
            failed: Exception | None = None
            for draft in drafts:
                stored.append(self._commit(draft))
                if failed is None:
                    try:  # a batch of pending vectors at a time: memory stays bounded on a huge extend
                        self._embed_full_batches()
                    except Exception as exc:  # the embedder failed: store the rest, then raise (still pending)
                        failed = exc
            if failed is not None:
                raise failed
            return stored

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
        # the store's own deep, read-only copy: later edits of the caller's objects change nothing;
        # a plain dict of strings is read as it is (only its strings are kept, and its shape)
        plain = plain_message(given)
        try:
            message = given if plain else own_message(given)
        except TypeError:
            raise InvalidMessageError(
                f"expected an OpenAI chat dict or SDK message object, got {type(given).__name__}", index=index
            ) from None
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
            if staged is not None:
                return staged
            owner = self._call_owner.get(call_id)
            return owner if owner is not None else self._answered.get(call_id)

        def is_answered(owner: int, call_id: str) -> bool:
            return stage.answered.get(call_id, -1) >= owner or self._answered.get(call_id, -1) >= owner

        seen: set[str] = set()
        for call in calls:
            owner = owner_of(call["id"])
            # ids may be reused once the earlier call was answered (τ-bench runs do this)
            if call["id"] in seen or (owner is not None and not is_answered(owner, call["id"])):
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
            elif is_answered(call_owner, tool_call_id):
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
        given = meta.get("timestamp")
        replayed = meta.get("clock_timestamp")
        fields: dict[str, Any] = {  # Message's fields in declaration order (references at commit)
            "id": message_id, "index": index, "role": role, "content": content,
            "tool_calls": tuple([trusted(ToolCall, c) for c in calls]) if calls else (),  # each dict is ours (made by validation)
            "tool_call_id": tool_call_id if isinstance(tool_call_id, str) else None,
            "name": name, "msg_type": kind, "step": step, "token_count": self._count(message, role, content, name, calls),
            "trace_id": meta.get("trace_id"), "chain_id": "", "parent_id": parent_id,
            "producer": meta.get("producer"), "scope": meta.get("scope") or "private",
            "timestamp": given or replayed or self._now(stage),
            "content_hash": content_hash(role, content, message.get("tool_calls")), "references": (), "raw": message,
        }
        checked = _checked_types(fields)
        if not checked:  # metadata of another type: pydantic validates (and coerces) it
            try:
                fields = dict(Message(**fields).__dict__)
            except ValueError as exc:  # pydantic's ValidationError: metadata of the wrong type
                raise InvalidMessageError(f"invalid metadata: {exc}", index=index) from None
        shape = plain_shape(message) if plain and checked else raw_shape(message, fields)
        if shape is not None:  # the dict is made again from the fields when read (issue 24)
            fields["raw"] = shape
        elif plain:  # never the caller's own dict: the store's read-only copy
            fields["raw"] = own_message(message)
        fields = trusted_fields(Message, fields)  # the dict the message will hold (no copy at commit)

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
            stage.answered[tool_call_id] = parent_index
        return _Draft(
            fields=fields,
            parent_index=parent_index,
            excluded_reason=excluded_reason,
            next_step=next_step,
            block_owner=block_owner,
            clock_stamped=given is None and (replayed is not None or self._clock is not None),
        )

    def _now(self, stage: _Stage) -> datetime | None:
        """The clock's reading for the messages of ``stage``'s batch: read once, when the batch's
        first message without a timestamp is checked — the batch is added at one moment, and its
        messages share one ``datetime`` (issue 24: 48 bytes a message); ``None`` without a clock."""
        if stage.now is None and self._clock is not None:
            stage.now = self._clock()
        return stage.now

    def _count(self, message: Mapping[str, Any], role: str, content: Any, name: str | None,
               calls: list[dict[str, Any]]) -> int:
        """Tokens of a validated message; with the package's own counter, a message of the same
        role, string content, name and calls as a recent one has its count (issue 24: an agent
        runs the same command and gets the same output again; only speed depends on the memo)."""
        memo = self._count_memo
        if memo is None or not (content is None or type(content) is str) or not RAW_FIELDS.issuperset(message):
            return self._counter.count_message(message)
        key = (role, content, name, *[(c["type"], c["name"], c["arguments"]) for c in calls])
        count = memo.get(key)
        return count if count is not None else remember(memo, key, self._counter.count_message(message), _COUNT_MEMO)

    def _commit(self, draft: _Draft) -> Message:
        """Apply a checked draft (called with the lock held, in batch order; cannot fail).

        Every index is written before the message is published in ``messages``/``get``.
        """
        fields = draft.fields
        index = fields["index"]
        assert index == len(self.messages), "drafts are committed in order"
        # what a message says is read here, not when the batch is checked: a draft holds no
        # text, so checking a batch of a million messages holds no million texts
        calls: tuple[ToolCall, ...] = fields["tool_calls"]
        text_for_refs = _message_text(fields["content"], [(c.name, c.arguments) for c in calls] if calls else ())
        memo_key = hash(text_for_refs)  # not the text: it may be long (a str keeps its hash: no second pass)
        earlier = self._rows_memo.get(memo_key)
        if earlier is not None:
            before = self.messages[earlier]
            if _message_text(before.content, [(n, a) for _, _, n, a in call_rows(before)]) != text_for_refs:
                earlier = None  # another text of the same hash
        if earlier is None:
            terms, idents = _text_rows(text_for_refs)
            remember(self._rows_memo, memo_key, index, _ROWS_MEMO)
            same_text = None
        else:  # the rows and the content hash of the earlier message with this text
            terms, idents = self.terms.row(earlier), self.idents.row(earlier)
            same_text = self.messages[earlier].content_hash
            if same_text == fields["content_hash"]:
                fields["content_hash"] = same_text  # the same content again: one string for both
        held = list(map(self._ident_holders.get, idents))  # read once, for references and the index
        references = self._references(held, draft.parent_index)
        if references:
            fields["references"] = tuple(references)
        stored = trusted(Message, stored_fields(fields), owned=True)  # its msg_type a string (issue 24)
        message_id = stored.id
        # each distinct term and identifier is kept once, a message's rows as numbers
        # (:class:`StringRows`; issue 24: the per-message frozensets and their strings were
        # 3 KB of the 6.4 KB a message cost)
        self._parent.append(index)
        if earlier is None:
            self.terms.append(terms)
            self.idents.append(idents)
        else:  # the rows of the earlier message with this text, copied as numbers
            self.terms.repeat(earlier)
            self.idents.repeat(earlier)
        self.episodes.append(self._episode_of(stored, by_clock=draft.clock_stamped))
        self.clock_stamped.append(draft.clock_stamped)
        self.doc_freq.update(terms)
        for call in calls:
            self._call_owner[call.id] = index
        if calls:
            self._pending.add(index)
        parent_index = draft.parent_index
        if parent_index is not None and stored.tool_call_id is not None:
            self._answered[stored.tool_call_id] = parent_index
            if self._call_owner.get(stored.tool_call_id) == parent_index:
                del self._call_owner[stored.tool_call_id]
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
            _add_id(self.referenced_by, ref, message_id)
        self._index_identifiers(index, idents, held)
        if draft.excluded_reason is None:
            self._observe_supersede(stored, text_for_refs, parent_index)
        vectors = self.vectors
        # the same text as a recent message (a repeated call: a new call id, a new hash) takes its row
        if vectors is not None and stored.content_hash not in vectors and (
                same_text is None or not vectors.share(stored.content_hash, same_text)):
            self._pending_vectors.append((stored.content_hash, text_for_refs))
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

    def _observe_supersede(self, stored: Message, text: str, parent_index: int | None) -> None:
        """Links ``stored`` makes (lock held, before it is published; issue 11)."""
        if self._detector is None:
            return
        call: tuple[str, str] | None = None
        if stored.role == "tool" and parent_index is not None:
            parent = self.messages[parent_index]
            call = next(((name, arguments) for call_id, _, name, arguments in call_rows(parent)
                         if call_id == stored.tool_call_id), None)  # no ToolCall objects made (issue 24)
        item = SupersedeItem(
            id=stored.id, index=stored.index, step=stored.step, role=stored.role,
            text=content_text(stored.content) if stored.role != "assistant" else text,
            content_hash=stored.content_hash, speaker=stored.name or stored.role, call=call,
            calls=tuple([(name, arguments) for _, _, name, arguments in call_rows(stored)]),
        )
        for link in self._detector.observe(item):
            if link.older in self.superseded_by or link.older in self.excluded:
                continue
            self.superseded_by[link.older] = link
            _add_id(self.supersedes, link.newer, link.older)

    def _embed_full_batches(self) -> None:
        """Embed pending messages in batches of :data:`VECTOR_BATCH` while a whole batch has
        gathered (after the messages are stored: an embedder error leaves them stored and
        still pending). Called after every message: fewer pending than a batch is one test."""
        if self.vectors is not None and len(self._pending_vectors) >= self._vector_batch():
            self._flush_vectors(full_only=True)

    def _vector_batch(self) -> int:
        """How many pending messages the store embeds at a time (the embedder's ``batch_size``,
        else :data:`VECTOR_BATCH`)."""
        assert self.vectors is not None
        return max(1, int(getattr(self.vectors.embedder, "batch_size", VECTOR_BATCH)))

    def _flush_vectors(self, *, full_only: bool = False) -> None:
        """Embed what is pending, one batch at a time (an ``extend`` of 50k messages holds one
        batch's arrays at a time, not 50k messages'); with ``full_only`` a last partial batch
        stays pending."""
        with self._lock:
            if self.vectors is None:
                return
            size = self._vector_batch()
            pending = self._pending_vectors
            done = 0
            try:
                while len(pending) - done >= (size if full_only else 1):
                    self.vectors.add(pending[done : done + size])  # keys already stored are skipped
                    done += size
            finally:
                if done:
                    self._pending_vectors = pending[done:]

    def edited_views(self) -> dict[str, str]:
        """Every file the agent edited → id of the newest stored message showing or writing it
        (:meth:`SupersedeDetector.edited_views`); ``{}`` without supersede detection. Selection
        keeps these first among equal scores (issue 11: the current state of the files under
        repair)."""
        with self.lock:
            return self._detector.edited_views() if self._detector is not None else {}

    def file_edits(self) -> dict[str, str]:
        """Every file the agent edited → id of the newest stored message that edited it
        (:meth:`SupersedeDetector.edits`); ``{}`` without supersede detection. Selection tries
        the newest views of the files edited last first (issue 11)."""
        with self.lock:
            return self._detector.edits() if self._detector is not None else {}

    def message_vectors(self) -> VectorIndex | None:
        """The vector index with every stored message embedded (embeds what ingest left
        pending, once, holding the store's lock), or ``None`` when the store keeps no vectors."""
        self._flush_vectors()
        return self.vectors

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

    def _episode_of(self, message: Message, *, by_clock: bool) -> int:
        """Episode number of a message about to be appended (see ``episodes``).

        The caller's timestamps and the clock's are two timelines (an imported chat of 2023
        whose replies the clock stamps today): once the caller has given a timestamp, only
        the caller's timestamps cut, and a clock-stamped message stays in the episode before
        it; the first caller timestamp after clock stamps starts no episode of its own.
        A naive datetime is taken as UTC (as the evaluation loaders and the LLM transport do).
        """
        previous = self.episodes[-1] if self.episodes else 0
        now = message.timestamp
        if now is None or (by_clock and self._caller_stamped):
            return previous
        if now.tzinfo is None:
            now = now.replace(tzinfo=timezone.utc)
        before = self._last_stamp
        if not by_clock and not self._caller_stamped:
            self._caller_stamped, before = True, None
        self._last_stamp = now
        if before is None:
            return previous
        gap = abs((now - before).total_seconds())
        return previous + 1 if gap >= self._episode_gap else previous

    def _references(self, held: Iterable[int | list[int] | None], parent_index: int | None) -> list[str]:
        """Ids of the earlier messages a message references: its parent, then those that hold
        its identifiers (``held``: each identifier's holders in ``_ident_holders``, or ``None``)."""
        refs: list[str] = []
        if parent_index is not None:
            refs.append(self.messages[parent_index].id)
        found: dict[int, int] = {}
        max_df = self._max_df
        for holders in held:
            if holders is None:
                continue
            if isinstance(holders, int):
                if max_df >= 1 and holders != parent_index:
                    found[holders] = found.get(holders, 0) + 1
            elif len(holders) <= max_df:
                for holder in holders:
                    if holder != parent_index:
                        found[holder] = found.get(holder, 0) + 1
        # strongest evidence first, then the most recent
        for holder in sorted(found, key=lambda h: (-found[h], -h))[: _MAX_REFERENCES]:
            refs.append(self.messages[holder].id)
        return refs

    def _index_identifiers(self, index: int, idents: Iterable[str], held: Iterable[int | list[int] | None]) -> None:
        """Record message ``index`` as a holder of each of its identifiers (``held``: their
        holders before it, as :meth:`_references` read them)."""
        limit = self._max_df + 1
        holders_of = self._ident_holders
        for ident, holders in zip(idents, held, strict=True):
            if holders is None:
                holders_of[ident] = index
            elif isinstance(holders, int):
                if limit >= 2:
                    holders_of[ident] = [holders, index]
            elif len(holders) < limit:
                holders.append(index)

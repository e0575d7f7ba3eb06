"""The summary pyramid (SPEC §3 step 7, §7): what summarizers read and return
(:class:`SummaryItem`, :class:`SummaryDraft`, the :class:`Summarizer` seam), the
:class:`SummaryCache` of drafts, rendering a draft as a marked chat message trimmed to a
token cap (:func:`render_summary`), the level-0 pointer (:func:`pointer_summary`) and
:func:`build_pyramid` itself. The summarizers live in :mod:`relevance_memory.summary._summary`,
which re-exports everything here.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from itertools import chain
from operator import attrgetter
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, Field, PrivateAttr

from .._markers import SUMMARY_MARKER
from .._memo import longest_prefix, remember
from .._positional import positional
from .._text import has_constraint
from ._extract import _NOTE_RE, _left_out_note, _value_rank, is_question

LEVEL1_MAX_TOKENS = 400
"""Least tokens asked of a level-1 summary, and the step its size moves in (:func:`level1_tokens`),
so level-1 summaries cache well."""


@dataclass(frozen=True, slots=True)
class SummaryItem:
    """One archived message as a summarizer sees it.

    Attributes:
        id: message id (listed as covered).
        role: OpenAI role.
        msg_type: :class:`MessageType` value.
        text: content text (tool calls excluded; see ``tool_calls``).
        content_hash: the message's content hash (part of the summary cache key).
        tool_calls: ``(name, arguments)`` of each tool call the message made.
        source: tool name for tool results, else the role.
        superseded: when a newer message supersedes this one (issue 11), what replaced it
            ("since step 31: dislikes sushi"); the summary then shows this message's values
            only as earlier ones, and gives them up first when space is short.
        supersedes: this message restates a fact with a new value: its sentences are kept
            before others of lower priority (at least priority 3, an id / date).
        tokens: the message's token count (tokens; sizes an agent's level-1 summary).
        held: the lines of what the user said in this message that an earlier summary of it
            held (:func:`mark_held`: a level-1 summary merged into level 2, or the previous
            compaction's summary made again); a summarizer keeps them first (issue 23: a
            re-summarisation never loses a fact an earlier level kept).
    """

    id: str
    role: str
    msg_type: str
    text: str
    content_hash: str = ""
    tool_calls: tuple[tuple[str, str], ...] = ()
    source: str = ""
    superseded: str = ""
    supersedes: bool = False
    tokens: int = 0
    held: tuple[str, ...] = ()


new_summary_item: Callable[..., SummaryItem] = positional(SummaryItem)
"""``SummaryItem(id, role, msg_type, text, content_hash, tool_calls, source, superseded, supersedes,
tokens, held)`` with every field given, positionally, faster (a first build makes one per archived
message; issue 24)."""
_unmarked_fields: Callable[[SummaryItem], tuple[Any, ...]] = attrgetter(
    "id", "role", "msg_type", "text", "content_hash", "tool_calls", "source", "tokens", "held")
"""An item's fields other than its supersede marks (``superseded``, ``supersedes``)."""

CALLS_KEPT = 16_384
"""Distinct tool calls :meth:`SummaryItems.calls` shares before it empties."""


class SummaryItems:
    """Memo of archived messages as :class:`SummaryItem` (by message id, checked against the
    content hash), without their supersede fields, which change as newer messages arrive: a
    compaction that summarises the whole archive again makes each item once per memory, not once
    per compaction (issue 24). Bounded: emptied when it holds ``maxsize`` items. Every
    compaction asks for every archived message's item, so a memo smaller than the archive is
    emptied again and again and makes them all anew: the default holds a 2-million-message
    archive (an item shares its message's strings; a few hundred bytes each)."""

    def __init__(self, maxsize: int = 2_000_000) -> None:
        self._data: dict[str, SummaryItem] = {}  # message id → its item without supersede fields
        self._calls: dict[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]] = {}  # see calls()
        self._linked: dict[str, tuple[object, object, SummaryItem]] = {}  # own link, newest link, marked item
        self._maxsize = maxsize
        self.links: object = None
        """The summarise stage's index of the memory's supersede links (its own type; kept here,
        with the items, once per memory)."""

    def get(self, message_id: str, content_hash: str) -> SummaryItem | None:
        """The memoised item of ``message_id`` if it was made from content ``content_hash``."""
        found = self._data.get(message_id)
        return found if found is not None and found.content_hash == content_hash else None

    def put(self, item: SummaryItem) -> SummaryItem:
        """Memoise ``item`` under its id; returns it."""
        return remember(self._data, item.id, item, self._maxsize)

    def calls(self, calls: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
        """``calls`` (an item's ``(name, arguments)`` pairs), or the equal tuple an earlier item
        holds: the items of the same step run again share one (issue 24: an agent's calls repeat;
        a tuple and a pair per call was ~50 bytes a stored message). Bounded: emptied at
        :data:`CALLS_KEPT` distinct calls."""
        if not calls:
            return ()
        found = self._calls.get(calls)
        return found if found is not None else remember(self._calls, calls, calls, CALLS_KEPT)

    def marked(self, item: SummaryItem, superseded: str, supersedes: bool) -> SummaryItem:
        """``item`` (as :meth:`get` gives it) with its supersede fields: the marked item
        :meth:`keep_linked` keeps for its message while it is this one marked the same (a
        summary's cache key and the summarizer's memo read them; making it again for every build
        cost a ``dataclasses.replace`` per linked message, issue 24), else a new one. A message
        marked keeps only its marked item: its item without the marks is dropped from the memo
        (issue 24: one object fewer the collector walks per linked message; made again only
        when the message's links change)."""
        self._data.pop(item.id, None)
        found = self._linked.get(item.id)
        if found is not None:
            made = found[2]
            if (made.superseded == superseded and made.supersedes == supersedes
                    and _unmarked_fields(made) == _unmarked_fields(item)):  # no new item made to compare
                return made
        return new_summary_item(item.id, item.role, item.msg_type, item.text, item.content_hash, item.tool_calls,
                                item.source, superseded, supersedes, item.tokens, item.held)

    def linked(self, message_id: str) -> tuple[object, object, SummaryItem] | None:
        """What :meth:`keep_linked` kept for ``message_id``: ``(own link, newest link, marked
        item)``, or ``None``. The caller checks that the links and the content hash still hold
        (issue 24: a message a supersede link touches keeps its marked item across builds while
        the newest link of its chain stays the newest, so a compaction does not walk every
        chain again)."""
        return self._linked.get(message_id)

    def keep_linked(self, message_id: str, own: object, newest: object, item: SummaryItem) -> SummaryItem:
        """Keep ``item`` (marked with its supersede fields) with the links it was made from
        (``own``: the message's link, ``newest``: its chain's newest link); returns ``item``."""
        remember(self._linked, message_id, (own, newest, item), self._maxsize)
        return item


class SummaryDraft(BaseModel):
    """A summarizer's structured answer (SPEC §7)."""

    prose: str = Field(description="what happened, in the past tense, as short factual sentences")
    exact_values: list[str] = Field(
        default_factory=list, description="numbers, ids, paths, names, dates and constraints copied exactly"
    )
    tools_used: list[str] = Field(default_factory=list, description="tool calls as name(arguments)")
    covered_ids: list[str] = Field(default_factory=list, description="ids of the messages summarised")
    _given: frozenset[str] = PrivateAttr(default_factory=frozenset)
    """The exact values a tool result gave (not only the conversation): a summary that must give
    up values keeps these longest within their kind (case C03's kind)."""


@runtime_checkable
class Summarizer(Protocol):
    """Seam for summarising archived messages (SPEC §7).

    Attributes:
        name: label for records and the cache key.
    """

    name: str

    def summarize(self, items: Sequence[SummaryItem], *, level: int, max_tokens: int) -> SummaryDraft:
        """Summarise ``items`` (oldest first) in about ``max_tokens`` tokens; must not raise
        for model failures (fall back instead)."""
        ...


# --------------------------------------------------------------------------- pyramid
def key_parts(items: Sequence[SummaryItem]) -> tuple[KeyPart, ...]:
    """What a :class:`SummaryCache` key reads of ``items``: ``(id, content hash, superseded,
    supersedes, held)`` of each (pure)."""
    return tuple(map(_key_part, items))


_key_part: Callable[[SummaryItem], KeyPart] = attrgetter("id", "content_hash", "superseded", "supersedes", "held")

PARTS_DIGEST_START = 0
"""The :func:`parts_digest` of no items."""


def parts_digest(items: Iterable[SummaryItem], start: int = PARTS_DIGEST_START) -> int:
    """A hash of the :func:`key_parts` of ``items``, folded item by item from ``start`` (the
    digest of the items before them), so the digest of a run resumed from its prefix's is the
    digest of the whole run (:func:`run_facts`). Pure; equal within one process only (string
    hashes are salted per process). Issue 24: a summary cache key held a tuple of parts for
    every archived message — 88 bytes a message, a million of them at a million."""
    acc = start
    for part in map(_key_part, items):
        acc = hash((acc, part))
    return acc


class _HashedKey:
    """A :class:`SummaryCache` key: ``(summarizer, level, max tokens, items)``, hashed once from
    the items' :func:`parts_digest` (issue 24: the cache's lookup, insertion and reordering each
    hashed it again). Keys are equal when their items' :func:`key_parts` are — what a key held
    before it held the items (a memory made again by ``fresh()`` finds the drafts of items that
    differ only in what the parts leave out, such as ``msg_type``): the items are compared in C
    first (each the same object, or equal in every field), their parts only when that fails."""

    __slots__ = ("hash", "key")

    def __init__(self, key: tuple[str, int, int, tuple[SummaryItem, ...]], digest: int | None = None) -> None:
        self.key = key
        name, level, max_tokens, items = key
        self.hash = hash((name, level, max_tokens, len(items), parts_digest(items) if digest is None else digest))

    def __hash__(self) -> int:
        return self.hash

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _HashedKey) or self.hash != other.hash or self.key[:3] != other.key[:3]:
            return False
        mine, theirs = self.key[3], other.key[3]
        return mine == theirs or key_parts(mine) == key_parts(theirs)


class SummaryCache:
    """Bounded in-process cache of drafts keyed by what they cover (SPEC §7), least recently
    used first out.

    Args:
        maxsize: most drafts kept.
        max_items: most items the kept drafts' keys cover together (the newest draft is kept
            whatever its size). A draft of a whole archive keeps the archive's items tuple and
            the ids it covers, ~16 bytes a message each: at a million messages every compaction
            added ~30 MB that stayed for the next 4,096 (issue 24). The default holds the drafts
            of the last two compactions of a million-message archive (level-1 runs and level 2).
    """

    def __init__(self, maxsize: int = 4096, max_items: int = 4_000_000) -> None:
        self._data: OrderedDict[_HashedKey, SummaryDraft] = OrderedDict()
        self._maxsize = maxsize
        self._max_items = max_items
        self._items = 0  # items the kept keys cover together
        self._facts: list[RunFacts] = []  # the newest RUN_FACTS_KEPT, of RUN_FACTS_MIN items or more
        self.hits = 0
        self.misses = 0

    def facts(self, items: Sequence[SummaryItem]) -> RunFacts:
        """:func:`run_facts` of ``items``, resumed from the longest kept facts of a prefix of them
        (the same items, in order: compared in C, each item first by identity); kept when
        ``items`` holds :data:`RUN_FACTS_MIN` or more (issue 24: a whole archive summarised again
        after it grew reads only what is new, as the offline summarizer's fold does)."""
        if len(items) < RUN_FACTS_MIN:
            return run_facts(items)
        items = items if isinstance(items, tuple) else tuple(items)
        best = longest_prefix(self._facts, items, lambda kept: kept.items)
        if best is not None and len(best.items) == len(items):
            return best
        made = run_facts(items, best)
        self._facts = [*self._facts, made][-RUN_FACTS_KEPT:] if RUN_FACTS_KEPT > 0 else []
        return made

    @staticmethod
    def key(
        name: str, level: int, items: Sequence[SummaryItem], max_tokens: int
    ) -> tuple[str, int, int, tuple[SummaryItem, ...]]:
        """(summarizer, level, max tokens, items as a tuple): what a draft is cached under; two
        keys are the same when their items' :func:`key_parts` are (id, content hash, supersede
        marks, held lines)."""
        return (name, level, max_tokens, items if isinstance(items, tuple) else tuple(items))

    def get_or_make(
        self, summarizer: Summarizer, items: Sequence[SummaryItem], *, level: int, max_tokens: int,
        digest: int | None = None,
    ) -> SummaryDraft:
        """The cached draft, or a new one from ``summarizer`` (``digest``: :func:`parts_digest`
        of ``items`` when the caller has it)."""
        key = _HashedKey(self.key(summarizer.name, level, items, max_tokens), digest)
        items = key.key[3]
        draft = self._data.get(key)
        if draft is not None:
            self.hits += 1
            self._data.move_to_end(key)
            return draft
        self.misses += 1
        draft = summarizer.summarize(items, level=level, max_tokens=max_tokens)
        self._data[key] = draft
        self._items += len(items)
        while len(self._data) > 1 and (len(self._data) > self._maxsize or self._items > self._max_items):
            dropped, _ = self._data.popitem(last=False)
            self._items -= len(dropped.key[3])
        return draft


@dataclass(frozen=True)
class RenderedSummary:
    """A summary ready to emit.

    Attributes:
        level: 1 (phase) or 2 (global).
        message: the OpenAI chat dict (role ``system`` or ``user``).
        tokens: its token count (tokens).
        covered_ids: ids of the messages it covers (restorable from the store).
        exact_values: the exact values its text lists.
        superseded: ``(id, note)`` of each covered message that was marked superseded when it
            was made (:attr:`SummaryItem.superseded`): a summary carried to a later compaction
            is emitted again only while these marks still hold (issue 23: a value superseded
            since then must not be shown as current).
    """

    level: int
    message: dict[str, str]
    tokens: int
    covered_ids: tuple[str, ...]
    exact_values: tuple[str, ...]
    superseded: tuple[tuple[str, str], ...] = ()


@dataclass
class PyramidResult:
    """Outcome of :func:`build_pyramid`: summaries in context order, and warnings."""

    summaries: list[RenderedSummary] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    pointer: RenderedSummary | None = None
    """When no summary fits: a level-0 pointer (how many archived messages, their ids,
    restorable) if that fits, so archived messages never vanish without a trace."""

    @property
    def tokens(self) -> int:
        """Tokens of all summaries (tokens)."""
        return sum(s.tokens for s in self.summaries)

    @property
    def covered(self) -> set[str]:
        """Every id some summary covers (a level-0 pointer only names its ids: not counted)."""
        return {i for s in self.summaries if s.level > 0 for i in s.covered_ids}

    @property
    def pointed(self) -> set[str]:
        """Ids only named by a level-0 pointer (archived, not summarised, restorable)."""
        return {i for s in self.summaries if s.level == 0 for i in s.covered_ids}

    def covering(self, ids: Iterable[str], *, pointer: bool = False) -> set[str]:
        """The ids among ``ids`` that :attr:`covered` holds (with ``pointer``: :attr:`pointed`),
        without making the set of every covered id: each summary's ids are read in C against
        the few asked (issue 24: a user message's decision asked for 300k ids' set)."""
        wanted = set(ids)
        found: set[str] = set()
        for s in self.summaries:
            if (s.level == 0) == pointer and wanted:
                found |= wanted.intersection(s.covered_ids)
        return found


_ID_NUMBER = re.compile(r"^(.*?)(\d+)$")


def id_spans(ids: Sequence[str]) -> list[str]:
    """``ids`` with each run of consecutive numbered ids written as a span (``m2–m19``), in
    order (pure): ``["m2", "m3", "m4", "m7"]`` → ``["m2–m4", "m7"]``. The restore tool and
    :meth:`RelevanceMemoryManager.restore` read such spans back."""
    return _id_spans(ids)[0]


SpanState = tuple[str, int, int]
"""An open span of numbered ids, as :func:`_id_spans` leaves it: ``(head, first number, last number)``."""


def _id_spans(ids: Sequence[str], state: SpanState | None = None) -> tuple[list[str], SpanState | None]:
    """:func:`id_spans` of ``ids``, continued from ``state`` (the open span the ids before them
    ended with; it is written first, grown if ``ids`` go on with it), and the state ``ids`` end
    with (``None`` when they end with an id that is no numbered one): every span before the
    open one is final however the ids go on (:func:`run_facts` reads only the new ones)."""
    out: list[str] = []
    prefix, start, previous = state if state is not None else ("", None, None)

    def close() -> None:
        if start is not None and previous is not None:
            out.append(f"{prefix}{start}" if start == previous else f"{prefix}{start}–{prefix}{previous}")

    for value in ids:
        if start is not None and previous is not None and value == f"{prefix}{previous + 1}":
            previous += 1  # the next id of the run, without the regex (the prefix ends in no digit)
            continue
        match = _ID_NUMBER.match(value)
        if match is None:
            close()
            start = previous = None
            out.append(value)
            continue
        head, number = match.group(1), int(match.group(2))
        if start is not None and previous is not None and head == prefix and number == previous + 1:
            previous = number
            continue
        close()
        prefix, start, previous = head, number, number
    close()
    return out, (prefix, start, previous) if start is not None and previous is not None else None


RUN_FACTS_MIN = 1024
"""Fewest items whose :class:`RunFacts` a :class:`SummaryCache` keeps and resumes from (a whole
archive, not a phase)."""
RUN_FACTS_KEPT = 3
"""How many :class:`RunFacts` a :class:`SummaryCache` keeps (the newest)."""

KeyPart = tuple[str, str, str, bool, tuple[str, ...]]
"""What a :class:`SummaryCache` key reads of one item (:func:`key_parts`)."""


@dataclass(frozen=True)
class RunFacts:
    """What :func:`build_pyramid` reads of a run of items, item by item (issue 24: at a million
    archived messages each such pass is ~0.1–0.3 s, and a re-summary made seven of them).

    Attributes:
        items: the items, oldest first (never changed).
        digest: :func:`parts_digest` of them (hashes the summary cache key).
        ids: their ids, in order.
        spans: :func:`id_spans` of ``ids``.
        open_span: the last of ``spans`` while the ids that follow may grow it (:func:`_id_spans`).
        traffic: how many are an agent's tool traffic (:func:`is_traffic`).
        tokens: their token counts summed (tokens).
        marks: ``(id, superseded)`` of each item marked superseded, in order.
    """

    items: tuple[SummaryItem, ...]
    digest: int
    ids: tuple[str, ...]
    spans: list[str]
    open_span: SpanState | None
    traffic: int
    tokens: int
    marks: tuple[tuple[str, str], ...]

    @property
    def agentic(self) -> bool:
        """:func:`is_agentic` of the items."""
        return mostly_traffic(self.traffic, len(self.items))


def run_facts(items: Sequence[SummaryItem], prefix: RunFacts | None = None) -> RunFacts:
    """The :class:`RunFacts` of ``items`` (pure); with ``prefix``, the facts of their first
    ``len(prefix.items)`` items (the caller checked they are the same), only the rest is read:
    sums and tuples extend, and the id spans go on from the prefix's open span
    (:func:`_id_spans`). O(len(items) − len(prefix.items)) in Python, the rest copied in C.
    A tuple ``items`` is kept as it is (not copied), and the ids are a tuple: a summary's covered
    ids and a summarizer's fold share them (issue 24: each copy of a million is traversed by
    the collector after the build)."""
    kept = items if isinstance(items, tuple) else tuple(items)
    done = len(prefix.items) if prefix is not None else 0
    tail = items[done:]
    tail_ids = tuple([item.id for item in tail])
    traffic = sum(map(is_traffic, tail))
    tokens = sum(item.tokens for item in tail)
    marks = tuple((item.id, item.superseded) for item in tail if item.superseded)
    if prefix is None or not done:
        spans, state = _id_spans(tail_ids)
        return RunFacts(kept, parts_digest(tail), tail_ids, spans, state, traffic, tokens, marks)
    more, state = _id_spans(tail_ids, prefix.open_span)
    spans = [*prefix.spans[:-1], *more] if prefix.open_span is not None else [*prefix.spans, *more]
    return RunFacts(
        kept, parts_digest(tail, prefix.digest), prefix.ids + tail_ids, spans,
        state, prefix.traffic + traffic, prefix.tokens + tokens, prefix.marks + marks,
    )


def _ids_text(ids: Sequence[str], limit: int, spans: Sequence[str] | None = None) -> str:
    """``ids`` as text, at most ``limit`` spans (``spans``: their :func:`id_spans`, when known)."""
    spans = id_spans(ids) if spans is None else spans
    if len(spans) <= limit:
        return ", ".join(spans)
    return (f"{', '.join(spans[: limit // 2])}, … {', '.join(spans[-(limit // 2):])} "
            f"({len(ids)} ids; all listed in the decision record)")


def render_summary(
    draft: SummaryDraft,
    *,
    level: int,
    covered_ids: Sequence[str],
    role: str,
    values: Sequence[str] | None = None,
    prose: str | None = None,
    id_limit: int = 40,
    compact: bool | int = False,
    spans: Sequence[str] | None = None,
) -> dict[str, str]:
    """The summary as an OpenAI chat dict: marked, past tense, ids listed (pure).

    ``spans``: :func:`id_spans` of ``covered_ids`` when the caller has them (a summary trimmed
    to fit is rendered many times over the same ids).

    ``id_limit`` caps the ids written out (0: only the span in the header; the
    decision record's :class:`SummaryRecord` always lists every covered id).
    ``compact`` shortens the header for tight budgets: ``1`` (or ``True``) to the marker, the
    count, the span and "restorable by id"; ``2`` to the marker and the span only.

    Raises:
        ValueError: ``role`` is ``assistant`` (summaries never use it, SPEC §7).
    """
    if role == "assistant":
        raise ValueError("summaries never use the assistant role (SPEC §7)")
    kind = "phase" if level == 1 else "global"
    span = f"{covered_ids[0]}–{covered_ids[-1]}" if len(covered_ids) > 1 else covered_ids[0]
    # the span is first–last; messages kept verbatim may sit between them, so say how many
    # are summarised rather than suggest the whole range is
    archived = (
        f"{len(covered_ids)} archived messages from {covered_ids[0]} to {covered_ids[-1]}"
        if len(covered_ids) > 1
        else f"archived {covered_ids[0]}"
    )
    if int(compact) >= 2:
        header = f"{SUMMARY_MARKER} of {span}]"
    elif compact:
        header = f"{SUMMARY_MARKER} of {len(covered_ids)} archived message(s) {span}, restorable by id]"
    else:
        header = f"{SUMMARY_MARKER} L{level} {kind}, {archived}, restorable by id: past events, not instructions]"
    lines = [
        header,
        (prose if prose is not None else draft.prose).strip(),
    ]
    vals = list(values if values is not None else draft.exact_values)
    if vals:
        lines.append("Exact values: " + " | ".join(vals))
    if draft.tools_used:
        lines.append("Tools used: " + "; ".join(draft.tools_used))
    if id_limit > 0:
        lines.append("Covered ids (restorable): " + _ids_text(covered_ids, id_limit, spans))
    return {"role": role, "content": "\n".join(line for line in lines if line)}


_USER_LINE = "The user said: "
"""How an offline summary's line of what the user said starts (not superseded)."""


def _drop_oldest_prose(lines: list[str], *, keep_user: bool = False) -> bool:
    """Drop the oldest prose line that states no constraint (else the oldest line); keep the
    left-out note last and its count true. False when no line is left to drop. With
    ``keep_user``, what the user said (:data:`_USER_LINE`) is not dropped (issue 23); without
    it, what the user asked (:func:`~relevance_memory.summary._extract.is_question`) goes before
    what they stated (issue 23: a name, number or decision outlives newer questions)."""
    note = _NOTE_RE.match(lines[-1]) if lines else None
    body = lines[:-1] if note else lines
    if keep_user:
        others = [i for i, line in enumerate(body) if not line.startswith(_USER_LINE)]
        if not others:
            return False
        victim = next((i for i in others if not has_constraint(body[i])), others[0])
        del body[victim]
        dropped = (int(note.group(1)) if note else 0) + 1
        lines[:] = [*body, _left_out_note(dropped)]
        return True
    if not body:
        return False
    victim = next((i for i, line in enumerate(body) if line.startswith(_USER_LINE) and is_question(line[len(_USER_LINE):].lstrip("“"))),
                  next((i for i, line in enumerate(body) if not has_constraint(line)), 0))
    del body[victim]
    dropped = (int(note.group(1)) if note else 0) + 1
    lines[:] = [*body, _left_out_note(dropped)] if body else []
    return True


def _fit(
    draft: SummaryDraft,
    *,
    level: int,
    covered_ids: Sequence[str],
    role: str,
    cap: int,
    count: Callable[[dict[str, Any]], int],
    spans: Sequence[str] | None = None,
) -> RenderedSummary | None:
    """Render ``draft`` within ``cap`` tokens; ``None`` if even a bare pointer cannot fit
    (``spans``: :func:`id_spans` of ``covered_ids`` when the caller has them).

    What yields, in order (newest material is kept longest, SPEC §7 values last): prose
    lines, oldest first and constraints last; tool calls, oldest first; the id list; what the
    user said (issue 23: their names, numbers and decisions outlive the agent's traffic); the
    long header; exact values, half at a time (code names before ids, paths, dates and
    numbers; within a kind, what only the conversation holds before what a tool result gave;
    older before newer). The bare form names how many messages,
    their span, and that they are restorable by id.
    """
    values = list(draft.exact_values)
    lines = draft.prose.splitlines()
    tools = list(draft.tools_used)
    id_limit = 40
    compact = 0
    spans = id_spans(covered_ids) if spans is None else spans
    for _ in range(400):
        trimmed = draft.model_copy(update={"tools_used": tools})
        message = render_summary(
            trimmed, level=level, covered_ids=covered_ids, role=role, values=values, prose="\n".join(lines),
            id_limit=id_limit, compact=compact, spans=spans,
        )
        tokens = count(message)
        if tokens <= cap:
            return RenderedSummary(level, message, tokens, tuple(covered_ids), tuple(values))
        if len(lines) > 1 and _drop_oldest_prose(lines, keep_user=True):
            continue
        if tools:
            tools.pop(0)  # the oldest call first
        elif id_limit > 8:
            id_limit //= 2
        elif id_limit > 0:
            id_limit = 0  # the header still names the span; the record lists every id
        elif len(lines) > 1 and _drop_oldest_prose(lines):  # then what the user said (issue 23)
            continue
        elif lines and len(lines[0]) > 40:
            lines[0] = lines[0][: len(lines[0]) // 2] + "…"
        elif lines:
            lines = []
        elif compact < 2:
            compact += 1  # shorter headers before giving up any exact value
        elif len(values) > 1:  # exact values go last (SPEC §7: they must survive): ids/numbers, newest, kept
            given = draft._given
            keep = sorted(range(len(values)),
                          key=lambda i: (-_value_rank(values[i]), values[i] not in given, -i))[: len(values) // 2]
            values = [values[i] for i in sorted(keep)]
        elif values:
            values = []
        else:
            return None
    return None


def _pointer_text(ids: Sequence[str], limit: int) -> str:
    span = f"{ids[0]}–{ids[-1]}" if len(ids) > 1 else ids[0]
    if limit == 0:
        return f"{SUMMARY_MARKER}: {len(ids)} archived message(s) {span} not shown, restorable by id]"
    return (
        f"{SUMMARY_MARKER} pointer: {len(ids)} archived message(s) are not shown for lack of room; "
        f"restorable by id: {_ids_text(list(ids), limit)}]"
    )


def pointer_summary(
    covered_ids: Sequence[str], *, role: str, cap: int, count: Callable[[dict[str, Any]], int]
) -> RenderedSummary | None:
    """The least a context says about archived messages no summary fits (level 0): how many,
    which ids (as many as fit, else the span), and that they are restorable by id.
    ``None`` when not even that fits ``cap`` tokens (see :func:`pointer_tokens`).

    Raises:
        ValueError: ``role`` is ``assistant`` or ``covered_ids`` is empty.
    """
    if role == "assistant":
        raise ValueError("summaries never use the assistant role (SPEC §7)")
    if not covered_ids:
        raise ValueError("a pointer needs at least one archived id")
    for limit in (40, 16, 8, 0):
        message = {"role": role, "content": _pointer_text(covered_ids, limit)}
        tokens = count(message)
        if tokens <= cap:
            return RenderedSummary(0, message, tokens, tuple(covered_ids), ())
    return None


def pointer_tokens(covered_ids: Sequence[str], *, role: str, count: Callable[[dict[str, Any]], int]) -> int:
    """Tokens of the smallest pointer for ``covered_ids`` — the least a summary reserve must hold
    so that archived messages never vanish without a trace (tokens)."""
    return count({"role": role, "content": _pointer_text(covered_ids, 0)})


def is_traffic(item: SummaryItem) -> bool:
    """Whether ``item`` is an agent's tool traffic: a tool result or a message with tool calls."""
    return item.role == "tool" or bool(item.tool_calls)


def mostly_traffic(traffic: int, count: int) -> bool:
    """Whether ``traffic`` tool-traffic items of ``count`` are most of them (at least half): the
    rule of :func:`is_agentic`, for a caller that keeps the count."""
    return 2 * traffic >= count


def is_agentic(items: Sequence[SummaryItem]) -> bool:
    """Whether ``items`` are mostly an agent's tool traffic (:func:`is_traffic`)."""
    return mostly_traffic(sum(map(is_traffic, items)), len(items))


AGENT_SUMMARY_RATIO = 0.2
"""Tokens an agent's level-1 summary is asked for per token of the run it covers (at least
:data:`LEVEL1_MAX_TOKENS`): a summary's size follows what it covers, not the room left, so
each compaction adds a summary of what it archived after the ones already sent (issue 21)."""


def level1_tokens(run: Sequence[SummaryItem], cap: int) -> int:
    """Tokens asked of the level-1 summary of ``run`` (tokens): :data:`LEVEL1_MAX_TOKENS` for a
    conversation; for an agent's tool traffic (:func:`is_agentic`) :data:`AGENT_SUMMARY_RATIO`
    of the run's tokens, rounded up to 100 and at most ``cap``, never below
    :data:`LEVEL1_MAX_TOKENS`. Fixed by the run alone, so a draft caches well."""
    agentic = is_agentic(run)
    return _level1_tokens(agentic, sum(item.tokens for item in run) if agentic else 0, cap)


def _level1_tokens(agentic: bool, tokens: int, cap: int) -> int:
    """:func:`level1_tokens` of a run that is ``agentic`` or not, of ``tokens`` tokens."""
    if not agentic:
        return LEVEL1_MAX_TOKENS
    wanted = -(-int(tokens * AGENT_SUMMARY_RATIO) // 100) * 100
    return max(LEVEL1_MAX_TOKENS, min(cap, wanted))


def held_lines(summaries: Sequence[RenderedSummary]) -> set[str]:
    """The lines of what the user said (:data:`_USER_LINE`, not superseded) that ``summaries``
    hold, as rendered (pure)."""
    return {line for s in summaries for line in s.message.get("content", "").splitlines() if line.startswith(_USER_LINE)}


def mark_held(items: Sequence[SummaryItem], lines: set[str]) -> list[SummaryItem]:
    """``items`` with :attr:`SummaryItem.held` set: each line of ``lines`` (:func:`held_lines`)
    goes to the user's message whose text holds its quoted sentence or each of its ``; ``-joined
    clauses (issue 23: what an earlier
    summary held of a fact is kept first when it is summarised again). Pure; O(items × lines)."""
    # a fact's line may quote a few clauses of the sentence ("; "-joined, fact_clause): split once
    quoted: dict[str, list[str]] = {}
    for line in lines:
        sentence = " ".join(line[len(_USER_LINE):].strip().removeprefix("“").removesuffix("”").removesuffix("…").split())
        if sentence:
            quoted[line] = sentence.split("; ")
    if not quoted:
        return list(items)
    out: list[SummaryItem] = []
    for item in items:
        if item.role != "user":
            out.append(item)
            continue
        text = " ".join(item.text.split())
        held = tuple(sorted({*item.held, *(line for line, parts in quoted.items() if all(p in text for p in parts))}))
        out.append(replace(item, held=held) if held != item.held else item)
    return out


def _marked(rendered: RenderedSummary, marks: tuple[tuple[str, str], ...]) -> RenderedSummary:
    """``rendered`` with ``marks``, the supersede marks of the items it covers
    (:attr:`RenderedSummary.superseded`, :attr:`RunFacts.marks`)."""
    return replace(rendered, superseded=marks) if marks else rendered


def build_pyramid(
    runs: Sequence[Sequence[SummaryItem]],
    *,
    summarizer: Summarizer,
    cache: SummaryCache,
    count: Callable[[dict[str, Any]], int],
    role: str,
    cap: int,
) -> PyramidResult:
    """Summaries for ``runs`` of consecutive archived messages within ``cap`` tokens (SPEC §7).

    Level 1: one summary per run. If their total exceeds ``cap``, one level-2 summary
    over all runs replaces them, trimmed as :func:`_fit` says (newest material kept
    longest). When even that cannot fit, ``pointer`` holds a level-0 pointer
    (:func:`pointer_summary`) if it fits, and a warning says so.

    Args:
        runs: runs of archived messages, oldest first; empty runs are ignored.
        summarizer: the :class:`Summarizer`.
        cache: drafts cached by what they cover.
        count: tokens of one chat dict (the build's tokenizer).
        role: ``system`` or ``user``.
        cap: tokens all summaries together may take (tokens).
    """
    runs = [tuple(r) for r in runs if r]  # a tuple run is the caller's, not a copy (RunFacts)
    result = PyramidResult()
    if not runs:
        return result
    everything = tuple(chain.from_iterable(runs)) if len(runs) > 1 else runs[0]
    if cap <= 0:
        result.warnings.append("no room for summaries; archived messages were dropped (restorable by id)")
        return result
    level1: list[RenderedSummary] = []
    for run in runs:
        facts = cache.facts(run)
        draft = cache.get_or_make(summarizer, run, level=1, max_tokens=_level1_tokens(facts.agentic, facts.tokens, cap),
                                  digest=facts.digest)
        rendered = _fit(draft, level=1, covered_ids=facts.ids, role=role, cap=cap, count=count, spans=facts.spans)
        if rendered is None:
            level1 = []
            break
        level1.append(_marked(rendered, facts.marks))
    if level1 and sum(s.tokens for s in level1) <= cap:
        result.summaries = level1
        return result
    # the level-1 summaries merge: what they held of the user's facts is kept first (issue 23)
    lines = held_lines(level1)
    if lines:
        everything = tuple(mark_held(everything, lines))
    facts = cache.facts(everything)
    draft = cache.get_or_make(summarizer, everything, level=2, max_tokens=cap, digest=facts.digest)
    rendered = _fit(draft, level=2, covered_ids=facts.ids, role=role, cap=cap, count=count, spans=facts.spans)
    if rendered is None:
        result.pointer = pointer_summary(facts.ids, role=role, cap=cap, count=count)
        result.warnings.append(
            f"summary of {len(everything)} archived message(s) does not fit {cap} tokens; they were dropped "
            + ("(a pointer lists them, restorable by id)" if result.pointer else "(restorable by id)")
        )
        return result
    result.summaries = [_marked(rendered, facts.marks)]
    if len(runs) > 1 or level1:
        result.warnings.append(f"level-1 summaries exceed {cap} tokens; merged into one level-2 summary")
    return result

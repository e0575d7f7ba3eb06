"""Summarise (SPEC §3 step 7, §7): the archive folded into the summary pyramid, within a reserve.

Summaries need room, and that room comes from the candidates selection would otherwise
keep: the stage negotiates a **summary reserve** over the ledger (:func:`summarise`), fills
the rest from the select stage's ranking (:func:`~relevance_memory.pipeline.select.fill_ranked`,
a cheap greedy pass: the chains are ranked once per build), and summarises every run of
consecutive archived messages (:func:`summarise_archive`, through the summarizer seam and
its cache).

The reserve (``summary_budget``, or :data:`SUMMARY_RESERVE_SHARE` of the budget, at least
:data:`MIN_SUMMARY_RESERVE` tokens) is never taken from the task statement, from user
messages scored ≥ ``core_score`` (SPEC §7: a user constraint is never only in a summary;
issue 23: a request scored 4 only because the goal is formed from the user's requests does
yield, and when what does not yield leaves less than the floor, the record warns, naming what
took the room) or
from the newest views of the files the agent edited (issue 11: the current state of the
files under repair; the older views they supersede are what the summaries hold); other
chains yield to it, lowest priority first. When the summaries do not fit it, the
reserve grows to what they need at most (working-tier chains yield first, they are then
summarised too), and a goal block that only points at the kept task statement yields its
room last.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Collection, Mapping, Sequence
from collections.abc import Set as AbstractSet
from itertools import pairwise

import numpy as np
import numpy.typing as npt

from .._memo import remember
from .._models import Message, RelevanceScore, call_rows, content_text, user_authored
from ..scoring._scorer import REQUEST_REASON
from ..store._supersede import SupersedeLink
from ..summary._pyramid import held_lines, mark_held, new_summary_item
from ..summary._summary import (
    PyramidResult,
    RenderedSummary,
    SummaryItem,
    build_pyramid,
    pointer_summary,
    pointer_tokens,
)
from ._state import BuildState, Partitioned, Ranked, Seams, Selection, StoreView, Summarised, required
from .ledger import BudgetLedger, Purpose
from .partition import GOAL_POINTER, clip_to_tokens, goal_block_text
from .select import fill_ranked, tool_traffic_share

__all__ = ["MIN_SUMMARY_RESERVE", "SUMMARY_RESERVE_SHARE", "reserve_share", "summarise", "summarise_archive"]

SUMMARY_RESERVE_SHARE = 0.1
"""Share of the budget reserved for summaries when ``summary_budget`` is 0."""
NEWEST_REQUESTS = 12
"""How many of the user's newest requests (scored 4 as requests the goal is formed from) yield to
the summary reserve only down to :data:`MIN_SUMMARY_RESERVE`; older ones yield to its whole share
(issue 21: a τ-bench customer's requests stay verbatim at 2,500 tokens — all of them in 100 % of
requests, against 67 % when every request yielded; issue 23: in a session of many conversations
the older requests leave the summary room for the facts stated early — 97.6 % of τ-bench facts
kept at 4k, against 65-72 % when every request held; ``benchmarks/agent_support.py``,
``benchmarks/fact_retention.py``)."""
MIN_SUMMARY_RESERVE = 64
"""Least tokens reserved for summaries when ``summary_budget`` is 0 (room for one small summary)."""
RESERVE_GROWTH_STEPS = 3
"""How many times the reserve may grow to what the summaries need."""


def reserve_share(seams: Seams, part: Partitioned) -> float:
    """Share of the budget the summary reserve takes (SPEC §7, §11): :data:`SUMMARY_RESERVE_SHARE`
    for a conversation, rising linearly to ``MemoryConfig.tool_summary_share`` with the share of
    the candidates' tokens that are an agent's tool traffic (tool results, and assistant
    messages that call tools). An agent's archive is names and values its next steps use again
    (the summary lists them); a chat's is prose whose verbatim turns answer questions better."""
    agentic = tool_traffic_share(seams.store, part.candidates.values(), seams.chains)
    return SUMMARY_RESERVE_SHARE + (seams.config.tool_summary_share - SUMMARY_RESERVE_SHARE) * agentic


def _tool_name(seams: Seams, message: Message) -> str:
    """The tool a tool result answers (from its call), else the message's source label."""
    if message.role == "tool" and message.parent_id is not None:
        parent = seams.store.get(message.parent_id)
        for call_id, _, name, _ in call_rows(parent):  # no ToolCall objects made (issue 24)
            if call_id == message.tool_call_id:
                return name
    return message.source


def _item(
    seams: Seams, message: Message, newest: dict[str, SupersedeLink],
    linked: tuple[AbstractSet[str], AbstractSet[str]] | None = None,
) -> SummaryItem:
    """An archived message as the summarizer sees it (``newest``: :func:`_superseded_note`'s memo;
    ``linked``: :func:`_linked`'s sets, so a message only superseded or only superseding pays
    for that one); what does not change is made once per memory
    (:class:`~relevance_memory.summary._pyramid.SummaryItems`)."""
    memo = seams.summary_items
    item = memo.get(message.id, message.content_hash) or memo.put(new_summary_item(
        message.id, message.role, message.msg_type.value, content_text(message.content), message.content_hash,
        memo.calls(tuple((name, arguments) for _, _, name, arguments in call_rows(message))),  # shared (issue 24)
        _tool_name(seams, message),
        "", False, message.token_count, (),  # the supersede marks: SummaryItems.marked; held: mark_held
    ))
    if not seams.config.supersede:
        return item
    store = seams.store
    older, newer = linked if linked is not None else (None, None)
    superseded = _superseded_note(seams, message, newest) if older is None or message.id in older else ""
    supersedes = (newer is None or message.id in newer) and any(
        store.superseded_by[o].kind == "fact" for o in store.supersedes.get(message.id, ()) if o in store.superseded_by)
    return memo.marked(item, superseded, supersedes) if superseded or supersedes else item


def _linked(seams: Seams) -> tuple[frozenset[str], frozenset[str]]:
    """Ids of the messages :func:`_item` marks: ``(superseded, superseding)`` — those a newer
    message supersedes and those that supersede an older one (only a restated fact marks these).
    Every other archived message is its memoised item as is (O(links), not O(history));
    :func:`_link_index` keeps them across builds (O(new messages))."""
    if not seams.config.supersede:
        return frozenset(), frozenset()
    store = seams.store
    return frozenset(store.superseded_by), frozenset(store.supersedes)


class _LinkIndex:
    """A memory's supersede links as :func:`_linked` reads them, grown build by build from the
    messages stored since (issue 24: the sets, and a count of the fact links, without walking every
    link each compaction), and the verdicts of :func:`_marks_hold` on carried summaries.

    A link is written before its newer message is published and never replaced, and the older
    messages a newer one supersedes are all linked when it is stored, so the ids the links of a
    store of ``n`` messages name are those of ``supersedes`` of its ``n`` messages. ``stamp``:
    ``(messages read, fact links among them)``, replaced in one assignment."""

    __slots__ = ("covered", "facts", "item_at", "items_upto", "kept_items", "last_archive", "newer", "older", "stamp",
                 "verdicts")

    def __init__(self) -> None:
        self.older: set[str] = set()
        self.newer: set[str] = set()
        self.facts: set[str] = set()  # the older ids of the fact links
        self.stamp = (0, 0)
        self.verdicts: dict[int, tuple[RenderedSummary, int, bool]] = {}  # id → (summary, fact links, holds)
        self.covered: dict[int, tuple[RenderedSummary, npt.NDArray[np.int64]]] = {}  # id → (summary, its indices)
        # the whole archive's items as a re-summary last read them, by store index (archive_items)
        self.item_at: list[SummaryItem | None] = []
        self.kept_items: npt.NDArray[np.bool_] = np.zeros(0, dtype=bool)  # which of item_at still hold
        self.items_upto = 0  # the store length item_at's marks were read at
        # the last archive_items: its indices and items (a prefix of the next archive is read from it)
        self.last_archive: tuple[npt.NDArray[np.int64], tuple[SummaryItem, ...]] | None = None

    def archive_items(
        self, store: StoreView, archived_at: npt.NDArray[np.int64], make: Callable[[int], SummaryItem],
    ) -> tuple[SummaryItem, ...]:
        """The items of the archived messages at ``archived_at`` (store indices, ascending), in
        order: each kept from the last whole-archive re-summary while its supersede marks hold,
        else ``make(index)`` and kept (issue 24: a re-summary of a million archived messages read
        every message's item again, ~3 s; now O(messages stored since + what their links touch)).

        A message's item changes only with its marks (a stored message never changes): its own
        link and its chain's newest link, which change only when a newer message supersedes it
        or a message its chain leads to. So the messages stored since the items were read are
        walked, and each older message their links name, and all that lead to it (back through
        ``store.supersedes``), made again. When the archive starts with the last one's indices
        (an archive grows at its end), its list is copied and only what follows is looked up.
        A store shorter than what was read (an older snapshot) trusts nothing kept. A tuple: a
        run of all of it is this very tuple (summarised without a copy, :class:`RunFacts`)."""
        n = len(store)
        if n < self.items_upto:
            return tuple([make(i) for i in archived_at.tolist()])
        item_at, kept = self.item_at, self.kept_items
        if len(item_at) < n:
            item_at.extend([None] * (n - len(item_at)))
            kept = self.kept_items = np.concatenate([kept, np.zeros(n - len(kept), dtype=bool)])
        if self.items_upto and kept.any():
            supersedes = store.supersedes
            touched: set[str] = set()
            for message in store.messages[self.items_upto:n]:
                walk = list(supersedes.get(message.id, ()))
                while walk:
                    older = walk.pop()
                    if older not in touched:
                        touched.add(older)
                        walk.extend(supersedes.get(older, ()))
            if touched:
                kept[np.asarray(store.indices(touched), dtype=np.int64)] = False
        self.items_upto = n
        last = self.last_archive
        at = len(last[0]) if last is not None else 0
        if last is None or len(archived_at) < at or not np.array_equal(archived_at[:at], last[0]):
            at = 0  # not the last archive and more: read by index
        stale = np.flatnonzero(~kept[archived_at[:at]])  # positions in the last archive made again
        rest = archived_at[at:]
        missing = np.concatenate([archived_at[stale], rest[~kept[rest]]])
        for i in missing.tolist():
            item_at[i] = make(i)
        kept[missing] = True
        made: Callable[[int], SummaryItem] = item_at.__getitem__  # type: ignore[assignment]  # all made above
        flat: tuple[SummaryItem, ...] = ()
        if at and last is not None:  # the last archive's items, those made again replaced, then the rest
            flat = last[1]
            if len(stale):
                again = list(flat)
                for position in stale.tolist():
                    again[position] = made(int(archived_at[position]))
                flat = tuple(again)
        flat += tuple(map(made, rest.tolist()))
        self.last_archive = (archived_at, flat)
        return flat

    def keep_covered(self, summary: RenderedSummary, indices: npt.NDArray[np.int64]) -> None:
        """Keep the store indices ``summary`` covers (bounded: emptied at 256 summaries)."""
        remember(self.covered, id(summary), (summary, indices), 256)

    def keep_verdict(self, summary: RenderedSummary, facts: int, holds: bool) -> None:
        """Keep whether ``summary``'s supersede marks hold while the store has ``facts`` fact links."""
        remember(self.verdicts, id(summary), (summary, facts, holds), 256)


def _link_index(seams: Seams) -> _LinkIndex | None:
    """The memory's :class:`_LinkIndex` grown to its store (reads the messages stored since the
    last build), or ``None`` when the store is shorter than what it read (a snapshot older than
    an earlier build's) or supersede detection is off."""
    if not seams.config.supersede:
        return None
    memo, store = seams.summary_items, seams.store
    index = memo.links if isinstance(memo.links, _LinkIndex) else None
    if index is None:
        index = _LinkIndex()
        memo.links = index
    n = len(store)
    upto, facts = index.stamp
    if n < upto:
        return None
    if n > upto:
        supersedes, links = store.supersedes, store.superseded_by
        for message in store.messages[upto:n]:
            olders = supersedes.get(message.id)
            if olders:
                index.newer.add(message.id)
                index.older.update(olders)
                restated = [o for o in olders if links[o].kind == "fact"]
                index.facts.update(restated)
                facts += len(restated)
        index.stamp = (n, facts)
    return index


def _archive(
    seams: Seams, part: Partitioned, kept_roots: set[int] | frozenset[int], repeats: Mapping[int, int] | None
) -> tuple[list[int], list[int]]:
    """``(archived, kept)``: indices of the archived messages and of those kept with their chain,
    each in store order. The partition's chains hold every message neither pinned nor excluded
    (:class:`~relevance_memory.pipeline.partition.Split`), so the archived ones are every other
    index of the store read, found with one array mask (O(kept chains) in Python, the rest in C:
    no pass over every chain); a repeat is neither (SPEC §3 step 7: its newer copy is kept)."""
    chains, n = part.chains, len(seams.store)
    kept = sorted(i for root in kept_roots if (chain := chains.get(root)) is not None for i in chain.members)
    archived = np.ones(n, dtype=bool)
    for out in (part.pinned, part.excluded, kept, repeats or ()):
        at = np.fromiter(out, dtype=np.int64, count=len(out))
        archived[at[at < n]] = False
    if repeats:
        kept = [i for i in kept if i not in repeats]
    return np.flatnonzero(archived).tolist(), kept


def fresh_runs(archived: Sequence[int], kept: Sequence[int], fresh: Collection[int] | None) -> list[list[int]]:
    """The runs of archived messages to summarise (pure): ``fresh`` (all of ``archived`` when
    ``None``), in store order, a run ended by a kept message and by an archived one not in
    ``fresh`` (one a carried summary covers) — the first run, and a last empty one, as the
    summarizer has always been given them: ``[[]]`` when nothing is fresh, and an empty run
    after the last when an archived message that is not fresh follows it.

    O(fresh · log archived + kept), not O(archived) (issue 24: a compaction whose carried
    summaries cover most of the archive reads only what is new).

    Args:
        archived: indices of the archived messages, ascending.
        kept: indices of the messages kept with their chains, ascending (none archived).
        fresh: the archived indices to read.
    """
    order = archived if fresh is None else sorted(fresh)
    runs: list[list[int]] = [[]]
    breaks = iter(kept)
    next_break = next(breaks, None)
    last = -1  # the position in ``archived`` of the message read before
    for i in order:
        while next_break is not None and next_break < i:  # a kept message between
            if runs[-1]:
                runs.append([])
            next_break = next(breaks, None)
        position = last + 1 if fresh is None else bisect_left(archived, i, last + 1)
        if position != last + 1 and runs[-1]:  # archived messages not read between
            runs.append([])
        last = position
        runs[-1].append(i)
    if runs[-1] and last + 1 < len(archived):  # archived messages not read after the last one
        runs.append([])
    return runs


def summarise_archive(
    seams: Seams,
    part: Partitioned,
    scores: Mapping[int, RelevanceScore],
    kept_roots: set[int] | frozenset[int],
    cap: int,
    repeats: Mapping[int, int] | None = None,
    carried: Sequence[RenderedSummary] = (),
) -> tuple[PyramidResult, set[int]]:
    """Runs of consecutive archived messages → the summary pyramid within ``cap`` tokens.

    Archived: neither pinned, excluded, a repeat, nor in a chain of ``kept_roots``.

    Cache-aware (SPEC §3.1, issue 21): ``carried`` are the summaries of the previous compaction,
    already in the provider's cached prefix. Each whose messages are all still archived is
    emitted again byte for byte, first, and only the archived messages none of them covers are
    summarised anew, after them; when that does not fit ``cap``, everything is summarised afresh
    (the pyramid merges into one level-2 summary, which the next compaction carries in turn).

    Proportional to what changed (issue 24): the archive is read from the partition's chains, and
    an archived message no supersede link touches is its memoised item (a dict hit), and a linked
    one keeps its marked item from an earlier build while its own link is the same and its chain's
    newest link is still the newest (:func:`_still_newest`, checked once per chain), so only the
    messages whose links changed pay for :func:`_item`.

    Returns:
        The pyramid and the user messages scored ≥ ``core_score`` that had to be summarised
        (SPEC §7 wants them verbatim; when they cannot fit, their values in a summary beat
        dropping them, and the pyramid's warnings say so).
    """
    store, config = seams.store, seams.config
    messages = store.messages[0:len(store)]  # one list: each index of a snapshot view is a Python call
    archived, kept = _archive(seams, part, kept_roots, repeats)
    # which messages are archived, as a mask over the store: a carried summary's covered indices
    # are checked and taken out in numpy (issue 24: a set of a million indices, and a set
    # difference with each carried summary's, cost ~0.15 s at 300k)
    archived_at = np.asarray(archived, dtype=np.int64)
    archived_mask = np.zeros(len(messages), dtype=bool)
    archived_mask[archived_at] = True
    newest: dict[str, SupersedeLink] = {}  # one walk per supersede chain in this build
    index = _link_index(seams)
    linked = _linked(seams) if index is None else (index.older, index.newer)
    older, newer = linked
    memo = seams.summary_items

    links = store.superseded_by
    memo_get, linked_get = memo.get, memo.linked
    still: dict[int, bool] = {}  # id of a kept newest link → whether it is still its chain's newest

    def linked_item(message: Message) -> SummaryItem:
        """The item of a message a supersede link touches: kept from an earlier build while its
        links hold — its own link the same (a link, once written, is never replaced) and its
        chain's newest still the newest — else made again and kept."""
        message_id = message.id
        kept = linked_get(message_id)
        if kept is not None and kept[2].content_hash == message.content_hash:
            own, final, item = kept
            if own is None:
                if message_id not in older:
                    return item
            elif links.get(message_id) is own:
                verdict = still.get(id(final))
                if verdict is None:
                    verdict = still[id(final)] = _still_newest(links, final)
                if verdict:
                    return item
        item = _item(seams, message, newest, linked)
        own = links.get(message_id)
        return memo.keep_linked(message_id, own, newest.get(message_id) if own is not None else None, item)

    def item_of(message: Message) -> SummaryItem:
        """A memo hit for a message no link touches, else :func:`linked_item`."""
        message_id = message.id
        if message_id in older or message_id in newer:
            return linked_item(message)
        return memo_get(message_id, message.content_hash) or _item(seams, message, newest, linked)

    reused: list[RenderedSummary] = []
    already: list[npt.NDArray[np.int64]] = []  # the indices each reused summary covers
    for s in carried:
        covering = _covered_indices(seams, index, s) if s.level > 0 else None
        if covering is not None and bool(archived_mask[covering].all()) and _carried_holds(seams, index, s, newest, older):
            reused.append(s)
            already.append(covering)
    items: dict[int, SummaryItem] = {}
    held: set[int] = set()
    core = config.core_score
    runs: list[list[SummaryItem]] = []
    if already:
        for covering in already:
            archived_mask[covering] = False
        fresh: list[int] | None = np.flatnonzero(archived_mask).tolist()
    else:
        fresh = None
    index_runs = fresh_runs(archived, kept, fresh)
    for run in index_runs:
        runs.append(out := [])
        for i in run:
            message = messages[i]
            message_id = message.id
            score = scores.get(i)
            if (
                score is not None and score.score >= core
                and user_authored(message.role, message.msg_type.value)
                and message_id not in store.superseded_by  # archived on purpose: a newer value replaces it
            ):
                held.add(i)
            items[i] = item = item_of(message)
            out.append(item)

    def item_at(i: int) -> SummaryItem:
        # made by the loop above, else a message a carried summary covered (the loop passed it over)
        return items.get(i) or item_of(messages[i])

    def everything() -> list[Sequence[SummaryItem]]:
        flat = (tuple([item_at(i) for i in archived]) if index is None
                else index.archive_items(store, archived_at, item_at))
        # a run ends wherever a message is not archived
        bounds = [0, *(np.flatnonzero(np.diff(archived_at) != 1) + 1).tolist(), len(flat)]
        return [flat[a:b] for a, b in pairwise(bounds)]

    pyramid = _pyramid(seams, runs, reused, carried, everything, cap)
    if index is not None:  # what the next compaction asks of the summaries made here, known now
        made = pyramid.summaries
        if reused and made[:len(reused)] == reused:  # the reused, then the fresh runs' summaries
            _remember_made(seams, index, made[len(reused):], [i for run in index_runs for i in run])
        else:  # everything summarised afresh: every archived message, in order
            _remember_made(seams, index, made, archived_at)
    _held_warnings(store, held, pyramid, config.core_score)
    return pyramid, held


def _remember_made(
    seams: Seams, index: _LinkIndex, made: Sequence[RenderedSummary], indices: Sequence[int] | npt.NDArray[np.int64],
) -> None:
    """Keep in ``index`` what a later compaction would otherwise read again of each summary in
    ``made`` (issue 24: at a million messages, a level-2 summary's million ids looked up, and its
    marks checked against each, ~0.3 s at the next compaction): its covered indices, the next
    ``len(covered_ids)`` of ``indices`` (the summarised messages, in order: the pyramid covers
    them run after run, or all at once), and that its supersede marks hold — they were made
    from these very messages' marks, in this build. A summary whose first or last id is not at
    its place is left to be read (never trusted)."""
    messages, facts, at = seams.store.messages, index.stamp[1], 0
    for summary in made:
        ids = summary.covered_ids
        span = np.asarray(indices[at:at + len(ids)], dtype=np.int64)
        at += len(ids)
        if (summary.level > 0 and ids and len(span) == len(ids)
                and messages[span[0]].id == ids[0] and messages[span[-1]].id == ids[-1]):
            index.keep_covered(summary, span)
            index.keep_verdict(summary, facts, True)


def _pyramid(
    seams: Seams, runs: list[list[SummaryItem]], reused: list[RenderedSummary], carried: Sequence[RenderedSummary],
    everything: Callable[[], list[Sequence[SummaryItem]]], cap: int,
) -> PyramidResult:
    """The carried summaries ``reused`` again, then ``runs`` (the archived messages none of them
    covers) summarised after them — or, when that does not fit ``cap`` or needs more than level 1,
    ``everything()`` (every archived message, in runs) summarised afresh (:func:`summarise_archive`)."""
    config = seams.config
    carried_tokens = sum(s.tokens for s in reused)
    if reused and carried_tokens <= cap:
        fresh = build_pyramid(runs, summarizer=seams.summarizer, cache=seams.summary_cache,
                              count=seams.tokenizer.count_message, role=config.context_role, cap=cap - carried_tokens)
        if not any(runs) or (fresh.summaries and all(x.level == 1 for x in fresh.summaries)):
            return PyramidResult(summaries=[*reused, *fresh.summaries], warnings=fresh.warnings)
    # nothing carried, or it no longer fits: summarise everything afresh; what the carried
    # summaries held of the user's facts is kept first (issue 23: a re-summarisation never loses
    # a fact an earlier summary kept)
    quoted = held_lines(carried)
    return build_pyramid(
        [mark_held(run, quoted) for run in everything()] if quoted else everything(),
        summarizer=seams.summarizer,
        cache=seams.summary_cache,
        count=seams.tokenizer.count_message,
        role=config.context_role,
        cap=cap,
    )


def _held_warnings(store: StoreView, held: set[int], pyramid: PyramidResult, core: int) -> None:
    """Warn in ``pyramid`` about the user messages scored ≥ ``core`` (``held``: their indices)
    that did not fit verbatim: those only in a summary, and those in none."""
    if not held:
        return
    covered = pyramid.covering(store[i].id for i in held)
    in_summary = [store[i].id for i in sorted(held) if store[i].id in covered]
    dropped = [store[i].id for i in sorted(held) if store[i].id not in covered]
    if in_summary:
        pyramid.warnings.append(
            f"{len(in_summary)} user message(s) scored ≥ {core} ({', '.join(in_summary)}) did not fit the "
            "budget verbatim; they are only in a summary — raise the budget to keep them whole"
        )
    if dropped:
        pyramid.warnings.append(
            f"{len(dropped)} user message(s) scored ≥ {core} ({', '.join(dropped)}) did not fit the "
            "budget verbatim nor in a summary; they are out of this context (restorable from the store) "
            "— raise the budget to keep them"
        )


def _protected(
    seams: Seams, part: Partitioned, scores: Mapping[int, RelevanceScore], selection: Selection, ranked: Ranked
) -> tuple[int, int, int]:
    """Tokens of kept core chains that yield to the summary reserve last, ``(strict, views,
    requests)``: the task statement and user messages scored ≥ ``core_score`` never yield
    (SPEC §7); the newest views of the files the agent edited (issue 11: their current state is
    what the next step needs; the older views they supersede are what the summaries hold) yield
    only down to the reserve's floor (half its share: an agent that wrote many files keeps a
    summary of what it read too); a user's request scored 4 only as one of the requests the
    goal is formed from (:data:`~relevance_memory.scoring._scorer.REQUEST_REASON`), one of the
    :data:`NEWEST_REQUESTS` newest, yields only down to :data:`MIN_SUMMARY_RESERVE` (issue 23: in a long customer-service session every request
    scores 4 and they took the whole budget, leaving the archive no summary; issue 21: at
    2,500 tokens a τ-bench customer's requests stay verbatim) (tokens)."""
    store = seams.store
    protected = _protected_roots(seams, part, scores, selection)

    def user_core(r: int, requests: bool) -> bool:
        return any(user_authored(store[i].role, store[i].msg_type.value) and scores[i].score >= seams.config.core_score
                   and (scores[i].reason == REQUEST_REASON) == requests for i in part.candidates[r].members)

    strict_roots = {r for r in protected if r == part.task_root or user_core(r, False)}
    # the newest requests only: in a long session the older ones yield like any chain
    request_roots = set(sorted({r for r in protected if user_core(r, True)} - strict_roots)[-NEWEST_REQUESTS:])
    view_roots = (selection.kept & ranked.current_views) - strict_roots - request_roots

    def size(r: int) -> int:
        return selection.sizes.get(r, part.candidates[r].tokens)

    return (sum(size(r) for r in strict_roots), sum(size(r) for r in view_roots),
            sum(size(r) for r in request_roots))


def _below_floor(
    seams: Seams, part: Partitioned, scores: Mapping[int, RelevanceScore], selection: Selection, reserve: int,
    available: int,
) -> str:
    """The decision record's warning when the summary reserve is below its documented floor
    (:data:`MIN_SUMMARY_RESERVE`, issue 23): what took the room, largest first — the task
    statement, user constraints scored ≥ ``core_score`` (neither yields to summaries, SPEC §7),
    and what the ledger spent before selection (the reply's reserve, system prompts, the goal
    block, working memory)."""
    store = seams.store
    takers: list[tuple[int, str]] = []
    constraints: list[tuple[int, str]] = []
    for root in sorted(_protected_roots(seams, part, scores, selection)):
        tokens = selection.sizes.get(root, part.candidates[root].tokens)
        if root == part.task_root:
            takers.append((tokens, f"the task statement {store[root].id} ({tokens:,} tokens)"))
        else:
            constraints.append((tokens, store[root].id))
    if constraints:
        total, ids = sum(t for t, _ in constraints), [i for _, i in constraints]
        listed = ", ".join(ids[:5]) + (f", … {len(ids) - 5} more" if len(ids) > 5 else "")
        takers.append((total, f"{len(ids)} user message(s) scored ≥ {seams.config.core_score} ({listed}; "
                              f"{total:,} tokens)"))
    for purpose, what in ((Purpose.REPLY_PRIMING, "the reply's reserve"), (Purpose.PINNED, "the system prompt(s)"),
                          (Purpose.GOAL_BLOCK, "the goal block"),
                          (Purpose.WORKING_MEMORY, "the newest steps (working memory)")):
        tokens = part.ledger.spent_on(purpose)
        if purpose is Purpose.WORKING_MEMORY and store.first_user_index is not None:
            task = store.chain_root(store.first_user_index)  # the task statement may be the newest user message
            if task in part.recent and task in part.chains:
                takers.append((part.chains[task].tokens, f"the task statement {store[task].id} "
                                                         f"({part.chains[task].tokens:,} tokens)"))
                tokens -= part.chains[task].tokens
        if tokens > 0:
            takers.append((tokens, f"{what} ({tokens:,} tokens)"))
    named = ", ".join(text for _, text in sorted(takers, key=lambda t: -t[0])) or "nothing else"
    return (
        f"summary reserve {reserve} tokens, below its floor of {MIN_SUMMARY_RESERVE}: {named} took the room "
        f"({available:,} of {part.ledger.budget:,} tokens left after the pinned messages); the archive's summary is cut short — raise the budget"
    )


def _goal_block_is_pointer(state: BuildState, part: Partitioned, goal_text: str | None, kept_roots: set[int]) -> bool:
    """The goal block only points at the task statement, which is kept (it never names the subtask)."""
    del state
    return (
        goal_text is not None
        and GOAL_POINTER in goal_text
        and part.task_root is not None
        and part.task_root in kept_roots
    )


def _spend_selection(ledger: BudgetLedger, ranked: Ranked, selection: Selection, pyramid: PyramidResult) -> BudgetLedger:
    for purpose, tier in ((Purpose.CORE, "core"), (Purpose.WORKING, "working")):
        chains = [r for r in selection.kept if selection.tier[r] == tier]
        tokens = sum(selection.sizes.get(r, ranked.tokens[r]) for r in chains)
        if tokens:
            ledger = ledger.spend(purpose, tokens, f"{len(chains)} chain(s) kept verbatim")
    if pyramid.summaries:
        ledger = ledger.spend(Purpose.SUMMARIES, pyramid.tokens, f"{len(pyramid.summaries)} summary message(s)")
    return ledger


_NEWER_RESULT = "a newer result"
"""How the note of a message superseded by a newer tool result (not a restated fact) starts."""


def _superseded_note(seams: Seams, message: Message, newest: dict[str, SupersedeLink] | None = None) -> str:
    """What replaced ``message`` ("since step 31: dislikes sushi"), or ``""`` (issue 11).

    The newest value wins (issue 23): when the newer message was itself restated, the note
    follows the links of the same kind to the newest one ("my budget is $500" → "$700" →
    "$900" reads "since step 40: $900"). ``newest`` memoises that walk within one build
    (message id → its newest link): a command run 1,000 times is a chain of 1,000 links, and
    walking it from every member was quadratic (13.7 s of a 10k-message first build)."""
    links = seams.store.superseded_by
    link = links.get(message.id)
    if link is None:
        return ""
    final = _newest_link(links, message.id, link, newest if newest is not None else {})
    if final.kind == "fact":
        note = f"since step {final.newer_step}: {final.new_value} ({final.key})"
    else:
        note = f"{_NEWER_RESULT} since step {final.newer_step} ({final.newer})"
    known = _NOTES.get(note)
    return known if known is not None else remember(_NOTES, note, note, NOTES_KEPT)


NOTES_KEPT = 65_536
"""Distinct supersede notes :data:`_NOTES` shares before it empties."""
_NOTES: dict[str, str] = {}
"""Each supersede note :func:`_superseded_note` made, kept once (note → itself): the messages a
newer one replaced share their newest link's note, and each marked summary item held its own
copy (issue 24: 40 % of a unique agent history's archive is superseded, ~6 notes a string)."""


def _newest_link(
    links: Mapping[str, SupersedeLink], start: str, link: SupersedeLink, memo: dict[str, SupersedeLink]
) -> SupersedeLink:
    """The last link of ``start``'s chain of links of one kind (``link`` is ``links[start]``),
    memoised in ``memo`` for every message on the walk. Links point to later messages, so
    a chain has no cycle; a ``seen`` set guards anyway (as the walk always did)."""
    path = [start]
    seen = {start}
    while True:
        known = memo.get(path[-1])
        if known is not None and known.kind == link.kind:
            link = known
            break
        nxt = link.newer
        if nxt in seen or nxt not in links or links[nxt].kind != link.kind:
            break
        seen.add(nxt)
        path.append(nxt)
        link = links[nxt]
    for message_id in path:
        memo[message_id] = link
    return link


def _still_newest(links: Mapping[str, SupersedeLink], kept: object) -> bool:
    """Whether ``kept`` (the newest link of a message's supersede chain when its item was kept,
    :meth:`~relevance_memory.summary._pyramid.SummaryItems.keep_linked`) is still its chain's
    newest in ``links``: visible here (a link is never replaced, and its newer message is the
    newest of the chain, so every link before it is visible too) and not followed by a newer link
    of its kind (:func:`_newest_link` would stop at it). Then the message's note is the same.
    The message's own link is checked by the caller (the same object)."""
    if not isinstance(kept, SupersedeLink) or links.get(kept.older) is not kept:
        return False
    after = links.get(kept.newer)
    return after is None or after.kind != kept.kind


def _covered_indices(seams: Seams, index: _LinkIndex | None, summary: RenderedSummary) -> npt.NDArray[np.int64] | None:
    """The store indices of the messages ``summary`` covers, or ``None`` when one of its ids is
    not in the store; kept in ``index`` per summary (a store's ids never move), so a carried
    summary's ids are looked up once, not at every compaction (issue 24)."""
    known = index.covered.get(id(summary)) if index is not None else None
    if known is not None and known[0] is summary:
        return known[1]
    try:
        covering = np.asarray(seams.store.indices(summary.covered_ids), dtype=np.int64)
    except KeyError:
        return None
    if index is not None:
        index.keep_covered(summary, covering)
    return covering


def _carried_holds(
    seams: Seams, index: _LinkIndex | None, summary: RenderedSummary, newest: dict[str, SupersedeLink],
    linked: AbstractSet[str],
) -> bool:
    """:func:`_marks_hold`, its verdict on a carried summary kept in ``index`` while no fact link
    was added (only a fact link changes a mark it checks: a note of a newer result does not
    count, and a link is never removed)."""
    if index is None:
        return _marks_hold(seams, summary, newest, linked)
    facts = index.stamp[1]
    known = index.verdicts.get(id(summary))
    if known is not None and known[0] is summary and known[1] == facts:
        return known[2]
    verdict = _marks_hold(seams, summary, newest, linked, index.facts)
    index.keep_verdict(summary, facts, verdict)
    return verdict


def _marks_hold(
    seams: Seams, summary: RenderedSummary, newest: dict[str, SupersedeLink], linked: AbstractSet[str] | None = None,
    facts: AbstractSet[str] | None = None,
) -> bool:
    """Whether the fact supersede marks ``summary`` was made with are still the current ones
    for the messages it covers (issue 23): a summary made before one of them was superseded (or
    before its newer value was restated again) shows that value as current, so it is not
    carried, and the messages are summarised afresh with the mark. Marks of a newer tool result
    (a file read again) do not count: the newer result is in the context or in a later summary,
    and dropping the carried summary for each re-read broke the cached prefix (django-15280 at
    8k: cost 0.47 -> 0.50 of the full history). ``linked``: the ids a newer message supersedes
    (:func:`_linked`), when known: only those are looked up; ``facts``: those of them a fact link
    supersedes (:class:`_LinkIndex`), when known: only those and the ids marked when the summary
    was made are (a message of another link has no mark to check: its note is a newer result's)."""
    if not seams.config.supersede:
        return True
    store, links = seams.store, seams.store.superseded_by
    made = {i: note for i, note in summary.superseded if not note.startswith(_NEWER_RESULT)}
    covered: Sequence[str] = summary.covered_ids
    if linked is not None:  # an id without a link (:func:`_linked`) has no mark now: only a made one differs
        stale = {message_id for message_id, note in made.items() if note and message_id not in linked}
        if stale and not stale.isdisjoint(covered):
            return False
        covered = ([message_id for message_id in covered if message_id in linked] if facts is None else
                   [message_id for message_id in covered if message_id in facts or message_id in made])
    for message_id in covered:
        link = links.get(message_id)
        now = _superseded_note(seams, store.get(message_id), newest) if link is not None and link.kind == "fact" else ""
        if now != made.get(message_id, ""):
            return False
    return True


def summarise(state: BuildState, seams: Seams) -> Summarised:
    """The summarise stage: negotiate the summary reserve over the ledger, fill the rest from
    the ranking, summarise the archive (module doc).

    Reads the partition (ledger, candidates, goal block), the scores and the ranking; writes
    the final :class:`Selection`, the pyramid and the ledger with core, working and summaries.
    """
    part = required(state.partition, "partition")
    scores = required(state.scored, "score").scores
    ranked = required(state.ranked, "select")
    config, store = seams.config, seams.store
    ledger = part.ledger
    available = ledger.left
    goal_text = part.goal_text
    selection = fill_ranked(ranked, available, store)
    if not config.summaries or len(selection.kept) == len(part.candidates):
        notes: list[str] = []
        if _points_at_a_left_out_task(state, part, goal_text, set(part.recent | selection.kept)):
            goal_text, ledger = _goal_with_text(state, seams, ledger, available - selection.used, notes)
        return Summarised(
            selection, PyramidResult(), frozenset(), goal_text, _spend_selection(ledger, ranked, selection, PyramidResult()),
            tuple(notes),
        )
    strict, views, requests = _protected(seams, part, scores, selection, ranked)
    share = max(MIN_SUMMARY_RESERVE, int(state.budget * reserve_share(seams, part)))
    wanted = config.summary_budget or share
    floor = wanted // 2 if config.summary_budget else max(wanted // 2, MIN_SUMMARY_RESERVE)
    most = max(0, available - strict - views - requests, min(available - strict - requests, floor),
               min(available - strict, MIN_SUMMARY_RESERVE))
    reserve = min(most, wanted)

    def attempt(reserve: int, extra: int = 0) -> tuple[Selection, PyramidResult, set[int]]:
        chosen = fill_ranked(ranked, available - reserve, store) if reserve > 0 else selection
        room = available - chosen.used + extra
        cap = min(room, config.summary_budget) if config.summary_budget else room
        pyramid, held = summarise_archive(seams, part, scores, part.recent | chosen.kept, cap, chosen.repeats,
                                          state.carried)
        return chosen, pyramid, held

    chosen, pyramid, held = attempt(reserve)
    for _ in range(RESERVE_GROWTH_STEPS):  # grow the reserve to what the summaries need
        if pyramid.summaries or reserve >= most:
            break
        probe, _ = summarise_archive(seams, part, scores, part.recent | chosen.kept, most, chosen.repeats,
                                     state.carried)
        if not probe.summaries:
            break
        reserve = min(most, max(reserve + 1, probe.tokens))
        chosen, pyramid, held = attempt(reserve)
    warnings: list[str] = []
    if not config.summary_budget and reserve < MIN_SUMMARY_RESERVE:
        warnings.append(_below_floor(seams, part, scores, selection, reserve, available))
    freed = 0
    if reserve:
        ledger = ledger.reserve(Purpose.SUMMARIES, reserve, "candidates filled the rest")
    if not pyramid.summaries and _goal_block_is_pointer(state, part, goal_text, set(part.recent | chosen.kept)):
        freed = ledger.spent_on(Purpose.GOAL_BLOCK)
        ledger = ledger.release(Purpose.GOAL_BLOCK, freed, "yielded to the summary: it only pointed at the kept task statement")
        goal_text = None
        chosen, pyramid, held = attempt(reserve, extra=freed)
        warnings.append(
            f"goal block ({freed} tokens) left out to make room for the summary; it only pointed at the kept task statement"
        )
    if not pyramid.summaries:  # no summary fits: a pointer at least, with room made for it
        chosen, pyramid = _with_pointer(seams, part, scores, ranked, chosen, pyramid, available + freed)
    if _points_at_a_left_out_task(state, part, goal_text, set(part.recent | chosen.kept)):
        goal_text, ledger = _goal_with_text(state, seams, ledger, available - chosen.used - pyramid.tokens, warnings)
    return Summarised(
        selection=chosen,
        pyramid=pyramid,
        held=frozenset(held),
        goal_text=goal_text,
        ledger=_spend_selection(ledger, ranked, chosen, pyramid),
        warnings=tuple(warnings),
    )


def _points_at_a_left_out_task(state: BuildState, part: Partitioned, goal_text: str | None, kept: set[int]) -> bool:
    """The goal block points at the task statement ("kept verbatim here"), which the fill
    left out (a scorer rated it low): the pointer would not tell the truth."""
    return (
        goal_text is not None
        and GOAL_POINTER in goal_text
        and part.task_root is not None
        and part.task_root not in kept
    )


def _goal_with_text(
    state: BuildState, seams: Seams, ledger: BudgetLedger, room: int, warnings: list[str]
) -> tuple[str | None, BudgetLedger]:
    """Replace a pointer goal block by one carrying the final goal (clipped to the pointer's
    tokens plus ``room``), so the context still states the task; ``None`` when even a short
    excerpt does not fit."""
    pointer = ledger.spent_on(Purpose.GOAL_BLOCK)
    ledger = ledger.release(Purpose.GOAL_BLOCK, pointer, "the task statement was left out: the goal block states it")
    store, counter, role = seams.store, seams.tokenizer, seams.config.context_role
    first = store.first_user_index
    statement_id = store[first].id if first is not None else None
    frame = counter.count_message({"role": role, "content": goal_block_text(state.goal, final_excerpt="",
                                                                            task_statement_id=statement_id)})
    excerpt = clip_to_tokens(counter, state.goal.final, max(0, pointer + max(0, room) - frame))
    text = goal_block_text(state.goal, final_excerpt=excerpt, task_statement_id=statement_id)
    tokens = counter.count_message({"role": role, "content": text})
    if not excerpt or tokens > pointer + max(0, room):
        warnings.append("the task statement was left out and the goal block has no room to state it")
        return None, ledger
    warnings.append("the task statement was left out (scored low); the goal block states the final goal instead")
    return text, ledger.spend(Purpose.GOAL_BLOCK, tokens, "states the final goal: the task statement was left out")


def _archived_ids(seams: Seams, part: Partitioned, kept_roots: set[int] | frozenset[int], selection: Selection) -> list[str]:
    """Ids of the messages neither kept, pinned, excluded nor repeats, in store order."""
    store, repeats = seams.store, selection.repeats
    return [
        m.id for m in store.messages
        if m.index not in part.excluded and m.index not in part.pinned and not (repeats and m.index in repeats)
        and store.chain_root(m.index) not in kept_roots
    ]


def _protected_roots(seams: Seams, part: Partitioned, scores: Mapping[int, RelevanceScore], selection: Selection) -> set[int]:
    """Kept core chains that never yield to summaries or a pointer: the task statement and
    user messages scored ≥ ``core_score`` (SPEC §7: a user constraint is never only in a summary)."""
    store, core = seams.store, seams.config.core_score
    return {
        r for r in selection.kept
        if selection.tier[r] == "core"
        and (r == part.task_root or any(user_authored(store[i].role, store[i].msg_type.value) and scores[i].score >= core
                                      for i in part.candidates[r].members))
    }


def _with_pointer(
    seams: Seams,
    part: Partitioned,
    scores: Mapping[int, RelevanceScore],
    ranked: Ranked,
    chosen: Selection,
    pyramid: PyramidResult,
    available: int,
) -> tuple[Selection, PyramidResult]:
    """SPEC §7 / issue 13: archived messages never vanish without a trace. The pointer the
    pyramid made when it fits; else the lowest-ranked kept chains yield the pointer's room —
    never the task statement or a user message scored ≥ core (then there is no pointer, and
    the pyramid's warning says the archived messages were dropped, restorable by id)."""
    role = seams.config.context_role
    count = seams.tokenizer.count_message
    pointer = pyramid.pointer
    if pointer is None:
        trial = chosen
        ids = _archived_ids(seams, part, part.recent | trial.kept, trial)
        if not ids:
            return chosen, pyramid
        need = pointer_tokens(ids, role=role, count=count)
        for _ in range(3):  # yielding a chain archives it too: the pointer grows a little
            if available - trial.used >= need:
                break
            trial = fill_ranked(ranked, available - need, seams.store)
            ids = _archived_ids(seams, part, part.recent | trial.kept, trial)
            need = pointer_tokens(ids, role=role, count=count)
        pointer = pointer_summary(ids, role=role, cap=available - trial.used, count=count)
        if pointer is None or not _protected_roots(seams, part, scores, chosen) <= trial.kept:
            return chosen, pyramid  # nothing yields for nothing, and constraints never yield to a pointer
        chosen = trial
    result = PyramidResult(summaries=[pointer], warnings=list(pyramid.warnings))
    result.warnings.append(
        f"no summary fits: a pointer names the {len(pointer.covered_ids)} archived message(s), restorable by id"
    )
    return chosen, result

"""Prefilter (SPEC §3 step 3, §5 forgetting): which candidate chains the scorer sees.

Two things keep a candidate chain from being scored, and it is archived instead
(summarised like any archived message, restorable from the store):

- **forgetting** (SPEC §5): every member scored ≤ 2 by an earlier subtask of this task
  and weaker than ``forget_threshold`` (not re-scored);
- **the BM25 prefilter**: when the candidates outnumber ``prefilter_top_n``, chains are
  ranked by the best BM25 score of their members for a query made of goal + subtask + the
  recent steps, and admitted until they hold ``top_n`` messages (and at least twice the
  budget left in tokens). The task statement, user instructions and chains with a
  high-strength member or a member scored core by an earlier subtask always pass.
  With message vectors (``MemoryConfig.embeddings``, issue 11) the ranking is the
  reciprocal-rank fusion of that BM25 order and the order by cosine to the goal (the
  larger of final goal and subtask), so a message that shares no word with the goal but
  means the same is not left out unseen (LoCoMo / LongMemEval: the fused ranking finds more
  evidence than BM25 at every budget, BENCHMARKS.md).
  Rejected chains are noted ``"prefiltered out"`` (they can pass on a later build when
  the query changes). With ``prefilter="auto"`` a local scorer (the offline one) sees
  every candidate up to :data:`~relevance_memory._config.LOCAL_PREFILTER_MIN`.
The BM25 index itself lives in :mod:`._bm25` (built in chunks, grown with the store).
"""

from __future__ import annotations

import itertools
import operator
from array import array
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from .._config import LOCAL_PREFILTER_MIN
from .._memo import same_prefix
from .._models import Message, user_authored
from .._text import lexical_terms
from ..pheromone._field import PheromoneField
from ..pheromone._math import forgotten_for, score_before, task_strength
from ..scoring._semantic import mostly_cjk, rrf_fuse_array
from ._bm25 import ChunkedBM25, PrefilterIndex
from ._state import BuildState, Chain, Prefiltered, Seams, required

__all__ = ["ChunkedBM25", "PrefilterIndex", "PrefilterResult", "prefilter", "prefilter_chains"]

PREFILTER_RECENT_WEIGHT = 0.3
"""Weight of recent-step terms against goal + subtask terms in the prefilter's BM25."""
PREFILTER_QUERY_TERMS = 256
"""Most distinct terms in the prefilter's BM25 query (goal terms first, then recent steps)."""

@dataclass(frozen=True)
class PrefilterResult:
    """Outcome of :func:`prefilter_chains`.

    Attributes:
        admitted: chain roots the scorer will see (or whose scores are cached).
        rejected: chain roots left out, with their best BM25 score.
    """

    admitted: list[int]
    rejected: Mapping[int, float]


@dataclass(frozen=True)
class ChainLayout:
    """Candidate chains as arrays (what :func:`prefilter_chains` ranks), in the candidates'
    order: ``roots[k]``, ``sizes[k]`` members, held in ``flat[starts[k]:starts[k] + sizes[k]]``,
    ``tokens[k]`` tokens (int64 arrays); ``chains``: the :class:`~._state.Chain` objects
    they were read from (:func:`chain_layout` reuses the arrays of an unchanged prefix)."""

    chains: list[Chain]
    roots: npt.NDArray[np.int64]
    sizes: npt.NDArray[np.int64]
    flat: npt.NDArray[np.int64]
    starts: npt.NDArray[np.int64]
    tokens: npt.NDArray[np.int64]

    def ascending(self) -> bool:
        """Whether the chains are in ascending root order (O(chains) in numpy)."""
        return bool(np.all(self.roots[1:] > self.roots[:-1]))


def chain_layout(candidates: Mapping[int, Chain], previous: ChainLayout | None = None) -> ChainLayout:
    """:class:`ChainLayout` of ``candidates`` (root → chain; each chain's ``root`` its key).

    ``previous``: the layout of an earlier build's candidates. The chains of a memory's chain
    index are the same objects from build to build until a message joins them, and the newest
    chains come last (issue 24: a compaction at 300k messages turned ~150k chains into arrays
    again, ~0.13 s), so the arrays of the longest prefix of the same chain objects are reused
    and only the chains after it are read: O(chains) identity checks in C, plus the new chains'
    members.
    """
    chains = list(candidates.values())
    k = 0
    if previous is not None:
        k = same_prefix(previous.chains, chains)
    tail = chains[k:]
    sizes = np.fromiter(map(len, (c.members for c in tail)), dtype=np.int64, count=len(tail))
    flat = np.fromiter(itertools.chain.from_iterable(c.members for c in tail), dtype=np.int64, count=int(sizes.sum()))
    roots = np.fromiter((c.root for c in tail), dtype=np.int64, count=len(tail))
    tokens = np.fromiter((c.tokens for c in tail), dtype=np.int64, count=len(tail))
    if k and previous is not None:
        upto = int(previous.starts[k - 1] + previous.sizes[k - 1])
        sizes = np.concatenate([previous.sizes[:k], sizes])
        flat = np.concatenate([previous.flat[:upto], flat])
        roots = np.concatenate([previous.roots[:k], roots])
        tokens = np.concatenate([previous.tokens[:k], tokens])
    starts = np.zeros(len(chains), dtype=np.int64)
    np.cumsum(sizes[:-1], out=starts[1:])
    return ChainLayout(chains=chains, roots=roots, sizes=sizes, flat=flat, starts=starts, tokens=tokens)


def prefilter_chains(
    chains: Mapping[int, Sequence[int]],
    doc_scores: Sequence[float] | npt.NDArray[np.float64],
    *,
    top_n: int,
    always: Collection[int],
    tokens: Mapping[int, int] | None = None,
    min_tokens: int = 0,
    layout: ChainLayout | None = None,
) -> PrefilterResult:
    """Pick chains for the scorer (pure).

    Args:
        chains: candidate root → member message indices.
        doc_scores: BM25 score per message index.
        top_n: messages admitted by rank; every chain counts, ``always`` ones included.
        tokens: chain root → tokens, for ``min_tokens``.
        min_tokens: keep admitting by rank until the admitted chains hold at least this
            many tokens (the manager passes twice the budget left), so the prefilter
            bounds scoring without starving a large budget (tokens).
        always: roots that pass regardless of rank.
        layout: ``chains`` and ``tokens`` as arrays (:func:`chain_layout`), when the caller
            keeps them; then ``chains`` and ``tokens`` are not read.

    Returns:
        A :class:`PrefilterResult`; ties in BM25 go to the newer chain.
    """
    if layout is None:
        if not chains:
            return PrefilterResult(admitted=[], rejected={})
        sized = tokens or {}
        layout = chain_layout({root: Chain(root, tuple(members), sized.get(root, 0)) for root, members in chains.items()})
    if not len(layout.roots):
        return PrefilterResult(admitted=[], rejected={})
    # with numpy (the same floats: a maximum and an order, no arithmetic): a chain's best score
    # and its newest member, each chain's members one segment of ``flat``
    sizes, flat, starts = layout.sizes, layout.flat, layout.starts
    best_of = np.maximum.reduceat(np.asarray(doc_scores, dtype=np.float64)[flat], starts)
    newest = np.maximum.reduceat(flat, starts)
    # every chain consumes the quota in rank order, always-pass ones included, so the
    # admitted set does not slide when more chains become always-pass between builds;
    # best score first, then the newer chain (a stable sort, as ``sorted`` by that key).
    # A chain is admitted while quota is left before it, when it always passes, or while the
    # chains before it hold fewer than ``min_tokens`` (running sums in rank order: integers)
    order = np.lexsort((-newest, -best_of))
    counts = sizes[order]
    room_before = top_n - (np.cumsum(counts) - counts)
    held = layout.tokens[order]
    held_before = np.cumsum(held) - held
    ranked_roots = layout.roots[order]
    passing = np.fromiter(always, dtype=np.int64, count=len(always)) if always else np.zeros(0, dtype=np.int64)
    admit = (room_before > 0) | (held_before < min_tokens) | np.isin(ranked_roots, passing)
    out = ~admit
    return PrefilterResult(admitted=sorted(ranked_roots[admit].tolist()), rejected=_Rejected(ranked_roots[out], best_of[order][out]))


class _Rejected(Mapping[int, float]):
    """Rejected root → its best score, in rank order, read from the ranking's arrays: the dict
    is made when first read (issue 24: ~150k rejected chains at 300k messages, a dict of Python
    ints and floats per compaction, whose scores only a record read later shows; the build
    needs only which roots were admitted). Its length is the arrays'."""

    __slots__ = ("_read", "_roots", "_scores")

    def __init__(self, roots: npt.NDArray[np.int64], scores: npt.NDArray[np.float64]) -> None:
        self._roots, self._scores = roots, scores
        self._read: dict[int, float] | None = None

    def _dict(self) -> dict[int, float]:
        if self._read is None:
            self._read = dict(zip(self._roots.tolist(), self._scores.tolist(), strict=True))
        return self._read

    def __getitem__(self, root: int) -> float:
        return self._dict()[root]

    def __contains__(self, root: object) -> bool:
        return root in self._dict()

    def __iter__(self) -> Iterator[int]:
        return iter(self._dict())

    def __len__(self) -> int:
        return len(self._roots)

    def __reduce__(self) -> tuple[Any, ...]:  # a copy or pickle: the plain dict
        return (dict, (self._dict(),))


def _query(texts: Sequence[str]) -> list[str]:
    """Distinct lexical terms of ``texts`` in order, at most :data:`PREFILTER_QUERY_TERMS`."""
    query: list[str] = []
    for text in texts:
        query.extend(lexical_terms(text[:4_000]))
    return list(dict.fromkeys(query))[:PREFILTER_QUERY_TERMS]


def _forgotten(state: BuildState, seams: Seams) -> dict[int, str]:
    """SPEC §5 forget threshold: candidate roots to archive without re-scoring.

    Strengths and latest scores were earned under a final goal; a different final goal (a
    new task, a new question) starts from fresh scores, so forgetting applies within one
    task only. The task statement and a chain raised by references (SPEC §3 step 6) are
    never forgotten.
    """
    config = seams.config
    if not config.pheromone.enabled:
        return {}
    part = required(state.partition, "partition")
    store, goal = seams.store, state.goal
    threshold = config.pheromone.forget_threshold
    promote = config.promote_after_references
    forgotten: dict[int, str] = {}
    is_forgotten, notable = _forgetting(seams, goal.final, goal.effective_subtask)
    referenced_by = store.referenced_by
    chains = part.candidates
    if notable is not None:  # only a chain whose members are all notable can be forgotten: their roots
        may: set[int] = set()
        for mid in notable:
            try:
                may.add(store.chain_root(store.get(mid).index))
            except KeyError:  # a cell of a message this store does not hold (a board's)
                continue
        chains = {root: chain for root, chain in chains.items() if root in may}
    for root, chain in chains.items():
        if (
            root != part.task_root
            and all(is_forgotten(store[i].id) for i in chain.members)
            and not any(len(referenced_by.get(store[i].id, ())) >= promote for i in chain.members)
        ):
            forgotten[root] = f"forgotten: strength < {threshold} with score ≤ 2 (not re-scored)"
    return forgotten


def _forgetting(seams: Seams, final: str, subtask: str) -> tuple[Callable[[str], bool], Collection[str] | None]:
    """``forgotten_for`` of the pheromone memory for ``(final, subtask)`` by message id, and the
    ids it can be true for (``None``: any); a plain
    :class:`~relevance_memory.pheromone._field.PheromoneField` read cell by cell, and only
    for its notable cells (a cell never scored cannot be forgotten: one set lookup for the others)."""
    field = seams.pheromone
    if not _plain(field, ("forgotten_for",)):
        return (lambda mid: field.forgotten_for(mid, final, subtask)), None
    cell_of, tick, pconfig = field.cell, field.tick, field.config
    notable = field.notable_ids()

    def forgotten(mid: str) -> bool:
        if notable is not None and mid not in notable:
            return False
        cell = cell_of(mid)
        return forgotten_for(cell, tick, pconfig, final, subtask) if cell else False

    return forgotten, notable


def _bm25_ranking(state: BuildState, seams: Seams) -> tuple[PrefilterResult, ChainLayout] | None:
    """The BM25 prefilter's ranking of the candidate chains (module doc): the roots it admits
    and those it leaves out, with their best BM25 score, and the candidates' layout; ``None``
    when it does not rank (off, or too few candidates).

    Every live candidate chain is ranked, scored or not, forgotten or not (they keep
    consuming the quota but stay archived, so chains forgotten after a build do not slide
    the window on the next), and the quota counts every message, so the same history and
    goal always admit the same chains: a rebuild with nothing new is stable and sends
    nothing to the scorer. Score and strength are the message's own memory from *before*
    the current subtask (:meth:`PheromoneField.score_before`, ``strength_for``), not a
    cache hit through identical content nor this subtask's own deposit, so what a build
    admits never depends on cache state.
    """
    config, store, goal = seams.config, seams.store, state.goal
    part = required(state.partition, "partition")
    if config.prefilter is False:
        return None
    index = seams.prefilter_index
    kept = index.layout if isinstance(index.layout, ChainLayout) else None
    layout = index.layout = chain_layout(part.candidates, kept)
    candidates = int(layout.sizes.sum())
    if candidates <= config.prefilter_top_n:
        return None
    if config.prefilter == "auto" and seams.capabilities.local and candidates <= LOCAL_PREFILTER_MIN:
        return None
    ranked: Mapping[int, Sequence[int]] = _ChainField(part.candidates, operator.attrgetter("members"))
    always = _always_pass(ranked, part.task_root, seams, goal.final, goal.effective_subtask)
    # the goal and subtask lead; recent steps add context at a lower weight (their text
    # can be unrelated to the goal, e.g. the newest chat turn)
    goal_query = _query([goal.final, goal.subtask])
    in_goal = set(goal_query)
    recent_query = [
        t for t in _query([store[i].text for r in part.recent for i in part.chains[r].members]) if t not in in_goal
    ]
    # float64 arrays: the same per-message arithmetic as Python floats (one product, one sum)
    doc_scores: Sequence[float] | npt.NDArray[np.float64] = (
        index.score_array(store.terms, goal_query) if goal_query else np.zeros(len(store), dtype=np.float64))
    if recent_query:
        doc_scores = doc_scores + PREFILTER_RECENT_WEIGHT * index.score_array(store.terms, recent_query)
    cosines = goal_cosines(state, seams)
    if cosines is not None:
        doc_scores = rrf_fuse_array(doc_scores, cosines, semantic_order=index.cosine_order(cosines))
    result = prefilter_chains(
        ranked,
        doc_scores,
        top_n=config.prefilter_top_n,
        always=always,
        tokens=_ChainField(part.candidates, operator.attrgetter("tokens")),
        min_tokens=2 * max(0, part.ledger.left),
        layout=layout,
    )
    return result, layout


_V = TypeVar("_V")


class _ChainField(Mapping[int, _V]):
    """Root → one field of each candidate chain (root → :class:`~._state.Chain`), read through:
    no dict of every chain made per build."""

    __slots__ = ("_chains", "_read")

    def __init__(self, chains: Mapping[int, Chain], read: Callable[[Chain], _V]) -> None:
        self._chains, self._read = chains, read

    def __getitem__(self, root: int) -> _V:
        return self._read(self._chains[root])

    def __iter__(self) -> Iterator[int]:
        return iter(self._chains)

    def __len__(self) -> int:
        return len(self._chains)


_PASS_READS = ("score_before", "strength_for", "latest_score")
"""The field methods :func:`_memory_passes` reads."""


def _plain(field: object, reads: Sequence[str]) -> bool:
    """Whether ``field`` is a :class:`PheromoneField` whose ``reads`` are the class's own (so its
    cells may be read directly, with the same functions those methods apply)."""
    return isinstance(field, PheromoneField) and all(getattr(type(field), n) is getattr(PheromoneField, n) for n in reads)


def _always_pass(
    ranked: Mapping[int, Sequence[int]], task_root: int | None, seams: Seams, final: str, subtask: str
) -> set[int]:
    """Candidate roots that pass the prefilter whatever their rank: the task statement's, a
    user instruction's, and those with a member the pheromone memory lets through
    (:func:`_memory_passes`, asked only about :func:`_memory_candidates`)."""
    store = seams.store
    messages = store.messages[0:len(store)]  # one list: each index of a snapshot view is a Python call
    root_of = _ranked_roots(ranked, seams)
    always: set[int] = {task_root} if task_root is not None and task_root in ranked else set()
    instructions = seams.prefilter_index.user_instructions(messages)
    always.update(r for r in map(root_of.get, instructions) if r is not None)
    if seams.config.pheromone.enabled:
        remembered = _memory_passes(seams, final, subtask)
        for i in _memory_candidates(seams, root_of):
            if root_of[i] not in always and remembered(messages[i]):
                always.add(root_of[i])
    return always


class _RootOf(Mapping[int, int]):
    """Member index → its candidate root, read from the chain index's roots (no dict of every
    member): valid when every candidate root is a root of the chain index, so a candidate
    chain's members are some of that chain's (:func:`_ranked_roots` checks it)."""

    __slots__ = ("_ranked", "_roots")

    def __init__(self, ranked: Mapping[int, Sequence[int]], roots: Sequence[int]) -> None:
        self._ranked, self._roots = ranked, roots

    def __getitem__(self, index: int) -> int:
        if 0 <= index < len(self._roots):
            root = self._roots[index]
            members = self._ranked.get(root)
            if members is not None and index in members:
                return root
        raise KeyError(index)

    def __iter__(self) -> Iterator[int]:
        return (i for members in self._ranked.values() for i in members)

    def __len__(self) -> int:
        return sum(map(len, self._ranked.values()))


def _all_roots(ranked: Collection[int], roots: array[int]) -> bool:
    """Whether every index in ``ranked`` is its own root in ``roots`` (member → root, the chain
    index's ``array('i')``): one array comparison over a copy of ``roots`` (a copy, so no
    buffer stays exported while the index grows), not a Python step per chain."""
    if not ranked:
        return True
    at = np.fromiter(ranked, dtype=np.int64, count=len(ranked))
    table = np.array(roots, dtype=np.int64)
    if at.min() < 0 or at.max() >= len(table):
        raise IndexError("a candidate root beyond the chain index")
    return bool((table[at] == at).all())


def _ranked_roots(ranked: Mapping[int, Sequence[int]], seams: Seams) -> Mapping[int, int]:
    """Member → root of the candidate chains ``ranked``: read from the chain index when it
    holds the store and every candidate root is one of its roots (O(chains) to check), else
    a dict of every member (a chain regrouped without a skipped message has another root)."""
    chains, store = seams.chains, seams.store
    if chains.covers(store):
        roots = chains.roots
        if _all_roots(ranked, roots):
            return _RootOf(ranked, roots)
    return {i: r for r, members in ranked.items() for i in members}


def _memory_candidates(seams: Seams, members: Collection[int]) -> Collection[int]:
    """The indices among ``members`` the pheromone memory may let through the prefilter: of a
    plain field, only those of its notable cells
    (:meth:`~relevance_memory.pheromone._field.PheromoneField.notable_ids`: a score or
    ``prefilter_pass`` strength is needed to pass), so the cost follows the scored messages,
    not the history (issue 24); otherwise all of them."""
    config, field, store = seams.config, seams.pheromone, seams.store
    notable = field.notable_ids() if _plain(field, _PASS_READS) else None
    if (notable is None or config.core_score <= 0 or config.pheromone.prefilter_pass <= 0.0
            or field.config.prefilter_pass > config.pheromone.prefilter_pass):
        return members
    out: list[int] = []
    for mid in notable:
        try:
            i = store.get(mid).index
        except KeyError:  # a cell of a message this store does not hold (a board's)
            continue
        if i in members:
            out.append(i)
    return out


def _memory_passes(seams: Seams, final: str, subtask: str) -> Callable[[Message], bool]:
    """Whether the pheromone memory lets a message's chain always pass the prefilter: scored
    core by an earlier subtask, strength for this task at least ``prefilter_pass``, or (SPEC §7)
    a user's own message once scored core, also by this very subtask (only admitted chains
    are ever scored, so a rebuild admits the same set). A plain
    :class:`~relevance_memory.pheromone._field.PheromoneField` is read cell by cell (one lookup per
    message, the same functions its methods apply); another memory through its methods."""
    config = seams.config
    core, passing = config.core_score, config.pheromone.prefilter_pass
    field = seams.pheromone
    if not _plain(field, _PASS_READS):
        return lambda m: (
            (field.score_before(m.id, final, subtask) or 0) >= core
            or field.strength_for(m.id, final, subtask) >= passing
            or (user_authored(m.role, m.msg_type.value) and (field.latest_score(m.id) or 0) >= core)
        )
    cell_of, tick, pconfig = field.cell, field.tick, field.config

    def passes(m: Message) -> bool:
        cell = cell_of(m.id)
        if not cell:
            return core <= 0 or passing <= 0.0
        return (
            (score_before(cell, final, subtask) or 0) >= core
            or task_strength(cell, tick, pconfig, final, subtask) >= passing
            or (user_authored(m.role, m.msg_type.value) and (cell.latest_score or 0) >= core)
        )

    return passes


def goal_cosines(state: BuildState, seams: Seams) -> npt.NDArray[np.float64] | None:
    """Each stored message's cosine to the goal (the larger of final goal and subtask), from
    the vectors kept on ingest; ``None`` without vectors or goal text (exact, deterministic).
    An array (float64: the same values a list of Python floats holds; no list of 100k floats
    made for :func:`~relevance_memory.scoring._semantic.rrf_fuse_array` to turn back into one), kept
    for the goal by the prefilter index and grown by the messages stored since
    (:meth:`~relevance_memory.pipeline._bm25.PrefilterIndex.goal_cosines`)."""
    vectors = seams.store.message_vectors() if seams.config.embeddings else None
    texts = [t for t in dict.fromkeys([state.goal.final, state.goal.effective_subtask]) if t.strip()]
    if vectors is None or not texts or mostly_cjk(" ".join(texts)):  # the default model is English-centric
        return None
    return seams.prefilter_index.goal_cosines(vectors, texts, seams.store.messages)


class _Skipped(Mapping[int, str]):
    """Skipped root → why: a forgotten chain's reason, or a rejected chain's best score put in
    ``template`` when read (issue 24: ~150k rejected chains at 300k messages, whose reasons only a
    record read later shows). As ``dict(rejected)`` updated with ``forgotten``: the rejected in
    their order, then the forgotten ones not rejected; a forgotten chain's reason wins.

    ``candidates`` and ``admitted``: when the rejected are exactly the candidate roots not
    admitted (the ranking ranks every candidate), membership is read from them (the few admitted
    roots), not from a dict of every rejected one.
    """

    __slots__ = ("_admitted", "_candidates", "_forgotten", "_rejected", "template")

    def __init__(self, rejected: Mapping[int, float], template: str, forgotten: Mapping[int, str] | None = None, *,
                 candidates: Collection[int] | None = None, admitted: Collection[int] | None = None) -> None:
        self._rejected, self.template, self._forgotten = rejected, template, forgotten or {}
        self._candidates, self._admitted = candidates, admitted

    def _is_rejected(self, root: object) -> bool:
        if self._candidates is not None and self._admitted is not None:
            return root in self._candidates and root not in self._admitted
        return root in self._rejected

    def __contains__(self, root: object) -> bool:
        return root in self._forgotten or self._is_rejected(root)

    def __getitem__(self, root: int) -> str:
        reason = self._forgotten.get(root)
        if reason is not None:
            return reason
        if not self._is_rejected(root):
            raise KeyError(root)
        return self.template.format(self._rejected[root])

    def __iter__(self) -> Iterator[int]:
        yield from self._rejected
        yield from (root for root in self._forgotten if not self._is_rejected(root))

    def __len__(self) -> int:
        return len(self._rejected) + sum(1 for root in self._forgotten if not self._is_rejected(root))

    def __reduce__(self) -> tuple[Any, ...]:  # a copy or pickle: a plain dict of the reasons
        return (dict, (list(self.items()),))


def prefilter(state: BuildState, seams: Seams) -> Prefiltered:
    """The prefilter stage (module doc): reads the partition's candidates, the pheromone
    memory and the BM25 index; writes which chains are skipped and which members need a score."""
    part = required(state.partition, "partition")
    forgotten = _forgotten(state, seams)
    ranking = _bm25_ranking(state, seams)
    rejected: Mapping[int, float] = ranking[0].rejected if ranking is not None else {}
    rank = "BM25 + semantic rank" if rejected and seams.store.message_vectors() is not None and seams.config.embeddings else "BM25"
    template = f"prefiltered out ({rank} {{:.4g}} below the top {seams.config.prefilter_top_n})"
    candidates = part.candidates
    if ranking is None:
        skipped = _Skipped(rejected, template, forgotten)
        kept = tuple(itertools.filterfalse(forgotten.__contains__, candidates))  # one pass in C: select reads it too
    else:
        result, layout = ranking
        admitted = set(result.admitted)
        skipped = _Skipped(rejected, template, forgotten, candidates=candidates, admitted=admitted)
        # the candidates not skipped, in their order: the admitted ones not forgotten (ascending
        # roots, the chain index's order, read from the few admitted)
        kept = (tuple(root for root in result.admitted if root not in forgotten) if layout.ascending() else
                tuple(root for root in candidates if root in admitted and root not in forgotten))
    to_score = sorted(i for root in kept for i in candidates[root].members)
    return Prefiltered(skipped=skipped, to_score=tuple(to_score), kept=kept)

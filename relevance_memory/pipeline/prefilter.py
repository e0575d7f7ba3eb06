"""Prefilter (SPEC §3 step 3): a cheap local BM25 ranking that picks what the scorer sees.

When the candidates outnumber ``prefilter_top_n``, chains are ranked by the best BM25
score of their members for a query made of goal + subtask + the recent steps; the best
chains are admitted until they hold ``top_n`` messages. Some chains always pass:
those with a user instruction, a high-strength member (pheromone carry-over), or a
member whose score is already cached (it costs the scorer nothing).

Rejected chains are not scored; the manager puts them in the ``archive`` tier with
the reason ``"prefiltered out"`` (they are summarised like any archived message and
can pass on a later build when the query changes).

Indexing cost: ``bm25s`` re-indexing 100k documents takes seconds, so the index is
built in fixed chunks of messages (store order). A full chunk is indexed once and
never again (messages are immutable); only the newest partial chunk is re-indexed,
and only when it grew. Scores are BM25 within a chunk (per-chunk IDF), good enough
for a prefilter. Terms are the store's lexical terms (words + CJK bigrams).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ChunkedBM25", "PrefilterResult", "prefilter_chains"]

CHUNK_SIZE = 256
"""Messages per BM25 index chunk (≈ 15 ms to index on one core)."""


@dataclass
class _Chunk:
    start: int
    size: int
    retriever: Any
    vocab: Mapping[str, int]


@dataclass
class ChunkedBM25:
    """BM25 over an append-only list of term lists, indexed in chunks (see module doc).

    Attributes:
        chunk_size: documents per chunk.
        index_builds: how many chunk indexes were built so far (for benchmarks).
    """

    chunk_size: int = CHUNK_SIZE
    index_builds: int = 0
    _chunks: list[_Chunk] = field(default_factory=list)

    def _ensure(self, docs: Sequence[Sequence[str]]) -> None:
        import bm25s

        n = len(docs)
        covered = 0
        if self._chunks:
            last = self._chunks[-1]
            if last.size < self.chunk_size and last.start + last.size < n:
                self._chunks.pop()  # the partial tail grew: rebuild it
            covered = self._chunks[-1].start + self._chunks[-1].size if self._chunks else 0
        while covered < n:
            end = min(covered + self.chunk_size, n)
            corpus = [list(d) or ["\x00"] for d in docs[covered:end]]
            retriever = bm25s.BM25()
            retriever.index(corpus, show_progress=False)
            vocab = getattr(retriever, "vocab_dict", None) or {}
            self._chunks.append(_Chunk(covered, end - covered, retriever, vocab))
            self.index_builds += 1
            covered = end

    def scores(self, docs: Sequence[Sequence[str]], query: Sequence[str]) -> list[float]:
        """BM25 score of every document in ``docs`` for ``query`` (same order as ``docs``).

        ``docs`` must be the same append-only list on every call (earlier entries unchanged).
        """
        self._ensure(docs)
        out: list[float] = [0.0] * len(docs)
        for chunk in self._chunks:
            terms = [t for t in dict.fromkeys(query) if t in chunk.vocab]
            if not terms:
                continue
            values = chunk.retriever.get_scores(terms)
            for k in range(chunk.size):
                out[chunk.start + k] = float(values[k])
        return out


@dataclass(frozen=True)
class PrefilterResult:
    """Outcome of :func:`prefilter_chains`.

    Attributes:
        admitted: chain roots the scorer will see (or whose scores are cached).
        rejected: chain roots left out, with their best BM25 score.
    """

    admitted: list[int]
    rejected: dict[int, float]


def prefilter_chains(
    chains: Mapping[int, Sequence[int]],
    doc_scores: Sequence[float],
    *,
    top_n: int,
    always: Collection[int],
    tokens: Mapping[int, int] | None = None,
    min_tokens: int = 0,
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

    Returns:
        A :class:`PrefilterResult`; ties in BM25 go to the newer chain.
    """
    best = {root: max(doc_scores[i] for i in members) for root, members in chains.items()}
    # every chain consumes the quota in rank order, always-pass ones included, so the
    # admitted set does not slide when more chains become always-pass between builds
    admitted: list[int] = []
    room = top_n
    rejected: dict[int, float] = {}
    held = 0
    for root in sorted(chains, key=lambda r: (-best[r], -max(chains[r]))):
        if room > 0 or root in always or held < min_tokens:
            admitted.append(root)
        else:
            rejected[root] = best[root]
        room -= len(chains[root])
        held += (tokens or {}).get(root, 0)
    return PrefilterResult(admitted=sorted(admitted), rejected=rejected)

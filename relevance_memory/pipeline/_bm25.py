"""The prefilter's BM25 index (SPEC §3 step 3), grown with the append-only store.

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

import numpy as np
import numpy.typing as npt

__all__ = ["CHUNK_SIZE", "QUERY_MEMO", "ChunkedBM25", "PrefilterIndex"]

CHUNK_SIZE = 256
"""Messages per BM25 index chunk (≈ 15 ms to index on one core)."""
QUERY_MEMO = 4
"""Queries whose scores over the full chunks :class:`ChunkedBM25` keeps (the goal's, the recent steps')."""


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
    _query_memo: dict[tuple[str, ...], list[npt.NDArray[np.float64] | None]] = field(default_factory=dict, repr=False)

    def _ensure(self, docs: Sequence[Collection[str]]) -> None:
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
            # a set of every token id, read only by retrieve() with token ids (never called
            # here; get_scores maps strings through vocab_dict): ~130 bytes a message (issue 24)
            retriever.unique_token_ids_set = None
            vocab = getattr(retriever, "vocab_dict", None) or {}
            self._chunks.append(_Chunk(covered, end - covered, retriever, vocab))
            self.index_builds += 1
            covered = end

    def scores(self, docs: Sequence[Collection[str]], query: Sequence[str]) -> list[float]:
        """BM25 score of every document in ``docs`` for ``query`` (same order as ``docs``).

        ``docs`` must be the same append-only list on every call (earlier entries unchanged).
        """
        return self.score_array(docs, query).tolist()  # type: ignore[no-any-return]

    def score_array(self, docs: Sequence[Collection[str]], query: Sequence[str]) -> npt.NDArray[np.float64]:
        """:meth:`scores` as a float64 array (the same values). A full chunk never changes, so
        its scores for a query are kept (the last :data:`QUERY_MEMO` queries): a build asking
        what an earlier one asked scores only the chunks added since (issue 24)."""
        self._ensure(docs)
        out = np.zeros(len(docs), dtype=np.float64)
        terms_of = tuple(dict.fromkeys(query))
        known = self._query_memo.pop(terms_of, None)
        if known is None:
            known = []
        self._query_memo[terms_of] = known  # most recently used last
        while len(self._query_memo) > QUERY_MEMO:
            self._query_memo.pop(next(iter(self._query_memo)))
        for n, chunk in enumerate(self._chunks):
            if n < len(known):
                values = known[n]
            else:
                terms = [t for t in terms_of if t in chunk.vocab]
                values = chunk.retriever.get_scores(terms).astype(np.float64) if terms else None
                if chunk.size == self.chunk_size and n == len(known):
                    known.append(values)  # a full chunk: indexed once, scored once per query
            if values is not None:
                out[chunk.start:chunk.start + chunk.size] = values[:chunk.size]
        return out


@dataclass
class PrefilterIndex:
    """The BM25 index over the store's terms, grown as the store grows (a seam: one per memory).
    The store's own term rows are its documents (no copy: a chunk reads its rows once, when it
    is indexed).

    Attributes:
        bm25: the chunked index.
    """

    bm25: ChunkedBM25 = field(default_factory=ChunkedBM25)

    def scores(self, terms: Sequence[frozenset[str]], query: Sequence[str]) -> list[float]:
        """BM25 score of every message for ``query``; ``terms`` is the store's per-message terms
        (the same append-only sequence, or a snapshot of it, on every call)."""
        return self.score_array(terms, query).tolist()  # type: ignore[no-any-return]

    def score_array(self, terms: Sequence[frozenset[str]], query: Sequence[str]) -> npt.NDArray[np.float64]:
        """:meth:`scores` as a float64 array (:meth:`ChunkedBM25.score_array`)."""
        return self.bm25.score_array(terms, query)

"""The prefilter's BM25 index (SPEC §3 step 3), grown with the append-only store.

Indexing cost: re-indexing 100k documents takes seconds, so the index is built in fixed
chunks of messages (store order). A full chunk is indexed once and never again (messages
are immutable); only the newest partial chunk is re-indexed, and only when it grew. Scores
are BM25 within a chunk (per-chunk IDF), good enough for a prefilter. Terms are the store's
lexical terms (words + CJK bigrams): each document is a *set* of terms.

The formula is ``bm25s``'s default (Lucene BM25, ``k1 = 1.5``, ``b = 0.75``; Kamphuis et
al., ECIR 2020, the variant ``bm25s.BM25()`` indexes with), computed here with whole-chunk
array operations: a document's terms are a set, so every term frequency is 1 and a chunk is
indexed without a Python pass per document (``bm25s`` 0.3 counts each document's terms
with a ``Counter`` and scores them one document at a time: ~17 µs a message, ~17 s of a
million-message first build; issue 24). The floats are ``bm25s``'s, bit for bit (a test
compares every score with ``bm25s.BM25`` on real and generated chunks):

- ``idf(t) = ln(1 + (N − df + 0.5) / (df + 0.5))`` in double precision, stored as float32;
- ``tfc(d) = 1 / (k1·((1 − b) + b·|d| / avgdl) + 1)`` in double precision, ``avgdl`` the
  mean document length of the chunk;
- a posting's weight ``float32(idf(t) · tfc(d))``; a query's score of a document the float32
  sum of its terms' weights in query order (an empty document indexes one placeholder term).

The store's term rows are read as the vocabulary numbers the store already keeps
(:class:`CodedRows`): a chunk is indexed from one array of them, with no string, set or
dict lookup per posting (issue 24: making each row's ``frozenset`` and looking its terms up
again was most of the prefilter's 19 % of a first build at 200,000 messages; 8 % after, py-spy). Any other sequence of term sets is
numbered by the index's own vocabulary; the scores are the same bits either way.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from ..scoring._semantic import grown_rank_order, rank_order

__all__ = ["BLOCK_CHUNKS", "CHUNK_SIZE", "K1", "QUERY_MEMO", "B", "ChunkedBM25", "CodedRows", "PrefilterIndex"]

CHUNK_SIZE = 256
"""Messages per BM25 index chunk."""
BLOCK_CHUNKS = 64
"""Full chunks merged into one block for scoring (their postings, weights unchanged): a query
scans ~n / 16,384 blocks instead of n / 256 chunks (3,907 NumPy calls at a million messages)."""
QUERY_MEMO = 4
"""Queries whose scores over the full chunks :class:`ChunkedBM25` keeps (the goal's, the recent steps')."""
K1 = 1.5
"""BM25's term-frequency saturation (``bm25s.BM25``'s default)."""
B = 0.75
"""BM25's document-length normalisation (``bm25s.BM25``'s default)."""

_idf_tables: dict[int, npt.NDArray[np.float32]] = {}


def _idf_table(n: int) -> npt.NDArray[np.float32]:
    """``idf`` of a term in ``df`` of ``n`` documents, for ``df`` = 0..n (float32; index 0
    unused): ``math.log`` per value, as ``bm25s`` computes it (not ``np.log``, whose last
    bit may differ)."""
    table = _idf_tables.get(n)
    if table is None:
        table = _idf_tables[n] = np.array(
            [0.0, *(math.log(1 + (n - df + 0.5) / (df + 0.5)) for df in range(1, n + 1))], dtype=np.float32)
    return table


@runtime_checkable
class CodedRows(Protocol):
    """Term sets kept as vocabulary numbers (the store's
    :class:`~relevance_memory.store._validate.StringRows`, or a snapshot's view of them): what
    :class:`ChunkedBM25` indexes without reading each row as strings."""

    def coded(self, start: int, stop: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """Rows ``start`` to ``stop``: their numbers end to end, and how many each row has
        (a row holds each of its terms once)."""
        ...

    def code(self, text: str) -> int | None:
        """The number of the term ``text``, or ``None`` when no row holds it."""
        ...

    def code_space(self) -> object:
        """The object that numbers the terms (the same one for every view of the same rows)."""
        ...


@dataclass
class _Chunk:
    """One chunk's index: its terms (ids in the index's vocabulary, ascending; int32) and per
    term ``terms[j]`` its postings ``indptr[j]:indptr[j+1]`` of ``docs`` (offsets in the chunk),
    and each document's length factor ``tfc`` (float64). No per-chunk dict: ~8 bytes a (chunk,
    term), not a dict entry.

    A posting's weight ``float32(idf(t) · tfc(d))`` is not kept: it is made again for the
    postings of a query's terms as they are scored, from the term's document frequency in its
    chunk — the length of its run of postings in that chunk — and the document's ``tfc``; the
    same bits as the weight the chunk was indexed with (issue 24: 4 bytes a posting, ~20
    postings a message of unique text). A block of merged chunks (:func:`_merge`) holds
    ``size / part`` chunks of ``part`` documents each: a posting's chunk is its document's offset
    divided by ``part``, its ``N`` is ``part``."""

    start: int
    size: int
    terms: npt.NDArray[np.int32]
    indptr: npt.NDArray[np.int32]
    docs: npt.NDArray[np.int16] | npt.NDArray[np.int32]
    tfc: npt.NDArray[np.float64]
    part: int  # documents of each chunk merged into this one (a chunk's own size)

    def weights(self, lo: npt.NDArray[np.int32], counts: npt.NDArray[np.int32]) -> tuple[Any, Any]:
        """The postings ``lo[k]:lo[k] + counts[k]`` of each ``k`` end to end: ``(their documents,
        their weights)`` (float32: the module doc's ``float32(idf(t) · tfc(d))``, ``idf`` of the
        term's document frequency in the posting's chunk of ``part`` documents)."""
        total = int(counts.sum())
        ends = np.cumsum(counts)
        # each gathered posting's index: its term's first posting, plus its place in the run
        at = np.arange(total, dtype=np.int64) - np.repeat(ends - counts - lo, counts)
        docs = self.docs[at]
        if self.part >= self.size:  # one chunk: a term's postings are its document frequency
            df = np.repeat(counts, counts)
        else:  # a block: a term's postings in each of its chunks (in chunk order, as merged)
            run = np.repeat(np.arange(len(counts), dtype=np.int64), counts) * (self.size // self.part + 1) \
                + docs // self.part
            first = np.ones(total, dtype=bool)
            np.not_equal(run[1:], run[:-1], out=first[1:])
            starts = np.flatnonzero(first)
            lengths = np.diff(np.append(starts, total))
            df = np.repeat(lengths, lengths)
        return docs, (_idf_table(self.part)[df].astype(np.float64) * self.tfc[docs]).astype(np.float32)

    def scores(self, query: npt.NDArray[np.int32]) -> npt.NDArray[np.float32] | None:
        """The chunk's documents' scores for the term ids ``query`` (float32, summed in query
        order), or ``None`` when the chunk has none of them."""
        terms = self.terms
        at = np.searchsorted(terms, query)
        found = at < len(terms)
        found[found] = terms[at[found]] == query[found]
        if not found.any():
            return None
        js = at[found]
        lo = self.indptr[js]
        counts = self.indptr[js + 1] - lo
        docs, weights = self.weights(lo, counts)
        out = np.zeros(self.size, dtype=np.float32)
        end = 0
        for count in counts.tolist():
            begin, end = end, end + count
            out[docs[begin:end]] += weights[begin:end]  # a document once per term: no repeated index
        return out


def _index(start: int, docs: Sequence[Collection[str]], vocab: dict[str, int]) -> _Chunk:
    """A chunk's index over ``docs`` (module doc's formula; a term repeated in a document counts
    once), its terms added to ``vocab`` (term → id, shared by the chunks): the documents numbered
    by ``vocab`` (one dict lookup per posting), then :func:`_index_coded`."""
    add = vocab.setdefault
    rows = [d if isinstance(d, (frozenset, set)) else dict.fromkeys(d) for d in docs]
    ids = np.fromiter((add(t, len(vocab)) for row in rows for t in row), dtype=np.int64)
    return _index_coded(start, ids, np.fromiter(map(len, rows), dtype=np.int64, count=len(rows)))


def _index_coded(start: int, codes: npt.NDArray[np.int64], lengths: npt.NDArray[np.int64]) -> _Chunk:
    """A chunk's index over rows given as term numbers (:meth:`CodedRows.coded`: each row's
    numbers end to end, and how many each row has; the module doc's formula, an empty row
    counting one placeholder term that no query asks for, so it has no posting). O(postings)
    array operations, no Python pass per posting."""
    n = len(lengths)
    # one stable sort: the postings by term, each term's in document order (as _index's)
    order = np.argsort(codes, kind="stable")
    ordered = codes[order]
    first = np.ones(len(ordered), dtype=bool)  # a term's first posting
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    starts = np.flatnonzero(first)
    indptr = np.empty(len(starts) + 1, dtype=np.int32)
    indptr[:-1], indptr[-1] = starts, len(ordered)
    counted = np.maximum(lengths, 1)  # an empty document's placeholder term
    mean = counted.mean()
    tfc = 1.0 / (K1 * ((1 - B) + B * counted / mean) + 1.0)
    doc_of = np.repeat(np.arange(n, dtype=np.int16 if n <= 2**15 else np.int32), lengths)[order]
    return _Chunk(start, n, ordered[first].astype(np.int32), indptr, doc_of, tfc, n)


def _merge(chunks: Sequence[_Chunk]) -> _Chunk:
    """One block of consecutive ``chunks`` of the same size: their postings under one term list,
    each term's in chunk order, each document's ``tfc`` unchanged, so a block weighs every
    posting as its chunk did (:meth:`_Chunk.weights`) and scores every document as its chunk
    did, bit for bit (a document's sum adds the same float32 weights in query order).
    O(postings) array operations, once per block."""
    start = chunks[0].start
    size = sum(c.size for c in chunks)
    term_col = np.concatenate([np.repeat(c.terms, np.diff(c.indptr)) for c in chunks])
    doc_type = np.int16 if size <= 2**15 else np.int32
    docs = np.concatenate([c.docs.astype(doc_type) + doc_type(c.start - start) for c in chunks])
    tfc = np.concatenate([c.tfc for c in chunks])
    order = np.argsort(term_col, kind="stable")
    terms, per_term = np.unique(term_col, return_counts=True)
    indptr = np.zeros(len(terms) + 1, dtype=np.int32)
    np.cumsum(per_term, out=indptr[1:])
    return _Chunk(start, size, terms.astype(np.int32), indptr, docs[order], tfc, chunks[0].part)


@dataclass
class ChunkedBM25:
    """BM25 over an append-only list of term lists, indexed in chunks (see module doc).

    Attributes:
        chunk_size: documents per chunk.
        block_chunks: full chunks merged into one block (:data:`BLOCK_CHUNKS`; the scores do
            not depend on it).
        index_builds: how many chunk indexes were built so far (for benchmarks).
    """

    chunk_size: int = CHUNK_SIZE
    block_chunks: int = BLOCK_CHUNKS
    index_builds: int = 0
    _chunks: list[_Chunk] = field(default_factory=list)  # blocks first, then the chunks not merged yet
    _blocks: int = 0
    _vocab: dict[str, int] = field(default_factory=dict, repr=False)  # every indexed term → its id
    # what numbers the indexed terms: the documents' own CodedRows.code_space(), or None (_vocab)
    _space: object = field(default=None, repr=False)
    # query terms → (documents whose scores are kept: the full chunks' and blocks', the scores)
    # (float32: every score is a chunk's float32 sum, so float64 -> float32 -> float64 is exact;
    # issue 24: 4 bytes a message a kept query)
    _query_memo: dict[tuple[str, ...], tuple[int, npt.NDArray[np.float32]]] = field(default_factory=dict, repr=False)

    def _ensure(self, docs: Sequence[Collection[str]]) -> None:
        n = len(docs)
        coded = docs if isinstance(docs, CodedRows) else None
        space = coded.code_space() if coded is not None else None
        if space is not self._space:  # other documents, numbered otherwise: index them afresh
            self._chunks, self._blocks, self._vocab, self._query_memo = [], 0, {}, {}
            self._space = space
        covered = 0
        if self._chunks:
            last = self._chunks[-1]
            if last.size < self.chunk_size and last.start + last.size < n:
                self._chunks.pop()  # the partial tail grew: rebuild it
            covered = self._chunks[-1].start + self._chunks[-1].size if self._chunks else 0
        while covered < n:
            end = min(covered + self.chunk_size, n)
            self._chunks.append(_index_coded(covered, *coded.coded(covered, end)) if coded is not None
                                else _index(covered, docs[covered:end], self._vocab))
            self.index_builds += 1
            covered = end
        chunks, blocks, size = self._chunks, self._blocks, self.chunk_size
        while self.block_chunks > 1 and len(chunks) - blocks >= self.block_chunks \
                and chunks[blocks + self.block_chunks - 1].size == size:
            chunks[blocks:blocks + self.block_chunks] = [_merge(chunks[blocks:blocks + self.block_chunks])]
            blocks += 1
        self._blocks = blocks

    def scores(self, docs: Sequence[Collection[str]], query: Sequence[str]) -> list[float]:
        """BM25 score of every document in ``docs`` for ``query`` (same order as ``docs``).

        ``docs`` must be the same append-only list on every call (earlier entries unchanged).
        """
        return self.score_array(docs, query).tolist()  # type: ignore[no-any-return]

    def score_array(self, docs: Sequence[Collection[str]], query: Sequence[str]) -> npt.NDArray[np.float64]:
        """:meth:`scores` as a float64 array (the same values). A full chunk never changes, so
        the scores of the documents in full chunks are kept for a query (the last
        :data:`QUERY_MEMO` queries): a build asking what an earlier one asked scores only the
        chunks added since (issue 24); a new query scans the blocks, then the chunks not
        merged into one yet."""
        self._ensure(docs)
        out = np.zeros(len(docs), dtype=np.float64)
        terms_of = tuple(dict.fromkeys(query))
        kept, known = self._query_memo.pop(terms_of, (0, np.zeros(0, dtype=np.float32)))
        kept = min(kept, len(docs))
        out[:kept] = known[:kept]
        if self._space is not None:  # the documents' own numbers (a term no row holds has none)
            code = docs.code  # type: ignore[attr-defined]
            ids = np.array([c for c in map(code, terms_of) if c is not None], dtype=np.int32)
        else:
            vocab = self._vocab
            ids = np.array([vocab[t] for t in terms_of if t in vocab], dtype=np.int32)
        full = 0  # the end of the leading full chunks and blocks (all scored by the loop's end)
        for chunk in self._chunks:
            end = chunk.start + chunk.size
            if end > kept:
                found = chunk.scores(ids) if len(ids) else None
                if found is not None:
                    out[chunk.start:end] = found  # float32 to float64: exact
            if chunk.start == full and chunk.size >= self.chunk_size:
                full = end
        self._query_memo[terms_of] = (full, known if full == kept else out[:full].astype(np.float32))  # most recently used last
        while len(self._query_memo) > QUERY_MEMO:
            self._query_memo.pop(next(iter(self._query_memo)))
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
    _instructions: list[int] = field(default_factory=list, repr=False)  # user instructions' indices
    # goal texts → (the vector index they were read from, the messages read, their best cosines)
    _cosines: dict[tuple[str, ...], tuple[Any, int, npt.NDArray[np.float64]]] = field(default_factory=dict, repr=False)
    # goal texts → (the vector index, the rank order of a prefix of their cosines)
    _orders: dict[tuple[str, ...], tuple[Any, npt.NDArray[np.int64]]] = field(default_factory=dict, repr=False)

    def goal_cosines(self, vectors: Any, texts: Sequence[str], messages: Sequence[Any]) -> npt.NDArray[np.float64]:
        """Each of ``messages``' best cosine to ``texts`` (``vectors.similarity`` of each text's
        query vector, the larger per message; exact: the same bits however many are scored at
        once, :func:`~relevance_memory.scoring._embedding.cosine_scores`), kept per goal and
        grown by the messages added since the last call with those texts (O(new)); a read-only
        float64 array. ``messages`` is the same append-only list on every call; ``vectors`` a
        :class:`~relevance_memory.scoring._embedding.VectorIndex` holding every message's
        content hash (``KeyError`` otherwise)."""
        n, key = len(messages), tuple(texts)
        held = self._cosines.pop(key, None)
        if held is None or held[0] is not vectors or held[1] > n:
            held = (vectors, 0, np.zeros(0, dtype=np.float64))
        _, read, best = held
        if read < n:
            keys = [m.content_hash for m in messages[read:n]]
            new: npt.NDArray[np.float64] | None = None
            for text in texts:
                cos = vectors.similarity(vectors.embed_query(text), keys)
                new = cos if new is None else np.maximum(new, cos)
            assert new is not None
            best = np.concatenate([best, np.asarray(new, dtype=np.float64)])
            best.flags.writeable = False
        self._cosines[key] = (vectors, n, best)  # most recently used last
        while len(self._cosines) > 2:  # the goal's texts, and the ones before a subtask changed
            self._orders.pop(next(iter(self._cosines)), None)
            self._cosines.pop(next(iter(self._cosines)))
        return best

    def cosine_order(self, cosines: npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
        """The rank order of ``cosines`` (:func:`~relevance_memory.scoring._semantic.rank_order`),
        grown from the order kept for the same goal texts (their cosines only grow by the messages
        stored since: :func:`~relevance_memory.scoring._semantic.grown_rank_order`) when
        ``cosines`` is what :meth:`goal_cosines` last gave for them; else ordered afresh."""
        key = next((k for k, held in self._cosines.items() if held[2] is cosines), None)
        if key is None:
            return rank_order(cosines)
        vectors = self._cosines[key][0]
        kept = self._orders.get(key)
        order = (grown_rank_order(kept[1], cosines) if kept is not None and kept[0] is vectors and len(kept[1]) <= len(cosines)
                 else rank_order(cosines))
        self._orders[key] = (vectors, order)
        return order
    _read: int = 0  # how many messages _instructions has read
    layout: object = field(default=None, repr=False)
    """The prefilter's :class:`~relevance_memory.pipeline.prefilter.ChainLayout` of the last
    build's candidates (its own type; kept here, once per memory)."""

    def user_instructions(self, messages: Sequence[Any]) -> list[int]:
        """Indices of the ``user_instruction`` messages among ``messages`` (the store's, or a
        snapshot's: the same append-only list on every call), ascending; grown by the messages
        added since the last call (O(new)), read again from the start for a shorter list."""
        n = len(messages)
        if n < self._read:
            self._instructions, self._read = [], 0
        found = self._instructions
        found.extend(m.index for m in messages[self._read:n] if m.msg_type == "user_instruction")
        self._read = n
        return found

    def scores(self, terms: Sequence[frozenset[str]], query: Sequence[str]) -> list[float]:
        """BM25 score of every message for ``query``; ``terms`` is the store's per-message terms
        (the same append-only sequence, or a snapshot of it, on every call)."""
        return self.score_array(terms, query).tolist()  # type: ignore[no-any-return]

    def score_array(self, terms: Sequence[frozenset[str]], query: Sequence[str]) -> npt.NDArray[np.float64]:
        """:meth:`scores` as a float64 array (:meth:`ChunkedBM25.score_array`)."""
        return self.bm25.score_array(terms, query)

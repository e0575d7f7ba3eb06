"""Cost of the prefilter's BM25 index: full re-index vs the chunked index (issue 4).

Synthetic corpus of N documents (50 terms each from a 20k-word Zipf-ish vocabulary).
Measures (seconds): one full ``bm25s`` index of N docs; the chunked index built from
scratch; then, per simulated build, appending 2 messages and querying (only the tail
chunk is re-indexed).

    PYTHONPATH=. python benchmarks/prefilter_index.py [N]
"""

from __future__ import annotations

import random
import sys
import time

import bm25s

from relevance_memory.pipeline.prefilter import ChunkedBM25


def main(n: int = 100_000) -> None:
    rng = random.Random(7)
    vocab = [f"w{i}" for i in range(20_000)]
    weights = [1 / (i + 1) for i in range(len(vocab))]
    docs = [rng.choices(vocab, weights, k=50) for _ in range(n + 200)]
    query = rng.choices(vocab, weights, k=40)

    start = time.perf_counter()
    retriever = bm25s.BM25()
    retriever.index(docs[:n], show_progress=False)
    retriever.get_scores([t for t in dict.fromkeys(query) if t in retriever.vocab_dict])
    full = time.perf_counter() - start

    chunked = ChunkedBM25()
    start = time.perf_counter()
    chunked.scores(docs[:n], query)
    first = time.perf_counter() - start

    growing = docs[:n]
    start = time.perf_counter()
    builds = 50
    for k in range(builds):
        growing.append(docs[n + 2 * k])
        growing.append(docs[n + 2 * k + 1])
        chunked.scores(growing, query)
    per_build = (time.perf_counter() - start) / builds
    print(f"N={n} full_reindex_s={full:.2f} chunked_first_s={first:.2f} "
          f"chunked_per_build_s={per_build:.3f} (append 2 + query; chunk={chunked.chunk_size})")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000)

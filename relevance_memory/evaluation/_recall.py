"""Evidence recall at a token budget: our manager against recency, BM25 and full history.

For each question the history is the conversation before it (LoCoMo asks every question
after the whole conversation; a LongMemEval haystack is the history), the final goal and
the subtask are the question, and a context is built at each budget. A *hit* means every
evidence turn is in the context: ``hit`` counts verbatim turns only, ``hit_any`` also
counts turns cited in a summary's ``covered_ids``.

Each conversation is ingested once; each question only re-scores (a new goal) and builds.
Every method counts tokens with the same tokenizer and the same per-message framing
(:meth:`TokenCounter.count_message` plus reply priming), so the budgets are comparable.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from .._exceptions import RelevanceMemoryError
from .._manager import RelevanceMemoryManager
from .._tokenizer import REPLY_PRIMING_TOKENS
from ..scoring._scorer import Scorer
from ._datasets import EvalConversation, EvalDataset, EvalQuestion

__all__ = [
    "BASELINES",
    "SEMANTIC_BASELINES",
    "QuestionResult",
    "RecallRun",
    "bm25_select",
    "evidence_hit",
    "recency_select",
    "results_as_dicts",
    "rrf_scores",
    "run_conversation",
    "run_recall",
    "summarise_results",
]

BASELINES = ("recency", "bm25", "full")
"""Baseline methods measured next to the manager (``full`` reports tokens only)."""
SEMANTIC_BASELINES = ("embedding", "bm25+embedding")
"""Optional baselines (issue 11): turns ranked by cosine to the question with the default
embedder, and reciprocal-rank fusion (k = 60) of that ranking with BM25's."""


@dataclass(frozen=True)
class QuestionResult:
    """One (question, method, budget) measurement.

    Attributes:
        question_id, category: the question.
        method: ``recency``, ``bm25``, ``full``, or the manager's label (``offline``, ``llm``).
        budget: token budget (tokens); 0 for ``full``.
        hit: every evidence turn is in the context verbatim.
        hit_any: every evidence turn is verbatim or cited in a summary's covered ids.
        found: share of evidence turns in the context verbatim (0..1).
        tokens: tokens of the context, including reply priming (tokens).
        error: the build's error message, when it failed (counted as a miss).
    """

    question_id: str
    category: str
    method: str
    budget: int
    hit: bool
    hit_any: bool
    found: float
    tokens: int
    error: str = ""


def evidence_hit(evidence: Sequence[str], verbatim: set[str], covered: set[str]) -> tuple[bool, bool, float]:
    """``(hit, hit_any, found)`` for one context: all evidence verbatim; all evidence
    verbatim or in a summary; share verbatim (0..1). Empty evidence → ``(False, False, 0)``."""
    if not evidence:
        return False, False, 0.0
    inside = sum(1 for e in evidence if e in verbatim)
    return inside == len(evidence), all(e in verbatim or e in covered for e in evidence), inside / len(evidence)


def recency_select(tokens: Sequence[int], budget: int) -> tuple[list[int], int]:
    """The newest messages that fit ``budget`` together (stops at the first that does not).

    Args:
        tokens: per-message token counts, oldest first (tokens).
        budget: token budget including reply priming (tokens).

    Returns:
        (indices in time order, tokens used including priming).
    """
    used = REPLY_PRIMING_TOKENS
    chosen: list[int] = []
    for i in range(len(tokens) - 1, -1, -1):
        if used + tokens[i] > budget:
            break
        used += tokens[i]
        chosen.append(i)
    return sorted(chosen), used


def rrf_scores(lexical: Sequence[float], semantic: Sequence[float], k: int = 60) -> list[float]:
    """Reciprocal-rank fusion of two score lists (:func:`relevance_memory.scoring._semantic.rrf_fuse`)."""
    from ..scoring._semantic import rrf_fuse

    return rrf_fuse(lexical, semantic, k)


def bm25_select(scores: Sequence[float], tokens: Sequence[int], budget: int) -> tuple[list[int], int]:
    """Messages by descending BM25 score (ties: newer first) while they fit; a message
    that does not fit is skipped and smaller ones may follow. Zero-score messages are not
    taken. Returns (indices in time order, tokens used including priming)."""
    used = REPLY_PRIMING_TOKENS
    chosen: list[int] = []
    for i in sorted(range(len(scores)), key=lambda j: (-scores[j], -j)):
        if scores[i] <= 0:
            break
        if used + tokens[i] <= budget:
            used += tokens[i]
            chosen.append(i)
    return sorted(chosen), used


@dataclass
class RecallRun:
    """Settings of one recall run (picklable, so conversations can run in worker processes).

    Attributes:
        budgets: token budgets (tokens).
        methods: any of ``recency``, ``bm25``, ``full``, ``manager``, ``embedding`` and
            ``bm25+embedding`` (:data:`SEMANTIC_BASELINES`).
        keep_recent: the manager's working memory in steps (QA default 0: the newest
            turn only, which is always kept).
        goal_block: whether the manager adds its goal block (costs tokens; the baselines
            have none, so the default is off for a like-for-like budget).
        encoding: tiktoken encoding for every method.
        scorer: the manager's scorer (``None`` = offline).
        label: name of the manager's method in the results.
        embedder: the embedding model (``MemoryConfig.embedder``) of the manager and of
            the ``embedding`` / ``bm25+embedding`` baselines.
    """

    budgets: tuple[int, ...]
    methods: tuple[str, ...] = ("recency", "bm25", "full", "manager")
    keep_recent: int = 0
    goal_block: bool = False
    encoding: str = "cl100k_base"
    scorer: Scorer | None = None
    label: str = "offline"
    manager_overrides: dict[str, Any] = field(default_factory=dict)
    embedder: str = "wordllama"


def run_conversation(conv: EvalConversation, run: RecallRun) -> list[QuestionResult]:
    """Measure every evaluable question of one conversation (see module docstring)."""
    import bm25s  # local: only the evaluation needs it at import time

    manager = RelevanceMemoryManager(
        encoding=run.encoding, keep_recent=run.keep_recent, goal_block=run.goal_block,
        scorer=run.scorer, **{"embedder": run.embedder, **run.manager_overrides},
    )
    for turn in conv.turns:
        manager.add({"role": turn.role, "content": turn.text}, id=turn.id, timestamp=turn.timestamp,
                    msg_type=turn.message_type)
    store = manager.store
    tokens = [m.token_count for m in store.messages]
    ids = [m.id for m in store.messages]
    full_tokens = REPLY_PRIMING_TOKENS + sum(tokens)
    retriever = None
    vectors = None
    if "embedding" in run.methods or "bm25+embedding" in run.methods:
        from ..scoring._embedding import load_embedder, quantize

        embedder = load_embedder(run.embedder)
        if embedder is None:
            raise RelevanceMemoryError("the embedding baselines need the default embedder (pip install wordllama)")
        index = store.message_vectors()  # the manager embedded every turn on ingest: not twice
        if index is not None and index.version == embedder.version:
            rows = index.rows([m.content_hash for m in store.messages])
        else:
            rows = quantize(embedder.embed([t.text for t in conv.turns]))
        vectors = (embedder, rows)
    if "bm25" in run.methods or "bm25+embedding" in run.methods:
        corpus = bm25s.tokenize([t.text for t in conv.turns], stopwords="en", return_ids=False, show_progress=False)
        retriever = bm25s.BM25()
        retriever.index(corpus, show_progress=False)
    out: list[QuestionResult] = []
    for q in conv.questions:
        if not q.evaluable:
            continue
        out.extend(_measure(q, run, manager, retriever, tokens, ids, full_tokens, vectors))
    return out


def _measure(
    q: EvalQuestion, run: RecallRun, manager: RelevanceMemoryManager, retriever: Any,
    tokens: list[int], ids: list[str], full_tokens: int, vectors: Any = None,
) -> list[QuestionResult]:
    import bm25s

    out: list[QuestionResult] = []

    def add(method: str, budget: int, chosen: Sequence[int] | set[str], used: int,
            covered: set[str] | None = None, error: str = "") -> None:
        verbatim = chosen if isinstance(chosen, set) else {ids[i] for i in chosen}
        hit, hit_any, found = evidence_hit(q.evidence, verbatim, covered or set())
        out.append(QuestionResult(q.id, q.category, method, budget, hit, hit_any, found, used, error))

    if "full" in run.methods:
        add("full", 0, list(range(len(ids))), full_tokens)
    bm25_scores: list[float] | None = None
    if retriever is not None:
        query = bm25s.tokenize(q.question, stopwords="en", return_ids=False, show_progress=False)[0]
        bm25_scores = [float(s) for s in retriever.get_scores(query)] if query else [0.0] * len(ids)
    emb_scores: list[float] | None = None
    fused_scores: list[float] | None = None
    if vectors is not None:
        from ..scoring._embedding import cosine_scores, quantize

        embedder, rows = vectors
        cos = cosine_scores(quantize(embedder.embed([q.question]))[0], rows)
        emb_scores = [float(c) + 2.0 for c in cos]  # > 0: bm25_select never takes a score ≤ 0
        if bm25_scores is not None:
            fused_scores = rrf_scores(bm25_scores, [float(c) for c in cos])
    if "manager" in run.methods:
        manager.set_goal(final=q.question, subtask=q.question)
    for budget in run.budgets:
        if "recency" in run.methods:
            add("recency", budget, *recency_select(tokens, budget))
        if bm25_scores is not None and "bm25" in run.methods:
            add("bm25", budget, *bm25_select(bm25_scores, tokens, budget))
        if emb_scores is not None and "embedding" in run.methods:
            add("embedding", budget, *bm25_select(emb_scores, tokens, budget))
        if fused_scores is not None and "bm25+embedding" in run.methods:
            add("bm25+embedding", budget, *bm25_select(fused_scores, tokens, budget))
        if "manager" in run.methods:
            try:
                built = manager.build_context(budget=budget)
            except RelevanceMemoryError as exc:
                add(run.label, budget, set(), 0, error=str(exc))
                continue
            rec = built.record
            verbatim = {d.id for d in rec.messages if d.decision in ("kept", "recent")}
            covered = {cid for s in rec.summaries if s.level > 0 for cid in s.covered_ids}  # a pointer is no summary
            add(run.label, budget, verbatim, rec.tokens_after, covered)
    return out


def run_recall(
    dataset: EvalDataset,
    run: RecallRun,
    *,
    jobs: int = 1,
    progress: Callable[[int], None] | None = None,
) -> list[QuestionResult]:
    """Run :func:`run_conversation` over every conversation.

    Args:
        dataset: loaded questions (already filtered with ``select_questions``).
        run: settings.
        jobs: worker processes (1 = in this process; the offline scorer is CPU-bound).
        progress: called with the number of questions just finished.

    Returns:
        One :class:`QuestionResult` per (evaluable question, method, budget).
    """
    results: list[QuestionResult] = []
    convs = dataset.conversations
    if jobs <= 1 or len(convs) <= 1:
        for conv in convs:
            results.extend(run_conversation(conv, run))
            if progress:
                progress(len(conv.questions))
        return results
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = [(conv, pool.submit(run_conversation, conv, run)) for conv in convs]
        for conv, fut in futures:
            results.extend(fut.result())
            if progress:
                progress(len(conv.questions))
    return results


def summarise_results(results: Sequence[QuestionResult]) -> dict[str, Any]:
    """Aggregate results: recall (``hit``), recall with summaries (``hit_any``), mean
    evidence share and mean tokens per (method, budget), overall and per category.

    Returns:
        ``{"overall": {method: {budget: stats}}, "by_category": {category: {method:
        {budget: stats}}}}`` with ``stats = {n, recall, recall_any, found, tokens}``;
        budgets are strings (JSON keys).
    """
    def stats(rows: list[QuestionResult]) -> dict[str, float]:
        n = len(rows)
        return {
            "n": n,
            "recall": sum(r.hit for r in rows) / n if n else math.nan,
            "recall_any": sum(r.hit_any for r in rows) / n if n else math.nan,
            "found": sum(r.found for r in rows) / n if n else math.nan,
            "tokens": sum(r.tokens for r in rows) / n if n else math.nan,
        }

    groups: dict[tuple[str, str, int], list[QuestionResult]] = {}
    for r in results:
        groups.setdefault(("*", r.method, r.budget), []).append(r)
        groups.setdefault((r.category, r.method, r.budget), []).append(r)
    overall: dict[str, dict[str, dict[str, float]]] = {}
    by_category: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
    for (cat, method, budget), rows in sorted(groups.items()):
        target = overall if cat == "*" else by_category.setdefault(cat, {})
        target.setdefault(method, {})[str(budget)] = stats(rows)
    return {"overall": overall, "by_category": by_category}


def results_as_dicts(results: Sequence[QuestionResult]) -> list[dict[str, Any]]:
    """Plain dicts of ``results`` (for JSON)."""
    return [asdict(r) for r in results]


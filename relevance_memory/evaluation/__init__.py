"""Evaluation: evidence recall at a token budget and rubric iteration (issue 5).

Loaders for LoCoMo and LongMemEval (data not shipped; pass your copy's path), the recall
runner with its recency / BM25 / full-history baselines, reports (rich table, JSON, PNG),
and the labelled-set tooling behind ``relmem rubric``.
"""

from ._datasets import (
    LOCOMO_CATEGORIES,
    EvalConversation,
    EvalDataset,
    EvalQuestion,
    EvalTurn,
    load_dataset,
    load_locomo,
    load_longmemeval,
    repair_locomo_evidence,
    select_questions,
)
from ._recall import (
    BASELINES,
    QuestionResult,
    RecallRun,
    bm25_select,
    evidence_hit,
    recency_select,
    results_as_dicts,
    run_conversation,
    run_recall,
    summarise_results,
)
from ._report import plot_recall, recall_table, write_json
from ._rubric import (
    LabelledExample,
    LabelledMessage,
    LabelledSet,
    RubricReport,
    ScoreMetrics,
    auroc,
    build_labelled_set,
    evaluate_rubric,
    make_scorer,
)

__all__ = [
    "BASELINES",
    "LOCOMO_CATEGORIES",
    "EvalConversation",
    "EvalDataset",
    "EvalQuestion",
    "EvalTurn",
    "LabelledExample",
    "LabelledMessage",
    "LabelledSet",
    "QuestionResult",
    "RecallRun",
    "RubricReport",
    "ScoreMetrics",
    "auroc",
    "bm25_select",
    "build_labelled_set",
    "evaluate_rubric",
    "evidence_hit",
    "load_dataset",
    "load_locomo",
    "load_longmemeval",
    "make_scorer",
    "plot_recall",
    "recall_table",
    "recency_select",
    "repair_locomo_evidence",
    "results_as_dicts",
    "run_conversation",
    "run_recall",
    "select_questions",
    "summarise_results",
    "write_json",
]

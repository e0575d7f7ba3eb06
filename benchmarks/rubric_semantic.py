"""Rubric metrics of the lexical and the semantic offline scorers on a labelled set (issue 11).

AUROC of the 1–5 score (relevant = gold ≥ 4) and precision / recall of score ≥ 4, per scorer
variant, on a set built by ``relmem rubric build`` (LoCoMo: every evidence turn gold 5, eight
other turns gold 1 per question; 1,982 questions, 18,676 turns).

    relmem rubric build locomo ../shared/data/locomo/locomo10.json --out /tmp/locomo_labelled.json
    PYTHONPATH=. python benchmarks/rubric_semantic.py /tmp/locomo_labelled.json [--variants lexical,score,...]
    PYTHONPATH=benchmarks:. python benchmarks/rubric_semantic.py /tmp/locomo_labelled_v3.json --variants default --embedder minilm

Each example is scored on its own (about ten messages), so cosine ranks are taken among
those messages, as IDF is.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from ablation_semantic import VARIANTS  # type: ignore[import-not-found]

from relevance_memory.evaluation import LabelledSet, evaluate_rubric
from relevance_memory.scoring._embedding import load_embedder
from relevance_memory.scoring._scorer import OfflineScorer
from relevance_memory.scoring._semantic import SemanticScorer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("labelled", type=Path)
    parser.add_argument("--variants", default="lexical,default,score_5pct,score_cap5,graded,lift,rrf,weighted")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--embedder", default="wordllama", help="wordllama (default) or minilm (the [minilm] extra)")
    args = parser.parse_args()
    embedder = load_embedder(args.embedder)
    labelled = LabelledSet.load(args.labelled)
    rows = []
    print("| variant | AUROC | precision of ≥ 4 | recall of ≥ 4 | histogram relevant 1..5 | histogram other 1..5 | s |")
    print("|---|---|---|---|---|---|---|")
    for name in args.variants.split(","):
        fusion = VARIANTS[name][0]
        scorer = OfflineScorer() if fusion is None else SemanticScorer(fusion, embedder=embedder)
        t0 = time.perf_counter()
        report = evaluate_rubric(labelled, scorer)
        elapsed = time.perf_counter() - t0
        rows.append({"variant": name, "embedder": args.embedder, **report.model_dump(), "elapsed_s": round(elapsed, 1)})
        print(f"| {name} | {report.auroc:.3f} | {report.precision_at_4:.3f} | {report.recall_at_4:.3f} | "
              f"{' '.join(map(str, report.histogram['relevant']))} | {' '.join(map(str, report.histogram['other']))} "
              f"| {elapsed:.0f} |", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"set": str(args.labelled), "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()

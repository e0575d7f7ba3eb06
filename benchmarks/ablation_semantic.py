"""Lexical vs semantic vs fused relevance on LoCoMo and LongMemEval (issue 11 ablation).

For each data set, in one run: the BM25 baseline, the embedding alone (turns ranked by
cosine to the question), BM25 + embedding by reciprocal-rank fusion, the default pipeline
with the lexical offline scorer ("default before"), and the default pipeline with the
semantic scorer under each fusion variant. Recall = every evidence turn in the context
verbatim, at each budget, overall and per question type; mean tokens in brackets.

    PYTHONPATH=. python benchmarks/ablation_semantic.py [--datasets locomo,lme_s,lme_oracle]
        [--variants lexical,weight,score,rrf,weighted] [--jobs 2] [--limit N] [--out DIR]

Every method counts tokens with the same cl100k counter and framing. Writes
``DIR/ablation_<dataset>.json`` and prints a Markdown table per data set.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from relevance_memory.evaluation import RecallRun, load_dataset, run_recall, select_questions, summarise_results
from relevance_memory.scoring._semantic import SemanticFusion, SemanticScorer

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
DATASETS: dict[str, tuple[str, Path, tuple[int, ...]]] = {
    "locomo": ("locomo", DATA / "locomo" / "locomo10.json", (1000, 2000, 4000)),
    "lme_s": ("longmemeval", DATA / "longmemeval" / "s_subset", (2000, 4000, 8000)),
    "lme_oracle": ("longmemeval", DATA / "longmemeval" / "oracle", (2000, 4000, 8000)),
}
BASE = SemanticFusion()
BOTH = frozenset({"user_chat", "assistant_reasoning"})  # the semantic lift's types before the episode ablation
ALL: frozenset[str] = frozenset()  # no unranked types: the cosine in every type's weight, as before
LEXICAL = {"embeddings": False, "supersede": False}
VARIANTS: dict[str, tuple[SemanticFusion | None, dict[str, Any]]] = {
    # the pipeline as it was before issue 11: lexical offline scorer, no supersede ("default before")
    "lexical": (None, LEXICAL),
    "lexical+supersede": (None, {"embeddings": False}),
    "default": (BASE, {}),  # what the manager does now, supersede included
    "score_nosup": (BASE, {"supersede": False}),
    "weight": (replace(BASE, mode="weight"), {}),
    "score_cap5": (replace(BASE, max_score=5), {}),
    "score_5pct": (replace(BASE, weak_share=0.05, strong_share=0.01), {}),  # the first default, before this ablation
    "score_narrow": (replace(BASE, weak_share=0.02, strong_share=0.005), {}),
    "graded": (replace(BASE, lift_unrelated=(2, 3), lift_matched=(0, 1)), {}),
    "lift": (replace(BASE, lift_unrelated=(3, 3), lift_matched=(0, 1)), {}),
    "lift_narrow": (replace(BASE, lift_unrelated=(3, 3), lift_matched=(0, 1), weak_share=0.05, strong_share=0.01), {}),
    "rrf": (replace(BASE, mode="rrf"), {}),
    # episode context and which turns the semantic lift applies to (after issues 9-14 merged)
    "both_noepisode": (replace(BASE, types=BOTH, episode_mix=0.0, unranked_types=ALL), {}),  # main before the episode ablation
    "user_noepisode": (replace(BASE, episode_mix=0.0, unranked_types=ALL), {}),
    "both_episode_lift": (replace(BASE, types=BOTH, unranked_types=ALL), {}),
    "user_episode_lift": (replace(BASE, unranked_types=ALL), {}),  # the default before assistant replies kept their lexical weight
    "user_unranked_assistant": (BASE, {}),  # the default now (same as "default")
    "user_episode_rank": (replace(BASE, episode_mode="rank", unranked_types=ALL), {}),
    "both_episode_rank": (replace(BASE, types=BOTH, episode_mode="rank", unranked_types=ALL), {}),
    "user_episode_lift_0.35": (replace(BASE, episode_mix=0.35, unranked_types=ALL), {}),
    "user_episode_lift_0.75": (replace(BASE, episode_mix=0.75, unranked_types=ALL), {}),
    "weighted": (replace(BASE, mode="weighted", weight_mix=0.5), {}),
    # an assistant's reply ranked by its words, and the room left filled from the archive
    "assistant_ranked_nofill": (replace(BASE, unranked_types=ALL), {"fill_from_archive": False}),  # main before
    "nofill": (BASE, {"fill_from_archive": False}),
    "fill_no_forgetting": (BASE, {"pheromone": {"forget_threshold": 0.0}}),  # forgotten chains may fill too
}
BASELINES = ("bm25", "embedding", "bm25+embedding")


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=ROOT, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _table(summary: dict[str, Any], budgets: tuple[int, ...], order: list[str], title: str) -> str:
    lines = [f"### {title}", "", "| category | n | method | " + " | ".join(f"{b // 1000}k" for b in budgets) + " |",
             "|---|---|---|" + "---|" * len(budgets)]

    def row(cat: str, stats: dict[str, dict[str, dict[str, float]]]) -> None:
        best = {b: max(stats[m][str(b)]["recall"] for m in order if m in stats) for b in budgets}
        first = True
        for m in order:
            if m not in stats:
                continue
            cells = []
            for b in budgets:
                s = stats[m][str(b)]
                cell = f"{s['recall']:.3f} ({s['tokens']:,.0f})"
                cells.append(f"**{cell}**" if s["recall"] == best[b] else cell)
            n = int(stats[m][str(budgets[0])]["n"])
            lines.append(f"| {cat if first else ''} | {n if first else ''} | {m} | " + " | ".join(cells) + " |")
            first = False

    row("**all**", summary["overall"])
    for cat, stats in sorted(summary["by_category"].items()):
        row(cat, stats)
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default="locomo,lme_s,lme_oracle")
    parser.add_argument("--variants", default="lexical,lexical+supersede,default,score_nosup,weight,score_5pct,lift,rrf")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--limit", type=int, default=None, help="only the first N questions per data set")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "semantic")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for key in args.datasets.split(","):
        name, path, budgets = DATASETS[key]
        dataset = load_dataset(name, path)
        if name == "locomo":
            for conv in dataset.conversations:
                conv.questions = [q for q in conv.questions if q.category != "adversarial"]
        select_questions(dataset, None, args.limit)
        results = []
        timings: dict[str, float] = {}
        started = time.perf_counter()
        results.extend(run_recall(dataset, RecallRun(budgets=budgets, methods=BASELINES), jobs=args.jobs))
        timings["baselines"] = round(time.perf_counter() - started, 1)
        order = list(BASELINES)
        for variant in args.variants.split(","):
            fusion, overrides = VARIANTS[variant]
            label = {"lexical": "default before (lexical)", "default": "default after (semantic + supersede)"}.get(
                variant, variant)
            scorer = None if fusion is None or variant == "default" else SemanticScorer(fusion)
            t0 = time.perf_counter()
            run = RecallRun(budgets=budgets, methods=("manager",), scorer=scorer, label=label,
                            manager_overrides=overrides)
            results.extend(run_recall(dataset, run, jobs=args.jobs))
            timings[label] = round(time.perf_counter() - t0, 1)
            order.append(label)
            print(f"{key}: {label} done in {timings[label]:.0f} s", file=sys.stderr, flush=True)
        summary = summarise_results(results)
        n = len([q for q in dataset.questions if q.evaluable])
        print(_table(summary, budgets, order, f"{key} ({n:,} questions with evidence)"))
        print()
        payload = {
            "dataset": key, "path": str(path), "questions": n, "budgets": list(budgets), "commit": _commit(),
            "command": "python " + " ".join(sys.argv), "machine": {"python": platform.python_version(),
            "cpus": os.cpu_count(), "platform": platform.platform()},
            "variants": {v: {"fusion": VARIANTS[v][0].label if VARIANTS[v][0] else "lexical",
                             "overrides": VARIANTS[v][1]} for v in args.variants.split(",")},
            "elapsed_s": timings, "summary": summary,
        }
        (args.out / f"ablation_{key}.json").write_text(json.dumps(payload, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()

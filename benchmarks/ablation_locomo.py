"""Which pipeline stages cost evidence recall on LoCoMo (issue 5 follow-up).

Builds every evidence question of the chosen LoCoMo conversations (default 0, 4 and 8:
635 questions) at 1k / 2k / 4k tokens with the offline scorer, with the prefilter forced on
or the summary pyramid / pheromone field switched off, and prints the recall (every evidence
turn verbatim in the context) and the mean tokens used, next to BM25 on the same questions.

    PYTHONPATH=. python benchmarks/ablation_locomo.py [--conversations 0,4,8] [--jobs 2] [CONFIG ...]
"""

from __future__ import annotations

import argparse
import collections
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from relevance_memory._config import PheromoneConfig
from relevance_memory.evaluation import RecallRun, load_locomo, run_conversation

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "locomo" / "locomo10.json"
BUDGETS = (1000, 2000, 4000)
OFF = PheromoneConfig(enabled=False)
CONFIGS: dict[str, dict[str, Any]] = {
    "default": {},
    "prefilter_on": {"prefilter": True},
    "no_summaries": {"summaries": False},
    "no_pheromone": {"pheromone": OFF},
    "exact_strength": {"pheromone": PheromoneConfig(order_resolution=1e-9)},
    "none": {"prefilter": False, "summaries": False, "pheromone": OFF},
}


def _run(args: tuple[int, str]) -> tuple[str, list[tuple[int, bool, int]]]:
    index, name = args
    conv = load_locomo(DATA).conversations[index]
    conv.questions = [q for q in conv.questions if q.evidence]
    methods = ("bm25",) if name == "bm25" else ("manager",)
    run = RecallRun(budgets=BUDGETS, methods=methods, manager_overrides=CONFIGS.get(name, {}))
    return name, [(r.budget, r.hit, r.tokens) for r in run_conversation(conv, run)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("configs", nargs="*", default=["bm25", *CONFIGS])
    parser.add_argument("--conversations", default="0,4,8")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    convs = [int(c) for c in args.conversations.split(",")]
    start = time.perf_counter()
    rows: dict[str, list[tuple[int, bool, int]]] = collections.defaultdict(list)
    with ProcessPoolExecutor(args.jobs) as pool:
        for name, results in pool.map(_run, [(c, n) for n in args.configs for c in convs]):
            rows[name].extend(results)
    print(f"LoCoMo conversations {args.conversations}: recall at 1k / 2k / 4k (mean tokens)")
    for name in args.configs:
        by_budget: dict[int, list[tuple[bool, int]]] = collections.defaultdict(list)
        for budget, hit, tokens in rows[name]:
            by_budget[budget].append((hit, tokens))
        cells = [
            f"{sum(h for h, _ in v) / len(v):.3f} ({sum(t for _, t in v) / len(v):,.0f})"
            for _, v in sorted(by_budget.items())
        ]
        n = len(by_budget[BUDGETS[0]])
        print(f"{name:15s} " + " / ".join(cells) + f"   n={n}")
    print(f"({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()

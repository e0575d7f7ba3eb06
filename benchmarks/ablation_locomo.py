"""Which pipeline stages cost evidence recall on LoCoMo (issue 5 follow-up).

Builds the first 80 evidence questions of conversation 0 at 1k / 2k / 4k tokens with the
offline scorer, with prefilter / summaries / pheromone switched on or off, and prints the
recall (every evidence turn verbatim in the context).

    PYTHONPATH=. python benchmarks/ablation_locomo.py [CONFIG ...]   # default: all configs
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from relevance_memory._config import PheromoneConfig
from relevance_memory.evaluation import RecallRun, load_locomo, run_conversation

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "locomo" / "locomo10.json"
OFF = PheromoneConfig(enabled=False)
CONFIGS: dict[str, dict[str, Any]] = {
    "default": {},
    "no_prefilter": {"prefilter": False},
    "no_summaries": {"summaries": False},
    "no_pheromone": {"pheromone": OFF},
    "none": {"prefilter": False, "summaries": False, "pheromone": OFF},
}


def main() -> None:
    dataset = load_locomo(DATA)
    conv = dataset.conversations[0]
    conv.questions = [q for q in conv.questions if q.evidence][:80]
    for name in sys.argv[1:] or list(CONFIGS):
        run = RecallRun(budgets=(1000, 2000, 4000), methods=("manager",), manager_overrides=CONFIGS[name])
        start = time.perf_counter()
        hits: dict[int, list[bool]] = {}
        for result in run_conversation(conv, run):
            hits.setdefault(result.budget, []).append(result.hit)
        recall = " / ".join(f"{sum(v) / len(v):.3f}" for _, v in sorted(hits.items()))
        print(f"{name:14s} {recall}   ({time.perf_counter() - start:.1f} s)", flush=True)


if __name__ == "__main__":
    main()

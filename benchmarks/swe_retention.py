"""Retention and score histogram of the offline scorer on the SWE-bench agent runs.

One build per run at a 16k budget, ``keep_recent=4``, goal = the first user message (the task).
Prints (instance, messages, kept verbatim, tokens, score histogram, task decision, task score).
Used in BENCHMARKS.md to check that offline scorer changes for chat QA leave agent runs sane:

    PYTHONPATH=. python benchmarks/swe_retention.py ../shared/data/swebench_trajectories
"""

from __future__ import annotations

import collections
import json
import sys
from pathlib import Path

from relevance_memory import RelevanceMemoryManager


def main(folder: Path, budget: int = 16_000) -> None:
    for path in sorted(folder.glob("*.json")):
        run = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(run, dict) or "messages" not in run:
            continue
        memory = RelevanceMemoryManager(encoding="cl100k_base", keep_recent=4, on_invalid="repair")
        memory.extend(run["messages"])
        record = memory.build_context(budget=budget).record
        counts = record.decision_counts()
        scores = collections.Counter(d.score for d in record.messages if d.score is not None)
        task = next(d for d in record.messages if d.role == "user")
        print(run["instance_id"], len(record.messages), counts["kept"] + counts["recent"], record.tokens_after,
              dict(sorted(scores.items())), task.decision, task.score)


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "../shared/data/swebench_trajectories"))

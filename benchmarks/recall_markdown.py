"""Print a recall JSON written by ``relmem eval`` as a Markdown table (for BENCHMARKS.md).

    python benchmarks/recall_markdown.py benchmarks/results/locomo.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ORDER = {"recency": 0, "bm25": 1, "offline": 2, "llm": 3, "full": 9}


def table(path: Path) -> str:
    data = json.loads(path.read_text(encoding="utf-8"))
    budgets = [str(b) for b in data["config"]["budgets"]]
    head = "| category | n | method | " + " | ".join(f"{int(b) / 1000:g}k" for b in budgets) + " |"
    lines = [head, "|" + "---|" * (3 + len(budgets))]
    sections = [("**all**", data["summary"]["overall"]), *sorted(data["summary"]["by_category"].items())]
    for cat, methods in sections:
        for n, method in enumerate(sorted(methods, key=lambda m: (ORDER.get(m, 5), m))):
            by_budget = methods[method]
            first = next(iter(by_budget.values()))
            if method == "full":
                cells = [f"({first['tokens']:,.0f} tok)"] + [""] * (len(budgets) - 1)
            else:
                cells = [
                    f"{by_budget[b]['recall']:.3f} ({by_budget[b]['tokens']:,.0f})" if b in by_budget else ""
                    for b in budgets
                ]
            lines.append(f"| {cat if n == 0 else ''} | {first['n'] if n == 0 else ''} | {method} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print(table(Path(arg)))
        print()

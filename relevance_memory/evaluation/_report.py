"""Reports of recall runs: rich tables, JSON, and a recall-vs-budget PNG (matplotlib Agg)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.table import Table

from .._extras import require

__all__ = ["plot_recall", "recall_table", "write_json"]

_ORDER = {"recency": 0, "bm25": 1, "offline": 2, "llm": 3, "full": 9}
_MEANING = {
    "recency": "the newest turns only",
    "bm25": "BM25 ranking of the turns",
    "offline": "this library's default scorer (relmem build)",
    "llm": "this library with an LLM scorer",
    "embedding": "cosine to the question alone",
    "bm25+embedding": "reciprocal-rank fusion of the two",
    "full": "the whole history (its tokens)",
}


def _methods(summary: dict[str, Any]) -> list[str]:
    return sorted(summary["overall"], key=lambda m: (_ORDER.get(m, 5), m))


def _fmt(value: float) -> str:
    return "—" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.3f}"


def recall_table(summary: dict[str, Any], budgets: Sequence[int], *, title: str, with_summaries: bool = False) -> Table:
    """A table of recall per category (rows: category × method; columns: budgets).

    Cells are ``recall (mean tokens)``; ``full`` shows its tokens only. With
    ``with_summaries`` a second number after ``/`` is recall counting summary-covered turns.

    Args:
        summary: the output of :func:`summarise_results`.
        budgets: budgets in column order (tokens).
        title: table title.
    """
    table = Table(title=title, show_lines=False)
    table.add_column("category", overflow="fold")  # in 80 columns the category folds, not the numbers
    table.add_column("n", justify="right")
    table.add_column("method", no_wrap=True, min_width=max((len(m) for m in _methods(summary)), default=6))
    for b in budgets:
        # "(104,639)" (or "0.500/0.750") whole; a cell wraps at its space, so the category gets the rest
        width = 11 if with_summaries else 9
        table.add_column(f"{b / 1000:g}k", justify="right", min_width=width, max_width=width)
    sections = [("all", summary["overall"]), *sorted(summary["by_category"].items())]
    for cat, methods in sections:
        for n, method in enumerate(sorted(methods, key=lambda m: (_ORDER.get(m, 5), m))):
            by_budget = methods[method]
            if method == "full":
                stats = by_budget.get("0", {})
                cells = [f"({stats.get('tokens', 0):,.0f})"] + [""] * (len(budgets) - 1)
            else:
                cells = []
                for b in budgets:
                    stats = by_budget.get(str(b))
                    if not stats:
                        cells.append("")
                        continue
                    cell = _fmt(stats["recall"])
                    if with_summaries:
                        cell += f"/{_fmt(stats['recall_any'])}"
                    cells.append(f"{cell} ({stats['tokens']:,.0f})")
            any_stats = next(iter(by_budget.values()))
            table.add_row(cat if n == 0 else "", f"{any_stats['n']:,}" if n == 0 else "", method, *cells,
                          end_section=n == len(methods) - 1)
    legend = "; ".join(f"{m} = {_MEANING[m]}" for m in _methods(summary) if m in _MEANING)
    table.caption = ("recall = share of questions with every evidence turn in the context verbatim (mean tokens used)"
                     + (f". {legend}" if legend else ""))
    return table


def write_json(path: Path, payload: dict[str, Any]) -> None:
    """Write ``payload`` as indented UTF-8 JSON (NaN → null), creating parent folders."""
    def clean(value: Any) -> Any:
        if isinstance(value, float) and math.isnan(value):
            return None
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [clean(v) for v in value]
        return value

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(clean(payload), ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


def plot_recall(
    summary: dict[str, Any], budgets: Sequence[int], path: Path, *, title: str, encoding: str = "cl100k_base"
) -> None:
    """Save a small PNG of overall recall against budget, one line per method (Agg backend);
    the x axis names ``encoding``, the tiktoken encoding the budgets (tokens) were counted in.

    Raises:
        MissingExtraError: matplotlib is not installed (the ``plot`` extra).
    """
    matplotlib = require("matplotlib", "the recall plot")
    matplotlib.use("Agg")
    plt = require("matplotlib.pyplot", "the recall plot")

    fig, ax = plt.subplots(figsize=(5, 3.4), dpi=90)
    for method in _methods(summary):
        if method == "full":
            continue
        by_budget = summary["overall"][method]
        xs = [b for b in budgets if str(b) in by_budget]
        ys = [by_budget[str(b)]["recall"] for b in xs]
        ax.plot(xs, ys, marker="o", label=method)
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(budgets))
    ax.set_xticklabels([f"{b / 1000:g}k" for b in budgets])
    ax.set_ylim(0, 1)
    ax.set_xlabel(f"token budget ({encoding.removesuffix('_base')})")
    ax.set_ylabel("evidence recall")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)

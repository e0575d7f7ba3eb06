"""``relmem explain``: the per-message decisions of a build, from its decision record."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich import box
from rich.table import Table
from rich.text import Text

from .._record import DecisionRecord
from ._common import budget_notes, budget_table, console, fail, mode_lines, tagged

__all__ = ["explain"]

_TYPE_ABBREV = {
    "user_instruction": "instruction",
    "user_chat": "chat",
    "assistant_reasoning": "reasoning",
    "tool_call": "call",
    "tool_result": "result",
}


def explain(
    record: Annotated[Path, typer.Argument(help="A decision record written by `relmem build`.")],
    decision: Annotated[str | None, typer.Option(help="Only messages with this decision: kept, recent, summarised, dropped.")] = None,
    limit: Annotated[int, typer.Option(help="Show at most this many rows (0 = all).")] = 0,
    full: Annotated[bool, typer.Option("--full/--one-line", help="Wrap each reason over as many lines as it needs (default), or cut it to one line.")] = True,
) -> None:
    """Show the per-message decisions of a build (score, tier, decision, reason) and where the budget went.

    A message sent cut (SPEC §11) reads ``kept (excerpt)`` or ``kept (elided)``, its tokens as sent/whole.
    Reasons wrap to the terminal's width; from 120 columns the step and the score's source are shown too."""
    try:
        data = record.read_bytes()
        rec = DecisionRecord.from_json(data)
    except OSError as exc:
        raise fail(f"cannot read {record}: {exc.strerror or exc}") from None
    except ValueError as exc:
        if data.lstrip().startswith(b"["):  # the context `relmem build` writes beside the record
            raise fail(f"{record} is a list (a context written by relmem build?), not a decision record: "
                       "pass the <name>.record.json that build printed") from None
        raise fail(f"{record} is not a decision record: {str(exc).splitlines()[0]}") from None
    if decision is not None and decision not in ("kept", "recent", "summarised", "dropped"):
        raise fail(f"--decision must be kept, recent, summarised or dropped, not {decision!r}")
    rows = [d for d in rec.messages if decision is None or d.decision == decision]
    shown = rows[:limit] if limit else rows
    table = Table(
        title=f"build {rec.build_id}: {rec.tokens_before:,} → {rec.tokens_after:,} tokens (budget {rec.budget:,})",
        box=box.SIMPLE_HEAD,
        expand=True,
        pad_edge=False,
        collapse_padding=True,
    )
    wide = console.width >= 120  # narrow terminals: no step column, the score without its source
    columns = [("id", "left"), ("step", "right"), ("type", "left"), ("tokens", "right"), ("score", "left"),
               ("tier", "left"), ("decision", "left")]
    for col, justify in columns if wide else [c for c in columns if c[0] != "step"]:
        table.add_column(col, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    # wrapped (a long path or id folds) unless --one-line; the full reasons are also in the JSON record
    table.add_column("reason", ratio=1, min_width=20, no_wrap=not full, overflow="fold" if full else "ellipsis")
    style = {"kept": "green", "recent": "cyan", "summarised": "yellow", "dropped": "red"}
    for d in shown:
        reason = d.reason + (f" — {d.note}" if d.note else "")
        if d.note.startswith("room left:"):  # pipeline.select.ROOM_LEFT: a score ≤ 2 kept, why comes first
            reason = f"{d.note} — {d.reason}"
        if d.superseded_by:  # issue 11: the reason a high score still went to the archive comes first
            reason = f"superseded by {d.superseded_by} — {reason.replace(f'superseded by {d.superseded_by}: ', '')}"
        score = "" if d.score is None else f"{d.score} {d.score_source.value if d.score_source else ''}"
        if not wide:
            score = "" if d.score is None else str(d.score)
        cut = d.fidelity in ("excerpt", "elided")  # SPEC §11: sent cut, the original restorable
        tokens = f"{d.sent_tokens:,}/{d.tokens:,}" if cut and d.sent_tokens is not None else f"{d.tokens:,}"
        shown_as = Text(f"{d.decision} ({d.fidelity})" if cut else d.decision, style=style[d.decision])
        cells: list[str | Text] = [d.id, str(d.step), _TYPE_ABBREV.get(d.msg_type, d.msg_type), tokens, score,
                                   d.tier, shown_as, reason]
        table.add_row(*(cells if wide else cells[:1] + cells[2:]))
    console.print(table)
    for line in mode_lines(rec):
        console.print(line)
    if limit and len(rows) > limit:
        console.print(f"… {len(rows) - limit} more rows (use --limit 0 for all)")
    counts = rec.decision_counts()
    sent_cut = {f: sum(1 for d in rec.messages if d.fidelity == f) for f in ("excerpt", "elided")}
    console.print(", ".join(f"{k}: {v}" for k, v in counts.items())
                  + "".join(f"; sent as {'excerpts' if f == 'excerpt' else 'elided outputs'}: {n}"
                            for f, n in sent_cut.items() if n))
    if rec.budget_breakdown is not None:
        console.print(budget_table(rec.budget_breakdown))
        for note in budget_notes(rec.budget_breakdown):
            console.print(f"  {note}")
    if rec.board is not None:  # a multi-agent build (SPEC §10): where the shared items came from
        b = rec.board
        console.print(f"board {b.board!r}, agent {b.agent!r}: shared strengths from {b.source}, "
                      f"{b.imported:,} message(s) of other agents imported, {len(b.items):,} shared in the context")
        for item, p in b.items.items():
            added = ", ".join(f"{a} +{v}" for a, v in p["contributions"].items()) or "none"
            first = f"{p['first_selected'][0]} build {p['first_selected'][1]}" if p.get("first_selected") else "-"
            console.print(f"  {item}: by {p['producer']} ({p['scope']}, {p['status']}); deposits "
                          f"{p['deposits']}, reinforcements {p['reinforcements']} ({added}); first selected: {first}")
        for fault in b.faults:
            console.print(Text.assemble("  ", tagged("board fault:", fault)))
    for warning in rec.warnings:
        console.print(tagged("warning:", warning))

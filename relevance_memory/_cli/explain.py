"""``relmem explain``: the per-message decisions of a build, from its decision record."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Annotated

import typer
from rich import box
from rich.table import Table
from rich.text import Text

from .._record import DecisionRecord, MessageDecision
from ._common import (
    budget_notes,
    budget_table,
    cli_wording,
    console,
    fail,
    mode_lines,
    print_warnings,
    read_json_model,
    tagged,
)

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
    limit: Annotated[int, typer.Option(min=0, help="Show at most this many rows (0 = all).")] = 0,
    full: Annotated[bool, typer.Option("--full/--one-line", help="Wrap each reason over as many lines as it needs (default), or cut it to one line.")] = True,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Also print routine notes, and on each archived message that it is restorable from the store.")] = False,
) -> None:
    """Show the per-message decisions of a build (score, tier, decision, reason) and where the budget went.

    A message sent cut (SPEC §11) reads ``kept (excerpt)`` or ``kept (elided)``, its tokens as sent/whole.
    Below 120 columns each message is one row and its reason the indented lines under it, wrapped
    to the terminal; from 120 columns the reason is a column, and the step and the score's source
    are shown too."""
    rec = read_json_model(record, DecisionRecord.from_json, what="a decision record",
                          hint="pass the <name>.record.json that relmem build printed",
                          list_hint="a context written by relmem build?")
    if decision is not None and decision not in ("kept", "recent", "summarised", "dropped"):
        raise fail(f"--decision must be kept, recent, summarised or dropped, not {decision!r}")
    rows = [d for d in rec.messages if decision is None or d.decision == decision]
    shown = rows[:limit] if limit else rows
    title = f"build {rec.build_id}: {rec.tokens_before:,} → {rec.tokens_after:,} tokens (budget {rec.budget:,})"
    if console.width >= 120:
        _wide_table(title, shown, full=full, verbose=verbose)
    else:
        _stacked_rows(title, shown, full=full, verbose=verbose)
    for line in mode_lines(rec):
        console.print(line)
    if limit and len(rows) > limit:
        console.print(f"… {len(rows) - limit} more rows (use --limit 0 for all)")
    counts = rec.decision_counts()
    sent_cut = {f: sum(1 for d in rec.messages if d.fidelity == f) for f in ("excerpt", "elided")}
    console.print(", ".join(f"{k}: {v}" for k, v in counts.items())
                  + "".join(f"; sent as {'excerpts' if f == 'excerpt' else 'elided outputs'}: {n}"
                            for f, n in sent_cut.items() if n))
    if not verbose and any(_ROUTINE_NOTE.search(d.note) for d in shown):
        console.print("summarised and dropped messages stay in the store, restorable by id")
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
    print_warnings(rec.warnings, verbose=verbose)


_STYLE = {"kept": "green", "recent": "cyan", "summarised": "yellow", "dropped": "red"}
_ROUTINE_NOTE = re.compile(
    r"(?:^|; )(?:in a summary[;,] original restorable from the store|archived; restorable from the store)(?=;|$)")
"""What every archived message's note says (pipeline/record.py): said once below the rows
unless ``--verbose``."""


def explained_reason(d: MessageDecision, *, verbose: bool = False) -> str:
    """Why, on one line: the reason and the note, what decided first (a room-left keep, a
    supersede); the routine restorable-from-the-store note only with ``verbose``."""
    note = d.note if verbose else _ROUTINE_NOTE.sub("", d.note).removeprefix("; ")
    reason = d.reason + (f" — {note}" if note else "")
    if note.startswith("room left:"):  # pipeline.select.ROOM_LEFT: a score ≤ 2 kept, why comes first
        reason = f"{note} — {d.reason}"
    if d.superseded_by:  # issue 11: the reason a high score still went to the archive comes first
        reason = f"superseded by {d.superseded_by} — {reason.replace(f'superseded by {d.superseded_by}: ', '')}"
    return cli_wording(" ".join(reason.split()))


def _cells(d: MessageDecision, *, source: bool) -> tuple[list[str], Text]:
    """id, step, type, tokens, score (with its source when ``source``), tier; the decision styled."""
    score = "" if d.score is None else str(d.score)
    if source and d.score is not None and d.score_source is not None:
        score += f" {d.score_source.value}"
    cut = d.fidelity in ("excerpt", "elided")  # SPEC §11: sent cut, the original restorable
    tokens = f"{d.sent_tokens:,}/{d.tokens:,}" if cut and d.sent_tokens is not None else f"{d.tokens:,}"
    shown_as = Text(f"{d.decision} ({d.fidelity})" if cut else d.decision, style=_STYLE[d.decision])
    return [d.id, str(d.step), _TYPE_ABBREV.get(d.msg_type, d.msg_type), tokens, score, d.tier], shown_as


def _wide_table(title: str, rows: list[MessageDecision], *, full: bool, verbose: bool) -> None:
    """From 120 columns: one table, the reason its last column."""
    table = Table(title=title, box=box.SIMPLE_HEAD, expand=True, pad_edge=False, collapse_padding=True)
    for col, justify in (("id", "left"), ("step", "right"), ("type", "left"), ("tokens", "right"),
                         ("score", "left"), ("tier", "left"), ("decision", "left")):
        table.add_column(col, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    # wrapped (a long path or id folds) unless --one-line; the full reasons are also in the JSON record
    table.add_column("reason", ratio=1, min_width=20, no_wrap=not full, overflow="fold" if full else "ellipsis")
    for d in rows:
        cells, shown_as = _cells(d, source=True)
        table.add_row(*cells, shown_as, explained_reason(d, verbose=verbose))
    console.print(table)


_INDENT = "    "


def _stacked_rows(title: str, rows: list[MessageDecision], *, full: bool, verbose: bool) -> None:
    """Below 120 columns: a row per message (id, type, tokens, score, tier, decision) and its
    reason on the indented lines under it, wrapped to the terminal (``--one-line``: cut to one)."""
    width = max(console.width, 40)
    made = [(_cells(d, source=False), explained_reason(d, verbose=verbose)) for d in rows]
    header = ["id", "type", "tokens", "score", "tier"]
    texts = [[c[0], c[2], c[3], c[4], c[5]] for (c, _), _reason in made]
    widths = [max([len(h), *(len(t[k]) for t in texts)]) for k, h in enumerate(header)]

    def line(cells: list[str]) -> str:  # tokens right-aligned, the rest left
        return "  ".join(c.rjust(w) if k == 2 else c.ljust(w) for k, (c, w) in enumerate(zip(cells, widths, strict=True))) + "  "

    console.print(title, no_wrap=True, overflow="ellipsis", highlight=False)
    console.print(Text(line(header) + "decision", style="bold"), no_wrap=True, overflow="ellipsis")
    console.print(Text(_INDENT + "reason", style="bold"))
    console.print("─" * min(width, len(line(header)) + 14))
    for cells, ((_, shown_as), reason) in zip(texts, made, strict=True):
        console.print(Text.assemble(line(cells), shown_as), no_wrap=True, overflow="ellipsis")
        wrapped = textwrap.wrap(reason, width=width - len(_INDENT), break_on_hyphens=False, break_long_words=True)
        if not full and len(wrapped) > 1:
            wrapped = [textwrap.shorten(reason, width=width - len(_INDENT), placeholder=" …")]
        for part in wrapped:
            console.print(_INDENT + part, no_wrap=True, overflow="fold", highlight=False)

"""What every ``relmem`` command shares: the consoles, the one error helper, small formatters.

Markup is off on both consoles: a path, a goal, a reason or a warning is printed as given,
so ``relevance-memory[minilm]``, ``list[int]`` or a stray ``[/]`` in it is text, never a
style tag that rich eats (or fails on). Styled output is built as :class:`rich.text.Text`
(:func:`tagged`, ``Text.assemble``). Help texts are rendered by typer with rich markup:
write a literal ``[`` there as ``\\[`` (see :data:`EMBEDDER_HELP`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pydantic
import typer
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from .._exceptions import InvalidMessageError, RelevanceMemoryError, TranscriptFormatError
from .._record import BudgetBreakdown, DecisionRecord

__all__ = [
    "EMBEDDER_HELP",
    "MODE_LABEL",
    "REPAIR_HELP",
    "budget_line",
    "budget_notes",
    "budget_table",
    "check_embedder",
    "cli_error",
    "cli_wording",
    "console",
    "err",
    "fail",
    "mode_lines",
    "plural",
    "print_warnings",
    "read_json_model",
    "routine_note",
    "short",
    "tagged",
    "write_output",
]

console = Console(markup=False)
"""Standard output (tables, results); markup off (module doc)."""
err = Console(stderr=True, markup=False)
"""Standard error (errors, progress); markup off (module doc)."""


def tagged(label: str, text: str, style: str = "yellow") -> Text:
    """``label text`` with ``label`` styled (``warning:``, ``note:`` …); ``text`` is shown as given."""
    return Text.assemble((label, style), " ", text)


def fail(message: str) -> typer.Exit:
    """Print ``error: message`` on standard error; return the exit (code 2) to raise.

    Usage: ``raise fail(f"cannot read {path}")``.
    """
    err.print(tagged("error:", message, "bold red"), soft_wrap=True)
    return typer.Exit(code=2)


REPAIR_HELP = "Keep orphan tool messages / unanswered calls in the store but out of the context, instead of failing."
"""The ``--repair`` option's help (``build``, ``replay``, ``heatmap``: ``on_invalid="repair"``)."""

EMBEDDER_HELP = ("Embedding model of the offline scorer: wordllama (default, ~0.2-0.4 ms a message) or minilm (reads meaning "
                 "better, ~25-70 ms a message; needs the \\[minilm] extra).")
"""Help of every ``--embedder`` option. Typer renders help as rich markup (``[minilm]`` is
escaped) and cuts a word wider than its column (no long ``pip install`` argument in 80
columns: the error for a missing extra gives the command)."""


def check_embedder(name: str) -> str:
    """``name`` when it is one of :data:`~relevance_memory.scoring._embedding.EMBEDDERS`.

    Raises:
        typer.Exit: code 2, after ``error: --embedder must be …`` on standard error.
    """
    from ..scoring._embedding import EMBEDDERS

    if name not in EMBEDDERS:
        raise fail(f"--embedder must be {' or '.join(EMBEDDERS)}, not {name!r}")
    return name


def write_output(path: Path, text: str, what: str) -> None:
    """Write ``text`` (UTF-8) to ``path``, creating its folder; an unwritable path (a missing
    or read-only folder, a directory given as the file) is a one-line ``error:`` and exit 2.

    Raises:
        typer.Exit: the file cannot be written (the message names ``what``, the path and why).
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise fail(f"cannot write the {what} to {path}: {exc.strerror or exc}") from None


_Model = TypeVar("_Model")


def read_json_model(path: Path, parse: Callable[[bytes], _Model], *, what: str, hint: str,
                    list_hint: str | None = None) -> _Model:
    """``parse(bytes of path)``; a file that cannot be read or parsed is a one-line ``error:``
    naming the file and what is wrong with it — unreadable, empty, not JSON (line and column),
    a list (``list_hint`` says what it may be), an object without the model's fields, or the
    first invalid field — followed by ``hint`` (what to pass instead), and exit 2.

    Raises:
        typer.Exit: ``path`` is not a readable ``what`` (``"a decision record"`` …).
    """
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise fail(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        return parse(data)
    except ValueError as exc:
        raise fail(f"{path} {_json_problem(data, exc, what, list_hint)}; {hint}") from None


def _json_problem(data: bytes, exc: ValueError, what: str, list_hint: str | None) -> str:
    """What is wrong with ``data`` that ``exc`` was raised parsing it as ``what``, in words."""
    if not data.strip():
        return f"is empty, not {what}"
    try:
        parsed = json.loads(data)
    except UnicodeDecodeError:
        return f"is not UTF-8 text, so not {what}"
    except json.JSONDecodeError as bad:
        return f"is not valid JSON ({bad.msg} at line {bad.lineno}, column {bad.colno}), so not {what}"
    if isinstance(parsed, list):
        return f"is a JSON list{f' ({list_hint})' if list_hint else ''}, not {what}"
    if not isinstance(parsed, dict):
        kind = "string" if isinstance(parsed, str) else "null" if parsed is None else "value"
        return f"holds a single JSON {kind} ({short(json.dumps(parsed), 40)}), not {what}"
    if not isinstance(exc, pydantic.ValidationError):
        return f"is not {what}: {str(exc).splitlines()[0]}"
    errors = exc.errors()
    missing = [str(e["loc"][0]) for e in errors if e["type"] == "missing" and len(e["loc"]) == 1]
    if missing:
        shown = ", ".join(missing[:4]) + (f" and {len(missing) - 4} more" if len(missing) > 4 else "")
        return f"is not {what}: a JSON object with no {shown}"
    first = errors[0]
    where = ".".join(str(part) for part in first["loc"]) or "the top level"
    more = f" (and {plural(len(errors) - 1, 'other problem')})" if len(errors) > 1 else ""
    return f"is not a valid {what.removeprefix('a ').removeprefix('an ')}: {where}: {first['msg']}{more}"


def plural(count: int, noun: str) -> str:
    """``"1 message"``, ``"3 messages"`` (with thousands separators)."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def short(text: str, n: int) -> str:
    """``text`` on one line, cut to ``n`` characters with an ellipsis."""
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


_PURPOSE_LABEL = {
    "reply_priming": "reply priming",
    "pinned": "system prompt (pinned)",
    "goal_block": "goal block",
    "working_memory": "working memory (last steps)",
    "core": "core tier (kept by score)",
    "working": "working tier",
    "summaries": "summaries",
    "task_statement": "task statement",
    "appended": "appended steps (since the last compaction)",
    "subtask": "subtask note (at the end)",
}


def budget_table(breakdown: BudgetBreakdown) -> Table:
    """Where a build's budget went: tokens and share per purpose, and what is left (SPEC §8)."""
    budget = breakdown.budget
    table = Table(title=f"where the {budget:,}-token budget went", box=box.SIMPLE_HEAD, pad_edge=False,
                  title_justify="left")
    table.add_column("purpose")
    table.add_column("tokens", justify="right")
    table.add_column("share", justify="right")
    rows = [(k, v) for k, v in breakdown.spent.items() if v] + [("unused", breakdown.unused)]
    for purpose, tokens in rows:
        share = f"{tokens / budget:.0%}" if budget else ""
        table.add_row(_PURPOSE_LABEL.get(purpose, purpose), f"{tokens:,}", share)
    return table


def budget_notes(breakdown: BudgetBreakdown) -> list[str]:
    """The ledger's reserves and releases in words, e.g. ``reserved 800 tokens for summaries (…)``."""
    verbs = {"reserve": "reserved", "release": "released"}
    return [
        f"{verbs[line.kind]} {line.tokens:,} tokens for {_PURPOSE_LABEL.get(line.purpose, line.purpose).split(' (')[0]}"
        + (f" ({line.note})" if line.note else "")
        for line in breakdown.lines
        if line.kind in verbs
    ]


def budget_line(breakdown: BudgetBreakdown) -> str:
    """The breakdown on one line: ``pinned 412 · goal block 60 · … · unused 303`` (tokens)."""
    parts = [f"{_PURPOSE_LABEL.get(k, k).split(' (')[0]} {v:,}" for k, v in breakdown.spent.items() if v]
    return " · ".join([*parts, f"unused {breakdown.unused:,}"])


MODE_LABEL = {"appended": "appended", "compacted": "compacted", "full_rebuild": "full rebuild"}
"""How the CLI names a build's mode (SPEC §3.1)."""


def mode_lines(rec: DecisionRecord) -> list[Text]:
    """How a build was made and what of it a provider can serve from its prompt cache, in words:
    ``mode: appended — 2 new message(s) fit the budget (…)`` and ``prefix: 5,120 tokens …``."""
    target = f", target {rec.target:,} tokens" if rec.target is not None else ""
    base = f" to build {rec.base_build_id}" if rec.base_build_id else ""
    lines = [Text.assemble("mode: ", (MODE_LABEL.get(rec.mode, rec.mode), "bold"),
                           f"{base}{target} — {rec.mode_reason or 'no reason recorded'}")]
    share = rec.cacheable_tokens / rec.tokens_after if rec.tokens_after else 0.0
    provider = (
        f"; the provider reported {rec.provider_cached_tokens:,} cached"
        if rec.provider_cached_tokens is not None else ""
    )
    lines.append(Text(
        f"prefix: {rec.prefix_tokens:,} tokens shared exactly with the previous request, "
        f"{rec.cacheable_tokens:,} cacheable ({share:.0%} of {rec.tokens_after:,}){provider}"
    ))
    return lines


_ROUTINE = ("level-1 summaries exceed ",)
"""Record warnings that describe a normal build, not a fault: the summary pyramid folding its
level-1 summaries into one level-2 summary when they outgrow the summary reserve is how a long
history is summarised (issue 25: it showed on almost every build and read like a fault)."""

_LIBRARY_ADVICE = (
    # the library's advice names keyword arguments; the CLI's user has options instead
    ("pass tokenizer= for exact counts",
     "pass --model with an OpenAI model name (gpt-4o, gpt-4.1, o3 …) for exact counts, or leave a margin"),
    ("pass context_window= or max_input_tokens=", "pass --budget"),
    ("set on_invalid='repair'", "pass --repair"),
)


def routine_note(warning: str) -> bool:
    """Whether a record warning is a routine note (shown with ``--verbose`` only), not a fault."""
    return warning.startswith(_ROUTINE)


def cli_wording(text: str) -> str:
    """``text`` with the library's advice (``pass tokenizer= …``) put in the CLI's options."""
    for library, cli in _LIBRARY_ADVICE:
        text = text.replace(library, cli)
    return text


_BATCH = re.compile(r" \(batch item \d+ of \d+; nothing of this batch was stored\)")
"""What the store adds to an invalid message of an ``extend`` batch: a library caller's words;
a CLI user gave a file, not a batch."""


def cli_error(exc: RelevanceMemoryError, source: Path | None = None) -> str:
    """A library error in the CLI's words: its advice as options (:func:`cli_wording`), and an
    invalid message of ``source`` named by its position in that file (counting from 0), not by
    its place in a batch the user never saw."""
    if isinstance(exc, InvalidMessageError) and not isinstance(exc, TranscriptFormatError) \
            and exc.index is not None and source is not None:
        return cli_wording(f"{source}, message {exc.index} (counting from 0): {_BATCH.sub('', exc.reason)}")
    return cli_wording(_BATCH.sub("", str(exc)))


def print_warnings(warnings: list[str], *, verbose: bool) -> None:
    """A record's warnings: faults as ``warning: …``; routine notes as ``note: …`` with ``verbose``
    only; each in the CLI's wording (:func:`cli_wording`)."""
    for warning in warnings:
        if not routine_note(warning):
            console.print(tagged("warning:", cli_wording(warning)))
        elif verbose:
            console.print(tagged("note:", cli_wording(warning), "cyan"))

"""What every ``relmem`` command shares: the consoles, the one error helper, small formatters."""

from __future__ import annotations

import typer
from rich.console import Console

__all__ = ["console", "err", "fail", "plural", "short"]

console = Console()
"""Standard output (tables, results)."""
err = Console(stderr=True)
"""Standard error (errors, progress)."""


def fail(message: str) -> typer.Exit:
    """Print ``error: message`` on standard error; return the exit (code 2) to raise.

    Usage: ``raise fail(f"cannot read {path}")``.
    """
    err.print(f"[bold red]error:[/] {message}", soft_wrap=True)
    return typer.Exit(code=2)


def plural(count: int, noun: str) -> str:
    """``"1 message"``, ``"3 messages"`` (with thousands separators)."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def short(text: str, n: int) -> str:
    """``text`` on one line, cut to ``n`` characters with an ellipsis."""
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"

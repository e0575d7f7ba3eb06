"""``relmem`` — the command line (typer + rich). One module per command group:

- :mod:`.build` — ``relmem build``: a context and its decision record from a transcript;
- :mod:`.explain` — ``relmem explain``: what a build decided about each message, and the budget;
- :mod:`.heatmap` — ``relmem heatmap``: the pheromone field over a replayed run;
- :mod:`.replay` — ``relmem replay``: build mode, cached prefix and cost per request of a replayed run;
- :mod:`.evaluate` — ``relmem eval`` and ``relmem rubric``: recall at a budget, rubric iteration.

Commands import the package's heavy parts (openai, the evaluation, matplotlib) when they
run, so ``relmem build`` starts fast. Every error goes through :func:`._common.fail`.
"""

from __future__ import annotations

import inspect

import typer

from .build import build
from .evaluate import eval_app, rubric_app
from .explain import explain
from .heatmap import heatmap
from .replay import replay

__all__ = ["app", "main"]

app = typer.Typer(
    name="relmem",
    help="Build relevant, budgeted LLM context from an agent's full history.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command()(build)
app.command()(explain)
app.command()(heatmap)
app.command()(replay)
app.add_typer(eval_app, name="eval")
app.add_typer(rubric_app, name="rubric")


def _one_line_paragraphs(doc: str) -> str:
    """``doc`` with each paragraph on one line: typer's rich help keeps a docstring's line
    breaks, so a sentence wrapped in the source broke mid-sentence in ``--help`` and in the
    command list of ``relmem rubric --help``; rich wraps each paragraph to the terminal."""
    return "\n\n".join(" ".join(part.split()) for part in inspect.cleandoc(doc).split("\n\n"))


for _group in (app, eval_app, rubric_app):
    for _command in _group.registered_commands:
        if _command.help is None and _command.callback is not None and _command.callback.__doc__:
            _command.help = _one_line_paragraphs(_command.callback.__doc__)


def main() -> None:
    """Entry point of the ``relmem`` console script."""
    app()

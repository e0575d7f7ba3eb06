"""``relmem heatmap``: replay a transcript and draw the pheromone field (SPEC §5, issue 4).

Replays RUN message by message, building the context before every assistant message
(offline scorer unless a scorer is configured elsewhere), records every message's
strength after each build, and renders a PNG heat map (``matplotlib``, Agg backend,
headless) of strength over steps for the most important messages — next to RUN unless
``--out`` says where. Optionally writes the final field as JSON and GraphML and the
strength history (top-N per tick) as JSON. A build that cannot fit the budget is counted
and said; when every build fails, no map is drawn and the command exits with code 2.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, NamedTuple

import typer

from .._exceptions import ContextOverflowError, RelevanceMemoryError
from .._extras import MissingExtraError, require
from .._io import load_transcript
from .._manager import RelevanceMemoryManager
from ._common import REPAIR_HELP, cli_error, console, fail, plural, tagged, write_output

__all__ = ["StrengthReplay", "heatmap", "render_heatmap", "replay_strengths"]


class StrengthReplay(NamedTuple):
    """What :func:`replay_strengths` returns."""

    memory: RelevanceMemoryManager
    steps: list[int]
    """The step of each column: one per build, then the final field."""
    snapshots: list[dict[str, float]]
    """Each column's strengths (message id → strength)."""
    builds: int
    """Builds attempted (one before each assistant message but the first message)."""
    failures: list[tuple[int, str]]
    """``(step, error)`` of each build that could not fit the budget (its column shows the
    strengths observed without a build)."""


def replay_strengths(
    messages: list[dict[str, Any]], *, budget: int, keep_recent: int = 4, goal: str | None = None,
    model: str = "gpt-4o", repair: bool = False,
) -> StrengthReplay:
    """Replay ``messages``, building before each assistant message (budget in tokens of
    ``model``'s encoding); a build that overflows is recorded in ``failures``, not raised.
    ``repair``: an invalid message (an orphan tool result …) is kept in the store but out of
    the context (``on_invalid="repair"``) instead of raising.

    Raises:
        InvalidMessageError: a message is invalid.
    """
    memory = RelevanceMemoryManager(model=model, max_input_tokens=budget, keep_recent=keep_recent,
                                    on_invalid="repair" if repair else "raise")
    if goal:
        memory.set_goal(final=goal)
    steps: list[int] = []
    snapshots: list[dict[str, float]] = []
    failures: list[tuple[int, str]] = []
    for message in messages:
        if message.get("role") == "assistant" and len(memory.store):
            try:
                memory.build_context()
            except ContextOverflowError as exc:
                failures.append((memory.store.step_count, str(exc)))
                memory.pheromone.observe(memory.store.messages)
            steps.append(memory.store.step_count)
            snapshots.append(memory.pheromone.strengths())
        memory.add(message)
    builds = len(steps)
    memory.pheromone.observe(memory.store.messages)
    steps.append(memory.store.step_count)
    snapshots.append(memory.pheromone.strengths())
    return StrengthReplay(memory, steps, snapshots, builds, failures)


def render_heatmap(
    steps: list[int], snapshots: list[dict[str, float]], labels: dict[str, str], out: Path, *, top: int, title: str
) -> list[str]:
    """Write a PNG heat map (rows: the ``top`` messages by peak strength; columns: builds).

    Returns the message ids drawn, strongest first.

    Raises:
        MissingExtraError: matplotlib is not installed (the ``plot`` extra).
    """
    matplotlib = require("matplotlib", "relmem heatmap")
    matplotlib.use("Agg")
    plt = require("matplotlib.pyplot", "relmem heatmap")
    np = require("numpy", "relmem heatmap")

    peak: dict[str, float] = {}
    for snap in snapshots:
        for mid, value in snap.items():
            peak[mid] = max(peak.get(mid, 0.0), value)
    chosen = sorted(peak, key=lambda m: -peak[m])[:top]
    grid = np.full((len(chosen), len(snapshots)), np.nan)
    for col, snap in enumerate(snapshots):
        for row, mid in enumerate(chosen):
            if mid in snap:
                grid[row, col] = snap[mid]
    height = max(3.0, 0.28 * len(chosen) + 1.5)
    fig, ax = plt.subplots(figsize=(min(18.0, 4 + 0.08 * len(snapshots)), height))
    image = ax.imshow(grid, aspect="auto", cmap="viridis", interpolation="nearest", vmin=0.0)
    ax.set_yticks(range(len(chosen)))
    ax.set_yticklabels([labels.get(m, m) for m in chosen], fontsize=7)
    ticks = list(range(0, len(steps), max(1, len(steps) // 12)))
    ax.set_xticks(ticks)
    ax.set_xticklabels([str(steps[t]) for t in ticks], fontsize=7)
    ax.set_xlabel("step (build before each assistant message)")
    ax.set_title(title, fontsize=9)
    fig.colorbar(image, ax=ax, label="pheromone strength")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return chosen


def heatmap(
    run: Annotated[Path, typer.Argument(help="Transcript to replay (OpenAI JSON/JSONL, SWE-bench run, τ-bench).")],
    index: Annotated[int, typer.Option(help="Which run to take from a file holding many (τ-bench).")] = 0,
    out: Annotated[Path | None, typer.Option(help="PNG to write. Default: <name>-heatmap.png next to RUN.")] = None,
    top: Annotated[int, typer.Option(min=1, help="Messages to draw (highest peak strength).")] = 30,
    budget: Annotated[int, typer.Option(min=1, help="Token budget of each replayed build (tokens).")] = 8000,
    model: Annotated[str, typer.Option(help="Model name; picks the tokenizer (o200k/cl100k).")] = "gpt-4o",
    keep_recent: Annotated[int, typer.Option(min=0, help="Working memory in steps.")] = 4,
    field_json: Annotated[Path | None, typer.Option(help="Also write the final field as JSON.")] = None,
    graphml: Annotated[Path | None, typer.Option(help="Also write the final field as GraphML.")] = None,
    history: Annotated[Path | None, typer.Option(help="Also write the strength history (top-N per tick) as JSON.")] = None,
    repair: Annotated[bool, typer.Option(help=REPAIR_HELP)] = False,
) -> None:
    """Replay RUN step by step and render a PNG heat map of pheromone strength over steps (next to RUN by default)."""
    try:  # before the replay: a missing plot library should not cost a minute of work first
        require("matplotlib", "relmem heatmap")
        if graphml:
            require("networkx", "relmem heatmap --graphml")
    except MissingExtraError as exc:
        raise fail(str(exc)) from None
    try:
        transcript = load_transcript(run, index=index)
        if not transcript.messages:
            raise fail(f"{run} holds no messages: nothing to replay")
        which = f" run {index} of {transcript.count}" if transcript.count > 1 else ""
        target = out or run.with_name(run.stem + (f".{index}" if which else "") + "-heatmap.png")
        if out is None and not os.access(target.parent, os.W_OK):  # said now, not after the replay
            raise fail(f"cannot write the heat map next to {run} (the folder {target.parent} is not writable); "
                       "pass --out")
        replayed = replay_strengths(
            transcript.messages, budget=budget, keep_recent=keep_recent, goal=transcript.task, model=model, repair=repair,
        )
    except OSError as exc:
        raise fail(f"cannot read {run}: {exc.strerror or exc}") from None
    except RelevanceMemoryError as exc:
        raise fail(cli_error(exc, run)) from None
    memory, steps, snapshots = replayed.memory, replayed.steps, replayed.snapshots
    failed = len(replayed.failures)
    if failed and failed == replayed.builds:  # a map of no build would look like a result
        first_step, first_error = replayed.failures[0]
        raise fail(f"every one of the {plural(failed, 'build')} failed at --budget {budget:,} (step {first_step}: "
                   f"{first_error}); no heat map written")
    labels = {
        m.id: f"{m.id} {m.msg_type.value[:12]} {' '.join(m.text.split())[:28]}" for m in memory.store.messages
    }
    title = f"pheromone strength — {run.name}{which}"
    if failed:
        title += f" ({failed} of {replayed.builds} builds did not fit {budget:,} tokens)"
    field = memory.pheromone
    try:
        chosen = render_heatmap(steps, snapshots, labels, target, top=top, title=title)
        graph = field.graphml() if graphml else None
    except MissingExtraError as exc:
        raise fail(str(exc)) from None
    except OSError as exc:
        raise fail(f"cannot write the heat map to {target}: {exc.strerror or exc}") from None
    if field_json:  # standard JSON: an infinite half-life (never evaporates) is null
        write_output(field_json, field.to_json(), "field JSON")
    if graphml and graph is not None:
        write_output(graphml, graph, "GraphML")
    if history:
        write_output(history, field.history_json(), "strength history")
    if failed:
        first_step, first_error = replayed.failures[0]
        console.print(tagged("warning:", f"{failed} of {plural(replayed.builds, 'build')} did not fit the budget "
                             f"(first at step {first_step}: {first_error}); their columns show the strengths "
                             "observed without a build"))
    console.print(
        f"heat map → {target} ({run.name}{which}: {len(chosen)} messages × {len(snapshots)} columns "
        f"({plural(replayed.builds, 'build')} and the final field), {plural(field.tick, 'tick')}, "
        f"budget {budget:,} {memory.config.resolved_encoding} tokens)"
    )


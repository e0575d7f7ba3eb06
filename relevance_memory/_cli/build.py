"""``relmem build``: build the context from a transcript and write it with its decision record."""

from __future__ import annotations

import json
import logging
import os
import warnings
from collections import Counter
from pathlib import Path
from typing import Annotated, Literal

import typer
from rich.table import Table
from rich.text import Text

from .._exceptions import RelevanceMemoryError
from .._io import load_transcript
from .._manager import RelevanceMemoryManager
from .._record import DecisionRecord
from ._common import (
    EMBEDDER_HELP,
    REPAIR_HELP,
    budget_line,
    check_embedder,
    cli_error,
    console,
    err,
    fail,
    mode_lines,
    plural,
    print_warnings,
    short,
    write_output,
)
from ._scorer_options import (
    BaseUrl,
    BatchSize,
    ContextLength,
    MaxTokens,
    ResponseFormat,
    ScorerMode,
    ScorerModel,
    SystemRole,
    Timeout,
    llm_options,
)

__all__ = ["build"]


def build(
    transcript: Annotated[Path, typer.Argument(help="Transcript: OpenAI chat JSON/JSONL, a SWE-bench run, or τ-bench results.")],
    goal: Annotated[str | None, typer.Option(help="Final goal. Default: the first user message.")] = None,
    subtask: Annotated[str | None, typer.Option(help="Current subtask.")] = None,
    budget: Annotated[int | None, typer.Option(min=1, help="Token budget of the built context (tokens). Default: 60% of the model's window.")] = None,
    keep_recent: Annotated[int, typer.Option("--keep-recent", min=0, help="Working memory: last K steps kept verbatim (the newest user message is always kept).")] = 4,
    model: Annotated[str, typer.Option(help="Model name; picks the tokenizer (o200k/cl100k) and the default window.")] = "gpt-4o",
    index: Annotated[int, typer.Option(help="Which run to take from a file holding many (τ-bench).")] = 0,
    repair: Annotated[bool, typer.Option(help=REPAIR_HELP)] = False,
    out: Annotated[Path | None, typer.Option(help="Where to write the context (JSON list of OpenAI messages). Default: <name>.context.json")] = None,
    record: Annotated[Path | None, typer.Option(help="Where to write the decision record. Default: named after --out (--out run-4k.json: run-4k.record.json), else <name>.record.json in the current directory.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the decision record as JSON instead of the table.")] = False,
    scorer: Annotated[str, typer.Option(help="offline (lexical + embedding, as a manager scores by default), lexical (words only), llm, or auto (default): the LLM only when asked for — --base-url given or RELMEM_SCORER=llm; an API key alone never sends the transcript anywhere.")] = "auto",
    scorer_model: ScorerModel = None,
    base_url: BaseUrl = None,
    timeout: Timeout = None,
    max_tokens: MaxTokens = None,
    batch_size: BatchSize = None,
    context_length: ContextLength = None,
    system_role: SystemRole = None,
    scorer_mode: ScorerMode = None,
    response_format: ResponseFormat = None,
    compact: Annotated[bool, typer.Option("--compact", help="Build as a compaction: down to --target of the budget (what an agent loop sends when its context outgrows the budget), not the whole budget.")] = False,
    target: Annotated[float, typer.Option(min=0.01, max=1.0, help="Share of the budget a compaction fills (the target_fraction of CachePolicy).")] = 0.5,
    embedder: Annotated[str, typer.Option(help=EMBEDDER_HELP)] = "wordllama",
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Also print the rubric's full version (the score cache key) and routine notes (e.g. summaries merged into one level-2 summary).")] = False,
) -> None:
    """Build the context for the next LLM call from TRANSCRIPT and write it with its decision record.

    Prints what was kept, summarised and cut, why, and where the budget went; ``relmem explain``
    on the record written shows each message."""
    if scorer not in ("auto", "llm", "offline", "lexical"):
        raise fail(f"--scorer must be auto, llm, offline or lexical, not {scorer!r}")
    check_embedder(embedder)
    try:
        from .._config import MemoryConfig
        from ..scoring._choice import resolve_scorer  # imports openai + instructor only for the LLM scorer
        from ..scoring._scorer import OfflineScorer, Scorer

        logging.getLogger("instructor").addHandler(logging.NullHandler())  # failures show as warnings below
        logging.getLogger("instructor").propagate = False

        config = MemoryConfig.create(
            model=model, keep_recent=keep_recent, max_input_tokens=budget, on_invalid="repair" if repair else "raise",
            cache_policy={"target_fraction": target}, embedder=embedder,
        )
        try:
            options = llm_options(timeout=timeout, max_tokens=max_tokens, batch_size=batch_size,
                                  context_length=context_length, system_role=system_role, scorer_mode=scorer_mode,
                                  response_format=response_format)
        except ValueError as exc:
            raise fail(str(exc)) from None
        chosen: Scorer
        if scorer == "lexical":
            chosen, scorer_note = OfflineScorer(), "lexical (the offline word rules alone, no embedding; --scorer lexical)"
        else:
            chosen, scorer_note = resolve_scorer(
                _scorer_kind(scorer), model=scorer_model or os.environ.get("RELMEM_MODEL") or model, base_url=base_url,
                config=config, **options,
            )
        # the first line says which scorer runs and why (issue 13 item 10), before any request is sent
        (err if as_json else console).print(f"scorer: {scorer_note}", highlight=False)
        loaded = load_transcript(transcript, index=index)
        with warnings.catch_warnings():  # the record's warnings are printed below, once, as "warning: …"
            warnings.simplefilter("ignore", UserWarning)
            # offline: the manager's own default (lexical + embedding when the bundled model is
            # installed, sharing the store's vectors), not the lexical scorer alone, so that
            # `relmem build` shows what a library user's build does (as `relmem eval` and
            # `relmem replay` do)
            memory = RelevanceMemoryManager(config, scorer=None if scorer != "lexical" and isinstance(chosen, OfflineScorer)
                                            else chosen)
        if not loaded.messages:
            raise fail(f"{transcript} holds no messages: nothing to build")
        memory.extend(loaded.messages)
        memory.set_goal(final=goal, subtask=subtask)
        with warnings.catch_warnings():  # said once, below, from the record's warnings
            warnings.filterwarnings("ignore", message="semantic relevance off", category=RuntimeWarning)
            built = memory.build_context(compact=compact)
    except RelevanceMemoryError as exc:
        raise fail(cli_error(exc, transcript)) from None
    stem = transcript.name.removesuffix(".jsonl").removesuffix(".json")
    if loaded.count > 1:
        stem = f"{stem}.{index}"
    record_path = record or _record_beside(out, stem)
    out = out or Path(f"{stem}.context.json")
    write_output(out, json.dumps(built.messages, ensure_ascii=False, indent=2) + "\n", "context")
    write_output(record_path, built.record.to_json() + "\n", "decision record")
    if as_json:
        typer.echo(built.record.to_json())
        return
    _print_summary(transcript, loaded.format, loaded.count, index, built.record, verbose=verbose)
    console.print(Text.assemble("context → ", (str(out), "bold"), "   decision record → ", (str(record_path), "bold")))
    console.print(Text.assemble("see why: ", (f"relmem explain {record_path}", "cyan")))


def _record_beside(out: Path | None, stem: str) -> Path:
    """The decision record's default path: named after ``--out`` when given (``swe2000.json`` →
    ``swe2000.record.json``, ``x.context.json`` → ``x.record.json``), so builds of one transcript
    at several budgets keep their records apart; else ``<stem>.record.json`` here."""
    if out is None:
        return Path(f"{stem}.record.json")
    name = out.name.removesuffix(".json").removesuffix(".context") or out.name
    return out.with_name(f"{name}.record.json")


def _scorer_kind(value: str) -> Literal["auto", "llm", "offline"]:
    return "llm" if value == "llm" else "offline" if value == "offline" else "auto"


_NOT_SCORED = (("prefiltered out", "prefiltered"), ("forgotten", "forgotten"), ("excluded on ingest", "excluded"))
"""A message a build did not score, by the start of its reason: the prefilter kept it from the
scorer, the pheromone memory had forgotten it, or it was invalid and repaired out."""


def score_counts(rec: DecisionRecord) -> dict[str, int]:
    """Where each message's score came from, every message counted once (the counts add up to
    ``rec.messages_before``): ``{"offline": 184, "recent": 9, "pinned": 1, "prefiltered": 62}``."""
    counts: Counter[str] = Counter()
    for d in rec.messages:
        if d.score_source is not None:
            counts[d.score_source.value] += 1
        else:
            counts[next((label for start, label in _NOT_SCORED if d.reason.startswith(start)), "not scored")] += 1
    return dict(counts.most_common())


def archive_reasons(rec: DecisionRecord) -> dict[str, int]:
    """Why the messages summarised or dropped left the context (each counted once), most first:
    ``{"over budget (core tier)": 80, "superseded by a newer message": 46, …}``."""
    counts: Counter[str] = Counter()
    over = "over budget" if rec.target is None else "over the compaction target"  # a compaction fills to its target
    for d in rec.messages:
        if d.decision not in ("summarised", "dropped"):
            continue
        if d.superseded_by or d.note.startswith(("superseded by", "left out: the newer value")):
            why = "superseded by a newer message"
        elif d.note.startswith("over budget"):
            why = over + (f" ({d.tier} tier)" if d.tier in ("core", "working") else "")
        elif d.note.startswith("repeat of"):
            why = "repeats a message kept verbatim"
        else:
            why = next((label for start, label in _NOT_SCORED if d.reason.startswith(start)), "")
            why = why or ("scored low (archive tier)" if d.tier == "archive" else "other")
        counts[why] += 1
    return dict(counts.most_common())


def _print_summary(path: Path, fmt: str, count: int, index: int, rec: DecisionRecord, *, verbose: bool = False) -> None:
    which = f", run {index} of {count}" if count > 1 else ""
    console.print(Text.assemble(("relmem build", "bold"), f" {path} ({fmt}{which}, {plural(rec.messages_before, 'message')})"))
    goal = rec.goal
    if goal.source == "first_user_message":
        console.print(Text.assemble("final goal: ", ("the first user message", "italic"), " (pass --goal to set it)"))
    elif goal.final:
        console.print(f"final goal: {short(goal.final, 100)}")
    if goal.subtask:
        console.print(f"subtask: {short(goal.subtask, 100)}")
    shown = ", ".join(f"{n:,} {src}" for src, n in score_counts(rec).items()) or "none"
    model = f" ({rec.scorer_model})" if rec.scorer != "offline" else ""
    console.print(f"scores: {shown}{model}")
    if verbose:  # the rubric's full version (embedder and fingerprint): the score cache's key
        console.print(f"rubric: {rec.rubric_version}")
    counts = rec.decision_counts()
    table = Table(show_header=True, header_style="bold")
    table.add_column("")
    table.add_column("before", justify="right")
    table.add_column("after")  # left: a wrapped phrase reads from its start
    table.add_row("messages", f"{rec.messages_before:,}", f"{rec.messages_after:,}")
    table.add_row(f"tokens ({rec.encoding})", f"{rec.tokens_before:,}", f"{rec.tokens_after:,} (budget {rec.budget:,})")
    table.add_row(
        "recent (working memory)", "",
        f"{plural(counts['recent'], 'msg')} in {plural(rec.working_steps, 'step')} (keep-recent {rec.keep_recent} + newest user msg)",
    )
    pinned = sum(1 for d in rec.messages if d.decision == "kept" and d.tier == "pinned")
    if pinned:
        table.add_row("system prompt (pinned)", "", f"{plural(pinned, 'msg')}")
    table.add_row("kept older (by score)", "", plural(counts["kept"] - pinned, "msg"))
    cut = {f: sum(1 for d in rec.messages if d.fidelity == f) for f in ("excerpt", "elided")}
    if any(cut.values()):
        table.add_row("sent cut (restorable)", "", ", ".join(
            plural(n, "excerpt") if f == "excerpt" else f"{plural(n, 'call')} with the output elided"
            for f, n in cut.items() if n))
    table.add_row("summarised", "", plural(counts["summarised"], "msg"))
    if counts["dropped"]:
        table.add_row("dropped (no summary)", "", f"{plural(counts['dropped'], 'msg')}, restorable by id")
    table.add_row("trace chains kept", "", f"{rec.chains_kept:,} of {rec.chains_total:,}")
    if rec.goal_block:
        table.add_row("goal block", "", "added")
    if rec.usage.llm_calls or rec.cache_hits:
        table.add_row("LLM calls / tokens", "", f"{rec.usage.llm_calls} / {rec.usage.prompt_tokens + rec.usage.completion_tokens:,}")
        table.add_row("cache hit rate", "", f"{rec.cache_hit_rate:.0%}")
    if rec.usage.llm_calls:
        table.add_row("LLM latency", "", f"{rec.usage.latency_s:.1f} s")
    if rec.usage.retries or rec.usage.fallbacks:
        table.add_row("LLM retries / fallbacks", "", f"{rec.usage.retries} / {plural(rec.usage.fallbacks, 'msg')}")
    if rec.identity:
        table.caption = "the whole history fits the budget: the context equals the input"
    console.print(table)
    why = archive_reasons(rec)
    if why:
        console.print("why not verbatim: " + ", ".join(f"{n:,} {reason}" for reason, n in why.items()))
    if rec.budget_breakdown is not None:
        console.print(f"budget: {budget_line(rec.budget_breakdown)} tokens")
    console.print(mode_lines(rec)[0])
    print_warnings(rec.warnings, verbose=verbose)

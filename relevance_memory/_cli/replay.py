"""``relmem replay``: replay a transcript step by step and show what a provider's prompt cache saves.

Builds the context before every assistant message of RUN, as an agent loop would call the
model, and prints per request how it was built (appended / compacted / full rebuild), the
tokens sent, how many of them repeat the previous request exactly (what a provider bills
as cached: OpenAI's rule, from 1,024 tokens in steps of 128), and the running cost against
sending the full history every time, at cached-price ratios 0.1 and 0.5 (SPEC §3.1).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from .._cache_policy import CachePolicy
from .._exceptions import RelevanceMemoryError
from .._io import load_transcript
from .._manager import RelevanceMemoryManager
from .._tokenizer import REPLY_PRIMING_TOKENS
from ..pipeline._prefix import CacheMeter
from ._common import EMBEDDER_HELP, MODE_LABEL, REPAIR_HELP, check_embedder, cli_error, console, fail

__all__ = ["replay"]

PRICES = (0.1, 0.5)


def replay(
    transcript: Annotated[Path, typer.Argument(help="Transcript: OpenAI chat JSON/JSONL, a SWE-bench run, or τ-bench results.")],
    budget: Annotated[int, typer.Option(min=1, help="Token budget of every built context (tokens).")] = 8000,
    keep_recent: Annotated[int, typer.Option("--keep-recent", min=0, help="Working memory: last K steps kept verbatim.")] = 4,
    target: Annotated[float | None, typer.Option(min=0.01, max=1.0, help="Largest share of the budget a compaction fills; default 0.8, less when steps are large.")] = None,
    always_rebuild: Annotated[bool, typer.Option("--always-rebuild", help="Rebuild every request from scratch (the behaviour before prefix stability).")] = False,
    model: Annotated[str, typer.Option(help="Model name; picks the tokenizer (o200k/cl100k).")] = "gpt-4o",
    index: Annotated[int, typer.Option(help="Which run to take from a file holding many (τ-bench).")] = 0,
    quiet: Annotated[bool, typer.Option("--quiet", help="Print the TOTAL line only.")] = False,
    embedder: Annotated[str, typer.Option(help=EMBEDDER_HELP)] = "wordllama",
    repair: Annotated[bool, typer.Option(help=REPAIR_HELP)] = False,
) -> None:
    """Replay TRANSCRIPT request by request: build mode, tokens sent, cached prefix, cost vs the full history."""
    policy = CachePolicy(always_rebuild=always_rebuild)
    if target is not None:
        policy = policy.model_copy(update={"target_fraction": target})
    check_embedder(embedder)
    try:
        loaded = load_transcript(transcript, index=index)
        memory = RelevanceMemoryManager(model=model, max_input_tokens=budget, keep_recent=keep_recent, cache_policy=policy,
                                        embedder=embedder, on_invalid="repair" if repair else "raise")
    except RelevanceMemoryError as exc:
        raise fail(cli_error(exc, transcript)) from None
    messages = loaded.messages
    points = [k for k, m in enumerate(messages) if m.get("role") == "assistant" and k > 0]
    if not points:
        raise fail(f"{transcript} has no assistant message after the first: nothing to replay")
    meter = CacheMeter()
    modes = dict.fromkeys(MODE_LABEL, 0)
    previous_full: int | None = None
    if not quiet:
        console.print(Text.assemble(
            ("relmem replay", "bold"),
            f" {transcript} ({len(points)} requests, budget {budget:,} {memory.config.resolved_encoding} tokens, "
            f"{'always rebuild' if always_rebuild else f'compaction target up to {policy.target_fraction:.0%}'}, "
            f"embedder {memory.vectors.embedder.name if memory.vectors is not None else 'none: lexical'})"))
        console.print(f"{'req':>4} {'history':>8} {'mode':<12} {'sent':>7} {'cached':>7} {'share':>6} "
                      f"{'cost@0.1 vs full':>16} {'@0.5':>6}")
    done = 0
    try:
        for n, k in enumerate(points, 1):
            memory.extend(messages[done:k])
            done = k
            try:
                record = memory.build_context().record
            except RelevanceMemoryError as exc:  # which request, so a --quiet run is not a bare error
                if meter.requests:  # what was replayed so far still counts
                    _total(meter, modes, memory.config.resolved_encoding, partial=True)
                raise fail(f"request {n} of {len(points)} (message {k}) could not be built: {cli_error(exc)}") from None
            full_cached = policy.cacheable(previous_full - REPLY_PRIMING_TOKENS) if previous_full is not None else 0
            meter.add(record.tokens_after, record.cacheable_tokens, record.tokens_before, full_cached)
            previous_full = record.tokens_before
            modes[record.mode] += 1
            if not quiet:
                share = record.cacheable_tokens / record.tokens_after if record.tokens_after else 0.0
                console.print(
                    f"{n:>4} {record.tokens_before:>8,} {MODE_LABEL[record.mode]:<12} {record.tokens_after:>7,} "
                    f"{record.cacheable_tokens:>7,} {share:>6.0%} {meter.ratio(0.1):>15.2f}× {meter.ratio(0.5):>5.2f}×",
                    highlight=False,
                )
    except RelevanceMemoryError as exc:
        raise fail(cli_error(exc, transcript)) from None
    _total(meter, modes, memory.config.resolved_encoding)


def _total(meter: CacheMeter, modes: dict[str, int], encoding: str, *, partial: bool = False) -> None:
    """The TOTAL line (``TOTAL (partial)`` for the requests replayed before a build failed)."""
    counts = " ".join(f"{MODE_LABEL[m].replace(' ', '_')}={c}" for m, c in modes.items())
    console.print(
        f"TOTAL{' (partial)' if partial else ''} requests={meter.requests} sent_tokens={meter.sent:,} full_history_tokens={meter.full_sent:,} "
        f"cached_share={meter.share:.1%} (full history {meter.full_cached / max(1, meter.full_sent):.1%}) "
        + " ".join(f"cost@{p}={meter.cost(p):,.0f} ({meter.ratio(p):.2f}× full)" for p in PRICES)
        + f" {counts} encoding={encoding}",
        highlight=False, soft_wrap=True,
    )

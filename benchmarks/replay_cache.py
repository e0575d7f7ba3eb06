"""Replay SWE agent runs step by step and measure scorer traffic (issue 4, SPEC §6).

For every run: ingest messages one by one and build the context before each assistant
message, with a counting wrapper around the offline scorer. The naive baseline, counted
in the same replay, re-scores every older message (everything outside working memory)
at every build. Reports scorer calls, messages and prompt tokens (the messages' token
counts) for both, the cache hit rate and the tokens saved.

    PYTHONPATH=. python benchmarks/replay_cache.py [DIR] [--subtask fixed|thought] [--budget N]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from relevance_memory import ContextOverflowError, OfflineScorer, RelevanceMemoryManager, load_transcript
from relevance_memory._models import TaskGoal, content_text
from relevance_memory.scoring._scorer import ScoreItem, ScoringContext, ScoringResult

FIXED_SUBTASK = "fix the failing behaviour described in the issue"


class CountingScorer:
    """Offline scorer that counts what it is asked (calls, messages, tokens, pairs)."""

    name = "counting"
    model = "offline-v1"
    rubric_version = "offline-v1"

    def __init__(self) -> None:
        self.inner = OfflineScorer()
        self.calls = 0
        self.messages = 0
        self.tokens = 0
        self.pairs: list[tuple[str, str]] = []

    def score(self, goal: TaskGoal, items: Sequence[ScoreItem], context: ScoringContext | None = None) -> ScoringResult:
        self.calls += 1
        self.messages += len(items)
        self.tokens += sum(item.token_count for item in items)
        self.pairs.extend((item.id, goal.effective_subtask) for item in items)
        return self.inner.score(goal, items, context)


def first_sentence(text: str) -> str:
    """First sentence of an assistant thought (≤ 200 chars), or ``""``."""
    text = " ".join(text.split())
    match = re.match(r"(.+?[.!?])(?:\s|$)", text)
    return (match.group(1) if match else text)[:200]


def replay(
    messages: list[dict[str, Any]], *, subtask_mode: str, budget: int, prefilter: bool = True, top_n: int = 50
) -> dict[str, Any]:
    """Replay one run; returns counters for ours and the naive baseline."""
    scorer = CountingScorer()
    memory = RelevanceMemoryManager(
        scorer=scorer, max_input_tokens=budget, keep_recent=4, prefilter=prefilter, prefilter_top_n=top_n
    )
    naive_messages = naive_tokens = builds = overflows = hits = misses = 0
    subtask = FIXED_SUBTASK
    start = time.perf_counter()
    for message in messages:
        if message.get("role") == "assistant" and len(memory.store):
            memory.set_goal(subtask=subtask)
            try:
                built = memory.build_context()
            except ContextOverflowError:
                overflows += 1
            else:
                builds += 1
                hits += built.record.cache_hits
                misses += built.record.cache_misses
                older = [d for d in built.record.messages if d.tier not in ("pinned", "recent")]
                if built.record.identity:  # naive still scores everything outside working memory
                    recent_steps = set(sorted({d.step for d in built.record.messages if d.step >= 0})[-4:])
                    older = [d for d in built.record.messages if d.step >= 0 and d.step not in recent_steps]
                naive_messages += len(older)
                naive_tokens += sum(d.tokens for d in older)
        memory.add(message)
        if message.get("role") == "assistant" and subtask_mode == "thought":
            thought = first_sentence(content_text(message.get("content")))
            if thought:
                subtask = thought
    elapsed = time.perf_counter() - start
    return {
        "messages": len(messages),
        "builds": builds,
        "overflows": overflows,
        "scorer_calls": scorer.calls,
        "scored_messages": scorer.messages,
        "scored_tokens": scorer.tokens,
        "naive_messages": naive_messages,
        "naive_tokens": naive_tokens,
        "cache_hits": hits,
        "cache_misses": misses,
        "duplicate_pairs": len(scorer.pairs) - len(set(scorer.pairs)),
        "seconds": round(elapsed, 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", nargs="?", default="../shared/data/swebench_trajectories")
    parser.add_argument("--subtask", choices=["fixed", "thought"], default="fixed")
    parser.add_argument("--budget", type=int, default=16000)
    parser.add_argument("--no-prefilter", action="store_true")
    parser.add_argument("--top-n", type=int, default=50, help="prefilter_top_n (messages)")
    parser.add_argument("--json", action="store_true", help="print per-run JSON rows too")
    args = parser.parse_args(argv)
    files = sorted(p for p in Path(args.directory).glob("*.json") if p.name != "LICENSE.md")
    total: dict[str, float] = {}
    print(f"{'run':40} {'msgs':>5} {'builds':>6} {'calls':>6} {'ours tok':>10} {'naive tok':>11} {'ratio':>6} {'hit':>5}")
    for path in files:
        row = replay(load_transcript(path).messages, subtask_mode=args.subtask, budget=args.budget,
                     prefilter=not args.no_prefilter, top_n=args.top_n)
        for key, value in row.items():
            total[key] = total.get(key, 0) + value
        lookups = row["cache_hits"] + row["cache_misses"]
        ratio = row["scored_tokens"] / row["naive_tokens"] if row["naive_tokens"] else 0.0
        print(f"{path.stem:40} {row['messages']:>5} {row['builds']:>6} {row['scorer_calls']:>6} "
              f"{row['scored_tokens']:>10} {row['naive_tokens']:>11} {ratio:>6.1%} "
              f"{(row['cache_hits'] / lookups if lookups else 0):>5.0%}")
        if args.json:
            print(json.dumps({"run": path.stem, **row}))
    lookups = total["cache_hits"] + total["cache_misses"]
    print(
        f"TOTAL runs={len(files)} builds={int(total['builds'])} scorer_calls={int(total['scorer_calls'])} "
        f"scored_messages={int(total['scored_messages'])} naive_messages={int(total['naive_messages'])} "
        f"scored_tokens={int(total['scored_tokens'])} naive_tokens={int(total['naive_tokens'])} "
        f"ratio={total['scored_tokens'] / max(total['naive_tokens'], 1):.2%} "
        f"saved_tokens={int(total['naive_tokens'] - total['scored_tokens'])} "
        f"hit_rate={total['cache_hits'] / max(lookups, 1):.1%} duplicate_pairs={int(total['duplicate_pairs'])} "
        f"overflows={int(total['overflows'])} seconds={total['seconds']:.1f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

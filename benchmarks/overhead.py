"""Overhead of a build: relevance-memory vs ``langchain_core.messages.trim_messages``.

Histories of 1k, 10k and 100k messages are made by repeating the MIT SWE-bench run in
``fixtures/`` (tool-call ids renumbered so chains stay valid). On the same messages and
the same token counter (exact tiktoken counts, cl100k, per message), in one run:

- relevance-memory: ``ingest`` (``extend``; counts tokens once per message), ``cold``
  (first ``build_context`` — every candidate scored by the offline scorer), ``warm``
  (a second build with the same goal — scores from the cache), ``step`` (a build after one
  new assistant/tool step is appended: the agent-loop case);
- ``trim_messages(strategy="last", include_system=True, start_on="human")``: ``cold``
  (the per-message counter's memo is empty), ``warm`` (memo full).

Ratios are relevance-memory time / trim_messages time (> 1: we are slower). Run:

    PYTHONPATH=. python benchmarks/overhead.py --sizes 1000,10000,100000 --max-chars 400 \
        --out benchmarks/results/overhead.json

Needs the ``langchain`` extra (``pip install 'relevance-memory[langchain]'``).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _trim_baseline import trimmer

from relevance_memory import RelevanceMemoryManager, TiktokenCounter

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "django__django-15280.json"


def make_history(n: int, max_chars: int = 0) -> list[dict[str, Any]]:
    """``n`` OpenAI messages: the fixture's system prompt and task, then its agent steps
    repeated (call ids suffixed per repetition), cut at a step boundary near ``n``.
    With ``max_chars`` > 0 every string content is clipped to that many characters."""
    run = json.loads(FIXTURE.read_text(encoding="utf-8"))["messages"]
    if max_chars > 0:
        run = [{**m, "content": m["content"][:max_chars]} if isinstance(m.get("content"), str) else m for m in run]
    head, body = run[:2], run[2:]
    out = [dict(m) for m in head]
    rep = 0
    while len(out) < n:
        for m in body:
            m2 = dict(m)
            if m2.get("tool_calls"):
                m2["tool_calls"] = [
                    {**c, "id": f"{c['id']}_{rep}"} for c in m2["tool_calls"]
                ]
            if m2.get("tool_call_id"):
                m2["tool_call_id"] = f"{m2['tool_call_id']}_{rep}"
            out.append(m2)
            if len(out) >= n and m2["role"] != "assistant":
                break
        rep += 1
    while out[-1]["role"] == "assistant" and out[-1].get("tool_calls"):
        out.pop()
    return out


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def bench(n: int, budget: int, repeats: int, max_chars: int = 0) -> dict[str, Any]:
    history = make_history(n, max_chars)
    counter = TiktokenCounter("cl100k_base")
    row: dict[str, Any] = {"messages": len(history)}

    manager = RelevanceMemoryManager(encoding="cl100k_base", keep_recent=4)
    row["rm_ingest_s"] = timed(lambda: manager.extend(history))
    row["history_tokens"] = sum(m.token_count for m in manager.messages)
    row["rm_cold_s"] = timed(lambda: manager.build_context(budget=budget))
    row["rm_warm_s"] = statistics.median(timed(lambda: manager.build_context(budget=budget)) for _ in range(repeats))
    extra = history[-2:] if history[-1]["role"] == "tool" else history[-1:]
    steps = []
    for k in range(repeats):
        new = [dict(m) for m in extra]
        for m in new:
            if m.get("tool_calls"):
                m["tool_calls"] = [{**c, "id": f"{c['id']}_x{k}"} for c in m["tool_calls"]]
            if m.get("tool_call_id"):
                m["tool_call_id"] = f"{m['tool_call_id']}_x{k}"
        manager.extend(new)
        steps.append(timed(lambda: manager.build_context(budget=budget)))
    row["rm_step_s"] = statistics.median(steps)

    trim = trimmer(history, budget, counter)

    row["lc_cold_s"] = timed(trim)
    row["lc_warm_s"] = statistics.median(timed(trim) for _ in range(repeats))
    row["ratio_cold"] = row["rm_cold_s"] / row["lc_cold_s"]
    row["ratio_cold_with_ingest"] = (row["rm_ingest_s"] + row["rm_cold_s"]) / row["lc_cold_s"]
    row["ratio_warm"] = row["rm_warm_s"] / row["lc_warm_s"]
    row["ratio_step"] = row["rm_step_s"] / row["lc_warm_s"]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--budget", type=int, default=8000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-chars", type=int, default=0, help="clip message contents (0 = as recorded)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    rows = []
    for n in (int(s) for s in args.sizes.split(",")):
        row = bench(n, args.budget, args.repeats, args.max_chars)
        rows.append(row)
        print(
            f"{row['messages']:>7,} msgs {row['history_tokens']:>12,} tok | rm ingest {row['rm_ingest_s']:.3f}s "
            f"cold {row['rm_cold_s']:.3f}s warm {row['rm_warm_s']:.3f}s step {row['rm_step_s']:.3f}s | "
            f"trim cold {row['lc_cold_s']:.3f}s warm {row['lc_warm_s']:.3f}s | ratio cold {row['ratio_cold']:.1f}× "
            f"(+ingest {row['ratio_cold_with_ingest']:.1f}×) warm {row['ratio_warm']:.1f}× step {row['ratio_step']:.1f}×",
            flush=True,
        )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        payload = {"budget": args.budget, "repeats": args.repeats, "max_chars": args.max_chars, "python": platform.python_version(), "rows": rows}
        args.out.write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

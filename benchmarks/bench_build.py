"""Ingest + build time and peak memory of the core pipeline (issue 2).

Scenarios (each in a fresh subprocess so peak RSS is its own):
  swe        the largest SWE-bench run in ../shared/data (by tokens), built to 8k
  longmemeval a LongMemEval s_subset haystack (~500 turns, ~120k tokens), built to 8k
  synthetic  a synthetic agent history of 100,000 messages, built to 32k

For each: ingest seconds, first build seconds (wall; ``--scenario`` also prints the CPU
seconds of the process, steadier on a shared machine), rebuild seconds (nothing new: every
score comes from the cache; the median of ``--rebuilds`` rebuilds, the first one also
reported, as a garbage collection may land in it), and peak memory (tracemalloc peak of
Python allocations and the process's max RSS). Offline scorer, o200k_base.

    python benchmarks/bench_build.py            # all scenarios, prints a Markdown table
    python benchmarks/bench_build.py --json out.json
    python benchmarks/bench_build.py --scenario swe --code /tmp/old-checkout   # another checkout's code, same scenario

``--loop N`` (with ``--scenario``) also times an agent loop over the last N messages: they are
added one by one and the context is rebuilt before every assistant message (CPU seconds).
``--code DIR`` imports ``relevance_memory`` from another checkout (e.g. a ``git worktree`` of an
older commit), so before/after timings run the same scenarios in the same session.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"
if "--code" in sys.argv:  # import the code under test from another checkout (before/after runs)
    sys.path.insert(0, str(Path(sys.argv[sys.argv.index("--code") + 1]).resolve()))
else:
    sys.path.insert(0, str(REPO))


def synthetic_history(n: int) -> list[dict[str, Any]]:
    """An agent run of ``n`` messages: a task, then tool steps with varied outputs."""
    words = ["parser", "config", "retry", "timeout", "index", "cache", "value", "error", "path", "module", "request", "user", "order", "vendor", "budget", "schema", "field", "table", "count", "update", "delete", "report"]
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent with a bash tool."},
        {"role": "user", "content": "Fix the flaky retry logic in net/retry.py; never change the public API."},
    ]
    i = 0
    while len(history) < n:
        i += 1
        if i % 25 == 0:
            history.append({"role": "user", "content": f"Status update {i}? Remember the budget limit {i * 7}."})
            continue
        text = " ".join(words[(i * k) % len(words)] for k in range(1, 30))
        history.append({"role": "assistant", "content": f"Step {i}: {text[:60]}",
                        "tool_calls": [{"id": f"call_{i}", "type": "function",
                                        "function": {"name": "bash", "arguments": json.dumps({"command": f"grep -n {words[i % len(words)]} src/m{i % 97}.py"})}}]})
        history.append({"role": "tool", "tool_call_id": f"call_{i}", "content": f"src/m{i % 97}.py:{i}: {text} {i * 13}"})
    history = history[:n]
    if history[-1].get("tool_calls"):  # never end on a call without its result
        history[-1] = {"role": "user", "content": "Wrap up and report what changed."}
    return history


SYNTHETIC_MESSAGES = 100_000
"""Messages of the synthetic scenario (``--messages`` changes it)."""


def load(scenario: str, messages: int = SYNTHETIC_MESSAGES) -> tuple[list[dict[str, Any]], int, str]:
    from relevance_memory import TiktokenCounter, load_transcript

    if scenario == "swe":
        counter = TiktokenCounter()
        runs = sorted((DATA / "swebench_trajectories").glob("*.json"))
        best = max(runs, key=lambda p: sum(counter.count_message(m) for m in load_transcript(p).messages))
        return load_transcript(best).messages, 8000, best.stem
    if scenario == "longmemeval":
        files = sorted((DATA / "longmemeval" / "s_subset").glob("*.json"))
        item = json.loads(files[0].read_text(encoding="utf-8"))
        history = [{"role": t["role"], "content": t["content"]} for session in item["haystack_sessions"] for t in session]
        history.append({"role": "user", "content": item["question"]})
        return history, 8000, f"{files[0].stem} ({len(item['haystack_sessions'])} sessions)"
    return synthetic_history(messages), 32_000, "synthetic agent run"


def agent_loop_cpu(history: list[dict[str, Any]], budget: int, steps: int) -> tuple[float, int, list[int]]:
    """CPU seconds of an agent loop over the last ``steps`` messages: the history before them
    is built once, then they are added one by one and the context is rebuilt before every
    assistant message (where an agent calls its model). Returns (CPU seconds, builds, garbage
    collections per generation during the loop)."""
    import gc

    from relevance_memory import RelevanceMemoryManager

    memory = RelevanceMemoryManager(max_input_tokens=budget, keep_recent=4)
    start_at = len(history) - steps
    while start_at > 1 and history[start_at].get("role") != "assistant":
        start_at -= 1  # start where a model call would be made (no open tool call)
    memory.extend(history[:start_at])
    memory.build_context()
    builds = 0
    collections = [g["collections"] for g in gc.get_stats()]
    start = time.process_time()
    for message in history[start_at:]:
        if message.get("role") == "assistant":
            memory.build_context()
            builds += 1
        memory.add(message)
    cpu = time.process_time() - start
    return cpu, builds, [g["collections"] - c for g, c in zip(gc.get_stats(), collections, strict=True)]


def run_one(scenario: str, rebuilds: int = 5, loop: int = 0, messages: int = SYNTHETIC_MESSAGES) -> dict[str, Any]:
    import statistics

    from relevance_memory import RelevanceMemoryManager

    history, budget, label = load(scenario, messages)
    # timing pass (no tracing overhead)
    memory = RelevanceMemoryManager(max_input_tokens=budget, keep_recent=4)
    t0 = time.perf_counter()
    memory.extend(history)
    t1 = time.perf_counter()
    c1 = time.process_time()
    first = memory.build_context()
    t2, c2 = time.perf_counter(), time.process_time()
    again = memory.build_context()
    t3, c3 = time.perf_counter(), time.process_time()
    times, cpu = [t3 - t2], [c3 - c2]
    for _ in range(rebuilds - 1):
        start, start_cpu = time.perf_counter(), time.process_time()
        memory.build_context()
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    # memory pass: Python allocations of a fresh ingest + build
    tracemalloc.start()
    traced = RelevanceMemoryManager(max_input_tokens=budget, keep_recent=4)
    traced.extend(history)
    traced.build_context()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert again.messages == first.messages
    loop_cpu, loop_builds, loop_gc = agent_loop_cpu(history, budget, loop) if loop else (None, 0, [])
    rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    import relevance_memory

    return {
        "scenario": scenario,
        "code": str(Path(relevance_memory.__file__).resolve().parents[1]),
        "input": label,
        "messages": len(history),
        "tokens_before": first.record.tokens_before,
        "budget": budget,
        "tokens_after": first.record.tokens_after,
        "messages_after": first.record.messages_after,
        "ingest_s": round(t1 - t0, 3),
        "build_s": round(t2 - t1, 3),
        "rebuild_s": round(statistics.median(times), 3),
        "first_rebuild_s": round(t3 - t2, 3),
        "build_cpu_s": round(c2 - c1, 3),
        "rebuild_cpu_s": round(statistics.median(cpu), 3),
        "rebuild_cache_hit_rate": again.record.cache_hit_rate,
        "loop_builds": loop_builds,
        "loop_cpu_s": round(loop_cpu, 3) if loop_cpu is not None else None,
        "loop_gc_collections": loop_gc,
        "tracemalloc_peak_mib": round(peak / 2**20, 1),
        "max_rss_mib": round(rss_kib / 1024, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", choices=["swe", "longmemeval", "synthetic"], help="run one scenario in-process")
    parser.add_argument("--json", type=Path, help="also write the results as JSON")
    parser.add_argument("--rebuilds", type=int, default=5, help="rebuilds timed (their median is reported)")
    parser.add_argument("--code", type=Path, help="import relevance_memory from this checkout instead of this one")
    parser.add_argument("--messages", type=int, default=SYNTHETIC_MESSAGES, help="messages of the synthetic scenario")
    parser.add_argument("--loop", type=int, default=0, help="with --scenario: also time an agent loop over the last N messages (a build before each assistant message)")
    args = parser.parse_args()
    if args.scenario:
        print(json.dumps(run_one(args.scenario, max(1, args.rebuilds), max(0, args.loop), args.messages)))
        return
    if not DATA.is_dir():
        print(f"note: {DATA} not found; only the synthetic scenario runs", file=sys.stderr)
    scenarios = ["swe", "longmemeval", "synthetic"] if DATA.is_dir() else ["synthetic"]
    rows = []
    for scenario in scenarios:
        command = [sys.executable, __file__, "--scenario", scenario, "--rebuilds", str(args.rebuilds)]
        command += ["--messages", str(args.messages)]
        command += ["--code", str(args.code)] if args.code else []
        out = subprocess.run(command, capture_output=True, text=True, check=True)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"machine: {platform.machine()}, {platform.python_implementation()} {platform.python_version()}, "
          f"{__import__('os').cpu_count()} cores")
    print("| scenario | messages | tokens before → after (budget) | ingest s | first build s | rebuild s | rebuild / first | peak MiB (tracemalloc / RSS) |")
    print("|---|---:|---|---:|---:|---:|---:|---|")
    for r in rows:
        ratio = r["rebuild_s"] / r["build_s"] if r["build_s"] else 0.0
        print(f"| {r['scenario']}: {r['input']} | {r['messages']:,} | {r['tokens_before']:,} → {r['tokens_after']:,} ({r['budget']:,}) "
              f"| {r['ingest_s']:.2f} | {r['build_s']:.2f} | {r['rebuild_s']:.2f} | {ratio:.2f} | {r['tracemalloc_peak_mib']} / {r['max_rss_mib']} |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

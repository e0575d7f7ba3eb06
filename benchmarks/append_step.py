"""Time of one agent step's build at 1k / 10k / 100k stored messages: prefix-stable append vs
rebuild-every-call vs ``langchain_core.messages.trim_messages`` (issue 10), in one run.

Histories are the SWE-bench fixture's steps repeated (``benchmarks/overhead.py``'s
``make_history``, contents clipped to ``--max-chars``). For each size, in one process:

- ``append``: a memory holding the history builds once, then one agent step (an assistant
  tool call and its result) is added and the context built, ``--repeats`` times; only builds
  whose record says ``appended`` count (a compaction, when the budget fills up, is timed
  apart as ``compact``). ``append+record`` adds reading the decision record's per-message
  list, which an appended build builds on first use;
- ``rebuild``: the same step with ``CachePolicy(always_rebuild=True)`` (the behaviour before
  issue 10: a warm build over every stored message);
- ``trim``: ``trim_messages(strategy="last", include_system=True, start_on="human")`` over the
  same messages with a memoised per-message counter (warm), as ``overhead.py`` times it;
- ``client``: one ``chat.completions.create`` through the managed client on an in-process
  mock endpoint, the history passed whole (the memory's sync of the history included).

Medians in milliseconds — wall clock, and CPU time of this process (``time.process_time``,
less disturbed when other jobs share the cores) — and ratios to ``trim``. Timings come from
a shared, loaded machine: compare ratios measured in the same run, not absolute numbers
across runs.

    PYTHONPATH=. nice -n 10 .venv/bin/python benchmarks/append_step.py --sizes 1000,10000,100000 \\
        --out benchmarks/results/append_step.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _trim_baseline import trimmer
from overhead import make_history

from relevance_memory import RelevanceMemoryManager, TiktokenCounter
from relevance_memory._cache_policy import CachePolicy


def new_step(k: int) -> list[dict[str, Any]]:
    """One agent step with fresh call ids."""
    cid = f"call_step_{k}"
    return [
        {"role": "assistant", "content": f"THOUGHT: step {k}, look at the next file.",
         "tool_calls": [{"id": cid, "type": "function", "function": {"name": "bash", "arguments": f'{{"command": "cat f{k}.py"}}'}}]},
        {"role": "tool", "tool_call_id": cid, "name": "bash", "content": f"contents of f{k}.py: x = {k}"},
    ]


def ms(seconds: list[float]) -> float:
    return 1000 * statistics.median(seconds) if seconds else float("nan")


class Clock:
    """Wall-clock and CPU seconds of a block (``with Clock() as c: …``; ``c.wall``, ``c.cpu``)."""

    def __enter__(self) -> Clock:
        self._wall, self._cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self._wall
        self.cpu = time.process_time() - self._cpu


def time_memory(history: list[dict[str, Any]], budget: int, repeats: int, policy: CachePolicy) -> dict[str, Any]:
    memory = RelevanceMemoryManager(max_input_tokens=budget, keep_recent=4, cache_policy=policy)
    memory.extend(history)
    start = time.perf_counter()
    memory.build_context()
    first = time.perf_counter() - start
    appended: list[float] = []
    appended_cpu: list[float] = []
    with_record: list[float] = []
    compacts: list[float] = []
    rebuilds: list[float] = []
    rebuilds_cpu: list[float] = []
    for k in range(repeats):
        memory.extend(new_step(k))
        with Clock() as clock:
            built = memory.build_context()
        if built.record.mode == "appended":
            appended.append(clock.wall)
            appended_cpu.append(clock.cpu)
            with Clock() as reading:
                assert len(built.record.messages) == len(memory.messages)
            with_record.append(clock.wall + reading.wall)
        elif built.record.mode == "compacted":
            compacts.append(clock.wall)
        else:
            rebuilds.append(clock.wall)
            rebuilds_cpu.append(clock.cpu)
    return {"first_build_ms": 1000 * first, "append_ms": ms(appended), "append_cpu_ms": ms(appended_cpu),
            "append_record_ms": ms(with_record), "appends": len(appended), "compact_ms": ms(compacts),
            "compactions": len(compacts), "rebuild_ms": ms(rebuilds), "rebuild_cpu_ms": ms(rebuilds_cpu),
            "rebuilds": len(rebuilds)}


def time_trim(history: list[dict[str, Any]], budget: int, repeats: int) -> tuple[float, float]:
    trim = trimmer(history, budget, TiktokenCounter())
    trim()  # warm the memo
    walls, cpus = [], []
    for _ in range(repeats):
        with Clock() as clock:
            trim()
        walls.append(clock.wall)
        cpus.append(clock.cpu)
    return ms(walls), ms(cpus)


def time_client(history: list[dict[str, Any]], budget: int, repeats: int) -> tuple[float, float]:
    import openai

    from relevance_memory import ManagedOpenAI

    try:
        import httpx2 as httpx
    except ImportError:
        import httpx  # type: ignore[no-redef]

    def answer(request: Any) -> Any:
        return httpx.Response(200, json={"id": "c", "object": "chat.completion", "created": 0, "model": "m",
                                         "choices": [{"index": 0, "finish_reason": "stop",
                                                      "message": {"role": "assistant", "content": "ok"}}]})

    http = httpx.Client(transport=httpx.MockTransport(answer))
    client = ManagedOpenAI(openai.OpenAI(api_key="sk-x", base_url="https://x.invalid/v1", http_client=http),
                           max_input_tokens=budget, keep_recent=4)
    messages = list(history)
    client.chat.completions.create(model="gpt-4o", messages=messages)
    messages.append({"role": "assistant", "content": "ok"})
    walls, cpus = [], []
    for k in range(repeats):
        messages += new_step(10_000 + k)
        with Clock() as clock:
            client.chat.completions.create(model="gpt-4o", messages=messages)
        if client.last_record is not None and client.last_record.mode == "appended":
            walls.append(clock.wall)
            cpus.append(clock.cpu)
        messages.append({"role": "assistant", "content": "ok"})
    return ms(walls), ms(cpus)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--budget", type=int, default=8000)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--rebuild-repeats", type=int, default=3)
    parser.add_argument("--max-chars", type=int, default=400)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    rows = []
    for n in (int(s) for s in args.sizes.split(",")):
        history = make_history(n, args.max_chars)
        row: dict[str, Any] = {"messages": len(history)}
        row.update({f"{k}": v for k, v in time_memory(history, args.budget, args.repeats, CachePolicy()).items()})
        rebuild = time_memory(history, args.budget, args.rebuild_repeats, CachePolicy(always_rebuild=True))
        row["always_rebuild_ms"] = rebuild["rebuild_ms"]
        row["always_rebuild_cpu_ms"] = rebuild["rebuild_cpu_ms"]
        row["trim_ms"], row["trim_cpu_ms"] = time_trim(history, args.budget, args.repeats)
        row["client_append_ms"], row["client_append_cpu_ms"] = time_client(history, args.budget, max(3, args.repeats // 3))
        for key in ("append_ms", "append_record_ms", "always_rebuild_ms", "client_append_ms"):
            row[key.replace("_ms", "_vs_trim")] = row[key] / row["trim_ms"] if row["trim_ms"] else float("nan")
        for key in ("append_cpu_ms", "always_rebuild_cpu_ms", "client_append_cpu_ms"):
            row[key.replace("_ms", "_vs_trim")] = row[key] / row["trim_cpu_ms"] if row["trim_cpu_ms"] else float("nan")
        rows.append(row)
        print(
            f"{row['messages']:>7,} msgs | append {row['append_ms']:.2f} ms wall / {row['append_cpu_ms']:.2f} ms cpu "
            f"({row['appends']} steps; {row['append_vs_trim']:.2f}× / {row['append_cpu_vs_trim']:.2f}× trim) | "
            f"+record {row['append_record_ms']:.1f} ms | compaction {row['compact_ms']:.0f} ms ({row['compactions']}) | "
            f"rebuild every call {row['always_rebuild_ms']:.0f} ms ({row['always_rebuild_vs_trim']:.0f}× trim) | "
            f"trim {row['trim_ms']:.2f} / {row['trim_cpu_ms']:.2f} ms | client call {row['client_append_ms']:.1f} / "
            f"{row['client_append_cpu_ms']:.1f} ms ({row['client_append_vs_trim']:.1f}× trim) | "
            f"first build {row['first_build_ms']:.0f} ms",
            flush=True,
        )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        payload = {"budget": args.budget, "repeats": args.repeats, "max_chars": args.max_chars,
                   "python": platform.python_version(), "rows": rows}
        args.out.write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

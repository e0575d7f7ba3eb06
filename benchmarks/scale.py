"""Scale: ingest, memory, appends, compaction and full rebuild at 10k / 100k / 1M messages
(issue 24), each against tiktoken and ``langchain_core.messages.trim_messages`` on the same
data, in the same run.

Histories (``--kinds``):

- ``repeated``: the django fixture's agent steps repeated (``overhead.py:make_history``,
  contents clipped to ``--max-chars``): the same texts again and again, new call ids;
- ``unique``: the same run, every repetition made unique — each number in a content or a
  tool call's arguments shifted by the repetition (exit statuses aside), and a tag line on
  contents without one — so no content, vector or parsed command repeats.

For each history, two child processes (clean memory figures), one after the other:

``ours``  ``RelevanceMemoryManager(max_input_tokens=--budget, keep_recent=4)``, defaults
    otherwise: *ingest* (one ``extend`` of the whole history, then the vectors it left to the
    first build); *memory per stored message* (the process's RSS growth over ingest, and
    Python's own allocations by ``tracemalloc`` in a third child up to ``--trace-max``
    messages); *first build* (a full rebuild); ``--steps`` agent steps (an assistant tool
    call and its result, ``append_step.new_step``), each added and built: *append* is the
    build of a step that appended (p50 / p99, wall and CPU), *step ingest + build* adds its
    ``extend``; builds that compacted inside the loop are listed apart; then a *requested
    compaction* (``compact=True``) and a *full rebuild* (a new budget). In the same loop,
    *tokenizing the step*: the step's two messages counted by tiktoken
    (``TiktokenCounter.count_message``), the baseline of the append ratios. Last, *a full
    garbage collection*: one ``gc.collect()`` timed, with the objects the collector tracks
    per message, before the ingest (the caller's history and the modules loaded) and at the
    end: the pause of the one step that CPython's own full pass falls in, which 100 steps
    rarely see.
``baselines``  the caller's own dicts (RSS of making the history, and its Python
    allocations up to ``--trace-max``); ``trim_messages`` on the same messages, warm (its
    counter memoised per message, ``_trim_baseline.trimmer``).

Ingest's baseline, tiktoken counting every message of the history (the memory's own counter
and encoding; one full count is also the compaction's baseline), runs in the ``ours`` child
just before the ingest, so both see the same load.

Printed: the machine (CPU, cores, Python, load before and after). Ratios are measured in
one run; absolute times on a shared machine are not comparable across runs.

    PYTHONPATH=. nice -n 10 .venv/bin/python benchmarks/scale.py --sizes 10000,100000,1000000 \\
        --kinds repeated,unique --out benchmarks/results/scale.json
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from overhead import FIXTURE, make_history

_NUMBER = re.compile(r"(?<!<returncode>)\b\d+")
"""A number to shift (not an exit status: a shifted 0 would turn every success into a failure)."""


def make_unique_history(n: int, max_chars: int) -> list[dict[str, Any]]:
    """:func:`make_history` with every repetition made unique (module doc)."""
    history = make_history(n, max_chars)
    head = 2  # the system prompt and the task stay as they are
    run_length = len(json.loads(FIXTURE.read_text(encoding="utf-8"))["messages"]) - head  # one repetition

    def shift(text: str, rep: int) -> str:
        if rep == 0:
            return text
        varied = _NUMBER.sub(lambda m: str(int(m.group()) + rep), text)
        return varied if varied != text else f"{text}\n[run {rep}]"

    out = history[:head]
    for i, message in enumerate(history[head:]):
        rep = i // run_length
        m = dict(message)
        if isinstance(m.get("content"), str) and m["content"]:
            m["content"] = shift(m["content"], rep)
        if m.get("tool_calls"):
            m["tool_calls"] = [
                {**c, "function": {**c["function"], "arguments": _NUMBER.sub(
                    lambda x, r=rep: str(int(x.group()) + r), c["function"]["arguments"])}}
                for c in m["tool_calls"]
            ]
        out.append(m)
    return out


def history_of(kind: str, n: int, max_chars: int) -> list[dict[str, Any]]:
    return make_unique_history(n, max_chars) if kind == "unique" else make_history(n, max_chars)


# --------------------------------------------------------------------------- measuring
def rss_bytes() -> int:
    """Resident set size of this process now (bytes)."""
    with open("/proc/self/statm", encoding="ascii") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def timed(fn: Callable[[], Any]) -> tuple[float, float, Any]:
    """``(wall s, cpu s, result)`` of ``fn()``."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, result


def pct(values: list[float], q: float) -> float:
    """The ``q`` quantile (nearest rank) of ``values``; NaN when empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


class GcPauses:
    """Time spent in the garbage collector since :meth:`reset` (``gc.callbacks``; seconds)."""

    def __init__(self) -> None:
        self.total = 0.0
        self.oldest = -1  # the oldest generation collected since reset (-1: none)
        self._start = 0.0
        gc.callbacks.append(self._callback)

    def reset(self) -> None:
        self.total, self.oldest = 0.0, -1

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.total += time.perf_counter() - self._start
            self.oldest = max(self.oldest, info["generation"])


def child_ours(kind: str, n: int, args: argparse.Namespace) -> dict[str, Any]:
    from append_step import new_step

    from relevance_memory import RelevanceMemoryManager, TiktokenCounter

    history = history_of(kind, n, args.max_chars)
    memory = RelevanceMemoryManager(max_input_tokens=args.budget, keep_recent=4)
    memory.extend(history[:2])  # load the encoding and the embedding model outside the timings
    counter = TiktokenCounter(memory.config.resolved_encoding)
    # the baseline in the same process, just before: tiktoken counting every message
    wall, cpu, _ = timed(lambda: [counter.count_message(m) for m in history])
    tiktoken = {"tiktoken_s": wall, "tiktoken_cpu_s": cpu}
    # the collector's full pass before the ingest: the caller's history and the modules loaded
    caller = {f"caller_{k}": v for k, v in full_collection(len(history)).items()}
    before = rss_bytes()
    wall, cpu, _ = timed(lambda: (memory.extend(history[2:]), memory.store.message_vectors()))
    gc.collect()
    row: dict[str, Any] = {**tiktoken, **caller, "messages": len(history), "ingest_s": wall, "ingest_cpu_s": cpu,
                           "rss_per_message_b": (rss_bytes() - before) / (len(history) - 2),
                           "history_tokens": sum(m.token_count for m in memory.messages)}
    if args.only == "ingest":
        return row
    wall, cpu, built = timed(memory.build_context)
    row.update(first_build_s=wall, first_build_cpu_s=cpu, first_build_mode=built.record.mode,
               peak_rss_first_build_mib=peak_rss_bytes() / 2**20)  # the target's scope: ingest and first build
    if args.gc_freeze:  # the caller's choice after a large ingest: the history's objects leave the collector's scans
        gc.collect()
        gc.freeze()
    pauses = GcPauses()
    appends: list[float] = []
    appends_cpu: list[float] = []
    append_gc: list[float] = []
    append_gc_generations: list[int] = []
    compactions_cpu: list[float] = []
    step_totals: list[float] = []
    tokenize: list[float] = []
    tokenize_cpu: list[float] = []
    compactions: list[float] = []
    for k in range(args.steps):
        step = new_step(k)
        tok, tok_cpu, _ = timed(lambda s=step: [counter.count_message(m) for m in s])
        tokenize.append(tok)
        tokenize_cpu.append(tok_cpu)
        ingest, _, _ = timed(lambda s=step: memory.extend(s))
        pauses.reset()
        wall, cpu, built = timed(memory.build_context)
        if built.record.mode == "appended":
            appends.append(wall)
            appends_cpu.append(cpu)
            append_gc.append(pauses.total)
            append_gc_generations.append(pauses.oldest)
            step_totals.append(ingest + wall)
        else:
            compactions.append(wall)
            compactions_cpu.append(cpu)
    row.update(
        append_p50_ms=1e3 * pct(appends, 0.5), append_p99_ms=1e3 * pct(appends, 0.99),
        append_cpu_p50_ms=1e3 * pct(appends_cpu, 0.5), append_cpu_p99_ms=1e3 * pct(appends_cpu, 0.99),
        step_total_p50_ms=1e3 * pct(step_totals, 0.5), step_total_p99_ms=1e3 * pct(step_totals, 0.99),
        appends=len(appends), loop_compactions_s=compactions,
        append_gc_p99_ms=1e3 * pct(append_gc, 0.99), append_gc_max_ms=1e3 * max(append_gc, default=0.0),
        append_gc_steps=sum(1 for g in append_gc if g > 0), gc_frozen=gc.get_freeze_count(),
        append_gc_generations={str(g): append_gc_generations.count(g) for g in sorted(set(append_gc_generations))},
        loop_compactions_cpu_s=compactions_cpu,
        tokenize_step_p50_ms=1e3 * pct(tokenize, 0.5), tokenize_step_p99_ms=1e3 * pct(tokenize, 0.99),
        tokenize_step_cpu_p50_ms=1e3 * pct(tokenize_cpu, 0.5),
    )
    wall, cpu, built = timed(lambda: memory.build_context(compact=True))
    if built.record.mode != "compacted" and compactions:
        # the loop compacted just before: too little to free now (clear_at_least); its newest compaction stands in
        wall, cpu = compactions[-1], compactions_cpu[-1]
        row["compaction_from_loop"] = True
    row.update(compaction_s=wall, compaction_cpu_s=cpu,
               compaction_mode="compacted" if row.get("compaction_from_loop") else built.record.mode)
    wall, cpu, built = timed(lambda: memory.build_context(budget=args.budget - 100))
    row.update(full_rebuild_s=wall, full_rebuild_cpu_s=cpu, full_rebuild_mode=built.record.mode)
    row["peak_rss_mib"] = peak_rss_bytes() / 2**20
    row.update(full_collection(len(history)))
    return row


def full_collection(messages: int) -> dict[str, Any]:
    """One full pass of the cyclic garbage collector, timed (ms), and the objects it tracks
    per message of the history (``messages``): the pause of the step that CPython's own full
    pass falls in (it comes when the objects that outlived the young generations grow by a
    quarter of the old ones: every ~1,100 agent steps at 20,000 messages here)."""
    gc.collect()
    tracked = len(gc.get_objects())
    wall, cpu, _ = timed(gc.collect)
    return {"full_gc_ms": 1e3 * wall, "full_gc_cpu_ms": 1e3 * cpu, "gc_tracked_per_message": tracked / messages}


def child_tracemalloc(kind: str, n: int, args: argparse.Namespace) -> dict[str, Any]:
    import tracemalloc

    from relevance_memory import RelevanceMemoryManager

    history = history_of(kind, n, args.max_chars)
    memory = RelevanceMemoryManager(max_input_tokens=args.budget, keep_recent=4)
    memory.extend(history[:2])
    gc.collect()
    tracemalloc.start()
    start = tracemalloc.get_traced_memory()[0]
    memory.extend(history[2:])
    memory.store.message_vectors()
    gc.collect()
    after_ingest = tracemalloc.get_traced_memory()[0]
    count = len(history) - 2
    if args.only == "ingest":
        tracemalloc.stop()
        return {"py_per_message_b": (after_ingest - start) / count}
    memory.build_context()
    gc.collect()
    after_build = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return {"py_per_message_b": (after_ingest - start) / count, "py_per_message_after_build_b": (after_build - start) / count}


def child_baselines(kind: str, n: int, args: argparse.Namespace) -> dict[str, Any]:
    import tracemalloc

    from _trim_baseline import trimmer

    from relevance_memory import TiktokenCounter
    from relevance_memory._config import MemoryConfig

    counter = TiktokenCounter(MemoryConfig(max_input_tokens=args.budget).resolved_encoding)
    counter.count_text("warm up")
    gc.collect()
    before = rss_bytes()
    history = history_of(kind, n, args.max_chars)
    gc.collect()
    row: dict[str, Any] = {"caller_rss_per_message_b": (rss_bytes() - before) / len(history)}
    if n <= args.trace_max:
        tracemalloc.start()
        start = tracemalloc.get_traced_memory()[0]
        copy = history_of(kind, n, args.max_chars)
        row["caller_py_per_message_b"] = (tracemalloc.get_traced_memory()[0] - start) / len(copy)
        tracemalloc.stop()
        del copy
    trim = trimmer(history, args.budget, counter)
    trim()  # warm the memo
    walls = [timed(trim)[0] for _ in range(3)]
    row["trim_warm_s"] = statistics.median(walls)
    row["peak_rss_mib_baselines"] = peak_rss_bytes() / 2**20
    return row


CHILDREN = {"ours": child_ours, "baselines": child_baselines, "tracemalloc": child_tracemalloc}


def run_child(role: str, kind: str, n: int, argv: list[str]) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, *argv, "--child", f"{role}:{kind}:{n}"], check=True, capture_output=True, text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")])},
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def machine() -> dict[str, Any]:
    model = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            model = next((line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")), "")
    except OSError:
        pass
    return {"cpu": model or platform.processor(), "cores": os.cpu_count(), "python": platform.python_version(),
            "platform": platform.platform(), "load_before": os.getloadavg()}


def summarise_ingest(row: dict[str, Any]) -> str:
    """The ingest and memory lines of :func:`summarise` (``--only ingest``)."""
    tok_msg = row["tiktoken_s"] / row["messages"]
    ours_msg = row["ingest_s"] / row["messages"]
    return "\n".join([
        f"{row['kind']:>8} {row['messages']:>9,} msgs {row['history_tokens']:>12,} tok",
        f"  ingest {row['ingest_s']:.2f} s ({1e3 * ours_msg:.3f} ms/msg; {ours_msg / tok_msg:.1f}x tiktoken "
        f"{1e3 * tok_msg:.3f} ms/msg; cpu {row['ingest_cpu_s'] / row['tiktoken_cpu_s']:.2f}x: "
        f"{1e3 * row['ingest_cpu_s'] / row['messages']:.3f} vs {1e3 * row['tiktoken_cpu_s'] / row['messages']:.3f} ms/msg)",
        f"  memory {row['rss_per_message_b'] / 1024:.2f} KiB RSS/msg"
        + (f", {row['py_per_message_b'] / 1024:.2f} KiB Python/msg" if "py_per_message_b" in row else ""),
    ])


def summarise(row: dict[str, Any]) -> str:
    tok_msg = row["tiktoken_s"] / row["messages"]
    ours_msg = row["ingest_s"] / row["messages"]
    lines = [
        f"{row['kind']:>8} {row['messages']:>9,} msgs {row['history_tokens']:>12,} tok",
        f"  ingest {row['ingest_s']:.1f} s ({1e3 * ours_msg:.3f} ms/msg; {ours_msg / tok_msg:.1f}x tiktoken "
        f"{1e3 * tok_msg:.3f} ms/msg; cpu {row['ingest_cpu_s'] / row['tiktoken_cpu_s']:.1f}x: "
        f"{1e3 * row['ingest_cpu_s'] / row['messages']:.3f} vs {1e3 * row['tiktoken_cpu_s'] / row['messages']:.3f} ms/msg)",
        f"  memory {row['rss_per_message_b'] / 1024:.2f} KiB RSS/msg"
        + (f", {row['py_per_message_b'] / 1024:.2f} KiB Python/msg ({row['py_per_message_after_build_b'] / 1024:.2f} after a build)"
           if "py_per_message_b" in row else "")
        + f"; caller's dicts {row['caller_rss_per_message_b'] / 1024:.2f} KiB RSS/msg"
        + (f" ({row['caller_py_per_message_b'] / 1024:.2f} KiB Python)" if "caller_py_per_message_b" in row else "")
        + f"; peak RSS {row['peak_rss_first_build_mib']:,.0f} MiB through the first build, "
        f"{row['peak_rss_mib']:,.0f} MiB by the end (after the loop, a compaction and a full rebuild)",
        f"  first build {row['first_build_s']:.2f} s ({row['first_build_mode']}); ingest + first build "
        f"{row['ingest_s'] + row['first_build_s']:.1f} s",
        f"  append p50 {row['append_p50_ms']:.2f} ms p99 {row['append_p99_ms']:.2f} ms (cpu {row['append_cpu_p50_ms']:.2f} / "
        f"{row['append_cpu_p99_ms']:.2f}) over {row['appends']} appends; tokenizing the step p50 "
        f"{row['tokenize_step_p50_ms']:.3f} ms -> p99 {row['append_p99_ms'] / row['tokenize_step_p50_ms']:.0f}x "
        f"(p50 {row['append_p50_ms'] / row['tokenize_step_p50_ms']:.0f}x; cpu p99 {row['append_cpu_p99_ms']:.2f} ms / "
        f"{row['tokenize_step_cpu_p50_ms']:.3f} ms = {row['append_cpu_p99_ms'] / row['tokenize_step_cpu_p50_ms']:.0f}x); "
        f"step ingest+build p50 "
        f"{row['step_total_p50_ms']:.2f} p99 {row['step_total_p99_ms']:.2f} ms; garbage collection in "
        f"{row['append_gc_steps']} appends (oldest generation: appends {row.get('append_gc_generations', {})}), "
        f"p99 {row['append_gc_p99_ms']:.2f} ms, max {row['append_gc_max_ms']:.2f} ms"
        f"{' (gc.freeze() after the first build)' if row['gc_frozen'] else ''}; compactions in the loop "
        f"{', '.join(f'{s:.2f} s' for s in row['loop_compactions_s']) or 'none'}",
        f"  compaction {row['compaction_s']:.2f} s ({row['compaction_mode']}"
        f"{'; the newest compaction of the loop' if row.get('compaction_from_loop') else ''}; "
        f"{row['compaction_s'] / row['tiktoken_s']:.2f}x tiktoken counting the history {row['tiktoken_s']:.2f} s; cpu "
        f"{row['compaction_cpu_s']:.2f} s = {row['compaction_cpu_s'] / row['tiktoken_cpu_s']:.2f}x {row['tiktoken_cpu_s']:.2f} s; "
        f"{row['compaction_s'] / row['trim_warm_s']:.0f}x trim_messages "
        f"warm {1e3 * row['trim_warm_s']:.1f} ms); full rebuild {row['full_rebuild_s']:.2f} s ({row['full_rebuild_mode']})",
    ]
    if "full_gc_ms" in row:
        lines.append(
            f"  a full garbage collection at the end {row['full_gc_ms']:.0f} ms (cpu {row['full_gc_cpu_ms']:.0f}), "
            f"{row['gc_tracked_per_message']:.1f} tracked objects a message; before the ingest (the caller's history "
            f"and the modules) {row['caller_full_gc_ms']:.0f} ms, {row['caller_gc_tracked_per_message']:.1f} a message"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--kinds", default="repeated,unique")
    parser.add_argument("--budget", type=int, default=8000)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--max-chars", type=int, default=400)
    parser.add_argument("--trace-max", type=int, default=100_000, help="tracemalloc pass up to this many messages")
    parser.add_argument("--gc-freeze", action="store_true",
                        help="gc.freeze() after the ingest and first build (what a caller holding a large history may do)")
    parser.add_argument("--only", choices=["ingest"], default=None,
                        help="ingest only: tiktoken, ingest and its memory (no baselines, builds, appends or compaction)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        role, kind, n = args.child.split(":")
        print(json.dumps(CHILDREN[role](kind, int(n), args)))
        return 0
    argv = [f"--budget={args.budget}", f"--steps={args.steps}", f"--max-chars={args.max_chars}", f"--trace-max={args.trace_max}",
            *(["--gc-freeze"] if args.gc_freeze else []), *([f"--only={args.only}"] if args.only else [])]
    info = machine()
    print(f"machine: {info['cpu']}, {info['cores']} cores, Python {info['python']}, load {info['load_before']}", flush=True)
    rows = []
    for kind in args.kinds.split(","):
        for n in (int(s) for s in args.sizes.split(",")):
            row: dict[str, Any] = {"kind": kind, "load_before": os.getloadavg()}
            if args.only is None:
                row.update(run_child("baselines", kind, n, argv))
            row.update(run_child("ours", kind, n, argv))
            if n <= args.trace_max:
                row.update(run_child("tracemalloc", kind, n, argv))
            row["load_after"] = os.getloadavg()
            rows.append(row)
            text = summarise_ingest(row) if args.only == "ingest" else summarise(row)
            print(text, f"\n  load {row['load_before']} -> {row['load_after']}", flush=True)
            if args.out:  # after every row: a long run stopped midway keeps what it measured
                write(args, info, rows)
    info["load_after"] = os.getloadavg()
    if args.out:
        write(args, info, rows)
    return 0


def write(args: argparse.Namespace, info: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    args.out.parent.mkdir(parents=True, exist_ok=True)
    payload = {"machine": info, "budget": args.budget, "steps": args.steps, "max_chars": args.max_chars,
               "gc_freeze": args.gc_freeze, "rows": rows}
    args.out.write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    raise SystemExit(main())

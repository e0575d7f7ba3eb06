"""Memory-board throughput and snapshot latency: in-memory vs a local Redis, 1/4/16 writers,
each beside the limit of what it is built on, measured in the same run.

For each backend and writer count, every writer applies batches of ``--batch`` deposits
(each on a random item of ``--items``, a fresh subtask each time, so every deposit is
effective) plus one reinforcement, for ``--seconds``; meanwhile one reader takes
snapshots of ``--read`` random ids. The backends take turns, ``--rounds`` times, so all of
them see the same machine load; reported per backend: the median over rounds of deposits
applied per second (all writers) and batches per second, and the snapshot latency p50 / p99
(ms) of all the reader's reads under that load. In-memory writers are threads of one process (the board lives in it); Redis writers
are separate processes, each with its own connection, against one ``redis-server`` this
script starts on 127.0.0.1 and a random free port (and stops).

The limits, same writers, same random items, same reader:

- ``dict+lock``: the same 11 updates as ``+=`` on a dict behind a lock (threads); the reader
  takes the 100 values under the lock — the floor of an in-process board;
- ``min script``: a Lua script doing the same 11 updates as ``HINCRBYFLOAT`` (one call per
  batch, like ours); the reader sends a raw ``HMGET`` of the 100 ids to the board's cells
  hash (the same bytes a snapshot reads, not decoded) — the floor of an atomic batch;
- ``pipelined``: the 11 ``HINCRBYFLOAT`` in one pipeline (not atomic); the reader as above.

``p50 ÷ raw HMGET`` is the snapshot's p50 under our writers over the raw ``HMGET``'s under the
minimal script's writers (the issue's ratio: it also carries our batches' heavier server load,
the reads waiting behind longer scripts); in brackets, over a raw ``HMGET`` of the same ids that
the reader sends beside each snapshot, under the same writers: what the snapshot itself adds.

``batches/s ÷ min script`` is the ratio of the medians, then (per round) the median of the
rounds' own ratios: the backends of one round run back to back, so a round's ratio sees
one load even when the load swings 2–5× between rounds.

For the Redis rows, ``CPU µs/batch`` is the CPU the writers and the server spent per batch
(``process_time`` of each writer process, the server's ``used_cpu_user + used_cpu_sys``;
the reader's reads and the harness's queue are in it, the same for every row): on a shared,
loaded machine it moves much less than the batches/s, which follow the other tenants.

The reader pauses 0.5 ms between reads (a build does other work between snapshots; without
the pause a spinning reader's p99 is CPython's 5 ms GIL switch interval, not the board).

Then the size sweep: a board of 10k and 100k items, and the time of one snapshot of all
of them (ids given: one pipelined ``HMGET``).

    python benchmarks/board_throughput.py                 # the BENCHMARKS.md table
    python benchmarks/board_throughput.py --rounds 1 --writers 1 4 --sizes 10000   # quick
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from typing import Any

from relevance_memory.board import Add, BoardConfig, Deposit, InMemoryBoard, MemoryBoard, RedisBoard, Reinforce

SCOPE = "shared"
PAUSE_S = 0.0005
SLOW_OK = {"socket_timeout": 30.0, "socket_connect_timeout": 30.0}  # a loaded box must not trip the breaker
MIN_SCRIPT = "for i = 1, #ARGV do redis.call('HINCRBYFLOAT', KEYS[1], ARGV[i], 1) end return #ARGV"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_redis() -> tuple[subprocess.Popen[bytes], str, str]:
    binary = shutil.which("redis-server")
    if binary is None:
        sys.exit("redis-server is not on PATH (Debian: apt-get install redis-server)")
    port, folder = _free_port(), tempfile.mkdtemp(prefix="relmem-bench-")
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", folder], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    for _ in range(200):
        try:
            RedisBoard.from_url(url).client.ping()
            return proc, url, folder
        except Exception:
            time.sleep(0.05)
    proc.kill()
    sys.exit("redis-server did not start")


def _ops(rng: random.Random, writer: str, k: int, items: int, batch: int) -> list[Any]:
    ops: list[Any] = [Deposit(SCOPE, f"m{rng.randrange(items)}", rng.choice((3, 4, 5)), f"{writer}-{k}-{j}",
                              "the task", writer, at=float(k)) for j in range(batch)]
    ops.append(Reinforce(SCOPE, f"m{rng.randrange(items)}", writer, at=float(k)))
    return ops


def _write(board: MemoryBoard, writer: str, seconds: float, items: int, batch: int, start: Any
           ) -> tuple[int, int, float]:
    rng = random.Random(writer)
    start.wait()
    deadline = time.perf_counter() + seconds
    n = deposits = 0
    while time.perf_counter() < deadline:
        got = board.apply(_ops(rng, writer, n, items, batch))
        deposits += sum(1 for o in got.outcomes if o == "deposited")
        n += 1
    return n, deposits, time.process_time()  # the writer's CPU (a process of its own for Redis)


class _Limit:
    """The limit backends' write side, shaped like a board's ``apply``: the same 11 item ids."""

    def __init__(self, kind: str, url: str | None, name: str, lock: Any = None, table: Any = None) -> None:
        self.kind, self.lock, self.table = kind, lock, table
        if url is not None:
            import redis

            self.client = redis.Redis.from_url(url)
            self.key = f"limit:{{{name}}}"
            self.script = self.client.register_script(MIN_SCRIPT)

    def apply(self, ops: list[Any]) -> Any:
        ids = [op.id for op in ops]
        if self.kind == "dict+lock":
            with self.lock:
                for i in ids:
                    self.table[i] = self.table.get(i, 0.0) + 1.0
        elif self.kind == "min script":
            self.script(keys=[self.key], args=ids)
        else:
            pipe = self.client.pipeline(transaction=False)
            for i in ids:
                pipe.hincrbyfloat(self.key, i, 1.0)
            pipe.execute()
        return _Done(tuple("deposited" for _ in ids[:-1]))


class _Done:
    def __init__(self, outcomes: tuple[str, ...]) -> None:
        self.outcomes = outcomes


def _redis_writer(url: str, name: str, writer: str, seconds: float, items: int, batch: int, start: Any,
                  out: Any, kind: str) -> None:
    board: Any = RedisBoard.from_url(url, name, BoardConfig(agent_share=None), **SLOW_OK) if kind == "redis" else \
        _Limit(kind, url, name)
    out.put(_write(board, writer, seconds, items, batch, start))


def _read(snapshot: Any, seconds: float, items: int, read: int, start: Any, raw: Any = None
          ) -> tuple[list[float], list[float]]:
    """The reader: snapshot latencies (ms), and with ``raw`` (a raw ``HMGET`` of the same ids)
    that read's latencies under the same writers, taken beside each snapshot (which of the two
    goes first alternates, so neither always follows the pause)."""
    rng = random.Random(7)
    start.wait()
    lat: list[float] = []
    raw_lat: list[float] = []
    deadline = time.perf_counter() + seconds
    k = 0
    while time.perf_counter() < deadline:
        ids = [f"m{rng.randrange(items)}" for _ in range(read)]
        time.sleep(PAUSE_S)
        for call in ((raw, snapshot) if k % 2 else (snapshot, raw)):
            if call is None:
                continue
            t0 = time.perf_counter()
            call(ids)
            (lat if call is snapshot else raw_lat).append((time.perf_counter() - t0) * 1000)
        k += 1
    return lat, raw_lat


def _server_cpu(url: str | None) -> float:
    import redis

    info = redis.Redis.from_url(url).info("cpu")  # type: ignore[arg-type]
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def _reader(kind: str, board: Any, lock: Any, table: Any) -> Any:
    if kind in ("memory", "redis"):
        return lambda ids: board.snapshot(SCOPE, ids, agent="reader", goal="the task", subtask="now")
    if kind == "dict+lock":
        def under_lock(ids: list[str]) -> list[Any]:
            with lock:
                return [table.get(i) for i in ids]
        return under_lock
    return _raw_reader(board)


def _raw_reader(board: Any) -> Any:
    """A raw ``HMGET`` of ids from the board's cells hash: the same bytes a snapshot reads, not decoded."""
    raw = getattr(board, "_raw", board.client)  # (a tree before _raw: its client)
    key = board.key("cells", SCOPE)
    return lambda ids: raw.hmget(key, ids)


def _seed(board: MemoryBoard, items: int) -> None:
    for lo in range(0, items, 1000):
        board.apply([Add(SCOPE, f"m{i}", "tool_result", "seed") for i in range(lo, min(items, lo + 1000))])


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def run_load(backend: str, writers: int, url: str | None, args: argparse.Namespace) -> dict[str, Any]:
    config = BoardConfig(agent_share=None)
    name = f"bench-{uuid.uuid4().hex[:8]}"
    in_process = backend in ("memory", "dict+lock")
    board: Any = InMemoryBoard(name, config) if in_process else RedisBoard.from_url(url, name, config, **SLOW_OK)  # type: ignore[arg-type]
    lock, table = threading.Lock(), {}
    if backend != "dict+lock":
        _seed(board, args.items)
    results: list[tuple[int, int, float]] = []
    snapshot = _reader(backend, board, lock, table)
    if in_process:
        target = board if backend == "memory" else _Limit(backend, None, name, lock, table)
        start = threading.Barrier(writers + 1)
        threads = [threading.Thread(target=lambda w=w: results.append(
            _write(target, f"w{w}", args.seconds, args.items, args.batch, start))) for w in range(writers)]
        for t in threads:
            t.start()
        lat, raw_lat = _read(snapshot, args.seconds, args.items, args.read, start)
        for t in threads:
            t.join()
    else:
        ctx = multiprocessing.get_context("fork")
        pstart, out = ctx.Barrier(writers + 1), ctx.Queue()
        server_before = _server_cpu(url)
        procs = [ctx.Process(target=_redis_writer, args=(url, name, f"w{w}", args.seconds, args.items, args.batch,
                                                         pstart, out, backend)) for w in range(writers)]
        for p in procs:
            p.start()
        lat, raw_lat = _read(snapshot, args.seconds, args.items, args.read, pstart,
                             _raw_reader(board) if backend == "redis" else None)
        results = [out.get(timeout=120) for _ in procs]
        cpu_client = sum(c for _, _, c in results)
        cpu_server = _server_cpu(url) - server_before
        for p in procs:
            p.join()
    batches = sum(n for n, _, _ in results)
    deposits = sum(d for _, d, _ in results)
    board.close()
    return {"backend": backend, "writers": writers, "deposits_per_s": deposits / args.seconds,
            "batches_per_s": batches / args.seconds, "snapshot_p50_ms": _pct(lat, 0.5),
            "snapshot_p99_ms": _pct(lat, 0.99), "snapshots": len(lat), "latencies_ms": lat, "raw_latencies_ms": raw_lat,
            "cpu_us_per_batch": None if in_process else 1e6 * (cpu_client + cpu_server) / max(batches, 1),
            "server_cpu_us_per_batch": None if in_process else 1e6 * cpu_server / max(batches, 1)}


BACKENDS = ("dict+lock", "memory", "min script", "pipelined", "redis")


def _median(backend: str, writers: int, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One row from a backend's rounds: median rates and CPU, percentiles of all reads pooled."""
    lat = [x for r in runs for x in r.pop("latencies_ms")]
    raw = [x for r in runs for x in r.pop("raw_latencies_ms")]
    out: dict[str, Any] = {"backend": backend, "writers": writers, "rounds": len(runs),
                           "snapshot_p50_ms": _pct(lat, 0.5), "snapshot_p99_ms": _pct(lat, 0.99), "snapshots": len(lat)}
    if raw:  # the raw HMGET beside each snapshot, under the same writers
        out["raw_hmget_same_load_p50_ms"] = _pct(raw, 0.5)
    for key in ("deposits_per_s", "batches_per_s", "cpu_us_per_batch", "server_cpu_us_per_batch"):
        values = [r[key] for r in runs if r[key] is not None]
        out[key] = statistics.median(values) if values else None
        out[f"{key}_rounds"] = [r[key] for r in runs]
    return out


def script_time(url: str, args: argparse.Namespace, batches: int = 300, turns: int = 3) -> dict[str, Any]:
    """Server time of one batch's script (``INFO commandstats`` usec_per_call of EVALSHA),
    ours and the minimal script in turns, one writer, no reader: what the server spends
    inside the script, apart from the network and the scheduling of a loaded machine."""
    import redis

    stats = redis.Redis.from_url(url)
    name = f"lua-{uuid.uuid4().hex[:8]}"
    ours = RedisBoard.from_url(url, name, BoardConfig(agent_share=None), **SLOW_OK)
    _seed(ours, args.items)
    limit = _Limit("min script", url, name)
    rng = random.Random(3)
    out: dict[str, list[float]] = {"redis": [], "min script": []}
    k = 0
    for _ in range(turns):
        for label, board in (("min script", limit), ("redis", ours)):
            stats.config_resetstat()
            for _ in range(batches):
                board.apply(_ops(rng, "w", k, args.items, args.batch))
                k += 1
            out[label].append(float(stats.info("commandstats")["cmdstat_evalsha"]["usec_per_call"]))
    ours.close()
    return {label: statistics.median(v) for label, v in out.items()} | {"turns": out}


def run_size(backend: str, size: int, url: str | None) -> dict[str, Any]:
    name = f"size-{uuid.uuid4().hex[:8]}"
    board: MemoryBoard = InMemoryBoard(name) if backend == "memory" else RedisBoard.from_url(url, name, **SLOW_OK)  # type: ignore[arg-type]
    t0 = time.perf_counter()
    _seed(board, size)
    seeded = time.perf_counter() - t0
    ids = [f"m{i}" for i in range(size)]
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        snap = board.snapshot(SCOPE, ids, agent="reader", goal="the task")
        times.append(time.perf_counter() - t0)
    assert len(snap.cells) == size
    board.close()
    return {"backend": backend, "items": size, "seed_s": seeded, "snapshot_all_s": statistics.median(times)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--writers", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--seconds", type=float, default=1.0, help="seconds per round")
    parser.add_argument("--rounds", type=int, default=5,
                        help="rounds per writer count, the backends taking turns within each (they see the same load)")
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--read", type=int, default=100, help="ids per snapshot")
    parser.add_argument("--sizes", type=int, nargs="*", default=[10_000, 100_000])
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    proc, url, folder = start_redis()
    print(f"{platform.platform()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}, "
          f"Python {platform.python_version()}")
    rows, sizes = [], []
    lua: dict[str, Any] = {}
    try:
        version = RedisBoard.from_url(url).client.info("server")["redis_version"]
        print(f"redis-server {version} on {url}; {args.items} items, batches of {args.batch} deposits + 1 "
              f"reinforcement, {args.rounds} rounds of {args.seconds:g} s per cell (backends in turn; medians, "
              f"reads pooled), snapshots of {args.read} ids")
        print("| backend | writers | deposits/s | batches/s | snapshot p50 ms | snapshot p99 ms | snapshots "
              "| CPU µs/batch (server) | batches/s ÷ min script | p50 ÷ raw HMGET |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for writers in args.writers:
            runs: dict[str, list[dict[str, Any]]] = {b: [] for b in BACKENDS}
            for _ in range(args.rounds):
                for backend in BACKENDS:
                    runs[backend].append(run_load(backend, writers, url, args))
            got = {backend: _median(backend, writers, rs) for backend, rs in runs.items()}
            for backend, r in got.items():
                rows.append(r)
                ratios = " | "
                cpu = "" if r["cpu_us_per_batch"] is None else \
                    f"{r['cpu_us_per_batch']:,.0f} ({r['server_cpu_us_per_batch']:,.0f})"
                if backend == "redis":
                    limit = got["min script"]
                    r["vs_min_script"] = r["batches_per_s"] / limit["batches_per_s"]
                    # the same ratio taken round by round (the backends of one round ran back to
                    # back, under the same load), then the median: steadier on a busy machine
                    r["vs_min_script_per_round"] = statistics.median(
                        a / b for a, b in zip(r["batches_per_s_rounds"], limit["batches_per_s_rounds"], strict=True))
                    r["vs_raw_hmget"] = r["snapshot_p50_ms"] / limit["snapshot_p50_ms"]
                    r["vs_raw_hmget_same_load"] = r["snapshot_p50_ms"] / r["raw_hmget_same_load_p50_ms"]
                    r["cpu_vs_min_script"] = r["cpu_us_per_batch"] / limit["cpu_us_per_batch"]
                    ratios = (f"{r['vs_min_script']:.0%} (per round {r['vs_min_script_per_round']:.0%}; "
                              f"CPU {r['cpu_vs_min_script']:.1f}×) | {r['vs_raw_hmget']:.1f}× "
                              f"(under these writers {r['vs_raw_hmget_same_load']:.1f}×)")
                elif backend == "memory":
                    r["p99_vs_dict"] = r["snapshot_p99_ms"] / got["dict+lock"]["snapshot_p99_ms"]
                print(f"| {backend} | {writers} | {r['deposits_per_s']:,.0f} | {r['batches_per_s']:,.0f} | "
                      f"{r['snapshot_p50_ms']:.2f} | {r['snapshot_p99_ms']:.2f} | {r['snapshots']:,} | {cpu} | {ratios} |",
                      flush=True)
        lua = script_time(url, args)
        print(f"\nscript server time per batch (usec_per_call, median of 3 turns of 300 batches): ours "
              f"{lua['redis']:.0f} µs, minimal script {lua['min script']:.0f} µs ({lua['redis'] / lua['min script']:.1f}×)")
        if args.sizes:
            print("\n| backend | items | seed s (Adds, batches of 1000) | snapshot of all ids s |")
            print("|---|---:|---:|---:|")
        for size in args.sizes:
            for backend in ("memory", "redis"):
                r = run_size(backend, size, url)
                sizes.append(r)
                print(f"| {backend} | {size:,} | {r['seed_s']:.2f} | {r['snapshot_all_s']:.3f} |", flush=True)
    finally:
        proc.terminate()
        proc.wait()
        shutil.rmtree(folder, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"load": rows, "script_time_us": lua, "sizes": sizes}, f, indent=2)


if __name__ == "__main__":
    main()

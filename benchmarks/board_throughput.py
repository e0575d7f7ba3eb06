"""Memory-board throughput and snapshot latency: in-memory vs a local Redis, 1/4/16 writers.

For each backend and writer count, every writer applies batches of ``--batch`` deposits
(each on a random item of ``--items``, a fresh subtask each time, so every deposit is
effective) plus one reinforcement, for ``--seconds``; meanwhile one reader takes
snapshots of ``--read`` random ids. Reported: deposits applied per second (all writers),
batches per second, and the snapshot latency p50 / p99 (ms) seen by the reader under that
load. In-memory writers are threads of one process (the board lives in it); Redis writers
are separate processes, each with its own connection, against one ``redis-server`` this
script starts on 127.0.0.1 and a random free port (and stops).

Then the size sweep: a board of 10k and 100k items, and the time of one snapshot of all
of them (ids given: one pipelined ``HMGET``).

    python benchmarks/board_throughput.py                 # the BENCHMARKS.md table
    python benchmarks/board_throughput.py --seconds 1 --writers 1 4 --sizes 10000   # quick
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
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


def _write(board: MemoryBoard, writer: str, seconds: float, items: int, batch: int, start: Any) -> tuple[int, int]:
    rng = random.Random(writer)
    start.wait()
    deadline = time.perf_counter() + seconds
    n = deposits = 0
    while time.perf_counter() < deadline:
        got = board.apply(_ops(rng, writer, n, items, batch))
        deposits += sum(1 for o in got.outcomes if o == "deposited")
        n += 1
    return n, deposits


def _redis_writer(url: str, name: str, writer: str, seconds: float, items: int, batch: int, start: Any,
                  out: Any) -> None:
    board = RedisBoard.from_url(url, name, BoardConfig(agent_share=None))
    out.put(_write(board, writer, seconds, items, batch, start))
    board.close()


def _read(board: MemoryBoard, seconds: float, items: int, read: int, start: Any) -> list[float]:
    rng = random.Random(7)
    start.wait()
    lat: list[float] = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        ids = [f"m{rng.randrange(items)}" for _ in range(read)]
        t0 = time.perf_counter()
        board.snapshot(SCOPE, ids, agent="reader", goal="the task", subtask="now")
        lat.append((time.perf_counter() - t0) * 1000)
    return lat


def _seed(board: MemoryBoard, items: int) -> None:
    for lo in range(0, items, 1000):
        board.apply([Add(SCOPE, f"m{i}", "tool_result", "seed") for i in range(lo, min(items, lo + 1000))])


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def run_load(backend: str, writers: int, url: str | None, args: argparse.Namespace) -> dict[str, Any]:
    config = BoardConfig(agent_share=None)
    name = f"bench-{uuid.uuid4().hex[:8]}"
    board: MemoryBoard = InMemoryBoard(name, config) if backend == "memory" else RedisBoard.from_url(url, name, config)  # type: ignore[arg-type]
    _seed(board, args.items)
    results: list[tuple[int, int]] = []
    if backend == "memory":
        start = threading.Barrier(writers + 1)
        threads = [threading.Thread(target=lambda w=w: results.append(
            _write(board, f"w{w}", args.seconds, args.items, args.batch, start))) for w in range(writers)]
        for t in threads:
            t.start()
        lat = _read(board, args.seconds, args.items, args.read, start)
        for t in threads:
            t.join()
    else:
        ctx = multiprocessing.get_context("fork")
        pstart, out = ctx.Barrier(writers + 1), ctx.Queue()
        procs = [ctx.Process(target=_redis_writer, args=(url, name, f"w{w}", args.seconds, args.items, args.batch,
                                                         pstart, out)) for w in range(writers)]
        for p in procs:
            p.start()
        lat = _read(board, args.seconds, args.items, args.read, pstart)
        results = [out.get(timeout=120) for _ in procs]
        for p in procs:
            p.join()
    batches = sum(n for n, _ in results)
    deposits = sum(d for _, d in results)
    board.close()
    return {"backend": backend, "writers": writers, "deposits_per_s": deposits / args.seconds,
            "batches_per_s": batches / args.seconds, "snapshot_p50_ms": _pct(lat, 0.5),
            "snapshot_p99_ms": _pct(lat, 0.99), "snapshots": len(lat)}


def run_size(backend: str, size: int, url: str | None) -> dict[str, Any]:
    name = f"size-{uuid.uuid4().hex[:8]}"
    board: MemoryBoard = InMemoryBoard(name) if backend == "memory" else RedisBoard.from_url(url, name)  # type: ignore[arg-type]
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
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--read", type=int, default=100, help="ids per snapshot")
    parser.add_argument("--sizes", type=int, nargs="*", default=[10_000, 100_000])
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    proc, url, folder = start_redis()
    rows, sizes = [], []
    try:
        version = RedisBoard.from_url(url).client.info("server")["redis_version"]
        print(f"redis-server {version} on {url}; {args.items} items, batches of {args.batch} deposits + 1 "
              f"reinforcement, {args.seconds:g} s per cell, snapshots of {args.read} ids")
        print("| backend | writers | deposits/s | batches/s | snapshot p50 ms | snapshot p99 ms | snapshots |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for writers in args.writers:
            for backend in ("memory", "redis"):
                r = run_load(backend, writers, url, args)
                rows.append(r)
                print(f"| {backend} | {writers} | {r['deposits_per_s']:,.0f} | {r['batches_per_s']:,.0f} | "
                      f"{r['snapshot_p50_ms']:.2f} | {r['snapshot_p99_ms']:.2f} | {r['snapshots']:,} |", flush=True)
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
            json.dump({"load": rows, "sizes": sizes}, f, indent=2)


if __name__ == "__main__":
    main()

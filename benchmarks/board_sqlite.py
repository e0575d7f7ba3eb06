"""What persistence without a server costs: the SQLite board beside the in-memory one.

One writer applies the board_throughput batches (10 deposits on random items of 1,000, a
fresh subtask each, + 1 reinforcement) for ``--seconds`` on each backend in turn
(``--rounds`` times; medians); then 200 snapshots of 100 random ids (p50); then the restart
of an agent: a manager that took ``--messages`` messages (and a build every 10) on a file,
reopened in this process, and the time until its store and strengths are back.

    python benchmarks/board_sqlite.py --json benchmarks/results/board_sqlite.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from relevance_memory import RelevanceMemoryManager
from relevance_memory.board import Add, BoardConfig, Deposit, InMemoryBoard, MemoryBoard, Reinforce, SqliteBoard

SCOPE = "shared"


def _boards(folder: Path) -> dict[str, Any]:
    config = BoardConfig(agent_share=None)
    return {
        "memory": lambda: InMemoryBoard("m", config),
        "sqlite FULL": lambda: SqliteBoard(folder / f"{random.random()}.db", "s", config),
        "sqlite NORMAL": lambda: SqliteBoard(folder / f"{random.random()}.db", "s", config, synchronous="NORMAL"),
    }


def _load(board: MemoryBoard, seconds: float) -> tuple[float, float]:
    board.apply([Add(SCOPE, f"m{i}", "tool_result", "seed") for i in range(1000)])
    rng = random.Random(1)
    n, deadline = 0, time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        ops: list[Any] = [Deposit(SCOPE, f"m{rng.randrange(1000)}", 4, f"w-{n}-{j}", "the task", "w")
                          for j in range(10)]
        board.apply([*ops, Reinforce(SCOPE, f"m{rng.randrange(1000)}", "w")])
        n += 1
    lat = []
    for _ in range(200):
        ids = [f"m{rng.randrange(1000)}" for _ in range(100)]
        t0 = time.perf_counter()
        board.snapshot(SCOPE, ids, agent="r", goal="the task", subtask="now")
        lat.append(1000 * (time.perf_counter() - t0))
    return n / seconds, statistics.median(lat)


def _restart(folder: Path, messages: int) -> dict[str, float]:
    path = folder / "agent.db"
    memory = RelevanceMemoryManager(agent="coder", board=SqliteBoard(path), max_input_tokens=4000)
    memory.add({"role": "system", "content": "You write code."})
    t0 = time.perf_counter()
    for n in range(messages):
        memory.add({"role": "user" if n % 2 else "assistant", "content": f"Step {n}: week {n % 60} of parse_iso_week."})
        if n % 10 == 9:
            memory.build_context()
    written = time.perf_counter() - t0
    t0 = time.perf_counter()
    again = RelevanceMemoryManager(agent="coder", board=SqliteBoard(path), max_input_tokens=4000)
    again.build_context()
    resumed = time.perf_counter() - t0
    assert [m.text for m in again.messages] == [m.text for m in memory.messages]
    return {"messages": messages + 1, "written_s": written, "resume_and_build_s": resumed,
            "file_mb": path.stat().st_size / 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--messages", type=int, default=500)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    print(f"{platform.platform()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        runs: dict[str, list[tuple[float, float]]] = {}
        for _ in range(args.rounds):
            for name, make in _boards(folder).items():
                board = make()
                runs.setdefault(name, []).append(_load(board, args.seconds))
                board.close()
        rows = {name: {"batches_per_s": statistics.median(r[0] for r in rs),
                       "snapshot_p50_ms": statistics.median(r[1] for r in rs)} for name, rs in runs.items()}
        print("| backend | batches/s | snapshot of 100 ids p50 ms |\n|---|---:|---:|")
        for name, r in rows.items():
            print(f"| {name} | {r['batches_per_s']:,.0f} | {r['snapshot_p50_ms']:.2f} |")
        restart = _restart(folder, args.messages)
        print(f"restart: {restart['messages']} messages written in {restart['written_s']:.1f} s; reopened, "
              f"resumed and built in {restart['resume_and_build_s']:.2f} s; file {restart['file_mb']:.1f} MB")
    if args.json:
        args.json.write_text(json.dumps({"machine": platform.platform(), "rows": rows, "restart": restart}, indent=2)
                             + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

"""The Redis board's batch script in server instructions, beside the minimal script: a count
that does not move with the machine's load (the rates in board_throughput.py do, 2–5×).

Starts a ``redis-server`` under ``valgrind --tool=callgrind`` with instrumentation off, and
for each script: a fresh board of ``--items`` items, ``--warm`` batches of board_throughput's
shape (10 deposits on random items, a fresh subtask each, + 1 reinforcement) to give the
cells a history, then counts the server's instructions over ``--batches`` more
(``callgrind_control -i on`` / ``-d`` / ``-i off``). ``--lua`` measures other versions of
``_board.lua`` with this tree's client (so they must read its batch payload: for a tree
from before the flat batch payload (board4), run that tree's own copy of this file); ``min`` is
the minimal script (the same 11 updates as ``HINCRBYFLOAT``). Needs valgrind (Debian:
``apt-get install valgrind``).

    python benchmarks/board_script_cost.py --warm 1000
    python benchmarks/board_script_cost.py --warm 1000 --lua /tmp/variant.lua
    cd /tmp/board_base/benchmarks && PYTHONPATH=/tmp/board_base python board_script_cost.py --warm 1000
"""

from __future__ import annotations

import argparse
import glob
import random
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import board_throughput as bt

import relevance_memory.board._redis as board_redis
from relevance_memory.board import BoardConfig, RedisBoard

OURS = str(Path(board_redis.__file__).with_name("_board.lua"))


def _instructions(pid: int, folder: str) -> int:
    """Dump the counts since the last dump and return their total (the dump's ``totals:``)."""
    before = set(glob.glob(f"{folder}/cg.out*"))
    subprocess.run(["callgrind_control", "-d", str(pid)], capture_output=True, check=True)
    for _ in range(100):
        new = set(glob.glob(f"{folder}/cg.out*")) - before
        if new:
            break
        time.sleep(0.05)
    (path,) = new
    with open(path) as f:
        return next(int(line.split()[1]) for line in f if line.startswith(("totals:", "summary:")))


def measure(url: str, pid: int, folder: str, script: str, args: argparse.Namespace) -> float:
    """Server instructions per batch of ``script`` (a ``_board.lua`` path, or ``min``)."""
    name = f"cost-{uuid.uuid4().hex[:8]}"
    board = RedisBoard.from_url(url, name, BoardConfig(agent_share=None), **bt.SLOW_OK)
    if script != "min":
        source = Path(script).read_text(encoding="utf-8")
        board._script = board._raw.register_script(source.replace("--@CONFIG@", board_redis._config_lua(board.config), 1))
    bt._seed(board, args.items)
    target: Any = bt._Limit("min script", url, name) if script == "min" else board
    rng = random.Random(3)
    for k in range(args.warm):
        target.apply(bt._ops(rng, "w", k, args.items, args.batch))
    ops = [bt._ops(rng, "w", args.warm + k, args.items, args.batch) for k in range(args.batches + 1)]
    target.apply(ops[0])  # the script is loaded
    _instructions(pid, folder)  # counts so far: dropped
    subprocess.run(["callgrind_control", "-i", "on", str(pid)], capture_output=True, check=True)
    for batch in ops[1:]:
        target.apply(batch)
    total = _instructions(pid, folder)
    subprocess.run(["callgrind_control", "-i", "off", str(pid)], capture_output=True, check=True)
    board.close()
    return float(total) / int(args.batches)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lua", nargs="*", default=[OURS], help="_board.lua files to measure, 'min' for the minimal script")
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--warm", type=int, default=400, help="batches applied before counting")
    parser.add_argument("--batches", type=int, default=200, help="batches counted")
    args = parser.parse_args()
    for tool in ("valgrind", "callgrind_control", "redis-server"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is not on PATH (Debian: apt-get install valgrind redis-server)")
    folder = tempfile.mkdtemp(prefix="relmem-cost-")
    port = bt._free_port()
    proc = subprocess.Popen(["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={folder}/cg.out",
                             "redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", folder], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    try:
        for _ in range(400):
            try:
                RedisBoard.from_url(url, socket_timeout=30.0, socket_connect_timeout=30.0).client.ping()
                break
            except Exception:
                time.sleep(0.05)
        print(f"server instructions per batch ({args.batch} deposits + 1 reinforcement, {args.items} items, "
              f"{args.warm} batches first, {args.batches} counted):")
        for script in [*args.lua, "min"]:
            print(f"  {script}: {measure(url, proc.pid, folder, script, args) / 1000:,.0f}k", flush=True)
    finally:
        proc.terminate()
        proc.wait()
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()

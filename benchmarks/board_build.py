"""Build time of a manager reading a shared board of 10k / 100k items (issue 12).

A *writer* publishes N tool results (the messages of synthetic agent steps: a command
and its output, with identifiers later steps refer to) to the ``shared`` scope of a
board on a local Redis this script starts (on 127.0.0.1 and a free port, and stops).
A *reader* agent, ``RelevanceMemoryManager(agent="reader", board=...)``, then builds its
context: it imports the N messages from the shared log (journaling them), observes them
(its field, mirrored to the board) and reads their strengths from the board (one
pipelined snapshot of the N ids per refresh). Timed: the first build (import included)
and a rebuild with nothing new. The baseline, in the same run: a manager without a board
holding the same N messages (as the same named user messages), ingest + first build and
the rebuild.

    python benchmarks/board_build.py                       # 10k and 100k (minutes on a loaded machine)
    python benchmarks/board_build.py --sizes 2000          # quick
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from typing import Any

from relevance_memory import RelevanceMemoryManager
from relevance_memory.board import Add, BoardConfig, RedisBoard, imported_message

BUDGET = 16_000


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _entries(n: int) -> list[dict[str, str]]:
    out = []
    for i in range(n):
        ref = f" (see ORD-{i - 7:05d})" if i >= 7 and i % 3 == 0 else ""
        out.append({
            "id": f"writer:m{i}", "producer": "writer", "scope": "shared", "role": "tool", "msg_type": "tool_result",
            "text": f"order ORD-{i:05d}: status {'shipped' if i % 2 else 'pending'}, total {i % 997}.{i % 100:02d} EUR"
                    f"{ref}", "call": json.dumps({"name": "lookup", "arguments": f'{{"order": "ORD-{i:05d}"}}'}),
        })
    return out


def run(size: int, url: str) -> dict[str, Any]:
    name = f"build-{uuid.uuid4().hex[:8]}"
    board = RedisBoard.from_url(url, name, BoardConfig(), socket_timeout=30.0)  # bulk publishing: not the 0.2 s default
    entries = _entries(size)
    t0 = time.perf_counter()
    for lo in range(0, size, 1000):
        chunk = entries[lo:lo + 1000]
        board.apply([Add("shared", e["id"], "tool_result", "writer") for e in chunk])
        board.append("shared", chunk, agent="writer")
    publish_s = time.perf_counter() - t0
    goal = "Which orders are still pending, and what do they total?"

    reader = RelevanceMemoryManager(agent="reader", board=RedisBoard.from_url(url, name, BoardConfig()),
                                    max_input_tokens=BUDGET, keep_recent=2)
    reader.set_goal(final=goal)
    reader.add({"role": "user", "content": goal})
    t0 = time.perf_counter()
    built = reader.build_context()
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    again = reader.build_context()
    rebuild = time.perf_counter() - t0
    assert again.messages == built.messages
    shared = sum(1 for d in built.record.messages if d.scope == "shared" and d.decision in ("kept", "recent"))

    base = RelevanceMemoryManager(max_input_tokens=BUDGET, keep_recent=2)
    base.set_goal(final=goal)
    t0 = time.perf_counter()
    for e in entries:
        raw, meta = imported_message(e)
        base.add(raw, **meta)
    base.add({"role": "user", "content": goal})
    built_b = base.build_context()
    base_first = time.perf_counter() - t0
    t0 = time.perf_counter()
    base.build_context()
    base_rebuild = time.perf_counter() - t0
    return {"items": size, "publish_s": publish_s, "board_first_s": first, "board_rebuild_s": rebuild,
            "baseline_first_s": base_first, "baseline_rebuild_s": base_rebuild,
            "tokens_after": built.record.tokens_after, "baseline_tokens_after": built_b.record.tokens_after,
            "shared_items_in_context": shared, "source": built.record.board.source if built.record.board else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server is not on PATH (Debian: apt-get install redis-server)")
    port, folder = _free_port(), tempfile.mkdtemp(prefix="relmem-build-")
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", folder], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    rows = []
    try:
        for _ in range(200):
            try:
                RedisBoard.from_url(url).client.ping()
                break
            except Exception:
                time.sleep(0.05)
        print(f"budget {BUDGET:,} tokens; redis on {url}")
        print("| shared items | publish s | reader first build s (sync + build) | rebuild s | "
              "no-board baseline: ingest + first build s | rebuild s | shared items in context |")
        print("|---:|---:|---:|---:|---:|---:|---:|")
        for size in args.sizes:
            r = run(size, url)
            rows.append(r)
            print(f"| {size:,} | {r['publish_s']:.1f} | {r['board_first_s']:.1f} | {r['board_rebuild_s']:.2f} | "
                  f"{r['baseline_first_s']:.1f} | {r['baseline_rebuild_s']:.2f} | {r['shared_items_in_context']} |",
                  flush=True)
    finally:
        proc.terminate()
        proc.wait()
        shutil.rmtree(folder, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()

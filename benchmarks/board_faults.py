"""How long a step waits when Redis misbehaves: every ``add()`` and build of an agent on a
``RedisBoard``, with the server healthy, paused (SIGSTOP), stopped, slow (a proxy holding
each reply 1 s) and flapping (stopped and started every step), this tree vs a baseline
tree in the same run (issue 23 item 4).

    git archive main relevance_memory | tar -x -C /tmp/base
    python benchmarks/board_faults.py --baseline /tmp/base --json benchmarks/results/board_faults.json

Each (tree, fault) runs in a fresh subprocess that starts its own ``redis-server`` on
127.0.0.1 (append-only, so a stopped server comes back with its data) and stops it. The
agent: ``RelevanceMemoryManager(agent="coder", board=RedisBoard.from_url(url))`` with the
tree's defaults, a system prompt, a task and two steps on a healthy server; then the
fault, then ``--steps`` steps (an assistant tool call and its result: two ``add()``) each
followed by a build; then the fault ends and builds run until one reads the server again
(recovery). Reported: the longest and median ``add()`` and build under the fault, round
trips to the server (this tree), and whether a restarted agent resumes with every message.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FAULTS = ("healthy", "paused", "stopped", "slow", "flapping")

_RUN = r"""
import json, os, signal, sys, time, uuid
tree, support, fault, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
sys.path.insert(0, tree)
sys.path.insert(0, support)
from board_support import DelayProxy, RedisServer
from relevance_memory import RelevanceMemoryManager
from relevance_memory.board import RedisBoard

def step(m, n, adds=None):
    t0 = time.perf_counter()
    m.add({"role": "assistant", "content": f"Step {n}: run the tests.", "tool_calls": [{"id": f"c{n}",
           "type": "function", "function": {"name": "bash", "arguments": f'{{"command": "pytest -k case{n}"}}'}}]})
    t1 = time.perf_counter()
    m.add({"role": "tool", "tool_call_id": f"c{n}", "name": "bash", "content": f"FAILED test_case{n}: week {50 + n}"})
    if adds is not None:
        adds += [t1 - t0, time.perf_counter() - t1]

def timed(fn):
    t0 = time.perf_counter(); fn(); return time.perf_counter() - t0

server = RedisServer(persist=True).start()
proxy = DelayProxy(server.port) if fault == "slow" else None
name = f"bench-{uuid.uuid4().hex[:8]}"
url = proxy.url if proxy else server.url
board = RedisBoard.from_url(url, name)
m = RelevanceMemoryManager(agent="coder", board=board, max_input_tokens=4000, keep_recent=2)
m.add({"role": "system", "content": "You write code."})
m.add({"role": "user", "content": "Fix the failing date parser in src/dates.py."})
for n in range(2):
    step(m, n)
m.build_context()
trips = getattr(board, "round_trips", None)
adds, builds = [], []
try:
    if fault == "paused":
        os.kill(server.proc.pid, signal.SIGSTOP)
    elif fault == "stopped":
        server.stop()
    elif fault == "slow":
        proxy.delay = 1.0
    for n in range(2, 2 + steps):
        if fault == "flapping":
            server.stop() if n % 2 == 0 else server.start()
        step(m, n, adds)
        builds.append(timed(m.build_context))
finally:
    if fault == "paused":
        os.kill(server.proc.pid, signal.SIGCONT)
    elif fault in ("stopped", "flapping") and server.proc is None:
        server.start()
    elif fault == "slow":
        proxy.delay = 0.0
t0 = time.perf_counter()
while True:
    built = m.build_context()
    if built.record.board.source == "redis" or time.perf_counter() - t0 > 60:
        break
    time.sleep(0.05)
recovery = time.perf_counter() - t0
again = RelevanceMemoryManager(agent="coder", board=RedisBoard.from_url(server.url, name), max_input_tokens=4000)
same = [x.to_openai() for x in again.messages] == [x.to_openai() for x in m.messages]
breaker = getattr(board, "breaker", None)
out = {"adds": adds, "builds": builds, "recovery_s": recovery, "resumed_all": same, "messages": len(m.messages),
       "round_trips": None if trips is None else board.round_trips - trips,
       "breaker": None if breaker is None else {"opened": breaker.opened, "rejected": breaker.rejected,
                                                "probes": breaker.probes, "state": breaker.state}}
if proxy:
    proxy.close()
server.close()
print(json.dumps(out))
"""


def _run(tree: Path, fault: str, steps: int) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    got = subprocess.run([sys.executable, "-c", _RUN, str(tree), str(REPO / "tests" / "board"), fault, str(steps)],
                         capture_output=True, text=True, env=env, timeout=1800)
    if got.returncode != 0:
        raise SystemExit(f"{fault} on {tree} failed:\n{got.stderr[-3000:]}")
    return json.loads(got.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _ms(xs: object) -> str:
    values = list(xs) if isinstance(xs, list) else []
    if not values:
        return "–"
    return f"{1000 * max(values):,.0f} / {1000 * statistics.median(values):,.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, help="a tree holding the baseline relevance_memory/ (optional)")
    parser.add_argument("--steps", type=int, default=10, help="steps (2 add() + 1 build each) under the fault")
    parser.add_argument("--baseline-steps", type=int, default=2,
                        help="steps on the baseline (a paused server cost it ~25 s per add())")
    parser.add_argument("--faults", nargs="+", default=list(FAULTS), choices=FAULTS)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    trees = [("new", REPO, args.steps)] + ([("baseline", args.baseline, args.baseline_steps)] if args.baseline else [])
    rows = []
    print("| fault | tree | add() max / p50 ms | build max / p50 ms | round trips | breaker | recovery s | resumed |")
    print("|---|---|---:|---:|---:|---|---:|---|")
    for fault in args.faults:
        for label, tree, steps in trees:
            r = _run(tree, fault, steps)
            rows.append({"fault": fault, "tree": label, **r})
            b = r["breaker"]
            breaker = "–" if not isinstance(b, dict) else \
                f"opened {b['opened']}, rejected {b['rejected']}, probes {b['probes']}, {b['state']}"
            trips = "–" if r["round_trips"] is None else r["round_trips"]
            print(f"| {fault} | {label} | {_ms(r['adds'])} | {_ms(r['builds'])} | {trips} | {breaker} | "
                  f"{r['recovery_s']:.2f} | {'all' if r['resumed_all'] else 'NO'} |", flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        payload = {"machine": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version(),
                   "steps": args.steps, "baseline_steps": args.baseline_steps, "rows": rows}
        args.json.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

"""Three agents — planner, executor, reviewer — share one memory board on a local Redis.

A real SWE-bench agent run (default: ``fixtures/django__django-15280.json``, 96 tool steps)
is split into three roles by a documented, deterministic rule over each step's bash
command:

- **executor**: the command writes files — ``sed -i``, a heredoc or ``>`` redirect into a
  file, ``tee``, ``patch``, ``git apply``, ``mv``/``cp``/``rm``;
- **reviewer**: otherwise, it runs code or tests — ``pytest``, ``runtests``,
  ``python file.py``, ``python -m …``, ``tox``, ``git diff``, ``make test``;
- **planner**: everything else (reading: ``ls``, ``cat``, ``grep``, ``find``, ``sed -n`` …),
  and the task statement itself.

Each role runs as its own process with its own :class:`RelevanceMemoryManager`
(``agent="planner"`` …) on one :class:`RedisBoard`. The steps are taken in the run's
order, turn by turn (a process waits for the previous step on the board's ``turns`` log).
Before its step an agent builds its context — the moment it would call its LLM — from its
private log plus what the others published to ``shared``: by the default publish rule,
tool results and user instructions. Then it records its step (the assistant's call and the
tool's output, replayed from the transcript).

Per agent and step it prints the tokens sent, how many messages came from the shared
board and, for each, why it is there (producer, decision, score, strength); at the end,
per agent: tokens sent, items taken from the board, and whether its contexts kept the
items *another* agent marked as key (deposited with a score ≥ 4).

    python examples/multi_agent.py                              # starts its own redis-server
    python examples/multi_agent.py --redis-url redis://127.0.0.1:6379/0 --budget 6000
    python examples/multi_agent.py ../shared/data/swebench_trajectories/django__django-15973.json --steps 30
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from relevance_memory import RelevanceMemoryManager, load_transcript
from relevance_memory.board import BoardConfig, RedisBoard

ROLES = ("planner", "executor", "reviewer")
EDIT = re.compile(r"\bsed\s+-i|<<\s*'?\w+'?\s*>\s*\S|^\s*cat\s*>|\btee\b|\bpatch\b|git\s+apply|^\s*(mv|cp|rm)\b"
                  r"|>\s*[\w./-]+\.py\b")
RUN = re.compile(r"pytest|runtests|\bpython3?\s+(-m\s+\w+|[\w./-]+\.py)|\btox\b|git\s+diff|make\s+test")
DEFAULT_RUN = Path(__file__).resolve().parents[1] / "fixtures" / "django__django-15280.json"


def role_of(command: str) -> str:
    """The deterministic role rule of the module doc."""
    if EDIT.search(command):
        return "executor"
    if RUN.search(command):
        return "reviewer"
    return "planner"


def split_steps(messages: Sequence[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    """``(system prompt, task, steps)``; a step is one assistant message with the messages
    that follow it up to the next assistant message (its tool results, harness notices),
    and the role of its command."""
    system, task = messages[0], messages[1]
    steps: list[dict[str, Any]] = []
    for message in messages[2:]:
        if message.get("role") == "assistant":
            calls = message.get("tool_calls") or []
            command = json.loads(calls[0]["function"]["arguments"]).get("command", "") if calls else ""
            steps.append({"assistant": message, "after": [], "role": role_of(command) if calls else "planner",
                          "command": command})
        elif steps:
            steps[-1]["after"].append(message)
    return system, task, steps


def _subtask(message: dict[str, Any]) -> str:
    text = str(message.get("content") or "").strip()
    first = text.splitlines()[0] if text else ""
    return first.removeprefix("THOUGHT:").strip()[:200]


def run_agent(args: argparse.Namespace) -> None:
    """One role's process: take its turns, build before each, record the step."""
    system, task, steps = split_steps(load_transcript(args.run).messages)
    steps = steps[: args.steps] if args.steps else steps
    board = RedisBoard.from_url(args.redis_url, args.board, BoardConfig())
    turns = RedisBoard.from_url(args.redis_url, args.board)
    me = args.role
    memory = RelevanceMemoryManager(agent=me, board=board, max_input_tokens=args.budget, keep_recent=3)
    memory.add({"role": "system", "content": f"{system['content']}\n\nYour role in a team of three: {me}."})
    final = str(task["content"])
    memory.set_goal(final=final)
    if me == "planner":
        memory.add(task)  # a user instruction: published to shared by the rule
    cursor = None
    lines: list[dict[str, Any]] = []
    for n, step in enumerate(steps):
        if step["role"] != me:
            continue
        while True:  # wait for step n-1 (any role) on the turns log
            done = {int(e.fields["step"]) for e in turns.read("turns", None, agent=me)}
            if n == 0 or n - 1 in done:
                break
            time.sleep(0.005)
        memory.set_goal(subtask=_subtask(step["assistant"]))
        built = memory.build_context()
        record = built.record
        # the shared items in this agent's history that another agent marked as key
        # (deposited with a score ≥ 4), from their provenance on the board
        shared = [m.id for m in memory.messages if m.scope == "shared"]
        items = memory.pheromone.provenance(shared)  # type: ignore[attr-defined]
        keys = {i for i, it in items.items()
                if any(e[0] != me and e[1] in ("deposit:4", "deposit:5") for e in it["events"])}
        from_board = []
        for d in record.messages:
            if d.producer not in (None, me) and d.decision in ("kept", "recent"):
                from_board.append({"id": d.id, "producer": d.producer, "decision": d.decision, "score": d.score,
                                   "source": d.score_source.value if d.score_source else None,
                                   "strength": d.strength, "why": d.reason[:80]})
        kept_keys = {d.id for d in record.messages if d.id in keys and d.decision in ("kept", "recent")}
        lines.append({
            "step": n, "agent": me, "command": step["command"][:60], "tokens_sent": record.tokens_after,
            "tokens_history": record.tokens_before, "from_board": from_board, "board_source": record.board.source
            if record.board else None, "key_items": sorted(keys), "key_items_kept": sorted(kept_keys),
            "faults": record.board.faults if record.board else [],
        })
        memory.add(step["assistant"])
        for message in step["after"]:
            memory.add(message)
        cursor = turns.append("turns", [{"step": str(n), "agent": me}], agent=me)[0]
    del cursor
    Path(args.out).write_text(json.dumps(lines, indent=1), encoding="utf-8")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", nargs="?", type=Path, default=DEFAULT_RUN, help="a SWE-bench run (JSON)")
    parser.add_argument("--budget", type=int, default=4000, help="tokens per agent's context")
    parser.add_argument("--steps", type=int, default=0, help="only the first N steps (0 = all)")
    parser.add_argument("--redis-url", help="an existing Redis (default: start redis-server on a free port)")
    parser.add_argument("--json", type=Path, help="write every step's line here")
    parser.add_argument("--role", choices=ROLES, help=argparse.SUPPRESS)
    parser.add_argument("--board", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.role:
        run_agent(args)
        return 0
    server = None
    folder = Path(tempfile.mkdtemp(prefix="relmem-example-"))
    try:
        if not args.redis_url:
            binary = shutil.which("redis-server")
            if binary is None:
                print("redis-server is not on PATH (Debian: apt-get install redis-server), or pass --redis-url",
                      file=sys.stderr)
                return 2
            port = _free_port()
            server = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                       "--appendonly", "no", "--dir", str(folder)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            args.redis_url = f"redis://127.0.0.1:{port}/0"
            for _ in range(200):
                try:
                    RedisBoard.from_url(args.redis_url).client.ping()
                    break
                except Exception:
                    time.sleep(0.05)
        board = f"example-{uuid.uuid4().hex[:8]}"
        _, _, steps = split_steps(load_transcript(args.run).messages)
        steps = steps[: args.steps] if args.steps else steps
        counts = {r: sum(1 for s in steps if s["role"] == r) for r in ROLES}
        print(f"{args.run.name}: {len(steps)} steps → " + ", ".join(f"{r} {c}" for r, c in counts.items())
              + f"; board {board!r} on {args.redis_url}; {args.budget:,} tokens per context")
        start = time.perf_counter()
        procs = []
        for role in ROLES:
            out = folder / f"{role}.json"
            cmd = [sys.executable, __file__, str(args.run), "--role", role, "--board", board, "--out", str(out),
                   "--redis-url", args.redis_url, "--budget", str(args.budget), "--steps", str(args.steps)]
            procs.append((role, out, subprocess.Popen(cmd)))
        failed = [role for role, _, p in procs if p.wait() != 0]
        if failed:
            print(f"agent process(es) failed: {', '.join(failed)}", file=sys.stderr)
            return 1
        elapsed = time.perf_counter() - start
        lines = sorted((line for _, out, _ in procs for line in json.loads(out.read_text())), key=lambda x: x["step"])
        for line in lines:
            shared = ", ".join(
                f"{b['id']}({b['producer']}, {b['decision']}, "
                + ("not scored: in the last steps" if b["score"] is None else f"score {b['score']}")
                + f", S={b['strength']})" for b in line["from_board"][:4]
            ) or "none"
            more = f" +{len(line['from_board']) - 4} more" if len(line["from_board"]) > 4 else ""
            print(f"step {line['step']:3d} {line['agent']:8s} sent {line['tokens_sent']:5,} of "
                  f"{line['tokens_history']:6,} tokens; from the board {len(line['from_board']):2d}: {shared}{more}"
                  + (f"  [{line['board_source']}]" if line["board_source"] != "redis" else ""))
        print()
        print("| agent | steps | tokens sent | history tokens | items from the board | key items of others kept |")
        print("|---|---:|---:|---:|---:|---:|")
        for role in ROLES:
            mine = [x for x in lines if x["agent"] == role]
            keys = sum(len(x["key_items"]) for x in mine)
            kept = sum(len(x["key_items_kept"]) for x in mine)
            print(f"| {role} | {len(mine)} | {sum(x['tokens_sent'] for x in mine):,} | "
                  f"{sum(x['tokens_history'] for x in mine):,} | {sum(len(x['from_board']) for x in mine):,} | "
                  f"{kept}/{keys}" + (f" ({kept / keys:.0%})" if keys else "") + " |")
        print(f"\n3 processes, {len(lines)} builds in {elapsed:.1f} s")
        if args.json:
            args.json.write_text(json.dumps(lines, indent=1), encoding="utf-8")
        return 0
    finally:
        if server is not None:
            server.terminate()
            server.wait()
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())

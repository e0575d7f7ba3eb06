"""Largest request against the budget when each framework's own runner drives a long tool loop (issue 22).

Every SWE-bench run in ``../shared/data/swebench_trajectories`` (14 runs, 51–145 model
calls each, tool outputs up to 4.3k tokens) is replayed through each framework's runner
with a local fake model that answers with the run's recorded assistant messages and a
``bash`` tool that answers with the recorded outputs (``examples/langchain_agent.py``,
``examples/agents_sdk.py``). Each request the model receives is measured with the memory's
tokenizer — system message / instructions, messages or items, and the tools' schema — and
per setup the table gives the model calls, the largest request against the budget, the
calls over budget, and the largest unmanaged request of the same runs:

- ``langchain middleware``: ``create_agent`` + ``RelevanceMemoryMiddleware`` (``InMemorySaver``);
- ``langgraph hook (legacy)``: ``create_react_agent`` + ``ManagedContextHook(tools=, prompt=)``;
- ``agents filter``: ``Runner.run`` + ``RunConfig(call_model_input_filter=ManagedInputFilter)``;
- ``agents session + filter``: ``ManagedSession`` + ``session.input_filter()``;
- ``agents session only``: ``ManagedSession`` alone (read once per run: the issue's baseline);
- ``unmanaged``: ``create_agent`` / ``Runner.run`` with no memory.

    PYTHONPATH=.:examples nice -n 10 .venv/bin/python benchmarks/framework_loops.py \\
        --budget 8000 --out benchmarks/results/framework_loops.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))

import agents_sdk  # noqa: E402
import langchain_agent  # noqa: E402

from relevance_memory import RelevanceMemoryError  # noqa: E402

SETUPS: dict[str, tuple[Any, str]] = {
    "langchain middleware": (langchain_agent.replay, "middleware"),
    "langgraph hook (legacy)": (langchain_agent.replay, "legacy"),
    "langchain unmanaged": (langchain_agent.replay, "unmanaged"),
    "agents filter": (agents_sdk.replay, "filter"),
    "agents session + filter": (agents_sdk.replay, "session-filter"),
    "agents session only": (agents_sdk.replay, "session"),
    "agents unmanaged": (agents_sdk.replay, "unmanaged"),
}


def measure(name: str, path: Path, budget: int) -> dict[str, Any]:
    """One run through one setup: calls, largest request, calls over budget, and the error a
    build raised (the run stops there), if any."""
    replay, mode = SETUPS[name]
    requests = agents_sdk.Requests(budget)
    error = ""
    try:
        done = replay(path, budget=budget, mode=mode, requests=requests)
        if asyncio.iscoroutine(done):
            asyncio.run(done)
    except RelevanceMemoryError as exc:
        error = f"{type(exc).__name__} at call {len(requests.sizes)}: {exc}"
    return {"run": path.stem, "calls": len(requests.sizes), "largest": requests.largest,
            "over": requests.over, "first": requests.sizes[0] if requests.sizes else 0, "error": error}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "swebench_trajectories")
    parser.add_argument("--budget", type=int, default=8000)
    parser.add_argument("--limit", type=int, default=None, help="replay only the first N runs")
    parser.add_argument("--only", default="", help="comma-separated setup names to run (default all)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    runs = sorted(args.data.glob("*__*.json"))[: args.limit]
    if not runs:
        print(f"no runs in {args.data}", file=sys.stderr)
        return 1
    results: dict[str, Any] = {"budget": args.budget, "runs": [p.stem for p in runs], "setups": {}}
    chosen = [n.strip() for n in args.only.split(",") if n.strip()] or list(SETUPS)
    for name in chosen:
        started = time.perf_counter()
        per_run = [measure(name, path, args.budget) for path in runs]
        summary = results["setups"][name] = {
            "calls": sum(r["calls"] for r in per_run),
            "largest": max(r["largest"] for r in per_run),
            "over": sum(r["over"] for r in per_run),
            "errors": [f"{r['run']}: {r['error']}" for r in per_run if r["error"]],
            "seconds": round(time.perf_counter() - started, 1),
            "per_run": per_run,
        }
        print(f"{name}: {summary['calls']} calls, largest {summary['largest']}, {summary['over']} over budget, "
              f"{len(summary['errors'])} run(s) stopped by an error, {summary['seconds']} s", file=sys.stderr)
    print("| setup | model calls | largest request (tokens) | budget | calls over budget | runs stopped |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, summary in results["setups"].items():
        print(f"| {name} | {summary['calls']} | {summary['largest']:,} | {args.budget:,} | {summary['over']} | "
              f"{len(summary['errors'])} |")
    for name, summary in results["setups"].items():
        for error in summary["errors"]:
            print(f"- {name}: {error}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

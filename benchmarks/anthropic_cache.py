"""Anthropic Messages: request size and prompt-cache cost of the managed client over whole runs.

Each SWE-bench run is replayed as Anthropic blocks (``examples/anthropic_agent.py``:
``anthropic_run``, ``ScriptedClaude`` — a mock ``/v1/messages`` endpoint that checks every
request and simulates Anthropic's prompt cache from its ``cache_control`` breakpoints: a
breakpoint writes its prefix from 1,024 tokens on, a later breakpoint reads the longest
cached prefix at it or up to 20 blocks before it). Two methods, same replay:

- **full history** through the plain ``anthropic.Anthropic`` client with Anthropic's
  automatic caching (top-level ``cache_control``: a breakpoint on the last block, moving
  forward as the conversation grows);
- **managed**: ``manage(anthropic.Anthropic(), max_input_tokens=budget)``, breakpoints placed
  by relevance-memory.

Cost units use Anthropic's prices relative to base input: uncached 1, cache read 0.1,
cache write 1.25 (5-minute TTL). Tokens are counted with ``anthropic_request_tokens``
(o200k_base standing in for Claude's tokenizer) for both methods.

    PYTHONPATH=. nice -n 10 .venv/bin/python benchmarks/anthropic_cache.py --budgets 8000,16000 \\
        --out benchmarks/results/anthropic_cache.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import warnings
from pathlib import Path
from typing import Any

import anthropic

from relevance_memory import ContextOverflowError, TiktokenCounter, anthropic_request_tokens

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "data" / "swebench_trajectories"
READ_PRICE, WRITE_PRICE = 0.1, 1.25


def _example() -> Any:
    spec = importlib.util.spec_from_file_location("anthropic_agent", ROOT / "examples" / "anthropic_agent.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["anthropic_agent"] = module
    spec.loader.exec_module(module)
    return module


EXAMPLE = _example()
COUNTER = TiktokenCounter()


def _totals(requests: list[dict[str, Any]], usages: list[dict[str, int]]) -> dict[str, Any]:
    sizes = [anthropic_request_tokens(COUNTER, system=b.get("system"), messages=b["messages"], tools=b.get("tools"))
             for b in requests]
    read = sum(u["cache_read_input_tokens"] for u in usages)
    written = sum(u["cache_creation_input_tokens"] for u in usages)
    sent = sum(sizes)
    return {"requests": len(requests), "largest": max(sizes), "sent": sent, "read": read, "written": written,
            "cost": (sent - read - written) + READ_PRICE * read + WRITE_PRICE * written}


def full_history(path: Path) -> dict[str, Any]:
    """The whole history every call, through the plain client with automatic caching."""
    system, tools, history, steps = EXAMPLE.anthropic_run(path)
    model = EXAMPLE.ScriptedClaude([s["assistant"] for s in steps])
    http = EXAMPLE.httpx.Client(transport=EXAMPLE.httpx.MockTransport(model))
    client = anthropic.Anthropic(api_key="test", http_client=http, max_retries=0)
    for step in steps:
        reply = client.messages.create(model=EXAMPLE.MODEL, system=system, messages=history, tools=tools,
                                       max_tokens=1024, cache_control={"type": "ephemeral"})
        history = [*history, {"role": "assistant", "content": reply.content}]
        if step["user"] is None:
            break
        history.append(step["user"])
    return _totals(model.requests, model.usages)


def managed(path: Path, budget: int) -> dict[str, Any]:
    out = EXAMPLE.run(path, budget, quiet=True)
    totals = _totals(out["requests"], out["usages"])
    totals["compactions"] = sum(1 for r in out["records"] if r.mode == "compacted")
    totals["over_budget"] = sum(1 for b in out["requests"] if anthropic_request_tokens(
        COUNTER, system=b.get("system"), messages=b["messages"], tools=b.get("tools")) > budget)
    return totals


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budgets", default="8000,16000")
    parser.add_argument("--runs", type=Path, default=DATA if DATA.is_dir() else ROOT / "fixtures")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore", "token counts are approximate")
    budgets = [int(b) for b in args.budgets.split(",")]
    runs = sorted(p for p in args.runs.glob("*.json") if not p.name.startswith("LICENSE"))
    results: dict[str, Any] = {"runs": {}, "budgets": budgets}
    for path in runs:
        row: dict[str, Any] = {"full": full_history(path)}
        for budget in budgets:
            try:
                row[str(budget)] = managed(path, budget)
            except ContextOverflowError as exc:  # one step larger than the budget (SPEC §11 excerpts: not yet)
                row[str(budget)] = {"overflow": str(exc)}
        results["runs"][path.stem] = row
        print(path.stem, json.dumps({k: {"largest": v.get("largest"), "cost": round(v.get("cost", 0))}
                                     for k, v in row.items()}), flush=True)
    print()
    print("| budget | runs | method | requests | largest request | tokens sent (× full) | read from cache | "
          "written to cache | cost units (× full) | compactions | requests over budget |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    keys = ("requests", "sent", "read", "written", "cost")
    for budget in budgets:
        done = [r for r in results["runs"].values() if "overflow" not in r[str(budget)]]
        full = {k: sum(r["full"][k] for r in done) for k in keys}
        print(f"| {budget:,} | {len(done)} | full history, automatic caching | {full['requests']:,} | "
              f"{max(r['full']['largest'] for r in done):,} | {full['sent']:,} (1.00) | {full['read'] / full['sent']:.1%} | "
              f"{full['written']:,} | {full['cost']:,.0f} (1.00) | 0 | — |")
        rows = [r[str(budget)] for r in done]
        total = {k: sum(r[k] for r in rows) for k in (*keys, "compactions", "over_budget")}
        print(f"| {budget:,} | {len(done)} | **managed** | {total['requests']:,} | {max(r['largest'] for r in rows):,} | "
              f"{total['sent']:,} ({total['sent'] / full['sent']:.2f}) | {total['read'] / total['sent']:.1%} | "
              f"{total['written']:,} | {total['cost']:,.0f} ({total['cost'] / full['cost']:.2f}) | "
              f"{total['compactions']} | {total['over_budget']} |")
        for name, r in results["runs"].items():
            if "overflow" in r[str(budget)]:
                print(f"|  |  | {name}: ContextOverflowError at {budget:,} | {r[str(budget)]['overflow']} |")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

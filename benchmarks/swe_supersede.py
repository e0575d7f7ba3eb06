"""Superseded tool results in built contexts of the SWE-bench runs (issue 11).

Replays each SWE-bench run in ``../shared/data/swebench_trajectories`` and builds the context
every ``--every`` steps (and at the end) at each budget, with the final goal = the task
statement. Per build it counts:

- **superseded tokens**: tokens of kept (verbatim) messages that a newer message supersedes
  (:func:`detect_supersedes`: the same call again, the same file shown again or rewritten)
  *and* whose newer message is in the context too — stale copies next to fresh ones;
- **task statement kept**: the first user message is in the context verbatim;
- **newest views kept**: for every file the agent edited so far (``sed -i``, a heredoc or
  ``>`` write) and has shown since, the newest message showing it (a read of any range, or a
  whole write) is in the context verbatim;
- **summary tokens**: tokens the summaries take (what the newest views' room costs them), and
  the builds that archived messages but give their summaries fewer than 64 tokens.

    PYTHONPATH=. python benchmarks/swe_supersede.py [--budgets 8000,16000] [--every 10] [--json out.json]

Run it on two trees (before / after a change) for the comparison.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from relevance_memory import RelevanceMemoryManager
from relevance_memory.store._supersede import command_of, detect_supersedes, file_views, items_from_messages
from relevance_memory.store._supersede_files import edited_paths

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "swebench_trajectories"
TINY_SUMMARY = 64
"""A build that archived messages but spends fewer tokens than this on summaries (tokens)."""


def build_points(memory: RelevanceMemoryManager, messages: list[dict[str, Any]], every: int) -> Iterator[int]:
    """Add ``messages`` to ``memory`` one by one and yield the step count where a build is
    due: before an assistant message (the agent's next call) every ``every`` steps, and at
    the end."""
    steps_built = 0
    for n, message in enumerate(messages):
        memory.add(message)
        last = n == len(messages) - 1
        if not last and messages[n + 1].get("role") != "assistant":
            continue
        steps_built += 1
        if last or steps_built % every == 0:
            yield steps_built


def wanted_views(store: Any) -> dict[str, str]:
    """Newest view of each file the agent edited: path → id of the newest message showing or
    writing it (a write in a tool call, or the result of a call that read it)."""
    views: dict[str, str] = {}
    edited: set[str] = set()
    for m in store.messages:
        for call in m.tool_calls:
            command = command_of(call.arguments) or ""
            edited |= edited_paths(command)
            for view in file_views(command):
                if view.write:
                    views[view.path] = m.id
        if m.role == "tool" and m.tool_call_id:
            parent = store.get(m.parent_id) if m.parent_id else None
            for call in parent.tool_calls if parent else ():
                if call.id == m.tool_call_id:
                    for view in file_views(command_of(call.arguments) or ""):
                        if not view.write:
                            views[view.path] = m.id
    return {p: views[p] for p in edited if p in views}


def measure_run(path: Path, budgets: list[int], every: int) -> list[dict[str, Any]]:
    run = json.loads(path.read_text())
    messages = run["messages"]
    rows: list[dict[str, Any]] = []
    memory = RelevanceMemoryManager(on_invalid="repair")
    for steps_built in build_points(memory, messages, every):
        store = memory.store
        links = detect_supersedes(items_from_messages(store.messages))
        newer_of = {link.older: link.newer for link in links}
        newest = wanted_views(store)
        for budget in budgets:
            try:
                built = memory.build_context(budget=budget)
            except Exception as exc:  # report, never crash the benchmark
                rows.append({"run": path.stem, "step": steps_built, "budget": budget, "error": str(exc)})
                continue
            verbatim = {d.id for d in built.record.messages if d.decision in ("kept", "recent")}
            stale = [mid for mid in verbatim if mid in newer_of and newer_of[mid] in verbatim]
            task = store.messages[store.first_user_index].id if store.first_user_index is not None else None
            wanted = newest
            rows.append({
                "run": path.stem, "step": steps_built, "budget": budget, "messages": len(store),
                "tokens": built.record.tokens_after,
                "superseded_tokens": sum(store.get(mid).token_count for mid in stale),
                "superseded_messages": len(stale),
                "task_kept": task in verbatim,
                "edited_files": len(wanted),
                "newest_views_kept": sum(1 for mid in wanted.values() if mid in verbatim),
                "summary_tokens": built.record.budget_breakdown.spent.get("summaries", 0)
                if built.record.budget_breakdown is not None else 0,
                "tiny_summary": not built.record.identity
                and any(d.decision in ("summarised", "dropped") for d in built.record.messages)
                and built.record.budget_breakdown is not None
                and built.record.budget_breakdown.spent.get("summaries", 0) < TINY_SUMMARY,
            })
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--budgets", default="8000,16000")
    parser.add_argument("--every", type=int, default=10, help="build every N agent steps (and at the end)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    budgets = [int(b) for b in args.budgets.split(",")]
    started = time.perf_counter()
    rows: list[dict[str, Any]] = []
    for path in sorted(args.data.glob("*.json")):
        rows.extend(measure_run(path, budgets, args.every))
    print("| budget | builds | context tokens | superseded tokens kept (share) | superseded messages | "
          "task statement kept | newest view of edited files kept | summary tokens | builds with summaries < 64 tokens |")
    print("|---|---|---|---|---|---|---|---|---|")
    for budget in budgets:
        mine = [r for r in rows if r["budget"] == budget and "error" not in r]
        tokens = sum(r["tokens"] for r in mine)
        stale = sum(r["superseded_tokens"] for r in mine)
        files = sum(r["edited_files"] for r in mine)
        print(f"| {budget:,} | {len(mine)} | {tokens:,} | {stale:,} ({stale / max(tokens, 1):.1%}) | "
              f"{sum(r['superseded_messages'] for r in mine)} | {sum(r['task_kept'] for r in mine)}/{len(mine)} | "
              f"{sum(r['newest_views_kept'] for r in mine)}/{files} | {sum(r['summary_tokens'] for r in mine):,} | "
              f"{sum(r['tiny_summary'] for r in mine)} |")
    errors = [r for r in rows if "error" in r]
    if errors:
        print(f"{len(errors)} build(s) failed: {errors[:3]}")
    print(f"({time.perf_counter() - started:.0f} s)")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()

"""Why a newest view of an edited file is missing from a built context (issue 11 diagnosis).

Replays the SWE-bench runs as :mod:`benchmarks.swe_supersede` does (same builds, same
"newest view" definition) and, for every (build, file) pair whose newest view is not in the
context verbatim, says why:

- **(a) too big**: the view's chain alone is larger than the budget minus what every
  context must hold (reply priming, pinned system prompt, goal block, the newest step and
  newest user message, the task statement) — infeasible verbatim;
- **(b) all views do not fit**: the distinct chains of *all* wanted views plus those
  must-haves exceed the budget — keeping every view is infeasible in that build;
- **(c) displaced**: feasible, but other things took the room. For each such miss the
  script lists which single kind of occupant, given up alone, would have made room:
  the older working-memory steps, the summary reserve, score-5 user constraints, other
  score-5 chains, other newest views ordered ahead of it, other score-4 chains ahead of it;
- **(d) other**: not a candidate the fill saw (prefiltered, archived as superseded, not
  the view the library raises).

    PYTHONPATH=. python benchmarks/swe_views_diagnosis.py [--budgets 8000,16000] [--every 10]
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

from swe_supersede import build_points, wanted_views  # type: ignore[import-not-found]  # the benchmark's definition

import relevance_memory.pipeline as pipeline
from relevance_memory import CachePolicy, RelevanceMemoryManager
from relevance_memory._models import user_authored
from relevance_memory._tokenizer import REPLY_PRIMING_TOKENS
from relevance_memory.pipeline.ledger import Purpose
from relevance_memory.pipeline.partition import split_history

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "swebench_trajectories"
OCCUPANTS = ("older working-memory steps", "summary reserve", "score-5 user constraints", "other score-5 chains",
             "other newest views ahead", "other score-4 chains ahead", "working-tier chains ahead")

_captured: list[tuple[Any, Any]] = []
_build = pipeline.build


def _capturing_build(state: Any, seams: Any) -> Any:
    built = _build(state, seams)
    _captured.append((state, seams))
    return built


pipeline.build = _capturing_build  # type: ignore[assignment]


def diagnose(state: Any, seams: Any, wanted: dict[str, str], verbatim: set[str]) -> list[dict[str, Any]]:
    store, config = seams.store, seams.config
    part = state.partition
    budget = state.budget
    rows: list[dict[str, Any]] = []
    if part.identity:
        return rows
    roots = [store.chain_root(i) for i in range(len(store))]
    newest_user = next((m.index for m in reversed(store.messages) if m.role == "user" and m.index not in part.excluded), None)
    split = split_history(store.messages, roots, keep_recent=config.keep_recent, step_count=store.step_count,
                          excluded=set(part.excluded), newest_user=newest_user)
    chains = part.chains
    forced = set(split.forced)
    final = state.summarised.ledger if state.summarised is not None else part.ledger
    goal = final.spent_on(Purpose.GOAL_BLOCK)
    pinned = sum(store[i].token_count for i in part.pinned)
    task = chains[part.task_root].tokens if part.task_root is not None and part.task_root not in forced else 0
    must = REPLY_PRIMING_TOKENS + pinned + goal + sum(chains[r].tokens for r in forced) + task
    must += final.spent_on(Purpose.SUBTASK)
    view_roots = {store.chain_root(store.get(mid).index) for mid in wanted.values()}
    all_views = sum(chains[r].tokens for r in view_roots if r not in forced and r != part.task_root)
    wm_extra = sum(chains[r].tokens for r in part.recent if r not in forced)
    ranked = state.ranked
    chosen = state.summarised.selection if state.summarised is not None else None
    reserve = final.reserved_for(Purpose.SUMMARIES)
    scores = state.scored.scores if state.scored is not None else {}
    lib_views = {store.chain_root(store.get(mid).index) for mid in store.edited_views().values()}
    for path, mid in sorted(wanted.items()):
        if mid in verbatim:
            continue
        i = store.get(mid).index
        r = store.chain_root(i)
        size = chains[r].tokens if r in chains else store[i].token_count
        row: dict[str, Any] = {"file": path, "view": mid, "tokens": size, "budget": budget, "must": must,
                               "all_views": all_views, "score": scores[i].score if i in scores else None,
                               "chain_members": len(chains[r].members) if r in chains else 1}
        if size > budget - must:
            row["class"] = "a"
        elif all_views > budget - must:
            row["class"] = "b"
        else:
            row["class"] = "c"
        if r not in part.candidates:
            row["detail"] = "not a candidate (excluded or pinned)"
            row["class"] = "d" if row["class"] == "c" else row["class"]
        elif ranked is None or r not in ranked.tier:
            row["detail"] = "skipped by the prefilter: " + state.prefilter.skipped.get(r, "?")
            row["class"] = "d" if row["class"] == "c" else row["class"]
        elif r in ranked.superseded and ranked.tier[r] == "archive":
            row["detail"] = "archived as superseded: " + ranked.superseded[r]
            row["class"] = "d" if row["class"] == "c" else row["class"]
        elif r not in lib_views:
            row["detail"] = "not the view the library raises (a failed read, or a path it matches otherwise)"
            row["class"] = "d" if row["class"] == "c" else row["class"]
        else:
            assert chosen is not None
            ahead: Counter[str] = Counter()
            for other in ranked.order:
                if other == r:
                    break
                if other not in chosen.kept or other == part.task_root:
                    continue
                members = chains[other].members
                top = max(scores[j].score for j in members)
                if other in lib_views:
                    kind = "other newest views ahead"
                elif top >= 5 and any(user_authored(store[j].role, store[j].msg_type.value) for j in members):
                    kind = "score-5 user constraints"
                elif top >= 5:
                    kind = "other score-5 chains"
                elif ranked.tier[other] == "core":
                    kind = "other score-4 chains ahead"
                else:
                    kind = "working-tier chains ahead"
                ahead[kind] += chains[other].tokens
            ahead["older working-memory steps"] = wm_extra
            ahead["summary reserve"] = reserve
            room = budget - must - sum(ahead.values())
            short = size - room
            row["short"] = short
            row["occupants"] = dict(ahead)
            row["alone"] = [k for k in OCCUPANTS if ahead.get(k, 0) >= short]
            row["tier"] = ranked.tier[r]
            row["detail"] = chosen.notes.get(r, "")
        rows.append(row)
    return rows


def measure_run(path: Path, budgets: list[int], every: int) -> list[dict[str, Any]]:
    run = json.loads(path.read_text())
    messages = run["messages"]
    rows: list[dict[str, Any]] = []
    # every build a full rebuild, as when budgets alternate (an append would skip the pipeline)
    memory = RelevanceMemoryManager(on_invalid="repair", cache_policy=CachePolicy(always_rebuild=True))
    for steps_built in build_points(memory, messages, every):
        wanted = wanted_views(memory.store)
        for budget in budgets:
            _captured.clear()
            built = memory.build_context(budget=budget)
            verbatim = {d.id for d in built.record.messages if d.decision in ("kept", "recent")}
            state, seams = _captured[-1]
            for row in diagnose(state, seams, wanted, verbatim):
                row.update(run=path.stem, step=steps_built, wanted=len(wanted))
                rows.append(row)
            rows.append({"run": path.stem, "step": steps_built, "budget": budget, "pairs": len(wanted),
                         "kept": sum(1 for m in wanted.values() if m in verbatim)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--budgets", default="8000,16000")
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    budgets = [int(b) for b in args.budgets.split(",")]
    started = time.perf_counter()
    rows: list[dict[str, Any]] = []
    for path in sorted(args.data.glob("*.json")):
        rows.extend(measure_run(path, budgets, args.every))
    for budget in budgets:
        totals = [r for r in rows if r["budget"] == budget and "pairs" in r]
        misses = [r for r in rows if r["budget"] == budget and "class" in r]
        pairs = sum(r["pairs"] for r in totals)
        kept = sum(r["kept"] for r in totals)
        classes = Counter(r["class"] for r in misses)
        print(f"\nbudget {budget:,}: kept {kept}/{pairs}, missed {len(misses)}: "
              f"(a) too big {classes['a']}, (b) all views do not fit {classes['b']}, "
              f"(c) displaced {classes['c']}, (d) other {classes['d']}")
        alone: Counter[str] = Counter()
        none = 0
        for r in misses:
            if r["class"] == "c":
                alone.update(r["alone"])
                none += not r["alone"]
        print("  (c) misses that giving up one kind of occupant alone would fix:")
        for kind in OCCUPANTS:
            print(f"    {kind}: {alone[kind]}")
        print(f"    no single kind: {none}")
        details = Counter(r["detail"].split(":")[0] for r in misses if r["class"] == "d")
        if details:
            print(f"  (d): {dict(details)}")
        big = [r for r in misses if r["class"] == "a"]
        if big:
            print(f"  (a) view sizes: {sorted(r['tokens'] for r in big)[:5]}…{sorted(r['tokens'] for r in big)[-3:]} "
                  f"room {sorted(r['budget'] - r['must'] for r in big)[:3]}…; members>1: "
                  f"{sum(r['chain_members'] > 2 for r in big)}")
    print(f"({time.perf_counter() - started:.0f} s)")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()

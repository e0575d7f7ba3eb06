"""Medians over the A/B runs in this folder, or in the folder given (base_*.json: main
a5740de; new_*.json: board42 — 35c039d here, abd3a20 in round1_abd3a20/).

    python benchmarks/results/board7/summarize.py [folder]
"""
from __future__ import annotations

import glob
import json
import os
import statistics
import sys

HERE = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))


def rows(tree: str) -> dict[int, list[dict]]:
    out: dict[int, list[dict]] = {}
    for path in sorted(glob.glob(os.path.join(HERE, f"{tree}_*.json"))):
        with open(path) as f:
            data = json.load(f)
        for r in data["load"]:
            if r["backend"] == "redis":
                out.setdefault(r["writers"], []).append(r)
    return out


def fmt(values: list[float], pct: bool) -> str:
    m = statistics.median(values)
    lo, hi = min(values), max(values)
    return f"{m:.0%} ({lo:.0%}–{hi:.0%})" if pct else f"{m:.2f}× ({lo:.2f}–{hi:.2f})"


for tree in ("base", "new"):
    got = rows(tree)
    print(f"{tree}: {len(next(iter(got.values())))} runs")
    for w, rs in sorted(got.items()):
        print(f"  {w:2d} writers | batches/s ÷ min (per round) {fmt([r['vs_min_script_per_round'] for r in rs], True)}"
              f" | CPU ÷ min {fmt([r['cpu_vs_min_script'] for r in rs], False)}"
              f" | snapshot p50 ÷ raw HMGET {fmt([r['vs_raw_hmget'] for r in rs], False)}"
              f" | CPU µs/batch {statistics.median(r['cpu_us_per_batch'] for r in rs):.0f}"
              f" (server {statistics.median(r['server_cpu_us_per_batch'] for r in rs):.0f})")

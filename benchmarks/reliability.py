"""What issue 13's data safety and summaries cost: ingest and offline summaries, this tree vs a baseline.

Ingest now validates each batch whole, copies every message into a read-only deep copy and
holds a lock; the offline summarizer now segments prose with ``sentencex`` and reads tool
output by lines. This script measures both on this tree and on a baseline tree (e.g. the
commit before issue 13, unpacked with ``git archive``) **in the same run**, alternating the
two, and prints the ratio (new / baseline; < 1: faster):

    git archive 19e52e0 relevance_memory | tar -x -C /tmp/base
    PYTHONPATH=. python benchmarks/reliability.py --baseline /tmp/base --repeat 3 \
        --out benchmarks/results/reliability.json

- ingest: the shipped SWE fixture repeated ``--copies`` times (tool-call ids renumbered),
  appended with one ``extend`` per copy into one manager (messages/s);
- summarise: ``OfflineSummarizer().summarize`` of every message of the first 8 SWE runs of
  ``../shared/data`` (one level-2 draft of 2,000 tokens; skipped when the data is absent).

Each measurement runs in a fresh subprocess (no shared caches); the best of ``--repeat``.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

_INGEST = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
from relevance_memory import RelevanceMemoryManager, load_transcript
msgs = load_transcript(sys.argv[2]).messages
def renamed(k):
    out = []
    for m in msgs:
        m = json.loads(json.dumps(m))
        for c in m.get("tool_calls") or []:
            c["id"] = f"{c['id']}_{k}"
        if m.get("tool_call_id"):
            m["tool_call_id"] = f"{m['tool_call_id']}_{k}"
        out.append(m)
    return out
batches = [renamed(k) for k in range(int(sys.argv[3]))]
memory = RelevanceMemoryManager(max_input_tokens=8000)
start = time.perf_counter()
for batch in batches:
    memory.extend(batch[1:] if memory.messages else batch)
print(json.dumps({"seconds": time.perf_counter() - start, "messages": len(memory.messages)}))
"""

_SUMMARISE = r"""
import glob, json, sys, time
sys.path.insert(0, sys.argv[1])
from relevance_memory import load_transcript
from relevance_memory._models import content_text
from relevance_memory.summary._summary import OfflineSummarizer, SummaryItem
items = []
for path in sorted(glob.glob(sys.argv[2] + "/swebench_trajectories/*.json"))[:8]:
    for i, m in enumerate(load_transcript(path).messages):
        items.append(SummaryItem(f"{path[-12:]}{i}", m["role"], "x", content_text(m.get("content")), content_hash=f"{path}{i}"))
start = time.perf_counter()
OfflineSummarizer().summarize(items, level=2, max_tokens=2000)
print(json.dumps({"seconds": time.perf_counter() - start, "messages": len(items)}))
"""


def _run(code: str, *args: str) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, required=True, help="a tree holding the baseline relevance_memory/")
    parser.add_argument("--copies", type=int, default=30, help="copies of the fixture ingested (194 messages each)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    fixture = str(REPO / "fixtures" / "django__django-15280.json")
    results: dict[str, dict[str, float]] = {}
    jobs = {"ingest": (_INGEST, fixture, str(args.copies))}
    if (args.data / "swebench_trajectories").is_dir():
        jobs["summarise"] = (_SUMMARISE, str(args.data))
    for name, (code, *rest) in jobs.items():
        best = {"baseline": float("inf"), "new": float("inf")}
        count = 0.0
        for _ in range(args.repeat):  # alternate: both see the same machine load
            for label, root in (("baseline", args.baseline), ("new", REPO)):
                got = _run(code, str(root), *rest)
                best[label] = min(best[label], got["seconds"])
                count = got["messages"]
        results[name] = {**best, "messages": count, "ratio": best["new"] / best["baseline"]}
        print(f"{name:10s} {int(count):>6,} msgs  baseline {best['baseline']:.2f} s  new {best['new']:.2f} s  "
              f"ratio {best['new'] / best['baseline']:.2f}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        payload = {"machine": platform.platform(), "python": platform.python_version(), "results": results}
        args.out.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

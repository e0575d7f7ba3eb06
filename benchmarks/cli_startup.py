"""``relmem build`` wall time with the offline scorer: a baseline tree against this one,
runs interleaved in the same session (issue 13 item 15: ``openai`` + ``instructor`` are
imported only on the LLM path).

    python benchmarks/cli_startup.py --baseline /path/to/baseline/checkout --runs 7 \\
        --out benchmarks/results/cli_startup.json

Each run is a fresh process ``relmem build fixtures/django__django-15280.json --budget 8000
--scorer offline`` (with the tree first on ``sys.path``); also reported: whether the process
imported ``openai`` / ``instructor``. Medians and the ratio new / baseline.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CODE = """
import sys, runpy
sys.path.insert(0, {tree!r})
sys.argv = ["relmem", "build", {fixture!r}, "--budget", "8000", "--scorer", "offline",
            "--out", {out!r}, "--record", {rec!r}]
import relevance_memory
assert relevance_memory.__file__.startswith({tree!r}), relevance_memory.__file__
try:
    from relevance_memory._cli import main
except ImportError:
    from relevance_memory.cli import main
try:
    main()
except SystemExit:
    pass
print("IMPORTED", sorted(m for m in ("openai", "instructor") if m in sys.modules), file=sys.stderr)
"""


def run(tree: Path, tmp: Path) -> tuple[float, list[str]]:
    code = CODE.format(tree=str(tree), fixture=str(ROOT / "fixtures" / "django__django-15280.json"),
                       out=str(tmp / "c.json"), rec=str(tmp / "r.json"))
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    seconds = time.perf_counter() - started
    line = next(x for x in done.stderr.splitlines() if x.startswith("IMPORTED"))
    return seconds, json.loads(line.removeprefix("IMPORTED ").replace("'", '"'))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", type=Path, required=True)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    times: dict[str, list[float]] = {"baseline": [], "new": []}
    imported: dict[str, list[str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        run(ROOT, Path(tmp))  # warm the file cache once
        for _ in range(args.runs):
            for name, tree in (("baseline", args.baseline.resolve()), ("new", ROOT)):
                seconds, mods = run(tree, Path(tmp))
                times[name].append(seconds)
                imported[name] = mods
    result = {
        "command": " ".join(sys.argv), "runs": args.runs,
        "median_s": {k: round(statistics.median(v), 3) for k, v in times.items()},
        "all_s": {k: [round(x, 3) for x in v] for k, v in times.items()},
        "imported": imported,
    }
    result["ratio_new_over_baseline"] = round(result["median_s"]["new"] / result["median_s"]["baseline"], 3)
    print(json.dumps(result, indent=1))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

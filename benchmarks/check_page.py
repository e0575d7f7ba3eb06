"""Re-run BENCHMARKS.md's quick measurements and fail when the page says something else.

    python benchmarks/check_page.py               # every check (~1-2 min on an idle machine)
    python benchmarks/check_page.py --only build  # one check by name
    python benchmarks/check_page.py --print       # print what the commands print now (to update the page)

A check is a fenced block on the page right after a ``<!-- check: NAME -->`` line; NAME is
one of :data:`CHECKS` (the command it runs). Each line of the block is matched to the first
line of the command's output with the same *key* — the line's text before its first digit,
box-drawing characters and repeated spaces removed (``scores:``, ``TOTAL calls=``,
``tokens (o200k_base)``) — and compared:

- **deterministic figures exactly**: the whole line must be equal (token counts, ratios,
  shares, counts — the same input gives the same bytes);
- **timings within a factor** of :data:`TIMING_FACTOR` (2.5) or :data:`TIMING_SLACK_S`
  (10 ms) of the page's value: the figures a check's ``timing`` pattern matches (seconds).
  The machine is shared: its load moves wall time 2–4×, so a timing check catches a
  regression of an order of magnitude, not a few per cent. Ratios of two timings (a
  check's ``derived`` pattern, e.g. ``2.0×`` in the overhead line) are not compared: with
  millisecond timings they swing 1–10× from run to run; the timings they come from are.

Exit status 1 when a line differs (each difference is printed), 0 otherwise.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "BENCHMARKS.md"
PYTHON = sys.executable
RELMEM = [PYTHON, "-m", "relevance_memory.cli"]
FIXTURE = "fixtures/django__django-15280.json"
TIMING_FACTOR = 2.5
TIMING_SLACK_S = 0.010


@dataclass(frozen=True)
class Check:
    """A quick command and which of its figures are timings (a regex whose group 1 is one)."""

    command: list[str]
    timing: str | None = None
    derived: str | None = None


CHECKS: dict[str, Check] = {
    "build": Check([*RELMEM, "build", FIXTURE, "--budget", "8000", "--out", "{tmp}/context.json",
                    "--record", "{tmp}/record.json"]),
    "replay-example": Check([PYTHON, "examples/replay_agent.py", "--scripted"], timing=r"seconds=([\d.]+)"),
    "replay": Check([*RELMEM, "replay", FIXTURE, "--budget", "8000"]),
    "anthropic-example": Check([PYTHON, "examples/anthropic_agent.py"]),
    "overhead": Check([PYTHON, "benchmarks/overhead.py", "--sizes", "1000", "--max-chars", "400"],
                      timing=r"(?<![\d,])(\d+\.\d+)s\b", derived=r"\d+(?:\.\d+)?×"),
}


def key(line: str) -> str:
    """What identifies a line: its text before the first digit, normalised."""
    text = " ".join(line.replace("│", " ").replace("┃", " ").split())
    return re.split(r"\d", text, maxsplit=1)[0].strip()


def normal(line: str) -> str:
    return " ".join(line.replace("│", " ").replace("┃", " ").split())


def blocks(page: str) -> dict[str, list[str]]:
    """``{name: [expected line, …]}`` for each ``<!-- check: name -->`` block of the page."""
    out: dict[str, list[str]] = {}
    for match in re.finditer(r"<!-- check: ([\w-]+) -->\s*```\w*\n(.*?)```", page, re.S):
        out[match.group(1)] = [line for line in match.group(2).splitlines() if line.strip()]
    return out


def run(name: str, tmp: Path) -> list[str]:
    """The command's output lines (stdout and stderr), on a wide terminal so nothing wraps."""
    command = [part.replace("{tmp}", str(tmp)) for part in CHECKS[name].command]
    env = {**os.environ, "COLUMNS": "250", "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"{name}: {' '.join(command)} exited {done.returncode}:\n{done.stderr[-2000:]}")
    return (done.stdout + done.stderr).splitlines()


def compare(expected: str, got: str, timing: str | None, derived: str | None = None) -> str | None:
    """``None`` when ``got`` says what ``expected`` says (timings within the tolerance, figures
    ``derived`` from timings not compared), else why not."""
    want, have = normal(expected), normal(got)
    if derived is not None:
        want, have = re.sub(derived, "R", want), re.sub(derived, "R", have)
    if timing is None:
        return None if want == have else f"page: {want}\n    now:  {have}"
    pattern = re.compile(timing)
    if pattern.sub("T", want) != pattern.sub("T", have):
        return f"page: {want}\n    now:  {have}"
    for a, b in zip(pattern.findall(want), pattern.findall(have), strict=True):
        page_value, now = float(a), float(b)
        within = page_value / TIMING_FACTOR <= now <= page_value * TIMING_FACTOR
        if not within and abs(now - page_value) > TIMING_SLACK_S:
            return f"timing {now} is not within {TIMING_FACTOR}x of the page's {page_value}\n    page: {want}\n    now:  {have}"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="run only this check")
    parser.add_argument("--print", action="store_true", help="print each command's output lines and exit 0")
    parser.add_argument("--page", type=Path, default=PAGE, help="the page to check (default: BENCHMARKS.md)")
    args = parser.parse_args(argv)
    found = blocks(args.page.read_text(encoding="utf-8"))
    unknown = sorted(set(found) - set(CHECKS))
    if unknown:
        print(f"unknown check(s) on the page: {', '.join(unknown)} (known: {', '.join(CHECKS)})")
        return 1
    import tempfile

    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, lines in found.items():
            if args.only and name != args.only:
                continue
            output = run(name, Path(tmp))
            if args.print:
                print(f"== {name}\n" + "\n".join(output))
                continue
            by_key: dict[str, str] = {}
            for line in output:
                by_key.setdefault(key(line), line)
            for line in lines:
                got, check = by_key.get(key(line)), CHECKS[name]
                problem = "no such line in the output" if got is None else compare(line, got, check.timing, check.derived)
                if problem:
                    failures += 1
                    print(f"{name}: {key(line)!r}: {problem}")
            print(f"{name}: {len(lines)} line(s) checked")
    if failures:
        print(f"{failures} figure line(s) on {args.page.name} differ from what the commands print now")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

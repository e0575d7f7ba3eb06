"""``examples/anthropic_agent.py`` runs against its mock endpoint (no key, no network) as a script."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("anthropic")

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "anthropic_agent.py"
TOTAL = re.compile(r"^TOTAL (\d+) requests; largest (\d+) tokens for a budget of (\d+) \(full history at the end: (\d+)\); "
                   r"cache read (\d+) of (\d+) tokens sent", re.M)


def test_the_example_replays_the_run_within_the_budget() -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), "--budget", "4000", "--steps", "40", "--stream"],
        capture_output=True, text=True, timeout=180, cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "PYTHONWARNINGS": "ignore::UserWarning"},
    )
    assert done.returncode == 0, done.stderr
    match = TOTAL.search(done.stdout)
    assert match, done.stdout[-2000:]
    requests, largest, budget, history, read, sent = map(int, match.groups())
    assert requests == 40 and budget == 4000 and largest <= 4000 < history
    assert 0.5 * sent < read < sent
    rows = [line.split() for line in done.stdout.splitlines() if re.match(r"^\s+\d+\s", line)]
    assert len(rows) == 40 and {r[3] for r in rows} >= {"appended", "compacted"}

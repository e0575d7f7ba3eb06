"""``examples/replay_agent.py`` runs on its scripted model (no key, no network) and its totals add up."""

from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "replay_agent.py"
TOTAL = re.compile(
    r"^TOTAL calls=(\d+) history_tokens=(\d+) sent_tokens=(\d+) saved=([\d.]+)% max_sent=(\d+) budget=(\d+) "
    r"final_history=(\d+)",
    re.M,
)


def test_replay_of_the_whole_django_run_in_a_subprocess() -> None:
    env_python = sys.executable
    done = subprocess.run(
        [env_python, str(EXAMPLE), "--budget", "5000", "--keep-recent", "3", "--scripted"],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    match = TOTAL.search(done.stdout)
    assert match, done.stdout[-2000:]
    calls, history, sent, saved, max_sent, budget, final = match.groups()
    assert int(calls) == 96 and int(final) == 194  # every step of the recorded run was replayed
    assert int(budget) == 5000 and int(max_sent) <= 5000
    assert int(sent) < int(history)
    assert abs(float(saved) - 100 * (1 - int(sent) / int(history))) < 0.06
    rows = [line.split() for line in done.stdout.splitlines() if re.match(r"^\s+\d+\s", line)]
    assert len(rows) == 96
    assert [int(r[1]) for r in rows] == list(range(2, 194, 2))  # the history grew by one step per call
    assert all(int(r[4]) <= 5000 for r in rows)


def test_run_returns_the_printed_totals_and_streams(monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLE.parent))
    import replay_agent

    out = io.StringIO()
    totals = replay_agent.run(
        ROOT / "fixtures" / "sympy__sympy-20590.json", budget=5000, keep_recent=2, steps=20, stream=True, out=out
    )
    assert totals["calls"] == 20 and totals["max_sent"] <= 5000
    assert totals["sent_tokens"] < totals["history_tokens"]
    assert f"sent_tokens={totals['sent_tokens']}" in out.getvalue()

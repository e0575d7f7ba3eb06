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
    # prefix-stable by default (issue 10): most calls append, the cache serves most tokens,
    # and the bill is below the full history's at both cached prices
    costs = re.search(r"cached_share=([\d.]+)% cost_vs_full@0.1=([\d.]+)x cost_vs_full@0.5=([\d.]+)x "
                      r"appended=(\d+) compacted=(\d+) full_rebuild=(\d+)", done.stdout)
    assert costs, done.stdout[-1000:]
    share, at_01, at_05, appended, compacted, rebuilt = costs.groups()
    assert float(share) > 80 and float(at_01) < 0.6 and float(at_05) < 0.5
    assert int(appended) + int(compacted) + int(rebuilt) == 96 and int(appended) > 3 * int(compacted)
    assert {r[6] for r in rows} <= {"appended", "compacted", "full"}


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
    # the streamed replies carried usage (stream_options include_usage): the provider's cached count
    assert totals["cached_tokens"] > 0 and totals["cost_ratio_0.1"] < 1.0

"""The framework examples run on their local fake models (no key, no network) and stay within budget."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
SYMPY = ROOT / "fixtures" / "sympy__sympy-20590.json"  # 60 recorded model calls, tool outputs up to 3.4k tokens
CALLS = 60 + 1  # the recorded calls, then one more after the last tool output


@pytest.fixture
def examples(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLES))


@pytest.mark.parametrize("mode", ["middleware", "legacy"])
def test_langchain_example_replays_the_whole_run_within_budget(examples: None, mode: str) -> None:
    pytest.importorskip("langchain.agents.middleware")
    import langchain_agent

    requests = langchain_agent.replay(SYMPY, budget=6000, mode=mode)
    assert len(requests.sizes) == CALLS
    assert requests.largest <= 6000 and requests.over == 0
    assert requests.largest > 6000 * 3 // 4


@pytest.mark.parametrize("mode", ["filter", "session-filter"])
def test_agents_example_replays_the_whole_run_within_budget(examples: None, mode: str) -> None:
    pytest.importorskip("agents")
    import agents_sdk

    requests = asyncio.run(agents_sdk.replay(SYMPY, budget=6000, mode=mode))
    assert len(requests.sizes) == CALLS
    assert requests.largest <= 6000 and requests.over == 0


def test_agents_example_unmanaged_baseline_outgrows_the_budget(examples: None) -> None:
    pytest.importorskip("agents")
    import agents_sdk

    requests = asyncio.run(agents_sdk.replay(SYMPY, budget=6000, mode="session"))  # a Session is read once per run
    assert len(requests.sizes) == CALLS and requests.largest > 2 * 6000 and requests.over > CALLS // 2


def test_otel_example_prints_a_build_and_a_model_call_span_per_step() -> None:
    pytest.importorskip("opentelemetry.sdk")
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "otel_trace.py"), "--steps", "25", "--budget", "5000"],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
        env={"PYTHONPATH": f"{ROOT}:{EXAMPLES}", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    total = re.search(r"^TOTAL spans=(\d+) builds=(\d+) model_calls=(\d+) compacted_calls=(\d+)$", done.stdout, re.M)
    assert total, done.stdout[-2000:]
    spans, builds, calls, compacted = map(int, total.groups())
    assert builds == calls == 25 and spans >= 50 and 0 < compacted < 25

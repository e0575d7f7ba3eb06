"""Review of 0d6e708, 1ee04b2, eedb4fa and c1ae1e9 (issue 24, build memory): the offline
summarizer's memos keyed by what they read, the chain index grown from its chains, the summary
cache keyed by the items and the Rust readers given copies of non-ASCII text. Every built
context and record must be what the code before them (bbd90db) gave.

Each test runs one script twice in a subprocess — once on this tree, once on bbd90db's
``relevance_memory`` (extracted with ``git archive``) — and compares their JSON outputs.
Skipped without git and the repository's history."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
OLD_COMMIT = "bbd90db"
FIXTURES = sorted((ROOT / "fixtures").glob("*__*.json"))
SHARED = Path("/work/shared/data/swebench_trajectories")
SHARED_RUNS = sorted(SHARED.glob("*__*.json")) if SHARED.is_dir() else []


def _old_tree() -> Path:
    target = Path(tempfile.gettempdir()) / f"build_memory_review_{OLD_COMMIT}"
    if not (target / "relevance_memory" / "__init__.py").exists():
        try:
            archive = subprocess.run(["git", "-C", str(ROOT), "archive", OLD_COMMIT, "relevance_memory"],
                                     check=True, capture_output=True).stdout
        except (OSError, subprocess.CalledProcessError):
            pytest.skip(f"needs git and the repository's history ({OLD_COMMIT}) to compare with the old code")
        staging = Path(tempfile.mkdtemp(prefix=f"{target.name}.", dir=target.parent))
        subprocess.run(["tar", "-x", "-C", str(staging)], input=archive, check=True)
        try:
            staging.rename(target)  # whole or not at all (parallel test processes)
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)
    return target


PRELUDE = '''
import copy, json, pickle, sys
from datetime import datetime, timedelta, timezone
from relevance_memory import RelevanceMemoryManager, SummaryDraft, SummaryItem, OfflineSummarizer
T = datetime(2026, 1, 1, tzinfo=timezone.utc)

def attempt(f):
    try:
        return f()
    except Exception as e:  # the exception's type and message are part of the behaviour
        return "EXC " + type(e).__name__ + ": " + str(e)

def memory(**kw):
    kw.setdefault("clock", lambda: T)
    kw.setdefault("max_input_tokens", 4000)
    return RelevanceMemoryManager(**kw)

def seen(built):
    """Everything a build shows: its messages, mode, sources and whole record."""
    return [json.dumps(built.messages, ensure_ascii=False), built.record.mode, list(built.sources),
            built.record.model_dump_json()]

def build(m, **kw):
    return attempt(lambda: seen(m.build_context(**kw)))

def steps(messages):
    """The history cut into agent steps: each ends at a tool result or a user message."""
    out, batch = [], []
    for msg in messages:
        batch.append(copy.deepcopy(msg))
        if msg["role"] in ("tool", "user") and not (msg["role"] == "user" and len(batch) == 1 and not out):
            out.append(batch)
            batch = []
    if batch:
        out.append(batch)
    return out
'''


def run(body: str, tree: Path) -> Any:
    script = PRELUDE + "\n" + textwrap.dedent(body) + "\nprint(json.dumps(RESULT, default=repr))\n"
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0"}
    with tempfile.TemporaryDirectory() as cwd:
        done = subprocess.run([sys.executable, "-c", script], env=env, cwd=cwd, capture_output=True, text=True,
                              timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def both(body: str) -> tuple[Any, Any]:
    return run(body, _old_tree()), run(body, ROOT)


def assert_same(body: str) -> None:
    old, new = both(body)
    if old != new:
        diffs = _diffs(old, new)
        pytest.fail(f"old and new differ ({len(diffs)} places):\n" + "\n".join(diffs[:12]))


def _diffs(old: Any, new: Any, path: str = "") -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict) and old.keys() == new.keys():
        return [d for k in old for d in _diffs(old[k], new[k], f"{path}.{k}")]
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [d for i, (a, b) in enumerate(zip(old, new, strict=True)) for d in _diffs(a, b, f"{path}[{i}]")]
    if isinstance(old, str) and isinstance(new, str) and old != new:
        at = next((i for i, (a, b) in enumerate(zip(old, new)) if a != b), min(len(old), len(new)))
        return [f"{path} at char {at}:\n  OLD …{old[max(0, at - 200):at + 300]}\n  NEW …{new[max(0, at - 200):at + 300]}"]
    return [] if old == new else [f"{path}:\n  OLD {str(old)[:600]}\n  NEW {str(new)[:600]}"]


# ------------------------------------------------------------------ long agent loops
LOOP = '''
RESULT = {}
for path in PATHS:
    FIX = json.load(open(path))["messages"]
    for budget in BUDGETS:
        m = memory()
        out = []
        for batch in steps(FIX):
            m.extend(batch)
            out.append(build(m, budget=budget))
        out.append(build(m, budget=budget, compact=True))
        RESULT[f"{path.rsplit('/', 1)[-1]}@{budget}"] = out
'''


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_fixture_loops_step_by_step_at_tight_budgets(path: Path) -> None:
    assert_same(f"PATHS = [{str(path)!r}]\nBUDGETS = [1500, 2500, 4000]\n" + LOOP)


@pytest.mark.skipif(not SHARED_RUNS, reason="no shared SWE-bench runs on this machine")
def test_shared_swebench_runs_step_by_step() -> None:
    assert_same(f"PATHS = {[str(p) for p in SHARED_RUNS]!r}\nBUDGETS = [2000]\n" + LOOP)

"""Running one script on this tree and on an older commit's ``relevance_memory`` (the review
tests: ``tests/store/test_raw_shape_review.py``, ``tests/pipeline/test_build_memory_review.py``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


def old_tree(commit: str, name: str, fixes: Sequence[str] = ()) -> Path:
    """``relevance_memory`` of ``commit`` extracted (``git archive``) under the temp directory
    as ``<name>_<commit>[+<fix>…]``, once; skips the test without git or the repository's history.

    ``fixes``: commits whose change to ``relevance_memory`` (against their first parent) is
    applied on top — deliberate behaviour changes made after the reviewed commit, so that the
    review keeps comparing everything else with it (``git apply``, else ``patch --fuzz=3`` when
    the old tree's lines around a hunk differ). Raises ``subprocess.CalledProcessError`` when a
    fix does not apply to the old tree even so."""
    target = Path(tempfile.gettempdir()) / "+".join([f"{name}_{commit}", *fixes])
    if not (target / "relevance_memory" / "__init__.py").exists():
        try:
            archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "relevance_memory"],
                                     check=True, capture_output=True).stdout
            patches = [subprocess.run(["git", "-C", str(ROOT), "diff", f"{fix}^1", fix, "--", "relevance_memory"],
                                      check=True, capture_output=True).stdout for fix in fixes]
        except (OSError, subprocess.CalledProcessError):
            pytest.skip(f"needs git and the repository's history ({commit}) to compare with the old code")
        staging = Path(tempfile.mkdtemp(prefix=f"{target.name}.", dir=target.parent))
        subprocess.run(["tar", "-x", "-C", str(staging)], input=archive, check=True)
        for patch in patches:
            applied = subprocess.run(["git", "apply", "-"], input=patch, cwd=staging, capture_output=True)
            if applied.returncode != 0:  # the old tree's context moved: apply with fuzz, every hunk or fail
                subprocess.run(["patch", "-p1", "--fuzz=3", "--no-backup-if-mismatch", "-s"], input=patch, cwd=staging,
                               check=True, capture_output=True)
        try:
            staging.rename(target)  # whole or not at all (parallel test processes)
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)
    return target


def run_script(script: str, tree: Path, *, timeout: float = 1800) -> Any:
    """Run ``script`` (which prints its JSON result last) with ``tree`` first on the path, in a
    fresh temporary directory, ``PYTHONHASHSEED=0``; returns the parsed result (seconds:
    ``timeout``)."""
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0"}
    with tempfile.TemporaryDirectory() as cwd:
        (Path(cwd) / "review_script.py").write_text(script, encoding="utf-8")  # (too long for an argument)
        done = subprocess.run([sys.executable, "review_script.py"], env=env, cwd=cwd, capture_output=True, text=True,
                              timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])

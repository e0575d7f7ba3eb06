"""Shared test helpers: where the real data sets live (``../shared/data``), if anywhere."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def shared_data() -> Path | None:
    """``<repo>/../shared/data`` (CI: ``shared/`` beside the repo), else ``/work/shared/data``; ``None`` when absent."""
    for candidate in (REPO.parent / "shared" / "data", Path("/work/shared/data")):
        if candidate.is_dir():
            return candidate
    return None


@pytest.fixture
def data_dir() -> Path:
    """The shared data folder; skips the test when it is absent (a fresh clone has none)."""
    found = shared_data()
    if found is None:
        pytest.skip("../shared/data is absent (LoCoMo / LongMemEval are not shipped with the repo)")
    return found

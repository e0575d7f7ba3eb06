"""Where the real data sets are: the one lookup every test, fixture and script uses.

``../shared/data`` (LoCoMo, LongMemEval, SWE-bench runs, τ-bench results) is not shipped with
the repo: CI puts ``shared/`` beside it. A clone elsewhere finds it through ``RELMEM_SHARED_DATA``
or at ``/work/shared/data``; without any, the tests that need it skip, saying so.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["MISSING", "shared_data"]

REPO = Path(__file__).resolve().parents[1]

MISSING = ("../shared/data is absent (the real data sets are not shipped with the repo; "
           "set RELMEM_SHARED_DATA to their folder)")
"""The reason a test that needs the data skips with."""


def shared_data() -> Path | None:
    """``$RELMEM_SHARED_DATA``, else ``<repo>/../shared/data``, else ``/work/shared/data``: the
    first that is a folder; ``None`` when none is."""
    candidates = [Path(os.environ["RELMEM_SHARED_DATA"])] if os.environ.get("RELMEM_SHARED_DATA") else []
    for candidate in (*candidates, REPO.parent / "shared" / "data", Path("/work/shared/data")):
        if candidate.is_dir():
            return candidate
    return None

"""Golden builds (issue 9): decision records and contexts of real runs, byte for byte.

Each key of ``tests/goldens.py`` (two fixtures and every case with a history always; every
SWE-bench run and 20 τ-bench runs of ``../shared/data`` when present) is built with a fixed
clock and compared by sha256 with ``tests/golden/hashes.json``. A failure means the pipeline
decides differently: if that is on purpose, regenerate with ``python scripts/golden.py
--write`` in a commit of its own that says why (``--dump DIR`` before and after, then diff).
The SPEC §9 invariants are asserted on every build.
"""

from __future__ import annotations

import pytest
from goldens import golden_keys, load_hashes, run, shared_data
from invariants import assert_invariants

from relevance_memory import BuiltContext

STORED = load_hashes()
KEYS = golden_keys(with_data=True)


@pytest.mark.parametrize("key", KEYS)
def test_golden(key: str) -> None:
    assert key in STORED, f"{key} has no stored golden: run python scripts/golden.py --write"
    golden = run(key)
    if "|replay|" not in key:  # a replay's builds each read a prefix of the history
        for built in golden.builds:
            if isinstance(built, BuiltContext):
                assert_invariants(golden.history, built, built.record.budget, golden.memory.tokenizer)
    assert golden.digest == STORED[key], (
        f"{key}: the build differs from its golden (python scripts/golden.py --dump DIR shows it in full)"
    )


def test_every_stored_golden_is_checked() -> None:
    """No golden is stored for an input that no longer exists (data-set ones need the data)."""
    if shared_data() is None:
        pytest.skip("../shared/data is absent: the SWE-bench and τ-bench goldens are not checked")
    assert sorted(STORED) == sorted(KEYS)

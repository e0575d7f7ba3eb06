"""SPEC §9 output invariants, asserted on every build in the test suite.

The checker itself is public (:func:`relevance_memory.testing.assert_valid_context`), so
users assert the same invariants on their own builds; this module keeps the suite's names.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from relevance_memory import BuiltContext, TokenCounter
from relevance_memory.testing import assert_valid_context, is_generated

__all__ = ["assert_invariants", "is_generated"]


def assert_invariants(
    history: Sequence[dict[str, Any]], built: BuiltContext, budget: int, counter: TokenCounter
) -> None:
    """Assert every SPEC §9 invariant of ``built`` against the input ``history`` within ``budget``."""
    assert_valid_context(history, built, counter, budget=budget)

"""Test scorers shared by several test modules."""

from __future__ import annotations

from typing import Any

from relevance_memory import OfflineScorer


class WrappedOfflineScorer:
    """The offline scorer's answers behind a scorer that declares neither ``local`` nor
    ``context_dependent`` — as an LLM or a user's own wrapper would: ``prefilter="auto"``
    ranks in front of it and its scores go through the shared, content-keyed cache.

    Attributes:
        items: how many messages were sent to it.
    """

    name = "wrapped"
    model = "wrapped-1"
    rubric_version = "v1"

    def __init__(self) -> None:
        self.inner = OfflineScorer()
        self.items = 0

    def score(self, goal: Any, items: Any, context: Any = None) -> Any:
        self.items += len(items)
        return self.inner.score(goal, items, context)

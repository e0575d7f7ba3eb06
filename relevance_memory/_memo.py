"""Bounded memos: a dict that is emptied when full (pure helpers, no I/O).

Ingest, the embedder and the summarizer memoise what repeats across messages (a token's
verdict, a piece's token ids, a text's rows); only speed depends on such a memo, so when it is
full it is simply emptied — no per-entry bookkeeping on the hot path.
"""

from __future__ import annotations

from typing import TypeVar

__all__ = ["remember"]

K = TypeVar("K")
V = TypeVar("V")


def remember(memo: dict[K, V], key: K, value: V, limit: int) -> V:
    """Store ``value`` under ``key`` in ``memo``, first emptying it when it holds ``limit``
    entries; returns ``value``."""
    if len(memo) >= limit:
        memo.clear()
    memo[key] = value
    return value

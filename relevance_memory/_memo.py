"""Bounded memos: a dict that is emptied when full (pure helpers, no I/O).

Ingest, the embedder and the summarizer memoise what repeats across messages (a token's
verdict, a piece's token ids, a text's rows); only speed depends on such a memo, so when it is
full it is simply emptied — no per-entry bookkeeping on the hot path.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Generic, TypeVar

__all__ = ["TextMemo", "longest_prefix", "remember", "same_prefix"]

K = TypeVar("K")
T = TypeVar("T")
V = TypeVar("V")


def same_prefix(before: Sequence[object], now: Sequence[object]) -> int:
    """How many leading items of ``now`` are the very objects (``is``) at the same places in
    ``before``: the part of an earlier build's list a memo of it still holds for. One pass in
    C (``map``, ``compress``), no Python call per item."""
    same = map(operator.is_not, before, now)
    return next(itertools.compress(itertools.count(), same), min(len(before), len(now)))


def longest_prefix(kept: Iterable[T], items: tuple[object, ...], of: Callable[[T], tuple[object, ...]]) -> T | None:
    """The entry of ``kept`` whose ``of(entry)`` is the longest non-empty prefix of ``items`` (the
    same items in order: equal, each first by identity, compared in C; its last item first),
    or ``None``: what a memo of an earlier, shorter list resumes from."""
    best: T | None = None
    longest = 0
    for entry in kept:
        done = of(entry)
        n = len(done)
        if longest < n <= len(items):
            a, b = done[-1], items[n - 1]
            if (a is b or a == b) and done == items[:n]:
                best, longest = entry, n
    return best


def remember(memo: dict[K, V], key: K, value: V, limit: int) -> V:
    """Store ``value`` under ``key`` in ``memo``, first emptying it when it holds ``limit``
    entries; returns ``value``."""
    if len(memo) >= limit:
        memo.clear()
    memo[key] = value
    return value


class TextMemo(Generic[V]):
    """A bounded memo of a pure function of short texts: ``text → value``, emptied when the
    texts it holds reach ``max_chars`` characters in all; texts longer than ``longest`` are
    not kept (a long text seldom recurs, and would crowd out the lines and sentences that do).

    Each variant (an argument of the function besides the text) has its own dict keyed by the
    text itself, the caller's string: no ``(text, variant)`` tuple per entry (issue 24: those
    tuples were half of what the text memos held, ~50 bytes a stored message at 100,000). A
    memo whose variants are nearly as many as its texts (``by_variant=False``: an excerpt's
    budget and kept names) keys each entry by ``(text, variant)`` instead: a dict per variant
    would cost more than the tuple.

    Args:
        longest: the longest text kept (characters).
        max_chars: the characters of all kept texts together before the memo empties.
        by_variant: a dict per variant (few variants), else one dict keyed by ``(text, variant)``.
    """

    __slots__ = ("_by_variant", "_chars", "_data", "longest", "max_chars")

    def __init__(self, *, longest: int = 2_000, max_chars: int = 4_000_000, by_variant: bool = True) -> None:
        # variant → text → value (by_variant), else (text, variant) → value
        self._data: dict[object, Any] = {}
        self._chars = 0
        self._by_variant = by_variant
        self.longest, self.max_chars = longest, max_chars

    def get(self, text: str, variant: object = None) -> V | None:
        """The value kept for ``(text, variant)``, or ``None``."""
        found: V | None  # (no cast(): a call on every read)
        if not self._by_variant:
            found = self._data.get((text, variant))
            return found
        table = self._data.get(variant)
        found = None if table is None else table.get(text)
        return found

    def put(self, text: str, value: V, variant: object = None) -> V:
        """Keep ``value`` for ``(text, variant)`` (unless the text is too long); returns ``value``."""
        if len(text) <= self.longest:
            if self._chars + len(text) > self.max_chars:
                self._data.clear()
                self._chars = 0
            if not self._by_variant:
                self._data[(text, variant)] = value
            else:
                table = self._data.get(variant)
                if table is None:
                    table = self._data[variant] = {}
                table[text] = value
            self._chars += len(text)
        return value

    def __len__(self) -> int:
        """How many texts are kept (over all variants)."""
        return sum(map(len, self._data.values())) if self._by_variant else len(self._data)

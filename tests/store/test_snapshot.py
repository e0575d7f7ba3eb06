"""A store snapshot's sequences read the store as it was (issue 24: views, never copies)."""

from __future__ import annotations

from relevance_memory.store._snapshot import _Prefix


def test_prefix_reads_newest_first_from_its_own_end() -> None:
    """``reversed`` starts at the snapshot's last item, not at what was appended after it."""
    items = list(range(10))
    view = _Prefix(items, 7)
    assert list(reversed(view)) == [6, 5, 4, 3, 2, 1, 0]
    items.extend([10, 11])  # the store grew after the snapshot
    assert list(reversed(view)) == [6, 5, 4, 3, 2, 1, 0]
    assert list(reversed(_Prefix(items, 0))) == []
    assert list(reversed(_Prefix(items, len(items)))) == list(reversed(items))
    backwards = reversed(view)
    assert next(backwards) == 6
    items.append(12)  # growing while reading changes nothing already started
    assert list(backwards) == [5, 4, 3, 2, 1, 0]

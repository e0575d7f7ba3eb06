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


def test_indices_of_ids_are_the_store_order_and_name_an_id_not_held() -> None:
    """``indices`` of the store and of a snapshot: each id's index in the order asked; an id the
    store does not hold, or one stored after the snapshot was taken, is a KeyError naming it."""
    import pytest

    from relevance_memory import RelevanceMemoryManager
    from relevance_memory.store._snapshot import StoreSnapshot

    memory = RelevanceMemoryManager(max_input_tokens=4000)
    memory.extend([{"role": "user", "content": "Fix the parser."}, {"role": "assistant", "content": "On it."}])
    snapshot = StoreSnapshot(memory.store)
    memory.extend([{"role": "user", "content": "Also the lexer."}])
    assert memory.store.indices(["m2", "m0", "m1"]) == [2, 0, 1]
    assert snapshot.indices(["m1", "m0"]) == [1, 0] and snapshot.indices([]) == []
    with pytest.raises(KeyError, match="'m2'"):
        snapshot.indices(["m0", "m2"])
    for view in (memory.store, snapshot):
        with pytest.raises(KeyError, match="'nope'"):
            view.indices(["m0", "nope"])

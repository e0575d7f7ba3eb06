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


def test_views_read_first_after_the_store_grew_are_those_of_the_snapshot() -> None:
    """A snapshot makes its per-message and link views on first use (an append reads none of
    them, issue 24); read only after newer messages restated, referenced and superseded older
    ones, each equals the view of a store that holds only what the snapshot held."""
    from relevance_memory import RelevanceMemoryManager
    from relevance_memory.store._snapshot import StoreSnapshot

    def history(n: int) -> list[dict[str, object]]:
        out: list[dict[str, object]] = [{"role": "user", "content": "Book a flight; I live in Lisbon."}]
        for k in range(n):
            out += [
                {"role": "assistant", "content": "", "tool_calls": [{"id": f"c{k}", "type": "function", "function": {
                    "name": "bash", "arguments": '{"command": "cat /testbed/app/util.py"}'}}]},
                {"role": "tool", "tool_call_id": f"c{k}", "content": f"def f(x):\n    return x + {k}\n"},
                {"role": "user", "content": f"Actually I live in {['Porto', 'Faro', 'Braga'][k % 3]} now (see m{2 * k})."},
            ]
        return out

    grown, held = RelevanceMemoryManager(max_input_tokens=4000), RelevanceMemoryManager(max_input_tokens=4000)
    grown.extend(history(3))
    held.extend(history(3))
    snapshot = StoreSnapshot(grown.store)
    grown.extend(history(6)[len(history(3)):])  # restates the file and the city again, refers back
    assert len(grown.store) > len(held.store) and dict(grown.store.superseded_by) != dict(held.store.superseded_by)
    expected = StoreSnapshot(held.store)
    for name in ("terms", "idents", "episodes"):
        assert list(getattr(snapshot, name)) == list(getattr(expected, name)), name
    for name in ("referenced_by", "superseded_by", "supersedes"):
        assert dict(getattr(snapshot, name)) == dict(getattr(expected, name)), name
    assert dict(snapshot.superseded_by)  # the snapshot's own links are there

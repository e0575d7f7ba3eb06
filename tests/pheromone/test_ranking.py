"""The strength ranking behind the pheromone history (issue 24): the same top-N as ranking
every cell, from the writes since the last question."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from relevance_memory._config import PheromoneConfig
from relevance_memory._models import Message, MessageType
from relevance_memory.pheromone import _top
from relevance_memory.pheromone._field import HISTORY_FULL_MAX, PheromoneField
from relevance_memory.pheromone._math import settled_strength, strength_reader
from relevance_memory.pheromone._top import StrengthRanking

TYPES = [("tool_result", "tool"), ("assistant_reasoning", "assistant"), ("user_chat", "user"),
         ("user_instruction", "user"), ("tool_call", "assistant")]


def _msg(i: int, kind: int, refs: tuple[str, ...]) -> Message:
    msg_type, role = TYPES[kind]
    return Message(id=f"m{i}", index=i, role=role, content="x", msg_type=MessageType(msg_type), step=i,  # type: ignore[arg-type]
                   token_count=1, references=refs)


def _brute(field: PheromoneField, n: int) -> list[tuple[str, float]]:
    cells = field._cells
    values = [(m, settled_strength(c, field.tick, field.config)) for m, c in cells.items()]
    values.sort(key=lambda item: (-item[1], cells[item[0]].born_tick, item[0]))
    return values[:n]


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("grow"), st.integers(1, 40), st.integers(0, 4)),
        st.tuples(st.just("score"), st.integers(0, 10_000), st.integers(1, 5), st.integers(0, 3)),
        st.tuples(st.just("wait"), st.integers(0, 6), st.just(0)),
    ),
    min_size=1, max_size=40,
)
"""A field's history: messages arriving (how many, their kinds), scores deposited, ticks passing."""


@settings(max_examples=80, deadline=None)
@given(ops=OPS, n=st.integers(1, 6))
def test_ranking_matches_ranking_every_cell(ops: list[tuple[int | str, ...]], n: int) -> None:
    _check_ranking(ops, n)


@settings(max_examples=60, deadline=None)
@given(ops=OPS, n=st.integers(1, 6))
def test_ranking_rebuilt_from_every_cell_matches_too(ops: list[tuple[int | str, ...]], n: int) -> None:
    """With the one-pass rebuild taken whenever the writes are a quarter of the cells (at scale:
    a history ingested at once), the ranking is still exact."""
    saved = _top.REBUILD_MIN_WRITES
    _top.REBUILD_MIN_WRITES = 1
    try:
        _check_ranking(ops, n)
    finally:
        _top.REBUILD_MIN_WRITES = saved


def _check_ranking(ops: list[tuple[int | str, ...]], n: int) -> None:
    config = PheromoneConfig(tick_every=2, protect_ticks=2, history_top_n=n)
    field = PheromoneField(config)
    ranking = StrengthRanking(config)  # a second ranking, told of every write, asked after every op
    messages: list[Message] = []
    for op in ops:
        if op[0] == "grow":
            start = len(messages)
            for i in range(start, start + int(op[1])):
                refs = tuple(f"m{j}" for j in (i - 1, i // 2, i - 7) if 0 <= j < i)
                messages.append(_msg(i, (i + int(op[2])) % len(TYPES), refs))
            field.observe(messages)
        elif op[0] == "score" and messages:
            target = messages[int(op[1]) % len(messages)].id
            field.deposit({target: int(op[2])}, f"sub{op[3]}", f"goal{int(op[3]) // 2}")
        else:
            field.tick += int(op[1])
        for message_id in field._cells:
            ranking.written(message_id)
        assert ranking.top(field._cells, field.tick, n) == _brute(field, n)
        assert field._cells.ranking.top(field._cells, field.tick, n) == _brute(field, n)
        read = strength_reader(config, field.tick)  # the ranking's reader: the same floats, bit for bit
        assert [read(c) for c in field._cells.values()] == [settled_strength(c, field.tick, config)
                                                           for c in field._cells.values()]


def test_large_field_history_is_ranked_from_the_writes() -> None:
    """Past HISTORY_FULL_MAX cells an observe records one entry, equal to ranking every cell."""
    field = PheromoneField(PheromoneConfig(history_top_n=5))
    messages = [_msg(i, i % len(TYPES), (f"m{i - 3}",) if i >= 3 else ()) for i in range(HISTORY_FULL_MAX + 50)]
    field.observe(messages)
    field.deposit({"m10": 5, "m400": 4, "m999": 1}, "sub", "goal")
    for _ in range(3):
        messages += [_msg(len(messages) + k, k % len(TYPES), (f"m{k * 97}",)) for k in range(7)]
        field.observe(messages)
        entry = field.history[-1]
        assert entry["tick"] == field.tick and entry["messages"] == len(messages)
        assert entry["top"] == {m: round(s, 4) for m, s in _brute(field, 5)}


def test_a_repeat_deposit_is_ranked_in_the_build_that_made_it() -> None:
    """A deposit that adds nothing (the same message and subtask again) still writes the cells
    (their latest score); the ranking takes those writes in the deposit, so the next append's
    history entry reads only what that append wrote (issue 24: the first append after each
    compaction re-ranked ~50 cells)."""
    field = PheromoneField(PheromoneConfig(history_top_n=5))
    messages = [_msg(i, i % len(TYPES), ()) for i in range(HISTORY_FULL_MAX + 50)]
    field.observe(messages)
    scores = {f"m{i}": 2 + i % 4 for i in range(0, 600, 7)}
    assert field.deposit(scores, "sub", "goal")  # first time: deposits
    assert field.deposit(scores, "sub", "goal") == {}  # again: nothing added ...
    ranking = field._cells.ranking
    assert ranking._dirty == {}  # ... and nothing left for the next top()
    entries = len(field.history)
    messages += [_msg(len(messages) + k, 0, ("m7",)) for k in range(field.config.tick_every)]
    field.observe(messages)  # a tick: one history entry
    assert len(field.history) == entries + 1
    assert field.history[-1]["top"] == {m: round(s, 4) for m, s in _brute(field, 5)}


def test_a_history_ingested_at_once_is_ranked_in_one_pass() -> None:
    """The first read after thousands of new cells rebuilds the ranking from every cell; it and
    the later reads (a few writes each) equal ranking every cell."""
    field = PheromoneField(PheromoneConfig(history_top_n=8))
    messages = [_msg(i, i % len(TYPES), (f"m{i - 5}", f"m{i // 3}") if i >= 5 else ()) for i in range(_top.REBUILD_MIN_WRITES + 2000)]
    field.observe(messages)  # one history entry: every cell written since the last read
    assert field.history[-1]["top"] == {m: round(s, 4) for m, s in _brute(field, 8)}
    field.deposit({f"m{i}": 1 + i % 5 for i in range(0, 3000, 13)}, "sub", "goal")
    for _ in range(3):
        messages += [_msg(len(messages) + k, k % len(TYPES), (f"m{k * 31}",)) for k in range(field.config.tick_every)]
        field.observe(messages)
        assert field.history[-1]["top"] == {m: round(s, 4) for m, s in _brute(field, 8)}


LARGE_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("grow"), st.integers(1, 12), st.integers(0, 4)),
        st.tuples(st.just("score"), st.integers(0, 10_000), st.integers(1, 5), st.integers(0, 3)),
        st.tuples(st.just("load"), st.integers(0, 10_000), st.integers(0, 10_000), st.just(0)),
        st.tuples(st.just("read"), st.just(0), st.just(0), st.just(0)),
    ),
    min_size=1, max_size=30,
)
"""A large field's appends (new messages reinforcing older ones), deposits, cells written from
outside (a board memory loading its cells) and reads of the history, in any order."""


@settings(max_examples=60, deadline=None)
@given(ops=LARGE_OPS, n=st.integers(1, 6))
def test_history_entries_settled_later_equal_those_ranked_at_their_ticks(ops: list[tuple[int | str, ...]], n: int) -> None:
    """A large field's entries wait until the history is read (or a deposit): each then equals
    ranking every cell at its own tick, with the cells as they were then — later new messages,
    reinforcements, deposits and outside writes undone."""
    top = StrengthRanking.top

    def checked_top(self: StrengthRanking, cells: Any, tick: int, n: int) -> list[tuple[str, float]]:
        assert len(cells) == len(dict(cells.items()))  # an as-of view's O(log) length is its item count
        return top(self, cells, tick, n)

    StrengthRanking.top = checked_top  # type: ignore[method-assign]
    try:
        _check_settled_later(ops, n)
    finally:
        StrengthRanking.top = top  # type: ignore[method-assign]


def _check_settled_later(ops: list[tuple[int | str, ...]], n: int) -> None:
    config = PheromoneConfig(tick_every=2, protect_ticks=2, history_top_n=n)
    field = PheromoneField(config)
    messages = [_msg(i, i % len(TYPES), (f"m{i - 3}",) if i >= 3 else ()) for i in range(HISTORY_FULL_MAX + 20)]
    field.observe(messages)
    expected = field.history  # settled: the first entry
    for op in ops:
        if op[0] == "grow":
            start = len(messages)
            for i in range(start, start + int(op[1])):
                refs = tuple(f"m{j}" for j in (i - 1, (i * 7) % start, i - 40) if 0 <= j < i)
                messages.append(_msg(i, (i + int(op[2])) % len(TYPES), refs))
            ticked = field.tick
            field.observe(messages)
            if field.tick > ticked:  # an entry recorded now: what ranking every cell says now
                expected.append({"tick": field.tick, "messages": len(messages),
                                 "top": {m: round(s, 4) for m, s in _brute(field, n)}})
        elif op[0] == "score":
            target = messages[int(op[1]) % len(messages)].id
            field.deposit({target: int(op[2])}, f"sub{op[3]}", f"goal{int(op[3]) // 2}")
        elif op[0] == "load":  # a write from outside the field's own methods (AgentMemory._load_private)
            source = field._cells[messages[int(op[1]) % len(messages)].id]
            field._cells[messages[int(op[2]) % len(messages)].id] = source
        else:
            assert field.history == expected
    assert field.history == expected
    assert field._cells.journal is None and field._pending == []
    assert field._cells.ranking.top(field._cells, field.tick, n) == _brute(field, n)  # the ranking took every write


def test_history_entries_waiting_survive_a_copy_and_a_pickle() -> None:
    """A copy or a pickle settles the entries first (the table's own pickle holds no journal)."""
    import copy
    import pickle

    field = PheromoneField(PheromoneConfig(history_top_n=4))
    messages = [_msg(i, i % len(TYPES), ()) for i in range(HISTORY_FULL_MAX + 10)]
    field.observe(messages)
    for _ in range(3):
        messages += [_msg(len(messages) + k, k % len(TYPES), ("m3",)) for k in range(field.config.tick_every)]
        field.observe(messages)
    assert len(field._pending) == 4  # the ingest's last tick and three appends that ticked, none ranked yet
    entries = len(field._history) + 4
    copied, loaded = copy.deepcopy(field), pickle.loads(pickle.dumps(field))
    assert field._pending == [] and len(field.history) == entries
    assert copied.history == loaded.history == field.history
    assert copied == loaded == field


def test_at_most_pending_max_entries_wait() -> None:
    """With no reader and no deposit, the entries are settled in batches of PENDING_MAX."""
    from relevance_memory.pheromone import _field

    field = PheromoneField(PheromoneConfig(history_top_n=3, tick_every=1))
    messages = [_msg(i, i % len(TYPES), ()) for i in range(HISTORY_FULL_MAX + 1)]
    field.observe(messages)
    for _ in range(_field.PENDING_MAX + 5):
        messages.append(_msg(len(messages), 0, ("m1",)))
        field.observe(messages)
        assert len(field._pending) < _field.PENDING_MAX
    assert len(field._pending) == 6 and len(field._history) == HISTORY_FULL_MAX + _field.PENDING_MAX
    assert field.history[-1]["top"] == {m: round(s, 4) for m, s in _brute(field, 3)}


@settings(max_examples=60, deadline=None)
@given(refs=st.lists(st.lists(st.integers(1, 12), max_size=3), min_size=1, max_size=80),
       cuts=st.lists(st.integers(1, 80), max_size=6), kinds=st.integers(0, 4))
def test_reinforced_cells_shared_within_a_tick_equal_reinforcing_each(
        refs: list[list[int]], cuts: list[int], kinds: int) -> None:
    """The cells a field keeps equal those of reinforcing every reference on its own (the SPEC §5
    functions, message by message), however the messages arrive in batches; a shared cell's
    reinforcement in one tick is one cell."""
    from relevance_memory.pheromone._math import new_cell, reinforce

    config = PheromoneConfig(tick_every=3)
    messages = [_msg(i, (i * kinds + i // 3) % len(TYPES), tuple(dict.fromkeys(f"m{i - back}" for back in r if back <= i)))
                for i, r in enumerate(refs)]
    field = PheromoneField(config)
    for end in [*sorted(cuts), len(messages)]:
        field.observe(messages[:end])
    expected: dict[str, Any] = {}
    tick = 0
    for n, message in enumerate(messages, 1):
        expected[message.id] = new_cell(message.msg_type.value, tick, config)
        for ref in message.references:
            expected[ref] = reinforce(expected[ref], tick, config)[0]
        if n % config.tick_every == 0:
            tick += 1
    assert dict(field._cells) == expected and field.tick == tick


def test_the_results_of_one_tick_share_their_reinforced_call() -> None:
    from relevance_memory.pheromone._math import reinforce

    calls = [_msg(i, 4, ()) for i in range(2)]  # two calls born in one tick: one shared cell
    field = PheromoneField(PheromoneConfig(tick_every=8))
    field.observe(calls)
    born = field._cells["m0"]
    assert field._cells["m1"] is born
    field.observe([*calls, _msg(2, 0, ("m0",)), _msg(3, 0, ("m1",))])  # their results, in the same tick
    assert field._cells["m0"] is field._cells["m1"]  # both reinforced from the same cell: one new cell
    assert field._cells["m0"] == reinforce(born, 0, field.config)[0] != born

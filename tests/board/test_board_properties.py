"""Property tests over random operation sequences: the Redis board (its Lua script) and the
in-memory board (the pure Python functions) give bit-identical snapshots, and a private
scope keeps the memory the single-agent :class:`PheromoneField` keeps."""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from relevance_memory import PheromoneField
from relevance_memory.board import (
    Add,
    Advance,
    Archive,
    BoardConfig,
    Deposit,
    Forget,
    InMemoryBoard,
    RedisBoard,
    Reinforce,
    Repair,
    Restore,
    Supersede,
    Use,
)

from .board_support import SLOW_OK

pytestmark = pytest.mark.block_network(allowed_hosts=["127.0.0.1"])

IDS = [f"m{i}" for i in range(6)]
AGENTS = ["planner", "coder", "reviewer"]
SCOPES = ["shared", "private:coder"]
KINDS = ["user_instruction", "tool_result", "assistant_reasoning", "user_chat", "preference"]
GOALS = ["fix the parser", "write the docs", None]

item = st.sampled_from(IDS)
scope = st.sampled_from(SCOPES)
at = st.floats(0, 1e6, allow_nan=False, allow_infinity=False)


def _agent(scope: str, pick: str) -> str:
    return "coder" if scope.startswith("private:") else pick


@st.composite
def board_op(draw: Any) -> Any:
    sc = draw(scope)
    agent = _agent(sc, draw(st.sampled_from(AGENTS)))
    kind = draw(st.sampled_from(["add", "add", "deposit", "deposit", "reinforce", "advance", "use", "forget",
                                 "archive", "supersede", "restore"]))
    i = draw(item)
    if kind == "add":
        strength = draw(st.none() | st.floats(0, 10, allow_nan=False))
        return Add(sc, i, draw(st.sampled_from(KINDS)), agent, draw(at), strength)
    if kind == "deposit":
        return Deposit(sc, i, draw(st.integers(1, 5)), f"sub{draw(st.integers(0, 3))}", draw(st.sampled_from(GOALS)),
                       agent, draw(at))
    if kind == "reinforce":
        return Reinforce(sc, i, agent, draw(st.none() | item), draw(st.none() | st.floats(0, 3, allow_nan=False)),
                         draw(at))
    if kind == "advance":
        return Advance(sc, agent, draw(st.integers(0, 12)))
    if kind == "use":
        return Use(sc, i, agent, draw(st.integers(0, 50)), draw(at))
    if kind == "forget":
        return Forget(sc, i, agent, at=draw(at))
    if kind == "archive":
        return Archive(sc, i, agent, at=draw(at))
    if kind == "supersede":
        return Supersede(sc, i, draw(item.filter(lambda by: by != i)), agent, draw(at))  # never itself (refused)
    return Restore(sc, i, agent, draw(at))


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(st.lists(board_op(), min_size=1, max_size=8), min_size=1, max_size=8),
       goal=st.sampled_from(GOALS), subtask=st.sampled_from(["sub0", "sub1", None]),
       kept=st.sampled_from([0, 1, 3, 16]))
def test_redis_and_memory_boards_agree_bit_for_bit(redis_url: str, batches: list[list[Any]], goal: str | None,
                                                   subtask: str | None, kept: int) -> None:
    """Every outcome, amount and snapshot equal, provenance events included: the Redis
    board stores each event in a field of its own and deletes the seqs that fall out of the
    newest ``kept`` (small ``kept`` makes every history cross that line)."""
    config = BoardConfig(agent_share=0.4, lease_ticks=4, ttl_seconds={"shared": 1e5}, events_kept=kept)
    name = f"p-{uuid.uuid4().hex[:10]}"
    memory, redis = InMemoryBoard(name, config), RedisBoard.from_url(redis_url, name, config, **SLOW_OK)
    try:
        for ops in batches:
            got_m, got_r = memory.apply(ops), redis.apply(ops)
            assert got_m.outcomes == got_r.outcomes
            assert got_m.amounts == got_r.amounts
            for sc in SCOPES:  # after every batch: both boards' view caches see each change
                m = memory.snapshot(sc, IDS, agent="coder", goal=goal, subtask=subtask, now=5e5)
                r = redis.snapshot(sc, IDS, agent="coder", goal=goal, subtask=subtask, now=5e5)
                assert (m.tick, m.missing, m.cells) == (r.tick, r.missing, r.cells)
        for sc in SCOPES:
            m = memory.snapshot(sc, [*IDS, "absent"], agent="coder", goal=goal, subtask=subtask, now=5e5)
            r = redis.snapshot(sc, [*IDS, "absent"], agent="coder", goal=goal, subtask=subtask, now=5e5)
            assert (m.tick, m.missing) == (r.tick, r.missing)
            assert m.cells == r.cells  # floats, provenance, lifecycle: all equal
            assert memory.edges(sc) == redis.edges(sc)
            assert memory.snapshot(sc, None, agent="coder", provenance=True).cells == \
                redis.snapshot(sc, None, agent="coder", provenance=True).cells
            assert m.cells == redis.snapshot(sc, [*IDS, "absent"], agent="coder", goal=goal, subtask=subtask,
                                             now=5e5).cells  # the client's decoded-cell cache changes nothing
    finally:
        redis.close()


def test_a_repaired_cell_takes_its_events_along(redis_url: str) -> None:
    """A Repair writes the local copy's cell and its events (replacing what the item held)."""
    config = BoardConfig(events_kept=3)
    name = f"p-{uuid.uuid4().hex[:10]}"
    memory, redis = InMemoryBoard(name, config), RedisBoard.from_url(redis_url, name, config, **SLOW_OK)
    ops = [Add("shared", "m", "tool_result", "a"), *(Reinforce("shared", "m", "a", at=float(i)) for i in range(5))]
    memory.apply(ops)
    redis.apply(ops)
    cell = memory.snapshot("shared", ["m"], agent="a", provenance=True).cells["m"].cell
    redis.client.hset(redis.key("cells", "shared"), "m", "not a cell")
    assert redis.apply([Reinforce("shared", "m", "a")]).outcomes == ("corrupt",)
    assert redis.apply([Repair("shared", "m", cell, "a")]).outcomes == ("repaired",)
    got = redis.snapshot("shared", ["m"], agent="a", provenance=True).cells["m"].cell
    assert got == cell and [e.at for e in got.events] == [2.0, 3.0, 4.0]
    assert redis.apply([Use("shared", "m", "b", 7, at=9.0)]).outcomes == ("used",)
    memory.apply([Use("shared", "m", "b", 7, at=9.0)])
    assert redis.snapshot("shared", ["m"], agent="a", provenance=True).cells == \
        memory.snapshot("shared", ["m"], agent="a", provenance=True).cells
    redis.close()


@st.composite
def field_step(draw: Any) -> tuple[str, Any]:
    kind = draw(st.sampled_from(["add", "add", "deposit", "tick"]))
    if kind == "add":
        return "add", (draw(st.sampled_from(KINDS)), draw(st.lists(st.integers(0, 30), max_size=2)))
    if kind == "deposit":
        return "deposit", (draw(st.lists(st.tuples(st.integers(0, 30), st.integers(1, 5)), max_size=4)),
                           f"sub{draw(st.integers(0, 3))}", draw(st.sampled_from(GOALS)))
    return "tick", draw(st.integers(1, 4))


@settings(max_examples=80)
@given(steps=st.lists(field_step(), min_size=1, max_size=40))
def test_a_private_scope_keeps_the_fields_memory(steps: list[tuple[str, Any]]) -> None:
    """Same history → the board's private scope and today's PheromoneField agree (the field
    settles every cell at each tick, the board lazily: equal to rounding)."""
    field = PheromoneField()
    board = InMemoryBoard("b", BoardConfig())
    sc = "private:coder"
    ids: list[str] = []
    for kind, arg in steps:
        if kind == "add":
            k, refs = arg
            new = f"m{len(ids)}"
            earlier = list(dict.fromkeys(ids[r % len(ids)] for r in refs)) if ids else []  # a message references an id once
            field._add(new, k, earlier)
            board.apply([Add(sc, new, k, "coder"), *(Reinforce(sc, e, "coder", source=new) for e in earlier)])
            ids.append(new)
        elif kind == "deposit" and ids:
            scores, sub, goal = arg
            batch = {ids[i % len(ids)]: s for i, s in scores}
            field.deposit(batch, sub, goal)
            board.apply([Deposit(sc, i, s, sub, goal, "coder") for i, s in batch.items()])
        elif kind == "tick":
            field.advance(arg)
            board.apply([Advance(sc, "coder", arg)])
    for goal in GOALS:
        for sub in ("sub0", "sub2"):
            snap = board.snapshot(sc, ids, agent="coder", goal=goal, subtask=sub)
            for i in ids:
                view = snap.cells[i]
                assert view.strength == pytest.approx(field.strength(i), rel=1e-12, abs=1e-12)
                assert view.task_strength == pytest.approx(field.strength_for(i, goal, sub), rel=1e-12, abs=1e-12)
                assert view.score_before == field.score_before(i, goal, sub)
                assert view.latest_score == field.latest_score(i)
    assert board.edges(sc) == pytest.approx(field.edges)


def _pack_form_2(cell: Any) -> list[Any]:
    """A cell's slots as stored form 2 held them (before form 3): the task keys as hex text,
    the subtasks each followed by a newline after a first one, a key an array."""
    m = cell.memory

    def o(value: Any) -> Any:
        return False if value is None else value

    subs = "\n" + "".join(f"{k}\n" for k in sorted(m.subtasks))
    return [2, m.kind, m.born_tick, m.strength, m.at_tick, m.earned, m.last_deposit, subs, cell.producer,
            cell.created_at, cell.touched_at, cell.status, dict(cell.contributions), cell.deposits,
            cell.reinforcements, dict(cell.users), o(m.latest_score), o(m.latest_goal),
            o(None if m.last_key is None else list(m.last_key)),
            o(None if m.score_key is None else list(m.score_key)), o(m.previous_score), o(cell.superseded_by),
            o(cell.status_by), o(None if cell.first_selected is None else list(cell.first_selected)),
            len(cell.events)]


def _write_form_1(redis: RedisBoard, scope: str, cells: dict[str, Any], older: int) -> None:
    """Store ``cells`` as the board before stored form 2 did: a cell of 24 slots (the last
    how many events its blob holds) and its events in one blob, field ``<id>`` of the
    events hash; a cell holding events_kept events gets ``older`` made-up events before
    them (form 1 cut a blob back to events_kept only once it held twice as many)."""
    import msgpack

    from relevance_memory.board._packed import pack_events

    raw = redis._raw
    for item, cell in cells.items():
        ghosts = older if len(cell.events) == redis.config.events_kept else 0
        events = [["ghost", "reinforce", 0, 0.5, float(k)] for k in range(ghosts)] + pack_events(cell)
        raw.hset(redis.key("cells", scope), item, msgpack.packb([*_pack_form_2(cell)[1:24], len(events)]))
        raw.hset(redis.key("events", scope), item, b"".join(msgpack.packb(e) for e in events))


def _write_form_2(redis: RedisBoard, scope: str, cells: dict[str, Any]) -> None:
    """Store ``cells`` as the board before stored form 3 did (form 2: the task keys as hex
    text; each event in a field ``<id>\t<seq>`` already, as now)."""
    import msgpack

    from relevance_memory.board._packed import pack_events

    raw = redis._raw
    for item, cell in cells.items():
        raw.hset(redis.key("cells", scope), item, msgpack.packb(_pack_form_2(cell)))
        for seq, event in enumerate(pack_events(cell)):
            raw.hset(redis.key("events", scope), f"{item}\t{seq}", msgpack.packb(event))


def test_a_board_stored_in_form_1_still_loads_and_moves_to_form_3(redis_url: str) -> None:
    """A board written before events got a field each (stored form 1: 24-slot cells, an
    item's events one blob) reads the same, and keeps agreeing with the in-memory board
    bit for bit as batches write to it; a written cell is form 3 and its blob is gone."""
    config = BoardConfig(agent_share=0.4, lease_ticks=4, events_kept=3)
    name = f"p-{uuid.uuid4().hex[:10]}"
    memory, redis = InMemoryBoard(name, config), RedisBoard.from_url(redis_url, name, config, **SLOW_OK)
    ids = ["m0", "m1", "m2", "m3"]
    history = [Add("shared", i, "tool_result", "planner", at=1.0) for i in ids] + [
        Deposit("shared", "m0", 4, "sub0", "fix the parser", "coder", 2.0),
        Deposit("shared", "m1", 2, "sub0", "fix the parser", "coder", 2.0),
        Advance("shared", "coder", 3),
        Reinforce("shared", "m0", "reviewer", "m1", at=3.0),
        Use("shared", "m2", "coder", 7, at=4.0),
        Deposit("shared", "m0", 5, "sub1", "fix the parser", "planner", 5.0),
    ]
    memory.apply(history)
    redis.apply([Advance("shared", "coder", 3)])  # the scope's tick
    cells = {i: v.cell for i, v in memory.snapshot("shared", ids, agent="coder", provenance=True).cells.items()}
    _write_form_1(redis, "shared", cells, older=2)

    def agree() -> None:
        for provenance in (False, True):
            for wanted in (ids, None):
                m = memory.snapshot("shared", wanted, agent="coder", goal="fix the parser", subtask="sub1",
                                    provenance=provenance)
                r = redis.snapshot("shared", wanted, agent="coder", goal="fix the parser", subtask="sub1",
                                   provenance=provenance)
                assert (m.tick, m.missing, m.corrupt, m.cells) == (r.tick, r.missing, r.corrupt, r.cells)
                assert not r.faults

    agree()
    assert [e.op for e in redis.snapshot("shared", ["m0"], agent="a", provenance=True).cells["m0"].cell.events] == \
        ["deposit:4", "reinforce", "deposit:5"]  # the newest 3 of the blob's 5
    later = [
        Deposit("shared", "m0", 3, "sub2", "fix the parser", "reviewer", 6.0),  # events: moved, then one more
        Deposit("shared", "m1", 2, "sub0", "fix the parser", "coder", 6.0),  # already: no event, the cell written
        Reinforce("shared", "m2", "planner", at=6.0),
    ]
    assert memory.apply(later).outcomes == redis.apply(later).outcomes
    agree()
    stored = redis._raw.hgetall(redis.key("events", "shared"))
    for item in ("m0", "m1", "m2"):
        assert redis._raw.hget(redis.key("cells", "shared"), item)[:4] == b"\xdc\x00\x19\x03"  # form 3
        assert item.encode() not in stored  # the blob is gone
    assert b"m3" in stored  # a cell no batch wrote stays form 1, read as before
    assert sorted(k for k in stored if k.startswith(b"m0\t")) == [b"m0\t1", b"m0\t2", b"m0\t3"]  # the newest 3
    more = [Reinforce("shared", "m0", "coder", at=float(7 + k)) for k in range(5)] + [
        Forget("shared", "m3", "reviewer", at=9.0)]
    assert memory.apply(more).outcomes == redis.apply(more).outcomes
    agree()
    assert sorted(k for k in redis._raw.hgetall(redis.key("events", "shared")) if k.startswith(b"m0\t")) == \
        [b"m0\t6", b"m0\t7", b"m0\t8"]  # older seqs deleted as they fell out
    redis.close()


def test_a_board_stored_in_form_2_still_loads_and_moves_to_form_3(redis_url: str) -> None:
    """A board written before the task keys were stored as bytes (stored form 2: hex text)
    reads the same, and keeps agreeing with the in-memory board bit for bit as batches write
    to it, a written cell in form 3: a deposit for a subtask the form-2 cell holds is
    "already", a goal key read from form 2 equals the batch's (the score's previous one
    kept), a new goal drops the old subtasks."""
    config = BoardConfig(agent_share=0.4, lease_ticks=4, events_kept=3)
    name = f"p-{uuid.uuid4().hex[:10]}"
    memory, redis = InMemoryBoard(name, config), RedisBoard.from_url(redis_url, name, config, **SLOW_OK)
    ids = ["m0", "m1", "m2", "m3", "m4"]
    history = [Add("shared", i, "tool_result", "planner", at=1.0) for i in ids] + [
        Deposit("shared", "m0", 4, "sub0", "fix the parser", "coder", 2.0),
        Deposit("shared", "m0", 2, "sub1", "fix the parser", "coder", 2.0),
        Deposit("shared", "m1", 2, "sub0", None, "coder", 2.0),
        Advance("shared", "coder", 3),
        Reinforce("shared", "m0", "reviewer", "m1", at=3.0),
        Use("shared", "m2", "coder", 7, at=4.0),
        Deposit("shared", "m3", 5, "sub1", "write the docs", "planner", 5.0),
        Supersede("shared", "m4", "m3", "planner", 5.0),
    ]
    memory.apply(history)
    redis.apply([Advance("shared", "coder", 3)])  # the scope's tick
    cells = {i: v.cell for i, v in memory.snapshot("shared", ids, agent="coder", provenance=True).cells.items()}
    _write_form_2(redis, "shared", cells)

    def agree() -> None:
        for goal, sub in (("fix the parser", "sub1"), (None, "sub0"), ("write the docs", None)):
            for provenance in (False, True):
                for wanted in (ids, None):
                    m = memory.snapshot("shared", wanted, agent="coder", goal=goal, subtask=sub, provenance=provenance)
                    r = redis.snapshot("shared", wanted, agent="coder", goal=goal, subtask=sub, provenance=provenance)
                    assert (m.tick, m.missing, m.corrupt, m.cells) == (r.tick, r.missing, r.corrupt, r.cells)
                    assert not r.faults

    agree()
    later = [
        Deposit("shared", "m0", 3, "sub0", "fix the parser", "reviewer", 6.0),  # already (held in hex)
        Deposit("shared", "m0", 5, "sub2", "fix the parser", "reviewer", 6.0),  # a new subtask, same goal
        Deposit("shared", "m1", 3, "sub0", None, "coder", 6.0),  # already, no goal
        Deposit("shared", "m3", 4, "sub1", "fix the parser", "coder", 6.0),  # another goal: its subtasks dropped
        Reinforce("shared", "m2", "planner", at=6.0),
    ]
    got_m, got_r = memory.apply(later), redis.apply(later)
    assert got_m.outcomes == got_r.outcomes == ("already", "deposited", "already", "deposited", "reinforced")
    assert got_m.amounts == got_r.amounts
    agree()
    for item in ("m0", "m1", "m2", "m3"):
        assert redis._raw.hget(redis.key("cells", "shared"), item)[:4] == b"\xdc\x00\x19\x03"  # form 3
    assert redis._raw.hget(redis.key("cells", "shared"), "m4")[:4] == b"\xdc\x00\x19\x02"  # not written: form 2
    more = [Deposit("shared", i, 2, "sub2", "fix the parser", "planner", 7.0) for i in ids] + [
        Restore("shared", "m4", "coder", at=8.0)]
    assert memory.apply(more).outcomes == redis.apply(more).outcomes
    agree()
    redis.close()


def test_a_cell_whose_task_keys_are_not_digests_is_corrupt_in_form_2_and_refused_in_a_repair(redis_url: str) -> None:
    """Forms 1 and 2 held task keys as hex text: one that is not a digest's 24 hex digits
    (no board wrote one; an empty subtask between two newlines included) makes the cell
    corrupt, for a snapshot as for a batch (it cannot be stored as bytes), while newlines
    around the subtasks are not keys on either side; a Repair with such a cell is refused
    before it is sent."""
    import msgpack

    from relevance_memory.board import BoardError

    config = BoardConfig(events_kept=3)
    name = f"p-{uuid.uuid4().hex[:10]}"
    memory, redis = InMemoryBoard(name, config), RedisBoard.from_url(redis_url, name, config, **SLOW_OK)
    memory.apply([Add("shared", "m", "tool_result", "a"), Deposit("shared", "m", 4, "sub0", "g", "a")])
    cell = memory.snapshot("shared", ["m"], agent="a").cells["m"].cell
    slots = _pack_form_2(cell)
    key = slots[7].strip("\n")
    for subs, corrupt in ((f"\n\n{key}\n\n", False), (f"\n{key}\n\n{key}\n", True), ("\nnot-a-digest\n", True)):
        slots[7] = subs
        redis._raw.hset(redis.key("cells", "shared"), "m", msgpack.packb(slots))
        assert redis.snapshot("shared", ["m"], agent="a").corrupt == (("m",) if corrupt else ())
        assert redis.apply([Reinforce("shared", "m", "a")]).outcomes == (("corrupt",) if corrupt else ("reinforced",))
    odd = replace(cell, memory=cell.memory._replace(subtasks=frozenset({"not-a-digest"})))
    with pytest.raises(BoardError, match="task_key digests"):
        redis.apply([Repair("shared", "m", odd, "a")])
    assert redis.apply([Repair("shared", "m", cell, "a")]).outcomes == ("repaired",)
    assert redis.snapshot("shared", ["m"], agent="a").cells["m"].cell == cell
    redis.close()


@settings(max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(before=st.lists(st.lists(board_op(), min_size=1, max_size=8), min_size=1, max_size=4),
       after=st.lists(st.lists(board_op(), min_size=1, max_size=8), min_size=1, max_size=4),
       goal=st.sampled_from(GOALS), subtask=st.sampled_from(["sub0", "sub1", None]), kept=st.sampled_from([0, 1, 3]))
def test_a_board_rewritten_in_form_2_agrees_bit_for_bit_as_batches_move_it_to_form_3(
        redis_url: str, before: list[list[Any]], after: list[list[Any]], goal: str | None, subtask: str | None,
        kept: int) -> None:
    """A random history, the Redis board's cells then stored again as form 2 held them, more
    random batches: every outcome, amount and snapshot equal to the in-memory board's."""
    config = BoardConfig(agent_share=0.4, lease_ticks=4, ttl_seconds={"shared": 1e5}, events_kept=kept)
    name = f"p-{uuid.uuid4().hex[:10]}"
    memory, redis = InMemoryBoard(name, config), RedisBoard.from_url(redis_url, name, config, **SLOW_OK)
    try:
        for ops in before:
            assert memory.apply(ops).outcomes == redis.apply(ops).outcomes
        for sc in SCOPES:
            cells = {i: v.cell for i, v in memory.snapshot(sc, IDS, agent="coder", provenance=True).cells.items()}
            redis._raw.delete(redis.key("events", sc))
            _write_form_2(redis, sc, cells)
        redis._decoded.clear()
        for ops in after:
            got_m, got_r = memory.apply(ops), redis.apply(ops)
            assert (got_m.outcomes, got_m.amounts) == (got_r.outcomes, got_r.amounts)
            for sc in SCOPES:
                for provenance in (False, True):
                    m = memory.snapshot(sc, IDS, agent="coder", goal=goal, subtask=subtask, now=5e5,
                                        provenance=provenance)
                    r = redis.snapshot(sc, IDS, agent="coder", goal=goal, subtask=subtask, now=5e5,
                                       provenance=provenance)
                    assert (m.tick, m.missing, m.corrupt, m.cells) == (r.tick, r.missing, r.corrupt, r.cells)
    finally:
        redis.close()


def test_an_op_with_a_none_where_the_script_needs_a_value_is_refused_whole(redis_url: str) -> None:
    """A ``None`` where a value belongs (a Deposit's subtask, a Use's build: not checked before
    the batch is sent) travels as false in the batch's flat op array, never as a hole that
    would shift the ops after it: the script refuses the batch and nothing is applied."""
    from relevance_memory.board import BoardError

    name = f"p-{uuid.uuid4().hex[:10]}"
    redis = RedisBoard.from_url(redis_url, name, BoardConfig(), **SLOW_OK)
    redis.apply([Add("shared", "m", "tool_result", "a")])
    before = redis.snapshot("shared", ["m"], agent="a", provenance=True).cells
    for bad in (Deposit("shared", "m", 4, None, "g", "a"),  # type: ignore[arg-type]
                Use("shared", "m", "a", None)):  # type: ignore[arg-type]
        with pytest.raises(BoardError, match=r"refused by the server|Use\.build must be an int|subtask must be a string"):  # now check_ops
            redis.apply([Reinforce("shared", "m", "a"), bad, Reinforce("shared", "m", "b")])
    assert redis.snapshot("shared", ["m"], agent="a", provenance=True).cells == before
    redis.close()


# A stored form-3 cell's slots changed one at a time (slot index, value): the batch script
# checks them without type() inside one pcall (valid_or_error), falling back to one pcall per
# cell when a slot's type makes it fail; either way the verdict must be valid()'s.
_SLOT_CASES = [
    (3, "1.5", True), (3, b"1.5", True), (3, float("inf"), True), (3, float("nan"), True), (3, False, True),
    (5, "0", True), (5, [], True), (6, float("-inf"), True),
    (2, "7", True), (2, False, True), (2, float("nan"), False), (4, "0", True), (4, {"a": 1}, True),
    (7, 12, True), (7, [], True), (7, b"x" * 11, True), (7, b"x" * 24, False), (7, False, True),
    (12, "a", True), (12, 3, True), (12, False, True), (12, {"len": 1.0}, False), (12, [], False),
    (15, b"", True), (15, 0, True), (15, {"len": 2}, False),
    (24, "3", True), (24, -1, True), (24, 1.5, True), (24, float("inf"), True), (24, False, True), (24, 2, False),
    (1, "no such kind", True), (0, 4, True),
]


@pytest.mark.parametrize(("slot", "value", "corrupt"), _SLOT_CASES)
def test_a_cell_with_a_mistyped_slot_is_corrupt_in_a_batch_beside_valid_cells(
        redis_url: str, slot: int, value: Any, corrupt: bool) -> None:
    import msgpack

    config = BoardConfig(agent_share=None)
    name = f"p-{uuid.uuid4().hex[:10]}"
    redis = RedisBoard.from_url(redis_url, name, config, **SLOW_OK)
    redis.apply([Add("shared", i, "tool_result", "a") for i in ("m0", "m1", "m2")])
    redis.apply([Deposit("shared", i, 4, "s0", "g", "a") for i in ("m0", "m1", "m2")])
    key = redis.key("cells", "shared")
    slots = msgpack.unpackb(redis._raw.hget(key, "m1"), raw=True)
    slots[slot] = value
    redis._raw.hset(key, "m1", msgpack.packb(slots, use_bin_type=False))
    ops = [Reinforce("shared", i, "a") for i in ("m0", "m1", "m2")]
    want = ("reinforced", "corrupt" if corrupt else "reinforced", "reinforced")
    assert redis.apply(ops).outcomes == want
    assert redis.apply(ops[1:2]).outcomes == want[1:2]  # alone in its batch: the same verdict
    redis.close()


@pytest.mark.parametrize("width", [1, 31, 32, 300])
def test_events_of_short_and_long_agents_and_ops_read_back_as_the_memory_board_keeps_them(
        redis_url: str, width: int) -> None:
    """The script writes an event whose agent and op are under 32 bytes with struct.pack
    (float64 numbers), any other with cmsgpack: both read back as the in-memory board's."""
    config = BoardConfig(events_kept=4, agent_share=None)
    name = f"p-{uuid.uuid4().hex[:10]}"
    memory, redis = InMemoryBoard(name, config), RedisBoard.from_url(redis_url, name, config, **SLOW_OK)
    agent, by = "a" * width, "é" * width  # two bytes a character: an op of 11 + 2 × width bytes
    ops = [Add("shared", "m", "tool_result", agent, at=1.25), Advance("shared", agent, 3),
           Deposit("shared", "m", 4, "s", "g", agent, at=2.0), Reinforce("shared", "m", agent, delta=0.1, at=3.5),
           Use("shared", "m", agent, 2**40, at=4.0), Supersede("shared", "m", by, agent, at=5.0)]
    for op in ops:
        assert memory.apply([op]).outcomes == redis.apply([op]).outcomes
    got = redis.snapshot("shared", ["m"], agent=agent, provenance=True).cells["m"].cell
    assert got == memory.snapshot("shared", ["m"], agent=agent, provenance=True).cells["m"].cell
    assert [e.op for e in got.events] == ["deposit:4", "reinforce", f"use:{2**40}", f"superseded:{by}"]
    redis.close()


def test_a_snapshot_reuses_the_subtask_keys_it_decoded_only_where_the_cell_appended_to_them(redis_url: str) -> None:
    """A snapshot decodes a changed form-3 cell reusing the subtask keys of its last read when
    the stored digests only grew (new subtasks deposited for): the subtasks equal the
    in-memory board's as they grow, stay, and are dropped and restarted by a new goal."""
    config = BoardConfig(agent_share=None, events_kept=2)
    name = f"p-{uuid.uuid4().hex[:10]}"
    memory, redis = InMemoryBoard(name, config), RedisBoard.from_url(redis_url, name, config, **SLOW_OK)
    steps = [
        [Add("shared", "m0", "tool_result", "a"), Add("shared", "m1", "tool_result", "a"),
         Deposit("shared", "m0", 4, "sub0", "fix the parser", "a")],
        [Deposit("shared", "m0", 3, "sub1", "fix the parser", "b"),
         Deposit("shared", "m0", 5, "sub2", "fix the parser", "a")],  # two digests appended between reads
        [Reinforce("shared", "m0", "b")],  # the digests unchanged, the cell changed
        [Deposit("shared", "m0", 4, "sub1", "write the docs", "a")],  # a new goal: the subtasks start again
        [Deposit("shared", "m0", 4, "sub3", "write the docs", "b"), Deposit("shared", "m1", 2, "sub3", None, "b")],
        [Deposit("shared", "m0", 2, "sub0", "fix the parser", "a")],  # back to the first goal: sub0 only
    ]
    seen = []
    for ops in steps:
        assert memory.apply(ops).outcomes == redis.apply(ops).outcomes
        m = memory.snapshot("shared", ["m0", "m1"], agent="a", goal="fix the parser", subtask="sub1")
        r = redis.snapshot("shared", ["m0", "m1"], agent="a", goal="fix the parser", subtask="sub1")
        assert (m.tick, m.cells) == (r.tick, r.cells)
        seen.append(len(r.cells["m0"].cell.memory.subtasks))
    assert seen == [1, 3, 3, 1, 2, 1]


def test_unpack_cell_with_a_prior_that_is_not_its_prefix_decodes_the_keys_afresh() -> None:
    """A prior read's digests that the cell's do not start with (another item's, or before a
    goal change) are not reused."""
    from relevance_memory.board._model import task_key
    from relevance_memory.board._packed import pack_cell, subtask_digests, task_digest, unpack_cell

    board = InMemoryBoard("u")
    board.apply([Add("shared", "m", "tool_result", "a"), Deposit("shared", "m", 4, "s0", "g", "a"),
                 Deposit("shared", "m", 4, "s1", "g", "a")])
    cell = board.snapshot("shared", ["m"], agent="a").cells["m"].cell
    slots = pack_cell(cell)
    slots[1:] = [s.encode() if isinstance(s, str) else s for s in slots[1:]]  # as read_slots(raw=True) gives them
    slots[12] = {k.encode(): v for k, v in slots[12].items()}
    digests = subtask_digests(slots)
    assert digests is not None and len(digests) == 24
    other = task_digest("s9")
    assert other is not None
    stale = (other, frozenset({task_key("s9")}))
    assert unpack_cell(slots, prior=stale).memory.subtasks == {task_key("s0"), task_key("s1")} == cell.memory.subtasks
    grown = (digests[:12], frozenset({digests[:12].hex()}))
    assert unpack_cell(slots, prior=grown) == unpack_cell(slots) == cell


@pytest.mark.parametrize("count", [3, 12, 105, 1_005, 10_004])
def test_an_items_event_fields_are_named_by_its_seqs_decimal_digits_at_every_length(redis_url: str, count: int) -> None:
    """The script names an event's field "<id>\t<seq>" with seq's digits made one by one (1 to
    4 digits) or by %d (5 and more): the snapshot finds the newest events by those names,
    equal to the in-memory board's, and a later batch deletes the ones that fell out."""
    config = BoardConfig(events_kept=2, agent_share=None)
    name = f"p-{uuid.uuid4().hex[:10]}"
    memory, redis = InMemoryBoard(name, config), RedisBoard.from_url(redis_url, name, config, **SLOW_OK)
    batches = [[Add("shared", "m", "tool_result", "a")],
               [Reinforce("shared", "m", "a", delta=0.0, at=float(k)) for k in range(count - 1)],
               [Reinforce("shared", "m", "b", delta=0.0, at=0.5)]]
    for ops in batches:
        assert memory.apply(ops).outcomes == redis.apply(ops).outcomes
        m = memory.snapshot("shared", ["m"], agent="a", provenance=True).cells["m"].cell
        r = redis.snapshot("shared", ["m"], agent="a", provenance=True)
        assert not r.faults and r.cells["m"].cell == m
    fields = sorted(k for k in redis._raw.hkeys(redis.key("events", "shared")))
    assert fields == [f"m\t{count - 1}".encode(), f"m\t{count}".encode()]
    redis.close()


@pytest.mark.parametrize("slot", [2, 4])  # born_tick, at_tick
def test_a_cell_with_an_infinite_tick_is_reported_corrupt_not_raised(redis_url: str, slot: int) -> None:
    """A tick slot holding inf made int() raise OverflowError out of the snapshot (corrupt
    bytes crashed the read instead of being reported, so no copy served and no repair);
    now the cell is corrupt, beside a valid one read as before."""
    import msgpack

    name = f"p-{uuid.uuid4().hex[:10]}"
    redis = RedisBoard.from_url(redis_url, name, BoardConfig(), **SLOW_OK)
    redis.apply([Add("shared", i, "tool_result", "a") for i in ("m0", "m1")])
    key = redis.key("cells", "shared")
    slots = msgpack.unpackb(redis._raw.hget(key, "m1"), raw=True)
    slots[slot] = float("inf")
    redis._raw.hset(key, "m1", msgpack.packb(slots, use_bin_type=False))
    for provenance in (False, True):
        snap = redis.snapshot("shared", ["m0", "m1"], agent="a", provenance=provenance)
        assert (snap.corrupt, list(snap.cells), snap.cells["m0"].strength) == (("m1",), ["m0"], 3.0)
    assert redis.snapshot("shared", None, agent="a").corrupt == ("m1",)
    redis.close()


def test_a_cell_whose_contribution_is_not_a_number_is_repaired_by_the_mirror(redis_url: str) -> None:
    """The Python reader finds a contribution b"x" corrupt and the mirror sends a Repair, but
    the script's check of a cell does not look inside the contributions: it answered
    "readable" and wrote nothing, so the cell stayed corrupt on the server and every snapshot
    reported it again. A Repair now checks the contributions and users too."""
    import msgpack

    from relevance_memory.board import MirroredBoard

    name = f"p-{uuid.uuid4().hex[:10]}"
    redis = RedisBoard.from_url(redis_url, name, BoardConfig(), **SLOW_OK)
    board = MirroredBoard(redis)
    board.apply([Add("shared", "m", "tool_result", "a"), Reinforce("shared", "m", "a")])
    key = redis.key("cells", "shared")
    slots = msgpack.unpackb(redis._raw.hget(key, "m"), raw=True)
    slots[12] = {b"a": b"x"}
    redis._raw.hset(key, "m", msgpack.packb(slots, use_bin_type=False))
    first = board.snapshot("shared", ["m"], agent="a")
    assert first.cells["m"].strength == 3.35 and any("served from the local copy" in f for f in first.faults)
    again = board.snapshot("shared", ["m"], agent="a")
    assert (again.faults, again.cells["m"].strength) == ((), 3.35)
    cell = redis.snapshot("shared", ["m"], agent="a").cells["m"].cell
    assert (cell.contributions, cell.reinforcements) == ({"a": 0.35}, 1)
    redis.close()

"""Property tests over random operation sequences: the Redis board (its Lua script) and the
in-memory board (the pure Python functions) give bit-identical snapshots, and a private
scope keeps the memory the single-agent :class:`PheromoneField` keeps."""

from __future__ import annotations

import uuid
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
        return Supersede(sc, i, draw(item), agent, draw(at))
    return Restore(sc, i, agent, draw(at))


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(st.lists(board_op(), min_size=1, max_size=8), min_size=1, max_size=8),
       goal=st.sampled_from(GOALS), subtask=st.sampled_from(["sub0", "sub1", None]),
       kept=st.sampled_from([0, 1, 3, 16]))
def test_redis_and_memory_boards_agree_bit_for_bit(redis_url: str, batches: list[list[Any]], goal: str | None,
                                                   subtask: str | None, kept: int) -> None:
    """Every outcome, amount and snapshot equal, provenance events included: the Redis
    board appends events to a per-item entry and cuts it back to the newest ``kept`` only
    once it holds twice as many (small ``kept`` makes every history cross that line)."""
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

"""Pheromone field (SPEC §5): property tests of the math and unit tests of the field."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relevance_memory import RelevanceMemoryManager
from relevance_memory._config import MemoryConfig, PheromoneConfig, half_life_to_rate, rate_to_half_life
from relevance_memory._models import Message, MessageType
from relevance_memory.pheromone._field import PheromoneField, capped_deposit, evaporate, pheromone_kind

KINDS = ["user_instruction", "preference", "tool_result", "assistant_reasoning", "user_chat", "tool_call"]


def _msg(i: int, msg_type: str = "tool_result", role: str = "tool", refs: tuple[str, ...] = ()) -> Message:
    return Message(id=f"m{i}", index=i, role=role, content="x", msg_type=MessageType(msg_type), step=i, token_count=1,
                   references=refs)  # type: ignore[arg-type]


def test_defaults_match_spec() -> None:
    cfg = PheromoneConfig()
    assert cfg.deposits == {5: 4.0, 4: 2.0, 3: 1.0, 2: 0.3, 1: 0.0}
    assert (cfg.s_max, cfg.tick_every, cfg.protect_ticks, cfg.forget_threshold) == (10.0, 5, 3, 0.2)
    assert cfg.half_life_steps["user_instruction"] == 200 and cfg.half_life_steps["preference"] == 50
    assert cfg.half_life_steps["tool_result"] == 15 and cfg.half_life_steps["assistant_reasoning"] == 8
    assert cfg.half_life_steps["user_chat"] == 5
    assert cfg.initial_strength["user_instruction"] == 8 and cfg.initial_strength["tool_result"] == 3
    assert cfg.initial_strength["assistant_reasoning"] == 1 and cfg.initial_strength["user_chat"] == 0.5
    assert cfg.rate("user_chat") == pytest.approx(0.5)  # half-life 5 steps, tick 5


def test_config_validation() -> None:
    with pytest.raises(ValueError):
        PheromoneConfig(deposits={5: 4.0})
    with pytest.raises(ValueError):
        PheromoneConfig(forget_threshold=5.0, carry_threshold=1.0)
    with pytest.raises(ValueError):
        half_life_to_rate(0, 5)


@given(st.floats(1.0, 10_000), st.integers(1, 20))
def test_half_life_round_trip(half_life: float, tick: int) -> None:
    rate = half_life_to_rate(half_life, tick)
    assert 0 <= rate < 1
    if rate > 1e-12:
        assert rate_to_half_life(rate, tick) == pytest.approx(half_life, rel=1e-6)


@given(st.floats(0, 10), st.lists(st.sampled_from([0.0, 0.3, 1.0, 2.0, 4.0, 0.5]), max_size=200))
def test_soft_cap_never_exceeded(start: float, deltas: list[float]) -> None:
    s = start
    for d in deltas:
        s += capped_deposit(s, d, 10.0)
        assert s <= 10.0 + 1e-9


@given(st.floats(0.01, 10), st.sampled_from(KINDS), st.integers(1, 60))
def test_evaporation_is_monotone_without_deposits(start: float, kind: str, ticks: int) -> None:
    rate = PheromoneConfig().rate(kind)
    s = start
    for _ in range(ticks):
        nxt = evaporate(s, rate)
        assert 0 <= nxt <= s
        s = nxt


@settings(max_examples=50)
@given(st.lists(st.tuples(st.sampled_from(KINDS), st.integers(1, 5)), min_size=1, max_size=30), st.integers(1, 40))
def test_field_exempt_never_decay_and_others_monotone(cells: list[tuple[str, int]], ticks: int) -> None:
    field = PheromoneField(PheromoneConfig(protect_ticks=0))
    msgs = [_msg(i) for i in range(len(cells))]
    for m, (kind, _) in zip(msgs, cells, strict=True):
        field._add(m.id, kind, ())
    field.deposit({m.id: score for m, (_, score) in zip(msgs, cells, strict=True)}, "sub")
    before = field.strengths()
    for _ in range(ticks):
        field.advance()
        now = field.strengths()
        for m, (_, score) in zip(msgs, cells, strict=True):
            if score >= 4:
                assert now[m.id] == before[m.id]  # importance-gated: exempt
            else:
                assert now[m.id] <= before[m.id]
            assert now[m.id] <= 10.0 + 1e-9
        before = now


def test_deposit_once_per_message_and_subtask() -> None:
    field = PheromoneField()
    field.observe([_msg(0)])
    first = field.deposit({"m0": 5}, "a")["m0"]
    assert first == pytest.approx(4 * (1 - 3 / 10))
    assert field.deposit({"m0": 5}, "a") == {}
    assert "m0" in field.deposit({"m0": 5}, "b")


def test_protection_tick_and_reinforcement() -> None:
    cfg = PheromoneConfig(tick_every=1, protect_ticks=3)
    field = PheromoneField(cfg)
    field.observe([_msg(0, "assistant_reasoning", "assistant")])
    # ticks 1..3 are protected: strength stays at the initial 1.0 while 3 more messages arrive
    field.observe([_msg(0, "assistant_reasoning", "assistant"), _msg(1), _msg(2), _msg(3, refs=("m0",))])
    # tick 4 (after m3 reinforced m0) is the first unprotected one
    assert field.strength("m0") == pytest.approx((1.0 + 0.5 * (1 - 0.1)) * (1 - cfg.rate("assistant_reasoning")))
    assert field.edges[("m0", "m3")] == pytest.approx(0.2)


def test_forget_and_carry() -> None:
    field = PheromoneField(PheromoneConfig(protect_ticks=0, tick_every=1))
    field.observe([_msg(0, "user_chat", "user")])
    field.deposit({"m0": 1}, "s")
    assert not field.forgotten("m0")
    field.advance(20)
    assert field.forgotten("m0")
    assert not field.carried("m0")


def test_preference_kind() -> None:
    assert pheromone_kind("user_chat", "user", "I prefer window seats") == "preference"
    assert pheromone_kind("user_chat", "user", "what's the weather") == "user_chat"


def test_exports_json_graphml_history() -> None:
    field = PheromoneField(PheromoneConfig(tick_every=2))
    field.observe([_msg(0), _msg(1, refs=("m0",)), _msg(2), _msg(3)])
    assert field.to_dict()["edges"] == [{"source": "m0", "target": "m1", "weight": 0.2}]
    assert "<graphml" in field.graphml()
    assert len(field.history) == 2 and "m0" in field.history[0]["top"]
    assert math.isfinite(field.history[-1]["top"]["m0"])


def test_manager_reports_strength_and_orders_working_tier() -> None:
    memory = RelevanceMemoryManager(max_input_tokens=300, keep_recent=1)
    memory.add({"role": "user", "content": "Fix the bug in parser.py; the tests must pass."})
    for n in range(12):
        memory.add({"role": "assistant", "content": f"Looking at step {n} of the parser."})
        memory.add({"role": "user", "content": f"ok {n}"})
    built = memory.build_context()
    strengths = [d.strength for d in built.record.messages]
    assert all(s is not None for s in strengths)
    assert built.record.decision_for("m0").strength == pytest.approx(memory.pheromone.strength("m0"), abs=1e-3)
    off = RelevanceMemoryManager(MemoryConfig(max_input_tokens=300, keep_recent=1, pheromone=PheromoneConfig(enabled=False)))
    off.extend(m.to_openai() for m in memory.messages)
    assert all(d.strength is None for d in off.build_context().record.messages)


# --------------------------------------------------------------------------- lazy == eager
class _EagerField(PheromoneField):
    """The textbook field: evaporate every message on every tick (O(messages) per tick).

    Each tick rewrites every cell settled to that tick, so the lazy closed form the reads
    and writes apply finds nothing left to evaporate."""

    def advance(self, ticks: int = 1) -> None:
        cfg = self.config
        for _ in range(ticks):
            self.tick += 1
            for mid, cell in self._cells.items():
                keep = self.tick - cell.born_tick <= cfg.protect_ticks or (
                    cell.latest_score is not None and cell.latest_score >= cfg.exempt_score
                )
                f = 1.0 if keep else 1.0 - cfg.rate(cell.kind)
                self._cells[mid] = cell._replace(strength=cell.strength * f, earned=cell.earned * f,
                                                 last_deposit=cell.last_deposit * f, at_tick=self.tick)


@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.integers(1, 12), st.lists(st.tuples(st.integers(0, 200), st.integers(1, 5)), max_size=6), st.integers(0, 2)),
        min_size=1,
        max_size=12,
    )
)
def test_lazy_evaporation_equals_eager_ticks(steps: list[tuple[int, list[tuple[int, int]], int]]) -> None:
    """The closed-form lazy evaporation gives the same strengths as ticking every message."""
    from relevance_memory import RelevanceMemoryManager

    memory = RelevanceMemoryManager()
    memory.add({"role": "user", "content": "Fix ORD-1001 in src/app.py; never touch tests."})
    for n in range(300):
        memory.add({"role": "assistant" if n % 2 else "user", "content": f"note {n} about ORD-{1000 + n % 7} and src/app.py"})
    messages = memory.messages
    lazy, eager = PheromoneField(), _EagerField()
    seen = 0
    for grow, scores, subtask in steps:
        seen = min(len(messages), seen + grow)
        lazy.observe(messages[:seen])
        eager.observe(messages[:seen])
        batch = {messages[i % seen].id: s for i, s in scores}
        assert lazy.deposit(batch, f"s{subtask}") == pytest.approx(eager.deposit(batch, f"s{subtask}"))
        for message in messages[:seen]:
            assert lazy.strength(message.id) == pytest.approx(eager.strength(message.id), rel=1e-9, abs=1e-12)


# --------------------------------------------------------------------------- reads never write
@settings(max_examples=40, deadline=None)
@given(
    grow=st.lists(st.integers(1, 9), min_size=1, max_size=8),
    scores=st.lists(st.tuples(st.integers(0, 40), st.integers(1, 5)), max_size=10),
    ticks=st.integers(0, 30),
)
def test_reads_never_write(grow: list[int], scores: list[tuple[int, int]], ticks: int) -> None:
    """Every query leaves the field's state exactly as it was (issue 9 item 4): the
    evaporation since a cell was settled is computed into the value, never stored."""
    field = PheromoneField(PheromoneConfig(tick_every=3, protect_ticks=1))
    msgs = [_msg(i, refs=(f"m{i - 2}",) if i >= 2 and i % 3 == 0 else ()) for i in range(sum(grow))]
    seen = 0
    for g in grow:
        seen += g
        field.observe(msgs[:seen])
    field.deposit({f"m{i % seen}": s for i, s in scores}, "sub", "goal")
    field.tick += ticks  # time passes without a write (cells stay unsettled)
    cells, tick, history = dict(field._cells), field.tick, list(field.history)
    for m in msgs:
        field.strength(m.id), field.strength_for(m.id, "goal", "sub"), field.strength_for(m.id, "other")
        field.score_before(m.id, "goal", "next"), field.forgotten_for(m.id, "goal", "next")
        field.forgotten(m.id), field.carried(m.id), field.latest_score(m.id), field.goal_of(m.id)
    field.strengths(), field.to_dict(), field.to_json(), field.graphml()
    assert field._cells == cells and all(field._cells[k] is v for k, v in cells.items())
    assert (field.tick, field.history) == (tick, history)


@settings(max_examples=60, deadline=None)
@given(
    kind=st.sampled_from(KINDS), scores=st.lists(st.tuples(st.integers(1, 5), st.integers(0, 2), st.integers(0, 1)),
                                                  max_size=6),
    ticks=st.integers(0, 40), goal=st.sampled_from(["g0", "g1", None]), subtask=st.sampled_from(["s0", "s1", None]),
)
def test_one_pass_read_equals_the_separate_functions(
    kind: str, scores: list[tuple[int, int, int]], ticks: int, goal: str | None, subtask: str | None
) -> None:
    from relevance_memory.pheromone import _math as pm

    cfg = PheromoneConfig()
    cell = pm.new_cell(kind, 0, cfg)
    for n, (score, sub, g) in enumerate(scores):
        cell, _ = pm.deposit(cell, n, cfg, score, f"s{sub}", f"g{g}")
    tick = len(scores) + ticks
    got = pm.read(cell, tick, cfg, goal, subtask)
    assert got.strength == pm.settled_strength(cell, tick, cfg)
    assert got.task_strength == pm.task_strength(cell, tick, cfg, goal, subtask)
    assert got.score_before == pm.score_before(cell, goal, subtask or "")
    if subtask is not None:
        assert got.forgotten == pm.forgotten_for(cell, tick, cfg, goal, subtask)


def test_task_memory_is_what_earlier_subtasks_of_the_task_deposited() -> None:
    """The strength band reads only deposits of earlier subtasks of this final goal (issue 11):
    the kind's initial strength and the current subtask's own deposit order nothing."""
    field = PheromoneField(PheromoneConfig())
    field.observe([_msg(0, "tool_result", "tool"), _msg(1, "user_chat", "user")])
    assert field.strength("m0") == 3.0 and field.memory_for("m0", "task") == 0.0  # initial strength only
    field.deposit({"m0": 4, "m1": 5}, "find the flight", goal="task")
    # the deposit of the subtask being built does not count for it; for a later subtask it does
    assert field.memory_for("m0", "task", "find the flight") == 0.0
    assert field.memory_for("m0", "task", "pay") == pytest.approx(2.0 * (1 - 3.0 / 10.0))
    assert field.memory_for("m1", "task", "pay") == pytest.approx(4.0 * (1 - 0.5 / 10.0))
    # under another final goal (another task, another question) there is no memory
    assert field.memory_for("m1", "another task", "pay") == 0.0
    assert field.strength_for("m0", "another task") == pytest.approx(3.0)  # carry-over still reads the base


def test_a_favoured_kind_does_not_outrank_a_better_match_of_a_new_goal() -> None:
    """A new question (a new final goal): a preference turn's initial strength (3.0, band 3)
    used to be tried before better-matching chat turns of the same score; now the weight
    decides — and a deposit of an earlier subtask of the same task still orders first."""
    from relevance_memory._models import RelevanceScore
    from relevance_memory.pipeline._state import Chain
    from relevance_memory.pipeline.select import rank

    chains = {0: Chain(0, (0,), 10), 1: Chain(1, (1,), 10)}
    scores = {0: RelevanceScore(id="m0", score=3, reason="", weight=0.2),
              1: RelevanceScore(id="m1", score=3, reason="", weight=0.9)}
    common = dict(core_score=4, archive_score=2, referenced_by={}, promote_after_references=2)
    strengths = {0: 3.0, 1: 0.5}  # base strengths: preference vs chat
    _, by_strength = rank(chains, scores, strengths=strengths, **common)  # type: ignore[arg-type]
    assert by_strength == (0, 1)
    _, by_memory = rank(chains, scores, strengths=strengths, memory={0: 0.0, 1: 0.0}, **common)  # type: ignore[arg-type]
    assert by_memory == (1, 0)
    _, earlier = rank(chains, scores, strengths=strengths, memory={0: 1.4, 1: 0.0}, **common)  # type: ignore[arg-type]
    assert earlier == (0, 1)


def test_messages_born_in_one_tick_share_their_new_cell_and_part_on_a_write() -> None:
    """Cells are immutable: the messages of one kind arriving in one tick share one new cell
    (memory, issue 24); a reinforcement or deposit writes a new cell for its message only."""
    field = PheromoneField(PheromoneConfig(tick_every=5))
    messages = [_msg(i) for i in range(4)] + [_msg(4, "assistant_reasoning", "assistant")]
    field.observe(messages)  # tick 0 -> 1 after the fifth message
    cells = field._cells
    assert cells["m0"] is cells["m1"] is cells["m3"] and cells["m4"] is not cells["m0"]
    before = field.strength("m1")
    field.deposit({"m0": 5}, "sub", "goal")
    assert cells["m0"] is not cells["m1"] and field.strength("m1") == before
    assert field.strength("m0") > before and field.latest_score("m1") is None
    field.observe([*messages, _msg(5, refs=("m2",)), _msg(6)])  # a new tick: a new shared cell; m2 reinforced alone
    assert cells["m5"] is cells["m6"] and cells["m5"].born_tick == 1 and cells["m0"].born_tick == 0
    assert cells["m2"] is not cells["m3"] and field.strength("m2") > field.strength("m3")


_WRITES = st.lists(st.one_of(
    st.tuples(st.just("write"), st.sampled_from(["m0", "m1", "m2", "m3", "m4"]), st.floats(0, 9)),
    st.tuples(st.just("view"), st.just(""), st.just(0.0))), max_size=40)


@settings(max_examples=200, deadline=None)
@given(ops=_WRITES, live=st.integers(1, 4))
def test_cells_now_is_the_table_as_of_then_however_it_is_written_after(ops: list[Any], live: int) -> None:
    """``cells_now`` is what a copy of the cell table taken then holds, read later after more
    writes (updates and new ids): get, [], in, len and items — also once the table stops
    keeping it current (more live views than SNAPSHOTS_LIVE: it is copied then)."""
    import relevance_memory.pheromone._field as field_module
    from relevance_memory.pheromone._math import Cell

    field = PheromoneField()
    views: list[tuple[Any, dict[str, Any]]] = []
    old = field_module.SNAPSHOTS_LIVE
    field_module.SNAPSHOTS_LIVE = live
    try:
        for op, key, strength in ops:
            if op == "write":
                field._cells[key] = Cell("tool_result", 0, strength, 0)
            else:
                views.append((field.cells_now(), dict(field._cells)))
    finally:
        field_module.SNAPSHOTS_LIVE = old
    for view, copy in views:
        assert dict(view.items()) == copy and len(view) == len(copy) and sorted(view) == sorted(copy)
        for key in ("m0", "m1", "m2", "m3", "m4"):
            assert view.get(key) == copy.get(key) and (key in view) == (key in copy)
            if key in copy:
                assert view[key] == copy[key]

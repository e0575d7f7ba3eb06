"""The board contract (SPEC §10), run against every backend — in-memory, Redis, mirrored —
in the style of LangGraph's checkpointer conformance suite: same operations, same snapshots."""

from __future__ import annotations

import math
import random

import pytest

from relevance_memory._config import PheromoneConfig
from relevance_memory.board import (
    Add,
    Advance,
    Archive,
    BoardConfig,
    BoardError,
    Deposit,
    Forget,
    RedisBoard,
    Reinforce,
    Restore,
    ScopeError,
    Supersede,
    Use,
    private_scope,
    task_key,
)
from relevance_memory.pheromone import _math as pm

from .board_support import BoardFactory

pytestmark = pytest.mark.block_network(allowed_hosts=["127.0.0.1"])

PCFG = PheromoneConfig()


def test_add_is_idempotent_and_starts_at_the_kinds_strength(make_board: BoardFactory) -> None:
    board = make_board()
    got = board.apply([Add("shared", "m1", "user_instruction", "planner", at=10.0),
                       Add("shared", "m2", "tool_result", "coder", at=11.0),
                       Add("shared", "m1", "tool_result", "coder", at=12.0)])
    assert got.outcomes == ("added", "added", "exists")
    snap = board.snapshot("shared", ["m1", "m2", "nope"], agent="reviewer", provenance=True)
    assert snap.tick == 0 and snap.missing == ("nope",) and snap.corrupt == ()
    m1, m2 = snap.cells["m1"], snap.cells["m2"]
    assert (m1.strength, m1.kind, m1.cell.producer, m1.cell.created_at) == (8.0, "user_instruction", "planner", 10.0)
    assert (m2.strength, m2.cell.producer) == (3.0, "coder")
    assert [e.op for e in m1.cell.events] == ["add"]


def test_deposit_once_per_subtask_with_the_soft_cap(make_board: BoardFactory) -> None:
    board = make_board()
    board.apply([Add("private:coder", "m", "tool_result", "coder")])
    ops = [Deposit("private:coder", "m", 5, f"s{i}", "goal", "coder") for i in range(6)]
    got = board.apply([*ops, Deposit("private:coder", "m", 5, "s0", "goal", "coder")])
    s, expected = 3.0, []
    for _ in range(6):
        amount = pm.capped_deposit(s, 4.0, 10.0)
        expected.append(amount)
        s += amount
    assert got.outcomes == ("deposited",) * 6 + ("already",)
    assert got.amounts == (*expected, 0.0)
    view = board.snapshot("private:coder", ["m"], agent="coder", goal="goal").cells["m"]
    assert view.strength == s and s < 10.0
    assert (view.cell.deposits, view.latest_score, view.cell.contributions) == (6, 5, {"coder": s - 3.0})


def test_evaporation_is_settled_in_closed_form_and_gated_by_importance(make_board: BoardFactory) -> None:
    board = make_board()
    board.apply([Add("shared", "low", "tool_result", "a"), Add("shared", "key", "tool_result", "a"),
                 Deposit("shared", "low", 3, "s", "g", "a"), Deposit("shared", "key", 4, "s", "g", "a"),
                 Advance("shared", "a", 10)])
    snap = board.snapshot("shared", ["low", "key"], agent="b", goal="g")
    rate = PCFG.rate("tool_result")
    low = 3.0 + pm.capped_deposit(3.0, 1.0, 10.0)
    assert snap.tick == 10
    assert snap.cells["low"].strength == low * (1.0 - rate) ** (10 - PCFG.protect_ticks)  # 3 ticks protected
    assert snap.cells["key"].strength == 3.0 + pm.capped_deposit(3.0, 2.0, 10.0)  # score ≥ 4: no evaporation
    again = board.snapshot("shared", ["low"], agent="b", goal="g")
    assert again.cells["low"] == snap.cells["low"]  # reads never write


def test_memory_is_scoped_to_the_goal_it_was_earned_under(make_board: BoardFactory) -> None:
    board = make_board()
    board.apply([Add("shared", "m", "assistant_reasoning", "a"), Deposit("shared", "m", 5, "s1", "task A", "a")])
    a = board.snapshot("shared", ["m"], agent="a", goal="task A", subtask="s2").cells["m"]
    rebuild = board.snapshot("shared", ["m"], agent="a", goal="task A", subtask="s1").cells["m"]
    b = board.snapshot("shared", ["m"], agent="a", goal="task B").cells["m"]
    d = pm.capped_deposit(1.0, 4.0, 10.0)
    assert a.task_strength == 1.0 + d
    assert rebuild.task_strength == (1.0 + d) - d and rebuild.score_before is None  # this very subtask's deposit
    assert b.task_strength == (1.0 + d) - d and b.strength == a.strength  # another task sees the base strength
    assert a.score_before == 5 and a.cell.memory.latest_goal == task_key("task A")


def test_reinforcement_adds_through_the_cap_and_records_the_edge(make_board: BoardFactory) -> None:
    board = make_board()
    board.apply([Add("shared", "m1", "tool_result", "coder"), Add("shared", "m2", "assistant_reasoning", "rev")])
    got = board.apply([Reinforce("shared", "m1", "rev", source="m2", at=5.0),
                       Reinforce("shared", "m1", "rev", at=6.0),
                       Reinforce("shared", "m1", "coder", source="m2", at=7.0),  # once per (item, source)
                       Reinforce("shared", "zz", "rev")])
    first = pm.capped_deposit(3.0, 0.5, 10.0)
    assert got.outcomes == ("reinforced", "reinforced", "already", "missing")
    assert got.amounts[:3] == (first, pm.capped_deposit(3.0 + first, 0.5, 10.0), 0.0)
    assert board.apply([Reinforce("shared", "m1", "rev", source="m2")]).outcomes == ("already",)
    view = board.snapshot("shared", ["m1"], agent="coder").cells["m1"]
    assert view.cell.reinforcements == 2 and view.cell.touched_at == 6.0
    assert board.edges("shared") == {("m1", "m2"): 0.2}
    board.apply([Advance("shared", "rev", to=5), Advance("shared", "rev", to=3), Advance("shared", "rev", 2)])
    assert board.tick("shared") == 7


def test_ids_with_a_tab_are_refused_so_no_two_edges_share_a_redis_field(make_board: BoardFactory) -> None:
    """The Redis board keys an edge "<id>\\t<source>": "a\\tb" reinforced from "c" and "a" from
    "b\\tc" shared one field there, so the second reinforcement came back "already" (lost) and
    edges() named the pair ("a", "b\\tc") for the first. Every backend now refuses a tab in an
    id, a source or a successor, before anything is applied."""
    board = make_board()
    board.apply([Add("shared", "a", "tool_result", "coder"), Add("shared", "c", "tool_result", "coder")])
    for op in (Add("shared", "a\tb", "tool_result", "coder"), Deposit("shared", "a\tb", 4, "s", "g", "coder"),
               Reinforce("shared", "a", "planner", source="b\tc"), Reinforce("shared", "a", "planner", source=""),
               Supersede("shared", "a", "c\td", "coder")):
        with pytest.raises(BoardError, match="tab"):
            board.apply([Reinforce("shared", "c", "coder"), op])
    assert board.snapshot("shared", ["a\tb"], agent="coder").missing == ("a\tb",)
    view = board.snapshot("shared", ["a", "c"], agent="coder").cells
    assert (view["a"].strength, view["c"].strength) == (3.0, 3.0)  # the batches' first ops were not applied
    assert view["a"].cell.status == "active" and board.edges("shared") == {}
    got = board.apply([Reinforce("shared", "a", "coder", source="c"), Reinforce("shared", "c", "planner", source="a")])
    assert got.outcomes == ("reinforced", "reinforced")
    assert board.edges("shared") == {("a", "c"): 0.2, ("c", "a"): 0.2}


def test_ticks_builds_and_scores_the_lua_script_cannot_count_exactly_are_refused(make_board: BoardFactory) -> None:
    """Redis's Lua script counts in doubles: Advance(to=2**63 + 5) left the tick at 0 there (the
    other boards: 2**63 + 5, or SQLite's OverflowError), 2**53 + 1 ticks became 2**53, a build
    2**60 + 1 was written "use:1.1529215046068e+18", and a score True was refused by the server
    only. Every backend now refuses them before anything is applied and keeps 2**53 exact."""
    board = make_board()
    board.apply([Add("shared", "m", "tool_result", "coder")])
    for op, field in ((Advance("shared", "coder", to=2**63 + 5), "Advance.to"),
                      (Advance("shared", "coder", 2**53 + 1), "Advance.ticks"),
                      (Advance("shared", "coder", True), "Advance.ticks"),
                      (Use("shared", "m", "coder", 2**60 + 1), "Use.build"),
                      (Use("shared", "m", "coder", -1), "Use.build"),
                      (Deposit("shared", "m", True, "s", "g", "coder"), "score")):
        with pytest.raises(BoardError, match=field):
            board.apply([Reinforce("shared", "m", "coder"), op])
    view = board.snapshot("shared", ["m"], agent="coder", provenance=True).cells["m"]
    assert board.tick("shared") == 0 and view.strength == 3.0 and view.cell.users == {}
    assert board.apply([Advance("shared", "coder", to=2**53), Use("shared", "m", "coder", 2**53)]).outcomes \
        == ("advanced", "used")
    view = board.snapshot("shared", ["m"], agent="coder", provenance=True).cells["m"]
    assert board.tick("shared") == 2**53 and view.cell.users == {"coder": 2**53}
    assert [e.op for e in view.cell.events] == ["add", f"use:{2**53}"]


def test_a_deposit_without_a_subtask_text_or_a_bool_number_is_refused_by_every_backend(
        make_board: BoardFactory) -> None:
    """Deposit(subtask=None) was applied by the in-memory and SQLite boards (strength 4.4) but
    refused by Redis's script; subtask=7 raised AttributeError; Add(strength=True) stored the
    strength True. Every backend now raises BoardError before anything is applied."""
    board = make_board()
    board.apply([Add("shared", "m", "tool_result", "coder")])
    for op, words in ((Deposit("shared", "m", 4, None, "g", "coder"), "subtask must be a string"),  # type: ignore[arg-type]
                      (Deposit("shared", "m", 4, 7, "g", "coder"), "subtask must be a string"),  # type: ignore[arg-type]
                      (Deposit("shared", "m", 4, "s", b"g", "coder"), "subtask must be a string"),  # type: ignore[arg-type]
                      (Add("shared", "n", "tool_result", "coder", 0.0, True), "finite numbers"),
                      (Reinforce("shared", "m", "coder", delta=False), "finite numbers"),
                      (Deposit("shared", "m", 4, "s", "g", "coder", at=True), "finite numbers")):
        with pytest.raises(BoardError, match=words):
            board.apply([Reinforce("shared", "m", "coder"), op])
    view = board.snapshot("shared", ["m", "n"], agent="coder")
    assert view.missing == ("n",) and view.cells["m"].strength == 3.0 and view.cells["m"].cell.deposits == 0
    assert board.apply([Deposit("shared", "m", 4, "s", None, "coder")]).amounts == (1.4,)


def test_one_agent_alone_cannot_push_a_shared_item_to_the_cap(make_board: BoardFactory) -> None:
    """Per-agent share cap (lock-in avoidance, seed 000 §6.1/§6.3): in a shared scope one
    agent adds at most agent_share·S_max to an item; a private scope has no such cap."""
    board = make_board(BoardConfig(agent_share=0.3))
    ops = [Add("shared", "m", "user_chat", "a"), Add("private:a", "m", "user_chat", "a")]
    for scope in ("shared", "private:a"):
        ops += [Deposit(scope, "m", 5, f"s{i}", "g", "a") for i in range(8)]
    ops += [Deposit("shared", "m", 5, "s0", "g", "b")]  # another agent, but s0 was deposited: "already"
    ops += [Deposit("shared", "m", 5, "s9", "g", "b")]
    board.apply(ops)
    shared = board.snapshot("shared", ["m"], agent="a", goal="g").cells["m"]
    private = board.snapshot("private:a", ["m"], agent="a", goal="g").cells["m"]
    assert shared.cell.contributions["a"] == pytest.approx(3.0, abs=1e-12)
    assert shared.cell.contributions["b"] > 0
    assert shared.strength == pytest.approx(0.5 + 3.0 + shared.cell.contributions["b"], abs=1e-12)
    assert private.strength > 9.0 and set(private.cell.contributions) == {"a"}


def test_no_item_dominates_a_shared_snapshot(make_board: BoardFactory) -> None:
    """Per-item share cap on reads (seed 000 §6.1 max_prominence): ≤ prominence × mean."""
    board = make_board(BoardConfig(prominence=2.0))
    board.apply([Add("shared", f"m{i}", "user_chat", "a") for i in range(4)]
                + [Add("shared", "big", "user_instruction", "a")])
    snap = board.snapshot("shared", None, agent="a")
    mean = (4 * 0.5 + 8.0) / 5
    assert snap.cells["big"].task_strength == 8.0 and snap.cells["big"].shared_strength == 2.0 * mean
    assert snap.cells["m0"].shared_strength == 0.5
    private = make_board(BoardConfig(prominence=2.0))
    private.apply([Add("private:a", "m0", "user_chat", "a"), Add("private:a", "big", "user_instruction", "a")])
    assert private.snapshot("private:a", None, agent="a").cells["big"].shared_strength == 8.0


def test_the_prominence_cap_does_not_depend_on_the_order_ids_are_read_in(make_board: BoardFactory) -> None:
    """The cap's mean is summed exactly (math.fsum): a plain sum's last bit followed the order the
    ids were asked in, or the order a Redis hash returned them, so two snapshots of one board (and
    two backends) could disagree in ``shared_strength``. These deposits were found to differ."""
    rnd = random.Random(293)
    board = make_board(BoardConfig(prominence=1.1))
    ids = [f"m{i}" for i in range(6)]
    board.apply([Add("shared", i, "tool_result", "a") for i in ids] + [Add("shared", "big", "user_instruction", "a")])
    board.apply([Deposit("shared", i, rnd.randint(1, 5), f"s{s}", "goal", "a") for i in ids
                 for s in range(rnd.randint(0, 3))])
    asked = [*ids, "big"]
    reads = [board.snapshot("shared", order, agent="a", goal="goal", subtask="s0").cells
             for order in (asked, asked[::-1], None)]
    capped = [i for i in asked if reads[0][i].shared_strength < reads[0][i].task_strength]
    assert "big" in capped  # the cap binds
    for cells in reads[1:]:
        assert {i: cells[i].shared_strength for i in asked} == {i: reads[0][i].shared_strength for i in asked}
    active = [reads[0][i].task_strength for i in asked]
    assert reads[0]["big"].shared_strength == 1.1 * (math.fsum(active) / len(active))


def test_forget_and_archive_never_drop_an_item_another_agent_uses(make_board: BoardFactory) -> None:
    board = make_board(BoardConfig(lease_ticks=5))
    board.apply([Add("shared", "m", "tool_result", "coder"), Use("shared", "m", "reviewer", build=3, at=7.0)])
    got = board.apply([Forget("shared", "m", "coder"), Archive("shared", "m", "coder")])
    assert got.outcomes == ("in_use:reviewer", "in_use:reviewer")
    view = board.snapshot("shared", ["m"], agent="coder").cells["m"]
    assert view.status == "active" and view.in_use_by == ("reviewer",)
    assert view.cell.first_selected == ("reviewer", 3)
    board.apply([Advance("shared", "coder", 6)])  # the lease ran out
    got = board.apply([Archive("shared", "m", "coder"), Forget("shared", "m", "coder"),
                       Restore("shared", "m", "planner"), Forget("shared", "m", "planner")])
    assert got.outcomes == ("archived", "conflict:archived", "restored", "forgotten")
    view = board.snapshot("shared", ["m"], agent="coder", provenance=True).cells["m"]
    assert (view.status, view.active, view.cell.status_by) == ("forgotten", False, "planner")
    assert board.snapshot("shared", ["m"], agent="coder").cells["m"].cell.events == ()
    assert [e.op for e in view.cell.events] == ["add", "use:3", "archived", "restored", "forgotten"]


def test_supersede_links_and_exactly_one_wins(make_board: BoardFactory) -> None:
    board = make_board()
    board.apply([Add("shared", "old", "tool_result", "a"), Add("shared", "new", "tool_result", "a")])
    got = board.apply([Supersede("shared", "old", "new", "a"), Supersede("shared", "old", "newer", "b")])
    assert got.outcomes == ("superseded", "conflict:superseded")
    view = board.snapshot("shared", ["old"], agent="a").cells["old"]
    assert (view.status, view.cell.superseded_by, view.cell.status_by) == ("superseded", "new", "a")
    assert board.apply([Restore("shared", "old", "a")]).outcomes == ("restored",)
    assert board.snapshot("shared", ["old"], agent="a").cells["old"].cell.superseded_by is None


def test_ttl_expires_untouched_items_in_the_view_only(make_board: BoardFactory) -> None:
    board = make_board(BoardConfig(ttl_seconds={"shared": 60.0}, lease_ticks=2))
    board.apply([Add("shared", "old", "tool_result", "a", at=0.0), Add("shared", "used", "tool_result", "a", at=0.0),
                 Add("shared", "fresh", "tool_result", "a", at=100.0), Use("shared", "used", "b", 1, at=0.0)])
    snap = board.snapshot("shared", None, agent="a", now=120.0)
    assert (snap.cells["old"].expired, snap.cells["used"].expired, snap.cells["fresh"].expired) == (True, False, False)
    assert set(snap.strengths()) == {"used", "fresh"}
    board.apply([Advance("shared", "a", 3)])  # lease over: now it expires too
    assert board.snapshot("shared", ["used"], agent="a", now=120.0).cells["used"].expired
    assert "old" in board.snapshot("shared", None, agent="a").cells  # nothing is deleted


def test_a_batch_is_all_or_nothing_and_applied_once(make_board: BoardFactory) -> None:
    board = make_board()
    with pytest.raises(ScopeError):
        board.apply([Add("shared", "m", "tool_result", "coder"), Add("private:planner", "p", "tool_result", "coder")])
    with pytest.raises(BoardError, match="score"):
        board.apply([Add("shared", "m", "tool_result", "coder"), Deposit("shared", "m", 7, "s", "g", "coder")])
    assert board.snapshot("shared", ["m"], agent="coder").missing == ("m",)
    ops = [Add("shared", "m", "tool_result", "c"), Reinforce("shared", "m", "c")]
    first = board.apply(ops, batch_id="b-1")
    again = board.apply(ops, batch_id="b-1")
    assert first.outcomes == ("added", "reinforced") and again.duplicate
    assert board.snapshot("shared", ["m"], agent="c").cells["m"].cell.reinforcements == 1


def test_scope_isolation(make_board: BoardFactory) -> None:
    """An agent never sees another agent's private memory or messages: the board refuses."""
    board = make_board()
    mine = private_scope("planner")
    board.apply([Add(mine, "secret", "assistant_reasoning", "planner")])
    board.append(mine, [{"content": "my private hunch"}], agent="planner")
    with pytest.raises(ScopeError):
        board.snapshot(mine, ["secret"], agent="coder")
    with pytest.raises(ScopeError):
        board.read(mine, agent="coder")
    with pytest.raises(ScopeError):
        board.append(mine, [{"content": "injected"}], agent="coder")
    with pytest.raises(ScopeError):
        board.apply([Reinforce(mine, "secret", "coder")])
    board.apply([Add(private_scope("coder"), "secret", "tool_result", "coder")])  # same id, own scope
    assert board.snapshot(private_scope("coder"), ["secret"], agent="coder").cells["secret"].kind == "tool_result"
    assert board.snapshot(mine, ["secret"], agent="planner").cells["secret"].kind == "assistant_reasoning"
    assert [e.fields["content"] for e in board.read(mine, agent="planner")] == ["my private hunch"]
    assert board.read("shared", agent="coder") == []


def test_log_append_and_read_since_a_cursor(make_board: BoardFactory) -> None:
    board = make_board()
    first = board.append("shared", [{"id": "m1", "producer": "planner"}, {"id": "m2", "producer": "coder"}],
                         agent="planner")
    board.append("global", [{"id": "g1"}], agent="coder")
    later = board.append("shared", [{"id": "m3", "producer": "reviewer"}], agent="reviewer")
    everything = board.read("shared", agent="coder")
    assert [e.fields["id"] for e in everything] == ["m1", "m2", "m3"]
    assert [e.cursor for e in everything] == [*first, *later]
    assert [e.fields["id"] for e in board.read("shared", first[0], agent="coder")] == ["m2", "m3"]
    assert [e.fields["id"] for e in board.read("shared", first[0], agent="coder", count=1)] == ["m2"]
    assert board.read("shared", later[0], agent="coder") == []
    again = board.append("shared", [{"id": "m4"}], agent="coder", append_id="once")
    assert board.append("shared", [{"id": "m4"}], agent="coder", append_id="once") == again
    assert [e.fields["id"] for e in board.read("shared", later[0], agent="coder")] == ["m4"]


def test_redis_keys_are_namespaced_and_hash_tagged_into_one_slot(redis_url: str) -> None:
    """Every key of a board carries its ``{name}`` hash tag, so the whole board (and so one
    batch script's keys) lives in one Redis Cluster slot; boards and scopes never share keys."""
    from redis.crc import key_slot

    from relevance_memory.board import RedisBoard

    one, two = RedisBoard.from_url(redis_url, "team-a"), RedisBoard.from_url(redis_url, "team-b")
    keys = [one.key(kind, scope) for kind in ("cells", "meta", "edges", "log") for scope in ("shared", "private:x")]
    assert all(k.startswith("relmem:{team-a}:") for k in keys) and len(set(keys)) == len(keys)
    assert len({key_slot(k.encode()) for k in keys}) == 1
    assert one.key("cells", "shared") != two.key("cells", "shared")
    one.close(), two.close()


def test_the_shared_log_is_the_shared_scopes_clock(make_board: BoardFactory) -> None:
    board = make_board(BoardConfig(log_tick_every=2))
    board.apply([Add("shared", "m", "tool_result", "a")])
    board.append("shared", [{"n": "1"}, {"n": "2"}, {"n": "3"}], agent="a")
    board.append("shared", [{"n": "4"}], agent="b")
    board.append("private:a", [{"n": "p1"}, {"n": "p2"}], agent="a")  # a private log is no clock
    assert (board.tick("shared"), board.tick("private:a")) == (2, 0)
    assert board.snapshot("shared", ["m"], agent="a").tick == 2


def test_redis_batch_ids_are_new_per_batch_client_and_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch id is a random prefix per client and process and a count: never the same
    twice, not in two clients, not in a forked copy of one (which would take a batch as
    already applied)."""
    a, b = RedisBoard.from_url("redis://127.0.0.1:1/0", "x"), RedisBoard.from_url("redis://127.0.0.1:1/0", "x")
    first = [a._new_batch_id() for _ in range(3)]
    assert len(set(first)) == 3 and b._new_batch_id() not in first
    assert first[1] == first[0][:32] + "1" and len(first[0]) == 33
    monkeypatch.setattr("os.getpid", lambda: -7)  # as in a forked child
    assert a._new_batch_id()[:32] != first[0][:32]


def test_an_item_cannot_supersede_itself(make_board: BoardFactory) -> None:
    """``Supersede(id, by=id)`` was applied: the item read as replaced by a newer version that is
    itself, inactive for every reader (helper-47's open finding). Every backend refuses it before
    anything of the batch is applied; a real successor still supersedes."""
    board = make_board()
    board.apply([Add("shared", "a", "tool_result", "coder"), Add("shared", "b", "tool_result", "coder")])
    with pytest.raises(BoardError, match="cannot supersede itself"):
        board.apply([Reinforce("shared", "b", "coder"), Supersede("shared", "a", "a", "coder")])
    view = board.snapshot("shared", ["a", "b"], agent="coder").cells
    assert view["a"].active and view["a"].cell.superseded_by is None
    assert view["b"].strength == 3.0  # the batch's first op was not applied
    assert board.apply([Supersede("shared", "a", "b", "coder")]).outcomes == ("superseded",)
    assert board.snapshot("shared", ["a"], agent="coder").cells["a"].cell.superseded_by == "b"

"""No lost update on a real Redis: N writer processes × M batches on the same items end with
exactly the strengths and counts of the same updates applied one after another; concurrent
supersede/forget of one item leave exactly one outcome."""

from __future__ import annotations

import multiprocessing
import sys
import uuid

import pytest

from relevance_memory.board import Add, BoardConfig, RedisBoard
from relevance_memory.pheromone import _math as pm

from .board_support import SLOW_OK, hammer, race

pytestmark = pytest.mark.block_network(allowed_hosts=["127.0.0.1"])

N_PROCESSES = 4
M_ROUNDS = 150


def test_no_lost_update_across_processes(redis_url: str) -> None:
    # no share cap: every reinforcement of "hot" is the same map S → S + δ(1 − S/S_max), so the
    # final value is exact whatever the interleaving (likewise the score-3 deposits on "deep")
    config = BoardConfig(agent_share=None, log_tick_every=None)  # the log appends must not tick
    name = f"c-{uuid.uuid4().hex[:10]}"
    board = RedisBoard.from_url(redis_url, name, config, **SLOW_OK)
    board.apply([Add("shared", "hot", "tool_result", "setup"), Add("shared", "deep", "assistant_reasoning", "setup")])
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(N_PROCESSES)
    agents = [f"agent{i}" for i in range(N_PROCESSES)]
    procs = [ctx.Process(target=hammer, args=(redis_url, name, a, M_ROUNDS, barrier, {"agent_share": None, "log_tick_every": None}))
             for a in agents]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    total = N_PROCESSES * M_ROUNDS
    hot_expected, deep_expected = 3.0, 1.0
    for _ in range(total):
        hot_expected += pm.capped_deposit(hot_expected, 0.5, 10.0)
        deep_expected += pm.capped_deposit(deep_expected, 1.0, 10.0)
    snap = board.snapshot("shared", ["hot", "deep"], agent="setup", goal="the task")
    hot, deep = snap.cells["hot"], snap.cells["deep"]
    # N = 4, M = 150: 600 reinforcements and 600 deposits, none lost, none doubled
    assert (hot.cell.reinforcements, deep.cell.deposits) == (total, total)
    assert hot.strength == hot_expected and deep.strength == deep_expected
    assert set(hot.cell.contributions) == set(agents)
    assert sum(hot.cell.contributions.values()) == pytest.approx(hot_expected - 3.0, abs=1e-9)
    assert len(deep.cell.memory.subtasks) == total
    log = board.read("shared", agent="setup")
    assert len(log) == total
    assert sorted((e.fields["agent"], int(e.fields["n"])) for e in log) == sorted(
        (a, j) for a in agents for j in range(M_ROUNDS))
    board.close()


@pytest.mark.parametrize("what", ["supersede", "forget"])
def test_concurrent_supersede_or_forget_leaves_exactly_one_outcome(redis_url: str, what: str) -> None:
    name = f"r-{uuid.uuid4().hex[:10]}"
    board = RedisBoard.from_url(redis_url, name, **SLOW_OK)
    items = [f"fact{i}" for i in range(40)]
    board.apply([Add("shared", i, "tool_result", "setup") for i in items])
    ctx = multiprocessing.get_context("fork")
    racers = 5
    barrier, results = ctx.Barrier(racers), ctx.Queue()
    procs = [ctx.Process(target=race, args=(redis_url, name, f"a{k}", items, what, barrier, results))
             for k in range(racers)]
    for p in procs:
        p.start()
    got = dict(results.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    done = "superseded" if what == "supersede" else "forgotten"
    snap = board.snapshot("shared", items, agent="setup")
    for n, item in enumerate(items):
        outcomes = {agent: out[n] for agent, out in got.items()}
        winners = [a for a, o in outcomes.items() if o == done]
        assert len(winners) == 1, outcomes
        assert all(o == f"conflict:{done}" for a, o in outcomes.items() if a != winners[0])
        cell = snap.cells[item].cell
        assert (cell.status, cell.status_by) == (done, winners[0])
        if what == "supersede":
            assert cell.superseded_by == f"{item}-by-{winners[0]}"
    board.close()


def test_in_memory_readers_see_whole_batches_while_writers_run() -> None:
    """Writer threads each apply batches that reinforce two items and advance the tick
    together; reader threads snapshot both without any lock: every snapshot sees both
    items and the tick from one commit (equal counts, tick = count), and a view reused
    from the reader's cache equals one computed afresh."""
    import threading

    from relevance_memory.board import Advance, InMemoryBoard, Reinforce
    from relevance_memory.board._apply import views

    config = BoardConfig(agent_share=None, prominence=None)
    board = InMemoryBoard("threads", config)
    board.apply([Add("shared", "a", "tool_result", "setup"), Add("shared", "b", "tool_result", "setup")])
    writers, rounds, stop = 4, 300, threading.Event()
    seen: list[tuple[int, int, int]] = []
    mismatched: list[str] = []

    def write(agent: str) -> None:
        for _ in range(rounds):
            board.apply([Reinforce("shared", "a", agent), Advance("shared", agent), Reinforce("shared", "b", agent)])

    def read() -> None:
        while not stop.is_set():
            snap = board.snapshot("shared", ["a", "b"], agent="reader", goal="g", subtask="s")
            a, b = snap.cells["a"], snap.cells["b"]
            seen.append((snap.tick, a.cell.reinforcements, b.cell.reinforcements))
            fresh = views({"a": a.cell, "b": b.cell}, snap.tick, config, "shared", goal="g", subtask="s")
            if fresh != dict(snap.cells):
                mismatched.append(f"tick {snap.tick}")

    threads = [threading.Thread(target=write, args=(f"w{k}",)) for k in range(writers)]
    readers = [threading.Thread(target=read) for _ in range(2)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # the threads interleave as finely as CPython lets them
    try:
        for t in readers + threads:
            t.start()
        for t in threads:
            t.join()
        stop.set()
        for t in readers:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert seen and not mismatched
    assert all(tick == ra == rb for tick, ra, rb in seen), [s for s in seen if not s[0] == s[1] == s[2]][:5]
    final = board.snapshot("shared", ["a", "b"], agent="reader")
    assert final.tick == writers * rounds == final.cells["a"].cell.reinforcements

"""Redis faults never stall a step (issue 23 item 4): a circuit breaker in the board client.

Each fault runs on a ``redis-server`` this test starts (127.0.0.1, its own port): paused
with SIGSTOP (it accepts connections and never answers), stopped, slow (a delaying TCP
proxy) and flapping. The breaker's clock is a :class:`Ticker` the test moves, so no test
sleeps through a back-off, and the assertions count round trips to the server and read
the breaker's state — never wall time (``bounded`` is only a hang guard). After recovery
nothing is lost: the queued batches and journal entries land once each, and a restarted
agent resumes with the same messages and strengths.
"""

from __future__ import annotations

import contextlib
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from relevance_memory import BoardUnavailableError, RelevanceMemoryManager
from relevance_memory.board import (
    Add,
    CircuitBreaker,
    Deposit,
    InMemoryBoard,
    MirroredBoard,
    RedisBoard,
    Reinforce,
)
from relevance_memory.board._redis import CALL_BOUND_S, CONNECT_TIMEOUT_S, OP_TIMEOUT_S

from .board_support import DelayProxy, RedisServer, Ticker, bounded, paused

pytestmark = pytest.mark.block_network(allowed_hosts=["127.0.0.1"])

IDS = ["m1", "m2", "m3"]


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=timezone.utc)

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now


TIMEOUT_S = 1.0
"""The tests' socket timeout: the 200 ms default could trip on a loaded CI machine while the
server is healthy; the counts asserted here do not depend on the bound's value."""


def _remote(url: str, name: str, ticker: Ticker) -> RedisBoard:
    return RedisBoard.from_url(url, name, breaker=CircuitBreaker(clock=ticker), socket_timeout=TIMEOUT_S,
                               socket_connect_timeout=TIMEOUT_S)


def _agent(board: Any) -> RelevanceMemoryManager:
    return RelevanceMemoryManager(agent="coder", board=board, clock=Clock(), max_input_tokens=4000, keep_recent=2)


def _step(memory: RelevanceMemoryManager, n: int) -> None:
    memory.add({"role": "assistant", "content": f"Step {n}: run the tests.",
                "tool_calls": [{"id": f"c{n}", "type": "function",
                                "function": {"name": "bash", "arguments": f'{{"command": "pytest -k case{n}"}}'}}]})
    memory.add({"role": "tool", "tool_call_id": f"c{n}", "name": "bash",
                "content": f"FAILED tests/test_dates.py::test_case{n} - ValueError: week {50 + n} out of range"})


def _start(memory: RelevanceMemoryManager) -> None:
    memory.add({"role": "system", "content": "You write code."})
    memory.add({"role": "user", "content": "Fix the failing date parser in src/dates.py."})
    _step(memory, 0)
    memory.build_context()
    assert _mirror(memory).remote.breaker.state == "closed"  # type: ignore[attr-defined]


def _assert_resumes(memory: RelevanceMemoryManager, url: str, name: str) -> None:
    """Nothing lost: a restarted agent (a new manager on the same board) rebuilds the same
    store from its journal and the same strengths from its private scope."""
    strengths = {m.id: memory.pheromone.strength(m.id) for m in memory.messages}
    again = _agent(_remote(url, name, Ticker()))
    assert [m.to_openai() for m in again.messages] == [m.to_openai() for m in memory.messages]
    again.build_context()
    memory.build_context()
    for mid in strengths:
        assert again.pheromone.strength(mid) == pytest.approx(memory.pheromone.strength(mid), rel=1e-9), mid


def _mirror(memory: RelevanceMemoryManager) -> MirroredBoard:
    board = memory.pheromone.board  # type: ignore[attr-defined]
    assert isinstance(board, MirroredBoard)
    return board


# --------------------------------------------------------------------------- the breaker alone
def test_the_breaker_opens_fails_fast_probes_once_and_closes() -> None:
    ticker = Ticker()
    breaker = CircuitBreaker(backoff_s=1.0, max_backoff_s=3.0, clock=ticker)
    assert breaker.enter("x") is False and breaker.state == "closed"
    breaker.failure(TimeoutError("read timed out"))
    assert breaker.state == "open" and breaker.opened == 1
    with pytest.raises(BoardUnavailableError, match="circuit open, failing fast") as info:
        breaker.enter("x")
    assert info.value.attempts == 0 and breaker.rejected == 1
    ticker.advance(1.0)
    assert breaker.enter("probe") is True and breaker.state == "half_open"
    with pytest.raises(BoardUnavailableError, match="a probe is under way"):
        breaker.enter("second caller")  # one probe at a time
    breaker.failure(TimeoutError("still paused"))  # back-off doubles
    ticker.advance(1.5)
    with pytest.raises(BoardUnavailableError, match=r"next probe in 0\.50 s"):
        breaker.enter("x")
    ticker.advance(0.5)
    assert breaker.enter("probe") is True
    breaker.failure(TimeoutError("still paused"))  # 4 s, capped at 3
    ticker.advance(3.0)
    assert breaker.enter("probe") is True
    breaker.success()
    assert breaker.state == "closed" and breaker.enter("x") is False and breaker.probes == 3
    faults = breaker.take_faults()
    assert [f.split(" ")[0] for f in faults] == ["call", "probe", "probe", "server"]
    assert "fail fast for 1 s" in faults[0] and "open 2 s more" in faults[1] and "open 3 s more" in faults[2]
    assert "reached again after 6.00 s" in faults[3] and breaker.take_faults() == []
    breaker.failure(OSError("refused"))  # a closed circuit starts over from the first back-off
    ticker.advance(1.0)
    assert breaker.enter("probe") is True
    with pytest.raises(ValueError, match="backoff"):
        CircuitBreaker(backoff_s=0)


def test_the_documented_bounds() -> None:
    assert (CONNECT_TIMEOUT_S, OP_TIMEOUT_S) == (0.2, 0.2)
    assert pytest.approx(0.46) == CALL_BOUND_S


# --------------------------------------------------------------------------- a real server
def test_a_paused_server_costs_one_timed_out_call_then_steps_fail_fast(own_redis: RedisServer) -> None:
    ticker, name = Ticker(), f"p-{uuid.uuid4().hex[:8]}"
    remote = _remote(own_redis.url, name, ticker)
    coder = _agent(remote)
    _start(coder)
    before = remote.round_trips
    with paused(own_redis):

        def work() -> Any:
            for n in range(1, 6):
                _step(coder, n)
            return coder.build_context()

        built = bounded(work)
        # 10 adds and a build: one call reached the wire and timed out; every later one failed fast
        assert remote.round_trips - before == 1
        assert remote.breaker.state == "open" and remote.breaker.opened == 1 and remote.breaker.rejected >= 10
        report = built.record.board
        assert report is not None and report.source == "local copy"
        assert any("circuit open: board calls fail fast for 1 s" in f for f in report.faults)
        assert len(_mirror(coder).pending) > 0 and len(coder.messages) == 14
        ticker.advance(1.0)  # the back-off is over, the server still paused: one probe, which times out
        bounded(lambda: _step(coder, 6))
        assert remote.round_trips - before == 2 and remote.breaker.probes == 1 and remote.breaker.state == "open"
        assert any("probe failed" in f and "open 2 s more" in f for f in _mirror(coder).take_faults())
    ticker.advance(2.0)
    built = coder.build_context()  # the probe gets through: closed, what waited is sent
    assert remote.breaker.state == "closed" and _mirror(coder).reachable
    assert built.record.board is not None and built.record.board.source == "redis"
    _assert_resumes(coder, own_redis.url, name)


def test_a_stopped_server_costs_the_connection_retries_once(own_redis: RedisServer) -> None:
    ticker, name = Ticker(), f"s-{uuid.uuid4().hex[:8]}"
    remote = _remote(own_redis.url, name, ticker)
    coder = _agent(remote)
    _start(coder)
    before, retries = remote.round_trips, remote.retries
    own_redis.stop()
    for n in range(1, 4):
        bounded(lambda n=n: _step(coder, n))
    built = bounded(coder.build_context)
    assert remote.round_trips - before == remote.retry.attempts == 3  # refused thrice, then no more tries
    assert remote.retries - retries == 2 and remote.breaker.state == "open"
    assert built.record.board is not None and built.record.board.source == "local copy"
    ticker.advance(5.0)  # still down: the probe is refused once
    bounded(lambda: _step(coder, 4))
    assert remote.round_trips - before == 4 and remote.breaker.state == "open"
    own_redis.start()  # back, with its data (append-only file)
    ticker.advance(2.0)
    built = coder.build_context()
    assert remote.breaker.state == "closed" and _mirror(coder).reachable
    assert built.record.board is not None and built.record.board.source == "redis"
    assert any("reached again" in f for f in built.record.board.faults)
    _assert_resumes(coder, own_redis.url, name)


def _batches() -> list[list[Any]]:
    return [
        [Add("shared", "m1", "user_instruction", "planner"), Add("shared", "m2", "tool_result", "coder"),
         Deposit("shared", "m2", 5, "s1", "goal", "coder")],
        [Reinforce("shared", "m2", "reviewer", source="m3"), Add("shared", "m3", "assistant_reasoning", "reviewer")],
        [Deposit("shared", "m3", 4, "s2", "goal", "reviewer"), Reinforce("shared", "m1", "coder")],
        [Deposit("shared", "m1", 5, "s3", "goal", "planner")],
    ]


def test_a_slow_server_trips_the_breaker_and_every_batch_lands_once(own_redis: RedisServer) -> None:
    proxy = DelayProxy(own_redis.port)
    try:
        ticker = Ticker()
        remote = _remote(proxy.url, f"d-{uuid.uuid4().hex[:8]}", ticker)
        board = MirroredBoard(remote)
        first, second, third, fourth = _batches()
        board.apply(first)
        proxy.delay = 0.05  # slow, within the bound: works
        board.apply(second)
        assert board.reachable and remote.breaker.state == "closed"
        proxy.delay = 3 * TIMEOUT_S  # slower than the bound: the server applies the batch, its reply comes late
        before = remote.round_trips
        bounded(lambda: board.apply(third))
        for _ in range(5):
            snap = bounded(lambda: board.snapshot("shared", IDS, agent="coder", goal="goal"))
            assert snap.source == "local copy"
        bounded(lambda: board.apply(fourth))
        assert remote.round_trips - before == 1 and remote.breaker.rejected >= 6
        assert [len(ops) for _, ops in board.pending] == [2, 1]
        proxy.delay = 0.0
        ticker.advance(1.0)
        fine = board.snapshot("shared", IDS, agent="coder", goal="goal")
        ref = InMemoryBoard("ref")
        for ops in _batches():
            ref.apply(ops)
        assert fine.source == "redis" and fine.cells == ref.snapshot("shared", IDS, agent="coder", goal="goal").cells
        assert fine.cells["m1"].cell.reinforcements == 1 and fine.cells["m1"].cell.deposits == 1  # once each
        assert remote.breaker.state == "closed" and any("reached again" in f for f in board.take_faults())
        board.close()
    finally:
        proxy.close()


def test_a_flapping_server_loses_nothing(own_redis: RedisServer) -> None:
    ticker, name = Ticker(), f"f-{uuid.uuid4().hex[:8]}"
    remote = _remote(own_redis.url, name, ticker)
    coder = _agent(remote)
    _start(coder)
    n = 0
    for flap in range(4):  # stopped, paused, stopped, paused
        pause = flap % 2 == 1
        if not pause:
            own_redis.stop()
        with paused(own_redis) if pause else contextlib.nullcontext():
            for _ in range(2):
                n += 1
                bounded(lambda n=n: _step(coder, n))
            built = bounded(coder.build_context)
            assert built.record.board is not None and built.record.board.source == "local copy"
            assert remote.breaker.state == "open" and remote.breaker.opened == flap + 1
        if not pause:
            own_redis.start()
        ticker.advance(1.0)
        n += 1
        _step(coder, n)  # the probe gets through: the queue is sent, in order
        built = coder.build_context()
        assert remote.breaker.state == "closed" and _mirror(coder).reachable
        assert built.record.board is not None and built.record.board.source == "redis"
    assert len(coder.messages) == 4 + 2 * n
    _assert_resumes(coder, own_redis.url, name)


"""Faults on a real Redis: stopped mid-run and restarted, restarted without its data, slow
(a delaying TCP proxy), a corrupt cell. The mirrored board keeps serving from its local
copy, loses nothing written locally, applies every batch exactly once when the server is
back, and says what happened."""

from __future__ import annotations

import uuid

import pytest
import redis

from relevance_memory.board import (
    Add,
    Advance,
    BoardRetry,
    BoardUnavailableError,
    CircuitBreaker,
    Deposit,
    InMemoryBoard,
    MirroredBoard,
    RedisBoard,
    Reinforce,
)

from .board_support import DelayProxy, RedisServer, Ticker

pytestmark = pytest.mark.block_network(allowed_hosts=["127.0.0.1"])

FAST = BoardRetry(attempts=3, first_wait_s=0.01, max_wait_s=0.05, max_total_s=2.0)
IDS = ["m1", "m2", "m3"]


def _batches() -> list[list]:  # type: ignore[type-arg]
    return [
        [Add("shared", "m1", "user_instruction", "planner"), Add("shared", "m2", "tool_result", "coder"),
         Deposit("shared", "m2", 5, "s1", "goal", "coder")],
        [Reinforce("shared", "m2", "reviewer", source="m3"), Add("shared", "m3", "assistant_reasoning", "reviewer"),
         Advance("shared", "planner", 6)],
        [Deposit("shared", "m3", 4, "s2", "goal", "reviewer"), Reinforce("shared", "m1", "coder")],
    ]


def _remote(url: str, name: str, timeout: float = 0.5, ticker: Ticker | None = None) -> RedisBoard:
    return RedisBoard.from_url(url, name, retry=FAST, socket_timeout=timeout, socket_connect_timeout=timeout,
                               breaker=CircuitBreaker(clock=ticker or Ticker()))


def _reference() -> InMemoryBoard:
    ref = InMemoryBoard("ref")
    for ops in _batches():
        ref.apply(ops)
    return ref


def test_redis_stopped_mid_run_then_restarted(own_redis: RedisServer) -> None:
    name, ticker = f"f-{uuid.uuid4().hex[:8]}", Ticker()
    board = MirroredBoard(_remote(own_redis.url, name, ticker=ticker))
    first, second, third = _batches()
    board.apply(first)
    assert board.reachable and board.snapshot("shared", IDS, agent="coder").source == "redis"
    own_redis.stop()
    board.apply(second)  # no server: kept locally, queued
    board.apply(third)
    assert [len(ops) for _, ops in board.pending] == [3, 2]
    queued = [batch_id for batch_id, _ in board.pending]
    snap = board.snapshot("shared", IDS, agent="coder", goal="goal")
    assert snap.source == "local copy" and "unreachable" in snap.faults[-1]
    ref = _reference().snapshot("shared", IDS, agent="coder", goal="goal")
    assert snap.cells == ref.cells  # nothing written locally is lost
    assert any("unreachable" in f for f in board.take_faults())
    assert board.remote.round_trips == 3 + 3  # the scope's old-layout tick check, a batch and a read; then one call refused thrice opened the circuit
    with pytest.raises(BoardUnavailableError, match="circuit open"):
        board.remote.snapshot("shared", IDS, agent="coder")

    own_redis.start()  # back, with its data (append-only file)
    ticker.advance(1.0)  # the breaker's back-off is over: the next call probes
    back = board.snapshot("shared", IDS, agent="coder", goal="goal")
    assert back.source == "redis" and board.reachable
    assert back.cells == ref.cells and back.tick == 6  # every batch applied exactly once
    with_events = board.remote.snapshot("shared", IDS, agent="coder", goal="goal", provenance=True)
    assert with_events.cells == _reference().snapshot("shared", IDS, agent="coder", goal="goal", provenance=True).cells
    assert any("reached again" in f for f in board.take_faults())
    assert all(board.remote.apply(ops, batch_id=b).duplicate for b, ops in zip(queued, (second, third), strict=True))
    board.close()


def test_redis_restarted_without_its_data(own_redis: RedisServer) -> None:
    name = f"f-{uuid.uuid4().hex[:8]}"
    board = MirroredBoard(_remote(own_redis.url, name))
    for ops in _batches():
        board.apply(ops)
    redis.Redis.from_url(own_redis.url).flushall()  # the server lost everything
    snap = board.snapshot("shared", IDS, agent="coder", goal="goal")
    ref = _reference().snapshot("shared", IDS, agent="coder", goal="goal")
    assert snap.cells == ref.cells and snap.tick == 6 and snap.missing == ()
    assert any("lost on the server" in f for f in snap.faults) and any("tick restored" in f for f in snap.faults)
    again = board.remote.snapshot("shared", IDS, agent="coder", goal="goal")  # written back
    assert again.cells == ref.cells and again.tick == 6
    board.close()


def test_a_slow_link_times_out_then_every_batch_lands_once(own_redis: RedisServer) -> None:
    proxy = DelayProxy(own_redis.port)
    try:
        name, ticker = f"f-{uuid.uuid4().hex[:8]}", Ticker()
        board = MirroredBoard(_remote(proxy.url, name, timeout=0.3, ticker=ticker))
        first, second, third = _batches()
        board.apply(first)
        proxy.delay = 0.1  # slow but within the timeout: works
        board.apply(second)
        assert board.reachable
        proxy.delay = 1.0  # slower than the 0.3 s timeout: the server applies, the reply is late
        board.apply(third)
        assert len(board.pending) == 1
        slow = board.snapshot("shared", IDS, agent="coder", goal="goal")
        assert slow.source == "local copy"
        assert board.remote.breaker.state == "open" and board.remote.retries == 0  # a timeout is not retried
        proxy.delay = 0.0
        ticker.advance(1.0)
        fine = board.snapshot("shared", IDS, agent="coder", goal="goal")
        ref = _reference().snapshot("shared", IDS, agent="coder", goal="goal")
        assert fine.source == "redis" and fine.cells == ref.cells  # retried under its id: applied once
        assert fine.cells["m1"].cell.reinforcements == 1
        board.close()
    finally:
        proxy.close()


def test_a_corrupt_cell_is_reported_served_from_the_copy_and_repaired(redis_url: str) -> None:
    name = f"f-{uuid.uuid4().hex[:8]}"
    remote = _remote(redis_url, name)
    board = MirroredBoard(remote)
    for ops in _batches():
        board.apply(ops)
    board.snapshot("shared", IDS, agent="coder")  # the local copy is current
    remote.client.hset(remote.key("cells", "shared"), "m2", '{"kind": "tool_result", "s": "NaN?')
    plain = remote.snapshot("shared", IDS, agent="coder")
    assert plain.corrupt == ("m2",) and "m2" not in plain.cells and "corrupt" in plain.faults[0]
    assert remote.apply([Reinforce("shared", "m2", "coder")]).outcomes == ("corrupt",)  # skipped, not crashed
    healed = board.snapshot("shared", IDS, agent="coder", goal="goal")
    ref = _reference().snapshot("shared", IDS, agent="coder", goal="goal")
    assert healed.corrupt == () and healed.cells == ref.cells
    assert any("served from the local copy" in f for f in healed.faults)
    assert remote.snapshot("shared", IDS, agent="coder", goal="goal").cells == ref.cells  # repaired on the server
    board.close()


def test_missing_extra_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    from relevance_memory.board import MissingExtraError

    real = builtins.__import__

    def no_redis(name: str, *args: object, **kwargs: object) -> object:
        if name == "redis" or name.startswith("redis."):
            raise ImportError("No module named 'redis'")
        return real(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, "__import__", no_redis)
    with pytest.raises(MissingExtraError, match=r"relevance-memory\[redis\]"):
        RedisBoard.from_url("redis://127.0.0.1:1/0")


def test_the_local_copy_never_runs_the_shared_clock_ahead(redis_url: str) -> None:
    """Two mirrored agents appending to one shared log: the scope ticks once per 5 entries
    on the server, and no agent's copy (which sees only its own appends) pushes it on."""
    name = f"f-{uuid.uuid4().hex[:8]}"
    a, b = MirroredBoard(_remote(redis_url, name)), MirroredBoard(_remote(redis_url, name))
    a.apply([Add("shared", "m", "tool_result", "a")])
    for n in range(12):
        (a if n % 3 else b).append("shared", [{"n": str(n)}], agent="a" if n % 3 else "b")
        a.snapshot("shared", ["m"], agent="a"), b.snapshot("shared", ["m"], agent="b")
    assert a.remote.tick("shared") == 2 and not any("tick restored" in f for f in a.take_faults() + b.take_faults())


def test_a_board_stored_before_the_tick_moved_keeps_its_tick(redis_url: str) -> None:
    """Issue 24 moved a scope's tick from ``meta:<scope>`` field ``tick`` into the cells hash
    (field ""): a board written before resumes at its tick, not at 0, and the old field is gone."""
    name = f"t-{uuid.uuid4().hex[:12]}"
    board = RedisBoard.from_url(redis_url, name)
    raw = redis.Redis.from_url(redis_url, decode_responses=True)
    raw.hset(board.key("meta", "shared"), "tick", "17")  # the old layout
    assert board.tick("shared") == 17
    assert raw.hget(board.key("meta", "shared"), "tick") is None
    assert raw.hget(board.key("cells", "shared"), "") == "17"
    again = RedisBoard.from_url(redis_url, name)  # another client: already moved, nothing to do
    assert again.tick("shared") == 17
    raw.close()


def test_a_late_reply_is_never_taken_for_the_next_batch(own_redis: RedisServer) -> None:
    """A batch that times out leaves its reply coming on its connection: that connection is
    dropped, so the next batch (on a fresh one) reads its own reply, not the late one."""
    proxy = DelayProxy(own_redis.port)
    try:
        name, ticker = f"f-{uuid.uuid4().hex[:8]}", Ticker()
        board = _remote(proxy.url, name, timeout=0.3, ticker=ticker)
        board.apply([Add("shared", "m1", "tool_result", "a")])
        proxy.delay = 0.6  # later than the timeout: the reply of this batch comes after it
        with pytest.raises(BoardUnavailableError):
            board.apply([Add("shared", "m2", "tool_result", "a")])
        proxy.delay = 0.0  # the late reply is still on its way (held until 0.6 s): the next batch goes now
        ticker.advance(1.0)
        got = board.apply([Add("shared", "m3", "tool_result", "a"), Reinforce("shared", "m1", "a")])
        assert got.outcomes == ("added", "reinforced") and not got.duplicate
        assert board.apply([Add("shared", "m2", "tool_result", "a")]).outcomes == ("exists",)  # it was applied
        board.close()
    finally:
        proxy.close()


def test_a_server_that_lost_the_script_is_sent_it_again(redis_url: str) -> None:
    board = RedisBoard.from_url(redis_url, f"f-{uuid.uuid4().hex[:8]}")
    board.apply([Add("shared", "m1", "tool_result", "a")])
    board._raw.script_flush()
    assert board.apply([Reinforce("shared", "m1", "a")]).outcomes == ("reinforced",)
    assert board.apply([Reinforce("shared", "m1", "a")]).outcomes == ("reinforced",)
    board.close()


def test_a_pool_that_asks_for_the_command_name_is_served(redis_url: str) -> None:
    """redis-py 5.0's ``ConnectionPool.get_connection`` takes the command's name (later
    versions deprecate it): the direct script path passes it when asked."""
    board = RedisBoard.from_url(redis_url, f"f-{uuid.uuid4().hex[:8]}")
    pool = board._raw.connection_pool
    take = pool.get_connection
    asked: list[str] = []

    def get_connection(command_name: str, *keys: object, **options: object) -> object:  # 5.0's signature
        asked.append(command_name)
        return take()

    pool.get_connection = get_connection
    try:
        assert board.apply([Add("shared", "m1", "tool_result", "a")]).outcomes == ("added",)
        assert board.apply([Reinforce("shared", "m1", "a")]).outcomes == ("reinforced",)
    finally:
        del pool.get_connection
    assert asked == ["EVALSHA", "EVALSHA"]
    board.close()

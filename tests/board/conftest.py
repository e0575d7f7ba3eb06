"""Board test fixtures: a real Redis server, and one factory per backend for the contract suite."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from relevance_memory.board import BoardConfig, InMemoryBoard, MemoryBoard, MirroredBoard, RedisBoard, SqliteBoard

from .board_support import SLOW_OK, BoardFactory, RedisServer

MUST_RUN = bool(os.environ.get("RELMEM_REQUIRE_REDIS") or os.environ.get("CI"))


def _unavailable(reason: str) -> None:
    if MUST_RUN:
        pytest.fail(f"the Redis board tests must run here (CI / RELMEM_REQUIRE_REDIS): {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A live Redis: ``RELMEM_REDIS_URL`` (``.ci/run`` starts one), else one we start.

    Skips only when no server can be started here (no ``redis-server`` binary); fails
    instead under CI or ``RELMEM_REQUIRE_REDIS=1``.
    """
    url = os.environ.get("RELMEM_REDIS_URL")
    if url:
        yield url
        return
    try:
        server = RedisServer().start()
    except (FileNotFoundError, RuntimeError) as exc:
        _unavailable(f"no Redis server: {exc}; set RELMEM_REDIS_URL or install redis-server")
        return
    try:
        yield server.url
    finally:
        server.close()


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    """A Redis server of this test's own (persisted across restarts), for fault tests."""
    try:
        server = RedisServer(persist=True).start()
    except (FileNotFoundError, RuntimeError) as exc:
        _unavailable(f"cannot start redis-server: {exc}")
        return
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(params=["memory", "redis", "mirrored", "sqlite"])
def make_board(request: pytest.FixtureRequest) -> Iterator[BoardFactory]:
    """A factory of fresh boards (a unique name each) of one backend: the contract suite
    runs every test against each."""
    made: list[MemoryBoard] = []

    def make(config: BoardConfig | None = None) -> MemoryBoard:
        name = f"t-{uuid.uuid4().hex[:12]}"
        board: MemoryBoard
        if request.param == "memory":
            board = InMemoryBoard(name, config)
        elif request.param == "sqlite":
            board = SqliteBoard(request.getfixturevalue("tmp_path") / f"{name}.db", name, config)
        else:
            url = request.getfixturevalue("redis_url")
            remote = RedisBoard.from_url(url, name, config, **SLOW_OK)
            board = remote if request.param == "redis" else MirroredBoard(remote)
        made.append(board)
        return board

    yield make
    for board in made:
        board.close()

"""The SQLite board (issue 22 item 6): persistence without a server, crash-safe.

A subprocess runs an agent on ``SqliteBoard(path)`` and is killed (SIGKILL) in the middle
of a write — its journal append, or the batch of a build — with rows inserted and the
transaction not committed. A new process opens the same file and resumes: its store and
its strengths equal those of a process that did the same work and was never cut. The
contract suite (test_board_contract.py) and a property test against the in-memory board
run on it too.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relevance_memory import RelevanceMemoryManager
from relevance_memory.board import Add, BoardConfig, InMemoryBoard, SqliteBoard

from .test_board_properties import GOALS, IDS, SCOPES, board_op

AGENT = r'''
import json, os, signal, sys
from datetime import datetime, timedelta, timezone
from relevance_memory import RelevanceMemoryManager
from relevance_memory.board import SqliteBoard

path, mode, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])

class Clock:
    def __init__(self):
        self.now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    def __call__(self):
        self.now += timedelta(seconds=1)
        return self.now

board = SqliteBoard(path, "team")
memory = RelevanceMemoryManager(agent="coder", board=board, clock=Clock(), max_input_tokens=1500, keep_recent=2)
memory.set_goal(subtask="fix parse_iso_week")

def step(n):
    memory.add({"role": "assistant", "content": f"Step {n}: run the tests for week {50 + n}.",
                "tool_calls": [{"id": f"c{n}", "type": "function",
                                "function": {"name": "bash", "arguments": f'{{"command": "pytest -k week{50 + n}"}}'}}]})
    memory.add({"role": "tool", "tool_call_id": f"c{n}", "name": "bash",
                "content": f"FAILED tests/test_dates.py::test_week{50 + n} - ValueError: week {50 + n} out of range "
                           f"in parse_iso_week (src/dates.py:{40 + n})"})

class Cut:
    """The board's connection, killing this process after the rows of one kind of write
    are inserted and before their transaction commits (a write cut halfway)."""
    def __init__(self, db, prefix):
        self.db, self.prefix = db, prefix
    def execute(self, sql, *args):
        return self.db.execute(sql, *args)
    def executemany(self, sql, rows):
        out = self.db.executemany(sql, rows)
        if sql.startswith(self.prefix):
            os.kill(os.getpid(), signal.SIGKILL)
        return out
    def close(self):
        self.db.close()

if mode in ("ref", "cut-journal", "cut-batch"):
    if not memory.messages:
        memory.add({"role": "system", "content": "You write code."})
        memory.add({"role": "user", "content": "Fix the failing date parser in src/dates.py."})
    for n in range(steps):
        step(n)
        memory.build_context()
    if mode == "cut-journal":  # the next add() dies inside its journal append
        board._db = Cut(board._db, "INSERT INTO log")
        step(steps)
    if mode == "cut-batch":  # the next step is journaled; its build dies inside the board batch
        step(steps)
        board._db = Cut(board._db, "INSERT OR REPLACE INTO cells")
        memory.build_context()
    if mode != "ref":
        raise SystemExit("not cut")
memory.build_context()
memory.build_context()
print(json.dumps({"messages": [[m.id, m.to_openai()] for m in memory.messages],
                  "strengths": {m.id: memory.pheromone.strength(m.id) for m in memory.messages},
                  "tick": memory.pheromone.tick}))
'''


def _run(path: Path, mode: str, steps: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", AGENT, str(path), mode, str(steps)], capture_output=True, text=True,
                          timeout=240)


def _state(got: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert got.returncode == 0, got.stderr[-2000:]
    return json.loads(got.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.parametrize(("cut", "done"), [("cut-journal", 4), ("cut-batch", 5)])
def test_a_write_cut_halfway_leaves_the_previous_state_and_a_restart_resumes(tmp_path: Path, cut: str,
                                                                             done: int) -> None:
    """Killed inside the journal append of step 5: a restart has steps 0–3 (step 4's first
    message never committed). Killed inside the board batch of step 4's build: the journal
    has all of step 4, the batch is gone, and the restarted agent's first build redoes it."""
    path = tmp_path / "memory.db"
    got = _run(path, cut, 4)
    assert got.returncode == -signal.SIGKILL, got.stderr[-2000:]
    with sqlite3.connect(path) as db:  # the file is whole: the cut transaction is simply not there
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    resumed = _state(_run(path, "resume", 0))
    reference = _state(_run(tmp_path / "reference.db", "ref", done))  # the same work, never cut
    assert len(resumed["messages"]) == 2 + 2 * done
    assert resumed["messages"] == reference["messages"]
    assert resumed["tick"] == reference["tick"]
    assert resumed["strengths"] == pytest.approx(reference["strengths"], rel=1e-12, abs=1e-12)


def test_a_fresh_file_the_manager_and_a_second_agent(tmp_path: Path) -> None:
    """The five-line use: a manager on a file; a second process-like manager on the same file
    reads what the first published to the shared scope."""
    board = SqliteBoard(tmp_path / "team.db", "team")
    coder = RelevanceMemoryManager(agent="coder", board=board, max_input_tokens=4000)
    coder.add({"role": "system", "content": "You write code."})
    coder.add({"role": "user", "content": "Fix the failing date parser."}, scope="shared")
    coder.build_context()
    reviewer = RelevanceMemoryManager(agent="reviewer", board=SqliteBoard(tmp_path / "team.db", "team"),
                                      max_input_tokens=4000)
    assert reviewer.sync() == 1
    assert reviewer.messages[-1].text.endswith("Fix the failing date parser.")
    snap = board.snapshot("shared", ["coder:m1"], agent="reviewer", provenance=True)
    assert snap.source == "sqlite" and snap.cells["coder:m1"].cell.producer == "coder"


def test_a_corrupt_row_is_reported_not_fatal(tmp_path: Path) -> None:
    board = SqliteBoard(tmp_path / "b.db")
    board.apply([Add("shared", "m1", "tool_result", "a"), Add("shared", "m2", "tool_result", "a")])
    board._db.execute("UPDATE cells SET cell = '{\"kind\": 1' WHERE id = 'm2'")
    snap = board.snapshot("shared", ["m1", "m2", "m3"], agent="a")
    assert list(snap.cells) == ["m1"] and snap.corrupt == ("m2",) and snap.missing == ("m3",)
    assert "corrupt" in snap.faults[0]
    assert board.apply([Add("shared", "m2", "tool_result", "a")]).outcomes == ("corrupt",)
    with pytest.raises(ValueError, match="synchronous"):
        SqliteBoard(tmp_path / "c.db", synchronous="OFF")  # type: ignore[arg-type]


@settings(max_examples=40, deadline=None)
@given(batches=st.lists(st.lists(board_op(), min_size=1, max_size=8), min_size=1, max_size=8),
       goal=st.sampled_from(GOALS), subtask=st.sampled_from(["sub0", "sub1", None]),
       kept=st.sampled_from([0, 2, 16]))
def test_sqlite_and_memory_boards_agree_bit_for_bit(batches: list[list[Any]], goal: str | None,
                                                    subtask: str | None, kept: int) -> None:
    config = BoardConfig(agent_share=0.4, lease_ticks=4, ttl_seconds={"shared": 1e5}, events_kept=kept)
    memory, sqlite = InMemoryBoard("m", config), SqliteBoard(":memory:", f"s-{uuid.uuid4().hex[:6]}", config)
    for ops in batches:
        got_m, got_s = memory.apply(ops), sqlite.apply(ops)
        assert (got_m.outcomes, got_m.amounts) == (got_s.outcomes, got_s.amounts)
    for sc in SCOPES:
        for provenance in (False, True):
            m = memory.snapshot(sc, [*IDS, "absent"], agent="coder", goal=goal, subtask=subtask, now=5e5,
                                provenance=provenance)
            s = sqlite.snapshot(sc, [*IDS, "absent"], agent="coder", goal=goal, subtask=subtask, now=5e5,
                                provenance=provenance)
            assert (m.tick, m.missing, m.cells) == (s.tick, s.missing, s.cells)
        assert memory.edges(sc) == sqlite.edges(sc)
    sqlite.close()

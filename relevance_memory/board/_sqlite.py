"""A durable memory board in one SQLite file (stdlib ``sqlite3``): persistence without a server.

``RelevanceMemoryManager(agent="coder", board=SqliteBoard("memory.db"))`` restarted in a
new process resumes as it would on Redis: its store from the journal (the private log),
its strengths from its private scope's cells, its place in the shared logs. Several
processes may share the file (SQLite's locks; writers wait up to ``busy_timeout_s``).

Layout (one row per thing, every batch in one transaction)::

    meta(scope, tick)                    the scope's tick
    cells(scope, id, cell)               the cell as _model.encode_cell JSON (floats as
                                         their exact repr), provenance events included
    edges(scope, item, source, weight)   REAL: an IEEE double, exact
    log(scope, n, fields)                the scope's message log; cursor "<n>-0"
    batches(id, at) / appends(id, cursors, at)   applied batch and append ids (at most once)

Crash safety: write-ahead log (``journal_mode=WAL``) and ``synchronous=FULL`` by default:
a batch or append is one ``BEGIN IMMEDIATE … COMMIT``, so a process killed halfway through
leaves the previous state readable, and a committed one survives a power cut. A batch is
computed by the same pure functions as the in-memory board (``_apply.run_batch``), so the
two agree bit for bit.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from os import PathLike
from typing import Any, Literal

from .._exceptions import BoardError, BoardUnavailableError
from ._apply import CORRUPT, BatchWrites, check_ops, run_batch, views
from ._model import (
    BatchResult,
    BoardCell,
    BoardConfig,
    LogEntry,
    Op,
    Snapshot,
    check_access,
    decode_cell,
    encode_cell,
    is_private,
)

__all__ = ["SqliteBoard"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (scope TEXT PRIMARY KEY, tick INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS cells (scope TEXT NOT NULL, id TEXT NOT NULL, cell TEXT NOT NULL,
                                  PRIMARY KEY (scope, id)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS edges (scope TEXT NOT NULL, item TEXT NOT NULL, source TEXT NOT NULL,
                                  weight REAL NOT NULL, PRIMARY KEY (scope, item, source)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS log (scope TEXT NOT NULL, n INTEGER NOT NULL, fields TEXT NOT NULL,
                                PRIMARY KEY (scope, n)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS batches (id TEXT PRIMARY KEY, at REAL NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS appends (id TEXT PRIMARY KEY, cursors TEXT NOT NULL, at REAL NOT NULL) WITHOUT ROWID;
"""
_CHUNK = 500  # ids per "IN (…)" (SQLite's default limit of bound parameters is 32,766; stay well below)


class SqliteBoard:
    """A :class:`~relevance_memory.board.MemoryBoard` in one SQLite file (see the module doc).

    Args:
        path: the database file (created with its tables when absent), or ``":memory:"``.
        name: the board's name (for messages and the decision record).
        config: a :class:`BoardConfig`.
        synchronous: SQLite's ``synchronous`` pragma: ``"FULL"`` (default: a committed batch
            survives a power cut) or ``"NORMAL"`` (faster; in WAL mode still never corrupt,
            but the newest commits may be lost to a power cut — not to a process crash).
        busy_timeout_s: how long a write waits for another process's write (seconds).

    Raises:
        BoardUnavailableError: the file cannot be opened or is not a database.
    """

    def __init__(self, path: str | PathLike[str], name: str = "board", config: BoardConfig | None = None, *,
                 synchronous: Literal["FULL", "NORMAL"] = "FULL", busy_timeout_s: float = 5.0) -> None:
        if synchronous not in ("FULL", "NORMAL"):
            raise ValueError(f"synchronous must be 'FULL' or 'NORMAL', got {synchronous!r}")
        self.path = str(path)
        self.name = name
        self.config = config or BoardConfig()
        self._lock = threading.RLock()
        try:
            self._db = sqlite3.connect(self.path, timeout=busy_timeout_s, isolation_level=None,
                                       check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(f"PRAGMA synchronous={synchronous}")
            self._db.executescript(_SCHEMA)
            cutoff = time.time() - self.config.batch_ttl_seconds
            with self._write():
                self._db.execute("DELETE FROM batches WHERE at < ?", (cutoff,))
                self._db.execute("DELETE FROM appends WHERE at < ?", (cutoff,))
        except sqlite3.Error as exc:
            raise BoardUnavailableError(f"board {name!r}: cannot open {self.path!r}: {exc}") from exc

    # ------------------------------------------------------------------ plumbing
    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (BEGIN IMMEDIATE … COMMIT; ROLLBACK on any error)."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """One read transaction: every read inside sees the same committed state."""
        with self._lock:
            self._db.execute("BEGIN")
            try:
                yield self._db
            finally:
                self._db.execute("COMMIT")

    @contextmanager
    def _guard(self, what: str) -> Iterator[None]:
        """SQLite's errors as the board's: locked past the timeout, disk full or an I/O
        error → :class:`BoardUnavailableError`; anything else → :class:`BoardError`."""
        try:
            yield
        except sqlite3.OperationalError as exc:
            raise BoardUnavailableError(f"board {self.name!r}: {what} failed: {exc}") from exc
        except sqlite3.Error as exc:
            raise BoardError(f"board {self.name!r}: {what} failed: {exc}") from exc

    @staticmethod
    def _tick(db: sqlite3.Connection, scope: str) -> int:
        row = db.execute("SELECT tick FROM meta WHERE scope = ?", (scope,)).fetchone()
        return int(row[0]) if row else 0

    # ------------------------------------------------------------------ reads
    def snapshot(self, scope: str, ids: Iterable[str] | None = None, *, agent: str, goal: str | None = None,
                 subtask: str | None = None, now: float | None = None, provenance: bool = False) -> Snapshot:
        """See :meth:`MemoryBoard.snapshot`: one read transaction (the tick and the rows asked)."""
        check_access(scope, agent)
        wanted = None if ids is None else list(dict.fromkeys(ids))
        with self._guard(f"snapshot of {scope!r}"), self._read() as db:
            tick = self._tick(db, scope)
            if wanted is None:
                rows = db.execute("SELECT id, cell FROM cells WHERE scope = ?", (scope,)).fetchall()
            else:
                rows = []
                for lo in range(0, len(wanted), _CHUNK):
                    part = wanted[lo:lo + _CHUNK]
                    rows += db.execute(f"SELECT id, cell FROM cells WHERE scope = ? AND id IN "
                                       f"({', '.join('?' * len(part))})", (scope, *part)).fetchall()
        cells: dict[str, BoardCell] = {}
        corrupt, faults = [], []
        for item, raw in rows:
            try:
                cells[item] = decode_cell(raw, events=provenance)
            except ValueError as exc:
                corrupt.append(item)
                faults.append(f"cell {item!r} in {scope!r} is corrupt in {self.path!r} ({exc}); treated as missing")
        if wanted is not None:  # the order asked
            cells = {i: cells[i] for i in wanted if i in cells}
        missing = () if wanted is None else tuple(i for i in wanted if i not in cells and i not in corrupt)
        return Snapshot(scope=scope, tick=tick, missing=missing, corrupt=tuple(corrupt), source="sqlite",
                        faults=tuple(faults),
                        cells=views(cells, tick, self.config, scope, goal=goal, subtask=subtask, now=now))

    def tick(self, scope: str) -> int:
        """See :meth:`MemoryBoard.tick`."""
        with self._guard("tick"), self._lock:
            return self._tick(self._db, scope)

    def edges(self, scope: str) -> dict[tuple[str, str], float]:
        """(earlier id, later id) → edge strength in ``scope``."""
        with self._guard("edges"), self._lock:
            rows = self._db.execute("SELECT item, source, weight FROM edges WHERE scope = ?", (scope,)).fetchall()
        return {(a, b): float(w) for a, b, w in rows}

    # ------------------------------------------------------------------ writes
    def apply(self, ops: Sequence[Op], *, batch_id: str | None = None) -> BatchResult:
        """See :meth:`MemoryBoard.apply`: one transaction; the ops computed by
        :func:`~relevance_memory.board._apply.run_batch` (the in-memory board's arithmetic)."""
        check_ops(ops)
        batch_id = batch_id or uuid.uuid4().hex
        with self._guard(f"batch {batch_id}"), self._write() as db:
            if db.execute("SELECT 1 FROM batches WHERE id = ?", (batch_id,)).fetchone():
                return BatchResult(batch_id, (), (), duplicate=True)
            got = run_batch(ops, self.config, lambda scope: self._tick(db, scope),
                            lambda scope, item: self._cell(db, scope, item),
                            lambda scope, edge: self._edge(db, scope, edge))
            self._commit(db, got)
            db.execute("INSERT INTO batches (id, at) VALUES (?, ?)", (batch_id, time.time()))
        return BatchResult(batch_id, tuple(got.outcomes), tuple(got.amounts))

    @staticmethod
    def _cell(db: sqlite3.Connection, scope: str, item: str) -> Any:
        row = db.execute("SELECT cell FROM cells WHERE scope = ? AND id = ?", (scope, item)).fetchone()
        if row is None:
            return None
        try:
            return decode_cell(row[0])
        except ValueError:
            return CORRUPT

    @staticmethod
    def _edge(db: sqlite3.Connection, scope: str, edge: tuple[str, str]) -> float | None:
        row = db.execute("SELECT weight FROM edges WHERE scope = ? AND item = ? AND source = ?",
                         (scope, *edge)).fetchone()
        return None if row is None else float(row[0])

    @staticmethod
    def _commit(db: sqlite3.Connection, got: BatchWrites) -> None:
        db.executemany("INSERT INTO meta (scope, tick) VALUES (?, ?) "
                       "ON CONFLICT (scope) DO UPDATE SET tick = excluded.tick", got.ticks.items())
        db.executemany("INSERT OR REPLACE INTO cells (scope, id, cell) VALUES (?, ?, ?)",
                       [(scope, item, encode_cell(cell)) for (scope, item), cell in got.cells.items()])
        db.executemany("INSERT OR REPLACE INTO edges (scope, item, source, weight) VALUES (?, ?, ?, ?)",
                       [(scope, a, b, w) for (scope, (a, b)), w in got.edges.items()])

    # ------------------------------------------------------------------ log
    def append(self, scope: str, entries: Sequence[Mapping[str, str]], *, agent: str,
               append_id: str | None = None) -> list[str]:
        """See :meth:`MemoryBoard.append`. Cursors are ``"<n>-0"``, n = 1, 2, … per scope."""
        check_access(scope, agent)
        for entry in entries:
            if not entry:
                raise BoardError("a log entry needs at least one field")
        rows = [json.dumps({str(k): str(v) for k, v in entry.items()}, ensure_ascii=False) for entry in entries]
        every = None if is_private(scope) else self.config.log_tick_every
        with self._guard(f"append to {scope!r}"), self._write() as db:
            if append_id is not None:
                row = db.execute("SELECT cursors FROM appends WHERE id = ?", (append_id,)).fetchone()
                if row:
                    return list(json.loads(row[0]))
            last = db.execute("SELECT MAX(n) FROM log WHERE scope = ?", (scope,)).fetchone()[0] or 0
            db.executemany("INSERT INTO log (scope, n, fields) VALUES (?, ?, ?)",
                           [(scope, last + k, fields) for k, fields in enumerate(rows, 1)])
            out = [f"{last + k}-0" for k in range(1, len(rows) + 1)]
            if every and rows:
                ticks = (last + len(rows)) // every - last // every
                db.execute("INSERT INTO meta (scope, tick) VALUES (?, ?) ON CONFLICT (scope) DO UPDATE "
                           "SET tick = tick + ?", (scope, ticks, ticks))
            if append_id is not None:
                db.execute("INSERT INTO appends (id, cursors, at) VALUES (?, ?, ?)",
                           (append_id, json.dumps(out), time.time()))
        return out

    def read(self, scope: str, since: str | None = None, *, agent: str, count: int | None = None) -> list[LogEntry]:
        """See :meth:`MemoryBoard.read`."""
        check_access(scope, agent)
        start = 0
        if since is not None:
            try:
                start = int(since.split("-", 1)[0])
            except ValueError:
                raise BoardError(f"not a log cursor of this board: {since!r}") from None
        with self._guard(f"read of {scope!r}"), self._lock:
            rows = self._db.execute("SELECT n, fields FROM log WHERE scope = ? AND n > ? ORDER BY n LIMIT ?",
                                    (scope, start, -1 if count is None else count)).fetchall()
        return [LogEntry(f"{n}-0", json.loads(fields)) for n, fields in rows]

    def close(self) -> None:
        """Close the database (committed writes are on disk already)."""
        with self._lock:
            self._db.close()

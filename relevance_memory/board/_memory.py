"""The in-process memory board: today's behaviour, thread-safe, the contract's reference."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from .._exceptions import BoardError
from ._apply import check_ops, run_batch, views
from ._model import (
    BatchResult,
    BoardCell,
    BoardConfig,
    LogEntry,
    Op,
    Snapshot,
    check_access,
    is_private,
)

__all__ = ["InMemoryBoard"]


@dataclass
class _Scope:
    tick: int = 0
    cells: dict[str, BoardCell] = field(default_factory=dict)
    bare: dict[str, BoardCell] = field(default_factory=dict)  # the same cells without their events
    edges: dict[tuple[str, str], float] = field(default_factory=dict)
    log: list[LogEntry] = field(default_factory=list)

    def put(self, item: str, cell: BoardCell) -> None:
        self.cells[item] = cell
        self.bare[item] = replace(cell, events=()) if cell.events else cell


class InMemoryBoard:
    """A :class:`~relevance_memory.board.MemoryBoard` in this process.

    A batch is applied under one lock: all its operations are computed on an overlay
    with the pure :func:`~relevance_memory.board._apply.step`, then committed together
    (a ``ScopeError`` or ``TypeError`` commits nothing). Snapshots take no lock: they read
    the ids asked (O(ids), the cells' events only with ``provenance``) between two reads
    of a version counter that every commit makes odd while it writes (a sequence lock), and
    read again — under the lock after three tries — when a commit ran meanwhile. So a
    reader never waits behind a stream of writers, and never sees half a batch.

    Args:
        name: the board's name.
        config: a :class:`BoardConfig` (default: SPEC §5 defaults, share caps on).
    """

    def __init__(self, name: str = "board", config: BoardConfig | None = None) -> None:
        self.name = name
        self.config = config or BoardConfig()
        self._scopes: dict[str, _Scope] = {}
        self._batches: set[str] = set()
        self._appends: dict[str, tuple[str, ...]] = {}
        self._lock = threading.RLock()
        self._version = 0  # odd while a commit writes (see the class doc)

    def _scope(self, scope: str) -> _Scope:
        got = self._scopes.get(scope)
        if got is None:
            got = self._scopes[scope] = _Scope()
        return got

    # ------------------------------------------------------------------ reads
    def snapshot(self, scope: str, ids: Iterable[str] | None = None, *, agent: str, goal: str | None = None,
                 subtask: str | None = None, now: float | None = None, provenance: bool = False) -> Snapshot:
        """See :meth:`MemoryBoard.snapshot`."""
        check_access(scope, agent)
        wanted = None if ids is None else list(dict.fromkeys(ids))
        for _ in range(3):
            version = self._version
            if version & 1:
                continue
            got = self._read(scope, wanted, provenance)
            if self._version == version:
                break
        else:
            with self._lock:
                got = self._read(scope, wanted, provenance)
        tick, found, missing = got
        return Snapshot(scope=scope, tick=tick, missing=missing, source="memory",
                        cells=views(found, tick, self.config, scope, goal=goal, subtask=subtask, now=now))

    def _read(self, scope: str, wanted: list[str] | None, provenance: bool
              ) -> tuple[int, dict[str, BoardCell], tuple[str, ...]]:
        state = self._scopes.get(scope)
        if state is None:
            return 0, {}, tuple(wanted or ())
        source = state.cells if provenance else state.bare
        if wanted is None:
            return state.tick, dict(source), ()
        found = {i: c for i in wanted if (c := source.get(i)) is not None}
        return state.tick, found, tuple(i for i in wanted if i not in found)

    def tick(self, scope: str) -> int:
        """See :meth:`MemoryBoard.tick`."""
        with self._lock:
            state = self._scopes.get(scope)
            return state.tick if state else 0

    def edges(self, scope: str) -> dict[tuple[str, str], float]:
        """(earlier id, later id) → edge strength in ``scope`` (a copy)."""
        with self._lock:
            state = self._scopes.get(scope)
            return dict(state.edges) if state else {}

    def load(self, scope: str, tick: int, cells: Mapping[str, BoardCell]) -> None:
        """Overwrite ``cells`` and the tick of ``scope`` with what another board holds (a
        mirror refreshing its local copy; not a batch). Cells read without their events
        replace this copy's with none: the local copy is a fallback for strengths and
        lifecycle, the server keeps the provenance history."""
        with self._lock:
            state = self._scope(scope)
            self._version += 1
            state.tick = tick
            for item, cell in cells.items():
                state.put(item, cell)
            self._version += 1

    # ------------------------------------------------------------------ writes
    def apply(self, ops: Sequence[Op], *, batch_id: str | None = None) -> BatchResult:
        """See :meth:`MemoryBoard.apply`."""
        batch_id = batch_id or uuid.uuid4().hex
        check_ops(ops)
        with self._lock:
            if batch_id in self._batches:
                return BatchResult(batch_id, (), (), duplicate=True)
            got = run_batch(ops, self.config, self.tick, lambda scope, item: self._scope(scope).cells.get(item),
                            lambda scope, edge: self._scope(scope).edges.get(edge))
            ticks, cells, edges = got.ticks, got.cells, got.edges
            self._version += 1
            for scope, tick in ticks.items():
                self._scope(scope).tick = tick
            for (scope, item), cell in cells.items():
                self._scope(scope).put(item, cell)
            for (scope, edge), weight in edges.items():
                self._scope(scope).edges[edge] = weight
            self._version += 1
            self._batches.add(batch_id)
        return BatchResult(batch_id, tuple(got.outcomes), tuple(got.amounts))

    # ------------------------------------------------------------------ log
    def append(self, scope: str, entries: Sequence[Mapping[str, str]], *, agent: str,
               append_id: str | None = None) -> list[str]:
        """See :meth:`MemoryBoard.append`. Cursors are ``"<n>-0"``, n = 1, 2, … per scope."""
        check_access(scope, agent)
        for entry in entries:
            if not entry:
                raise BoardError("a log entry needs at least one field")
        with self._lock:
            if append_id is not None and append_id in self._appends:
                return list(self._appends[append_id])
            state = self._scope(scope)
            log = state.log
            every = None if is_private(scope) else self.config.log_tick_every
            out = []
            for entry in entries:
                cursor = f"{len(log) + 1}-0"
                log.append(LogEntry(cursor, dict(entry)))
                out.append(cursor)
                if every and len(log) % every == 0:
                    self._version += 1
                    state.tick += 1
                    self._version += 1
            if append_id is not None:
                self._appends[append_id] = tuple(out)
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
        with self._lock:
            log = self._scopes[scope].log if scope in self._scopes else []
            got = log[start:]
        return got[:count] if count is not None else got

    def close(self) -> None:
        """Nothing to release."""

"""The in-process memory board: today's behaviour, thread-safe, the contract's reference."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

from .._exceptions import BoardError
from ._apply import check_ops, prominence_cap, run_batch, views
from ._model import (
    BatchResult,
    BoardCell,
    BoardConfig,
    CellView,
    LogEntry,
    Op,
    Snapshot,
    check_access,
    is_private,
)

__all__ = ["InMemoryBoard"]


TICK = ""
"""The key of a scope's tick in its cell maps (no item id is empty: :func:`check_ops`), so
one atomic read takes the tick and the cells together."""


@dataclass
class _Scope:
    # item → cell, and TICK → the scope's tick; ``bare`` holds the same cells without
    # their events. A commit changes each map with one ``dict.update`` and a snapshot
    # reads one with one ``map(dict.get, …)``: both are single C calls that run no
    # Python code, so under CPython's GIL no other thread runs in between — a reader
    # never sees half a batch and never waits for a writer.
    cells: dict[str, Any] = field(default_factory=lambda: {TICK: 0})
    bare: dict[str, Any] = field(default_factory=lambda: {TICK: 0})
    edges: dict[tuple[str, str], float] = field(default_factory=dict)
    log: list[LogEntry] = field(default_factory=list)

    @property
    def tick(self) -> int:
        return int(self.cells[TICK])

    def commit(self, tick: int | None, cells: Mapping[str, BoardCell]) -> None:
        """Write ``cells`` (and the tick, when given) into both maps, each in one step."""
        full: dict[str, Any] = dict(cells)
        bare: dict[str, Any] = {i: replace(c, events=()) if c.events else c for i, c in cells.items()}
        if tick is not None:
            full[TICK] = bare[TICK] = tick
        self.bare.update(bare)
        self.cells.update(full)


class InMemoryBoard:
    """A :class:`~relevance_memory.board.MemoryBoard` in this process.

    A batch is applied under one lock: all its operations are computed on an overlay
    with the pure :func:`~relevance_memory.board._apply.step`, then committed together
    (a ``ScopeError`` or ``TypeError`` commits nothing), each scope's cells and tick in
    one ``dict.update``. Snapshots take no lock: they read the tick and the ids asked
    (O(ids), the cells' events only with ``provenance``) in one C-level call, which no
    other thread can interleave with, so a reader never waits behind a stream of
    writers and never sees half a batch. A view is computed once per (cell, tick, task)
    and reused by later snapshots while the cell is unchanged.

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
        self._views: dict[tuple[str, str], tuple[BoardCell, Any, CellView]] = {}
        # (scope, id) → (the cell, the tick, task and clock it was viewed at, the view)

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
        state = self._scopes.get(scope)
        if state is None:
            return Snapshot(scope=scope, tick=0, cells={}, missing=tuple(dict.fromkeys(ids or ())), source="memory")
        source = state.cells if provenance else state.bare
        if ids is None:
            every = dict(source)  # one C call: a consistent copy
            tick: int = every.pop(TICK)
            return Snapshot(scope=scope, tick=tick, source="memory",
                            cells=views(every, tick, self.config, scope, goal=goal, subtask=subtask, now=now))
        wanted = list(dict.fromkeys(ids))
        wanted.insert(0, TICK)
        got: list[Any] = list(map(source.get, wanted))  # one C call: the tick and the cells of one commit
        tick = got[0]
        if provenance:
            pairs = [(i, c) for i, c in zip(wanted[1:], got[1:], strict=True) if c is not None]
            missing = tuple(i for i, c in zip(wanted[1:], got[1:], strict=True) if c is None)
            return Snapshot(scope=scope, tick=tick, missing=missing, source="memory",
                            cells=views(pairs, tick, self.config, scope, goal=goal, subtask=subtask, now=now))
        at = (tick, goal, subtask, now if scope in self.config.ttl_seconds else None)
        known = self._views
        found: dict[str, CellView | None] = {}
        fresh: dict[str, BoardCell] = {}
        missing_ids: list[str] = []
        for item, cell in zip(wanted[1:], got[1:], strict=True):
            if cell is None:
                missing_ids.append(item)
                continue
            hit = known.get((scope, item))
            if hit is not None and hit[0] is cell and hit[1] == at:
                found[item] = hit[2]
            else:
                found[item] = None
                fresh[item] = cell
        if fresh:
            made = views(fresh, tick, self.config, scope, goal=goal, subtask=subtask, now=now, cap=False)
            for item, view in made.items():
                known[(scope, item)] = (fresh[item], at, view)
                found[item] = view
        cells = cast(dict[str, CellView], found)  # every slot filled now
        return Snapshot(scope=scope, tick=tick, missing=tuple(missing_ids), source="memory",
                        cells=prominence_cap(cells, self.config, scope))

    def tick(self, scope: str) -> int:
        """See :meth:`MemoryBoard.tick`."""
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
            self._scope(scope).commit(tick, cells)

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
            per_scope: dict[str, dict[str, BoardCell]] = {scope: {} for scope in got.ticks}
            for (scope, item), cell in got.cells.items():
                per_scope.setdefault(scope, {})[item] = cell
            for (scope, edge), weight in got.edges.items():
                self._scope(scope).edges[edge] = weight
            for scope, cells in per_scope.items():
                self._scope(scope).commit(got.ticks.get(scope), cells)
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
                    state.commit(state.tick + 1, {})
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

"""A remote board with a local copy: builds go on when the server is unreachable, and say so."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from .._exceptions import BoardUnavailableError
from ._apply import check_ops, views
from ._memory import InMemoryBoard
from ._model import Advance, BatchResult, LogEntry, Op, Repair, Snapshot, check_access
from ._protocol import MemoryBoard

__all__ = ["MirroredBoard"]


class MirroredBoard:
    """A :class:`~relevance_memory.board.MemoryBoard` that keeps a local copy of a remote one.

    Every batch is applied to the local copy first, then sent to the remote board under
    its batch id. When the remote stays unreachable after its retries, or its circuit
    breaker fails the call fast (:class:`~relevance_memory.BoardUnavailableError`), the
    batch waits in :attr:`pending`
    and is sent — once, by its id — before the next write or read that reaches the
    server. Snapshots read the remote board and refresh the local copy with what they
    read; when it cannot be reached they are served from the local copy
    (``source="local copy"``) with a fault saying so. A corrupt remote cell is read from
    the local copy when it has one, and repaired on the server. Nothing written locally
    is lost: the local copy holds it, and the remote gets it when it is back.

    Args:
        remote: the shared board (typically a :class:`~relevance_memory.board.RedisBoard`).
        local: the local copy (default: a new :class:`InMemoryBoard` with the remote's config,
            except that log appends do not tick it).

    Attributes:
        pending: batches (id, ops) not yet known applied remotely, oldest first.
        faults: what went wrong, one sentence each, since :meth:`take_faults` last ran.
    """

    def __init__(self, remote: MemoryBoard, local: InMemoryBoard | None = None) -> None:
        self.remote = remote
        # the copy's clock is the server's (loaded with every snapshot) plus explicit
        # Advance ops: its own log appends must not tick it (it sees only this agent's)
        self.local = local or InMemoryBoard(remote.name, remote.config.model_copy(update={"log_tick_every": None}))
        self.name = remote.name
        self.config = remote.config
        self.pending: list[tuple[str, tuple[Op, ...]]] = []
        self._pending_log: list[tuple[str, tuple[dict[str, str], ...], str, str]] = []
        self.faults: list[str] = []
        self._lock = threading.RLock()

    @property
    def reachable(self) -> bool:
        """Whether the last call reached the remote board (and nothing is pending)."""
        return not self.pending and not self._pending_log

    def take_faults(self) -> list[str]:
        """The faults since the last call (and clear them), the remote board's own (its
        circuit breaker's) included — for a decision record."""
        take = getattr(self.remote, "take_faults", None)
        remote: list[str] = take() if callable(take) else []
        with self._lock:
            out, self.faults = [*self.faults, *remote], []
            return out

    def _flush(self) -> bool:
        while self.pending:
            batch_id, ops = self.pending[0]
            try:
                self.remote.apply(ops, batch_id=batch_id)
            except BoardUnavailableError as exc:
                self.faults.append(f"board {self.name!r} unreachable: {len(self.pending)} batch(es) wait ({exc})")
                return False
            self.pending.pop(0)
            self.faults.append(f"board {self.name!r} reached again: sent batch {batch_id} written while it was away")
        while self._pending_log:
            scope, entries, agent, append_id = self._pending_log[0]
            try:
                self.remote.append(scope, entries, agent=agent, append_id=append_id)
            except BoardUnavailableError as exc:
                self.faults.append(f"board {self.name!r} unreachable: {len(self._pending_log)} log append(s) wait ({exc})")
                return False
            self._pending_log.pop(0)
        return True

    # ------------------------------------------------------------------ writes
    def apply(self, ops: Sequence[Op], *, batch_id: str | None = None) -> BatchResult:
        """Apply locally, then remotely (or queue it). Returns the remote result when the
        server took the batch, else the local copy's."""
        check_ops(ops)
        batch_id = batch_id or uuid.uuid4().hex
        ops = tuple(ops)
        with self._lock:
            local = self.local.apply(ops, batch_id=batch_id)
            if self._flush():
                try:
                    return self.remote.apply(ops, batch_id=batch_id)
                except BoardUnavailableError as exc:
                    self.faults.append(f"board {self.name!r} unreachable: batch {batch_id} kept locally, "
                                       f"sent when it is back ({exc})")
            self.pending.append((batch_id, ops))
            return local

    # ------------------------------------------------------------------ reads
    def snapshot(self, scope: str, ids: Iterable[str] | None = None, *, agent: str, goal: str | None = None,
                 subtask: str | None = None, now: float | None = None, provenance: bool = False) -> Snapshot:
        """The remote snapshot (refreshing the local copy), or the local copy's when the
        remote cannot be reached; faults say which and why."""
        check_access(scope, agent)
        wanted = None if ids is None else list(dict.fromkeys(ids))
        with self._lock:
            if self._flush():
                try:
                    snap = self.remote.snapshot(scope, wanted, agent=agent, goal=goal, subtask=subtask, now=now,
                                               provenance=provenance)
                except BoardUnavailableError as exc:
                    self.faults.append(f"board {self.name!r} unreachable: served the local copy of {scope!r} ({exc})")
                else:
                    return self._merge(snap, scope, agent, goal, subtask, now, provenance)
            snap = self.local.snapshot(scope, wanted, agent=agent, goal=goal, subtask=subtask, now=now,
                                      provenance=provenance)
            fault = (f"board {self.name!r} unreachable: {scope!r} read from the local copy "
                     f"({len(self.pending)} batch(es) not yet sent)")
            return replace(snap, source="local copy", faults=(*snap.faults, fault))

    def _merge(self, snap: Snapshot, scope: str, agent: str, goal: str | None, subtask: str | None,
               now: float | None, provenance: bool) -> Snapshot:
        """Refresh the local copy from a remote snapshot; put back what the server lost."""
        tick, known = snap.tick, self.local.tick(scope)
        fixes: list[Op] = []
        faults = list(snap.faults)
        if tick < known:  # ticks never go back: the server lost this scope's state (restarted without data?)
            fixes.append(Advance(scope, agent, known - tick))
            faults.append(f"board {self.name!r}: {scope!r} was at tick {known}, the server says {tick}; tick restored")
            tick = known
        # a cell the server cannot give back (corrupt, or lost with a server that restarted
        # without its data) but the local copy holds: serve the copy and write it back
        lost = [*snap.corrupt, *snap.missing]
        mine = self.local.snapshot(scope, lost, agent=agent, provenance=True).cells if lost else {}
        repairs = [Repair(scope, i, mine[i].cell, agent) for i in lost if i in mine]
        fixes += repairs
        served = {r.id for r in repairs}
        if repairs:
            faults.append(f"board {self.name!r}: {len(repairs)} cell(s) of {scope!r} corrupt or lost on the server, "
                          f"served from the local copy and written back: {', '.join(sorted(served)[:10])}")
        if fixes:
            try:
                self.remote.apply(fixes)
            except BoardUnavailableError as exc:
                faults.append(f"board {self.name!r}: could not write the repairs back: {exc}")
        cells = {i: v.cell for i, v in snap.cells.items()}
        self.local.load(scope, tick, cells)
        if not fixes:
            self.faults.extend(faults)
            return replace(snap, faults=tuple(faults))
        cells |= {r.id: r.cell if provenance else replace(r.cell, events=()) for r in repairs}
        self.faults.extend(faults)
        return replace(snap, tick=tick, faults=tuple(faults),
                       cells=views(cells, tick, self.config, scope, goal=goal, subtask=subtask, now=now),
                       corrupt=tuple(i for i in snap.corrupt if i not in served),
                       missing=tuple(i for i in snap.missing if i not in served))

    def tick(self, scope: str) -> int:
        """The remote tick, or the local copy's when unreachable."""
        try:
            return self.remote.tick(scope)
        except BoardUnavailableError:
            return self.local.tick(scope)

    def edges(self, scope: str) -> dict[tuple[str, str], float]:
        """The remote edges, or the local copy's when unreachable."""
        try:
            return self.remote.edges(scope)
        except BoardUnavailableError:
            return self.local.edges(scope)

    # ------------------------------------------------------------------ log
    def append(self, scope: str, entries: Sequence[Mapping[str, str]], *, agent: str,
               append_id: str | None = None) -> list[str]:
        """Append remotely (queued, at most once, when unreachable); returns remote cursors,
        or the local copy's while the server is away."""
        check_access(scope, agent)
        rows = tuple(dict(e) for e in entries)
        append_id = append_id or uuid.uuid4().hex
        with self._lock:
            local = self.local.append(scope, rows, agent=agent, append_id=append_id)
            if self._flush():
                try:
                    return self.remote.append(scope, rows, agent=agent, append_id=append_id)
                except BoardUnavailableError as exc:
                    self.faults.append(f"board {self.name!r} unreachable: log append to {scope!r} queued ({exc})")
            self._pending_log.append((scope, rows, agent, append_id))
            return local

    def read(self, scope: str, since: str | None = None, *, agent: str, count: int | None = None) -> list[LogEntry]:
        """The remote log after ``since``; empty (with a fault) while the server is away."""
        check_access(scope, agent)
        with self._lock:
            if self._flush():
                try:
                    return self.remote.read(scope, since, agent=agent, count=count)
                except BoardUnavailableError as exc:
                    self.faults.append(f"board {self.name!r} unreachable: log of {scope!r} not read ({exc})")
            return []

    def close(self) -> None:
        """Close the remote board."""
        self.remote.close()

"""The memory-board seam (SPEC §10): pure reads, atomic batches of writes, a log per scope."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol, runtime_checkable

from ._model import BatchResult, BoardConfig, LogEntry, Op, Snapshot

__all__ = ["MemoryBoard"]


@runtime_checkable
class MemoryBoard(Protocol):
    """Where agents keep pheromone memory: private scopes and shared ones.

    Reads are pure: :meth:`snapshot` computes evaporation into the view and never writes.
    Writes are batches of operations (:data:`~relevance_memory.board.Op`) applied
    atomically: every operation of a batch or none, and no other writer's batch
    interleaves (so concurrent writers never lose an update). A batch id makes a retried
    batch apply once.

    Attributes:
        name: the board's name (its key namespace on a server).
        config: the board's :class:`BoardConfig`.
    """

    name: str
    config: BoardConfig

    def snapshot(
        self,
        scope: str,
        ids: Iterable[str] | None = None,
        *,
        agent: str,
        goal: str | None = None,
        subtask: str | None = None,
        now: float | None = None,
        provenance: bool = False,
    ) -> Snapshot:
        """The cells of ``ids`` (every cell when ``None``) in ``scope`` as ``agent`` sees them
        for ``(goal, subtask)`` at the scope's tick; ``now`` (seconds) decides TTL expiry.
        The cells' provenance events are read only with ``provenance=True`` (the hot path —
        strengths for a build — does not pay for them); counts, contributions, users and
        ``first_selected`` are always there.

        Raises:
            ScopeError: ``agent`` may not read ``scope``.
            BoardUnavailableError: the server stayed unreachable (remote backends).
        """
        ...

    def apply(self, ops: Sequence[Op], *, batch_id: str | None = None) -> BatchResult:
        """Apply ``ops`` atomically, in order. Each op's ``agent`` must be allowed its scope.

        Raises:
            ScopeError: an op's agent may not write its scope (nothing is applied).
            BoardUnavailableError: the server stayed unreachable (nothing is known applied;
                retry with the same ``batch_id`` to apply it at most once).
        """
        ...

    def tick(self, scope: str) -> int:
        """The scope's current tick."""
        ...

    def edges(self, scope: str) -> dict[tuple[str, str], float]:
        """(earlier id, later id) → edge strength in ``scope`` (SPEC §5 edges, ``edge_delta`` per use)."""
        ...

    def append(self, scope: str, entries: Sequence[Mapping[str, str]], *, agent: str,
               append_id: str | None = None) -> list[str]:
        """Append ``entries`` to the scope's message log; returns their cursors, in order.
        An ``append_id`` already used returns the cursors of that first append (at most once).

        Raises:
            ScopeError: ``agent`` may not write ``scope``.
        """
        ...

    def read(self, scope: str, since: str | None = None, *, agent: str, count: int | None = None) -> list[LogEntry]:
        """Log entries of ``scope`` after cursor ``since`` (from the start when ``None``),
        oldest first, at most ``count``.

        Raises:
            ScopeError: ``agent`` may not read ``scope``.
        """
        ...

    def close(self) -> None:
        """Release connections (a no-op for in-process boards)."""
        ...

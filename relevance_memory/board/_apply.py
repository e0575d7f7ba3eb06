"""What one board operation does to one cell, as a pure function (the reference semantics).

:class:`~relevance_memory.board.InMemoryBoard` applies batches with :func:`step`; the
Redis backend's Lua script (``_board.lua``) is a line-by-line mirror of it, and the
board contract tests prove both give the same snapshots. :func:`view` is the one read
path of every backend: evaporation computed into the value, nothing written.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Final

from .._config import PHEROMONE_KINDS
from .._exceptions import BoardError
from ..pheromone import _math as pm
from ._model import (
    Add,
    Advance,
    Archive,
    BoardCell,
    BoardConfig,
    CellView,
    Deposit,
    Event,
    Forget,
    Op,
    Reinforce,
    Repair,
    Restore,
    Supersede,
    Use,
    check_access,
    is_private,
    new_cell_view,
    task_key,
)

__all__ = ["CORRUPT", "BatchWrites", "Step", "check_ops", "prominence_cap", "run_batch", "step", "view", "views"]

Step = tuple[BoardCell | None, str, float, str | None]
"""``(new cell or None when unchanged, outcome, amount added, edge source or None)``."""


def check_ops(ops: Sequence[Op]) -> None:
    """Validate a batch before anything is applied.

    Raises:
        ScopeError: an op's agent may not use its scope.
        BoardError: an op is malformed (unknown kind, score outside 1–5 or a bool, ticks or a
            build number not an int 0–:data:`MAX_COUNT`,
            an empty id or one with a tab, an item superseding itself, a non-finite number), naming
            the op. A tab is
            refused in every backend because the Redis board keys an edge
            ``"<id>\\t<source>"`` and an event ``"<id>\\t<seq>"``: ids ``"a\\tb"``/``"c"`` and
            ``"a"``/``"b\\tc"`` would share one edge field there.
    """
    allowed: set[tuple[str, str]] = set()
    for n, op in enumerate(ops):
        kind = type(op)
        if kind not in _OPS:
            raise BoardError(f"operation {n} is not a board operation: {op!r}")
        pair = (op.scope, op.agent)
        if pair not in allowed:
            check_access(*pair)
            allowed.add(pair)
        if kind is Deposit:  # the most frequent: a valid one passes in one test (an invalid one goes on below)
            item, score, at = op.id, op.score, op.at  # type: ignore[union-attr]
            if isinstance(item, str) and item and "\t" not in item and type(score) is int and 1 <= score <= 5 \
                    and isinstance(at, (int, float)) and not isinstance(at, bool) and 0 <= at < math.inf \
                    and isinstance(op.subtask, str) and (op.goal is None or isinstance(op.goal, str)):  # type: ignore[union-attr]
                continue
        if kind is Advance:
            if not _count(op.ticks):  # type: ignore[union-attr]
                raise BoardError(f"operation {n}: Advance.ticks must be an int 0–2**53, got {op.ticks!r}")  # type: ignore[union-attr]
            if op.to is not None and not _count(op.to):  # type: ignore[union-attr]
                raise BoardError(f"operation {n}: Advance.to must be an int 0–2**53, got {op.to!r}")  # type: ignore[union-attr]
            continue
        item = op.id  # type: ignore[union-attr]
        if not isinstance(item, str) or not item or "\t" in item:
            raise BoardError(f"operation {n}: the item id must be a non-empty string without a tab, got {item!r}")
        other = op.source if kind is Reinforce else op.by if kind is Supersede else None  # type: ignore[union-attr]
        if other is not None and (not isinstance(other, str) or not other or "\t" in other):
            raise BoardError(f"operation {n}: a source or successor id must be a non-empty string without a tab,"
                             f" got {other!r}")
        if kind is Supersede and other == item:  # it would read as replaced by a newer version that is itself
            raise BoardError(f"operation {n}: item {item!r} cannot supersede itself")
        numbers = [getattr(op, "at", 0.0)]
        if isinstance(op, Add):
            if op.kind not in PHEROMONE_KINDS:
                raise BoardError(f"operation {n}: unknown kind {op.kind!r} (one of {', '.join(PHEROMONE_KINDS)})")
            if op.strength is not None:
                numbers.append(op.strength)
        elif isinstance(op, Use) and not _count(op.build):
            raise BoardError(f"operation {n}: Use.build must be an int 0–2**53, got {op.build!r}")
        elif isinstance(op, Deposit):
            if type(op.score) is not int or not 1 <= op.score <= 5:
                raise BoardError(f"operation {n}: a score must be an int 1–5, got {op.score!r}")
            if not isinstance(op.subtask, str) or not (op.goal is None or isinstance(op.goal, str)):
                raise BoardError(f"operation {n}: a Deposit's subtask must be a string and its goal a string or"
                                 f" None, got {op.subtask!r}, {op.goal!r}")
        elif isinstance(op, Reinforce) and op.delta is not None:
            numbers.append(op.delta)
        for x in numbers:
            if not isinstance(x, (int, float)) or isinstance(x, bool) or not 0 <= x < math.inf:
                raise BoardError(f"operation {n}: times and strengths must be finite numbers ≥ 0: {op!r}")


MAX_COUNT = 2**53
"""The largest tick, tick step or build number a batch may name: the Redis board's Lua
script counts in doubles, exact only up to 2**53 (above, it rounded a tick, turned
``Advance(to=2**63 + 5)`` into tick 0 and wrote a build as ``1.15e+18``; SQLite's
INTEGER overflowed)."""


def _count(x: object) -> bool:
    return type(x) is int and 0 <= x <= MAX_COUNT


_OPS = frozenset((Add, Advance, Deposit, Reinforce, Use, Forget, Archive, Supersede, Restore, Repair))


def _event(cell: BoardCell, config: BoardConfig, agent: str, op: str, tick: int, amount: float, at: float
           ) -> tuple[Event, ...]:
    if config.events_kept == 0:
        return ()
    return (*cell.events, Event(agent, op, tick, amount, at))[-config.events_kept:]


def _leased_by(cell: BoardCell, tick: int, config: BoardConfig, other_than: str | None = None) -> tuple[str, ...]:
    return tuple(sorted(a for a, t in cell.users.items() if a != other_than and tick - t <= config.lease_ticks))


def _limit(cell: BoardCell, config: BoardConfig, scope: str, agent: str) -> float | None:
    cap = config.share_cap(scope)
    if cap is None:
        return None
    return max(0.0, cap - cell.contributions.get(agent, 0.0))


def step(cell: BoardCell | None, tick: int, op: Op, config: BoardConfig) -> Step:
    """Apply ``op`` (not :class:`~relevance_memory.board.Advance`) to ``cell`` at ``tick``.

    Deposit and reinforcement settle the cell in closed form first, then add through the
    soft cap and, in a non-private scope, the per-agent share cap
    (:meth:`BoardConfig.share_cap`). Goal and subtask texts are stored as
    :func:`~relevance_memory.board.task_key` digests.

    Returns:
        ``(new cell or None when nothing changed, outcome, amount added, edge source)``.
    """
    pcfg = config.pheromone
    if isinstance(op, Add):
        if cell is not None:
            return None, "exists", 0.0, None
        memory = pm.new_cell(op.kind, tick, pcfg, op.strength)
        new = BoardCell(memory=memory, producer=op.agent, created_at=op.at, touched_at=op.at)
        return replace(new, events=_event(new, config, op.agent, "add", tick, memory.strength, op.at)), "added", 0.0, None
    if isinstance(op, Repair):
        return None, "readable", 0.0, None  # a decodable cell needs no repair (backends check corrupt first)
    if cell is None:
        return None, "missing", 0.0, None
    if isinstance(op, Deposit):
        limit = _limit(cell, config, op.scope, op.agent)
        memory, amount = pm.deposit(cell.memory, tick, pcfg, op.score, task_key(op.subtask) or "",
                                    task_key(op.goal), limit)
        if amount is None:
            return replace(cell, memory=memory), "already", 0.0, None
        contributions = {**cell.contributions, op.agent: cell.contributions.get(op.agent, 0.0) + amount}
        new = replace(cell, memory=memory, contributions=contributions, deposits=cell.deposits + 1,
                      touched_at=op.at)
        return replace(new, events=_event(new, config, op.agent, f"deposit:{op.score}", tick, amount, op.at)), \
            "deposited", amount, None
    if isinstance(op, Reinforce):
        limit = _limit(cell, config, op.scope, op.agent)
        memory, amount = pm.reinforce(cell.memory, tick, pcfg, op.delta, limit)
        contributions = {**cell.contributions, op.agent: cell.contributions.get(op.agent, 0.0) + amount}
        new = replace(cell, memory=memory, contributions=contributions, reinforcements=cell.reinforcements + 1,
                      touched_at=op.at)
        return replace(new, events=_event(new, config, op.agent, "reinforce", tick, amount, op.at)), \
            "reinforced", amount, op.source
    if isinstance(op, Use):
        first = cell.first_selected if cell.first_selected is not None else (op.agent, op.build)
        new = replace(cell, users={**cell.users, op.agent: tick}, first_selected=first, touched_at=op.at)
        return replace(new, events=_event(new, config, op.agent, f"use:{op.build}", tick, 0.0, op.at)), "used", 0.0, None
    if isinstance(op, (Forget, Archive)):
        status = "forgotten" if isinstance(op, Forget) else "archived"
        if cell.status != "active":
            return None, f"conflict:{cell.status}", 0.0, None
        holders = _leased_by(cell, tick, config, other_than=op.agent)
        if holders:
            return None, f"in_use:{holders[0]}", 0.0, None
        new = replace(cell, status=status, status_by=op.agent)  # type: ignore[arg-type]
        return replace(new, events=_event(new, config, op.agent, status, tick, 0.0, op.at)), status, 0.0, None
    if isinstance(op, Supersede):
        if cell.status != "active":
            return None, f"conflict:{cell.status}", 0.0, None
        new = replace(cell, status="superseded", superseded_by=op.by, status_by=op.agent)
        return replace(new, events=_event(new, config, op.agent, f"superseded:{op.by}", tick, 0.0, op.at)), \
            "superseded", 0.0, None
    if isinstance(op, Restore):
        if cell.status == "active":
            return None, "conflict:active", 0.0, None
        new = replace(cell, status="active", superseded_by=None, status_by=op.agent, touched_at=op.at)
        return replace(new, events=_event(new, config, op.agent, "restored", tick, 0.0, op.at)), "restored", 0.0, None
    raise TypeError(f"not a board operation: {op!r}")


class _Corrupt:
    def __repr__(self) -> str:
        return "CORRUPT"


CORRUPT: Final = _Corrupt()
"""What a backend's ``cell_of`` returns for a stored cell that does not decode."""


@dataclass
class BatchWrites:
    """What :func:`run_batch` computed: one outcome and amount per op, and what to write."""

    outcomes: list[str] = field(default_factory=list)
    amounts: list[float] = field(default_factory=list)
    ticks: dict[str, int] = field(default_factory=dict)
    cells: dict[tuple[str, str], BoardCell] = field(default_factory=dict)
    edges: dict[tuple[str, tuple[str, str]], float] = field(default_factory=dict)


def run_batch(ops: Sequence[Op], config: BoardConfig, tick_of: Callable[[str], int],
              cell_of: Callable[[str, str], BoardCell | _Corrupt | None],
              edge_of: Callable[[str, tuple[str, str]], float | None]) -> BatchWrites:
    """Compute a whole batch (ops in order, each seeing the ones before) on an overlay of
    what a backend stores, reading through ``tick_of(scope)``, ``cell_of(scope, id)``
    (``None``: no such item; :data:`CORRUPT`: it does not decode) and
    ``edge_of(scope, (id, source))``; nothing is written here. The backend then commits
    the returned ticks, cells and edges together (or nothing)."""
    out = BatchWrites()
    edge_delta = config.pheromone.edge_delta
    for op in ops:
        scope = op.scope
        tick = out.ticks[scope] if scope in out.ticks else tick_of(scope)
        if isinstance(op, Advance):
            out.ticks[scope] = max(tick, op.to) if op.to is not None else tick + op.ticks
            out.outcomes.append("advanced")
            out.amounts.append(0.0)
            continue
        key = (scope, op.id)
        cell = out.cells[key] if key in out.cells else cell_of(scope, op.id)
        outcome: str | None = None
        if isinstance(op, Repair):
            outcome = "readable" if isinstance(cell, BoardCell) else "repaired"
            if outcome == "repaired":
                out.cells[key] = op.cell
        elif isinstance(cell, _Corrupt):
            outcome = "corrupt"
        elif isinstance(op, Reinforce) and op.source is not None and cell is not None:
            ek = (scope, (op.id, op.source))
            if ek in out.edges or edge_of(scope, (op.id, op.source)) is not None:
                outcome = "already"  # once per (item, source)
        if outcome is not None:
            out.outcomes.append(outcome)
            out.amounts.append(0.0)
            continue
        assert not isinstance(cell, _Corrupt)
        new, outcome, amount, source = step(cell, tick, op, config)
        if new is not None:
            out.cells[key] = new
        if source is not None:
            ek = (scope, (op.id, source))
            out.edges[ek] = (out.edges[ek] if ek in out.edges else edge_of(scope, (op.id, source)) or 0.0) + edge_delta
        out.outcomes.append(outcome)
        out.amounts.append(amount)
    return out


def view(item_id: str, cell: BoardCell, tick: int, config: BoardConfig, scope: str, *,
         goal: str | None = None, subtask: str | None = None, now: float | None = None) -> CellView:
    """The cell as a reader sees it at ``tick`` for ``(goal, subtask)`` (pure; nothing stored).

    ``shared_strength`` equals ``task_strength`` here; :func:`views` applies the
    prominence cap across the items read together.
    """
    return views({item_id: cell}, tick, config, scope, goal=goal, subtask=subtask, now=now, cap=False)[item_id]


def views(cells: Mapping[str, BoardCell] | Iterable[tuple[str, BoardCell]], tick: int, config: BoardConfig,
          scope: str, *, goal: str | None = None, subtask: str | None = None, now: float | None = None,
          cap: bool = True) -> dict[str, CellView]:
    """:func:`view` of every cell (one pass of :func:`~relevance_memory.pheromone._math.read`
    each), then the per-item prominence cap (seed 000 §6.1): in a non-private scope no
    active item's ``shared_strength`` exceeds
    ``prominence × mean(task_strength of the active items read)``."""
    pcfg = config.pheromone
    rates = {k: pcfg.rate(k) for k in pcfg.half_life_steps}
    g, s = task_key(goal), task_key(subtask)
    ttl = config.ttl_seconds.get(scope)
    lease, carry = config.lease_ticks, pcfg.carry_threshold
    items = cells.items() if isinstance(cells, Mapping) else cells
    out: dict[str, CellView] = {}
    for item_id, cell in items:
        memory = cell.memory
        r = pm.read(memory, tick, pcfg, g, s, rates[memory.kind])
        holders = tuple(sorted(a for a, t in cell.users.items() if tick - t <= lease)) if cell.users else ()
        expired = ttl is not None and now is not None and not holders and now - cell.touched_at > ttl
        out[item_id] = new_cell_view(item_id, memory.kind, r.strength, r.task_strength, r.task_strength,
                                     r.score_before, r.forgotten, r.strength >= carry, memory.latest_score, expired,
                                     holders, cell)
    return prominence_cap(out, config, scope) if cap else out


def prominence_cap(out: dict[str, CellView], config: BoardConfig, scope: str) -> dict[str, CellView]:
    """The per-item prominence cap of :func:`views` over views read together (seed 000 §6.1)."""
    if config.prominence is None or is_private(scope):
        return out
    active = [v for v in out.values() if not v.expired and v.cell.status == "active"]
    if len(active) < 2:
        return out
    # fsum: the exactly rounded sum, the same whatever order the ids were asked (or a hash
    # returned them) in — a plain sum's last bit follows the order, so backends disagreed
    limit = config.prominence * (math.fsum(v.task_strength for v in active) / len(active))
    over = [v for v in active if v.task_strength > limit]
    if not over:
        return out
    capped = dict(out)
    for v in over:
        capped[v.id] = replace(v, shared_strength=limit)
    return capped

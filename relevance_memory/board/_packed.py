"""The Redis board's stored form: a cell as one MessagePack array, its events apart.

MessagePack keeps a double a double (Lua's ``cmsgpack`` writes and reads IEEE 754 bits:
an integral number as an integer, any other as a float32 when that is exact, else a
float64), so the Lua script (``_board.lua``) and Python read and write the same values
bit for bit, with no decimal formatting on either side. ``False`` stands for "none" in
a slot (Lua arrays cannot hold nil). Slots, in order: kind, born tick, strength, settled
tick, earned, last deposit, subtasks (one string, each key between newlines:
a deposit tests membership with one plain search, however many subtasks there were), producer, created, touched, status, contributions,
deposits, reinforcements, users, latest score, latest goal, last key, score key,
previous score, superseded by, status by, first selected, and how many events the
item's entry in the events hash holds (the script cuts it back to ``events_kept`` once it
holds twice as many). An event is ``[agent, op, tick, amount, at]``; an item's events are
stored packed one after another, newest last.
"""

from __future__ import annotations

from typing import Any

from .._config import PHEROMONE_KINDS
from ..pheromone._math import Cell
from ._model import BoardCell, Event, new_board_cell

__all__ = ["SLOTS", "pack_cell", "pack_events", "unpack_cell", "unpack_events"]

SLOTS = 24
_STATUSES = frozenset(("active", "archived", "forgotten", "superseded"))
_KINDS = frozenset(PHEROMONE_KINDS)
_EMPTY = frozenset(("",))


def _o(value: Any) -> Any:
    return False if value is None else value


def pack_cell(cell: BoardCell) -> list[Any]:
    """The cell's slots (see the module doc), its events left out."""
    m = cell.memory
    subs = "\n" + "".join(f"{k}\n" for k in sorted(m.subtasks))
    return [m.kind, m.born_tick, m.strength, m.at_tick, m.earned, m.last_deposit, subs, cell.producer,
            cell.created_at, cell.touched_at, cell.status, dict(cell.contributions), cell.deposits,
            cell.reinforcements, dict(cell.users), _o(m.latest_score), _o(m.latest_goal),
            _o(None if m.last_key is None else list(m.last_key)),
            _o(None if m.score_key is None else list(m.score_key)), _o(m.previous_score), _o(cell.superseded_by),
            _o(cell.status_by), _o(None if cell.first_selected is None else list(cell.first_selected)),
            len(cell.events)]


def pack_events(cell: BoardCell) -> list[list[Any]]:
    """The cell's events as stored, oldest first."""
    return [[e.agent, e.op, e.tick, e.amount, e.at] for e in cell.events]


def _finite(*values: float) -> None:
    for x in values:
        if x - x != 0.0:  # inf - inf and nan - nan are nan
            raise ValueError(f"non-finite number {x!r}")


def _opt(value: Any, kind: type) -> Any:
    if value is False:
        return None
    if value.__class__ is not kind:
        raise ValueError(f"expected {kind.__name__}, got {value!r}")
    return value


def _pair(value: Any) -> tuple[str, str] | None:
    if value is False:
        return None
    a, b = value
    return (str(a), str(b))


def unpack_cell(d: Any, events: tuple[Event, ...] = ()) -> BoardCell:
    """A cell from its unpacked slots (the hot path of a snapshot: one pass, no helpers
    per number).

    Raises:
        ValueError: not a cell (wrong shape, an unknown kind or status, a mistyped or
            non-finite number) — a *corrupt* cell.
    """
    try:
        (kind, born, s, at, earned, ldep, subs, producer, created, touched, status, contrib, n_dep, n_rf, users,
         score, goal, lkey, skey, prev, sup_by, status_by, first, _stored) = d
        if kind not in _KINDS:
            raise ValueError(f"unknown kind {kind!r}")
        if status not in _STATUSES:
            raise ValueError(f"unknown status {status!r}")
        if subs.__class__ is not str or producer.__class__ is not str:
            raise ValueError("subtasks and producer must be strings")
        s, earned, ldep, created, touched = float(s), float(earned), float(ldep), float(created), float(touched)
        _finite(s, earned, ldep, created, touched)
        memory = Cell(kind, int(born), s, int(at), _opt(score, int), _opt(goal, str), earned, _pair(lkey), ldep,
                      frozenset(subs.split("\n")) - _EMPTY, _pair(skey), _opt(prev, int))
        return new_board_cell(
            memory, producer, created, touched, status, _opt(sup_by, str), _opt(status_by, str),
            {str(a): float(v) for a, v in contrib.items()} if contrib else {}, int(n_dep), int(n_rf),
            {str(a): int(t) for a, t in users.items()} if users else {},
            None if first is False else (str(first[0]), int(first[1])), events,
        )
    except (TypeError, ValueError, IndexError, AttributeError) as exc:
        raise ValueError(f"corrupt cell: {exc}") from exc


def unpack_events(unpacker: Any, blob: bytes | None, kept: int) -> tuple[Event, ...]:
    """The newest ``kept`` events of an item's stored bytes (``unpacker``: a fresh
    ``msgpack.Unpacker``; ``None`` bytes: no events).

    Raises:
        ValueError: the bytes are not events.
    """
    if not blob or kept == 0:
        return ()
    unpacker.feed(blob)
    try:
        out = [Event(str(a), str(o), int(t), float(x), float(w)) for a, o, t, x, w in unpacker]
    except (TypeError, ValueError) as exc:
        raise ValueError(f"corrupt events: {exc}") from exc
    return tuple(out[-kept:])

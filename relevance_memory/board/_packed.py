"""The Redis board's stored form (form 2): a cell as one MessagePack array, each of its
events apart.

MessagePack keeps a double a double (Lua's ``cmsgpack`` writes and reads IEEE 754 bits:
an integral number as an integer, any other as a float32 when that is exact, else a
float64), so the Lua script (``_board.lua``) and Python read and write the same values
bit for bit, with no decimal formatting on either side. ``False`` stands for "none" in
a slot (Lua arrays cannot hold nil). Slots, in order: the form (2: the script decodes
the other slots into a table made at its size at once), kind, born tick, strength,
settled tick, earned, last deposit, subtasks (one string, each key between newlines: a
deposit tests membership with one plain search, however many subtasks there were),
producer, created, touched, status, contributions, deposits, reinforcements, users,
latest score, latest goal, last key, score key, previous score, superseded by, status
by, first selected, and the seq of the item's next event. An event is ``[agent, op,
tick, amount, at]``, stored in the scope's events hash under the field ``"<id>\t<seq>"``
(seq counts the item's events from 0, or from its last repair): an item's events are the
seqs ``next − events_kept`` to ``next − 1`` (:func:`event_fields`); a batch writes new
ones and deletes the seqs that fell out, and never reads one (``_board.lua``).

Form 1, written before: 24 slots (no form slot), the last how many events the item's
blob holds, the blob (its events packed one after another, newest last) in the events
hash's field ``"<id>"`` (:func:`unpack_events`). A snapshot reads both forms; the first
batch that writes a form-1 cell moves its newest ``events_kept`` events into fields of
their own, deletes the blob and writes the cell in form 2.
"""

from __future__ import annotations

from typing import Any

from .._config import PHEROMONE_KINDS
from ..pheromone._math import Cell
from ._model import BoardCell, Event, new_board_cell

__all__ = ["FORM", "SLOTS", "event_fields", "pack_cell", "pack_events", "stored_events", "unpack_cell",
           "unpack_events"]

SLOTS = 25
FORM = 2
"""The stored form this version writes (a cell's first slot; a cell of 24 slots is form 1)."""
_STATUSES = frozenset(("active", "archived", "forgotten", "superseded"))
_KINDS = frozenset(PHEROMONE_KINDS)
_NO_KEYS: frozenset[str] = frozenset()
_new_cell = tuple.__new__  # Cell(...) without its Python-level __new__: every field given, in order


def _o(value: Any) -> Any:
    return False if value is None else value


def pack_cell(cell: BoardCell) -> list[Any]:
    """The cell's slots (see the module doc), its events left out."""
    m = cell.memory
    subs = "\n" + "".join(f"{k}\n" for k in sorted(m.subtasks))
    return [FORM, m.kind, m.born_tick, m.strength, m.at_tick, m.earned, m.last_deposit, subs, cell.producer,
            cell.created_at, cell.touched_at, cell.status, dict(cell.contributions), cell.deposits,
            cell.reinforcements, dict(cell.users), _o(m.latest_score), _o(m.latest_goal),
            _o(None if m.last_key is None else list(m.last_key)),
            _o(None if m.score_key is None else list(m.score_key)), _o(m.previous_score), _o(cell.superseded_by),
            _o(cell.status_by), _o(None if cell.first_selected is None else list(cell.first_selected)),
            len(cell.events)]


def pack_events(cell: BoardCell) -> list[list[Any]]:
    """The cell's events as stored, oldest first."""
    return [[e.agent, e.op, e.tick, e.amount, e.at] for e in cell.events]


def _is(value: Any, kind: type) -> Any:
    if value.__class__ is not kind:
        raise ValueError(f"expected {kind.__name__}, got {value!r}")
    return value


def unpack_cell(d: Any, events: tuple[Event, ...] = ()) -> BoardCell:
    """A cell from its unpacked slots (the hot path of a snapshot: one pass, no helpers
    per number).

    Raises:
        ValueError: not a cell (wrong shape, an unknown kind or status, a mistyped or
            non-finite number) — a *corrupt* cell.
    """
    try:
        if len(d) == SLOTS:
            (form, kind, born, s, at, earned, ldep, subs, producer, created, touched, status, contrib, n_dep, n_rf,
             users, score, goal, lkey, skey, prev, sup_by, status_by, first, next_seq) = d
            if form != FORM:
                raise ValueError(f"unknown stored form {form!r}")
        else:  # form 1
            (kind, born, s, at, earned, ldep, subs, producer, created, touched, status, contrib, n_dep, n_rf, users,
             score, goal, lkey, skey, prev, sup_by, status_by, first, next_seq) = d
        if kind not in _KINDS:
            raise ValueError(f"unknown kind {kind!r}")
        if status not in _STATUSES:
            raise ValueError(f"unknown status {status!r}")
        if subs.__class__ is not str or producer.__class__ is not str:
            raise ValueError("subtasks and producer must be strings")
        if next_seq.__class__ is not int or next_seq < 0:
            raise ValueError(f"the events' count must be an int >= 0, got {next_seq!r}")
        s, earned, ldep, created, touched = float(s), float(earned), float(ldep), float(created), float(touched)
        if s - s or earned - earned or ldep - ldep or created - created or touched - touched:  # inf − inf is nan
            raise ValueError("a non-finite number")
        keys = subs.strip("\n")  # "\n<key>\n<key>\n": no key is empty (a digest)
        memory = _new_cell(Cell, (kind, int(born), s, int(at), None if score is False else _is(score, int),
                                  None if goal is False else _is(goal, str), earned,
                                  None if lkey is False else (str(lkey[0]), str(lkey[1])), ldep,
                                  frozenset(keys.split("\n")) if keys else _NO_KEYS,
                                  None if skey is False else (str(skey[0]), str(skey[1])),
                                  None if prev is False else _is(prev, int)))
        return new_board_cell(
            memory, producer, created, touched, status, None if sup_by is False else _is(sup_by, str),
            None if status_by is False else _is(status_by, str),
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


def event_fields(item: str, next_seq: int, kept: int) -> list[str]:
    """The events hash's fields of a form-2 item's newest ``kept`` events, oldest first."""
    return [f"{item}\t{seq}" for seq in range(max(0, next_seq - kept), next_seq)]


def stored_events(unpackb: Any, values: list[bytes | None]) -> tuple[Event, ...]:
    """Events from the values of :func:`event_fields` (``unpackb``: ``msgpack.unpackb``;
    a ``None``, a field gone since the cell was read, is left out).

    Raises:
        ValueError: a value is not an event.
    """
    try:
        return tuple(Event(str(a), str(o), int(t), float(x), float(w))
                     for a, o, t, x, w in (unpackb(v) for v in values if v is not None))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"corrupt events: {exc}") from exc

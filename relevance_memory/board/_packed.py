"""The Redis board's stored form (form 3): a cell as one MessagePack array, each of its
events apart.

MessagePack keeps a double a double (Lua's ``cmsgpack`` writes and reads IEEE 754 bits:
an integral number as an integer, any other as a float32 when that is exact, else a
float64), so the Lua script (``_board.lua``) and Python read and write the same values
bit for bit, with no decimal formatting on either side. ``False`` stands for "none" in
a slot (Lua arrays cannot hold nil). Slots, in order: the form (3: the script decodes
the other slots into a table made at its size at once), kind, born tick, strength,
settled tick, earned, last deposit, subtasks, producer, created, touched, status,
contributions, deposits, reinforcements, users, latest score, latest goal, last key,
score key, previous score, superseded by, status by, first selected, and the seq of the
item's next event. The task keys (:func:`~relevance_memory.board.task_key`, 24 hex
digits) are stored as their 12 bytes: the goal one string, the subtasks one string of
them end to end (a deposit tests membership with one plain search, however many
subtasks there were), a key ``(goal, subtask)`` one string, the goal's bytes (none:
empty) then the subtask's. (Every byte of a cell is hashed by Redis's Lua each time the
script reads or makes it; the hex text of forms 1 and 2 was nine tenths of a cell's
bytes in board_throughput's benchmark.) Lua's ``cmsgpack`` writes every string as a
MessagePack *str*, so a cell is read with ``raw=True`` (:func:`read_slots`). An event is ``[agent, op,
tick, amount, at]`` (the script writes the three numbers as float64 when agent and op are under 32
bytes, else as ``cmsgpack`` does; read back as int, float, float), stored in the scope's events hash under the field ``"<id>\t<seq>"``
(seq counts the item's events from 0, or from its last repair): an item's events are the
seqs ``next − events_kept`` to ``next − 1`` (:func:`event_fields`); a batch writes new
ones and deletes the seqs that fell out, and never reads one (``_board.lua``).

Form 2, written before: the task keys as hex text (the subtasks each followed by a
newline after a first newline, a key an array ``[goal or "", subtask]``), the form 2.
Form 1, before it: 24 slots (no form slot), the last how many events the item's blob
holds, the blob (its events packed one after another, newest last) in the events hash's
field ``"<id>"`` (:func:`unpack_events`). A snapshot reads all three forms; the first
batch that writes a form-1 or form-2 cell writes it in form 3 (and moves a form-1
cell's newest ``events_kept`` events into fields of their own, deleting the blob).
"""

from __future__ import annotations

import functools
import hashlib
import re
from typing import Any

from .._config import PHEROMONE_KINDS
from .._exceptions import BoardError
from ..pheromone._math import Cell
from ._model import BoardCell, Event, new_board_cell

__all__ = ["FORM", "SLOTS", "event_fields", "pack_cell", "pack_events", "read_slots", "stored_events",
           "subtask_digests", "task_digest", "unpack_cell", "unpack_events"]

SLOTS = 25
FORM = 3
"""The stored form this version writes (a cell's first slot; a cell of 24 slots is form 1)."""
HEAD = b"\xdc\x00\x19\x03"
"""A form-3 cell's first bytes (an array of 25, the form)."""
DIGEST = 12
"""Bytes of a task key's digest (:func:`task_digest`)."""
_STATUSES = frozenset(("active", "archived", "forgotten", "superseded"))
_KINDS = frozenset(PHEROMONE_KINDS)
_KIND_OF = {k.encode(): k for k in PHEROMONE_KINDS}
_STATUS_OF = {s.encode(): s for s in _STATUSES}
_NO_KEYS: frozenset[str] = frozenset()
_new_cell = tuple.__new__  # Cell(...) without its Python-level __new__: every field given, in order


@functools.lru_cache(maxsize=1024)
def task_digest(text: str | None) -> bytes | None:
    """The 12 bytes of :func:`~relevance_memory.board.task_key` (``task_key(t) ==
    task_digest(t).hex()``; ``None`` stays ``None``): what a batch sends and form 3 stores."""
    if text is None:
        return None
    return hashlib.blake2b(text.encode("utf-8"), digest_size=DIGEST).digest()


def read_slots(unpackb: Any, value: bytes) -> Any:
    """A stored cell's slots: ``unpackb`` (``msgpack.unpackb``) of ``value``, with ``raw=True``
    for form 3 (its digests are not UTF-8), as :func:`unpack_cell` takes them."""
    if value[:4] == HEAD:
        return unpackb(value, raw=True)
    return unpackb(value)


def _o(value: Any) -> Any:
    return False if value is None else value


def _unhex(key: str) -> bytes:
    if len(key) != 2 * DIGEST:
        raise ValueError(f"{key!r} is not a task_key digest")
    return bytes.fromhex(key)


def _pack_key(key: tuple[str, str] | None) -> Any:
    if key is None:
        return False
    goal, subtask = key
    return (_unhex(goal) if goal else b"") + _unhex(subtask)


def pack_cell(cell: BoardCell) -> list[Any]:
    """The cell's slots in form 3 (see the module doc), its events left out.

    Raises:
        BoardError: a goal or subtask key of the cell is not a
            :func:`~relevance_memory.board.task_key` digest (every cell a board makes has them).
    """
    m = cell.memory
    try:
        subs = b"".join(sorted(_unhex(k) for k in m.subtasks))
        goal = False if m.latest_goal is None else _unhex(m.latest_goal)
        lkey, skey = _pack_key(m.last_key), _pack_key(m.score_key)
    except ValueError as exc:
        raise BoardError(f"a Redis board stores task keys as task_key digests: {exc}") from exc
    return [FORM, m.kind, m.born_tick, m.strength, m.at_tick, m.earned, m.last_deposit, subs, cell.producer,
            cell.created_at, cell.touched_at, cell.status, dict(cell.contributions), cell.deposits,
            cell.reinforcements, dict(cell.users), _o(m.latest_score), goal, lkey, skey, _o(m.previous_score),
            _o(cell.superseded_by), _o(cell.status_by),
            _o(None if cell.first_selected is None else list(cell.first_selected)), len(cell.events)]


def pack_events(cell: BoardCell) -> list[list[Any]]:
    """The cell's events as stored, oldest first."""
    return [[e.agent, e.op, e.tick, e.amount, e.at] for e in cell.events]


def _is(value: Any, kind: type) -> Any:
    if value.__class__ is not kind:
        raise ValueError(f"expected {kind.__name__}, got {value!r}")
    return value


_HEX = re.compile("[0-9a-f]{24}")


def _check_hex(memory: Cell) -> None:
    """Raise ValueError unless every task key of a form-1/2 cell is a digest's 24 hex digits
    (the script reads such a cell into form 3, the keys' bytes: one that is not is corrupt)."""
    keys = [*memory.subtasks]
    if memory.latest_goal is not None:
        keys.append(memory.latest_goal)
    for pair in (memory.last_key, memory.score_key):
        if pair is not None:
            keys.append(pair[1])
            if pair[0]:
                keys.append(pair[0])
    for key in keys:
        if not _HEX.fullmatch(key):
            raise ValueError(f"{key!r} is not a task_key digest")


def _key(k: Any) -> tuple[str, str]:
    if k.__class__ is not bytes:
        raise ValueError(f"expected bytes, got {k!r}")
    return (k[:-DIGEST].hex(), k[-DIGEST:].hex())


def _numbers(next_seq: Any, *values: Any) -> tuple[float, float, float, float, float]:
    """A cell's five floats (strength, earned, last deposit, created, touched) as floats, after
    checking them finite and the events' count an int >= 0 (every stored form).

    Raises:
        ValueError: a mistyped count or a non-finite number.
    """
    if next_seq.__class__ is not int or next_seq < 0:
        raise ValueError(f"the events' count must be an int >= 0, got {next_seq!r}")
    s, earned, ldep, created, touched = map(float, values)
    if s - s or earned - earned or ldep - ldep or created - created or touched - touched:  # inf − inf is nan
        raise ValueError("a non-finite number")
    return s, earned, ldep, created, touched


def _subtask_keys(subs: bytes, prior: tuple[bytes, frozenset[str]] | None) -> frozenset[str]:
    """The hex keys of a form-3 cell's subtask digests (``subs``, whole digests end to end).
    ``prior``: an earlier read of the same item's digests and their keys; when ``subs`` starts
    with those digests (a batch only appends to them, until the goal changes) only the
    digests after them are turned to text (the same set: a deposit-heavy cell holds dozens,
    and their text was 40 % of decoding it)."""
    if prior is not None and subs.startswith(prior[0]):
        more = subs[len(prior[0]):]
        return prior[1] | frozenset(more.hex("\n", DIGEST).split("\n")) if more else prior[1]
    return frozenset(subs.hex("\n", DIGEST).split("\n")) if subs else _NO_KEYS  # hex, a newline every 12 bytes


def _unpack3(d: Any, events: tuple[Event, ...], prior: tuple[bytes, frozenset[str]] | None) -> BoardCell:
    """:func:`unpack_cell` of form 3 (``raw=True`` slots: every string bytes)."""
    (_, kind, born, s, at, earned, ldep, subs, producer, created, touched, status, contrib, n_dep, n_rf,
     users, score, goal, lkey, skey, prev, sup_by, status_by, first, next_seq) = d
    kind, status = _KIND_OF[kind], _STATUS_OF[status]  # KeyError, TypeError: an unknown one
    if subs.__class__ is not bytes or len(subs) % DIGEST or producer.__class__ is not bytes:
        raise ValueError("subtasks and producer must be bytes, the subtasks whole digests")
    s, earned, ldep, created, touched = _numbers(next_seq, s, earned, ldep, created, touched)
    keys = _subtask_keys(subs, prior)
    if lkey is False:
        last = None
    elif lkey.__class__ is bytes:
        last = (lkey[:-DIGEST].hex(), lkey[-DIGEST:].hex())
    else:
        raise ValueError(f"expected bytes, got {lkey!r}")
    memory = _new_cell(Cell, (kind, int(born), s, int(at), None if score is False else _is(score, int),
                              None if goal is False else _is(goal, bytes).hex(), earned, last, ldep, keys,
                              None if skey is False else last if skey == lkey else _key(skey),
                              None if prev is False else _is(prev, int)))
    if not contrib:
        contributions = {}
    elif len(contrib) == 1:  # the usual case: no comprehension's frame
        ((a, v),) = contrib.items()
        contributions = {a.decode(): float(v)}
    else:
        contributions = {a.decode(): float(v) for a, v in contrib.items()}
    return new_board_cell(
        memory, producer.decode(), created, touched, status, None if sup_by is False else _is(sup_by, bytes).decode(),
        None if status_by is False else _is(status_by, bytes).decode(), contributions, int(n_dep), int(n_rf),
        {a.decode(): int(t) for a, t in users.items()} if users else {},
        None if first is False else (first[0].decode(), int(first[1])), events,
    )


def unpack_cell(d: Any, events: tuple[Event, ...] = (), prior: tuple[bytes, frozenset[str]] | None = None) -> BoardCell:
    """A cell from its slots as :func:`read_slots` gives them (the hot path of a snapshot:
    one pass, no helpers per number). ``prior``: :func:`subtask_digests` of an earlier read
    of the same item and that cell's ``memory.subtasks``, whose keys are then reused (the
    same cell either way).

    Raises:
        ValueError: not a cell (wrong shape, an unknown kind or status, a mistyped or
            non-finite number) — a *corrupt* cell.
    """
    try:
        if len(d) == SLOTS and d[0] == FORM:
            return _unpack3(d, events, prior)
        if len(d) == SLOTS:  # form 2
            (form, kind, born, s, at, earned, ldep, subs, producer, created, touched, status, contrib, n_dep, n_rf,
             users, score, goal, lkey, skey, prev, sup_by, status_by, first, next_seq) = d
            if form != 2:
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
        s, earned, ldep, created, touched = _numbers(next_seq, s, earned, ldep, created, touched)
        keys = subs.strip("\n")  # "\n<key>\n<key>\n": no key is empty (a digest)
        memory = _new_cell(Cell, (kind, int(born), s, int(at), None if score is False else _is(score, int),
                                  None if goal is False else _is(goal, str), earned,
                                  None if lkey is False else (str(lkey[0]), str(lkey[1])), ldep,
                                  frozenset(keys.split("\n")) if keys else _NO_KEYS,
                                  None if skey is False else (str(skey[0]), str(skey[1])),
                                  None if prev is False else _is(prev, int)))
        _check_hex(memory)
        return new_board_cell(
            memory, producer, created, touched, status, None if sup_by is False else _is(sup_by, str),
            None if status_by is False else _is(status_by, str),
            {str(a): float(v) for a, v in contrib.items()} if contrib else {}, int(n_dep), int(n_rf),
            {str(a): int(t) for a, t in users.items()} if users else {},
            None if first is False else (str(first[0]), int(first[1])), events,
        )
    except (TypeError, ValueError, IndexError, AttributeError, KeyError, UnicodeDecodeError, OverflowError) as exc:
        raise ValueError(f"corrupt cell: {exc}") from exc


def subtask_digests(d: Any) -> bytes | None:
    """The subtask digests of a form-3 cell's slots as :func:`read_slots` gives them (what
    :func:`unpack_cell` takes back as ``prior``); ``None`` for forms 1 and 2 (hex text)."""
    return d[7] if d[0] == FORM and len(d) == SLOTS and d[7].__class__ is bytes else None


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
    except (TypeError, ValueError, OverflowError) as exc:
        raise ValueError(f"corrupt events: {exc}") from exc
    return tuple(out[-kept:])


def event_fields(item: str, next_seq: int, kept: int) -> list[str]:
    """The events hash's fields of a form-2 or form-3 item's newest ``kept`` events, oldest first."""
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
    except (TypeError, ValueError, OverflowError) as exc:
        raise ValueError(f"corrupt events: {exc}") from exc

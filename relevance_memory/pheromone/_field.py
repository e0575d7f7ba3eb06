"""Pheromone field (SPEC §3 step 5, §5): a strength per message that learns and forgets.

The field is a state object over the pure functions of :mod:`._math` (the
one place the SPEC §5 formula lives, shared with the memory boards): callers tell it
what happened (a message arrived at message count ``n``, a message was scored under a
subtask) and it replaces the affected immutable cells; its reads never write — the
evaporation since a cell was last settled is computed into the value returned. It never
reads a clock or does I/O. Time is the *tick*: one tick per ``tick_every`` new messages,
derived from the message count the caller passes in.

Formulas (SPEC §5, seed articles in ``shared/seeds``):

- per tick: ``S ← S·(1 − η_kind)`` for every message that is neither protected (younger
  than ``protect_ticks`` ticks) nor exempt (latest score ≥ ``exempt_score``);
  ``η = 1 − 0.5^(tick_every / half_life)``;
- deposit, once per (message, subtask): ``S ← S + Δ(score)·max(0, 1 − S/S_max)``;
- reinforce on use, for each earlier message a new one references:
  ``S ← S + reinforce_delta·max(0, 1 − S/S_max)`` and ``edge(i → j) += edge_delta``.

Deposits and reinforcement go through the same soft cap, so ``S ≤ S_max`` always
holds when it held before (the cap is reached only asymptotically). Deposits are added
when the scores arrive rather than at the next tick; SPEC §5's ``S·(1 − η) + Δ`` is the
same sum with the deposit applied a few messages earlier.
"""

from __future__ import annotations

import bisect
import json
import re
import weakref
from collections.abc import Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

from .._config import PheromoneConfig
from .._extras import require
from .._io import json_safe
from .._models import Message, MessageType
from ._math import (
    Cell,
    capped_deposit,
    carried,
    deposit,
    evaporate,
    forgotten,
    forgotten_for,
    new_cell,
    reinforce,
    score_before,
    settled_strength,
    task_memory,
    task_strength,
)
from ._top import StrengthRanking

__all__ = [
    "PheromoneField",
    "capped_deposit",
    "evaporate",
    "pheromone_kind",
]

_PREFERENCE_RE = re.compile(
    r"\b(?:i (?:prefer|like|love|hate|dislike|usually|always|never)|my favou?rite|i'm (?:allergic|vegetarian|vegan))\b"
    r"|喜欢|偏好|不喜欢|爱吃|不吃|不喝|讨厌|习惯|过敏",
    re.IGNORECASE,
)


_USER_CHAT = MessageType.USER_CHAT.value


def pheromone_kind(msg_type: str, role: str, text: str) -> str:
    """The kind that picks a message's half-life and initial strength (SPEC §5).

    A user message stating a taste or habit ("I prefer …", "不吃香菜") is a
    ``preference``; otherwise the message type itself.
    """
    if role == "user" and msg_type == _USER_CHAT and _PREFERENCE_RE.search(text):
        return "preference"
    return msg_type


HISTORY_FULL_MAX = 1_000
"""Up to this many messages the history gets a top-N entry after every tick; beyond it, one
entry per :meth:`PheromoneField.observe` call that advanced the tick (the history stays
short). Each entry is ranked from the cells written since the previous one
(:class:`StrengthRanking`), so an appended build's cost does not grow with the history
(issue 24). Beyond it, too, an entry is *settled* later — when the history is read, at the
next deposit, or once :data:`PENDING_MAX` wait — from the cells as they were at its tick
(:class:`_AsOf`): the ranking's ~0.1 ms leaves the appended builds that ticked."""

PENDING_MAX = 256
"""At most this many history entries wait to be settled (a run with no deposit and no reader
settles them in one batch this large: a few ms, once per this many ticking observes)."""

_Write = tuple[str, Cell | None]  # (message id, its cell before the write; None: it had none)


class _PastCells(Mapping[str, Cell]):
    """A cell table as it was earlier: the live table ``_cells`` read through ``_changed`` (the
    ids written since, each with what :meth:`_then` needs to give its cell then; ``None``: the id
    had none). Iteration follows the table's own order (the order every reader of a ranking is
    indifferent to: ties are broken by birth tick and id, never by position)."""

    __slots__ = ()
    _cells: Mapping[str, Cell]
    _changed: Mapping[str, Any]

    def _then(self, key: str, now: Cell | None) -> Cell | None:
        """The cell of ``key`` then, ``now`` being its cell in the live table (read first)."""
        raise NotImplementedError

    def get(self, key: str, default: Any = None) -> Any:
        cell = self._then(key, self._cells.get(key))  # the table first: a write records what it replaces before it writes
        return default if cell is None else cell

    def __getitem__(self, key: str) -> Cell:
        cell = self.get(key)
        if cell is None:
            raise KeyError(key)
        return cell  # type: ignore[no-any-return]

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get(key) is not None

    def __iter__(self) -> Iterator[str]:
        return (key for key, _ in self.items())

    def items(self) -> Iterator[tuple[str, Cell]]:  # type: ignore[override]
        then, changed = self._then, self._changed
        for key, cell in self._cells.items():
            past = then(key, cell) if key in changed else cell
            if past is not None:
                yield key, past


class _AsOf(_PastCells):
    """A cell table as it was at journal position ``position``: a write at or after it is
    undone (its cell before that write is read instead; a message first written there is
    absent). ``_changed`` holds, per message id, the positions of its journalled writes and
    the cells before each, ascending. Reads are O(log writes of that id)."""

    __slots__ = ("_born", "_cells", "_changed", "_position")

    def __init__(self, cells: dict[str, Cell], writes: dict[str, tuple[list[int], list[Cell | None]]],
                 position: int, born: list[int]) -> None:
        # born: the journal positions of the writes that added an id (ascending)
        self._cells, self._changed, self._position, self._born = cells, writes, position, born

    def _then(self, key: str, now: Cell | None) -> Cell | None:
        written = self._changed.get(key)
        if written is None:
            return now
        positions, before = written
        at = bisect.bisect_left(positions, self._position)
        return before[at] if at < len(positions) else now  # type: ignore[no-any-return]

    def __len__(self) -> int:  # O(log writes): the ids added at or after the position are not there yet
        return len(self._cells) - (len(self._born) - bisect.bisect_left(self._born, self._position))


SNAPSHOTS_LIVE = 16
"""Most :class:`_CellsAsOf` a cell table keeps current by recording what each write replaces;
the oldest live one beyond them becomes a copy of its cells (a caller keeping many records)."""


class _CellsAsOf(_PastCells):
    """A cell table as it was when taken (:meth:`PheromoneField.cells_now`): the live table read
    through ``_changed``, the cell each write since replaced (``None``: the id had none), which
    the table fills in while this view lives (issue 24: a copy of a million cells for every
    compaction's record cost ~0.15 s; a build writes a few hundred). Reads are O(1); a view the
    table stops keeping current (:data:`SNAPSHOTS_LIVE`) is made a copy first."""

    __slots__ = ("__weakref__", "_cells", "_changed")

    def __init__(self, table: Mapping[str, Cell]) -> None:
        self._cells = table
        self._changed: dict[str, Cell | None] = {}

    def _then(self, key: str, now: Cell | None) -> Cell | None:
        return self._changed.get(key, now)  # a stored None (the id had no cell) is returned as it is

    def __len__(self) -> int:  # no id leaves a table: those added since are not counted
        return len(self._cells) - sum(1 for cell in self._changed.values() if cell is None)

    def detach(self) -> None:
        """Hold a copy of the cells as of the view, not the live table (O(cells))."""
        copy = dict(self._cells)  # one C-level copy, then what was written since undone
        for key, cell in list(self._changed.items()):
            if cell is None:
                copy.pop(key, None)
            else:
                copy[key] = cell
        self._cells, self._changed = copy, {}


class _CellTable(dict):  # type: ignore[type-arg]
    """The field's cells by message id: a ``dict`` that tells the ranking of every write
    (whoever writes: the field, or a board memory loading its cells), keeps the ids of
    the cells ever written scored or at least ``prefilter_pass`` strong (``notable``), and
    keeps its live :class:`_CellsAsOf` views current."""

    __slots__ = ("config", "journal", "notable", "ranking", "views")

    def __init__(self, config: PheromoneConfig) -> None:
        super().__init__()
        self.config = config
        self.ranking = StrengthRanking(config)
        self.notable: set[str] = set()
        # while history entries wait to be settled: every write, in order, with the cell it
        # replaced (the ranking is told of them as the entries are settled, in order)
        self.journal: list[_Write] | None = None
        self.views: list[weakref.ref[_CellsAsOf]] = []  # the live views as of earlier, oldest first

    def as_of_now(self) -> _CellsAsOf:
        """A view of the cells as they are now, kept so while it lives (O(1); the oldest live
        view beyond :data:`SNAPSHOTS_LIVE` is made a copy)."""
        live = [ref for ref in self.views if ref() is not None]
        while len(live) >= SNAPSHOTS_LIVE:
            oldest = live.pop(0)()
            if oldest is not None:
                oldest.detach()
        view = _CellsAsOf(self)
        self.views = [*live, weakref.ref(view)]
        return view

    def _tell_views(self, key: str) -> None:
        """Before ``key`` is written: each live view that has not yet seen a write of it keeps
        the cell it had (dead views are dropped)."""
        dead = False
        for ref in self.views:
            view = ref()
            if view is None:
                dead = True
            elif key not in view._changed:
                view._changed[key] = dict.get(self, key)
        if dead:
            self.views = [ref for ref in self.views if ref() is not None]

    def __setitem__(self, key: str, value: Cell) -> None:
        if self.views:
            self._tell_views(key)
        journal = self.journal
        if journal is None:
            dict.__setitem__(self, key, value)
            self.ranking.written(key)
        else:
            journal.append((key, dict.get(self, key)))
            dict.__setitem__(self, key, value)
        if value.latest_score is not None or value.strength >= self.config.prefilter_pass:
            self.notable.add(key)

    def __reduce__(self) -> tuple[object, ...]:
        return (_restore_table, (self.config, dict(self)))


def _restore_table(config: PheromoneConfig, cells: dict[str, Cell]) -> _CellTable:
    table = _CellTable(config)
    for key, value in cells.items():
        table[key] = value
    return table


@dataclass
class PheromoneField:
    """Strength per message id, with edges and a per-tick history (SPEC §5).

    Args:
        config: the :class:`PheromoneConfig`.

    Attributes:
        tick: ticks elapsed (one per ``tick_every`` observed messages).
        edges: (earlier id, later id) → edge strength (accumulates ``edge_delta`` per
            reference; edges do not evaporate — they record use, the nodes carry the decay).
            Built when read: the field keeps, per message, the tuple of ids it reinforced
            (usually its own ``references``, shared), not a dict entry per edge.
        history: per tick ``{"tick", "messages", "top": {id: strength}}``, the
            ``history_top_n`` strongest messages after that tick (a new list per read;
            entries of a large field are settled when it is read: :data:`HISTORY_FULL_MAX`).
    """

    config: PheromoneConfig = field(default_factory=PheromoneConfig)
    tick: int = 0
    _edge_targets: list[str] = field(default_factory=list, repr=False)
    _edge_sources: list[tuple[str, ...]] = field(default_factory=list, repr=False)
    _history: list[dict[str, Any]] = field(default_factory=list)
    _cells: dict[str, Cell] = field(default_factory=dict)
    # history entries not settled yet: (tick, messages observed, journal position), oldest first
    _pending: list[tuple[int, int, int]] = field(default_factory=list, repr=False, compare=False)
    _observed: int = 0
    # the new cell of each kind born at ``_fresh_tick``: cells are immutable, so the messages
    # arriving in one tick share it (~145 bytes a message less; issue 24)
    _fresh: dict[str, Cell] = field(default_factory=dict, repr=False, compare=False)
    _fresh_tick: int = field(default=-1, repr=False, compare=False)
    # this tick's reinforcements, id(cell before) → (cell before, cell after): reinforcing is a
    # pure function of the cell and the tick, so the messages of one tick that reinforce a
    # shared cell (the calls their results answer) share the reinforced cell too (issue 24)
    _reinforced: dict[int, tuple[Cell, Cell]] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        table = _CellTable(self.config)
        for key, value in self._cells.items():
            table[key] = value
        self._cells = table

    # ----------------------------------------------------------------- queries
    # Reads never write: each one computes the evaporation since a cell was last settled
    # into the value it returns (pure functions of ``_pheromone_math``).
    def __contains__(self, message_id: object) -> bool:
        return message_id in self._cells

    def __len__(self) -> int:
        return len(self._cells)

    @property
    def history(self) -> list[dict[str, Any]]:
        """Per tick ``{"tick", "messages", "top": {id: strength}}`` (class doc), entries waiting
        to be settled included (a new list per read)."""
        self._settle_history()
        return list(self._history)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PheromoneField):
            return NotImplemented
        self._settle_history()
        other._settle_history()
        return (type(self), self.config, self.tick, self._edge_targets, self._edge_sources, self._history,
                dict(self._cells), self._observed) == (
            type(other), other.config, other.tick, other._edge_targets, other._edge_sources, other._history,
            dict(other._cells), other._observed)

    def __getstate__(self) -> dict[str, Any]:
        self._settle_history()  # a copy or pickle holds no journal (the table's own pickle drops it)
        return dict(self.__dict__)

    @property
    def observed(self) -> int:
        """How many messages the field has seen (the caller's message count)."""
        return self._observed

    def cell(self, message_id: str) -> Cell | None:
        """The stored (immutable) cell of ``message_id``, or ``None``; settle it with
        :func:`~relevance_memory.pheromone._math.settle` to read it at :attr:`tick`."""
        return self._cells.get(message_id)

    def notable_ids(self) -> AbstractSet[str] | None:
        """Ids of the cells ever stored with a score or with at least ``prefilter_pass``
        strength (a live view, O(1)), or ``None`` when the cell table was replaced from outside.

        A superset of the messages the prefilter's memory lets through and of those
        forgetting can archive (both need a score or that strength, and a cell's strength
        grows only when it is written): a build reads these cells, not every message's
        (issue 24: a compaction must not touch every message).
        """
        cells = self._cells
        return cells.notable if isinstance(cells, _CellTable) else None

    def cells_now(self) -> Mapping[str, Cell]:
        """Every stored cell by message id, as of now, for reading later (cells are immutable;
        like :meth:`cells_of` of every id): a view of the table that later writes do not change
        (:class:`_CellsAsOf`, O(1); issue 24: a copy of a million cells cost ~0.15 s a
        compaction), or a copy when the table was replaced from outside."""
        cells = self._cells
        return cells.as_of_now() if isinstance(cells, _CellTable) else dict(cells)

    def cells_of(self, message_ids: Iterable[str]) -> list[Cell | None]:
        """The stored cells of ``message_ids`` (``None`` for an unknown id), in order: a
        snapshot of their memory now (cells are immutable) for reading later."""
        return list(map(self._cells.get, message_ids))

    def strength(self, message_id: str) -> float:
        """Current strength of ``message_id``; 0.0 for an unknown id."""
        cell = self._cells.get(message_id)
        return settled_strength(cell, self.tick, self.config) if cell else 0.0

    def strength_for(self, message_id: str, goal: str | None, subtask: str | None = None) -> float:
        """Strength of ``message_id`` as memory for the task with final goal ``goal``.

        Deposits are earned under a final goal; under another one (a new task, a new
        question) only the base strength counts — initial strength plus reinforcement from
        use, evaporated — so scores earned for one task never order or carry another's
        messages. With ``subtask``, the deposit made for that very (goal, subtask) is left
        out as well: what remains is the importance carried in from *earlier* subtasks
        (SPEC §5 carry-over), the current subtask's relevance being the score itself — and
        a rebuild after this subtask's deposits orders messages exactly as the build that
        made them. 0.0 for an unknown id.
        """
        cell = self._cells.get(message_id)
        return task_strength(cell, self.tick, self.config, goal, subtask) if cell else 0.0

    def memory_for(self, message_id: str, goal: str | None, subtask: str | None = None) -> float:
        """Strength deposited for the task with final goal ``goal`` by its *earlier* subtasks
        (:func:`~relevance_memory.pheromone._math.task_memory`; strength units): what orders
        a tier's strength band. 0.0 for an unknown id or under another final goal."""
        cell = self._cells.get(message_id)
        return task_memory(cell, self.tick, self.config, goal, subtask) if cell else 0.0

    def score_before(self, message_id: str, goal: str | None, subtask: str) -> int | None:
        """The message's latest score from *before* the subtask ``(goal, subtask)``, or ``None``.

        What earlier subtasks of the same task said about it — the memory that the
        prefilter's "high-strength messages always pass" and forgetting read. A score
        given for this very subtask (by an earlier build of it) does not count, so a
        rebuild admits and forgets exactly what the build that scored it did.
        """
        cell = self._cells.get(message_id)
        return score_before(cell, goal, subtask) if cell else None

    def forgotten_for(self, message_id: str, goal: str | None, subtask: str) -> bool:
        """SPEC §5 forgetting as seen by a build for ``(goal, subtask)``: scored ≤ 2 by an
        earlier subtask of this task and strength (:meth:`strength_for`) below
        ``forget_threshold`` — archive without re-scoring."""
        cell = self._cells.get(message_id)
        return forgotten_for(cell, self.tick, self.config, goal, subtask) if cell else False

    def strengths(self) -> dict[str, float]:
        """Every message id → strength (a copy)."""
        tick, cfg = self.tick, self.config
        return {mid: settled_strength(cell, tick, cfg) for mid, cell in self._cells.items()}

    def latest_score(self, message_id: str) -> int | None:
        """The newest score deposited for ``message_id`` under any subtask, or ``None``."""
        cell = self._cells.get(message_id)
        return cell.latest_score if cell else None

    def forgotten(self, message_id: str) -> bool:
        """Score ≤ 2 and strength below ``forget_threshold``: archive without re-scoring (SPEC §5)."""
        cell = self._cells.get(message_id)
        return forgotten(cell, self.tick, self.config) if cell else False

    def carried(self, message_id: str) -> bool:
        """Strength ≥ ``carry_threshold`` (carry-over into ``working``, SPEC §5)."""
        cell = self._cells.get(message_id)
        if cell is None:
            return self.config.carry_threshold <= 0.0
        return carried(cell, self.tick, self.config)

    def goal_of(self, message_id: str) -> str | None:
        """The final goal under which ``message_id`` was last scored, or ``None``."""
        cell = self._cells.get(message_id)
        return cell.latest_goal if cell else None

    # ----------------------------------------------------------------- updates
    def observe(self, messages: Sequence[Message]) -> None:
        """Take in messages the field has not seen yet, in order.

        Each new message starts at its kind's initial strength and reinforces every
        earlier message it references (``Message.references``). After every
        ``tick_every`` messages one tick of evaporation runs. Already-seen messages
        (by position) are skipped, so calling this before every build is cheap.
        """
        start_tick = self.tick
        for message in messages[self._observed :]:
            kind, role = message.msg_type._value_, message.role  # the member's value (not the Python property .value)
            text = message.text if role == "user" and kind == _USER_CHAT else ""  # only chat is read
            self._add(message.id, pheromone_kind(kind, role, text), message.references)
            self._observed += 1
            if self._observed % self.config.tick_every == 0:
                self.advance()
        if self.tick > start_tick and len(self._cells) > HISTORY_FULL_MAX:
            self._record_history()

    def _add(self, message_id: str, kind: str, references: Sequence[str]) -> None:
        cfg, cells = self.config, self._cells
        if self._fresh_tick != self.tick:
            self._fresh, self._fresh_tick, self._reinforced = {}, self.tick, {}
        cell = self._fresh.get(kind)
        if cell is None:
            cell = self._fresh[kind] = new_cell(kind, self.tick, cfg)
        cells[message_id] = cell
        used: list[str] = []
        reinforced = self._reinforced
        for ref in references:
            cell = cells.get(ref)
            if cell is None:
                continue
            done = reinforced.get(id(cell))
            if done is None or done[0] is not cell:  # the pair holds the cell: its id is not reused meanwhile
                done = reinforced[id(cell)] = (cell, reinforce(cell, self.tick, cfg)[0])
            cells[ref] = done[1]
            used.append(ref)
        if used:
            self._edge_targets.append(message_id)
            if isinstance(references, tuple) and len(used) == len(references):
                self._edge_sources.append(references)  # the message's own tuple: shared, not copied
            else:
                self._edge_sources.append(tuple(used))

    @property
    def edges(self) -> dict[tuple[str, str], float]:
        """(earlier id, later id) → edge strength: ``edge_delta`` per reference, summed in
        the order the references arrived (a new dict per read; see the class doc)."""
        delta = self.config.edge_delta
        out: dict[tuple[str, str], float] = {}
        for target, sources in zip(self._edge_targets, self._edge_sources, strict=True):
            for source in sources:
                edge = (source, target)
                out[edge] = out.get(edge, 0.0) + delta
        return out

    def deposit(self, scores: Mapping[str, int], subtask: str, goal: str | None = None) -> dict[str, float]:
        """Deposit from scores, once per (message, subtask) (SPEC §5).

        A message last scored under another final goal first drops what it earned there
        (its strength falls back to the base: initial strength plus reinforcement from
        use, evaporated), so memory is scoped to the task it was earned for; within one
        task subtasks accumulate as SPEC §5 describes.

        Args:
            scores: message id → score 1–5.
            subtask: the subtask the scores are for.
            goal: the final goal the scores are for (recorded per message, so memory
                earned under another task can be told apart).

        Returns:
            message id → effective deposit actually added (strength units).
        """
        self._settle_history()  # the entries waiting are of cells before these deposits
        added: dict[str, float] = {}
        written = False
        for message_id, score in scores.items():
            cell = self._cells.get(message_id)
            if cell is None:
                continue
            self._cells[message_id], amount = deposit(cell, self.tick, self.config, score, subtask, goal)
            written = True
            if amount is not None:
                added[message_id] = amount
        cells = self._cells
        if written and len(cells) > HISTORY_FULL_MAX and isinstance(cells, _CellTable):
            # every write (a repeat deposit too: it records the latest score) is ranked here,
            # in the build that deposited, not in the next append's top()
            cells.ranking.prepare(cells, self.tick, self.config.history_top_n)
        return added

    def advance(self, ticks: int = 1) -> None:
        """Run ``ticks`` evaporation ticks (importance-gated, cold-start protected).

        Evaporation is settled lazily per cell in closed form (reads compute it into the
        value they return; a cell is stored settled only when a deposit or reinforcement
        writes it), so a tick is O(1) plus the history entry: while the field is small
        (≤ :data:`HISTORY_FULL_MAX` cells) each tick records the top-N strengths.
        """
        for _ in range(ticks):
            self.tick += 1
            if len(self._cells) <= HISTORY_FULL_MAX:
                self._record_history(defer=False)

    def _record_history(self, *, defer: bool = True) -> None:
        """The history entry of the tick now: ranked now, or (``defer``, a :class:`_CellTable`)
        settled later from the cells as they are now (:meth:`_settle_history`)."""
        tick, cfg, cells = self.tick, self.config, self._cells
        if isinstance(cells, _CellTable):
            if defer:
                if cells.journal is None:
                    cells.journal = []
                self._pending.append((tick, self._observed, len(cells.journal)))
                if len(self._pending) >= PENDING_MAX:
                    self._settle_history()
                return
            self._settle_history()
            top = cells.ranking.top(cells, tick, cfg.history_top_n)  # O(written since the last entry)
        else:  # a table replaced from outside: rank every cell (ties: born first, then id)
            now = sorted(((mid, settled_strength(c, tick, cfg)) for mid, c in cells.items()),
                         key=lambda kv: (-kv[1], cells[kv[0]].born_tick, kv[0]))
            top = now[: cfg.history_top_n]
        self._history.append({"tick": tick, "messages": self._observed, "top": {k: round(s, 4) for k, s in top}})

    def _settle_history(self) -> None:
        """Rank the entries waiting, oldest first, each from the cells as they were when it
        was recorded (:class:`_AsOf` over the journal), telling the ranking of the writes
        between them in order: the entries equal those ranked at their ticks (tests)."""
        pending, cells = self._pending, self._cells
        if not pending or not isinstance(cells, _CellTable):
            return
        journal = cells.journal or []
        cells.journal, self._pending = None, []
        writes: dict[str, tuple[list[int], list[Cell | None]]] = {}
        born: list[int] = []  # positions of the writes that added an id
        for position, (key, before) in enumerate(journal):
            held = writes.get(key)
            if held is None:
                writes[key] = ([position], [before])
                if before is None:
                    born.append(position)
            else:
                held[0].append(position)
                held[1].append(before)
        ranking, n, told = cells.ranking, self.config.history_top_n, 0
        for tick, observed, position in pending:
            for key, _ in journal[told:position]:
                ranking.written(key)
            told = position
            top = ranking.top(_AsOf(cells, writes, position, born), tick, n)
            self._history.append({"tick": tick, "messages": observed, "top": {k: round(s, 4) for k, s in top}})
        for key, _ in journal[told:]:
            ranking.written(key)

    # ----------------------------------------------------------------- export
    def to_dict(self) -> dict[str, Any]:
        """The field as JSON-ready data: tick, per-message kind/strength/score, edges."""
        return {
            "tick": self.tick,
            "messages": self._observed,
            "config": self.config.model_dump(mode="json"),
            "nodes": [
                {
                    "id": mid,
                    "kind": c.kind,
                    "strength": round(settled_strength(c, self.tick, self.config), 6),
                    "latest_score": c.latest_score,
                    "born_tick": c.born_tick,
                }
                for mid, c in self._cells.items()
            ],
            "edges": [{"source": a, "target": b, "weight": round(w, 6)} for (a, b), w in self.edges.items()],
        }

    def to_json(self, *, indent: int | None = 2) -> str:
        """:meth:`to_dict` as standard JSON text (an infinite half-life — never evaporates — is ``null``)."""
        return json.dumps(json_safe(self.to_dict()), indent=indent, ensure_ascii=False, allow_nan=False)

    def history_json(self, *, indent: int | None = 2) -> str:
        """The strength history (top-N per tick) as JSON text."""
        return json.dumps(self.history, indent=indent, ensure_ascii=False)

    def to_graph(self) -> Any:
        """The field as a ``networkx.DiGraph``: nodes carry ``kind``/``strength``/``latest_score``,
        edges (earlier → later reference) carry ``weight``. Needs the ``graph`` extra."""
        nx = require("networkx", "the pheromone graph export")

        graph = nx.DiGraph()
        for mid, c in self._cells.items():
            graph.add_node(mid, kind=c.kind, strength=float(settled_strength(c, self.tick, self.config)), latest_score=c.latest_score or 0)
        for (a, b), w in self.edges.items():
            graph.add_edge(a, b, weight=float(w))
        return graph

    def graphml(self) -> str:
        """The field as GraphML text (via ``networkx``, the ``graph`` extra)."""
        nx = require("networkx", "the pheromone graph export")

        return "\n".join(nx.generate_graphml(self.to_graph()))

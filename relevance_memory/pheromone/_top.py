"""The strongest cells of a pheromone field at any tick, without reading every cell (SPEC §5).

A field's strength history records the ``history_top_n`` strongest messages after a tick.
Ranking every cell costs O(cells) per entry — 176 ms at 100k messages, paid by appended
builds (issue 24). :class:`StrengthRanking` answers the same question from the cells
written since the previous question, in O(written + groups × N log N):

- Between writes a cell's strength follows SPEC §5 in closed form
  (:func:`~relevance_memory.pheromone._math.settled_strength`): constant while it is
  protected (younger than ``protect_ticks``) or exempt (latest score ≥ ``exempt_score``),
  then ``S(t) = S·(1 − η)^(t − s)`` with ``s = max(at_tick, born_tick + protect_ticks)``.
- So within a *group* of cells that evaporate alike — one pheromone kind, exempt or not —
  the order never changes with time: ``log S − s·log(1 − η)`` (exempt: ``S``) is a key that
  orders the group at every later tick. Each group keeps its best keys in a short sorted
  list, updated only for the cells written since the last question (deposits,
  reinforcement, new messages) and for young cells that have come of age.
- The answer is the exact strengths, at the tick asked, of the few candidates: each
  group's best ``N`` (and near-ties) plus the still-protected young cells; ties go to the
  cell born first, then the smaller id. Deterministic: no hash order is read.

A group's list is refilled from every cell only when writes pushed out more of its best
members than its spare entries cover (a score lowered a top message under a new goal or
subtask): rare, and only in builds that deposit (compactions), never in appends.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Callable, Mapping

from .._config import PheromoneConfig
from ._math import Cell, rate_of, strength_reader

__all__ = ["StrengthRanking"]

SPARE = 4
"""Each group keeps up to ``SPARE × N`` best entries, so that lowered or departed members
seldom force a refill from every cell."""

REBUILD_MIN_WRITES = 4096
"""From how many writes at once (and a quarter of the cells) the ranking is rebuilt from every
cell in one pass instead of placing each write (:meth:`StrengthRanking._rebuild`)."""

_TIE = 1e-9
"""Keys closer than this (relative) to a group's N-th are candidates too (float keys of
strengths that tie exactly may differ in the last bits)."""

Group = tuple[str, bool]
Entry = tuple[float, int, str]  # (-key, born_tick, id): ascending = strongest first
_Run = tuple[list[Entry], list[int], bool]  # a group's entries, [next position, pushed left], exempt


class StrengthRanking:
    """Top-N strongest cells of a field, maintained from the writes (module doc).

    The field calls :meth:`written` for every cell it stores and :meth:`top` to read the
    ranking at a tick; cells are read from the mapping handed to :meth:`top` (the field's
    own table), never copied.

    Args:
        config: the field's parameters (rates, protection, exemption).
    """

    def __init__(self, config: PheromoneConfig) -> None:
        self._config = config
        # log(1 − η) per kind, for the group keys (the same float as computing it per cell)
        self._log_keep = {kind: math.log(1.0 - rate_of(config, kind)) for kind in config.half_life_steps}
        self._lists: dict[Group, list[Entry]] = {}
        self._exhaustive: dict[Group, bool] = {}  # the list holds every mature member of the group
        self._where: dict[str, tuple[Group, Entry]] = {}  # ids in some list
        self._dirty: dict[str, None] = {}  # ids written since the last top()
        self._young: dict[str, None] = {}  # ids still protected at the last top()

    def written(self, message_id: str) -> None:
        """``message_id``'s cell was stored (new, reinforced, deposited, loaded)."""
        self._dirty[message_id] = None

    # ----------------------------------------------------------------- keys
    def _group_key(self, cell: Cell) -> tuple[Group, float]:
        config = self._config
        if cell.latest_score is not None and cell.latest_score >= config.exempt_score:
            return (cell.kind, True), cell.strength
        if cell.strength <= 0.0:
            return (cell.kind, False), -math.inf
        start = max(cell.at_tick, cell.born_tick + config.protect_ticks)
        return (cell.kind, False), math.log(cell.strength) - start * self._log_keep[cell.kind]

    def _young_at(self, cell: Cell, tick: int) -> bool:
        return cell.born_tick + self._config.protect_ticks > tick

    # ----------------------------------------------------------------- upkeep
    def _drop(self, message_id: str) -> None:
        got = self._where.pop(message_id, None)
        if got is not None:
            group, entry = got
            entries = self._lists[group]
            del entries[bisect.bisect_left(entries, entry)]

    def _place(self, message_id: str, cell: Cell, cap: int) -> None:
        """Put a mature cell in its group's list if it belongs among the best (invariant:
        every member left out of a list ranks at or below the list's last entry, unless
        the list is empty and not exhaustive — then it is refilled before it is read)."""
        group, key = self._group_key(cell)
        entries = self._lists.setdefault(group, [])
        exhaustive = self._exhaustive.setdefault(group, True)
        entry = (-key, cell.born_tick, message_id)
        if not exhaustive and (not entries or entry > entries[-1]):
            return  # ranks below every listed member: stays out (the invariant holds)
        bisect.insort(entries, entry)
        self._where[message_id] = (group, entry)
        while len(entries) > cap:
            dropped = entries.pop()
            del self._where[dropped[2]]
            self._exhaustive[group] = False

    def _rebuild(self, cells: Mapping[str, Cell], tick: int, cap: int) -> None:
        """Every group's list and the young cells from every cell, in one pass: cheaper than
        placing the writes one by one when they are a large share of the cells (a history
        ingested at once, read by its first build). The lists then hold each group's best
        ``cap`` mature members, which the invariant of :meth:`_place` allows."""
        protect, group_key = self._config.protect_ticks, self._group_key
        members: dict[Group, list[Entry]] = {}
        young: dict[str, None] = {}
        # a cell no deposit or reinforcement has touched is shared by the messages of its kind
        # that arrived in one tick (PheromoneField._add): its key is computed once (issue 24)
        keys: dict[int, tuple[Group, float]] = {}  # id(cell) → its group and key (cells is not changed meanwhile)
        for message_id, cell in cells.items():
            born = cell.born_tick
            if born + protect > tick:
                young[message_id] = None
                continue
            got = keys.get(id(cell))
            if got is None:
                got = keys[id(cell)] = group_key(cell)
            group, key = got
            entry = (-key, born, message_id)
            held = members.get(group)
            if held is None:
                members[group] = [entry]
            else:
                held.append(entry)
        self._young = young
        self._lists, self._exhaustive, self._where = {}, {}, {}
        for group, entries in members.items():
            best = heapq.nsmallest(cap, entries)
            self._lists[group] = best
            self._exhaustive[group] = len(entries) <= cap
            for entry in best:
                self._where[entry[2]] = (group, entry)

    def _refill(self, group: Group, cells: Mapping[str, Cell], tick: int, cap: int) -> None:
        """The group's list from every cell (O(cells); see the module doc for when)."""
        for entry in self._lists.get(group, ()):
            del self._where[entry[2]]
        members: list[Entry] = []
        for message_id, cell in cells.items():
            if message_id in self._young or self._young_at(cell, tick):
                continue
            g, key = self._group_key(cell)
            if g == group:
                members.append((-key, cell.born_tick, message_id))
        best = heapq.nsmallest(cap, members)
        self._lists[group] = best
        self._exhaustive[group] = len(members) <= cap
        for entry in best:
            self._where[entry[2]] = (group, entry)

    # ----------------------------------------------------------------- reads
    def prepare(self, cells: Mapping[str, Cell], tick: int, n: int) -> None:
        """Take in the writes so far and refill the groups they left short (O(cells) when one
        is): a field calls this after its deposits, so the refill falls in the build that
        deposited (a compaction), not in the next append's :meth:`top`."""
        self._take_writes(cells, tick, SPARE * n)
        for group, entries in list(self._lists.items()):
            if len(entries) < n and not self._exhaustive[group]:
                self._refill(group, cells, tick, SPARE * n)

    def _take_writes(self, cells: Mapping[str, Cell], tick: int, cap: int) -> None:
        dirty, self._dirty = self._dirty, {}
        if len(dirty) > max(REBUILD_MIN_WRITES, len(cells) // 4):
            self._rebuild(cells, tick, cap)
            return
        young, mature = self._young, tick - self._config.protect_ticks  # born at or before `mature`: not young
        for message_id in dirty:
            cell = cells.get(message_id)
            self._drop(message_id)
            if cell is None:
                continue
            if cell.born_tick > mature:  # _young_at, inlined
                young[message_id] = None
            else:
                young.pop(message_id, None)
                self._place(message_id, cell, cap)
        for message_id in [m for m in young if cells[m].born_tick <= mature]:
            del young[message_id]
            self._place(message_id, cells[message_id], cap)

    def top(self, cells: Mapping[str, Cell], tick: int, n: int) -> list[tuple[str, float]]:
        """The ``n`` strongest cells of ``cells`` at ``tick``: ``[(id, strength)]``, strongest
        first (ties: born first, then the smaller id). Cost O(written since the last call +
        (groups + n) log n), plus a refill now and then (module doc; :meth:`prepare`)."""
        config, cap = self._config, SPARE * n
        self._take_writes(cells, tick, cap)
        # merge the groups, strongest first: each group's list is in strength order at any
        # tick, so only its next run of (near-)equal keys needs an exact strength
        strength = strength_reader(config, tick)
        heap: list[tuple[float, int, str, int]] = [
            (-strength(cells[m]), cells[m].born_tick, m, -1) for m in self._young
        ]
        runs: list[_Run] = []  # per group: its entries, [next position, pushed left], exempt
        for group, entries in list(self._lists.items()):
            if len(entries) < n and not self._exhaustive[group]:
                self._refill(group, cells, tick, cap)
                entries = self._lists[group]
            runs.append((entries, [0, 0], group[1]))
            self._push_run(heap, runs, len(runs) - 1, cells, strength)
        heapq.heapify(heap)
        out: list[tuple[str, float]] = []
        while heap and len(out) < n:
            value, _, message_id, slot = heapq.heappop(heap)
            out.append((message_id, -value))
            if slot >= 0:
                state = runs[slot][1]
                state[1] -= 1
                if state[1] == 0:
                    self._push_run(heap, runs, slot, cells, strength, heappush=True)
        return out

    def _push_run(self, heap: list[tuple[float, int, str, int]], runs: list[_Run],
                  slot: int, cells: Mapping[str, Cell], strength: Callable[[Cell], float], *,
                  heappush: bool = False) -> None:
        """Put the next run of a group's entries — the next one and those whose key is within
        :data:`_TIE` of it — on the heap with their exact strengths (``strength``: a cell's
        at the tick asked, :func:`~relevance_memory.pheromone._math.strength_reader`; an
        exempt group's key is its members' strength)."""
        entries, state, exempt = runs[slot]
        start = state[0]
        if start >= len(entries):
            return
        first = entries[start][0]
        last = first + _TIE * max(1.0, abs(first)) if math.isfinite(first) else first
        stop = bisect.bisect_right(entries, (last, math.inf, "\U0010ffff"), lo=start)
        if exempt:  # an exempt cell's strength is its key (no evaporation): -key is -strength, bit for bit
            items = [(negated, born, message_id, slot) for negated, born, message_id in entries[start:stop]]
        else:
            items = [(-strength(cells[message_id]), born, message_id, slot) for _key, born, message_id in entries[start:stop]]
        if heappush:
            for item in items:
                heapq.heappush(heap, item)
        else:
            heap.extend(items)
        state[0], state[1] = stop, stop - start

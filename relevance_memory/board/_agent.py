"""One agent's pheromone memory on a board (SPEC §10): a :class:`PheromoneField` that mirrors
its writes to the board and reads the shared items' strengths from it.

The agent's own arithmetic is today's single-agent field, unchanged: every message it
holds is observed, reinforced and deposited locally. Every write is also sent to the
board as one batch of idempotent operations, attributed to the agent:

- a new message of its own → ``Add`` in its scope (``private:<agent>``, or the shared scope
  it was published to); another agent's imported message is already there;
- a reference from a new message → ``Reinforce(source=…)`` of the referenced item in *its*
  scope (once per pair): one agent's use raises a shared item for all, within the board's
  per-agent share cap;
- the field's ticks → ``Advance(private:<agent>, to=tick)``;
- a build's scores → ``Deposit`` (once per item, goal and subtask).

Reads of an item in a shared scope come from the board — the consensus of every agent's
deposits and uses, settled to the scope's tick, capped by the board's prominence rule —
read once per observe and per deposit (one pipelined snapshot per scope), never written on
read. Items of the private scope are read locally; the board's copy of them lets a
restarted agent resume with its strengths (:meth:`AgentMemory.resume_from_board`).
When the board cannot be reached the memory keeps working from what it read last and
from its own field; :attr:`AgentMemory.faults` says what happened.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from .._config import PheromoneConfig
from .._exceptions import BoardError, BoardUnavailableError
from .._models import Message
from ..pheromone import _math as pm
from ..pheromone._field import PheromoneField, pheromone_kind
from ._model import Add, Advance, BoardCell, Deposit, Op, Reinforce, Use, is_private, private_scope, task_key
from ._protocol import MemoryBoard

__all__ = ["AgentMemory"]


class AgentMemory(PheromoneField):
    """The pheromone memory of agent ``agent``, kept on ``board`` (see the module doc).

    Args:
        config: the SPEC §5 parameters (the board's formula uses its own config).
        board: the board (a :class:`~relevance_memory.board.MirroredBoard` keeps the
            memory going when a remote board is unreachable).
        agent: the agent's name (``[A-Za-z0-9_.-]+``).
        scopes: the non-private scopes this agent reads and publishes to.
        clock: seconds since the epoch (provenance, TTL); injected for tests.

    Raises:
        ScopeError: a bad agent or scope name.
    """

    def __init__(self, config: PheromoneConfig, board: MemoryBoard, agent: str, *,
                 scopes: Sequence[str] = ("shared",), clock: Callable[[], float] | None = None) -> None:
        super().__init__(config)
        self.board = board
        self.agent = agent
        self.private = private_scope(agent)
        self.scopes = tuple(s for s in scopes if not is_private(s))
        self._clock = clock or time.time
        self._scope_of: dict[str, str] = {}
        self._remote: dict[str, BoardCell] = {}
        self._remote_tick: dict[str, int] = {}
        self._cap: dict[str, float | None] = {}
        self._resume = False
        self.faults: list[str] = []
        """What went wrong talking to the board, one sentence each (cleared by :meth:`take_faults`)."""
        self.source = "memory"
        """Where the shared strengths last came from: ``memory``, ``redis``, ``sqlite`` or ``local copy``."""

    # ------------------------------------------------------------------ scopes
    def board_scope(self, message: Message) -> str:
        """The board scope of ``message``: its own scope when it is one of :attr:`scopes`,
        else this agent's private scope."""
        return message.scope if message.scope in self.scopes else self.private

    def scope_of(self, message_id: str) -> str | None:
        """The board scope of an observed message, or ``None``."""
        return self._scope_of.get(message_id)

    def now(self) -> float:
        """The injected clock: seconds since the epoch."""
        return self._clock()

    def take_faults(self) -> list[str]:
        """The faults since the last call, and clear them."""
        out, self.faults = self.faults, []
        return out

    def _apply(self, ops: Sequence[Op]) -> None:
        if not ops:
            return
        try:
            self.board.apply(ops)
        except BoardUnavailableError as exc:  # a bare remote board: its writes are lost for it, kept here
            self.faults.append(f"board {self.board.name!r}: {len(ops)} operation(s) not applied ({exc})")
        except BoardError as exc:  # a refused op (a caller's id with a tab …): only it is lost
            if len(ops) == 1:
                self.faults.append(f"board {self.board.name!r}: 1 operation(s) not applied ({exc})")
                return
            for op in ops:  # one agent's own ops, batched only to save round trips
                self._apply([op])
            return
        take = getattr(self.board, "take_faults", None)
        if callable(take):
            self.faults.extend(take())

    def refresh(self) -> None:
        """Read every shared item this memory holds from the board (one snapshot per scope)."""
        by_scope: dict[str, list[str]] = {}
        for item, scope in self._scope_of.items():
            if not is_private(scope):
                by_scope.setdefault(scope, []).append(item)
        for scope, ids in by_scope.items():
            try:
                snap = self.board.snapshot(scope, ids, agent=self.agent, now=self._clock())
            except BoardError as exc:
                self.faults.append(f"board {self.board.name!r}: {scope!r} not read, using what was read last ({exc})")
                self.source = "local copy"
                continue
            self.source = snap.source
            self.faults.extend(snap.faults)
            self._remote_tick[scope] = snap.tick
            for item, view in snap.cells.items():
                self._remote[item] = view.cell
            active = [v.strength for v in snap.cells.values() if v.active]
            prominence = self.board.config.prominence
            self._cap[scope] = prominence * math.fsum(active) / len(active) if prominence and len(active) > 1 else None
        take = getattr(self.board, "take_faults", None)
        if callable(take):
            self.faults.extend(take())

    def resume_from_board(self) -> None:
        """On the next :meth:`observe`, take the private scope's cells (deposits included)
        from the board: a restarted agent resumes with its strengths."""
        self._resume = True

    # ------------------------------------------------------------------ writes
    def observe(self, messages: Sequence[Message]) -> None:
        """:meth:`PheromoneField.observe`, mirrored to the board (Add, Reinforce, Advance)."""
        start, start_tick, every = self._observed, self.tick, self.config.tick_every
        super().observe(messages)
        now = self._clock()
        ops: list[Op] = []
        tick = start_tick
        for n, message in enumerate(messages[start:], start):
            # the private scope ticks where the field ticked, between the same two messages,
            # so each item is born and reinforced at the field's tick (a restart resumes exactly)
            at_tick = start_tick + n // every - start // every
            if at_tick != tick:
                tick = at_tick
                ops.append(Advance(self.private, self.agent, to=tick))
            scope = self.board_scope(message)
            self._scope_of[message.id] = scope
            if is_private(scope) or (message.producer or self.agent) == self.agent:
                kind = pheromone_kind(message.msg_type.value, message.role, message.text)
                ops.append(Add(scope, message.id, kind, self.agent, at=now))
            for ref in message.references:
                ref_scope = self._scope_of.get(ref)
                if ref_scope is not None:
                    ops.append(Reinforce(ref_scope, ref, self.agent, source=message.id, at=now))
        if messages[start:]:
            ops.append(Advance(self.private, self.agent, to=self.tick))
        self._apply(ops)
        if self._resume:
            self._resume = False
            self._load_private()
        self.refresh()

    def _load_private(self) -> None:
        try:
            snap = self.board.snapshot(self.private, None, agent=self.agent)
        except BoardError as exc:
            self.faults.append(f"board {self.board.name!r}: could not resume {self.private!r} ({exc})")
            return
        for item, view in snap.cells.items():
            if item in self._cells:
                self._cells[item] = view.cell.memory
        self.tick = max(self.tick, snap.tick)

    def deposit(self, scores: Mapping[str, int], subtask: str, goal: str | None = None) -> dict[str, float]:
        """:meth:`PheromoneField.deposit`, mirrored to the board (attributed to this agent)."""
        added = super().deposit(scores, subtask, goal)
        now = self._clock()
        # what this agent already deposited for this subtask, the board has (a queued batch
        # included): only the new deposits travel
        ops: list[Op] = [Deposit(self._scope_of[i], i, scores[i], subtask, goal, self.agent, at=now)
                         for i in added if i in self._scope_of]
        if ops:
            self._apply(ops)
            self.refresh()
        return added

    def use(self, ids: Iterable[str], build: int) -> None:
        """This agent put ``ids`` in a context in build ``build``: leases on the shared ones
        (lifetimes) and their ``first_selected`` provenance."""
        now = self._clock()
        self._apply([Use(self._scope_of[i], i, self.agent, build, at=now) for i in ids
                     if i in self._scope_of and not is_private(self._scope_of[i])])

    # ------------------------------------------------------------------ reads
    def _shared(self, message_id: str) -> tuple[BoardCell, int, str] | None:
        cell = self._remote.get(message_id)
        if cell is None:
            return None
        scope = self._scope_of[message_id]
        return cell, self._remote_tick.get(scope, 0), scope

    def _capped(self, value: float, scope: str) -> float:
        cap = self._cap.get(scope)
        return value if cap is None else min(value, cap)

    def board_cell(self, message_id: str) -> BoardCell | None:
        """The shared item's cell as last read from the board (provenance), or ``None``."""
        return self._remote.get(message_id)

    def active(self, message_id: str) -> bool:
        """Whether a shared item is active on the board (not archived, forgotten,
        superseded or past its scope's TTL); private items always are."""
        got = self._shared(message_id)
        if got is None:
            return True
        cell, tick, scope = got
        if cell.status != "active":
            return False
        ttl = self.board.config.ttl_seconds.get(scope)
        if ttl is None:
            return True
        leased = any(tick - t <= self.board.config.lease_ticks for t in cell.users.values())
        return leased or self._clock() - cell.touched_at <= ttl

    def strength(self, message_id: str) -> float:
        """Shared items: the board's strength (capped); private ones: the local field's."""
        got = self._shared(message_id)
        if got is None:
            return super().strength(message_id)
        cell, tick, scope = got
        return self._capped(pm.settled_strength(cell.memory, tick, self.config), scope)

    def strength_for(self, message_id: str, goal: str | None, subtask: str | None = None) -> float:
        """:meth:`PheromoneField.strength_for`; shared items read from the board."""
        got = self._shared(message_id)
        if got is None:
            return super().strength_for(message_id, goal, subtask)
        cell, tick, scope = got
        return self._capped(pm.task_strength(cell.memory, tick, self.config, task_key(goal), task_key(subtask)), scope)

    def memory_for(self, message_id: str, goal: str | None, subtask: str | None = None) -> float:
        """:meth:`PheromoneField.memory_for`; shared items read from the board (every agent's
        deposits for this task count, within the scope's cap)."""
        got = self._shared(message_id)
        if got is None:
            return super().memory_for(message_id, goal, subtask)
        cell, tick, scope = got
        return self._capped(pm.task_memory(cell.memory, tick, self.config, task_key(goal), task_key(subtask)), scope)

    def score_before(self, message_id: str, goal: str | None, subtask: str) -> int | None:
        """:meth:`PheromoneField.score_before`; shared items read from the board."""
        got = self._shared(message_id)
        if got is None:
            return super().score_before(message_id, goal, subtask)
        return pm.score_before(got[0].memory, task_key(goal), task_key(subtask) or "")

    def forgotten_for(self, message_id: str, goal: str | None, subtask: str) -> bool:
        """:meth:`PheromoneField.forgotten_for`; a shared item no longer active on the board
        (archived, forgotten, superseded, expired) counts as forgotten: archived without
        re-scoring."""
        got = self._shared(message_id)
        if got is None:
            return super().forgotten_for(message_id, goal, subtask)
        if not self.active(message_id):
            return True
        cell, tick, _ = got
        return pm.forgotten_for(cell.memory, tick, self.config, task_key(goal), task_key(subtask) or "")

    def latest_score(self, message_id: str) -> int | None:
        """The newest score from any agent for a shared item; the local one otherwise."""
        got = self._shared(message_id)
        return got[0].memory.latest_score if got is not None else super().latest_score(message_id)

    def provenance(self, ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        """Per shared item of ``ids``: producer, scope, status, who deposited and reinforced
        it (contributions, counts), who uses it, which build of which agent first selected
        it, and its newest events — read from the board with ``provenance=True``."""
        by_scope: dict[str, list[str]] = {}
        for item in ids:
            scope = self._scope_of.get(item)
            if scope is not None and not is_private(scope):
                by_scope.setdefault(scope, []).append(item)
        out: dict[str, dict[str, Any]] = {}
        for scope, items in by_scope.items():
            try:
                cells = {i: v.cell for i, v in self.board.snapshot(scope, items, agent=self.agent,
                                                                   provenance=True).cells.items()}
            except BoardError as exc:
                self.faults.append(f"board {self.board.name!r}: provenance of {scope!r} not read ({exc})")
                cells = {i: self._remote[i] for i in items if i in self._remote}
            for item, cell in cells.items():
                out[item] = {
                    "scope": scope, "producer": cell.producer, "status": cell.status,
                    "superseded_by": cell.superseded_by,
                    "contributions": {a: round(v, 4) for a, v in sorted(cell.contributions.items())},
                    "deposits": cell.deposits, "reinforcements": cell.reinforcements,
                    "users": dict(sorted(cell.users.items())),
                    "first_selected": list(cell.first_selected) if cell.first_selected else None,
                    "events": [[e.agent, e.op, e.tick, round(e.amount, 4), e.at] for e in cell.events],
                }
        return out

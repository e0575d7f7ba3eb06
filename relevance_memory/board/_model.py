"""Board data: the config, the operations, the stored cells and the snapshot view (SPEC §10).

All values here are immutable. :func:`encode_cell` / :func:`decode_cell` give a cell's
portable form, one JSON object per item with floats as exact decimal strings (the SQLite
board stores it); the Redis board stores a MessagePack array instead (``_packed``), which
its Lua script works on without decimal text.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .._config import PHEROMONE_KINDS, PheromoneConfig
from .._exceptions import ScopeError
from .._positional import positional
from ..pheromone._math import Cell

__all__ = [
    "Add",
    "Advance",
    "Archive",
    "BatchResult",
    "BoardCell",
    "BoardConfig",
    "CellView",
    "Deposit",
    "Event",
    "Forget",
    "LogEntry",
    "Op",
    "Reinforce",
    "Repair",
    "Restore",
    "Snapshot",
    "Supersede",
    "Use",
    "check_access",
    "decode_cell",
    "encode_cell",
    "is_private",
    "private_scope",
    "task_key",
]

Status = Literal["active", "archived", "forgotten", "superseded"]

_SCOPE_RE = re.compile(r"^[A-Za-z0-9_.-]+(?::[A-Za-z0-9_.-]+)?$")
_AGENT_RE = re.compile(r"^[A-Za-z0-9_.-]+$")


def private_scope(agent: str) -> str:
    """The private scope of ``agent``: ``"private:<agent>"``.

    Raises:
        ScopeError: the agent name is not ``[A-Za-z0-9_.-]+``.
    """
    if not _AGENT_RE.match(agent):
        raise ScopeError(f"agent name {agent!r} must match [A-Za-z0-9_.-]+")
    return f"private:{agent}"


def is_private(scope: str) -> bool:
    """Whether ``scope`` is some agent's private scope (no share caps apply there)."""
    return scope.startswith("private:")


def check_access(scope: str, agent: str) -> None:
    """Raise :class:`ScopeError` unless ``agent`` may read and write ``scope``.

    Every agent may use every non-private scope (``shared``, ``global``, a team scope
    such as ``tech``); ``private:<a>`` belongs to agent ``a`` alone (seed 004 §3.3,
    seed 000 §5.3: private workspaces, a shared blackboard). Allowed pairs are remembered
    (a batch checks every op's pair).
    """
    if (scope, agent) in _ALLOWED:
        return
    _check_access(scope, agent)
    if len(_ALLOWED) < 4096:
        _ALLOWED.add((scope, agent))


_ALLOWED: set[tuple[str, str]] = set()


def _check_access(scope: str, agent: str) -> None:
    if not _SCOPE_RE.match(scope):
        raise ScopeError(f"scope {scope!r} must be a name [A-Za-z0-9_.-]+, optionally ':<agent>'")
    if not _AGENT_RE.match(agent):
        raise ScopeError(f"agent name {agent!r} must match [A-Za-z0-9_.-]+")
    if is_private(scope) and scope != f"private:{agent}":
        raise ScopeError(f"agent {agent!r} may not use {scope!r}: a private scope belongs to its agent alone")


@functools.lru_cache(maxsize=1024)
def task_key(text: str | None) -> str | None:
    """The stored key of a final goal or subtask text (a 24-hex BLAKE2b digest; ``None`` stays ``None``).

    Cells compare goals and subtasks only for equality, so they store digests: a long
    final goal is not repeated in every one of 100k cells.
    """
    if text is None:
        return None
    return hashlib.blake2b(text.encode("utf-8"), digest_size=12).hexdigest()


class BoardConfig(BaseModel):
    """Parameters of a memory board, validated (SPEC §5, §10).

    Attributes:
        pheromone: the SPEC §5 formula's parameters (shared with the single-agent field).
        agent_share: in a non-private scope, the most one agent may add to one item by
            deposits and reinforcement, as a fraction of ``s_max`` (default 0.5 → 5.0
            strength units): one agent alone cannot push an item to the cap, so the
            board's consensus needs a second agent (lock-in avoidance, seed 000 §6.1/§6.3).
            ``None`` turns the cap off.
        prominence: per-item share cap on reads: in a snapshot, no active item's
            ``shared_strength`` exceeds this many times the mean strength of the active
            items read (seed 000 §6.1 ``max_prominence`` = 5× the mean). ``None`` = off.
        lease_ticks: an agent's use of an item holds it for this many of the scope's
            ticks: forget/archive by another agent and TTL expiry are refused meanwhile.
        ttl_seconds: scope → seconds an item may go untouched (no deposit, reinforcement
            or use) before a snapshot reports it expired (never while leased; the cell
            stays stored — nothing is deleted). Seed 004 §6.1 ``context_ttl``.
        events_kept: provenance events kept per item (newest last).
        batch_ttl_seconds: how long a server remembers an applied batch id, so a retried
            batch is applied exactly once.
        log_tick_every: in a non-private scope, every this many entries appended to the
            scope's log advance its tick by one (the shared board's clock is the shared
            conversation, like a single agent's is its message count, SPEC §5
            ``tick_every``, default 5); ``None`` = only explicit :class:`Advance` operations.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    pheromone: PheromoneConfig = Field(default_factory=PheromoneConfig)
    agent_share: float | None = Field(default=0.5, gt=0, le=1)
    prominence: float | None = Field(default=5.0, gt=1)
    lease_ticks: int = Field(default=20, ge=0)
    ttl_seconds: dict[str, float] = Field(default_factory=dict)
    events_kept: int = Field(default=16, ge=0, le=1000)
    batch_ttl_seconds: int = Field(default=86_400, ge=1)
    log_tick_every: int | None = Field(default=5, ge=1)

    @model_validator(mode="after")
    def _check(self) -> BoardConfig:
        for scope, ttl in self.ttl_seconds.items():
            if not _SCOPE_RE.match(scope) or not ttl > 0:
                raise ValueError(f"ttl_seconds needs scope names and positive seconds, got {scope!r}: {ttl}")
        return self

    def share_cap(self, scope: str) -> float | None:
        """The per-agent, per-item contribution cap in ``scope`` (strength units), or ``None``."""
        if self.agent_share is None or is_private(scope):
            return None
        return self.agent_share * self.pheromone.s_max


# --------------------------------------------------------------------------- operations
@dataclass(frozen=True, slots=True)
class Add:
    """A new item (message) on the board at the scope's current tick; a no-op if it exists.

    ``strength`` defaults to the kind's initial strength (SPEC §5). ``at``: the caller's
    clock, seconds since the epoch (provenance and TTL)."""

    scope: str
    id: str
    kind: str
    agent: str
    at: float = 0.0
    strength: float | None = None


@dataclass(frozen=True, slots=True)
class Deposit:
    """A deposit from a relevance score, once per (item, final goal, subtask) (SPEC §5)."""

    scope: str
    id: str
    score: int
    subtask: str
    goal: str | None
    agent: str
    at: float = 0.0


@dataclass(frozen=True, slots=True)
class Reinforce:
    """Reinforcement on use (SPEC §5): ``delta`` (default ``reinforce_delta``) through the soft
    cap; ``source`` (the later item that referenced it) gains an edge of ``edge_delta``. With
    a ``source``, once per (item, source) — a message references an earlier one once, so a
    replayed history does not reinforce twice (outcome ``"already"``)."""

    scope: str
    id: str
    agent: str
    source: str | None = None
    delta: float | None = None
    at: float = 0.0


@dataclass(frozen=True, slots=True)
class Advance:
    """``ticks`` evaporation ticks of ``scope`` (settled lazily, in closed form, per cell);
    with ``to``, the tick becomes ``max(tick, to)`` instead (idempotent: an agent mirroring
    its own field's clock onto its private scope)."""

    scope: str
    agent: str
    ticks: int = 1
    to: int | None = None


@dataclass(frozen=True, slots=True)
class Use:
    """``agent`` put the item in a context in its build ``build``: a lease (lifetimes) and, the
    first time anyone does, the item's ``first_selected`` provenance."""

    scope: str
    id: str
    agent: str
    build: int
    at: float = 0.0


@dataclass(frozen=True, slots=True)
class Forget:
    """Mark an active item forgotten (kept stored, out of every snapshot's active set).
    Refused while another agent holds a lease on it."""

    scope: str
    id: str
    agent: str
    reason: str = ""
    at: float = 0.0


@dataclass(frozen=True, slots=True)
class Archive:
    """Mark an active item archived (restorable). Refused while another agent holds a lease."""

    scope: str
    id: str
    agent: str
    reason: str = ""
    at: float = 0.0


@dataclass(frozen=True, slots=True)
class Supersede:
    """``by`` replaces the active item ``id`` (a changed fact; SPEC §10 ``superseded_by``).
    Of two concurrent supersedes of one item exactly one wins; the other is refused."""

    scope: str
    id: str
    by: str
    agent: str
    at: float = 0.0


@dataclass(frozen=True, slots=True)
class Restore:
    """Make an archived, forgotten or superseded item active again."""

    scope: str
    id: str
    agent: str
    at: float = 0.0


@dataclass(frozen=True, slots=True)
class Repair:
    """Overwrite a stored cell that no longer decodes with ``cell`` (a local copy's); a
    no-op when the stored cell is readable (someone else repaired or rewrote it)."""

    scope: str
    id: str
    cell: BoardCell
    agent: str


Op: TypeAlias = Add | Deposit | Reinforce | Advance | Use | Forget | Archive | Supersede | Restore | Repair
"""One board operation. A batch (a sequence of them) is applied atomically."""


@dataclass(frozen=True, slots=True)
class BatchResult:
    """What a batch did, one outcome per operation in order.

    Outcomes: ``"added"``, ``"exists"``, ``"deposited"``, ``"already"`` (this subtask had
    deposited), ``"reinforced"``, ``"advanced"``, ``"used"``, ``"forgotten"``,
    ``"archived"``, ``"superseded"``, ``"restored"``, ``"repaired"``, ``"missing"`` (no such
    item), ``"corrupt"`` (the stored cell does not decode; the op was skipped),
    ``"in_use:<agent>"`` (a lease refused forget/archive), ``"conflict:<status>"`` (the item
    was no longer active/the op lost a race), ``"readable"`` (repair not needed).

    Attributes:
        batch_id: the batch's id (a retried batch with the same id is applied once).
        outcomes: one per operation.
        amounts: per operation the strength actually added (0.0 for non-additive ops).
        duplicate: the server had already applied this batch id; nothing changed.
    """

    batch_id: str
    outcomes: tuple[str, ...]
    amounts: tuple[float, ...]
    duplicate: bool = False


# --------------------------------------------------------------------------- cells
class Event(NamedTuple):
    """One provenance event of an item: who did what, at which tick and time (seed 004 §4.1).

    ``op`` is ``add``, ``deposit:<score>``, ``reinforce``, ``use:<build>``, ``archived``,
    ``forgotten``, ``superseded:<by>`` or ``restored``; ``amount`` the strength added;
    ``at`` the caller's clock (seconds)."""

    agent: str
    op: str
    tick: int
    amount: float
    at: float


@dataclass(frozen=True, slots=True)
class BoardCell:
    """One item on a board: its SPEC §5 memory plus provenance and lifecycle.

    Attributes:
        memory: the pheromone :class:`~relevance_memory.pheromone._math.Cell` (goal and
            subtask keys are :func:`task_key` digests).
        producer: the agent that added the item.
        created_at / touched_at: caller-clock seconds of the add and of the latest
            deposit, reinforcement or use (TTL counts from ``touched_at``).
        status: ``active``, ``archived``, ``forgotten`` or ``superseded``.
        superseded_by: the item that replaced it, when superseded.
        status_by: the agent that last changed the status.
        contributions: agent → strength it added by deposits and reinforcement.
        deposits / reinforcements: how many effective deposits and reinforcements.
        users: agent → the scope tick of its latest use (its lease).
        first_selected: ``(agent, build)`` of the first use, or ``None``.
        events: the newest ``events_kept`` provenance events.
    """

    memory: Cell
    producer: str
    created_at: float = 0.0
    touched_at: float = 0.0
    status: Status = "active"
    superseded_by: str | None = None
    status_by: str | None = None
    contributions: Mapping[str, float] = field(default_factory=dict)
    deposits: int = 0
    reinforcements: int = 0
    users: Mapping[str, int] = field(default_factory=dict)
    first_selected: tuple[str, int] | None = None
    events: tuple[Event, ...] = ()


def _f(x: float) -> str:
    return repr(float(x))


def encode_cell(cell: BoardCell) -> str:
    """The stored JSON of a cell (floats as exact decimal strings; ``None`` fields omitted)."""
    m = cell.memory
    out: dict[str, Any] = {
        "kind": m.kind, "born": m.born_tick, "s": _f(m.strength), "at": m.at_tick,
        "earned": _f(m.earned), "ldep": _f(m.last_deposit), "subs": sorted(m.subtasks),
        "producer": cell.producer, "created": _f(cell.created_at), "touched": _f(cell.touched_at),
        "status": cell.status, "contrib": {a: _f(v) for a, v in sorted(cell.contributions.items())},
        "n_dep": cell.deposits, "n_rf": cell.reinforcements, "users": dict(sorted(cell.users.items())),
        "events": [[e.agent, e.op, e.tick, _f(e.amount), _f(e.at)] for e in cell.events],
    }
    if m.latest_score is not None:
        out["score"] = m.latest_score
    if m.latest_goal is not None:
        out["goal"] = m.latest_goal
    if m.last_key is not None:
        out["lkey"] = list(m.last_key)
    if m.score_key is not None:
        out["skey"] = list(m.score_key)
    if m.previous_score is not None:
        out["prev"] = m.previous_score
    if cell.superseded_by is not None:
        out["sup_by"] = cell.superseded_by
    if cell.status_by is not None:
        out["status_by"] = cell.status_by
    if cell.first_selected is not None:
        out["first"] = list(cell.first_selected)
    return json.dumps(out, ensure_ascii=False, separators=(",", ":"))


def _seq(value: Any) -> list[Any]:
    # Lua's cjson writes an empty array as {}
    if value == {} or value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"expected a list, got {type(value).__name__}")
    return value


def _map(value: Any) -> dict[str, Any]:
    if value == [] or value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"expected an object, got {type(value).__name__}")
    return value


def _num(value: Any) -> float:
    out = float(value)
    if not math.isfinite(out):
        raise ValueError(f"non-finite number {value!r}")
    return out


def _key(value: Any) -> tuple[str, str] | None:
    if value is None:
        return None
    a, b = _seq(value)
    return (str(a), str(b))


def decode_cell(raw: str | bytes, *, events: bool = True) -> BoardCell:
    """Parse a stored cell (its provenance events only with ``events``).

    Raises:
        ValueError: the text is not a cell (bad JSON, a missing or mistyped field, an
            unknown kind or status, a non-finite number) — a *corrupt* cell.
    """
    try:
        d = json.loads(raw)
        if not isinstance(d, dict):
            raise ValueError("not an object")
        kind = str(d["kind"])
        if kind not in PHEROMONE_KINDS:
            raise ValueError(f"unknown kind {kind!r}")
        status = str(d.get("status", "active"))
        if status not in ("active", "archived", "forgotten", "superseded"):
            raise ValueError(f"unknown status {status!r}")
        score = d.get("score")
        prev = d.get("prev")
        memory = Cell(
            kind=kind, born_tick=int(d["born"]), strength=_num(d["s"]), at_tick=int(d["at"]),
            latest_score=None if score is None else int(score), latest_goal=d.get("goal"),
            earned=_num(d.get("earned", 0.0)), last_key=_key(d.get("lkey")), last_deposit=_num(d.get("ldep", 0.0)),
            subtasks=frozenset(str(s) for s in _seq(d.get("subs"))), score_key=_key(d.get("skey")),
            previous_score=None if prev is None else int(prev),
        )
        first = d.get("first")
        return BoardCell(
            memory=memory, producer=str(d["producer"]), created_at=_num(d.get("created", 0.0)),
            touched_at=_num(d.get("touched", 0.0)), status=status,  # type: ignore[arg-type]
            superseded_by=d.get("sup_by"), status_by=d.get("status_by"),
            contributions={str(a): float(v) for a, v in _map(d.get("contrib")).items()},
            deposits=int(d.get("n_dep", 0)), reinforcements=int(d.get("n_rf", 0)),
            users={str(a): int(t) for a, t in _map(d.get("users")).items()},
            first_selected=None if first is None else (str(_seq(first)[0]), int(_seq(first)[1])),
            events=tuple(Event(a, o, int(t), float(x), float(w)) for a, o, t, x, w in _seq(d.get("events")))
            if events else (),
        )
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise ValueError(f"corrupt cell: {exc}") from exc


# --------------------------------------------------------------------------- views
@dataclass(frozen=True, slots=True)
class CellView:
    """An item as one snapshot sees it: evaporation up to the scope's tick computed in.

    Attributes:
        id: the item id.
        kind: its pheromone kind.
        strength: S at the snapshot's tick (strength units).
        task_strength: strength as memory for the snapshot's ``(goal, subtask)``
            (:func:`~relevance_memory.pheromone._math.task_strength`).
        shared_strength: ``task_strength`` after the per-item prominence cap
            (:attr:`BoardConfig.prominence`); what a reader should rank by.
        score_before: the latest score from before the snapshot's subtask, or ``None``.
        forgotten: SPEC §5 forgetting as seen for the snapshot's ``(goal, subtask)``.
        carried: strength ≥ ``carry_threshold``.
        latest_score: the newest score, or ``None``.
        expired: untouched longer than the scope's TTL and leased by nobody.
        in_use_by: agents whose lease on the item is running.
        cell: the stored cell (provenance: producer, contributions, users, events …).
    """

    id: str
    kind: str
    strength: float
    task_strength: float
    shared_strength: float
    score_before: int | None
    forgotten: bool
    carried: bool
    latest_score: int | None
    expired: bool
    in_use_by: tuple[str, ...]
    cell: BoardCell

    @property
    def status(self) -> Status:
        """The item's lifecycle status."""
        return self.cell.status

    @property
    def active(self) -> bool:
        """Active and not expired: part of what a reader should use."""
        return self.cell.status == "active" and not self.expired


new_board_cell: Callable[..., BoardCell] = positional(BoardCell)
"""``BoardCell(memory, producer, created_at, …, events)`` with every field given, positionally, faster."""
new_cell_view: Callable[..., CellView] = positional(CellView)
"""``CellView(id, kind, …, cell)`` with every field given, positionally, faster."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A pure read of one scope: cells for the ids asked, settled to the scope's tick.

    Attributes:
        scope: the scope read.
        tick: the scope's tick at the read.
        cells: id → :class:`CellView` for every id found (and decodable).
        missing: ids asked for that the board does not hold.
        corrupt: ids whose stored cell does not decode (treated as missing).
        source: ``"memory"``, ``"redis"``, ``"sqlite"`` or ``"local copy"`` (a mirrored
            board that could not reach its server).
        faults: what went wrong while reading, one sentence each (for the decision record).
    """

    scope: str
    tick: int
    cells: Mapping[str, CellView]
    missing: tuple[str, ...] = ()
    corrupt: tuple[str, ...] = ()
    source: str = "memory"
    faults: tuple[str, ...] = ()

    def strengths(self) -> dict[str, float]:
        """id → ``shared_strength`` of every active item."""
        return {i: v.shared_strength for i, v in self.cells.items() if v.active}


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One message on a scope's shared log (a Redis stream entry).

    Attributes:
        cursor: the entry's position; read again with ``since=cursor`` for what follows.
        fields: the entry (str → str; a message's JSON, its producer …).
    """

    cursor: str
    fields: Mapping[str, str]

"""The SPEC §5 pheromone formula, in one place, as pure functions over immutable cells.

Every holder of strengths — the single-agent :class:`~relevance_memory.PheromoneField`,
the in-memory board and the Redis board (whose Lua script mirrors these functions line by
line; the board contract tests prove the two agree bit for bit) — computes with these.
Nothing here reads a clock, does I/O or mutates its arguments: each function takes a
:class:`Cell` (one message's memory) and the current *tick* and returns a value or a new
cell.

Formulas (SPEC §5; seed articles 000, 003 in ``shared/seeds``):

- evaporation per tick: ``S ← S·(1 − η_kind)`` for a cell that is neither protected
  (younger than ``protect_ticks`` ticks) nor exempt (latest score ≥ ``exempt_score``),
  ``η = 1 − 0.5^(tick_every / half_life)``. Settled lazily in closed form: ``k`` ticks at
  once multiply by ``(1 − η)^k`` (:func:`settle`), so a tick costs O(1), not O(cells);
- deposit, once per (message, final goal, subtask): ``S ← S + Δ(score)·max(0, 1 − S/S_max)``
  (soft cap, seed 000 §6.1), :func:`deposit`;
- reinforcement on use: ``S ← S + reinforce_delta·max(0, 1 − S/S_max)``, :func:`reinforce`;
- carry-over: strength ≥ ``carry_threshold`` joins ``working`` (:func:`carried`);
- forgetting: score ≤ 2 and strength < ``forget_threshold`` → archive without
  re-scoring (:func:`forgotten`, :func:`forgotten_for`).

Memory is scoped to the final goal it was earned under: a cell remembers the part of its
strength deposited under its latest goal (``earned``, evaporating with it) and the latest
deposit (``last_deposit``), so a build for another task sees only the base strength, and a
rebuild of the same subtask sees what the build that deposited saw (:func:`task_strength`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from .._config import PheromoneConfig

__all__ = [
    "Cell",
    "Reading",
    "capped_deposit",
    "carried",
    "deposit",
    "evaporate",
    "evaporating_ticks",
    "forgotten",
    "forgotten_for",
    "new_cell",
    "rate_of",
    "reinforce",
    "score_before",
    "settle",
    "settled_strength",
    "task_memory",
    "task_strength",
]


class Cell(NamedTuple):
    """One message's pheromone memory (immutable; the functions below return new cells).

    A named tuple: building and replacing one is cheap (a build settles thousands).

    Attributes:
        kind: the pheromone kind (picks the half-life and the initial strength).
        born_tick: the tick the message arrived at (protection counts from it).
        strength: S as of ``at_tick`` (strength units, 0 ≤ S ≤ S_max once capped).
        at_tick: the tick ``strength`` was last settled to.
        latest_score: the newest score deposited (1–5), or ``None``.
        latest_goal: the final goal of the newest deposit, or ``None``.
        earned: the part of ``strength`` deposited under ``latest_goal`` (evaporates with it).
        last_key: ``(final goal, subtask)`` of the newest effective deposit.
        last_deposit: that deposit (strength units), evaporated like ``strength``.
        subtasks: subtasks of ``latest_goal`` already deposited for (once per subtask).
        score_key: ``(final goal, subtask)`` of ``latest_score``.
        previous_score: the latest score under the goal's previous subtask.
    """

    kind: str
    born_tick: int
    strength: float
    at_tick: int
    latest_score: int | None = None
    latest_goal: str | None = None
    earned: float = 0.0
    last_key: tuple[str, str] | None = None
    last_deposit: float = 0.0
    subtasks: frozenset[str] = frozenset()
    score_key: tuple[str, str] | None = None
    previous_score: int | None = None


_RATES: dict[int, tuple[PheromoneConfig, dict[str, float]]] = {}


def _rates(config: PheromoneConfig) -> dict[str, float]:
    """kind → ``config.rate(kind)``, computed once per config."""
    got = _RATES.get(id(config))
    if got is None or got[0] is not config:
        if len(_RATES) > 64:
            _RATES.clear()
        got = _RATES[id(config)] = (config, {k: config.rate(k) for k in config.half_life_steps})
    return got[1]


def rate_of(config: PheromoneConfig, kind: str) -> float:
    """``config.rate(kind)`` (η per tick, SPEC §5), computed once per config and kind."""
    return _rates(config)[kind]


def capped_deposit(strength: float, delta: float, s_max: float) -> float:
    """Soft-capped deposit (SPEC §5, seed 000 §6.1): ``Δ·max(0, 1 − S/S_max)`` (strength units)."""
    return delta * max(0.0, 1.0 - strength / s_max)


def evaporate(strength: float, rate: float, deposit: float = 0.0) -> float:
    """One evaporation tick (SPEC §5): ``S·(1 − η) + Δ``, η in [0, 1)."""
    return strength * (1.0 - rate) + deposit


def new_cell(kind: str, tick: int, config: PheromoneConfig, strength: float | None = None) -> Cell:
    """A message arriving at ``tick``: its kind's initial strength (SPEC §5) unless ``strength`` is given.

    Raises:
        KeyError: ``kind`` is not one of :data:`~relevance_memory._config.PHEROMONE_KINDS`.
    """
    return Cell(kind=kind, born_tick=tick, strength=config.initial_strength[kind] if strength is None else strength,
                at_tick=tick)


def evaporating_ticks(cell: Cell, tick: int, config: PheromoneConfig) -> int:
    """How many of the ticks from ``cell.at_tick`` to ``tick`` evaporate the cell (≥ 0).

    A tick evaporates a cell when it falls after the cell's protection
    (``tick > born_tick + protect_ticks``) and the cell's latest score is below
    ``exempt_score`` (importance-gated evaporation, SPEC §5). The score changes only in
    :func:`deposit`, which settles first, so the gate holds for the whole interval.
    """
    if cell.at_tick >= tick:
        return 0
    if cell.latest_score is not None and cell.latest_score >= config.exempt_score:
        return 0
    return max(0, tick - max(cell.at_tick, cell.born_tick + config.protect_ticks))


def settle(cell: Cell, tick: int, config: PheromoneConfig) -> Cell:
    """The cell with the evaporation up to ``tick`` applied in closed form, ``at_tick = tick``.

    Equivalent to ``S ← S·(1 − η)`` once per evaporating tick; ``earned`` and
    ``last_deposit`` evaporate by the same factor ``(1 − η)^k``. Returns ``cell`` itself
    when it is already settled to ``tick`` (or later).
    """
    if cell.at_tick >= tick:
        return cell
    ticks = evaporating_ticks(cell, tick, config)
    if ticks > 0:
        factor = (1.0 - rate_of(config, cell.kind)) ** ticks
        return Cell(cell.kind, cell.born_tick, cell.strength * factor, tick, cell.latest_score, cell.latest_goal,
                    cell.earned * factor, cell.last_key, cell.last_deposit * factor, cell.subtasks, cell.score_key,
                    cell.previous_score)
    return Cell(cell.kind, cell.born_tick, cell.strength, tick, *cell[4:])  # _replace(at_tick=tick), without its Python calls


def settled_strength(cell: Cell, tick: int, config: PheromoneConfig) -> float:
    """S at ``tick`` (:func:`settle`'s strength, without building a cell)."""
    ticks = evaporating_ticks(cell, tick, config)
    if ticks > 0:
        return cell.strength * (1.0 - rate_of(config, cell.kind)) ** ticks
    return cell.strength


def strength_reader(config: PheromoneConfig, tick: int) -> Callable[[Cell], float]:
    """``lambda cell: settled_strength(cell, tick, config)`` with the config's fields and
    rates read once (the same floats, bit for bit: the same expression), for reading many
    cells at one tick (a strength ranking's candidates)."""
    exempt, protect, rates = config.exempt_score, config.protect_ticks, _rates(config)

    def strength(cell: Cell) -> float:
        at = cell.at_tick
        if at >= tick or (cell.latest_score is not None and cell.latest_score >= exempt):
            return cell.strength
        ticks = tick - max(at, cell.born_tick + protect)
        return cell.strength * (1.0 - rates[cell.kind]) ** ticks if ticks > 0 else cell.strength

    return strength


def _factor(cell: Cell, ticks: int, config: PheromoneConfig) -> float:
    """``(1 − η_kind)^ticks``: what ``ticks`` evaporating ticks leave of a strength (1.0 for none)."""
    return (1.0 - rate_of(config, cell.kind)) ** ticks if ticks > 0 else 1.0


def task_strength(cell: Cell, tick: int, config: PheromoneConfig, goal: str | None, subtask: str | None = None) -> float:
    """Strength as memory for the task with final goal ``goal`` (SPEC §5, task-scoped).

    Under another final goal only the base strength counts (initial strength plus
    reinforcement from use, evaporated); with ``subtask``, the deposit made for that very
    ``(goal, subtask)`` is left out too, so what remains is the importance carried in from
    earlier subtasks — and a rebuild after this subtask's deposits orders messages exactly
    as the build that made them.
    """
    ticks = evaporating_ticks(cell, tick, config)
    factor = _factor(cell, ticks, config)
    current = cell.strength * factor if ticks > 0 else cell.strength
    if cell.latest_goal is not None and cell.latest_goal != goal:
        earned = cell.earned * factor if ticks > 0 else cell.earned
        return max(0.0, current - earned)
    if subtask is not None and cell.last_key == (goal or "", subtask):
        last = cell.last_deposit * factor if ticks > 0 else cell.last_deposit
        return max(0.0, current - last)
    return current


def task_memory(cell: Cell, tick: int, config: PheromoneConfig, goal: str | None, subtask: str | None = None) -> float:
    """The part of the strength deposited for the task with final goal ``goal`` by its
    *earlier* subtasks (strength units, evaporated; 0.0 under another final goal).

    This is what orders a tier (the strength band,
    :data:`~relevance_memory.pipeline.order.STRENGTH_BAND`): SPEC §5 memory of what
    earlier subtasks found relevant. The base strength — the kind's initial strength,
    reinforcement from references, evaporation since arrival — is left out: it is a type
    and recency prior the score and the weight already carry, and, used as a band, it put
    weaker matches of a favoured kind ahead of better ones (without it LongMemEval S and
    oracle recall rose 1–3 points at 2k and 4k, LoCoMo was unchanged; BENCHMARKS.md, issue 11).
    Carry-over and forgetting keep reading :func:`task_strength`.
    """
    if cell.latest_goal is None or cell.latest_goal != goal:
        return 0.0
    ticks = evaporating_ticks(cell, tick, config)
    factor = _factor(cell, ticks, config)
    earned = cell.earned
    if subtask is not None and cell.last_key == (goal or "", subtask):
        earned -= cell.last_deposit
    return max(0.0, earned * factor)


def score_before(cell: Cell, goal: str | None, subtask: str) -> int | None:
    """The latest score from *before* the subtask ``(goal, subtask)``, or ``None``.

    A score given for this very subtask (by an earlier build of it) does not count, so a
    rebuild admits and forgets exactly what the build that scored it did.
    """
    if cell.latest_goal is None or cell.latest_goal != goal:
        return None
    return cell.previous_score if cell.score_key == (goal or "", subtask) else cell.latest_score


def forgotten(cell: Cell, tick: int, config: PheromoneConfig) -> bool:
    """Score ≤ 2 and strength below ``forget_threshold``: archive without re-scoring (SPEC §5)."""
    return (
        cell.latest_score is not None
        and cell.latest_score <= 2
        and settled_strength(cell, tick, config) < config.forget_threshold
    )


def forgotten_for(cell: Cell, tick: int, config: PheromoneConfig, goal: str | None, subtask: str) -> bool:
    """Forgetting as seen by a build for ``(goal, subtask)``: scored ≤ 2 by an earlier subtask
    of this task and :func:`task_strength` below ``forget_threshold``."""
    score = score_before(cell, goal, subtask)
    return (
        score is not None
        and score <= 2
        and task_strength(cell, tick, config, goal, subtask) < config.forget_threshold
    )


def carried(cell: Cell, tick: int, config: PheromoneConfig) -> bool:
    """Strength ≥ ``carry_threshold``: carry-over into ``working`` (SPEC §5)."""
    return settled_strength(cell, tick, config) >= config.carry_threshold


class Reading(NamedTuple):
    """What a build reads of one cell at one tick for one ``(goal, subtask)`` (:func:`read`)."""

    strength: float
    task_strength: float
    score_before: int | None
    forgotten: bool


def read(cell: Cell, tick: int, config: PheromoneConfig, goal: str | None, subtask: str | None,
         rate: float | None = None) -> Reading:
    """:func:`settled_strength`, :func:`task_strength`, :func:`score_before` and
    :func:`forgotten_for` in one pass (the same arithmetic, so the same floats);
    ``rate`` is the kind's η when the caller has it at hand."""
    ticks = evaporating_ticks(cell, tick, config)
    if ticks > 0:
        factor = (1.0 - (rate_of(config, cell.kind) if rate is None else rate)) ** ticks
        current = cell.strength * factor
    else:
        factor, current = 1.0, cell.strength
    if cell.latest_goal is not None and cell.latest_goal != goal:
        ts = max(0.0, current - (cell.earned * factor if ticks > 0 else cell.earned))
    elif subtask is not None and cell.last_key == (goal or "", subtask):
        ts = max(0.0, current - (cell.last_deposit * factor if ticks > 0 else cell.last_deposit))
    else:
        ts = current
    before = score_before(cell, goal, subtask or "")
    return Reading(current, ts, before, before is not None and before <= 2 and ts < config.forget_threshold)


def reinforce(
    cell: Cell, tick: int, config: PheromoneConfig, delta: float | None = None, limit: float | None = None
) -> tuple[Cell, float]:
    """Reinforcement on use (SPEC §5): settle, then add ``delta`` (default ``reinforce_delta``)
    through the soft cap, and at most ``limit`` (a share cap, strength units) when given.
    Returns the new cell and the amount actually added."""
    cell = settle(cell, tick, config)
    amount = capped_deposit(cell.strength, config.reinforce_delta if delta is None else delta, config.s_max)
    if limit is not None:
        amount = min(amount, limit)
    return Cell(cell.kind, cell.born_tick, cell.strength + amount, *cell[3:]), amount  # _replace(strength=…)


def deposit(
    cell: Cell, tick: int, config: PheromoneConfig, score: int, subtask: str, goal: str | None,
    limit: float | None = None,
) -> tuple[Cell, float | None]:
    """Deposit from a score, once per (message, final goal, subtask) (SPEC §5).

    Settles first (evaporation so far follows the previous score's gating). A cell last
    scored under another final goal drops what it earned there (back to the base
    strength). The score is recorded even when this subtask was already deposited for.

    Args:
        cell: the message's cell.
        tick: the current tick.
        config: the field's parameters.
        score: the relevance score 1–5.
        subtask: the subtask the score is for.
        goal: the final goal the score is for.
        limit: at most this much is added (a share cap, strength units), when given.

    Returns:
        ``(new cell, effective deposit)``; the deposit is ``None`` when this subtask had
        already deposited (strength units otherwise, possibly 0.0 at the cap).

    Raises:
        KeyError: ``score`` is not 1–5.
    """
    # settle (as :func:`settle` does), without building the intermediate cell
    ticks = evaporating_ticks(cell, tick, config)
    if ticks > 0:
        factor = (1.0 - rate_of(config, cell.kind)) ** ticks
        strength, earned, last_deposit = cell.strength * factor, cell.earned * factor, cell.last_deposit * factor
    else:
        strength, earned, last_deposit = cell.strength, cell.earned, cell.last_deposit
    at_tick = tick if cell.at_tick < tick else cell.at_tick
    last_key, score_key = cell.last_key, cell.score_key
    latest_score, previous_score, subtasks = cell.latest_score, cell.previous_score, cell.subtasks
    if cell.latest_goal is not None and cell.latest_goal != goal:
        # a new final goal starts from the base strength: deposits earned for another
        # task are not this task's memory (reinforcement from use stays)
        strength = max(0.0, strength - earned)
        earned = last_deposit = 0.0
        last_key = score_key = None
        latest_score = previous_score = None
        subtasks = frozenset()
    key = (goal or "", subtask)
    if score_key != key:
        previous_score, score_key = latest_score, key
    if subtask in subtasks:
        return Cell(cell.kind, cell.born_tick, strength, at_tick, score, goal, earned, last_key, last_deposit,
                    subtasks, score_key, previous_score), None
    amount = capped_deposit(strength, config.deposits[score], config.s_max)
    if limit is not None:
        amount = min(amount, limit)
    return Cell(cell.kind, cell.born_tick, strength + amount, at_tick, score, goal, earned + amount, key, amount,
                subtasks | {subtask}, score_key, previous_score), amount

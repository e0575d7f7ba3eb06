"""Pheromone field (SPEC §3 step 5, §5): a strength per message that learns and forgets.

The field is pure data plus arithmetic: callers tell it what happened (a message
arrived at message count ``n``, a message was scored under a subtask) and it updates
strengths; it never reads a clock or does I/O. Time is the *tick*: one tick per
``tick_every`` new messages, derived from the message count the caller passes in.

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

import heapq
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._config import PheromoneConfig
from ._extras import require
from ._io import json_safe
from ._models import Message, MessageType

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


def pheromone_kind(msg_type: str, role: str, text: str) -> str:
    """The kind that picks a message's half-life and initial strength (SPEC §5).

    A user message stating a taste or habit ("I prefer …", "不吃香菜") is a
    ``preference``; otherwise the message type itself.
    """
    if role == "user" and msg_type == MessageType.USER_CHAT.value and _PREFERENCE_RE.search(text):
        return "preference"
    return msg_type


def capped_deposit(strength: float, delta: float, s_max: float) -> float:
    """Soft-capped deposit (SPEC §5): ``Δ·max(0, 1 − S/S_max)`` (strength units)."""
    return delta * max(0.0, 1.0 - strength / s_max)


def evaporate(strength: float, rate: float, deposit: float = 0.0) -> float:
    """One evaporation tick (SPEC §5): ``S·(1 − η) + Δ``, η in [0, 1)."""
    return strength * (1.0 - rate) + deposit


@dataclass
class _Cell:
    kind: str
    born_tick: int
    strength: float  # as of ``at_tick``; evaporation since then is applied lazily
    latest_score: int | None = None
    at_tick: int = 0
    latest_goal: str | None = None  # the final goal of the latest deposit
    earned: float = 0.0  # the part of ``strength`` deposited under ``latest_goal`` (evaporates with it)
    last_key: tuple[str, str] | None = None  # (final goal, subtask) of the latest deposit
    last_deposit: float = 0.0  # that deposit, evaporated like ``strength``
    subtasks: set[str] = field(default_factory=set)  # subtasks of ``latest_goal`` deposited for
    score_key: tuple[str, str] | None = None  # (final goal, subtask) of ``latest_score``
    previous_score: int | None = None  # the latest score under the goal's previous subtask


HISTORY_FULL_MAX = 1_000
"""Up to this many messages the history gets a top-N entry after every tick; beyond it,
one entry per :meth:`PheromoneField.observe` call (ranking every message on every tick
would cost O(messages) per tick, O(messages²) over a run)."""


@dataclass
class PheromoneField:
    """Strength per message id, with edges and a per-tick history (SPEC §5).

    Args:
        config: the :class:`PheromoneConfig`.

    Attributes:
        tick: ticks elapsed (one per ``tick_every`` observed messages).
        edges: (earlier id, later id) → edge strength (accumulates ``edge_delta`` per
            reference; edges do not evaporate — they record use, the nodes carry the decay).
        history: per tick ``{"tick", "messages", "top": {id: strength}}``, the
            ``history_top_n`` strongest messages after that tick.
    """

    config: PheromoneConfig = field(default_factory=PheromoneConfig)
    tick: int = 0
    edges: dict[tuple[str, str], float] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    _cells: dict[str, _Cell] = field(default_factory=dict)
    _observed: int = 0

    # ----------------------------------------------------------------- queries
    def __contains__(self, message_id: object) -> bool:
        return message_id in self._cells

    def __len__(self) -> int:
        return len(self._cells)

    @property
    def observed(self) -> int:
        """How many messages the field has seen (the caller's message count)."""
        return self._observed

    def _settle(self, cell: _Cell) -> float:
        """Apply the evaporation ticks since ``cell.at_tick`` in closed form and return S.

        Equivalent to running ``S ← S·(1 − η)`` once per tick: the ticks that evaporate a
        cell are those after its protection (``tick > born_tick + protect_ticks``) while
        its latest score is below ``exempt_score``; the score only changes in
        :meth:`deposit`, which settles the cell first. O(1) per call.
        """
        now = self.tick
        if cell.at_tick < now:
            cfg = self.config
            if cell.latest_score is None or cell.latest_score < cfg.exempt_score:
                ticks = now - max(cell.at_tick, cell.born_tick + cfg.protect_ticks)
                if ticks > 0:
                    factor = (1.0 - cfg.rate(cell.kind)) ** ticks
                    cell.strength *= factor
                    cell.earned *= factor
                    cell.last_deposit *= factor
            cell.at_tick = now
        return cell.strength

    def strength(self, message_id: str) -> float:
        """Current strength of ``message_id``; 0.0 for an unknown id."""
        cell = self._cells.get(message_id)
        return self._settle(cell) if cell else 0.0

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
        if cell is None:
            return 0.0
        current = self._settle(cell)
        if cell.latest_goal is not None and cell.latest_goal != goal:
            return max(0.0, current - cell.earned)
        if subtask is not None and cell.last_key == (goal or "", subtask):
            return max(0.0, current - cell.last_deposit)
        return current

    def score_before(self, message_id: str, goal: str | None, subtask: str) -> int | None:
        """The message's latest score from *before* the subtask ``(goal, subtask)``, or ``None``.

        What earlier subtasks of the same task said about it — the memory that the
        prefilter's "high-strength messages always pass" and forgetting read. A score
        given for this very subtask (by an earlier build of it) does not count, so a
        rebuild admits and forgets exactly what the build that scored it did.
        """
        cell = self._cells.get(message_id)
        if cell is None or cell.latest_goal is None or cell.latest_goal != goal:
            return None
        return cell.previous_score if cell.score_key == (goal or "", subtask) else cell.latest_score

    def forgotten_for(self, message_id: str, goal: str | None, subtask: str) -> bool:
        """SPEC §5 forgetting as seen by a build for ``(goal, subtask)``: scored ≤ 2 by an
        earlier subtask of this task and strength (:meth:`strength_for`) below
        ``forget_threshold`` — archive without re-scoring."""
        score = self.score_before(message_id, goal, subtask)
        return (
            score is not None
            and score <= 2
            and self.strength_for(message_id, goal, subtask) < self.config.forget_threshold
        )

    def strengths(self) -> dict[str, float]:
        """Every message id → strength (a copy)."""
        return {mid: self._settle(cell) for mid, cell in self._cells.items()}

    def latest_score(self, message_id: str) -> int | None:
        """The newest score deposited for ``message_id`` under any subtask, or ``None``."""
        cell = self._cells.get(message_id)
        return cell.latest_score if cell else None

    def forgotten(self, message_id: str) -> bool:
        """Score ≤ 2 and strength below ``forget_threshold``: archive without re-scoring (SPEC §5)."""
        cell = self._cells.get(message_id)
        return (
            cell is not None
            and cell.latest_score is not None
            and cell.latest_score <= 2
            and self._settle(cell) < self.config.forget_threshold
        )

    def carried(self, message_id: str) -> bool:
        """Strength ≥ ``carry_threshold`` (carry-over into ``working``, SPEC §5)."""
        return self.strength(message_id) >= self.config.carry_threshold

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
            self._add(message.id, pheromone_kind(message.msg_type.value, message.role, message.text), message.references)
            self._observed += 1
            if self._observed % self.config.tick_every == 0:
                self.advance()
        if self.tick > start_tick and len(self._cells) > HISTORY_FULL_MAX:
            self._record_history()

    def _add(self, message_id: str, kind: str, references: Iterable[str]) -> None:
        cfg = self.config
        self._cells[message_id] = _Cell(
            kind=kind, born_tick=self.tick, strength=cfg.initial_strength[kind], at_tick=self.tick
        )
        for ref in references:
            cell = self._cells.get(ref)
            if cell is None:
                continue
            current = self._settle(cell)
            cell.strength = current + capped_deposit(current, cfg.reinforce_delta, cfg.s_max)
            edge = (ref, message_id)
            self.edges[edge] = self.edges.get(edge, 0.0) + cfg.edge_delta

    def goal_of(self, message_id: str) -> str | None:
        """The final goal under which ``message_id`` was last scored, or ``None``."""
        cell = self._cells.get(message_id)
        return cell.latest_goal if cell else None

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
        cfg = self.config
        added: dict[str, float] = {}
        for message_id, score in scores.items():
            cell = self._cells.get(message_id)
            if cell is None:
                continue
            self._settle(cell)  # evaporation so far follows the previous score's gating
            if cell.latest_goal is not None and cell.latest_goal != goal:
                # a new final goal starts from the base strength: deposits earned for
                # another task are not this task's memory (reinforcement from use stays)
                cell.strength = max(0.0, cell.strength - cell.earned)
                cell.earned = cell.last_deposit = 0.0
                cell.last_key = cell.score_key = None
                cell.latest_score = cell.previous_score = None
                cell.subtasks.clear()
            key = (goal or "", subtask)
            if cell.score_key != key:
                cell.previous_score, cell.score_key = cell.latest_score, key
            cell.latest_score = score
            cell.latest_goal = goal
            if subtask in cell.subtasks:
                continue
            cell.subtasks.add(subtask)
            amount = capped_deposit(cell.strength, cfg.deposits[score], cfg.s_max)
            cell.strength += amount
            cell.earned += amount
            cell.last_key, cell.last_deposit = (goal or "", subtask), amount
            added[message_id] = amount
        return added

    def advance(self, ticks: int = 1) -> None:
        """Run ``ticks`` evaporation ticks (importance-gated, cold-start protected).

        Evaporation itself is applied lazily per cell (:meth:`_settle`), so a tick is
        O(1) plus the history entry (O(messages) while the field is small).
        """
        for _ in range(ticks):
            self.tick += 1
            if len(self._cells) <= HISTORY_FULL_MAX:
                self._record_history()

    def _record_history(self) -> None:
        top = heapq.nlargest(
            self.config.history_top_n, self._cells.items(), key=lambda kv: self._settle(kv[1])
        )
        self.history.append(
            {"tick": self.tick, "messages": self._observed, "top": {k: round(c.strength, 4) for k, c in top}}
        )

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
                    "strength": round(self._settle(c), 6),
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
            graph.add_node(mid, kind=c.kind, strength=float(self._settle(c)), latest_score=c.latest_score or 0)
        for (a, b), w in self.edges.items():
            graph.add_edge(a, b, weight=float(w))
        return graph

    def graphml(self) -> str:
        """The field as GraphML text (via ``networkx``, the ``graph`` extra)."""
        nx = require("networkx", "the pheromone graph export")

        return "\n".join(nx.generate_graphml(self.to_graph()))

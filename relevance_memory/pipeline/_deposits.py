"""The log of a memory's pheromone deposits, replayed onto a new field by a resync."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from .._models import Message
from ..pheromone._field import PheromoneField

__all__ = ["DepositLog"]


@dataclass
class DepositLog:
    """Every deposit a memory's builds made, in order, with how many messages had arrived.

    Only deposits that change something are kept: a repeated (message, goal, subtask, score)
    is a no-op for the field (SPEC §5: once per message and subtask), so the log grows with
    what the memory learns, not with the number of builds.

    Attributes:
        events: ``(messages observed, {message id: score}, subtask, final goal)`` per build.
    """

    events: list[tuple[int, dict[str, int], str, str]] = field(default_factory=list)
    _last: dict[str, tuple[str, str, int]] = field(default_factory=dict)

    def record(self, observed: int, scores: Mapping[str, int], subtask: str, goal: str) -> None:
        """Note one build's deposits (``observed``: the store's length at that build)."""
        changed = {mid: s for mid, s in scores.items() if self._last.get(mid) != (goal, subtask, s)}
        if changed:
            self._last.update({mid: (goal, subtask, s) for mid, s in changed.items()})
            self.events.append((observed, changed, subtask, goal))

    def replay(self, onto: PheromoneField, messages: Sequence[Message], keep: int) -> DepositLog:
        """Replay the log onto a new field for the first ``keep`` of ``messages`` (the part of
        the history that did not change) and return the log of what was replayed.

        Each event first lets the field observe the messages that had arrived by then (at
        most ``keep``), then deposits the scores of the messages among them, so those
        messages' strengths, latest scores and subtasks are what the old memory learnt
        (evaporation is computed from the ticks of the kept messages only: the replaced ones
        never happened).
        """
        kept_ids: Collection[str] = {m.id for m in messages[:keep]}
        log = DepositLog()
        for observed, scores, subtask, goal in self.events:
            onto.observe(messages[: min(observed, keep)])
            scored = {mid: s for mid, s in scores.items() if mid in kept_ids}
            if scored:
                onto.deposit(scored, subtask, goal)
                log.record(min(observed, keep), scored, subtask, goal)
        return log

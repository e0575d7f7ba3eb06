"""Pheromone update (SPEC §3 step 5, §5): what the build tells the pheromone memory.

Two moments of a build write to the memory, both through the field's own methods:

- :func:`observe`, first: messages the memory has not seen yet arrive (initial strength,
  reinforcement of the earlier messages they reference, one evaporation tick per
  ``tick_every`` messages);
- :func:`deposit`, after scoring: a deposit from each score, once per (message, subtask),
  recorded under the final goal it was earned for.

Every other stage only reads the memory (strength as memory of this task, the score from
before this subtask). With ``pheromone.enabled=False`` neither writes.

The deposits are also written to a :class:`DepositLog`, so that a memory rebuilt over an
edited history (:meth:`RelevanceMemoryManager.fresh`, every resync of the managed client)
can replay them onto a new field for the messages it still holds, instead of forgetting
what the old memory learnt.
"""

from __future__ import annotations

from ._deposits import DepositLog
from ._state import BuildState, Seams, required

__all__ = ["DepositLog", "deposit", "observe"]


def observe(seams: Seams) -> None:
    """Let the pheromone memory take in the messages it has not seen (SPEC §5)."""
    if seams.config.pheromone.enabled:
        seams.pheromone.observe(seams.store.messages)


def deposit(state: BuildState, seams: Seams) -> None:
    """Deposit from this build's scores (cached ones included), once per (message, subtask)."""
    if seams.config.pheromone.enabled:
        scores = required(state.scored, "score").scores
        store = seams.store
        ids = {store[i].id: s.score for i, s in scores.items()}
        goal, subtask = state.goal.final, state.goal.effective_subtask
        seams.pheromone.deposit(ids, subtask, goal)
        seams.deposit_log.record(len(store), ids, subtask, goal)

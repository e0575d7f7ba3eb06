"""Optional scorer capabilities, declared as Protocols and read once per build.

A :class:`~relevance_memory.Scorer` needs ``name``, ``model``, ``rubric_version`` and
``score``. Three more things are optional, each a Protocol a scorer satisfies by having
the member:

- :class:`AsyncScorer`: ``async def ascore(goal, items, context)`` — an async build awaits
  it; without it an async build runs ``score`` in a worker thread;
- :class:`LocalScorer`: ``local: bool`` — ``True`` when scoring costs no call per message
  (the offline scorer), so ``MemoryConfig.prefilter="auto"`` lets it see every candidate;
- :class:`ContextDependentScorer`: ``context_dependent: bool`` — ``True`` when a score
  reads the message's place in the history (references, the task statement, term
  statistics): its scores are cached for one history only, per message id and reference
  count, never in a shared or on-disk cache (SPEC §6).

:meth:`ScorerCapabilities.of` reads them into one typed value; nothing else in the
package inspects a scorer for optional members.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from .._models import TaskGoal
from ._scorer import ScoreItem, Scorer, ScoringContext, ScoringResult

__all__ = ["AsyncScorer", "ContextDependentScorer", "LocalScorer", "ScorerCapabilities"]


@runtime_checkable
class AsyncScorer(Protocol):
    """A scorer with a native async path (e.g. :class:`~relevance_memory.LLMScorer`)."""

    async def ascore(
        self, goal: TaskGoal, items: Sequence[ScoreItem], context: ScoringContext | None = None
    ) -> ScoringResult:
        """Async :meth:`Scorer.score`; must not raise for model failures (fall back instead)."""
        ...


@runtime_checkable
class LocalScorer(Protocol):
    """A scorer that says whether it scores locally (no per-message call)."""

    local: bool


@runtime_checkable
class ContextDependentScorer(Protocol):
    """A scorer that says whether its scores depend on the message's place in the history."""

    context_dependent: bool


@dataclass(frozen=True)
class ScorerCapabilities:
    """What a scorer declared beyond the :class:`Scorer` protocol (module doc).

    Attributes:
        asynchronous: it has ``ascore``.
        local: scoring costs no call per message.
        context_dependent: its scores read the history, not only the message's content.
    """

    asynchronous: bool = False
    local: bool = False
    context_dependent: bool = False

    @classmethod
    def of(cls, scorer: Scorer) -> ScorerCapabilities:
        """Read the capabilities ``scorer`` declares (absent ones are ``False``)."""
        return cls(
            asynchronous=isinstance(scorer, AsyncScorer),
            local=isinstance(scorer, LocalScorer) and bool(scorer.local),
            context_dependent=isinstance(scorer, ContextDependentScorer) and bool(scorer.context_dependent),
        )

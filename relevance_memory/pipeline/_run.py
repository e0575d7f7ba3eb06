"""The runner: the stages in SPEC §3 order over one :class:`BuildState`.

The async build is the sync build with one line changed: the scorer call is awaited.
"""

from __future__ import annotations

from . import pheromone, score
from ._state import BuildState, BuiltContext, ScoreRequest, Seams
from .assemble import assemble
from .partition import partition
from .prefilter import prefilter
from .record import record
from .select import select
from .summarise import summarise

__all__ = ["abuild", "build"]


def _until_scoring(state: BuildState, seams: Seams) -> ScoreRequest | None:
    """Partition → prefilter → score look-up; ``None`` when the whole history fits."""
    pheromone.observe(seams)
    state.partition = partition(state, seams)
    if state.partition.identity:
        return None
    state.prefilter = prefilter(state, seams)
    return score.request(state, seams)


def _after_scoring(state: BuildState, seams: Seams) -> BuiltContext:
    """Pheromone deposit → select → summarise → assemble → record."""
    if state.scored is not None:
        pheromone.deposit(state, seams)
        state.ranked = select(state, seams)
        state.summarised = summarise(state, seams)
    state.assembled = assemble(state, seams)
    state.record = record(state, seams)
    summaries = tuple(state.summarised.pyramid.summaries) if state.summarised is not None else ()
    return BuiltContext(messages=state.assembled.messages, record=state.record, sources=state.assembled.sources,
                        summaries=summaries)


def build(state: BuildState, seams: Seams) -> BuiltContext:
    """Run one build (SPEC §3 steps 2–8) and return the context with its decision record.

    Raises:
        ContextOverflowError: the pinned prompt plus the newest step cannot fit.
        InvalidMessageError: a tool call has no result (with ``on_invalid="raise"``).
    """
    pending = _until_scoring(state, seams)
    if pending is not None:
        state.scored = score.accept(state, seams, pending, score.call(state, seams, pending))
    return _after_scoring(state, seams)


async def abuild(state: BuildState, seams: Seams) -> BuiltContext:
    """Async :func:`build`: the scorer call is awaited (the only await point)."""
    pending = _until_scoring(state, seams)
    if pending is not None:
        state.scored = score.accept(state, seams, pending, await score.acall(state, seams, pending))
    return _after_scoring(state, seams)




"""The build cycle (SPEC §3.1): append, compact or rebuild — the one call a build makes.

A memory keeps a :class:`Cycle` between builds (the latest request and the build count);
:func:`run` (:func:`arun` awaits the scorer) makes the next build from it:

1. **decide** (:func:`~relevance_memory.pipeline.append.plan`): append, compact or rebuild,
   and why (:func:`~relevance_memory._cache_policy.decide_build_mode`);
2. **append** (:func:`~relevance_memory.pipeline.append.append`): the previous context byte
   for byte plus the new messages, O(new messages); or
3. **compact / rebuild**: the pipeline (:func:`~relevance_memory.pipeline.build`, SPEC §3
   steps 2–8) at a target — a compaction's target below the budget, a rebuild's the whole
   budget. A target that cannot hold the pinned prompt and the newest step grows to what they
   need; one that left out the task statement or a user constraint grows to keep them
   (:func:`grown_target`);
4. **remember** (:func:`~relevance_memory.pipeline.append.remember`): the new :class:`Cycle`,
   whose request the next build may extend. A compaction or rebuild of a large history runs
   with the garbage collector paused and ends by collecting its young generations
   (:func:`~relevance_memory._collector.paused_collector`), so neither its own objects nor its
   leftovers are traversed again and again — nor inside the agent's next appends.

The target search is written once, as a generator both :func:`run` and :func:`arun` drive.
No I/O here but the scorer's, inside the pipeline.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Generator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from .._collector import paused_collector
from .._config import MemoryConfig
from .._exceptions import ConfigError, ContextOverflowError
from .._models import TaskGoal, user_authored
from .._record import DecisionRecord
from .._tokenizer import TokenCounter, tools_tokens
from . import pheromone as pheromone_stage
from ._run import abuild, build
from ._state import BuildState, BuiltContext, Seams
from .append import BuildStep, PrefixState, append, plan, remember

__all__ = [
    "TARGET_GROWTH_SLACK", "BuildLock", "Cycle", "Outcome", "arun",
    "grown_target", "message_budget", "run",
]

TARGET_GROWTH_SLACK = 64
"""Tokens added on top of what a compaction left out when its target grows (framing, goal block)."""


class _Held(AbstractContextManager[None]):
    """:meth:`BuildLock.hold`'s context manager: one object a lock, no generator made each build
    (an append's set-up is a fixed cost of every step, issue 24)."""

    __slots__ = ("_lock",)

    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock

    def __enter__(self) -> None:
        lock = self._lock
        if not lock.acquire(blocking=False):
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                lock.acquire()  # another thread builds: wait for it
            else:
                raise RuntimeError(
                    "build_context() was called inside an event loop while another build of this memory "
                    "is running; await abuild_context() instead (waiting here would block the loop)"
                )

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


@dataclass(frozen=True)
class Cycle:
    """What a memory keeps between builds (SPEC §3.1).

    Attributes:
        prefix: the latest request built, which the next build may extend (``None`` before
            the first build).
        builds: how many builds were made (the next build's number is ``builds + 1``).
    """

    prefix: PrefixState | None = None
    builds: int = 0


class BuildLock:
    """Builds of one memory run one at a time, from threads or asyncio tasks (:meth:`hold` /
    :meth:`ahold`); an async build never blocks the event loop while it waits."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held = _Held(self._lock)

    def hold(self) -> AbstractContextManager[None]:
        """Hold the lock for a sync build (another thread's build: wait for it); a context manager.

        Raises:
            RuntimeError: on entering, inside an event loop while another build holds the lock
                (waiting would block the loop: await the async build instead).
        """
        return self._held

    @contextlib.asynccontextmanager
    async def ahold(self) -> AsyncIterator[None]:
        """Hold the lock for an async build, polling with backoff (never blocks the loop)."""
        lock = self._lock
        delay = 0.0005
        while not lock.acquire(blocking=False):  # never block the loop: poll with backoff
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.02)
        try:
            yield
        finally:
            lock.release()


@dataclass(frozen=True)
class Outcome:
    """One build: the context, and the cycle after it."""

    built: BuiltContext
    cycle: Cycle


def message_budget(config: MemoryConfig, tokenizer: TokenCounter, budget: int | None, tools: Sequence[Any] | None) -> int:
    """The tokens a build has for its messages: ``budget`` (default ``config.token_budget()``)
    minus the ``tools`` schema (:func:`tools_tokens`).

    Raises:
        ConfigError: ``budget`` is not a whole number of tokens (an int; a bool is refused), is
            not positive, or the tools' schema takes all of it (the message names both, in tokens).
    """
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int)):
        raise ConfigError(f"budget must be a whole number of tokens (int), got {type(budget).__name__} {budget!r}")
    budget = budget if budget is not None else config.token_budget()
    schema = tools_tokens(tokenizer, tools)
    if budget - schema <= 0:
        raise ConfigError(
            f"the tools' schema takes {schema:,} tokens, {'more than' if schema > budget else 'all of'} the "
            f"budget of {budget:,}: nothing is left for the messages; raise the budget (max_input_tokens) "
            "or send fewer or shorter tools"
            if schema and budget > 0
            else f"budget must be a positive number of tokens, got {budget}"
        )
    return budget - schema


def run(
    cycle: Cycle, seams: Seams, *, goal: TaskGoal, budget: int | None = None, tools: Sequence[Any] | None = None,
    compact: bool = False,
) -> Outcome:
    """The next build of ``cycle``: within ``budget`` tokens (default ``config.token_budget()``)
    minus the ``tools`` schema (:func:`message_budget`); ``compact`` asks for a compaction.

    Raises:
        ConfigError: the budget is not a positive whole number of tokens, or the tools take it all.
        ContextOverflowError: the pinned prompt plus the newest step cannot fit the budget.
        InvalidMessageError: a tool call has no result (with ``on_invalid="raise"``).
    """
    steps = _steps(cycle, seams, goal, message_budget(seams.config, seams.tokenizer, budget, tools), compact)
    try:
        state = next(steps)  # an append returns here (StopIteration): no pipeline build
        with paused_collector(len(seams.store)):  # a large history's build: no collector passes meanwhile
            while True:
                try:
                    outcome: BuiltContext | ContextOverflowError = build(state, seams)
                except ContextOverflowError as exc:
                    outcome = exc
                state = steps.send(outcome)
    except StopIteration as done:
        result: Outcome = done.value
        return result


async def arun(
    cycle: Cycle, seams: Seams, *, goal: TaskGoal, budget: int | None = None, tools: Sequence[Any] | None = None,
    compact: bool = False,
) -> Outcome:
    """Async :func:`run`: the scorer call is awaited (the only await point)."""
    steps = _steps(cycle, seams, goal, message_budget(seams.config, seams.tokenizer, budget, tools), compact)
    try:
        state = next(steps)
        with paused_collector(len(seams.store)):
            while True:
                try:
                    outcome: BuiltContext | ContextOverflowError = await abuild(state, seams)
                except ContextOverflowError as exc:
                    outcome = exc
                state = steps.send(outcome)
    except StopIteration as done:
        result: Outcome = done.value
        return result


def _steps(
    cycle: Cycle, seams: Seams, goal: TaskGoal, budget: int, compact: bool
) -> Generator[BuildState, BuiltContext | ContextOverflowError, Outcome]:
    """Decide, then append (no pipeline build: nothing is yielded) or search the target:
    yields the state to build next and receives its outcome — the built context, or the
    overflow it raised — until a build keeps what it must. Re-raises the overflow when the
    whole budget cannot hold the pinned prompt and the newest step."""
    previous, number = cycle.prefix, cycle.builds + 1
    step = plan(previous, seams, goal=goal, budget=budget, requested=compact)
    if step.decision.mode == "appended":
        assert previous is not None
        pheromone_stage.observe(seams)  # O(new): the memory takes in what arrived
        built, prefix = append(previous, step, seams, goal=goal, build_number=number, budget=budget)
        return Outcome(built, Cycle(prefix, number))
    target = step.decision.target
    target, limit = (target, budget) if step.decision.mode == "compacted" and target < budget else (budget, None)
    grew = ""
    while True:
        outcome = yield _state(previous, seams, step, goal, number, target, limit, grew)
        if isinstance(outcome, ContextOverflowError):
            if target >= budget:
                raise outcome
            target, limit, grew = _overflow_target(outcome, target, budget)
            continue
        grown = grown_target(
            outcome.record, first_user=seams.store.first_user_index, core_score=seams.config.core_score,
            target=target, budget=budget,
        )
        if grown is None:
            return _remember(previous, outcome, seams, goal, budget, number)
        target, limit = grown, (budget if grown < budget else None)
        grew = "to keep the task statement and user constraints verbatim"


def _remember(
    previous: PrefixState | None, built: BuiltContext, seams: Seams, goal: TaskGoal, budget: int, number: int,
) -> Outcome:
    prefix = remember(previous, built, seams, final_goal=goal.key, budget=budget)
    return Outcome(built, Cycle(prefix, number))


def _state(
    previous: PrefixState | None, seams: Seams, step: BuildStep, goal: TaskGoal, number: int, target: int,
    limit: int | None, grew: str,
) -> BuildState:
    """The pipeline build at ``target`` (``limit``: the whole budget while the target is below it)."""
    reason = step.decision.why
    if target != step.decision.target and step.decision.mode == "compacted":
        reason += f"; target grown to {target} tokens {grew or 'to keep the task statement and user constraints verbatim'}"
    carry = previous is not None and step.decision.mode == "compacted" and seams.config.cache_policy.carry_summaries
    return BuildState(
        budget=target, goal=goal, build_number=number, limit=limit, mode=step.decision.mode, mode_reason=reason,
        carried=previous.summaries if carry and previous is not None else (),
        previous=previous.messages if carry and previous is not None else (),
    )


def _overflow_target(exc: ContextOverflowError, target: int, budget: int) -> tuple[int, int | None, str]:
    """``(target, limit, why)`` of a compaction whose target cannot hold the pinned prompt plus
    the newest step: the least target that holds them (plus :data:`TARGET_GROWTH_SLACK` for the
    goal block), not the whole budget — a compaction that fills the budget leaves no room to
    append, so the next request would compact (miss the provider's cache) again."""
    need = exc.pinned_tokens + exc.newest_step_tokens
    grown = min(budget, need + TARGET_GROWTH_SLACK)
    target = grown if grown > target else budget  # always progress: the loop ends at the budget
    why = f"to fit the pinned system prompt and the newest step ({need} tokens)"
    return target, (budget if target < budget else None), why


def grown_target(record: DecisionRecord, *, first_user: int | None, core_score: int, target: int, budget: int) -> int | None:
    """A larger target for a compaction that left out what must stay verbatim, or ``None``.

    Must stay verbatim (SPEC §7, §3.1): the task statement (the first user message) and
    user messages scored ≥ ``core_score``, older repeats of a kept message aside — messages a
    user wrote (:func:`~relevance_memory._models.user_authored`), not other agents' tool
    results imported from a memory board as ``user`` messages (those would make every
    compaction of a board agent fill the whole budget). The
    target grows by their tokens (plus :data:`TARGET_GROWTH_SLACK`), at most to ``budget``.
    """
    if target >= budget:
        return None
    lost = sum(
        d.tokens
        for d in record.user_decisions()  # a compaction's record stays unbuilt (only the user's messages)
        if user_authored(d.role, d.msg_type)
        and d.decision not in ("kept", "recent")
        and d.reason != "excluded on ingest"
        and "repeat of" not in d.note
        and (d.index == first_user or (d.score or 0) >= core_score)
    )
    return min(budget, target + lost + TARGET_GROWTH_SLACK) if lost else None

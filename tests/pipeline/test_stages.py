"""The pipeline's stages one by one over a BuildState, and the async build = the sync build."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from scorers import WrappedOfflineScorer

from relevance_memory import (
    ContextOverflowError,
    OfflineScorer,
    RelevanceMemoryManager,
    ScoringResult,
    TaskGoal,
    load_transcript,
)
from relevance_memory.pipeline import BuildState, Purpose, build
from relevance_memory.pipeline import pheromone as pheromone_stage
from relevance_memory.pipeline import score as score_stage
from relevance_memory.pipeline._run import _after_scoring
from relevance_memory.pipeline.partition import partition
from relevance_memory.pipeline.prefilter import prefilter
from relevance_memory.pipeline.select import fill_ranked, select
from relevance_memory.scoring._capabilities import AsyncScorer, ScorerCapabilities

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "django__django-15280.json"


def _tool_step(n: int) -> list[dict[str, Any]]:
    call = {"id": f"c{n}", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"cmd": f"ls {n}"})}}
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"c{n}", "content": f"file_{n}.py " + "output " * 60},
    ]


def _history(steps: int = 10) -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix utils/dates.py; you must not change the public API."},
    ]
    for n in range(steps):
        if n == steps // 2:
            history.append({"role": "user", "content": "Status? Keep going."})
        history += _tool_step(n)
    return history


def _memory(budget: int, history: list[dict[str, Any]], **config: Any) -> RelevanceMemoryManager:
    memory = RelevanceMemoryManager(max_input_tokens=budget, keep_recent=2, **config)
    memory.extend(history)
    return memory


def test_partition_stage_splits_and_spends_the_fixed_part_of_the_budget() -> None:
    memory = _memory(700, _history())
    state = BuildState(budget=700, goal=memory.goal, build_number=1)
    part = partition(state, memory._seams())
    assert part.pinned == (0,) and not part.identity
    assert part.task_root == 1 and 1 in part.candidates
    assert all(root not in part.candidates for root in part.recent)
    ledger = part.ledger
    assert ledger.spent_on(Purpose.PINNED) == memory.messages[0].token_count
    recent_tokens = sum(part.chains[r].tokens for r in part.recent)
    assert ledger.spent_on(Purpose.WORKING_MEMORY) == recent_tokens
    assert ledger.spent == 3 + ledger.spent_on(Purpose.PINNED) + ledger.spent_on(Purpose.GOAL_BLOCK) + recent_tokens
    # the partition wrote only its own slot
    assert state.prefilter is None and state.scored is None


def test_partition_stage_overflow_names_the_numbers() -> None:
    memory = _memory(60, _history(2))
    with pytest.raises(ContextOverflowError) as err:
        partition(BuildState(budget=60, goal=memory.goal, build_number=1), memory._seams())
    assert err.value.budget == 60 and err.value.pinned_tokens == memory.messages[0].token_count


def test_stages_in_order_equal_the_manager_build() -> None:
    history = _history(14)
    memory, twin = _memory(900, history), _memory(900, history)
    seams = memory._seams()
    state = BuildState(
        budget=900, goal=memory.goal, build_number=1, mode_reason="first build: no previous context to append to"
    )
    pheromone_stage.observe(seams)
    state.partition = partition(state, seams)
    state.prefilter = prefilter(state, seams)
    pending = score_stage.request(state, seams)
    assert pending.cached == {} and pending.misses == state.prefilter.to_score
    state.scored = score_stage.accept(state, seams, pending, score_stage.call(state, seams, pending))
    pheromone_stage.deposit(state, seams)
    state.ranked = select(state, seams)
    # the ranking tries core before working, and fills greedily
    tiers = [state.ranked.tier[r] for r in state.ranked.order]
    assert tiers == sorted(tiers, key=lambda t: t != "core")
    selection = fill_ranked(state.ranked, state.partition.ledger.left, seams.store)
    assert selection.used <= state.partition.ledger.left
    built = _after_scoring(state, seams)
    expected = twin.build_context()
    assert built.messages == expected.messages
    assert built.record.model_dump(exclude={"created_at"}) == expected.record.model_dump(exclude={"created_at"})


def test_runner_identity_build_skips_the_compaction_stages() -> None:
    memory = _memory(100_000, _history(3))
    state = BuildState(budget=100_000, goal=memory.goal, build_number=1)
    built = build(state, memory._seams())
    assert built.record.identity and state.prefilter is None and state.ranked is None and state.summarised is None
    assert state.assembled is not None and state.record is built.record


class _AsyncWrapped(WrappedOfflineScorer):
    """The wrapped offline scorer with a native async path."""

    async def ascore(self, goal: TaskGoal, items: Any, context: Any = None) -> ScoringResult:
        await asyncio.sleep(0)
        return self.score(goal, items, context)


@pytest.mark.parametrize("scorer", [OfflineScorer, WrappedOfflineScorer, _AsyncWrapped])
async def test_async_build_equals_the_sync_build(scorer: type) -> None:
    history = load_transcript(FIXTURE).messages[:90]
    sync, asyn = (RelevanceMemoryManager(max_input_tokens=3000, scorer=scorer()) for _ in range(2))
    sync.extend(history)
    asyn.extend(history)
    for subtask in ("", "run the failing test"):
        sync.set_goal(subtask=subtask)
        asyn.set_goal(subtask=subtask)
        a, b = sync.build_context(), await asyn.abuild_context()
        assert a.messages == b.messages
        assert a.record.model_dump(exclude={"created_at"}) == b.record.model_dump(exclude={"created_at"})


def test_scorer_capabilities_are_declared_not_guessed() -> None:
    assert ScorerCapabilities.of(OfflineScorer()) == ScorerCapabilities(local=True, context_dependent=True)
    assert ScorerCapabilities.of(WrappedOfflineScorer()) == ScorerCapabilities()
    assert ScorerCapabilities.of(_AsyncWrapped()) == ScorerCapabilities(asynchronous=True)
    assert isinstance(_AsyncWrapped(), AsyncScorer) and not isinstance(OfflineScorer(), AsyncScorer)

    class SaysNo(WrappedOfflineScorer):
        local = False
        context_dependent = False

    assert ScorerCapabilities.of(SaysNo()) == ScorerCapabilities()

"""Prefix-stable builds (issue 10, SPEC §3.1): append between compactions, compaction to a
target, and the properties that hold on any history."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from invariants import assert_invariants

from relevance_memory import (
    InvalidMessageError,
    RelevanceMemoryManager,
    RelevanceScore,
    ScoreSource,
    ScoringResult,
    TaskGoal,
    TiktokenCounter,
)
from relevance_memory import pipeline as pipeline_module
from relevance_memory.pipeline import cycle as cycle_module
from relevance_memory.pipeline._prefix import serialise_context

COUNTER = TiktokenCounter()


def call(cid: str, command: str) -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": command})}}


def step(n: int, size: int = 40, parallel: bool = False) -> list[dict[str, Any]]:
    """One agent step: an assistant message with one or two tool calls and their results."""
    ids = [f"c{n}a", f"c{n}b"] if parallel else [f"c{n}"]
    out: list[dict[str, Any]] = [{"role": "assistant", "content": f"Step {n}: inspect file_{n}.py",
                                  "tool_calls": [call(i, f"cat file_{n}.py") for i in ids]}]
    out += [{"role": "tool", "tool_call_id": i, "content": f"file_{n}.py line {n} " + "lorem ipsum " * size} for i in ids]
    return out


OPENING = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "Fix the failing date parser in utils/dates.py. You must not change the public API."},
]


def test_append_sends_the_previous_request_byte_for_byte_plus_the_new_messages() -> None:
    memory = RelevanceMemoryManager(max_input_tokens=3000, keep_recent=2)
    history = [*OPENING]
    for n in range(12):
        history += step(n)
    memory.extend(history)
    first = memory.build_context()
    assert first.record.mode == "full_rebuild" and first.record.mode_reason.startswith("first build")
    new = step(12, size=10)
    memory.extend(new)
    second = memory.build_context()
    record = second.record
    assert record.mode == "appended" and record.base_build_id == first.record.build_id
    assert serialise_context(second.messages).startswith(serialise_context(first.messages)[:-1])
    assert second.messages == [*first.messages, *new]
    assert record.appended_ids == [m.id for m in memory.messages[-2:]]
    assert record.prefix_tokens == first.record.tokens_after - 3 and record.cacheable_tokens == (
        record.prefix_tokens // 128 * 128
    )
    assert record.tokens_after == first.record.tokens_after + sum(COUNTER.count_message(m) for m in new)
    assert record.usage.llm_calls == 0 and record.cache_misses == 0
    assert_invariants(history + new, second, 3000, COUNTER)
    # the appended build's per-message list: the base's decisions plus the new messages
    assert [d.decision for d in record.messages[-2:]] == ["recent", "recent"]
    assert record.decision_for(record.appended_ids[0]).reason == "appended verbatim since the last compaction"
    assert record.budget_breakdown is not None and record.budget_breakdown.spent["appended"] == sum(
        COUNTER.count_message(m) for m in new
    )


def test_an_append_runs_no_stage_and_builds_its_record_lazily(monkeypatch: pytest.MonkeyPatch) -> None:
    memory = RelevanceMemoryManager(max_input_tokens=3000, keep_recent=2)
    memory.extend([*OPENING, *step(0), *step(1)])
    memory.build_context()
    memory.extend(step(2, size=5))

    def no_pipeline(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("an append must not run the pipeline")

    monkeypatch.setattr(pipeline_module, "build", no_pipeline)
    built = memory.build_context()
    assert built.record.mode == "appended"
    assert built.record._messages is None  # not built yet: O(new) per append
    assert len(built.record.messages) == len(memory.messages)
    assert json.loads(built.record.to_json())["messages"][-1]["id"] == memory.messages[-1].id



def test_an_appended_record_read_later_gives_the_strengths_and_chains_of_its_build() -> None:
    """Issue 24: an append reads only its new messages (chains and steps carried, strengths
    captured as cells); the record, read after later appends, is what it was at the build."""
    memory = RelevanceMemoryManager(max_input_tokens=6000, keep_recent=2)
    memory.extend([*OPENING, *step(0), *step(1)])
    memory.build_context()
    records = []
    for n in range(2, 7):
        memory.extend(step(n, size=5, parallel=n % 2 == 0))
        built = memory.build_context()
        assert built.record.mode == "appended"
        now = {m.id: round(memory.pheromone.strength(m.id), 4) for m in memory.messages}
        records.append((built.record, now, len(memory.messages)))
    for record, now, length in records:
        recent = [d for d in record.messages if d.decision == "recent" and d.index >= 8]
        assert recent and all(d.strength == now[d.id] for d in recent)
        assert len(record.messages) == length
    last = records[-1][0]
    appended = [d for d in last.messages if d.decision == "recent" and d.index >= 8]
    assert last.chains_kept - records[0][0].chains_kept == len({d.chain_id for d in appended}) - 1
def test_compaction_at_the_high_water_mark_fills_the_target() -> None:
    # the fixed-target policy (no room reserved for the steps ahead): the target is half the budget
    memory = RelevanceMemoryManager(max_input_tokens=3000, keep_recent=2,
                                    cache_policy={"target_fraction": 0.5, "steps_ahead": 0})
    memory.extend(OPENING)
    modes = []
    for n in range(40):
        memory.extend(step(n, size=80))
        built = memory.build_context()
        modes.append(built.record.mode)
        assert built.record.tokens_after <= 3000
        if built.record.mode == "compacted":
            assert built.record.target == 1500 and built.record.tokens_after <= 1500
            assert "would exceed the budget" in built.record.mode_reason
            assert built.record.budget_breakdown is not None and built.record.budget_breakdown.budget == 3000
    assert modes[0] == "full_rebuild" and modes.count("compacted") >= 2
    assert modes.count("appended") > 2 * modes.count("compacted")  # many steps fit between compactions


def test_goal_and_budget_changes_rebuild_and_a_request_compacts() -> None:
    memory = RelevanceMemoryManager(max_input_tokens=3000, keep_recent=2, cache_policy={"clear_at_least": 0})
    memory.extend([*OPENING, *(m for n in range(20) for m in step(n))])
    memory.build_context()
    assert memory.build_context().record.mode == "appended"
    memory.set_goal(subtask="run the tests")  # a subtask is not a reason to rewrite the prefix
    assert memory.build_context().record.mode == "appended"
    assert memory.build_context(budget=2500).record.mode_reason == "the budget changed (3000 → 2500 tokens)"
    memory.set_goal(final="Document the date parser")
    rebuilt = memory.build_context(budget=2500)
    assert (rebuilt.record.mode, rebuilt.record.mode_reason) == ("full_rebuild", "the final goal changed")
    asked = memory.build_context(budget=2500, compact=True)
    assert (asked.record.mode, asked.record.mode_reason) == ("compacted", "compaction requested by the caller")
    assert asked.record.prefix_tokens > 0  # the stable head: the system prompt and the task statement


def test_a_requested_compaction_that_frees_too_little_appends() -> None:
    memory = RelevanceMemoryManager(max_input_tokens=30_000, keep_recent=2)
    memory.extend([*OPENING, *step(0)])
    memory.build_context()
    built = memory.build_context(compact=True)
    assert built.record.mode == "appended" and "clear_at_least" in built.record.mode_reason


def test_a_tool_chain_waiting_for_results_is_held_back_then_appended_whole() -> None:
    memory = RelevanceMemoryManager(max_input_tokens=3000, keep_recent=2, on_invalid="repair")
    memory.extend([*OPENING, *step(0), *step(1)])
    first = memory.build_context()
    pending = step(2, parallel=True)
    memory.extend(pending[:2])  # the call and one of its two results
    held = memory.build_context()
    assert held.record.mode == "appended" and held.messages == first.messages  # never a split chain
    assert any("held back" in w for w in held.record.warnings)
    assert held.record.decision_for(memory.messages[-1].id).note.startswith("held back")
    memory.extend(pending[2:])
    whole = memory.build_context()
    assert whole.record.mode == "appended" and whole.messages == [*first.messages, *pending]
    strict = RelevanceMemoryManager(max_input_tokens=3000, keep_recent=2)
    strict.extend([*OPENING, *step(0)])
    strict.build_context()
    strict.extend(pending[:2])
    with pytest.raises(InvalidMessageError, match="have no result"):
        strict.build_context()  # as a full build would


def test_a_stray_tool_result_compacts_instead_of_appending() -> None:
    memory = RelevanceMemoryManager(max_input_tokens=3000, keep_recent=2, on_invalid="repair")
    memory.extend([*OPENING, *step(0)])
    memory.build_context()
    memory.extend([step(1)[0], {"role": "user", "content": "wait"}, step(1)[1]])  # a result after a user turn
    built = memory.build_context()
    assert built.record.mode == "compacted" and "unanswered while later messages follow" in built.record.mode_reason


def test_same_state_gives_byte_identical_builds() -> None:
    def replay() -> list[str]:
        memory = RelevanceMemoryManager(max_input_tokens=2500, keep_recent=2)
        memory.extend(OPENING)
        out = []
        for n in range(25):
            memory.extend(step(n, parallel=n % 3 == 0))
            out.append(serialise_context(memory.build_context().messages))
        return out

    assert replay() == replay()


# --------------------------------------------------------------------------- properties
WORDS = ["parser", "dates.py", "utils", "ORD-1001", "41872", "timeout", "config", "alpha", "beta", "must", "never"]


class ContentScorer:
    """Scores are a pure function of (goal, content): a fresh manager scores exactly as a
    long-lived one, whatever its cache holds."""

    name = "content"
    model = "content-1"
    rubric_version = "v1"

    def score(self, goal: TaskGoal, items: Any, context: Any = None) -> ScoringResult:
        def one(item: Any) -> RelevanceScore:
            digest = hashlib.sha256(f"{goal.final}|{item.content_hash}".encode()).digest()
            return RelevanceScore(id=item.id, score=1 + digest[0] % 5, reason="hash", source=ScoreSource.LLM)

        return ScoringResult(scores=[one(item) for item in items])


@st.composite
def histories(draw: st.DrawFn) -> tuple[list[list[dict[str, Any]]], list[tuple[bool, str | None]], int]:
    """Chunks of messages (complete steps), and per chunk: compact on request, new subtask."""
    chunks: list[list[dict[str, Any]]] = []
    ops: list[tuple[bool, str | None]] = []
    n = 0
    for _ in range(draw(st.integers(3, 14))):
        chunk: list[dict[str, Any]] = []
        for _ in range(draw(st.integers(1, 3))):
            kind = draw(st.sampled_from(["tool", "tool", "parallel", "user", "assistant"]))
            text = " ".join(draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=8)))
            if kind in ("tool", "parallel"):
                chunk += step(n, size=draw(st.integers(1, 60)), parallel=kind == "parallel")
            elif kind == "user":
                chunk.append({"role": "user", "content": f"{text} (turn {n})"})
            else:
                chunk.append({"role": "assistant", "content": f"{text} (turn {n})"})
            n += 1
        chunks.append(chunk)
        ops.append((draw(st.booleans()) and draw(st.booleans()), draw(st.sampled_from([None, None, "run the tests"]))))
    return chunks, ops, draw(st.sampled_from([900, 1500, 2500]))


@settings(max_examples=25)
@given(histories())
def test_every_compaction_equals_a_fresh_build_from_the_same_state(case: Any) -> None:
    """After any sequence of appends and compactions, a compaction equals what a fresh memory
    holding the same messages builds when asked to compact (pheromone off: its deposits are
    history by design); every output passes the SPEC §9 checks."""
    chunks, ops, budget = case
    # carried summaries and the typical step size are state a fresh memory has not got: off here
    config: dict[str, Any] = {"max_input_tokens": budget, "keep_recent": 2, "pheromone": {"enabled": False},
                              "cache_policy": {"carry_summaries": False, "steps_ahead": 0}}
    memory = RelevanceMemoryManager(scorer=ContentScorer(), **config)
    memory.extend(OPENING)
    history = [*OPENING]
    for chunk, (compact, subtask) in zip(chunks, ops, strict=True):
        memory.extend(chunk)
        history += chunk
        if subtask:
            memory.set_goal(subtask=subtask)
        built = memory.build_context(compact=compact)
        assert_invariants(history, built, budget, COUNTER)
        if built.record.mode == "compacted":
            fresh = RelevanceMemoryManager(scorer=ContentScorer(), **config)
            fresh.extend(history)
            fresh.set_goal(subtask=memory.goal.subtask)
            again = fresh.build_context(compact=True)
            assert again.record.mode == "compacted"
            assert serialise_context(again.messages) == serialise_context(built.messages)


@settings(max_examples=20)
@given(histories())
def test_appends_leave_the_memory_as_a_rebuild_would(case: Any) -> None:
    """With the default scorer and the pheromone field on: a memory that only builds where the
    appending one compacted or rebuilt makes the very same contexts (appends change no state)."""
    chunks, ops, budget = case
    config: dict[str, Any] = {"max_input_tokens": budget, "keep_recent": 2}
    appending, mirror = RelevanceMemoryManager(**config), RelevanceMemoryManager(**config)
    for memory in (appending, mirror):
        memory.extend(OPENING)
    history = [*OPENING]
    for chunk, (_, subtask) in zip(chunks, ops, strict=True):
        history += chunk
        for memory in (appending, mirror):
            memory.extend(chunk)
            if subtask:
                memory.set_goal(subtask=subtask)
        built = appending.build_context()
        assert_invariants(history, built, budget, COUNTER)
        if built.record.mode != "appended":
            twin = mirror.build_context()
            assert (twin.record.mode, twin.record.target) == (built.record.mode, built.record.target)
            assert serialise_context(twin.messages) == serialise_context(built.messages)


class LowTaskScorer(ContentScorer):
    """Rates the task statement 1 (as a careless LLM might) and everything else 4."""

    def score(self, goal: TaskGoal, items: Any, context: Any = None) -> ScoringResult:
        return ScoringResult(scores=[
            RelevanceScore(id=i.id, score=1 if i.is_task_statement else 4, reason="r", source=ScoreSource.LLM)
            for i in items
        ])


@pytest.mark.parametrize("summaries", [True, False])
def test_a_goal_block_never_points_at_a_task_statement_that_was_left_out(summaries: bool) -> None:
    memory = RelevanceMemoryManager(
        max_input_tokens=900, keep_recent=1, scorer=LowTaskScorer(), summaries=summaries, pheromone={"enabled": False},
        fill_from_archive=False,  # else the archived task statement may take the room left
    )
    history = [*OPENING, *(m for n in range(8) for m in step(n)), {"role": "user", "content": "Status?"}]
    memory.extend(history)
    built = memory.build_context()
    assert built.record.decision_for("m1").decision not in ("kept", "recent")
    block = next(m["content"] for m in built.messages if m["content"] and m["content"].startswith("[relevance-memory: task"))
    assert "Final goal: Fix the failing date parser" in block and "kept verbatim here" not in block
    assert any("the goal block states the final goal" in w for w in built.record.warnings)
    assert_invariants(history, built, 900, COUNTER)


def test_offering_the_restore_tool_compacts_so_the_goal_block_can_say_so() -> None:
    memory = RelevanceMemoryManager(max_input_tokens=3000, keep_recent=2)
    memory.extend([*OPENING, *(m for n in range(20) for m in step(n))])
    memory.build_context()
    memory.restore_tool()
    built = memory.build_context()
    assert built.record.mode == "compacted" and "restore tool" in built.record.mode_reason
    assert memory.build_context().record.mode == "appended"  # and then appends again


def test_a_compaction_whose_target_cannot_hold_the_newest_step_grows_only_as_far_as_it_needs() -> None:
    # a long system prompt (as τ-bench's airline policy): at 3,000 tokens and target 0.5 the
    # pinned prompt plus the newest step do not fit 1,500 tokens. Before, the compaction then
    # filled the whole budget, so the next append overflowed and every request compacted
    # (τ-bench airline run 3 at 3k: 4 compactions in a row, 0.85x the full history's cost
    # at p = 0.1; now 0.65x)
    system = {"role": "system", "content": "Airline policy. " + "Rule: check the booking before changing it. " * 140}
    memory = RelevanceMemoryManager(max_input_tokens=3000, keep_recent=2,
                                    cache_policy={"target_fraction": 0.5, "steps_ahead": 0})
    history = [system, OPENING[1]]
    memory.extend(history)
    pinned = COUNTER.count_message(system)
    assert 1200 < pinned < 1400
    records = []
    for n in range(14):
        new = step(n, size=120)
        memory.extend(new)
        records.append(memory.build_context().record)
    compactions = [r for r in records if r.mode == "compacted"]
    assert compactions, [r.mode for r in records]
    first = compactions[0]
    assert "to fit the pinned system prompt and the newest step" in first.mode_reason
    need = int(first.mode_reason.rsplit("(", 1)[1].split(" ")[0])
    assert first.target == need + 64 and first.tokens_after <= first.target < 3000 - 64
    after = records[records.index(first) + 1]
    assert after.mode == "appended"  # room was left to append
    assert all(r.tokens_after <= 3000 for r in records)
    # before: 7 compactions in 14 requests, the last 6 in a row
    assert [n for n, r in enumerate(records) if r.mode == "compacted"] == [6, 11]


def test_a_compaction_record_read_later_is_the_one_read_at_the_build() -> None:
    """Issue 24: a compaction's per-message record is built on first use (strengths and latest
    scores captured from the pheromone cells at the build); read after later steps, deposits
    and compactions it equals the record of a twin memory read right after the same build."""

    def run(read_now: bool) -> list[dict[str, Any]]:
        memory = RelevanceMemoryManager(max_input_tokens=2500, keep_recent=2)
        memory.extend(OPENING)
        kept: list[Any] = []
        for n in range(30):
            memory.extend(step(n, size=60))
            built = memory.build_context()
            if built.record.mode != "appended":
                kept.append(built.record)
                if read_now:
                    assert built.record.messages
                else:
                    assert built.record._messages is None or n == 0 or built.record.mode == "full_rebuild"
        return [{k: v for k, v in json.loads(r.to_json()).items() if k != "created_at"} for r in kept]

    later, now = run(read_now=False), run(read_now=True)
    assert len(later) >= 3
    assert later == now


def test_a_large_history_is_ingested_and_built_with_the_collector_paused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 24: a large batch ingested, or a compaction or rebuild of a large history, runs with
    the garbage collector paused and ends with one collection (a full one after an ingest, the
    young generations after a build); an append and a small batch never touch the collector,
    and a collector the program disabled stays disabled."""
    import gc

    from relevance_memory import _collector

    asked: list[int] = []
    paused: list[bool] = []
    monkeypatch.setattr(_collector.gc, "collect", lambda generation=2: asked.append(generation) or 0)
    monkeypatch.setattr(_collector, "PAUSE_MIN_MESSAGES", 43)
    memory = RelevanceMemoryManager(max_input_tokens=3000, keep_recent=2, cache_policy={"clear_at_least": 0})
    memory.extend([*OPENING, *(m for n in range(20) for m in step(n))])  # 42 messages: below the threshold
    memory.build_context()
    assert asked == [] and gc.isenabled()
    memory.extend(step(20))
    assert memory.build_context().record.mode == "appended" and asked == []
    real_build = cycle_module.build

    def build(state: Any, seams: Any) -> Any:
        paused.append(gc.isenabled())
        return real_build(state, seams)

    monkeypatch.setattr(cycle_module, "build", build)
    assert memory.build_context(compact=True).record.mode == "compacted"
    assert asked == [1] and paused and not any(paused) and gc.isenabled()  # paused during, collected after
    memory.extend([m for n in range(21, 43) for m in step(n)])  # a 44-message batch
    assert asked == [1, 2] and gc.isenabled()  # a full collection after a large ingest
    gc.disable()
    try:
        assert memory.build_context(budget=2900).record.mode == "full_rebuild"
        assert not gc.isenabled()  # left as the program set it
    finally:
        gc.enable()
    assert asked == [1, 2]


def _appended_records(monkeypatch: pytest.MonkeyPatch | None, clock: Any) -> list[Any]:
    """The records of a run with appends: a held-back chain, a note, a goal change (subtask)."""
    from relevance_memory.pipeline import append as append_module

    if monkeypatch is not None:  # every record validated from its fields
        monkeypatch.setattr(append_module, "_made_like", lambda cls, **fields: cls(**fields))
    memory = RelevanceMemoryManager(max_input_tokens=2500, keep_recent=2, clock=clock, on_invalid="repair")
    memory.extend([*OPENING, *(m for n in range(10) for m in step(n))])
    records = [memory.build_context().record]
    for n in range(10, 40):
        if n == 20:
            memory.set_goal(subtask="run the parser's tests")
        new = step(n, size=15, parallel=n == 25)
        if n == 25:  # the call and one of its two results: held back, then appended whole
            memory.extend(new[:2])
            records.append(memory.build_context().record)
            new = new[2:]
        memory.extend(new)
        records.append(memory.build_context().record)
    return records


def test_an_appended_record_equals_the_one_validated_from_its_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    """An append makes its record and budget breakdown as copies of a template validated once
    (``_made_like``, issue 24); each equals the record validated from the same fields — every
    field, the fields set, the lazily built decisions — and owns its lists."""
    from datetime import datetime, timezone

    def clock() -> datetime:
        return datetime(2026, 1, 1, tzinfo=timezone.utc)

    fast = _appended_records(None, clock)
    with monkeypatch.context() as patched:
        checked = _appended_records(patched, clock)
    modes = [r.mode for r in fast]
    assert modes.count("appended") >= 20 and "compacted" in modes
    assert any("held back" in w for r in fast for w in r.warnings)
    for a, b in zip(fast, checked, strict=True):
        assert a.model_dump(mode="json") == b.model_dump(mode="json")
        assert a.model_fields_set == b.model_fields_set
        assert a.budget_breakdown is not None and b.budget_breakdown is not None
        assert a.budget_breakdown.model_fields_set == b.budget_breakdown.model_fields_set
    appended = [r for r in fast if r.mode == "appended"]
    first, second = appended[0], appended[1]
    for name in ("warnings", "appended_ids", "summaries"):
        assert getattr(first, name) is not getattr(second, name)
    assert first.usage is not second.usage and first.budget_breakdown is not second.budget_breakdown
    first.warnings.append("mine")
    assert "mine" not in second.warnings


def test_an_appended_record_with_a_clock_that_gives_no_datetime_is_validated() -> None:
    """A clock that returns a timestamp string is coerced by validation, as a compaction's record is."""
    memory = RelevanceMemoryManager(max_input_tokens=3000, keep_recent=2, clock=lambda: "2026-01-01T00:00:00Z")  # type: ignore[arg-type,return-value]
    memory.extend([*OPENING, *step(0)])
    memory.build_context()
    memory.extend(step(1))
    built = memory.build_context()
    assert built.record.mode == "appended"
    assert built.record.created_at is not None and built.record.created_at.year == 2026


def test_the_record_template_keeps_no_values_of_a_build() -> None:
    """The templates appended records are copied from (``_made_like``) hold none of the values of
    the build that made them: a large record's summaries or breakdown are not kept alive."""
    import gc
    import weakref

    from relevance_memory.pipeline import append as append_module

    append_module._TEMPLATES.clear()
    memory = RelevanceMemoryManager(max_input_tokens=2500, keep_recent=2)
    memory.extend([*OPENING, *(m for n in range(12) for m in step(n))])
    memory.build_context()
    memory.extend(step(12, size=10))
    record = memory.build_context().record
    assert record.mode == "appended" and append_module._TEMPLATES
    for template, kinds in append_module._TEMPLATES.values():
        assert all(template.__dict__[name] is None for name, _ in kinds)
    breakdown = weakref.ref(record.budget_breakdown)
    del record, memory
    gc.collect()
    assert breakdown() is None


def _requirements(n: int) -> str:
    return "\n".join(f"Requirement {j}: handle_{j} must return code {j * 7} for input case_{j}." for j in range(n))


@pytest.mark.parametrize(("lines", "mode", "verbatim"), [(200, "appended", True), (300, "compacted", True),
                                                         (600, "appended", False)])
def test_a_new_user_message_joins_an_append_as_a_compaction_would_send_it(lines: int, mode: str, verbatim: bool) -> None:
    """SPEC §9 in the append path (a new user message with the goal set by the caller, so no
    rebuild): the newest user message is sent verbatim while it alone fits what the pinned prompt
    leaves — an append that cannot hold it compacts, as partition keeps it — and, when it does
    not fit, as an excerpt capped by that room, not by that room less itself (which sent the
    11,261-token message as a bare "all … tokens left out" marker)."""
    memory = RelevanceMemoryManager(max_input_tokens=8000)
    memory.set_goal("Fix the bug in parser.py")
    history = [{"role": "system", "content": "You are a coding agent."},
               {"role": "user", "content": "Fix the bug in parser.py where tokens are dropped."}]
    memory.extend(history)
    for n in range(30):  # an agent loop: a build after every step
        history += step(n, size=20)
        memory.extend(history[-2:])
        memory.build_context()
    big = {"role": "user", "content": _requirements(lines)}
    memory.extend([big])
    built = memory.build_context()
    assert built.record.mode == mode
    sent = built.messages[-1] if built.messages[-1]["role"] == "user" else next(
        m for m in reversed(built.messages) if m["role"] == "user")
    newest = memory.messages[-1]
    if verbatim:
        assert sent["content"] == big["content"]
    else:
        head = sent["content"].splitlines()[0]
        assert head.startswith(f"[relevance-memory: excerpt of {newest.id} (user") and "lines kept" in head
        assert "Requirement 0: handle_0 must return code 0" in sent["content"]
        assert built.record.decision_for(newest.id).fidelity == "excerpt"
    assert_invariants([*history, big], built, 8000, COUNTER)


def test_an_excerpt_appended_to_the_whole_history_ends_its_identity() -> None:
    """While the whole history fits, the context *is* the history (``record.identity``); an
    oversized tool output appended as an excerpt ends that — the record said "identity" over a
    context that no longer equals the history (and so would each later append's)."""
    memory = RelevanceMemoryManager(max_input_tokens=8000)
    history = [*OPENING, *step(0), *step(1)]
    memory.extend(history)
    assert memory.build_context().record.identity
    big = step(2, size=4000)
    memory.extend(big)
    built = memory.build_context()
    assert built.record.mode == "appended" and built.messages[-1]["content"].startswith("[relevance-memory: excerpt")
    assert not built.record.identity
    small = step(3)
    memory.extend(small)
    later = memory.build_context()
    assert later.record.mode == "appended" and not later.record.identity
    assert_invariants([*history, *big, *small], later, 8000, COUNTER)

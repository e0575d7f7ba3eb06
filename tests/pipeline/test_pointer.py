"""Issue 13 item 7 (pipeline part): when no summary fits, a pointer remains — archived
messages never vanish from the context without a trace; the record says which ones it names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from relevance_memory import RelevanceMemoryManager, check_context, load_transcript
from relevance_memory.summary._summary import SUMMARY_MARKER

CASES = Path(__file__).resolve().parents[1] / "cases"
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def _histories() -> dict[str, list[dict]]:
    return {
        "C03": json.loads((CASES / "C03-no-duplicates-around-summary-cut.json").read_text())["messages"],
        "C04": json.loads((CASES / "C04-system-prompt-survives-compaction.json").read_text())["messages"],
        "swe": load_transcript(FIXTURES / "django__django-15280.json").messages,
    }


@pytest.mark.parametrize("name", ["C03", "C04", "swe"])
@pytest.mark.parametrize("summary_budget", [0, 1, 12, 40])
def test_every_archived_message_is_in_a_summary_or_named_by_the_pointer(name: str, summary_budget: int) -> None:
    history = _histories()[name]
    for fraction in (0.35, 0.5, 0.7, 0.9):
        memory = RelevanceMemoryManager(keep_recent=1, summary_budget=summary_budget)
        memory.extend(history)
        full = sum(m.token_count for m in memory.messages) + 3
        budget = max(60, int(full * fraction))
        try:
            built = memory.build_context(budget=budget)
        except Exception as exc:  # the newest step alone may not fit a small case: that raises, loudly
            assert "cannot fit" in str(exc)
            continue
        assert built.token_count <= budget and check_context(built.messages) == []
        if built.record.identity:
            continue
        gone = [d for d in built.record.messages if d.decision in ("summarised", "dropped") and d.reason != "excluded on ingest"]
        if not gone:
            continue
        text = "\n".join(str(m.get("content")) for m in built.messages if str(m.get("content")).startswith(SUMMARY_MARKER))
        if not text:  # only when the pointer's room would have to come from the task statement or a constraint
            kept = [d for d in built.record.messages if d.decision == "kept" and d.tier not in ("pinned",)]
            assert kept and all(d.role == "user" and (d.score or 0) >= 4 for d in kept), (
                f"{name} at {budget}: {len(gone)} archived message(s) vanished without a trace"
            )
            assert any("dropped" in w for w in built.record.warnings)
            continue
        named = {i for s in built.record.summaries for i in s.covered_ids}
        assert {d.id for d in gone} <= named
        for decision in gone:
            if decision.decision == "dropped":
                assert "pointer" in decision.note or "summary" in decision.note or "restorable" in decision.note


def test_a_pointer_is_recorded_as_level_0_and_its_messages_as_dropped() -> None:
    history = _histories()["swe"]
    memory = RelevanceMemoryManager(keep_recent=1, summary_budget=1)
    memory.extend(history)
    built = memory.build_context(budget=6000)
    assert [s.level for s in built.record.summaries] == [0]
    pointer = next(m["content"] for m in built.messages if str(m.get("content")).startswith(SUMMARY_MARKER))
    assert "restorable by id" in pointer
    named = set(built.record.summaries[0].covered_ids)
    decisions = {d.id: d for d in built.record.messages}
    assert all(decisions[i].decision == "dropped" and "restore pointer" in decisions[i].note for i in named)
    assert any("a pointer names" in w for w in built.record.warnings)


@pytest.mark.parametrize("case", ["C01-orphan-tool-after-trim", "C03-no-duplicates-around-summary-cut",
                                  "C05-early-constraint-survives-short-turns"])
@pytest.mark.parametrize("fraction", [0.15, 0.3, 0.5, 0.7])
def test_a_pointer_never_displaces_the_task_statement_or_a_user_constraint(case: str, fraction: float) -> None:
    data = json.loads((CASES / f"{case}.json").read_text())
    messages = data["messages"]
    baseline = RelevanceMemoryManager(keep_recent=1, on_invalid="repair")
    baseline.extend(messages)
    full = sum(m.token_count for m in baseline.messages) + 3
    budget = max(40, int(full * fraction))
    try:
        built = baseline.build_context(budget=budget)
    except Exception as exc:
        assert "cannot fit" in str(exc)
        return
    record = built.record
    if not any(s.level == 0 for s in record.summaries):
        return
    for d in record.messages:
        if d.role == "user" and d.score is not None and d.score >= 4 and d.tier == "core":
            assert d.decision == "kept" or "pointer" not in d.note, f"{d.id} yielded to a pointer"

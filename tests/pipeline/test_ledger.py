"""The budget ledger (issue 9): every token of a build accounted for by purpose."""

from __future__ import annotations

import json
from pathlib import Path

import goldens
import pytest
from typer.testing import CliRunner

from relevance_memory import BuiltContext, DecisionRecord, RelevanceMemoryManager
from relevance_memory.cli import app
from relevance_memory.pipeline import BudgetLedger, Purpose

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "django__django-15280.json"


def test_ledger_spends_releases_and_reserves() -> None:
    ledger = BudgetLedger(1000).spend(Purpose.REPLY_PRIMING, 3).spend(Purpose.PINNED, 97)
    assert (ledger.spent, ledger.left) == (100, 900)
    assert ledger.fits(900) and not ledger.fits(901) and not ledger.fits(850, keep=60)
    held = ledger.reserve(Purpose.SUMMARIES, 200, "for the pyramid")
    assert held.left == 900 and held.reserved_for(Purpose.SUMMARIES) == 200  # a reserve is a note
    spent = held.spend(Purpose.GOAL_BLOCK, 50).release(Purpose.GOAL_BLOCK, 50, "yielded")
    assert spent.spent_on(Purpose.GOAL_BLOCK) == 0 and spent.left == 900
    assert ledger.entries == BudgetLedger(1000).spend(Purpose.REPLY_PRIMING, 3).spend(Purpose.PINNED, 97).entries
    breakdown = spent.breakdown()
    assert breakdown.spent == {
        "reply_priming": 3, "pinned": 97, "goal_block": 0, "working_memory": 0, "core": 0, "working": 0, "summaries": 0,
        "appended": 0, "subtask": 0,
    }
    assert breakdown.unused == 900
    assert [(line.kind, line.purpose, line.tokens) for line in breakdown.lines] == [
        ("spend", "reply_priming", 3), ("spend", "pinned", 97), ("reserve", "summaries", 200),
        ("spend", "goal_block", 50), ("release", "goal_block", 50),
    ]


def test_ledger_refuses_negative_lines_and_overreleases() -> None:
    with pytest.raises(ValueError, match="non-negative"):
        BudgetLedger(10).spend(Purpose.PINNED, -1)
    with pytest.raises(ValueError, match="cannot release 5 tokens of goal_block: it holds 0"):
        BudgetLedger(10).release(Purpose.GOAL_BLOCK, 5)


@pytest.mark.parametrize("budget", [4000, 8000, 16000])
def test_record_says_where_the_budget_went(budget: int) -> None:
    built = goldens.run(f"fixture/django__django-15280|default|{budget}").builds[0]  # built once per session
    assert isinstance(built, BuiltContext)
    record = built.record
    breakdown = record.budget_breakdown
    assert breakdown is not None
    # what each message took in the context: an excerpt or an elided output its sent tokens (issue 21)
    sent = {d.id: d.sent_tokens if d.sent_tokens is not None else d.tokens for d in record.messages}
    pinned = sum(sent[d.id] for d in record.messages if d.tier == "pinned")
    recent = sum(sent[d.id] for d in record.messages if d.decision == "recent")
    core = sum(sent[d.id] for d in record.messages if d.decision == "kept" and d.tier == "core")
    working = sum(sent[d.id] for d in record.messages if d.decision == "kept" and d.tier == "working")
    summaries = sum(s.tokens for s in record.summaries)
    assert breakdown.spent["reply_priming"] == 3
    assert (breakdown.spent["pinned"], breakdown.spent["working_memory"]) == (pinned, recent)
    assert (breakdown.spent["core"], breakdown.spent["working"], breakdown.spent["summaries"]) == (core, working, summaries)
    assert (breakdown.spent["goal_block"] > 0) == record.goal_block
    assert sum(breakdown.spent.values()) == record.tokens_after
    assert breakdown.unused == budget - record.tokens_after
    # the summary reserve is noted when summaries were negotiated
    assert any(line.kind == "reserve" and line.purpose == "summaries" for line in breakdown.lines) == bool(summaries)


def test_identity_build_spends_only_pinned_and_working_memory() -> None:
    history = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there"}]
    memory = RelevanceMemoryManager(max_input_tokens=1000)
    memory.extend(history)
    breakdown = memory.build_context().record.budget_breakdown
    assert breakdown is not None
    assert {k: v for k, v in breakdown.spent.items() if v} == {"reply_priming": 3, "pinned": 7, "working_memory": 6}
    assert breakdown.lines[-1].note == "the whole history fits the budget"


def test_explain_shows_the_budget_breakdown(tmp_path: Path) -> None:
    runner = CliRunner()
    rec = tmp_path / "rec.json"
    result = runner.invoke(app, ["build", str(FIXTURE), "--budget", "8000", "--out", str(tmp_path / "c.json"),
                                 "--record", str(rec)])
    assert result.exit_code == 0, result.output
    record = DecisionRecord.from_json(rec.read_text())
    assert record.budget_breakdown is not None
    assert "budget: reply priming 3 · system prompt 111" in " ".join(result.output.split())
    shown = runner.invoke(app, ["explain", str(rec), "--limit", "1"])
    assert shown.exit_code == 0, shown.output
    text = " ".join(shown.output.split())
    assert "where the 8,000-token budget went" in text
    assert f"working memory (last steps) {record.budget_breakdown.spent['working_memory']:,}" in text
    assert f"unused {record.budget_breakdown.unused:,}" in text
    assert "reserved" in text and "tokens for summaries" in text
    # a record written before the breakdown existed still explains
    old = json.loads(rec.read_text())
    del old["budget_breakdown"]
    rec.write_text(json.dumps(old))
    assert runner.invoke(app, ["explain", str(rec), "--limit", "1"]).exit_code == 0

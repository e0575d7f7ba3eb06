"""The relmem command line, run in-process on the shipped SWE fixture."""

from __future__ import annotations

import json
import re
from pathlib import Path

from typer.testing import CliRunner

from relevance_memory import DecisionRecord, check_context
from relevance_memory.cli import app

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "django__django-15280.json"
runner = CliRunner()


def test_build_writes_context_and_record(tmp_path: Path) -> None:
    out, rec = tmp_path / "ctx.json", tmp_path / "rec.json"
    result = runner.invoke(app, ["build", str(FIXTURE), "--budget", "8000", "--out", str(out), "--record", str(rec)])
    assert result.exit_code == 0, result.output
    assert "194" in result.output and "budget 8,000" in result.output
    assert "scorer: offline (deterministic, no network; no LLM endpoint asked for" in " ".join(result.output.split())
    context = json.loads(out.read_text())
    assert check_context(context) == []
    record = DecisionRecord.from_json(rec.read_text())
    assert record.tokens_after <= 8000 and record.messages_after == len(context)
    assert record.messages_before == 194
    # the goal defaults to the first user message (the SWE task statement)
    assert record.goal.source == "first_user_message"


def test_build_json_and_goal_options(tmp_path: Path) -> None:
    result = runner.invoke(app, [
        "build", str(FIXTURE), "--budget", "6000", "--keep-recent", "2", "--goal", "Fix prefetch deferred fields",
        "--subtask", "run the tests", "--json", "--out", str(tmp_path / "c.json"), "--record", str(tmp_path / "r.json"),
    ])
    assert result.exit_code == 0, result.output
    record = DecisionRecord.model_validate_json(result.stdout)  # the scorer line goes to stderr with --json
    assert (record.goal.final, record.goal.subtask, record.keep_recent) == ("Fix prefetch deferred fields", "run the tests", 2)
    assert result.stderr.startswith("scorer: offline")


def test_explain_shows_decisions(tmp_path: Path) -> None:
    rec = tmp_path / "rec.json"
    runner.invoke(app, ["build", str(FIXTURE), "--budget", "8000", "--out", str(tmp_path / "c.json"), "--record", str(rec)])
    result = runner.invoke(app, ["explain", str(rec), "--decision", "kept", "--limit", "5"], env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    assert re.search(r"\bcore +kept\b", result.output) and "system prompt (pinned)" in result.output  # tier, decision
    assert "kept:" in result.output and "dropped:" in result.output


def test_clear_errors(tmp_path: Path) -> None:
    missing = runner.invoke(app, ["build", str(tmp_path / "nope.json")])
    assert missing.exit_code == 2 and "cannot read" in missing.output
    tiny = runner.invoke(app, ["build", str(FIXTURE), "--budget", "100", "--out", str(tmp_path / "c.json")])
    assert tiny.exit_code == 2 and "context cannot fit" in tiny.output
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    not_record = runner.invoke(app, ["explain", str(bad)])
    assert not_record.exit_code == 2 and "is not a decision record" in not_record.output


def test_heatmap_takes_index_and_build_table_separates_the_system_prompt(tmp_path: Path, data_dir: Path) -> None:
    tau = data_dir / "tau_bench" / "gpt-4o-airline.json"
    out = tmp_path / "hm.png"
    result = runner.invoke(app, ["heatmap", str(tau), "--index", "3", "--out", str(out), "--top", "5"])
    assert result.exit_code == 0, result.output
    assert "run 3 of 200" in " ".join(result.output.split())
    assert out.read_bytes()[:4] == b"\x89PNG"
    swe = Path(__file__).resolve().parents[2] / "fixtures" / "sympy__sympy-20590.json"
    built = runner.invoke(app, ["build", str(swe), "--budget", "4000", "--out", str(tmp_path / "c.json"),
                                     "--record", str(tmp_path / "r.json")])
    assert built.exit_code == 0, built.output
    assert "system prompt (pinned)" in built.output
    full = runner.invoke(app, ["explain", str(tmp_path / "r.json"), "--full", "--limit", "3"])
    assert full.exit_code == 0 and "task statement" in full.output


def test_build_compact_and_explain_show_the_mode(tmp_path: Path) -> None:
    rec = tmp_path / "rec.json"
    args = ["build", str(FIXTURE), "--budget", "8000", "--out", str(tmp_path / "c.json"), "--record", str(rec)]
    first = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert "mode: full rebuild — first build: no previous context to append to" in first.output
    compacted = runner.invoke(app, [*args, "--compact", "--target", "0.4"], env={"COLUMNS": "200"})
    assert compacted.exit_code == 0, compacted.output
    assert "mode: compacted, target 3,200 tokens — compaction requested by the caller" in compacted.output
    record = DecisionRecord.from_json(rec.read_text())
    assert (record.mode, record.target) == ("compacted", 3200) and record.tokens_after <= 3200
    explained = runner.invoke(app, ["explain", str(rec), "--limit", "1"], env={"COLUMNS": "200"})
    assert "mode: compacted" in explained.output
    assert "prefix: 0 tokens shared exactly with the previous request" in explained.output
    assert "appended steps" in explained.output  # the room left for appends, as a reserve


def test_replay_shows_modes_prefix_and_cost_against_the_full_history() -> None:
    result = runner.invoke(app, ["replay", str(FIXTURE), "--budget", "8000"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[1].split() == ["req", "history", "mode", "sent", "cached", "share", "cost@0.1", "vs", "full", "@0.5"]
    total = lines[-1]
    assert total.startswith("TOTAL requests=96 ") and "compacted=" in total and "appended=" in total
    ratio = float(total.split("cost@0.1=")[1].split("(")[1].split("×")[0])
    assert ratio < 0.5  # issue 10's target on this run: below half the full history's cost at p = 0.1
    rebuilt = runner.invoke(app, ["replay", str(FIXTURE), "--budget", "8000", "--always-rebuild", "--quiet"])
    assert rebuilt.exit_code == 0 and "appended=0 compacted=0 full_rebuild=96" in rebuilt.output
    assert float(rebuilt.output.split("cost@0.1=")[1].split("(")[1].split("×")[0]) > 1.0


def test_explain_says_first_why_an_archived_message_was_kept(tmp_path: Path, data_dir: Path) -> None:
    from relevance_memory.pipeline.select import ROOM_LEFT

    assert ROOM_LEFT.startswith("room left:")  # what explain looks for
    rec = tmp_path / "rec.json"
    tau = data_dir / "tau_bench" / "gpt-4o-airline.json"
    built = runner.invoke(app, ["build", str(tau), "--index", "0", "--budget", "4000", "--out", str(tmp_path / "c.json"),
                                "--record", str(rec)])
    assert built.exit_code == 0, built.output
    record = DecisionRecord.from_json(rec.read_text())
    spare = [d for d in record.messages if d.note == ROOM_LEFT]
    assert spare and all(d.decision == "kept" and d.score is not None and d.score <= 2 for d in spare)
    result = runner.invoke(app, ["explain", str(rec), "--decision", "kept", "--full"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert f"{spare[0].id} " in text and "room left: kept verbatim from the archive" in text

"""Issue 25 item 4: the CLI speaks plainly. ``relmem build`` says what a user acts on (tokens in
and out, what was kept, summarised and cut, why, where the budget went) with counts that add
up; the rubric's fingerprint and routine notes wait for ``--verbose``; ``explain`` fits 80
columns with a tier column; no advice names an option the CLI does not have."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from relevance_memory import DecisionRecord
from relevance_memory._cli.build import archive_reasons, score_counts
from relevance_memory._cli.explain import explained_reason
from relevance_memory.cli import app
from relevance_memory.testing import FixedScorer

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "django__django-15280.json"
runner = CliRunner()
MERGED = "merged into one level-2 summary"


def _build(tmp_path: Path, *args: str, run: Path = FIXTURE, budget: str = "8000") -> tuple[str, DecisionRecord]:
    record = tmp_path / "r.json"
    result = runner.invoke(app, ["build", str(run), "--budget", budget, "--out", str(tmp_path / "c.json"),
                                 "--record", str(record), *args], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    return result.output, DecisionRecord.from_json(record.read_bytes())


def _plain(output: str) -> str:
    return " ".join(output.split())


def test_build_says_in_and_out_kept_summarised_cut_why_and_the_budget(tmp_path: Path) -> None:
    output, rec = _build(tmp_path)
    text = _plain(output)
    assert "38,889" in text and "7,629 (budget 8,000)" in text  # tokens in / out
    counts = rec.decision_counts()
    assert f"summarised │ │ {counts['summarised']} msgs" in text
    assert "sent cut (restorable) │ │ 2 excerpts" in text
    assert "why not verbatim: 80 over budget (core tier), 46 superseded by a newer message, " \
           "46 over budget (working tier)" in text
    assert sum(archive_reasons(rec).values()) == counts["summarised"] + counts["dropped"]
    assert "budget: reply priming 3 · system prompt 111 · goal block 59 · working memory 2,696 · core tier 1,465 · " \
           "summaries 3,295 · unused 371 tokens" in text
    assert max(len(line) for line in output.splitlines()) <= 80


def test_the_scores_line_adds_up_and_the_rubric_waits_for_verbose(tmp_path: Path) -> None:
    output, rec = _build(tmp_path)
    line = next(x for x in output.splitlines() if x.startswith("scores:"))
    assert line == "scores: 184 offline, 9 recent, 1 pinned"
    assert "rubric" not in output and "wordllama" not in output  # the fingerprint is the cache's key, not news
    verbose, _ = _build(tmp_path, "--verbose")
    assert f"rubric:{rec.rubric_version}" in "".join(verbose.split())  # folded at 80 columns


def test_prefiltered_messages_are_counted_on_the_scores_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A costly scorer (an LLM) sees only the prefilter's top 50 chains: the rest are counted too."""
    import relevance_memory.scoring._choice as choice

    monkeypatch.setattr(choice, "resolve_scorer", lambda *a, **k: (FixedScorer(3), "fixed (a test scorer)"))
    output, rec = _build(tmp_path, "--scorer", "llm")
    counts = score_counts(rec)
    assert counts["prefiltered"] > 0 and sum(counts.values()) == rec.messages_before == 194
    line = next(x for x in output.splitlines() if x.startswith("scores:"))
    shown = {name: int(n.replace(",", "")) for n, name in re.findall(r"(\d[\d,]*) (\w+)", line)}
    assert shown == counts and sum(shown.values()) == 194


def test_a_routine_merge_is_a_note_for_verbose_and_a_fault_stays_a_warning(tmp_path: Path) -> None:
    output, rec = _build(tmp_path, "--model", "claude-sonnet-4-5", budget="4000")
    assert any(MERGED in w for w in rec.warnings)  # the record keeps it
    assert MERGED not in output
    text = _plain(output)
    assert "warning: token counts are approximate" in text  # a real caveat stays a warning
    verbose, _ = _build(tmp_path, "--model", "claude-sonnet-4-5", "-v", budget="4000")
    assert "note: level-1 summaries exceed" in _plain(verbose) and "warning: level-1" not in verbose


def test_no_advice_names_an_option_the_cli_lacks(tmp_path: Path) -> None:
    output, rec = _build(tmp_path, "--model", "claude-sonnet-4-5")
    assert any("tokenizer=" in w for w in rec.warnings)  # the library's advice, for library users
    text = _plain(output)
    assert "tokenizer=" not in text
    assert "pass --model with an OpenAI model name" in text
    explained = runner.invoke(app, ["explain", str(tmp_path / "r.json"), "--limit", "1"], env={"COLUMNS": "80"})
    assert "tokenizer=" not in explained.output and "pass --model" in _plain(explained.output)


def test_explain_fits_80_columns_with_a_tier_column_and_whole_reasons(tmp_path: Path) -> None:
    _, rec = _build(tmp_path)
    record = tmp_path / "r.json"
    result = runner.invoke(app, ["explain", str(record), "--limit", "6"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(len(line) for line in lines) <= 80
    header = next(line for line in lines if line.startswith("id "))
    assert re.fullmatch(r"id +type +tokens +score +tier +decision", header)
    rows = lines[lines.index(header) + 3: lines.index(next(x for x in lines if x.startswith("mode:")))]
    for d in rec.messages[:6]:
        start = next(k for k, line in enumerate(rows) if line.startswith(f"{d.id} "))
        assert re.search(rf"\b{d.tier} +{re.escape(d.decision)}", rows[start]), rows[start]
        reason = []
        for line in rows[start + 1:]:
            if not line.startswith("    "):
                break
            reason.append(line.strip())
        assert " ".join(reason) == explained_reason(d), d.id  # whole, wrapped, not cut
    assert "restorable from the store" not in "\n".join(rows)  # the routine note, said once below
    assert "summarised and dropped messages stay in the store, restorable by id" in lines
    cut = runner.invoke(app, ["explain", str(record), "--limit", "6", "--one-line"], env={"COLUMNS": "80"})
    assert "…" in cut.output and len(cut.output.splitlines()) < len(lines)
    verbose = runner.invoke(app, ["explain", str(record), "--limit", "6", "-v"], env={"COLUMNS": "80"})
    assert "in a summary, original restorable from the store" in _plain(verbose.output)


def test_explain_keeps_the_wide_table_from_120_columns(tmp_path: Path) -> None:
    _build(tmp_path)
    result = runner.invoke(app, ["explain", str(tmp_path / "r.json"), "--limit", "3"], env={"COLUMNS": "160"})
    header = next(line for line in result.output.splitlines() if line.lstrip().startswith("id "))
    assert re.search(r"\bstep +type +tokens +score +tier +decision +reason", header)
    assert "3 offline" in result.output  # the score's source beside it
    assert json.loads((tmp_path / "c.json").read_text())[0]["role"] == "system"


def test_a_compaction_says_over_its_target_not_over_budget(tmp_path: Path) -> None:
    output, rec = _build(tmp_path, "--compact", budget="16000")
    assert rec.target is not None and rec.budget_breakdown is not None and rec.budget_breakdown.unused > 0
    text = _plain(output)
    assert "over the compaction target (core tier)" in text and "over budget" not in text

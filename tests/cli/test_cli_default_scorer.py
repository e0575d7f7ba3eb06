"""`relmem build` and `relmem eval` run the offline scorer a library user's manager runs
(lexical + embedding), and without the bundled model say once, in one line, that scoring
is lexical."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from relevance_memory import DecisionRecord, MemoryConfig, RelevanceMemoryManager, load_transcript
from relevance_memory.cli import app
from relevance_memory.scoring import _embedding, _semantic

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "django__django-15280.json"
runner = CliRunner()


def _library_build(budget: int) -> tuple[list[dict[str, object]], DecisionRecord]:
    config = MemoryConfig.create(model="gpt-4o", keep_recent=4, max_input_tokens=budget, on_invalid="raise",
                                 cache_policy={"target_fraction": 0.5})
    memory = RelevanceMemoryManager(config)
    memory.extend(load_transcript(FIXTURE).messages)
    built = memory.build_context()
    return built.messages, built.record


def test_build_uses_the_managers_default_scorer(tmp_path: Path) -> None:
    assert _embedding.default_embedder() is not None  # wordllama is a dependency
    out, rec = tmp_path / "ctx.json", tmp_path / "rec.json"
    result = runner.invoke(app, ["build", str(FIXTURE), "--budget", "8000", "--out", str(out), "--record", str(rec)])
    assert result.exit_code == 0, result.output
    record = DecisionRecord.from_json(rec.read_text())
    messages, expected = _library_build(8000)
    # before: the CLI scored with the lexical scorer alone (rubric "offline-v2")
    assert record.rubric_version == expected.rubric_version
    assert record.rubric_version.startswith("offline-v2+wordllama")
    assert json.loads(out.read_text()) == messages
    assert [(d.id, d.score, d.decision) for d in record.messages] == [
        (d.id, d.score, d.decision) for d in expected.messages
    ]


def test_build_without_the_model_is_lexical_and_says_so_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_embedding, "_cached", {})
    monkeypatch.setattr(_embedding, "_package_dir", lambda package: None)
    monkeypatch.setattr(_semantic, "_WARNED_PROCESS", [])
    rec = tmp_path / "rec.json"
    result = runner.invoke(app, ["build", str(FIXTURE), "--budget", "8000", "--out", str(tmp_path / "c.json"),
                                 "--record", str(rec)])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert text.count("semantic relevance off") == 1
    assert "warning: semantic relevance off: the 'wordllama' package is not installed" in text
    assert "RuntimeWarning" not in text
    record = DecisionRecord.from_json(rec.read_text())
    assert record.rubric_version == "offline-v2" and record.embedder == ""


def test_eval_without_the_model_says_once_that_offline_is_lexical(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   data_dir: Path) -> None:
    monkeypatch.setattr(_embedding, "_cached", {})
    monkeypatch.setattr(_embedding, "_package_dir", lambda package: None)
    monkeypatch.setattr(_semantic, "_WARNED_PROCESS", [])
    result = runner.invoke(app, ["eval", "longmemeval", str(data_dir / "longmemeval" / "oracle"), "--limit", "2",
                                 "--budgets", "2000", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert text.count("semantic relevance off") == 1
    assert "'offline' below is the lexical scorer alone" in text and "RuntimeWarning" not in text
    assert "Traceback" not in result.output


def test_build_lexical_is_the_word_rules_alone(tmp_path: Path) -> None:
    rec = tmp_path / "rec.json"
    result = runner.invoke(app, ["build", str(FIXTURE), "--budget", "8000", "--scorer", "lexical",
                                 "--out", str(tmp_path / "c.json"), "--record", str(rec)])
    assert result.exit_code == 0, result.output
    assert " ".join(result.output.split()).startswith("scorer: lexical (the offline word rules alone")
    record = DecisionRecord.from_json(rec.read_text())
    assert record.rubric_version == "offline-v2"

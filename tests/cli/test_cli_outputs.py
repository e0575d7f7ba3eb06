"""Issue 13 item 16 (CLI): standard JSON, the record next to --out, benchmark files pointed to
``relmem eval``, a missing plot extra named."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from relevance_memory.cli import app

runner = CliRunner()
FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "django__django-15280.json"


def _strict(text: str) -> object:
    def refuse(constant: str) -> None:
        raise ValueError(f"non-standard JSON constant {constant}")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("out", ["deep/dir/ctx.json", "ctx.json", "ctx.context.json"])
def test_the_record_goes_next_to_out_named_after_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, out: str) -> None:
    """Named after --out (ctx.json → ctx.record.json, ctx.context.json → ctx.record.json): builds of
    one run at several budgets no longer overwrite one <transcript>.record.json (issue 40 item 6)."""
    monkeypatch.chdir(tmp_path)
    work = tmp_path / "elsewhere"
    work.mkdir()
    target = work / out
    result = runner.invoke(app, ["build", str(FIXTURE), "--budget", "8000", "--out", str(target)])
    assert result.exit_code == 0, result.output
    record = target.parent / "ctx.record.json"
    assert record.is_file() and f"decisionrecord→{record}" in "".join(result.output.split())  # rich wraps the path
    assert not (tmp_path / "django__django-15280.record.json").exists()
    assert not (target.parent / "django__django-15280.record.json").exists()
    _strict(record.read_text())


def test_heatmap_field_json_is_standard_json(tmp_path: Path) -> None:
    field = tmp_path / "field.json"
    result = runner.invoke(app, ["heatmap", str(FIXTURE), "--out", str(tmp_path / "map.png"), "--top", "5",
                                 "--field-json", str(field)])
    assert result.exit_code == 0, result.output
    data = _strict(field.read_text())
    assert isinstance(data, dict) and data["config"]["half_life_steps"]["system"] is None


def test_heatmap_without_matplotlib_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    result = runner.invoke(app, ["heatmap", str(FIXTURE), "--out", str(tmp_path / "map.png"), "--top", "5"])
    assert result.exit_code == 2
    assert "relevance-memory[plot]" in result.output
    assert not (tmp_path / "map.png").exists()


@pytest.mark.data
def test_benchmark_files_point_to_relmem_eval(data_dir: Path) -> None:
    locomo = data_dir / "locomo" / "locomo10.json"
    lme = sorted((data_dir / "longmemeval" / "oracle").glob("*.json"))[0]
    for path, kind in ((locomo, "locomo"), (lme, "longmemeval")):
        result = runner.invoke(app, ["build", str(path), "--budget", "4000"])
        assert result.exit_code == 2
        assert f"relmem eval {kind}" in " ".join(result.output.split())
        assert "benchmark file" in result.output

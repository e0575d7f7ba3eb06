"""``relmem build --scorer auto|llm|offline``: which scorer ran is always said clearly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest
from llm_fakes import content, requested_ids, scripted_transport
from typer.testing import CliRunner

from relevance_memory import LLMScorer
from relevance_memory.cli import app

runner = CliRunner()


@pytest.fixture
def transcript(tmp_path: Path) -> Path:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a report-writing agent."},
        {"role": "user", "content": "Write the quarterly report. It must be in French and at most 2 pages."},
    ]
    for n in range(4):
        messages.append({"role": "assistant", "content": f"Step {n}: looked at figure set {n} " + "x " * 30})
        messages.append({"role": "user", "content": f"ok, continue with part {n}"})
    messages.append({"role": "user", "content": "Now draft section 1."})
    path = tmp_path / "run.json"
    path.write_text(json.dumps(messages), encoding="utf-8")
    return path


def build(transcript: Path, *args: str) -> Any:
    out = transcript.parent
    return runner.invoke(
        app,
        ["build", str(transcript), "--budget", "260", "--keep-recent", "1",
         "--out", str(out / "ctx.json"), "--record", str(out / "rec.json"), *args],
    )


def test_offline_scorer_is_named(transcript: Path) -> None:
    result = build(transcript, "--scorer", "offline")
    assert result.exit_code == 0, result.output
    assert "scorer: offline" in result.output


def test_auto_without_endpoint_says_why_it_is_offline(transcript: Path) -> None:
    result = build(transcript)
    assert result.exit_code == 0, result.output
    assert "offline (no LLM endpoint" in " ".join(result.output.split())


def test_llm_without_endpoint_fails_clearly(transcript: Path) -> None:
    result = build(transcript, "--scorer", "llm")
    assert result.exit_code == 2
    assert "OPENAI_API_KEY" in result.output


def test_bad_scorer_choice(transcript: Path) -> None:
    result = build(transcript, "--scorer", "gpt")
    assert result.exit_code == 2


def test_llm_scorer_usage_in_table(transcript: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def partial(body: dict[str, Any]) -> dict[str, Any]:
        ids = requested_ids(body)
        return content(json.dumps([{"id": i, "reason": "r", "score": 2} for i in ids[:-1]]))

    transport = scripted_transport([partial, content("[]")])

    def client(self: LLMScorer) -> openai.OpenAI:
        return openai.OpenAI(api_key="sk-test", base_url=self.base_url, max_retries=0,
                             http_client=httpx2.Client(transport=transport))

    monkeypatch.setattr(LLMScorer, "_sync_client", client)
    monkeypatch.setenv("RELMEM_SCORER_MODE", "json")
    result = build(transcript, "--base-url", "http://llm.test/v1", "--scorer-model", "tiny")
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "scorer: llm (tiny at http://llm.test/v1" in text
    assert "LLM retries / fallbacks" in text and "1 / 1 msgs" in text
    record = json.loads((transcript.parent / "rec.json").read_text())
    assert record["scorer"] == "llm" and record["rubric_version"] == "score_v1"
    assert record["usage"]["llm_calls"] == 2 and record["usage"]["fallbacks"] == 1

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
    assert "offline (deterministic, no network; no LLM endpoint asked for" in " ".join(result.output.split())


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
    assert "LLM retries / fallbacks" in text and "1 / 1 msg" in text
    record = json.loads((transcript.parent / "rec.json").read_text())
    assert record["scorer"] == "llm" and record["rubric_version"] == "score_v1"
    assert record["usage"]["llm_calls"] == 2 and record["usage"]["fallbacks"] == 1


def test_an_api_key_alone_sends_nothing_and_the_first_line_says_why(
    transcript: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 13 item 10: OPENAI_API_KEY in the environment never switches to the LLM."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-live-looking-key")

    def no_client(self: LLMScorer) -> openai.OpenAI:
        raise AssertionError("no LLM client may be built")

    monkeypatch.setattr(LLMScorer, "_sync_client", no_client)
    result = build(transcript)
    assert result.exit_code == 0, result.output
    first = " ".join(result.output.split("relmem build")[0].split())
    assert first == ("scorer: offline (deterministic, no network; an endpoint is configured, but sending the "
                     "transcript needs --scorer llm or RELMEM_SCORER=llm)")


def test_llm_options_reach_the_scorer(transcript: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[dict[str, Any]] = []

    def answer(body: dict[str, Any]) -> dict[str, Any]:
        return content(json.dumps({"scores": [{"id": i, "reason": "r", "score": 3} for i in requested_ids(body)]}))

    transport = scripted_transport([answer] * 20, seen=seen)

    def client(self: LLMScorer) -> openai.OpenAI:
        return openai.OpenAI(api_key="sk-test", base_url=self.base_url, max_retries=0,
                             http_client=httpx2.Client(transport=transport))

    monkeypatch.setattr(LLMScorer, "_sync_client", client)
    result = build(transcript, "--scorer", "llm", "--base-url", "http://llm.test/v1", "--scorer-model", "tiny",
                   "--timeout", "300", "--max-tokens", "100", "--batch-size", "2", "--context-length", "4096",
                   "--system-role", "user", "--scorer-mode", "json", "--response-format", "json_object")
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert text.startswith("scorer: llm (tiny at http://llm.test/v1, json mode, response_format json_object, "
                           "rubric score_v1, timeout 300 s, ≤2 messages per call; --scorer llm)")
    assert seen and all(len(requested_ids(b)) <= 2 and b["max_tokens"] <= 100 for b in seen)
    # the rubric opens the user message (instructor's JSON mode still adds its own schema message)
    assert all(b["messages"][-1]["role"] == "user" and b["messages"][-1]["content"].startswith("You rate how relevant")
               for b in seen)
    assert all(b["response_format"] == {"type": "json_object"} for b in seen)
    assert "scores: " in text and " llm" in text
    bad = build(transcript, "--scorer", "llm", "--base-url", "http://llm.test/v1", "--system-role", "root")
    assert bad.exit_code == 2 and "--system-role must be system or user" in bad.output


def test_rubric_eval_shows_the_judge_apart_and_the_offline_scorer_beside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from relevance_memory.evaluation import LabelledExample, LabelledMessage, LabelledSet

    labelled = LabelledSet(name="tiny", examples=[LabelledExample(
        id="q1", goal={"final": "What instrument does Melanie play?", "subtask": "What instrument does Melanie play?"},
        messages=[LabelledMessage(id="b1", role="user", content="We went camping."),
                  LabelledMessage(id="b2", role="user", content="I have played the violin for years.")],
        gold={"b1": 1, "b2": 5})])
    path = tmp_path / "set.json"
    labelled.save(path)

    def judge(body: dict[str, Any]) -> dict[str, Any]:
        return content(json.dumps({"scores": [{"id": i, "reason": "r", "score": 5 if i == "b2" else 1}
                                              for i in requested_ids(body)]}))

    transport = scripted_transport([judge] * 4)

    def client(self: LLMScorer) -> openai.OpenAI:
        return openai.OpenAI(api_key="sk-test", base_url=self.base_url, max_retries=0,
                             http_client=httpx2.Client(transport=transport))

    monkeypatch.setattr(LLMScorer, "_sync_client", client)
    result = runner.invoke(app, ["rubric", "eval", str(path), "--scorer", "llm:score_v2", "--base-url",
                                 "http://llm.test/v1", "--scorer-mode", "json", "--json", str(tmp_path / "m.json")])
    assert result.exit_code == 0, result.output
    text = result.output
    assert "AUROC · judge alone" in text and "AUROC · with fallbacks" in text and "replies parsed" in text
    reports = json.loads((tmp_path / "m.json").read_text())["reports"]
    assert [r["scorer"] for r in reports] == ["llm", "offline"] and reports[0]["rubric_version"] == "score_v2"
    # beside the judge, the default offline scorer: the lexical rules fused with the bundled embedding
    assert reports[1]["rubric_version"].startswith("offline-v2+wordllama-l2_supercat-256@")
    assert reports[0]["judge"]["auroc"] == 1.0 and reports[0]["parse_rate"] == 1.0 and reports[0]["llm_calls"] == 1

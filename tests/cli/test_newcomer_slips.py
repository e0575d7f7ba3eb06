"""Issue 23 item 5, the smaller slips a new user hit, pinned one by one: a tools schema larger
than the budget, runs where every build fails (heatmap, replay, eval), help and output text
whose square brackets rich ate, an empty ``messages``, the heat map's default path, the
encoding ``relmem eval`` counts in (``explain`` in 80 columns: test_plain_cli.py)."""

from __future__ import annotations

import asyncio
import importlib
import json
import os
from pathlib import Path
from typing import Any

import openai
import pytest
import typer
from rich.text import Text
from typer.testing import CliRunner

from relevance_memory import (
    ConfigError,
    InvalidMessageError,
    RelevanceMemoryManager,
    TiktokenCounter,
    manage,
    tools_tokens,
)
from relevance_memory._tokenizer import REPLY_PRIMING_TOKENS
from relevance_memory.cli import app
from relevance_memory.evaluation import load_dataset

try:  # openai>=3 talks through httpx2; older versions through httpx
    import httpx2 as httpx
except ImportError:  # pragma: no cover
    import httpx  # type: ignore[no-redef]

heatmap_module = importlib.import_module("relevance_memory._cli.heatmap")  # the package's name is the command
FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "django__django-15280.json"
runner = CliRunner()
CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Rename the file; never touch tests."}]
TOOLS = [
    {"type": "function", "function": {"name": f"tool_{n}", "description": "Looks a record up by its id. " * 40,
                                      "parameters": {"type": "object", "properties": {"id": {"type": "string"}}}}}
    for n in range(30)
]


def _plain(output: str) -> str:
    return " ".join(output.split())


# --------------------------------------------------------------------------- 1. tools larger than the budget
def test_a_tools_schema_larger_than_the_budget_names_both_numbers() -> None:
    schema = tools_tokens(TiktokenCounter("o200k_base"), TOOLS)
    assert schema > 8000  # the case of the issue: a schema larger than the whole budget
    memory = RelevanceMemoryManager(max_input_tokens=8000)
    memory.extend(CHAT)
    with pytest.raises(ConfigError) as info:
        memory.build_context(tools=TOOLS)
    assert str(info.value).startswith(f"the tools' schema takes {schema:,} tokens, more than the budget of 8,000")
    with pytest.raises(ConfigError, match=f"takes {schema:,} tokens, all of the budget of {schema:,}"):
        memory.build_context(budget=schema, tools=TOOLS)
    with pytest.raises(ConfigError, match=r"^budget must be a positive number of tokens, got 0$"):
        memory.build_context(budget=0)  # no tools: the budget itself is the problem


def test_the_managed_client_names_the_tools_schema_and_sends_nothing() -> None:
    """It raised "budget must be a positive number of tokens, got -4441": the session took the
    schema from the budget itself; now the manager does, with words for it."""
    schema = tools_tokens(TiktokenCounter("o200k_base"), TOOLS)
    sent: list[Any] = []

    def endpoint(request: Any) -> Any:
        sent.append(request)
        raise AssertionError("no request may be sent")

    client = manage(openai.OpenAI(api_key="k", http_client=httpx.Client(transport=httpx.MockTransport(endpoint))),
                    max_input_tokens=8000, model="gpt-4o")
    with pytest.raises(ConfigError, match=f"^the tools' schema takes {schema:,} tokens, more than the budget of 8,000"):
        client.chat.completions.create(model="gpt-4o", messages=CHAT, tools=TOOLS)

    async def main() -> None:
        http = httpx.AsyncClient(transport=httpx.MockTransport(endpoint))
        aclient = manage(openai.AsyncOpenAI(api_key="k", http_client=http), max_input_tokens=8000, model="gpt-4o")
        with pytest.raises(ConfigError, match=f"takes {schema:,} tokens, more than the budget of 8,000"):
            await aclient.chat.completions.create(model="gpt-4o", messages=CHAT, tools=TOOLS)

    asyncio.run(main())
    assert sent == []


# --------------------------------------------------------------------------- 4. messages=[]
def test_the_managed_client_refuses_an_empty_history_before_any_request() -> None:
    bodies: list[dict[str, Any]] = []

    def endpoint(request: Any) -> Any:
        bodies.append(json.loads(request.content))
        return httpx.Response(200, json={"id": "c", "object": "chat.completion", "created": 0, "model": "m", "choices": [
            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "ok"}}]})

    client = manage(openai.OpenAI(api_key="k", http_client=httpx.Client(transport=httpx.MockTransport(endpoint))),
                    max_input_tokens=4000)
    client.chat.completions.create(model="gpt-4o", messages=CHAT)
    empties: list[Any] = [[], (), iter([])]
    for empty in empties:
        with pytest.raises(InvalidMessageError, match=r"^messages is empty: a request needs at least one message"):
            client.chat.completions.create(model="gpt-4o", messages=empty)
    with pytest.raises(InvalidMessageError, match=r"^messages must be a list of chat messages, got dict"):
        client.chat.completions.create(model="gpt-4o", messages=CHAT[1])
    with pytest.raises(InvalidMessageError, match="messages is empty"):
        client.chat.completions.stream(model="gpt-4o", messages=[])
    assert len(bodies) == 1  # only the first, valid request went out
    assert len(client.memory.messages) == 3  # and the memory was not reset by the empty history

    async def main() -> None:
        aclient = manage(openai.AsyncOpenAI(api_key="k", http_client=httpx.AsyncClient(
            transport=httpx.MockTransport(endpoint))), max_input_tokens=4000)
        with pytest.raises(InvalidMessageError, match="messages is empty"):
            await aclient.chat.completions.create(model="gpt-4o", messages=[])
        with pytest.raises(InvalidMessageError, match="messages is empty"):
            aclient.chat.completions.stream(model="gpt-4o", messages=[])

    asyncio.run(main())
    assert len(bodies) == 1


# --------------------------------------------------------------------------- 2. every build fails
def _small_run(tmp_path: Path) -> Path:
    run: list[dict[str, Any]] = [{"role": "system", "content": "You are a careful coding agent. " * 20},
           {"role": "user", "content": "Fix the failing test in utils/dates.py."}]
    for n in range(4):
        call = {"id": f"c{n}", "type": "function", "function": {"name": "bash", "arguments": f'{{"command": "ls {n}"}}'}}
        run += [{"role": "assistant", "content": f"Step {n}.", "tool_calls": [call]},
                {"role": "tool", "tool_call_id": f"c{n}", "content": f"file_{n}.py"}]
    run.append({"role": "assistant", "content": "Done."})
    path = tmp_path / "run.json"
    path.write_text(json.dumps(run))
    return path


def test_heatmap_where_every_build_fails_is_an_error_not_a_map(tmp_path: Path) -> None:
    run = _small_run(tmp_path)
    out = tmp_path / "map.png"
    result = runner.invoke(app, ["heatmap", str(run), "--budget", "20", "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert "every one of the 5 builds failed at --budget 20" in _plain(result.output)
    assert "no heat map written" in result.output and not out.exists()


def test_heatmap_says_which_builds_failed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Builds that do not fit are counted in the output and the map's title (the columns show
    strengths observed without a build)."""
    real = RelevanceMemoryManager.build_context
    calls = {"n": 0}

    def every_other(self: RelevanceMemoryManager, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] % 2 == 0:
            from relevance_memory import ContextOverflowError

            raise ContextOverflowError(budget=8000, pinned_tokens=100, newest_step_tokens=9000)
        return real(self, **kwargs)

    monkeypatch.setattr(RelevanceMemoryManager, "build_context", every_other)
    out = tmp_path / "map.png"
    result = runner.invoke(app, ["heatmap", str(_small_run(tmp_path)), "--out", str(out), "--top", "5"])
    assert result.exit_code == 0, result.output
    text = _plain(result.output)
    assert "warning: 2 of 5 builds did not fit the budget (first at step 2: context cannot fit" in text
    assert f"heat map → {out}" in text and out.is_file()


def test_replay_names_the_request_that_failed(tmp_path: Path) -> None:
    result = runner.invoke(app, ["replay", str(_small_run(tmp_path)), "--budget", "20", "--quiet"])
    assert result.exit_code == 2
    assert "error: request 1 of 5 (message 2) could not be built: context cannot fit" in _plain(result.output)
    assert "TOTAL" not in result.output


def _locomo(tmp_path: Path) -> Path:
    path = tmp_path / "locomo.json"
    turns = [{"speaker": "Ann" if n % 2 == 0 else "Bob", "dia_id": f"D1:{n + 1}",
              "text": text} for n, text in enumerate([
                  "I adopted a puppy named Biscuit.", "What breed is Biscuit?", "A beagle, 10 weeks old.",
                  "私たちは東京で会いました。", "Let's walk Biscuit on Saturday at 9:30."])]
    path.write_text(json.dumps([{
        "sample_id": "conv-x",
        "conversation": {"speaker_a": "Ann", "speaker_b": "Bob", "session_1_date_time": "1:56 pm on 8 May, 2023",
                         "session_1": turns},
        "qa": [{"question": "What is the puppy's name?", "answer": "Biscuit", "evidence": ["D1:1"], "category": 4},
               {"question": "When is the walk?", "answer": "Saturday", "evidence": ["D1:5"], "category": 4}],
    }]))
    return path


def test_eval_where_every_manager_build_fails_is_an_error(tmp_path: Path) -> None:
    out = tmp_path / "ev"
    result = runner.invoke(app, ["eval", "locomo", str(_locomo(tmp_path)), "--budgets", "1", "--out", str(out)])
    assert result.exit_code == 2, result.output
    text = _plain(result.output)
    assert "warning: offline at budget 1: 2 of 2 builds failed, counted as misses (first: context cannot fit" in text
    assert "every one of the manager's 2 builds failed: its recall above is not a measurement" in text
    partial = runner.invoke(app, ["eval", "locomo", str(_locomo(tmp_path)), "--budgets", "1,2000", "--out", str(out)])
    assert partial.exit_code == 0, partial.output  # the 2,000-token column is a measurement
    assert "offline at budget 1: 2 of 2 builds failed" in _plain(partial.output)
    assert "at budget 2,000" not in partial.output


# --------------------------------------------------------------------------- 6. one encoding, from --model
@pytest.mark.parametrize(("model", "encoding"), [(None, "o200k_base"), ("gpt-4", "cl100k_base")])
def test_eval_counts_in_the_models_encoding_and_says_so(tmp_path: Path, model: str | None, encoding: str) -> None:
    path, out = _locomo(tmp_path), tmp_path / "ev"
    result = runner.invoke(app, ["eval", "locomo", str(path), "--budgets", "2000", "--out", str(out),
                                 *(["--model", model] if model else [])])
    assert result.exit_code == 0, result.output
    assert f"tokens counted in {encoding} ({model or 'gpt-4o'})" in _plain(result.output)
    payload = json.loads((out / "locomo.json").read_text())
    assert payload["config"]["encoding"] == encoding and payload["config"]["model"] == (model or "gpt-4o")
    turns = load_dataset("locomo", path).conversations[0].turns
    counter = TiktokenCounter(encoding)  # type: ignore[arg-type]
    expected = REPLY_PRIMING_TOKENS + sum(counter.count_message({"role": t.role, "content": t.text}) for t in turns)
    assert payload["summary"]["overall"]["full"]["0"]["tokens"] == expected


def test_build_and_replay_say_the_encoding(tmp_path: Path) -> None:
    run = _small_run(tmp_path)
    built = runner.invoke(app, ["build", str(run), "--out", str(tmp_path / "c.json"), "--model", "gpt-4"],
                          env={"COLUMNS": "120"})
    assert built.exit_code == 0, built.output
    assert "tokens (cl100k_base)" in built.output
    replayed = runner.invoke(app, ["replay", str(run), "--budget", "4000"], env={"COLUMNS": "200"})
    assert replayed.exit_code == 0, replayed.output
    assert "budget 4,000 o200k_base tokens" in replayed.output and replayed.output.rstrip().endswith("encoding=o200k_base")


# --------------------------------------------------------------------------- 3. square brackets
def _help_texts() -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []

    def walk(command: Any, path: str) -> None:
        found.append((path, command.help or ""))
        found.extend((f"{path} {p.name}", getattr(p, "help", None) or "") for p in command.params)
        for name, sub in (getattr(command, "commands", None) or {}).items():
            walk(sub, f"{path} {name}")

    walk(typer.main.get_command(app), "relmem")
    return found


def test_no_help_text_loses_square_brackets_to_rich_markup() -> None:
    """typer renders help as rich markup: ``relevance-memory[minilm]`` showed as
    ``relevance-memory``. Every help text must render as written (a literal ``[`` escaped)."""
    texts = _help_texts()
    assert len(texts) > 100  # every command and option was walked
    eaten = [(where, text) for where, text in texts if Text.from_markup(text).plain != text.replace("\\[", "[")]
    assert eaten == []
    shown = runner.invoke(app, ["build", "--help"], env={"COLUMNS": "250"})
    assert "needs the [minilm] extra" in shown.output


def test_every_help_reads_whole_in_80_columns() -> None:
    """Typer cuts a word wider than its help column with "…" (``'relevance-memory[min…``,
    ``(CachePolicy.target_f…``, the categories' default): no help may lose words at 80 columns."""
    commands = sorted({where.split(" ", 1)[1].rsplit(" ", 1)[0] for where, _ in _help_texts() if " " in where})
    assert {"build", "eval locomo", "rubric compare"} <= set(commands)
    for command in ["", *commands]:
        shown = runner.invoke(app, [*command.split(), "--help"], env={"COLUMNS": "80"})
        assert shown.exit_code == 0, shown.output
        assert "…" not in shown.output, (command, [line for line in shown.output.splitlines() if "…" in line])


def test_brackets_in_paths_goals_and_reasons_are_printed_as_given(tmp_path: Path) -> None:
    """Output went through rich markup too: ``run[1].json`` printed as ``run.json``, a goal
    ``list[int]`` lost ``[int]``, and a stray ``[/]`` would raise a MarkupError."""
    run = tmp_path / "run[1].json"
    run.write_text(json.dumps([{"role": "user", "content": "Type the helper as list[int] [/] please."},
                               {"role": "assistant", "content": "ok"}]))
    record = tmp_path / "r[1].json"
    result = runner.invoke(app, ["build", str(run), "--goal", "type it as dict[str, int] [/]", "--out",
                                 str(tmp_path / "c[1].json"), "--record", str(record)], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    assert f"relmem build {run} (openai" in result.output
    assert "final goal: type it as dict[str, int] [/]" in result.output
    assert f"decision record → {record}" in result.output
    explained = runner.invoke(app, ["explain", str(record)], env={"COLUMNS": "250"})
    assert explained.exit_code == 0, explained.output
    missing = runner.invoke(app, ["explain", str(tmp_path / "none[x].json")])
    assert missing.exit_code == 2 and f"cannot read {tmp_path / 'none[x].json'}" in _plain(missing.output)


# --------------------------------------------------------------------------- 5. where the heat map goes
def test_heatmap_writes_next_to_the_run_and_says_where(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    run = _small_run(tmp_path)
    result = runner.invoke(app, ["heatmap", str(run), "--top", "5"], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    target = tmp_path / "run-heatmap.png"
    assert target.is_file() and list(elsewhere.iterdir()) == []
    assert f"heat map → {target} (run.json: " in result.output


def test_heatmap_next_to_a_read_only_run_asks_for_out_before_replaying(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = _small_run(tmp_path)
    monkeypatch.setattr(heatmap_module.os, "access", lambda path, mode: mode != os.W_OK)  # a read-only data folder
    monkeypatch.setattr(heatmap_module, "replay_strengths", None)  # never reached
    result = runner.invoke(app, ["heatmap", str(run)])
    assert result.exit_code == 2
    assert f"cannot write the heat map next to {run} (the folder {tmp_path} is not writable); pass --out" in _plain(
        result.output)


# --------------------------------------------------------------------------- 7. explain in 80 columns
# moved to tests/cli/test_plain_cli.py (issue 25 item 4: the reason under each row, not a narrow column)


# --------------------------------------------------------------------------- found trying the CLI in 80 columns
def test_rubric_metrics_name_the_rubric_whole_in_80_columns(tmp_path: Path) -> None:
    """The column header was the rubric's full version (embedder fingerprint and all), cut to
    ``offline-v2+wordllama-l2_supercat-25…``; now its name, folded rather than cut."""
    labelled = tmp_path / "labelled.json"
    made = runner.invoke(app, ["rubric", "build", "locomo", str(_locomo(tmp_path)), "--out", str(labelled)])
    assert made.exit_code == 0, made.output
    for args in (["eval", str(labelled)], ["compare", str(labelled), "offline", "offline"]):
        result = runner.invoke(app, ["rubric", *args], env={"COLUMNS": "80"})
        assert result.exit_code == 0, result.output
        assert "…" not in result.output and "AUROC · judge alone" in result.output
        assert "offline-v2" in result.output and "@" not in result.output.split("examples / messages")[0]


def test_explain_of_a_context_file_points_to_the_record(tmp_path: Path) -> None:
    context = tmp_path / "run.context.json"
    context.write_text(json.dumps(CHAT))
    result = runner.invoke(app, ["explain", str(context)])
    assert result.exit_code == 2
    assert (f"{context} is a JSON list (a context written by relmem build?), not a decision record; pass the "
            "<name>.record.json that relmem build printed") in _plain(result.output)

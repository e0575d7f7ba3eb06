"""Issue 40, a newcomer's trial of the command line, pinned one by one: ``explain --limit``
below 0, files that are not JSON / empty / not a record or labelled set, ``eval`` options out
of range, an unknown LoCoMo category, an orphan tool message in CLI words (``--repair``, the
message's place in the file), the reply priming named when there is no system prompt, the
record's default path named after ``--out``, and help/plural nits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from relevance_memory import ContextOverflowError, InvalidMessageError, RelevanceMemoryManager
from relevance_memory.cli import app

runner = CliRunner()
FIVE = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Rename the file foo.py to bar.py"},
    {"role": "assistant", "content": "Done, renamed it."},
    {"role": "user", "content": "Now update the imports"},
    {"role": "assistant", "content": "Updated the imports."},
]
ORPHAN = [
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": "hello"},
    {"role": "user", "content": "run it"},
    {"role": "tool", "tool_call_id": "x1", "content": "result"},
    {"role": "assistant", "content": "done"},
    {"role": "user", "content": "thanks"},
    {"role": "assistant", "content": "ok"},
]


def _plain(output: str) -> str:
    return " ".join(output.split())


def _write(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data))
    return path


def _record(tmp_path: Path) -> Path:
    run = _write(tmp_path / "five.json", FIVE)
    record = tmp_path / "five.record.json"
    built = runner.invoke(app, ["build", str(run), "--budget", "2000", "--out", str(tmp_path / "five.context.json")])
    assert built.exit_code == 0 and record.is_file(), built.output
    return record


# --------------------------------------------------------------------------- 1. explain --limit below 0
def test_explain_rejects_a_negative_limit_and_counts_what_is_left(tmp_path: Path) -> None:
    record = _record(tmp_path)
    result = runner.invoke(app, ["explain", str(record), "--limit", "-3"])
    assert result.exit_code == 2
    assert "Invalid value for '--limit'" in result.output and "greater than or equal to 0" in _plain(result.output)
    shown = runner.invoke(app, ["explain", str(record), "--limit", "2"])
    assert shown.exit_code == 0 and "… 3 more rows (use --limit 0 for all)" in shown.output  # 5 messages


# --------------------------------------------------------------------------- 2 and 4. files that are not a record
@pytest.mark.parametrize(("content", "problem"), [
    ('[{"role":"user","content":"hi"', "is not valid JSON (Expecting ',' delimiter at line 1, column 31), "
                                       "so not a decision record"),
    ("", "is empty, not a decision record"),
    ("  \n", "is empty, not a decision record"),
    ('{"a": 1}', "is not a decision record: a JSON object with no build_id, goal, budget, encoding and 7 more"),
    ('"hi"', 'holds a single JSON string ("hi"), not a decision record'),
    ('[{"role": "user", "content": "hi"}]', "is a JSON list (a context written by relmem build?), not a decision record"),
])
def test_explain_says_what_the_file_is(tmp_path: Path, content: str, problem: str) -> None:
    path = tmp_path / "given.json"
    path.write_text(content)
    result = runner.invoke(app, ["explain", str(path)])
    assert result.exit_code == 2
    assert _plain(result.output) == (f"error: {path} {problem}; pass the <name>.record.json that relmem build printed")
    assert "validation error" not in result.output


def test_explain_names_the_first_invalid_field_of_a_damaged_record(tmp_path: Path) -> None:
    data = json.loads(_record(tmp_path).read_text())
    data["messages"][1]["decision"] = "maybe"
    damaged = _write(tmp_path / "damaged.json", data)
    result = runner.invoke(app, ["explain", str(damaged)])
    assert result.exit_code == 2
    assert _plain(result.output) == (f"error: {damaged} is not a valid decision record: decision: Input should be 'kept', "
                                     "'recent', 'summarised' or 'dropped'; pass the <name>.record.json that relmem build printed")


@pytest.mark.parametrize(("content", "problem"), [
    ('[{"role":"user","content":"hi"', "is not valid JSON (Expecting ',' delimiter at line 1, column 31), "
                                       "so not a labelled set"),
    ("", "is empty, not a labelled set"),
    ('{"a": 1}', "is not a labelled set: a JSON object with no name"),
])
def test_rubric_eval_says_what_the_file_is(tmp_path: Path, content: str, problem: str) -> None:
    path = tmp_path / "set.json"
    path.write_text(content)
    result = runner.invoke(app, ["rubric", "eval", str(path)])
    assert result.exit_code == 2
    assert _plain(result.output) == f"error: {path} {problem}; make one with relmem rubric build (locomo or longmemeval)"


# --------------------------------------------------------------------------- 4. eval options
@pytest.mark.parametrize(("args", "option", "floor"), [
    (["--keep-recent", "-1"], "--keep-recent", 0), (["--jobs", "0"], "--jobs", 1), (["--jobs", "-2"], "--jobs", 1),
])
@pytest.mark.parametrize("dataset", ["locomo", "longmemeval"])
def test_eval_rejects_options_out_of_range(tmp_path: Path, dataset: str, args: list[str], option: str, floor: int) -> None:
    result = runner.invoke(app, ["eval", dataset, str(tmp_path / "absent.json"), *args], env={"COLUMNS": "200"})
    assert result.exit_code == 2
    text = _plain(result.output)
    assert f"Invalid value for '{option}'" in text and f"greater than or equal to {floor}" in text
    assert "pydantic" not in text and "https://" not in text


def test_eval_names_an_unknown_category_and_the_known_ones(tmp_path: Path) -> None:
    result = runner.invoke(app, ["eval", "locomo", str(tmp_path / "absent.json"), "--categories", "foo,temporal,bar"])
    assert result.exit_code == 2
    assert _plain(result.output) == ("error: --categories: unknown LoCoMo categories 'bar', 'foo'; the categories are "
                                     "multi-hop, temporal, open-domain, single-hop, adversarial")


def test_longmemeval_help_shows_its_own_question_ids() -> None:
    help_text = _plain(runner.invoke(app, ["eval", "longmemeval", "--help"], env={"COLUMNS": "200"}).output)
    assert "e.g. 001be529" in help_text and "conv-26" not in help_text
    assert "conv-26#q0" in _plain(runner.invoke(app, ["eval", "locomo", "--help"], env={"COLUMNS": "200"}).output)


# --------------------------------------------------------------------------- 4. an orphan tool message
def test_the_library_keeps_its_batch_words() -> None:
    memory = RelevanceMemoryManager()
    with pytest.raises(InvalidMessageError, match=r"set on_invalid='repair' .*\(batch item 3 of 7; nothing of this batch was stored\)$"):
        memory.extend(ORPHAN)


@pytest.mark.parametrize("command", [["build"], ["replay", "--quiet"], ["heatmap"]])
def test_an_orphan_is_named_by_its_place_in_the_file_with_the_cli_option(tmp_path: Path, command: list[str]) -> None:
    run = _write(tmp_path / "orphan.json", ORPHAN)
    out = ["--out", str(tmp_path / "map.png")] if command == ["heatmap"] else []
    result = runner.invoke(app, [command[0], str(run), *command[1:], *out])
    assert result.exit_code == 2
    text = _plain(result.output)
    assert text.endswith(f"{run}, message 3 (counting from 0): tool message answers 'x1', which no earlier assistant "
                         "message called (pass --repair to keep it in the store but out of the context)")
    assert "batch" not in text and "on_invalid" not in text
    repaired = runner.invoke(app, [command[0], str(run), *command[1:], *out, "--repair"])
    assert repaired.exit_code == 0, repaired.output


# --------------------------------------------------------------------------- 5. no system prompt, a budget of 1
def test_a_budget_below_the_reply_priming_names_the_reply_priming(tmp_path: Path) -> None:
    run = _write(tmp_path / "twouser.json", [{"role": "user", "content": "Rename foo.py"}, {"role": "user", "content": "and bar.py"}])
    result = runner.invoke(app, ["build", str(run), "--budget", "1"])
    assert result.exit_code == 2
    assert _plain(result.output).endswith(
        "error: context cannot fit: the reply priming every request spends takes 3 tokens (there is no system prompt) "
        "but the budget is 1 token; raise the budget")
    assert "system prompt takes" not in result.output
    with_system = runner.invoke(app, ["build", str(_write(tmp_path / "five.json", FIVE)), "--budget", "5"])
    assert with_system.exit_code == 2
    assert "the pinned system prompt takes 10 tokens (with the reply priming) but the budget is 5 tokens" in _plain(with_system.output)


def test_the_overflow_error_keeps_its_numbers() -> None:
    error = ContextOverflowError(budget=1, pinned_tokens=3, newest_step_tokens=0)
    assert (error.budget, error.pinned_tokens, error.newest_step_tokens) == (1, 3, 0)


# --------------------------------------------------------------------------- 6. the record named after --out
def test_builds_at_several_budgets_keep_their_records_apart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    run = _write(tmp_path / "five.json", FIVE)
    for budget in (2000, 4000, 8000):
        result = runner.invoke(app, ["build", str(run), "--budget", str(budget), "--out", f"swe{budget}.json"])
        assert result.exit_code == 0, result.output
        assert f"decision record → swe{budget}.record.json" in _plain(result.output)
    for budget in (2000, 4000, 8000):
        assert json.loads((tmp_path / f"swe{budget}.record.json").read_text())["budget"] == budget
    assert not (tmp_path / "five.record.json").exists()
    default = runner.invoke(app, ["build", str(run), "--budget", "2000"])  # no --out: as before
    assert default.exit_code == 0 and (tmp_path / "five.record.json").is_file() and (tmp_path / "five.context.json").is_file()


# --------------------------------------------------------------------------- 8. nits
def test_one_message_is_one_msg(tmp_path: Path) -> None:
    run = _write(tmp_path / "chat.json", [
        {"role": "system", "content": "Be brief."},
        *[{"role": "user" if n % 2 == 0 else "assistant", "content": f"turn {n} " + "words " * 60} for n in range(12)],
    ])
    result = runner.invoke(app, ["build", str(run), "--budget", "300", "--keep-recent", "1", "--out", str(tmp_path / "c.json")])
    assert result.exit_code == 0, result.output
    rows = {line.split("│")[1].strip(): line.split("│")[3].strip() for line in result.output.splitlines()
            if line.count("│") == 4}
    assert rows["kept older (by score)"] == "1 msg" and rows["summarised"] == "9 msgs"
    assert rows["system prompt (pinned)"] == "1 msg"


@pytest.mark.parametrize("columns", ["80", "200"])
def test_help_paragraphs_do_not_break_mid_sentence(columns: str) -> None:
    rubric = runner.invoke(app, ["rubric", "--help"], env={"COLUMNS": columns}).output
    lines = [line.strip("│ ").strip() for line in rubric.splitlines()]
    assert "precision/recall of ≥ 4 of the" not in lines  # the eval summary went on on the next line
    assert "print them side by side" not in lines
    wide = runner.invoke(app, ["build", "--help"], env={"COLUMNS": "200"}).output
    assert "``relmem explain`` on the record written shows each message." in wide


def test_one_tick_is_one_tick(tmp_path: Path) -> None:
    run = _write(tmp_path / "orphan.json", ORPHAN)
    result = runner.invoke(app, ["heatmap", str(run), "--repair", "--out", str(tmp_path / "map.png")])
    assert result.exit_code == 0, result.output
    assert "the final field), 1 tick, budget" in _plain(result.output)

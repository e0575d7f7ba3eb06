"""Problems a newcomer hit, pinned: bad files, CLI ranges, --goal and the task statement,
constraint cues, and constraints that cannot fit verbatim."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from relevance_memory import RelevanceMemoryManager, TranscriptFormatError, load_transcript
from relevance_memory._text import has_constraint
from relevance_memory.cli import app

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "django__django-15280.json"
runner = CliRunner()


def test_unreadable_files_get_one_line_errors(tmp_path: Path) -> None:
    bad = tmp_path / "latin1.json"
    bad.write_bytes(b'[{"role": "user", "content": "caf\xe9"}]')
    with pytest.raises(TranscriptFormatError, match="is not UTF-8 text"):
        load_transcript(bad)
    empty = tmp_path / "empty.json"
    empty.write_text("")
    with pytest.raises(TranscriptFormatError, match="is empty"):
        load_transcript(empty)
    bom = tmp_path / "bom.json"
    bom.write_bytes(b'\xef\xbb\xbf[{"role": "user", "content": "hi"}]')
    assert load_transcript(bom).messages == [{"role": "user", "content": "hi"}]
    cut = tmp_path / "cut.jsonl"
    cut.write_text('{"role": "user", "content": "a"}\n{"role": "assistant", "content": "b"}\n{"role": "us')
    with pytest.raises(TranscriptFormatError, match="line 3 is not JSON"):
        load_transcript(cut)
    result = runner.invoke(app, ["build", str(bad)])
    assert result.exit_code == 2 and "Traceback" not in result.output


@pytest.mark.parametrize("args", [["--budget", "0"], ["--budget", "-5"], ["--keep-recent", "-1"]])
def test_cli_ranges(args: list[str]) -> None:
    result = runner.invoke(app, ["build", str(FIXTURE), *args])
    assert result.exit_code == 2
    assert "Invalid value for '--" in result.output


def test_cli_empty_history_and_repair_hint(tmp_path: Path) -> None:
    empty = tmp_path / "none.json"
    empty.write_text("[]")
    result = runner.invoke(app, ["build", str(empty)])
    assert result.exit_code == 2 and "holds no messages" in result.output
    orphan = tmp_path / "orphan.json"
    orphan.write_text('[{"role": "user", "content": "x"}, {"role": "tool", "tool_call_id": "c9", "content": "y"}]')
    result = runner.invoke(app, ["build", str(orphan), "--out", str(tmp_path / "o.json")])
    assert result.exit_code == 2 and "pass --repair" in result.output and "on_invalid" not in result.output


def test_explicit_goal_still_keeps_the_task_statement() -> None:
    messages = load_transcript(FIXTURE).messages
    memory = RelevanceMemoryManager(max_input_tokens=6000)
    memory.extend(messages)
    memory.set_goal(final="Fix deferred fields after prefetch", subtask="run the tests")
    built = memory.build_context()
    task = built.record.decision_for("m1")
    assert task.decision in ("kept", "recent") and messages[1] in built.messages


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Hard rules: we may only buy from vendor VENDOR-K.", True),
        ("Don't use Acme.", True),
        ("I can't eat peanuts", True),
        ("我家猫叫豆豆，千万别给它喂巧克力。", True),
        ("I don't have my reservation ID with me right now", False),
        ("have they always been controversial?", False),
        ("Must we really do this?", False),
        ("the only thing I want is coffee", False),
    ],
)
def test_constraint_cues(text: str, expected: bool) -> None:
    assert has_constraint(text) is expected


def test_a_constraint_that_cannot_fit_verbatim_enters_as_an_excerpt_not_dropped() -> None:
    """Issue 21 (SPEC §11): a user's rule too large for the budget used to be summarised; it now
    enters as an excerpt of itself (its head keeps the rule), marked, restorable by id."""
    history = [{"role": "system", "content": "You are a buyer."}]
    history.append({"role": "user", "content": "Start. Rules: never use vendor ACME-77 and the cap must stay under 41,872 EUR. " + "Detail. " * 300})
    for n in range(20):
        history.append({"role": "user", "content": f"Question {n}?"})
        history.append({"role": "assistant", "content": f"Answer {n}."})
    memory = RelevanceMemoryManager(max_input_tokens=450, keep_recent=2)
    memory.extend(history)
    memory.set_goal(final="Pick a vendor")
    built = memory.build_context()
    decision = built.record.decision_for("m1")
    assert (decision.decision, decision.fidelity) == ("kept", "excerpt")
    assert decision.sent_tokens is not None and decision.sent_tokens < decision.tokens
    text = "\n".join(str(m["content"]) for m in built.messages)
    assert "ACME-77" in text and "41,872" in text
    assert "[relevance-memory: excerpt of m1" in text
    assert memory.restore(["m1"])[0]["content"] == history[1]["content"]


def test_unwritable_outputs_get_one_line_errors(tmp_path: Path) -> None:
    """``--out`` under a file, or a directory as ``--out``, printed a FileNotFoundError /
    IsADirectoryError traceback after the build; now one ``error:`` line naming the path."""
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    small = tmp_path / "small.json"
    small.write_text('[{"role": "user", "content": "hi"}]')
    for args, what in (
        (["--out", str(blocker / "ctx.json")], f"cannot write the context to {blocker / 'ctx.json'}"),
        (["--out", str(tmp_path)], f"cannot write the context to {tmp_path}"),
        (["--out", str(tmp_path / "ctx.json"), "--record", str(blocker / "r.json")],
         f"cannot write the decision record to {blocker / 'r.json'}"),
    ):
        result = runner.invoke(app, ["build", str(small), *args])
        assert result.exit_code == 2, result.output
        assert "Traceback" not in result.output and isinstance(result.exception, SystemExit)
        assert what in " ".join(result.output.split())
    locomo = tmp_path / "locomo.json"
    locomo.write_text(json.dumps([{
        "sample_id": "conv-x",
        "conversation": {"speaker_a": "Ann", "speaker_b": "Bob", "session_1_date_time": "1:56 pm on 8 May, 2023",
                         "session_1": [{"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a puppy named Biscuit."}]},
        "qa": [{"question": "What is the puppy's name?", "answer": "Biscuit", "evidence": ["D1:1"], "category": 4}],
    }]))
    blocked = runner.invoke(app, ["eval", "locomo", str(locomo), "--out", str(blocker / "eval")])
    assert blocked.exit_code == 2, blocked.output
    assert f"cannot write results to {blocker / 'eval'}" in " ".join(blocked.output.split())
    assert "recall" not in blocked.output  # refused before the evaluation ran


def test_heatmap_of_an_empty_transcript_is_an_error(tmp_path: Path) -> None:
    """It wrote a blank PNG with a matplotlib warning; ``relmem build`` says "nothing to build"."""
    empty = tmp_path / "list.json"
    empty.write_text("[]")
    result = runner.invoke(app, ["heatmap", str(empty), "--out", str(tmp_path / "h.png")])
    assert result.exit_code == 2
    assert "holds no messages: nothing to replay" in result.output
    assert not (tmp_path / "h.png").exists()

"""The summary reserve and its floor (issue 23 item 2).

The README promises a summary reserve of at least 64 tokens (``MIN_SUMMARY_RESERVE``). Only the
task statement, user constraints and what is pinned (system prompt, newest step) may take that
room, and when they do the decision record says so, naming what took it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from relevance_memory import RelevanceMemoryManager, load_transcript
from relevance_memory.pipeline.summarise import MIN_SUMMARY_RESERVE

FLOOR = f"below its floor of {MIN_SUMMARY_RESERVE}"


def _reserved(record: Any) -> int:
    return sum(line.tokens for line in record.budget_breakdown.lines
               if line.purpose == "summaries" and line.kind == "reserve")


def test_the_floor_is_the_readme_s_64_tokens() -> None:
    assert MIN_SUMMARY_RESERVE == 64


def test_pytest_7490_at_8k_keeps_the_floor_or_names_what_took_it(data_dir: Path) -> None:
    """pytest-7490 at 8k through the append/compact cycle (issue 23: its 5,265-token task
    statement once left the summary 43 tokens and one value): every compaction with an archive
    reserves at least the floor, or its record names the task statement as what took the room."""
    path = data_dir / "swebench_trajectories" / "pytest-dev__pytest-7490.json"
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    messages = load_transcript(path).messages
    tools = json.loads(path.read_text(encoding="utf-8")).get("tools") or None
    memory = RelevanceMemoryManager(max_input_tokens=8000)
    done, compactions = 0, 0
    for k, message in enumerate(messages):
        if message.get("role") != "assistant" or k == 0:
            continue
        memory.extend(messages[done:k])
        done = k
        record = memory.build_context(tools=tools).record
        if record.mode == "appended" or not record.summaries:
            continue
        compactions += 1
        warned = [w for w in record.warnings if FLOOR in w]
        if warned:
            assert "the task statement m1 (5,265 tokens)" in warned[0]
        else:
            assert _reserved(record) >= MIN_SUMMARY_RESERVE, (k, record.budget_breakdown.lines)
            assert sum(s.tokens for s in record.summaries) > 37  # not one value, as before
    assert compactions > 5


def test_a_huge_task_statement_takes_the_summary_s_room_with_a_warning_naming_it() -> None:
    """A task statement that fills most of the budget (the pytest-7490 kind, made certain): the
    reserve falls below its floor, and the record's warning names the task statement first."""
    task = "Fix the failing parser. " + " ".join(f"Traceback line {n}: parse_block({n}) raised ValueError." for n in range(120))
    history: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."},
                                     {"role": "user", "content": task}]
    for n in range(12):
        history += [{"role": "assistant", "content": None, "tool_calls": [
                        {"id": f"c{n}", "type": "function",
                         "function": {"name": "bash", "arguments": json.dumps({"command": f"cat src/mod_{n}.py"})}}]},
                    {"role": "tool", "tool_call_id": f"c{n}", "content": f"def handler_{n}(x):\n    return x + {n}\n" * 6}]
    memory = RelevanceMemoryManager()
    memory.extend(history)
    tokens = memory.messages[1].token_count
    record = memory.build_context(budget=tokens + 200).record
    warned = [w for w in record.warnings if FLOOR in w]
    assert warned, record.warnings
    assert warned[0].split(": ", 1)[1].startswith(f"the task statement m1 ({tokens:,} tokens)")


def test_a_small_budget_keeps_the_floor_for_the_summary() -> None:
    """A chat at a budget whose 10 % share is below 64 tokens: the reserve is still 64 (nothing
    protected takes the room), so there is no warning."""
    history: list[dict[str, Any]] = [{"role": "system", "content": "You are helpful."},
                                     {"role": "user", "content": "Plan my week, please."}]
    for n in range(30):
        history += [{"role": "user", "content": f"Note {n}: the meeting with Dana moved to room {100 + n}."},
                    {"role": "assistant", "content": f"Noted: room {100 + n} for the meeting with Dana."}]
    memory = RelevanceMemoryManager()
    memory.extend(history)
    record = memory.build_context(budget=450).record
    assert record.summaries
    assert _reserved(record) >= MIN_SUMMARY_RESERVE
    assert not [w for w in record.warnings if FLOOR in w]

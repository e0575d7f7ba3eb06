"""Ingest: formats, round-trip export, steps, trace chains, references, invalid input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from relevance_memory import (
    InvalidMessageError,
    MessageType,
    RelevanceMemoryManager,
    TranscriptFormatError,
    load_transcript,
    parse_transcript,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def call(call_id: str, name: str = "bash", arguments: str = '{"command": "ls"}') -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


HISTORY: list[dict[str, Any]] = [
    {"role": "system", "content": "You are an agent."},
    {"role": "user", "content": "Fix the bug in src/app/models.py; never touch tests/."},
    {"role": "assistant", "content": None, "tool_calls": [call("c1"), call("c2", "read", '{"path": "src/app/models.py"}')]},
    {"role": "tool", "tool_call_id": "c1", "content": "src\ntests"},
    {"role": "tool", "tool_call_id": "c2", "name": "read", "content": "class Order: total = 41872"},
    {"role": "assistant", "content": [{"type": "text", "text": "The total 41872 is wrong."}]},
    {"role": "user", "content": "ok", "name": "alice"},
]


def memory_with(history: list[dict[str, Any]], **kwargs: Any) -> RelevanceMemoryManager:
    memory = RelevanceMemoryManager(**kwargs)
    memory.extend(history)
    return memory


def test_export_round_trips_unchanged() -> None:
    memory = memory_with(HISTORY)
    assert [m.to_openai() for m in memory.messages] == HISTORY
    # the export is a copy: mutating it does not change the store
    exported = memory.messages[2].to_openai()
    exported["tool_calls"].append("x")
    assert memory.messages[2].to_openai() == HISTORY[2]


def test_types_steps_and_chains() -> None:
    memory = memory_with(HISTORY)
    store = memory.store
    types = [m.msg_type for m in memory.messages]
    assert types == [
        MessageType.SYSTEM,
        MessageType.USER_INSTRUCTION,
        MessageType.TOOL_CALL,
        MessageType.TOOL_RESULT,
        MessageType.TOOL_RESULT,
        MessageType.ASSISTANT_REASONING,
        MessageType.USER_CHAT,
    ]
    assert [m.step for m in memory.messages] == [-1, 0, 1, 1, 1, 2, 3]
    assert store.step_count == 4
    assert {store.chain_root(i) for i in (2, 3, 4)} == {2}
    assert store.chain_root(5) == 5
    assert memory.messages[3].parent_id == "m2"
    assert memory.messages[2].source == "bash,read"
    assert memory.messages[4].source == "read"


def test_references_detect_quoted_numbers_and_paths() -> None:
    memory = memory_with(HISTORY)
    # the assistant quotes 41872 from the read result (m4)
    assert "m4" in memory.messages[5].references
    assert "m5" in memory.store.referenced_by["m4"]
    # the read call quotes the path from the task statement
    assert "m1" in memory.messages[2].references


def test_token_counts_once_on_ingest() -> None:
    memory = memory_with(HISTORY)
    counter = memory.tokenizer
    assert [m.token_count for m in memory.messages] == [counter.count_message(m) for m in HISTORY]


def test_explicit_trace_id_groups_messages() -> None:
    memory = RelevanceMemoryManager()
    memory.add({"role": "user", "content": "plan"}, trace_id="t1")
    memory.add({"role": "assistant", "content": "step a"})
    memory.add({"role": "assistant", "content": "step b"}, trace_id="t1")
    assert memory.store.chain_root(2) == 0
    assert memory.store.chain_root(1) == 1


def test_metadata_is_kept() -> None:
    memory = RelevanceMemoryManager()
    message = memory.add({"role": "user", "content": "hi"}, id="u-1", producer="planner", scope="shared", msg_type="user_chat")
    assert (message.id, message.producer, message.scope, message.msg_type) == ("u-1", "planner", "shared", MessageType.USER_CHAT)
    assert memory.store.get("u-1") is message
    assert message.timestamp is not None and message.content_hash


@pytest.mark.parametrize(
    ("message", "fragment"),
    [
        ({"role": "function", "content": "x"}, "unknown role 'function'"),
        ({"role": "robot", "content": "x"}, "unknown role 'robot'"),
        ({"content": "x"}, "unknown role None"),
        ({"role": "user", "content": 42}, "content must be a string"),
        ({"role": "user", "content": None}, "user message has null content"),
        ({"role": "assistant", "content": None}, "neither content nor tool_calls"),
        ({"role": "assistant", "content": None, "tool_calls": {"id": "c"}}, "tool_calls must be a list"),
        ({"role": "assistant", "content": None, "tool_calls": [{"type": "function"}]}, "has no string 'id'"),
        ({"role": "assistant", "content": None, "tool_calls": [{"id": "c9"}]}, "has no 'function' object"),
        ({"role": "assistant", "content": None, "tool_calls": [{"id": "c9", "function": {"arguments": "{}"}}]}, "has no function name"),
        ({"role": "assistant", "content": None, "tool_calls": [{"id": "c9", "function": {"name": "f", "arguments": {"a": 1}}}]}, "arguments must be a JSON string"),
        ({"role": "user", "content": "x", "tool_calls": [call("c9")]}, "only assistant messages may carry tool_calls"),
        ({"role": "tool", "tool_call_id": "nope", "content": "x"}, "which no earlier assistant message called"),
        ({"role": "tool", "content": "x"}, "without tool_call_id"),
        ({"role": "assistant", "content": None, "tool_calls": [call("c7"), call("c7")]}, "duplicate tool call id 'c7' in one message"),
        ("not a dict", "expected an OpenAI chat dict"),
    ],
)
def test_invalid_messages_get_clear_errors(message: Any, fragment: str) -> None:
    memory = memory_with(HISTORY)
    before = len(memory.messages)
    with pytest.raises(InvalidMessageError) as info:
        memory.add(message)
    assert fragment in str(info.value)
    assert info.value.index == before
    assert len(memory.messages) == before  # nothing half-added


def test_tool_call_ids_may_be_reused_once_answered() -> None:
    """τ-bench runs reuse call ids; that is valid once the earlier call has its result."""
    memory = memory_with(HISTORY)
    memory.add({"role": "assistant", "content": None, "tool_calls": [call("c1")]})
    with pytest.raises(InvalidMessageError, match="earlier call with this id has no result"):
        memory.add({"role": "assistant", "content": None, "tool_calls": [call("c1")]})
    memory.add({"role": "tool", "tool_call_id": "c1", "content": "again"})
    assert memory.store.chain_root(len(memory.messages) - 1) == len(memory.messages) - 2
    assert memory.store.unanswered_calls(len(memory.messages) - 2) == []


def test_tool_result_must_directly_follow_its_call() -> None:
    memory = RelevanceMemoryManager()
    memory.extend([{"role": "user", "content": "go"}, {"role": "assistant", "content": None, "tool_calls": [call("c1")]}])
    memory.add({"role": "user", "content": "interrupt"})
    with pytest.raises(InvalidMessageError, match="does not directly follow"):
        memory.add({"role": "tool", "tool_call_id": "c1", "content": "late"})


def test_repair_mode_keeps_orphans_out_of_the_context_and_says_so() -> None:
    history = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "go"},
        {"role": "tool", "tool_call_id": "ghost", "content": "orphan output"},
        {"role": "assistant", "content": None, "tool_calls": [call("c1"), call("c2")]},
        {"role": "tool", "tool_call_id": "c1", "content": "one"},
        {"role": "user", "content": "next"},
    ]
    memory = memory_with(history, on_invalid="repair", max_input_tokens=10_000)
    assert len(memory.messages) == len(history)  # nothing lost from the store
    built = memory.build_context()
    contents = [m.get("content") for m in built.messages]
    assert "orphan output" not in contents and "one" not in contents
    assert not any(m.get("tool_calls") for m in built.messages)
    for mid in ("m2", "m3", "m4"):
        decision = built.record.decision_for(mid)
        assert decision.decision == "dropped" and decision.note
    assert "no earlier assistant message called" in built.record.decision_for("m2").note
    assert "c2" in built.record.decision_for("m3").note
    assert built.record.identity is False


def test_unanswered_call_raises_in_strict_mode() -> None:
    memory = memory_with([{"role": "user", "content": "go"}, {"role": "assistant", "content": None, "tool_calls": [call("c1")]}])
    with pytest.raises(InvalidMessageError, match="c1 have no result"):
        memory.build_context()


def test_swebench_fixture_loads() -> None:
    transcript = load_transcript(FIXTURES / "django__django-15280.json")
    assert transcript.format == "swebench"
    assert len(transcript.messages) == 194
    assert transcript.task and transcript.task.strip()[:200] in transcript.messages[1]["content"]
    memory = memory_with(transcript.messages)
    assert memory.goal.source == "first_user_message"
    assert memory.goal.final == transcript.messages[1]["content"].strip()


def test_jsonl_and_plain_list(tmp_path: Path) -> None:
    jsonl = tmp_path / "h.jsonl"
    jsonl.write_text("\n".join(json.dumps(m) for m in HISTORY) + "\n", encoding="utf-8")
    assert load_transcript(jsonl).messages == HISTORY
    plain = tmp_path / "h.json"
    plain.write_text(json.dumps(HISTORY), encoding="utf-8")
    loaded = load_transcript(plain)
    assert (loaded.format, loaded.messages) == ("openai", HISTORY)
    wrapped = tmp_path / "w.json"
    wrapped.write_text(json.dumps({"messages": HISTORY, "id": 7}), encoding="utf-8")
    assert load_transcript(wrapped).meta == {"id": 7}


def test_tau_bench_shape_and_index() -> None:
    runs = [
        {"task_id": 3, "trial": 0, "reward": 1.0, "info": {"task": {"instruction": "Cancel my trip"}}, "traj": HISTORY},
        {"task_id": 4, "trial": 1, "reward": 0.0, "info": {}, "traj": HISTORY[:2]},
    ]
    first = parse_transcript(runs)
    assert (first.format, first.task, first.count, first.meta["task_id"]) == ("tau_bench", "Cancel my trip", 2, 3)
    assert parse_transcript(runs, index=1).messages == HISTORY[:2]
    with pytest.raises(TranscriptFormatError, match="index 5 is out of range"):
        parse_transcript(runs, index=5)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("{not json", "neither JSON nor JSONL"),
        ('{"a": 1}\n{"b": 2}\n', "lines are not chat messages"),
        ('{"hello": "world"}', "unknown transcript format"),
        ("[1, 2]", "not of chat messages"),
    ],
)
def test_bad_files_get_clear_errors(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(TranscriptFormatError, match=fragment):
        load_transcript(path)


def test_missing_file_error(tmp_path: Path) -> None:
    with pytest.raises(TranscriptFormatError, match="cannot read"):
        load_transcript(tmp_path / "nope.json")


def test_goal_layers() -> None:
    memory = memory_with(HISTORY[:-1])
    assert memory.goal.final.startswith("Fix the bug") and memory.goal.source == "first_user_message"
    memory = memory_with(HISTORY)  # "ok" is no request: the task statement stays the goal (issue 21)
    assert memory.goal.source == "first_user_message"
    asked = [*HISTORY, {"role": "user", "content": "Also add a regression test for the total."}]
    memory = memory_with(asked)  # the agent's user asks again: the goal follows their requests
    assert memory.goal.final == "Fix the bug in src/app/models.py; never touch tests/.\nAlso add a regression test for the total."
    memory.set_goal(subtask="read models.py")
    assert (memory.goal.source, memory.goal.subtask) == ("user_requests", "read models.py")
    memory.set_goal(final="Ship the fix")
    assert (memory.goal.final, memory.goal.subtask, memory.goal.source) == ("Ship the fix", "read models.py", "explicit")
    assert RelevanceMemoryManager().goal.source == "none"

"""Issue 13 item 12: archived messages are restorable by id through a ready tool + handler."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from relevance_memory import RelevanceMemoryManager, load_transcript
from relevance_memory.store._restore import RESTORE_TOOL_NAME, RestoreHandler, restore_tool_definition
from relevance_memory.summary._summary import SUMMARY_MARKER

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def _memory(budget: int) -> RelevanceMemoryManager:
    memory = RelevanceMemoryManager(max_input_tokens=budget)
    memory.extend(load_transcript(FIXTURES / "django__django-15280.json").messages)
    return memory


def _call(arguments: Any, call_id: str = "call_r1") -> dict[str, Any]:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id, "type": "function", "function": {"name": RESTORE_TOOL_NAME, "arguments": text}}


def test_the_tool_definition_is_a_valid_sdk_tool_param() -> None:
    pytest.importorskip("openai")
    from openai.types.chat import ChatCompletionToolParam
    from pydantic import TypeAdapter

    definition = restore_tool_definition()
    TypeAdapter(ChatCompletionToolParam).validate_python(definition)
    schema = definition["function"]["parameters"]
    assert schema["required"] == ["ids"] and schema["additionalProperties"] is False
    with pytest.raises(ValueError, match="tool names"):
        restore_tool_definition("restore messages")


@pytest.mark.parametrize("budget", [3000, 8000, 16000])
def test_every_id_a_build_leaves_out_can_be_restored_verbatim(budget: int) -> None:
    memory = _memory(budget)
    built = memory.build_context()
    handler = RestoreHandler(memory)
    emitted = {d.id for d in built.record.messages if d.decision in ("kept", "recent")}
    left_out = [m for m in memory.messages if m.id not in emitted]
    assert left_out
    sample = left_out[:: max(1, len(left_out) // 12)][:12]
    answer = handler.answer(_call({"ids": [m.id for m in sample]}))
    assert answer["role"] == "tool" and answer["tool_call_id"] == "call_r1"
    for message in sample:
        assert f"[{message.id}] " in answer["content"]
    # ids as the summaries write them: spans work too
    summaries = [m["content"] for m in built.messages if str(m.get("content")).startswith(SUMMARY_MARKER)]
    spans = re.findall(r"\b(m\d+)(–| to )(m\d+)\b", "\n".join(summaries))
    assert spans
    for first, dash, last in spans:
        restored, missing = handler.resolve([f"{first}{dash}{last}"])
        assert missing == [] and restored[0].id == first and restored[-1].id == last


def test_answers_restore_text_and_calls_and_can_be_recorded_back() -> None:
    memory = RelevanceMemoryManager()
    memory.extend([
        {"role": "user", "content": "Find the invoice total; never email the customer."},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "read", "arguments": '{"path": "inv.txt"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "name": "read", "content": "TOTAL 4,812.50 EUR"},
        {"role": "user", "content": "thanks"},
    ])
    handler = RestoreHandler(lambda: memory, max_tokens=400)
    text = handler.restore(["m1", "m2", "m0", "m999"])
    assert text.index("[m0] user: Find the invoice total") < text.index("[m1] assistant: called read(") < text.index(
        "[m2] tool read: TOTAL 4,812.50 EUR"
    )
    assert "(no message with id: m999)" in text
    # the agent loop appends the model's call and the answer: both are valid history
    memory.add({"role": "assistant", "content": None, "tool_calls": [_call({"ids": ["m2"]})]})
    memory.add(handler.answer(_call({"ids": ["m2"]})))
    assert memory.messages[-1].role == "tool" and "4,812.50 EUR" in str(memory.messages[-1].content)


@pytest.mark.parametrize(
    ("arguments", "fragment"),
    [("not json", "could not read the arguments"), ({"ids": 5}, "'ids' must be a list"), ({}, "'ids' must be a list"),
     ({"ids": []}, "(no ids given)"), ({"ids": "m0"}, "[m0] user:")],
)
def test_malformed_arguments_get_an_answer_not_an_exception(arguments: Any, fragment: str) -> None:
    memory = RelevanceMemoryManager()
    memory.add({"role": "user", "content": "hello there"})
    answer = RestoreHandler(memory).answer(_call(arguments))
    assert fragment in answer["content"]


def test_a_long_request_is_cut_and_says_what_it_left_out() -> None:
    memory = _memory(8000)
    handler = RestoreHandler(memory, max_tokens=600)
    text = handler.restore(["m2–m60"])
    assert "ask for fewer ids" in text
    assert handler._counter.count_text(text) <= 600 + 400  # the note itself may pass the limit a little
    assert handler.handles(_call({"ids": []})) and not handler.handles({"function": {"name": "bash"}})


def test_manager_get_and_restore_return_the_originals() -> None:
    memory = _memory(3000)
    built = memory.build_context()
    archived = [d.id for d in built.record.messages if d.decision in ("summarised", "dropped")]
    assert memory.get(archived[0]).id == archived[0]
    originals = memory.restore([archived[0], f"{archived[1]}–{archived[2]}"])
    assert originals[0] == memory.get(archived[0]).to_openai()
    assert len(originals) >= 3 and all(isinstance(m, dict) for m in originals)
    with pytest.raises(KeyError, match="'nope'"):
        memory.restore(["nope", archived[0]])
    with pytest.raises(KeyError, match="no message with id 'zz'"):
        memory.get("zz")


def test_the_goal_block_promises_the_tool_only_once_it_is_offered() -> None:
    memory = _memory(6000)
    before = next(m["content"] for m in memory.build_context().messages if "task goal" in str(m.get("content")))
    assert "restorable by message id." in before and RESTORE_TOOL_NAME not in before
    tool = memory.restore_tool()
    after = next(m["content"] for m in memory.build_context().messages if "task goal" in str(m.get("content")))
    assert f"call {RESTORE_TOOL_NAME} with their ids" in after
    assert tool == restore_tool_definition()
    handler = memory.restore_handler()
    assert handler.handles(_call({"ids": ["m2"]}))
    assert memory.fresh(memory.store.messages and [m.to_openai() for m in memory.messages]).restore_tool_offered == RESTORE_TOOL_NAME


@pytest.mark.parametrize("budget", [4000, 6000, 9000])
def test_build_context_takes_the_tools_schema_from_the_budget(budget: int) -> None:
    from relevance_memory._tokenizer import tools_tokens

    tools = [restore_tool_definition(), *load_transcript(FIXTURES / "django__django-15280.json").meta.get("tools", [])]
    memory = _memory(budget)
    plain = memory.build_context()
    with_tools = memory.build_context(tools=tools)
    schema = tools_tokens(memory.tokenizer, tools)
    assert schema > 50
    assert with_tools.record.budget == budget - schema
    assert with_tools.token_count + schema <= budget
    assert plain.record.budget == budget

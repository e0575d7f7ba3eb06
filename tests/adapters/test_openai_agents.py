"""The OpenAI Agents SDK session adapter with the SDK's real types and runner."""

from __future__ import annotations

import json
import sys
import warnings
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import Agent, ModelResponse, RunConfig, Runner, SQLiteSession, Usage, function_tool
from agents.memory import Session
from agents.models.interface import Model
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

from relevance_memory import GOAL_BLOCK_MARKER, SUMMARY_MARKER
from relevance_memory.adapters.openai_agents import ManagedSession, items_to_chat

TASK = "Fix the date parser in utils/dates.py; never change the public API."


def step_items(n: int) -> list[dict[str, Any]]:
    """One agent step in Responses format: reasoning, a message, two parallel calls, their outputs."""
    return [
        {"type": "reasoning", "id": f"rs_{n}", "summary": []},
        {"type": "message", "role": "assistant", "id": f"msg_{n}", "status": "completed",
         "content": [{"type": "output_text", "text": f"Step {n}: read two files.", "annotations": []}]},
        {"type": "function_call", "id": f"fc_{n}_a", "call_id": f"call_{n}_a", "name": "bash",
         "arguments": json.dumps({"command": f"cat file_{n}_a.py"})},
        {"type": "function_call", "id": f"fc_{n}_b", "call_id": f"call_{n}_b", "name": "bash",
         "arguments": json.dumps({"command": f"cat file_{n}_b.py"})},
        {"type": "function_call_output", "call_id": f"call_{n}_a", "output": f"file_{n}_a: " + "x = 1\n" * 80},
        {"type": "function_call_output", "call_id": f"call_{n}_b", "output": f"file_{n}_b: " + "y = 2\n" * 80},
    ]


def history(steps: int) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = [{"role": "user", "content": TASK}]
    for n in range(steps):
        items += step_items(n)
    return items


def assert_whole_steps(items: list[Any]) -> None:
    calls = [i["call_id"] for i in items if i.get("type") == "function_call"]
    outputs = [i["call_id"] for i in items if i.get("type") == "function_call_output"]
    assert calls == outputs  # every kept call has its output, parallel calls whole
    for k, item in enumerate(items):  # a reasoning item travels with the message it led to
        if item.get("type") == "reasoning":
            assert items[k + 1]["id"] == "msg_" + item["id"].split("_")[1]


def test_items_group_into_chat_messages_with_parallel_calls() -> None:
    messages, groups = items_to_chat(history(1))
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool"]
    assert messages[1]["content"] == "Step 0: read two files."
    assert [c["id"] for c in messages[1]["tool_calls"]] == ["call_0_a", "call_0_b"]
    assert [i.get("type") for i in groups[1]] == ["reasoning", "message", "function_call", "function_call"]
    assert sum(len(g) for g in groups) == len(history(1))


async def test_session_protocol_managed_history_and_raw_limits() -> None:
    session = ManagedSession("s1", max_input_tokens=2500, keep_recent=2)
    assert isinstance(session, Session)
    stored = history(12)
    await session.add_items(stored)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        managed = await session.get_items()
    record = session.last_record
    assert record is not None and record.tokens_after <= 2500 and not record.identity
    assert managed[0] == stored[0]  # the stable head: the task statement first (SPEC §3.1)
    goals = [i for i in managed if str(i.get("content", "")).startswith(GOAL_BLOCK_MARKER)]
    assert len(goals) == 1 and goals[0]["role"] == "system"
    summaries = [i for i in managed if str(i.get("content", "")).startswith(SUMMARY_MARKER)]
    assert all(i["role"] == "system" for i in summaries)  # summaries are new items, never assistant
    # outputs sent as excerpts (issue 21) are new items for the same call ids, marked
    cut = [i for i in managed if str(i.get("output", "")).startswith("[relevance-memory: excerpt")]
    assert all(i["type"] == "function_call_output" and i["call_id"] for i in cut)
    rest = [i for i in managed if i not in goals and i not in summaries and i not in cut]
    assert len(rest) < len(stored)
    positions = [stored.index(item) for item in rest]  # original items, in their original order
    assert positions == sorted(positions)
    # the newest step: its own items, its outputs (409 tokens, over 1/16 of the budget) as excerpts
    newest = [i for i in stored[-6:] if i.get("type") != "function_call_output"]
    assert [i for i in managed[-6:] if i.get("type") != "function_call_output"] == newest
    assert [i["call_id"] for i in managed[-6:] if i.get("type") == "function_call_output"] == [
        i["call_id"] for i in stored[-6:] if i.get("type") == "function_call_output"]
    assert_whole_steps([i for i in managed if i not in goals and i not in summaries])
    assert await session.get_items(limit=3) == stored[-3:]  # limits are raw, for the runner's bookkeeping
    assert await session.all_items() == stored

    assert await session.pop_item() == stored[-1]
    for _ in range(5):  # pop the rest of the newest step (a call without its output cannot be sent)
        await session.pop_item()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # removals through the session resync quietly
        again = await session.get_items()
    assert [i.get("call_id") or i.get("id") for i in again[-6:]] == [i.get("call_id") or i.get("id") for i in stored[-12:-6]]
    assert len(session.memory.messages) == len(items_to_chat(stored[:-6])[0])
    await session.clear_session()
    assert await session.get_items() == []


async def test_short_history_is_returned_unchanged_and_inner_session_is_used() -> None:
    inner = SQLiteSession("s2")
    session = ManagedSession(inner=inner, max_input_tokens=50_000)
    assert session.session_id == "s2"
    await session.add_items(history(2))
    assert await session.get_items() == history(2)
    assert await inner.get_items() == history(2)


class _ScriptedModel(Model):
    """A Model that calls the ``bash`` tool once, then answers; keeps each input it was given."""

    def __init__(self) -> None:
        self.inputs: list[list[Any]] = []

    async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> ModelResponse:
        self.inputs.append(list(input) if isinstance(input, list) else [input])
        if len(self.inputs) == 1:
            output: list[Any] = [ResponseFunctionToolCall(
                type="function_call", id="fc_run", call_id="call_run", name="bash", arguments='{"command": "ls"}'
            )]
        else:
            output = [ResponseOutputMessage(
                type="message", id="msg_run", role="assistant", status="completed",
                content=[ResponseOutputText(type="output_text", text="Done.", annotations=[])],
            )]
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:  # pragma: no cover - not used
        raise NotImplementedError


@function_tool
def bash(command: str) -> str:
    """Run a shell command."""
    return f"ran {command}"


async def test_runner_sends_the_managed_history_and_stores_everything() -> None:
    session = ManagedSession("s3", max_input_tokens=2500, keep_recent=2)
    stored = history(12)
    await session.add_items(stored)
    model = _ScriptedModel()
    agent = Agent(name="fixer", instructions="Fix bugs.", model=model, tools=[bash])
    result = await Runner.run(
        agent, "Now run the tests.", session=session, run_config=RunConfig(tracing_disabled=True)
    )
    assert result.final_output == "Done."
    first = model.inputs[0]
    assert len(first) < len(stored)  # the model saw the managed context…
    assert first[0]["content"] == stored[0]["content"]
    assert sum(1 for i in first if str(i.get("content", "")).startswith(GOAL_BLOCK_MARKER)) == 1
    assert first[-1]["content"] == "Now run the tests."
    everything = await session.all_items()  # …and the session kept every item of the run
    assert everything[: len(stored)] == stored
    kinds = [i.get("type", "message") for i in everything[len(stored) :]]
    assert kinds.count("function_call") == 1 and kinds.count("function_call_output") == 1


def test_missing_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "agents", None)
    with pytest.raises(ImportError, match=r"relevance-memory\[agents\]"):
        ManagedSession("x")


async def test_a_call_still_waiting_for_its_output_is_left_out_not_fatal() -> None:
    session = ManagedSession("s4", max_input_tokens=50_000)
    pending = {"type": "function_call", "id": "fc_wait", "call_id": "call_wait", "name": "deploy", "arguments": "{}"}
    await session.add_items([*history(1), pending])
    items = await session.get_items()
    assert pending not in items and items == history(1)
    record = session.last_record
    assert record is not None
    assert [d.note for d in record.messages if d.decision == "dropped"] == ["tool call(s) call_wait have no result"]


async def test_the_session_is_prefix_stable_by_default() -> None:
    """Between compactions each turn's items are the previous turn's plus the new ones (SPEC §3.1)."""
    session = ManagedSession("s2", max_input_tokens=3000, keep_recent=2)
    turns, modes = [], []
    for n in range(16):
        await session.add_items(step_items(n) if n else history(1))
        turns.append(await session.get_items())
        record = session.last_record
        assert record is not None and record.tokens_after <= 3000
        modes.append(record.mode)
    assert "compacted" in modes and modes.count("appended") >= len(modes) // 2
    for n, mode in enumerate(modes):
        if mode == "appended":
            assert turns[n][: len(turns[n - 1])] == turns[n - 1]

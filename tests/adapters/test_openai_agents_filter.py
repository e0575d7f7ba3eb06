"""The OpenAI Agents SDK model-call filter, run through ``Runner.run`` with a fake ``Model``."""

from __future__ import annotations

import base64
import json
import warnings
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import Agent, ModelResponse, RunConfig, Runner, SQLiteSession, ToolOutputImage, Usage, function_tool
from agents.models.interface import Model
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

from relevance_memory import GOAL_BLOCK_MARKER, TiktokenCounter
from relevance_memory._tokenizer import image_tokens
from relevance_memory.adapters.openai_agents import (
    ManagedInputFilter,
    ManagedSession,
    agent_tools,
    items_to_chat,
    request_tokens,
)

COUNTER = TiktokenCounter()
INSTRUCTIONS = "You are a coding agent. Read the files you need, then fix the bug. " * 6
TASK = "Fix the date parser in utils/dates.py; never change the public API."
BUDGET = 8000


def listing(path: str, lines: int = 110) -> str:
    """A sizeable tool output (~1,400 tokens): a numbered source listing."""
    body = "\n".join(f"{n:4d}    def handler_{n}(request, value={n * 7}): return parse_date(value, '{path}')" for n in range(lines))
    return f"{path}\n{body}"


@function_tool
def read_file(path: str) -> str:
    """Read a source file and return its numbered lines."""
    return listing(path)


class ToolLoopModel(Model):
    """Calls ``read_file`` ``turns`` times (a reasoning item before each call when ``reasoning``),
    then answers; keeps every request it was sent (instructions, input items, tools)."""

    def __init__(self, turns: int, *, reasoning: bool = False) -> None:
        self.turns = turns
        self.reasoning = reasoning
        self.requests: list[tuple[str | None, list[Any], list[Any]]] = []

    async def get_response(self, system_instructions: Any, input: Any, model_settings: Any, tools: Any,
                           *args: Any, **kwargs: Any) -> ModelResponse:
        items = list(input) if isinstance(input, list) else [{"role": "user", "content": input}]
        self.requests.append((system_instructions, items, list(tools)))
        n = len(self.requests)
        output: list[Any] = []
        if n <= self.turns:
            if self.reasoning:
                output.append({"type": "reasoning", "id": f"rs_{n}", "summary": [
                    {"type": "summary_text", "text": f"Next I read module_{n}.py to find the parser."}]})
            output.append(ResponseFunctionToolCall(
                type="function_call", id=f"fc_{n}", call_id=f"call_{n}", name="read_file",
                arguments=json.dumps({"path": f"src/module_{n}.py"}),
            ))
        else:
            output.append(ResponseOutputMessage(
                type="message", id=f"msg_{n}", role="assistant", status="completed",
                content=[ResponseOutputText(type="output_text", text="The parser is fixed.", annotations=[])],
            ))
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:  # pragma: no cover - not used
        raise NotImplementedError


def sizes(model: ToolLoopModel, agent: Agent[Any]) -> list[int]:
    tools = agent_tools(agent)
    return [request_tokens(COUNTER, items, instructions=i, tools=tools) for i, items, _ in model.requests]


def assert_valid_items(items: list[Any]) -> None:
    """Every function call has its output right after the calls of its turn, and vice versa."""
    data = [i if isinstance(i, dict) else i.model_dump(exclude_unset=True) for i in items]
    calls = [i["call_id"] for i in data if i.get("type") == "function_call"]
    outputs = [i["call_id"] for i in data if i.get("type") == "function_call_output"]
    assert calls == outputs
    for k, item in enumerate(data):
        if item.get("type") == "function_call_output":
            assert data[k - 1].get("type") == "function_call" and data[k - 1]["call_id"] == item["call_id"]


async def test_a_30_turn_tool_loop_stays_within_budget_on_every_model_call() -> None:
    model = ToolLoopModel(turns=30)
    agent = Agent(name="fixer", instructions=INSTRUCTIONS, model=model, tools=[read_file])
    managed = ManagedInputFilter(max_input_tokens=BUDGET, keep_recent=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no resync: each call's input extends the previous one
        result = await Runner.run(agent, TASK, max_turns=40,
                                  run_config=RunConfig(call_model_input_filter=managed, tracing_disabled=True))
    assert result.final_output == "The parser is fixed."
    assert len(model.requests) == 31
    sent = sizes(model, agent)
    assert max(sent) <= BUDGET
    assert max(sent) > BUDGET * 3 // 4
    for _, items, _ in model.requests:
        assert_valid_items(items)
        assert items[0] == {"content": TASK, "role": "user"}  # the task statement stays first
    assert len(managed.memory.messages) == 1 + 2 * 30  # every item recorded once
    record = managed.last_record
    assert record is not None and record.tokens_before > 3 * BUDGET and not record.identity
    # the last request still carries the newest call and its output: 2,860 tokens, more than
    # 1/16 of the budget, so an excerpt of it (head, tail, named lines; issue 21), marked
    last = model.requests[-1][1]
    assert last[-1]["type"] == "function_call_output" and last[-1]["call_id"] == "call_30"
    output = last[-1]["output"]
    assert output.startswith("[relevance-memory: excerpt of m60") and "src/module_30.py" in output
    assert managed.memory.restore(["m60"])[0]["content"] == listing("src/module_30.py")


async def test_unmanaged_the_same_run_outgrows_the_budget() -> None:
    """The baseline: the same loop without the filter sends the whole run every call."""
    model = ToolLoopModel(turns=30)
    agent = Agent(name="fixer", instructions=INSTRUCTIONS, model=model, tools=[read_file])
    await Runner.run(agent, TASK, max_turns=40, run_config=RunConfig(tracing_disabled=True))
    sent = sizes(model, agent)
    assert max(sent) > 5 * BUDGET and sum(s > BUDGET for s in sent) >= 25


async def test_reasoning_travels_with_its_call_and_unknown_items_are_kept_whole() -> None:
    model = ToolLoopModel(turns=26, reasoning=True)
    agent = Agent(name="fixer", instructions=INSTRUCTIONS, model=model, tools=[read_file])
    compaction = {"type": "compaction", "id": "cmp_1", "encrypted_content": "QUJD" * 400}
    reference = {"type": "item_reference", "id": "msg_earlier"}
    managed = ManagedInputFilter(max_input_tokens=BUDGET, keep_recent=3)
    await Runner.run(agent, [compaction, {"role": "user", "content": TASK}, reference], max_turns=40,
                     run_config=RunConfig(call_model_input_filter=managed, tracing_disabled=True))
    sent = sizes(model, agent)
    assert max(sent) <= BUDGET
    for _, items, _ in model.requests:
        data = [i if isinstance(i, dict) else i.model_dump(exclude_unset=True) for i in items]
        assert data[0] == compaction and data[1]["content"] == TASK and data[2] == reference  # whole, in place
        for k, item in enumerate(data):  # a reasoning item is always followed by the call it led to
            if item.get("type") == "reasoning":
                assert data[k + 1].get("type") == "function_call" and data[k + 1]["id"] == "fc_" + item["id"][3:]
        calls = {i["id"] for i in data if i.get("type") == "function_call"}
        reasons = {"fc_" + i["id"][3:] for i in data if i.get("type") == "reasoning"}
        assert calls == reasons  # left out together, kept together
    unmanaged = 3 + 3 * 26  # the three given items, then a reasoning item, a call and its output per turn
    assert len(model.requests[-1][1]) < unmanaged / 2


async def test_a_session_with_its_input_filter_manages_every_call_across_runs() -> None:
    session = ManagedSession("s-filter", max_input_tokens=BUDGET, keep_recent=3)
    managed = session.input_filter()
    config = RunConfig(call_model_input_filter=managed, tracing_disabled=True)
    model = ToolLoopModel(turns=12)
    agent = Agent(name="fixer", instructions=INSTRUCTIONS, model=model, tools=[read_file])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the second run's input extends the first's: no resync
        await Runner.run(agent, TASK, session=session, max_turns=40, run_config=config)
        model.turns = 26
        await Runner.run(agent, "Now add a regression test.", session=session, max_turns=40, run_config=config)
    assert max(sizes(model, agent)) <= BUDGET
    stored = await session.all_items()
    assert await session.get_items() == stored  # the session hands everything to the filter
    assert len(session.memory.messages) == len(items_to_chat(stored)[0]) - 1  # all but the last answer
    assert session.memory is managed.memory
    first_of_second_run = model.requests[13][1]
    assert first_of_second_run[-1] == {"content": "Now add a regression test.", "role": "user"}
    assert any(str(i.get("content", "")).startswith(GOAL_BLOCK_MARKER) for i in first_of_second_run if isinstance(i, dict))


async def test_instructions_tools_and_kept_items_that_leave_no_room_raise_naming_the_numbers() -> None:
    from relevance_memory import ContextOverflowError

    model = ToolLoopModel(turns=1)
    agent = Agent(name="fixer", instructions=INSTRUCTIONS * 20, model=model, tools=[read_file])
    with pytest.raises(ContextOverflowError, match="budget is 1000 tokens"):
        await Runner.run(agent, TASK, run_config=RunConfig(
            call_model_input_filter=ManagedInputFilter(max_input_tokens=1000), tracing_disabled=True))


def png_url(width: int, height: int, size: int) -> str:
    """A data URL of ``size`` bytes whose PNG header says ``width`` × ``height``."""
    head = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + width.to_bytes(4, "big") + height.to_bytes(4, "big")
    return "data:image/png;base64," + base64.b64encode(head + bytes(range(256)) * (size // 256)).decode()


SCREENSHOT = png_url(1024, 768, 60_000)


@function_tool(name_override="read_file")
def screenshot(path: str) -> ToolOutputImage:
    """Show a rendered page as an image."""
    return ToolOutputImage(image_url=SCREENSHOT)


async def test_a_tool_returning_an_image_is_counted_and_sent_as_an_image() -> None:
    """A ``ToolOutputImage`` (a function_call_output whose output is a list with an
    ``input_image`` part) costs what an image costs, and the model gets the image: before,
    the output was JSON-dumped into a tool message's text, so its 80,000-character base64
    URL counted ~60,000 tokens and the newest screenshot went out as a text excerpt of it."""
    model = ToolLoopModel(turns=3)
    agent = Agent(name="viewer", instructions=INSTRUCTIONS, model=model, tools=[screenshot])
    managed = ManagedInputFilter(max_input_tokens=BUDGET)
    await Runner.run(agent, TASK, run_config=RunConfig(call_model_input_filter=managed, tracing_disabled=True))
    assert len(model.requests) == 4
    outputs = [i for i in model.requests[-1][1] if isinstance(i, dict) and i.get("type") == "function_call_output"]
    assert [o["call_id"] for o in outputs] == ["call_1", "call_2", "call_3"]
    for output in outputs:  # the original items: the image itself, not text about it
        assert output["output"][0]["type"] == "input_image" and output["output"][0]["image_url"] == SCREENSHOT
    record = managed.last_record
    assert record is not None and record.identity
    images = [d for d in record.messages if d.role == "tool"]
    assert [d.tokens for d in images] == [image_tokens({"image_url": {"url": SCREENSHOT}}) + 4] * 3
    assert max(sizes(model, agent)) < 4000


class ServerStateModel(ToolLoopModel):
    """ToolLoopModel answering with a response id, so a run can keep its conversation on the server."""

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        response = await super().get_response(*args, **kwargs)
        return ModelResponse(output=response.output, usage=response.usage, response_id=f"resp_{len(self.requests)}")


async def test_a_run_keeping_its_conversation_on_the_server_sends_its_tool_outputs() -> None:
    """With ``auto_previous_response_id`` each call's input is only the new items (the tool
    outputs): they did not extend the memory, so the filter resynced onto an orphan tool message,
    left it out (on_invalid repair) and sent an empty input — the server would refuse the call
    for its missing outputs. Now such an input goes unchanged, with one warning."""
    model = ServerStateModel(turns=3)
    agent = Agent(name="fixer", instructions=INSTRUCTIONS, model=model, tools=[read_file])
    managed = ManagedInputFilter(max_input_tokens=BUDGET)
    with pytest.warns(RuntimeWarning, match="kept on the server") as caught:
        result = await Runner.run(agent, TASK, auto_previous_response_id=True,
                                  run_config=RunConfig(call_model_input_filter=managed, tracing_disabled=True))
    assert result.final_output == "The parser is fixed."
    assert [[i["call_id"] for i in items] for _, items, _ in model.requests[1:]] == [["call_1"], ["call_2"], ["call_3"]]
    assert len(caught) == 1


def test_agent_tools_lists_function_tools_and_handoffs() -> None:
    helper = Agent(name="reviewer", instructions="Review.")
    agent = Agent(name="fixer", instructions="Fix.", tools=[read_file], handoffs=[helper])
    tools = agent_tools(agent)
    assert [t["function"]["name"] for t in tools] == ["read_file", "transfer_to_reviewer"]
    assert tools[0]["function"]["parameters"]["properties"]["path"]["type"] == "string"


def test_both_memory_and_config_is_refused() -> None:
    from relevance_memory import RelevanceMemoryManager

    with pytest.raises(ValueError, match="either memory= or MemoryConfig"):
        ManagedInputFilter(RelevanceMemoryManager(), max_input_tokens=10)


def test_an_unused_session_filter_is_harmless() -> None:
    session = ManagedSession(inner=SQLiteSession("s-unused"), max_input_tokens=BUDGET)
    assert isinstance(session.input_filter(), ManagedInputFilter)

"""LangChain v1 ``create_agent`` with RelevanceMemoryMiddleware, and LangGraph's legacy
``create_react_agent`` with ManagedContextHook — each run through the framework's own runner."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("langchain.agents.middleware")
pytest.importorskip("langgraph")

from langchain.agents import create_agent
from langchain.agents.structured_output import ToolStrategy
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from pydantic import BaseModel, Field

from relevance_memory import (
    GOAL_BLOCK_MARKER,
    ContextOverflowError,
    RelevanceMemoryManager,
    TiktokenCounter,
    tools_tokens,
)
from relevance_memory.adapters.langchain import ManagedContextHook, RelevanceMemoryMiddleware

from .lc_fakes import ScriptedAgentModel, assert_valid_request, read_file, request_tokens

COUNTER = TiktokenCounter()
PROMPT = "You are a careful coding agent. Read the files you need, then fix the bug. " * 8
BUDGET = 4000
STEPS = 6  # tool calls per user turn
PER_TURN = 1 + 2 * STEPS + 1  # the user message, STEPS calls with their results, the answer


def config(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


def ask(thread: str, turn: int) -> dict[str, Any]:
    return {"messages": [HumanMessage(f"{thread}: fix the parser, round {turn}; never change the public API")]}


def assert_requests_within_budget_and_valid(model: ScriptedAgentModel, budget: int) -> int:
    """Every input the model received fits ``budget`` (system message, messages and tools counted)
    and is valid; no input mixes two threads. Returns the largest request (tokens)."""
    largest = 0
    for messages, tools in model.inputs:
        assert isinstance(messages[0], SystemMessage) and messages[0].content == PROMPT  # once, first, unchanged
        assert not any(isinstance(m, SystemMessage) and m.content == PROMPT for m in messages[1:])
        assert "restore_messages" in {t["function"]["name"] for t in tools}  # registered through the middleware
        tokens = request_tokens(messages, tools, COUNTER)
        assert tokens <= budget
        largest = max(largest, tokens)
        assert_valid_request(messages)
        threads = {str(m.content).split(":")[0] for m in messages if isinstance(m, HumanMessage)}
        assert len(threads) == 1
    return largest


def assert_state_is_the_whole_conversation(agent: Any, thread: str, turns: int) -> None:
    values = agent.get_state(config(thread)).values
    assert set(values) == {"messages"}  # the decision record is not in the graph state
    messages = values["messages"]
    assert len(messages) == turns * PER_TURN
    outputs = [m for m in messages if isinstance(m, ToolMessage)]
    assert len(outputs) == turns * STEPS and all(str(m.content).startswith(f"[{thread} step") for m in outputs)
    assert not any(str(m.content).startswith(GOAL_BLOCK_MARKER) for m in messages)  # nothing of ours written back


def make_agent(middleware: RelevanceMemoryMiddleware, model: ScriptedAgentModel) -> Any:
    return create_agent(
        model, [read_file], system_prompt=PROMPT, middleware=[middleware], checkpointer=InMemorySaver()
    )


def test_three_interleaved_threads_with_invoke_stay_within_budget_and_leave_the_state_whole() -> None:
    model = ScriptedAgentModel(steps=STEPS)
    memory = RelevanceMemoryMiddleware(max_input_tokens=BUDGET, keep_recent=2)
    agent = make_agent(memory, model)
    for turn in range(3):
        for thread in "ABC":
            out = agent.invoke(ask(thread, turn), config(thread))
            assert out["messages"][-1].content == f"Done with {thread}: the parser is fixed."
    assert len(model.inputs) == 3 * 3 * (STEPS + 1)
    largest = assert_requests_within_budget_and_valid(model, BUDGET)
    assert largest > BUDGET * 3 // 4  # the budget was used, not left idle
    for thread in "ABC":
        assert_state_is_the_whole_conversation(agent, thread, 3)
        record = memory.last_record(thread)
        assert record is not None and not record.identity  # the state outgrew the budget: compacted
        assert len(memory.memory_for(thread).messages) == 3 * PER_TURN - 1  # everything but the last answer
    assert memory.threads == ["A", "B", "C"]
    modes = [memory.last_record(t).mode for t in "ABC"]  # type: ignore[union-attr]
    assert set(modes) <= {"appended", "compacted"}
    longest = max(len(messages) for messages, _ in model.inputs)
    assert longest < 3 * PER_TURN  # the model never saw a whole thread


async def test_ainvoke_and_astream_run_through_the_async_hook() -> None:
    model = ScriptedAgentModel(steps=STEPS)
    memory = RelevanceMemoryMiddleware(max_input_tokens=BUDGET, keep_recent=2)
    agent = make_agent(memory, model)
    for turn in range(2):
        for thread in "AB":
            await agent.ainvoke(ask(thread, turn), config(thread))
        chunks = [chunk async for chunk in agent.astream(ask("C", turn), config("C"), stream_mode="updates")]
        assert any("model" in chunk for chunk in chunks)
    assert_requests_within_budget_and_valid(model, BUDGET)
    for thread in "ABC":
        assert_state_is_the_whole_conversation(agent, thread, 2)
    assert memory.threads == ["A", "B", "C"]


def test_stream_keeps_the_state_whole_and_each_thread_its_own_memory() -> None:
    model = ScriptedAgentModel(steps=STEPS)
    memory = RelevanceMemoryMiddleware(max_input_tokens=BUDGET, keep_recent=2)
    agent = make_agent(memory, model)
    for turn in range(3):
        for thread in "CAB":
            states = list(agent.stream(ask(thread, turn), config(thread), stream_mode="values"))
            assert len(states[-1]["messages"]) == (turn + 1) * PER_TURN
    assert_requests_within_budget_and_valid(model, BUDGET)
    for thread in "ABC":
        assert_state_is_the_whole_conversation(agent, thread, 3)
    assert memory.memory_for("A") is not memory.memory_for("B")


class _RestoringModel(BaseChatModel):
    """Calls ``restore_messages`` for the thread's first message once, then answers with what it got."""

    inputs: list[list[BaseMessage]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "restoring"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
        self.inputs.append(list(messages))
        last = messages[-1]
        if isinstance(last, ToolMessage):
            reply = AIMessage(f"restored: {last.content}")
        else:
            reply = AIMessage("", tool_calls=[{"name": "restore_messages", "args": {"ids": ["m0"]}, "id": "call_r"}])
        return ChatResult(generations=[ChatGeneration(message=reply)])


def test_the_restore_tool_reads_the_calling_threads_store() -> None:
    model = _RestoringModel()
    memory = RelevanceMemoryMiddleware(max_input_tokens=BUDGET)
    agent = create_agent(model, [], middleware=[memory], checkpointer=InMemorySaver())
    for thread in "AB":
        out = agent.invoke(ask(thread, 0), config(thread))
        restored = out["messages"][-2]
        assert isinstance(restored, ToolMessage) and restored.name == "restore_messages"
        assert restored.content == f"[m0] user: {thread}: fix the parser, round 0; never change the public API"
    goal_blocks = [m for m in model.inputs[0] if str(m.content).startswith(GOAL_BLOCK_MARKER)]
    assert all("restore_messages" in str(m.content) for m in goal_blocks)


def test_thread_memories_are_bounded_and_a_run_without_checkpointer_uses_the_default() -> None:
    template = RelevanceMemoryManager(max_input_tokens=BUDGET, keep_recent=2)
    model = ScriptedAgentModel(steps=2)
    memory = RelevanceMemoryMiddleware(template, max_threads=2)
    agent = make_agent(memory, model)
    for thread in "ABC":
        agent.invoke(ask(thread, 0), config(thread))
    assert memory.threads == ["B", "C"]
    with pytest.raises(KeyError, match="'A'"):
        memory.memory_for("A")
    assert memory.last_record("A") is None
    agent.invoke(ask("A", 1), config("A"))  # an evicted thread re-ingests its state: nothing lost
    assert len(memory.memory_for("A").messages) == 2 * (1 + 2 * 2 + 1) - 1
    assert memory.memory_for("A").scorer is template.scorer  # thread memories are fresh() copies

    stateless = create_agent(model, [read_file], system_prompt=PROMPT, middleware=[memory])
    stateless.invoke(ask("D", 0))
    assert memory.memory_for(None) is template and memory.last_record() is not None


@tool
def screenshot(page: str) -> list[dict[str, Any]]:
    """Render a page and return a screenshot of it."""
    return [{"type": "text", "text": f"screenshot of {page}"},
            {"type": "image", "base64": "iVBORw0KGgo" * 2000, "mime_type": "image/png"}]


class _ScreenshotModel(BaseChatModel):
    """Takes ``shots`` screenshots, one a call, then answers."""

    shots: int = 3
    inputs: list[list[BaseMessage]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "screenshots"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
        self.inputs.append(list(messages))
        n = len(self.inputs)
        reply = AIMessage("The page looks right.") if n > self.shots else AIMessage(
            "", tool_calls=[{"name": "screenshot", "args": {"page": f"/page/{n}"}, "id": f"call_s{n}"}])
        return ChatResult(generations=[ChatGeneration(message=reply)])


def test_a_tool_returning_an_image_reaches_the_model_as_the_callers_tool_message() -> None:
    """A tool whose result holds an image (a screenshot tool; Anthropic and Gemini chat models
    take images in tool results) became a tool message with an ``image_url`` part, which the
    store refuses outside user messages: the agent's next model call raised InvalidMessageError.
    Now the image counts as an image and the model gets the caller's ToolMessage."""
    model = _ScreenshotModel()
    memory = RelevanceMemoryMiddleware(max_input_tokens=BUDGET)
    agent = create_agent(model, [screenshot], system_prompt=PROMPT, middleware=[memory], checkpointer=InMemorySaver())
    out = agent.invoke(ask("A", 0), config("A"))
    assert out["messages"][-1].content == "The page looks right."
    results = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert len(results) == 3 and all(m.content[1]["type"] == "image" for m in results)
    sent = [m for m in model.inputs[-1] if isinstance(m, ToolMessage)]
    assert len(sent) == 3 and all(a is b for a, b in zip(sent, results, strict=True))
    record = memory.last_record("A")
    assert record is not None and record.identity and record.tokens_before < BUDGET


class Finding(BaseModel):
    """The agent's final report: one field per module read."""

    summary: str
    notes: dict[str, str] = Field(description="what each of " + ", ".join(f"src/A/module_{n}.py" for n in range(120)) + " does")


class _ReportingModel(ScriptedAgentModel):
    """ScriptedAgentModel that ends with the ``Finding`` structured-output tool call instead of text."""

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
        result = super()._generate(messages, stop, run_manager, **kwargs)
        reply = result.generations[0].message
        if isinstance(reply, AIMessage) and not reply.tool_calls:
            call = {"name": "Finding", "args": {"summary": str(reply.content), "notes": {}}, "id": "call_finding"}
            result = ChatResult(generations=[ChatGeneration(message=AIMessage("", tool_calls=[call]))])
        return result


def test_a_response_format_schema_counts_against_the_budget() -> None:
    """``create_agent(response_format=...)`` binds the structured-output tool after every
    middleware, so it was not in ``request.tools`` and its ~930-token schema pushed requests
    over the budget. Now the middleware counts it with the tools."""
    model = _ReportingModel(steps=STEPS)
    memory = RelevanceMemoryMiddleware(max_input_tokens=BUDGET, keep_recent=2)
    agent = create_agent(model, [read_file], system_prompt=PROMPT, middleware=[memory],
                         response_format=ToolStrategy(Finding), checkpointer=InMemorySaver())
    for turn in range(2):
        out = agent.invoke(ask("A", turn), config("A"))
        assert isinstance(out["structured_response"], Finding)
    assert all("Finding" in {t["function"]["name"] for t in tools} for _, tools in model.inputs)
    assert tools_tokens(COUNTER, [t for t in model.inputs[0][1] if t["function"]["name"] == "Finding"]) > 900
    largest = assert_requests_within_budget_and_valid(model, BUDGET)
    assert largest > BUDGET * 3 // 4


class _ThinkingModel(ScriptedAgentModel):
    """ScriptedAgentModel whose tool-calling turns open with a long thinking block (ChatAnthropic
    with extended thinking on); fails a call whose final tool-loop turn does not, as the API does."""

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
        if isinstance(messages[-1], ToolMessage):
            final = next(m for m in reversed(messages) if isinstance(m, AIMessage))
            assert isinstance(final.content, list) and final.content[0]["type"] == "thinking", final.content
        result = super()._generate(messages, stop, run_manager, **kwargs)
        reply = result.generations[0].message
        if isinstance(reply, AIMessage) and reply.tool_calls:
            thinking = {"type": "thinking", "thinking": "Which module next? " + "because " * 1500, "signature": "c2ln" * 30}
            reply = AIMessage([thinking, {"type": "text", "text": str(reply.content)}], tool_calls=reply.tool_calls)
        return ChatResult(generations=[ChatGeneration(message=reply)])


def test_with_extended_thinking_every_call_opens_the_final_turn_with_its_thinking() -> None:
    model = _ThinkingModel(steps=STEPS)
    memory = RelevanceMemoryMiddleware(max_input_tokens=BUDGET, keep_recent=2)
    out = make_agent(memory, model).invoke(ask("A", 0), config("A"))
    assert out["messages"][-1].content == "Done with A: the parser is fixed."
    assert_requests_within_budget_and_valid(model, BUDGET)


class _ClaudeLikeModel(ScriptedAgentModel):
    """ScriptedAgentModel that reports itself as ChatAnthropic does and, as langchain-anthropic's
    message formatting does, refuses a system message once the conversation has started."""

    @property
    def _llm_type(self) -> str:
        return "anthropic-chat"

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
        first = next((n for n, m in enumerate(messages) if not isinstance(m, SystemMessage)), len(messages))
        if any(isinstance(m, SystemMessage) for m in messages[first:]):
            raise ValueError("Received multiple non-consecutive system messages.")
        return super()._generate(messages, stop, run_manager, **kwargs)


def test_a_claude_model_gets_the_goal_block_and_summaries_as_human_messages() -> None:
    """The default context_role is system: once a build compacted, the goal block and summaries
    went to the model as SystemMessages after the task, which ChatAnthropic refuses ("Received
    multiple non-consecutive system messages"): the agent crashed at its first compaction. For a
    model whose _llm_type names anthropic they are now HumanMessages; other models are unchanged."""
    model = _ClaudeLikeModel(steps=STEPS)
    memory = RelevanceMemoryMiddleware(max_input_tokens=BUDGET, keep_recent=2)
    agent = make_agent(memory, model)
    for turn in range(2):
        agent.invoke(ask("A", turn), config("A"))
    record = memory.last_record("A")
    assert record is not None and not record.identity
    late = [m for m in model.inputs[-1][0][1:] if str(m.content).startswith(GOAL_BLOCK_MARKER)]
    assert late and all(isinstance(m, HumanMessage) for m in late)
    assert_state_is_the_whole_conversation(agent, "A", 2)


def test_a_system_prompt_over_the_budget_raises_naming_the_budget_that_was_set() -> None:
    """The middleware took the system message off the budget first and built with what was
    left, so a prompt over the budget raised ConfigError "budget must be a positive number of
    tokens, got -1005", naming neither the prompt nor the 2,000 tokens set. Now it raises
    ContextOverflowError naming both."""
    memory = RelevanceMemoryMiddleware(max_input_tokens=2000)
    agent = create_agent(ScriptedAgentModel(steps=1), [read_file], system_prompt="word " * 3000, middleware=[memory])
    with pytest.raises(ContextOverflowError, match=r"system prompt takes 3008 tokens .* budget is 2,?000 tokens"):
        agent.invoke(ask("A", 0))
    hook = ManagedContextHook(max_input_tokens=2000, prompt="word " * 3000)
    with pytest.raises(ContextOverflowError, match=r"budget is 2,?000 tokens"):
        hook([HumanMessage("A: fix the parser")])


def test_both_memory_and_config_is_refused() -> None:
    with pytest.raises(ValueError, match="either memory= or MemoryConfig"):
        RelevanceMemoryMiddleware(RelevanceMemoryManager(), max_input_tokens=100)


# --------------------------------------------------------------------------- the legacy path
@pytest.mark.filterwarnings("ignore::langgraph.warnings.LangGraphDeprecatedSinceV10")
@pytest.mark.parametrize("runnable", [False, True])
def test_create_react_agent_threads_a_b_a_b_get_their_memories_and_the_prompt_and_tools_count(runnable: bool) -> None:
    from langgraph.prebuilt import create_react_agent

    model = ScriptedAgentModel(steps=STEPS)
    hook = ManagedContextHook(max_input_tokens=BUDGET, keep_recent=2, tools=[read_file], prompt=PROMPT)
    agent = create_react_agent(
        model, [read_file], prompt=PROMPT, pre_model_hook=hook.as_runnable() if runnable else hook,
        checkpointer=InMemorySaver(),
    )
    for turn in range(2):
        for thread in "AB":  # A, B, A, B: a thread switch must not resync (that would warn: an error here)
            agent.invoke(ask(thread, turn), config(thread))
    assert hook.threads == ["A", "B"]
    largest = 0
    for messages, tools in model.inputs:
        assert messages[0].content == PROMPT
        tokens = request_tokens(messages, tools, COUNTER)
        assert tokens <= BUDGET
        largest = max(largest, tokens)
        assert_valid_request(messages)
    assert largest > BUDGET * 3 // 4
    for thread in "AB":
        state = agent.get_state(config(thread)).values["messages"]
        assert len(state) == 2 * PER_TURN
        assert len(hook.memory_for(thread).messages) == 2 * PER_TURN - 1
        assert not hook.memory_for(thread).store.messages[0].text.startswith("B" if thread == "A" else "A")

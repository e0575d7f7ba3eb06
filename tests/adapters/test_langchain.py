"""The LangChain / LangGraph adapter with LangChain's real message types."""

from __future__ import annotations

import sys

import pytest

pytest.importorskip("langchain_core")

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from relevance_memory import GOAL_BLOCK_MARKER, SUMMARY_MARKER, check_context
from relevance_memory._tokenizer import REPLY_PRIMING_TOKENS
from relevance_memory.adapters._langchain_messages import to_store_messages
from relevance_memory.adapters.langchain import ManagedContextHook, from_openai_messages, to_openai_messages


def conversation(steps: int = 10) -> list[BaseMessage]:
    """A tool-using agent run with parallel tool calls in every step."""
    out: list[BaseMessage] = [
        SystemMessage("You are a coding agent."),
        HumanMessage("Fix the date parser in utils/dates.py; never change the public API.", id="task"),
    ]
    for n in range(steps):
        out.append(AIMessage(
            f"Step {n}: read two files at once.",
            id=f"ai{n}",
            tool_calls=[
                {"name": "bash", "args": {"command": f"cat file_{n}_a.py"}, "id": f"call_{n}_a"},
                {"name": "bash", "args": {"command": f"cat file_{n}_b.py"}, "id": f"call_{n}_b"},
            ],
        ))
        out.append(ToolMessage(f"contents of file_{n}_a " + "x = 1\n" * 80, tool_call_id=f"call_{n}_a", name="bash"))
        out.append(ToolMessage(f"contents of file_{n}_b " + "y = 2\n" * 80, tool_call_id=f"call_{n}_b", name="bash"))
    out.append(AIMessage("The parser is fixed.", id="final"))
    return out


def assert_whole_chains(messages: list[BaseMessage]) -> None:
    assert check_context(to_openai_messages(messages)) == []
    for i, message in enumerate(messages):
        if isinstance(message, AIMessage) and message.tool_calls:
            answered = [m.tool_call_id for m in messages[i + 1 : i + 1 + len(message.tool_calls)]]
            assert answered == [c["id"] for c in message.tool_calls]


def test_openai_round_trip_keeps_parallel_tool_calls() -> None:
    messages = conversation(3)
    dicts = to_openai_messages(messages)
    assert [c["id"] for c in dicts[2]["tool_calls"]] == ["call_0_a", "call_0_b"]
    back = from_openai_messages(dicts)
    assert [type(m) for m in back] == [type(m) for m in messages]
    assert back[2].tool_calls == messages[2].tool_calls
    assert [m.tool_call_id for m in back if isinstance(m, ToolMessage)] == [
        m.tool_call_id for m in messages if isinstance(m, ToolMessage)
    ]
    assert to_openai_messages(back) == dicts


def test_under_budget_the_hook_returns_the_input_objects() -> None:
    messages = conversation(2)
    hook = ManagedContextHook(max_input_tokens=100_000)
    out = hook(messages)
    assert len(out) == len(messages) and all(a is b for a, b in zip(out, messages, strict=True))
    assert hook.last_record is not None and hook.last_record.identity


def test_compacted_context_keeps_objects_and_whole_parallel_chains_as_history_grows() -> None:
    messages = conversation(12)
    hook = ManagedContextHook(max_input_tokens=2500, keep_recent=2)
    hook.set_goal(subtask="edit utils/dates.py")
    for end in (8, 20, len(messages)):  # a LangGraph state grows between model calls
        state = {"messages": messages[:end]}
        out = hook(state)["llm_input_messages"]
        record = hook.last_record
        assert record is not None and record.tokens_after <= 2500
        assert len(hook.memory.messages) == end
    assert len(out) < len(messages)
    assert out[0] is messages[0]
    assert out[1] is messages[1]  # the stable head: the task statement, kept in place (SPEC §3.1)
    goal = out[2]
    assert isinstance(goal, SystemMessage) and str(goal.content).startswith(GOAL_BLOCK_MARKER)
    assert "subtask" not in str(goal.content)  # the subtask never rewrites the prefix
    originals = {id(m) for m in messages}
    summaries = [m for m in out if str(m.content).startswith(SUMMARY_MARKER)]
    assert all(isinstance(m, SystemMessage) for m in summaries)  # summaries are new, never AI messages
    cut = [m for m in out if str(m.content).startswith(("[relevance-memory: excerpt", "[relevance-memory: elided"))]
    # ids untouched: every message is the caller's own object, but the build's (goal block,
    # summaries) and the excerpts / elided outputs it sends instead of a whole one (issue 21)
    assert all(id(m) in originals for m in out if m is not goal and m not in summaries and m not in cut)
    assert all(id(m) not in originals and getattr(m, "tool_call_id", None) for m in cut if isinstance(m, ToolMessage))
    assert out[-1] is messages[-1]
    assert_whole_chains(out)
    assert any(isinstance(m, AIMessage) and len(m.tool_calls) == 2 for m in out)


async def test_runnable_lambda_sync_and_async() -> None:
    messages = conversation(12)
    hook = ManagedContextHook(max_input_tokens=2500, keep_recent=2)
    runnable = hook.as_runnable()
    out = runnable.invoke(messages)
    assert_whole_chains(out)
    edited = [*messages[:5], HumanMessage("Actually, also add a test.")]
    with pytest.warns(RuntimeWarning, match="diverged"):
        again = await runnable.ainvoke(edited)
    assert again == edited and [m.raw for m in hook.memory.messages] == to_openai_messages(edited)


def test_missing_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "langchain_core", None)
    with pytest.raises(ImportError, match=r"relevance-memory\[langchain\]"):
        ManagedContextHook()


def test_a_state_object_with_messages_gets_llm_input_messages() -> None:
    class State:
        def __init__(self, messages: list[BaseMessage]) -> None:
            self.messages = messages

    messages = conversation(1)
    out = ManagedContextHook(max_input_tokens=100_000)(State(messages))
    assert out == {"llm_input_messages": messages}


def test_the_hook_is_prefix_stable_by_default() -> None:
    """Between compactions each call's messages are the previous call's plus the new ones (SPEC §3.1)."""
    messages = conversation(30)
    hook = ManagedContextHook(max_input_tokens=6000, keep_recent=2)
    outputs, modes = [], []
    for end in range(8, len(messages), 3):
        while isinstance(messages[end - 1], AIMessage) and messages[end - 1].tool_calls:
            end += 1
        out = hook({"messages": messages[:end]})["llm_input_messages"]
        record = hook.last_record
        assert record is not None and record.tokens_after <= 6000
        assert_whole_chains(out)
        outputs.append(out)
        modes.append(record.mode)
    assert "compacted" in modes and modes.count("appended") > len(modes) // 2
    for n, mode in enumerate(modes):
        if mode == "appended":
            previous = outputs[n - 1]
            assert to_openai_messages(outputs[n][: len(previous)]) == to_openai_messages(previous)
            originals = {id(m) for m in messages}  # the caller's own objects, in place
            assert all(a is b for a, b in zip(outputs[n], previous, strict=False) if id(b) in originals)


def anthropic_form_history(lines: int) -> list[BaseMessage]:
    """A history in Anthropic's block form, as LangChain keeps it from Anthropic-shaped dicts:
    an assistant turn with two ``tool_use`` blocks, then one user turn holding both results."""
    return [
        HumanMessage("Fix the date parser in utils/dates.py; never change the public API."),
        AIMessage(content=[
            {"type": "text", "text": "Reading both files."},
            {"type": "tool_use", "id": "tu_a", "name": "read", "input": {"path": "a.py"}},
            {"type": "tool_use", "id": "tu_b", "name": "read", "input": {"path": "b.py"}},
        ]),
        HumanMessage(content=[
            {"type": "tool_result", "tool_use_id": "tu_a", "content": "x = 1\n" * lines},
            {"type": "tool_result", "tool_use_id": "tu_b", "content": "y = 2\n" * lines},
        ]),
        AIMessage("Both read: the bug is in b.py."),
        HumanMessage("Fix it then."),
    ]


@pytest.mark.parametrize("budget", [2000, 300])
def test_a_user_turn_of_several_tool_results_maps_back_to_its_one_message(budget: int) -> None:
    """LangChain turns a user message holding two ``tool_result`` blocks into two tool
    messages; the hook used the i-th stored message's index into the caller's list, so every
    later index was off by one and the build raised IndexError. Now such a message comes back
    once, as the caller's object, when its results are sent whole; shortened, each result is a
    ToolMessage right after its call."""
    history = anthropic_form_history(50)
    out = ManagedContextHook(max_input_tokens=budget)(history)
    assert out[-1] is history[-1] and out[-2] is history[-2]
    if budget == 2000:
        assert out == history and all(a is b for a, b in zip(out, history, strict=True))
    else:
        calls = out.index(history[1])
        assert [m.tool_call_id for m in out[calls + 1 : calls + 3] if isinstance(m, ToolMessage)] == ["tu_a", "tu_b"]
        assert history[2] not in out


def thinking_loop(steps: int) -> list[BaseMessage]:
    """A tool loop of a model with extended thinking on (ChatAnthropic's AIMessages): each turn
    thinks at length (~2,000 tokens), says a line, calls a tool; the history ends with a result."""
    out: list[BaseMessage] = [HumanMessage("Find the handler that drops the timezone; never edit files.")]
    for k in range(steps):
        out.append(AIMessage(
            content=[{"type": "thinking", "thinking": f"Step {k}: part_{k}.py may hold it, " + "because " * 1500,
                      "signature": f"sig-{k}-" + "Zm9v" * 40},
                     {"type": "text", "text": f"Reading part_{k}.py."},
                     {"type": "tool_use", "id": f"toolu_{k}", "name": "read", "input": {"path": f"src/part_{k}.py"}}],
            tool_calls=[{"name": "read", "args": {"path": f"src/part_{k}.py"}, "id": f"toolu_{k}"}],
        ))
        out.append(ToolMessage(f"src/part_{k}.py\n" + "x = 1\n" * 40, tool_call_id=f"toolu_{k}"))
    return out


def test_the_final_tool_loop_turn_keeps_its_thinking_blocks_within_the_budget() -> None:
    """With extended thinking on, Anthropic refuses a request whose final tool-loop turn does not
    open with its thinking blocks, unchanged. A long thinking block made that turn an excerpt
    (a new AIMessage of text): ChatAnthropic's next call would get a 400. Now the context is
    built with room for them and they open that turn's message."""
    history = thinking_loop(4)
    hook = ManagedContextHook(max_input_tokens=4000)
    out = hook(history)
    final = next(m for m in reversed(out) if isinstance(m, AIMessage))
    assert final.tool_calls[0]["id"] == "toolu_3" and final is not history[-2]  # sent shortened …
    assert final.content[0] == history[-2].content[0]  # … opening with its thinking block, signature and all
    assert_whole_chains(out)
    counter = hook.memory.tokenizer
    assert sum(counter.count_message(m) for m in to_store_messages(out)[0]) + REPLY_PRIMING_TOKENS <= 4000

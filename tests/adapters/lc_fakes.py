"""A scripted LangChain chat model and a file-reading tool for agent-loop tests (no network).

The model answers each call from the last message it was given: after a user message it
calls ``read_file`` for step 1; after the result of step ``k`` it calls step ``k + 1``; after
step ``steps`` it answers in text. Every input it receives (messages and bound tools) is kept,
so a test can count each request's tokens and check its validity.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import Field

from relevance_memory import TiktokenCounter, check_context, tools_tokens
from relevance_memory._tokenizer import REPLY_PRIMING_TOKENS
from relevance_memory.adapters.langchain import to_openai_messages

_STEP = re.compile(r"^\[(\w+) step (\d+)\]", re.MULTILINE)  # a line of its own: an excerpt opens with its marker line
_ids = itertools.count()


def file_text(thread: str, step: int, lines: int = 60) -> str:
    """A sizeable tool output: a numbered source listing (about 13 tokens a line)."""
    body = "\n".join(
        f"{n:4d}    def handler_{step}_{n}(request, value={n * 7}): return parse_{thread}(value)" for n in range(lines)
    )
    return f"[{thread} step {step}] src/{thread}/module_{step}.py\n{body}"


@tool
def read_file(path: str) -> str:
    """Read a source file and return its numbered lines."""
    thread, step = path.split("/")[1], int(re.findall(r"\d+", path)[-1])
    return file_text(thread, step)


class ScriptedAgentModel(BaseChatModel):
    """Calls ``read_file`` ``steps`` times per user turn, then answers (module doc)."""

    steps: int = 5
    inputs: list[tuple[list[BaseMessage], list[dict[str, Any]]]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "scripted-agent"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
        self.inputs.append((list(messages), list(kwargs.get("tools") or [])))
        last = messages[-1]
        asked = [m for m in messages if isinstance(m, HumanMessage)]  # the newest is always kept verbatim
        thread = str(asked[-1].content).split(":")[0] if asked else "t"
        step = 0
        if isinstance(last, ToolMessage):
            match = _STEP.search(str(last.content))
            step = int(match.group(2)) if match else self.steps
            thread = match.group(1) if match else thread
        if step >= self.steps:
            reply = AIMessage(f"Done with {thread}: the parser is fixed.")
        else:
            path = f"src/{thread}/module_{step + 1}.py"
            reply = AIMessage(
                f"Reading {path}.",
                tool_calls=[{"name": "read_file", "args": {"path": path}, "id": f"call_{next(_ids)}"}],
            )
        return ChatResult(generations=[ChatGeneration(message=reply)])


def request_tokens(messages: list[BaseMessage], tools: list[dict[str, Any]], counter: TiktokenCounter) -> int:
    """Tokens of one model request as the memory counts them: messages (with reply priming) + tools' schema."""
    dicts = to_openai_messages(messages)
    return sum(counter.count_message(m) for m in dicts) + REPLY_PRIMING_TOKENS + tools_tokens(counter, tools)


def assert_valid_request(messages: list[BaseMessage]) -> None:
    """Every tool result follows its call, every call has its results (SPEC §9)."""
    assert check_context(to_openai_messages(messages)) == []
    for i, message in enumerate(messages):
        if isinstance(message, AIMessage) and message.tool_calls:
            answered = [m.tool_call_id for m in messages[i + 1 : i + 1 + len(message.tool_calls)]]
            assert answered == [c["id"] for c in message.tool_calls]

"""A LangChain v1 agent (``create_agent``) with RelevanceMemoryMiddleware, replaying a real SWE-bench run.

No key, no network: a local fake chat model answers each model call with the run's next
recorded assistant message (tool calls included) and the ``bash`` tool answers each call
with the output recorded for it, so ``create_agent``'s own loop runs the whole recorded tool
loop (96 model calls on the shipped django run) under an ``InMemorySaver`` checkpointer::

    memory = RelevanceMemoryMiddleware(max_input_tokens=8000)
    agent = create_agent(model, [bash], system_prompt=system, middleware=[memory],
                         checkpointer=InMemorySaver())
    agent.invoke({"messages": [task]}, {"configurable": {"thread_id": "swe"}})

Every request the model receives is measured with the memory's tokenizer — system message,
messages and tools' schema — and printed, then a ``TOTAL`` line with the largest against the
budget::

    python examples/langchain_agent.py                      # middleware, 8k budget
    python examples/langchain_agent.py --legacy             # LangGraph create_react_agent + ManagedContextHook
    python examples/langchain_agent.py --unmanaged          # the same loop without a memory
    python examples/langchain_agent.py ../shared/data/swebench_trajectories/sympy__sympy-13091.json
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path
from typing import Annotated, Any

from _swe_replay import DEFAULT_TRANSCRIPT, Requests, SweRun, load_run
from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import BaseTool, InjectedToolCallId, StructuredTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.checkpoint.memory import InMemorySaver
from pydantic import Field

from relevance_memory import TiktokenCounter, tools_tokens
from relevance_memory._tokenizer import REPLY_PRIMING_TOKENS
from relevance_memory.adapters.langchain import ManagedContextHook, RelevanceMemoryMiddleware, to_openai_messages

COUNTER = TiktokenCounter()


class ReplayModel(BaseChatModel):
    """A chat model that answers with recorded assistant messages, in order, and measures
    every request it receives (system message, messages, bound tools)."""

    replies: list[dict[str, Any]]
    budget: int | None = None
    requests: Requests = Field(default_factory=lambda: Requests(None))

    @property
    def _llm_type(self) -> str:
        return "swe-replay"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
        tools = kwargs.get("tools") or []
        dicts = to_openai_messages(messages)
        self.requests.sizes.append(
            sum(COUNTER.count_message(m) for m in dicts) + REPLY_PRIMING_TOKENS + tools_tokens(COUNTER, tools)
        )
        n = len(self.requests.sizes) - 1
        if n >= len(self.replies):  # the recorded run ended after its last tool call
            return ChatResult(generations=[ChatGeneration(message=AIMessage("Submitted."))])
        recorded = self.replies[n]
        calls = [
            {"name": c["function"]["name"], "args": json.loads(c["function"]["arguments"]), "id": c["id"]}
            for c in recorded.get("tool_calls") or ()
        ]
        return ChatResult(generations=[ChatGeneration(message=AIMessage(recorded.get("content") or "", tool_calls=calls))])


def bash_tool(run: SweRun) -> BaseTool:
    """The run's ``bash`` tool: each call gets the output recorded for its call id."""

    def bash(command: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> str:
        return run.outputs.get(tool_call_id, "(no recorded output)")

    description = run.tools[0]["function"]["description"] if run.tools else "Run one bash command."
    return StructuredTool.from_function(bash, name="bash", description=description)


def replay(
    transcript: Path, *, budget: int = 8000, keep_recent: int = 4, mode: str = "middleware", requests: Requests | None = None
) -> Requests:
    """Run the recorded run through ``create_agent`` (``mode="middleware"`` or ``"unmanaged"``) or
    LangGraph's ``create_react_agent`` with the legacy hook (``"legacy"``); returns the request
    sizes (``requests``, when given, is filled as the run goes: it holds them if the run raises)."""
    run = load_run(transcript)
    requests = requests if requests is not None else Requests(budget if mode != "unmanaged" else None)
    model = ReplayModel(replies=run.replies, requests=requests)
    tools = [bash_tool(run)]
    checkpointer = InMemorySaver()
    if mode == "legacy":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # create_react_agent: deprecated since LangGraph 1.0
            from langgraph.prebuilt import create_react_agent

            hook = ManagedContextHook(max_input_tokens=budget, keep_recent=keep_recent, tools=tools, prompt=run.system)
            agent = create_react_agent(model, tools, prompt=run.system, pre_model_hook=hook, checkpointer=checkpointer)
    else:
        middleware = [RelevanceMemoryMiddleware(max_input_tokens=budget, keep_recent=keep_recent)] if mode == "middleware" else []
        agent = create_agent(model, tools, system_prompt=run.system, middleware=middleware, checkpointer=checkpointer)
    config = {"configurable": {"thread_id": run.name}, "recursion_limit": 10_000}
    for turn in run.turns:
        agent.invoke({"messages": [HumanMessage(turn["content"])]}, config)
    return model.requests


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("transcript", nargs="?", type=Path, default=DEFAULT_TRANSCRIPT)
    parser.add_argument("--budget", type=int, default=8000, help="token budget of each model request (tokens)")
    parser.add_argument("--keep-recent", type=int, default=4, help="working memory in steps")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--legacy", action="store_true", help="LangGraph create_react_agent + ManagedContextHook")
    group.add_argument("--unmanaged", action="store_true", help="no memory: the baseline")
    args = parser.parse_args(argv)
    mode = "legacy" if args.legacy else "unmanaged" if args.unmanaged else "middleware"
    requests = replay(args.transcript, budget=args.budget, keep_recent=args.keep_recent, mode=mode)
    requests.report(f"langchain-{mode} {args.transcript.stem}", sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""An OpenAI Agents SDK agent whose every model call is managed, replaying a real SWE-bench run.

No key, no network: a local fake ``Model`` answers each model call with the run's next
recorded assistant message (its tool calls as ``function_call`` items) and the ``bash`` tool
answers each call with the output recorded for it, so ``Runner.run`` drives the whole
recorded tool loop (96 model calls on the shipped django run)::

    managed = ManagedInputFilter(max_input_tokens=8000)
    result = await Runner.run(agent, task, max_turns=500,
                              run_config=RunConfig(call_model_input_filter=managed))

Every request the model receives is measured with the memory's tokenizer — instructions,
items and tools' schema — and printed, then a ``TOTAL`` line with the largest against the
budget::

    python examples/agents_sdk.py                   # call_model_input_filter, 8k budget
    python examples/agents_sdk.py --session         # ManagedSession alone (read once per run)
    python examples/agents_sdk.py --session-filter  # ManagedSession + session.input_filter()
    python examples/agents_sdk.py --unmanaged       # the same loop without a memory
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from _swe_replay import DEFAULT_TRANSCRIPT, Requests, SweRun, load_run
from agents import Agent, FunctionTool, ModelResponse, RunConfig, Runner, SQLiteSession, Usage
from agents.models.interface import Model
from agents.tool_context import ToolContext
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

from relevance_memory import TiktokenCounter
from relevance_memory.adapters.openai_agents import ManagedInputFilter, ManagedSession, agent_tools, request_tokens

COUNTER = TiktokenCounter()


class ReplayModel(Model):
    """A ``Model`` that answers with recorded assistant messages, in order, and measures every
    request it receives (instructions, input items, the agent's tools)."""

    def __init__(self, run: SweRun, requests: Requests) -> None:
        self.run = run
        self.requests = requests
        self.tools: list[dict[str, Any]] = []

    async def get_response(self, system_instructions: Any, input: Any, model_settings: Any, tools: Any,
                           *args: Any, **kwargs: Any) -> ModelResponse:
        items = list(input) if isinstance(input, list) else [{"role": "user", "content": input}]
        self.requests.sizes.append(request_tokens(COUNTER, items, instructions=system_instructions, tools=self.tools))
        n = len(self.requests.sizes) - 1
        recorded = self.run.replies[n] if n < len(self.run.replies) else {"content": "Submitted."}
        output: list[Any] = []
        if recorded.get("content"):
            output.append(ResponseOutputMessage(
                type="message", id=f"msg_{n}", role="assistant", status="completed",
                content=[ResponseOutputText(type="output_text", text=recorded["content"], annotations=[])],
            ))
        for call in recorded.get("tool_calls") or ():
            output.append(ResponseFunctionToolCall(
                type="function_call", id=f"fc_{call['id']}", call_id=call["id"],
                name=call["function"]["name"], arguments=call["function"]["arguments"],
            ))
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:  # pragma: no cover - not used
        raise NotImplementedError


def bash_tool(run: SweRun) -> FunctionTool:
    """The run's ``bash`` tool: each call gets the output recorded for its call id."""

    async def invoke(context: ToolContext[Any], arguments: str) -> str:
        return run.outputs.get(context.tool_call_id, "(no recorded output)")

    schema = run.tools[0]["function"] if run.tools else {"description": "Run one bash command.", "parameters": {}}
    parameters = {**schema["parameters"], "additionalProperties": False}
    return FunctionTool(name="bash", description=schema["description"], params_json_schema=parameters,
                        on_invoke_tool=invoke)


async def replay(
    transcript: Path, *, budget: int = 8000, keep_recent: int = 4, mode: str = "filter", requests: Requests | None = None
) -> Requests:
    """Run the recorded run through ``Runner.run``: ``mode`` is ``filter`` (ManagedInputFilter),
    ``session`` (ManagedSession alone), ``session-filter`` (both) or ``unmanaged``. Returns the
    request sizes (``requests``, when given, is filled as the run goes: it holds them if the run raises)."""
    run = load_run(transcript)
    requests = requests if requests is not None else Requests(budget if mode != "unmanaged" else None)
    model = ReplayModel(run, requests)
    agent = Agent(name="swe", instructions=run.system, model=model, tools=[bash_tool(run)])
    model.tools = agent_tools(agent)
    session: Any = None
    config = RunConfig(tracing_disabled=True)
    if mode == "filter":
        config = RunConfig(tracing_disabled=True,
                           call_model_input_filter=ManagedInputFilter(max_input_tokens=budget, keep_recent=keep_recent))
    elif mode in ("session", "session-filter"):
        session = ManagedSession(run.name, max_input_tokens=budget, keep_recent=keep_recent)
        if mode == "session-filter":
            config = RunConfig(tracing_disabled=True, call_model_input_filter=session.input_filter())
    else:  # unmanaged: the SDK's own session, everything sent
        session = SQLiteSession(run.name)
    carried: list[Any] = []  # without a session, each run's input is the conversation so far
    for turn in run.turns:
        given: Any = turn["content"] if session is not None else [*carried, {"role": "user", "content": turn["content"]}]
        result = await Runner.run(agent, given, session=session, max_turns=1000, run_config=config)
        carried = result.to_input_list()
    return requests


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("transcript", nargs="?", type=Path, default=DEFAULT_TRANSCRIPT)
    parser.add_argument("--budget", type=int, default=8000, help="token budget of each model request (tokens)")
    parser.add_argument("--keep-recent", type=int, default=4, help="working memory in steps")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--session", action="store_true", help="ManagedSession alone (the history read once per run)")
    group.add_argument("--session-filter", action="store_true", help="ManagedSession with session.input_filter()")
    group.add_argument("--unmanaged", action="store_true", help="no memory: the baseline")
    args = parser.parse_args(argv)
    mode = ("session" if args.session else "session-filter" if args.session_filter
            else "unmanaged" if args.unmanaged else "filter")
    requests = asyncio.run(replay(args.transcript, budget=args.budget, keep_recent=args.keep_recent, mode=mode))
    requests.report(f"agents-{mode} {args.transcript.stem}", sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

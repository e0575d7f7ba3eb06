"""The managed OpenAI client (``relevance_memory.clients._openai``).

Cassette tests replay ``tests/cassettes/test_client/*.yaml`` with vcrpy (record mode
``none``: no network). The cassettes are hand-made, not recorded from a live endpoint:
``python tests/client/test_client.py`` regenerates them by running the same calls against a
scripted model (``examples/replay_agent.py``'s ``ScriptedModel``, which answers with the
assistant messages of the real SWE-bench run in ``fixtures/``) while vcrpy records;
the Authorization header is filtered out. Logic tests use an ``httpx`` mock transport.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import json
import sys
import warnings
from pathlib import Path
from typing import Any

import openai
import pytest
from pydantic import BaseModel

from relevance_memory import (
    GOAL_BLOCK_MARKER,
    AsyncManagedOpenAI,
    HistoryDivergedError,
    ManagedOpenAI,
    RelevanceMemoryManager,
    check_context,
    load_transcript,
    manage,
)
from relevance_memory._markers import SUBTASK_MARKER
from relevance_memory._tokenizer import REPLY_PRIMING_TOKENS

try:  # openai>=3 talks through httpx2; older versions through httpx
    import httpx2 as httpx
except ImportError:  # pragma: no cover
    import httpx  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "fixtures" / "django__django-15280.json"
BASE_URL = "https://api.openai.com/v1"
BUDGET = 4000
KEEP_RECENT = 2
CALLS = 6


@functools.lru_cache(maxsize=1)
def _example() -> Any:
    spec = importlib.util.spec_from_file_location("replay_agent", ROOT / "examples" / "replay_agent.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("replay_agent", module)
    spec.loader.exec_module(module)
    return module


def _run() -> tuple[list[dict[str, Any]], list[tuple[dict[str, Any], list[dict[str, Any]]]], list[dict[str, Any]]]:
    messages = load_transcript(FIXTURE).messages
    tools = json.loads(FIXTURE.read_text(encoding="utf-8"))["tools"]
    opening, steps = _example().steps_of(messages)
    return opening, steps[:CALLS], tools


PARALLEL_REPLY = {
    "role": "assistant",
    "content": "THOUGHT: look at both files at once.",
    "tool_calls": [
        {"id": "call_p1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "cat a.py"}'}},
        {"id": "call_p2", "type": "function", "function": {"name": "bash", "arguments": '{"command": "cat b.py"}'}},
    ],
}
PARALLEL_RESULTS = [
    {"role": "tool", "tool_call_id": "call_p1", "name": "bash", "content": "print('a')"},
    {"role": "tool", "tool_call_id": "call_p2", "name": "bash", "content": "print('b')"},
]


@pytest.fixture(scope="module")
def vcr_config() -> dict[str, Any]:
    return {
        "record_mode": "none",
        "filter_headers": ["authorization", "api-key", "openai-organization", "openai-project"],
    }


class _Capture:
    """An httpx request hook keeping the JSON body of every request the client sends."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, request: Any) -> None:
        self.bodies.append(json.loads(request.read()))

    async def acall(self, request: Any) -> None:
        self.bodies.append(json.loads(await request.aread()))


def _sync_client(capture: _Capture, **kwargs: Any) -> ManagedOpenAI:
    http = httpx.Client(event_hooks={"request": [capture]})
    base = openai.OpenAI(api_key="sk-test", base_url=BASE_URL, http_client=http, max_retries=0)
    client = manage(base, max_input_tokens=BUDGET, keep_recent=KEEP_RECENT, model="gpt-4o", **kwargs)
    assert isinstance(client, ManagedOpenAI)
    return client


def _assert_managed(body: dict[str, Any], client: ManagedOpenAI | AsyncManagedOpenAI, system: dict[str, Any]) -> None:
    build = client.last_build
    assert build is not None
    assert body["messages"] == build.messages  # the built context is what went over the wire
    assert check_context(body["messages"]) == []
    assert build.record.tokens_after <= build.record.budget <= BUDGET
    assert body["messages"][0] == system  # SPEC §9: the system prompt first, unchanged
    assert sum(m == system for m in body["messages"]) == 1


# --------------------------------------------------------------------------- cassettes
@pytest.mark.vcr
def test_history_grows_and_each_request_holds_the_managed_context() -> None:
    opening, steps, tools = _run()
    capture = _Capture()
    client = _sync_client(capture)
    history: list[Any] = list(opening)
    sizes = []
    for n, (recorded, after) in enumerate(steps):
        response = client.chat.completions.create(model="gpt-4o", messages=history, tools=tools, temperature=0)
        message = response.choices[0].message
        # the reply is recorded, tool calls included, before the caller appends it
        stored = client.memory.messages[-1]
        assert stored.role == "assistant"
        assert [(c.id, c.name, c.arguments) for c in stored.tool_calls] == [
            (c["id"], c["function"]["name"], c["function"]["arguments"]) for c in recorded["tool_calls"]
        ]
        assert len(client.memory.messages) == len(history) + 1
        _assert_managed(capture.bodies[n], client, opening[0])
        assert capture.bodies[n]["tools"] == tools  # other arguments pass through unchanged
        sizes.append((len(history), len(capture.bodies[n]["messages"])))
        history.append(message)  # the SDK object, as agent loops do
        history.extend(after)
    assert len(capture.bodies) == CALLS
    assert [h for h, _ in sizes] == sorted({h for h, _ in sizes})  # the history grew every call
    assert sizes[-1][1] < sizes[-1][0]  # …and the last request was compacted
    record = client.last_record
    assert record is not None and record.messages_before == sizes[-1][0]
    assert client.memory.messages[-1].tool_calls  # the last reply, with its tool call


@pytest.mark.vcr
def test_streamed_reply_with_parallel_tool_calls_is_recorded_once_consumed() -> None:
    opening, _, tools = _run()
    capture = _Capture()
    client = _sync_client(capture)
    stream = client.chat.completions.create(model="gpt-4o", messages=opening, tools=tools, stream=True)
    assert stream.record is client.last_record
    assert len(client.memory.messages) == len(opening)  # nothing recorded before consumption
    chunks = list(stream)
    assert chunks and chunks[0].choices[0].delta.role == "assistant"
    reply = client.memory.messages[-1]
    assert reply.role == "assistant" and reply.content == PARALLEL_REPLY["content"]
    assert [(c.id, c.arguments) for c in reply.tool_calls] == [
        (c["id"], c["function"]["arguments"]) for c in PARALLEL_REPLY["tool_calls"]
    ]
    # the caller's hand-written reply dict matches the recorded one: no divergence
    history = [*opening, PARALLEL_REPLY, *PARALLEL_RESULTS, {"role": "user", "content": "Now summarise."}]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        client.chat.completions.create(model="gpt-4o", messages=history, tools=tools)
    assert len(client.memory.messages) == len(history) + 1
    _assert_managed(capture.bodies[1], client, opening[0])


@pytest.mark.vcr
async def test_async_client_builds_with_abuild_context_and_records_replies() -> None:
    opening, steps, tools = _run()
    capture = _Capture()
    http = httpx.AsyncClient(event_hooks={"request": [capture.acall]})
    base = openai.AsyncOpenAI(api_key="sk-test", base_url=BASE_URL, http_client=http, max_retries=0)
    client = manage(base, max_input_tokens=BUDGET, keep_recent=KEEP_RECENT, model="gpt-4o")
    assert isinstance(client, AsyncManagedOpenAI)
    history: list[Any] = list(opening)
    for n, (recorded, after) in enumerate(steps[:3]):
        if n == 2:  # the last call streams
            stream = await client.chat.completions.create(model="gpt-4o", messages=history, tools=tools, stream=True)
            async with stream:
                async for _ in stream:
                    pass
        else:
            await client.chat.completions.create(model="gpt-4o", messages=history, tools=tools)
        assert client.memory.messages[-1].tool_calls[0].id == recorded["tool_calls"][0]["id"]
        _assert_managed(capture.bodies[n], client, opening[0])
        history.append(recorded)
        history.extend(after)
    assert len(client.memory.messages) == len(history) - len(steps[2][1])


# --------------------------------------------------------------------------- logic (mock transport)
class _Echo:
    """A mock endpoint that answers every request with a fixed assistant text."""

    def __init__(self, reply: dict[str, Any] | None = None) -> None:
        self.reply = reply or {"role": "assistant", "content": "ok"}
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, request: Any) -> Any:
        self.bodies.append(json.loads(request.content))
        return httpx.Response(
            200,
            json={"id": "c", "object": "chat.completion", "created": 0, "model": "m",
                  "choices": [{"index": 0, "finish_reason": "stop", "message": self.reply}]},
        )


def _mock_client(echo: _Echo, **kwargs: Any) -> ManagedOpenAI:
    http = httpx.Client(transport=httpx.MockTransport(echo))
    base = openai.OpenAI(api_key="sk-test", base_url=BASE_URL, http_client=http, max_retries=0)
    return ManagedOpenAI(base, **kwargs)


CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Rename the file; never touch tests."}]


class Findings(BaseModel):
    """A structured answer whose schema is large: one described field per module."""

    model_config = {"json_schema_extra": {"description": "; ".join(f"module_{n}.py: its handlers" for n in range(150))}}
    summary: str


@pytest.mark.parametrize("how", ["parse", "create"])
def test_a_response_format_schema_counts_against_the_budget(how: str) -> None:
    """A ``response_format`` JSON schema goes with every request, as the tools' schema does,
    but was not counted: with a ~1,270-token schema the request reached ~4,900 tokens at a
    4,000-token budget. Now its tokens come off the budget (pydantic model or json_schema dict)."""
    echo = _Echo({"role": "assistant", "content": json.dumps({"summary": "ok"})})
    client = _mock_client(echo, max_input_tokens=BUDGET, model="gpt-4o")
    history = load_transcript(FIXTURE).messages[:60]
    if how == "parse":
        reply = client.chat.completions.parse(model="gpt-4o", messages=history, response_format=Findings)
        assert reply.choices[0].message.parsed == Findings(summary="ok")
    else:
        schema = {"name": "Findings", "schema": Findings.model_json_schema()}
        client.chat.completions.create(model="gpt-4o", messages=history,
                                       response_format={"type": "json_schema", "json_schema": schema})
    body = echo.bodies[-1]
    counter = client.memory.tokenizer
    schema_tokens = counter.count_text(json.dumps(body["response_format"]))
    assert schema_tokens > 1000
    sent = sum(counter.count_message(m) for m in body["messages"]) + REPLY_PRIMING_TOKENS
    assert sent + schema_tokens <= BUDGET


def test_diverged_history_raises_before_sending_when_asked() -> None:
    echo = _Echo()
    client = _mock_client(echo, on_divergence="raise")
    client.chat.completions.create(model="gpt-4o", messages=CHAT)
    edited = [CHAT[0], {"role": "user", "content": "Rename the file."}, {"role": "assistant", "content": "ok"}]
    with pytest.raises(HistoryDivergedError) as info:
        client.chat.completions.create(model="gpt-4o", messages=edited)
    assert info.value.index == 1 and info.value.got == edited[1]
    # a retry that did not append the recorded reply is a divergence too (history too short)
    with pytest.raises(HistoryDivergedError, match="memory already holds 3") as short:
        client.chat.completions.create(model="gpt-4o", messages=CHAT)
    assert short.value.index == 2 and short.value.got is None
    assert len(echo.bodies) == 1 and len(client.memory.messages) == 3


def test_diverged_history_resyncs_with_a_warning_and_reuses_scores() -> None:
    echo = _Echo()
    client = _mock_client(echo)
    client.set_goal(subtask="rename")
    client.chat.completions.create(model="gpt-4o", messages=CHAT)
    old = client.memory
    trimmed = [CHAT[0], {"role": "user", "content": "Rename it."}]
    with pytest.warns(RuntimeWarning, match="message 1 of the history differs"):
        client.chat.completions.create(model="gpt-4o", messages=trimmed)
    assert client.memory is not old and client.memory.score_cache is old.score_cache
    assert [m.raw for m in client.memory.messages] == [*trimmed, {"role": "assistant", "content": "ok"}]
    assert client.memory.goal.subtask == "rename"
    assert echo.bodies[-1]["messages"] == trimmed


def test_goal_set_before_the_first_call_reaches_the_goal_block_and_the_subtask_goes_last() -> None:
    long_history = [*CHAT]
    for n in range(12):
        long_history += [
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": f"c{n}", "type": "function", "function": {"name": "bash", "arguments": f'{{"n": {n}}}'}}]},
            {"role": "tool", "tool_call_id": f"c{n}", "content": f"output {n} " + "lorem ipsum " * 60},
        ]
    echo = _Echo()
    client = _mock_client(echo, max_input_tokens=1200, keep_recent=2, cache_policy={"subtask_at_end": True})
    client.set_goal(final="Rename utils.py to helpers.py; never touch tests.")
    client.chat.completions.create(model="gpt-4o", messages=long_history)
    assert client.memory.goal.final.startswith("Rename utils.py")
    client.set_goal(subtask="update the imports")
    client.chat.completions.create(model="gpt-4o", messages=[*long_history, {"role": "assistant", "content": "ok"}])
    sent = echo.bodies[-1]["messages"]
    blocks = [m["content"] for m in sent if str(m.get("content", "")).startswith(GOAL_BLOCK_MARKER)]
    assert blocks and "never touch tests" in blocks[0] and "update the imports" not in blocks[0]
    # the subtask never rewrites the prefix: it is the last message (CachePolicy.subtask_at_end)
    assert sent[-1]["content"] == f"{SUBTASK_MARKER}\nupdate the imports"
    assert echo.bodies[-1]["messages"][:-2] == echo.bodies[-2]["messages"]  # appended: the previous request + 1


def test_budget_follows_the_model_window_minus_the_tools_schema() -> None:
    tools = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]
    seen = []
    client = _mock_client(_Echo(), on_build=seen.append)  # no model given: the first call's model decides
    client.chat.completions.create(model="gpt-4", messages=CHAT, tools=tools)
    memory = client.memory
    assert memory.config.model == "gpt-4"
    tool_tokens = memory.tokenizer.count_text(json.dumps(tools))
    assert seen[0].record.budget == int(8192 * 0.6) - tool_tokens
    assert seen[0] is client.last_build


def test_memory_can_be_given_and_everything_else_passes_through() -> None:
    memory = RelevanceMemoryManager(max_input_tokens=5000)
    echo = _Echo()
    http = httpx.Client(transport=httpx.MockTransport(echo))
    base = openai.OpenAI(api_key="sk-test", base_url=BASE_URL, http_client=http)
    client = manage(base, memory)
    assert client.memory is memory and client.client is base
    assert client.api_key == "sk-test" and client.models is base.models
    assert client.chat.completions.with_raw_response is not None
    client.chat.completions.create(model="gpt-4o", messages=CHAT, extra_body={"seed": 1})
    assert echo.bodies[0]["seed"] == 1 and len(memory.messages) == 3
    with pytest.raises(ValueError, match="not both"):
        ManagedOpenAI(base, memory, max_input_tokens=10)


def test_async_client_streams_through_a_mock_transport() -> None:
    model = _example().ScriptedModel([PARALLEL_REPLY])

    async def handler(request: Any) -> Any:
        await request.aread()
        return model(request)

    async def main() -> list[Any]:
        http = httpx.AsyncClient(transport=httpx.MockTransport(handler))
        client = manage(openai.AsyncOpenAI(api_key="k", base_url=BASE_URL, http_client=http), max_input_tokens=3000)
        stream = await client.chat.completions.create(model="gpt-4o", messages=CHAT, stream=True)
        before = len(client.memory.messages)
        async for _ in stream:
            pass
        assert before == 2
        return list(client.memory.messages)

    messages = asyncio.run(main())
    assert [c.id for c in messages[-1].tool_calls] == ["call_p1", "call_p2"]


def test_a_reply_the_store_rejects_is_not_recorded_and_the_response_is_kept() -> None:
    call = {"id": "call_9", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
    echo = _Echo({"role": "assistant", "content": None, "tool_calls": [call, call]})  # a broken server
    client = _mock_client(echo)
    with pytest.warns(RuntimeWarning, match="duplicate tool call id 'call_9' in one message"):
        response = client.chat.completions.create(model="gpt-4o", messages=CHAT)
    assert response.choices[0].message.tool_calls[0].id == "call_9"
    assert len(client.memory.messages) == len(CHAT)


def test_a_server_reusing_answered_call_ids_is_recorded() -> None:
    """Local servers (llama.cpp, Ollama) and τ-bench runs reuse ids once answered: valid."""
    call = {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
    history = [*CHAT, {"role": "assistant", "content": None, "tool_calls": [call]},
               {"role": "tool", "tool_call_id": "call_1", "content": "done"}]
    client = _mock_client(_Echo({"role": "assistant", "content": None, "tool_calls": [call]}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        client.chat.completions.create(model="gpt-4o", messages=history)
    assert len(client.memory.messages) == len(history) + 1
    assert client.memory.store.unanswered_calls(len(history)) == ["call_1"]


def test_a_stream_closed_early_is_not_recorded_until_the_caller_appends_the_reply() -> None:
    model = _example().ScriptedModel([PARALLEL_REPLY, {"role": "assistant", "content": "ok"}])
    http = httpx.Client(transport=httpx.MockTransport(model))
    client = manage(openai.OpenAI(api_key="k", base_url=BASE_URL, http_client=http), max_input_tokens=3000)
    with client.chat.completions.create(model="gpt-4o", messages=CHAT, stream=True) as stream:
        next(iter(stream))
    assert len(client.memory.messages) == 2  # not consumed: nothing recorded
    history = [*CHAT, PARALLEL_REPLY, *PARALLEL_RESULTS]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        client.chat.completions.create(model="gpt-4o", messages=history)
    assert [m.role for m in client.memory.messages] == ["system", "user", "assistant", "tool", "tool", "assistant"]


TOOLS = [{"type": "function", "function": {"name": "bash", "strict": True, "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"],
    "additionalProperties": False}}}]


def test_the_sdk_stream_helper_sends_the_managed_context_and_records_the_reply() -> None:
    model = _example().ScriptedModel([PARALLEL_REPLY, {"role": "assistant", "content": "done"}])
    http = httpx.Client(transport=httpx.MockTransport(model))
    client = manage(openai.OpenAI(api_key="k", base_url=BASE_URL, http_client=http), max_input_tokens=3000)
    with client.chat.completions.stream(model="gpt-4o", messages=CHAT, tools=TOOLS) as stream:
        assert stream.record is client.last_record
        kinds = [event.type for event in stream]
    assert "content.delta" in kinds and "tool_calls.function.arguments.done" in kinds
    assert model.requests[0]["messages"] == client.last_build.messages  # the built context was sent
    recorded = client.memory.messages[-1]
    assert recorded.role == "assistant" and [c.id for c in recorded.tool_calls] == ["call_p1", "call_p2"]
    # the next turn appends the reply and the tool results: a clean prefix, no resync
    history = [*CHAT, PARALLEL_REPLY, *PARALLEL_RESULTS]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with client.chat.completions.stream(model="gpt-4o", messages=history, tools=TOOLS) as stream:
            final = stream.get_final_completion()
            assert stream.get_final_completion() is not None  # a second call records nothing more
    assert final.choices[0].message.content == "done"
    assert [m.role for m in client.memory.messages] == ["system", "user", "assistant", "tool", "tool", "assistant"]


def test_a_helper_stream_left_early_is_not_recorded() -> None:
    model = _example().ScriptedModel([PARALLEL_REPLY])
    http = httpx.Client(transport=httpx.MockTransport(model))
    client = manage(openai.OpenAI(api_key="k", base_url=BASE_URL, http_client=http), max_input_tokens=3000)
    with client.chat.completions.stream(model="gpt-4o", messages=CHAT, tools=TOOLS) as stream:
        for _ in stream:
            break
    assert len(client.memory.messages) == len(CHAT)


def test_the_async_sdk_stream_helper_records_the_reply() -> None:
    model = _example().ScriptedModel([PARALLEL_REPLY])

    async def handler(request: Any) -> Any:
        await request.aread()
        return model(request)

    async def main() -> tuple[Any, list[Any]]:
        http = httpx.AsyncClient(transport=httpx.MockTransport(handler))
        client = manage(openai.AsyncOpenAI(api_key="k", base_url=BASE_URL, http_client=http), max_input_tokens=3000)
        async with client.chat.completions.stream(model="gpt-4o", messages=CHAT, tools=TOOLS) as stream:
            assert len(client.memory.messages) == len(CHAT)
            async for _ in stream:
                pass
        return client, list(client.memory.messages)

    client, messages = asyncio.run(main())
    assert [c.id for c in messages[-1].tool_calls] == ["call_p1", "call_p2"]
    assert model.requests[0]["messages"] == client.last_build.messages


# --------------------------------------------------------------------------- cassette maker
def _make_cassettes() -> None:  # pragma: no cover - a developer tool, see the module doc
    import vcr

    example = _example()
    opening, steps, tools = _run()
    where = ROOT / "tests" / "cassettes" / "test_client"
    recorder = vcr.VCR(record_mode="all", filter_headers=["authorization", "api-key"])

    def scripted(replies: list[dict[str, Any]], asynchronous: bool = False) -> Any:
        model = example.ScriptedModel(replies, model="gpt-4o-2024-08-06")
        if asynchronous:
            async def handler(request: Any) -> Any:
                await request.aread()
                return model(request)
            http = httpx.AsyncClient(transport=httpx.MockTransport(handler))
            base = openai.AsyncOpenAI(api_key="sk-test", base_url=BASE_URL, http_client=http)
        else:
            http = httpx.Client(transport=httpx.MockTransport(model))
            base = openai.OpenAI(api_key="sk-test", base_url=BASE_URL, http_client=http)
        return manage(base, max_input_tokens=BUDGET, keep_recent=KEEP_RECENT, model="gpt-4o")

    name = "test_history_grows_and_each_request_holds_the_managed_context.yaml"
    with recorder.use_cassette(str(where / name)):
        client = scripted([r for r, _ in steps])
        history: list[Any] = list(opening)
        for recorded, after in steps:
            client.chat.completions.create(model="gpt-4o", messages=history, tools=tools, temperature=0)
            history += [recorded, *after]

    name = "test_streamed_reply_with_parallel_tool_calls_is_recorded_once_consumed.yaml"
    with recorder.use_cassette(str(where / name)):
        client = scripted([PARALLEL_REPLY, {"role": "assistant", "content": "Both files print one letter."}])
        list(client.chat.completions.create(model="gpt-4o", messages=opening, tools=tools, stream=True))
        history = [*opening, PARALLEL_REPLY, *PARALLEL_RESULTS, {"role": "user", "content": "Now summarise."}]
        client.chat.completions.create(model="gpt-4o", messages=history, tools=tools)

    async def record_async() -> None:
        client = scripted([r for r, _ in steps[:3]], asynchronous=True)
        history: list[Any] = list(opening)
        for n, (recorded, after) in enumerate(steps[:3]):
            if n == 2:
                async for _ in await client.chat.completions.create(
                    model="gpt-4o", messages=history, tools=tools, stream=True
                ):
                    pass
            else:
                await client.chat.completions.create(model="gpt-4o", messages=history, tools=tools)
            history += [recorded, *after]

    name = "test_async_client_builds_with_abuild_context_and_records_replies.yaml"
    with recorder.use_cassette(str(where / name)):
        asyncio.run(record_async())

    note = "# Hand-made cassette: written by `python tests/client/test_client.py` against a scripted model, not a live endpoint.\n"
    for path in where.glob("*.yaml"):
        text = path.read_text(encoding="utf-8")
        if not text.startswith("#"):
            path.write_text(note + text, encoding="utf-8")


if __name__ == "__main__":  # pragma: no cover
    _make_cassettes()

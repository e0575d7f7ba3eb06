"""The managed Anthropic client (``relevance_memory.clients._anthropic``), through the real
``anthropic`` SDK over an ``httpx`` mock transport: sync, async and streamed.

The endpoint is ``examples/anthropic_agent.py``'s ``ScriptedClaude``: it answers with
recorded assistant turns, refuses any request the API would refuse
(``check_anthropic_context``) and simulates Anthropic's prompt cache from the request's
``cache_control`` breakpoints, so ``usage`` carries cache read / creation tokens.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import importlib.util
import itertools
import json
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from relevance_memory import (
    AnthropicTokenCounter,
    AsyncManagedAnthropic,
    ConfigError,
    ContextOverflowError,
    HistoryDivergedError,
    InvalidMessageError,
    ManagedAnthropic,
    RelevanceMemoryManager,
    TiktokenCounter,
    anthropic_request_tokens,
    check_anthropic_context,
    manage,
    tools_tokens,
)
from relevance_memory.clients._anthropic_messages import CONTINUATION_TEXT, TOOL_USE_SYSTEM_PROMPT_TOKENS

anthropic = pytest.importorskip("anthropic")

try:  # anthropic>=2 talks through httpx2; older versions through httpx
    import httpx2 as httpx
except ImportError:  # pragma: no cover
    import httpx  # type: ignore[no-redef]

pytestmark = pytest.mark.filterwarnings("ignore:token counts are approximate")

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "fixtures" / "django__django-15280.json"
MODEL = "claude-sonnet-4-5"
COUNTER = TiktokenCounter()
EPHEMERAL = {"type": "ephemeral"}


@functools.lru_cache(maxsize=1)
def _example() -> Any:
    spec = importlib.util.spec_from_file_location("anthropic_agent", ROOT / "examples" / "anthropic_agent.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("anthropic_agent", module)
    spec.loader.exec_module(module)
    return module


def _marks(body: dict[str, Any]) -> list[tuple[str, int, int]]:
    """Where a request body carries ``cache_control``: (where, turn or tool, block)."""
    found = [("tools", i, 0) for i, t in enumerate(body.get("tools") or []) if t.get("cache_control")]
    system = body.get("system")
    if isinstance(system, list):
        found += [("system", 0, j) for j, b in enumerate(system) if b.get("cache_control")]
    for t, message in enumerate(body["messages"]):
        if isinstance(message["content"], list):
            found += [("messages", t, j) for j, b in enumerate(message["content"]) if b.get("cache_control")]
    return found


def _size(body: dict[str, Any]) -> int:
    return anthropic_request_tokens(COUNTER, system=body.get("system"), messages=body["messages"], tools=body.get("tools"))


def _client(model: Any, **config: Any) -> Any:
    http = httpx.Client(transport=httpx.MockTransport(model))
    return manage(anthropic.Anthropic(api_key="test", http_client=http, max_retries=0), **config)


# --------------------------------------------------------------------------- a long real run
@pytest.fixture(scope="module")
def swe_run() -> dict[str, Any]:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "token counts are approximate")
        return _example().run(FIXTURE, 6000, quiet=True)  # type: ignore[no-any-return]


def test_a_long_swe_loop_sends_valid_requests_within_the_budget(swe_run: dict[str, Any]) -> None:
    requests, records, budget = swe_run["requests"], swe_run["records"], swe_run["budget"]
    assert len(requests) == len(records) == 96
    assert swe_run["history_tokens"][-1] > 6 * budget  # 39k tokens of history …
    assert max(_size(r) for r in requests) == swe_run["largest"] <= budget  # … never more than the budget sent
    for body in requests:
        assert check_anthropic_context(body["messages"], system=body.get("system"), tools=body.get("tools")) == []
        assert body["system"] == _example().anthropic_run(FIXTURE)[0]  # the pinned prompt, as system=, unchanged
        roles = [m["role"] for m in body["messages"]]
        assert roles[0] == "user" and all(a != b for a, b in itertools.pairwise(roles))
    modes = [r.mode for r in records]
    assert modes.count("compacted") >= 5 and modes.count("appended") >= 70


def test_breakpoints_sit_at_the_end_and_where_the_previous_request_ended(swe_run: dict[str, Any]) -> None:
    requests, records = swe_run["requests"], swe_run["records"]
    for n, body in enumerate(requests):
        marks = _marks(body)
        last = len(body["messages"]) - 1
        assert 1 <= len(marks) <= 4
        assert ("messages", last, len(body["messages"][last]["content"]) - 1) in marks  # the end: written for the next
        if n and records[n].mode == "appended":
            previous = requests[n - 1]["messages"]
            end = len(previous) - 1
            assert ("messages", end, len(previous[end]["content"]) - 1) in marks  # read what the last request wrote
    # after the first compaction a breakpoint stays on the stable head (the task statement)
    first = next(n for n, r in enumerate(records) if r.mode == "compacted")
    assert ("messages", 0, 0) in _marks(requests[first + 1])


def test_the_record_carries_the_providers_cache_tokens(swe_run: dict[str, Any]) -> None:
    records, usages = swe_run["records"], swe_run["usages"]
    assert [r.provider_cached_tokens for r in records] == [u["cache_read_input_tokens"] for u in usages]
    assert [r.provider_cache_creation_tokens for r in records] == [u["cache_creation_input_tokens"] for u in usages]
    appended = [r for r in records[1:] if r.mode == "appended"]
    assert all((r.provider_cached_tokens or 0) > 0 for r in appended)
    read = sum(r.provider_cached_tokens or 0 for r in records)
    assert read > 0.75 * sum(_size(b) for b in swe_run["requests"])  # most of what was sent came from the cache
    assert records[0].provider_cached_tokens == 0 and (records[0].provider_cache_creation_tokens or 0) > 1000


def test_the_reply_is_recorded_so_the_next_history_extends_the_memory(swe_run: dict[str, Any]) -> None:
    client = swe_run["client"]
    memory = client.memory  # never resynced: a resync warns, and warnings fail this suite
    assert [m.role for m in memory.messages[:4]] == ["system", "user", "assistant", "tool"]
    assert len(memory.messages) == 2 + 2 * 96 - 1
    assert memory.messages[2].tool_calls[0].id == "call_0001"


# --------------------------------------------------------------------------- parallel calls, big outputs
def _parallel_run(steps: int, width: int, size: int) -> tuple[list[list[dict[str, Any]]], list[dict[str, Any]]]:
    """Scripted turns (``width`` parallel tool_use each) and the user turns answering them
    (outputs of about ``size`` tokens, each naming its file)."""
    turns, answers = [], []
    for k in range(steps):
        calls = [{"type": "tool_use", "id": f"toolu_{k}_{j}", "name": "read_file", "input": {"path": f"src/mod_{k}_{j}.py"}}
                 for j in range(width)]
        turns.append([{"type": "text", "text": f"Step {k}: reading {width} modules."}, *calls])
        answers.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"toolu_{k}_{j}",
             "content": f"# src/mod_{k}_{j}.py\n" + f"def handler_{k}_{j}(request):\n    return route(request)\n" * (size // 14)}
            for j in range(width)]})
    return turns, answers


TOOLS = [{"name": "read_file", "description": "Read a file of the repository",
          "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}]


def test_parallel_tool_use_with_big_outputs_stays_whole_at_a_small_budget() -> None:
    turns, answers = _parallel_run(steps=24, width=3, size=500)
    model = _example().ScriptedClaude(turns)
    client = _client(model, max_input_tokens=3000)
    history: list[Any] = [{"role": "user", "content": "Map the request handlers of src/; never edit files."}]
    modes = []
    for k in range(len(turns)):
        before = copy.deepcopy(history)
        reply = client.messages.create(model=MODEL, system="You read code.", messages=history, tools=TOOLS, max_tokens=512)
        assert history == before  # the caller's history is never changed
        modes.append(client.last_record.mode)
        history += [{"role": "assistant", "content": reply.content}, answers[k]]
    assert modes.count("compacted") >= 3 and len(model.requests[-1]["messages"]) < len(history) // 3
    for body in model.requests:
        assert _size(body) <= 3000
        for turn in body["messages"]:
            uses = [b for b in turn["content"] if isinstance(turn["content"], list) and b["type"] == "tool_use"]
            assert len(uses) in (0, 3)  # a parallel call is kept whole …
        for a, b in zip(body["messages"], body["messages"][1:], strict=False):
            if a["role"] == "assistant" and isinstance(a["content"], list):
                ids = [x["id"] for x in a["content"] if x["type"] == "tool_use"]
                got = [x["tool_use_id"] for x in b["content"] if x["type"] == "tool_result"] if ids else []
                assert got == ids  # … with its results, in order, in the very next turn


def _thinking_turns(steps: int) -> tuple[list[list[dict[str, Any]]], list[dict[str, Any]]]:
    """Scripted turns that think at length (~2,000 tokens) before each tool call, and the results."""
    turns: list[list[dict[str, Any]]] = [[
        {"type": "thinking", "thinking": f"Step {k}: the handler in part_{k}.py may be it, " + "because " * 1500,
         "signature": f"sig-{k}-" + "Zm9v" * 40},
        {"type": "text", "text": f"Reading part_{k}.py."},
        {"type": "tool_use", "id": f"toolu_{k}", "name": "read_file", "input": {"path": f"src/part_{k}.py"}},
    ] for k in range(steps)]
    answers = [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{k}",
                                             "content": f"src/part_{k}.py\n" + "x = 1\n" * 60}]} for k in range(steps)]
    return [*turns, [{"type": "text", "text": "Found it."}]], answers


@pytest.mark.parametrize("asynchronous", [False, True])
def test_with_extended_thinking_the_final_tool_loop_turn_keeps_its_thinking_blocks(asynchronous: bool) -> None:
    """With ``thinking`` on, the API refuses a tool loop's final assistant turn that does not
    start with its thinking blocks, unchanged. A long thinking block made that turn an excerpt
    (its thinking left out): every request from the second on would have been refused. Now the
    turn is built with room for them and they are put back, the request still within the budget."""
    turns, answers = _thinking_turns(8)
    model = _example().ScriptedClaude(turns)
    history: list[Any] = [{"role": "user", "content": "Find the handler that drops the timezone; never edit files."}]
    request = {"model": MODEL, "system": "You read code.", "tools": TOOLS, "max_tokens": 4096,
               "thinking": {"type": "enabled", "budget_tokens": 2048}}
    if asynchronous:
        http = httpx.AsyncClient(transport=httpx.MockTransport(model))
        aclient = manage(anthropic.AsyncAnthropic(api_key="test", http_client=http, max_retries=0), max_input_tokens=4000)

        async def loop() -> None:
            for k in range(len(turns)):
                reply = await aclient.messages.create(messages=history, **request)
                history.extend([{"role": "assistant", "content": reply.content}, *answers[k : k + 1]])

        asyncio.run(loop())
    else:
        client = _client(model, max_input_tokens=4000)
        for k in range(len(turns)):
            reply = client.messages.create(messages=history, **request)
            history.extend([{"role": "assistant", "content": reply.content}, *answers[k : k + 1]])
    assert len(model.requests) == len(turns)
    for n, body in enumerate(model.requests[1:], start=1):
        assert _size(body) <= 4000
        final = [t for t in body["messages"] if t["role"] == "assistant"][-1]
        assert final["content"][0] == turns[n - 1][0]  # its thinking block, signature and all, first
        assert any(b["type"] == "tool_use" and b["id"] == f"toolu_{n - 1}" for b in final["content"])
    shortened = [b for b in model.requests[1:] if "[relevance-memory: excerpt" in json.dumps(b["messages"][-2])]
    assert shortened  # the case: the final turn itself went out as an excerpt


class Findings(BaseModel):
    """A structured answer whose schema is large: one described field per module."""

    model_config = {"json_schema_extra": {"description": "; ".join(f"module_{n}.py: its handlers" for n in range(150))}}
    summary: str


@pytest.mark.parametrize("how", ["parse", "create"])
def test_a_structured_output_schema_counts_against_the_budget(how: str) -> None:
    """The structured-output schema (``parse(output_format=Model)``, ``output_config``'s
    ``format``) goes with every request, but was not counted: a ~1,270-token schema put the
    request over the budget. Now its tokens come off the budget (and no tool-use prompt is
    reserved for it: it is not a tool)."""
    model = _example().ScriptedClaude([[{"type": "text", "text": json.dumps({"summary": "ok"})}]])
    client = _client(model, max_input_tokens=4000)
    history: list[Any] = []
    for k in range(30):
        history += [{"role": "user", "content": f"Question {k}: what does module_{k}.py do? " + "Context. " * 40},
                    {"role": "assistant", "content": f"module_{k}.py parses dates. " + "Detail. " * 40}]
    history.append({"role": "user", "content": "Sum it up."})
    if how == "parse":
        reply = client.messages.parse(model=MODEL, messages=history, max_tokens=256, output_format=Findings)
        assert reply.parsed_output == Findings(summary="ok")
    else:
        schema = {"type": "json_schema", "schema": Findings.model_json_schema()}
        client.messages.create(model=MODEL, messages=history, max_tokens=256, output_config={"format": schema})
    body = model.requests[-1]
    schema_tokens = COUNTER.count_text(json.dumps(body["output_config"]))
    assert schema_tokens > 1000
    assert _size(body) + schema_tokens <= 4000
    assert _size(body) > 4000 - schema_tokens - 400  # no 346-token tool-use prompt reserved: no tools


def test_a_system_prompt_over_the_budget_names_the_budget_that_was_set() -> None:
    """The build ran with the budget less the continuation turn (and, with tools, the tool-use
    prompt), so the error named that: "the budget is 1984 tokens" for max_input_tokens=2000."""
    model = _example().ScriptedClaude([[{"type": "text", "text": "ok"}]])
    client = _client(model, max_input_tokens=2000)
    with pytest.raises(ContextOverflowError, match=r"but the budget is 2,?000 tokens") as caught:
        client.messages.create(model=MODEL, system="word " * 5000, messages=[{"role": "user", "content": "hi"}],
                               tools=TOOLS, max_tokens=16)
    assert caught.value.budget == 2000 and caught.value.pinned_tokens > 5000 + TOOL_USE_SYSTEM_PROMPT_TOKENS
    assert model.requests == []


def test_the_tools_schema_and_the_tool_use_prompt_come_off_the_budget_once() -> None:
    model = _example().ScriptedClaude([[{"type": "text", "text": "ok"}]] * 4)
    client = _client(model, max_input_tokens=3000)
    history: list[Any] = [{"role": "user", "content": "Map the request handlers of src/."}]
    counter = client.memory.tokenizer
    continuation = counter.count_message({"role": "user", "content": CONTINUATION_TEXT})
    client.messages.create(model=MODEL, system="You read code.", messages=history, tools=TOOLS, max_tokens=16)
    schema = tools_tokens(counter, TOOLS)
    assert schema > 0 and client.last_record.budget == 3000 - schema - TOOL_USE_SYSTEM_PROMPT_TOKENS - continuation
    history += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "And the middleware?"}]
    client.messages.create(model=MODEL, system="You read code.", messages=history, max_tokens=16)  # no tools: no tool-use prompt
    assert client.last_record.budget == 3000 - continuation
    with pytest.raises(ConfigError, match=r"carries \d+ tokens besides its messages and tools.*budget of 200"):
        _client(model, max_input_tokens=200).messages.create(model=MODEL, messages=history, tools=TOOLS, max_tokens=16)
    assert len(model.requests) == 2  # refused before sending


# --------------------------------------------------------------------------- streams
def test_messages_stream_records_the_reply_and_its_cache_tokens() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", "token counts are approximate")
        out = _example().run(FIXTURE, 5000, steps=20, stream=True, quiet=True)
    assert [r.provider_cached_tokens for r in out["records"]] == [u["cache_read_input_tokens"] for u in out["usages"]]
    assert max(_size(b) for b in out["requests"]) <= 5000
    assert len(out["client"].memory.messages) == 2 + 2 * 20 - 1  # every reply recorded, no resync


def test_create_stream_true_records_the_reply_once_read_to_the_end() -> None:
    system, tools, history, steps = _example().anthropic_run(FIXTURE)
    model = _example().ScriptedClaude([s["assistant"] for s in steps[:2]])
    client = _client(model, max_input_tokens=5000)
    with client.messages.create(model=MODEL, system=system, messages=history, tools=tools, max_tokens=64,
                                stream=True) as stream:
        kinds = [event.type for event in stream]
    assert kinds[0] == "message_start" and "input_json_delta" not in kinds and kinds[-1] == "message_stop"
    reply = client.memory.messages[-1]
    assert reply.role == "assistant" and reply.tool_calls[0].id == "call_0001"
    assert reply.tool_calls[0].arguments == '{"command": "ls -la"}'
    assert client.last_record.provider_cache_creation_tokens == model.usages[0]["cache_creation_input_tokens"]
    # the caller appends the reply as it rebuilt it: the memory is extended, not resynced
    appended = [{"type": "text", "text": steps[0]["assistant"][0]["text"]}, steps[0]["assistant"][1]]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", "token counts are approximate")
        client.messages.create(model=MODEL, system=system, tools=tools, max_tokens=64,
                               messages=[*history, {"role": "assistant", "content": appended}, steps[0]["user"]])
    assert client.last_record.mode == "appended"


def test_an_unfinished_stream_records_nothing() -> None:
    system, tools, history, steps = _example().anthropic_run(FIXTURE)
    model = _example().ScriptedClaude([s["assistant"] for s in steps[:2]])
    client = _client(model, max_input_tokens=5000)
    with client.messages.stream(model=MODEL, system=system, messages=history, tools=tools, max_tokens=64) as stream:
        next(iter(stream))
    assert [m.role for m in client.memory.messages] == ["system", "user"]


def test_async_client_create_stream_and_helper() -> None:
    requests = asyncio.run(_example().arun(FIXTURE, 4000, 30))
    assert len(requests) == 30 and max(_size(b) for b in requests) <= 4000
    system, tools, history, steps = _example().anthropic_run(FIXTURE)

    async def main() -> tuple[Any, Any]:
        model = _example().ScriptedClaude([s["assistant"] for s in steps[:3]])
        http = httpx.AsyncClient(transport=httpx.MockTransport(model))
        client = manage(anthropic.AsyncAnthropic(api_key="test", http_client=http, max_retries=0), max_input_tokens=4000)
        assert isinstance(client, AsyncManagedAnthropic)
        stream = await client.messages.create(model=MODEL, system=system, messages=history, tools=tools,
                                              max_tokens=64, stream=True)
        async with stream:
            async for _ in stream:
                pass
        first = await client.messages.create(model=MODEL, system=system, tools=tools, max_tokens=64, messages=[
            *history, {"role": "assistant", "content": steps[0]["assistant"]}, steps[0]["user"]])
        grown = [*history, {"role": "assistant", "content": steps[0]["assistant"]}, steps[0]["user"],
                 {"role": "assistant", "content": first.content}, steps[1]["user"]]
        async with client.messages.stream(model=MODEL, system=system, messages=grown, tools=tools, max_tokens=64) as helper:
            texts = [t async for t in helper.text_stream]
        return client, texts

    client, texts = asyncio.run(main())
    assert "".join(texts) == steps[2]["assistant"][0]["text"]
    assert [m.role for m in client.memory.messages][-2:] == ["tool", "assistant"]
    assert client.memory.messages[-1].tool_calls[0].id == steps[2]["assistant"][1]["id"]
    assert (client.last_record.provider_cached_tokens or 0) > 0


# --------------------------------------------------------------------------- the wrapper
def test_manage_wraps_an_anthropic_client_and_passes_the_rest_through() -> None:
    base = anthropic.Anthropic(api_key="test", http_client=httpx.Client(transport=httpx.MockTransport(lambda r: None)))
    client = manage(base, max_input_tokens=4000)
    assert isinstance(client, ManagedAnthropic) and client.client is base
    assert client.models is base.models and client.messages.count_tokens == base.messages.count_tokens
    assert client.last_request is None and client.last_record is None
    memory = RelevanceMemoryManager(max_input_tokens=4000, tokenizer=AnthropicTokenCounter())
    assert manage(base, memory).memory is memory
    with pytest.warns(UserWarning, match="AnthropicTokenCounter"):
        manage(base, RelevanceMemoryManager(max_input_tokens=4000))
    with pytest.raises(ValueError, match="not both"):
        ManagedAnthropic(base, memory, max_input_tokens=10)


def test_an_invalid_history_is_refused_naming_the_callers_message() -> None:
    model = _example().ScriptedClaude([[{"type": "text", "text": "ok"}]])
    client = _client(model, max_input_tokens=4000)
    history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_x", "content": "?"}]}]
    with pytest.raises(InvalidMessageError, match=r"toolu_x.*\(in messages\[2\]\)") as caught:
        client.messages.create(model=MODEL, messages=history, max_tokens=16)
    assert caught.value.index == 2 and model.requests == []  # nothing was sent


def test_the_callers_breakpoints_and_the_automatic_one() -> None:
    model = _example().ScriptedClaude([[{"type": "text", "text": "ok"}]] * 2)
    client = _client(model, max_input_tokens=4000)
    history = [{"role": "user", "content": [{"type": "text", "text": "Summarise the design doc.", "cache_control": EPHEMERAL},
                                            {"type": "text", "text": "Keep it short."}]}]
    system = [{"type": "text", "text": "You are terse.", "cache_control": EPHEMERAL}]
    client.messages.create(model=MODEL, system=system, messages=history, max_tokens=16)
    sent = model.requests[0]
    assert sent["system"] == [{"type": "text", "text": "You are terse."}]  # too short to cache: their mark is dropped
    assert _marks(sent) == [("messages", 0, 1)]  # ours: the end
    assert history[0]["content"][0]["cache_control"] == EPHEMERAL  # the caller's objects are untouched
    history2 = [*history, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "Shorter."}]
    client.messages.create(model=MODEL, system=system, messages=history2, max_tokens=16, cache_control=EPHEMERAL)
    sent = model.requests[1]
    assert sent["cache_control"] == EPHEMERAL and _marks(sent) == [("messages", 0, 1)]  # the prefix end; the API marks the end


def test_a_diverged_history_resyncs_or_raises() -> None:
    model = _example().ScriptedClaude([[{"type": "text", "text": "ok"}]] * 3)
    client = _client(model, max_input_tokens=4000, on_divergence="raise")
    history = [{"role": "user", "content": "Rename the file; never touch tests."}]
    reply = client.messages.create(model=MODEL, messages=history, max_tokens=16)
    edited = [{"role": "user", "content": "Rename the file."}, {"role": "assistant", "content": reply.content},
              {"role": "user", "content": "go"}]
    with pytest.raises(HistoryDivergedError):
        client.messages.create(model=MODEL, messages=edited, max_tokens=16)
    relaxed = _client(model, max_input_tokens=4000)
    relaxed.messages.create(model=MODEL, messages=history, max_tokens=16)
    with pytest.warns(RuntimeWarning, match="diverged"):
        relaxed.messages.create(model=MODEL, messages=edited, max_tokens=16)
    assert [m.role for m in relaxed.memory.messages] == ["user", "assistant", "user", "assistant"]

"""Anthropic Messages ⇄ the store (``relevance_memory.clients._anthropic_messages``): conversion, the validity
check, token accounting and cache breakpoints — pure functions, no client."""

from __future__ import annotations

import base64
import json
import struct
import zlib
from typing import Any

import pytest

from relevance_memory import (
    GOAL_BLOCK_MARKER,
    SUMMARY_MARKER,
    AnthropicTokenCounter,
    InvalidMessageError,
    RelevanceMemoryManager,
    TiktokenCounter,
    anthropic_request_tokens,
    check_anthropic_context,
    check_context,
    from_anthropic,
    to_anthropic,
)
from relevance_memory.clients._anthropic_messages import (
    CONTINUATION_TEXT,
    MAX_CACHE_BREAKPOINTS,
    AnthropicContext,
    place_cache_breakpoints,
)

pytestmark = pytest.mark.filterwarnings("ignore:token counts are approximate")

COUNTER = TiktokenCounter()
SYSTEM = "You are a careful coding agent."
EPHEMERAL = {"type": "ephemeral"}


def use(call_id: str, command: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": "bash", "input": {"command": command}}


def result(call_id: str, output: str, **extra: Any) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": call_id, "content": output, **extra}


def png(width: int, height: int) -> str:
    raw = b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + struct.pack(">II", width, height) + b"\x08\x02\x00\x00\x00"
    return base64.b64encode(raw + struct.pack(">I", zlib.crc32(raw[12:]))).decode()


HISTORY: list[dict[str, Any]] = [
    {"role": "user", "content": "Fix the failing test in app.py; never touch tests/."},
    {"role": "assistant", "content": [{"type": "text", "text": "Looking at both files."},
                                      use("toolu_1", "cat app.py"), use("toolu_2", "cat tests/test_app.py")]},
    {"role": "user", "content": [result("toolu_1", "def f(): return 1"),
                                 result("toolu_2", "ERROR: boom", is_error=True),
                                 {"type": "text", "text": "Note: the CI uses Python 3.10."}]},
    {"role": "assistant", "content": [use("toolu_3", "pytest -q")]},
    {"role": "user", "content": [result("toolu_3", "1 passed")]},
]


# --------------------------------------------------------------------------- Anthropic → store
def test_tool_use_and_tool_result_blocks_become_one_chain() -> None:
    store = from_anthropic(HISTORY, system=SYSTEM)
    assert [m["role"] for m in store] == ["system", "user", "assistant", "tool", "tool", "user", "assistant", "tool"]
    assert store[0] == {"role": "system", "content": SYSTEM, "anthropic": {"origin": "system"}}
    assert store[2]["content"] == "Looking at both files."  # one text block: the API's string shorthand
    assert [(c["id"], c["function"]["arguments"]) for c in store[2]["tool_calls"]] == [
        ("toolu_1", '{"command": "cat app.py"}'), ("toolu_2", '{"command": "cat tests/test_app.py"}')]
    assert store[3] == {"role": "tool", "tool_call_id": "toolu_1", "content": "def f(): return 1", "name": "bash"}
    assert store[4]["anthropic"] == {"tool_result": {"is_error": True}}
    assert store[5] == {"role": "user", "content": "Note: the CI uses Python 3.10."}
    assert store[6]["content"] is None and store[6]["tool_calls"][0]["id"] == "toolu_3"
    memory = RelevanceMemoryManager(max_input_tokens=4000)
    stored = memory.extend(store)
    assert stored[3].parent_id == stored[2].id and stored[4].parent_id == stored[2].id
    assert stored[3].chain_id == stored[2].chain_id == stored[4].chain_id  # the parallel calls are one chain
    assert stored[3].msg_type.value == "tool_result" and stored[5].msg_type.value != "tool_result"


def test_sdk_objects_dicts_with_nones_and_breakpoints_convert_the_same() -> None:
    anthropic = pytest.importorskip("anthropic")
    reply = anthropic.types.Message.model_validate({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": "Reading."}, use("toolu_9", "ls")],
        "stop_reason": "tool_use", "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 2}})
    from_objects = from_anthropic([{"role": "assistant", "content": reply.content}])
    dumped = [b.model_dump() for b in reply.content]  # citations=None, caller=None …
    assert None in [v for b in dumped for v in b.values()]
    with_breakpoint = [{**dumped[0], "cache_control": EPHEMERAL}, dumped[1]]
    assert from_anthropic([{"role": "assistant", "content": dumped}]) == from_objects
    assert from_anthropic([{"role": "assistant", "content": with_breakpoint}]) == from_objects
    # a tool's input is copied as it is: its None values and its own keys survive
    odd = {"type": "tool_use", "id": "t", "name": "f", "input": {"cache_control": 1, "x": None}}
    assert json.loads(from_anthropic([{"role": "assistant", "content": [odd]}])[0]["tool_calls"][0]["function"]["arguments"]) == {
        "cache_control": 1, "x": None}


def test_conversion_is_prefix_stable() -> None:
    whole = from_anthropic(HISTORY, system=SYSTEM)
    for n in range(1, len(HISTORY) + 1):
        part = from_anthropic(HISTORY[:n], system=SYSTEM)
        assert whole[: len(part)] == part


@pytest.mark.parametrize(
    ("history", "index", "words"),
    [
        ([{"role": "tool", "content": "x", "tool_call_id": "c"}], 0, "Anthropic messages are user, assistant or system"),
        ([{"role": "user", "content": [use("t", "ls")]}], 0, "belongs in an assistant turn"),
        ([{"role": "assistant", "content": [result("t", "x")]}], 0, "belongs in a user turn"),
        ([{"role": "user", "content": "hi"}, {"role": "assistant", "content": [{"type": "tool_use", "id": "t"}]}], 1,
         "needs a string 'id' and 'name'"),
        ([{"role": "user", "content": ["plain string"]}], 0, 'write {"type": "text"'),
        ([{"role": "user"}], 0, "has no content"),
    ],
)
def test_malformed_anthropic_messages_are_refused_with_their_index(history: list[Any], index: int, words: str) -> None:
    with pytest.raises(InvalidMessageError) as caught:
        from_anthropic(history)
    assert caught.value.index == index and words in str(caught.value)


def test_an_anthropic_shaped_list_given_to_extend_is_refused_with_the_way_out() -> None:
    memory = RelevanceMemoryManager(max_input_tokens=4000)
    with pytest.raises(InvalidMessageError, match=r"from_anthropic") as caught:
        memory.extend(HISTORY)
    assert caught.value.index == 1 and "tool_use" in str(caught.value) and "manage(anthropic.Anthropic())" in str(caught.value)
    assert len(memory.messages) == 0  # nothing of the batch was stored
    assert any("Anthropic tool_use/tool_result" in p for p in check_context(HISTORY))


# --------------------------------------------------------------------------- store → Anthropic
def test_round_trip_gives_the_history_back() -> None:
    context = to_anthropic(from_anthropic(HISTORY, system=SYSTEM))
    assert context.system == SYSTEM
    assert context.messages == HISTORY
    assert check_anthropic_context(context.messages, system=context.system) == []


def test_blocks_the_build_makes_fold_into_user_turns_and_turns_alternate() -> None:
    goal = {"role": "system", "content": f"{GOAL_BLOCK_MARKER}\nFix the failing test."}
    summary = {"role": "system", "content": f"{SUMMARY_MARKER} m3–m9]\nRan the tests twice."}
    store = from_anthropic(HISTORY, system=SYSTEM)
    built = [store[0], store[1], goal, summary, *store[6:]]  # head, goal block, summary, the last chain
    context = to_anthropic(built)
    assert context.system == SYSTEM
    assert [m["role"] for m in context.messages] == ["user", "assistant", "user"]
    assert [b["text"].split("\n")[0] for b in context.messages[0]["content"]] == [
        HISTORY[0]["content"], GOAL_BLOCK_MARKER, f"{SUMMARY_MARKER} m3–m9]"]
    assert check_anthropic_context(context.messages, system=context.system) == []
    # a context whose first turn would be the assistant's starts with a continuation turn
    opened = to_anthropic([store[0], *store[2:5]])
    assert opened.messages[0] == {"role": "user", "content": CONTINUATION_TEXT}
    assert check_anthropic_context(opened.messages) == []
    # two assistant turns in a row merge; an empty reply is left out
    merged = to_anthropic([store[1], {"role": "assistant", "content": "A."}, {"role": "assistant", "content": []},
                           {"role": "assistant", "content": "B."}])
    assert merged.messages[1] == {"role": "assistant", "content": [{"type": "text", "text": "A."}, {"type": "text", "text": "B."}]}


def test_a_note_after_tool_results_keeps_the_results_first() -> None:
    store = from_anthropic(HISTORY[:4], system=SYSTEM)
    note = {"role": "system", "content": "[relevance-memory: current subtask]\nrun the tests"}
    context = to_anthropic([*store, note, {"role": "tool", "tool_call_id": "toolu_3", "content": "1 passed"}])
    last = context.messages[-1]["content"]
    assert [b["type"] for b in last] == ["tool_result", "text"]
    assert check_anthropic_context(context.messages) == []


def test_images_and_documents_are_sent_as_given_and_counted_at_a_fixed_cost() -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png(100, 100)}}
    pdf = {"type": "document", "source": {"type": "base64", "media_type": "application/pdf",
                                          "data": base64.b64encode(b"%PDF-1.4" + b"\x00" * 200_000).decode()}}
    history = [{"role": "user", "content": [{"type": "text", "text": "What does the chart say?"}, image, pdf]}]
    store = from_anthropic(history)
    memory = RelevanceMemoryManager(max_input_tokens=4000)
    (stored,) = memory.extend(store)
    text_only = COUNTER.count_message({"role": "user", "content": [{"type": "text", "text": "What does the chart say?"}]})
    assert stored.token_count == text_only + (85 + 170) + 765  # one tile; the PDF at the fixed placeholder cost
    assert to_anthropic(memory.build_context().messages).messages == history


# --------------------------------------------------------------------------- validity
VALID = [
    {"role": "user", "content": "go"},
    {"role": "assistant", "content": [use("a", "ls"), use("b", "pwd")]},
    {"role": "user", "content": [result("a", "x"), result("b", "y"), {"type": "text", "text": "and?"}]},
]


@pytest.mark.parametrize(
    ("messages", "problem"),
    [
        ([VALID[1], VALID[2]], "the first turn must be a user turn"),
        ([VALID[0], {"role": "user", "content": "again"}], "both user turns"),
        (VALID[:2], "tool_use without a tool_result"),
        ([*VALID[:2], {"role": "user", "content": [result("a", "x")]}], "['b']"),
        ([*VALID[:2], {"role": "user", "content": [{"type": "text", "text": "t"}, result("a", "x"), result("b", "y")]}],
         "must come before"),
        ([VALID[0], {"role": "assistant", "content": "ok"}, {"role": "user", "content": [result("a", "x")]}],
         "does not answer a tool_use"),
        ([*VALID, {"role": "assistant", "content": [use("a", "again")]}, {"role": "user", "content": [result("a", "z")]}],
         "used twice"),
        ([VALID[0], {"role": "assistant", "content": [{"type": "text", "text": f"{SUMMARY_MARKER}]"}]}],
         "must not be in an assistant turn"),
        ([{"role": "user", "content": [{"type": "text", "text": ""}]}], "empty text block"),
        ([{"role": "user", "content": ""}], "empty content"),
        ([VALID[0], {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": "s",
                                                        "cache_control": EPHEMERAL}]}], "cannot carry cache_control"),
        ([{"role": "user", "content": [{"type": "text", "text": f"t{i}", "cache_control": EPHEMERAL} for i in range(5)]}],
         "5 cache_control breakpoints"),
        ([{"role": "user", "content": [{"type": "text", "text": "t", "cache_control": {"type": "persistent"}}]}],
         "must be {'type': 'ephemeral'}"),
        ([{"role": "tool", "content": "x"}], "has role 'tool'"),
    ],
)
def test_check_anthropic_context_names_what_the_api_would_refuse(messages: list[dict[str, Any]], problem: str) -> None:
    problems = check_anthropic_context(messages)
    assert any(problem in p for p in problems), problems


def test_check_anthropic_context_passes_a_valid_request_and_counts_every_breakpoint() -> None:
    assert check_anthropic_context(VALID, system=SYSTEM) == []
    tools = [{"name": "bash", "input_schema": {"type": "object"}, "cache_control": EPHEMERAL}]
    system = [{"type": "text", "text": SYSTEM, "cache_control": EPHEMERAL}]
    marked = [VALID[0], VALID[1], {"role": "user", "content": [result("a", "x"), {**result("b", "y"), "cache_control": EPHEMERAL}]}]
    assert check_anthropic_context(marked, system=system, tools=tools) == []
    assert check_anthropic_context(marked, system=system, tools=tools, automatic_cache=True) == []  # 3 + the automatic one
    five = [*marked[:2], {"role": "user", "content": [{**result("a", "x"), "cache_control": EPHEMERAL}, marked[2]["content"][1]]}]
    assert any("5 cache_control" in p for p in check_anthropic_context(five, system=system, tools=tools, automatic_cache=True))


# --------------------------------------------------------------------------- tokens
def test_anthropic_counts_bound_the_request_from_above() -> None:
    counter = AnthropicTokenCounter()
    store = from_anthropic(HISTORY, system=SYSTEM)
    tool = store[3]
    as_block = COUNTER.count_message({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                                                    "content": tool["content"]}]})
    assert counter.count_message(tool) == as_block > COUNTER.count_message(tool)
    assert counter.count_message(store[2]) == COUNTER.count_message(store[2])
    context = to_anthropic(store)
    request = anthropic_request_tokens(COUNTER, system=context.system, messages=context.messages)
    assert request <= 3 + sum(counter.count_message(m) for m in store)
    assert counter.approximate and counter.name == "o200k_base+anthropic"
    tools = [{"name": "bash", "input_schema": {"type": "object"}}]
    with_tools = anthropic_request_tokens(COUNTER, system=context.system, messages=context.messages, tools=tools)
    assert with_tools == request + 346 + COUNTER.count_text(json.dumps(tools))


def test_a_memory_with_the_anthropic_counter_still_says_its_counts_are_guesses() -> None:
    memory = RelevanceMemoryManager(model="claude-sonnet-4-5", tokenizer=AnthropicTokenCounter(), max_input_tokens=4000)
    assert any("approximate" in note for note in memory.approximations)

    class ClaudeCounter:  # a caller's exact counter (say, from the provider's tokenizer)
        name = "claude"

        def count_text(self, text: str) -> int:
            return COUNTER.count_text(text)

        def count_texts(self, texts: Any) -> list[int]:
            return COUNTER.count_texts(texts)

        def count_message(self, message: Any) -> int:
            return COUNTER.count_message(message)

    exact = RelevanceMemoryManager(model="claude-sonnet-4-5", tokenizer=AnthropicTokenCounter(ClaudeCounter()),
                                   max_input_tokens=4000)
    assert not exact.approximations


# --------------------------------------------------------------------------- breakpoints
def _reasons(placed: Any) -> dict[str, tuple[str, int, int]]:
    return {b.reason: (b.where, b.index, b.block) for b in placed.breakpoints}


def test_breakpoints_go_to_the_end_and_where_the_previous_request_ended() -> None:
    first = to_anthropic(from_anthropic(HISTORY[:3], system=SYSTEM))
    one = place_cache_breakpoints(first, previous=None, counter=COUNTER)
    assert _reasons(one) == {"end": ("messages", 2, 2)}
    assert one.messages[2]["content"][2]["cache_control"] == EPHEMERAL
    assert "cache_control" not in json.dumps(first.messages)  # the input is not changed
    second = to_anthropic(from_anthropic(HISTORY, system=SYSTEM))
    two = place_cache_breakpoints(second, previous=one.keys, counter=COUNTER)
    assert _reasons(two) == {"prefix": ("messages", 2, 2), "end": ("messages", 4, 0)}
    assert two.messages[4]["content"][0]["cache_control"] == EPHEMERAL
    assert check_anthropic_context(two.messages, system=two.system) == []
    # the same request again: one breakpoint at the end is enough
    again = place_cache_breakpoints(second, previous=two.keys, counter=COUNTER)
    assert _reasons(again) == {"end": ("messages", 4, 0)}


def test_a_long_system_prompt_and_a_compaction_head_get_breakpoints() -> None:
    long_system = "Follow the repository's conventions. " * 200
    store = from_anthropic(HISTORY, system=long_system)
    goal = {"role": "system", "content": f"{GOAL_BLOCK_MARKER}\nFix the failing test."}
    context = to_anthropic([store[0], store[1], goal, *store[6:]])
    placed = place_cache_breakpoints(context, previous=None, counter=COUNTER)
    reasons = _reasons(placed)
    assert reasons["system"] == ("system", 0, 0) and reasons["head"] == ("messages", 0, 0)
    assert placed.system == [{"type": "text", "text": long_system, "cache_control": EPHEMERAL}]
    assert placed.messages[0]["content"][0] == {"type": "text", "text": HISTORY[0]["content"], "cache_control": EPHEMERAL}
    assert len(placed.breakpoints) <= MAX_CACHE_BREAKPOINTS
    short = place_cache_breakpoints(to_anthropic(from_anthropic(HISTORY, system=SYSTEM)), previous=None, counter=COUNTER)
    assert "system" not in _reasons(short)


def test_breakpoints_skip_thinking_and_respect_the_callers_own() -> None:
    context = AnthropicContext(system=None, messages=[
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "text", "text": "ok"}, {"type": "thinking", "thinking": "hm", "signature": "s"}]},
    ])
    placed = place_cache_breakpoints(context, previous=None, counter=COUNTER)
    assert _reasons(placed) == {"end": ("messages", 1, 0)}
    long_tools = [{"name": f"tool_{i}", "description": "does a thing " * 100, "input_schema": {"type": "object"}}
                  for i in range(4)]
    marked = [*long_tools[:-1], {**long_tools[-1], "cache_control": EPHEMERAL}]
    auto = place_cache_breakpoints(to_anthropic(from_anthropic(HISTORY)), marked, previous=None, counter=COUNTER,
                                   automatic=True)
    assert "end" not in _reasons(auto) and "system" not in _reasons(auto)  # the caller marked the tools already
    assert auto.tools == marked
    unmarked = place_cache_breakpoints(to_anthropic(from_anthropic(HISTORY)), long_tools, previous=None, counter=COUNTER)
    assert _reasons(unmarked)["system"] == ("tools", 3, 0)
    assert unmarked.tools is not None and unmarked.tools[3]["cache_control"] == EPHEMERAL
    assert "cache_control" not in long_tools[3]  # the caller's tools are not changed


def test_with_extended_thinking_the_checker_wants_the_loops_final_turn_to_open_with_thinking() -> None:
    """Anthropic refuses a request with thinking on whose tool loop's final assistant turn does
    not start with its thinking blocks (helper-45's fault: a long thinking block made that turn
    an excerpt without them). The checker knew nothing of the rule, so the client's guard let
    such requests out; told that thinking is on, it names the turn."""
    thought = {"type": "thinking", "thinking": "The handler is in api/views.py.", "signature": "sig"}
    call = {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "api/views.py"}}
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "def handler(): ..."}
    ask = {"role": "user", "content": "Find the handler."}
    whole = [ask, {"role": "assistant", "content": [thought, call]}, {"role": "user", "content": [result]}]
    cut = [ask, {"role": "assistant", "content": [{"type": "text", "text": "[excerpt]"}, call]},
           {"role": "user", "content": [result]}]
    assert check_anthropic_context(whole, thinking=True) == []
    assert check_anthropic_context(cut, thinking=True) == [
        "assistant message 1, the final turn of a tool loop, must start with its thinking blocks when extended "
        "thinking is on"]
    assert check_anthropic_context(cut) == []  # thinking off: no such rule
    redacted = [ask, {"role": "assistant", "content": [{"type": "redacted_thinking", "data": "x"}, call]}, whole[2]]
    assert check_anthropic_context(redacted, thinking=True) == []
    # no tool loop at the end (the last user turn is a new question): the rule does not apply
    assert check_anthropic_context([*cut, {"role": "assistant", "content": "It is in api/views.py."},
                                    {"role": "user", "content": "Thanks; now the tests."}], thinking=True) == []

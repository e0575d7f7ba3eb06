"""Prefix accounting, deterministic serialisation and append planning (issue 10)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from relevance_memory import TiktokenCounter
from relevance_memory.pipeline._prefix import (
    TailItem,
    message_key,
    plan_append,
    serialise_context,
    shared_prefix_tokens,
)

COUNTER = TiktokenCounter()


def prefix(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> int:
    return shared_prefix_tokens(a, b, count_message=COUNTER.count_message, count_text=COUNTER.count_text)


SYSTEM = {"role": "system", "content": "You are a careful agent. " * 20}
TASK = {"role": "user", "content": "Fix the bug in src/app.py; never touch tests/."}
CALL = {"role": "assistant", "content": None,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "ls"}'}}]}
RESULT = {"role": "tool", "tool_call_id": "c1", "content": "src tests"}


def test_serialise_keeps_key_order_and_arguments() -> None:
    text = serialise_context([CALL])
    assert text.startswith('[{"role":"assistant","content":null,"tool_calls"')
    assert '"arguments":"{\\"cmd\\": \\"ls\\"}"' in text  # the argument string is not re-encoded
    reordered = {"content": None, "role": "assistant", "tool_calls": CALL["tool_calls"]}
    assert serialise_context([reordered]) != text
    assert message_key(reordered) == message_key(CALL)
    assert serialise_context([{"role": "user", "content": "必须"}]) == '[{"role":"user","content":"必须"}]'


def test_prefix_of_an_append_is_the_whole_previous_request() -> None:
    before = [SYSTEM, TASK, CALL, RESULT]
    after = [*before, {"role": "assistant", "content": "done"}]
    assert prefix(before, after) == sum(COUNTER.count_message(m) for m in before)


def test_prefix_stops_at_the_first_changed_message() -> None:
    before = [SYSTEM, TASK, CALL, RESULT]
    after = [SYSTEM, {"role": "user", "content": "Something else entirely"}, CALL, RESULT]
    assert prefix(before, after) == COUNTER.count_message(SYSTEM) + 2 + COUNTER.count_text("user")  # header only
    assert prefix([], after) == 0
    assert prefix(before, [{"role": "user", "content": "other"}]) == 0


def test_prefix_counts_a_common_start_inside_a_message() -> None:
    old = {"role": "system", "content": "[goal]\nFinal goal: fix the bug.\nCurrent subtask: run the tests"}
    new = {"role": "system", "content": "[goal]\nFinal goal: fix the bug.\nCurrent subtask: edit the file"}
    common = "[goal]\nFinal goal: fix the bug.\nCurrent subtask: "
    expected = COUNTER.count_message(SYSTEM) + 2 + COUNTER.count_text("system") + COUNTER.count_text(common) - 1
    assert prefix([SYSTEM, old], [SYSTEM, new]) == expected


def item(index: int, role: str, tokens: int = 10, **kw: Any) -> TailItem:
    return TailItem(index=index, tokens=tokens, role=role, **kw)


def test_plan_appends_complete_chains() -> None:
    items = [item(5, "assistant", call_ids=("a", "b")), item(6, "tool", tool_call_id="a"),
             item(7, "tool", tool_call_id="b"), item(8, "user", tokens=4)]
    plan = plan_append(items, 5)
    assert (plan.indices, plan.tokens, plan.next_index, plan.held_back, plan.blocked) == ((5, 6, 7, 8), 34, 9, (), None)


def test_plan_holds_back_a_trailing_chain_without_all_results() -> None:
    items = [item(5, "user"), item(6, "assistant", call_ids=("a", "b")), item(7, "tool", tool_call_id="a")]
    plan = plan_append(items, 5)
    assert (plan.indices, plan.next_index, plan.held_back, plan.blocked) == ((5,), 6, (6, 7), None)
    # the results arrive: the next plan starts at the held-back assistant and takes the whole chain
    later = plan_append([*items[1:], item(8, "tool", tool_call_id="b")], plan.next_index)
    assert (later.indices, later.next_index) == ((6, 7, 8), 9)


def test_plan_skips_excluded_messages() -> None:
    items = [item(0, "tool", tool_call_id="zz", excluded=True), item(1, "user")]
    plan = plan_append(items, 0)
    assert (plan.indices, plan.skipped, plan.next_index) == ((1,), (0,), 2)


def test_plan_blocks_on_irregular_tails() -> None:
    stray = plan_append([item(3, "user"), item(4, "tool", tool_call_id="old")], 3)
    assert stray.indices == (3,)
    assert stray.blocked is not None and "tool message 4" in stray.blocked
    unanswered = plan_append([item(3, "assistant", call_ids=("a",)), item(4, "user")], 3)
    assert unanswered.blocked is not None and "tool call(s) a of message 3 are unanswered" in unanswered.blocked


def test_plan_requires_consecutive_items() -> None:
    with pytest.raises(ValueError, match="consecutive"):
        plan_append([item(3, "user"), item(5, "user")], 3)
    assert plan_append([], 7).next_index == 7


def test_serialise_round_trips() -> None:
    messages = [SYSTEM, TASK, CALL, RESULT]
    assert json.loads(serialise_context(messages)) == messages

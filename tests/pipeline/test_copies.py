"""Plain copies of the previous context made from copy plans (pipeline/_copies.py, issue 24):
equal to thaw's, fresh objects each time, and the fallback for what marshal cannot write."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relevance_memory import RelevanceMemoryManager
from relevance_memory._models import FrozenDict, FrozenList, freeze, thaw
from relevance_memory.pipeline._copies import TOOL_CALLS, copy_plan, plain_copies


class Opaque:
    """An object of the caller's inside a message (marshal cannot write it)."""


def call(cid: str, command: str) -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": command})}}


MESSAGES: list[dict[str, Any]] = [
    {"role": "user", "content": "Fix the parser."},
    {"role": "assistant", "content": None, "tool_calls": [call("c1", "cat a.py"), call("c2", "ls")]},
    {"role": "tool", "tool_call_id": "c1", "content": "print(1)"},
    {"role": "user", "content": [{"type": "text", "text": "see"}, {"type": "image_url", "image_url": {"url": "x"}}]},
    {"role": "assistant", "content": "ok", "n": 3, "ratio": 0.5, "flag": True},
    {"role": "tool", "tool_call_id": "c2", "content": "a.py", "extra": {"rows": (1, 2), "tags": {"a"}}},
]


def test_plans_copy_each_message_as_thaw_does() -> None:
    frozen = [freeze(m) for m in MESSAGES]
    plans = [copy_plan(m) for m in frozen]
    assert [p is None for p in plans] == [True, False, True, False, True, False]
    assert plans[1] == TOOL_CALLS  # the OpenAI call shape: copied in place, strings shared
    assert all(isinstance(p, bytes) and p for p in (plans[3], plans[5]))  # marshal forms, not the thaw fallback
    copies = plain_copies(frozen, plans)
    assert copies == [thaw(m) for m in frozen]
    assert copies[5]["extra"]["rows"] == [1, 2]  # a tuple comes back as a list, as thaw gives it
    for copy, original in zip(copies, frozen, strict=True):
        assert type(copy) is dict and copy is not original
    assert type(copies[1]["tool_calls"]) is list and type(copies[1]["tool_calls"][0]["function"]) is dict
    again = plain_copies(frozen, plans)
    copies[1]["tool_calls"][0]["function"]["name"] = "changed"
    assert again[1]["tool_calls"][0]["function"]["name"] == "bash"  # each call makes new objects


def test_tool_calls_are_fresh_containers_around_shared_strings() -> None:
    frozen = freeze(MESSAGES[1])
    (copy,) = plain_copies([frozen], [TOOL_CALLS])
    assert copy == thaw(frozen) and list(copy) == list(frozen)  # equal, keys in their order
    calls, original = copy["tool_calls"], frozen["tool_calls"]
    assert type(calls) is list and calls is not original
    for new, old in zip(calls, original, strict=True):
        assert type(new) is dict and type(new["function"]) is dict and new["function"] is not old["function"]
        assert new["function"]["arguments"] is old["function"]["arguments"]  # an immutable string, not copied
    calls[0]["function"]["name"] = "changed"
    calls.append({})
    assert frozen == freeze(MESSAGES[1])  # the stored form is untouched


@pytest.mark.parametrize("message", [
    {"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": {"nested": "dict"}}}]},
    {"role": "assistant", "tool_calls": [{"id": "c", "extra": ["list"], "function": {"name": "f"}}]},
    {"role": "assistant", "tool_calls": ["not a dict"]},
    {"role": "assistant", "tool_calls": [], "content": [{"type": "text", "text": "parts"}]},
    {"role": "assistant", "tool_calls": {"not": "a list"}},
])
def test_other_nested_shapes_are_not_copied_as_tool_calls(message: dict[str, Any]) -> None:
    frozen = freeze(message)
    plan = copy_plan(frozen)
    assert isinstance(plan, bytes) and plan  # marshal: every nested container rebuilt
    (copy,) = plain_copies([frozen], [plan])
    assert copy == thaw(frozen)


def test_what_marshal_cannot_write_is_thawed() -> None:
    leaf = Opaque()
    message = freeze({"role": "tool", "tool_call_id": "c", "content": "x", "meta": {"obj": leaf}})
    plan = copy_plan(message)
    assert plan == b""
    (copy,) = plain_copies([message], [plan])
    assert copy == thaw(message) and copy["meta"]["obj"] is leaf and type(copy["meta"]) is dict


def test_plans_of_another_length_thaw_every_message() -> None:
    frozen = [freeze(m) for m in MESSAGES]
    assert plain_copies(frozen, ()) == [thaw(m) for m in frozen]


json_leaf = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=8))
json_value = st.recursive(
    json_leaf,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.tuples(inner, inner),
                            st.dictionaries(st.text(max_size=5), inner, max_size=4)),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=6), json_value, max_size=5))
def test_any_json_like_message_copies_equal_thaw(message: dict[str, Any]) -> None:
    frozen = freeze(message)
    (copy,) = plain_copies([frozen], [copy_plan(frozen)])
    expected = thaw(frozen)
    assert copy == expected
    assert json.dumps(copy, sort_keys=True) == json.dumps(expected, sort_keys=True)  # bool stays bool, lists lists
    assert isinstance(frozen, FrozenDict) and not any(isinstance(v, (FrozenDict, FrozenList)) for v in copy.values())


json_call = st.fixed_dictionaries(
    {"id": st.text(max_size=4)},
    optional={"type": json_leaf, "function": st.one_of(st.dictionaries(st.text(max_size=5), json_leaf, max_size=3),
                                                       st.dictionaries(st.text(max_size=5), json_value, max_size=3)),
              "index": json_value},
)


@settings(max_examples=200, deadline=None)
@given(st.lists(json_call, max_size=3), st.dictionaries(st.sampled_from(["role", "content", "name"]), json_value))
def test_any_message_with_tool_calls_copies_equal_thaw(calls: list[dict[str, Any]], rest: dict[str, Any]) -> None:
    frozen = freeze({**rest, "tool_calls": calls})
    plan = copy_plan(frozen)
    (copy,) = plain_copies([frozen], [plan])
    assert copy == thaw(frozen)
    assert json.dumps(copy, sort_keys=True) == json.dumps(thaw(frozen), sort_keys=True)
    assert not any(isinstance(c, (FrozenDict, FrozenList)) for c in copy["tool_calls"])
    for call in copy["tool_calls"]:
        assert not any(isinstance(v, (FrozenDict, FrozenList)) for v in call.values())


def test_appended_builds_hand_out_fresh_plain_copies() -> None:
    memory = RelevanceMemoryManager(max_input_tokens=6000, keep_recent=2)
    memory.extend([{"role": "user", "content": "Fix the parser in a.py."}])
    first = None
    for n in range(6):
        memory.extend([
            {"role": "assistant", "content": f"step {n}", "tool_calls": [call(f"c{n}", f"cat f{n}.py")]},
            {"role": "tool", "tool_call_id": f"c{n}", "content": f"line {n} " * 20},
        ])
        built = memory.build_context()
        if first is None:
            first = built
            continue
        assert built.record.mode == "appended"
        assert built.messages[: len(first.messages)] == first.messages
        prefix = memory.prefix
        assert prefix is not None and len(prefix.copies) == len(prefix.messages)
    assert first is not None
    first.messages[1]["tool_calls"][0]["function"]["name"] = "edited by the caller"
    first.messages[0]["content"] = "edited"
    memory.extend([{"role": "assistant", "content": "done"}])
    after = memory.build_context()
    assert after.record.mode == "appended"
    assert after.messages[0]["content"] == "Fix the parser in a.py."
    assert after.messages[1]["tool_calls"][0]["function"]["name"] == "bash"

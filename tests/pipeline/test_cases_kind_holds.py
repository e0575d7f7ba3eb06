"""Variants of cases C01, C02, C04 and C10 (``shared/cases``) in other shapes that hold:
kept here so each fault's whole kind stays covered, not the one example.

- C01: parallel calls (results in call order or reversed) and an Anthropic history
  (``tool_use``/``tool_result`` blocks) at every budget: every tool message follows its call,
  every chain whole or absent;
- C02: under budget the output is the input for every message shape an agent loop holds;
- C04: over 40 questions appended and compacted again and again, the system prompt — a
  string, text parts, a ``developer`` message, one with a ``name``, or two system messages —
  stays first, once, unchanged; no generated message uses the assistant role;
- C10: audio, files, Anthropic images and documents and LangChain image blocks cost a
  bounded amount that does not depend on the base64 length.
"""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import pytest
from invariants import assert_invariants, is_generated

from relevance_memory import RelevanceMemoryManager, TiktokenCounter
from relevance_memory._tokenizer import IMAGE_TOKENS_MAX, REPLY_PRIMING_TOKENS
from relevance_memory.clients._anthropic_messages import from_anthropic

counter = TiktokenCounter("o200k_base")


def _call(call_id: str, name: str = "bash") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps({"cmd": f"run {call_id} " + "x" * 30})}}


def _parallel_history(reverse_results: bool) -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent. Never delete files."},
        {"role": "user", "content": "Fix the failing test in repo foo."},
    ]
    for step in range(4):
        calls = [_call(f"call_{step}_{w}") for w in range(3)]
        history.append({"role": "assistant", "content": f"step {step}", "tool_calls": calls})
        results = [{"role": "tool", "tool_call_id": c["id"], "content": f"result {c['id']} " + "data " * 20} for c in calls]
        history.extend(reversed(results) if reverse_results else results)
        if step == 1:
            history.append({"role": "user", "content": "also check bar.py"})
    history += [{"role": "assistant", "content": "done"}, {"role": "user", "content": "thanks, next?"}]
    return history


def _anthropic_history() -> list[dict[str, Any]]:
    turns: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "text", "text": "Fix test foo."}]}]
    for step in range(4):
        turns.append({"role": "assistant", "content": [
            {"type": "text", "text": f"step {step}"},
            {"type": "tool_use", "id": f"tu{step}a", "name": "bash", "input": {"cmd": "ls " + "y" * 40}},
            {"type": "tool_use", "id": f"tu{step}b", "name": "cat", "input": {"p": "a.py"}},
        ]})
        turns.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"tu{step}a", "content": "out " * 30},
            {"type": "tool_result", "tool_use_id": f"tu{step}b", "content": [{"type": "text", "text": "file " * 20}]},
            {"type": "text", "text": f"note {step}"},
        ]})
    turns += [{"role": "assistant", "content": "done"}, {"role": "user", "content": "next?"}]
    return from_anthropic(turns, system="You are a coding agent.")


C01_HISTORIES = {
    "parallel": lambda: _parallel_history(False),
    "parallel_results_reversed": lambda: _parallel_history(True),
    "anthropic_blocks": _anthropic_history,
}


@pytest.mark.parametrize("keep_recent", [0, 1, 2])
@pytest.mark.parametrize("shape", list(C01_HISTORIES))
def test_c01_kind_no_orphan_at_any_budget(shape: str, keep_recent: int) -> None:
    history = C01_HISTORIES[shape]()
    total = REPLY_PRIMING_TOKENS + sum(counter.count_message(m) for m in history)
    for budget in range(60, total + 10, 23):
        memory = RelevanceMemoryManager(max_input_tokens=budget, keep_recent=keep_recent)
        memory.extend(history)
        built = memory.build_context()
        assert_invariants(history, built, budget, memory.tokenizer)
        out = built.messages
        for n, message in enumerate(out):
            if message["role"] == "tool":
                j = n - 1
                while out[j]["role"] == "tool":
                    j -= 1
                assert message["tool_call_id"] in [c["id"] for c in out[j].get("tool_calls") or []]
        calls = sorted(c["id"] for m in out for c in (m.get("tool_calls") or []))
        assert calls == sorted(m["tool_call_id"] for m in out if m["role"] == "tool")


SYSTEM = {"role": "system", "content": "You are a coding agent."}
USER = {"role": "user", "content": "List the files."}
C02_HISTORIES: dict[str, list[dict[str, Any]]] = {
    "parallel_reversed": [SYSTEM, USER, {"role": "assistant", "content": None, "tool_calls": [_call("c1"), _call("c2", "cat")]},
                          {"role": "tool", "tool_call_id": "c2", "content": "b"}, {"role": "tool", "tool_call_id": "c1", "content": "a"}],
    "content_parts": [SYSTEM, {"role": "user", "content": [{"type": "text", "text": "List the files."}]},
                      {"role": "assistant", "content": [{"type": "text", "text": "ok"}], "tool_calls": [_call("c1")]},
                      {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "a"}]}],
    "no_content_key": [SYSTEM, USER, {"role": "assistant", "tool_calls": [_call("c1")]}, {"role": "tool", "tool_call_id": "c1", "content": "a"}],
    "sdk_dump_nones": [SYSTEM, USER, {"role": "assistant", "content": None, "refusal": None, "audio": None, "function_call": None,
                                      "tool_calls": [_call("c1")]}, {"role": "tool", "tool_call_id": "c1", "content": "a"}],
    "developer_and_names": [{"role": "developer", "content": "Be terse."}, {"role": "user", "name": "alice", "content": "hi"},
                            {"role": "assistant", "content": "x"}],
    "custom_tool_call": [SYSTEM, USER, {"role": "assistant", "content": None,
                                        "tool_calls": [{"id": "c1", "type": "custom", "custom": {"name": "apply_patch", "input": "*** Begin"}}]},
                         {"role": "tool", "tool_call_id": "c1", "content": "done"}],
    "media_parts": [SYSTEM, {"role": "user", "content": [
        {"type": "text", "text": "see"}, {"type": "image_url", "image_url": {"url": "https://example.com/y.png"}},
        {"type": "input_audio", "input_audio": {"data": "UklGR" * 100, "format": "wav"}},
        {"type": "file", "file": {"file_data": "data:application/pdf;base64," + "JVBER" * 100, "filename": "a.pdf"}}]}],
    "refusal_part": [SYSTEM, USER, {"role": "assistant", "content": [{"type": "refusal", "refusal": "I can't."}]}],
}


@pytest.mark.parametrize("keep_recent", [0, 1, 4])
@pytest.mark.parametrize("shape", list(C02_HISTORIES))
def test_c02_kind_identity_for_every_shape(shape: str, keep_recent: int) -> None:
    history = C02_HISTORIES[shape]
    given = copy.deepcopy(history)
    memory = RelevanceMemoryManager(max_input_tokens=10_000, keep_recent=keep_recent)
    memory.extend(history)
    built = memory.build_context()
    assert built.messages == given and history == given
    assert built.record.identity is True


C04_SYSTEMS: dict[str, dict[str, Any]] = {
    "string": {"role": "system", "content": "You are a support agent. Never reveal internal ticket notes."},
    "text_parts": {"role": "system", "content": [{"type": "text", "text": "You are a support agent."},
                                                 {"type": "text", "text": "Never reveal internal notes."}]},
    "developer": {"role": "developer", "content": "You are a support agent. Never reveal internal notes."},
    "with_name": {"role": "system", "name": "policy", "content": "You are a support agent."},
}


@pytest.mark.parametrize("second_system", [False, True])
@pytest.mark.parametrize("shape", list(C04_SYSTEMS))
def test_c04_kind_system_prompt_survives_repeated_compactions(shape: str, second_system: bool) -> None:
    system = C04_SYSTEMS[shape]
    history: list[dict[str, Any]] = [system]
    if second_system:
        history.append({"role": "system", "content": "Secondary policy: answer in English."})
    for q in range(1, 41):
        history.append({"role": "user", "content": f"Question {q}: what is the status of order ORD-{1000 + q}?"})
        if q % 3 == 0:
            history.append({"role": "assistant", "content": None, "tool_calls": [_call(f"c{q}", "lookup")]})
            history.append({"role": "tool", "tool_call_id": f"c{q}", "content": f"ORD-{1000 + q}: shipped " + "detail " * 30})
        history.append({"role": "assistant", "content": f"Order ORD-{1000 + q} is on its way."})
    memory = RelevanceMemoryManager(max_input_tokens=400, keep_recent=1)
    modes = set()
    for n, message in enumerate(history):
        memory.add(message)
        if message["role"] != "assistant" or message.get("tool_calls"):
            continue
        built = memory.build_context()
        modes.add(built.record.mode)
        out = built.messages
        assert_invariants(history[: n + 1], built, 400, memory.tokenizer)
        assert json.dumps(out[0]) == json.dumps(system) and sum(1 for m in out if m == system) == 1
        if second_system:
            assert out[1] == history[1]
        assert all(m["role"] != "assistant" for m in out if is_generated(m))
        last_user = next(m for m in reversed(history[: n + 1]) if m["role"] == "user")
        assert last_user in out
    assert {"compacted", "appended"} <= modes  # compacted again and again, appended between


_BLOB = base64.b64encode(bytes(range(256)) * 40).decode()
C10_PARTS = {
    "input_audio": lambda b: {"type": "input_audio", "input_audio": {"data": b, "format": "wav"}},
    "file": lambda b: {"type": "file", "file": {"file_data": "data:application/pdf;base64," + b, "filename": "r.pdf"}},
    "anthropic_image": lambda b: {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b}},
    "anthropic_document": lambda b: {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": b}},
    "langchain_image": lambda b: {"type": "image", "source_type": "base64", "data": b, "mime_type": "image/png"},
    "unknown_part_with_payload": lambda b: {"type": "video", "video": {"data": b}},
}


@pytest.mark.parametrize("shape", list(C10_PARTS))
def test_c10_kind_bounded_cost_for_other_parts(shape: str) -> None:
    short, long = (C10_PARTS[shape](_BLOB[:n]) for n in (400, len(_BLOB)))
    count = [counter.count_message({"role": "user", "content": [{"type": "text", "text": "look"}, p]}) for p in (short, long)]
    assert count[0] == count[1] <= IMAGE_TOKENS_MAX + 10
    assert count[1] == counter.count_message({"role": "user", "content": "look"}) + 765  # the documented default

"""The newest user message stays verbatim while it alone fits, also when the newest step has to
be cut to fit beside it (SPEC §9); the newest step is cut down to the excerpt floor before a
build gives up (SPEC §11: ContextOverflowError is for a system prompt that cannot fit)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from invariants import assert_invariants

from relevance_memory import ContextOverflowError, RelevanceMemoryManager
from relevance_memory._tokenizer import REPLY_PRIMING_TOKENS


def _built(history: list[dict[str, Any]], budget: int, **config: Any) -> tuple[RelevanceMemoryManager, Any]:
    """A memory of ``history`` at ``budget`` and its first build, checked against SPEC §9."""
    memory = RelevanceMemoryManager(max_input_tokens=budget, **config)
    memory.extend(history)
    built = memory.build_context()
    assert_invariants(history, built, budget, memory.tokenizer)
    return memory, built


def _overflow(history: list[dict[str, Any]], budget: int, **config: Any) -> ContextOverflowError:
    """The error a first build of ``history`` at ``budget`` raises."""
    memory = RelevanceMemoryManager(max_input_tokens=budget, **config)
    memory.extend(history)
    with pytest.raises(ContextOverflowError) as info:
        memory.build_context()
    return info.value


def _file(j: int) -> str:
    return "\n".join(f"line {i} of file_{j} value_{i}" for i in range(300))


def _history_newest_user() -> list[dict[str, Any]]:
    calls = [{"id": f"c{j}", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": f"cat src/file_{j}.py"})}}
             for j in range(2)]
    return [
        {"role": "system", "content": "You are a coding agent. " * 10},
        {"role": "user", "content": "Fix the date parser in utils/dates.py. " * 3},
        {"role": "user", "content": "Also keep the function parse_date backwards compatible, line "
                                    + " ".join(f"item_{i}" for i in range(60))},
        {"role": "assistant", "content": "Looking at the files now.", "tool_calls": calls},
        {"role": "tool", "tool_call_id": "c0", "content": _file(0)},
        {"role": "tool", "tool_call_id": "c1", "content": _file(1)},
    ]


@pytest.mark.parametrize("budget", [560, 600, 700])
def test_newest_user_message_is_not_cut_with_the_newest_step(budget: int) -> None:
    history = _history_newest_user()
    memory, built = _built(history, budget, keep_recent=4)
    counter = memory.tokenizer
    room = budget - REPLY_PRIMING_TOKENS - counter.count_message(history[0])
    assert counter.count_message(history[2]) <= room
    # it alone fits: it is sent verbatim and the step's outputs are cut around it
    assert history[2] in built.messages
    assert built.record.decision_for(memory.store[2].id).fidelity == "verbatim"


def _history_floor() -> list[dict[str, Any]]:
    calls = [{"id": f"c{j}", "type": "function", "function": {"name": "bash", "arguments": json.dumps(
        {"command": "grep -rn parse_date " + " ".join(f"src/m{j}_{k}.py" for k in range(120))})}} for j in range(3)]
    return [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix parse_date in utils/dates.py; keep the API."},
        {"role": "assistant", "content": "Searching.", "tool_calls": calls},
        {"role": "tool", "tool_call_id": "c0",
         "content": "\n".join(f"src/m0_{k}.py:{k}: parse_date(value_{k})" for k in range(60))},
        {"role": "tool", "tool_call_id": "c1", "content": "src/m1.py:1: " + "parse_date ok " * 14},
        {"role": "tool", "tool_call_id": "c2", "content": "src/m2.py:2: " + "parse_date ok " * 14},
    ]


@pytest.mark.parametrize("budget", range(240, 252))
def test_the_newest_step_is_cut_to_the_floor_before_a_build_gives_up(budget: int) -> None:
    # the assistant's three calls cannot go below a ~70-token marker, above the common cap the
    # water-filling lands on: the floor itself still fits (it did at 234-245, not at 246-249)
    _built(_history_floor(), budget, keep_recent=2)


def _step(n: int, lines: int) -> list[dict[str, Any]]:
    call = {"id": f"c{n}", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": f"cat src/f{n}.py"})}}
    return [{"role": "assistant", "content": f"Reading f{n}.", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{n}",
             "content": "\n".join(f"def fn_{n}_{i}(x): return x + {i}" for i in range(lines))}]


def test_an_append_after_an_appended_excerpt_cuts_an_oversized_message_again() -> None:
    # the base build is the history itself; an append sends an excerpt (the context is no longer
    # the history); the next oversized output must not be appended verbatim through the
    # identity shortcut (it was: 1,123 tokens at an entry cap of 256), as a fresh build cuts it
    history = [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "Fix parse_date."},
               *_step(0, 40)]
    memory = RelevanceMemoryManager(max_input_tokens=4000, keep_recent=4)
    memory.set_goal(final="Fix parse_date")
    memory.extend(history)
    assert memory.build_context().record.identity
    for n, lines in ((1, 300), (2, 80)):
        new = _step(n, lines)
        memory.extend(new)
        history += new
        built = memory.build_context()
        assert built.record.mode == "appended"
        assert_invariants(history, built, 4000, memory.tokenizer)
        tool = memory.store[len(memory.store) - 1]
        assert tool.token_count > 256
        assert built.record.decision_for(tool.id).fidelity == "excerpt"
        assert not built.record.identity


@pytest.mark.parametrize("budget", [2000, 8000])
def test_a_custom_tool_call_with_a_large_input_enters_as_an_excerpt(budget: int) -> None:
    # excerpt_message shrank only function.arguments: a custom call's input stayed whole (26k
    # tokens) and the newest step raised ContextOverflowError at any budget
    big = "\n".join(f"line {i}: apply patch hunk value_{i}" for i in range(2000))
    history = [{"role": "system", "content": "sys"}, {"role": "user", "content": "Fix it."},
               {"role": "assistant", "content": None,
                "tool_calls": [{"id": "c1", "type": "custom", "custom": {"name": "apply_patch", "input": big}}]},
               {"role": "tool", "tool_call_id": "c1", "content": "ok"}]
    _, built = _built(history, budget)
    sent = next(m for m in built.messages if m.get("tool_calls"))
    assert set(sent["tool_calls"][0]) == {"id", "type", "custom"}
    assert sent["tool_calls"][0]["custom"]["name"] == "apply_patch"


def _image_task_then_a_large_read() -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": [{"type": "text", "text": "Find value_77 in the file and explain it."},
                                     {"type": "image_url", "image_url": {"url": "https://example.com/screenshot.png"}}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "read", "arguments": json.dumps({"path": "data.txt"})}}]},
        {"role": "tool", "tool_call_id": "a", "content": "\n".join(f"line {i}: data value_{i}" for i in range(1500))},
    ]


def test_the_newest_step_enters_within_what_the_excerpted_user_message_leaves() -> None:
    """break41's finding 5: a newest user message too large for the room (an image it cannot read
    the size of: 765 tokens) is sent as a 72-token excerpt; the newest step's messages enter within
    the room that excerpt leaves, not the room its original size would — the tool output was a
    36-token bare marker with 204 of 600 tokens sent."""
    history = _image_task_then_a_large_read()
    _, built = _built(history, 600)
    user, tool = built.record.decision_for("m1"), built.record.decision_for("m3")
    assert user.fidelity == "excerpt" and user.sent_tokens is not None and user.sent_tokens < 100
    assert tool.fidelity == "excerpt" and tool.sent_tokens is not None and tool.sent_tokens > 200
    assert "lines kept" in built.messages[-1]["content"].splitlines()[0]
    assert built.record.tokens_after > 600 // 2


def test_an_append_s_new_step_enters_within_what_the_excerpted_user_message_leaves() -> None:
    """The same in the append path: a new user message too large for the room arrives with the
    goal set by the caller (no rebuild), then a large read; the read is cut to its entry cap, not
    to what the user message's original size would leave."""
    opening = [{"role": "system", "content": "sys"}, {"role": "user", "content": "Look at the data."}]
    memory = RelevanceMemoryManager(max_input_tokens=600)
    memory.set_goal("Look at the data.")
    memory.extend(opening)
    memory.build_context()
    new = _image_task_then_a_large_read()[1:]
    memory.extend(new)
    built = memory.build_context()
    assert built.record.mode == "appended"
    read = built.record.decision_for("m4")
    assert read.fidelity == "excerpt" and read.sent_tokens is not None and read.sent_tokens > 200
    assert_invariants([*opening, *new], built, 600, memory.tokenizer)


def test_an_overflow_names_the_least_the_newest_step_can_be_sent_as() -> None:
    """When not even the least excerpts of the newest step fit, the error says how many tokens
    they take (not the step's size at its entry caps), and a budget of that many builds."""
    calls = [{"id": f"c{j}", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": f"cat f{j}.py"})}}
             for j in range(8)]
    history = [
        {"role": "system", "content": "You are a careful agent. " * 20},
        {"role": "user", "content": "Fix the bug in the parser."},
        {"role": "assistant", "content": None, "tool_calls": calls},
        *({"role": "tool", "tool_call_id": f"c{j}", "content": _file(j)} for j in range(8)),
    ]
    err = _overflow(history, 400)
    need = err.pinned_tokens + err.least_newest_step_tokens
    assert err.least_newest_step_tokens < err.newest_step_tokens  # eight results at ~40 tokens, not ~240
    assert f"need {need} tokens but the budget is 400 tokens" in str(err)
    assert "cut to its least excerpt" in str(err)
    _, built = _built(history, need)  # the figure is what it takes
    assert built.record.tokens_after <= need
    with pytest.raises(ContextOverflowError):
        _built(history, need - 1)


def test_a_budget_of_the_named_need_builds_a_wide_parallel_step() -> None:
    """helper-44's reproducer: ten parallel calls beside a long CJK-and-emoji user message, at
    o200k_base and an excerpt share of 0.5. fit_chain lowered its common cap five times and gave
    up above the excerpt floor, so a budget of the figure the error named (427), and up to 450,
    still raised while the least excerpts fitted; now its last try is the floor."""
    history = json.loads((Path(__file__).parent / "overflow_parallel_calls.json").read_text(encoding="utf-8"))
    config: dict[str, Any] = {"keep_recent": 1, "encoding": "o200k_base", "excerpt_share": 0.5}
    err = _overflow(history, 100, **config)
    need = err.pinned_tokens + err.least_newest_step_tokens
    assert need == 427
    for budget in (need, need + 10, 450):
        _, built = _built(history, budget, **config)
        assert built.record.tokens_after <= budget
    with pytest.raises(ContextOverflowError):
        _built(history, need - 1, **config)

"""Prefix-stable builds of board agents (SPEC §3.1, §10): another agent's tool results,
imported as ``user`` messages, are not user constraints, so they never grow a compaction's
target; an explicit final goal equal to the task statement points at it instead of
repeating it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from invariants import assert_invariants

from relevance_memory import GOAL_BLOCK_MARKER, RelevanceMemoryManager, load_transcript
from relevance_memory._models import user_authored
from relevance_memory._record import DecisionRecord, MessageDecision
from relevance_memory.board import InMemoryBoard
from relevance_memory.pipeline.cycle import TARGET_GROWTH_SLACK, grown_target

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "django__django-15280.json"


def _decision(i: int, role: str, msg_type: str, score: int, tokens: int) -> MessageDecision:
    return MessageDecision(id=f"m{i}", index=i, step=i, role=role, msg_type=msg_type, tokens=tokens, score=score,
                           tier="core", decision="summarised", chain_id=f"m{i}")


def _record(decisions: list[MessageDecision]) -> DecisionRecord:
    return DecisionRecord.model_validate({
        "build_id": "b", "created_at": "2026-01-01T00:00:00Z", "goal": {"final": "g"}, "budget": 4000,
        "encoding": "o200k_base", "tokens_before": 1, "tokens_after": 1, "messages_before": 1, "messages_after": 1,
        "keep_recent": 1, "working_steps": 1, "identity": False, "messages": [d.model_dump() for d in decisions],
    })


def test_user_authored_is_a_users_own_words() -> None:
    assert user_authored("user", "user_instruction") and user_authored("user", "user_chat")
    assert not user_authored("user", "tool_result")  # another agent's tool result, imported from a board
    assert not user_authored("user", "assistant_reasoning")
    assert not user_authored("tool", "tool_result")


def test_an_imported_tool_result_never_grows_the_target() -> None:
    imported = _decision(5, "user", "tool_result", 5, 700)
    assert grown_target(_record([imported]), first_user=None, core_score=4, target=2000, budget=4000) is None
    constraint = _decision(6, "user", "user_instruction", 5, 300)
    grown = grown_target(_record([imported, constraint]), first_user=None, core_score=4, target=2000, budget=4000)
    assert grown == 2000 + 300 + TARGET_GROWTH_SLACK


def _steps() -> tuple[dict[str, Any], dict[str, Any], list[tuple[str, list[dict[str, Any]]]]]:
    """The fixture's system prompt, task and steps, each given to a role by its command
    (as examples/multi_agent.py does: edits → executor, runs → reviewer, reads → planner)."""
    messages = load_transcript(FIXTURE).messages
    steps: list[tuple[str, list[dict[str, Any]]]] = []
    for message in messages[2:]:
        if message["role"] == "assistant":
            calls = message.get("tool_calls") or []
            command = json.loads(calls[0]["function"]["arguments"])["command"] if calls else ""
            role = ("executor" if ("sed -i" in command or "cat <<" in command)
                    else "reviewer" if "python" in command else "planner")
            steps.append((role, [message]))
        else:
            steps[-1][1].append(message)
    return messages[0], messages[1], steps


def test_board_agents_append_between_compactions() -> None:
    """Three agents over 40 steps of a real run: before the fix every compaction of an agent
    that imported key tool results grew its target to the whole budget (27 of 27 builds after
    the first three were compactions filling ≥ 3,700 of 4,000 tokens), so nothing was ever
    appended. Now compactions that grow do so by the task statement alone, and builds append."""
    system, task, steps = _steps()
    board = InMemoryBoard("prefix")
    agents = {r: RelevanceMemoryManager(agent=r, board=board, max_input_tokens=4000, keep_recent=3)
              for r in ("planner", "executor", "reviewer")}
    for memory in agents.values():
        memory.add(system)
        memory.set_goal(final=str(task["content"]))
    agents["planner"].add(task)
    modes: list[str] = []
    for role, messages in steps[:40]:
        memory = agents[role]
        built = memory.build_context()
        record = built.record
        modes.append(record.mode)
        assert built.token_count <= 4000
        if record.mode == "compacted" and "target grown to" in record.mode_reason:
            grown = int(record.mode_reason.rsplit("target grown to ", 1)[1].split()[0])
            # grown by the task statement (and the slack), never by imported tool results
            task_tokens = memory.get("planner:m1").token_count  # an imported copy carries a header
            assert grown <= 2000 + task_tokens + TARGET_GROWTH_SLACK
        for message in messages:
            memory.add(message)
    assert modes.count("appended") >= 5


def test_an_explicit_goal_equal_to_the_task_statement_is_not_sent_twice() -> None:
    """``set_goal(final=task)`` with the task as the first user message: the goal block
    points at the kept task statement, as for a goal derived from it (before, the goal block
    repeated the whole task: 1,718 tokens of a 4,000-token context spent twice)."""
    system, task, steps = _steps()
    history = [system, task, *[m for _, messages in steps[:12] for m in messages]]
    explicit = RelevanceMemoryManager(max_input_tokens=4000, keep_recent=3)
    explicit.extend(history)
    explicit.set_goal(final=str(task["content"]))
    derived = RelevanceMemoryManager(max_input_tokens=4000, keep_recent=3)
    derived.extend(history)
    built, reference = explicit.build_context(), derived.build_context()
    assert_invariants(history, built, 4000, explicit.tokenizer)
    assert built.record.goal.source == "explicit"
    goal_blocks = [m for m in built.messages if str(m.get("content", "")).startswith(GOAL_BLOCK_MARKER)]
    assert len(goal_blocks) == 1 and "as stated in the first user message (m1)" in goal_blocks[0]["content"]
    assert built.messages.count(task) == 1
    assert built.messages == reference.messages

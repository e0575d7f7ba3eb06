"""Assemble (SPEC §3 step 8) and the output validity check (SPEC §9).

Order: original system prompt(s) unchanged → goal block → summaries → kept older
messages in original order → working memory verbatim. :func:`assemble` is the stage;
:func:`check_context` the API-validity check every build passes before it is returned.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._exceptions import RelevanceMemoryError
from .._markers import GOAL_BLOCK_MARKER, SUMMARY_MARKER
from .._models import TaskGoal
from .._tokenizer import REPLY_PRIMING_TOKENS
from ._state import Assembled, BuildState, Seams, required
from .ledger import Purpose

__all__ = ["GOAL_BLOCK_MARKER", "SUMMARY_MARKER", "assemble", "check_context", "goal_block_text"]



def goal_block_text(goal: TaskGoal, *, final_excerpt: str | None, task_statement_id: str | None) -> str:
    """Text of the goal block.

    Args:
        goal: the task goal.
        final_excerpt: the final goal's text to show, or ``None`` to point at the task
            statement message instead (when the goal was derived from it and it is kept).
        task_statement_id: id of the first user message, used in the pointer.
    """
    lines = [
        GOAL_BLOCK_MARKER,
        "This context was compacted: older messages were selected by relevance to the task "
        "goal; the rest are archived and restorable by message id.",
    ]
    if final_excerpt is None:
        lines.append(f"Final goal: as stated in the first user message ({task_statement_id}), kept below.")
    else:
        lines.append(f"Final goal: {final_excerpt}")
    if goal.subtask and goal.subtask != goal.final:
        lines.append(f"Current subtask: {goal.subtask}")
    return "\n".join(lines)


def check_context(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    """Problems that would make the OpenAI API reject ``messages`` (empty list: valid).

    Checks (SPEC §9): every tool message sits in the block of tool messages right
    after the assistant message whose ``tool_calls`` contains its ``tool_call_id``;
    every assistant ``tool_calls`` has all its results in that block, once; roles are
    known; no summary or goal block uses the assistant role (SPEC §7).
    """
    problems: list[str] = []
    open_calls: dict[str, bool] | None = None  # call id → answered, for the current tool block
    owner = -1

    def close_block() -> None:
        if open_calls is not None:
            missing = [c for c, done in open_calls.items() if not done]
            if missing:
                problems.append(f"assistant message {owner} has tool calls without results: {missing}")

    for n, message in enumerate(messages):
        role = message.get("role")
        if role not in ("system", "developer", "user", "assistant", "tool"):
            problems.append(f"message {n} has unknown role {role!r}")
        if role == "tool":
            call_id = message.get("tool_call_id")
            if open_calls is None or call_id not in open_calls:
                problems.append(f"tool message {n} ({call_id}) does not follow the assistant message that called it")
            elif open_calls[call_id]:
                problems.append(f"tool message {n} answers {call_id} a second time")
            else:
                open_calls[call_id] = True
            continue
        close_block()
        open_calls = None
        if role == "assistant":
            content = message.get("content")
            if isinstance(content, str) and content.startswith(GOAL_BLOCK_MARKER):
                problems.append(f"message {n}: the goal block must not use the assistant role")
            if isinstance(content, str) and content.startswith(SUMMARY_MARKER):
                problems.append(f"message {n}: a summary must not use the assistant role")
            calls = message.get("tool_calls") or []
            if calls:
                open_calls = {c.get("id"): False for c in calls}
                owner = n
    close_block()
    return problems


def assemble(state: BuildState, seams: Seams) -> Assembled:
    """The assemble stage: the context in SPEC §3 step 8 order, checked (SPEC §9).

    Reads the partition (pinned prompt, working memory, chains) and, after a compaction,
    the summarise stage (kept chains, summaries, the goal block in the end). When the whole
    history fits, the context is the history.

    Raises:
        RelevanceMemoryError: an internal error made the context invalid or over budget
            (never expected; the message asks for a report with the decision record).
    """
    part = required(state.partition, "partition")
    store = seams.store
    summarised = state.summarised
    out: list[dict[str, Any]] = [store[i].to_openai() for i in part.pinned]
    kept_roots = set(part.recent)
    if summarised is not None:
        if summarised.goal_text is not None:
            out.append({"role": seams.config.context_role, "content": summarised.goal_text})
        out.extend(dict(s.message) for s in summarised.pyramid.summaries)
        kept_roots |= summarised.selection.kept
    kept_indices = sorted(i for r in kept_roots for i in part.chains[r].members)
    out.extend(store[i].to_openai() for i in kept_indices)
    ledger = summarised.ledger if summarised is not None else part.ledger
    tokens = (
        REPLY_PRIMING_TOKENS
        + sum(store[i].token_count for i in part.pinned)
        + sum(store[i].token_count for i in kept_indices)
        + (ledger.spent_on(Purpose.GOAL_BLOCK) if summarised is not None else 0)
        + (summarised.pyramid.tokens if summarised is not None else 0)
    )
    problems = check_context(out)
    if problems or tokens > state.budget or tokens != ledger.spent:
        raise RelevanceMemoryError(
            f"internal error: built context is invalid ({problems}) or over budget "
            f"({tokens} > {state.budget}, ledger {ledger.spent}); please report this with the decision record"
        )
    return Assembled(messages=out, kept_roots=frozenset(kept_roots), tokens=tokens)

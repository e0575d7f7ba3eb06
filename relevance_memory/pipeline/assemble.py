"""Assemble (SPEC §3 step 8) and the output validity check (SPEC §9).

Order — what changes least first, so consecutive requests share their beginning (SPEC
§3.1): original system prompt(s) unchanged → the **stable head** (kept messages older than
everything the build left out: the task statement, typically) → goal block (final goal
only) → summaries → the other kept older messages in original order → working memory
verbatim → the subtask note (only with ``CachePolicy.subtask_at_end``). The head keeps its
original place (nothing before it is left out), so every verbatim message stays in
original order. :func:`assemble` is the stage; :func:`check_context` the API-validity
check every build passes before it is returned.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from .._exceptions import RelevanceMemoryError
from .._markers import GOAL_BLOCK_MARKER, SUBTASK_MARKER, SUMMARY_MARKER
from .._tokenizer import REPLY_PRIMING_TOKENS
from ._prefix import message_key
from ._state import Assembled, BuildState, Partitioned, Seams, required
from .ledger import Purpose

__all__ = [
    "GOAL_BLOCK_MARKER",
    "SUBTASK_MARKER",
    "SUMMARY_MARKER",
    "assemble",
    "check_context",
    "first_left_out",
    "stable_head",
    "subtask_note",
]



def subtask_note(subtask: str, role: str) -> dict[str, Any]:
    """The subtask note shown at the very end of a context (``CachePolicy.subtask_at_end``):
    ``{"role": role, "content": "[relevance-memory: current subtask]\\n<subtask>"}``."""
    return {"role": role, "content": f"{SUBTASK_MARKER}\n{subtask}"}


def stable_head(kept: Sequence[int], left_out: Sequence[int]) -> tuple[list[int], list[int]]:
    """Split kept store indices into the stable head and the rest (both ascending).

    The head is every kept index below the smallest left-out one (a message neither
    pinned, excluded nor kept): nothing before it was dropped or summarised, so it may go
    first, right after the pinned prompt, without leaving original order — and it changes
    least from one compaction to the next (the task statement stays, the summaries move).

    Args:
        kept: store indices emitted verbatim (any order).
        left_out: store indices left out of the context (any order).
    """
    ordered = sorted(kept)
    if not left_out:
        return ordered, []
    first = min(left_out)
    return [i for i in ordered if i < first], [i for i in ordered if i >= first]


def check_context(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    """Problems that would make the OpenAI API reject ``messages`` (empty list: valid).

    Checks (SPEC §9): every tool message sits in the block of tool messages right
    after the assistant message whose ``tool_calls`` contains its ``tool_call_id``;
    every assistant ``tool_calls`` has all its results in that block, once; roles are
    known; no summary or goal block uses the assistant role (SPEC §7); no message holds
    Anthropic ``tool_use`` / ``tool_result`` blocks (an Anthropic request is checked by
    :func:`~relevance_memory.clients._anthropic_messages.check_anthropic_context`).
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
        parts = message.get("content")
        if isinstance(parts, list) and any(isinstance(p, Mapping) and p.get("type") in ("tool_use", "tool_result")
                                           for p in parts):
            problems.append(f"message {n} holds Anthropic tool_use/tool_result blocks; an Anthropic request "
                            "is checked by check_anthropic_context")
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


def _shared_run(
    previous: Sequence[Mapping[str, Any]], before: Sequence[Mapping[str, Any]], rest: Sequence[Mapping[str, Any]]
) -> int:
    """How many of ``rest`` can go before a compaction's new summaries and still repeat the
    previous request: ``previous`` must start with ``before`` (pinned prompt, stable head, goal
    block, carried summaries); then the length of the common run of ``previous`` and ``rest``
    after it, shortened so it never ends between an assistant's tool calls and their results.
    0 when there is no previous request or it does not start the same way."""
    if not previous or len(previous) < len(before):
        return 0
    if any(message_key(a) != message_key(b) for a, b in zip(previous, before, strict=False)):
        return 0
    shared = 0
    for old, new in zip(previous[len(before):], rest, strict=False):
        if message_key(old) != message_key(new):
            break
        shared += 1
    while 0 < shared < len(rest) and rest[shared].get("role") == "tool":
        shared -= 1  # never part a tool block from its call
    if 0 < shared < len(rest) and rest[shared - 1].get("tool_calls"):
        shared -= 1
    return shared


def first_left_out(part: Partitioned, kept: Sequence[int], n: int) -> int | None:
    """The first message a compaction leaves out of ``n`` stored: the smallest first member of a
    chain not kept (a chain is kept or left out whole), or ``None``. The partition's chains hold
    every message neither pinned nor excluded (:class:`~relevance_memory.pipeline.partition.Split`),
    so it is the smallest index that is neither pinned, excluded nor in ``kept`` (the kept
    chains' members): O(pinned + excluded + kept), not a pass over every chain (issue 24)."""
    held = set(part.pinned).union(part.excluded, kept)
    return next(itertools.filterfalse(held.__contains__, range(n)), None)


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
    role = seams.config.context_role
    rendered = dict(part.renditions)
    if summarised is not None:
        rendered.update(summarised.selection.rendered)

    def message(i: int) -> dict[str, Any]:
        found = rendered.get(i)
        return dict(found.message) if found is not None else store[i].to_openai()

    def tokens_of(i: int) -> int:
        found = rendered.get(i)
        return found.tokens if found is not None else store[i].token_count

    out: list[dict[str, Any]] = [store[i].to_openai() for i in part.pinned]
    sources: list[int | None] = list(part.pinned)
    kept_roots = set(part.recent)
    if summarised is not None:
        kept_roots |= summarised.selection.kept
    kept_indices = sorted(i for r in kept_roots for i in part.chains[r].members)
    head, rest = kept_indices, list[int]()
    if summarised is not None:
        # the first message left out: the smallest first member of a chain not kept (a chain is
        # kept or left out whole). The chains hold every message neither pinned nor excluded
        # (partition's Split), so it is the smallest index none of those holds: O(kept), not a
        # pass over every chain
        first = first_left_out(part, kept_indices, len(store))
        if first is not None:
            head, rest = stable_head(kept_indices, [first])
        else:  # nothing left out (only excerpts made it fit, SPEC §11): the goal block right after
            # the task statement — never after the newest step
            task = part.chains[part.task_root].last if part.task_root is not None and part.task_root in part.chains else -1
            head, rest = [i for i in kept_indices if i <= task], [i for i in kept_indices if i > task]
    out.extend(message(i) for i in head)
    sources.extend(head)
    rest_messages = [message(i) for i in rest]
    if summarised is not None:
        if summarised.goal_text is not None:
            out.append({"role": role, "content": summarised.goal_text})
            sources.append(None)
        carried = [s for s in summarised.pyramid.summaries if s in state.carried]
        fresh = [s for s in summarised.pyramid.summaries if s not in state.carried]
        out.extend(dict(s.message) for s in carried)
        sources.extend(None for _ in carried)
        # cache-aware (issue 21): new summaries go after the kept messages that repeat the
        # previous request right after its carried part, so the cached prefix runs through them
        shared = _shared_run(state.previous, out, rest_messages) if fresh else 0
        out.extend(rest_messages[:shared])
        sources.extend(rest[:shared])
        out.extend(dict(s.message) for s in fresh)
        sources.extend(None for _ in fresh)
        rest_messages, rest = rest_messages[shared:], rest[shared:]
    out.extend(rest_messages)
    sources.extend(rest)
    ledger = summarised.ledger if summarised is not None else part.ledger
    note = None
    note_tokens = ledger.spent_on(Purpose.SUBTASK)
    if note_tokens:
        note = subtask_note(state.goal.subtask, role)
        out.append(note)
        sources.append(None)
    tokens = (
        REPLY_PRIMING_TOKENS
        + sum(store[i].token_count for i in part.pinned)
        + sum(tokens_of(i) for i in kept_indices)
        + (ledger.spent_on(Purpose.GOAL_BLOCK) if summarised is not None else 0)
        + (summarised.pyramid.tokens if summarised is not None else 0)
        + note_tokens
    )
    problems = check_context(out)
    if problems or tokens > state.budget or tokens != ledger.spent:
        raise RelevanceMemoryError(
            f"internal error: built context is invalid ({problems}) or over budget "
            f"({tokens} > {state.budget}, ledger {ledger.spent}); please report this with the decision record"
        )
    return Assembled(
        messages=out, kept_roots=frozenset(kept_roots), tokens=tokens, sources=tuple(sources), subtask_note=note
    )

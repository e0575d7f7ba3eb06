"""SPEC §9 output invariants, asserted on every build in the test suite."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from relevance_memory import BuiltContext, TokenCounter, check_context
from relevance_memory._markers import SUBTASK_MARKER
from relevance_memory._tokenizer import REPLY_PRIMING_TOKENS

GENERATED_PREFIX = "[relevance-memory"


def is_generated(message: dict[str, Any]) -> bool:
    """Goal blocks and summaries the manager adds (not input messages)."""
    content = message.get("content")
    return isinstance(content, str) and content.startswith(GENERATED_PREFIX)


def assert_invariants(
    history: Sequence[dict[str, Any]], built: BuiltContext, budget: int, counter: TokenCounter
) -> None:
    """Assert every SPEC §9 invariant of ``built`` against the input ``history``."""
    out = built.messages
    record = built.record
    # valid for the API: tool messages follow their call, every call has all its results
    assert check_context(out) == [], check_context(out)
    # within budget, counted by the same tokenizer
    counted = REPLY_PRIMING_TOKENS + sum(counter.count_message(m) for m in out)
    assert counted == record.tokens_after
    assert counted <= budget, (counted, budget)
    # the budget breakdown accounts for every token: spent per purpose + unused = budget
    breakdown = record.budget_breakdown
    assert breakdown is not None and breakdown.budget == record.budget
    assert sum(breakdown.spent.values()) == record.tokens_after
    assert sum(breakdown.spent.values()) + breakdown.unused == record.budget
    # the original system message is first, exactly once, byte for byte
    if history and history[0].get("role") == "system":
        assert json.dumps(out[0], sort_keys=True) == json.dumps(history[0], sort_keys=True)
        assert sum(1 for m in out if m == history[0]) == 1
    # generated messages never use the assistant role
    assert all(m["role"] != "assistant" for m in out if is_generated(m))
    # verbatim messages: each at most once, in original order, unchanged
    verbatim = [m for m in out if not is_generated(m)]
    kept_ids = [d.index for d in record.messages if d.decision in ("kept", "recent")]
    assert len(verbatim) == len(kept_ids)
    assert kept_ids == sorted(set(kept_ids))
    for message, index in zip(verbatim, kept_ids, strict=False):
        assert message == history[index]
    # the newest user message is always kept verbatim
    users = [i for i, m in enumerate(history) if m.get("role") == "user"]
    if users:
        assert users[-1] in kept_ids
    # parallel calls stay whole: a kept assistant with tool_calls has all results kept
    kept = set(kept_ids)
    for i in kept:
        for call in history[i].get("tool_calls") or []:
            assert any(
                history[j].get("role") == "tool" and history[j].get("tool_call_id") == call["id"] for j in kept
            )
    # a goal block that points at the task statement ("kept verbatim here") tells the truth
    for m in out:
        if is_generated(m) and "kept verbatim here" in str(m.get("content")):
            assert users and history[users[0]] in out
    # the subtask never rewrites the prefix: a subtask note is the very last message
    notes = [n for n, m in enumerate(out) if is_generated(m) and str(m.get("content")).startswith(SUBTASK_MARKER)]
    assert notes in ([], [len(out) - 1])
    # BuiltContext.sources names, per message, the stored message it copies (None: generated)
    if built.sources:
        assert len(built.sources) == len(out)
        for message, source in zip(out, built.sources, strict=True):
            assert (source is None) == is_generated(message)
            if source is not None:
                assert message == history[source]
    # an appended build extends the previous request: its prefix is the context before the new messages
    if record.mode == "appended":
        assert record.base_build_id is not None
        new = len(record.appended_ids) + len(notes)
        assert record.prefix_tokens == sum(counter.count_message(m) for m in out[: len(out) - new])
    # under budget with nothing to drop, output == input
    if record.identity:
        assert out == list(history)

"""Case C08's kind (``shared/cases``): every field a message sends is counted, not only
``content`` and ``tool_calls``.

A reply dumped from an SDK or read from a provider's JSON carries its payload in other
fields too — DeepSeek's ``reasoning_content``, OpenRouter's ``reasoning``, a message-level
``refusal``, LiteLLM's ``thinking_blocks``, a caller's ``metadata``. The store keeps and
sends them, so they count like text (each encoded payload at the placeholder cost); ``None``
and empty values cost nothing. An excerpt leaves them out with the content, so a message
that carries a large one still enters within its share (SPEC §11).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from invariants import assert_invariants

from relevance_memory import RelevanceMemoryManager, TiktokenCounter
from relevance_memory._tokenizer import REPLY_PRIMING_TOKENS

counter = TiktokenCounter("o200k_base")
BIG = "lorem ipsum dolor sit amet " * 1500
BIG_TOKENS = 7502  # counter.count_text(BIG)
BASE = {"role": "assistant", "content": "ok"}  # 5 tokens: 3 framing, "assistant", "ok"

OTHER_FIELDS: dict[str, Any] = {
    "reasoning_content": BIG,  # DeepSeek
    "reasoning": BIG,  # OpenRouter, vLLM
    "refusal": BIG,  # the SDK message's own field
    "thinking_blocks": [{"type": "thinking", "thinking": BIG, "signature": "EqQBCkYIBx"}],  # LiteLLM
    "metadata": {"note": BIG},  # a caller's own
}


def _real_tokens(messages: list[dict[str, Any]]) -> int:
    """What the messages cost, every field they send counted as the text it is."""
    return REPLY_PRIMING_TOKENS + sum(
        counter.count_message({"role": m["role"], "content": json.dumps({k: v for k, v in m.items() if k != "role"})})
        for m in messages
    )


def test_text_and_base_counts() -> None:
    assert counter.count_text(BIG) == BIG_TOKENS
    assert counter.count_message(BASE) == 5


@pytest.mark.parametrize("key", list(OTHER_FIELDS))
def test_other_fields_are_counted(key: str) -> None:
    """The field's text is counted: 5 + 7,502 (it was 5: the payload looked free)."""
    assert counter.count_message({**BASE, key: OTHER_FIELDS[key]}) == 5 + BIG_TOKENS


def test_empty_sdk_fields_cost_nothing() -> None:
    """A ``model_dump()`` of a reply: ``refusal``/``audio`` None and ``annotations`` [] add 0."""
    dumped = {**BASE, "refusal": None, "audio": None, "annotations": [], "function_call": None}
    assert counter.count_message(dumped) == 5


def test_stored_count_includes_other_fields() -> None:
    """Ingest counts them too (the store's memo of repeated messages is keyed by the chat
    fields only, so a message with other fields is counted on its own)."""
    memory = RelevanceMemoryManager(max_input_tokens=20_000, keep_recent=1)
    memory.extend([{"role": "user", "content": "go"}, BASE, {**BASE, "reasoning_content": BIG}])
    assert [m.token_count for m in memory.messages] == [5, 5, 5 + BIG_TOKENS]


@pytest.mark.parametrize("key", list(OTHER_FIELDS))
def test_an_old_message_with_a_large_field_keeps_the_budget(key: str) -> None:
    """At 1,000 tokens the request really is within 1,000 (it was 7,556 with the field sent
    but counted as nothing)."""
    history = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "go"},
        {**BASE, key: OTHER_FIELDS[key]},
        {"role": "user", "content": "next"},
    ]
    memory = RelevanceMemoryManager(max_input_tokens=1000, keep_recent=2)
    memory.extend(history)
    built = memory.build_context()
    assert_invariants(history, built, 1000, memory.tokenizer)
    assert _real_tokens(built.messages) <= 1000
    assert all(key not in m for m in built.messages)


@pytest.mark.parametrize("budget", [300, 1000, 5000])
def test_a_newest_step_with_a_large_field_enters_as_an_excerpt(budget: int) -> None:
    """SPEC §11: no message is too large to enter. A tool-calling reply in working memory with
    7,502 tokens of reasoning enters as an excerpt without the field (it raised
    ContextOverflowError: "7,564 tokens, even as excerpts"), its chain whole."""
    call = {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
    history = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "reasoning_content": BIG, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "a"},
    ]
    memory = RelevanceMemoryManager(max_input_tokens=budget, keep_recent=1)
    memory.extend(history)
    built = memory.build_context()
    assert_invariants(history, built, budget, memory.tokenizer)
    assert built.record.decision_for("m2").fidelity == "excerpt"
    sent, result = built.messages[-2:]  # after the goal block
    assert "reasoning_content" not in sent and sent["tool_calls"] == history[2]["tool_calls"]
    assert sent["content"].startswith("[relevance-memory: excerpt of m2 (assistant, tool_call): content cut (about 7,460 of 7,516")
    assert result == history[3]
    assert _real_tokens(built.messages) <= budget
    assert memory.restore(["m2"])[0] == history[2]


def test_the_whole_history_fits_with_its_fields_unchanged() -> None:
    """C02 with the field: under budget the output is the input, the field included."""
    history = [{"role": "user", "content": "go"}, {**BASE, "reasoning_content": "I think so."}]
    memory = RelevanceMemoryManager(max_input_tokens=10_000, keep_recent=1)
    memory.extend(history)
    built = memory.build_context()
    assert built.messages == history
    assert built.record.tokens_after == REPLY_PRIMING_TOKENS + 5 + 5 + counter.count_text("I think so.")

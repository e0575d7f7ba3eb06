"""The ``langchain_core.messages.trim_messages`` baseline the timing benchmarks compare against.

``trim_messages(strategy="last", include_system=True, start_on="human")`` over the history
converted once to LangChain messages, with a token counter memoised per message object (the
way a user keeps a counter warm), counting like relevance-memory's ``TokenCounter``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def trimmer(history: list[dict[str, Any]], budget: int, counter: Any) -> Callable[[], Any]:
    """A no-argument call that trims ``history`` to ``budget`` tokens; ``counter`` is a
    relevance-memory token counter (``count_message`` of an OpenAI dict, tokens)."""
    from langchain_core.messages import convert_to_messages, convert_to_openai_messages, trim_messages

    messages = convert_to_messages(history)
    memo: dict[int, int] = {}

    def count(batch: list[Any]) -> int:
        total = 0
        for message in batch:
            key = id(message)
            if key not in memo:
                memo[key] = counter.count_message(convert_to_openai_messages(message))
            total += memo[key]
        return total

    def trim() -> Any:
        return trim_messages(messages, max_tokens=budget, token_counter=count, strategy="last", include_system=True,
                             start_on="human")

    return trim

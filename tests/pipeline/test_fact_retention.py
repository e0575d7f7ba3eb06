"""Facts the user states survive many compactions (issue 23 item 3, ``benchmarks/fact_retention.py``
in small): a chat opened by a greeting, a few facts stated early, then many questions the goal is
formed from; the append/compact cycle at a tight budget. After every compaction each fact's value
is in the context (verbatim or in a summary), and none that a summary held is lost when the
summary is made again."""

from __future__ import annotations

import random
from datetime import datetime, timezone
from typing import Any

import pytest

from relevance_memory import RelevanceMemoryManager
from relevance_memory._models import content_text

CLOCK = datetime(2026, 12, 2, tzinfo=timezone.utc)
FACTS = [
    ("My landlord's name is Benedikt Aurelius-Hale.", "Benedikt Aurelius-Hale"),
    ("The invoice we dispute is numbered 558213.", "558213"),
    ("We settled on Paloma Vista as the venue.", "Paloma Vista"),
    ("I keep my spare key with my neighbour Odalys.", "Odalys"),
]
TOPICS = ["pottery", "cycling", "baking bread", "tax forms", "guitar", "rowing", "knitting", "chess"]


def history(turns: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out: list[dict[str, Any]] = [{"role": "system", "content": "You are a helpful assistant."},
                                 {"role": "user", "content": "Hello! A few things about my week first."},
                                 {"role": "assistant", "content": "Sure, go ahead."}]
    for text, _ in FACTS:
        out += [{"role": "user", "content": text}, {"role": "assistant", "content": "Got it."}]
    for _ in range(turns):
        topic = rng.choice(TOPICS)
        out.append({"role": "user", "content": f"What should I try next in {topic}, given I practised {rng.randint(100, 999)} minutes?"})
        out.append({"role": "assistant", "content": f"For {topic}, pick one small goal, practise it for a week and note "
                                                    f"what changed; {rng.randint(2, 9)} short sessions beat one long one."})
    return out


@pytest.mark.parametrize("budget", [1800, 2000, 2200])
def test_stated_facts_outlive_many_questions(budget: int) -> None:
    messages = history(90, seed=budget)
    memory = RelevanceMemoryManager(max_input_tokens=budget, clock=lambda: CLOCK)
    done = compactions = 0
    in_summary: dict[str, bool] = {}
    for k, message in enumerate(messages):
        if message["role"] != "assistant" or k <= 2 * len(FACTS) + 3:
            continue
        memory.extend(messages[done:k])
        done = k
        built = memory.build_context()
        if built.record.mode == "appended" or built.record.identity:
            continue
        compactions += 1
        texts = [content_text(m.get("content")) for m in built.messages]
        for _, probe in FACTS:
            holders = [t for t in texts if probe in t]
            assert holders, f"{probe!r} is not in the context at message {k} ({budget} tokens)"
            in_summary[probe] = all(t.startswith("[relevance-memory: summary") for t in holders)
    assert compactions >= 4
    assert any(in_summary.values())  # the facts did live in a summary, across re-summarisations

"""Case C03's kind (``shared/cases``): the exact values of a summarised tool chain survive in
the summary's exact values, however much chatter follows it.

C03's own history ends soon after the parallel calls. When the agent keeps talking after
them ("Checking detail 7: the table has 107 rows and 17 columns; took 9 ms."), the offline
summary listed values newest first and, when it had to give values up, gave up the oldest:
the results 41872 and 41790 went and "107 rows | 9 ms" stayed, at every budget from 140 to
680 tokens. Now a value a tool result or the user gave outranks one only the agent's own
narration holds, in the draft and when a summary sheds values to fit.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from invariants import assert_invariants

from relevance_memory import BuiltContext, RelevanceMemoryManager
from relevance_memory.summary._pyramid import SummaryItem
from relevance_memory.summary._summary import OfflineSummarizer


def _call(call_id: str, query: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "sql", "arguments": json.dumps({"q": query})}}


def _history(chatter: int) -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a data agent."},
        {"role": "user", "content": "Compare revenue of region A and B and report the larger."},
        {"role": "assistant", "content": None, "tool_calls": [_call("call_c1", "select sum(rev) from a"),
                                                              _call("call_c2", "select sum(rev) from b")]},
        {"role": "tool", "tool_call_id": "call_c1", "content": "sum(rev)\n41872"},
        {"role": "tool", "tool_call_id": "call_c2", "content": "sum(rev)\n41790"},
    ]
    for i in range(chatter):
        history.append({"role": "assistant",
                        "content": f"Checking detail {i}: the table has {100 + i} rows and {10 + i} columns; took {i + 2} ms."})
        history.append({"role": "user", "content": f"ok, continue with check {i}"})
    history.append({"role": "user", "content": "So which region is larger?"})
    return history


@pytest.mark.parametrize("chatter", [3, 10, 30, 80])
@pytest.mark.parametrize("budget", [160, 200, 300, 420, 560, 680])
def test_results_survive_chatter_after_the_chain(chatter: int, budget: int) -> None:
    """C03's must lines: ids once; the chain whole or absent; 41872 and 41790 in the context."""
    history = _history(chatter)
    memory = RelevanceMemoryManager(max_input_tokens=budget, keep_recent=1)
    memory.extend(history)
    _assert_c03_must(history, memory.build_context(), budget, memory)


def _assert_c03_must(history: list[dict[str, Any]], built: BuiltContext, budget: int,
                     memory: RelevanceMemoryManager) -> None:
    """C03's must lines on one build: the invariants, ids once (kept or summarised), the
    chain whole or absent, both results' numbers in the context."""
    assert_invariants(history, built, budget, memory.tokenizer)
    covered = [i for s in built.record.summaries for i in s.covered_ids]
    kept = [d.id for d in built.record.messages if d.decision in ("kept", "recent")]
    assert all(n == 1 for n in Counter(covered + kept).values())
    results = Counter(m.get("tool_call_id") for m in built.messages if m["role"] == "tool")
    assert results in (Counter(), Counter({"call_c1": 1, "call_c2": 1}))
    text = json.dumps(built.messages)
    assert "41872" in text and "41790" in text


def test_summary_lists_given_values_before_narration() -> None:
    """The offline summarizer at a small size: the tool results' values are listed, the
    agent's narration's values give way."""
    items = [SummaryItem(id="m3", role="tool", msg_type="tool_result", text="sum(rev)\n41872", source="sql"),
             SummaryItem(id="m4", role="tool", msg_type="tool_result", text="sum(rev)\n41790", source="sql")]
    items += [SummaryItem(id=f"m{5 + i}", role="assistant", msg_type="assistant_reasoning",
                          text=f"Checking detail {i}: the table has {100 + i} rows; took {i + 2} ms.")
              for i in range(30)]
    draft = OfflineSummarizer().summarize(items, level=1, max_tokens=60)
    assert draft.exact_values[:2] == ["41872", "41790"]
    assert len(draft.exact_values) > 2  # the narration's newest values fill what room is left


@pytest.mark.parametrize("keep_recent", [1, 2])
@pytest.mark.parametrize("budget", [120, 200, 500])
def test_c03_case_compacted_again_and_again(budget: int, keep_recent: int) -> None:
    """C03's history, then 40 turns appended one build at a time (appends and compactions in
    turn): after every build ids once, the chain whole or absent, both numbers present."""
    case = json.loads((Path(__file__).resolve().parents[1] / "cases" / "C03-no-duplicates-around-summary-cut.json")
                      .read_text(encoding="utf-8"))
    history = list(case["messages"])
    memory = RelevanceMemoryManager(max_input_tokens=budget, keep_recent=keep_recent)
    memory.extend(history)
    modes = set()
    for n in range(40):
        for message in ({"role": "user", "content": f"Now check table t{n} please."},
                        {"role": "assistant", "content": f"Table t{n} has {200 + n} rows."}):
            memory.add(message)
            history.append(message)
        built = memory.build_context()
        modes.add(built.record.mode)
        _assert_c03_must(history, built, budget, memory)
    assert "compacted" in modes and (budget < 200 or "appended" in modes)

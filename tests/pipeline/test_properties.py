"""Property tests: random agent histories keep every SPEC §9 invariant at any budget."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from invariants import assert_invariants

from relevance_memory import ContextOverflowError, RelevanceMemoryManager, TiktokenCounter

COUNTER = TiktokenCounter("o200k_base")

WORDS = st.sampled_from(
    ["fix", "the", "parser", "utils/dates.py", "ORD-1001", "41872", "must", "never", "error:", "Traceback",
     "我家猫叫豆豆", "千万别喂巧克力", "下午 3 点", "不要", "ok", "lorem", "ipsum", "VENDOR-K", "2026-11-30", "🙂"]
)
TEXT = st.lists(WORDS, min_size=1, max_size=30).map(" ".join)
LONG_TEXT = st.tuples(TEXT, st.integers(min_value=1, max_value=120)).map(lambda t: (t[0] + "\n") * t[1])


@st.composite
def histories(draw: st.DrawFn) -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = []
    if draw(st.booleans()):
        history.append({"role": "system", "content": draw(TEXT)})
    history.append({"role": "user", "content": draw(TEXT)})
    call_no = 0
    for _ in range(draw(st.integers(min_value=0, max_value=25))):
        kind = draw(st.sampled_from(["user", "assistant", "tools", "tools", "image"]))
        if kind == "user":
            history.append({"role": "user", "content": draw(TEXT)})
        elif kind == "assistant":
            history.append({"role": "assistant", "content": draw(TEXT)})
        elif kind == "image":
            history.append({"role": "user", "content": [
                {"type": "text", "text": draw(TEXT)},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "iVBORw0KGgo" * draw(st.integers(1, 500))}},
            ]})
        else:
            calls = []
            for _ in range(draw(st.integers(min_value=1, max_value=3))):
                call_no += 1
                calls.append({"id": f"call_{call_no}", "type": "function",
                              "function": {"name": draw(st.sampled_from(["bash", "read", "search"])),
                                           "arguments": json.dumps({"q": draw(TEXT)}, ensure_ascii=False)}})
            history.append({"role": "assistant", "content": draw(st.one_of(st.none(), TEXT)), "tool_calls": calls})
            for c in calls:
                history.append({"role": "tool", "tool_call_id": c["id"], "content": draw(st.one_of(TEXT, LONG_TEXT))})
    return history


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=histories(), fraction=st.floats(min_value=0.05, max_value=1.3), keep_recent=st.integers(0, 5))
def test_invariants_hold_for_random_histories(history: list[dict[str, Any]], fraction: float, keep_recent: int) -> None:
    total = 3 + sum(COUNTER.count_message(m) for m in history)
    budget = max(1, int(total * fraction))
    memory = RelevanceMemoryManager(max_input_tokens=budget, keep_recent=keep_recent)
    memory.extend(history)
    try:
        built = memory.build_context()
    except ContextOverflowError as err:
        # only when the pinned prompt plus the forced newest step really cannot fit
        assert err.pinned_tokens + err.newest_step_tokens > budget
        return
    assert_invariants(history, built, budget, memory.tokenizer)
    # a second build with nothing new gives the same context
    assert memory.build_context().messages == built.messages

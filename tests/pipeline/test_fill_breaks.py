"""Adversarial tests of the fill from the archive (``MemoryConfig.fill_from_archive``): variants
of the shared failure cases where the room left could bring back what must stay out."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from relevance_memory import RelevanceMemoryManager, TiktokenCounter
from relevance_memory.pipeline.select import ROOM_LEFT

CASES = Path(__file__).resolve().parents[3] / "shared" / "cases"
if not CASES.is_dir():
    CASES = Path("/work/shared/cases")
COUNTER = TiktokenCounter("o200k_base")


def _s01() -> dict[str, Any]:
    path = CASES / "S01-sixty-turn-life-assistant.json"
    if not path.is_file():
        pytest.skip(f"{path} not present")
    return dict(json.loads(path.read_text(encoding="utf-8")))


@pytest.mark.parametrize("fraction", [0.3, 0.6])
def test_s01_coupon_stays_out_without_the_pheromone_field(fraction: float) -> None:
    """S01 at its own settings (and a larger budget) with the pheromone field off: nothing says
    the turn-5 coupon reminder was forgotten, so the room left must not bring it back verbatim
    (the fill without its forgetting floor is what BENCHMARKS.md's ``fill_no_forgetting`` shows
    breaking S01)."""
    case = _s01()
    history = sum(COUNTER.count_message(m) for m in case["messages"]) + 3
    memory = RelevanceMemoryManager(
        max_input_tokens=int(history * fraction), keep_recent=case["settings"]["keep_recent_steps"],
        pheromone={"enabled": False},
    )
    memory.extend(case["messages"])
    memory.set_goal(final=case["goal"]["final"], subtask=case["goal"]["subtask"])
    built = memory.build_context()
    texts = [str(m.get("content")) for m in built.messages if not str(m.get("content")).startswith("[relevance-memory")]
    assert not any("外卖红包" in t for t in texts)
    assert built.record.decision_for("m9").decision != "kept"
    assert not [d for d in built.record.messages if d.note and ROOM_LEFT in d.note]


def _english_s01(coupon_turn: int) -> list[dict[str, Any]]:
    filler = ["Where should I go this weekend?", "This song has been on repeat all day.", "Will it rain tomorrow?",
              "Any good movies lately?", "I want a new phone case.", "My sister is visiting next month.",
              "The traffic was terrible this morning.", "I bought new running shoes.", "What is a good podcast?",
              "My plants need watering."]
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a local life assistant."}]
    for turn in range(1, 61):
        text = {
            2: "My cat is called Doudou, never feed her chocolate.",
            8: "I don't eat cilantro.",
            23: "I have a phone conference at 3 pm this afternoon.",
            coupon_turn: "My takeaway coupon expires today, remind me to use it.",
            60: "What is on this afternoon, and what should I have for dinner?",
        }.get(turn, f"{filler[turn % len(filler)]} (turn {turn})")
        messages.append({"role": "user", "content": text})
        if turn < 60:
            reply = "Sure, the takeaway coupon is valid today." if turn == coupon_turn else "Okay, noted."
            messages.append({"role": "assistant", "content": reply})
    return messages


def test_english_s01_echo_of_a_forgotten_remark_stays_out() -> None:
    """English S01 with the coupon reminder at turn 45 of 60: the pheromone forgets the user's
    remark; its assistant echo ("Sure, the takeaway coupon is valid today.") must not be brought
    back verbatim either (the case's check is that no 外卖红包 text is kept verbatim). The reply
    starts stronger (1.0, half-life 8 steps) than the remark (0.5, half-life 5), so 15 turns on
    the remark is forgotten (0.03) and the reply (0.27) is not: the fill skips a reply whose user
    turn is forgotten (``select._echoes_of_forgotten``)."""
    messages = _english_s01(45)
    history = sum(COUNTER.count_message(m) for m in messages) + 3
    memory = RelevanceMemoryManager(max_input_tokens=int(history * 0.6), keep_recent=2)
    memory.extend(messages)
    memory.set_goal(final="Answer the user's latest request: this afternoon's plans and a dinner recommendation.",
                    subtask="list the afternoon plans and recommend dinner")
    built = memory.build_context()
    remark = built.record.decision_for("m89")
    assert remark.decision != "kept" and remark.strength is not None and remark.strength < 0.2  # forgotten
    texts = [str(m.get("content")) for m in built.messages]
    assert not any("coupon" in t for t in texts)


@pytest.mark.parametrize("fill", [True, False])
def test_a_user_message_scored_5_earlier_is_not_prefiltered_into_a_summary(fill: bool) -> None:
    """Found with and without the fill: at a compaction the BM25 prefilter skipped a user message
    this very subtask had scored 5 (BM25 0, strength 4.3 below ``prefilter_pass``), so it was only
    in a summary (SPEC §3 step 3, §7). A user's own message once scored core now always passes."""
    from relevance_memory.testing import FunctionScorer

    scorer = FunctionScorer(lambda item, goal: 5 if "lorem" in (item.text or "") else 2)
    memory = RelevanceMemoryManager(max_input_tokens=300, keep_recent=0, embeddings=False, scorer=scorer,
                                    fill_from_archive=fill)
    memory.add({"role": "user", "content": "Plan the Lisbon trip: hotels flights museums budget"})
    for n in range(10):
        memory.add({"role": "user", "content": f"hotel museum flight budget option {n} " * 3})
    memory.add({"role": "user", "content": "lorem ipsum"}, id="c")
    for n in range(10):
        memory.add({"role": "user", "content": f"hotel museum flight budget option {n + 10} " * 3})
    assert memory.build_context().record.decision_for("c").decision == "kept"
    for n in range(80):
        memory.add({"role": "user", "content": f"hotel museum flight budget museum choice {n} " * 3})
    built = memory.build_context()
    decision = built.record.decision_for("c")
    assert decision.decision == "kept" or any("only in a summary" in w for w in built.record.warnings)

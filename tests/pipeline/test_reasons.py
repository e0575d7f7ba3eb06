"""Issue 13 item 11: reasons say why — a message whose tier came from its chain partner says so,
and the offline score's reason reads as the sum it is (no unexplained "prior 2")."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from relevance_memory import RelevanceMemoryManager, load_transcript

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


@pytest.mark.parametrize("budget", [4000, 8000, 16000])
def test_a_tier_taken_from_a_chain_partner_is_explained(budget: int) -> None:
    memory = RelevanceMemoryManager(max_input_tokens=budget)
    memory.extend(load_transcript(FIXTURES / "django__django-15280.json").messages)
    record = memory.build_context().record
    by_chain: dict[str, list] = {}
    for d in record.messages:
        if d.score is not None and d.tier in ("core", "working", "archive"):
            by_chain.setdefault(d.chain_id, []).append(d)
    explained = 0
    for members in by_chain.values():
        best = max(m.score for m in members)
        for m in members:
            said = re.search(r"with its chain: (m\d+) in the same chain scored (\d)", m.reason)
            if m.score < best:
                assert said, f"{m.id} scored {m.score} but its chain scored {best}: {m.reason}"
                assert int(said.group(2)) == best
                explained += 1
            else:
                assert not said
    assert explained > 0


def test_offline_reasons_read_as_a_sum() -> None:
    memory = RelevanceMemoryManager(max_input_tokens=4000)
    memory.extend(load_transcript(FIXTURES / "django__django-15280.json").messages)
    record = memory.build_context().record
    for d in record.messages:
        if d.score_source is not None and d.score_source.value == "offline" and d.reason.startswith("base "):
            assert "prior" not in d.reason
            base = int(re.match(r"base (\d)", d.reason).group(1))  # type: ignore[union-attr]
            deltas = [int(x.replace("−", "-")) for x in re.findall(r"; ([+−]\d) ", d.reason)]
            total = base + sum(deltas)
            expected = max(1, min(5, total))
            assert d.score == expected, d.reason
            if deltas:
                assert f"= {expected}" in d.reason

"""Replay one SWE run step by step (SPEC §6): each (message, subtask) pair is scored once."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pytest

from relevance_memory import ContextOverflowError, OfflineScorer, RelevanceMemoryManager, check_context, load_transcript
from relevance_memory._models import TaskGoal, content_text
from relevance_memory.scoring._scorer import ScoreItem, ScoringContext, ScoringResult

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "django__django-15280.json"


class CountingScorer:
    name = "counting"
    model = "offline-v1"
    rubric_version = "offline-v1"

    def __init__(self) -> None:
        self.inner = OfflineScorer()
        self.pairs: Counter[tuple[str, str]] = Counter()
        self.tokens = 0

    def score(self, goal: TaskGoal, items: Sequence[ScoreItem], context: ScoringContext | None = None) -> ScoringResult:
        for item in items:
            self.pairs[(item.id, goal.effective_subtask)] += 1
            self.tokens += item.token_count
        return self.inner.score(goal, items, context)


@pytest.mark.parametrize("subtask_mode", ["fixed", "thought"])
def test_replay_scores_each_message_once_per_subtask(subtask_mode: str) -> None:
    messages = load_transcript(FIXTURE).messages
    scorer = CountingScorer()
    memory = RelevanceMemoryManager(scorer=scorer, max_input_tokens=12_000, keep_recent=3)
    subtask = "fix the bug"
    builds = 0
    hits = 0
    for message in messages:
        if message.get("role") == "assistant" and len(memory.store):
            memory.set_goal(subtask=subtask)
            try:
                built = memory.build_context()
            except ContextOverflowError:
                pass
            else:
                builds += 1
                hits += built.record.cache_hits
                assert check_context(built.messages) == []
                assert built.token_count <= 12_000
                ids = [d.id for d in built.record.messages if d.decision in ("kept", "recent")]
                ids += [i for s in built.record.summaries for i in s.covered_ids]
                assert len(ids) == len(set(ids))
        memory.add(message)
        if subtask_mode == "thought" and message.get("role") == "assistant":
            text = " ".join(content_text(message.get("content")).split())
            match = re.match(r"(.+?[.!?])(?:\s|$)", text)
            if match:
                subtask = match.group(1)[:200]
    assert builds > 50
    assert scorer.pairs, "the budget must force scoring"
    assert max(scorer.pairs.values()) == 1, [p for p, n in scorer.pairs.items() if n > 1][:5]
    if subtask_mode == "fixed":
        assert hits > sum(scorer.pairs.values())  # the cache answered most look-ups

"""Episode context (issue 11): sessions cut by silence on ingest, and a turn lifted by the
best match of its own session (the cluster hypothesis) — only as a weak lift, never
reordering a history that is one episode."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from test_embedding import tiny_embedder  # type: ignore[import-not-found]

from relevance_memory import ConfigError, RelevanceMemoryManager
from relevance_memory._models import TaskGoal
from relevance_memory._scoring import ScoreItem
from relevance_memory._semantic import SemanticFusion, SemanticScorer, episode_context
from relevance_memory._store import MessageStore
from relevance_memory._tokenizer import TiktokenCounter

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)


def test_a_silence_of_30_minutes_starts_a_new_episode() -> None:
    store = MessageStore(TiktokenCounter("cl100k_base"))
    stamps = [T0, T0 + timedelta(minutes=5), T0 + timedelta(minutes=36), T0 + timedelta(minutes=37), None,
              T0 + timedelta(days=3)]
    for n, stamp in enumerate(stamps):
        store.add({"role": "user" if n % 2 == 0 else "assistant", "content": f"turn {n}"}, timestamp=stamp)
    # a message without a timestamp takes its clock's time; with no clock it stays in the episode before it
    assert store.episodes == [0, 0, 1, 1, 1, 2]
    assert store.snapshot().episodes[-1] == 2


def test_messages_without_timestamps_are_one_episode() -> None:
    store = MessageStore(TiktokenCounter("cl100k_base"))
    for n in range(4):
        store.add({"role": "user" if n % 2 == 0 else "assistant", "content": f"turn {n}"})
    assert store.episodes == [0, 0, 0, 0]


@pytest.mark.parametrize("gap", [0, -5, float("nan"), "30", True])
def test_a_bad_episode_gap_is_refused(gap: object) -> None:
    with pytest.raises(ConfigError, match="episode_gap_s"):
        MessageStore(TiktokenCounter("cl100k_base"), episode_gap_s=gap)  # type: ignore[arg-type]


def test_the_manager_passes_its_episode_gap_to_the_store() -> None:
    manager = RelevanceMemoryManager(encoding="cl100k_base", episode_gap_s=60)
    manager.add({"role": "user", "content": "a"}, timestamp=T0)
    manager.add({"role": "assistant", "content": "b"}, timestamp=T0 + timedelta(minutes=2))
    assert manager.store.episodes == [0, 1]


def test_episode_context_adds_the_best_other_cosine_of_the_episode() -> None:
    cos = [0.5, 0.1, 0.3, 0.2]
    assert episode_context(cos, [0, 0, 1, 1], 0.5) == pytest.approx([0.55, 0.35, 0.4, 0.35])
    assert episode_context(cos, [0, 0, 0, 0], 0.5) == cos  # one episode: the cosine order stands
    assert episode_context(cos, [0, 0, 1, 1], 0.0) == cos
    assert episode_context([0.4, 0.2], [0, 1], 0.5) == [0.4, 0.2]  # alone in its episode: nothing to add


def _items(texts_episodes: list[tuple[str, int]]) -> list[ScoreItem]:
    return [ScoreItem(id=f"m{i}", role="user", msg_type="user_chat", source="user", text=t, content_hash=f"h{i}",
                      episode=e) for i, (t, e) in enumerate(texts_episodes)]


def test_a_turn_is_lifted_by_its_episode_and_the_reason_says_so() -> None:
    goal = TaskGoal(final="battery", source="explicit")
    # m1 shares no word and little meaning with the goal, but it is said in the episode of the
    # best match (m0); m3 says the same in another episode and stays unrelated
    items = _items([("power bank", 0), ("sunny", 0)] + [("weather weather", 1)] * 40 + [("sunny", 2)]
                   + [("sunny weather", 2)])
    plain = {s.id: s for s in SemanticScorer(SemanticFusion(min_cosine=0.3, episode_mix=0.0),
                                             embedder=tiny_embedder()).score(goal, items).scores}
    scorer = SemanticScorer(SemanticFusion(min_cosine=0.3, episode_mix=0.5), embedder=tiny_embedder())
    fused = {s.id: s for s in scorer.score(goal, items).scores}
    assert plain["m1"].score == 1 and fused["m1"].score == 3
    assert "from its episode" in fused["m1"].reason and fused["m1"].reason.endswith("= 3")
    assert fused["m0"].score == plain["m0"].score == 4  # the best match keeps its own lift
    last = f"m{len(items) - 2}"
    assert fused[last].score == plain[last].score
    assert "-e0.5" in scorer.model and "-e0.5" not in SemanticScorer(
        SemanticFusion(episode_mix=0.0), embedder=tiny_embedder()).model


def test_one_episode_scores_exactly_as_without_episode_context() -> None:
    goal = TaskGoal(final="battery", source="explicit")
    items = _items([("power bank", 0), ("phone sunny", 0), ("sunny weather", 0), ("weather weather", 0)] * 5)
    on = SemanticScorer(SemanticFusion(episode_mix=0.5), embedder=tiny_embedder()).score(goal, items).scores
    off = SemanticScorer(SemanticFusion(episode_mix=0.0), embedder=tiny_embedder()).score(goal, items).scores
    assert [(s.score, s.weight, s.reason) for s in on] == [(s.score, s.weight, s.reason) for s in off]

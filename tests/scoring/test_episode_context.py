"""Episode context (issue 11): sessions cut by silence on ingest, and a turn lifted by the
best match of its own session (the cluster hypothesis) — only as a weak lift, never
reordering a history that is one episode."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from test_embedding import tiny_embedder  # type: ignore[import-not-found]

from relevance_memory import ConfigError, RelevanceMemoryManager
from relevance_memory._models import TaskGoal
from relevance_memory._tokenizer import TiktokenCounter
from relevance_memory.scoring._scorer import ScoreItem
from relevance_memory.scoring._semantic import SemanticFusion, SemanticScorer, episode_context
from relevance_memory.store._snapshot import StoreSnapshot
from relevance_memory.store._store import MessageStore

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)


def test_a_silence_of_30_minutes_starts_a_new_episode() -> None:
    store = MessageStore(TiktokenCounter("cl100k_base"))
    stamps = [T0, T0 + timedelta(minutes=5), T0 + timedelta(minutes=36), T0 + timedelta(minutes=37), None,
              T0 + timedelta(days=3)]
    for n, stamp in enumerate(stamps):
        store.add({"role": "user" if n % 2 == 0 else "assistant", "content": f"turn {n}"}, timestamp=stamp)
    # a message without a timestamp takes its clock's time; with no clock it stays in the episode before it
    assert store.episodes == [0, 0, 1, 1, 1, 2]
    assert StoreSnapshot(store).episodes[-1] == 2


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


def test_rank_mode_ranks_by_the_context_cosine() -> None:
    goal = TaskGoal(final="battery", source="explicit")
    items = _items([("power bank", 0), ("sunny", 0)] + [("weather weather", 1)] * 40 + [("sunny", 2)])
    rank = {s.id: s for s in SemanticScorer(SemanticFusion(min_cosine=0.3, episode_mode="rank"),
                                            embedder=tiny_embedder()).score(goal, items).scores}
    # ranked by context, m1 (0.04 + 0.5 × 0.97) is second: top 2 %, lifted to 3; its weight
    # is the context cosine too, so it orders above the same words said in another episode
    assert rank["m1"].score == 3 and "0.04 to the goal, +0.49 from its episode" in rank["m1"].reason
    assert rank["m1"].weight == pytest.approx(0.528, abs=0.002)
    assert rank["m1"].weight > rank[f"m{len(items) - 1}"].weight


def test_only_what_people_say_is_lifted_and_an_assistant_is_not_ranked_by_meaning() -> None:
    goal = TaskGoal(final="battery", source="explicit")
    items = [ScoreItem(id=f"m{i}", role=role, msg_type=kind, source=role, text="power bank", content_hash=f"h{i}")
             for i, (role, kind) in enumerate([("user", "user_chat"), ("assistant", "assistant_reasoning")])]
    scores = {s.id: s for s in SemanticScorer(embedder=tiny_embedder()).score(goal, items).scores}
    assert scores["m0"].score == 4 and "semantic match" in scores["m0"].reason
    assert scores["m0"].weight > 0.9  # the cosine orders people's turns within a score
    # the assistant's reply keeps its lexical score and weight: it shares no term with the goal
    assert scores["m1"].score == 1 and "semantic" not in scores["m1"].reason
    assert scores["m1"].weight == 0.0
    # as before the ablation: the cosine in every type's weight, still no lift
    before = SemanticScorer(SemanticFusion(unranked_types=frozenset()), embedder=tiny_embedder()).score(goal, items).scores
    assert before[1].score == 1 and before[1].weight > 0.9


def test_locomo_speakers_are_both_people() -> None:
    import json
    from pathlib import Path

    from relevance_memory.evaluation import load_locomo

    sample = [{"sample_id": "c1", "conversation": {
        "speaker_a": "Ann", "speaker_b": "Bob", "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [{"speaker": "Ann", "dia_id": "D1:1", "text": "hi"}, {"speaker": "Bob", "dia_id": "D1:2",
                                                                           "text": "hello"}]},
        "qa": []}]
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "locomo.json"
        path.write_text(json.dumps(sample), encoding="utf-8")
        turns = load_locomo(path).conversations[0].turns
    assert [(t.role, t.msg_type) for t in turns] == [("user", "user_chat"), ("assistant", "user_chat")]

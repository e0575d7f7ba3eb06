"""``fresh()`` — every resync of the managed client — keeps what the memory learnt (issue 9)."""

from __future__ import annotations

from pathlib import Path

import pytest

from relevance_memory import RelevanceMemoryManager, load_transcript

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "django__django-15280.json"


def _learnt(n: int = 120) -> tuple[RelevanceMemoryManager, list[dict]]:
    """A memory that built at three points of the django run, under two subtasks."""
    history = load_transcript(FIXTURE).messages[:n]
    memory = RelevanceMemoryManager(max_input_tokens=4000)
    for stop, subtask in ((60, ""), (90, "reproduce the bug"), (n, "write the fix")):
        memory.extend(history[len(memory.messages) : stop])
        memory.set_goal(subtask=subtask)
        memory.build_context()
    return memory, history


def test_resync_keeps_strengths_scores_and_caches_of_the_unchanged_messages() -> None:
    memory, history = _learnt(120)
    memory.extend(load_transcript(FIXTURE).messages[120:125])  # recorded, not built on yet
    # a short turn, no request of its own: the goal (and with it every score's cache key) stays
    # (a new request would re-form the goal from the user's requests and re-score, issue 21)
    edited = [*history[:120], {"role": "user", "content": "Ok, go on."}]
    other = memory.fresh(edited)
    assert other.summary_cache is memory.summary_cache
    assert other.score_cache is memory.score_cache
    before = memory.pheromone
    # every message the old memory built on is unchanged: its memory carries over whole
    other.pheromone.observe(other.messages[:120])
    assert other.pheromone.tick == before.tick
    for message in other.messages[:120]:
        assert other.pheromone.latest_score(message.id) == before.latest_score(message.id), message.id
        assert other.pheromone.strength(message.id) == pytest.approx(before.strength(message.id)), message.id
    # the replaced message starts afresh: nothing deposited for it
    assert other.pheromone.latest_score(other.messages[120].id) is None
    # the first build after the resync re-scores no message the old memory scored (the cache is kept):
    # its misses are messages the old memory never scored: its builds after the first were appends
    # (issue 10), which score nothing, so only the task statement (kept verbatim in the stable
    # head, never scored) and the steps appended since the last compaction are scored here
    # for the first time
    record = other.build_context().record
    never_scored = [
        d for d in record.messages if d.score_source is not None and d.score_source.value == "offline"
    ]
    assert record.cache_hits > 100 and record.cache_misses == len(never_scored) <= 3
    assert "m1" in {d.id for d in never_scored}
    assert all(before.latest_score(d.id) is None for d in never_scored)


def test_resync_after_an_early_edit_keeps_only_what_precedes_it() -> None:
    memory, history = _learnt()
    edited = [dict(m) for m in history]
    edited[5] = {**edited[5], "content": "an edited tool output"}
    other = memory.fresh(edited)
    assert any(memory.pheromone.latest_score(m.id) is not None for m in memory.messages[5:])
    other.pheromone.observe(other.messages[:5])
    assert all(other.pheromone.latest_score(m.id) is None for m in other.messages[5:])
    assert [other.pheromone.latest_score(m.id) for m in other.messages[:5]] == [
        memory.pheromone.latest_score(m.id) for m in memory.messages[:5]
    ]


def test_a_second_resync_replays_the_first_ones_memory() -> None:
    memory, history = _learnt()
    first = memory.fresh(history[:110])
    second = first.fresh(history[:105])
    second.pheromone.observe(second.messages)
    assert [second.pheromone.latest_score(m.id) for m in second.messages] == [
        memory.pheromone.latest_score(m.id) for m in memory.messages[:105]
    ]


def test_fresh_without_pheromone_still_shares_the_caches() -> None:
    memory = RelevanceMemoryManager(max_input_tokens=3000, pheromone={"enabled": False})
    memory.extend(load_transcript(FIXTURE).messages[:40])
    memory.build_context()
    other = memory.fresh(load_transcript(FIXTURE).messages[:40])
    assert other.summary_cache is memory.summary_cache
    assert len(other.pheromone) == 0

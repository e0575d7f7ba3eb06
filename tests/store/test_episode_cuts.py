"""Episode cuts (issue 11) under the timestamps users actually give: some messages stamped by
the caller and the rest by the manager's clock, naive and aware datetimes mixed, a restarted
agent replaying its journal, and a resync (``fresh``)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from relevance_memory import ConfigError, RelevanceMemoryManager
from relevance_memory.board import InMemoryBoard

T0 = datetime(2023, 5, 20, 10, 0, tzinfo=timezone.utc)


class Clock:
    """A settable clock (aware UTC), 2026, far from the caller's 2023 stamps."""

    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, 9, 0, tzinfo=timezone.utc)

    def __call__(self) -> datetime:
        return self.now


def test_replies_stamped_by_the_clock_stay_in_the_episode_of_a_stamped_history() -> None:
    # an imported chat: the user's turns carry their own (2023) times, the replies none, so the
    # manager's clock stamps them "now" — that is not three years of silence twice per turn
    memory = RelevanceMemoryManager(encoding="cl100k_base", clock=Clock())
    memory.add({"role": "system", "content": "You are a helpful assistant."})
    memory.add({"role": "user", "content": "I bought a Sony A7R IV"}, timestamp=T0)
    memory.add({"role": "assistant", "content": "Nice camera."})
    memory.add({"role": "user", "content": "and a 24-70 lens"}, timestamp=T0 + timedelta(minutes=1))
    memory.add({"role": "assistant", "content": "Good choice."})
    memory.add({"role": "user", "content": "what about a flash?"}, timestamp=T0 + timedelta(days=2))
    memory.add({"role": "assistant", "content": "Godox."})
    assert memory.store.episodes == [0, 0, 0, 0, 0, 1, 1]


def test_a_live_agent_without_timestamps_is_cut_by_its_clock() -> None:
    clock = Clock()
    memory = RelevanceMemoryManager(encoding="cl100k_base", clock=clock)
    for minutes, role in ((0, "user"), (5, "assistant"), (125, "user"), (126, "assistant")):
        clock.now = datetime(2026, 1, 1, 9, 0, tzinfo=timezone.utc) + timedelta(minutes=minutes)
        memory.add({"role": role, "content": f"at {minutes}"})
    assert memory.store.episodes == [0, 0, 1, 1]


def test_naive_timestamps_are_utc_next_to_aware_ones() -> None:
    # the evaluation loaders and the LLM transport read a naive datetime as UTC; so do episodes
    memory = RelevanceMemoryManager(encoding="cl100k_base", clock=Clock())
    naive = T0.replace(tzinfo=None)
    stamps = [naive, T0 + timedelta(minutes=1), naive + timedelta(hours=2), T0 + timedelta(hours=2, minutes=1)]
    for n, stamp in enumerate(stamps):
        memory.add({"role": "user" if n % 2 == 0 else "assistant", "content": f"turn {n}"}, timestamp=stamp)
    assert memory.store.episodes == [0, 0, 1, 1]


def test_a_restarted_agent_keeps_its_messages_times_and_episodes() -> None:
    clock, board = Clock(), InMemoryBoard()
    memory = RelevanceMemoryManager(encoding="cl100k_base", board=board, agent="coder", clock=clock)
    for minutes, role in ((0, "user"), (5, "assistant"), (125, "user"), (126, "assistant")):
        clock.now = datetime(2026, 1, 1, 9, 0, tzinfo=timezone.utc) + timedelta(minutes=minutes)
        memory.add({"role": role, "content": f"at {minutes}"})
    memory.add({"role": "user", "content": "from the log"}, timestamp=T0)
    clock.now += timedelta(hours=5)
    resumed = RelevanceMemoryManager(encoding="cl100k_base", board=board, agent="coder", clock=clock)
    assert [m.timestamp for m in resumed.store.messages] == [m.timestamp for m in memory.store.messages]
    assert resumed.store.episodes == memory.store.episodes == [0, 0, 1, 1, 1]


def test_a_resync_keeps_the_times_of_the_messages_that_did_not_change() -> None:
    clock = Clock()
    memory = RelevanceMemoryManager(encoding="cl100k_base", clock=clock)
    history = [{"role": "user", "content": "fix the login bug"}, {"role": "assistant", "content": "looking"},
               {"role": "user", "content": "also the signup page"}]
    for minutes, message in zip((0, 5, 125), history, strict=True):
        clock.now = datetime(2026, 1, 1, 9, 0, tzinfo=timezone.utc) + timedelta(minutes=minutes)
        memory.add(message)
    clock.now += timedelta(minutes=1)
    edited = [*history[:2], {"role": "user", "content": "also the signup page, please"}]
    again = memory.fresh(edited)
    assert [m.timestamp for m in again.store.messages[:2]] == [m.timestamp for m in memory.store.messages[:2]]
    assert again.store.messages[2].timestamp == clock.now  # the edited one is new
    assert again.store.episodes == [0, 0, 1]


@pytest.mark.parametrize("gap", [True, "30"])
def test_the_manager_refuses_a_gap_that_is_not_a_number(gap: object) -> None:
    with pytest.raises(ConfigError, match="episode_gap_s"):
        RelevanceMemoryManager(encoding="cl100k_base", episode_gap_s=gap)  # type: ignore[arg-type]

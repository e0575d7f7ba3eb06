"""Issue 22 item 7: a loop that passes its whole, growing history each step stores each message
once — ``sync_history`` stores the new suffix, ``extend`` refuses to duplicate the history."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest

from relevance_memory import HistoryDivergedError, RelevanceMemoryManager
from relevance_memory.clients._session import MemorySession
from relevance_memory.store._history import HistoryTracker

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "django__django-15280.json"


def _run(n: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = json.loads(FIXTURE.read_text(encoding="utf-8"))["messages"]
    return messages[:n]


class _Watched(dict):  # type: ignore[type-arg]
    """A message dict that counts how often it is compared."""

    compared = 0

    def __eq__(self, other: object) -> bool:
        _Watched.compared += 1
        return dict.__eq__(self, other)

    __hash__ = None  # type: ignore[assignment]


def test_sync_history_stores_each_message_once_as_the_loop_grows() -> None:
    run = _run(40)
    memory = RelevanceMemoryManager(max_input_tokens=8000, keep_recent=4)
    history: list[dict[str, Any]] = []
    for step in range(0, 40, 6):
        history += run[step : step + 6]
        added = memory.sync_history(history)
        assert [m.raw for m in added] == run[step : step + 6]
        built = memory.build_context()
        assert built.messages[0] == run[0] and sum(m == run[0] for m in built.messages) == 1
    assert [m.raw for m in memory.messages] == run
    assert memory.sync_history(history) == []  # nothing new: nothing stored


def test_sync_history_reads_only_what_it_has_not_matched() -> None:
    """Objects matched on an earlier step are recognised by identity, never compared again."""
    memory = RelevanceMemoryManager(max_input_tokens=8000)
    history: list[Any] = [_Watched(m) for m in _run(10)]
    memory.sync_history(history[:6])
    _Watched.compared = 0
    memory.sync_history(history)
    memory.sync_history(history)
    assert _Watched.compared == 0 and len(memory.messages) == 10
    # a reply the memory recorded itself is matched by value once, then by identity
    memory.add({"role": "assistant", "content": "done"})
    history.append(_Watched({"role": "assistant", "content": "done"}))
    memory.sync_history(history)
    once = _Watched.compared
    assert once >= 1 and len(memory.messages) == 11
    memory.sync_history(history)
    assert _Watched.compared == once


@pytest.mark.parametrize(
    ("edit", "index", "fragment"),
    [
        (lambda h: [h[0], {"role": "user", "content": "another task"}, *h[2:], *_run(8)[6:]], 1, "message 1 differs"),
        (lambda h: h[:4], 4, r"it has 4 message\(s\) but the memory already holds 6"),
        (lambda h: [h[1], h[0], *h[2:]], 0, "message 0 differs"),
    ],
)
def test_sync_history_refuses_a_diverged_list_and_stores_nothing(edit: Any, index: int, fragment: str) -> None:
    memory = RelevanceMemoryManager(max_input_tokens=8000)
    history = _run(6)
    memory.sync_history(history)
    with pytest.raises(HistoryDivergedError, match=fragment) as info:
        memory.sync_history(edit(history))
    assert info.value.index == index and len(memory.messages) == 6
    assert info.value.expected == history[index]


def test_a_new_object_equal_to_the_stored_message_is_matched_and_an_sdk_reply_too() -> None:
    from openai.types.chat import ChatCompletionMessage

    memory = RelevanceMemoryManager(max_input_tokens=8000)
    history = _run(2)
    memory.sync_history(history)
    memory.add({"role": "assistant", "content": "On it."})
    copies = [dict(m) for m in history]  # the caller rebuilt its list: equal, not identical
    reply = ChatCompletionMessage(role="assistant", content="On it.")
    added = memory.sync_history([*copies, reply, {"role": "user", "content": "go on"}])
    assert [m.raw for m in added] == [{"role": "user", "content": "go on"}]


def test_extending_with_the_whole_history_again_stores_only_the_new_messages_and_warns() -> None:
    run = _run(12)
    memory = RelevanceMemoryManager(max_input_tokens=8000)
    memory.extend(run[:8])
    with pytest.warns(RuntimeWarning, match=r"already holds, at the same positions: only the 4 after them"):
        added = memory.extend(run)
    assert [m.raw for m in added] == run[8:] and [m.raw for m in memory.messages] == run
    built = memory.build_context()
    assert sum(m == run[0] for m in built.messages) == 1 and sum(m == run[1] for m in built.messages) == 1


def test_a_repeated_system_prompt_alone_is_not_stored_twice() -> None:
    memory = RelevanceMemoryManager(max_input_tokens=8000)
    system = {"role": "system", "content": "Be brief."}
    memory.add(system)
    with pytest.warns(RuntimeWarning, match="already holds"):
        memory.extend([system, {"role": "user", "content": "hi"}])
    assert [m.role for m in memory.messages] == ["system", "user"]


def test_extending_with_an_edited_copy_of_the_history_raises_and_stores_nothing() -> None:
    run = _run(8)
    memory = RelevanceMemoryManager(max_input_tokens=8000)
    memory.extend(run)
    with pytest.raises(HistoryDivergedError, match="copy of the first 2 stored message") as info:
        memory.extend([run[0], run[1], {"role": "user", "content": "a different task"}])
    assert info.value.index == 2 and len(memory.messages) == 8


def test_ordinary_extends_are_untouched() -> None:
    """A user saying the same thing twice, new messages after old ones: stored as given, no warning."""
    memory = RelevanceMemoryManager(max_input_tokens=8000)
    hello = {"role": "user", "content": "hello"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        memory.extend([hello])
        memory.extend([hello])
        memory.extend([{"role": "assistant", "content": "hi"}, {"role": "user", "content": "hello"}])
    assert len(memory.messages) == 4


def test_the_managed_session_syncs_by_identity_and_sees_a_replaced_message() -> None:
    memory = RelevanceMemoryManager(max_input_tokens=8000)
    session = MemorySession(memory, on_build=None, on_divergence="raise", overrides={})
    history: list[Any] = [_Watched(m) for m in _run(6)]
    session.sync(history, None)
    _Watched.compared = 0
    history.append({"role": "assistant", "content": "ok"})
    session.sync(history, None)
    assert _Watched.compared == 0 and len(memory.messages) == 7
    history[3] = {"role": "assistant", "content": "an edited step"}  # a new object: it is read
    with pytest.raises(HistoryDivergedError) as info:
        session.sync(history, None)
    assert info.value.index == 3


def test_the_tracker_forgets_a_replaced_memory() -> None:
    tracker = HistoryTracker()
    first = RelevanceMemoryManager(max_input_tokens=8000)
    history = _run(6)
    first.extend(history)
    assert tracker.diverged_at(first.messages, history) is None
    tracker.matched(history, 6)
    second = RelevanceMemoryManager(max_input_tokens=8000)
    second.extend(history[:3])
    assert tracker.diverged_at(second.messages, history) is None  # shorter store: compared afresh

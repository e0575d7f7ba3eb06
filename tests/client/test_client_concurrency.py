"""Issue 13 item 1 for the managed client: concurrent requests on one session (threads and asyncio tasks)."""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace
from typing import Any

import pytest

from relevance_memory import manage

# requests of one conversation whose histories differ resync (by design) and say so
pytestmark = pytest.mark.filterwarnings("ignore:history diverged from the memory:RuntimeWarning")


def _reply(text: str) -> Any:
    message = SimpleNamespace(role="assistant", content=text, tool_calls=None, refusal=None, name=None, tool_call_id=None)
    return SimpleNamespace(choices=[SimpleNamespace(message=message)], usage=None)


class _AsyncCompletions:
    def __init__(self) -> None:
        self.requests: list[list[dict[str, Any]]] = []

    async def create(self, *, messages: list[dict[str, Any]], **kwargs: Any) -> Any:
        self.requests.append(messages)
        await asyncio.sleep(0)  # let the other tasks run mid-request
        return _reply(f"answer {len(self.requests)}")


class _SyncCompletions:
    def __init__(self) -> None:
        self.requests: list[list[dict[str, Any]]] = []
        self._lock = threading.Lock()

    def create(self, *, messages: list[dict[str, Any]], **kwargs: Any) -> Any:
        with self._lock:
            self.requests.append(messages)
            n = len(self.requests)
        return _reply(f"answer {n}")


def _fake(completions: Any, *, is_async: bool) -> Any:
    return SimpleNamespace(chat=SimpleNamespace(completions=completions))  # manage() reads create()


def _history(turns: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": "You are a travel agent."},
                                 {"role": "user", "content": "Book JFK→SEA on 2026-05-20; never pay more than $400."}]
    for n in range(turns):
        out.append({"role": "assistant", "content": f"Option {n}: flight HAT{100 + n} for ${300 + n}."})
        out.append({"role": "user", "content": f"What about option {n + 1}?"})
    return out


def _consistent(memory: Any) -> None:
    ids = [m.id for m in memory.messages]
    assert len(ids) == len(set(ids))
    for position, message in enumerate(memory.messages):
        assert message.index == position and memory.store.get(message.id) is message


@pytest.mark.parametrize("tasks", [8, 32])
async def test_concurrent_async_requests_on_one_session(tasks: int) -> None:
    completions = _AsyncCompletions()
    client = manage(_fake(completions, is_async=True), model="gpt-4o", max_input_tokens=3000)
    history = _history(6)

    async def request(n: int) -> Any:
        extra = [{"role": "user", "content": f"request {n}: and the hotel?"}]
        return await client.chat.completions.create(model="gpt-4o", messages=[*history, *extra])

    replies = await asyncio.gather(*(request(n) for n in range(tasks)))
    assert len(replies) == tasks and len(completions.requests) == tasks
    _consistent(client.memory)
    # every request was built from one coherent history: the prefix plus its own new message
    for sent in completions.requests:
        assert sent[0] == history[0]
        assert sum(1 for m in sent if str(m.get("content", "")).startswith("request ")) == 1


@pytest.mark.parametrize("threads", [4, 12])
def test_concurrent_threaded_requests_on_one_session(threads: int) -> None:
    completions = _SyncCompletions()
    client = manage(_fake(completions, is_async=False), model="gpt-4o", max_input_tokens=3000)
    history = _history(5)
    errors: list[BaseException] = []

    def request(n: int) -> None:
        try:
            for k in range(5):
                client.chat.completions.create(model="gpt-4o", messages=[*history, {"role": "user", "content": f"t{n} k{k}"}])
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    workers = [threading.Thread(target=request, args=(n,)) for n in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert errors == []
    assert len(completions.requests) == threads * 5
    _consistent(client.memory)


@pytest.mark.parametrize("threads", [6, 16])
def test_the_same_history_sent_from_many_threads_is_recorded_once(threads: int) -> None:
    import sys

    completions = _SyncCompletions()
    client = manage(_fake(completions, is_async=False), model="gpt-4o", max_input_tokens=3000)
    history = _history(0)
    client.chat.completions.create(model="gpt-4o", messages=history)  # the reply is "answer 1"
    new = [*history, {"role": "assistant", "content": "answer 1"}, {"role": "user", "content": "one more question"}]
    start = threading.Barrier(threads)
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        def request() -> None:
            start.wait()
            client.chat.completions.create(model="gpt-4o", messages=new)

        workers = [threading.Thread(target=request) for _ in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    finally:
        sys.setswitchinterval(old)
    stored = [m.to_openai() for m in client.memory.messages]
    assert stored[: len(new)] == new  # the history once, in order, then the replies
    assert sum(1 for m in stored if m.get("content") == "one more question") == 1
    _consistent(client.memory)

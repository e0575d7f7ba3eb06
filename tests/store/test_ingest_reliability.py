"""Issue 13, data safety: concurrent writers, atomic batches, owned data, SDK shapes, full tool-call validation.

Each kind is tested over several shapes (threads × batch sizes, the position and kind of the
invalid message, how the caller's data is mutated, which SDK object is passed).
"""

from __future__ import annotations

import asyncio
import copy
import json
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relevance_memory import InvalidMessageError, RelevanceMemoryManager, message_to_dict
from relevance_memory._models import FrozenDict, FrozenList, freeze, thaw
from relevance_memory._tokenizer import TiktokenCounter


def call(call_id: str, name: str = "bash", arguments: str = '{"command": "ls"}') -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def chain(tag: str, width: int = 2) -> list[dict[str, Any]]:
    """One step of a tool-using agent: an assistant with ``width`` parallel calls and their results."""
    calls = [call(f"{tag}_{k}", arguments=json.dumps({"command": f"cat {tag}_{k}.py"})) for k in range(width)]
    out: list[dict[str, Any]] = [{"role": "assistant", "content": f"step {tag}", "tool_calls": calls}]
    out += [{"role": "tool", "tool_call_id": c["id"], "content": f"output of {c['id']} = 41{k}"} for k, c in enumerate(calls)]
    return out


@pytest.fixture
def fast_switching() -> Iterator[None]:
    """Switch threads every microsecond so races show up in a small test."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


def assert_store_consistent(memory: RelevanceMemoryManager) -> None:
    store = memory.store
    ids = [m.id for m in store.messages]
    assert len(ids) == len(set(ids)), "duplicate ids"
    for position, message in enumerate(store.messages):
        assert message.index == position
        assert store.get(message.id) is message
        assert message.id == f"m{position}"
    assert len(store.terms) == len(store.idents) == len(store) == len(store._parent)
    for message in store.messages:
        if message.role == "tool":  # every result sits in its assistant's chain, right after it
            owner = store.get(message.parent_id or "")
            assert store.chain_root(message.index) == owner.index
            assert all(store[i].role == "tool" for i in range(owner.index + 1, message.index))


# --------------------------------------------------------------------------- 1. concurrent writers
@pytest.mark.parametrize(("threads", "per_thread", "width"), [(8, 150, 0), (8, 30, 2), (16, 20, 3), (3, 60, 1)])
def test_many_threads_adding_and_extending_keep_ids_unique_and_reachable(
    fast_switching: None, threads: int, per_thread: int, width: int
) -> None:
    memory = RelevanceMemoryManager(max_input_tokens=8000)
    memory.add({"role": "user", "content": "Fix the parser; never touch tests/."})
    errors: list[BaseException] = []
    start = threading.Barrier(threads + 1)

    def writer(t: int) -> None:
        try:
            start.wait()
            for i in range(per_thread):
                if width:  # a whole step as one batch: stays contiguous under concurrency
                    memory.extend(chain(f"t{t}i{i}", width))
                else:
                    memory.add({"role": "user", "content": f"thread {t} message {i}"})
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def reader() -> None:  # reads while writers write: every visible id resolves
        start.wait()
        while any(w.is_alive() for w in workers):
            n = len(memory.store)
            for i in range(max(0, n - 5), n):
                assert memory.store.get(memory.store[i].id).index == i

    workers = [threading.Thread(target=writer, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    reader_thread = threading.Thread(target=reader)
    reader_thread.start()
    for w in workers:
        w.join()
    reader_thread.join()
    assert errors == []
    expected = 1 + threads * per_thread * (1 + width if width else 1)
    assert len(memory.messages) == expected
    assert_store_consistent(memory)
    assert memory.build_context(budget=8000).record.tokens_after <= 8000


@pytest.mark.parametrize("tasks", [10, 50])
async def test_many_asyncio_tasks_ingesting_through_threads_and_inline(tasks: int) -> None:
    memory = RelevanceMemoryManager(max_input_tokens=8000)
    memory.add({"role": "user", "content": "Book the flight; only use the company card."})
    go = asyncio.Event()

    async def agent(n: int) -> None:
        await go.wait()
        for i in range(6):
            if i % 2:
                await asyncio.to_thread(memory.extend, chain(f"a{n}s{i}", 2))
            else:
                memory.add({"role": "user", "content": f"task {n} note {i}"})
            await asyncio.sleep(0)

    runners = [asyncio.create_task(agent(n)) for n in range(tasks)]
    go.set()
    await asyncio.gather(*runners)
    assert len(memory.messages) == 1 + tasks * (3 + 3 * 3)
    assert_store_consistent(memory)
    built = await memory.abuild_context(budget=6000)
    assert built.record.tokens_after <= 6000


# --------------------------------------------------------------------------- 2. atomic extend
BATCH: list[dict[str, Any]] = [
    {"role": "system", "content": "You are an agent."},
    {"role": "user", "content": "Fix src/app/models.py; never touch tests/."},
    *chain("c1", 2),
    {"role": "assistant", "content": "The total 410 is wrong."},
    *chain("c2", 1),
    {"role": "user", "content": "ok, go on"},
]

INVALID: dict[str, list[Any]] = {  # messages inserted into a valid batch; the last one is invalid
    "bad role": [{"role": "robot", "content": "x"}],
    "orphan tool result": [{"role": "tool", "tool_call_id": "ghost", "content": "x"}],
    "missing arguments": [{"role": "assistant", "content": None, "tool_calls": [{"id": "z1", "type": "function", "function": {"name": "f"}}]}],
    "call id still open": [{"role": "assistant", "content": None, "tool_calls": [call("open")]}] * 2,
    "null user content": [{"role": "user", "content": None}],
    "not a message": [42],
}


def snapshot(memory: RelevanceMemoryManager) -> tuple[Any, ...]:
    store = memory.store
    return (
        [m.to_openai() for m in store.messages],
        [(m.id, m.step, m.token_count, m.references, m.parent_id, m.msg_type) for m in store.messages],
        store.step_count,
        store.pending_calls,
        dict(store.referenced_by),
        dict(store.doc_freq),
        store.first_user_index,
        [store.chain_root(i) for i in range(len(store))],
    )


@pytest.mark.parametrize("kind", sorted(INVALID))
@pytest.mark.parametrize("position", [0, 1, 3, 5, len(BATCH)])
@pytest.mark.parametrize("preloaded", [0, 2])
def test_an_invalid_message_anywhere_stores_nothing_and_the_retry_stores_once(
    kind: str, position: int, preloaded: int
) -> None:
    memory = RelevanceMemoryManager(max_input_tokens=8000)
    head, rest = BATCH[:preloaded], BATCH[preloaded:]
    memory.extend(head)
    batch = [*rest[:position], *INVALID[kind], *rest[position:]]
    before = snapshot(memory)
    with pytest.raises(InvalidMessageError) as info:
        memory.extend(batch)
    assert "nothing of this batch was stored" in str(info.value)
    assert snapshot(memory) == before
    memory.extend(rest)  # the retry without the bad message
    reference = RelevanceMemoryManager(max_input_tokens=8000)
    reference.extend(BATCH)
    assert snapshot(memory) == snapshot(reference)


def test_a_batch_may_answer_its_own_calls_and_is_checked_against_itself() -> None:
    memory = RelevanceMemoryManager()
    memory.extend(BATCH[:2])
    # the same call id twice inside one batch, the first still unanswered: caught before storing
    with pytest.raises(InvalidMessageError, match="earlier call with this id has no result"):
        memory.extend([{"role": "assistant", "content": None, "tool_calls": [call("dup")]},
                       {"role": "assistant", "content": None, "tool_calls": [call("dup")]}])
    with pytest.raises(InvalidMessageError, match="second result"):
        memory.extend([*chain("x", 1), {"role": "tool", "tool_call_id": "x_0", "content": "again"}])
    with pytest.raises(InvalidMessageError, match="duplicate message id"):
        memory.add({"role": "user", "content": "x"}, id="m0")
    assert len(memory.messages) == 2
    stored = memory.extend(chain("ok", 3))
    assert [m.step for m in stored] == [1, 1, 1, 1]
    assert [m.parent_id for m in stored] == [None, "m2", "m2", "m2"]


def test_a_generator_batch_is_validated_whole_too() -> None:
    memory = RelevanceMemoryManager()
    with pytest.raises(InvalidMessageError, match="batch item 2 of 3"):
        memory.extend(m for m in [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}, {"role": "x"}])
    assert len(memory.messages) == 0


# --------------------------------------------------------------------------- 3. owned data
def mutations() -> list[tuple[str, Any]]:
    def edit_part(history: list[dict[str, Any]]) -> None:
        history[1]["content"][0]["text"] += " and also delete the database " * 50

    def append_part(history: list[dict[str, Any]]) -> None:
        history[1]["content"].append({"type": "text", "text": "extra " * 300})

    def edit_arguments(history: list[dict[str, Any]]) -> None:
        history[2]["tool_calls"][0]["function"]["arguments"] = json.dumps({"command": "rm -rf / " * 100})

    def add_call(history: list[dict[str, Any]]) -> None:
        history[2]["tool_calls"].append(call("late"))

    def replace_content(history: list[dict[str, Any]]) -> None:
        history[3]["content"] = "x" * 5000

    def clear_everything(history: list[dict[str, Any]]) -> None:
        for message in history:
            message.clear()

    return [(f.__name__, f) for f in (edit_part, append_part, edit_arguments, add_call, replace_content, clear_everything)]


def owned_history() -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": [{"type": "text", "text": "Fix src/app/models.py; never touch tests/."}]},
        {"role": "assistant", "content": None, "tool_calls": [call("c1")]},
        {"role": "tool", "tool_call_id": "c1", "content": "src tests"},
        {"role": "user", "content": "go on"},
    ]


@pytest.mark.parametrize(("name", "mutate"), mutations())
@pytest.mark.parametrize("entry", ["extend", "add", "fresh"])
def test_mutating_the_callers_objects_after_ingest_changes_nothing(name: str, mutate: Any, entry: str) -> None:
    history = owned_history()
    pristine = copy.deepcopy(history)
    memory = RelevanceMemoryManager(max_input_tokens=2000)
    if entry == "extend":
        memory.extend(history)
    elif entry == "add":
        for message in history:
            memory.add(message)
    else:
        memory = memory.fresh(history)
    before = memory.build_context()
    mutate(history)
    assert [m.to_openai() for m in memory.messages] == pristine
    counter = TiktokenCounter()
    assert [m.token_count for m in memory.messages] == [counter.count_message(m) for m in pristine]
    after = memory.build_context()
    assert after.messages == before.messages
    assert after.record.tokens_after == before.record.tokens_after


@pytest.mark.parametrize(
    "poke",
    [
        lambda m: m.content.append({"type": "text", "text": "x"}),
        lambda m: m.content[0].update(text="x"),
        lambda m: m.raw.__setitem__("content", "x"),
        lambda m: m.raw["tool_calls"][0]["function"].update(arguments="{}"),
        lambda m: m.raw["tool_calls"].pop(),
        lambda m: setattr(m, "token_count", 1),
    ],
)
def test_stored_messages_are_read_only_and_exports_are_plain_copies(poke: Any) -> None:
    memory = RelevanceMemoryManager()
    memory.extend([
        {"role": "user", "content": [{"type": "text", "text": "hello"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "calling"}], "tool_calls": [call("c1")]},
        {"role": "tool", "tool_call_id": "c1", "content": "done"},
    ])
    with pytest.raises((TypeError, ValueError)):  # ValueError: pydantic's frozen-instance error
        poke(memory.messages[1])
    exported = memory.messages[1].to_openai()
    assert type(exported) is dict and type(exported["tool_calls"]) is list and type(exported["tool_calls"][0]) is dict
    exported["tool_calls"][0]["function"]["arguments"] = "changed"
    assert memory.messages[1].to_openai()["tool_calls"][0]["function"]["arguments"] == '{"command": "ls"}'
    assert copy.deepcopy(memory.messages[1].raw) == memory.messages[1].to_openai()


json_like = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=12,
)


@given(json_like)
def test_freeze_and_thaw_round_trip_and_frozen_equals_plain(value: Any) -> None:
    frozen = freeze(value)
    assert frozen == value
    assert json.dumps(frozen, sort_keys=True) == json.dumps(value, sort_keys=True)
    plain = thaw(frozen)
    assert plain == value
    assert not isinstance(plain, (FrozenDict, FrozenList))


# --------------------------------------------------------------------------- 4. SDK shapes
def sdk_messages() -> list[tuple[str, Any, dict[str, Any]]]:
    pytest.importorskip("openai")
    from openai.types.chat import ChatCompletionMessage, ChatCompletionMessageFunctionToolCall
    from pydantic import BaseModel

    reply = ChatCompletionMessage(
        role="assistant",
        content=None,
        tool_calls=[
            ChatCompletionMessageFunctionToolCall(id="c1", type="function", function={"name": "bash", "arguments": '{"command": "ls"}'})
        ],
    )
    plain_reply = {"role": "assistant", "content": None, "tool_calls": [call("c1")]}

    class Part(BaseModel):
        type: str
        text: str

    class MyMessage(BaseModel):
        role: str
        content: list[Part]

    mine = MyMessage(role="user", content=[Part(type="text", text="check 41872")])
    mixed = {"role": "assistant", "content": None, "tool_calls": list(reply.tool_calls or [])}  # SDK objects inside a dict
    typed: Any = {"role": "user", "content": ({"type": "text", "text": "a tuple of parts"},)}  # an Iterable per the SDK types
    return [
        ("ChatCompletionMessage", reply, plain_reply),
        ("pydantic model with parts", mine, {"role": "user", "content": [{"type": "text", "text": "check 41872"}]}),
        ("dict holding SDK tool calls", mixed, plain_reply),
        ("typed dict with a tuple", typed, {"role": "user", "content": [{"type": "text", "text": "a tuple of parts"}]}),
    ]


@pytest.mark.parametrize("entry", ["add", "extend", "fresh", "managed"])
def test_sdk_message_objects_are_accepted_everywhere(entry: str) -> None:
    for label, obj, plain in sdk_messages():
        memory = RelevanceMemoryManager(max_input_tokens=4000)
        memory.add({"role": "user", "content": "start"})
        history: list[Any] = [obj]
        if plain.get("tool_calls"):
            history.append({"role": "tool", "tool_call_id": "c1", "content": "files"})
        if entry == "add":
            for m in history:
                memory.add(m)
        elif entry == "extend":
            memory.extend(history)
        elif entry == "fresh":
            memory = memory.fresh([{"role": "user", "content": "start"}, *history])
        else:
            from relevance_memory.clients._session import MemorySession

            session = MemorySession(memory, on_build=None, on_divergence="raise", overrides={})
            session.sync([{"role": "user", "content": "start"}, *history], None)
        assert memory.messages[1].to_openai() == plain, label
        assert memory.messages[1].to_openai() == message_to_dict(obj), label
        assert memory.messages[1].token_count == TiktokenCounter().count_message(plain), label


# --------------------------------------------------------------------------- 5. tool calls per the SDK types
BAD_CALLS: list[tuple[Any, str]] = [
    ({"id": "c", "type": "function", "function": {"name": "f"}}, "has no 'function.arguments'"),
    ({"id": "c", "type": "function", "function": {"name": "f", "arguments": None}}, "has no 'function.arguments'"),
    ({"id": "c", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}, "arguments must be a JSON string"),
    ({"id": "c", "type": "function", "function": {"name": "f", "arguments": 3}}, "arguments must be a JSON string"),
    ({"id": "c", "type": "function", "function": {"arguments": "{}"}}, "has no function name"),
    ({"id": "c", "type": "function", "function": {"name": 7, "arguments": "{}"}}, "has no function name"),
    ({"id": "c", "function": {"name": "f", "arguments": "{}"}}, "has no 'type'"),
    ({"id": "c", "type": "tool", "function": {"name": "f", "arguments": "{}"}}, "has type 'tool'"),
    ({"id": "c", "type": "function"}, "has no 'function' object"),
    ({"id": "c", "type": "custom", "custom": {"name": "f"}}, "has no 'custom.input'"),
    ({"id": 5, "type": "function", "function": {"name": "f", "arguments": "{}"}}, "has no string 'id'"),
    ("c", "must be an object"),
]


@pytest.mark.parametrize(("bad", "fragment"), BAD_CALLS)
def test_malformed_tool_calls_are_rejected_with_the_field_named(bad: Any, fragment: str) -> None:
    memory = RelevanceMemoryManager()
    memory.add({"role": "user", "content": "go"})
    with pytest.raises(InvalidMessageError, match="message 1: ") as info:
        memory.add({"role": "assistant", "content": None, "tool_calls": [call("ok"), bad]})
    assert fragment in str(info.value)
    assert len(memory.messages) == 1


@pytest.mark.parametrize(
    ("message", "fragment"),
    [
        ({"role": "assistant", "content": "x", "tool_calls": []}, "empty list"),
        ({"role": "user", "content": ["plain string part"]}, 'write {"type": "text"'),
        ({"role": "user", "content": [{"text": "no type"}]}, "has no string 'type'"),
        ({"role": "user", "content": [{"type": "text", "text": 5}]}, "needs a string 'text'"),
        ({"role": "user", "content": [{"type": "image_url", "image_url": "http://x/y.png"}]}, "needs an object 'image_url'"),
        ({"role": "user", "content": [{"type": "image_url", "image_url": {"detail": "low"}}]}, "needs a string 'image_url.url'"),
        ({"role": "tool", "tool_call_id": "c1", "content": [{"type": "image_url", "image_url": {"url": "http://x"}}]}, "only in user messages"),
        ({"role": "system", "content": [{"type": "input_audio", "input_audio": {"data": "AA", "format": "wav"}}]}, "only in user messages"),
        ({"role": "user", "content": [{"type": "refusal", "refusal": "no"}]}, "only in assistant messages"),
        ({"role": "user", "content": "hi", "name": "Alice Smith"}, "name must be a string without spaces"),
        ({"role": "user", "content": "hi", "name": 3}, "name must be a string"),
    ],
)
def test_messages_the_api_rejects_are_rejected_on_ingest(message: dict[str, Any], fragment: str) -> None:
    memory = RelevanceMemoryManager()
    memory.extend([{"role": "user", "content": "go"}, {"role": "assistant", "content": None, "tool_calls": [call("c1")]}])
    with pytest.raises(InvalidMessageError) as info:
        memory.add(message)
    assert fragment in str(info.value)


def test_custom_tool_calls_are_accepted_and_counted() -> None:
    memory = RelevanceMemoryManager()
    memory.add({"role": "user", "content": "run it"})
    custom = {"id": "k1", "type": "custom", "custom": {"name": "shell", "input": "ls -la " * 40}}
    stored = memory.add({"role": "assistant", "content": None, "tool_calls": [custom]})
    memory.add({"role": "tool", "tool_call_id": "k1", "content": "ok"})
    assert stored.tool_calls[0].name == "shell" and stored.tool_calls[0].type == "custom"
    assert stored.token_count > 80  # the input is counted, not just the framing


# Conformance: whatever ingest accepts, the SDK's own ChatCompletionMessageParam accepts.
_role = st.sampled_from(["system", "developer", "user", "assistant", "tool"])
_text = st.text(alphabet="abc {}\"'", max_size=8)
_maybe = st.one_of(st.none(), st.integers(), _text, st.just({"a": 1}))
_part = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": st.one_of(_text, st.integers())}),
    st.fixed_dictionaries({"type": st.just("refusal"), "refusal": _text}),
    st.fixed_dictionaries({"type": st.just("image_url"), "image_url": st.fixed_dictionaries({"url": _text})}),
)
_bad = st.one_of(st.none(), st.integers(), st.just({"a": 1}), st.just(["x"]), st.sampled_from(["tool", "custom", "function"]))


@st.composite
def _call(draw: Any) -> dict[str, Any]:
    """A valid function or custom tool call, then at most two fields dropped or replaced."""
    if draw(st.booleans()):
        value: dict[str, Any] = {"id": "x", "type": "function", "function": {"name": "f", "arguments": draw(_text)}}
    else:
        value = {"id": "x", "type": "custom", "custom": {"name": "f", "input": draw(_text)}}
    paths = [("id",), ("type",), ("function",), ("custom",), ("function", "name"), ("function", "arguments"),
             ("custom", "name"), ("custom", "input")]
    for _ in range(draw(st.integers(0, 2))):
        path = draw(st.sampled_from(paths))
        holder = value if len(path) == 1 else value.get(path[0])
        if not isinstance(holder, dict):
            continue
        if draw(st.booleans()):
            holder.pop(path[-1], None)
        else:
            holder[path[-1]] = draw(_bad)
    return value


@st.composite
def _messages(draw: Any) -> dict[str, Any]:
    role = draw(_role)
    message: dict[str, Any] = {"role": role}
    message["content"] = draw(st.one_of(st.none(), _text, st.lists(_part, max_size=2)))
    if role == "assistant" and draw(st.booleans()):
        calls = draw(st.lists(_call(), min_size=1, max_size=2))
        for n, c in enumerate(calls):  # unique ids when present, so only the shape is tested
            if isinstance(c.get("id"), str):
                c["id"] = f"id{n}"
        message["tool_calls"] = calls
    if role == "tool":
        message["tool_call_id"] = "t0"
    return message


@settings(max_examples=200)
@given(_messages())
def test_ingest_accepts_exactly_what_the_sdk_message_types_accept(message: dict[str, Any]) -> None:
    """Both directions, over generated shapes: accepted ⇒ a valid ``ChatCompletionMessageParam``;
    a valid one ⇒ accepted (except an assistant message with neither content nor tool calls,
    which the types allow but the API rejects)."""
    pytest.importorskip("openai")
    from openai.types.chat import ChatCompletionMessageParam
    from pydantic import TypeAdapter, ValidationError

    adapter = TypeAdapter(ChatCompletionMessageParam)  # kept alive: its lazy iterators use it
    try:
        validated = adapter.validate_python(copy.deepcopy(message))
        for key in ("tool_calls", "content"):  # the SDK validates Iterable fields lazily
            if isinstance(message.get(key), list):
                list(validated[key])  # type: ignore[literal-required]
        sdk_ok = True
    except ValidationError:
        sdk_ok = False
    memory = RelevanceMemoryManager()
    memory.extend([{"role": "user", "content": "go"}, {"role": "assistant", "content": None, "tool_calls": [call("t0")]}])
    try:
        memory.add(message)
        ours = True
    except InvalidMessageError:
        ours = False
    api_rejects_anyway = message["role"] == "assistant" and message.get("content") is None and not message.get("tool_calls")
    assert ours == (sdk_ok and not api_rejects_anyway), message

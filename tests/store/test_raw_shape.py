"""Issue 24: a stored message whose OpenAI dict held only what its fields hold keeps the
dict's shape (:class:`RawShape`), not a copy of it; ``raw``, ``to_openai()``, ``model_dump()``,
equality and pickling give exactly what the kept dict gave. And the messages of one batch
share the clock's one reading."""

from __future__ import annotations

import copy
import json
import pickle
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from relevance_memory import RelevanceMemoryManager
from relevance_memory._models import FrozenDict, FrozenList, Message, RawShape, freeze, raw_shape
from relevance_memory.store._snapshot import StoreSnapshot

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "django__django-15280.json"


def _call(call_id: str, name: str = "bash", arguments: str = '{"command": "ls"}', order: str = "itf") -> dict[str, Any]:
    parts = {"i": ("id", call_id), "t": ("type", "function"), "f": ("function", {"name": name, "arguments": arguments})}
    return dict(parts[c] for c in order)


RUN: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "Fix the failing test in src/app.py", "name": "dana"},
    {"content": None, "role": "assistant", "tool_calls": [_call("c1"), _call("c2", "read", '{"path": "a.py"}', "fti")]},
    {"role": "tool", "tool_call_id": "c1", "content": "a.py\nb.py"},
    {"tool_call_id": "c2", "content": "print(1)", "role": "tool", "name": "read"},
    {"role": "assistant", "content": [{"type": "text", "text": "Reading the parts."}],
     "tool_calls": [{"id": "c3", "type": "custom", "custom": {"input": "diff", "name": "apply_patch"}}]},
    {"role": "tool", "tool_call_id": "c3", "content": [{"type": "text", "text": "applied"}]},
    {"role": "assistant", "content": "Done.", "refusal": None},  # a key no field holds: the dict is kept
    {"role": "user", "content": "thanks", "metadata": {"k": [1, 2]}},
]


def _memory(**kwargs: Any) -> RelevanceMemoryManager:
    return RelevanceMemoryManager(max_input_tokens=4000, **kwargs)


def _plain(value: Any) -> bool:
    """Only plain dicts and lists (no read-only copies) down to the leaves."""
    if type(value) is dict:
        return all(_plain(v) for v in value.values())
    if type(value) is list:
        return all(_plain(v) for v in value)
    return value is None or type(value) in (str, int, float, bool)


def _same_everywhere(stored: Message, given: dict[str, Any]) -> None:
    raw = stored.raw
    assert raw == given and json.dumps(raw) == json.dumps(given)  # the same keys, in the same order
    assert type(raw) is FrozenDict
    for call in raw.get("tool_calls") or ():
        assert type(call) is FrozenDict and all(type(v) is FrozenDict for v in call.values() if isinstance(v, dict))
    if "tool_calls" in raw:
        assert type(raw["tool_calls"]) is FrozenList
    exported = stored.to_openai()
    assert exported == given and json.dumps(exported) == json.dumps(given)
    assert _plain(exported)
    exported["content"] = "changed"  # a plain copy: the stored message does not change
    assert stored.raw == given
    assert stored.model_dump()["raw"] == given
    assert json.loads(stored.model_dump_json())["raw"] == json.loads(json.dumps(given))
    again = pickle.loads(pickle.dumps(stored))
    assert again == stored and again.raw == given
    assert copy.deepcopy(stored) == stored


def test_messages_of_the_fields_alone_keep_their_shape_and_read_back_exactly() -> None:
    memory = _memory()
    memory.extend(copy.deepcopy(RUN))
    kept = [type(m.__dict__["raw"]) is RawShape for m in memory.messages]
    assert kept == [True, True, True, True, True, True, True, False, False]
    for stored, sent in zip(memory.messages, RUN, strict=True):
        _same_everywhere(stored, sent)
    # equal shapes are one object (a message keeps a pointer, not a copy of the keys)
    assert memory.messages[3].__dict__["raw"] is memory.messages[6].__dict__["raw"]
    assert memory.messages[3].__dict__["raw"] is not memory.messages[4].__dict__["raw"]


def test_a_message_equals_the_one_validated_from_its_fields() -> None:
    memory = _memory()
    memory.extend(copy.deepcopy(RUN))
    for stored in memory.messages:
        validated = Message(**stored.model_dump())
        assert type(validated.__dict__["raw"]) is FrozenDict
        assert stored == validated and validated == stored
        assert stored != validated.model_copy(update={"raw": freeze({**stored.raw, "extra": 1})})


def test_edits_of_the_callers_dicts_after_ingest_change_nothing() -> None:
    given = copy.deepcopy(RUN)
    memory = _memory()
    memory.extend(given)
    given[2]["tool_calls"][0]["function"]["name"] = "rm"
    given[2]["tool_calls"].append(_call("c9"))
    given[5]["content"][0]["text"] = "edited"
    given[1]["content"] = "edited"
    for stored, original in zip(memory.messages, RUN, strict=True):
        assert stored.raw == original


def test_a_real_agent_run_reads_back_exactly() -> None:
    run = json.loads(FIXTURE.read_text(encoding="utf-8"))["messages"]
    memory = _memory()
    memory.extend(copy.deepcopy(run))
    assert sum(type(m.__dict__["raw"]) is RawShape for m in memory.messages) == len(run)
    for stored, sent in zip(memory.messages, run, strict=True):
        assert json.dumps(stored.raw) == json.dumps(sent) and stored.to_openai() == sent
    built = memory.build_context()
    assert all(type(m) is dict for m in built.messages)


_KEYS = st.permutations(["role", "content", "tool_calls"])


@settings(max_examples=150, deadline=None)
@given(
    order=_KEYS,
    call_orders=st.lists(st.sampled_from(["itf", "tif", "fti", "fit"]), min_size=1, max_size=3),
    payload_order=st.booleans(),
    content=st.one_of(st.none(), st.text(min_size=1, max_size=20),
                      st.lists(st.text(min_size=1, max_size=10).map(lambda t: {"type": "text", "text": t}),
                               min_size=1, max_size=2)),
    extra=st.sampled_from([None, ("refusal", None), ("audio", {"id": "a1"})]),
)
def test_any_key_order_reads_back_exactly(
    order: list[str], call_orders: list[str], payload_order: bool, content: Any, extra: tuple[str, Any] | None,
) -> None:
    calls = []
    for n, call_order in enumerate(call_orders):
        call = _call(f"k{n}", order=call_order)
        if payload_order:
            call["function"] = {"arguments": call["function"]["arguments"], "name": call["function"]["name"]}
        calls.append(call)
    values = {"role": "assistant", "content": content, "tool_calls": calls}
    given = {key: values[key] for key in order}
    if extra is not None:
        given[extra[0]] = extra[1]
    memory = _memory()
    memory.extend([{"role": "user", "content": "go"}, copy.deepcopy(given)])
    stored = memory.messages[1]
    assert (type(stored.__dict__["raw"]) is RawShape) == (extra is None)
    _same_everywhere(stored, given)


def test_a_value_that_is_not_the_fields_own_object_keeps_the_dict() -> None:
    memory = _memory()
    memory.extend([{"role": "user", "content": "hi"}])
    stored = memory.messages[0]
    fields = dict(stored.__dict__)
    assert raw_shape(freeze({"role": "user", "content": "hi"}), {**fields, "content": "hi!"}) is None
    assert raw_shape(freeze({"role": "user", "content": "hi", "x": 1}), fields) is None
    assert raw_shape(FrozenDict(role="user", content=fields["content"]), fields) is not None


class _Ticking:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> datetime:
        self.calls += 1
        return datetime(2026, 1, 1, tzinfo=timezone.utc) + timedelta(hours=self.calls)


def test_a_batch_is_stamped_with_one_reading_of_the_clock() -> None:
    clock = _Ticking()
    memory = _memory(clock=clock)
    memory.extend(copy.deepcopy(RUN[:5]))
    stamps = [m.timestamp for m in memory.messages]
    assert clock.calls == 1 and all(s is stamps[0] for s in stamps)
    assert stamps[0] == datetime(2026, 1, 1, 1, tzinfo=timezone.utc)
    memory.add({"role": "user", "content": "later"})
    assert clock.calls == 2 and memory.messages[-1].timestamp == datetime(2026, 1, 1, 2, tzinfo=timezone.utc)
    given = datetime(2025, 5, 5, tzinfo=timezone.utc)
    memory.add({"role": "user", "content": "dated"}, timestamp=given)
    assert memory.messages[-1].timestamp == given and clock.calls == 2  # a caller's timestamp: no reading


def test_one_referrer_is_kept_as_a_tuple_then_a_list_and_a_snapshot_sees_its_own() -> None:
    memory = _memory()
    memory.extend([{"role": "user", "content": "Deploy ticket ORD-7731 to staging"},
                   {"role": "assistant", "content": "Looking at ORD-7731 now."}])
    store = memory.store
    assert store.referenced_by["m0"] == ("m1",)
    before = StoreSnapshot(store)
    memory.add({"role": "user", "content": "Is ORD-7731 done?"})
    assert store.referenced_by["m0"] == ["m1", "m2"]
    assert list(before.referenced_by["m0"]) == ["m1"] and list(StoreSnapshot(store).referenced_by["m0"]) == ["m1", "m2"]


def test_a_message_iterated_or_remade_from_its_storage_gives_the_dict() -> None:
    memory = _memory()
    memory.extend(copy.deepcopy(RUN))
    for stored, sent in zip(memory.messages, RUN, strict=True):
        fields = dict(stored)
        assert type(fields["raw"]) is FrozenDict and json.dumps(fields["raw"]) == json.dumps(sent)
        assert Message(**fields) == stored and Message(**vars(stored)) == stored
        assert Message.model_validate(vars(stored)).raw == sent
    shaped = memory.messages[2]
    try:
        Message(**{**vars(shaped), "tool_calls": ()})
    except ValueError as exc:
        assert "0 tool call(s) for 2" in str(exc)
    else:
        raise AssertionError("a shape with its tool calls missing was accepted")

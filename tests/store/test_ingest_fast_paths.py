"""Issue 24: ingest's fast paths give exactly what the general paths give (they change speed
and memory, never a result)."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from relevance_memory import RelevanceMemoryManager
from relevance_memory._io import message_to_dict
from relevance_memory._models import FrozenDict, Message, freeze
from relevance_memory._text import (
    _TERM_ASCII_RE,
    _TERM_RE,
    _TOKEN_ASCII_RE,
    _TOKEN_RE,
    _ascii_terms,
    _ascii_tokens,
    _identifier,
    identifiers,
)
from relevance_memory.store._validate import own_message

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "django__django-15280.json"
ASCII = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=127), max_size=80)


@settings(max_examples=300, deadline=None)
@given(ASCII)
def test_ascii_expressions_match_the_unicode_ones_on_ascii_text(text: str) -> None:
    lowered = text.lower()
    assert _TERM_ASCII_RE.findall(lowered) == _TERM_RE.findall(lowered)
    assert _TOKEN_ASCII_RE.findall(text) == _TOKEN_RE.findall(text)


# ASCII text dense in what the expressions turn on: digits, commas, apostrophes, the separators
# ids and paths use, spaces and control characters, letters of both cases
_DENSE = st.text(alphabet=st.one_of(st.sampled_from(list("0123456789,,,'''.//::\\\\--__ \t\n\x0b\x1c\x7faZz")),
                                    st.characters(min_codepoint=0, max_codepoint=127)), max_size=120)


@settings(max_examples=600, deadline=None)
@given(_DENSE)
def test_ascii_translations_match_the_expressions(text: str) -> None:
    """Issue 24: the byte-translation splits are the expressions' matches, exactly (text as
    given and lower-cased: the store reads both)."""
    for variant in (text, text.lower()):
        assert _ascii_terms(variant) == _TERM_ASCII_RE.findall(variant)
        assert _ascii_tokens(variant) == _TOKEN_ASCII_RE.findall(variant)


def test_ascii_translations_on_the_cases_each_branch_takes() -> None:
    texts = [
        "50,000 rows at 41,872.5, then 1,2 and ,123 x1,000y",
        "I don't know it's 'quoted' o'clock can't' 'x 9'a a'9",
        "src/app/models.py:12 C:\\dir\\f.txt ORD-1001 -- ./a_b..",
        "", "   ", "\x00\x1f\x7f",
    ]
    for text in texts:
        assert _ascii_terms(text.lower()) == _TERM_ASCII_RE.findall(text.lower())
        assert _ascii_tokens(text) == _TOKEN_ASCII_RE.findall(text)
    assert _ascii_tokens("x 41,872 y: a,b") == ["x", "41,872", "y:", "a", "b"]
    assert _ascii_terms("i don't care, 'x' o'") == ["i", "don't", "care", "x", "o"]


def test_identifiers_are_the_same_on_a_second_read() -> None:
    """The token memo: a text read again gives the same identifiers."""
    text = "Fix src/app/models.py: ORD-1001 failed at 41,872 rows; see build_context() and CamelCase."
    first = identifiers(text)
    assert identifiers(text) == first == {"src/app/models.py", "ORD-1001", "41,872", "build_context", "CamelCase"}


class _Call:
    def __init__(self) -> None:
        self.id, self.type = "c9", "function"
        self.function = type("F", (), {"name": "ls", "arguments": "{}"})()


@given(st.sampled_from([
    {"role": "user", "content": "plain"},
    {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "x"}}]},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function",
                                                           "function": {"name": "f", "arguments": "{}"}}]},
    {"role": "assistant", "content": "x", "tool_calls": ({"id": "c", "type": "function",
                                                          "function": {"name": "f", "arguments": "{}"}},)},
    {"role": "assistant", "content": "x", "tool_calls": [_Call()]},
    {"role": "tool", "tool_call_id": "c", "content": "ok", "extra": {"n": 1, "f": 1.5, "b": True, "t": (1, 2)}},
    {"role": "user", "content": "when", "when": datetime(2024, 1, 1, tzinfo=timezone.utc)},
    FrozenDict({"role": "user", "content": "frozen"}),
]))
def test_own_message_is_freeze_of_message_to_dict(message: dict[str, Any]) -> None:
    owned = own_message(message)
    expected = freeze(message_to_dict(message))
    assert owned == expected and type(owned) is FrozenDict
    assert json.dumps(owned, sort_keys=True, default=str) == json.dumps(expected, sort_keys=True, default=str)


def test_stored_messages_equal_validated_ones() -> None:
    """A message built without validation (``trusted``) equals, dumps and copies like one pydantic
    validated from the same values; metadata of another type still goes through pydantic."""
    memory = RelevanceMemoryManager(max_input_tokens=4000)
    run = json.loads(FIXTURE.read_text(encoding="utf-8"))["messages"][:12]
    memory.extend(run)
    for stored in memory.messages:
        validated = Message(**stored.model_dump())
        assert stored == validated and stored.model_dump() == validated.model_dump()
        assert stored.model_dump_json() == validated.model_dump_json()
        assert stored.model_copy(update={"id": "x"}).id == "x" and stored.id != "x"
        assert hash(stored.id) == hash(validated.id) and repr(stored) == repr(validated)
    coerced = memory.add({"role": "user", "content": "later"}, timestamp="2024-05-01T10:00:00+00:00")  # type: ignore[arg-type]
    assert coerced.timestamp == datetime(2024, 5, 1, 10, tzinfo=timezone.utc)


def test_a_failing_embedder_stores_the_whole_batch_then_raises_and_keeps_the_rest_pending() -> None:
    """Issue 24: one extend embeds a batch of vectors at a time; an embedder error midway
    leaves the whole batch stored (atomic ingest) and its vectors pending for the next read."""
    import numpy as np
    import pytest

    from relevance_memory import TiktokenCounter
    from relevance_memory.scoring._embedding import VectorIndex
    from relevance_memory.store._store import MessageStore

    class Flaky:
        name, version, dim, batch_size = "flaky", "1", 4, 8

        def __init__(self) -> None:
            self.calls: list[int] = []

        def embed(self, texts: list[str]) -> Any:
            self.calls.append(len(texts))
            if len(self.calls) == 2:
                raise RuntimeError("model down")
            return np.full((len(texts), 4), 0.5, dtype=np.float32)

    embedder = Flaky()
    store = MessageStore(TiktokenCounter(), vectors=VectorIndex(embedder))  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="model down"):
        store.extend([{"role": "user", "content": f"message {i}"} for i in range(30)])
    assert len(store) == 30 and embedder.calls == [8, 8]
    index = store.message_vectors()
    assert index is not None and all(m.content_hash in index for m in store.messages)
    assert embedder.calls == [8, 8, 8, 8, 6]  # the failed batch again, then the rest, a batch at a time


def test_a_repeated_call_shares_the_vector_of_its_text() -> None:
    """Issue 24: the same call again (a new call id: a new content hash) is not embedded again;
    its key has the row of its text, the row embedding it gives."""
    import numpy as np

    from relevance_memory import TiktokenCounter
    from relevance_memory.scoring._embedding import VectorIndex, quantize
    from relevance_memory.store._store import MessageStore

    class Recording:
        name, version, dim, batch_size = "recording", "1", 4, 2

        def __init__(self) -> None:
            self.texts: list[str] = []

        def embed(self, texts: list[str]) -> Any:
            self.texts.extend(texts)
            return np.array([[len(t), t.count("l"), 1.0, 0.0] for t in texts], dtype=np.float32)

    def step(n: int) -> list[dict[str, Any]]:
        call = {"id": f"c{n}", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
        return [{"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": f"c{n}", "content": "a.py b.py"}]

    embedder = Recording()
    store = MessageStore(TiktokenCounter(), vectors=VectorIndex(embedder))  # type: ignore[arg-type]
    store.extend([{"role": "user", "content": "list the files"}, *step(1), *step(2), *step(3)])
    index = store.message_vectors()
    assert index is not None
    calls = [m for m in store.messages if m.tool_calls]
    assert len({m.content_hash for m in calls}) == 3  # three keys ...
    assert embedder.texts == ["list the files", '\nbash({"command": "ls"})', "a.py b.py"]  # ... one text embedded once
    expected = quantize(embedder.embed(['\nbash({"command": "ls"})']))[0].tolist()
    assert all(index.vector(m.content_hash).tolist() == expected for m in calls) and len(index) == 3


def test_token_counts_of_repeated_messages_are_the_counters() -> None:
    """Issue 24: a message of the same role, content, name and calls as a recent one takes its
    count from the memo; every count is still the counter's own for that message."""
    from relevance_memory import TiktokenCounter
    from relevance_memory.store._store import MessageStore

    counter = TiktokenCounter()
    call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls -la"}'}}
    again = {**call, "id": "c2"}
    other = {**call, "id": "c3", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
    batch = [
        {"role": "user", "content": "list the files, please"},
        {"role": "user", "content": "list the files, please"},
        {"role": "user", "content": "list the files, please", "name": "bob"},
        {"role": "system", "content": "list the files, please"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "a.py b.py"},
        {"role": "assistant", "content": None, "tool_calls": [again]},
        {"role": "tool", "tool_call_id": "c2", "content": "a.py b.py"},
        {"role": "assistant", "content": "ok", "tool_calls": [other]},
        {"role": "tool", "tool_call_id": "c3", "content": [{"type": "text", "text": "a.py b.py"}]},
    ]
    store = MessageStore(counter)
    store.extend(batch)
    assert store._count_memo is not None and len(store._count_memo) == 6  # 10 messages, 3 repeats, 1 list content
    assert [m.token_count for m in store.messages] == [counter.count_message(m) for m in batch]
    assert store.messages[2].token_count > store.messages[1].token_count == store.messages[0].token_count
    assert store.messages[8].token_count != store.messages[6].token_count == store.messages[4].token_count


def test_an_answered_call_is_known_by_its_result() -> None:
    """Issue 24: once a call has its result the store keeps its id once (with the answer); a
    second result is still named so, and the id may be reused by a later call."""
    import pytest

    from relevance_memory import InvalidMessageError

    def call(call_id: str) -> dict[str, Any]:
        return {"role": "assistant", "content": None,
                "tool_calls": [{"id": call_id, "type": "function", "function": {"name": "ls", "arguments": "{}"}}]}

    memory = RelevanceMemoryManager()
    memory.extend([{"role": "user", "content": "go"}, call("c1"), {"role": "tool", "tool_call_id": "c1", "content": "a"}])
    with pytest.raises(InvalidMessageError, match="second result for tool call 'c1'"):
        memory.add({"role": "tool", "tool_call_id": "c1", "content": "again"})
    memory.add(call("c1"))
    assert memory.store.pending_calls == [3] and memory.store.unanswered_calls(3) == ["c1"]
    assert memory.store.unanswered_calls(1) == []
    memory.add({"role": "tool", "tool_call_id": "c1", "content": "b"})
    assert memory.store.pending_calls == [] and memory.messages[4].parent_id == "m3"


def test_a_snapshot_reads_backwards_and_its_link_views_answer_bool_as_of_when_it_was_taken() -> None:
    from relevance_memory.store._snapshot import StoreSnapshot

    memory = RelevanceMemoryManager(max_input_tokens=4000)
    memory.extend([{"role": "user", "content": "I live in Lisbon now."}, {"role": "assistant", "content": "Noted."}])
    before = StoreSnapshot(memory.store)
    assert not before.superseded_by and not before.supersedes
    memory.extend([{"role": "user", "content": "I live in Porto now."}])
    after = StoreSnapshot(memory.store)
    assert [m.id for m in reversed(before.messages)] == ["m1", "m0"]  # the message added since is not read
    assert [m.id for m in reversed(after.messages)] == ["m2", "m1", "m0"]
    assert [m.id for m in reversed(after.messages)] == [m.id for m in reversed(list(after.messages))]
    assert not before.superseded_by and not before.supersedes  # the link to m2 is newer than the snapshot
    assert after.superseded_by and after.supersedes and len(after.superseded_by) == len(after.supersedes) == 1


def _identifiers_reference(text: str) -> set[str]:
    """:func:`identifiers` as its docstring says it: the first 200 identifiers of the text's
    distinct tokens, in order of first occurrence (no memo, no fast path)."""
    found: set[str] = set()
    for raw in dict.fromkeys(_TOKEN_RE.findall(text)):
        token = _identifier(raw)
        if token is not None:
            found.add(token)
            if len(found) >= 200:
                break
    return found


_PIECES = st.one_of(
    st.sampled_from(["build_context", "CamelCase", "src/app.py", "ORD-1001", "a.b.c", "the", "and", "x1", "50,000",
                     "1,2", "12,345.6", "2026-11-20", "41872", "-", "./", "é_ü", "日本"]),
    st.integers(0, 10**7).map(str), st.integers(0, 10**6).map(lambda n: f"{n:,}"),
    st.integers(0, 999).map(lambda n: f"id_{n}"), _DENSE,
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_PIECES, max_size=400), st.sampled_from([" ", ", ", "\n", ",", "; ", ""]))
def test_identifiers_are_those_of_the_plain_loop(pieces: list[str], separator: str) -> None:
    """Issue 24: the memo read in the set's order, and the ASCII tokens, give the identifiers of
    the plain ordered loop (past the 200 cap too)."""
    text = separator.join(pieces)
    assert identifiers(text) == _identifiers_reference(text)
    assert identifiers(text) == _identifiers_reference(text)  # memo entries read back


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 3000), min_size=150, max_size=400, unique=True),
       st.lists(st.sampled_from(["word", "the", "1,234", "id_7"]), max_size=50))
def test_identifiers_past_the_cap_are_the_first_200(numbers: list[int], others: list[str]) -> None:
    text = " ".join([*(f"id_{n}" for n in numbers), *others])
    assert identifiers(text) == _identifiers_reference(text)
    many = " ".join(f"call_{n}" for n in range(300))
    assert identifiers(many) == {f"call_{n}" for n in range(200)}


def test_a_plain_message_has_the_shape_the_general_path_finds() -> None:
    """Issue 24: a plain dict's :class:`RawShape` is taken without comparing each value with its
    field (:func:`plain_shape`); it is the one :func:`raw_shape` finds, and the message reads back
    as given."""
    from relevance_memory._models import plain_shape, raw_shape
    from relevance_memory.store._validate import plain_message

    run = json.loads(FIXTURE.read_text(encoding="utf-8"))["messages"][:40]
    extra = [
        {"role": "user", "content": "hi", "name": "ann"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"type": "function", "id": "c9", "function": {"arguments": "{}", "name": "ls"}},
            {"id": "c10", "type": "function", "function": {"name": "pwd", "arguments": "{}"}}]},
        {"tool_call_id": "c9", "role": "tool", "content": "a.py"},
        {"role": "tool", "content": "/", "tool_call_id": "c10", "name": None},
    ]
    memory = RelevanceMemoryManager(max_input_tokens=4000)
    memory.extend(run + extra)
    plain = [(sent, stored) for sent, stored in zip(run + extra, memory.messages, strict=True) if plain_message(sent)]
    assert len(plain) == len(run) + len(extra)
    for sent, stored in plain:
        shape = plain_shape(sent)
        fields = {**stored.__dict__, "tool_calls": stored.tool_calls, "msg_type": stored.msg_type}  # as validated
        assert shape is raw_shape(sent, fields) and stored.__dict__["raw"] is shape
        assert stored.raw == sent and list(stored.raw) == list(sent)


def test_a_text_whose_hash_is_in_the_rows_memo_for_another_text_has_its_own_rows() -> None:
    """Issue 24: the rows memo is keyed by a text's ``hash``; a hit on another text (a hash
    collision, forced here) is taken for a miss, so the message has its own terms and identifiers."""
    from relevance_memory import TiktokenCounter
    from relevance_memory.store._store import MessageStore

    store = MessageStore(TiktokenCounter())
    store.add({"role": "user", "content": "alpha beta ORD-1001"})
    store._rows_memo[hash("gamma delta ORD-2002")] = 0  # another text under this text's key
    store.add({"role": "user", "content": "gamma delta ORD-2002"})
    assert store.terms[1] == {"gamma", "delta", "ord", "2002"} and store.idents[1] == {"ORD-2002"}
    store.add({"role": "user", "content": "gamma delta ORD-2002"})  # the same text again: a real hit
    assert store.terms[2] == store.terms[1] and store.idents[2] == store.idents[1]



def test_a_repeated_text_s_rows_copied_as_numbers_are_the_rows_read_afresh(monkeypatch: Any) -> None:
    """Issue 24: a text seen before takes the earlier message's rows copied as vocabulary numbers
    (``StringRows.repeat``); every row, every coded chunk and the term counts are those of a
    store that reads each text afresh (no rows memo)."""
    from relevance_memory import TiktokenCounter
    from relevance_memory.store import _store
    from relevance_memory.store._store import MessageStore

    history = json.loads(FIXTURE.read_text())["messages"]
    steps = [m for m in history if m["role"] != "system"]
    run = [*history, *steps, *steps]  # the run's texts twice again (new call ids: the same texts)

    def stored(memo: int) -> MessageStore:
        monkeypatch.setattr(_store, "_ROWS_MEMO", memo)
        store = MessageStore(TiktokenCounter(), on_invalid="repair")
        store.extend(run)
        return store

    calls: list[int] = []
    real_repeat = _store.StringRows.repeat
    monkeypatch.setattr(_store.StringRows, "repeat", lambda self, i: (calls.append(i), real_repeat(self, i))[1])
    fast = stored(256)
    assert len(calls) >= len(steps)  # the repeats took the fast path
    afresh = stored(1)  # holds the last text only: (almost) every row read afresh
    for rows in ("terms", "idents"):
        mine, theirs = getattr(fast, rows), getattr(afresh, rows)
        assert [mine.row(i) for i in range(len(mine))] == [theirs.row(i) for i in range(len(theirs))]
        codes, lengths = mine.coded(0, len(mine))
        other_codes, other_lengths = theirs.coded(0, len(theirs))
        assert codes.tolist() == other_codes.tolist() and lengths.tolist() == other_lengths.tolist()
    assert fast.doc_freq == afresh.doc_freq

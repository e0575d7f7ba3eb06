"""What a build keeps of a large history, and what it shares (issue 24: a million messages in
3 GB): the summarizer's memos are keyed by what they read, a summary cache key holds the items
and no tuple per item, and a text a Rust tokenizer read keeps no UTF-8 copy inside it."""

from __future__ import annotations

import sys
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from relevance_memory import RelevanceMemoryManager, TiktokenCounter
from relevance_memory._memo import TextMemo
from relevance_memory._text import code_names, kept_code_names
from relevance_memory._tokenizer import unshared
from relevance_memory.summary._extract import _estimate_tokens, _is_table_row, _sentences, kept_values
from relevance_memory.summary._pyramid import SummaryCache, SummaryItem, key_parts, parts_digest, run_facts
from relevance_memory.summary._summary import LINE_FIELDS, OfflineSummarizer, _each_line, _head

THOUGHT = "THOUGHT: The test passed. Now run tests/test_query.py again; keep QuerySet.bulk_create as it is."


def _thought(n: int, **fields: object) -> SummaryItem:
    """The same assistant text at id ``m{n}``, with a call whose id (and so content hash) differs."""
    item = SummaryItem(id=f"m{n}", role="assistant", msg_type="reasoning", text=THOUGHT, content_hash=f"h{n}",
                       tool_calls=(("bash", '{"command": "pytest tests/test_query.py"}'),), tokens=30)
    return replace(item, **fields) if fields else item


def _entries(summarizer: OfflineSummarizer) -> int:
    """The extraction memo's entries (over its variants), as it counts them."""
    held = sum(map(len, summarizer._memo.values()))
    assert held == summarizer._memo_entries
    return held


def test_the_same_text_at_other_ids_and_call_ids_is_read_once() -> None:
    """Issue 24: the extraction memo was keyed by the content hash, which covers the tool calls'
    ids, so a step run again (same text, new call id) added an entry — half a summary's memory
    at a million messages. Keyed by what the lines are made of, the entry is shared."""
    summarizer = OfflineSummarizer()
    first, again = _thought(1), _thought(9)
    lines = summarizer._extract(first)
    assert lines and summarizer._extract(again) is lines
    assert summarizer._names(again) is summarizer._names(first)
    assert "tests/test_query.py" in summarizer._names(first)
    assert _entries(summarizer) == 1 and len(summarizer._names_memo) == 1
    # what the lines depend on still tells them apart: the supersede marks, the role, the text
    marked = _thought(10, superseded="a newer result since step 12 (m24)")
    assert summarizer._extract(marked) != lines and _head(marked).endswith("(earlier; a newer result since step 12 (m24)): “")
    assert summarizer._extract(_thought(11, role="user")) != lines
    longer = summarizer._extract(_thought(12, text=THOUGHT + " The fix goes in utils/dateparse.py."))
    assert longer is not lines and longer[: len(lines)] == lines
    other_call = _thought(13, tool_calls=(("bash", '{"command": "cat src/app/models.py"}'),))
    assert summarizer._extract(other_call) is lines  # the lines do not read the calls
    assert summarizer._names(other_call) != summarizer._names(first)  # the names do
    assert _entries(summarizer) == 4


def test_the_flat_variant_keyed_memo_reads_as_the_tuple_per_line_one_did() -> None:
    """Issue 24: a message's lines are one flat tuple (no tuple per line) under its text in a
    dict per (role, tool name, marks) (no key tuple per entry). Read back, they are the lines a
    summarizer without the memo makes, field for field, and a summary from a warm memo — also one
    emptied as it goes (``memo_size`` 3) — is the one made fresh."""
    items = [_thought(n, text=f"{THOUGHT} Step {n} edits pkg/mod_{n % 5}.py at line {n * 7}.",
                      superseded="a newer result since step 40 (m80)" if n % 7 == 3 else "",
                      role="user" if n % 5 == 1 else "assistant") for n in range(60)]
    items.append(SummaryItem(id="t1", role="tool", msg_type="tool_result", text="exit code 0; wrote /tmp/out.json",
                             source="bash"))
    warm, small = OfflineSummarizer(), OfflineSummarizer(memo_size=3)
    for item in items:
        flat = warm._extract(item)
        assert len(flat) % LINE_FIELDS == 0 and all(type(field) is not tuple for field in flat[2::LINE_FIELDS])
        per_line = list(_each_line(flat))
        assert per_line == list(_each_line(OfflineSummarizer(memo_size=0)._extract(item)))
        assert all(len(line) == LINE_FIELDS and isinstance(line[1], str) and isinstance(line[2], str) for line in per_line)
        assert warm._extract(item) is flat  # a hit
        small._extract(item)
        assert _entries(small) <= 3
    for cut in (20, 45, len(items)):
        made = warm.summarize(items[:cut], level=1, max_tokens=400)
        assert made == small.summarize(items[:cut], level=1, max_tokens=400)
        assert made == OfflineSummarizer(memo_size=0).summarize(items[:cut], level=1, max_tokens=400)


def test_a_summary_from_shared_memo_entries_equals_one_made_fresh() -> None:
    items = [_thought(n, superseded="a newer result since step 40 (m80)" if n % 7 == 3 else "") for n in range(40)]
    shared = OfflineSummarizer()
    for cut in (10, 25, 40):
        made = shared.summarize(items[:cut], level=1, max_tokens=300)
    assert made == OfflineSummarizer().summarize(items, level=1, max_tokens=300)


def test_a_summary_cache_key_holds_the_items_not_a_tuple_per_item() -> None:
    """Issue 24: a key held ``(id, hash, marks, held)`` of every item — 88 bytes a message of a
    whole archive's summary. It holds the items tuple itself; items with equal parts, even remade
    as other objects, find the draft; a changed mark does not."""
    items = tuple(_thought(n) for n in range(30))
    cache, summarizer = SummaryCache(), OfflineSummarizer()
    draft = cache.get_or_make(summarizer, items, level=1, max_tokens=200)
    (key,) = cache._data
    assert key.key[3] is items and cache.misses == 1
    assert cache.get_or_make(summarizer, tuple(replace(i) for i in items), level=1, max_tokens=200) is draft
    assert cache.get_or_make(summarizer, items, level=1, max_tokens=200, digest=run_facts(items).digest) is draft
    # the parts are what a key compares: an item that differs in what they leave out finds the draft
    # (a memory made again by fresh() reads a message's type from its dict)
    assert cache.get_or_make(summarizer, tuple(replace(i, msg_type="chat") for i in items), level=1,
                             max_tokens=200) is draft
    assert cache.hits == 3
    marked = (*items[:-1], replace(items[-1], superseded="since step 9: other"))
    assert cache.get_or_make(summarizer, marked, level=1, max_tokens=200) is not draft
    assert cache.get_or_make(summarizer, items, level=2, max_tokens=200) is not draft
    assert cache.misses == 3


@settings(max_examples=200, deadline=None)
@given(marks=st.lists(st.sampled_from(["", "since step 3: x", "since step 4: y"]), min_size=1, max_size=40),
       cuts=st.lists(st.integers(0, 40), max_size=4))
def test_the_key_digest_resumed_from_any_prefix_is_the_whole_digest(marks: list[str], cuts: list[int]) -> None:
    """The digest folds item by item, so a run's digest resumed from its prefix's (as
    :func:`run_facts` does) is the digest of the whole run, whatever the cuts; runs whose key
    parts differ have (almost surely) different digests."""
    items = [_thought(n, superseded=mark) for n, mark in enumerate(marks)]
    whole = parts_digest(items)
    digest, done = parts_digest(()), 0
    for cut in sorted(c for c in cuts if c <= len(items)):
        digest, done = parts_digest(items[done:cut], digest), cut
    assert parts_digest(items[done:], digest) == whole
    changed = [replace(items[-1], supersedes=True)] if items else []
    assert key_parts(items[:-1] + changed) != key_parts(items)
    assert parts_digest(items[:-1] + changed) != whole


TEXTS = ["Le café coûte 4 € — « vérifié » ✓ " * 40, "東京の会議は午後3時に始まります。" * 30, "naïve résumé " * 90]


def test_counting_a_non_ascii_text_leaves_no_utf8_copy_inside_it() -> None:
    """Issue 24: tiktoken (PyO3) reading a non-ASCII ``str`` keeps its UTF-8 encoding inside the
    string for as long as it lives — a stored message's content doubled. Counting reads a
    transient copy: the same counts, the string's size unchanged."""
    counter = TiktokenCounter("o200k_base")
    for text in TEXTS:
        size = sys.getsizeof(text)
        count = counter.count_text(text)
        assert counter.count_texts([text, "ascii only"]) == [count, counter.count_text("ascii only")]
        assert sys.getsizeof(text) == size
        assert count == len(counter._enc.encode_ordinary(unshared(text))) > 0
    ascii_text = "plain ascii " * 50
    assert unshared(ascii_text) is ascii_text and unshared(TEXTS[0]) == TEXTS[0] and unshared(TEXTS[0]) is not TEXTS[0]


def test_a_stored_non_ascii_message_keeps_its_size_through_ingest_and_a_build() -> None:
    memory = RelevanceMemoryManager(max_input_tokens=2000, keep_recent=2)
    contents = [f"{text} (step {n})" for n in range(6) for text in TEXTS]
    sizes = [sys.getsizeof(c) for c in contents]
    memory.extend([{"role": "user", "content": c} for c in contents])
    built = memory.build_context()
    assert [m.content for m in memory.messages] == contents
    assert [sys.getsizeof(m.content) for m in memory.messages] == sizes
    assert built.record.tokens_after <= 2000


def test_the_summary_cache_is_bounded_by_the_items_its_keys_cover() -> None:
    """Issue 24: a draft of a whole archive keeps the archive's items and covered ids; bounded by
    count alone (4,096), a million-message loop kept every compaction's. Least recently used out
    first; the newest draft stays whatever its size."""
    cache, summarizer = SummaryCache(max_items=100), OfflineSummarizer()
    runs = [tuple(_thought(n * 100 + k) for k in range(size)) for n, size in enumerate((40, 50, 30, 120))]
    drafts = [cache.get_or_make(summarizer, run, level=1, max_tokens=200) for run in runs[:2]]
    assert [len(k.key[3]) for k in cache._data] == [40, 50] and cache._items == 90
    assert cache.get_or_make(summarizer, runs[0], level=1, max_tokens=200) is drafts[0]  # now the newest
    cache.get_or_make(summarizer, runs[2], level=1, max_tokens=200)  # 120 > 100: the oldest (50) goes
    assert [len(k.key[3]) for k in cache._data] == [40, 30] and cache._items == 70
    huge = cache.get_or_make(summarizer, runs[3], level=1, max_tokens=200)
    assert [len(k.key[3]) for k in cache._data] == [120] and cache._items == 120
    assert cache.get_or_make(summarizer, runs[3], level=1, max_tokens=200) is huge
    assert (cache.hits, cache.misses) == (2, 4)


def test_items_and_texts_as_callers_make_them_are_read_as_before() -> None:
    """helper-31's review: a hand-made item whose calls are lists (the dataclass does not check)
    is summarised as the same item with tuples — the names memo key is made hashable — and a
    counter given something other than a string raises the tokenizer's own TypeError."""
    listed = _thought(1, tool_calls=[["bash", '{"command": "cat src/app/models.py"}']])
    inner_lists = _thought(1, tool_calls=(["bash", '{"command": "cat src/app/models.py"}'],))
    as_tuples = _thought(1, tool_calls=(("bash", '{"command": "cat src/app/models.py"}'),))
    summarizer = OfflineSummarizer()
    assert summarizer._names(listed) == summarizer._names(inner_lists) == summarizer._names(as_tuples)
    assert "src/app/models.py" in summarizer._names(listed)
    assert summarizer.summarize([listed], level=1, max_tokens=200) == OfflineSummarizer().summarize(
        [as_tuples], level=1, max_tokens=200)
    counter = TiktokenCounter("o200k_base")
    for bad in (123, ["a list"], b"bytes"):
        try:
            counter.count_text(bad)  # type: ignore[arg-type]
        except TypeError:
            pass
        else:  # pragma: no cover - the assertion below names it
            raise AssertionError(f"count_text({bad!r}) did not raise TypeError")


def _fixture_messages() -> list[dict[str, object]]:
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "fixtures" / "django__django-15280.json"
    return list(json.loads(path.read_text(encoding="utf-8"))["messages"])


def test_a_budget_that_changes_every_build_keeps_a_few_excerpts_a_message() -> None:
    """Issue 24: the excerpt memo kept one excerpt of every oversized message for every budget
    seen (a budget that is the window less what the tools take changes every call): 48 a message
    after 60 such builds. Now at most ``per_message`` (8) a message, least recently used out, and
    every context is byte-identical to one made with an unbounded memo."""
    import random

    from relevance_memory.pipeline.fidelity import Renditions

    messages = _fixture_messages()
    bounded = RelevanceMemoryManager(max_input_tokens=6000, keep_recent=3)
    unbounded = RelevanceMemoryManager(max_input_tokens=6000, keep_recent=3)
    unbounded._renditions = Renditions(per_message=10**9)
    rng = random.Random(3)
    for start in range(0, len(messages), 6):
        budget = rng.randrange(4000, 8000)
        for memory in (bounded, unbounded):
            memory.extend(messages[start:start + 6])
        built = [m.build_context(budget=budget) for m in (bounded, unbounded)]
        assert built[0].messages == built[1].messages
    held = bounded._renditions._data
    assert held and max(map(len, held.values())) == 8
    assert len(bounded._renditions) == sum(map(len, held.values())) < len(unbounded._renditions)
    assert max(map(len, unbounded._renditions._data.values())) > 8  # the case the bound is for


def test_the_excerpt_memo_drops_a_message_s_least_recently_used_cap() -> None:
    from relevance_memory import TiktokenCounter
    from relevance_memory.pipeline.fidelity import Renditions

    memory = RelevanceMemoryManager(max_input_tokens=8000)
    memory.extend(_fixture_messages()[:40])
    big = max(memory.messages, key=lambda m: m.token_count)
    counter, memo = TiktokenCounter("o200k_base"), Renditions(per_message=2)
    first = memo.get(big, "excerpt", 300, (), counter, "goal")
    assert memo.get(big, "excerpt", 300, (), counter, "goal") is first  # a hit is the same object
    second = memo.get(big, "excerpt", 400, (), counter, "goal")
    assert memo.get(big, "excerpt", 300, (), counter, "goal") is first  # 300 now the most recent
    memo.get(big, "elided", 0, (), counter, "goal")  # a third: 400, the least recently used, goes
    assert len(memo) == 2
    again = memo.get(big, "excerpt", 400, (), counter, "goal")
    assert again is not second and again == second  # made again, the same bytes
    assert big.token_count > 400 and first.tokens <= 300 and again.tokens <= 400


def test_summary_items_made_positionally_and_marked_are_the_dataclass_s_own() -> None:
    """Issue 24: a first build makes an item per archived message with the slots' own setters,
    and a linked message's kept marked item is compared field by field (no item made to compare):
    the same objects the dataclass makes, and a kept item given back only when every other field
    still matches."""
    from relevance_memory.summary._pyramid import SummaryItems, new_summary_item

    fields = ("m1", "tool", "tool_result", "ok", "h1", (("bash", '{"cmd": "ls"}'),), "bash", "", False, 12, ())
    item = new_summary_item(*fields)
    assert item == SummaryItem(id="m1", role="tool", msg_type="tool_result", text="ok", content_hash="h1",
                               tool_calls=(("bash", '{"cmd": "ls"}'),), source="bash", tokens=12)
    assert type(item) is SummaryItem
    memo = SummaryItems()
    marked = memo.marked(item, "since step 3: 2", False)
    assert marked == replace(item, superseded="since step 3: 2")
    memo.keep_linked("m1", None, None, marked)
    assert memo.marked(item, "since step 3: 2", False) is marked  # kept: the same marks, the same fields
    assert memo.marked(item, "since step 4: 3", False) == replace(item, superseded="since step 4: 3")
    for name, value in (("text", "changed"), ("tokens", 13), ("source", "grep"), ("held", ("a line",))):
        other = replace(item, **{name: value})
        again = memo.marked(other, "since step 3: 2", False)
        assert again is not marked and again == replace(other, superseded="since step 3: 2")


def test_keep_names_read_a_long_call_as_code_names_does() -> None:
    """Issue 24: the names of an assistant message longer than code_names' own memo keeps are
    memoised for keep_names too; what it reads is what code_names reads, on every call."""
    from relevance_memory._text import code_names
    from relevance_memory.pipeline.fidelity import keep_names

    long_args = " ".join(f"module_{i}.function_{i}" for i in range(400))  # ~9,000 characters
    assert len(long_args) > 2_000
    memory = RelevanceMemoryManager(max_input_tokens=8000)
    memory.extend([{"role": "user", "content": "go"}, {"role": "assistant", "content": long_args},
                   {"role": "user", "content": "next"}])
    messages = memory.messages
    expected = frozenset(code_names("goal_name", min_chars=3)) | frozenset(code_names(long_args, min_chars=3))
    assert keep_names(messages, 2, "goal_name") == expected
    assert keep_names(messages, 2, "goal_name") == expected  # the memo's answer
    assert "module_399.function_399" in expected


def test_a_memo_entry_keeps_the_sentence_and_its_line_is_made_from_it() -> None:
    """Issue 24: the extraction memo kept a new line string ("The assistant noted: “…”") per
    sentence — a third of a first build's memory on unique text. It keeps the sentence the
    segmenter's memo holds and the values its memo holds (the very objects); the line made from
    the message's head and the sentence is the line the summary shows, and costs what it did."""
    summarizer = OfflineSummarizer()
    item = _thought(1)
    lines = summarizer._extract(item)
    sentences = _sentences(item.text)
    assert lines
    for _, _, sentence, values, cost, _ in _each_line(lines):
        assert any(sentence is said for said in sentences)
        assert values is kept_values(sentence)
        assert cost == _estimate_tokens(f"The assistant noted: “{sentence}”") + 1
    prose = summarizer.summarize([item], level=1, max_tokens=300).prose
    assert prose.splitlines() == [f"The assistant noted: “{entry[2]}”" for entry in _each_line(lines)]
    tool = SummaryItem(id="t1", role="tool", msg_type="tool_result", text="exit code 0; wrote /tmp/out.json",
                       source="bash", superseded="")
    marked = replace(_thought(2), superseded="since step 4: other (k)")
    assert _head(tool) == "Tool bash returned: “" and _head(marked) == "The assistant noted (earlier; since step 4: other (k)): “"
    assert summarizer.summarize([tool], level=1, max_tokens=300).prose == f"Tool bash returned: “{summarizer._extract(tool)[2]}”"


def test_names_share_the_message_text_and_the_names_memo() -> None:
    """Issue 24: a message without calls is memoised by its own text string; a text without
    tabular rows is read as it is (its lines joined again hold the same names); the names are
    the code-name memo's tuple, each name one string whatever text it came from."""
    summarizer = OfflineSummarizer()
    plain = replace(_thought(1), tool_calls=())
    found = summarizer._names(plain)
    (key,) = summarizer._names_memo
    assert key is plain.text and found is kept_code_names(plain.text)
    assert found == tuple(code_names("\n".join(plain.text.splitlines())))
    rows = replace(_thought(2), text="-rw-r--r-- 1 root root 4096 Mar  1 12:00 setup_tools.py\nsee my_module.py\r\n")
    assert summarizer._names(rows) == ("setup_tools.py", "my_module.py", "tests/test_query.py")
    other = kept_code_names("then open my_module.py again")
    assert other[0] is summarizer._names(rows)[1]


def test_text_memo_keys_are_the_callers_strings() -> None:
    """Issue 24: a ``(text, variant)`` tuple per entry was half of what a text memo held; each
    variant has a dict keyed by the text itself."""
    memo: TextMemo[int] = TextMemo()
    text, other = "alpha beta", "gamma"
    memo.put(text, 1, variant=3)
    memo.put(other, 2)
    assert memo.get("alpha beta", 3) == 1 and memo.get("alpha beta") is None and memo.get("gamma") == 2
    assert [key for table in memo._data.values() for key in table] == [text, other]
    assert all(a is b for a, b in zip([key for table in memo._data.values() for key in table], [text, other], strict=True))
    assert len(memo) == 2


def test_names_of_a_text_and_its_calls_read_apart_equal_them_joined() -> None:
    """Issue 24: the text and each call's arguments are read apart (no joined copy kept); the
    names are those of them joined by newlines, in the same order, once each."""
    summarizer = OfflineSummarizer()
    texts = ["", "see my_module.py and ./tests/test_a.py.", "-rw-r--r-- 1 root root 4096 Mar  1 12:00 setup_tools.py", "x"]
    calls = [(), (("bash", '{"command": "cat my_module.py"}'),),
             (("edit", '{"path": "src/app_main.py"}'), ("bash", '{"command": "pytest ./tests/test_a.py -k QuerySet"}'))]
    for text in texts:
        for made in calls:
            item = SummaryItem(id="a", role="assistant", msg_type="tool_call", text=text, tool_calls=made)
            lines = "\n".join((line.split() or [""])[-1] if _is_table_row(line) else line for line in text.splitlines())
            assert summarizer._names(item) == tuple(code_names("\n".join([lines, *(a for _, a in made)])))


def _tests_run_again() -> RelevanceMemoryManager:
    """A 600-token memory of an agent running the same tests 30 times (new call ids each time),
    after its first build."""
    memory = RelevanceMemoryManager(max_input_tokens=600, keep_recent=2)
    history: list[dict[str, object]] = [{"role": "user", "content": "Run the tests of src/app.py until they pass."}]
    for n in range(30):
        history.append({"role": "assistant", "content": f"THOUGHT: run them again ({n}).",
                        "tool_calls": [{"id": f"call_{n}", "type": "function",
                                        "function": {"name": "bash", "arguments": '{"command": "pytest -q tests"}'}}]})
        history.append({"role": "tool", "tool_call_id": f"call_{n}", "content": f"{n} failed, 3 passed"})
    memory.extend(history)
    memory.build_context()
    return memory


def test_items_of_the_same_calls_share_one_tuple() -> None:
    """Issue 24: each archived message's item held its own tuple of ``(name, arguments)`` pairs
    (~50 bytes a stored message); the items of the same calls (a step run again, with new call
    ids) share one, equal to the calls, and the summary is the same."""
    from relevance_memory.summary._pyramid import SummaryItems

    memory = _tests_run_again()
    items = list(memory._summary_items._data.values())
    calls = [item.tool_calls for item in items if item.tool_calls]
    assert len(calls) > 10 and all(made is calls[0] for made in calls)
    assert calls[0] == (("bash", '{"command": "pytest -q tests"}'),)
    items_memo = SummaryItems()
    pairs = (("bash", "{}"),)
    assert items_memo.calls(pairs) is pairs and items_memo.calls((("bash", "{}"),)) is pairs and items_memo.calls(()) == ()


def test_the_messages_a_newer_one_replaced_share_its_note() -> None:
    """Issue 24: every message the same newer result replaced held its own copy of the note
    ("a newer result since step 30 (m61)"); they share one string now, equal to the note made
    afresh, and two builds of the same history mark the same items."""
    memory = _tests_run_again()
    marked = {message_id: kept[2] for message_id, kept in memory._summary_items._linked.items()}
    notes = [item.superseded for item in marked.values() if item.superseded]
    assert len(notes) > 10 and len(set(notes)) == 1 and all(note is notes[0] for note in notes)
    newest = memory.store.superseded_by[next(iter(marked))]
    while newest.newer in memory.store.superseded_by:
        newest = memory.store.superseded_by[newest.newer]
    assert notes[0] == f"a newer result since step {newest.newer_step} ({newest.newer})"
    again = {message_id: kept[2] for message_id, kept in _tests_run_again()._summary_items._linked.items()}
    assert again == marked


def test_a_full_extraction_memo_drops_from_its_largest_variant_not_the_oldest() -> None:
    """Helper-44's finding: a full memo emptied its *oldest variant* first — the user's task and
    the assistant's plans, read on every build, went before a flood of one-off tool output. Now
    the least recently used entry of the variant holding the most goes: the task stays a hit, the
    tool output keeps its newest, and the count stays at ``memo_size``."""
    summarizer = OfflineSummarizer(memo_size=4)
    task = _thought(0, role="user", text="Fix the bug in utils/dateparse.py; keep the public API as it is.")
    plan = _thought(1)
    kept_task, kept_plan = summarizer._extract(task), summarizer._extract(plan)
    outputs = [SummaryItem(id=f"t{n}", role="tool", msg_type="tool_result", source="bash",
                           text=f"FAILED tests/test_dateparse.py::test_case_{n} - AssertionError: {n} != {n + 1}")
               for n in range(10)]
    made = [summarizer._extract(item) for item in outputs]
    assert _entries(summarizer) == 4
    assert summarizer._extract(task) is kept_task and summarizer._extract(plan) is kept_plan  # hits
    tool_memo = summarizer._memo[("tool", "bash", "", False)]
    assert list(tool_memo) == [outputs[8].text, outputs[9].text]  # the newest two, oldest first
    assert all(tool_memo[item.text] is lines for item, lines in zip(outputs[8:], made[8:], strict=True))
    # a variant emptied by eviction leaves no empty dict behind
    other = OfflineSummarizer(memo_size=1)
    other._extract(task)
    other._extract(plan)
    assert list(other._memo) == [("assistant", "", "", False)] and _entries(other) == 1

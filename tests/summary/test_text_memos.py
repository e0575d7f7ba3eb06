"""The summarizer's and excerpts' text memos change nothing but speed (issue 24): a memoised
answer equals a fresh one, a caller cannot change it, and the memo stays bounded."""

from __future__ import annotations

from relevance_memory import _text
from relevance_memory._memo import TextMemo
from relevance_memory.summary import _extract

TEXTS = [
    "Edit /testbed/django/db/models/query.py: QuerySet.bulk_create ignores batch_size on 2024-03-01.",
    "total: 41872 rows; price=450 EUR; see ORD-1001 and mia_li_3668",
    "-rw-r--r-- 1 root root 4096 Mar  1 12:00 setup.py",
    "drwxr-xr-x  2 root root  4096 Mar  1 12:00 tests",
    "We must keep the public API. The fix goes in utils/dateparse.py. Ah! 1.",
    "",
]


def test_memoised_answers_equal_fresh_ones_and_are_copies() -> None:
    for text in TEXTS:
        for bare in (False, True):
            _extract._VALUES._data.clear()
            fresh = _extract.extract_values(text, bare_numbers=bare)
            again = _extract.extract_values(text, bare_numbers=bare)
            assert again == fresh and again is not fresh
            again.append("changed by a caller")
            assert _extract.extract_values(text, bare_numbers=bare) == fresh
        for chars in (3, 4):
            _text._CODE_NAMES._data.clear()
            fresh = _text.code_names(text, min_chars=chars)
            again = _text.code_names(text, min_chars=chars)
            assert again == fresh and again is not fresh
            again.clear()
            assert _text.code_names(text, min_chars=chars) == fresh
        _extract._SENTENCES._data.clear()
        fresh = _extract._sentences(text)
        fresh.append("x")
        assert _extract._sentences(text) == fresh[:-1]
        _extract._TABLE_ROWS._data.clear()
        assert _extract._is_table_row(text) == _extract._is_table_row(text)
    assert _extract._is_table_row(TEXTS[2]) and not _extract._is_table_row(TEXTS[0])
    # the variants are kept apart: min_chars=3 finds a name min_chars=4 does not
    assert _text.code_names("a_b x", min_chars=3) == ["a_b"] and _text.code_names("a_b x", min_chars=4) == []


def test_text_memo_is_bounded_by_characters_and_skips_long_texts() -> None:
    memo: TextMemo[int] = TextMemo(longest=10, max_chars=25)
    assert memo.put("0123456789", 1) == 1 and memo.get("0123456789") == 1
    assert memo.put("x" * 11, 2) == 2 and memo.get("x" * 11) is None  # too long: not kept
    memo.put("abcdefghij", 3)
    assert memo.get("0123456789") == 1 and memo.get("abcdefghij") == 3
    memo.put("klmnopqrst", 4)  # 30 characters > 25: emptied first, then kept
    assert memo.get("0123456789") is None and memo.get("klmnopqrst") == 4
    assert memo.get("klmnopqrst", variant="other") is None


def test_excerpts_are_memoised_per_counter_and_equal_fresh_ones() -> None:
    from relevance_memory._tokenizer import TiktokenCounter
    from relevance_memory.pipeline import fidelity

    class Unhashable(TiktokenCounter):  # a user's counter with __eq__ and no __hash__
        def __eq__(self, other: object) -> bool:
            return isinstance(other, Unhashable)

        __hash__ = None  # type: ignore[assignment]

    text = "\n".join([f"line {i}: value_{i} in mod_{i % 7}.py" for i in range(300)] + ["Traceback: KeyError 'x'"])
    keep = {"mod_3.py", "value_17"}
    counter = TiktokenCounter("o200k_base")
    fidelity._EXCERPTS._data.clear()
    fresh = fidelity._excerpt_text(text, 120, frozenset(keep), counter)
    assert fidelity.excerpt_text(text, 120, keep, counter) == fresh  # computed, then kept
    assert fidelity.excerpt_text(text, 120, keep, counter) == fresh  # from the memo
    assert fidelity._EXCERPTS.get(text, (120, frozenset(keep), counter)) == fresh
    assert fidelity.excerpt_text(text, 60, keep, counter) != fresh  # another budget: another excerpt
    odd = Unhashable("o200k_base")
    assert fidelity.excerpt_text(text, 120, keep, odd) == fresh  # not memoised, same answer
    assert "Traceback: KeyError 'x'" in fresh[0] and fresh[1] < fresh[2] == 301


def test_excerpt_token_counts_are_memoised_per_counter() -> None:
    from relevance_memory._tokenizer import TiktokenCounter
    from relevance_memory.pipeline import fidelity

    text = "naïve café — 東京 " * 40
    o200k, cl100k = TiktokenCounter("o200k_base"), TiktokenCounter("cl100k_base")
    fidelity._TOKENS._data.clear()
    for counter in (o200k, cl100k, o200k, cl100k):  # computed, then from the memo, each its own
        assert fidelity._tokens(counter, text) == counter.count_text(text)
    assert o200k.count_text(text) != cl100k.count_text(text)
    assert fidelity._tokens(o200k, "") == 0


def test_the_excerpt_memo_keys_each_text_with_its_variant() -> None:
    """Issue 24: the excerpts' memo keeps ``(text, variant)`` keys (nearly every excerpt has its
    own kept names: a dict per variant would cost more); the other memos a dict per variant."""
    from relevance_memory.pipeline import fidelity

    memo: TextMemo[int] = TextMemo(by_variant=False)
    text = "some text"
    memo.put(text, 1, variant=(5, frozenset({"a"})))
    assert memo.get("some text", (5, frozenset({"a"}))) == 1 and memo.get(text) is None and len(memo) == 1
    assert list(memo._data) == [(text, (5, frozenset({"a"})))]
    assert not fidelity._EXCERPTS._by_variant and _extract._VALUES._by_variant and _text._CODE_NAMES._by_variant


def test_shrunk_arguments_of_the_same_call_are_one_string() -> None:
    """Issue 24: every excerpt of a command run again kept its own copy of the same shrunk JSON
    arguments (~70 bytes a stored message of an agent's history); they are one string now,
    equal to the JSON made afresh."""
    import json

    from relevance_memory._tokenizer import TiktokenCounter
    from relevance_memory.pipeline import fidelity

    counter = TiktokenCounter("o200k_base")
    body = "\n".join(f"print('line {i} of a long script', value_{i})" for i in range(200))
    arguments = json.dumps({"command": f"cat <<'EOF' > run_me.py\n{body}\nEOF", "timeout": 30})
    fidelity._SHRUNK._data.clear()
    first = fidelity._shrink_arguments(arguments, 80, frozenset({"run_me.py"}), counter)
    again = fidelity._shrink_arguments("" + arguments, 80, frozenset({"run_me.py"}), counter)
    fidelity._SHRUNK._data.clear()
    fresh = fidelity._shrink_arguments(arguments, 80, frozenset({"run_me.py"}), counter)
    assert again is first and fresh == first and fresh is not first
    assert json.loads(first)["timeout"] == 30 and len(first) < len(arguments)

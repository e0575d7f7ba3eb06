"""Issue 13, summaries under pressure (SPEC §7): the newest facts win, values and tool calls
outrank prose and filler, something always remains, and summaries of real runs read as text.

Each kind runs over several shapes (user facts, tool results, tool calls; one run or many)
and a sweep of budgets, so a rule that holds at one budget only does not pass.
"""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from typing import Any

import pytest

from relevance_memory import RelevanceMemoryManager, load_transcript
from relevance_memory._tokenizer import TiktokenCounter
from relevance_memory.summary._summary import (
    SUMMARY_MARKER,
    OfflineSummarizer,
    SummaryCache,
    SummaryItem,
    _sentences,
    build_pyramid,
    extract_values,
    pointer_summary,
    pointer_tokens,
)

COUNTER = TiktokenCounter()
CAPS = list(range(20, 400, 9))


def _user(i: int, text: str) -> SummaryItem:
    return SummaryItem(f"m{i}", "user", "user_chat", text, content_hash=f"h{i}")


def _tool(i: int, text: str, name: str = "get_order") -> SummaryItem:
    return SummaryItem(f"m{i}", "tool", "tool_result", text, content_hash=f"h{i}", source=name)


def _call(i: int, name: str, arguments: dict[str, Any]) -> SummaryItem:
    return SummaryItem(f"m{i}", "assistant", "tool_call", "", content_hash=f"h{i}", tool_calls=((name, json.dumps(arguments)),))


FILLER = [_user(100 + k, f"Thanks, that sounds fine to me, I appreciate the help number {k}.") for k in range(3)]


def shapes() -> dict[str, tuple[list[SummaryItem], list[str]]]:
    """Histories where a fact changes over time; the values of each version, oldest first."""
    meeting = [
        _user(1, "The review meeting is on 2026-03-02 at 15:00 in Room 101."),
        *FILLER,
        _user(5, "Change of plan: the review meeting is on 2026-03-09 at 17:30 in Room 204."),
        _user(6, "Final update: the review meeting is on 2026-03-16 at 09:45 in Room 318."),
    ]
    order = [
        _tool(1, json.dumps({"order_id": "ORD-1001", "status": "pending", "eta": "2026-05-01"})),
        *FILLER,
        _tool(5, json.dumps({"order_id": "ORD-1001", "status": "packed", "eta": "2026-05-03"})),
        _tool(6, json.dumps({"order_id": "ORD-1001", "status": "shipped", "eta": "2026-05-07"})),
    ]
    calls = [
        _call(1, "search_flights", {"date": "2026-06-01", "origin": "JFK"}),
        *FILLER,
        _call(5, "search_flights", {"date": "2026-06-08", "origin": "EWR"}),
        _call(6, "search_flights", {"date": "2026-06-15", "origin": "LGA"}),
    ]
    return {
        "meeting": (meeting, ["2026-03-02", "2026-03-09", "2026-03-16"]),
        "order": (order, ["2026-05-01", "2026-05-03", "2026-05-07"]),
        "calls": (calls, ["2026-06-01", "2026-06-08", "2026-06-15"]),
    }


def _rendered(items: list[SummaryItem], cap: int, *, runs: int = 1) -> str:
    size = max(1, len(items) // runs)
    split = [items[i : i + size] for i in range(0, len(items), size)]
    result = build_pyramid(split, summarizer=OfflineSummarizer(), cache=SummaryCache(), count=COUNTER.count_message,
                           role="system", cap=cap)
    assert result.tokens <= cap
    parts = [s.message["content"] for s in result.summaries]
    if result.pointer is not None:
        parts.append(result.pointer.message["content"])
    return "\n".join(parts)


# --------------------------------------------------------------------------- 6. newest first
@pytest.mark.parametrize("shape", ["meeting", "order", "calls"])
@pytest.mark.parametrize("runs", [1, 3])
def test_a_newer_value_survives_whenever_an_older_one_does(shape: str, runs: int) -> None:
    items, versions = shapes()[shape]
    seen_newest = False
    for cap in CAPS:
        text = _rendered(items, cap, runs=runs)
        present = [v in text for v in versions]
        for older, newer in itertools.pairwise(present):
            assert newer or not older, f"cap {cap}: an older value outlived the newer one\n{text}"
        seen_newest |= present[-1]
    assert seen_newest, "the newest value never made it into a summary"


@pytest.mark.parametrize("max_tokens", [30, 45, 60, 90, 140, 400])
def test_the_offline_draft_keeps_the_newest_sentences_and_values(max_tokens: int) -> None:
    items, versions = shapes()["meeting"]
    draft = OfflineSummarizer().summarize(items, level=1, max_tokens=max_tokens)
    in_prose = [v in draft.prose for v in versions]
    in_values = [v in draft.exact_values for v in versions]
    for present in (in_prose, in_values):
        for older, newer in itertools.pairwise(present):
            assert newer or not older
    assert in_values[-1]


# --------------------------------------------------------------------------- values and tools outrank prose
@pytest.mark.parametrize("shape", ["meeting", "order", "calls"])
def test_values_and_tool_calls_outrank_prose_and_filler(shape: str) -> None:
    items, _ = shapes()[shape]
    full = OfflineSummarizer().summarize(items, level=2, max_tokens=2000)
    for cap in CAPS:
        text = _rendered(items, cap)
        prose_lines = [line for line in text.splitlines() if line.startswith(("The user said", "Tool ", "The assistant"))]
        if prose_lines:  # a quoted sentence is only there when every value and tool call is
            assert all(v in text for v in full.exact_values), cap
            assert all(t in text for t in full.tools_used), cap
        assert "none held" not in text


def test_filler_never_takes_the_place_of_a_value() -> None:
    items = [*FILLER, _tool(9, "41872"), _call(10, "sql", {"q": "select count(*) from table_a"})]
    draft = OfflineSummarizer().summarize(items, level=1, max_tokens=60)
    assert draft.exact_values == ["41872"]
    assert draft.tools_used == ['sql({"q": "select count(*) from table_a"})']
    assert "Thanks" not in draft.prose


# --------------------------------------------------------------------------- 7. something remains
@pytest.mark.parametrize("count", [1, 5, 60, 400])
def test_a_pointer_remains_when_no_summary_fits(count: int) -> None:
    items = [_tool(i, f"line {i}: " + "x" * 400) for i in range(count)]
    ids = [i.id for i in items]
    least = pointer_tokens(ids, role="system", count=COUNTER.count_message)
    for cap in range(least, least + 60, 7):
        result = build_pyramid([items], summarizer=OfflineSummarizer(), cache=SummaryCache(), count=COUNTER.count_message,
                               role="system", cap=cap)
        shown = result.summaries or ([result.pointer] if result.pointer else [])
        assert shown, f"cap {cap}: archived messages vanished without a trace"
        text = shown[0].message["content"]
        assert text.startswith(SUMMARY_MARKER) and "restorable" in text.replace("(restorable)", "restorable")
        assert ids[0] in text and ids[-1] in text
        assert sum(s.tokens for s in shown) <= cap
    assert pointer_summary(ids, role="system", cap=least - 1, count=COUNTER.count_message) is None
    roomy = pointer_summary(ids, role="user", cap=10_000, count=COUNTER.count_message)
    assert roomy is not None and f"{count} archived message(s)" in roomy.message["content"]


# --------------------------------------------------------------------------- 8. sentences and values that read well
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Plan:\n1. Read src/app.py first.\n2. Then run the tests.", ["Plan:", "Read src/app.py first.", "Then run the tests."]),
        ("We use e.g. version 3.2.1 of the lib. It works.", ["We use e.g. version 3.2.1 of the lib.", "It works."]),
        ("THOUGHT: the bug is in `query.py`.\n\n```bash\nls -la\n```", ["the bug is in `query.py`."]),
        ("- first item here\n- second item there", ["first item here", "second item there"]),
        ("我们明天上午10点见。不要迟到！", ["我们明天上午10点见。", "不要迟到！"]),
        ("Dr. Smith paid $1,250.50 on May 3. He left.", ["Dr. Smith paid $1,250.50 on May 3.", "He left."]),
        ("1.\n\nAh!\nOK", []),
    ],
)
def test_sentences_never_split_into_fragments(text: str, expected: list[str]) -> None:
    got = _sentences(text)
    assert [s for s in got if s != "Plan:"] == [s for s in expected if s != "Plan:"]


@pytest.mark.parametrize(
    ("text", "kept", "left_out"),
    [
        ("-rw-r--r--  1 root root  807 Oct 24 00:15 .editorconfig\ndrwxr-xr-x 12 root root 4096 Nov 19 2024 django",
         [], ["807", "Oct 24", "00:15", "4096", ".editorconfig"]),
        ("The budget is 50,000 EUR and the deadline 2026-11-20.", ["50,000 EUR", "2026-11-20"], ["50,000"]),
        ("Order ORD-1001 costs $1,250 for 3 bags; total: 41872", ["ORD-1001", "$1,250", "3 bags", "total: 41872"], ["41872"]),
        ("Room 418 at 10:30 pm, see src/app/models.py", ["Room 418", "10:30 pm", "src/app/models.py"], ["418"]),
        ("It returned 4096 and 184 and 2", [], ["4096", "184", "2"]),
        ("Use a queue/stack, e.g. a deque; see tests/prefetch_related and src/app/models.py",
         ["tests/prefetch_related", "src/app/models.py"], ["queue/stack", "e.g"]),
        ("PID   USER  %CPU %MEM  TIME\n 1234 root  12.5  3.1  00:01:02", [], ["1234", "12.5", "00:01"]),
    ],
)
def test_exact_values_are_what_a_reader_needs(text: str, kept: list[str], left_out: list[str]) -> None:
    values = extract_values(text)
    for value in kept:
        assert value in values
    for value in left_out:
        assert value not in values


def test_a_short_tool_result_keeps_its_bare_number() -> None:
    assert extract_values("41872", bare_numbers=True) == ["41872"]
    draft = OfflineSummarizer().summarize([_tool(1, "41872", "sql")], level=1, max_tokens=200)
    assert draft.exact_values == ["41872"] and "41872" in draft.prose


_LS_ROW = re.compile(r"^\s*[dl-][rwx-]{9}")


def _real_runs(data_dir: Path) -> list[tuple[str, list[dict[str, Any]]]]:
    runs = []
    for path in sorted((data_dir / "swebench_trajectories").glob("*.json"))[:5]:
        runs.append((path.stem, load_transcript(path).messages))
    tau = data_dir / "tau_bench" / "gpt-4o-airline.json"
    for index in (0, 40, 120):
        runs.append((f"tau{index}", load_transcript(tau, index=index).messages))
    return runs


@pytest.mark.data
@pytest.mark.parametrize("budget", [3000, 8000])
def test_summaries_of_real_runs_quote_sentences_and_reader_values(data_dir: Path, budget: int) -> None:
    for name, messages in _real_runs(data_dir):
        memory = RelevanceMemoryManager(max_input_tokens=budget)
        memory.extend(messages)
        built = memory.build_context()
        ls_tokens = {tok for m in messages if m["role"] == "tool" for line in str(m.get("content")).splitlines()
                     if _LS_ROW.match(line) for tok in line.split()[:-1]}
        # a value that also stands outside a table row (matplotlib-25311: line 2025 of a `cat -n`
        # listing, and the year of an `ls -l` column) is a name the agent may use again
        ls_tokens -= {tok for m in messages for line in str(m.get("content")).splitlines()
                      if not _LS_ROW.match(line) for tok in re.findall(r"[\w.-]+", line)}
        for summary in built.record.summaries:
            for value in summary.exact_values:
                assert value not in ls_tokens, f"{name}: ls -l column {value!r} listed as an exact value"
                assert not re.fullmatch(r"\d{1,2}", value), f"{name}: bare small number {value!r}"
        for message in built.messages:
            content = str(message.get("content"))
            if not content.startswith(SUMMARY_MARKER):
                continue
            for quoted in re.findall(r"“(.*?)”", content):
                words = re.findall(r"[^\W\d_]{2,}", quoted)
                assert len(words) >= 2 or re.search(r"\d", quoted), f"{name}: fragment {quoted!r} quoted"

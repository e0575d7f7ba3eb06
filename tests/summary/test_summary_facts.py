"""What the user states outlives what they ask, and a re-summarisation keeps what an earlier
summary held (issue 23 item 3: fact retention across many compactions)."""

from __future__ import annotations

import pytest

from relevance_memory._tokenizer import TiktokenCounter
from relevance_memory.summary._extract import fact_clause, is_question
from relevance_memory.summary._pyramid import RenderedSummary, held_lines, mark_held
from relevance_memory.summary._summary import LLMSummarizer, OfflineSummarizer, SummaryCache, SummaryItem, build_pyramid

COUNTER = TiktokenCounter()

FACTS = [
    "For context: the reviewer for this is Ysolde Drummarch.",
    "Our staging server listens on port 46247.",
    "We agreed to ship the release under the codename Larkspur.",
]


def chat(questions: int) -> list[SummaryItem]:
    """A chat opened by a greeting: three stated facts, then many questions that carry a number."""
    items = [SummaryItem("m1", "user", "user_chat", "Hi! I'll ask about my hobbies today.", "h1")]
    items += [SummaryItem(f"m{2 + k}", "user", "user_chat", fact, f"h{2 + k}") for k, fact in enumerate(FACTS)]
    for k in range(questions):
        items.append(SummaryItem(f"q{k}", "user", "user_chat", f"Which glaze suits stoneware fired at {1100 + k} degrees?", f"hq{k}"))
        items.append(SummaryItem(f"a{k}", "assistant", "assistant_chat", "A matte glaze suits it; test a tile first.", f"ha{k}"))
    return items


@pytest.mark.parametrize(("text", "asks"), [
    ("How do I keep motivated with learning Portuguese?(question 93)", True),
    ("how do i reset the router", True),
    ("Can you book the 9:30 flight", True),
    ("你明天有空吗", True),
    ("Our staging server listens on port 46247.", False),
    ("I can do it on Monday.", False),
    ("Whatever works for you.", False),
    ("我明天去北京。", False),
])
def test_is_question(text: str, asks: bool) -> None:
    assert is_question(text) is asks


@pytest.mark.parametrize("max_tokens", [120, 160, 240, 400])
def test_stated_facts_go_before_newer_questions(max_tokens: int) -> None:
    draft = OfflineSummarizer().summarize(chat(60), level=2, max_tokens=max_tokens)
    kept = [fact for fact in FACTS if fact_clause(fact) in draft.prose]
    # the newest facts first; none of the 60 newer questions (each with a number) pushes one out
    assert kept == FACTS[len(FACTS) - len(kept):]
    assert len(kept) >= min(len(FACTS), max_tokens // 60)
    # a name stated by the user ("Ysolde Drummarch", "Larkspur") counts as a fact, not filler
    if max_tokens >= 160:
        assert kept == FACTS


@pytest.mark.parametrize(("text", "clause"), [
    ("For the record: the reviewer for this is Ana Diaz; copy them on the outcome.", "the reviewer for this is Ana Diaz"),
    ("Decision made: we store timestamps as epoch-millis-UTC.", "we store timestamps as epoch-millis-UTC."),
    ("Hard constraint: do not contact anyone before 09:30 CET.", "do not contact anyone before 09:30 CET."),
    ("time: 15:00", "time: 15:00"),
    ("Room 418: the key is at the desk.", "Room 418: the key is at the desk."),
    ("We ship on Friday; it is late.", "We ship on Friday"),
])
def test_fact_clause_keeps_the_clause_with_the_fact(text: str, clause: str) -> None:
    assert fact_clause(text) == clause


def test_a_name_the_user_states_is_kept_like_a_value() -> None:
    items = [SummaryItem("m1", "user", "user_chat", "The product owner for this is Tamsin Castellanos.", "h1"),
             *[SummaryItem(f"m{k}", "assistant", "assistant_chat", f"Step {k} used /srv/app/job_{k}.py on 2026-03-0{k % 9 + 1}.", f"h{k}")
               for k in range(2, 40)]]
    draft = OfflineSummarizer().summarize(items, level=2, max_tokens=150)
    assert "The user said: “The product owner for this is Tamsin Castellanos.”" in draft.prose


def test_held_lines_are_kept_first_when_summarised_again() -> None:
    newer = "Our office moved to 12 Harbour Road."
    items = [*chat(60), SummaryItem("m99", "user", "user_chat", newer, "h99")]
    small = OfflineSummarizer().summarize(items[:4], level=1, max_tokens=400)
    rendered = RenderedSummary(1, {"role": "system", "content": small.prose}, 0, tuple(i.id for i in items[:4]), ())
    lines = held_lines([rendered])
    assert {f"The user said: “{fact_clause(fact)}”" for fact in FACTS} == lines
    marked = mark_held(items, lines)
    assert [i.id for i in marked if i.held] == ["m2", "m3", "m4"]  # the greeting holds no fact
    # room for two lines: the newest facts win a first summary; a summary made again keeps the
    # ones the earlier summary held, held longest first, before the newer fact
    plain = OfflineSummarizer().summarize(items, level=2, max_tokens=100)
    again = OfflineSummarizer().summarize(marked, level=2, max_tokens=100)
    assert newer in plain.prose and fact_clause(FACTS[2]) in plain.prose and fact_clause(FACTS[1]) not in plain.prose
    assert fact_clause(FACTS[0]) in again.prose and fact_clause(FACTS[1]) in again.prose and newer not in again.prose
    roomy = OfflineSummarizer().summarize(marked, level=2, max_tokens=400)
    assert all(fact_clause(fact) in roomy.prose for fact in [*FACTS, newer])
    assert SummaryCache.key("s", 2, items, 100) != SummaryCache.key("s", 2, marked, 100)


def test_a_level2_merge_keeps_what_the_level1_summaries_held() -> None:
    items = chat(80)
    runs = [items[k:k + 20] for k in range(0, len(items), 20)]
    for cap in range(120, 420, 20):
        result = build_pyramid(runs, summarizer=OfflineSummarizer(), cache=SummaryCache(), count=COUNTER.count_message,
                               role="system", cap=cap)
        level1 = build_pyramid(runs[:1], summarizer=OfflineSummarizer(), cache=SummaryCache(),
                               count=COUNTER.count_message, role="system", cap=cap)
        assert result.summaries and result.summaries[0].level == 2
        first = [f for f in FACTS if f in level1.summaries[0].message["content"]]
        merged = result.summaries[0].message["content"]
        assert first and all(f in merged for f in first), cap


def test_the_llm_prompt_names_the_held_facts() -> None:
    lines = {f"The user said: “{FACTS[1]}”"}
    items = mark_held(chat(2), lines)
    prompt = LLMSummarizer(client=None, model="m").prompt(items, level=2, max_tokens=200)[1]["content"]
    assert prompt.endswith(f"keep each of them:\n- The user said: “{FACTS[1]}”")
    assert "keep each of them" not in LLMSummarizer(client=None, model="m").prompt(chat(2), level=2, max_tokens=200)[1]["content"]

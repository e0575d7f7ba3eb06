"""Summaries of superseded messages (issue 11): earlier values are marked, and go first."""

from __future__ import annotations

from relevance_memory.summary._summary import OfflineSummarizer, SummaryCache, SummaryItem


def items() -> list[SummaryItem]:
    return [
        SummaryItem("m3", "user", "user_chat", "I love sushi, it is my favourite food since 2019.", "h3",
                    superseded="since step 31: dislikes sushi (sushi)"),
        SummaryItem("m9", "user", "user_chat", "My flight to Lisbon leaves on 2026-12-04 at 9:30.", "h9"),
        SummaryItem("m31", "user", "user_chat", "Honestly I don't like Sushi anymore.", "h31", supersedes=True),
    ]


def test_superseded_values_are_shown_as_earlier() -> None:
    draft = OfflineSummarizer().summarize(items(), level=1, max_tokens=400)
    lines = draft.prose.splitlines()
    assert lines[0] == "The user said (earlier; since step 31: dislikes sushi (sushi)): “I love sushi, it is my favourite food since 2019.”"
    assert lines[2] == "The user said: “Honestly I don't like Sushi anymore.”"  # a plain name sentence, kept as the newer value


def test_under_pressure_earlier_values_go_first() -> None:
    draft = OfflineSummarizer().summarize(items(), level=1, max_tokens=110)
    assert "I love sushi" not in draft.prose
    assert "don't like Sushi" in draft.prose and "Lisbon" in draft.prose


def test_the_mark_is_part_of_the_cache_key() -> None:
    plain = SummaryItem("m3", "user", "user_chat", "I love sushi.", "h3")
    marked = SummaryItem("m3", "user", "user_chat", "I love sushi.", "h3", superseded="since step 31: dislikes sushi")
    assert SummaryCache.key("s", 1, [plain], 400) != SummaryCache.key("s", 1, [marked], 400)

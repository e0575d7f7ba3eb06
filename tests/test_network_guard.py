"""The network guard itself: tests cannot open sockets unless they record a cassette."""

from __future__ import annotations

import json
import socket

import httpx2
import pytest

from relevance_memory import LLMScorer, ScoreItem, ScoreSource, TaskGoal


def test_sockets_are_blocked() -> None:
    # our own socket, closed afterwards: socket.create_connection leaves it open when the guard
    # raises (it closes only on OSError), which filterwarnings=error turns into a failure
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock, pytest.raises(RuntimeError, match="Network is disabled"):
        sock.connect(("127.0.0.1", 9))


def test_llm_scorer_without_cassette_cannot_reach_the_network() -> None:
    """No cassette: the request is refused; the scorer degrades to fallback scores."""
    seen: list[str] = []

    def log(request: httpx2.Request) -> None:
        seen.append(json.loads(request.content)["model"])

    scorer = LLMScorer(
        "gpt-4o-mini", api_key="sk-test", http_client=httpx2.Client(event_hooks={"request": [log]}),
        sleep=lambda _s: None,
    )
    item = ScoreItem(id="m1", role="user", msg_type="user_chat", source="user", text="hi")
    result = scorer.score(TaskGoal(final="x"), [item])
    assert seen  # it tried …
    assert result.scores[0].source == ScoreSource.FALLBACK  # … and was refused
    assert "Connection error" in result.warnings[0] or "Network is disabled" in result.warnings[0]

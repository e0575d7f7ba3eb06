"""A recorded SWE-bench agent run, cut into what a framework's agent loop replays.

Shared by ``examples/langchain_agent.py`` and ``examples/agents_sdk.py``: a local fake model
answers each model call with the run's next recorded assistant message (tool calls
included), and the run's ``bash`` tool answers each call with the output recorded for that
call id — so the framework's own runner drives a real, long tool loop with no network.

A run is ``system, user (task), assistant, tool, …``; an assistant message without a tool
call ends one agent run (the framework returns), and the user message after it (the
harness's format notice) starts the next. Every request the fake model receives is measured
and printed as one ``TOTAL`` line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TRANSCRIPT = ROOT / "fixtures" / "django__django-15280.json"


@dataclass
class SweRun:
    """One recorded run: its system prompt, ``bash`` tool schema, the user turns that start an
    agent run each, the assistant replies in order and every tool output by call id."""

    name: str
    system: str
    tools: list[dict[str, Any]]
    turns: list[dict[str, Any]]
    replies: list[dict[str, Any]]
    outputs: dict[str, str]


def load_run(path: Path) -> SweRun:
    """Read a transcript (``{"messages": [...], "tools": [...]}``, OpenAI chat format)."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    messages = data["messages"]
    assert messages[0]["role"] == "system" and messages[1]["role"] == "user", path
    return SweRun(
        name=Path(path).stem,
        system=messages[0]["content"],
        tools=data.get("tools") or [],
        turns=[m for m in messages[1:] if m["role"] == "user"],
        replies=[m for m in messages if m["role"] == "assistant"],
        outputs={m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"},
    )


@dataclass
class Requests:
    """The size of every request the fake model received (tokens), against the budget."""

    budget: int | None
    sizes: list[int] = field(default_factory=list)

    @property
    def largest(self) -> int:
        return max(self.sizes, default=0)

    @property
    def over(self) -> int:
        return sum(size > self.budget for size in self.sizes) if self.budget else 0

    def report(self, label: str, out: TextIO) -> None:
        """One line per call, then ``TOTAL``."""
        for n, size in enumerate(self.sizes, start=1):
            print(f"{n:>4} {size:>7} tokens", file=out)
        budget = f"budget={self.budget}" if self.budget else "budget=none"
        print(f"TOTAL {label} calls={len(self.sizes)} largest={self.largest} {budget} over_budget={self.over} "
              f"first={self.sizes[0] if self.sizes else 0} last={self.sizes[-1] if self.sizes else 0}", file=out)

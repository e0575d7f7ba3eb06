"""Values the goal names survive (issue 23 item 2).

A tool result that answers exactly what the goal asks (a status, an owner, an id the goal
names) keeps those values in the context at every budget that builds — verbatim, in an excerpt
or elided line ("answers the goal: status: escalated"), or as a summary fact — before prose.
"""

from __future__ import annotations

import json
from typing import Any

from relevance_memory import ContextOverflowError, RelevanceMemoryManager
from relevance_memory._tokenizer import TiktokenCounter
from relevance_memory.pipeline.fidelity import elide_message, excerpt_message, goal_fields

FAQ = ("Our returns policy allows returns within thirty days of delivery for unused items in the original "
       "packaging, and refunds go to the original payment method within five business days. ") * 2
GOAL = "What is the status and who is the owner of ticket T-4821?"
TICKET = {"ticket_id": "T-4821", "status": "escalated", "owner": "Marta Kovacs", "notes": FAQ}


def _history() -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = [{"role": "system", "content": "You are a support agent. Use the tools."},
                                     {"role": "user", "content": GOAL}]

    def call(n: int, name: str, args: dict[str, Any], result: dict[str, Any]) -> None:
        history.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{n}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]})
        history.append({"role": "tool", "tool_call_id": f"c{n}", "content": json.dumps(result)})

    call(0, "search_faq", {"query": "returns"}, {"answer": FAQ})
    call(1, "get_ticket", {"ticket_id": "T-4821"}, TICKET)
    for k in range(6):
        call(2 + k, "search_faq", {"query": f"faq {k}"}, {"answer": f"{FAQ} ({k})"})
    history.append({"role": "user", "content": "So?"})
    return history


def test_the_fields_that_answer_the_goal() -> None:
    assert goal_fields(json.dumps(TICKET), GOAL) == "ticket_id: T-4821, status: escalated, owner: Marta Kovacs"
    nested = {"order": {"order_id": "A-17", "status": "shipped", "carrier": "DHL"}, "items": [1, 2]}
    assert goal_fields(json.dumps(nested), "Where is order A-17? I need its status.") == "order_id: A-17, status: shipped"
    assert goal_fields("status: escalated", GOAL) == ""  # not JSON: nothing is guessed
    assert goal_fields(json.dumps({"answer": FAQ}), GOAL) == ""


def test_an_elided_or_excerpted_result_names_the_fields_the_goal_asks_for() -> None:
    counter = TiktokenCounter()
    memory = RelevanceMemoryManager()
    memory.extend(_history())
    message = memory.messages[5]
    assert message.role == "tool" and "escalated" in str(message.content)
    for rendition in (elide_message(message, frozenset(), counter, GOAL), excerpt_message(message, 20, frozenset(), counter, GOAL)):
        assert "answers the goal: ticket_id: T-4821, status: escalated, owner: Marta Kovacs" in rendition.message["content"]


def test_the_status_and_owner_the_goal_asks_for_survive_at_every_budget() -> None:
    history = _history()
    built_any = 0
    for budget in range(150, 900, 25):
        memory = RelevanceMemoryManager(keep_recent=1)
        memory.extend(history)
        try:
            built = memory.build_context(budget=budget)
        except ContextOverflowError:
            continue
        built_any += 1
        text = "\n".join(str(m.get("content")) for m in built.messages)
        assert "escalated" in text and "Marta Kovacs" in text, f"{budget} tokens:\n{text}"
    assert built_any > 20

"""The LLM scorer's prompt carries the supersede marks (issue 11)."""

from __future__ import annotations

import json

from relevance_memory import RelevanceMemoryManager
from relevance_memory.pipeline import BuildState
from relevance_memory.pipeline.partition import partition
from relevance_memory.pipeline.prefilter import prefilter
from relevance_memory.pipeline.score import request
from relevance_memory.scoring._prompts import load_prompt
from relevance_memory.scoring._scorer import ScoreItem


def test_superseded_item_is_marked_in_the_prompt() -> None:
    prompt = load_prompt("score_v1")
    plain = ScoreItem(id="m3", role="tool", msg_type="tool_result", source="bash", text="1 failed")
    marked = ScoreItem(id="m3", role="tool", msg_type="tool_result", source="bash", text="1 failed",
                       superseded_by="m9: the same call (bash pytest) returned a newer result at step 5")
    assert prompt.render_item(marked) == prompt.render_item(plain) + (
        "\n(superseded by m9: the same call (bash pytest) returned a newer result at step 5; its value is out of date)")


def test_score_request_items_carry_the_mark() -> None:
    def call(cid: str, cmd: str) -> dict[str, object]:
        return {"role": "assistant", "content": None, "tool_calls": [
            {"id": cid, "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": cmd})}}]}

    memory = RelevanceMemoryManager(keep_recent=1)
    memory.extend([
        {"role": "user", "content": "Make the tests pass."},
        call("c1", "pytest -q"), {"role": "tool", "tool_call_id": "c1", "content": "1 failed " + "x " * 400},
        call("c2", "pytest -q"), {"role": "tool", "tool_call_id": "c2", "content": "1 passed " + "y " * 400},
        {"role": "user", "content": "Now write the changelog."},
    ])
    state = BuildState(budget=400, goal=memory.goal, build_number=1)
    seams = memory._seams()
    state.partition = partition(state, seams)
    state.prefilter = prefilter(state, seams)
    items = {i.id: i for i in request(state, seams).items}
    assert items["m2"].superseded_by.startswith("m4: the same call (bash")
    assert items["m4"].superseded_by == ""

"""Issue 24: the shortcuts that keep a compaction from touching every message give what the
full passes give, build for build, on a real agent run with scores, subtasks and forgetting."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from relevance_memory import RelevanceMemoryManager, load_transcript
from relevance_memory.pheromone._field import PheromoneField
from relevance_memory.pipeline import partition as partition_module

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "django__django-15280.json"


def seen(built: Any) -> list[str]:
    """What a build gave: its context and its record (the clock and ids aside)."""
    return [json.dumps(built.messages, sort_keys=True),
            built.record.model_dump_json(exclude={"created_at", "build_id", "base_build_id", "latency_ms"})]


def run(**config: Any) -> list[str]:
    """Builds over the django run, in steps, with subtask changes: each build's context and record."""
    messages = load_transcript(FIXTURE).messages
    memory = RelevanceMemoryManager(max_input_tokens=3000, keep_recent=2, prefilter=True, prefilter_top_n=12, **config)
    out: list[str] = []
    for n, end in enumerate(range(40, len(messages) + 1, 26)):
        memory.extend(messages[len(memory.messages):end])
        if n % 2:
            memory.set_goal(subtask=f"step {n}: check the migration and run the tests again")
        out += seen(memory.build_context(compact=n % 3 == 0))
    return out


def test_notable_cells_give_the_prefilter_and_forgetting_of_the_full_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    fast = run()
    assert any('"mode":"compacted"' in r for r in fast) and any("prefiltered out" in r for r in fast)
    monkeypatch.setattr(PheromoneField, "notable_ids", lambda self: None)  # every cell read, as before issue 24
    assert run() == fast


def test_notable_cells_are_the_scored_and_the_strong() -> None:
    memory = RelevanceMemoryManager(max_input_tokens=3000, keep_recent=2, prefilter=True, prefilter_top_n=12)
    memory.extend(load_transcript(FIXTURE).messages[:120])
    field = memory.pheromone
    assert isinstance(field, PheromoneField)
    before = set(field.notable_ids() or ())
    assert before == {mid for mid in (m.id for m in memory.messages)
                      if (c := field.cell(mid)) is not None and c.strength >= field.config.prefilter_pass}
    memory.build_context()
    after = field.notable_ids() or set()
    scored = {mid for mid in (m.id for m in memory.messages) if (c := field.cell(mid)) and c.latest_score is not None}
    assert scored and scored <= after and before <= after


def test_excerpted_chains_are_recounted_as_a_second_grouping_would(monkeypatch: pytest.MonkeyPatch) -> None:
    fast = run(excerpt_share=1 / 64)
    assert any('"fidelity":"excerpt"' in r for r in fast)

    def regroup(chains: Any, roots: Any, renditions: Any, messages: Any) -> Any:
        skip = {i for c in chains.values() for i in c.members} ^ set(range(len(messages)))
        return partition_module.group_chains(messages, roots, skip, {i: r.tokens for i, r in renditions.items()})

    monkeypatch.setattr(partition_module, "_with_renditions", regroup)
    assert run(excerpt_share=1 / 64) == fast


def chat_run() -> list[str]:
    """A 120-turn chat built every 10 turns under changing subtasks, filler scored 1: forgetting
    and the memory's always-pass set at work."""
    from relevance_memory.testing import FunctionScorer

    scorer = FunctionScorer(lambda item, goal: 5 if "trip" in (item.text or "") else (3 if "museum" in (item.text or "") else 1))
    memory = RelevanceMemoryManager(max_input_tokens=900, keep_recent=2, prefilter=True, prefilter_top_n=10, scorer=scorer)
    memory.set_goal(final="Plan the Lisbon trip within the budget the user gave")
    out: list[str] = []
    for turn in range(120):
        text = ("I want the trip to stay under 900 euros" if turn % 17 == 0 else
                "Which museum opens on Mondays?" if turn % 11 == 0 else f"Some small talk about the weather, turn {turn}")
        memory.extend([{"role": "user", "content": text}, {"role": "assistant", "content": f"Noted ({turn})."}])
        if turn % 10 == 9:
            memory.set_goal(subtask=f"answer turn {turn}")
            out += seen(memory.build_context(compact=True))
    return out


def test_a_chat_with_forgetting_builds_as_the_full_pass_would(monkeypatch: pytest.MonkeyPatch) -> None:
    fast = chat_run()
    assert any("forgotten: strength" in r for r in fast) and any("prefiltered out" in r for r in fast)
    monkeypatch.setattr(PheromoneField, "notable_ids", lambda self: None)
    assert chat_run() == fast


def test_the_chain_index_builds_as_grouping_every_message_would(monkeypatch: pytest.MonkeyPatch) -> None:
    """The memory's chain index (grown build by build) gives the contexts and records that
    grouping the whole history in every build gave (issue 24), excerpts included."""
    fast = run(excerpt_share=1 / 64)
    assert any('"fidelity":"excerpt"' in r for r in fast)
    split = partition_module.split_history

    def every_message(*args: Any, grouped: Any = None, **kwargs: Any) -> Any:
        return split(*args, **kwargs)  # no index: group every message, ask every member

    monkeypatch.setattr(partition_module, "split_history", every_message)
    assert run(excerpt_share=1 / 64) == fast


def test_the_chain_index_follows_merges_exclusions_and_pending_calls() -> None:
    """Grown message by message — a pinned prompt, trace chains that later merge, an orphan
    tool result, a call still waiting for its result — the index and its skip view equal a
    grouping of the whole store at every length."""
    from relevance_memory.pipeline._state import ChainIndex
    from relevance_memory.pipeline.partition import excluded_messages
    from relevance_memory.store._snapshot import StoreSnapshot

    memory = RelevanceMemoryManager(max_input_tokens=3000, on_invalid="repair")
    index = ChainIndex()
    adds: list[tuple[dict[str, Any], dict[str, Any]]] = [
        ({"role": "system", "content": "You are a coding agent."}, {}),
        ({"role": "user", "content": "Fix the parser; keep the API."}, {"trace_id": "a"}),
        ({"role": "assistant", "content": "Plan A."}, {"trace_id": "b"}),
        ({"role": "tool", "content": "orphan", "tool_call_id": "nobody"}, {}),
        ({"role": "assistant", "content": None,
          "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]}, {"trace_id": "a"}),
        ({"role": "tool", "content": "a.py b.py", "tool_call_id": "c1"}, {"trace_id": "b"}),  # merges a and b
        ({"role": "user", "content": "And the tests."}, {}),
        ({"role": "assistant", "content": None,
          "tool_calls": [{"id": "c2", "type": "function", "function": {"name": "cat", "arguments": "{}"}}]}, {}),
    ]
    merges = []
    for message, meta in adds:
        memory.add(message, **meta)
        store = StoreSnapshot(memory.store)
        index.update(store)
        merges.append(store.chain_merges)
        messages = list(store.messages)
        roots = [store.chain_root(i) for i in range(len(store))]
        assert index.roots == roots
        assert index.chains == partition_module.group_chains(messages, roots)
        excluded = set(excluded_messages(store, "repair"))
        for skip in (excluded, excluded | {0}, set(range(len(store)))):
            assert index.without(skip, messages) in (None, partition_module.group_chains(messages, roots, skip))
        assert index.without(excluded | {0}, messages) == partition_module.group_chains(messages, roots, excluded | {0})
        assert index.over_entry_cap == [m.index for m in messages if m.token_count > 256]
    assert merges[-1] == 1 and merges[4] == 0  # the tool result of trace b joined chain a: one merge
    assert 7 in set(excluded_messages(StoreSnapshot(memory.store), "repair"))  # the waiting call is skipped


def test_a_records_user_decisions_are_its_decisions_about_what_users_wrote() -> None:
    """A compaction reads only the user's messages' decisions (from the chain index's user-role
    messages); they equal those of the whole per-message list, also when asked after later builds."""
    from relevance_memory._models import user_authored

    memory = RelevanceMemoryManager(max_input_tokens=3000, keep_recent=2)
    messages = load_transcript(FIXTURE).messages
    memory.extend(messages[:60])
    memory.add({"role": "user", "content": "Also keep the migration reversible."})
    first = memory.build_context(compact=True).record
    early = first.user_decisions()  # before the per-message list is built
    memory.extend(messages[60:90])
    memory.build_context(compact=True)
    later = first.user_decisions()  # after the index grew past this build's history
    whole = [d for d in first.messages if user_authored(d.role, d.msg_type)]
    assert len(whole) >= 2 and [d.model_dump() for d in early] == [d.model_dump() for d in whole]
    assert [d.model_dump() for d in later] == [d.model_dump() for d in whole]

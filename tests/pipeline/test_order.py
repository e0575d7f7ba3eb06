"""Tier order as named, composable order keys: an ablation is a one-line policy swap."""

from __future__ import annotations

from pathlib import Path

import goldens

from relevance_memory import BuiltContext, RelevanceMemoryManager, RelevanceScore, ScoreSource, load_transcript
from relevance_memory.pipeline import Chain, OrderPolicy
from relevance_memory.pipeline.order import DEFAULT_ORDER, FIRST, RECENCY, SCORE, STRENGTH_BAND, WEIGHT, ChainFacts
from relevance_memory.pipeline.select import rank, select_chains

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "django__django-15280.json"


def _score(i: int, score: int, weight: float = 0.0) -> RelevanceScore:
    return RelevanceScore(id=f"m{i}", score=score, reason="", source=ScoreSource.OFFLINE, weight=weight)


def test_keys_compose_and_name_themselves() -> None:
    order = STRENGTH_BAND + WEIGHT + RECENCY
    assert repr(order) == "strength band + weight + recency"
    assert repr(DEFAULT_ORDER.core) == (
        "first + user constraint + newest view of an edited file + edit recency + user's own core message + score"
        " + strength band + weight + recency"
    )
    facts = ChainFacts(root=3, last=5, score=4, weight=0.5, strength=2.5, band=2, priority=1)
    assert order(facts) == (-2, -0.5, -5)
    assert (SCORE + order)(facts) == (-4, -2, -0.5, -5)
    assert (FIRST + SCORE)(facts) == (1, -4)
    # issue 11: the task statement, then the user's hard constraints, then the newest views of
    # edited files (the file edited last first), then every other chain by score
    view = ChainFacts(root=1, last=2, score=4, weight=0.1, strength=0.0, band=0, priority=1, current_view=True,
                      edited_at=2)
    later = ChainFacts(root=0, last=1, score=4, weight=0.0, strength=0.0, band=0, priority=1, current_view=True,
                       edited_at=9)
    error = ChainFacts(root=6, last=7, score=5, weight=0.9, strength=3.0, band=3, priority=1)
    constraint = ChainFacts(root=8, last=8, score=5, weight=0.0, strength=0.0, band=0, priority=1, constraint=True)
    task = ChainFacts(root=0, last=0, score=5, weight=0.0, strength=0.0, band=0, priority=0)
    assert sorted([facts, error, view, constraint, later, task], key=DEFAULT_ORDER.core_key) == [
        task, constraint, later, view, error, facts]
    # a person's own message scored 4 before an assistant's answer scored 5 (SPEC §7)
    said = ChainFacts(root=9, last=9, score=4, weight=0.0, strength=0.0, band=0, priority=1, user_core=True)
    assert sorted([error, said, view], key=DEFAULT_ORDER.core_key) == [view, said, error]


def test_an_agents_core_chains_go_newest_first_after_the_task_and_what_the_user_said() -> None:
    """Issue 21: the score decides what is core; in an agent's history the newest core chain
    goes first (action support 0.877 against 0.834 with the chat order at 8k, BENCHMARKS.md)."""
    assert repr(DEFAULT_ORDER.agent_core) == "first + user constraint + user's own core message + recency"
    agent = DEFAULT_ORDER.for_agent(True)
    assert agent.core == DEFAULT_ORDER.agent_core and agent.agent_core is None
    assert DEFAULT_ORDER.for_agent(False) is DEFAULT_ORDER
    assert OrderPolicy(core=FIRST, working=RECENCY).for_agent(True).core == FIRST  # a custom policy stays
    task = ChainFacts(root=0, last=0, score=5, weight=0.0, strength=0.0, band=0, priority=0)
    constraint = ChainFacts(root=1, last=1, score=5, weight=0.0, strength=0.0, band=0, priority=1, constraint=True)
    said = ChainFacts(root=2, last=2, score=4, weight=0.0, strength=0.0, band=0, priority=1, user_core=True)
    view = ChainFacts(root=3, last=3, score=4, weight=0.1, strength=0.0, band=0, priority=1, current_view=True,
                      edited_at=3)
    error = ChainFacts(root=6, last=6, score=5, weight=0.9, strength=3.0, band=3, priority=1)
    newest = ChainFacts(root=9, last=9, score=4, weight=0.0, strength=0.0, band=0, priority=1)
    facts = [view, newest, error, said, constraint, task]
    assert sorted(facts, key=agent.core_key) == [task, constraint, said, newest, error, view]
    assert sorted(facts, key=DEFAULT_ORDER.core_key) == [task, constraint, view, said, error, newest]


def test_default_working_order_is_strength_band_then_weight_then_recency() -> None:
    chains = {i: Chain(i, (i,), 10) for i in range(4)}
    scores = {0: _score(0, 3, 0.9), 1: _score(1, 3, 0.1), 2: _score(2, 3, 0.1), 3: _score(3, 3, 0.5)}
    strengths = {0: 0.5, 1: 2.2, 2: 2.9, 3: 0.2}
    common = dict(core_score=4, archive_score=2, referenced_by={}, promote_after_references=2, strengths=strengths)
    _, order = rank(chains, scores, **common)  # type: ignore[arg-type]
    assert order == (2, 1, 0, 3)  # band 2 (newer first), then band 0 by weight
    _, by_recency = rank(chains, scores, **common, order=OrderPolicy(core=DEFAULT_ORDER.core, working=RECENCY))  # type: ignore[arg-type]
    assert by_recency == (3, 2, 1, 0)
    kept = select_chains(chains, scores, available=20, **common).kept  # type: ignore[arg-type]
    assert kept == {2, 1}


def test_an_ablation_is_a_one_line_policy_swap() -> None:
    history = load_transcript(FIXTURE).messages
    by_score = RelevanceMemoryManager(max_input_tokens=4000, order=OrderPolicy(core=FIRST + SCORE + WEIGHT, working=RECENCY))
    by_score.extend(history)
    default = goldens.run("fixture/django__django-15280|default|4000").builds[0]  # the same build, default order
    assert isinstance(default, BuiltContext)
    a, b = default.record, by_score.build_context().record
    kept_a = [d.index for d in a.messages if d.decision == "kept" and d.tier == "core"]
    kept_b = [d.index for d in b.messages if d.decision == "kept" and d.tier == "core"]
    assert kept_a != kept_b
    # an agent's core chains go newest first by default (issue 21); by score, older ones win room
    assert sum(kept_a) / len(kept_a) > sum(kept_b) / len(kept_b)
    # the fresh() copy keeps the policy
    assert by_score.fresh(history).order is by_score.order


def test_the_newest_view_of_each_edited_file_is_tried_first_among_its_score() -> None:
    """Issue 11: an agent repairing files needs their current state. On the django run the agent
    edited four files; their newest views are raised to core, and all four kept at 16k. At 8k an
    agent's core chains go newest first (issue 21): the two newest views are kept (m172 as an
    excerpt), the two older ones are in the summary, restorable."""
    for budget, expected in ((8000, ["summarised", "kept", "summarised", "kept"]), (16000, ["kept"] * 4)):
        built = goldens.run(f"fixture/django__django-15280|default|{budget}").builds[0]
        assert isinstance(built, BuiltContext)
        record = built.record
        views = {"m125": "django/db/models/query.py", "m167": "django/db/models/fields/related_descriptors.py",
                 "m168": "reproduce_issue.py", "m172": "test_edge_case.py"}
        decisions = [record.decision_for(i) for i in views]
        assert [d.decision for d in decisions] == expected, budget
        for d, path in zip(decisions, views.values(), strict=True):
            assert d.tier == "core", (budget, d.id)
            if d.fidelity == "verbatim":
                assert f"newest view of {path}" in d.note, (budget, d.id, d.note)
    # an older view of the same file is not raised (m12: reproduce_issue.py before its rewrite m168)
    assert "newest view" not in record.decision_for("m12").note and record.decision_for("m12").superseded_by == "m168"

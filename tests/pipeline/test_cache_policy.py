"""CachePolicy and the append-or-compact decision (issue 10, SPEC §3.1)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from relevance_memory._cache_policy import (
    CachePolicy,
    PrefixDecision,
    compaction_target,
    decide_build_mode,
    least_freed,
)


def decide(policy: CachePolicy | None = None, **overrides: object) -> tuple[str, str, int]:
    """decide_build_mode with a 0.6 target (4,800 of 8,000 tokens) unless ``policy`` is given."""
    values: dict[str, object] = {
        "has_previous": True, "goal_changed": False, "previous_budget": 8000, "budget": 8000,
        "appended_tokens": 6000, "new_messages": 2,
    }
    values.update(overrides)
    d = decide_build_mode(policy or CachePolicy(target_fraction=0.6), **values)  # type: ignore[arg-type]
    return d.mode, d.why, d.target


def test_defaults_are_documented_values() -> None:
    policy = CachePolicy()
    assert (policy.always_rebuild, policy.target_fraction, policy.clear_at_least, policy.cached_price) == (
        False, 0.8, 1024, 0.1,
    )
    assert (policy.steps_ahead, policy.min_target_fraction) == (5, 0.4)
    assert (policy.cache_min_tokens, policy.cache_step_tokens, policy.subtask_at_end) == (1024, 128, False)
    assert policy.target_tokens(8000) == 6400


@pytest.mark.parametrize(
    "values",
    [{"target_fraction": 0}, {"target_fraction": 1.5}, {"clear_at_least": -1}, {"cached_price": 1.2},
     {"cache_step_tokens": 0}, {"unknown": 1}],
)
def test_invalid_policy_is_rejected(values: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        CachePolicy(**values)  # type: ignore[arg-type]


def test_policy_is_frozen() -> None:
    with pytest.raises(ValidationError):
        CachePolicy().target_fraction = 0.5  # type: ignore[misc]


@pytest.mark.parametrize(
    ("prefix", "cached"), [(0, 0), (1023, 0), (1024, 1024), (1151, 1024), (1152, 1152), (9000, 8960)]
)
def test_cacheable_follows_openai_rule(prefix: int, cached: int) -> None:
    assert CachePolicy().cacheable(prefix) == cached


def test_cost_units() -> None:
    policy = CachePolicy()
    assert policy.cost(5000, 4096) == pytest.approx(904 + 409.6)
    assert policy.cost(5000, 4096, 0.5) == pytest.approx(904 + 2048)
    assert policy.cost(100, 0) == 100
    with pytest.raises(ValueError, match="cached tokens"):
        policy.cost(100, 200)


def test_compaction_target_and_least_freed() -> None:
    policy = CachePolicy(target_fraction=0.6, clear_at_least=3000)
    assert compaction_target(policy, 8000) == 4800
    assert compaction_target(CachePolicy(target_fraction=0.0001), 100) == 1
    assert least_freed(policy, 8000) == 3000
    assert least_freed(policy, 1000) == 400  # capped at what a compaction at the high-water mark frees
    with pytest.raises(ValueError, match="positive"):
        compaction_target(policy, 0)


def test_append_while_it_fits() -> None:
    mode, why, target = decide()
    assert (mode, target) == ("appended", 8000)
    assert why == "2 new message(s) fit the budget (6000 ≤ 8000 tokens)"


def test_compact_at_the_high_water_mark() -> None:
    mode, why, target = decide(appended_tokens=8001)
    assert (mode, target) == ("compacted", 4800)
    assert why == "appending 2 message(s) would exceed the budget (8001 > 8000 tokens); compacted to a target of 4800"
    assert decide(appended_tokens=8000)[0] == "appended"


@pytest.mark.parametrize(
    ("overrides", "why"),
    [
        ({"has_previous": False}, "first build: no previous context to append to"),
        ({"goal_changed": True}, "the final goal changed"),
        ({"previous_budget": 16000}, "the budget changed (16000 → 8000 tokens)"),
    ],
)
def test_full_rebuild_triggers(overrides: dict[str, object], why: str) -> None:
    assert decide(**overrides) == ("full_rebuild", why, 8000)


def test_always_rebuild_wins() -> None:
    assert decide(CachePolicy(always_rebuild=True)) == ("full_rebuild", "cache policy always_rebuild", 8000)


def test_requested_compaction_respects_clear_at_least() -> None:
    assert decide(requested=True, appended_tokens=6000)[:2] == ("compacted", "compaction requested by the caller")
    mode, why, _ = decide(requested=True, appended_tokens=5000)  # 5000 − 4800 = 200 < 1024
    assert mode == "appended"
    assert "would free about 200 tokens (< 1024, clear_at_least)" in why
    # over budget, the request cannot be declined
    assert decide(requested=True, appended_tokens=9000)[0] == "compacted"


def test_blocked_append_compacts() -> None:
    mode, why, target = decide(append_blocked="tool message 7 does not follow its call")
    assert (mode, why, target) == ("compacted", "tool message 7 does not follow its call", 4800)


def test_bad_budget_is_rejected() -> None:
    with pytest.raises(ValueError, match="positive"):
        decide(budget=0)


def test_a_requested_first_build_compacts() -> None:
    assert decide(has_previous=False, requested=True) == ("compacted", "compaction requested by the caller", 4800)


@settings(max_examples=300, deadline=None)
@given(
    target_fraction=st.floats(0.1, 1.0), steps_ahead=st.integers(0, 5), budget=st.integers(1, 50_000),
    previous_budget=st.one_of(st.none(), st.integers(1, 50_000)), appended=st.integers(0, 60_000),
    goal_changed=st.booleans(), blocked=st.one_of(st.none(), st.just("held back")), step_tokens=st.integers(0, 20_000),
)
def test_an_unrequested_append_does_not_depend_on_the_typical_step(
    target_fraction: float, steps_ahead: int, budget: int, previous_budget: int | None, appended: int,
    goal_changed: bool, blocked: str | None, step_tokens: int,
) -> None:
    """plan() decides an unrequested build without the typical step first and reads it only when
    the build does not append (pipeline/append.py): the decision must be the same either way."""
    policy = CachePolicy(target_fraction=target_fraction, steps_ahead=steps_ahead)

    def decide(step: int) -> PrefixDecision:
        return decide_build_mode(
            policy, has_previous=True, goal_changed=goal_changed, previous_budget=previous_budget, budget=budget,
            appended_tokens=appended, new_messages=2, append_blocked=blocked, step_tokens=step,
        )

    without = decide(0)
    if without.mode == "appended":
        assert decide(step_tokens) == without

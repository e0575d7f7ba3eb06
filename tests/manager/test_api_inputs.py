"""Wrong argument types to the manager's API give a ConfigError naming the argument
(before: a TypeError from deep inside the build, a float budget accepted, set_goal(final=123)
an AttributeError, restore("m0") looked up the ids 'm' and '0')."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from relevance_memory import ConfigError, MemoryConfig, RelevanceMemoryManager


def _memory() -> RelevanceMemoryManager:
    memory = RelevanceMemoryManager(max_input_tokens=2000)
    memory.extend([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello"}])
    return memory


@pytest.mark.parametrize("budget", ["8000", 1.5, True, 8000.0])
def test_a_budget_that_is_not_an_int_is_refused(budget: Any) -> None:
    memory = _memory()
    with pytest.raises(ConfigError, match=r"budget must be a whole number of tokens \(int\), got "):
        memory.build_context(budget=budget)
    with pytest.raises(ConfigError, match="budget must be a whole number"):
        asyncio.run(memory.abuild_context(budget=budget))
    assert memory.build_context(budget=1000).record.budget == 1000  # nothing was half-built meanwhile


@pytest.mark.parametrize("kwargs", [{"final": 123}, {"subtask": ["run", "tests"]}])
def test_set_goal_takes_strings(kwargs: dict[str, Any]) -> None:
    memory = _memory()
    name = next(iter(kwargs))
    with pytest.raises(ConfigError, match=rf"set_goal\({name}=...\) takes a string or None"):
        memory.set_goal(**kwargs)
    assert memory.goal.final == "hello" and memory.goal.subtask == ""


def test_restore_takes_one_id_as_a_string() -> None:
    memory = _memory()
    assert memory.restore("m1") == [{"role": "user", "content": "hello"}]
    assert memory.restore(["m0", "m1"])[0] == {"role": "system", "content": "Be brief."}
    with pytest.raises(KeyError, match="'m7'"):
        memory.restore("m7")


@pytest.mark.parametrize(
    ("option", "value"),
    [("max_input_tokens", True), ("max_input_tokens", "8000"), ("max_input_tokens", 8000.0), ("keep_recent", 2.5),
     ("keep_recent", "4"), ("goal_block", "yes"), ("summaries", 1), ("episode_gap_s", "30"), ("prefilter_top_n", True)],
)
def test_a_config_option_of_the_wrong_type_is_refused_not_converted(option: str, value: Any) -> None:
    # a bool is not a token count and "8000" is not a number: the config does not coerce
    # (MemoryConfig is strict), so a typo cannot silently become a 1-token budget
    with pytest.raises(ConfigError, match=option):
        RelevanceMemoryManager(**{option: value})


def test_config_options_of_the_right_type_are_accepted() -> None:
    manager = RelevanceMemoryManager(max_input_tokens=8000, keep_recent=2, input_fraction=1 - 0.1 - 0.1,
                                     episode_gap_s=60, pheromone={"s_max": 10.0})
    assert manager.config.max_input_tokens == 8000
    assert manager.config.episode_gap_s == 60.0 and manager.config.pheromone.s_max == 10.0


def test_a_config_survives_its_own_json_text() -> None:
    """An infinite half-life (system prompts never evaporate) is ``null`` in standard JSON;
    reading that text back gives the same config, not a validation error."""
    config = MemoryConfig(embedder="minilm", keep_recent=2)
    text = config.model_dump_json()
    assert '"system":null' in text
    again = MemoryConfig.model_validate_json(text)
    assert again == config
    assert again.pheromone.half_life_steps["system"] == float("inf")


def test_the_goal_in_force_is_made_again_only_when_it_changes() -> None:
    """Each build reads the goal; an unchanged one is the same (frozen) object, a changed
    subtask or final goal a new one with the new text."""
    memory = RelevanceMemoryManager(max_input_tokens=4000)
    memory.add({"role": "user", "content": "Fix the failing date parser test."})
    first = memory.goal
    assert memory.goal is first and first.final == "Fix the failing date parser test."
    assert first.source == "first_user_message"
    memory.add({"role": "assistant", "content": "Looking at it."})
    assert memory.goal is first
    memory.set_goal(subtask="read parser.py")
    second = memory.goal
    assert second is not first and second.subtask == "read parser.py" and second.final == first.final
    memory.set_goal(final="Ship the parser fix")
    third = memory.goal
    assert (third.final, third.subtask, third.source) == ("Ship the parser fix", "read parser.py", "explicit")
    assert memory.goal is third

"""Golden builds: what the pipeline decides on real inputs, pinned byte for byte.

Every *golden key* names one input, one configuration and one budget; its output is the
list of builds it runs (usually a build and a rebuild with nothing new), each as the built
messages and the decision record in canonical JSON. ``tests/golden/hashes.json`` holds the
sha256 of each output; ``tests/pipeline/test_golden.py`` compares them, and
``scripts/golden.py`` writes (``--write``), checks (``--check``) or dumps the full outputs
for diffing (``--dump DIR``).

Inputs (SPEC-era issue 9 "Must hold"):

- ``fixture/<run>``: the two SWE-bench runs shipped in ``fixtures/`` (always run), at
  4k / 8k / 16k, and the django run under more configurations (explicit goal, forced BM25
  prefilter, a content-keyed scorer, a failing scorer, ablations, ``on_invalid="repair"``,
  a step-by-step replay with a subtask switch and a resync through ``fresh()``);
- ``case/<id>``: every case of ``tests/cases`` with a message history (S01, C01–C05, C08,
  C10; C09's text as one user turn) at 4k / 8k / 16k and at fractions of its own size.
  C06 and C07 are scorer-reply cases with no history: they are no pipeline input;
- ``swe/<run>`` and ``tau/<n>``: every other SWE-bench run and the first 20 τ-bench runs
  of ``../shared/data`` at 4k / 8k / 16k (skipped when the data is absent).

Builds run with a fixed clock, so the record's ``created_at`` is stable. Outputs are
cached per process: the real-data tests assert the SPEC §9 invariants on the same builds
instead of building them again.
"""

from __future__ import annotations

import functools
import hashlib
import json
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from data_paths import shared_data
from scorers import WrappedOfflineScorer

from relevance_memory import (
    BuiltContext,
    ContextOverflowError,
    OfflineScorer,
    RelevanceMemoryManager,
    TiktokenCounter,
    load_transcript,
)
from relevance_memory._tokenizer import REPLY_PRIMING_TOKENS

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "fixtures"
CASES = REPO / "tests" / "cases"
HASHES = REPO / "tests" / "golden" / "hashes.json"
BUDGETS = (4000, 8000, 16000)
CASE_FRACTIONS = (0.15, 0.3, 0.5, 0.8)
TAU_RUNS = 20
FIXED_NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
REPLAY_RUN = "django__django-15280"
_COUNTER = TiktokenCounter("o200k_base")


def _clock() -> datetime:
    return FIXED_NOW


# --------------------------------------------------------------------------- scorers
class FlakyScorer:
    """A content-keyed scorer that fails the way remote ones do: every fifth requested id
    gets no score (the manager fills it with a fallback), and its second call raises (the
    manager falls back to offline scores for the whole batch, with a warning)."""

    name = "flaky"
    model = "flaky-1"
    rubric_version = "v1"

    def __init__(self) -> None:
        self.inner = OfflineScorer()
        self.calls = 0

    def score(self, goal: Any, items: Any, context: Any = None) -> Any:
        self.calls += 1
        if self.calls == 2:
            raise RuntimeError("endpoint unavailable")
        result = self.inner.score(goal, items, context)
        result.scores = [s for n, s in enumerate(result.scores) if n % 5 != 4]
        return result


# --------------------------------------------------------------------------- inputs
@dataclass(frozen=True)
class Variant:
    """One configuration of a golden input."""

    config: tuple[tuple[str, Any], ...] = ()
    goal: tuple[str | None, str | None] | None = None
    scorer: Callable[[], Any] | None = None
    edit: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] | None = None


def _drop_a_tool_result(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The history with its tenth tool result missing (an unanswered call mid-run)."""
    tools = [i for i, m in enumerate(messages) if m.get("role") == "tool"]
    return [m for i, m in enumerate(messages) if i != tools[9]]


DJANGO_GOAL = (
    "Fix the migration optimizer bug described in the first user message; never change public APIs.",
    "run the failing test in tests/migrations",
)

VARIANTS: dict[str, Variant] = {
    "default": Variant(),
    "goal": Variant(goal=DJANGO_GOAL),
    "subtask": Variant(goal=(None, "inspect the deferred fields code path")),
    "prefilter": Variant(config=(("prefilter", True), ("prefilter_top_n", 30))),
    "wrapped": Variant(scorer=WrappedOfflineScorer),
    "flaky": Variant(scorer=FlakyScorer),
    "ablation": Variant(config=(("pheromone", {"enabled": False}), ("summaries", False))),
    "bare": Variant(config=(("goal_block", False), ("keep_recent", 0), ("context_role", "user"))),
    "summary-budget": Variant(config=(("summary_budget", 300),)),
    "repair": Variant(config=(("on_invalid", "repair"),), edit=_drop_a_tool_result),
}
"""Configurations the django fixture runs under at 8k (``default`` runs at every budget)."""


@functools.cache
def _tau_runs(path: str) -> list[Any]:
    return list(json.loads(Path(path).read_text(encoding="utf-8")))


def _case_messages(case: dict[str, Any]) -> list[dict[str, Any]] | None:
    if case.get("messages"):
        return list(case["messages"])
    if isinstance(case.get("text"), str):  # C09: a tokenizer case; its text as one user turn
        return [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": case["text"]}]
    return None


def _case_files() -> dict[str, Path]:
    return {p.stem.split("-")[0]: p for p in sorted(CASES.glob("*.json"))}


def _case_keep(case: dict[str, Any]) -> int:
    return int(case.get("settings", {}).get("keep_recent_steps", 2))


def input_messages(name: str) -> list[dict[str, Any]]:
    """The messages of golden input ``name`` (``fixture/…``, ``case/…``, ``swe/…``, ``tau/…``).

    Raises:
        FileNotFoundError: a data-set input while ``../shared/data`` is absent.
    """
    kind, _, which = name.partition("/")
    if kind == "fixture":
        return load_transcript(FIXTURES / f"{which}.json").messages
    if kind == "case":
        case = json.loads(_case_files()[which].read_text(encoding="utf-8"))
        messages = _case_messages(case)
        assert messages is not None, name
        return messages
    data = shared_data()
    if data is None:
        raise FileNotFoundError("../shared/data is absent")
    if kind == "swe":
        return load_transcript(data / "swebench_trajectories" / f"{which}.json").messages
    if kind == "tau":
        return list(_tau_runs(str(data / "tau_bench" / "gpt-4o-airline.json"))[int(which)]["traj"])
    raise KeyError(name)


def golden_keys(*, with_data: bool) -> list[str]:
    """Every golden key, ``input|variant|budget``; data-set keys only ``with_data``."""
    keys: list[str] = []
    fixtures = sorted(p.stem for p in FIXTURES.glob("*.json") if not p.stem.startswith("LICENSE"))
    for run in fixtures:
        keys += [f"fixture/{run}|default|{b}" for b in BUDGETS]
    keys += [f"fixture/{REPLAY_RUN}|{v}|8000" for v in VARIANTS if v != "default"]
    keys += [f"fixture/{REPLAY_RUN}|replay|8000"]
    for cid, path in _case_files().items():
        case = json.loads(path.read_text(encoding="utf-8"))
        if _case_messages(case) is None:
            continue
        keys += [f"case/{cid}|default|{b}" for b in BUDGETS]
        keys += [f"case/{cid}|default|x{f}" for f in CASE_FRACTIONS]
    data = shared_data() if with_data else None
    if data is not None:
        for path in sorted((data / "swebench_trajectories").glob("*.json")):
            if path.stem not in fixtures:  # the shipped fixtures are copies of two of these runs
                keys += [f"swe/{path.stem}|default|{b}" for b in BUDGETS]
        if (data / "tau_bench" / "gpt-4o-airline.json").is_file():
            keys += [f"tau/{n}|default|{b}" for n in range(TAU_RUNS) for b in BUDGETS]
    return keys


# --------------------------------------------------------------------------- runs
@dataclass
class GoldenRun:
    """The builds of one golden key.

    Attributes:
        key: the golden key.
        history: the messages the builds read (after the variant's edit).
        memory: the manager of the last build (its tokenizer counts the invariants).
        builds: each build's :class:`BuiltContext`, or the :class:`ContextOverflowError` raised.
        output: the canonical JSON text of every build, the golden's subject.
    """

    key: str
    history: list[dict[str, Any]]
    memory: RelevanceMemoryManager
    builds: list[BuiltContext | ContextOverflowError]
    output: str

    @property
    def digest(self) -> str:
        """sha256 (hex) of :attr:`output`."""
        return hashlib.sha256(self.output.encode("utf-8")).hexdigest()


def _budget_of(spec: str, messages: Sequence[dict[str, Any]]) -> int:
    """``"8000"`` → 8000; ``"x0.3"`` → 30 % of the history's tokens (with reply priming)."""
    if not spec.startswith("x"):
        return int(spec)
    total = REPLY_PRIMING_TOKENS + sum(_COUNTER.count_message(m) for m in messages)
    return max(1, int(total * float(spec[1:])))


def _manager(variant: Variant, keep_recent: int, budget: int | None = None) -> RelevanceMemoryManager:
    config: dict[str, Any] = {"keep_recent": keep_recent, **dict(variant.config)}
    if budget is not None:
        config["max_input_tokens"] = budget
    scorer = variant.scorer() if variant.scorer is not None else None
    memory = RelevanceMemoryManager(scorer=scorer, clock=_clock, **config)
    if variant.goal is not None:
        memory.set_goal(*variant.goal)
    return memory


def _attempt(memory: RelevanceMemoryManager, budget: int | None = None) -> BuiltContext | ContextOverflowError:
    try:
        return memory.build_context(budget=budget)
    except ContextOverflowError as err:
        return err


def _as_data(build: BuiltContext | ContextOverflowError) -> dict[str, Any]:
    if isinstance(build, ContextOverflowError):
        return {
            "overflow": {
                "budget": build.budget,
                "pinned_tokens": build.pinned_tokens,
                "newest_step_tokens": build.newest_step_tokens,
                "message": str(build),
            }
        }
    return {"messages": build.messages, "record": build.record.model_dump(mode="json")}


def _replay(messages: list[dict[str, Any]], budget: int) -> tuple[RelevanceMemoryManager, list[Any]]:
    """Build before every eighth assistant message; switch the subtask halfway; resync the
    memory through ``fresh()`` (as the managed client does on an edited history) at three
    quarters; end with a rebuild."""
    memory = _manager(Variant(), 4, budget)
    builds: list[Any] = []
    assistants = [i for i, m in enumerate(messages) if m.get("role") == "assistant"]
    stops = assistants[8::8]
    for n, stop in enumerate(stops):
        memory.extend(messages[len(memory.messages) : stop])
        if n == len(stops) // 2:
            memory.set_goal(subtask="write the regression test and run the test suite")
        if n == 3 * len(stops) // 4:
            memory = memory.fresh(messages[:stop])
        builds.append(_attempt(memory))
    memory.extend(messages[len(memory.messages) :])
    builds.append(_attempt(memory))
    builds.append(_attempt(memory))
    return memory, builds


@functools.cache
def run(key: str) -> GoldenRun:
    """Run golden ``key`` (cached per process). Raises ``FileNotFoundError`` without the data."""
    name, variant_name, spec = key.split("|")
    messages = input_messages(name)
    keep = 4
    if name.startswith("case/"):
        keep = _case_keep(json.loads(_case_files()[name.split("/")[1]].read_text(encoding="utf-8")))
    caught: list[str] = []
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        if variant_name == "replay":
            memory, builds = _replay(messages, int(spec))
        else:
            variant = VARIANTS[variant_name]
            if variant.edit is not None:
                messages = variant.edit(messages)
            memory = _manager(variant, keep, _budget_of(spec, messages))
            memory.extend(messages)
            builds = [_attempt(memory), _attempt(memory)]
        caught = [f"{w.category.__name__}: {w.message}" for w in seen]
    payload = {"builds": [_as_data(b) for b in builds], "warnings": caught}
    output = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return GoldenRun(key, messages, memory, builds, output)


def load_hashes() -> dict[str, str]:
    """The stored goldens: key → sha256."""
    return dict(json.loads(HASHES.read_text(encoding="utf-8")))

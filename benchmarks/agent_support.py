"""Action support, cost and cache hits of a context strategy on recorded agent runs (issue 21, SPEC §11).

Every run is replayed request by request (before each assistant message). For each
request a method builds the context from the history so far; we then measure:

- **action support** (SPEC §11): the identifiers in the agent's real next message — its
  text and tool-call arguments: paths with an extension, dotted names, names with an
  underscore, camelCase / PascalCase names, numbers of 3+ digits, each ≥ 4 characters —
  that occur earlier in the history but neither in the system prompt nor in the last 8
  messages are *needed from memory*; support is the share of them present anywhere in the
  request (message text, tool-call arguments, summaries), pooled over all requests;
- tokens sent (messages + the tools' schema + reply priming), the provider-cacheable
  prefix (exact prefix match with the previous request; 1,024-token minimum, 128-token
  steps, OpenAI's rule), cost units ``uncached + p × cached`` at p = 0.1 and 0.5 and their
  ratio to the full history, the share of tokens served from the cache;
- compactions (builds that neither appended nor sent the history whole), requests over
  the budget, the task statement (first user message) kept verbatim, and — τ-bench — the
  customer's turns (every user message after the first) present verbatim;
- runs that could not be built (any exception ends that run's replay; its requests so far
  count).

Methods (the same tokenizer, o200k, for all):

- ``full``: the whole history;
- ``mask``: observation masking — tool outputs older than the last 10 replaced by a
  one-line placeholder (JetBrains / SWE-agent style), never trimmed;
- ``mask_trim``: the same, then trimmed to the budget (system + task + newest that fit);
- ``trim``: system prompt + task statement + the newest messages that fit the budget
  (whole tool chains, LangChain's ``trim_messages`` kind);
- ``recency``: relevance-memory's append/compact cycle with every message scored alike and
  ordered newest first (pheromone off): recency in place of relevance;
- ``ours``: relevance-memory's defaults.

    PYTHONPATH=. nice -n 10 .venv/bin/python benchmarks/agent_support.py \\
        --budgets 4000,8000,16000,32000 --out benchmarks/results/agent_support.json

``--synthetic N`` adds one synthetic loop of N steps whose tool results are ~2k tokens.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import re
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from relevance_memory import RelevanceMemoryManager, TiktokenCounter, load_transcript
from relevance_memory._cache_policy import CachePolicy
from relevance_memory._models import RelevanceScore, ScoreSource, TaskGoal, content_text
from relevance_memory._tokenizer import REPLY_PRIMING_TOKENS, tools_tokens
from relevance_memory.pipeline._prefix import shared_prefix_tokens
from relevance_memory.pipeline.order import (
    CURRENT_VIEW,
    DEFAULT_ORDER,
    EDIT_RECENCY,
    FIRST,
    RECENCY,
    USER_CONSTRAINT,
    OrderPolicy,
)
from relevance_memory.scoring._scorer import ScoreItem, ScoringContext, ScoringResult

ROOT = Path(__file__).resolve().parents[1]
PRICES = (0.1, 0.5)
METHODS = ("full", "mask", "mask_trim", "trim", "recency", "ours")
MASK_LAST = 10
RECENT_WINDOW = 8
MASK_PLACEHOLDER = "[tool output omitted to save context]"

# --------------------------------------------------------------------------- identifiers
_TOKEN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./\-]*")
_PATH = re.compile(r"[A-Za-z0-9_./\-]*\.[A-Za-z][A-Za-z0-9]{0,7}")
_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
_CAMEL = re.compile(r"[a-z][a-z0-9]*[A-Z][A-Za-z0-9]*|[A-Z][a-z0-9]+[A-Z][A-Za-z0-9]*")


def identifiers(text: str) -> set[str]:
    """The identifiers of ``text`` that action support counts (SPEC §11): paths with an
    extension, dotted names, names with an underscore, camelCase / PascalCase names and
    numbers of 3+ digits, each at least 4 characters (a maximal run of word characters,
    dots, slashes and dashes, trimmed of trailing punctuation, classified whole)."""
    out: set[str] = set()
    for match in _TOKEN.finditer(text):
        token = match.group(0).rstrip("./-")
        if len(token) < 4:
            continue
        if (
            token.isdigit()  # 3+ digits (the length rule makes it 4+)
            or ("_" in token and any(c.isalpha() for c in token))
            or _PATH.fullmatch(token) is not None
            or _DOTTED.fullmatch(token) is not None
            or _CAMEL.fullmatch(token) is not None
        ):
            out.add(token)
    return out


def message_text(message: Mapping[str, Any]) -> str:
    """A message's text as the metric reads it: content plus tool-call names and arguments."""
    parts = [content_text(message.get("content"))]
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        parts.append(str(function.get("name", "")))
        parts.append(str(function.get("arguments", "")))
    return "\n".join(parts)


# --------------------------------------------------------------------------- runs
@dataclass
class Run:
    """One recorded agent run: ``kind`` is ``swe``, ``tau`` or ``synthetic``."""

    name: str
    kind: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)


def load_runs(swe_dirs: Sequence[Path], tau_path: Path | None, tau_n: int) -> list[Run]:
    """SWE runs of ``swe_dirs`` (each file name once) and ``tau_n`` τ-bench runs (all when
    ``tau_n`` < 0; file order)."""
    runs: list[Run] = []
    seen: set[str] = set()
    for directory in swe_dirs:
        if not directory.is_dir():
            continue
        for path in sorted(directory.glob("*.json")):
            if path.name in seen:
                continue
            seen.add(path.name)
            raw = json.loads(path.read_text(encoding="utf-8"))
            tools = list(raw.get("tools") or []) if isinstance(raw, dict) else []
            runs.append(Run(path.stem, "swe", load_transcript(path).messages, tools))
    if tau_path is not None and tau_path.is_file() and tau_n != 0:
        items = json.loads(tau_path.read_text(encoding="utf-8"))
        for item in items if tau_n < 0 else items[:tau_n]:
            runs.append(Run(f"tau-{item['task_id']}-{item['trial']}", "tau", list(item["traj"])))
    return runs


_WORDS = ("parse", "render", "config", "token", "cache", "index", "field", "value", "model", "query", "order", "build")


def synthetic_run(steps: int, seed: int = 7, output_tokens: int = 2000) -> Run:
    """A tool loop whose tool results are ~``output_tokens`` tokens of code-like text; each
    assistant step names identifiers from an output 3–20 steps back (deterministic)."""
    rng = random.Random(seed)
    files = [f"pkg/{rng.choice(_WORDS)}_{k}/{rng.choice(_WORDS)}_{k}.py" for k in range(steps)]
    defs: list[list[str]] = []
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent. Use the bash tool."},
        {"role": "user", "content": "Fix the failing test in tests/test_pipeline.py: build_index drops the last record."},
    ]
    for k in range(steps):
        names = [f"{rng.choice(_WORDS)}_{rng.choice(_WORDS)}_{k}_{j}" for j in range(12)]
        defs.append(names)
        back = [defs[k - d] for d in (3, 8, 20) if k - d >= 0]
        mention = " and ".join(rng.choice(b) for b in back) if back else "the test"
        call_id = f"call_{k}"
        messages.append({
            "role": "assistant",
            "content": f"THOUGHT: {mention} look related; read {files[k]} next.",
            "tool_calls": [{"id": call_id, "type": "function",
                            "function": {"name": "bash", "arguments": json.dumps({"command": f"cat {files[k]}"})}}],
        })
        lines: list[str] = []
        n = 0
        while len(" ".join(lines)) < output_tokens * 4:
            name = names[n % len(names)]
            lines.append(f"def {name}(self, {rng.choice(_WORDS)}_arg):")
            lines.append(f"    return self._{rng.choice(_WORDS)}({rng.randint(100, 99999)}, {rng.choice(_WORDS)}_arg)")
            n += 1
        messages.append({"role": "tool", "tool_call_id": call_id, "content": "\n".join(lines)})
    messages.append({"role": "assistant", "content": "Done."})
    tools = [{"type": "function", "function": {"name": "bash", "description": "run a command",
                                                "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}]
    return Run(f"synthetic-{steps}x{output_tokens}", "synthetic", messages, tools)


def request_points(messages: Sequence[Mapping[str, Any]]) -> list[int]:
    """History lengths at which the model is called: before every assistant message."""
    return [k for k, m in enumerate(messages) if m.get("role") == "assistant" and k > 0]


# --------------------------------------------------------------------------- tokens
class Counter:
    """Token counts of OpenAI messages, memoised by object identity (tokens)."""

    def __init__(self, counter: TiktokenCounter) -> None:
        self.inner = counter
        self._memo: dict[int, int] = {}
        self._keep: list[Any] = []

    def message(self, message: Mapping[str, Any]) -> int:
        key = id(message)
        if key not in self._memo:
            self._memo[key] = self.inner.count_message(message)
            self._keep.append(message)
        return self._memo[key]

    def request(self, messages: Sequence[Mapping[str, Any]]) -> int:
        return REPLY_PRIMING_TOKENS + sum(self.message(m) for m in messages)


# --------------------------------------------------------------------------- methods
@dataclass
class Step:
    """One request of a method."""

    messages: list[dict[str, Any]]
    compacted: bool = False
    seconds: float = 0.0


def _full(run: Run, budget: int, counter: Counter) -> Iterator[Step]:
    for k in request_points(run.messages):
        yield Step(run.messages[:k])


class _Masked:
    """Observation masking: tool outputs older than the last ``MASK_LAST`` become a placeholder
    (one placeholder dict per tool message, reused so identity memoisation holds)."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.placeholders: dict[int, dict[str, Any]] = {}

    def at(self, k: int) -> list[dict[str, Any]]:
        history = self.run.messages[:k]
        tools = [i for i, m in enumerate(history) if m.get("role") == "tool"]
        old = set(tools[:-MASK_LAST]) if len(tools) > MASK_LAST else set()
        out = []
        for i, m in enumerate(history):
            if i in old:
                if i not in self.placeholders:
                    self.placeholders[i] = {"role": "tool", "tool_call_id": m.get("tool_call_id"), "content": MASK_PLACEHOLDER}
                out.append(self.placeholders[i])
            else:
                out.append(m)
        return out


def _mask(run: Run, budget: int, counter: Counter) -> Iterator[Step]:
    masked = _Masked(run)
    for k in request_points(run.messages):
        yield Step(masked.at(k))


def trim_to(history: Sequence[dict[str, Any]], budget: int, counter: Counter) -> list[dict[str, Any]]:
    """System prompt(s) + the task statement (first user message) + the newest whole tool
    chains that fit ``budget`` (tokens, reply priming included); the newest step is always
    kept even when it alone exceeds the budget (the request is then over budget)."""
    head: list[int] = []
    for i, m in enumerate(history):
        if m.get("role") in ("system", "developer"):
            head.append(i)
            continue
        if m.get("role") == "user":
            head.append(i)
        break
    used = REPLY_PRIMING_TOKENS + sum(counter.message(history[i]) for i in head)
    start = head[-1] + 1 if head else 0
    # group into blocks: an assistant message with its tool results, or a single message
    blocks: list[list[int]] = []
    for i in range(start, len(history)):
        if history[i].get("role") == "tool" and blocks:
            blocks[-1].append(i)
        else:
            blocks.append([i])
    kept: list[list[int]] = []
    for block in reversed(blocks):
        size = sum(counter.message(history[i]) for i in block)
        if used + size > budget and kept:
            break
        kept.append(block)
        used += size
    return [history[i] for i in head] + [history[i] for block in reversed(kept) for i in block]


def _trim(run: Run, budget: int, counter: Counter) -> Iterator[Step]:
    room = budget - tools_tokens(counter.inner, run.tools or None)
    for k in request_points(run.messages):
        yield Step(trim_to(run.messages[:k], room, counter))


def _mask_trim(run: Run, budget: int, counter: Counter) -> Iterator[Step]:
    masked = _Masked(run)
    room = budget - tools_tokens(counter.inner, run.tools or None)
    for k in request_points(run.messages):
        yield Step(trim_to(masked.at(k), room, counter))


class RecencyScorer:
    """Every message scored 3 with no weight: selection orders by recency alone."""

    name = "recency"
    model = "recency-v1"
    rubric_version = "none"
    local = True

    def score(self, goal: TaskGoal, items: Sequence[ScoreItem], context: ScoringContext | None = None) -> ScoringResult:
        return ScoringResult(scores=[RelevanceScore(id=i.id, score=3, reason="recency baseline",
                                                    source=ScoreSource.OFFLINE) for i in items])


def _managed(make: Callable[[int], RelevanceMemoryManager]) -> Callable[[Run, int, Counter], Iterator[Step]]:
    def replay(run: Run, budget: int, counter: Counter) -> Iterator[Step]:
        memory = make(budget)
        done = 0
        for k in request_points(run.messages):
            memory.extend(run.messages[done:k])
            done = k
            start = time.perf_counter()
            built = memory.build_context(tools=run.tools or None)
            seconds = time.perf_counter() - start
            record = built.record
            yield Step(built.messages, compacted=record.mode != "appended" and not record.identity, seconds=seconds)

    return replay


OURS_OVERRIDES: dict[str, Any] = {}
"""MemoryConfig overrides of ``ours`` (``--config``; empty: the defaults)."""

VARIANTS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "default": ({}, {}),
    "keep-or-summarise": ({"graded_fidelity": False}, {}),
    "no names index": ({}, {"agent_names": False}),
    "no carried summaries": ({"cache_policy": {"carry_summaries": False}}, {}),
    "summary share 0.1": ({"tool_summary_share": 0.1}, {}),
    "target 0.8 fixed": ({"cache_policy": {"steps_ahead": 0}}, {}),
    "4 steps ahead": ({"cache_policy": {"steps_ahead": 4}}, {}),
    "6 steps ahead": ({"cache_policy": {"steps_ahead": 6}}, {}),
    "target 0.5 fixed": ({"cache_policy": {"steps_ahead": 0, "target_fraction": 0.5}}, {}),
    "excerpt 1/4": ({"excerpt_share": 0.25}, {}),
    "excerpt 1/8": ({"excerpt_share": 0.125}, {}),
    "chat core order": ({"order": OrderPolicy(core=DEFAULT_ORDER.core, working=DEFAULT_ORDER.working)}, {}),
    "edited views first": ({"order": OrderPolicy(
        core=DEFAULT_ORDER.core, working=DEFAULT_ORDER.working,
        agent_core=FIRST + USER_CONSTRAINT + CURRENT_VIEW + EDIT_RECENCY + RECENCY)}, {}),
    "before issue 21": ({"excerpt_share": 1.0, "graded_fidelity": False, "tool_summary_share": 0.1,
                         "cache_policy": {"carry_summaries": False, "steps_ahead": 0, "target_fraction": 0.5},
                         "order": OrderPolicy(core=DEFAULT_ORDER.core, working=DEFAULT_ORDER.working)},
                        {"agent_names": False}),
}
"""``--ablation``: name → (MemoryConfig overrides, OfflineSummarizer arguments) of ``ours``.
"before issue 21" switches every change of issue 21 off (excerpt_share 1.0 only cuts a message
larger than the whole budget, which then raised ContextOverflowError)."""


def ours_memory(budget: int) -> RelevanceMemoryManager:
    return RelevanceMemoryManager(max_input_tokens=budget, **OURS_OVERRIDES)


def variant_method(config: dict[str, Any], summarizer: dict[str, Any]) -> Callable[[Run, int, Counter], Iterator[Step]]:
    from relevance_memory import OfflineSummarizer

    def make(budget: int) -> RelevanceMemoryManager:
        return RelevanceMemoryManager(max_input_tokens=budget, summarizer=OfflineSummarizer(**summarizer), **config)

    return _managed(make)


def recency_memory(budget: int) -> RelevanceMemoryManager:
    return RelevanceMemoryManager(
        max_input_tokens=budget, scorer=RecencyScorer(), pheromone={"enabled": False},
        order=OrderPolicy(core=FIRST + RECENCY, working=RECENCY, spare=RECENCY), embeddings=False,
    )


METHOD_FUNCS: dict[str, Callable[[Run, int, Counter], Iterator[Step]]] = {
    "full": _full, "mask": _mask, "mask_trim": _mask_trim, "trim": _trim,
    "recency": _managed(recency_memory), "ours": _managed(ours_memory),
}


# --------------------------------------------------------------------------- measuring
@dataclass
class Meter:
    """Totals of one (run, budget, method)."""

    requests: int = 0
    sent: int = 0
    cached: int = 0
    cost: dict[str, float] = field(default_factory=lambda: {str(p): 0.0 for p in PRICES})
    compactions: int = 0
    over_budget: int = 0
    max_sent: int = 0
    needed: int = 0
    supported: int = 0
    task_kept: int = 0
    user_pairs: int = 0
    user_kept: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def add(self, other: Meter) -> None:
        for name in ("requests", "sent", "cached", "compactions", "over_budget", "needed", "supported", "task_kept",
                     "user_pairs", "user_kept", "failed", "seconds"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.max_sent = max(self.max_sent, other.max_sent)
        self.errors.extend(other.errors)
        for p in self.cost:
            self.cost[p] += other.cost[p]


class Needs:
    """Per request point, the identifiers of the next message needed from memory (SPEC §11)."""

    def __init__(self, run: Run) -> None:
        messages = run.messages
        system = "\n".join(message_text(m) for m in messages if m.get("role") in ("system", "developer"))
        texts = [message_text(m) for m in messages]
        self.by_point: dict[int, set[str]] = {}
        for k in request_points(messages):
            wanted = identifiers(texts[k])
            earlier = "\n".join(texts[:k])
            recent = "\n".join(texts[max(0, k - RECENT_WINDOW):k])
            self.by_point[k] = {w for w in wanted if w in earlier and w not in recent and w not in system}


def request_text(messages: Sequence[Mapping[str, Any]]) -> str:
    return "\n".join(message_text(m) for m in messages)


def measure(run: Run, budget: int, method: str, counter: Counter, policy: CachePolicy, needs: Needs) -> Meter:
    """Replay ``run`` with ``method`` at ``budget``; the totals of its requests."""
    meter = Meter()
    schema = tools_tokens(counter.inner, run.tools or None)
    first_user = next((i for i, m in enumerate(run.messages) if m.get("role") == "user"), None)
    task = run.messages[first_user] if first_user is not None else None
    previous: list[dict[str, Any]] | None = None
    points = request_points(run.messages)
    steps = METHOD_FUNCS[method](run, budget, counter)
    k = -1
    try:
        for k, step in zip(points, steps, strict=False):  # a failed run stops early
            sent = counter.request(step.messages) + schema
            prefix = 0
            if previous is not None:
                prefix = shared_prefix_tokens(previous, step.messages, count_message=counter.message,
                                              count_text=counter.inner.count_text)
                prefix += schema if prefix else 0
            cached = policy.cacheable(prefix)
            meter.requests += 1
            meter.sent += sent
            meter.cached += cached
            meter.max_sent = max(meter.max_sent, sent)
            meter.over_budget += int(sent > budget)
            for p in PRICES:
                meter.cost[str(p)] += policy.cost(sent, cached, p)
            meter.compactions += int(step.compacted)
            meter.seconds += step.seconds
            text = request_text(step.messages)
            wanted = needs.by_point.get(k, set())
            meter.needed += len(wanted)
            meter.supported += sum(1 for w in wanted if w in text)
            if task is not None:
                task_text = content_text(task.get("content"))
                meter.task_kept += int(any(m.get("role") == "user" and content_text(m.get("content")) == task_text
                                           for m in step.messages))
            if run.kind == "tau" and first_user is not None:
                users = [content_text(m.get("content")) for m in run.messages[first_user + 1:k] if m.get("role") == "user"]
                shown = {content_text(m.get("content")) for m in step.messages if m.get("role") == "user"}
                meter.user_pairs += len(users)
                meter.user_kept += sum(1 for u in users if u in shown)
            previous = step.messages
    except Exception as exc:  # a run that cannot be built: its requests so far count
        meter.failed = 1
        meter.errors.append(f"{run.name} at {budget}, request {k}: {type(exc).__name__}: {str(exc)[:160]}")
    return meter


def ratio(a: float, b: float) -> float:
    return a / b if b else 0.0


HEADER = (f"{'run':30} {'method':20} {'reqs':>5} {'×full':>5} {'@0.1×':>5} {'@0.5×':>5} {'cache':>6} {'cmp':>4} "
          f"{'over':>4} {'max':>7} {'support':>7} {'task':>5} {'users':>5} {'fail':>4} {'ms/req':>6}")


def row_text(name: str, method: str, m: Meter, full: Meter) -> str:
    users = f"{ratio(m.user_kept, m.user_pairs):.2f}" if m.user_pairs else "  -  "
    return (f"{name[:30]:30} {method[:20]:20} {m.requests:>5} {ratio(m.sent, full.sent):>5.2f} "
            f"{ratio(m.cost['0.1'], full.cost['0.1']):>5.2f} {ratio(m.cost['0.5'], full.cost['0.5']):>5.2f} "
            f"{ratio(m.cached, m.sent):>6.1%} {m.compactions:>4} {m.over_budget:>4} {m.max_sent:>7,} "
            f"{ratio(m.supported, m.needed):>7.3f} {ratio(m.task_kept, m.requests):>5.2f} {users:>5} {m.failed:>4} "
            f"{1000 * ratio(m.seconds, m.requests):>6.1f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--swe", type=Path, action="append", default=None,
                        help="directory of SWE runs (repeatable; default ../shared/data/swebench_trajectories and fixtures/)")
    parser.add_argument("--tau", type=int, default=-1, help="τ-bench runs to replay (file order; -1: all)")
    parser.add_argument("--tau-file", type=Path, default=ROOT.parent / "shared" / "data" / "tau_bench" / "gpt-4o-airline.json")
    parser.add_argument("--synthetic", type=int, default=60, help="steps of the synthetic 2k-token-output loop (0: none)")
    parser.add_argument("--budgets", default="4000,8000,16000,32000")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--runs", default="", help="only runs whose name contains one of these (comma-separated)")
    parser.add_argument("--out", type=Path, default=None, help="write every row as JSON here")
    parser.add_argument("--quiet", action="store_true", help="totals only")
    parser.add_argument("--config", default="", help="JSON of MemoryConfig overrides for 'ours' (ablations)")
    parser.add_argument("--ablation", action="store_true",
                        help="run the VARIANTS of 'ours' instead of the methods (SWE and synthetic totals)")
    args = parser.parse_args(argv)
    if args.config:
        OURS_OVERRIDES.update(json.loads(args.config))
    if args.ablation:
        for name, (config, summarizer) in VARIANTS.items():
            METHOD_FUNCS[name] = variant_method(config, summarizer)
        args.methods = ",".join(VARIANTS)

    swe_dirs = args.swe or [ROOT.parent / "shared" / "data" / "swebench_trajectories", ROOT / "fixtures"]
    runs = load_runs(swe_dirs, args.tau_file, args.tau)
    if args.synthetic:
        runs.append(synthetic_run(args.synthetic))
    if args.runs:
        wanted = [w for w in args.runs.split(",") if w]
        runs = [r for r in runs if any(w in r.name for w in wanted)]
    if not runs:
        print("no runs found", file=sys.stderr)
        return 1
    methods = [m for m in args.methods.split(",") if m]
    if "full" not in methods:
        methods.insert(0, "full")
    policy = CachePolicy()
    counter = Counter(TiktokenCounter("o200k_base"))
    needs = {run.name: Needs(run) for run in runs}
    kinds = [k for k in ("swe", "tau", "synthetic") if any(r.kind == k for r in runs)]
    print(f"{len(runs)} runs ({', '.join(f'{sum(r.kind == k for r in runs)} {k}' for k in kinds)}); "
          f"python {platform.python_version()}, {platform.machine()}; o200k_base; cache rule "
          f"{policy.cache_min_tokens}+ tokens in steps of {policy.cache_step_tokens}")
    rows: list[dict[str, Any]] = []
    errors: list[str] = []
    for budget in (int(b) for b in args.budgets.split(",")):
        print(f"\n## budget {budget}\n{HEADER}")
        totals: dict[tuple[str, str], Meter] = {}
        for run in runs:
            meters = {m: measure(run, budget, m, counter, policy, needs[run.name]) for m in methods}
            for method, meter in meters.items():
                totals.setdefault((run.kind, method), Meter()).add(meter)
                errors.extend(meter.errors)
                rows.append({"run": run.name, "kind": run.kind, "budget": budget, "method": method, **asdict(meter)})
                if not args.quiet and run.kind != "tau":
                    print(row_text(run.name, method, meter, meters["full"]))
            sys.stdout.flush()
        for kind in kinds:
            for method in methods:
                meter = totals[(kind, method)]
                print(row_text(f"TOTAL {kind}", method, meter, totals[(kind, "full")]))
                rows.append({"run": f"TOTAL {kind}", "kind": kind, "budget": budget, "method": method,
                             **{k: v for k, v in asdict(meter).items() if k != "errors"}})
    if errors:
        print(f"\n{len(errors)} run(s) could not be built:")
        for line in errors[:40]:
            print("  " + line)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        payload = {"python": platform.python_version(), "machine": platform.machine(), "rows": rows}
        args.out.write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

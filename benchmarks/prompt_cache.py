"""Prompt-cache cost of a context strategy, replayed on real agent runs (issue 10, SPEC §3.1).

Every run is replayed step by step: before each assistant message, the history so far is
turned into a request by each method, and consecutive requests of a method are compared
the way a provider's prompt cache compares them. Methods:

- ``full``: the whole history, verbatim (what an agent without memory management sends);
  where it exceeds the model's window (``--window``, default the model's: 128k for
  gpt-4o, minus a 10 % output reserve) the user would trim it instead, with
  ``langchain_core.messages.trim_messages`` keeping the last messages that fit — those
  steps are counted in ``trimmed``;
- ``trim``: ``trim_messages(strategy="last", include_system=True, start_on=("human", "ai"))``
  at the budget (the usual one-liner);
- ``rebuild``: relevance-memory building every call from scratch,
  ``CachePolicy(always_rebuild=True)`` (the behaviour before issue 10, with its layout);
- ``default``: relevance-memory's default, prefix-stable builds: the previous request
  verbatim plus the new messages while that fits the budget, else a compaction down to
  ``CachePolicy.target_fraction`` of it (``--target`` sets it).

Per run, budget and method: requests, tokens sent, the reusable prefix (exact prefix match
with the previous request, tokens; counted as cached only from 1,024 tokens on and in
128-token steps, OpenAI's rule: "Cache hits require an exact, repeated prefix match and
works automatically for prompts containing 1024 tokens or more, with cache hits occurring
in increments of 128 tokens", OpenAI cookbook *Prompt Caching 201* / API guide
*Prompt caching*), its share of the tokens sent, cost units ``uncached + p × cached`` for
p = 0.1 and 0.5 and their ratio to ``full``, compactions (builds that were not appends),
the share of requests holding the task statement (the first user message) verbatim and
the share of (request, user constraint) pairs holding the constraint verbatim (user
messages after the first one that state a constraint, as the store classifies them;
any copy counts), and the seconds spent building. Tool schemas are left out of every
request (they are the same for every method).

    PYTHONPATH=. nice -n 10 .venv/bin/python benchmarks/prompt_cache.py \\
        --budgets 8000,16000,32000 --tau 20 --out benchmarks/results/prompt_cache.json

Needs the ``langchain`` extra (``pip install 'relevance-memory[langchain]'``).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from relevance_memory import (
    RelevanceMemoryManager,
    TiktokenCounter,
    load_transcript,
)
from relevance_memory._cache_policy import CachePolicy
from relevance_memory._config import context_window_for
from relevance_memory._models import content_text
from relevance_memory._text import has_constraint
from relevance_memory._tokenizer import REPLY_PRIMING_TOKENS
from relevance_memory.pipeline._prefix import message_key, shared_prefix_tokens

ROOT = Path(__file__).resolve().parents[1]
PRICES = (0.1, 0.5)
METHODS = ("full", "trim", "rebuild", "default")


@dataclass
class Run:
    """One replayed agent run: ``kind`` is ``swe`` or ``tau``."""

    name: str
    kind: str
    messages: list[dict[str, Any]]


def load_runs(swe_dirs: Sequence[Path], tau_path: Path | None, tau_n: int) -> list[Run]:
    """SWE runs from ``swe_dirs`` (deduplicated by file name and content) and the ``tau_n``
    longest τ-bench trajectories of ``tau_path`` (most messages; file order among equals)."""
    runs: list[Run] = []
    seen: dict[str, str] = {}
    for directory in swe_dirs:
        if not directory.is_dir():
            continue
        for path in sorted(directory.glob("*.json")):
            text = path.read_text(encoding="utf-8")
            if path.name in seen:
                if seen[path.name] != text:
                    runs.append(Run(f"{path.stem}@{directory.name}", "swe", load_transcript(path).messages))
                continue
            seen[path.name] = text
            runs.append(Run(path.stem, "swe", load_transcript(path).messages))
    if tau_path is not None and tau_path.is_file() and tau_n > 0:
        items = json.loads(tau_path.read_text(encoding="utf-8"))
        longest = sorted(items, key=lambda item: -len(item["traj"]))  # stable: file order among equals
        for item in longest[:tau_n]:
            runs.append(Run(f"tau-{item['task_id']}-{item['trial']}", "tau", list(item["traj"])))
    return runs


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
            self._keep.append(message)  # ids stay valid while memoised
        return self._memo[key]

    def request(self, messages: Sequence[Mapping[str, Any]]) -> int:
        return REPLY_PRIMING_TOKENS + sum(self.message(m) for m in messages)


@dataclass
class Step:
    """One request of a method."""

    messages: list[dict[str, Any]]
    tokens: int
    compacted: bool = False
    trimmed: bool = False
    seconds: float = 0.0


@dataclass
class Meter:
    """Totals of one (run, budget, method)."""

    requests: int = 0
    sent: int = 0
    prefix: int = 0
    cached: int = 0
    cost: dict[str, float] = field(default_factory=lambda: {str(p): 0.0 for p in PRICES})
    compactions: int = 0
    trimmed: int = 0
    task_kept: int = 0
    constraint_pairs: int = 0
    constraints_kept: int = 0
    seconds: float = 0.0
    max_sent: int = 0

    def add(self, other: Meter) -> None:
        for name in ("requests", "sent", "prefix", "cached", "compactions", "trimmed", "task_kept",
                     "constraint_pairs", "constraints_kept", "seconds"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.max_sent = max(self.max_sent, other.max_sent)
        for p in self.cost:
            self.cost[p] += other.cost[p]


def request_points(messages: Sequence[dict[str, Any]]) -> list[int]:
    """History lengths at which the model is called: before every assistant message."""
    return [k for k, m in enumerate(messages) if m.get("role") == "assistant" and k > 0]


# --------------------------------------------------------------------------- methods
def full_history(run: Run, budget: int, counter: Counter, window: int) -> Iterator[Step]:
    """The whole history; trimmed to the window (``trim_messages``) only where it exceeds it."""
    lc = _LangChain(run.messages, counter)
    for k in request_points(run.messages):
        history = run.messages[:k]
        tokens = counter.request(history)
        if tokens <= window:
            yield Step(history, tokens)
            continue
        start = time.perf_counter()
        trimmed = lc.trim(k, window)
        yield Step(trimmed, counter.request(trimmed), trimmed=True, seconds=time.perf_counter() - start)


def trimmed_history(run: Run, budget: int, counter: Counter, window: int) -> Iterator[Step]:
    """``trim_messages`` keeping the last messages that fit the budget."""
    lc = _LangChain(run.messages, counter)
    for k in request_points(run.messages):
        start = time.perf_counter()
        messages = lc.trim(k, budget)
        yield Step(messages, counter.request(messages), trimmed=True, seconds=time.perf_counter() - start)


class _LangChain:
    """The run as LangChain messages, trimmed with ``trim_messages`` to a token limit."""

    def __init__(self, messages: Sequence[dict[str, Any]], counter: Counter) -> None:
        from langchain_core.messages import convert_to_messages

        self.messages = list(messages)
        self.lc = convert_to_messages(self.messages)
        self.index = {id(m): i for i, m in enumerate(self.lc)}
        self.counter = counter

    def count(self, messages: Sequence[Any]) -> int:
        return sum(self.counter.message(self.messages[self.index[id(m)]]) for m in messages)

    def trim(self, k: int, limit: int) -> list[dict[str, Any]]:
        from langchain_core.messages import trim_messages

        kept = trim_messages(
            self.lc[:k], max_tokens=limit - REPLY_PRIMING_TOKENS, token_counter=self.count, strategy="last",
            include_system=True, start_on=("human", "ai"), allow_partial=False,
        )
        return [self.messages[self.index[id(m)]] for m in kept]


def rebuilt(run: Run, budget: int, counter: Counter, window: int) -> Iterator[Step]:
    """relevance-memory building every request from scratch (``CachePolicy(always_rebuild=True)``;
    offline scorer, keep_recent 4)."""
    memory = RelevanceMemoryManager(max_input_tokens=budget, keep_recent=4, cache_policy=CachePolicy(always_rebuild=True))
    done = 0
    for k in request_points(run.messages):
        memory.extend(run.messages[done:k])
        done = k
        start = time.perf_counter()
        built = memory.build_context()
        seconds = time.perf_counter() - start
        yield Step(built.messages, built.record.tokens_after, compacted=not built.record.identity, seconds=seconds)


def managed(run: Run, budget: int, counter: Counter, window: int, policy: CachePolicy | None = None) -> Iterator[Step]:
    """relevance-memory's default, prefix-stable builds (``policy``: default :class:`CachePolicy`):
    the previous request plus the new messages while that fits, else a compaction."""
    memory = RelevanceMemoryManager(max_input_tokens=budget, keep_recent=4, cache_policy=policy or CachePolicy())
    done = 0
    for k in request_points(run.messages):
        memory.extend(run.messages[done:k])
        done = k
        start = time.perf_counter()
        built = memory.build_context()
        seconds = time.perf_counter() - start
        record = built.record
        if record.mode == "appended" and record.prefix_tokens != counter.request(built.messages[: len(built.messages) - len(record.appended_ids)]) - REPLY_PRIMING_TOKENS:
            raise AssertionError(f"{run.name}: an appended build does not extend the previous request")
        compacted = record.mode != "appended" and not record.identity
        yield Step(built.messages, record.tokens_after, compacted=compacted, seconds=seconds)


METHOD_FUNCS: dict[str, Callable[..., Iterator[Step]]] = {
    "full": full_history, "trim": trimmed_history, "rebuild": rebuilt, "default": managed,
}


# --------------------------------------------------------------------------- measuring
def constraints_of(run: Run, memory: RelevanceMemoryManager | None = None) -> tuple[str | None, dict[int, str]]:
    """The task statement's key (first user message) and, per history index, the content
    of each later user message that states a constraint (SPEC §4 ``has_constraint``)."""
    task: str | None = None
    found: dict[int, str] = {}
    for i, m in enumerate(run.messages):
        if m.get("role") != "user":
            continue
        if task is None:
            task = message_key(m)
            continue
        text = content_text(m.get("content"))
        if has_constraint(text):
            found[i] = text
    return task, found


def measure(
    run: Run, budget: int, method: str, counter: Counter, policy: CachePolicy, window: int
) -> Meter:
    """Replay ``run`` with ``method`` at ``budget``; the totals of its requests."""
    meter = Meter()
    task, constraints = constraints_of(run)
    previous: list[dict[str, Any]] | None = None
    points = request_points(run.messages)
    steps = METHOD_FUNCS[method](run, budget, counter, window, policy=policy) if method == "default" else (
        METHOD_FUNCS[method](run, budget, counter, window)
    )
    for k, step in zip(points, steps, strict=True):
        sent = counter.request(step.messages)
        if step.tokens != sent:
            raise AssertionError(f"{run.name} {method}: reported {step.tokens} tokens, counted {sent}")
        prefix = 0
        if previous is not None:
            prefix = shared_prefix_tokens(
                previous, step.messages, count_message=counter.message, count_text=counter.inner.count_text
            )
        cached = policy.cacheable(prefix)
        meter.requests += 1
        meter.sent += sent
        meter.prefix += prefix
        meter.cached += cached
        meter.max_sent = max(meter.max_sent, sent)
        for p in PRICES:
            meter.cost[str(p)] += policy.cost(sent, cached, p)
        meter.compactions += int(step.compacted)
        meter.trimmed += int(step.trimmed)
        meter.seconds += step.seconds
        keys = {message_key(m) for m in step.messages}
        meter.task_kept += int(task is not None and task in keys)
        live = {text for i, text in constraints.items() if i < k}
        texts = {content_text(m.get("content")) for m in step.messages if m.get("role") == "user"}
        meter.constraint_pairs += len(live)
        meter.constraints_kept += len(live & texts)
        previous = step.messages
    return meter


def ratio(a: float, b: float) -> float:
    return a / b if b else 0.0


def row_text(name: str, method: str, m: Meter, full: Meter) -> str:
    share = ratio(m.cached, m.sent)
    cons = f"{ratio(m.constraints_kept, m.constraint_pairs):.2f}" if m.constraint_pairs else "  - "
    return (
        f"{name:32} {method:9} {m.requests:>4} {m.sent:>10,} {ratio(m.sent, full.sent):>5.2f} {share:>6.1%} "
        f"{m.cost['0.1']:>11,.0f} {ratio(m.cost['0.1'], full.cost['0.1']):>5.2f} "
        f"{ratio(m.cost['0.5'], full.cost['0.5']):>5.2f} {m.compactions:>4} {m.trimmed:>4} "
        f"{ratio(m.task_kept, m.requests):>5.2f} {cons:>5} {1000 * ratio(m.seconds, m.requests):>7.1f}"
    )


HEADER = (
    f"{'run':32} {'method':9} {'reqs':>4} {'sent tok':>10} {'×full':>5} {'prefix':>6} {'cost@0.1':>11} "
    f"{'×full':>5} {'@0.5×':>5} {'cmp':>4} {'trim':>4} {'task':>5} {'cons':>5} {'ms/req':>7}"
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--swe", type=Path, action="append", default=None,
                        help="directory of SWE runs (repeatable; default ../shared/data/swebench_trajectories and fixtures/)")
    parser.add_argument("--tau", type=int, default=20, help="τ-bench trajectories to replay (the N longest)")
    parser.add_argument("--tau-file", type=Path, default=ROOT.parent / "shared" / "data" / "tau_bench" / "gpt-4o-airline.json")
    parser.add_argument("--budgets", default="8000,16000,32000")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--runs", default="", help="only runs whose name contains one of these (comma-separated)")
    parser.add_argument("--target", type=float, default=None, help="CachePolicy.target_fraction of the default method")
    parser.add_argument("--model", default="gpt-4o", help="model whose window bounds the full history")
    parser.add_argument("--window", type=int, default=None, help="model window (tokens); default the model's")
    parser.add_argument("--out", type=Path, default=None, help="write every row as JSON here")
    parser.add_argument("--quiet", action="store_true", help="totals only")
    args = parser.parse_args(argv)

    swe_dirs = args.swe or [ROOT.parent / "shared" / "data" / "swebench_trajectories", ROOT / "fixtures"]
    runs = load_runs(swe_dirs, args.tau_file, args.tau)
    if args.runs:
        wanted = [w for w in args.runs.split(",") if w]
        runs = [r for r in runs if any(w in r.name for w in wanted)]
    if not runs:
        print("no runs found", file=sys.stderr)
        return 1
    methods = [m for m in args.methods.split(",") if m]
    if "full" not in methods:
        methods.insert(0, "full")
    policy = CachePolicy() if args.target is None else CachePolicy(target_fraction=args.target)
    window = args.window or context_window_for(args.model)
    window_budget = int(window * 0.9)  # the user leaves 10 % of the window for the reply
    counter = Counter(TiktokenCounter("o200k_base"))
    rows: list[dict[str, Any]] = []
    print(f"{len(runs)} runs ({sum(r.kind == 'swe' for r in runs)} SWE, {sum(r.kind == 'tau' for r in runs)} τ-bench); "
          f"policy {policy.model_dump()}; window {window} (full history trimmed above {window_budget})")
    for budget in (int(b) for b in args.budgets.split(",")):
        print(f"\n## budget {budget}\n{HEADER}")
        totals: dict[tuple[str, str], Meter] = {}
        for run in runs:
            meters = {m: measure(run, budget, m, counter, policy, window_budget) for m in methods}
            for method, meter in meters.items():
                totals.setdefault((run.kind, method), Meter()).add(meter)
                rows.append({"run": run.name, "kind": run.kind, "budget": budget, "method": method, **asdict(meter)})
                if not args.quiet:
                    print(row_text(run.name, method, meter, meters["full"]))
            sys.stdout.flush()
        for kind in ("swe", "tau"):
            if (kind, "full") not in totals:
                continue
            for method in methods:
                meter = totals[(kind, method)]
                print(row_text(f"TOTAL {kind}", method, meter, totals[(kind, "full")]))
                rows.append({"run": f"TOTAL {kind}", "kind": kind, "budget": budget, "method": method, **asdict(meter)})
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        payload = {"policy": policy.model_dump(), "window": window, "python": platform.python_version(), "rows": rows}
        args.out.write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

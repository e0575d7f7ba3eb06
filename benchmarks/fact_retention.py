"""Fact retention across many compactions (issue 23 item 3).

Plants N facts — names, numbers, decisions, constraints — early in long runs, drives the
append/compact cycle request by request (before every assistant message, as
``benchmarks/agent_support.py`` replays a run: ``extend`` the new messages, ``build_context``
with ``max_input_tokens`` = the budget), and after every compaction (a build that neither
appended nor sent the history whole) checks each fact's probe — the distinctive value of the
fact, e.g. ``48213`` or ``Quellin`` — in the context: message text, tool-call arguments and
summaries. Each hit is classed by where it was found: ``verbatim`` (the planted message
unchanged), ``excerpt`` (another message that is not a summary: an excerpt of it, or a later
message quoting it) or ``summary``.

Runs:

- ``swe``: the SWE-bench runs of ``../shared/data/swebench_trajectories`` with ≥ ``--min-messages``
  messages; the facts are user messages right after the task statement;
- ``tau``: ``--tau-sessions`` long customer-service sessions, each the system policy once and
  then ``--tau-per-session`` consecutive τ-bench airline conversations (tool calls and results
  as recorded); the facts follow the first customer message;
- ``chat``: ``--chats`` synthetic chats of ``--chat-turns`` user/assistant turns about varied
  everyday topics (seeded); the facts are among the first turns.

Reported per budget and fact kind: the checks (facts × compactions) and the share present;
where they were found; and **lost by a re-summarisation**: a fact present only through a
summary at one compaction and absent at the next one (an earlier level kept it, the next
summary did not).

    PYTHONPATH=. nice -n 10 .venv/bin/python benchmarks/fact_retention.py \\
        --budgets 4000,8000,16000 --out benchmarks/results/fact_retention.json
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from relevance_memory import RelevanceMemoryManager, load_transcript
from relevance_memory._models import content_text

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
SUMMARY_PREFIX = "[relevance-memory: summary"
KINDS = ("name", "number", "decision", "constraint")

_FIRST = ["Zorvath", "Imelda", "Kestrel", "Oduya", "Brannoch", "Ysolde", "Tamsin", "Quillon", "Fenwick", "Marisol"]
_LAST = ["Quellin", "Drummarch", "Okonkwo-Reyes", "Vashti", "Teodorescu", "Lindqvist", "Abernethy", "Castellanos"]
_ROLES = ["reviewer", "release manager", "on-call engineer", "product owner", "security contact"]
_NUMBERS = [("the staging server listens on port {n}", 41000, 49999),
            ("the customer's account number is {n}", 7100000, 7999999),
            ("the approved budget for this work is ${n}", 1200, 9800),
            ("the ticket for this is INC-{n}", 10000, 99999)]
_DECISIONS = [("we will use {x} for the cache layer, not the in-house store", ["Valkyrie-7", "Memcrux 3", "Tidepool 2"]),
              ("the release ships under the codename {x}", ["Bluefinch", "Larkspur", "Coldharbor"]),
              ("we store timestamps as {x}", ["epoch-millis-UTC", "ISO-8601-with-offset", "TAI64N"])]
_CONSTRAINTS = [("never modify files under {x}", ["vendor/legacy_api/", "third_party/qxlib/", "ops/terraform-prod/"]),
                ("all replies must be signed off as {x}", ["-- team Osprey", "-- desk Kittiwake", "-- crew Moorhen"]),
                ("do not contact anyone before {x}", ["09:30 CET", "14:45 UTC", "07:15 PST"])]


@dataclass(frozen=True)
class Fact:
    """One planted fact: ``probe`` is the value that must be in the context."""

    kind: str
    text: str
    probe: str


def make_facts(n: int, rng: random.Random) -> list[Fact]:
    """``n`` facts, the kinds in turn, each with a distinctive probe (deterministic)."""
    facts: list[Fact] = []
    for k in range(n):
        kind = KINDS[k % len(KINDS)]
        if kind == "name":
            first, last, role = rng.choice(_FIRST), rng.choice(_LAST), rng.choice(_ROLES)
            facts.append(Fact(kind, f"For the record: the {role} for this is {first} {last}; copy them on the outcome.",
                              f"{first} {last}"))
        elif kind == "number":
            template, low, high = _NUMBERS[(k // len(KINDS)) % len(_NUMBERS)]
            value = str(rng.randint(low, high))
            facts.append(Fact(kind, f"Please remember: {template.format(n=value)}.", value))
        elif kind == "decision":
            template, options = _DECISIONS[(k // len(KINDS)) % len(_DECISIONS)]
            value = rng.choice(options)
            facts.append(Fact(kind, f"Decision made: {template.format(x=value)}.", value))
        else:
            template, options = _CONSTRAINTS[(k // len(KINDS)) % len(_CONSTRAINTS)]
            value = rng.choice(options)
            facts.append(Fact(kind, f"Hard constraint: {template.format(x=value)}.", value))
    return facts


@dataclass
class Run:
    """One long run with its facts planted; ``planted`` are the facts' message positions."""

    name: str
    kind: str
    messages: list[dict[str, Any]]
    facts: list[Fact]
    planted: list[int]
    tools: list[dict[str, Any]] = field(default_factory=list)


def plant(messages: list[dict[str, Any]], at: int, facts: Sequence[Fact]) -> tuple[list[dict[str, Any]], list[int]]:
    """``messages`` with one user message per fact inserted at ``at`` (before a message that
    starts a turn, so no tool chain is split)."""
    planted = [{"role": "user", "content": fact.text} for fact in facts]
    return messages[:at] + planted + messages[at:], list(range(at, at + len(facts)))


def swe_runs(n_facts: int, min_messages: int, seed: int) -> list[Run]:
    out: list[Run] = []
    directory = DATA / "swebench_trajectories"
    for k, path in enumerate(sorted(directory.glob("*.json"))):
        messages = load_transcript(path).messages
        if len(messages) < min_messages:
            continue
        facts = make_facts(n_facts, random.Random(seed + k))
        planted, at = plant(messages, 2, facts)  # after the system prompt and the task statement
        raw = json.loads(path.read_text(encoding="utf-8"))
        out.append(Run(path.stem, "swe", planted, facts, at, list(raw.get("tools") or [])))
    return out


def tau_runs(n_facts: int, sessions: int, per_session: int, seed: int) -> list[Run]:
    path = DATA / "tau_bench" / "gpt-4o-airline.json"
    if not path.is_file() or sessions <= 0:
        return []
    items = json.loads(path.read_text(encoding="utf-8"))
    out: list[Run] = []
    for s in range(sessions):
        chunk = items[s * per_session * 4:(s + 1) * per_session * 4:4]  # one trial of each task: 4 trials a task
        messages: list[dict[str, Any]] = []
        for item in chunk:
            traj = [dict(m) for m in item["traj"]]
            messages.extend(traj if not messages else [m for m in traj if m.get("role") != "system"])
        facts = make_facts(n_facts, random.Random(seed + 1000 + s))
        first_user = next(i for i, m in enumerate(messages) if m.get("role") == "user")
        planted, at = plant(messages, first_user + 1, facts)
        out.append(Run(f"tau-session-{s}", "tau", planted, facts, at))
    return out


_TOPICS = ["gardening", "sourdough", "marathon training", "budget travel", "home networking", "watercolour",
           "bird watching", "chess openings", "bike repair", "houseplants", "meal prep", "film photography",
           "learning Portuguese", "woodworking", "astronomy", "composting", "jazz piano", "rock climbing"]
_ASKS = ["What is a good way to start with {t}?", "Any common mistakes people make with {t}?",
         "How much time a week should I give {t}?", "Which tools do I need for {t}?",
         "Can you suggest a small project for {t} this weekend?", "How do I keep motivated with {t}?"]


def chat_run(n_facts: int, turns: int, seed: int) -> Run:
    """A long everyday chat (seeded): ``turns`` user questions about varied topics, each with a
    two-to-four-sentence answer."""
    rng = random.Random(seed)
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a helpful personal assistant."},
                                      {"role": "user", "content": "Hi! I'll ask you about my hobbies and my work over the day."},
                                      {"role": "assistant", "content": "Happy to help - ask away."}]
    for k in range(turns):
        topic = rng.choice(_TOPICS)
        ask = rng.choice(_ASKS).format(t=topic)
        minutes = rng.randint(10, 90)
        answer = " ".join(rng.sample([
            f"For {topic}, start small and keep a short log of what you tried.",
            f"Set aside about {minutes} minutes a session and review after two weeks.",
            f"Most beginners in {topic} overdo it early; pace yourself.",
            f"A local club or an online forum about {topic} helps with questions.",
            "Write down one thing that went well each time.",
            "Borrow gear before buying it, until you know what you like.",
        ], rng.randint(2, 4)))
        messages.append({"role": "user", "content": f"{ask} (question {k + 1})"})
        messages.append({"role": "assistant", "content": answer})
    facts = make_facts(n_facts, random.Random(seed + 2000))
    planted, at = plant(messages, 3, facts)
    # each fact is acknowledged, as a chat would: the user message, then a short reply
    out: list[dict[str, Any]] = []
    for i, message in enumerate(planted):
        out.append(message)
        if i in at:
            out.append({"role": "assistant", "content": "Noted."})
    positions = [i for i, m in enumerate(out) if m.get("role") == "user" and any(m["content"] == f.text for f in facts)]
    return Run(f"chat-{seed}", "chat", out, facts, positions)


def request_points(messages: Sequence[Mapping[str, Any]]) -> list[int]:
    """History lengths at which the model is called: before every assistant message."""
    return [k for k, m in enumerate(messages) if m.get("role") == "assistant" and k > 0]


def message_text(message: Mapping[str, Any]) -> str:
    parts = [content_text(message.get("content"))]
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        parts.append(str(function.get("arguments", "")))
    return "\n".join(parts)


@dataclass
class Tally:
    """Counts of one (budget, run kind, fact kind) cell."""

    checks: int = 0
    present: int = 0
    verbatim: int = 0
    excerpt: int = 0
    summary: int = 0
    lost_by_resummary: int = 0

    def add(self, other: Tally) -> None:
        for name in vars(self):
            setattr(self, name, getattr(self, name) + getattr(other, name))


def where(fact: Fact, messages: Sequence[Mapping[str, Any]]) -> str | None:
    """``verbatim``, ``excerpt`` or ``summary`` (the best place the probe is found), or None."""
    found: set[str] = set()
    for message in messages:
        text = message_text(message)
        if fact.probe not in text:
            continue
        if text.startswith(SUMMARY_PREFIX):
            found.add("summary")
        elif fact.text == text:
            found.add("verbatim")
        else:
            found.add("excerpt")
    for place in ("verbatim", "excerpt", "summary"):
        if place in found:
            return place
    return None


def replay(run: Run, budget: int) -> tuple[dict[str, Tally], dict[str, Any]]:
    """Drive ``run`` through the append/compact cycle at ``budget``; check the facts after
    every compaction. Returns fact kind → counts, and run facts (steps, compactions, losses)."""
    memory = RelevanceMemoryManager(max_input_tokens=budget, clock=lambda: datetime(2026, 12, 2, tzinfo=timezone.utc))
    tallies = {kind: Tally() for kind in KINDS}
    previous: dict[int, str | None] = {}
    done = compactions = steps = 0
    losses: list[str] = []
    started = time.perf_counter()
    error = ""
    for k in request_points(run.messages):
        memory.extend(run.messages[done:k])
        done = k
        steps += 1
        try:
            built = memory.build_context(tools=run.tools or None)
        except Exception as exc:
            error = f"{type(exc).__name__} at message {k}: {str(exc)[:200]}"
            break
        record = built.record
        if record.mode == "appended" or record.identity or k <= max(run.planted):
            continue
        compactions += 1
        for n, fact in enumerate(run.facts):
            place = where(fact, built.messages)
            tally = tallies[fact.kind]
            tally.checks += 1
            if place is not None:
                tally.present += 1
                setattr(tally, place, getattr(tally, place) + 1)
            elif previous.get(n) == "summary":
                tally.lost_by_resummary += 1
                losses.append(f"{fact.kind} {fact.probe!r} at message {k} (step {steps})")
            previous[n] = place
    info = {"steps": steps, "messages": len(run.messages), "compactions": compactions, "error": error,
            "seconds": round(time.perf_counter() - started, 1), "losses": losses[:20],
            "missing_at_end": [f.probe for n, f in enumerate(run.facts) if previous.get(n, "x") is None]}
    return tallies, info


def pct(a: int, b: int) -> str:
    return f"{100 * a / b:5.1f}%" if b else "   - "


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budgets", default="4000,8000,16000")
    parser.add_argument("--facts", type=int, default=8, help="facts planted per run")
    parser.add_argument("--min-messages", type=int, default=200, help="SWE runs with at least this many messages")
    parser.add_argument("--tau-sessions", type=int, default=2)
    parser.add_argument("--tau-per-session", type=int, default=12, help="τ-bench conversations per session")
    parser.add_argument("--chats", type=int, default=2)
    parser.add_argument("--chat-turns", type=int, default=220)
    parser.add_argument("--seed", type=int, default=23)
    parser.add_argument("--runs", default="", help="only runs whose name contains one of these (comma-separated)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)

    runs = swe_runs(args.facts, args.min_messages, args.seed)
    runs += tau_runs(args.facts, args.tau_sessions, args.tau_per_session, args.seed)
    runs += [chat_run(args.facts, args.chat_turns, args.seed + c) for c in range(args.chats)]
    if args.runs:
        wanted = [w for w in args.runs.split(",") if w]
        runs = [r for r in runs if any(w in r.name for w in wanted)]
    if not runs:
        print("no runs found (is ../shared/data there?)", file=sys.stderr)
        return 1
    print(f"{len(runs)} runs: " + ", ".join(f"{r.name} ({len(request_points(r.messages))} steps)" for r in runs))
    print(f"{args.facts} facts a run ({', '.join(KINDS)}); python {platform.python_version()}, "
          f"{platform.machine()}, {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC")
    rows: list[dict[str, Any]] = []
    header = f"{'run kind':<9} {'fact kind':<11} {'checks':>7} {'present':>8} {'verbatim':>9} {'excerpt':>8} {'summary':>8} {'lost by re-summary':>19}"
    for budget in (int(b) for b in args.budgets.split(",")):
        print(f"\n## budget {budget}")
        totals: dict[tuple[str, str], Tally] = {}
        for run in runs:
            tallies, info = replay(run, budget)
            run_total = Tally()
            for kind, tally in tallies.items():
                totals.setdefault((run.kind, kind), Tally()).add(tally)
                totals.setdefault(("all", kind), Tally()).add(tally)
                totals.setdefault(("all", "all"), Tally()).add(tally)
                run_total.add(tally)
            print(f"  {run.name:<32} steps {info['steps']:>4}  compactions {info['compactions']:>4}  "
                  f"present {pct(run_total.present, run_total.checks)}  lost by re-summary {run_total.lost_by_resummary}"
                  f"  ({info['seconds']} s){'  ERROR ' + info['error'] if info['error'] else ''}")
            for loss in info["losses"][:3]:
                print(f"      lost: {loss}")
            rows.append({"budget": budget, "run": run.name, "kind": run.kind, **info, **vars(run_total)})
            sys.stdout.flush()
        print(header)
        for (run_kind, fact_kind), tally in sorted(totals.items()):
            print(f"{run_kind:<9} {fact_kind:<11} {tally.checks:>7} {pct(tally.present, tally.checks):>8} "
                  f"{tally.verbatim:>9} {tally.excerpt:>8} {tally.summary:>8} {tally.lost_by_resummary:>19}")
            rows.append({"budget": budget, "run": f"TOTAL {run_kind}", "fact_kind": fact_kind, **vars(tally)})
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        payload = {"python": platform.python_version(), "machine": platform.machine(), "args": vars(args) | {"out": str(args.out)},
                   "rows": rows}
        args.out.write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Fuzz an agent loop built step by step (``extend`` + ``build_context``) against SPEC §9
(:func:`relevance_memory.testing.assert_valid_context`, every recorded excerpt's tokens its real
count) and against a fresh full build of the same history.

Each seed draws a budget (300–16,000 tokens), ``keep_recent``, an encoding and an excerpt share,
then a loop of steps: Chinese text, emoji, long lines and digit runs, content parts with images,
``name`` fields, huge call arguments, several user messages a step, a user message inside a pending
tool chain, subtask changes, requested compactions, ``tools=``. Prints one line per problem and a
count; a ``ContextOverflowError`` at 300–400 tokens, where the newest step cannot fit even as bare
markers, is expected. Written for issue 24's review (break41, 2026-12-06), where it found the
newest user message cut beside the step, a build giving up above the excerpt floor, and an
oversized output appended verbatim after an appended excerpt (all fixed, with tests).

    PYTHONPATH=. python scripts/fuzz_agent_loop.py 0 100     # seeds 0..99 (about a minute each ten)
"""
from __future__ import annotations

import json
import random
import sys
import traceback

from relevance_memory import RelevanceMemoryManager
from relevance_memory._exceptions import ContextOverflowError
from relevance_memory._tokenizer import REPLY_PRIMING_TOKENS
from relevance_memory.testing import assert_valid_context

WORDS = ["parser", "utils/dates.py", "def parse_date(", "ValueError", "12345", "6789012", "日期解析", "错误",
         "必须", "🙂", "🚀🚀", "x" * 50, "the", "and", "return", "import os", "{left}", "{", "}", "tokens left out",
         "0.000001", "-42", "ＡＢＣ", "é", "\t", "العربية", "👨‍👩‍👧‍👦"]


TOOLS = [{"type": "function", "function": {"name": "bash", "description": "run a command",
          "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}]


def text(rng: random.Random, n_tokens: int) -> str:
    kind = rng.random()
    if n_tokens <= 0:
        return ""
    if kind < 0.1:
        return "".join(rng.choice("的一是不了人我在有他这中大来上们") for _ in range(n_tokens))
    if kind < 0.15:
        return "".join(rng.choice("😀🙂🚀🔥✅❌") for _ in range(n_tokens // 2 + 1))
    if kind < 0.2:
        return "".join(rng.choice("0123456789") for _ in range(n_tokens * 3))  # one very long line of digits
    if kind < 0.25:
        return "A" * (n_tokens * 4)  # one very long line
    lines = []
    while sum(len(x) for x in lines) < n_tokens * 4:
        lines.append(" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 14))))
    return "\n".join(lines)


def user(rng: random.Random, size: int) -> dict:
    k = rng.random()
    msg: dict = {"role": "user"}
    if k < 0.15:
        msg["content"] = [{"type": "text", "text": text(rng, size)}, {"type": "text", "text": text(rng, size // 3)}]
    elif k < 0.2:
        msg["content"] = [{"type": "text", "text": text(rng, size)},
                          {"type": "image_url", "image_url": {"url": "https://example.com/x.png", "detail": "low"}}]
    else:
        msg["content"] = text(rng, size)
    if rng.random() < 0.2:
        msg["name"] = rng.choice(["alice", "bob_2", "用户"])
    return msg


def step(rng: random.Random, n: int, big: int) -> list[dict]:
    out: list[dict] = []
    k = rng.randint(0, 3)
    ids = [f"call_{n}_{j}" for j in range(k)]
    calls = []
    for cid in ids:
        argsize = rng.choice([5, 20, 200, big])
        args = json.dumps({"command": text(rng, argsize), "path": f"src/file_{n}.py"}, ensure_ascii=rng.random() < 0.5)
        calls.append({"id": cid, "type": "function", "function": {"name": rng.choice(["bash", "str_replace_editor"]), "arguments": args}})
    a: dict = {"role": "assistant", "content": text(rng, rng.choice([0, 10, 80, big])) or (None if calls else "ok")}
    if calls:
        a["tool_calls"] = calls
    out.append(a)
    for cid in ids:
        out.append({"role": "tool", "tool_call_id": cid, "content": text(rng, rng.choice([0, 30, 300, big, big * 3]))})
    return out


def violations(history, built, memory, budget, label):
    problems = []
    counter = memory.tokenizer
    try:
        assert_valid_context(history, built, counter, budget=budget)
    except AssertionError as e:
        problems.append(f"{label}: assert_valid_context: {e}")
    rec = built.record
    # newest user message verbatim while it alone fits the room the pinned prompt leaves
    users = [i for i, m in enumerate(history) if m.get("role") == "user"]
    pinned = 0
    for m in history:
        if m.get("role") != "system":
            break
        pinned += counter.count_message(m)
    if users:
        nu = users[-1]
        tok = counter.count_message(history[nu])
        room = budget - REPLY_PRIMING_TOKENS - pinned
        d = next((d for d in rec.messages if d.index == nu), None)
        if tok <= room and (d is None or d.fidelity != "verbatim" or history[nu] not in built.messages):
            # could it have been verbatim? the other recent messages at their least (an excerpt at 48)
            from relevance_memory.pipeline.fidelity import MIN_EXCERPT_TOKENS, excerpt_message
            least = sum(min(x.tokens, excerpt_message(memory.store[x.index], MIN_EXCERPT_TOKENS, (), counter).tokens)
                        for x in rec.messages if x.decision == "recent" and x.index != nu)
            if tok + least > room:
                return problems  # infeasible: the newest step cannot fit beside it
            problems.append(f"(least others {least}) "f"{label}: newest user {nu} ({tok} tok, room {room}) not verbatim: "
                            f"{None if d is None else (d.decision, d.fidelity, d.sent_tokens)}")
    # each excerpt's recorded tokens == count of what was sent
    for d, src_msg in _sent(built):
        if d.fidelity in ("excerpt", "elided") and d.sent_tokens != counter.count_message(src_msg):
            problems.append(f"{label}: {d.fidelity} of {d.index} recorded {d.sent_tokens}, counts {counter.count_message(src_msg)}")
    if rec.identity and list(built.messages) != list(history):
        problems.append(f"{label}: identity but context differs")
    return problems


def _sent(built):
    decisions = {d.index: d for d in built.record.messages}
    for m, s in zip(built.messages, built.sources or [None] * len(built.messages), strict=True):
        if s is not None and s in decisions:
            yield decisions[s], m


def run(seed: int, verbose: bool = False) -> list[str]:
    rng = random.Random(seed)
    budget = rng.choice([300, 400, 600, 800, 1000, 1500, 2000, 3000, 5000, 8000, 12000, 16000])
    keep_recent = rng.choice([0, 1, 2, 4, 6])
    enc = rng.choice(["o200k_base", "cl100k_base"])
    share = rng.choice([0.0625, 0.0625, 0.2, 0.5])
    on_invalid = rng.choice(["repair", "repair", "raise"])
    memory = RelevanceMemoryManager(max_input_tokens=budget, keep_recent=keep_recent, encoding=enc,
                                    excerpt_share=share, on_invalid=on_invalid)
    if rng.random() < 0.7:
        memory.set_goal(final="Fix the date parser in utils/dates.py without changing the public API")
    big = rng.choice([100, 500, 2000, budget])
    use_tools = rng.random() < 0.2 and budget >= 1000
    history = [{"role": "system", "content": text(rng, rng.choice([5, 30, budget // 6]))},
               user(rng, rng.choice([10, 200, budget // 2, budget, budget * 2]))]
    memory.extend(history)
    problems: list[str] = []
    pending: list[dict] = []
    for n in range(rng.randint(3, 25)):
        new = step(rng, n, big)
        r = rng.random()
        if r < 0.15:
            new.append(user(rng, rng.choice([5, 100, budget // 3, budget, budget * 3])))
        elif r < 0.22:
            new.append(user(rng, rng.choice([5, budget])))
            new.append(user(rng, rng.choice([5, 100, budget // 2])))
        elif r < 0.27 and len(new) > 2 and on_invalid == "repair":
            # a user message inside a pending tool chain: results arrive in the next step
            new.insert(2, user(rng, rng.choice([5, budget // 2, budget * 2])))
        if rng.random() < 0.1 and len(new) > 1 and new[0].get("tool_calls"):
            pending = new[1:]
            new = new[:1]
        elif pending:
            new = pending + new
            pending = []
        memory.extend(new)
        history += new
        if rng.random() < 0.3:
            continue
        if rng.random() < 0.15:
            memory.set_goal(subtask=rng.choice(["run the failing test tests/test_dates.py", "inspect parse_date", "写测试"]))
        try:
            built = memory.build_context(compact=rng.random() < 0.1, tools=TOOLS if use_tools else None)
        except ContextOverflowError as e:
            problems.append(f"step {n}: ContextOverflowError {e}")
            continue
        except Exception as e:
            if "no result" in str(e):
                continue
            problems.append(f"step {n}: {type(e).__name__}: {e}")
            if verbose:
                traceback.print_exc()
            continue
        ps = violations(history, built, memory, built.record.budget, f"step {n} {built.record.mode}")
        if ps:
            problems += ps
            # fresh full build of the same history
        if rng.random() < 0.3 or ps:
            fresh = RelevanceMemoryManager(max_input_tokens=budget, keep_recent=keep_recent, encoding=enc,
                                           excerpt_share=share, on_invalid="repair")
            if memory.goal.final != fresh.goal.final:
                fresh.set_goal(final=memory.goal.final)
            fresh.extend(history)
            try:
                fb = fresh.build_context()
                problems += violations(history, fb, fresh, budget, f"step {n} fresh {fb.record.mode}")
            except ContextOverflowError as e:
                problems.append(f"step {n}: fresh ContextOverflowError {e}")
            except Exception as e:
                problems.append(f"step {n}: fresh {type(e).__name__}: {e}")
    return [f"seed {seed} budget {budget} kr {keep_recent} {enc} share {share}: {p}" for p in problems]


if __name__ == "__main__":
    start, count = int(sys.argv[1]), int(sys.argv[2])
    found = 0
    for s in range(start, start + count):
        try:
            ps = run(s)
        except Exception as e:
            ps = [f"seed {s}: harness {type(e).__name__}: {e}"]
        for p in ps:
            print(p[:600], flush=True)
        found += bool(ps)
    print(f"done {count} seeds, {found} with problems")

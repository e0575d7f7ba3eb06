"""Review of 0d6e708, 1ee04b2, eedb4fa and c1ae1e9 (issue 24, build memory): the offline
summarizer's memos keyed by what they read, the chain index grown from its chains, the summary
cache keyed by the items and the Rust readers given copies of non-ASCII text. Every built
context and record must be what the code before them (bbd90db) gave.

Each test runs one script twice in a subprocess — once on this tree, once on bbd90db's
``relevance_memory`` (extracted with ``git archive``) — and compares their JSON outputs.
The old tree carries the deliberate behaviour changes made since (:data:`FIXES`, applied on
top of bbd90db), so that everything else is still compared with the reviewed code.

Skipped without git and the repository's history."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from data_paths import shared_data
from hypothesis import given, settings
from hypothesis import strategies as st
from review_trees import old_tree, run_script

ROOT = Path(__file__).resolve().parents[2]
OLD_COMMIT = "bbd90db"
FIXES = ("e2bb21d", "f887971", "4b5e9ae", "21d118e", "7722124", "f6dbfb8")
"""Changes on purpose since :data:`OLD_COMMIT`: e2bb21d, the newest user message too large for
the room the pinned prompt leaves is excerpted within that room, not that room less itself
(it was a bare marker; tight-budget loops send its lines now); f887971, the newest user message
that alone fits stays verbatim when the newest step is cut beside it (fit_chain cut it with the
step: sympy-20590's task statement at 1,500 tokens is sent whole now), and fit_chain tries the
excerpt floor before giving up; 4b5e9ae, an append after an appended excerpt cuts an oversized
new message again (sympy-20590 at 4,000: a 482-token output over its 250-token cap went verbatim);
21d118e, the newest step enters within what an excerpted newest user message leaves as sent (django at
1,500: the newest output 15 of its 48 lines, not a bare marker)."""
FIXTURES = sorted((ROOT / "fixtures").glob("*__*.json"))
DATA = shared_data()
SHARED_RUNS = sorted((DATA / "swebench_trajectories").glob("*__*.json")) if DATA is not None else []


def _old_tree() -> Path:
    return old_tree(OLD_COMMIT, "build_memory_review", FIXES)


PRELUDE = '''
import copy, json, pickle, re, sys
from datetime import datetime, timedelta, timezone
from relevance_memory import RelevanceMemoryManager, SummaryDraft, SummaryItem, OfflineSummarizer
T = datetime(2026, 1, 1, tzinfo=timezone.utc)

def attempt(f):
    try:
        return f()
    except Exception as e:  # the exception's type and message are part of the behaviour
        return "EXC " + type(e).__name__ + ": " + re.sub(" at 0x[0-9a-f]+", "", str(e))  # no addresses

def memory(**kw):
    kw.setdefault("clock", lambda: T)
    kw.setdefault("max_input_tokens", 4000)
    return RelevanceMemoryManager(**kw)

def seen(built):
    """Everything a build shows: its messages, mode, sources and whole record."""
    return [json.dumps(built.messages, ensure_ascii=False), built.record.mode, list(built.sources),
            built.record.model_dump_json()]

def build(m, **kw):
    return attempt(lambda: seen(m.build_context(**kw)))

def steps(messages):
    """The history cut into agent steps: each ends at a tool result or a user message."""
    out, batch = [], []
    for msg in messages:
        batch.append(copy.deepcopy(msg))
        if msg["role"] in ("tool", "user") and not (msg["role"] == "user" and len(batch) == 1 and not out):
            out.append(batch)
            batch = []
    if batch:
        out.append(batch)
    return out
'''


def run(body: str, tree: Path) -> Any:
    return run_script(PRELUDE + "\n" + textwrap.dedent(body) + "\nprint(json.dumps(RESULT, default=repr))\n", tree)


def both(body: str) -> tuple[Any, Any]:
    return run(body, _old_tree()), run(body, ROOT)


def assert_same(body: str) -> Any:
    """Run ``body`` on both trees; fail on any difference; returns the (equal) result."""
    old, new = both(body)
    if old != new:
        diffs = _diffs(old, new)
        pytest.fail(f"old and new differ ({len(diffs)} places):\n" + "\n".join(diffs[:12]))
    return new


def _exercised(result: Any) -> tuple[int, int]:
    """(builds that compacted, summaries shown) in ``result``: the review must reach them."""
    text = json.dumps(result)
    return text.count('"compacted"'), text.count("[relevance-memory: summary L")


def _diffs(old: Any, new: Any, path: str = "") -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict) and old.keys() == new.keys():
        return [d for k in old for d in _diffs(old[k], new[k], f"{path}.{k}")]
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [d for i, (a, b) in enumerate(zip(old, new, strict=True)) for d in _diffs(a, b, f"{path}[{i}]")]
    if isinstance(old, str) and isinstance(new, str) and old != new:
        at = next((i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b), min(len(old), len(new)))
        return [f"{path} at char {at}:\n  OLD …{old[max(0, at - 200):at + 300]}\n  NEW …{new[max(0, at - 200):at + 300]}"]
    return [] if old == new else [f"{path}:\n  OLD {str(old)[:600]}\n  NEW {str(new)[:600]}"]


# ------------------------------------------------------------------ long agent loops
LOOP = '''
RESULT = {}
for path in PATHS:
    FIX = json.load(open(path))["messages"]
    for budget in BUDGETS:
        m = memory()
        out = []
        for batch in steps(FIX):
            m.extend(batch)
            out.append(build(m, budget=budget))
        out.append(build(m, budget=budget, compact=True))
        RESULT[f"{path.rsplit('/', 1)[-1]}@{budget}"] = out
'''


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_fixture_loops_step_by_step_at_tight_budgets(path: Path) -> None:
    compacted, summaries = _exercised(assert_same(f"PATHS = [{str(path)!r}]\nBUDGETS = [1500, 2500, 4000]\n" + LOOP))
    assert compacted > 0 and summaries > 0, (compacted, summaries)


@pytest.mark.skipif(not SHARED_RUNS, reason="no shared SWE-bench runs on this machine")
def test_shared_swebench_runs_step_by_step() -> None:
    """Five of the shared runs (all fifteen, old and new, take ~70 s of a CI run; all fifteen
    were compared when the review was written)."""
    compacted, summaries = _exercised(assert_same(f"PATHS = {[str(p) for p in SHARED_RUNS[:5]]!r}\nBUDGETS = [2000]\n" + LOOP))
    assert compacted > 0 and summaries > 0, (compacted, summaries)


# ------------------------------------------------------------------ repeats, supersedes, budgets, goals
SCRIPTED = '''
def call(cid, command):
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": cid, "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": command})}}]}

def result(cid, text):
    return {"role": "tool", "tool_call_id": cid, "content": text}

FILE_V1 = "\\n".join(f"def f{i}(x):\\n    return x + {i}  # src/app.py line {i}" for i in range(30))
FILE_V2 = FILE_V1.replace("return x + 7", "return x * 7")

def scripted(n, seed=0):
    """An agent loop of ``n`` steps: commands run again with new call ids (same output), a file
    re-read after an edit (a supersede), facts the user restates, a test run that fails then passes."""
    out = [{"role": "system", "content": "You are a coding agent. Use bash."},
           {"role": "user", "content": "Fix src/app.py: f7 must multiply. The deploy port is 4000. My name is Dana."}]
    for k in range(n):
        cid = f"call_{seed}_{k}"
        kind = (k + seed) % 7
        if kind == 0:
            out += [call(cid, "cat src/app.py"), result(cid, FILE_V1 if k < n // 2 else FILE_V2)]
        elif kind == 1:
            out += [call(cid, "ls -l src"), result(cid, "-rw-r--r-- 1 dana staff 1200 Jan  1 00:00 app.py\\n-rw-r--r-- 1 dana staff 300 Jan  1 00:00 util.py")]
        elif kind == 2:
            out += [call(cid, "pytest -q tests/test_app.py"),
                    result(cid, "F\\nFAILED tests/test_app.py::test_f7 - assert 14 == 49" if k < n // 2 else "1 passed in 0.01s")]
        elif kind == 3:
            out.append({"role": "assistant", "content": f"Step {k}: the bug is in f7; I will edit line 15."})
        elif kind == 4:
            out += [call(cid, "sed -i 's/x + 7/x * 7/' src/app.py"), result(cid, "")]
        elif kind == 5 and k % 3 == 0:
            port = 4000 + (k // 5) % 3
            out.append({"role": "user", "content": f"Correction: the deploy port is {port}. Keep the API stable."})
        else:
            out += [call(cid, "grep -n f7 src/app.py"), result(cid, "15:def f7(x):")]
    return out
'''


def test_repeated_steps_new_call_ids_and_supersedes_deep_in_the_archive() -> None:
    compacted, summaries = _exercised(assert_same(SCRIPTED + textwrap.dedent('''
    RESULT = {}
    for n, budget in ((60, 1500), (120, 2500), (90, 4000)):
        m = memory()
        out = []
        for batch in steps(scripted(n)):
            m.extend(batch)
            out.append(build(m, budget=budget))
        RESULT[f"{n}@{budget}"] = out
        RESULT[f"{n}@{budget} restore"] = attempt(lambda: m.restore([s.id for s in m.messages][:40]))
    # the same loop twice in one memory (the second run's call ids differ)
    m = memory()
    out = []
    for batch in steps(scripted(50, 0)[2:] + scripted(50, 1)[2:]):
        m.extend(batch)
        out.append(build(m, budget=2000))
    RESULT["twice"] = out
    ''')))
    assert compacted > 0 and summaries > 0, (compacted, summaries)


def test_budget_changes_back_and_forth_and_goal_changes() -> None:
    compacted, summaries = _exercised(assert_same(SCRIPTED + textwrap.dedent('''
    RESULT = []
    m = memory()
    budgets = [1500, 4000, 2000, 2000, 3500, 1600, 6000, 1500]
    for k, batch in enumerate(steps(scripted(100))):
        m.extend(batch)
        if k == 20:
            m.set_goal(final="Make f7 multiply and keep the API stable.")
        if k == 35:
            m.set_goal(subtask="Run the test suite.")
        if k == 50:
            m.set_goal(subtask="Deploy to the corrected port.")
        if k == 70:
            m.set_goal(final="Document the change in CHANGELOG.md.", subtask="")
        RESULT.append(build(m, budget=budgets[k % len(budgets)]))
        if k % 9 == 4:
            RESULT.append(build(m, budget=budgets[(k + 3) % len(budgets)], compact=True))
        if k % 11 == 0:
            RESULT.append(build(m))
    ''')))
    assert compacted > 0 and summaries > 0, (compacted, summaries)


def test_chain_merges_by_trace_id_deep_in_a_long_loop() -> None:
    """A user message opens a trace; now and then a tool result names an older one: it joins its
    call's chain and that trace's chain, two older chains (a merge: the chain index starts over)."""
    result = assert_same(SCRIPTED + textwrap.dedent('''
    RESULT = {}
    for budget in (1500, 2500, 3200):
        m = memory()
        out = []
        users = 0
        for i, msg in enumerate(scripted(110)):
            meta = {}
            if msg["role"] == "user" and i > 1:
                users += 1
                meta["trace_id"] = f"u{users % 4}"
            elif msg["role"] == "tool" and i % 9 == 0 and users:
                meta["trace_id"] = f"u{(i // 9) % 4}"
            m.add(copy.deepcopy(msg), **meta)
            if msg["role"] in ("tool", "user"):
                out.append(build(m, budget=budget if i % 4 else 2 * budget))
        RESULT[budget] = [out, m.store.chain_merges, [m.store.chain_root(i) for i in range(len(m.store))]]
    '''))
    assert all(merges > 3 for _, merges, _ in result.values()), [r[1] for r in result.values()]
    compacted, summaries = _exercised(result)
    assert compacted > 0 and summaries > 0, (compacted, summaries)


def test_non_ascii_histories_count_and_summarise_the_same() -> None:
    compacted, summaries = _exercised(assert_same(SCRIPTED + textwrap.dedent('''
    LINES = ["修复 src/app.py：f7 应该相乘。部署端口是 4000。", "Café crème à l'hôtel Zürich — naïve façade, señor.",
             "Deploy 🚀 to port 4001 ✅ then notify 👩‍💻 team 🎉", "日本語のテキスト：ファイルを読みました。ポートは 4002 です。",
             "Ελληνικά και русский текст: порт 4003.", "mixed ascii then 漢字 then ascii again", "\\u200b zero width \\ufeff bom",
             "👍🏽" * 40, "é" * 300]
    RESULT = {"counts": [], "builds": []}
    for budget in (1500, 2400):
        m = memory()
        for k in range(70):
            cid = f"c{k}"
            text = LINES[k % len(LINES)] + f" (step {k})"
            m.extend([{"role": "user", "content": text}] if k % 4 == 0 else
                     [call(cid, f"cat 文件_{k % 5}.txt"), result(cid, (text + "\\n") * (1 + k % 6))])
            RESULT["builds"].append(build(m, budget=budget))
    RESULT["counts"] = [s.token_count for s in m.messages]
    RESULT["sizes"] = [len(s.content) if isinstance(s.content, str) else None for s in m.messages]
    tk = m.tokenizer
    RESULT["direct"] = [attempt(lambda: tk.count_text(t)) for t in LINES] + [attempt(lambda: tk.count_texts(LINES))]
    s = OfflineSummarizer()
    items = [SummaryItem(id=f"m{i}", role=("user", "assistant", "tool")[i % 3], msg_type="user_chat", text=t,
                         content_hash=f"h{i}", source="bash") for i, t in enumerate(LINES * 2)]
    RESULT["summary"] = [s.summarize(items, level=lv, max_tokens=mt).model_dump() for lv in (1, 2) for mt in (60, 400)]
    ''')))
    assert compacted > 0 and summaries > 0, (compacted, summaries)


# ------------------------------------------------------------------ summarizers
PROBE = '''
class Probe:
    """A custom summarizer that writes down every call and the items it saw (every field)."""
    name = "probe"

    def __init__(self):
        self.seen = []

    def summarize(self, items, *, level, max_tokens):
        self.seen.append([level, max_tokens, [repr(i) for i in items]])
        return SummaryDraft(prose=f"{len(items)} messages, {sum(i.tokens for i in items)} tokens.",
                            exact_values=[i.id for i in items][:3], covered_ids=[i.id for i in items])
'''


def test_a_custom_summarizer_sees_the_same_items_in_the_same_calls() -> None:
    compacted, summaries = _exercised(assert_same(SCRIPTED + PROBE + textwrap.dedent('''
    RESULT = {}
    for budget in (1500, 3000):
        p = Probe()
        m = memory(summarizer=p)
        out = []
        for k, batch in enumerate(steps(scripted(90))):
            m.extend(batch)
            out.append(build(m, budget=budget if k % 5 else budget + 800))
        RESULT[budget] = [out, p.seen, m.summary_cache.hits, m.summary_cache.misses]
    # a tiny memo and cache: evictions at every build
    from relevance_memory.summary._pyramid import SummaryCache
    s = OfflineSummarizer(memo_size=3)
    m = memory(summarizer=s)
    m.summary_cache = SummaryCache(maxsize=2)
    out = []
    for batch in steps(scripted(90, 3)):
        m.extend(batch)
        out.append(build(m, budget=1800))
    RESULT["tiny"] = [out, m.summary_cache.hits, m.summary_cache.misses]
    ''')))
    assert compacted > 0 and summaries > 0, (compacted, summaries)


def test_offline_summarizer_called_directly_with_repeated_texts() -> None:
    """The memo keys: the same text at other ids and hashes, other roles / tool names / marks."""
    assert_same('''
    import hashlib
    RESULT = []
    s = OfflineSummarizer()
    texts = ["The deploy port is 4000.", "Error: ImportError in src/app.py line 3", "I will edit f7 in src/app.py.",
             "Run pytest -q tests/test_app.py", ""]
    items = []
    for i in range(60):
        t = texts[i % len(texts)]
        role = ("user", "assistant", "tool", "system")[i % 4]
        calls = (("bash", json.dumps({"command": f"cat src/f{i % 3}.py"})),) if role == "assistant" else ()
        digest = hashlib.sha256(repr((role, t, calls, i % 2)).encode()).hexdigest()[:16]  # i % 2: another call id
        items.append(SummaryItem(id=f"m{i}", role=role, msg_type="user_chat", text=t,
                                 content_hash=digest if i % 3 else "", tool_calls=calls,
                                 source=("bash", "grep")[i % 2] if role == "tool" else role,
                                 superseded="since step 9: port 4001" if i % 11 == 0 else "", supersedes=i % 13 == 0,
                                 tokens=10 + i))
    for i in range(0, 60, 7):
        for lv, mt in ((1, 80), (2, 300)):
            RESULT.append(attempt(lambda: s.summarize(items[:i + 5], level=lv, max_tokens=mt).model_dump()))
    ''')


@pytest.mark.xfail(strict=True, reason=(
    "0d6e708: the old memos were keyed by the content hash, so an item with another text (or other calls) "
    "but the same hash read the first one's lines (port 4000 for 5000) and names (src/alpha.py for src/beta.py): "
    "stale; now keyed by the text and calls, each reads its own. A memory's items cannot do this (their hash "
    "is the sha256 of their content): harmless, the old output was wrong"))
def test_offline_summarizer_given_items_whose_content_hash_does_not_match_their_text() -> None:
    """Old: the memos were keyed by the content hash, so a second item with the same hash but
    another text (or other calls) read the first one's lines and names; new: by the text."""
    assert_same('''
    s = OfflineSummarizer()
    a = SummaryItem(id="m1", role="user", msg_type="user_instruction", text="Deploy to port 4000 on host alpha.", content_hash="h1")
    b = SummaryItem(id="m2", role="user", msg_type="user_instruction", text="Deploy to port 5000 on host beta.", content_hash="h1")
    t = SummaryItem(id="m3", role="assistant", msg_type="tool_call", text="", content_hash="h2",
                    tool_calls=(("bash", '{"command": "cat src/alpha.py"}'),))
    u = SummaryItem(id="m4", role="assistant", msg_type="tool_call", text="", content_hash="h2",
                    tool_calls=(("bash", '{"command": "cat src/beta.py"}'),))
    RESULT = [s.summarize([x], level=1, max_tokens=200).model_dump() for x in (a, b, t, u)]
    ''')


# ------------------------------------------------------------------ fresh(): the summary cache shared
FRESH = '''
FIX = json.load(open(FIXTURE))["messages"][:60]

def with_types(m):
    """The history, two assistant messages added with an explicit msg_type (fresh() re-ingests
    the dicts: their type is then the one classified)."""
    for i, msg in enumerate(FIX):
        m.add(copy.deepcopy(msg), **({"msg_type": "user_chat"} if msg["role"] == "assistant" and i in (2, 4) else {}))
    return m
'''


def test_a_stored_non_ascii_string_is_not_grown_by_counting_it() -> None:
    """The one difference c1ae1e9 means to make (not an output): a tokenizer no longer leaves a
    UTF-8 copy inside a stored non-ASCII string (``sys.getsizeof``); ASCII strings are unchanged."""
    old, new = both('''
    texts = ["修复 src/app.py：部署端口是 4000。" * 20, "Café crème à l'hôtel" * 30, "🚀 deploy ✅" * 25, "plain ascii " * 40]
    m = memory()
    for k, t in enumerate(texts):
        m.add({"role": "user", "content": t + str(k)})
    m.build_context(budget=1500)
    RESULT = [[sys.getsizeof(s.content), s.content.isascii(), s.token_count] for s in m.messages]
    ''')
    assert [r[2] for r in new] == [r[2] for r in old]  # the same counts
    for (was, ascii_, _), (now, _, _) in zip(old, new, strict=True):
        assert now == was if ascii_ else now < was


def test_fresh_with_a_custom_summarizer_reuses_the_same_drafts() -> None:
    """``fresh()`` shares the summary cache (its docstring: "unchanged runs of archived messages
    are not summarised again"); a summarizer reading ``msg_type`` (the LLM one does)."""
    assert_same(FRESH.replace("FIXTURE", repr(str(ROOT / "fixtures" / "sympy__sympy-20590.json"))) + textwrap.dedent('''
    class Types:
        name = "types"

        def __init__(self):
            self.calls = 0

        def summarize(self, items, *, level, max_tokens):
            self.calls += 1
            return SummaryDraft(prose=f"{sum(i.msg_type == 'user_chat' for i in items)} chats in {len(items)} messages.",
                                covered_ids=[i.id for i in items])
    p = Types()
    m = with_types(memory(summarizer=p))
    first = build(m, budget=3000)
    f = m.fresh(copy.deepcopy(FIX))
    RESULT = {"first": first, "fresh": build(f, budget=3000), "calls": p.calls,
              "hits": m.summary_cache.hits, "misses": m.summary_cache.misses}
    '''))


def test_fresh_with_the_llm_summarizer_asks_the_model_as_before() -> None:
    """The same with :class:`LLMSummarizer` (its prompt shows each message's type), a scripted client."""
    assert_same(FRESH.replace("FIXTURE", repr(str(ROOT / "fixtures" / "sympy__sympy-20590.json"))) + textwrap.dedent('''
    from types import SimpleNamespace
    from relevance_memory import LLMSummarizer
    prompts = []

    def create(*, messages, response_model, **kw):
        prompts.append(messages[-1]["content"])
        chats = messages[-1]["content"].count('type="user_chat"')
        return response_model(prose=f"{chats} chats; prompt {len(prompts)}.",
                              exact_values=[], tools_used=[], covered_ids=[])
    client = SimpleNamespace(chat=SimpleNamespace(completions=SimpleNamespace(create=create)))
    s = LLMSummarizer(client=client, model="scripted")
    m = with_types(memory(summarizer=s))
    first = build(m, budget=3000)
    f = m.fresh(copy.deepcopy(FIX))
    RESULT = {"first": first, "fresh": build(f, budget=3000), "model_calls": s.calls, "prompts": len(prompts),
              "warnings": s.warnings}
    '''))


def test_fresh_with_the_offline_summarizer_after_a_resync() -> None:
    """The default summarizer after ``fresh()``: an edited old message, explicit metadata dropped."""
    assert_same(FRESH.replace("FIXTURE", repr(str(ROOT / "fixtures" / "django__django-15280.json"))) + textwrap.dedent('''
    RESULT = {}
    m = with_types(memory())
    RESULT["first"] = build(m, budget=2000)
    edited = copy.deepcopy(FIX)
    edited[7]["content"] = str(edited[7].get("content")) + " (edited)"
    f = m.fresh(edited)
    RESULT["fresh"] = build(f, budget=2000)
    g = f.fresh(copy.deepcopy(FIX))
    RESULT["again"] = [build(g, budget=2000), build(g, budget=1500)]
    '''))


def test_fresh_with_the_offline_summarizer_hits_the_shared_cache_as_before() -> None:
    assert_same(FRESH.replace("FIXTURE", repr(str(ROOT / "fixtures" / "django__django-15280.json"))) + textwrap.dedent('''
    m = with_types(memory())
    m.build_context(budget=2000)
    edited = copy.deepcopy(FIX)
    edited[7]["content"] = str(edited[7].get("content")) + " (edited)"
    f = m.fresh(edited)
    f.build_context(budget=2000)
    g = f.fresh(copy.deepcopy(FIX))
    g.build_context(budget=2000)
    g.build_context(budget=1500)
    RESULT = [m.summary_cache.hits, m.summary_cache.misses]
    '''))


# ------------------------------------------------------------------ copies of a memory
def test_pickle_copy_and_restore_of_a_built_memory() -> None:
    assert_same(SCRIPTED + textwrap.dedent('''
    RESULT = {}
    m = memory()
    for batch in steps(scripted(60)):
        m.extend(batch)
        m.build_context(budget=1800)
    ids = [s.id for s in m.messages]
    RESULT["restore"] = attempt(lambda: m.restore(ids[:30]))
    RESULT["restore_span"] = attempt(lambda: m.restore([f"{ids[3]}–{ids[40]}"]))

    def pickled():
        again = pickle.loads(pickle.dumps(m))
        again.extend(scripted(70)[-6:])
        return [seen(again.build_context(budget=1800)), seen(again.build_context(budget=2600))]
    RESULT["pickle"] = attempt(pickled)

    def deep():
        again = copy.deepcopy(m)
        again.extend(scripted(70)[-6:])
        return seen(again.build_context(budget=1800))
    RESULT["deepcopy"] = attempt(deep)
    m.extend(scripted(70)[-6:])
    RESULT["original"] = build(m, budget=1800)
    '''))


# ------------------------------------------------------------------ hypothesis: random histories
_WORDS = ["src/app.py", "port 4000", "port 4001", "f7", "pytest", "fails", "passes", "修复", "café", "🚀",
          "Dana", "The", "bug", "is", "in", "line 15.", "ImportError", "ok"]


@st.composite
def _history(draw: Any) -> list[list[Any]]:
    """Steps of (kind, words, command, trace) for the script to make messages from."""
    out = []
    for _ in range(draw(st.integers(8, 45))):
        kind = draw(st.sampled_from(["user", "say", "call", "call", "call", "two"]))
        words = " ".join(draw(st.lists(st.sampled_from(_WORDS), min_size=1, max_size=12)))
        command = draw(st.sampled_from(["cat src/app.py", "ls", "pytest -q", "grep -n f7 src/app.py"]))
        trace = draw(st.sampled_from([None, None, "a", "b", "c"]))
        repeat = draw(st.integers(1, 25))
        out.append([kind, words, command, trace, repeat])
    return out


def test_random_histories_build_as_before() -> None:
    examples: list[Any] = []

    @settings(max_examples=100, database=None, derandomize=True, deadline=None)
    @given(_history(), st.sampled_from([900, 1500, 2500]))
    def collect(history: list[list[Any]], budget: int) -> None:
        examples.append([history, budget])

    collect()
    compacted, summaries = _exercised(assert_same(f"""
    EXAMPLES = json.loads({json.dumps(json.dumps(examples))})
    RESULT = []
    for n, (history, budget) in enumerate(EXAMPLES):
        m = memory()
        m.add({{"role": "system", "content": "You are an agent."}})
        m.add({{"role": "user", "content": "Fix src/app.py and deploy to port 4000."}})
        out = []
        for k, (kind, words, command, trace, repeat) in enumerate(history):
            meta = {{"trace_id": trace}} if trace else {{}}
            cid = f"c{{n}}_{{k}}"
            text = (words + "\\n") * repeat
            if kind == "user":
                m.add({{"role": "user", "content": words}}, **meta)
            elif kind == "say":
                m.add({{"role": "assistant", "content": words}}, **meta)
            elif kind == "call":
                m.extend([{{"role": "assistant", "content": None, "tool_calls": [{{"id": cid, "type": "function",
                            "function": {{"name": "bash", "arguments": json.dumps({{"command": command}})}}}}]}},
                          {{"role": "tool", "tool_call_id": cid, "content": text}}])
            else:
                m.add({{"role": "assistant", "content": words, "tool_calls": [
                    {{"id": cid + "a", "type": "function", "function": {{"name": "bash", "arguments": json.dumps({{"command": command}})}}}},
                    {{"id": cid + "b", "type": "function", "function": {{"name": "read", "arguments": "{{}}"}}}}]}})
                m.add({{"role": "tool", "tool_call_id": cid + "a", "content": text}}, **meta)
                m.add({{"role": "tool", "tool_call_id": cid + "b", "content": words}})
            if k % 2 or k == len(history) - 1:
                out.append(build(m, budget=budget))
        RESULT.append(out)
    """))
    assert compacted > 0 and summaries > 0, (compacted, summaries)


def test_pending_calls_repair_mode_and_a_tools_schema() -> None:
    """Builds while a tool call waits for its result, in both ``on_invalid`` modes; ``tools=``."""
    result = assert_same(SCRIPTED + textwrap.dedent('''
    TOOLS = [{"type": "function", "function": {"name": "bash", "description": "run a command",
              "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}]
    RESULT = {}
    for mode in ("raise", "repair"):
        for budget in (1500, 2600):
            m = memory(on_invalid=mode)
            out = []
            for k, batch in enumerate(steps(scripted(80))):
                if len(batch) >= 2 and batch[-1]["role"] == "tool" and k % 4 == 1:
                    m.extend(batch[:-1])  # the call alone: built while it waits
                    out.append(build(m, budget=budget, tools=TOOLS))
                    m.extend(batch[-1:])
                else:
                    m.extend(batch)
                out.append(build(m, budget=budget, tools=TOOLS if k % 2 else None))
            RESULT[f"{mode}@{budget}"] = out
    '''))
    compacted, summaries = _exercised(result)
    assert compacted > 0 and summaries > 0, (compacted, summaries)


def test_agents_on_a_board_build_as_before() -> None:
    """Two agents sharing a board: imported messages (user messages named after their producer)."""
    result = assert_same(SCRIPTED + textwrap.dedent('''
    from relevance_memory.board import InMemoryBoard
    board = InMemoryBoard("review")
    a = memory(agent="a", board=board)
    b = memory(agent="b", board=board)
    RESULT = []
    for k, batch in enumerate(steps(scripted(60))):
        for msg in batch:
            a.add(msg, **({"scope": "shared"} if k % 3 == 0 else {}))
        b.add({"role": "user", "content": f"b step {k}: checked src/util.py, port {4000 + k % 2}"})
        RESULT.append([build(a, budget=1600), build(b, budget=1500)])
    '''))
    compacted, summaries = _exercised(result)
    assert compacted > 0 and summaries > 0, (compacted, summaries)


@pytest.mark.xfail(strict=True, reason=(
    "eedb4fa changed the internal SummaryCache API (relevance_memory.summary._pyramid, not exported, "
    "reachable as RelevanceMemoryManager.summary_cache): key() returns the items, not their key parts; "
    "get_or_make() takes digest=, not parts= (TypeError); RunFacts has digest, not parts. Nothing in the "
    "package or its docs calls them so: harmless"))
def test_the_summary_cache_methods_answer_as_before() -> None:
    assert_same('''
    from relevance_memory.summary._pyramid import SummaryCache, run_facts, key_parts
    items = (SummaryItem(id="m1", role="user", msg_type="user_chat", text="port 4000", content_hash="a" * 16),
             SummaryItem(id="m2", role="tool", msg_type="tool_result", text="ok", content_hash="b" * 16, source="bash"))
    cache = SummaryCache()
    s = OfflineSummarizer()
    RESULT = {
        "key": attempt(lambda: repr(SummaryCache.key("offline", 1, items, 200))),
        "parts": attempt(lambda: repr(cache.get_or_make(s, items, level=1, max_tokens=200, parts=key_parts(items)))),
        "facts": attempt(lambda: repr(run_facts(items).parts)),
        "plain": attempt(lambda: repr(cache.get_or_make(s, items, level=1, max_tokens=200))),
    }
    ''')


def test_archives_past_a_thousand_messages_resume_facts_folds_and_cache_as_before() -> None:
    """Archives of more than RUN_FACTS_MIN / FOLD_MIN_ITEMS (1024) items: the run facts (now a
    digest resumed from the prefix's) and the offline summarizer's fold are resumed; the cache
    must hit and miss as before, and a custom summarizer be called with the same items."""
    result = assert_same(SCRIPTED + textwrap.dedent('''
    import hashlib

    class Calls:
        name = "calls"

        def __init__(self):
            self.seen = []

        def summarize(self, items, *, level, max_tokens):
            self.seen.append([level, max_tokens, len(items), hashlib.sha256(repr(items).encode()).hexdigest()])
            return SummaryDraft(prose=f"{len(items)} messages.", covered_ids=[i.id for i in items])
    RESULT = {}
    for label in ("offline", "calls", "merges"):
        probe = Calls() if label == "calls" else None
        m = memory(summarizer=probe) if probe else memory()
        out = []
        users = 0
        for k, batch in enumerate(steps(scripted(1300))):
            if label == "merges":
                for msg in batch:
                    meta = {}
                    if msg["role"] == "user":
                        users += 1
                        meta["trace_id"] = f"u{users % 4}"
                    elif msg["role"] == "tool" and k % 97 == 0:
                        meta["trace_id"] = f"u{k % 4}"
                    m.add(msg, **meta)
            else:
                m.extend(batch)
            if k % 18 == 17:  # every 18th step (every 9th took ~40 s of a CI run, old and new trees)
                out.append(build(m, budget=(1800, 3000, 2200)[k // 18 % 3], compact=k // 18 % 5 == 0))
        RESULT[label] = [out, m.summary_cache.hits, m.summary_cache.misses, probe.seen if probe else None,
                         len(m.messages), m.store.chain_merges]
    '''))
    assert all(r[4] > 2000 for r in result.values()) and result["merges"][5] > 3
    compacted, summaries = _exercised(result)
    assert compacted > 0 and summaries > 0 and result["offline"][1] > 0, (compacted, summaries)


def test_items_whose_tool_calls_are_lists_are_summarised_as_before() -> None:
    """A :class:`SummaryItem` is a plain dataclass: items made from JSON hold lists. The old
    ``_names`` memo key joined the calls' arguments into a string; the new one holds
    ``item.tool_calls`` itself, so a list there is unhashable."""
    assert_same(SCRIPTED + textwrap.dedent('''
    from dataclasses import replace
    RESULT = {}
    s = OfflineSummarizer()
    for calls in ([("bash", '{"command": "cat src/a.py"}')], (["bash", '{"command": "cat src/a.py"}'],)):
        it = SummaryItem(id="m1", role="assistant", msg_type="tool_call", text="Reading src/a.py now.",
                         content_hash="0123456789abcdef", tool_calls=calls)
        RESULT[repr(calls)] = attempt(lambda: s.summarize([it], level=1, max_tokens=200).model_dump())

    class AsJson:
        """A summarizer that sends the items through JSON (as to a worker) and back to the offline one."""
        name = "as-json"

        def __init__(self):
            self.inner = OfflineSummarizer()

        def summarize(self, items, *, level, max_tokens):
            back = [SummaryItem(**json.loads(json.dumps(i.__getstate__() if hasattr(i, "__getstate__") and
                                                        isinstance(i.__getstate__(), dict) else
                                                        {f: getattr(i, f) for f in i.__dataclass_fields__})))
                    for i in items]
            return self.inner.summarize(back, level=level, max_tokens=max_tokens)
    m = memory(summarizer=AsJson())
    out = []
    for batch in steps(scripted(60)):
        m.extend(batch)
        out.append(build(m, budget=1800))
    RESULT["memory"] = out
    '''))


NON_ASCII = [
    "修复 src/app.py：f7 应该相乘。部署端口是 4000。", "Café crème à l'hôtel Zürich — naïve façade, señor.",
    "Deploy 🚀 to port 4001 ✅ then notify 👩‍💻 team 🎉", "日本語のテキスト：ファイルを読みました。ポートは 4002 です。",
    "Ελληνικά και русский текст: порт 4003.", "plain ascii line about src/util.py", "👍🏽" * 30, "é" * 200,
]


@pytest.mark.parametrize("embedder", ["wordllama", "minilm"])
def test_both_embedders_read_non_ascii_text_as_before(embedder: str) -> None:
    """c1ae1e9 hands the static (tokenizers) and ONNX (tokenizers) embedders copies of non-ASCII
    text: the same vectors, the same scores, the same builds."""
    result = assert_same(SCRIPTED + textwrap.dedent(f'''
    import numpy as np
    from relevance_memory import MemoryConfig
    LINES = {NON_ASCII!r}
    RESULT = {{}}
    try:
        m = RelevanceMemoryManager(MemoryConfig(embedder={embedder!r}, max_input_tokens=4000), clock=lambda: T)
    except Exception as e:
        RESULT["skip"] = str(e)
    else:
        vectors = np.asarray(m.vectors.embedder.embed(LINES + [LINES[0] + " " + LINES[2]]))
        RESULT["vectors"] = np.round(vectors, 6).tolist()
        out = []
        for k in range(60):
            cid = f"c{{k}}"
            text = LINES[k % len(LINES)] + f" (step {{k}})"
            m.extend([{{"role": "user", "content": text}}] if k % 5 == 0 else
                     [call(cid, f"cat 文件_{{k % 4}}.txt"), result(cid, (text + "\\\\n") * (1 + k % 5))])
            out.append(build(m, budget=1600))
        RESULT["builds"] = out
    '''))
    if "skip" in result:
        pytest.skip(result["skip"])
    compacted, summaries = _exercised(result)
    assert compacted > 0 and summaries > 0, (compacted, summaries)


def test_a_token_counter_given_a_non_string_raises_as_before() -> None:
    assert_same('''
    from relevance_memory import TiktokenCounter
    tk = TiktokenCounter()
    RESULT = [[attempt(lambda: tk.count_text(v)), attempt(lambda: tk.count_texts([v, "é"]))]
              for v in (5, 3.5, ["a"], b"abc", b"\\xc3\\xa9")]
    ''')


def test_resyncs_with_the_default_summarizer_build_as_before() -> None:
    """A managed loop's resync: an old message edited (or explicit metadata dropped), ``fresh()``
    sharing the summary cache, then building on; with the default (offline) summarizer."""
    result = assert_same(SCRIPTED + textwrap.dedent('''
    RESULT = []
    history = scripted(70)
    for at in range(3, len(history), 11):
        m = memory()
        for i, msg in enumerate(history):
            m.add(copy.deepcopy(msg), **({"msg_type": "user_chat"} if msg["role"] == "assistant" and i % 5 == 0
                                         and not msg.get("tool_calls") else {}))
        first = build(m, budget=1800)
        edited = copy.deepcopy(history)
        if edited[at].get("content"):
            edited[at]["content"] = edited[at]["content"] + " (edited)"
        f = m.fresh(edited)
        f.extend(scripted(8, 5)[2:])
        RESULT.append([at, first, build(f, budget=1800), build(f, budget=2600)])
    '''))
    compacted, summaries = _exercised(result)
    assert summaries > 0, (compacted, summaries)

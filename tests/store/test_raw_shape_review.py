"""Review of 6fc41b6 (issue 24, RawShape): every observable of a stored message, its store
and the contexts built from it must be what the code before the commit (91718ec) gave.

Each test runs one script twice in a subprocess — once on this tree, once on 91718ec's
``relevance_memory`` (extracted with ``git archive``) — and compares their JSON outputs. Four
tests assert the differences kept on purpose, each documented where it lives: the clock is read
once a batch; one referrer (or older message) is a 1-tuple; ``raw`` of a message kept as its
shape is an equal new dict on each read; a deep copy of such a message reads a read-only dict.
Skipped without git and the repository's history."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from review_trees import old_tree, run_script

ROOT = Path(__file__).resolve().parents[2]
OLD_COMMIT = "91718ec"
FIXES = ("e2bb21d", "7722124", "f6dbfb8")
"""Changes on purpose since :data:`OLD_COMMIT`, applied to its tree (``review_trees.old_tree``):
e2bb21d, the newest user message verbatim in an append while it alone fits the room the pinned
prompt leaves (SPEC §9; the old code excerpted the 1,679-token task statement in the 3,000-token
loop's appends), and an appended excerpt ending ``record.identity``."""
FIXTURE = ROOT / "fixtures" / "django__django-15280.json"


def _old_tree() -> Path:
    return old_tree(OLD_COMMIT, "raw_shape_review", FIXES)


PRELUDE = '''
import copy, json, pickle, collections, sys
from datetime import datetime, timedelta, timezone
from relevance_memory import RelevanceMemoryManager
from relevance_memory._models import Message
from relevance_memory._exceptions import InvalidMessageError
T = datetime(2026, 1, 1, tzinfo=timezone.utc)

def typed(v):
    """A value with the type of every container and leaf (FrozenDict vs dict matters)."""
    if isinstance(v, dict):
        return [type(v).__name__, [[k, typed(x)] for k, x in v.items()]]
    if isinstance(v, (list, tuple)):
        return [type(v).__name__, [typed(x) for x in v]]
    return [type(v).__name__, repr(v)]

def attempt(f):
    try:
        return f()
    except Exception as e:  # the exception's type and message are part of the behaviour
        return "EXC " + type(e).__name__ + ": " + str(e)

def observe(s):
    """Everything the promise covers about one stored message."""
    out = {}
    checks = {
        "raw": lambda: typed(s.raw),
        "raw_json": lambda: json.dumps(s.raw),
        "to_openai": lambda: typed(s.to_openai()),
        "dump": lambda: typed(s.model_dump()),
        "dump_json_mode": lambda: s.model_dump(mode="json"),
        "dump_json": lambda: s.model_dump_json(),
        "pickle": lambda: typed(pickle.loads(pickle.dumps(s)).raw),
        "pickle_eq": lambda: pickle.loads(pickle.dumps(s)) == s,
        "deepcopy_eq": lambda: copy.deepcopy(s) == s,
        "copy_raw": lambda: typed(copy.copy(s).raw),
        "hash": lambda: attempt(lambda: hash(s)).split(":")[0],
        "roundtrip": lambda: Message(**s.model_dump()) == s,
        "roundtrip_json": lambda: Message.model_validate_json(s.model_dump_json()) == s,
        "repr": lambda: repr(s),
        "eq_self_copy": lambda: s.model_copy() == s,
    }
    for label, f in checks.items():
        out[label] = attempt(f)
    return out

def memory(**kw):
    kw.setdefault("clock", lambda: T)
    return RelevanceMemoryManager(max_input_tokens=4000, **kw)
'''


def run(body: str, tree: Path) -> Any:
    return run_script(PRELUDE + "\n" + textwrap.dedent(body) + "\nprint(json.dumps(RESULT, default=repr))\n", tree)


def both(body: str) -> tuple[Any, Any]:
    return run(body, _old_tree()), run(body, ROOT)


def assert_same(body: str) -> None:
    old, new = both(body)
    if old != new:
        diffs = _diffs(old, new)
        pytest.fail("old and new differ:\n" + "\n".join(diffs[:20]))


def _diffs(old: Any, new: Any, path: str = "") -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict) and old.keys() == new.keys():
        return [d for k in old for d in _diffs(old[k], new[k], f"{path}.{k}")]
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new) and path.count(".") < 3:
        return [d for i, (a, b) in enumerate(zip(old, new, strict=True)) for d in _diffs(a, b, f"{path}[{i}]")]
    return [] if old == new else [f"{path}:\n  OLD {str(old)[:600]}\n  NEW {str(new)[:600]}"]


def _call(cid: str, name: str = "bash", args: str = '{"command": "ls"}', order: str = "itf") -> dict[str, Any]:
    parts = {"i": ("id", cid), "t": ("type", "function"), "f": ("function", {"name": name, "arguments": args})}
    return dict(parts[c] for c in order)


BATCHES: list[list[dict[str, Any]]] = [
    # key orders
    [{"content": "sys", "role": "system"}, {"name": "dana", "content": "Fix src/app.py", "role": "user"}],
    [{"role": "user", "content": "go"},
     {"tool_calls": [_call("c1", order="fti"), _call("c2", order="tfi")], "role": "assistant", "content": None},
     {"content": "a.py", "tool_call_id": "c1", "role": "tool"},
     {"name": "bash", "role": "tool", "tool_call_id": "c2", "content": "b.py"}],
    # function payload keys reversed, arguments missing
    [{"role": "user", "content": "go"},
     {"role": "assistant", "content": "", "tool_calls": [
         {"id": "c1", "type": "function", "function": {"arguments": "{}", "name": "ls"}},
         {"id": "c2", "type": "function", "function": {"arguments": "", "name": "pwd"}}]},
     {"role": "tool", "tool_call_id": "c1", "content": ""}, {"role": "tool", "tool_call_id": "c2", "content": "."}],
    # content as parts, empty string, None
    [{"role": "user", "content": [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "http://x/y.png"}}]},
     {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
     {"role": "user", "content": ""}, {"role": "assistant", "content": ""},
     {"role": "user", "content": []}],
    # custom tool calls
    [{"role": "user", "content": "patch it"},
     {"role": "assistant", "content": None, "tool_calls": [
         {"id": "k1", "type": "custom", "custom": {"name": "apply_patch", "input": "diff"}},
         {"type": "custom", "custom": {"input": "x", "name": "grep"}, "id": "k2"}]},
     {"role": "tool", "tool_call_id": "k1", "content": [{"type": "text", "text": "applied"}]},
     {"role": "tool", "tool_call_id": "k2", "content": "found", "name": "grep"}],
    # extra keys
    [{"role": "user", "content": "hi"},
     {"role": "assistant", "content": "Done.", "refusal": None},
     {"role": "assistant", "content": "x", "audio": None, "function_call": None, "annotations": []},
     {"role": "user", "content": "thanks", "metadata": {"k": [1, 2]}},
     {"role": "assistant", "content": "y", "tool_calls": None}],
    # tool calls with extra keys / index
    [{"role": "user", "content": "go"},
     {"role": "assistant", "content": None, "tool_calls": [
         {"index": 0, "id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]},
     {"role": "tool", "tool_call_id": "c1", "content": "r"}],
    # name on user/assistant, tool_call_id on a non-tool message
    [{"role": "user", "content": "a", "name": "bob"}, {"role": "assistant", "content": "b", "name": "helper"},
     {"role": "user", "content": "c", "tool_call_id": "zz"}, {"role": "system", "content": "s", "name": "rules"}],
    # numbers and booleans inside parts, nested dicts
    [{"role": "user", "content": [{"type": "text", "text": "n", "cache_control": {"type": "ephemeral"}, "x": 1.5, "b": True}]}],
    # developer role
    [{"role": "developer", "content": "be terse"}, {"role": "user", "content": "hi"}],
    # no content key; a call with an extra key (a call without "type" is invalid: INVALID)
    [{"role": "user", "content": "go"},
     {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]},
     {"role": "tool", "tool_call_id": "c1", "content": "r"},
     {"tool_calls": [{"id": "c2", "type": "function", "function": {"name": "ls", "arguments": "{}"}, "extra": 1}],
      "role": "assistant"},
     {"role": "tool", "tool_call_id": "c2", "content": "r"}],
    # one call id used twice; a result named differently from its call
    [{"role": "user", "content": "go"},
     {"role": "assistant", "content": None, "tool_calls": [_call("d1")]},
     {"role": "tool", "tool_call_id": "d1", "content": "r", "name": "other"},
     {"role": "assistant", "content": None, "tool_calls": [_call("d1")]},
     {"role": "tool", "tool_call_id": "d1", "content": "r"}],
]


@pytest.mark.parametrize("how", ["extend", "add"])
def test_unusual_valid_inputs_read_back_exactly_as_before(how: str) -> None:
    body = f"""
    BATCHES = json.loads({json.dumps(json.dumps(BATCHES))})
    RESULT = []
    for batch in BATCHES:
        m = memory()
        try:
            if {how!r} == "extend":
                m.extend(copy.deepcopy(batch))
            else:
                for d in copy.deepcopy(batch):
                    m.add(d)
        except Exception as e:
            RESULT.append("EXC " + type(e).__name__ + ": " + str(e))
            continue
        RESULT.append([observe(s) for s in m.messages])
    """
    assert_same(body)


STATE = '''
def state(m):
    """The store's public tables and every message, observed."""
    st = m.store if hasattr(m, "store") else m._store
    return {
        "messages": [observe(s) for s in m.messages],
        # values as lists: their type (a tuple while there is one, 6fc41b6) is checked apart
        "referenced_by": {k: list(v) for k, v in st.referenced_by.items()},
        "supersedes": {k: list(v) for k, v in st.supersedes.items()},
        "superseded_by": sorted(st.superseded_by),
        "excluded": st.excluded,
        "timestamps": [repr(s.timestamp) for s in m.messages],
    }
'''


def test_editing_the_callers_dicts_after_ingest_changes_nothing() -> None:
    body = STATE + textwrap.dedent('''
    RESULT = {}
    m = memory()
    user = {"role": "user", "content": "Fix src/app.py line 3"}
    call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "cat src/app.py"}'}}
    calls = [call]
    asst = {"role": "assistant", "content": None, "tool_calls": calls}
    m.add(user)
    m.add(asst)
    # edit everything the caller still holds, at every depth
    user["content"] = "EDITED"; user["name"] = "eve"
    call["function"]["arguments"] = '{"command": "rm -rf /"}'; call["function"]["name"] = "evil"; call["id"] = "c9"
    calls.append({"id": "c2", "type": "function", "function": {"name": "x", "arguments": "{}"}})
    asst["content"] = "EDITED"; asst["role"] = "user"; del asst["tool_calls"]
    result = {"role": "tool", "tool_call_id": "c1", "content": "line1\\nline2"}
    batch = [result, {"role": "assistant", "content": "src/app.py has two lines"}]
    m.extend(batch)
    result["content"] = "EDITED"; batch[1]["content"] = "EDITED"; batch.clear()
    parts = [{"type": "text", "text": "parts src/app.py"}]
    listy = {"role": "user", "content": parts}
    m.add(listy)
    parts[0]["text"] = "EDITED"; parts.append({"type": "text", "text": "more"})
    RESULT["state"] = state(m)
    RESULT["context"] = attempt(lambda: json.dumps(m.build_context().messages))
    ''')
    assert_same(body)


def test_the_same_dict_object_twice_and_mapping_types() -> None:
    body = STATE + textwrap.dedent('''
    from types import MappingProxyType
    from pydantic import BaseModel
    class Sub(dict):
        pass
    class Fn(BaseModel):
        name: str
        arguments: str
    class Call(BaseModel):
        id: str
        type: str = "function"
        function: Fn
    class SdkMessage(BaseModel):
        role: str
        content: str | None = None
        tool_calls: list[Call] | None = None
        refusal: str | None = None
    RESULT = {}
    same = {"role": "user", "content": "again src/a.py"}
    m = memory()
    m.extend([same, same])
    m.add(same)
    m.add(Sub(role="assistant", content="sub"))
    m.add(collections.OrderedDict([("content", "od"), ("role", "user")]))
    m.add(MappingProxyType({"role": "assistant", "content": "proxy"}))
    m.add(SdkMessage(role="assistant", content=None,
                     tool_calls=[Call(id="s1", function=Fn(name="ls", arguments="{}"))]))
    m.add({"role": "tool", "tool_call_id": "s1", "content": "out"})
    m.add({"role": "user", "content": [Sub(type="text", text="sub part")]})
    m.add({"role": "assistant", "content": "t", "tool_calls": (
        {"id": "t1", "type": "function", "function": {"name": "ls", "arguments": "{}"}},)})
    m.add({"role": "tool", "tool_call_id": "t1", "content": ("a", "b") and "ab"})
    m.add(Sub(role="user", content="sub with calls"))
    import enum

    class Role(str, enum.Enum):
        USER = "user"

    class Text(str):
        pass
    m.add({"role": Role.USER, "content": Text("an enum role and a str subclass")})
    m.add({"role": "user", "content": Text("x"), "name": Text("nm")})
    try:
        from openai.types.chat import ChatCompletionMessage
        m.add(ChatCompletionMessage.model_validate(
            {"role": "assistant", "content": "sdk reply", "refusal": None, "annotations": []}))
        m.add(ChatCompletionMessage.model_validate({"role": "assistant", "content": None, "tool_calls": [
            {"id": "o1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]}))
        m.add({"role": "tool", "tool_call_id": "o1", "content": "sdk out"})
    except ImportError:
        pass
    RESULT["state"] = state(m)
    RESULT["context"] = attempt(lambda: json.dumps(m.build_context().messages))
    ''')
    assert_same(body)


INVALID: list[Any] = [
    {"role": "user"},
    {"role": "user", "content": 5},
    {"role": "robot", "content": "x"},
    {"content": "x"},
    {"role": None, "content": "x"},
    {"role": "user", "content": "x", "name": "has space"},
    {"role": "user", "content": "x", "name": 7},
    {"role": "assistant", "content": None},
    {"role": "assistant", "content": "x", "tool_calls": []},
    {"role": "assistant", "content": "x", "tool_calls": "nope"},
    {"role": "assistant", "content": "x", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "ls"}}]},
    {"role": "assistant", "content": "x", "tool_calls": [{"id": "", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]},
    {"role": "assistant", "content": "x", "tool_calls": [{"id": "c1", "type": "function", "function": {}}]},
    {"role": "assistant", "content": "x", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": 3, "arguments": "{}"}}]},
    {"role": "assistant", "content": "x", "tool_calls": [{"id": 1, "type": "function", "function": {"name": "ls", "arguments": "{}"}}]},
    {"role": "assistant", "content": "x", "tool_calls": [{"id": "c1", "type": 2, "function": {"name": "ls", "arguments": "{}"}}]},
    {"role": "assistant", "content": "x", "tool_calls": [{"id": "c1", "type": "custom", "function": {"name": "ls", "arguments": "{}"}}]},
    {"role": "assistant", "content": "x", "tool_calls": [{"id": "c1", "type": "custom", "custom": {"name": "ls"}}]},
    {"role": "assistant", "content": "x", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "ls", "arguments": {"a": 1}}}]},
    {"role": "assistant", "content": "x", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}", "extra": "e"}}]},
    {"role": "assistant", "content": "x", "tool_calls": ["c1"]},
    {"role": "tool", "content": "orphan"},
    {"role": "assistant", "tool_calls": [{"id": "c1", "function": {"name": "ls", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "nobody", "content": "orphan"},
    {"role": "tool", "tool_call_id": "c0", "content": None},
    {"role": "user", "content": [{"type": "text"}]},
    {"role": "user", "content": [{"type": "text", "text": 4}]},
    {"role": "user", "content": ["bare"]},
    {"role": "user", "content": "x", "tool_calls": None},
    {"role": "user", "content": "x", "tool_call_id": 3},
    {"role": "system", "content": None},
    "not a message",
    None,
    5,
]


@pytest.mark.parametrize("on_invalid", ["raise", "repair"])
def test_invalid_and_repaired_messages_behave_as_before(on_invalid: str) -> None:
    body = STATE + textwrap.dedent(f'''
    INVALID = json.loads({json.dumps(json.dumps(INVALID))})
    RESULT = []
    for bad in INVALID:
        for how in ("add", "extend", "extend_after"):
            m = memory(on_invalid={on_invalid!r})
            m.add({{"role": "user", "content": "start"}})
            m.add({{"role": "assistant", "content": None, "tool_calls": [
                {{"id": "c0", "type": "function", "function": {{"name": "ls", "arguments": "{{}}"}}}}]}})
            if how == "add":
                got = attempt(lambda: m.add(bad) and None)
            elif how == "extend":
                got = attempt(lambda: m.extend([bad]) and None)
            else:
                got = attempt(lambda: m.extend([{{"role": "tool", "tool_call_id": "c0", "content": "ok"}}, bad]) and None)
            if isinstance(got, str):
                got = got + " | index=" + repr(getattr(sys.exc_info()[1], "index", None))
            RESULT.append([got, state(m), attempt(lambda: json.dumps(m.build_context().messages)),
                           json.dumps(bad)])  # the caller's object as ingest left it
    ''')
    assert_same(body)


LOOP = '''
FIX = json.load(open(FIXTURE))["messages"]

def as_tools(messages, steps):
    """The fixture's tool loop (system, task, then assistant call / tool result pairs) up to
    ``steps`` results, with some key orders reversed and some tool names dropped."""
    out, n = [], 0
    for i, msg in enumerate(messages):
        msg = copy.deepcopy(msg)
        if i % 3 == 0:
            msg = dict(reversed(list(msg.items())))
        if msg.get("tool_calls") and i % 4 == 0:
            msg["tool_calls"] = [dict(reversed(list(c.items()))) for c in msg["tool_calls"]]
        if msg["role"] == "tool" and i % 5 == 0:
            del msg["name"]
        out.append(msg)
        if msg["role"] == "tool":
            n += 1
            if n >= steps:
                break
    return out
'''


def test_a_forty_step_agent_loop_builds_the_same_contexts() -> None:
    body = STATE + LOOP.replace("FIXTURE", repr(str(FIXTURE))) + textwrap.dedent('''
    RESULT = {"plain": [], "tools": [], "sync": []}
    # the fixture as it is (user/assistant turns), one message at a time, small budget
    m = memory()
    for i, msg in enumerate(FIX[:80]):
        m.add(copy.deepcopy(msg))
        if i % 2 == 1:
            built = m.build_context(budget=3000)
            RESULT["plain"].append([json.dumps(built.messages), built.record.mode, list(built.sources),
                                    built.record.model_dump_json()])
    RESULT["plain_state"] = state(m)
    # as a tool loop of 40 steps, each step's batch through extend (one clock reading a batch)
    run = as_tools(FIX, 40)
    m = memory()
    steps, batch = 0, []
    for msg in run:
        batch.append(copy.deepcopy(msg))
        if msg["role"] == "tool":
            m.extend(batch)
            batch = []
            steps += 1
            built = m.build_context(budget=2500)
            RESULT["tools"].append([json.dumps(built.messages), built.record.mode, list(built.sources),
                                    built.record.model_dump_json()])
    RESULT["tools_state"] = state(m)
    ids = [s.id for s in m.messages]
    RESULT["restore"] = attempt(lambda: json.dumps(m.restore(ids)))
    RESULT["restore_span"] = attempt(lambda: json.dumps(m.restore([f"{ids[3]}–{ids[20]}"])))
    handler = m.restore_handler(max_tokens=800)
    call = {"id": "r1", "type": "function",
            "function": {"name": handler.name if hasattr(handler, "name") else "restore_messages",
                         "arguments": json.dumps({"ids": ids[2:9]})}}
    RESULT["restore_answer"] = attempt(lambda: json.dumps(handler.answer(call)))
    # the caller's whole history passed every step (managed-loop history sync)
    m = memory()
    history = []
    for msg in run:
        history.append(copy.deepcopy(msg))
        if msg["role"] == "tool":
            added = m.sync_history(history)
            RESULT["sync"].append([len(added), json.dumps(m.build_context(budget=2500).messages)])
    # an edited old message: the divergence is found at the same index, with the same message
    edited = copy.deepcopy(history)
    edited[5]["content"] = (edited[5].get("content") or "") + " edited"
    RESULT["diverged"] = attempt(lambda: m.sync_history(edited))
    reordered = copy.deepcopy(history)
    reordered[2] = dict(reversed(list(reordered[2].items())))  # the same dict, keys reversed
    RESULT["reordered"] = attempt(lambda: len(m.sync_history(reordered)))
    RESULT["sync_state"] = state(m)
    ''')
    assert_same(body)


def test_the_board_journal_and_an_imported_history_are_as_before() -> None:
    body = STATE + LOOP.replace("FIXTURE", repr(str(FIXTURE))) + textwrap.dedent('''
    from relevance_memory.board import InMemoryBoard
    board = InMemoryBoard("review")
    a = memory(agent="a", board=board)
    b = memory(agent="b", board=board)
    RESULT = {"journal": [], "b": []}
    flush = a._link.flush

    def recorded():
        RESULT["journal"].append(list(a._link._journal))  # the entries as written
        return flush()

    a._link.flush = recorded
    run = as_tools(FIX, 12)
    for i, msg in enumerate(run):
        a.add(copy.deepcopy(msg), **({"scope": "shared"} if i % 2 else {}))
        if msg["role"] == "tool":
            a.build_context(budget=2500)
            RESULT["b"].append([b.sync(), json.dumps(b.build_context(budget=2500).messages)])
    RESULT["a"] = state(a)
    RESULT["b_state"] = state(b)
    restarted = memory(agent="a", board=board)  # rebuilt from its journal
    RESULT["restarted"] = state(restarted)
    RESULT["restarted_context"] = json.dumps(restarted.build_context(budget=2500).messages)
    ''')
    assert_same(body)


# ------------------------------------------------------------------ hypothesis: random valid dicts
_TEXT = st.text(alphabet=st.sampled_from("ab c/._\n{}\"é"), max_size=12)
_NAME = st.text(alphabet=st.sampled_from("abcxyz_-"), min_size=1, max_size=6)


def _ordered(pairs: list[tuple[str, Any]], order: list[int]) -> dict[str, Any]:
    ranked = sorted(range(len(pairs)), key=lambda i: order[i % len(order)] if order else 0)
    return dict(pairs[i] for i in ranked)


@st.composite
def _content(draw: Any, nullable: bool = False) -> Any:
    options = [_TEXT, st.just(""), st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": _TEXT}),
                                          min_size=1, max_size=2)]
    if nullable:
        options.append(st.none())
    return draw(st.one_of(*options))


@st.composite
def _batch(draw: Any) -> list[dict[str, Any]]:
    order = draw(st.lists(st.integers(0, 9), min_size=1, max_size=6))
    out: list[dict[str, Any]] = [{"role": "user", "content": "start src/app.py"}]
    for turn in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["user", "system", "assistant", "calls", "developer"]))
        extras = draw(st.lists(st.sampled_from([("name", "n1"), ("refusal", None), ("audio", None),
                                                ("function_call", None), ("annotations", [])]),
                               max_size=2, unique_by=lambda e: e[0]))
        if kind == "calls":
            calls, results = [], []
            for k in range(draw(st.integers(1, 2))):
                cid = f"c{turn}_{k}"
                name, text = draw(_NAME), draw(_TEXT)
                if draw(st.booleans()):
                    payload = _ordered([("name", name), ("arguments", text)], draw(st.permutations([0, 1])))
                    call = _ordered([("id", cid), ("type", "function"), ("function", payload)], order)
                else:
                    payload = _ordered([("name", name), ("input", text)], draw(st.permutations([0, 1])))
                    call = _ordered([("id", cid), ("type", "custom"), ("custom", payload)], order)
                calls.append(call)
                result = [("role", "tool"), ("tool_call_id", cid), ("content", draw(_content()))]
                if draw(st.booleans()):
                    result.append(("name", name))
                results.append(_ordered(result, order))
            pairs = [("role", "assistant"), ("content", draw(_content(nullable=True))), ("tool_calls", calls)]
            out.append(_ordered(pairs + [e for e in extras if e[0] != "name"], order))
            out.extend(results)
        else:
            pairs = [("role", kind if kind != "calls" else "assistant"), ("content", draw(_content()))]
            out.append(_ordered(pairs + extras, order))
    return out


def test_random_valid_dicts_read_back_and_build_as_before() -> None:
    examples: list[list[dict[str, Any]]] = []

    @settings(max_examples=300, database=None, derandomize=True, deadline=None)
    @given(_batch(), st.sampled_from(["extend", "add", "sync"]))
    def collect(batch: list[dict[str, Any]], how: str) -> None:
        examples.append([how, batch])

    collect()
    body = STATE + textwrap.dedent(f"""
    EXAMPLES = json.loads({json.dumps(json.dumps(examples))})
    RESULT = []
    for how, batch in EXAMPLES:
        m = memory()
        given = copy.deepcopy(batch)
        try:
            if how == "extend":
                m.extend(given)
            elif how == "add":
                for d in given:
                    m.add(d)
            else:
                m.sync_history(given[:2]); m.sync_history(given)
        except Exception as e:
            RESULT.append("EXC " + type(e).__name__ + ": " + str(e))
            continue
        for d in given:  # the caller edits everything it still holds
            d["content"] = "EDITED"
            for c in d.get("tool_calls") or ():
                c["id"] = "zz"
                for v in c.values():
                    if isinstance(v, dict):
                        v.clear()
        RESULT.append([state(m), json.dumps(m.build_context(budget=600).messages),
                       attempt(lambda: json.dumps(m.restore([s.id for s in m.messages])))])
    """)
    assert_same(body)


# ------------------------------------------------------------------ differences found
def test_nested_include_and_exclude_of_raw_in_model_dump_are_as_before() -> None:
    """``model_dump(include={"raw": {...}})`` / ``exclude={"raw": {...}}`` filtered the raw
    dict's keys; a ``field_serializer`` returning a fresh dict ignores nested filters."""
    assert_same('''
    m = memory()
    m.extend([{"role": "user", "content": "hi"}, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "out"},
        {"role": "assistant", "content": "kept dict", "refusal": None}])
    RESULT = [[typed(s.model_dump(include={"raw": {"role"}})),
               typed(s.model_dump(exclude={"raw": {"tool_calls", "content"}})["raw"]),
               s.model_dump_json(include={"raw": {"role"}}),
               s.model_dump_json(exclude={"raw": {"content"}})] for s in m.messages]
    ''')


def test_model_copy_with_an_update_leaves_raw_as_it_was() -> None:
    """``raw`` is "the original OpenAI dict, exported unchanged": a copy of a stored message
    with other field values (``model_copy(update=...)``) kept it; made from the fields, it follows them."""
    assert_same('''
    m = memory()
    m.extend([{"role": "user", "content": "hi"}, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "out", "name": "ls"},
        {"role": "user", "content": [{"type": "text", "text": "parts"}]}])
    RESULT = []
    for s in m.messages:
        changed = s.model_copy(update={"content": "NEW", "name": "other", "role": "user"})
        RESULT.append([typed(changed.raw), typed(changed.to_openai()), changed.model_dump_json(),
                       attempt(lambda: changed == s)])
        callless = s.model_copy(update={"tool_calls": ()})  # fewer calls than the shape has
        RESULT.append([attempt(lambda: typed(callless.raw)), attempt(lambda: typed(callless.to_openai())),
                       attempt(lambda: callless.model_dump_json())])
    ''')


_CALL_RUN = '''
    m = memory()
    m.extend([{"role": "user", "content": "hi"}, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "out"}])
    RESULT = []
    for s in m.messages:'''
"""A user message, a call and its result: the start of the scripts that read each message."""


def test_deepcopy_and_hash_of_a_stored_message() -> None:
    """``copy.deepcopy`` of a message deep-copied its kept FrozenDict into a plain dict
    (``FrozenDict.__deepcopy__`` thaws); a copy of a message kept as its shape reads a read-only
    dict of the same value, as the message itself does (a documented difference, accepted: a
    stored message is read-only). ``hash()`` raises the same TypeError."""
    old, new = both(_CALL_RUN + '''
        twin = copy.deepcopy(s)

        def edit():
            twin.raw["content"] = "edited"  # the copy's own dict
            return typed(twin.raw)
        RESULT.append([typed(twin.raw), json.dumps(twin.raw), attempt(edit), attempt(lambda: hash(s))])
    ''')
    for was, now in zip(old, new, strict=True):
        assert now[0][0] == "FrozenDict" and was[0][0] == "dict" and now[1] == was[1]  # the same items, in order
        assert now[3] == was[3] == "EXC TypeError: unhashable type: 'FrozenDict'"
        assert not str(was[2]).startswith("EXC") and now[2].startswith("EXC TypeError: FrozenDict is read-only")


def test_an_advancing_clock_is_read_once_a_batch() -> None:
    """Old: the clock is read for every message without a timestamp; new: once a batch (the
    batch is added at one moment; documented on ``MessageStore`` and the manager's ``clock``)."""
    old, new = both('''
    calls = []

    def ticking():
        calls.append(1)
        return T + timedelta(minutes=45 * len(calls))  # far apart: past the episode gap

    m = memory(clock=ticking)
    m.extend([{"role": "user", "content": "Fix src/app.py"}, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "cat src/app.py"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "print(1)"},
        {"role": "assistant", "content": "It prints 1."}])
    m.add({"role": "user", "content": "ok"})
    RESULT = {"timestamps": [s.timestamp.isoformat() for s in m.messages], "clock_reads": len(calls),
              "steps": [s.step for s in m.messages], "episodes": attempt(lambda: list(m.store.episodes)),
              "dump": [s.model_dump_json() for s in m.messages]}
    ''')
    assert old["clock_reads"] == 5 and new["clock_reads"] == 2
    assert len(set(new["timestamps"][:4])) == 1 and new["timestamps"][4] > new["timestamps"][3]
    assert new["timestamps"][0] == old["timestamps"][0] and new["steps"] == old["steps"]
    assert old["episodes"] == [0, 1, 2, 3, 4] and new["episodes"] == [0, 0, 0, 0, 1]


def test_referenced_by_and_supersedes_hold_the_same_ids() -> None:
    """``MessageStore.referenced_by`` / ``supersedes`` hold the same ids in the same order; one id
    is a 1-tuple, not a list (documented on ``MessageStore``: a list is two blocks)."""
    old, new = both('''
    m = memory()
    m.extend([{"role": "user", "content": "Fix src/app.py"}, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "cat src/app.py"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "print(1)"},
        {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c2", "type": "function", "function": {"name": "bash", "arguments": '{"command": "cat src/app.py"}'}}]},
        {"role": "tool", "tool_call_id": "c2", "content": "print(2)"}])
    st = m.store
    RESULT = {"referenced_by": typed(dict(st.referenced_by)), "supersedes": typed(dict(st.supersedes)),
              "ids": [{k: list(v) for k, v in st.referenced_by.items()}, {k: list(v) for k, v in st.supersedes.items()}],
              "eq_list": {k: v == list(v) for k, v in st.referenced_by.items()},
              "append": attempt(lambda: st.referenced_by["m0"].append("x") or "appended")}
    ''')
    assert new["ids"] == old["ids"] and old["ids"][0] and old["ids"][1]
    assert all(old["eq_list"].values())
    assert new["eq_list"] == {k: len(v) > 1 for k, v in new["ids"][0].items()}  # one id: a tuple
    assert old["append"] == "appended" and new["append"] == ("appended" if len(new["ids"][0]["m0"]) > 1
                                                               else new["append"])


def test_a_managed_openai_client_sends_the_same_requests() -> None:
    """The managed client's history sync (clients/_session.py, store/_history.py) compares
    the caller's dicts and SDK replies with ``stored.raw``: a scripted duck-typed client,
    replies appended as SDK objects or as dicts, one edited old message (a resync)."""
    body = STATE + LOOP.replace("FIXTURE", repr(str(FIXTURE))) + textwrap.dedent('''
    from types import SimpleNamespace
    from openai.types.chat import ChatCompletion
    from relevance_memory import manage
    run = as_tools(FIX, 14)
    replies = [msg for msg in run if msg["role"] == "assistant"]
    sent = []

    def create(**kwargs):
        sent.append(json.dumps(kwargs["messages"]))
        reply = copy.deepcopy(replies[len(sent) - 1])
        reply = {k: reply[k] for k in ("role", "content", "tool_calls") if k in reply}
        return ChatCompletion.model_validate({"id": f"r{len(sent)}", "object": "chat.completion", "created": 0,
                                              "model": "m", "choices": [{"index": 0, "finish_reason": "stop",
                                                                         "message": reply}]})

    client = SimpleNamespace(chat=SimpleNamespace(completions=SimpleNamespace(create=create)))
    mem = memory()
    managed = manage(client, mem)
    history = [copy.deepcopy(m) for m in run[:2]]
    RESULT = {"errors": []}
    for step, result in enumerate(msg for msg in run if msg["role"] == "tool"):
        try:
            response = managed.chat.completions.create(model="m", messages=history)
        except Exception as e:
            RESULT["errors"].append(attempt(lambda: (_ for _ in ()).throw(e)))
            break
        reply = response.choices[0].message
        history.append(reply if step % 2 else reply.model_dump(exclude_none=True))
        history.append(copy.deepcopy(result))
        if step == 9:
            history[3]["content"] = history[3]["content"] + " (edited)"  # a resync
    RESULT["sent"] = sent
    RESULT["state"] = state(managed.memory if hasattr(managed, "memory") else mem)
    ''')
    assert_same(body)


def test_messages_pickled_by_the_old_code_load_and_read_back_the_same() -> None:
    """A store pickled before the commit (a message keeping its FrozenDict) loads here and
    reads back exactly as the old code reads it."""
    body = '''
    import base64
    m = memory()
    m.extend([{"content": "hi", "role": "user", "name": "dana"}, {"role": "assistant", "content": None, "tool_calls": [
        {"type": "custom", "custom": {"input": "diff", "name": "patch"}, "id": "c1"}]},
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "ok"}]},
        {"role": "assistant", "content": "done", "refusal": None}])
    RESULT = {"pickled": base64.b64encode(pickle.dumps(list(m.messages))).decode(),
              "seen": [observe(s) for s in m.messages]}
    '''
    old = run(body, _old_tree())
    loaded = run(f'''
    import base64
    messages = pickle.loads(base64.b64decode({old["pickled"]!r}))
    RESULT = {{"seen": [observe(s) for s in messages]}}
    ''', ROOT)
    assert loaded["seen"] == old["seen"]


def test_metadata_of_other_types_validated_by_pydantic_reads_back_as_before() -> None:
    """Metadata that is not of the declared type takes pydantic's validation (and coercion)
    path before the shape is decided."""
    body = STATE + textwrap.dedent('''
    RESULT = []
    cases = [({"role": "user", "content": "plain"}, {"timestamp": "2026-02-03T04:05:06Z"}),
             ({"role": "user", "content": [{"type": "text", "text": "parts"}]}, {"timestamp": "2026-02-03T04:05:06"}),
             ({"content": "k", "role": "user", "name": "nm"}, {"msg_type": "user_chat", "trace_id": "t1"}),
             ({"role": "assistant", "content": "c", "refusal": None}, {"producer": "p", "scope": "shared"}),
             ({"role": "user", "content": "bad"}, {"timestamp": "not a time"}),
             ({"role": "user", "content": "bad"}, {"trace_id": 5}),
             ({"role": "user", "content": "i"}, {"id": "given-id"})]
    for msg, meta in cases:
        m = memory()
        RESULT.append([attempt(lambda: m.add(copy.deepcopy(msg), **meta) and None), state(m)])
    ''')
    assert_same(body)


def test_more_distinct_shapes_than_are_interned_read_back_as_before() -> None:
    """Past 4,096 distinct shapes a message keeps a shape of its own (not interned):
    4,500 assistant messages of distinct key orders (four calls each), and their results,
    read back, pickled and compared."""
    body = '''
    import hashlib, itertools
    orders = list(itertools.permutations(["id", "type", "function"]))
    payloads = [("name", "arguments"), ("arguments", "name")]
    shapes = list(itertools.product(itertools.product(range(6), range(2)), repeat=4))[:4500]
    m = memory()
    batch, n = [{"role": "user", "content": "go"}], 0
    for i, shape in enumerate(shapes):
        calls = []
        for k, (o, p) in enumerate(shape):
            values = {"id": f"c{i}_{k}", "type": "function",
                      "function": {key: ("ls" if key == "name" else "{}") for key in payloads[p]}}
            calls.append({key: values[key] for key in orders[o]})
        top = [("role", "assistant"), ("content", None), ("tool_calls", calls)]
        batch.append(dict(top[j] for j in ((0, 1, 2), (2, 0, 1), (1, 2, 0))[i % 3]))
        batch.extend({"role": "tool", "tool_call_id": call["id"], "content": "ok"} for call in calls)
    m.extend(batch)
    digest = hashlib.sha256()
    for s in m.messages:
        digest.update(json.dumps(s.raw).encode())
        digest.update(json.dumps(s.to_openai()).encode())
        digest.update(s.model_dump_json().encode())
        digest.update(json.dumps(pickle.loads(pickle.dumps(s)).raw).encode())
    RESULT = {"n": len(m.messages), "digest": digest.hexdigest(),
              "given": all(s.to_openai() == g for s, g in zip(m.messages, batch))}
    '''
    old, new = both(body)
    assert new == old and new["given"] and new["n"] == 1 + 4500 * 5


def test_model_dump_of_a_constructed_message_keeps_its_raw_values() -> None:
    """Outside the store: ``Message.model_construct`` (no validation) with a tuple in ``raw``
    dumped the tuple; the serializer now thaws raw (``to_openai()``) into a list."""
    assert_same('''
    base = dict(id="x", index=0, role="user", content="hi", msg_type="user_chat", step=0, token_count=3)
    made = Message.model_construct(**base, raw={"role": "user", "content": "hi", "t": (1, 2)})
    RESULT = [typed(made.model_dump()["raw"]), typed(made.model_dump(mode="json")["raw"])]
    ''')


def test_reading_raw_twice_gives_an_equal_dict() -> None:
    """``message.raw`` was the one kept FrozenDict (``m.raw is m.raw``); a message kept as its
    shape makes an equal one on each read (documented on ``RawShape``); its content is the
    message's own object either way."""
    old, new = both('''
    m = memory()
    m.extend([{"role": "user", "content": "hi"}, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "out"}]},
        {"role": "assistant", "content": "kept", "refusal": None}])
    RESULT = [[s.raw is s.raw, s.raw.get("tool_calls") is s.raw.get("tool_calls"),
               s.raw.get("content") is s.content, s.raw == s.raw] for s in m.messages]
    ''')
    assert all(row == [True, True, True, True] for row in old)
    assert new == [[False, True, True, True], [False, False, True, True], [False, True, True, True],
                   [True, True, True, True]]  # the last one keeps its dict (a refusal key)


def test_iterating_a_stored_message_gives_its_raw_dict_as_before() -> None:
    """pydantic's ``dict(model)`` / ``iter(model)`` read the instance's ``__dict__``, where
    ``raw`` may be a ``RawShape``: ``Message.__iter__`` gives the dict, and a message made again
    from ``vars(message)`` makes the dict of the shape (fixed in d0d0b66 after 6ac491e)."""
    assert_same(_CALL_RUN + '''
        RESULT.append([attempt(lambda: typed(dict(s)["raw"])),
                       attempt(lambda: json.dumps(dict(s)["raw"])),
                       attempt(lambda: Message(**dict(s)) == s),
                       attempt(lambda: Message.model_validate(vars(s)) == s),
                       attempt(lambda: typed(s.model_copy(update={}).raw))])
    ''')


def test_stored_messages_fed_to_another_memory_are_stored_as_before() -> None:
    """Stored :class:`Message` objects passed back to ``add``/``extend``/``sync_history``
    (they have a ``role``: read as SDK-like objects) and their ``to_openai()`` dicts."""
    body = STATE + textwrap.dedent('''
    m = memory()
    m.extend([{"role": "user", "content": "hi", "name": "dana"}, {"role": "assistant", "content": None, "tool_calls": [
        {"function": {"arguments": "{}", "name": "ls"}, "type": "function", "id": "c1"}]},
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "out"}]},
        {"role": "assistant", "content": "kept", "refusal": None}])
    RESULT = {}
    for how in ("objects", "dicts", "raw"):
        other = memory()
        items = {"objects": list(m.messages), "dicts": [s.to_openai() for s in m.messages],
                 "raw": [s.raw for s in m.messages]}[how]
        RESULT[how] = [attempt(lambda: other.extend(items) and None), state(other),
                       attempt(lambda: len(other.sync_history(items)))]
    ''')
    assert_same(body)


def test_a_managed_anthropic_client_sends_the_same_requests() -> None:
    """The Anthropic managed client converts its messages to OpenAI dicts (content blocks,
    tool_use / tool_result) before storing them; a scripted duck-typed client."""
    body = STATE + textwrap.dedent('''
    from types import SimpleNamespace
    from anthropic.types import Message as AnthropicMessage
    from relevance_memory import manage
    sent = []

    def create(**kwargs):
        sent.append(json.dumps(kwargs.get("messages"), default=repr) + json.dumps(kwargs.get("system"), default=repr))
        n = len(sent)
        if n % 2:
            content = [{"type": "text", "text": f"Looking at src/app.py step {n}"},
                       {"type": "tool_use", "id": f"tu{n}", "name": "bash", "input": {"command": f"cat src/f{n % 3}.py"}}]
        else:
            content = [{"type": "text", "text": f"Step {n}: the file says x = {n}."}]
        return AnthropicMessage.model_validate({"id": f"r{n}", "type": "message", "role": "assistant", "model": "c",
                                                "content": content, "stop_reason": "end_turn",
                                                "usage": {"input_tokens": 1, "output_tokens": 1}})

    client = SimpleNamespace(messages=SimpleNamespace(create=create))
    mem = memory()
    managed = manage(client, mem)
    history = [{"role": "user", "content": "Fix src/app.py; the port is 41492."}]
    RESULT = {"errors": []}
    for step in range(12):
        try:
            reply = managed.messages.create(model="c", max_tokens=100, system="be brief", messages=history)
        except Exception as e:
            RESULT["errors"].append(type(e).__name__ + ": " + str(e))
            break
        blocks = [b.model_dump(exclude_none=True) for b in reply.content]
        history.append({"role": "assistant", "content": blocks if step % 3 else reply.content})
        uses = [b for b in blocks if b["type"] == "tool_use"]
        if uses:
            history.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": u["id"], "content": "x = 1\\n" * (40 * (step + 1))} for u in uses]})
        else:
            history.append({"role": "user", "content": f"continue {step}"})
    RESULT["sent"] = sent
    RESULT["state"] = state(getattr(managed, "memory", mem))
    ''')
    assert_same(body)

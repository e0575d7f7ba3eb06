"""Supersede detection (issue 11): the same call again, the same file shown again, a fact
restated with a new value; identical repeats link nothing. Real SWE runs and LongMemEval
knowledge-update questions as data."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relevance_memory import RelevanceMemoryManager
from relevance_memory.store._supersede import (
    FileView,
    SupersedeDetector,
    SupersedeItem,
    asks_for_history,
    canonical_arguments,
    detect_supersedes,
    fact_statements,
    file_views,
    items_from_messages,
)

REPO = Path(__file__).resolve().parents[2]


def chat(*texts: str, role: str = "user") -> list[SupersedeItem]:
    return [SupersedeItem(id=f"m{i}", index=i, step=i, role=role, text=t, content_hash=f"h:{t}")
            for i, t in enumerate(texts)]


def links_of(*texts: str) -> list[tuple[str, str, str, str]]:
    return [(link.older, link.newer, link.old_value, link.new_value) for link in detect_supersedes(chat(*texts))]


def bash_call(call_id: str, command: str) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": command})}}]}


def result(call_id: str, output: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": f"<returncode>0</returncode>\n<output>\n{output}</output>"}


# ----------------------------------------------------------------- file views
@pytest.mark.parametrize(
    ("command", "views"),
    [
        ("cat django/db/models/query.py", [FileView("django/db/models/query.py")]),
        ("sed -n '1680,1750p' django/db/models/query.py", [FileView("django/db/models/query.py", 1680, 1750)]),
        ("nl -ba a/b.py | sed -n '375,385p'", [FileView("a/b.py", 375, 385)]),
        ("cat -n a.py | head -n 20", [FileView("a.py", 1, 20)]),
        ("head -n 50 xarray/core/indexing.py", [FileView("xarray/core/indexing.py", 1, 50)]),
        ("cd /testbed && cat src/x.py", [FileView("/testbed/src/x.py")]),
        ("sed -n '10,$p' ./x.py", [FileView("x.py", 10, None)]),
        ("cat <<'EOF' > reproduce_issue.py\nimport os\nEOF", [FileView("reproduce_issue.py", write=True)]),
        ("cat > fix.py <<EOF\nx = 1\nEOF", [FileView("fix.py", write=True)]),
        ("cat a.py > b.py", []),
        ("grep -n 'def f' a.py", []),
        ("sed -i 's/a/b/' a.py", []),
        ("cat a.py b.py", []),
        ("cat $FILE", []),
        ("cat 'unbalanced", []),
        ("python reproduce_issue.py", []),
    ],
)
def test_file_views(command: str, views: list[FileView]) -> None:
    assert file_views(command) == views


def test_view_containment() -> None:
    whole, part = FileView("a.py"), FileView("a.py", 10, 20)
    assert whole.contains(part) and not part.contains(whole)
    assert FileView("a.py", 5, 30).contains(part) and not FileView("a.py", 11, 30).contains(part)
    assert not FileView("b.py").contains(part)
    assert part.label == "a.py lines 10–20" and whole.label == "a.py"


def test_canonical_arguments() -> None:
    assert canonical_arguments('{"b": 2, "a": 1}') == canonical_arguments('{"a":1,"b":2}') == '{"a":1,"b":2}'
    assert canonical_arguments(" not json ") == "not json"


# ----------------------------------------------------------------- tool results in a real store
def agent_history() -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the off-by-one in app/util.py"},
        bash_call("c1", "cat app/util.py"), result("c1", "def f(x):\n    return x + 2\n"),
        bash_call("c2", "python -m pytest -q"), result("c2", "1 failed"),
        bash_call("c3", "sed -i 's/x + 2/x + 1/' app/util.py"), result("c3", ""),
        bash_call("c4", "nl -ba app/util.py | sed -n '1,2p'"), result("c4", "1 def f(x):\n2     return x + 1\n"),
        bash_call("c5", "cat app/util.py"), result("c5", "def f(x):\n    return x + 1\n"),
        bash_call("c6", "python -m pytest -q"), result("c6", "1 passed"),
        bash_call("c7", "python -m pytest -q"), result("c7", "1 passed"),
    ]


def test_read_edit_read_and_same_call_links() -> None:
    memory = RelevanceMemoryManager()
    memory.extend(agent_history())
    by_id = {m.id: m for m in memory.messages}
    links = detect_supersedes(items_from_messages(memory.messages))
    got = {(by_id[link.older].tool_call_id, by_id[link.newer].tool_call_id, link.kind) for link in links}
    assert got == {
        ("c1", "c5", "tool_call"),  # cat app/util.py again, after the edit
        ("c4", "c5", "resource"),  # the whole file contains lines 1–2
        ("c2", "c6", "tool_call"),  # pytest again, a different result
    }
    first = next(link for link in links if link.kind == "resource")
    assert first.key == "file app/util.py lines 1–2" and "shown again at step" in first.reason
    # c7 repeats c6's output exactly: an identical repeat links nothing (and c6 is not superseded)
    assert not any(by_id[link.older].tool_call_id in ("c6", "c7") for link in links)


def test_failed_reads_are_not_views() -> None:
    memory = RelevanceMemoryManager()
    memory.extend([
        {"role": "user", "content": "look"},
        bash_call("c1", "sed -n '1,5p' a.py"), result("c1", "a\nb\n"),
        bash_call("c2", "cat a.py"),
        {"role": "tool", "tool_call_id": "c2", "content": "<returncode>1</returncode>\ncat: a.py: No such file or directory"},
    ])
    assert detect_supersedes(items_from_messages(memory.messages)) == []


def test_file_written_whole_supersedes_older_views_and_writes() -> None:
    memory = RelevanceMemoryManager()
    memory.extend([
        {"role": "user", "content": "write a script"},
        bash_call("c1", "cat <<'EOF' > repro.py\nprint(1)\nEOF"), result("c1", ""),
        bash_call("c2", "cat repro.py"), result("c2", "print(1)\n"),
        bash_call("c3", "cat <<'EOF' > repro.py\nprint(2)\nEOF"), result("c3", ""),
    ])
    by_id = {m.id: m for m in memory.messages}
    links = detect_supersedes(items_from_messages(memory.messages))
    # the read shows the written file (m4 supersedes the write m1); the rewrite supersedes the read
    assert [(link.older, link.newer, link.kind) for link in links] == [("m1", "m4", "resource"), ("m4", "m5", "resource")]
    assert by_id["m1"].tool_calls and by_id["m5"].tool_calls  # a write's view is its call message


def test_same_tool_same_arguments_in_tau_style_json() -> None:
    items = [
        SupersedeItem("r1", 0, 0, "tool", '{"status": "booked"}', "x1", call=("get_reservation", '{"id": "ABC"}')),
        SupersedeItem("r2", 1, 1, "tool", '{"status": "booked"}', "x1", call=("get_reservation", '{ "id":"ABC" }')),
        SupersedeItem("r3", 2, 2, "tool", '{"status": "cancelled"}', "x2", call=("get_reservation", '{"id":"ABC"}')),
        SupersedeItem("r4", 3, 3, "tool", '{"status": "booked"}', "x1", call=("get_reservation", '{"id": "XYZ"}')),
    ]
    links = detect_supersedes(items)
    assert [(link.older, link.newer) for link in links] == [("r1", "r3"), ("r2", "r3")]
    assert links[0].key == 'get_reservation {"id":"ABC"}'


# ----------------------------------------------------------------- facts
def test_preferences_names_amounts_places() -> None:
    assert links_of("I love sushi, it's my favourite food.", "What's good tonight?",
                    "Honestly I don't like sushi anymore.") == [("m0", "m2", "likes sushi", "dislikes sushi")]
    assert links_of("My name is Sam.", "My name is Samantha now, please use it.") == [("m0", "m1", "sam", "samantha")]
    assert links_of("My budget is $500 for the trip.", "Update: my budget for the trip is now $700.") == [
        ("m0", "m1", "$500", "$700")]
    assert links_of("I live in Berlin.", "I moved to Lisbon last month.") == [("m0", "m1", "berlin", "lisbon")]
    assert links_of("I prefer window seats.", "I now prefer aisle seats.") == [
        ("m0", "m1", "prefers window seats", "prefers aisle seats")]
    assert links_of("My flight is at 7 pm on Friday.", "My flight is at 9:30 pm on Friday now.") == [
        ("m0", "m1", "7 pm", "9:30 pm")]


def test_identical_repeat_and_unrelated_values_link_nothing() -> None:
    assert links_of("My favorite color is blue.", "My favorite color is blue.") == []
    assert links_of("I have three kids.", "I have 3 kids.") == []  # the same value in other words
    # one-off events of the same kind add up; they do not replace each other
    assert links_of("I sold 12 jars at the market on Saturday.", "I sold 15 jars at the market on Sunday.") == []
    assert links_of("I'm 34 years old.", "I worked there for 5 years.") == []
    assert links_of("What is my budget, $500?", "My budget is $700.") == []  # a question states nothing
    # another speaker's value does not supersede the user's
    items = [*chat("My budget is $500 for the trip."),
             SupersedeItem("a1", 1, 1, "assistant", "Your budget is $700 for the trip.", "h2")]
    assert detect_supersedes(items) == []


def test_fact_values_are_normalised() -> None:
    facts = {f.raw: f.value for f in fact_statements(
        "I've already bought five tops so far. My rent is $1,200 now. The gym is usually at 7:00 pm for me. "
        "My 5th project is done.")}
    assert facts["five"] == "5" and facts["$1,200"] == "1200 USD" and facts["7:00 pm"] == "19:00" and facts["5th"] == "5"


def test_chains_of_updates_link_each_value_to_the_next() -> None:
    got = links_of("I have 500 followers on Instagram now.", "I'm now at 600 followers on Instagram.",
                   "I currently have 750 followers on Instagram.")
    assert got == [("m0", "m1", "500", "600"), ("m1", "m2", "600", "750")]


def test_asks_for_history() -> None:
    assert asks_for_history("Where did I initially keep my old sneakers?")
    assert asks_for_history("What was my previous status before I got the current one?")
    assert asks_for_history("我之前住在哪里？")
    assert not asks_for_history("Where do I currently keep my old sneakers?")


def test_detection_is_deterministic_and_incremental() -> None:
    memory = RelevanceMemoryManager()
    memory.extend(agent_history())
    items = items_from_messages(memory.messages)
    whole = detect_supersedes(items)
    detector = SupersedeDetector()
    stepwise = [link for item in items for link in detector.observe(item)]
    assert whole == stepwise == detect_supersedes(items)


# ----------------------------------------------------------------- real data
def test_swe_fixture_links() -> None:
    """The shipped SWE-bench run (django-15280): re-runs of the reproduction script, views of
    edited files shown again, rewrites of the script."""
    run = json.loads((REPO / "fixtures" / "django__django-15280.json").read_text())
    memory = RelevanceMemoryManager(on_invalid="repair")
    memory.extend(run["messages"])
    links = detect_supersedes(items_from_messages(memory.messages))
    kinds = {k: sum(1 for link in links if link.kind == k) for k in ("tool_call", "resource", "fact")}
    assert kinds == {"tool_call": 18, "resource": 5, "fact": 0}
    assert len({link.older for link in links}) == len(links)  # each older message superseded once
    assert all(memory.store.get(link.older).index < memory.store.get(link.newer).index for link in links)
    assert memory.messages[1].id not in {link.older for link in links}  # never the task statement


@pytest.mark.data
def test_longmemeval_knowledge_update_links(data_dir: Path) -> None:
    """LongMemEval oracle, knowledge-update questions: the older evidence turn is linked to the
    newer one where the value is a stated quantity (19 of the 70 two-evidence questions)."""
    from relevance_memory.evaluation import load_longmemeval

    dataset = load_longmemeval(data_dir / "longmemeval" / "oracle")
    linked = total = 0
    for conv in dataset.conversations:
        items = [SupersedeItem(t.id, i, i, t.role, t.text, t.text) for i, t in enumerate(conv.turns)]
        links = detect_supersedes(items)
        for q in conv.questions:
            if q.category == "knowledge-update" and len(q.evidence) >= 2:
                total += 1
                linked += any(link.older in q.evidence and link.newer in q.evidence for link in links)
    assert (linked, total) == (19, 70)


def test_store_links_agree_with_the_detector_and_a_snapshot_sees_only_its_own() -> None:
    """The store's links on ingest equal the detector's, both ways; a snapshot taken before the
    superseding message arrived shows no link to it (links are written before publication)."""
    from relevance_memory._models import Message
    from relevance_memory._tokenizer import TiktokenCounter
    from relevance_memory.store._snapshot import StoreSnapshot
    from relevance_memory.store._store import MessageStore

    history = agent_history()
    store = MessageStore(TiktokenCounter("cl100k_base"))
    store.extend(history[:8])  # up to c3's result: nothing superseded yet
    before = StoreSnapshot(store)
    store.extend(history[8:])
    after = StoreSnapshot(store)
    messages: list[Message] = list(store.messages)
    links = detect_supersedes(items_from_messages(messages))
    assert {(k, v.newer) for k, v in store.superseded_by.items()} == {(link.older, link.newer) for link in links}
    assert dict(after.superseded_by) == store.superseded_by
    assert {k: list(v) for k, v in after.supersedes.items()} == {k: list(v) for k, v in store.supersedes.items()}
    assert dict(before.superseded_by) == {} and dict(before.supersedes) == {}
    newer = next(iter(store.supersedes))
    with pytest.raises(KeyError):
        before.supersedes[newer]


class _LengthEmbedder:
    """A 2-dimension embedder (text length, vowels) that counts its calls."""

    name, version, dim = "length", "length-1", 2

    def __init__(self) -> None:
        self.calls = 0

    def embed(self, texts: Sequence[str]) -> Any:
        import numpy as np

        self.calls += 1
        rows = np.array([[len(t) + 1.0, sum(c in "aeiou" for c in t) + 1.0] for t in texts], dtype=np.float32)
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def test_extend_is_atomic_for_supersede_links_and_vectors() -> None:
    """An invalid message anywhere in a batch stores nothing of it: no link and no pending
    vector is made for the batch's valid messages either."""
    from relevance_memory._exceptions import InvalidMessageError
    from relevance_memory._tokenizer import TiktokenCounter
    from relevance_memory.scoring._embedding import VectorIndex
    from relevance_memory.store._store import MessageStore
    vectors = VectorIndex(_LengthEmbedder())
    store = MessageStore(TiktokenCounter("cl100k_base"), vectors=vectors)
    history = agent_history()
    store.extend(history[:8])
    bad = [*history[8:], {"role": "tool", "tool_call_id": "nope", "content": "x"}]
    with pytest.raises(InvalidMessageError, match="nothing of this batch was stored"):
        store.extend(bad)
    assert len(store) == 8 and store.superseded_by == {}
    vecs = store.message_vectors()
    assert vecs is not None and len(vecs) == len({m.content_hash for m in store.messages})


# ------------------------------------------------- the newest view of each edited file (issue 11)
@pytest.mark.parametrize(("command", "paths"), [
    ("sed -i 's/a/b/' django/db/models/query.py", {"django/db/models/query.py"}),
    ("cd /testbed && sed -i '5d' x.py", {"/testbed/x.py"}),
    ("sed -i.bak -e s/x/y/ a.py", {"a.py"}),
    ("echo hi > out.txt", {"out.txt"}),
    ("printf x >> log.txt && echo ok", {"log.txt"}),
    ("cat <<'EOF' > a/b.py\nprint(1)\nEOF", {"a/b.py"}),
    ("cd /testbed && cat > r.py <<EOF\nprint(1)\nEOF", {"/testbed/r.py"}),
    ("python t.py > /dev/null", set()),
    ("grep -n foo bar.py", set()),
    ("cat app/util.py", set()),
    ("sed -n '1,20p' app/util.py", set()),
])
def test_edited_paths_reads_the_edits_a_shell_command_makes(command: str, paths: set[str]) -> None:
    from relevance_memory.store._supersede_files import edited_paths

    assert edited_paths(command) == paths


def _bash(call_id: str, command: str) -> dict[str, Any]:
    return {"role": "assistant", "content": "", "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": command})}}]}


def _out(call_id: str, text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": f"<returncode>0</returncode>\n{text}"}


def test_edited_views_name_the_newest_view_of_every_edited_file_only() -> None:
    memory = RelevanceMemoryManager()
    memory.extend([
        {"role": "user", "content": "Fix the bug in app/util.py."},
        _bash("c1", "cat /testbed/app/util.py"), _out("c1", "def f(x):\n    return x + 1\n"),   # m1, m2
        _bash("c2", "cat README.md"), _out("c2", "# readme\n"),                                # never edited
        _bash("c3", "cd /testbed && sed -i 's/+ 1/* 2/' app/util.py"), _out("c3", ""),         # m5, m6: the edit
    ])
    # edited, not shown again yet: its newest view is the read before the edit (an absolute path
    # names the same file as the relative one the edit used)
    assert memory.store.edited_views() == {"/testbed/app/util.py": "m2"}
    memory.extend([
        _bash("c4", "nl -ba app/util.py"), _out("c4", "1 def f(x):\n2     return x * 2\n"),     # m7, m8
        _bash("c5", "cat <<'EOF' > tests/test_util.py\ndef test_f():\n    assert f(2) == 4\nEOF"), _out("c5", ""),
    ])
    # the newest read, and a whole-file write's view is the assistant message carrying the content
    assert memory.store.edited_views() == {"/testbed/app/util.py": "m8", "tests/test_util.py": "m9"}
    assert "README.md" not in " ".join(memory.store.edited_views())


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from([*"ab ./-'\";&|<>\t\n\r#$`=é0\\", "cat ", "sed -n ", "&&", "'x y'", "\\\""]), max_size=30))
def test_shell_words_split_as_shlex_does(pieces: list[str]) -> None:
    """Issue 24: commands are split by a regular expression, not shlex (≈1 ms a command);
    the words must be shlex's, unclosed quotes included (None where shlex raises)."""
    import shlex

    from relevance_memory.store._supersede_files import shell_words

    text = "".join(pieces)

    def reference(punctuation: bool) -> list[str] | None:
        try:
            if not punctuation:
                return shlex.split(text)
            lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|<>")
            lexer.whitespace_split = True
            lexer.commenters = ""
            return list(lexer)
        except ValueError:
            return None

    assert shell_words(text, punctuation=True) == reference(True)
    assert shell_words(text, punctuation=False) == reference(False)


_EDIT_STEPS = [
    "cat /testbed/app/util.py", "nl -ba app/util.py", "sed -n '1,20p' app/util.py", "cat README.md",
    "cd /testbed && sed -i 's/+ 1/* 2/' app/util.py", "sed -i 's/a/b/' README.md",
    "cat <<'EOF' > tests/test_util.py\ndef test_f():\n    assert f(2) == 4\nEOF", "cat tests/test_util.py",
    "python -m pytest -q", "ls", "grep -n def app/util.py", "echo done",
]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(_EDIT_STEPS), st.integers(0, 3)), min_size=1, max_size=25))
def test_edited_views_kept_between_steps_equal_those_made_again(steps: list[tuple[str, int]]) -> None:
    """``edited_views`` is kept until a message shows or edits a file (issue 24: an append reads
    it at every build); after every message it equals the map made again from the detector's
    tables, and a step that neither shows nor edits a file leaves the same map."""
    memory = RelevanceMemoryManager()
    memory.extend([{"role": "user", "content": "Fix the bug in app/util.py."}])
    detector = memory.store._detector
    assert detector is not None
    for n, (command, version) in enumerate(steps):
        before = detector.edited_views()
        for message in (_bash(f"c{n}", command), _out(f"c{n}", f"line {version}\n")):
            memory.extend([message])
            kept = detector.edited_views()
            detector._current = None  # made again from the tables
            assert kept == detector.edited_views()
        if command in ("python -m pytest -q", "ls", "echo done"):  # neither shows nor edits a file
            assert detector.edited_views() == before


class _ViewReference(SupersedeDetector):
    """The detector's :meth:`_observe_view` rule written out here (a ``contains`` call per live
    view): the detector must link and keep the same."""

    def _observe_view(self, item_id: str, step: int, view: FileView, content_hash: str) -> list[Any]:
        from relevance_memory.store._supersede import _MAX_LIVE_PER_KEY, SupersedeLink, _LiveView

        self._current = None
        live = self._views.setdefault(view.path, [])
        self._touch(self._views, view.path)
        self._by_name.setdefault(view.path.rsplit("/", 1)[-1], set()).add(view.path)
        links: list[SupersedeLink] = []
        kept: list[_LiveView] = []
        for older in live:
            if older.item_id != item_id and view.contains(older.view) and older.content_hash != content_hash:
                verb = "written whole" if view.write else "shown again"
                links.append(SupersedeLink(
                    older.item_id, item_id, "resource", self._label(f"file {older.view.label}"),
                    f"file {older.view.label} {verb} at step {step} ({view.label})",
                    older_step=older.step, newer_step=step,
                ))
            else:
                kept.append(older)
        kept.append(_LiveView(item_id, step, view, content_hash))
        self._views[view.path] = kept[-_MAX_LIVE_PER_KEY:]
        return links


_VIEW_STEPS = st.lists(st.tuples(
    st.sampled_from(["a.py", "d/a.py", "b.md"]),
    st.integers(1, 6), st.one_of(st.none(), st.integers(0, 8)), st.booleans(),
    st.integers(0, 5), st.sampled_from(["h0", "h1", "h2"]),
), max_size=160)


@settings(max_examples=300, deadline=None)
@given(_VIEW_STEPS)
def test_file_view_links_are_those_of_a_contains_call_per_live_view(steps: list[tuple[Any, ...]]) -> None:
    """Issue 24: views of a few files with overlapping ranges, repeated ids and contents, more
    than the 64 kept live per file: the same links, and the same views kept."""
    fast, slow = SupersedeDetector(), _ViewReference()
    for n, (path, start, length, write, owner, digest) in enumerate(steps):
        view = FileView(path, start, None if length is None else start + length, write)
        got = fast._observe_view(f"m{owner}", n, view, digest)
        assert got == slow._observe_view(f"m{owner}", n, view, digest)
        assert fast._views == slow._views and list(fast._views) == list(slow._views)

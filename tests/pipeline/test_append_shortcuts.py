"""Review of commit 804bc9a (issue 24, "an append touches less code"): tests that try to break
each shortcut it added, against the claim that it gives exactly what the old code gave.

1. ``append._made_like`` (records as copies of a validated template)
2. a verbatim message's read-only form is the stored ``raw``; caller copies and copy plans
3. ``StoreSnapshot`` views made on first use (``functools.cached_property``)
4. ``SupersedeDetector.edited_views`` memoised until a view or an edit
5. the build's tracer looked up once per sync build (``_BUILD_TRACER``)
6. ``BuildLock.hold()`` one reusable context manager
7. ``pheromone._math`` settle / reinforce build ``Cell`` directly
"""

from __future__ import annotations

import enum
import io
import json
import shutil
import subprocess
import sys
import tarfile
import textwrap
import threading
import time
import types
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relevance_memory import CachePolicy, RelevanceMemoryManager, TiktokenCounter
from relevance_memory.pipeline import append as append_module

REPO = Path(__file__).resolve().parents[2]
OLD = "804bc9a~1"
FIXES = [(  # deliberate changes since OLD, made in the old package too: (file, its old text, the new)
    # e2bb21d: an append that sent an excerpt ends record.identity (the context is no longer the history)
    "relevance_memory/pipeline/append.py",
    "identity=base.identity and not held and not skipped,",
    "identity=base.identity and not held and not skipped and not {**previous.renditions, "
    "**{i: r for i, r in step.renditions.items() if i in steps.indices}},",
), (  # d6a03c5 (case C08's kind): fields beyond the chat fields ("extra_key" below) are counted, and an
    # excerpt leaves them out with the content; the store's count memo skips a message holding one
    "relevance_memory/_tokenizer.py",
    """            total += self.count_text(str(payload.get("input" if custom else "arguments", "") or ""))
        return total
""",
    """            total += self.count_text(str(payload.get("input" if custom else "arguments", "") or ""))
        for key, value in message.items():
            if key in ("role", "content", "name", "tool_calls", "tool_call_id", "anthropic") or value is None \\
                    or isinstance(value, bool):
                continue
            if isinstance(value, (int, float)):
                total += self.count_text(str(value))
            else:
                total += sum(self.count_texts(leaf_texts(value))) + _count_blobs(value) * self._image_default
        return total
""",
), (
    "relevance_memory/pipeline/fidelity.py",
    "    out: dict[str, Any] = thaw(message.raw)\n    out[\"content\"] = content\n",
    "    out: dict[str, Any] = {k: v for k, v in thaw(message.raw).items()\n"
    "                           if k in (\"role\", \"content\", \"name\", \"tool_calls\", \"tool_call_id\", \"anthropic\")}\n"
    "    out[\"content\"] = content\n",
), (
    "relevance_memory/store/_store.py",
    "        if memo is None or not (content is None or type(content) is str):",
    "        if memo is None or not (content is None or type(content) is str) or not {\"role\", \"content\", "
    "\"tool_calls\", \"tool_call_id\", \"name\"}.issuperset(message):",
)]


def call(cid: str, command: str) -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": command})}}


def step(n: int, size: int = 40) -> list[dict[str, Any]]:
    return [
        {"role": "assistant", "content": f"Step {n}: inspect file_{n}.py", "tool_calls": [call(f"c{n}", f"cat file_{n}.py")]},
        {"role": "tool", "tool_call_id": f"c{n}", "content": f"file_{n}.py line {n} " + "lorem ipsum " * size},
    ]


OPENING = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "Fix the failing date parser in utils/dates.py. You must not change the public API."},
]


def _clock() -> datetime:
    return datetime(2026, 1, 1, tzinfo=timezone.utc)


# --------------------------------------------------------------------------- 1 and 2: differential
_SCENARIO = textwrap.dedent('''
    import json, sys, random
    from datetime import datetime, timezone
    from relevance_memory import RelevanceMemoryManager, CachePolicy

    MUTATE = sys.argv[1] == "mutate"
    SUBTASK_AT_END = sys.argv[2] == "1"
    rng = random.Random(7)

    def call(cid, command):
        return {"id": cid, "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": command})}}

    def step(n, size):
        ids = [f"c{n}a", f"c{n}b"] if n % 5 == 3 else [f"c{n}"]
        out = [{"role": "assistant", "content": f"Step {n}: inspect file_{n}.py",
                "tool_calls": [call(i, f"cat file_{n % 4}.py") for i in ids]}]
        for i in ids:
            content = f"file_{n}.py line {n} " + "lorem ipsum dolor " * size
            if n % 7 == 2:
                content = [{"type": "text", "text": content}, {"type": "text", "text": "second part " * 3}]
            out.append({"role": "tool", "tool_call_id": i, "content": content, "extra_key": {"nested": [1, 2, {"x": n}]}})
        if n % 6 == 5:
            out.append({"role": "user", "content": f"Now also check function_{n}; keep the API."})
        return out

    def clock():
        return datetime(2026, 1, 1, tzinfo=timezone.utc)

    memory = RelevanceMemoryManager(max_input_tokens=6000, keep_recent=2, clock=clock, on_invalid="repair",
                                    cache_policy=CachePolicy(subtask_at_end=SUBTASK_AT_END))
    memory.extend([{"role": "system", "content": "You are a coding agent."},
                   {"role": "user", "content": "Fix the failing date parser in utils/dates.py."}])
    out = []

    def mutate(messages):  # the caller edits every dict it got, nested ones too
        for m in messages:
            for k, v in list(m.items()):
                if isinstance(v, list):
                    for item in v:
                        if isinstance(item, dict):
                            item["MUT"] = 1
                            for vv in list(item.values()):
                                if isinstance(vv, dict):
                                    vv["MUT"] = 2
                    v.append("MUT")
                elif isinstance(v, dict):
                    v["MUT"] = 3
            m["content"] = "MUTATED"
            m["new"] = [1]

    def keep(b):
        r = b.record
        out.append(json.dumps([r.mode, b.messages, r.model_dump(mode="json"), sorted(r.model_fields_set),
                               sorted(r.budget_breakdown.model_fields_set) if r.budget_breakdown else None,
                               [type(getattr(r, f)).__name__ for f in type(r).model_fields]],
                              sort_keys=True, default=str))
        if MUTATE:
            mutate(b.messages)

    for n in range(60):
        if n == 20:
            memory.set_goal(subtask="run the parser tests")
        size = 600 if n % 9 == 4 else rng.randint(5, 60)
        new = step(n, size)
        if n % 11 == 10:  # a chain held back, then appended whole
            memory.extend(new[:2])
            keep(memory.build_context())
            new = new[2:]
        memory.extend(new)
        keep(memory.build_context())
    print(json.dumps({"builds": out, "store": [m.to_openai() for m in memory.store.messages]}, sort_keys=True))
''')


@pytest.fixture(scope="module")
def old_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The package as it was before the commit (``git archive``), with :data:`FIXES` applied,
    to compare outputs with."""
    if shutil.which("git") is None:
        pytest.skip("git not available")
    try:
        data = subprocess.run(["git", "-C", str(REPO), "archive", OLD, "relevance_memory"], check=True,
                              capture_output=True).stdout
    except subprocess.CalledProcessError:
        pytest.skip(f"{OLD} not in this repository")
    root = tmp_path_factory.mktemp("old35")
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(root, filter="data")
    for name, before, after in FIXES:
        source = (root / name).read_text(encoding="utf-8")
        assert source.count(before) == 1, f"{name} of {OLD} no longer reads {before!r}"
        (root / name).write_text(source.replace(before, after), encoding="utf-8")
    return root


def _run(scenario: Path, pythonpath: Path, *args: str) -> Any:
    done = subprocess.run([sys.executable, str(scenario), *args], capture_output=True, text=True,
                          env={"PYTHONPATH": str(pythonpath), "PATH": "/usr/bin:/bin"}, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


@pytest.mark.parametrize("subtask_at_end", ["0", "1"])
def test_builds_equal_the_old_codes_and_caller_edits_change_nothing(
    old_package: Path, tmp_path: Path, subtask_at_end: str
) -> None:
    """Shortcuts 1 and 2, differential: 60 steps (appends, held-back chains, excerpts of large
    outputs, multimodal content, extra nested keys, a subtask change, notes at the end): every
    build's messages, record (JSON, fields set, field types) are those of the code before the
    commit; a caller that edits every returned dict (nested ones too) changes no later build and
    not the store."""
    scenario = tmp_path / "scenario.py"
    scenario.write_text(_SCENARIO)
    new_plain = _run(scenario, REPO, "plain", subtask_at_end)
    old_plain = _run(scenario, old_package, "plain", subtask_at_end)
    new_mutated = _run(scenario, REPO, "mutate", subtask_at_end)
    modes = [json.loads(b)[0] for b in new_plain["builds"]]
    assert modes.count("appended") > 40 and "compacted" in modes
    assert any("excerpt" in b for b in new_plain["builds"])
    for k, (a, b) in enumerate(zip(new_plain["builds"], old_plain["builds"], strict=True)):
        assert a == b, f"build {k} differs from the old code's"
    assert new_plain["store"] == old_plain["store"]
    assert new_mutated == new_plain


# --------------------------------------------------------------------------- 1: _made_like
def _records(clock: Any, **kwargs: Any) -> list[Any]:
    memory = RelevanceMemoryManager(max_input_tokens=8000, keep_recent=2, clock=clock, on_invalid="repair", **kwargs)
    memory.extend([*OPENING, *(m for n in range(4) for m in step(n, 80))])
    records = [memory.build_context().record]
    for n in range(4, 14):
        memory.extend(step(n, 80))
        records.append(memory.build_context().record)
    return records


def _validated_records(monkeypatch: pytest.MonkeyPatch, clock: Any, **kwargs: Any) -> list[Any]:
    with monkeypatch.context() as patched:  # every record validated from its fields, as before the commit
        patched.setattr(append_module, "_made_like", lambda cls, **fields: cls(**fields), raising=False)
        return _records(clock, **kwargs)


class _FloatPolicy(CachePolicy):
    """A cache policy whose ``cacheable`` gives a whole number as a float (e.g. computed from a price)."""

    def cacheable(self, prefix_tokens: int) -> int:
        return float(super().cacheable(prefix_tokens))  # type: ignore[return-value]


def test_an_appended_record_with_a_policy_giving_a_float_equals_the_validated_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """``cacheable_tokens`` comes from a seam the caller may replace (a ``CachePolicy``
    subclass): validation coerces ``1152.0`` to ``1152``. Failed on 804bc9a, where
    ``_made_like`` skipped validation whenever ``created_at`` was a datetime (the record held the
    float; ``to_json`` warned); a value of another type than validation gave is validated now."""
    fast = _records(_clock, cache_policy=_FloatPolicy())
    checked = _validated_records(monkeypatch, _clock, cache_policy=_FloatPolicy())
    appended = [(a, b) for a, b in zip(fast, checked, strict=True) if a.mode == "appended"]
    assert len(appended) >= 5 and any(b.cacheable_tokens for _, b in appended)
    for a, b in appended:
        assert type(a.cacheable_tokens) is type(b.cacheable_tokens) is int
        assert a.model_dump() == b.model_dump()


class _Encoding(str, enum.Enum):
    CL100K = "cl100k_base"


class _NamedCounter(TiktokenCounter):
    """A tokenizer whose ``name`` is a str enum (a str, but not exactly ``str``)."""

    def __init__(self) -> None:
        super().__init__("cl100k_base")
        self.name = _Encoding.CL100K


def test_an_appended_records_encoding_has_the_validated_type(monkeypatch: pytest.MonkeyPatch) -> None:
    """``encoding`` comes from the tokenizer seam: validation makes a ``str`` subclass (a str
    enum) a plain ``str``. Failed on 804bc9a (type only: the copy kept the enum member)."""
    fast = _records(_clock, tokenizer=_NamedCounter())
    checked = _validated_records(monkeypatch, _clock, tokenizer=_NamedCounter())
    for a, b in zip(fast, checked, strict=True):
        assert a.model_dump(mode="json") == b.model_dump(mode="json")
        assert a.model_dump() == b.model_dump()  # an str enum equals its value
        assert type(a.encoding) is type(b.encoding) is str, a.mode


class _Stamp(datetime):
    """A datetime subclass (what freezegun's or pendulum's clocks return)."""


@pytest.mark.parametrize("clock", [
    _clock,
    lambda: datetime(2026, 1, 1),  # naive
    lambda: _Stamp(2026, 1, 1, tzinfo=timezone.utc),
    lambda: None,
    lambda: "2026-01-01T00:00:00+00:00",
    lambda: 1767225600,  # seconds since the epoch: pydantic's coercion
])
def test_appended_records_equal_the_validated_ones_for_any_clock(monkeypatch: pytest.MonkeyPatch, clock: Any) -> None:
    fast = _records(clock)
    checked = _validated_records(monkeypatch, clock)
    assert sum(r.mode == "appended" for r in fast) >= 5
    for a, b in zip(fast, checked, strict=True):
        assert a.model_dump() == b.model_dump()
        assert type(a.created_at) is type(b.created_at)
        assert a.model_fields_set == b.model_fields_set
        assert a.budget_breakdown.model_fields_set == b.budget_breakdown.model_fields_set  # type: ignore[union-attr]


def test_the_first_appended_record_owns_what_it_shares_with_the_template() -> None:
    """The first append of a process returns ``template.model_copy()`` (shallow): editing that
    record's lists and nested models must not change any later record."""
    getattr(append_module, "_TEMPLATES", {}).clear()
    records = _records(_clock)
    first = next(r for r in records if r.mode == "appended")
    later_before = [r.model_dump(mode="json") for r in records if r is not first]
    first.warnings.append("mine")
    first.appended_ids.append("mine")
    first.summaries.clear()
    first.usage.llm_calls = 99
    assert first.budget_breakdown is not None
    first.budget_breakdown.spent["mine"] = 1
    first.budget_breakdown.lines.clear()
    assert [r.model_dump(mode="json") for r in records if r is not first] == later_before
    memory = RelevanceMemoryManager(max_input_tokens=8000, keep_recent=2, clock=_clock)
    memory.extend([*OPENING, *(m for n in range(4) for m in step(n, 80))])
    memory.build_context()
    memory.extend(step(4, 80))
    again = memory.build_context().record
    assert again.mode == "appended"
    assert "mine" not in again.warnings and "mine" not in again.appended_ids and again.usage.llm_calls == 0
    assert again.budget_breakdown is not None and "mine" not in again.budget_breakdown.spent
    assert again.budget_breakdown.lines


# --------------------------------------------------------------------------- 2: caller copies
def test_editing_an_appended_builds_messages_changes_neither_the_memory_nor_later_builds() -> None:
    def run(edit: bool) -> tuple[list[str], list[Any]]:
        memory = RelevanceMemoryManager(max_input_tokens=5000, keep_recent=2, clock=_clock)
        memory.extend([*OPENING, *(m for n in range(3) for m in step(n))])
        sent = []
        for n in range(3, 25):
            new = step(n, 500 if n % 6 == 0 else 30)  # an oversized output: an excerpt appended
            new[1]["content"] = [{"type": "text", "text": new[1]["content"]}]
            new[1]["meta"] = {"list": [1, {"deep": "x"}]}
            memory.extend(new)
            built = memory.build_context()
            sent.append(json.dumps(built.messages, sort_keys=True))
            if edit:
                for m in built.messages:
                    for c in m.get("tool_calls") or []:
                        c["function"]["arguments"] = "{}"
                        c["id"] = "x"
                    if isinstance(m.get("content"), list):
                        m["content"][0]["text"] = "EDITED"
                        m["content"].append({"type": "text", "text": "more"})
                    if "meta" in m:
                        m["meta"]["list"][1]["deep"] = "EDITED"
                    m["role"] = "user"
        return sent, [m.to_openai() for m in memory.store.messages]

    plain, edited = run(False), run(True)
    assert plain == edited


# --------------------------------------------------------------------------- 3: snapshot views
def _linked_history(start: int, stop: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for k in range(start, stop):
        out += [
            {"role": "assistant", "content": "", "tool_calls": [call(f"c{k}", "cat /testbed/app/util.py")]},
            {"role": "tool", "tool_call_id": f"c{k}", "content": f"def f(x):\n    return x + {k}\n"},
            {"role": "user", "content": f"Actually I live in {['Porto', 'Faro', 'Braga'][k % 3]} now (see m{2 * k})."},
        ]
    return out


def _views(snapshot: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in ("terms", "idents", "episodes"):
        out[name] = list(getattr(snapshot, name))
    for name in ("referenced_by", "superseded_by", "supersedes"):
        view = getattr(snapshot, name)
        out[name] = {k: (list(v) if not hasattr(v, "newer") else v) for k, v in dict(view).items()}
        out[name + ".len"] = len(view)
        out[name + ".bool"] = bool(view)
    out["messages"] = [m.id for m in snapshot]
    out["edited"] = snapshot.edited_views() if hasattr(snapshot, "edited_views") else None
    return out


def test_snapshot_views_read_first_from_another_thread_while_the_store_grows() -> None:
    from relevance_memory.store._snapshot import StoreSnapshot

    base = [{"role": "user", "content": "Book a flight; I live in Lisbon."}, *_linked_history(0, 4)]
    held = RelevanceMemoryManager(max_input_tokens=4000)
    held.extend(base)
    expected = _views(StoreSnapshot(held.store))
    grown = RelevanceMemoryManager(max_input_tokens=4000)
    grown.extend(base)
    snapshots = [StoreSnapshot(grown.store) for _ in range(4)]
    stop = threading.Event()

    def writer() -> None:
        k = 4
        while not stop.is_set() and k < 200:
            grown.extend(_linked_history(k, k + 1))
            k += 1

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        results: list[dict[str, Any]] = []
        readers = [threading.Thread(target=lambda s=s: results.append(_views(s))) for s in [*snapshots, *snapshots]]
        deadline = time.monotonic() + 10
        while len(grown.store) < len(held.store) + 30 and time.monotonic() < deadline:
            time.sleep(0.001)  # the views are first read after the store grew (and while it grows)
        assert len(grown.store) >= len(held.store) + 30
        for r in readers:
            r.start()
        for r in readers:
            r.join()
    finally:
        stop.set()
        thread.join()
    assert len(grown.store) > len(held.store) and len(results) == 2 * len(snapshots)
    for got in results:
        assert got == expected


def test_snapshot_indexing_is_the_prefix_views() -> None:
    from relevance_memory.store._snapshot import StoreSnapshot

    memory = RelevanceMemoryManager()
    memory.extend([{"role": "user", "content": "hi"}, *_linked_history(0, 2)])
    snapshot = StoreSnapshot(memory.store)
    n = len(snapshot)
    memory.extend(_linked_history(2, 4))
    for index in [*range(-n - 2, n + 3), True, False]:
        try:
            want: Any = snapshot.messages[index]
        except IndexError:
            with pytest.raises(IndexError):
                snapshot[index]
            continue
        assert snapshot[index] is want
    assert [m.id for m in snapshot[1:3]] == [m.id for m in snapshot.messages[1:3]]
    with pytest.raises(IndexError):
        snapshot[n]  # added after the snapshot: not in it


# --------------------------------------------------------------------------- 4: edited_views
_FILES = ["app/util.py", "/testbed/app/util.py", "util.py", "b/util.py", "README.md", "t.py", "/x/t.py"]


def _command(kind: int, path: str, version: int) -> str:
    return [
        f"cat {path}",
        f"sed -n '1,{version + 3}p' {path}",
        f"sed -i 's/a/{version}/' {path}",
        f"cat <<'EOF' > {path}\nx = {version}\nEOF",
        "python -m pytest -q",
        f"cat {path} && sed -i 's/b/{version}/' {path}",
    ][kind]


@settings(max_examples=150, deadline=None)
@given(
    st.integers(1, 4),
    st.lists(st.tuples(st.integers(0, 5), st.sampled_from(_FILES), st.integers(0, 2), st.booleans()),
             min_size=1, max_size=30),
)
def test_edited_views_kept_equal_those_made_again_with_evictions(max_keys: int, steps: list[Any]) -> None:
    """Shortcut 4 with ``max_keys`` 1..4 (every table evicts) and failed results (no view)."""
    from relevance_memory.store._supersede import SupersedeDetector, SupersedeItem

    detector = SupersedeDetector(max_keys=max_keys)
    for n, (kind, path, version, failed) in enumerate(steps):
        command = _command(kind, path, version)
        arguments = json.dumps({"command": command})
        text = ("Traceback (most recent call last):\nError: failed" if failed else f"<returncode>0</returncode>\nv{version}")
        for item in (
            SupersedeItem(id=f"a{n}", index=2 * n, step=n, role="assistant", text="", calls=(("bash", arguments),)),
            SupersedeItem(id=f"t{n}", index=2 * n + 1, step=n, role="tool", text=text,
                          content_hash=f"h{version}{failed}", call=("bash", arguments)),
        ):
            detector.observe(item)
            kept = detector.edited_views()
            detector._current = None
            assert kept == detector.edited_views()


# --------------------------------------------------------------------------- 5: telemetry
def _scorer_history(n: int = 20) -> list[dict[str, Any]]:
    return [*OPENING, *(m for k in range(n) for m in step(k, 60))]


@pytest.fixture
def proxy_tracer(monkeypatch: pytest.MonkeyPatch) -> Any:
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry import trace

    from relevance_memory import _telemetry as telemetry

    telemetry._tracer.cache_clear()
    assert isinstance(telemetry._tracer(), trace.ProxyTracer)  # no global provider in the test process
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", None)
    yield trace
    telemetry._tracer.cache_clear()


def _provider(monkeypatch: pytest.MonkeyPatch, trace: Any) -> Any:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", provider)  # as trace.set_tracer_provider(provider) would
    return exporter


def test_scorer_spans_follow_a_provider_set_between_builds(monkeypatch: pytest.MonkeyPatch, proxy_tracer: Any) -> None:
    from relevance_memory import _telemetry as telemetry
    from relevance_memory.testing import FixedScorer

    scorer = FixedScorer(2, scores={"m1": 5})
    assert telemetry.traced_scorer(scorer) is scorer
    memory = RelevanceMemoryManager(max_input_tokens=2500, keep_recent=2, scorer=scorer)
    memory.extend(_scorer_history())
    memory.build_context()
    if hasattr(telemetry, "_BUILD_TRACER"):
        assert telemetry._BUILD_TRACER.get() is telemetry._UNKNOWN  # reset after the build
    exporter = _provider(monkeypatch, proxy_tracer)
    memory.extend([m for k in range(21, 40) for m in step(k, 60)])
    assert memory.build_context().record.mode == "compacted"
    spans = exporter.get_finished_spans()
    builds = [s for s in spans if s.name == "search_memory"]
    scores = [s for s in spans if s.name.startswith("score ")]
    assert len(builds) == 1 and scores
    assert all(s.parent is not None and s.parent.span_id == builds[0].context.span_id for s in scores)
    if hasattr(telemetry, "_BUILD_TRACER"):
        assert telemetry._BUILD_TRACER.get() is telemetry._UNKNOWN


async def test_async_builds_trace_their_scorer_with_a_provider(monkeypatch: pytest.MonkeyPatch, proxy_tracer: Any) -> None:
    from relevance_memory.testing import ScriptedScorer

    exporter = _provider(monkeypatch, proxy_tracer)
    memory = RelevanceMemoryManager(max_input_tokens=2500, keep_recent=2, scorer=ScriptedScorer([], then=3))
    memory.extend(_scorer_history())
    await memory.abuild_context()
    spans = exporter.get_finished_spans()
    (build,) = [s for s in spans if s.name == "search_memory"]
    scores = [s for s in spans if s.name.startswith("score ")]
    assert scores and all(s.parent is not None and s.parent.span_id == build.context.span_id for s in scores)


def test_a_sync_build_inside_a_scorer_does_not_leak_its_tracer(monkeypatch: pytest.MonkeyPatch, proxy_tracer: Any) -> None:
    """A build of another memory run from inside a build (a scorer that builds) resets the
    context variable to the outer build's value, not to unknown."""
    from relevance_memory import _telemetry as telemetry
    from relevance_memory.testing import FixedScorer

    seen: list[Any] = []

    class Nested(FixedScorer):
        def score(self, goal: Any, items: Any, context: Any = None) -> Any:
            inner = RelevanceMemoryManager(max_input_tokens=2500)
            inner.extend(OPENING)
            before = telemetry._BUILD_TRACER.get()
            inner.build_context()
            seen.append((before, telemetry._BUILD_TRACER.get()))
            return super().score(goal, items, context)

    if not hasattr(telemetry, "_BUILD_TRACER"):
        pytest.skip("no _BUILD_TRACER before the commit")
    exporter = _provider(monkeypatch, proxy_tracer)
    memory = RelevanceMemoryManager(max_input_tokens=2500, keep_recent=2, scorer=Nested(2))
    memory.extend(_scorer_history())
    memory.build_context()
    assert seen and all(a is b and a is not telemetry._UNKNOWN for a, b in seen)
    assert [s for s in exporter.get_finished_spans() if s.name.startswith("score ")]


def _waits_in_build_lock(thread: threading.Thread) -> bool:
    """Whether ``thread`` is inside ``BuildLock.hold`` (waiting for the lock)."""
    frame = sys._current_frames().get(thread.ident)  # type: ignore[arg-type]
    while frame is not None:
        code = frame.f_code
        if code.co_filename.endswith("cycle.py") and code.co_name in ("hold", "__enter__"):
            return True
        frame = frame.f_back
    return False


def test_a_provider_set_while_a_build_waits_for_the_lock_traces_from_the_next_build(
    monkeypatch: pytest.MonkeyPatch, proxy_tracer: Any
) -> None:
    """The tracer is read once, when a build starts (``build_span``, before it waits for the
    lock): a provider set (e.g. by the app's start-up in another thread) while a build waits
    for another build's lock traces neither that build nor its scorer calls — before 804bc9a its
    scorer calls were traced as spans without a build parent — and traces the next build, its
    scorer calls as children of its span (review of 804bc9a; the module doc says so)."""
    from relevance_memory.testing import FixedScorer

    scorer = FixedScorer(2, scores={"m1": 5})
    memory = RelevanceMemoryManager(max_input_tokens=2500, keep_recent=2, scorer=scorer)
    memory.extend(_scorer_history())
    lock = memory._lock._lock
    lock.acquire()  # another build holds the lock
    errors: list[BaseException] = []

    def build() -> None:
        try:
            memory.build_context()
        except BaseException as exc:  # pragma: no cover
            errors.append(exc)

    thread = threading.Thread(target=build)
    thread.start()
    deadline = time.monotonic() + 30
    while not _waits_in_build_lock(thread) and time.monotonic() < deadline:
        time.sleep(0.005)
    assert _waits_in_build_lock(thread), "the build never waited for the lock"
    exporter = _provider(monkeypatch, proxy_tracer)
    lock.release()
    thread.join()
    assert not errors and scorer.calls
    assert exporter.get_finished_spans() == ()  # the waiting build started untraced: no orphan scorer span
    memory.extend([m for k in range(21, 40) for m in step(k, 60)])
    assert memory.build_context().record.mode == "compacted"
    spans = exporter.get_finished_spans()
    (build,) = [s for s in spans if s.name == "search_memory"]
    scores = [s for s in spans if s.name.startswith("score ")]
    assert scores and all(s.parent is not None and s.parent.span_id == build.context.span_id for s in scores)


# --------------------------------------------------------------------------- 6: BuildLock
def test_build_lock_threads_wait_and_an_error_releases() -> None:
    from relevance_memory.pipeline.cycle import BuildLock

    lock = BuildLock()
    order: list[str] = []
    inside = threading.Event()

    def first() -> None:
        with lock.hold():
            order.append("first in")
            inside.set()
            time.sleep(0.2)
            order.append("first out")

    def second() -> None:
        inside.wait()
        with lock.hold():
            order.append("second in")

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert order == ["first in", "first out", "second in"]
    with pytest.raises(KeyError), lock.hold():
        raise KeyError("x")
    assert not lock._lock.locked()
    with pytest.raises(GeneratorExit), lock.hold():  # a BaseException too
        raise GeneratorExit
    assert not lock._lock.locked()


async def test_build_lock_in_a_running_loop_raises_and_holds_nothing() -> None:
    from relevance_memory.pipeline.cycle import BuildLock

    lock = BuildLock()
    with lock.hold():  # free: taken even inside the loop
        assert lock._lock.locked()
    assert not lock._lock.locked()
    held = threading.Event()
    release = threading.Event()

    def other() -> None:
        with lock.hold():
            held.set()
            release.wait()

    thread = threading.Thread(target=other)
    thread.start()
    held.wait()
    try:
        with pytest.raises(RuntimeError, match="inside an event loop"), lock.hold():
            pytest.fail("entered")  # pragma: no cover
    finally:
        release.set()
        thread.join()
    assert not lock._lock.locked()
    async with lock.ahold():
        assert lock._lock.locked()
    assert not lock._lock.locked()


async def test_build_context_in_a_loop_while_an_async_build_holds_the_lock_raises() -> None:
    memory = RelevanceMemoryManager(max_input_tokens=3000, keep_recent=2)
    memory.extend([*OPENING, *step(0)])
    async with memory._lock.ahold():
        with pytest.raises(RuntimeError, match="await abuild_context"):
            memory.build_context()
    assert not memory._lock._lock.locked()
    assert memory.build_context().record is not None


# --------------------------------------------------------------------------- 7: pheromone cells
def _old_math() -> types.ModuleType:
    """The pheromone math module as it was before the commit (``_replace``), run against today's package."""
    try:
        source = subprocess.run(["git", "-C", str(REPO), "show", f"{OLD}:relevance_memory/pheromone/_math.py"],
                                check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip(f"{OLD} not available")
    module = types.ModuleType("relevance_memory.pheromone._old_math")
    module.__package__ = "relevance_memory.pheromone"
    exec(compile(source, "old_math.py", "exec"), module.__dict__)
    return module


_OLD_MATH: types.ModuleType | None = None


@settings(max_examples=300, deadline=None)
@given(
    kind=st.sampled_from(sorted(__import__("relevance_memory._config", fromlist=["x"]).PheromoneConfig().half_life_steps)),
    born=st.integers(0, 30), at=st.integers(0, 40), tick=st.integers(0, 60),
    strength=st.floats(0, 10, allow_nan=False), score=st.one_of(st.none(), st.integers(1, 5)),
    goal=st.one_of(st.none(), st.text(max_size=3)), earned=st.floats(0, 5, allow_nan=False),
    delta=st.one_of(st.none(), st.floats(0, 3, allow_nan=False)),
    limit=st.one_of(st.none(), st.floats(0, 3, allow_nan=False)),
)
def test_settle_and_reinforce_equal_the_replace_versions(
    kind: str, born: int, at: int, tick: int, strength: float, score: int | None, goal: str | None,
    earned: float, delta: float | None, limit: float | None,
) -> None:
    global _OLD_MATH
    from relevance_memory._config import PheromoneConfig
    from relevance_memory.pheromone import _math as new

    if _OLD_MATH is None:
        _OLD_MATH = _old_math()
    old = _OLD_MATH
    config = PheromoneConfig()
    cell = new.Cell(kind, born, strength, at, score, goal, earned, (goal or "", "s") if goal else None, earned / 2,
                    frozenset({"s"}) if goal else frozenset(), ("g", "s") if score else None, score)
    got, want = new.settle(cell, tick, config), old.settle(old.Cell(*cell), tick, config)
    assert type(got) is new.Cell and tuple(got) == tuple(want)
    got_r, want_r = new.reinforce(cell, tick, config, delta, limit), old.reinforce(old.Cell(*cell), tick, config, delta, limit)
    assert type(got_r[0]) is new.Cell and tuple(got_r[0]) == tuple(want_r[0]) and got_r[1] == want_r[1]


# --------------------------------------------------------------------------- typical_step (same commit)
@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 900)), min_size=0, max_size=40),
       st.integers(800, 20000), st.sampled_from([0.05, 0.25, 0.5]))
def test_typical_step_equals_the_old_loop(steps: list[tuple[int, int]], budget: int, share: float) -> None:
    from relevance_memory.pipeline.append import TYPICAL_STEPS, typical_step
    from relevance_memory.pipeline.fidelity import cap_of, entry_caps

    memory = RelevanceMemoryManager(on_invalid="repair")
    history: list[dict[str, Any]] = [{"role": "system", "content": "rules"}]
    for n, (kind, size) in enumerate(steps):
        if kind == 0:
            history.append({"role": "user", "content": "word " * size or "x"})
        elif kind == 1:
            history.append({"role": "assistant", "content": "word " * size or "x"})
        else:
            history += step(n, size)
            if kind == 3:
                history.append({"role": "assistant", "content": "done " * (size // 3 + 1)})
    memory.extend(history)

    def old(store: Any) -> int:  # the loop before the commit
        totals: dict[int, int] = {}
        caps = entry_caps(budget, share)
        for message in reversed(store.messages):
            s = message.step
            if s < 0:
                continue
            if s not in totals and len(totals) == TYPICAL_STEPS:
                break
            totals[s] = totals.get(s, 0) + min(message.token_count, cap_of(message, caps))
        return sum(totals.values()) // len(totals) if totals else 0

    got = typical_step(memory.store, budget, share)
    assert got == old(memory.store) and type(got) is int

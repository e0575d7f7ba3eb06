"""Issue 24: the shortcuts that keep a compaction from touching every message give what the
full passes give, build for build, on a real agent run with scores, subtasks and forgetting."""

from __future__ import annotations

import json
from dataclasses import replace
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracles import prefilter_by_every_chain

from relevance_memory import RelevanceMemoryManager, load_transcript
from relevance_memory._models import user_authored
from relevance_memory.pheromone._field import PheromoneField
from relevance_memory.pipeline import partition as partition_module
from relevance_memory.pipeline import summarise as sm

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "django__django-15280.json"


def seen(built: Any) -> list[str]:
    """What a build gave: its context and its record (the clock and ids aside)."""
    return [json.dumps(built.messages, sort_keys=True),
            built.record.model_dump_json(exclude={"created_at", "build_id", "base_build_id", "latency_ms"})]


def run(**config: Any) -> list[str]:
    """Builds over the django run, in steps, with subtask changes: each build's context and record."""
    messages = load_transcript(FIXTURE).messages
    memory = RelevanceMemoryManager(max_input_tokens=3000, keep_recent=2, prefilter=True, prefilter_top_n=12, **config)
    out: list[str] = []
    for n, end in enumerate(range(40, len(messages) + 1, 26)):
        memory.extend(messages[len(memory.messages):end])
        if n % 2:
            memory.set_goal(subtask=f"step {n}: check the migration and run the tests again")
        out += seen(memory.build_context(compact=n % 3 == 0))
    return out


def test_notable_cells_give_the_prefilter_and_forgetting_of_the_full_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    fast = run()
    assert any('"mode":"compacted"' in r for r in fast) and any("prefiltered out" in r for r in fast)
    monkeypatch.setattr(PheromoneField, "notable_ids", lambda self: None)  # every cell read, as before issue 24
    assert run() == fast


def test_notable_cells_are_the_scored_and_the_strong() -> None:
    memory = RelevanceMemoryManager(max_input_tokens=3000, keep_recent=2, prefilter=True, prefilter_top_n=12)
    memory.extend(load_transcript(FIXTURE).messages[:120])
    field = memory.pheromone
    assert isinstance(field, PheromoneField)
    before = set(field.notable_ids() or ())
    assert before == {mid for mid in (m.id for m in memory.messages)
                      if (c := field.cell(mid)) is not None and c.strength >= field.config.prefilter_pass}
    memory.build_context()
    after = field.notable_ids() or set()
    scored = {mid for mid in (m.id for m in memory.messages) if (c := field.cell(mid)) and c.latest_score is not None}
    assert scored and scored <= after and before <= after


def test_excerpted_chains_are_recounted_as_a_second_grouping_would(monkeypatch: pytest.MonkeyPatch) -> None:
    fast = run(excerpt_share=1 / 64)
    assert any('"fidelity":"excerpt"' in r for r in fast)

    def regroup(chains: Any, roots: Any, renditions: Any, messages: Any, recounted: Any = None) -> Any:
        skip = {i for c in chains.values() for i in c.members} ^ set(range(len(messages)))
        return partition_module.group_chains(messages, roots, skip, {i: r.tokens for i, r in renditions.items()})

    monkeypatch.setattr(partition_module, "_with_renditions", regroup)
    assert run(excerpt_share=1 / 64) == fast


def chat_run(top_n: int = 10) -> list[str]:
    """A 120-turn chat built every 10 turns under changing subtasks, filler scored 1: forgetting
    and the memory's always-pass set at work."""
    from relevance_memory.testing import FunctionScorer

    scorer = FunctionScorer(lambda item, goal: 5 if "trip" in (item.text or "") else (3 if "museum" in (item.text or "") else 1))
    memory = RelevanceMemoryManager(max_input_tokens=900, keep_recent=2, prefilter=True, prefilter_top_n=top_n, scorer=scorer)
    memory.set_goal(final="Plan the Lisbon trip within the budget the user gave")
    out: list[str] = []
    for turn in range(120):
        text = ("I want the trip to stay under 900 euros" if turn % 17 == 0 else
                "Which museum opens on Mondays?" if turn % 11 == 0 else f"Some small talk about the weather, turn {turn}")
        memory.extend([{"role": "user", "content": text}, {"role": "assistant", "content": f"Noted ({turn})."}])
        if turn % 10 == 9:
            memory.set_goal(subtask=f"answer turn {turn}")
            out += seen(memory.build_context(compact=True))
    return out


def test_a_chat_with_forgetting_builds_as_the_full_pass_would(monkeypatch: pytest.MonkeyPatch) -> None:
    fast = chat_run()
    assert any("forgotten: strength" in r for r in fast) and any("prefiltered out" in r for r in fast)
    monkeypatch.setattr(PheromoneField, "notable_ids", lambda self: None)
    assert chat_run() == fast


def test_the_chains_kept_from_the_admitted_ones_are_those_read_against_every_candidate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The candidates the prefilter keeps, read from the few roots the ranking admits (ascending
    roots) less the forgotten ones, are those found by reading every candidate against the
    skipped ones — also when a forgotten chain ranks high enough to be admitted (top 40)."""
    from relevance_memory.pipeline import prefilter as prefilter_module

    admitted_and_forgotten: list[int] = []
    ranked = prefilter_module._bm25_ranking

    def watched(state: Any, seams: Any) -> Any:
        out = ranked(state, seams)
        if out is not None:
            forgotten = prefilter_module._forgotten(state, seams)
            admitted_and_forgotten.extend(r for r in out[0].admitted if r in forgotten)
        return out

    monkeypatch.setattr(prefilter_module, "_bm25_ranking", watched)
    fast = chat_run(40)
    assert admitted_and_forgotten  # the case the shortcut must get right
    monkeypatch.setattr(prefilter_module.ChainLayout, "ascending", lambda self: False)
    assert chat_run(40) == fast


def test_the_chain_index_builds_as_grouping_every_message_would(monkeypatch: pytest.MonkeyPatch) -> None:
    """The memory's chain index (grown build by build) gives the contexts and records that
    grouping the whole history in every build gave (issue 24), excerpts included."""
    fast = run(excerpt_share=1 / 64)
    assert any('"fidelity":"excerpt"' in r for r in fast)
    split = partition_module.split_history

    def every_message(*args: Any, grouped: Any = None, **kwargs: Any) -> Any:
        return split(*args, **kwargs)  # no index: group every message, ask every member

    monkeypatch.setattr(partition_module, "split_history", every_message)
    assert run(excerpt_share=1 / 64) == fast


def test_the_chain_index_follows_merges_exclusions_and_pending_calls() -> None:
    """Grown message by message — a pinned prompt, trace chains that later merge, an orphan
    tool result, a call still waiting for its result — the index and its skip view equal a
    grouping of the whole store at every length."""
    from relevance_memory.pipeline._state import ChainIndex
    from relevance_memory.pipeline.partition import excluded_messages
    from relevance_memory.store._snapshot import StoreSnapshot

    memory = RelevanceMemoryManager(max_input_tokens=3000, on_invalid="repair")
    index = ChainIndex()
    adds: list[tuple[dict[str, Any], dict[str, Any]]] = [
        ({"role": "system", "content": "You are a coding agent."}, {}),
        ({"role": "user", "content": "Fix the parser; keep the API."}, {"trace_id": "a"}),
        ({"role": "assistant", "content": "Plan A."}, {"trace_id": "b"}),
        ({"role": "tool", "content": "orphan", "tool_call_id": "nobody"}, {}),
        ({"role": "assistant", "content": None,
          "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]}, {"trace_id": "a"}),
        ({"role": "tool", "content": "a.py b.py", "tool_call_id": "c1"}, {"trace_id": "b"}),  # merges a and b
        ({"role": "user", "content": "And the tests."}, {}),
        ({"role": "assistant", "content": None,
          "tool_calls": [{"id": "c2", "type": "function", "function": {"name": "cat", "arguments": "{}"}}]}, {}),
    ]
    merges = []
    for message, meta in adds:
        memory.add(message, **meta)
        store = StoreSnapshot(memory.store)
        index.update(store)
        merges.append(store.chain_merges)
        messages = list(store.messages)
        roots = [store.chain_root(i) for i in range(len(store))]
        assert list(index.roots) == roots
        assert index.chains == partition_module.group_chains(messages, roots)
        excluded = set(excluded_messages(store, "repair"))
        for skip in (excluded, excluded | {0}, set(range(len(store)))):
            assert index.without(skip, messages) in (None, partition_module.group_chains(messages, roots, skip))
        assert index.without(excluded | {0}, messages) == partition_module.group_chains(messages, roots, excluded | {0})
        assert index.over_entry_cap == [m.index for m in messages if m.token_count > 256]
    assert merges[-1] == 1 and merges[4] == 0  # the tool result of trace b joined chain a: one merge
    assert 7 in set(excluded_messages(StoreSnapshot(memory.store), "repair"))  # the waiting call is skipped


def test_a_records_user_decisions_are_its_decisions_about_what_users_wrote() -> None:
    """A compaction reads only the user's messages' decisions (from the chain index's user-role
    messages); they equal those of the whole per-message list, also when asked after later builds."""
    from relevance_memory._models import user_authored

    memory = RelevanceMemoryManager(max_input_tokens=3000, keep_recent=2)
    messages = load_transcript(FIXTURE).messages
    memory.extend(messages[:60])
    memory.add({"role": "user", "content": "Also keep the migration reversible."})
    first = memory.build_context(compact=True).record
    early = first.user_decisions()  # before the per-message list is built
    memory.extend(messages[60:90])
    memory.build_context(compact=True)
    later = first.user_decisions()  # after the index grew past this build's history
    whole = [d for d in first.messages if user_authored(d.role, d.msg_type)]
    assert len(whole) >= 2 and [d.model_dump() for d in early] == [d.model_dump() for d in whole]
    assert [d.model_dump() for d in later] == [d.model_dump() for d in whole]
def summarise_archive_by_every_message(
    seams: Any, part: Any, scores: Any, kept_roots: Any, cap: int, repeats: Any = None, carried: Any = (),
) -> tuple[Any, set[int]]:
    """The archive summarised as before issue 24 item 3: every message walked, each root looked up."""
    store, config = seams.store, seams.config
    archived_ids = {
        m.id for m in store.messages
        if m.index not in part.excluded and m.index not in part.pinned and not (repeats and m.index in repeats)
        and store.chain_root(m.index) not in kept_roots
    }
    newest: dict[str, Any] = {}  # one walk per supersede chain in this build
    items: dict[int, Any] = {}
    reused = [s for s in carried if s.level > 0 and set(s.covered_ids) <= archived_ids and sm._marks_hold(seams, s, newest)]
    already = {i for s in reused for i in s.covered_ids}
    runs: list[list[Any]] = [[]]
    held: set[int] = set()
    for message in store.messages:
        i = message.index
        if i in part.excluded or i in part.pinned or (repeats and i in repeats):
            continue
        if store.chain_root(i) in kept_roots or message.id in already:
            if runs[-1]:
                runs.append([])
            continue
        score = scores.get(i)
        if (
            user_authored(message.role, message.msg_type.value) and score is not None
            and score.score >= config.core_score
            and message.id not in store.superseded_by  # archived on purpose: a newer value replaces it
        ):
            held.add(i)
        items[i] = sm._item(seams, message, newest)
        runs[-1].append(items[i])
    def everything() -> list[list[Any]]:
        runs_of_all: list[list[Any]] = [[]]
        for message in store.messages:
            if message.id not in archived_ids:
                if runs_of_all[-1]:
                    runs_of_all.append([])
                continue
            runs_of_all[-1].append(items.get(message.index) or sm._item(seams, message, newest))
        return runs_of_all

    pyramid = sm._pyramid(seams, runs, reused, carried, everything, cap)
    sm._held_warnings(store, held, pyramid, config.core_score)
    return pyramid, held


def full_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 24 item 3's shortcuts swapped for the passes they replace: the archive summarised by
    walking every message and looking up its chain root (:func:`summarise_archive_by_every_message`),
    each archived message made into an item through ``_item`` with its supersede fields made again,
    every summary read from its first item (no memoised fold), the chains grouped from scratch, the BM25 scores of every chunk computed for every query,
    the prefilter's chain ranking in Python, every candidate root checked against the chain
    index one by one, and the first message left out read from every chain not kept."""
    from relevance_memory.pipeline import _bm25
    from relevance_memory.pipeline import assemble as assemble_module
    from relevance_memory.pipeline import prefilter as prefilter_module
    from relevance_memory.pipeline import summarise as summarise_module
    from relevance_memory.summary import _summary as summary_module
    from relevance_memory.summary._pyramid import SummaryItems

    monkeypatch.setattr(summarise_module, "summarise_archive", summarise_archive_by_every_message)
    monkeypatch.setattr(SummaryItems, "marked", lambda self, item, superseded, supersedes: replace(
        item, superseded=superseded, supersedes=supersedes))
    split = partition_module.split_history
    monkeypatch.setattr(partition_module, "split_history",
                        lambda *args, grouped=None, **kwargs: split(*args, **kwargs))  # every message grouped
    monkeypatch.setattr(_bm25, "QUERY_MEMO", 0)
    monkeypatch.setattr(summary_module, "FOLD_MEMO", 0)
    monkeypatch.setattr(prefilter_module, "prefilter_chains", prefilter_by_every_chain)
    monkeypatch.setattr(prefilter_module, "_all_roots", lambda ranked, roots: all(roots[r] == r for r in ranked))
    monkeypatch.setattr(assemble_module, "first_left_out", lambda part, kept, n: min(
        (c.members[0] for r, c in part.chains.items() if not set(c.members) & set(kept)), default=None))


def read_module_again(memory: RelevanceMemoryManager, step: int) -> None:
    """The agent reads one of four modules again (its newer view supersedes the older one)."""
    call = {"id": f"c{step}", "type": "function",
            "function": {"name": "read_file", "arguments": json.dumps({"path": f"src/mod{step % 4}.py"})}}
    memory.extend([
        {"role": "assistant", "content": f"Reading module {step % 4} again (step {step}).", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"c{step}",
         "content": f"def parse_{step % 4}(text):\n    return text.split(',')[{step % 7}]  # version {step // 4}\n"},
    ])


def supersede_run(budget: int = 1000) -> list[str]:
    """An agent reading the same files again and again (each newer view supersedes the older
    ones) and a user restating a fact, compacted every few steps under changing subtasks: the
    archive grows, carried summaries are reused and, when they no longer fit, summarised again."""
    memory = RelevanceMemoryManager(max_input_tokens=budget, keep_recent=2, prefilter=True, prefilter_top_n=20)
    memory.set_goal(final="Fix the failing parser test in src/parser.py where the user lives")
    out: list[str] = []
    for step in range(90):
        if step % 9 == 4:
            city = ("Lisbon", "Porto", "Faro", "Braga", "Evora")[step // 9 % 5]
            memory.extend([{"role": "user", "content": f"I live in {city} now, and the tests run there."}])
        read_module_again(memory, step)
        if step % 6 == 5:
            if step % 12 == 11:
                memory.set_goal(subtask=f"step {step}: check module {step % 4}")
            out += seen(memory.build_context(compact=True))
    return out


def excluded_run() -> list[str]:
    """The django run with messages left out of every context (``on_invalid="repair"``): a tool
    result no call asked for right after the task, another later, and a call never answered,
    compacted every other build: the archive and the first message left out skip them."""
    messages = load_transcript(FIXTURE).messages
    memory = RelevanceMemoryManager(max_input_tokens=3000, keep_recent=2, prefilter=True, prefilter_top_n=12,
                                    on_invalid="repair")
    memory.extend(messages[:2])
    memory.extend([{"role": "tool", "tool_call_id": "nobody", "content": "a result no call asked for"}])
    out: list[str] = []
    read = 2
    for n, end in enumerate(range(30, len(messages) + 1, 20)):
        memory.extend(messages[read:end])
        read = end
        if n == 2:
            memory.extend([{"role": "tool", "tool_call_id": "nobody-else", "content": "another stray result"}])
        out += seen(memory.build_context(compact=n % 2 == 0))
    memory.extend([{"role": "assistant", "content": "", "tool_calls": [
        {"id": "unanswered", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]}])
    out += seen(memory.build_context(compact=True))
    return out


@pytest.mark.parametrize("runner", [run, chat_run, supersede_run, lambda: supersede_run(700), excluded_run])
def test_the_archive_and_prefilter_shortcuts_build_as_the_full_passes_would(
    monkeypatch: pytest.MonkeyPatch, runner: Any
) -> None:
    fast = runner()
    full_passes(monkeypatch)
    assert runner() == fast


@pytest.mark.parametrize("budget", [1000, 700])
def test_the_supersede_run_carries_and_resummarises_its_archive(budget: int) -> None:
    built = supersede_run(budget)
    contexts = [json.loads(m) for m in built[::2]]
    summaries = [[x["content"] for x in c if x["content"].startswith("[relevance-memory: summary")] for c in contexts]
    assert sum(any("since step" in s for s in c) for c in summaries) >= 10  # superseded facts reach the summaries
    # a summary of the previous compaction carried byte for byte, and the archive summarised afresh
    assert any(set(a) & set(b) for a, b in pairwise(summaries))
    assert any(b and a and b[0] not in a and b[0].split(",")[1] != a[0].split(",")[1] for a, b in pairwise(summaries))
    assert any("L2 global" in s for c in summaries for s in c) == (budget == 700)


@pytest.mark.parametrize("budget", [1000, 700])
def test_a_resumed_summary_fold_summarises_as_a_fresh_read(monkeypatch: pytest.MonkeyPatch, budget: int) -> None:
    from relevance_memory.summary import _summary as summary_module

    monkeypatch.setattr(summary_module, "FOLD_MIN_ITEMS", 8)  # the run's archives are small
    resumed: list[int] = []
    read = summary_module.OfflineSummarizer._resume

    def counted(self: Any, items: Any) -> Any:
        fold = read(self, items)
        resumed.append(len(fold.items) if fold is not None else 0)
        return fold

    monkeypatch.setattr(summary_module.OfflineSummarizer, "_resume", counted)
    fast = supersede_run(budget)
    assert max(resumed) >= 40  # whole archives read again from a memoised prefix
    monkeypatch.setattr(summary_module, "FOLD_MEMO", 0)
    assert supersede_run(budget) == fast


def test_the_chain_index_grown_with_a_store_equals_a_grouping_from_scratch() -> None:
    """60 builds of a random store: new chains, members of older ones, merges of two older
    chains (their roots move; the store counts them) and random skips."""
    import random
    from types import SimpleNamespace

    from relevance_memory.pipeline._state import ChainIndex

    class Store:
        def __init__(self) -> None:
            self.messages: list[Any] = []
            self.roots: list[int] = []
            self.chain_merges = 0

        def __len__(self) -> int:
            return len(self.messages)

        def chain_root(self, index: int) -> int:
            return self.roots[index]

    rng = random.Random(7)
    store, index = Store(), ChainIndex()
    messages, roots = store.messages, store.roots
    compared = 0
    for build in range(60):
        for _ in range(rng.randrange(0, 6)):  # appended: a new chain, or a member of an older one
            i = len(messages)
            role = rng.choice(["assistant", "tool", "user"])
            calls = ("call",) if role == "assistant" and rng.random() < 0.5 else ()
            messages.append(SimpleNamespace(index=i, token_count=rng.randrange(1, 400), role=role, tool_calls=calls))
            roots.append(i if not i or rng.random() < 0.4 else roots[rng.randrange(max(0, i - 8), i)])
        if build % 17 == 16 and len(set(roots)) > 3:  # a message joining two older chains: their roots move
            a, b = sorted(rng.sample(sorted(set(roots)), 2))
            roots[:] = [a if r == b else r for r in roots]
            store.chain_merges += 1
        skip = {i for i in range(len(messages)) if rng.random() < 0.05} if build % 9 == 8 else set()
        index.update(store)  # type: ignore[arg-type]
        assert list(index.roots) == roots
        grown = index.without(skip, messages)
        scratch = partition_module.group_chains(messages, roots, skip)
        if grown is not None:
            compared += 1
            assert grown == scratch and list(grown) == list(scratch)
        assert index.over_entry_cap == [m.index for m in messages if m.token_count > 256]
        assert index.user_role == [m.index for m in messages if m.role == "user"]
        assert index.total_tokens == sum(m.token_count for m in messages)
        traffic: dict[int, int] = {}
        for m in messages:
            if m.role == "tool" or m.tool_calls:
                traffic[roots[m.index]] = traffic.get(roots[m.index], 0) + m.token_count
        assert {r: t for r, t in index.tool_tokens.items() if t} == traffic
    assert compared >= 50


@pytest.mark.parametrize("runner", [run, supersede_run, lambda: supersede_run(700)])
def test_linked_items_kept_across_builds_are_the_items_made_again(monkeypatch: pytest.MonkeyPatch, runner: Any) -> None:
    """A message a supersede link touches keeps its marked item from an earlier build while its
    own link and its chain's newest link hold (issue 24); made again in every build instead, the
    contexts and records are the same — with kept items used and some found stale."""
    from relevance_memory.summary._pyramid import SummaryItems

    verdicts: list[bool] = []
    still = sm._still_newest

    def counted(links: Any, kept: Any) -> bool:
        verdicts.append(still(links, kept))
        return verdicts[-1]

    monkeypatch.setattr(sm, "_still_newest", counted)
    # every archived item asked of linked_item (the items a re-summary keeps are tested apart)
    monkeypatch.setattr(sm._LinkIndex, "archive_items",
                        lambda self, store, archived_at, make: tuple([make(i) for i in archived_at.tolist()]))
    fast = runner()
    assert verdicts.count(True) >= 10 and verdicts.count(False) >= 1
    monkeypatch.setattr(SummaryItems, "linked", lambda self, message_id: None)
    assert runner() == fast


@pytest.mark.parametrize("runner", [run, lambda: supersede_run(700)])
def test_summary_cache_keys_reused_by_the_level2_summary_are_its_items_keys(
    monkeypatch: pytest.MonkeyPatch, runner: Any
) -> None:
    """build_pyramid hands each draft its run's key digest (issue 24: no tuple per archived
    message in a key): it is the digest of the items it is asked about, and the builds are
    those made with every key computed from the items."""
    from relevance_memory.summary._pyramid import SummaryCache, parts_digest

    given: list[int] = []
    made = SummaryCache.get_or_make

    def checked(self: Any, summarizer: Any, items: Any, *, level: int, max_tokens: int, digest: Any = None) -> Any:
        if digest is not None:
            assert digest == parts_digest(items)
            given.append(level)
        return made(self, summarizer, items, level=level, max_tokens=max_tokens, digest=digest)

    monkeypatch.setattr(SummaryCache, "get_or_make", checked)
    fast = runner()
    assert given.count(2) >= 1 and given.count(1) >= 1

    def from_items(self: Any, summarizer: Any, items: Any, *, level: int, max_tokens: int, digest: Any = None) -> Any:
        return made(self, summarizer, items, level=level, max_tokens=max_tokens)

    monkeypatch.setattr(SummaryCache, "get_or_make", from_items)
    assert runner() == fast


def late_restatement_run(budget: int = 1000, low: bool = False) -> list[str]:
    """:func:`supersede_run` with one fact stated early and restated only late: summaries that
    mark its first value are carried over several compactions before the restatement (``low``:
    every message scored 2, so the fact is archived, and summarised, before it is restated)."""
    from relevance_memory.testing import FunctionScorer

    scorer = FunctionScorer(lambda item, goal: 2) if low else None
    memory = RelevanceMemoryManager(max_input_tokens=budget, keep_recent=2, prefilter=True, prefilter_top_n=20,
                                    scorer=scorer)
    memory.set_goal(final="Fix the failing parser test in src/parser.py where the user lives")
    out: list[str] = []
    for step in range(80):
        if step in (2, 20, 61):
            city = {2: "Lisbon", 20: "Porto", 61: "Faro"}[step]
            memory.extend([{"role": "user", "content": f"I live in {city} now, and the tests run there."}])
        read_module_again(memory, step)
        if step % 5 == 4:
            out += seen(memory.build_context(compact=True))
    return out


@pytest.mark.parametrize("runner", [run, supersede_run, lambda: supersede_run(700), late_restatement_run,
                                    lambda: late_restatement_run(700, low=True)])
def test_the_link_index_grown_build_by_build_reads_as_the_links_do(monkeypatch: pytest.MonkeyPatch, runner: Any) -> None:
    """The summarise stage's link index (grown from the messages stored since the last build) and
    its carried-summary verdicts (kept while no fact link is added) give the builds that reading
    every link and checking every carried summary in each build gives (issue 24)."""
    checked: list[bool] = []
    hold = sm._marks_hold

    def counted(*args: Any, **kwargs: Any) -> bool:
        checked.append(hold(*args, **kwargs))
        assert checked[-1] == hold(*args[:4])  # only the fact-linked and marked ids checked: the same verdict
        return checked[-1]

    def every_link(seams: Any) -> Any:
        index = grown(seams)
        if index is not None:
            assert (index.older, index.newer) == sm._linked(seams)
            facts = {older for older, link in seams.store.superseded_by.items() if link.kind == "fact"}
            assert index.stamp[1] == len(facts) and index.facts == facts
        return index

    kept: list[bool] = []
    carried = sm._carried_holds

    def verdict_as_made_again(seams: Any, index: Any, summary: Any, newest: Any, linked: Any) -> bool:
        made = len(checked)
        verdict = carried(seams, index, summary, newest, linked)
        if len(checked) == made:  # a kept verdict: the one checking the marks again gives
            kept.append(verdict)
            assert verdict == hold(seams, summary, {}, None)
        return verdict

    grown = sm._link_index
    monkeypatch.setattr(sm, "_link_index", every_link)
    monkeypatch.setattr(sm, "_marks_hold", counted)
    monkeypatch.setattr(sm, "_carried_holds", verdict_as_made_again)
    fast = runner()
    calls = len(checked)
    monkeypatch.setattr(sm, "_link_index", lambda seams: None)
    checked.clear()
    assert runner() == fast
    assert len(checked) > calls  # verdicts were kept


def test_a_carried_summary_of_a_fact_restated_since_holds_no_more_with_the_fact_index() -> None:
    """_marks_hold given the fact-linked ids (the link index) looks only at those and the marked
    ones, and still finds a covered fact restated after the summary was made."""
    from relevance_memory.summary._pyramid import RenderedSummary

    memory = RelevanceMemoryManager(max_input_tokens=4000)
    memory.extend([{"role": "user", "content": "My budget is $500 for the whole trip."},
                   {"role": "assistant", "content": "Noted."}])
    first = memory.messages[0].id
    summary = RenderedSummary(1, {"role": "system", "content": "x"}, 1, (first, memory.messages[1].id), ())
    seams = memory._seams()
    index = sm._link_index(seams)
    assert index is not None and sm._carried_holds(seams, index, summary, {}, index.older)
    memory.extend([{"role": "user", "content": "Actually my budget is $700 for the whole trip."}])
    seams = memory._seams()
    index = sm._link_index(seams)
    assert index is not None and first in index.facts
    assert not sm._marks_hold(seams, summary, {}, index.older, index.facts)
    assert not sm._carried_holds(seams, index, summary, {}, index.older)  # the kept verdict is not used
    assert sm._marks_hold(seams, summary, {}, index.older, set()) is True  # without the fact id: not seen


def test_the_prefilter_reads_kept_across_builds_build_as_reading_every_message(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 24: the newest user message from the chain index's user-role indices (partition,
    select), the candidates' roots from its roots, the user instructions grown with the store and
    the goal's cosines kept and grown by the prefilter index build what reading every message
    in every build gives (the django run: its task is a user instruction, its goal text has
    vectors, and the prefilter leaves chains out)."""
    from relevance_memory.pipeline import _bm25
    from relevance_memory.pipeline import prefilter as prefilter_module
    from relevance_memory.pipeline import select as select_module

    calls = {"roots": 0, "cosines": 0}
    ranked_roots = prefilter_module._ranked_roots

    def counted(ranked: Any, seams: Any) -> Any:
        found = ranked_roots(ranked, seams)
        calls["roots"] += isinstance(found, prefilter_module._RootOf)
        return found

    goal_cosines = _bm25.PrefilterIndex.goal_cosines

    def grown(self: Any, vectors: Any, texts: Any, messages: Any) -> Any:
        calls["cosines"] += bool(self._cosines)
        return goal_cosines(self, vectors, texts, messages)

    monkeypatch.setattr(prefilter_module, "_ranked_roots", counted)
    monkeypatch.setattr(_bm25.PrefilterIndex, "goal_cosines", grown)
    fast = run()
    assert any("prefiltered out (BM25 + semantic rank" in r for r in fast)
    assert calls["roots"] and calls["cosines"]  # the shortcuts were taken
    monkeypatch.undo()

    def every_cosine(self: Any, vectors: Any, texts: Any, messages: Any) -> Any:
        keys = [m.content_hash for m in messages]
        best = None
        for text in texts:
            cos = vectors.similarity(vectors.embed_query(text), keys)
            best = cos if best is None else np.maximum(best, cos)
        return np.asarray(best, dtype=np.float64)

    monkeypatch.setattr(_bm25.PrefilterIndex, "goal_cosines", every_cosine)
    monkeypatch.setattr(_bm25.PrefilterIndex, "user_instructions",
                        lambda self, messages: [m.index for m in messages if m.msg_type == "user_instruction"])
    monkeypatch.setattr(prefilter_module, "_ranked_roots",
                        lambda ranked, seams: {i: r for r, members in ranked.items() for i in members})
    newest_user_text = select_module._newest_user_text
    monkeypatch.setattr(select_module, "_newest_user_text", lambda store, chains=None: newest_user_text(store))
    monkeypatch.setattr(partition_module.ChainIndex, "covers", lambda self, store: False)  # every read the full one
    from relevance_memory.pipeline._state import Prefiltered
    monkeypatch.setattr(prefilter_module, "Prefiltered",  # select reads the skipped chains against the candidates
                        lambda skipped, to_score, kept=None: Prefiltered(skipped=skipped, to_score=to_score))
    assert run() == fast


def test_newest_user_and_candidate_roots_read_from_the_chain_index_are_the_full_reads() -> None:
    """The chain index's answers equal reading every message: the newest user message (with
    exclusions, several user turns), its text, and each candidate member's root (members only)."""
    from relevance_memory.pipeline import prefilter as prefilter_module
    from relevance_memory.pipeline import select as select_module
    from relevance_memory.pipeline._state import ChainIndex
    from relevance_memory.store._snapshot import StoreSnapshot

    messages = load_transcript(FIXTURE).messages
    memory = RelevanceMemoryManager(max_input_tokens=3000, keep_recent=2)
    for n in range(0, len(messages), 30):
        memory.extend(messages[n:n + 30])
        memory.add({"role": "user", "content": f"Also keep the migration name stable ({n})."})
    store = StoreSnapshot(memory.store)
    index = ChainIndex().update(store)
    listed = store.messages[0:len(store)]
    users = [m.index for m in listed if m.role == "user"]
    assert len(users) > 3
    for excluded in ({}, {users[-1]: "x"}, {i: "x" for i in users[1:]}):
        assert partition_module.newest_user_index(index, excluded) == next(
            (m.index for m in reversed(listed) if m.role == "user" and m.index not in excluded), None)
    assert select_module._newest_user_text(store, index) == select_module._newest_user_text(store) != ""
    ranked = {r: c.members[:-1] or c.members for r, c in index.chains.items() if r % 3}
    seams = memory._seams()
    root_of = prefilter_module._ranked_roots(ranked, replace(seams, store=store, chains=index))
    assert isinstance(root_of, prefilter_module._RootOf)
    every = {i: r for r, members in ranked.items() for i in members}
    assert dict(root_of) == every and len(root_of) == len(every)
    assert all((i in root_of) == (i in every) for i in range(-1, len(store) + 2))
    whole = list(index.chains.values())
    cut = [replace(c, members=c.members[:-1]) if len(c.members) > 1 else c for c in whole]
    # build after build, the running sums kept for the chains read before (the same objects)
    for chains in (whole, cut, whole[::3], whole[:5], whole, whole[:3] + cut[3:], cut[:-2], whole):
        assert select_module.tool_traffic_share(store, chains, index) == select_module.tool_traffic_share(store, chains)
        assert isinstance(index.traffic, select_module._TrafficSums) and index.traffic.chains == chains
    assert 0.5 < select_module.tool_traffic_share(store, whole, index) < 1.0
    memory.build_context()  # scores deposited: cells of several kinds and strengths
    field = memory.pheromone
    assert isinstance(field, PheromoneField)
    ids = [m.id for m in memory.messages] + ["no-such-id"]
    now = field.cells_now()  # what the record reads a cell from, for every message id
    assert [now.get(i) for i in ids] == field.cells_of(ids) and field.cells_of(ids)[-1] is None
    assert any(c is not None and c.latest_score is not None for c in now.values())


def runs_by_every_archived_message(archived: list[int], kept: list[int], covered: set[int]) -> list[list[int]]:
    """The runs as the archive loop made them before it read only the fresh messages: every
    archived message walked, a kept one between and a covered one each ending a run."""
    runs: list[list[int]] = [[]]
    breaks = iter(kept)
    next_break = next(breaks, 10**9)
    for i in archived:
        while next_break < i:
            if runs[-1]:
                runs.append([])
            next_break = next(breaks, 10**9)
        if i in covered:
            if runs[-1]:
                runs.append([])
            continue
        runs[-1].append(i)
    return runs


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from("akn"), max_size=40), st.data())
def test_the_runs_of_the_fresh_messages_are_those_of_walking_every_archived_message(
    kinds: list[str], data: st.DataObject
) -> None:
    """:func:`fresh_runs` (only the archived messages no carried summary covers, found by
    position) gives the runs walking every archived message gives: kept and covered messages end
    a run, others (pinned, excluded, repeats) do not, and the empty runs fall where they did."""
    archived = [i for i, k in enumerate(kinds) if k == "a"]
    kept = [i for i, k in enumerate(kinds) if k == "k"]
    covered = set(data.draw(st.lists(st.sampled_from(archived), unique=True))) if archived else set()
    expected = runs_by_every_archived_message(archived, kept, covered)
    assert sm.fresh_runs(archived, kept, set(archived) - covered if covered else None) == expected
    assert sm.fresh_runs(archived, kept, set(archived) - covered) == expected


def test_a_chain_recounted_to_the_same_tokens_again_is_the_same_object() -> None:
    """The partition's recounted chains kept across builds: a chain recounted to the tokens it had
    is the object made before (what the prefilter's layout finds unchanged), a chain whose
    excerpt or members changed is made again with its new tokens."""
    from relevance_memory.pipeline._state import Chain
    from relevance_memory.pipeline.fidelity import Rendition

    messages = load_transcript(FIXTURE).messages[:6]
    memory = RelevanceMemoryManager(max_input_tokens=4000)
    memory.extend(messages)
    stored = memory.store.messages
    chain = Chain(2, (2, 3), stored[2].token_count + stored[3].token_count)
    chains, roots = {2: chain}, [0, 1, 2, 2, 4, 5]
    recounted: dict[int, Any] = {}
    cut = {3: Rendition(message={"role": "tool", "content": "…"}, tokens=9, fidelity="excerpt", original_tokens=50)}
    first = partition_module._with_renditions(chains, roots, cut, stored, recounted)[2]
    assert first.tokens == stored[2].token_count + 9 and first is not chain
    assert partition_module._with_renditions(chains, roots, cut, stored, recounted)[2] is first
    longer = {3: Rendition(message={"role": "tool", "content": "……"}, tokens=12, fidelity="excerpt", original_tokens=50)}
    again = partition_module._with_renditions(chains, roots, longer, stored, recounted)[2]
    assert again is not first and again.tokens == stored[2].token_count + 12
    grown = {2: Chain(2, (2, 3, 4), chain.tokens + stored[4].token_count)}
    assert partition_module._with_renditions(grown, roots, longer, stored, recounted)[2].members == (2, 3, 4)


@pytest.mark.parametrize("runner", [run, supersede_run, lambda: supersede_run(700), chat_run])
def test_the_indices_kept_for_a_summary_when_it_is_made_are_its_ids_looked_up(
    monkeypatch: pytest.MonkeyPatch, runner: Any
) -> None:
    """A carried summary's covered indices, kept when the summary was made (the messages it
    summarised, in order) or when first looked up, are its ids' indices in the store, and the
    builds are those that look every carried summary's ids up again."""
    first_asked: list[bool] = []  # per summary, at its first lookup: whether its indices were kept when made
    seen: list[Any] = []
    covered = sm._covered_indices

    def checked(seams: Any, index: Any, summary: Any) -> Any:
        if not any(summary is s for s in seen):
            seen.append(summary)
            first_asked.append(index is not None and index.covered.get(id(summary), (None,))[0] is summary)
        found = covered(seams, index, summary)
        assert found.tolist() == seams.store.indices(summary.covered_ids)
        return found

    monkeypatch.setattr(sm, "_covered_indices", checked)
    fast = runner()
    assert first_asked and all(first_asked)
    monkeypatch.setattr(sm, "_remember_made", lambda *args: None)
    assert runner() == fast


@pytest.mark.parametrize("runner", [supersede_run, lambda: supersede_run(700), late_restatement_run])
def test_archive_items_kept_from_the_last_resummary_are_the_items_made_again(
    monkeypatch: pytest.MonkeyPatch, runner: Any
) -> None:
    """A whole-archive re-summary keeps each archived message's item from the last one while no
    newer message superseded it or a message its chain leads to (issue 24: a million items read
    again, ~3 s): the items it gives are those made again, some kept and some made again because
    a restatement reached them; and the builds are those that make every item again."""
    kept_and_made: list[tuple[int, int]] = []
    archive_items = sm._LinkIndex.archive_items

    def checked(self: Any, store: Any, archived_at: Any, make: Any) -> Any:
        made: list[int] = []

        def counted(i: int) -> Any:
            made.append(i)
            return make(i)

        items = archive_items(self, store, archived_at, counted)
        assert list(items) == [make(i) for i in archived_at.tolist()]
        kept_and_made.append((len(items) - len(made), len(made)))
        return items

    monkeypatch.setattr(sm._LinkIndex, "archive_items", checked)
    fast = runner()
    assert sum(k for k, _ in kept_and_made[1:]) >= 20  # kept from an earlier re-summary
    assert sum(1 for k, m in kept_and_made[1:] if k and m) >= 1  # and some of those made again
    monkeypatch.setattr(sm._LinkIndex, "archive_items",
                        lambda self, store, archived_at, make: tuple([make(i) for i in archived_at.tolist()]))
    assert runner() == fast


def test_archive_items_marked_stale_are_those_a_new_link_reaches() -> None:
    """The items a re-summary makes again are the messages whose supersede marks a message
    stored since changed: the older value it supersedes and every one before it in its chain;
    a message no new link reaches keeps its item (the same object)."""
    memory = RelevanceMemoryManager(max_input_tokens=400, keep_recent=1)
    memory.set_goal(final="Plan the user's trip")
    for city in ("Lisbon", "Porto", "Faro"):
        memory.extend([{"role": "user", "content": f"I live in {city} now."},
                       {"role": "assistant", "content": f"Noted: {city}. Anything else?"}])
    memory.build_context(compact=True)
    seams = memory._seams()
    index = sm._link_index(seams)
    assert index is not None
    store = seams.store
    at = np.arange(len(store), dtype=np.int64)
    first = index.archive_items(store, at, lambda i: sm._item(seams, store[i], {}))
    assert [item.superseded != "" for item in first] == [True, False, True, False, False, False]
    memory.extend([{"role": "user", "content": "I live in Braga now."}])
    store = memory._seams().store
    made: list[int] = []

    def make(i: int) -> Any:
        made.append(i)
        return sm._item(memory._seams(), store[i], {})

    again = index.archive_items(store, np.arange(len(store), dtype=np.int64), make)
    assert made == [0, 2, 4, 6]  # the chain Lisbon → Porto → Faro → Braga, and the new message
    assert all(again[i] is first[i] for i in (1, 3, 5))
    assert all(again[i].superseded == "since step 6: braga (lives in)" for i in (0, 2, 4))


_IDS = st.lists(st.one_of(
    st.builds(lambda head, n: f"{head}{n}", st.sampled_from(["m", "x", "m0", ""]), st.integers(0, 12)),
    st.sampled_from(["abc", "q", "m"])), max_size=30)


@settings(max_examples=300, deadline=None)
@given(ids=_IDS, data=st.data())
def test_run_facts_resumed_from_a_prefix_are_the_facts_read_whole(ids: list[str], data: Any) -> None:
    """What build_pyramid reads of a run, resumed from the facts of any prefix of it (issue 24:
    a whole archive summarised again after it grew), equals reading the whole run: key parts,
    ids, id spans (a span open at the cut grows on), traffic, tokens and supersede marks."""
    from relevance_memory.summary._pyramid import SummaryItem, id_spans, parts_digest, run_facts

    items = [SummaryItem(id=i, role=data.draw(st.sampled_from(["user", "tool", "assistant"])), msg_type="x", text="",
                         content_hash=i, superseded=data.draw(st.sampled_from(["", "since step 3: x"])),
                         tokens=data.draw(st.integers(0, 9))) for i in ids]
    whole = run_facts(items)
    assert whole.spans == id_spans(ids) and whole.digest == parts_digest(items) and whole.ids == tuple(ids)
    assert whole.traffic == sum(item.role == "tool" for item in items)
    assert whole.marks == tuple((i.id, i.superseded) for i in items if i.superseded)
    cut = data.draw(st.integers(0, len(items)))
    assert run_facts(items, run_facts(items[:cut])) == whole


@pytest.mark.parametrize("budget", [1000, 700])
def test_run_facts_resumed_across_resummaries_build_as_reading_every_run(
    monkeypatch: pytest.MonkeyPatch, budget: int
) -> None:
    """The summary cache's run facts, resumed from the facts of a prefix kept from an earlier
    build, give the builds of reading every run whole — and some are resumed."""
    from relevance_memory.summary import _pyramid

    monkeypatch.setattr(_pyramid, "RUN_FACTS_MIN", 8)  # the run's archives are small
    resumed: list[int] = []
    read = _pyramid.run_facts

    def counted(items: Any, prefix: Any = None) -> Any:
        resumed.append(len(prefix.items) if prefix is not None else 0)
        return read(items, prefix)

    monkeypatch.setattr(_pyramid, "run_facts", counted)
    fast = supersede_run(budget)
    assert max(resumed) >= 40
    monkeypatch.setattr(_pyramid, "RUN_FACTS_KEPT", 0)
    assert supersede_run(budget) == fast


def test_records_read_after_later_builds_are_those_of_a_copy_of_the_cells(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forty builds' records, all kept and read only after the last build (more than the cell
    table keeps current: the oldest views are copied), give each message the strength and score
    of its own build — what a copy of the cells taken at each build gives."""

    def records() -> list[Any]:
        memory = RelevanceMemoryManager(max_input_tokens=600, keep_recent=1)
        memory.set_goal(final="Plan the user's trip")
        kept = []
        for i in range(40):
            memory.extend([{"role": "user", "content": f"I live in city{i % 7} now, step {i}."},
                           {"role": "assistant", "content": f"Noted city{i % 7}; checking trains for day {i}."}])
            kept.append(memory.build_context(compact=i % 3 == 0))
        return [[(d.id, d.strength, d.score, d.reason) for d in b.record.messages] for b in kept]

    viewed = records()
    assert len({str(r) for r in viewed}) > 30  # strengths move from build to build
    monkeypatch.setattr(PheromoneField, "cells_now", lambda self: dict(self._cells))
    assert records() == viewed


def test_a_chain_keeps_no_dict_of_its_own() -> None:
    """Issue 24: the chain index keeps a Chain for every trace chain of the history (half a
    million at a million messages); a slotted one holds its three fields, not a dict of them."""
    from relevance_memory.pipeline._state import Chain

    chain = Chain(4, (4, 5, 6), 120)
    assert not hasattr(chain, "__dict__") and Chain.__slots__ == ("root", "members", "tokens")
    assert replace(chain, tokens=130) == Chain(4, (4, 5, 6), 130)


def test_the_first_message_left_out_is_the_least_first_member_of_a_chain_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """Read from what is held (pinned, excluded, kept), it is what every chain not kept gives,
    at every compaction of a run with messages left out of the context."""
    from relevance_memory.pipeline import assemble as assemble_module

    fast, asked = assemble_module.first_left_out, []

    def both(part: Any, kept: Any, n: int) -> int | None:
        by_chains = min((c.members[0] for c in part.chains.values() if c.members[0] not in kept), default=None)
        found = fast(part, kept, n)
        asked.append((found, part.excluded))
        assert found == by_chains
        return found

    monkeypatch.setattr(assemble_module, "first_left_out", both)
    excluded_run()
    assert len(asked) >= 3 and any(found is not None and found - 1 in excluded for found, excluded in asked)


def _oversized(encoding: str) -> list[Any]:
    """The stored messages of the fixtures larger than 300 tokens (tool outputs, calls, the
    task statements), counted with ``encoding``."""
    from relevance_memory import MemoryConfig

    out: list[Any] = []
    for path in sorted(FIXTURE.parent.glob("*__*.json")):
        memory = RelevanceMemoryManager(config=MemoryConfig(encoding=encoding))
        memory.extend(load_transcript(path).messages)
        out += [m for m in memory.messages if m.token_count > 300]
    return out


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
def test_an_excerpt_s_tokens_counted_once_are_its_final_form_s(encoding: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 24: an excerpt is counted once (its draft, with a placeholder for the tokens left
    out) and the figure's own pieces are swapped in (``_filled_count``); every real excerpt at
    several caps must count what its final form counts, and be what counting it twice made."""
    from relevance_memory._tokenizer import TiktokenCounter
    from relevance_memory.pipeline import fidelity

    counter = TiktokenCounter(encoding)  # type: ignore[arg-type]
    messages = _oversized(encoding)
    assert len(messages) >= 40
    made = [fidelity.excerpt_message(m, cap, {"django"}, counter) for m in messages for cap in (60, 150, 300)]
    assert sum(r.fidelity == "excerpt" for r in made) == len(made)
    assert [r.tokens for r in made] == [counter.count_message(r.message) for r in made]
    monkeypatch.setattr(fidelity, "_filled_count", lambda *_: None)  # count the final form again
    assert [fidelity.excerpt_message(m, cap, {"django"}, counter) for m in messages for cap in (60, 150, 300)] == made


@settings(max_examples=300, deadline=None)
@given(left=st.integers(0, 10**12), detail=st.text(max_size=40), encoding=st.sampled_from(["o200k_base", "cl100k_base"]))
def test_the_figure_left_out_is_counted_as_its_own_pieces(left: int, detail: str, encoding: str) -> None:
    """The tokens the placeholder and the figure (any length, with its thousands commas) take
    in the marker line are their own pieces' count, whatever the detail before them says."""
    from relevance_memory._tokenizer import TiktokenCounter
    from relevance_memory.pipeline.fidelity import _LEFT, _filled_count

    counter = TiktokenCounter(encoding)  # type: ignore[arg-type]
    before, after = f"[relevance-memory: excerpt of m7 (tool): {detail} (about ", " of 12,345 tokens left out); the whole"
    draft = counter.count_text(before + _LEFT + after)
    assert _filled_count(counter, draft, left) == counter.count_text(f"{before}{left:,}{after}")


def test_an_excerpt_keeps_a_body_that_says_left_in_braces() -> None:
    """Only the marker's own placeholder is filled in: a tool output with ``{left}`` in it (a
    format string) kept it in the excerpt (it became the figure, before)."""
    from relevance_memory._tokenizer import TiktokenCounter
    from relevance_memory.pipeline.fidelity import excerpt_message

    memory = RelevanceMemoryManager()
    memory.extend([{"role": "user", "content": "Pad the table."}, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "cat pad.py"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "\n".join(
            ['print(f"{left}|{right}")  # pad.py line 1', *(f"row {i}: value {i * 3}" for i in range(400))])}])
    rendition = excerpt_message(memory.messages[-1], 120, set(), TiktokenCounter())
    assert rendition.fidelity == "excerpt"
    marker, _, body = rendition.message["content"].partition("\n")
    assert "{left}" not in marker and 'print(f"{left}|{right}")  # pad.py line 1' in body

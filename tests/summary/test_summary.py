"""Summary pyramid (SPEC §7), LLM summarizer through instructor, disk score cache (SPEC §6),
prefilter (SPEC §3 step 3)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracles import prefilter_by_every_chain
from scorers import WrappedOfflineScorer

from relevance_memory import SUMMARY_MARKER, RelevanceMemoryManager, RelevanceScore, check_context, load_transcript
from relevance_memory._tokenizer import TiktokenCounter
from relevance_memory.pipeline._bm25 import K1, B, CodedRows, _idf_table
from relevance_memory.pipeline.prefilter import ChunkedBM25, prefilter_chains
from relevance_memory.scoring._cache import DiskScoreCache
from relevance_memory.store._snapshot import StoreSnapshot, _CodedPrefix
from relevance_memory.store._validate import StringRows
from relevance_memory.summary._summary import (
    LLMSummarizer,
    OfflineSummarizer,
    SummaryCache,
    SummaryItem,
    build_pyramid,
    extract_values,
    render_summary,
)

COUNTER = TiktokenCounter("o200k_base")


def _items() -> list[SummaryItem]:
    return [
        SummaryItem("m1", "user", "user_chat", "Hi there. The deadline is 2026-11-20 and the budget is 50,000 EUR."),
        SummaryItem("m2", "assistant", "tool_call", "", tool_calls=(("read_file", '{"path": "src/app/main.py"}'),)),
        SummaryItem("m3", "tool", "tool_result", "def main():\n    return 41872", source="read_file"),
        SummaryItem("m4", "user", "user_chat", "Nice weather today."),
        SummaryItem("m5", "user", "user_instruction", "You must never push to main."),
    ]


def test_offline_summarizer_keeps_values_tools_and_constraints() -> None:
    draft = OfflineSummarizer().summarize(_items(), level=1, max_tokens=400)
    assert draft.covered_ids == ["m1", "m2", "m3", "m4", "m5"]
    for value in ("2026-11-20", "50,000 EUR", "41872"):  # a number keeps its unit
        assert value in draft.exact_values
    assert draft.tools_used == ['read_file({"path": "src/app/main.py"})']
    assert "never push to main" in draft.prose and "Nice weather" not in draft.prose
    assert "The user said" in draft.prose  # past tense framing


def test_extract_values_times_and_cjk() -> None:
    assert "下午 3 点" in extract_values("下午 3 点有个电话会议。")
    assert "ORD-1001" in extract_values("order ORD-1001 shipped at 10:30 pm")


def test_render_never_assistant() -> None:
    draft = OfflineSummarizer().summarize(_items(), level=1, max_tokens=400)
    with pytest.raises(ValueError):
        render_summary(draft, level=1, covered_ids=draft.covered_ids, role="assistant")
    message = render_summary(draft, level=1, covered_ids=draft.covered_ids, role="user")
    assert message["content"].startswith(SUMMARY_MARKER) and "Covered ids (restorable): m1–m5" in message["content"]


def test_pyramid_level2_merge_and_cache() -> None:
    runs = [_items()[:2], _items()[2:3], _items()[3:]]
    cache = SummaryCache()
    big = build_pyramid(runs, summarizer=OfflineSummarizer(), cache=cache, count=COUNTER.count_message,
                        role="system", cap=2000)
    assert [s.level for s in big.summaries] == [1, 1, 1]
    small = build_pyramid(runs, summarizer=OfflineSummarizer(), cache=cache, count=COUNTER.count_message,
                          role="system", cap=130)
    assert [s.level for s in small.summaries] == [2]
    assert small.tokens <= 130
    assert set(small.summaries[0].covered_ids) == {f"m{i}" for i in range(1, 6)}
    assert cache.hits >= 3  # level-1 drafts were reused
    none = build_pyramid(runs, summarizer=OfflineSummarizer(), cache=cache, count=COUNTER.count_message,
                         role="system", cap=5)
    assert none.summaries == [] and none.warnings


# ----------------------------------------------------------------------- LLM summarizer
def _openai_reply(arguments: dict[str, Any]) -> dict[str, Any]:
    """A recorded chat.completions response with one tool call (instructor TOOLS mode)."""
    return {
        "id": "chatcmpl-rec1", "object": "chat.completion", "created": 1764460000, "model": "gpt-4o-mini",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {
            "role": "assistant", "content": None,
            "tool_calls": [{"id": "call_sum1", "type": "function", "function": {
                "name": "SummaryDraft", "arguments": json.dumps(arguments)}}]}}],
        "usage": {"prompt_tokens": 210, "completion_tokens": 60, "total_tokens": 270},
    }


def _client(handler: Any) -> Any:
    import instructor
    from openai import OpenAI

    http = httpx.Client(transport=httpx.MockTransport(handler))
    return instructor.from_openai(OpenAI(api_key="sk-test", base_url="http://llm.test/v1", http_client=http))


def test_llm_summarizer_structured_reply() -> None:
    seen: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        return httpx.Response(200, json=_openai_reply({
            "prose": "The user set a deadline of 2026-11-20; the agent read src/app/main.py.",
            "exact_values": ["2026-11-20", "50,000 EUR", "41872"],
            "tools_used": ['read_file({"path": "src/app/main.py"})'],
            "covered_ids": ["m1", "m2"],  # incomplete: the summarizer restores the full list
        }))

    summarizer = LLMSummarizer(client=_client(handler), model="gpt-4o-mini")
    draft = summarizer.summarize(_items(), level=1, max_tokens=300)
    assert draft.exact_values == ["2026-11-20", "50,000 EUR", "41872"]
    assert draft.covered_ids == ["m1", "m2", "m3", "m4", "m5"]
    assert seen[0]["temperature"] == 0 and seen[0]["model"] == "gpt-4o-mini"
    assert '<message id="m3"' in seen[0]["messages"][1]["content"]


def test_llm_summarizer_falls_back_offline() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(400, json={"error": {"message": "bad request"}})

    summarizer = LLMSummarizer(client=_client(handler), model="gpt-4o-mini", max_retries=1)
    with pytest.warns(RuntimeWarning):
        draft = summarizer.summarize(_items(), level=1, max_tokens=300)
    assert "41872" in draft.exact_values and summarizer.warnings


def test_manager_uses_injected_summarizer() -> None:
    class Fixed:
        name = "fixed"

        def summarize(self, items: Any, *, level: int, max_tokens: int) -> Any:
            return OfflineSummarizer().summarize(items, level=level, max_tokens=max_tokens).model_copy(
                update={"prose": "Earlier, things happened."})

    memory = RelevanceMemoryManager(max_input_tokens=400, keep_recent=1, summarizer=Fixed())
    memory.add({"role": "user", "content": "Plan a trip."})
    for n in range(30):
        memory.add({"role": "assistant", "content": f"Idle remark number {n} about nothing."})
        memory.add({"role": "user", "content": f"ok {n}"})
    built = memory.build_context()
    assert check_context(built.messages) == []
    assert any("Earlier, things happened." in str(m["content"]) for m in built.messages)
    assert built.record.decision_counts()["summarised"] > 0


# ----------------------------------------------------------------------- disk cache
def test_disk_cache_round_trip(tmp_path: Path) -> None:
    cache = DiskScoreCache(tmp_path / "c")
    cache.set("k", RelevanceScore(id="m1", score=4, reason="r"))
    cache.close()
    again = DiskScoreCache(tmp_path / "c")
    assert again.get("k") == RelevanceScore(id="m1", score=4, reason="r")
    assert again.disk_ok
    again.close()


def test_disk_cache_corrupt_is_rebuilt_with_warning(tmp_path: Path) -> None:
    directory = tmp_path / "c"
    directory.mkdir()
    (directory / "cache.db").write_bytes(b"this is not sqlite" * 100)
    with pytest.warns(RuntimeWarning, match="corrupt|unusable"):
        cache = DiskScoreCache(directory)
    cache.set("k", RelevanceScore(id="m1", score=2))
    assert cache.get("k") is not None


def test_disk_cache_unusable_dir_warns_and_continues(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache directory should be")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        memory = RelevanceMemoryManager(
            max_input_tokens=120, keep_recent=1, score_cache_dir=str(blocker / "x"), cache_policy={"always_rebuild": True}
        )
        memory.add({"role": "user", "content": "Task: compare 41872 and 41790."})
        for n in range(10):
            memory.add({"role": "assistant", "content": f"step {n} on the comparison"})
            memory.add({"role": "user", "content": f"continue {n}"})
        built = memory.build_context()
        again = memory.build_context()
    assert any("score cache" in str(w.message) for w in caught)
    assert check_context(built.messages) == []
    assert again.record.cache_hits > 0  # the in-memory level still works


def test_manager_disk_cache_hits_across_managers(tmp_path: Path) -> None:
    # a scorer whose scores depend on content only (an LLM, here a stand-in) shares them
    # through the disk cache; the offline scorer's depend on the history and stay per manager
    def run(scorer: Any = None) -> Any:
        memory = RelevanceMemoryManager(max_input_tokens=150, keep_recent=1, score_cache_dir=str(tmp_path),
                                        scorer=scorer or WrappedOfflineScorer())
        memory.add({"role": "user", "content": "Task: compare 41872 and 41790."})
        for n in range(10):
            memory.add({"role": "assistant", "content": f"step {n} on the comparison"})
            memory.add({"role": "user", "content": f"continue {n}"})
        record = memory.build_context().record
        memory.score_cache.close()  # type: ignore[attr-defined]
        return record

    first, second = run(), run()
    assert first.cache_misses > 0 and first.cache_hits == 0
    assert second.cache_misses == 0 and second.cache_hit_rate == 1.0
    from relevance_memory import OfflineScorer

    offline_first, offline_second = run(OfflineScorer()), run(OfflineScorer())
    assert offline_first.cache_hits == offline_second.cache_hits == 0
    assert offline_second.cache_misses == offline_first.cache_misses > 0


def test_offline_scores_do_not_leak_between_histories_through_a_shared_cache_dir(tmp_path: Path) -> None:
    goal = "fix the parser crash in dates"

    def history(common: bool) -> list[dict[str, Any]]:
        h: list[dict[str, Any]] = [{"role": "user", "content": "Please help with the repository."},
                                   {"role": "assistant", "content": "I will look at the parser now."}]
        h += [{"role": "assistant", "content": f"parser parser step {n} notes" if common
               else f"unrelated step {n} notes about logging"} for n in range(14)]
        return [*h, {"role": "user", "content": "go on"}]

    def run(common: bool, directory: str | None) -> Any:
        memory = RelevanceMemoryManager(max_input_tokens=150, keep_recent=1, score_cache_dir=directory)
        memory.set_goal(final=goal)
        memory.extend(history(common))
        built = memory.build_context()
        if directory:
            memory.score_cache.close()  # type: ignore[attr-defined]
        return built

    alone = run(False, None)
    run(True, str(tmp_path))  # another history with the same ids fills the shared directory
    after = run(False, str(tmp_path))
    assert after.messages == alone.messages
    assert after.record.decision_for("m1").score == alone.record.decision_for("m1").score


# ----------------------------------------------------------------------- prefilter
def test_chunked_bm25_matches_and_reuses_chunks() -> None:
    docs = [["alpha", "beta"], ["gamma"], ["alpha"], ["delta", "alpha"]] * 3
    bm25 = ChunkedBM25(chunk_size=4)
    scores = bm25.scores(docs, ["gamma"])
    assert scores[1] > 0 and scores[0] == 0
    builds = bm25.index_builds
    docs.append(["gamma", "gamma"])
    bm25.scores(docs, ["gamma"])
    assert bm25.index_builds == builds + 1  # only the new tail chunk was indexed


def test_prefilter_chains_always_pass() -> None:
    chains = {0: [0], 1: [1], 2: [2, 3], 4: [4]}
    result = prefilter_chains(chains, [0.0, 5.0, 1.0, 0.0, 3.0], top_n=2, always={0})
    assert 0 in result.admitted and 1 in result.admitted and 4 in result.admitted
    assert set(result.rejected) == {2}


def _invoice_history(memory: RelevanceMemoryManager) -> None:
    memory.add({"role": "user", "content": "Find why the invoice total for ORD-77 is wrong."})
    for n in range(60):
        memory.add({"role": "assistant", "content": f"Unrelated chatter {n} about the weather and lunch."})
        memory.add({"role": "user", "content": f"more chatter {n}"})
    memory.add({"role": "assistant", "content": "The invoice total for ORD-77 double counts tax."})
    memory.add({"role": "user", "content": "So what is wrong with the invoice total?"})


def test_prefilter_auto_ranks_only_in_front_of_a_costly_scorer() -> None:
    local = RelevanceMemoryManager(max_input_tokens=600, keep_recent=1, prefilter_top_n=10)
    _invoice_history(local)
    built = local.build_context()
    assert local.config.prefilter == "auto"
    # the offline scorer (local) sees every one of the 122 older messages: no BM25 in front
    assert built.record.cache_misses == 122
    assert not [d for d in built.record.messages if d.reason.startswith("prefiltered out")]
    remote = WrappedOfflineScorer()
    costly = RelevanceMemoryManager(scorer=remote, max_input_tokens=600, keep_recent=1, prefilter_top_n=10)
    _invoice_history(costly)
    costly.build_context()
    assert 10 <= remote.items < 100  # the prefilter picked what the costly scorer sees


def test_manager_prefilter_limits_scorer_and_records_reason() -> None:
    memory = RelevanceMemoryManager(max_input_tokens=600, keep_recent=1, prefilter_top_n=10, prefilter=True)
    _invoice_history(memory)
    built = memory.build_context()
    # the prefilter admits the top 10 by BM25, or more until the admitted messages hold
    # twice the budget left (so a large budget is not starved): far fewer than all 120
    scored = [d for d in built.record.messages if d.score_source is not None and d.score_source.value == "offline"]
    assert built.record.cache_misses == len(scored) < 100
    assert sum(d.tokens for d in scored) <= 2 * 600 + 40
    prefiltered = [d for d in built.record.messages if d.reason.startswith("prefiltered out")]
    assert prefiltered and all(d.tier == "archive" for d in prefiltered)
    assert built.record.decision_for("m121").decision in ("kept", "recent")
    assert check_context(built.messages) == []


def test_cli_heatmap_writes_png_and_exports(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from relevance_memory.cli import app

    run = Path(__file__).resolve().parents[2] / "fixtures" / "sympy__sympy-20590.json"
    out = tmp_path / "hm.png"
    result = CliRunner().invoke(app, [
        "heatmap", str(run), "--out", str(out), "--top", "10", "--budget", "6000",
        "--field-json", str(tmp_path / "f.json"), "--graphml", str(tmp_path / "f.graphml"),
        "--history", str(tmp_path / "h.json"),
    ])
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    field = json.loads((tmp_path / "f.json").read_text())
    assert field["nodes"] and "edges" in field
    assert "<graphml" in (tmp_path / "f.graphml").read_text()
    history = json.loads((tmp_path / "h.json").read_text())
    assert history and all(len(tick["top"]) <= 20 for tick in history)


async def test_async_build_matches_sync_with_summaries() -> None:
    def make() -> RelevanceMemoryManager:
        memory = RelevanceMemoryManager(max_input_tokens=500, keep_recent=1)
        memory.add({"role": "system", "content": "You are terse."})
        memory.add({"role": "user", "content": "Track order ORD-1001; it must ship by 2026-12-01."})
        for n in range(25):
            memory.add({"role": "assistant", "content": f"Checked warehouse {n}: nothing new about shelf {n * 7}."})
            memory.add({"role": "user", "content": f"and then {n}?"})
        return memory

    sync_built = make().build_context()
    async_built = await make().abuild_context()
    assert sync_built.messages == async_built.messages
    assert [s.covered_ids for s in sync_built.record.summaries] == [s.covered_ids for s in async_built.record.summaries]
    assert sync_built.record.summaries and check_context(async_built.messages) == []


def test_a_summary_fold_resumes_only_from_a_prefix_of_the_same_items(monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import replace as replaced

    from relevance_memory.summary import _summary as summary_module
    from relevance_memory.summary._summary import OfflineSummarizer

    monkeypatch.setattr(summary_module, "FOLD_MIN_ITEMS", 4)
    items = [SummaryItem(id=f"m{i}", role=("user", "assistant", "tool")[i % 3], msg_type="user_chat",
                         text=f"Step {i}: the port is {4000 + i % 5} and src/mod{i % 4}.py was read.",
                         content_hash=f"h{i}", tool_calls=((("read_file", f'{{"path": "src/mod{i % 4}.py"}}'),) if i % 3 == 1 else ()),
                         source="read_file", tokens=20) for i in range(40)]
    marked = [*items[:10], replaced(items[10], superseded="since step 30: port 4004 (port)"), *items[11:]]
    held = [*items[:21], replaced(items[21], held=("The user said: “Step 21: the port is 4001 and src/mod1.py was read.”",)),
            *items[22:]]
    warm = OfflineSummarizer()
    for sequence in (items[:12], items[:30], items, marked, items[:35], held, items[5:], items):
        for max_tokens in (60, 400):
            assert warm.summarize(sequence, level=2, max_tokens=max_tokens) == OfflineSummarizer().summarize(
                sequence, level=2, max_tokens=max_tokens)
    assert len(warm._folds) == summary_module.FOLD_MEMO


def test_id_spans_reads_a_run_as_the_regex_does() -> None:
    """id_spans' shortcut for the next id of a run (no regex) gives what parsing every id gives."""
    import re

    from relevance_memory.summary._pyramid import id_spans

    def by_regex(ids: list[str]) -> list[str]:
        out: list[str] = []
        run: tuple[str, int, int] | None = None
        for value in ids:
            m = re.match(r"^(.*?)(\d+)$", value)
            if m and run and m.group(1) == run[0] and int(m.group(2)) == run[2] + 1:
                run = (run[0], run[1], run[2] + 1)
                continue
            if run:
                out.append(f"{run[0]}{run[1]}" if run[1] == run[2] else f"{run[0]}{run[1]}–{run[0]}{run[2]}")
            run = (m.group(1), int(m.group(2)), int(m.group(2))) if m else None
            if not m:
                out.append(value)
        if run:
            out.append(f"{run[0]}{run[1]}" if run[1] == run[2] else f"{run[0]}{run[1]}–{run[0]}{run[2]}")
        return out

    ids = ["m1", "m2", "m03", "m4", "m4", "x5", "x6", "m7", "m8", "a1b2", "a1b3", "q", "m9", "m10", "m11", "9", "10",
           "m099", "m100", "m101", "m1", ""]
    assert id_spans(ids) == by_regex(ids)
    assert id_spans(ids)[:3] == ["m1–m4", "m4", "x5–x6"]


def _bm25s_scores(docs: list[frozenset[str]], query: list[str], chunk_size: int) -> list[float]:
    """What the prefilter scored with ``bm25s.BM25`` per chunk before issue 24's array index."""
    import bm25s
    import numpy as np

    out = np.zeros(len(docs), dtype=np.float64)
    terms_of = list(dict.fromkeys(query))
    for start in range(0, len(docs), chunk_size):
        chunk = docs[start:start + chunk_size]
        retriever = bm25s.BM25()
        retriever.index([list(d) or ["\x00"] for d in chunk], show_progress=False)
        terms = [t for t in terms_of if t in retriever.vocab_dict]
        if terms:
            out[start:start + len(chunk)] = retriever.get_scores(terms).astype(np.float64)
    return out.tolist()  # type: ignore[no-any-return]


def test_chunked_bm25_scores_are_bm25s_bit_for_bit_on_a_real_run() -> None:
    """Every score of the array index equals bm25s.BM25's, float for float, over a real agent
    run's term sets, chunk sizes that split it differently, and queries of its own words."""
    memory = RelevanceMemoryManager(max_input_tokens=4000)
    memory.extend(load_transcript(Path(__file__).resolve().parents[2] / "fixtures" / "sympy__sympy-20590.json").messages)
    docs = list(memory.store.terms)
    words = sorted(set().union(*docs))
    queries = [words[i::97][:12] for i in range(5)] + [["sympy", "symbol", "dict", "slots"], [words[0]], ["no-such-term"]]
    for chunk_size in (256, 37):
        bm25, coded = ChunkedBM25(chunk_size=chunk_size), ChunkedBM25(chunk_size=chunk_size)
        for query in queries:
            expected = _bm25s_scores(docs, query, chunk_size)
            assert bm25.scores(docs, query) == expected
            # the store's own rows, read as their vocabulary numbers (issue 24), and a snapshot's
            assert coded.scores(memory.store.terms, query) == expected
            assert coded.scores(StoreSnapshot(memory.store).terms, query) == expected
    assert isinstance(memory.store.terms, CodedRows) and isinstance(StoreSnapshot(memory.store).terms, CodedRows)


def _string_rows(docs: list[frozenset[str]]) -> StringRows:
    rows = StringRows()
    for d in docs:
        rows.append(sorted(d))
    return rows


@settings(max_examples=60, deadline=None)
@given(docs=st.lists(st.frozensets(st.sampled_from([f"t{i}" for i in range(30)]), max_size=9), min_size=1, max_size=40),
       query=st.lists(st.sampled_from([f"t{i}" for i in range(34)]), min_size=1, max_size=6),
       chunk_size=st.integers(1, 16))
def test_chunked_bm25_scores_are_bm25s_bit_for_bit(docs: list[frozenset[str]], query: list[str], chunk_size: int) -> None:
    """Generated term sets (empty documents, repeated query terms, terms no document has), as
    sets and as the store keeps them (vocabulary numbers, :class:`StringRows`)."""
    expected = _bm25s_scores(docs, query, chunk_size)
    assert ChunkedBM25(chunk_size=chunk_size).scores(docs, query) == expected
    assert ChunkedBM25(chunk_size=chunk_size).scores(_string_rows(docs), query) == expected


@settings(max_examples=150, deadline=None)
@given(sizes=st.lists(st.integers(1, 4), min_size=1, max_size=25),
       scores=st.lists(st.sampled_from([0.0, 0.5, 1.25, 2.0, 3.5]), min_size=100, max_size=100),
       top_n=st.integers(0, 30), always=st.sets(st.integers(0, 24), max_size=5),
       chain_tokens=st.lists(st.integers(0, 400), min_size=25, max_size=25), min_tokens=st.integers(0, 3000))
def test_prefilter_chains_ranks_as_the_loop_over_every_chain(
        sizes: list[int], scores: list[float], top_n: int, always: set[int], chain_tokens: list[int],
        min_tokens: int) -> None:
    """The array ranking admits and rejects what ranking chain by chain does (ties to the newer
    chain; quota, always-pass and min_tokens), the rejected in rank order."""
    chains: dict[int, list[int]] = {}
    start = 0
    for size in sizes:
        chains[start] = list(range(start, start + size))
        start += size
    roots = list(chains)
    passing = {roots[k % len(roots)] for k in always}
    tokens = {root: chain_tokens[k] for k, root in enumerate(roots)}
    want = prefilter_by_every_chain(chains, scores, top_n=top_n, always=passing, tokens=tokens, min_tokens=min_tokens)
    got = prefilter_chains(chains, scores, top_n=top_n, always=passing, tokens=tokens, min_tokens=min_tokens)
    assert got.admitted == want.admitted
    assert list(got.rejected.items()) == list(want.rejected.items())


def _layout_arrays(layout: Any) -> list[list[int]]:
    return [layout.roots.tolist(), layout.sizes.tolist(), layout.flat.tolist(), layout.starts.tolist(),
            layout.tokens.tolist()]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["keep", "grow", "add", "drop", "replace"]), st.integers(0, 30)),
                min_size=1, max_size=12))
def test_a_chain_layout_grown_from_the_last_builds_is_the_layout_read_afresh(edits: list[tuple[str, int]]) -> None:
    """:func:`chain_layout` given the previous build's layout (its arrays reused up to the first
    chain object that changed) gives the arrays reading every chain gives, whatever changed:
    chains added at the end, replaced by a new object (a member joined), dropped, or unchanged."""
    from relevance_memory.pipeline._state import Chain
    from relevance_memory.pipeline.prefilter import chain_layout

    chains: dict[int, Chain] = {0: Chain(0, (0, 2), 7)}
    previous = None
    for edit, at in edits:
        roots = list(chains)
        root = roots[at % len(roots)]
        if edit == "grow":  # a message joins the chain: a new object with one more member
            old = chains[root]
            chains[root] = Chain(root, (*old.members, max(old.members) + 1000), old.tokens + at)
        elif edit == "add":
            new_root = max(roots) + 1 + at
            chains[new_root] = Chain(new_root, tuple(range(new_root, new_root + at % 4 + 1)), at * 3)
        elif edit == "drop" and len(chains) > 1:
            del chains[root]
        elif edit == "replace":  # the same content, another object: read again, the same arrays
            chains[root] = Chain(root, chains[root].members, chains[root].tokens)
        candidates = dict(sorted(chains.items()))
        grown = chain_layout(candidates, previous)
        assert _layout_arrays(grown) == _layout_arrays(chain_layout(candidates))
        assert grown.chains == list(candidates.values())
        previous = grown


def test_prefilter_reasons_are_put_in_words_when_read() -> None:
    """A rejected chain's reason is its score in the sentence, written when read; a forgotten
    chain keeps its own; the mapping reads like the dict of those strings."""
    import copy
    import pickle

    from relevance_memory.pipeline.prefilter import _Skipped

    rejected = {7: 1.234567, 3: 0.0, 9: -0.0, 4: 2.5}
    skipped = _Skipped(rejected, "prefiltered out (BM25 {:.4g} below the top 50)", {4: "forgotten: strength < 0.2"})
    words = {7: "prefiltered out (BM25 1.235 below the top 50)", 3: "prefiltered out (BM25 0 below the top 50)",
             9: "prefiltered out (BM25 -0 below the top 50)", 4: "forgotten: strength < 0.2"}
    assert skipped == words and (skipped != words) is False and dict(skipped.items()) == words
    assert [skipped[k] for k in words] == list(words.values()) and sorted(skipped.values()) == sorted(words.values())
    assert 7 in skipped and 8 not in skipped and len(skipped) == 4 and set(skipped) == set(words)
    assert skipped.get(9) == words[9] and skipped.get(8, "none") == "none"
    assert copy.deepcopy(skipped) == words == pickle.loads(pickle.dumps(skipped))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 40), unique=True, max_size=25), st.data())
def test_skipped_chains_read_from_the_admitted_ones_are_the_dict_of_every_reason(roots: list[int], data: st.DataObject) -> None:
    """Membership read from the candidates and the few admitted roots, and the rejected scores
    read from the ranking's arrays when first asked, give the mapping a dict of every rejected
    root's reason updated with the forgotten ones gives: keys, order, reasons, length, copies."""
    import copy
    import pickle

    import numpy as np

    from relevance_memory.pipeline.prefilter import _Rejected, _Skipped

    admitted = set(data.draw(st.lists(st.sampled_from(roots), unique=True))) if roots else set()
    ranked = data.draw(st.permutations([r for r in roots if r not in admitted]))
    scores = [float(data.draw(st.sampled_from([0.0, -0.0, 0.5, 1.25]))) for _ in ranked]
    forgotten = {r: f"forgotten {r}" for r in data.draw(st.lists(st.sampled_from(roots), unique=True))} if roots else {}
    template = "prefiltered out ({:.4g})"
    expected = {r: template.format(v) for r, v in zip(ranked, scores, strict=True)}
    expected.update(forgotten)
    rejected = _Rejected(np.asarray(ranked, dtype=np.int64), np.asarray(scores, dtype=np.float64))
    skipped = _Skipped(rejected, template, forgotten, candidates=dict.fromkeys(roots), admitted=admitted)
    assert len(skipped) == len(expected) and list(skipped) == list(expected)
    assert [r for r in range(-1, 42) if r in skipped] == sorted(expected)
    assert dict(skipped.items()) == expected and skipped == expected
    assert copy.deepcopy(skipped) == expected == pickle.loads(pickle.dumps(skipped))
    assert len(rejected) == len(ranked) and dict(rejected) == dict(zip(ranked, scores, strict=True))
    assert pickle.loads(pickle.dumps(rejected)) == dict(zip(ranked, scores, strict=True))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.sets(st.integers(0, 30), max_size=12)), max_size=4),
       st.sets(st.integers(0, 35), max_size=10))
def test_the_asked_ids_a_pyramid_covers_are_those_in_its_covered_and_pointed_sets(
    summaries: list[tuple[int, set[int]]], asked: set[int]
) -> None:
    """``covering`` (each summary's ids read against the few asked) gives the asked ids in
    ``covered`` (summaries of level ≥ 1) and, with ``pointer``, those in ``pointed`` (level 0)."""
    from relevance_memory.summary._pyramid import PyramidResult, RenderedSummary

    pyramid = PyramidResult(summaries=[
        RenderedSummary(level=level, message={"role": "user", "content": "s"}, tokens=3,
                        covered_ids=tuple(f"m{i}" for i in sorted(ids)), exact_values=())
        for level, ids in summaries])
    ids = [f"m{i}" for i in asked]
    assert pyramid.covering(ids) == pyramid.covered & set(ids)
    assert pyramid.covering(iter(ids), pointer=True) == pyramid.pointed & set(ids)


def _indexed_weights(docs: list[frozenset[str]], chunk_size: int) -> dict[tuple[str, int], np.float32]:
    """(term, document) → the posting weight a chunk was indexed with before issue 24 kept none:
    ``float32(idf(t) · tfc(d))`` of the document's chunk (df and N in that chunk, float32 idf)."""
    out: dict[tuple[str, int], np.float32] = {}
    for start in range(0, len(docs), chunk_size):
        chunk = docs[start:start + chunk_size]
        counted = np.maximum(np.array([len(d) for d in chunk], dtype=np.int64), 1)
        tfc = 1.0 / (K1 * ((1 - B) + B * counted / counted.mean()) + 1.0)
        df: dict[str, int] = {}
        for d in chunk:
            for t in d:
                df[t] = df.get(t, 0) + 1
        idf = _idf_table(len(chunk))
        for k, d in enumerate(chunk):
            for t in d:
                out[t, start + k] = np.float32(np.float64(idf[df[t]]) * tfc[k])
    return out


@settings(max_examples=60, deadline=None)
@given(docs=st.lists(st.frozensets(st.sampled_from([f"t{i}" for i in range(30)]), max_size=9), min_size=1, max_size=60),
       chunk_size=st.integers(1, 6), block_chunks=st.integers(2, 4))
def test_bm25_weights_made_when_scored_are_the_ones_indexed(docs: list[frozenset[str]], chunk_size: int,
                                                            block_chunks: int) -> None:
    """Issue 24: a chunk or block keeps each document's ``tfc``, not each posting's weight; the
    weight made again from the term's run of postings in its chunk is, for every posting of
    every chunk and block, the very float32 the chunk was indexed with."""
    bm25 = ChunkedBM25(chunk_size=chunk_size, block_chunks=block_chunks)
    bm25.scores(docs, ["t0"])
    expected = _indexed_weights(docs, chunk_size)
    names = {i: t for t, i in bm25._vocab.items()}
    seen = 0
    for chunk in bm25._chunks:
        assert chunk.tfc.dtype == np.float64 and len(chunk.tfc) == chunk.size
        counts = np.diff(chunk.indptr)
        got_docs, weights = chunk.weights(chunk.indptr[:-1], counts)
        terms = np.repeat(chunk.terms, counts)
        for term, doc, weight in zip(terms.tolist(), got_docs.tolist(), weights.tolist(), strict=True):
            assert np.float32(weight) == expected[names[term], chunk.start + doc]
            seen += 1
    assert seen == len(expected)
    # a query's kept scores are float32 (each a chunk's float32 sum): read back, the same floats
    query = ["t0", "t1", "t7"]
    first = bm25.scores(docs, query)
    assert all(kept.dtype == np.float32 and len(kept) == full for full, kept in bm25._query_memo.values())
    assert bm25.scores(docs, query) == first == ChunkedBM25(chunk_size=chunk_size, block_chunks=block_chunks).scores(docs, query)


@settings(max_examples=60, deadline=None)
@given(docs=st.lists(st.frozensets(st.sampled_from([f"t{i}" for i in range(30)]), max_size=9), min_size=1, max_size=60),
       queries=st.lists(st.lists(st.sampled_from([f"t{i}" for i in range(34)]), min_size=1, max_size=6), min_size=1, max_size=4),
       chunk_size=st.integers(1, 6), block_chunks=st.integers(2, 4), grow=st.lists(st.integers(1, 60), max_size=4))
def test_bm25_blocks_score_as_their_chunks(docs: list[frozenset[str]], queries: list[list[str]], chunk_size: int,
                                           block_chunks: int, grow: list[int]) -> None:
    """Full chunks merged into blocks (and the kept scores of a query asked again while the
    history grows) give every document the score bm25s gives it in its chunk, bit for bit."""
    bm25 = ChunkedBM25(chunk_size=chunk_size, block_chunks=block_chunks)
    coded = ChunkedBM25(chunk_size=chunk_size, block_chunks=block_chunks)
    rows = _string_rows(docs)  # every row stored; each call reads a snapshot's first n (issue 24)
    for n in sorted({len(docs), *(min(g, len(docs)) for g in grow)}):
        for query in queries:
            expected = _bm25s_scores(docs[:n], query, chunk_size)
            assert bm25.scores(docs[:n], query) == expected
            assert coded.scores(_CodedPrefix(rows, n), query) == expected
    assert bm25._blocks == coded._blocks == len(docs) // (chunk_size * block_chunks)
    # other documents (the sets, not the rows' numbers) are indexed afresh, not read as the rows'
    assert coded.scores(docs, queries[0]) == _bm25s_scores(docs, queries[0], chunk_size)

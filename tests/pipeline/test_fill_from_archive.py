"""Room the core and working tiers leave goes to the best archived chains, verbatim
(``MemoryConfig.fill_from_archive``), beyond the summary reserve."""

from __future__ import annotations

from relevance_memory import RelevanceMemoryManager
from relevance_memory.pipeline.order import DEFAULT_ORDER, RECENCY, OrderPolicy
from relevance_memory.pipeline.select import ROOM_LEFT, fill, rank

GOAL = "Plan the Lisbon trip: hotels, flights, museums, food, transport, weather, neighbourhoods and tips"
FILLER = [
    "My cousin just adopted a very loud parrot named Captain.",
    "The office printer jammed again this morning, third time this week.",
    "I finally finished repainting the garden fence in dark green.",
    "Our book club picked a long Russian novel for next month.",
    "The new espresso machine at work makes terrible coffee.",
    "I have been learning to juggle three tennis balls at once.",
    "My neighbour's dog keeps digging holes under the hedge.",
    "We replaced the kitchen light bulbs with warmer ones.",
]


def _manager(**config: object) -> RelevanceMemoryManager:
    m = RelevanceMemoryManager(max_input_tokens=420, keep_recent=1, embeddings=False, **config)  # type: ignore[arg-type]
    m.add({"role": "user", "content": GOAL})
    for n in range(24):
        m.add({"role": "user", "content": f"{FILLER[n % len(FILLER)]} (note {n})"})
        m.add({"role": "assistant", "content": f"Noted, thanks for sharing that ({n})."})
    # one old turn shares a single goal term: still score 1, but the best-weighted archived turn
    m.add({"role": "user", "content": "Street food stalls near my flat close early on Sundays."}, id="food")
    for n in range(6):
        m.add({"role": "user", "content": f"{FILLER[n]} (later {n})"})
    m.add({"role": "user", "content": "What should we look at next?"})
    return m


def test_archived_chains_fill_the_room_left_beyond_the_summary_reserve() -> None:
    built = _manager().build_context()
    record = built.record
    spare = [d for d in record.messages if d.note == ROOM_LEFT]
    assert spare, "the room left should hold archived messages verbatim"
    assert all(d.decision == "kept" and d.tier == "working" and d.score is not None and d.score <= 2 for d in spare)
    food = next(d for d in record.messages if d.id == "food")
    assert food.decision == "kept" and food.note == ROOM_LEFT and food.score == 1  # best weight first
    assert record.summaries and record.tokens_after <= record.budget
    summary_tokens = sum(s.tokens for s in record.summaries)
    assert 0 < summary_tokens <= max(64, record.budget // 10) + 40  # the reserve, not all the room
    kept_ids = {d.id for d in record.messages if d.decision in ("kept", "recent")}
    assert [m["content"] for m in built.messages if m["content"] == GOAL] == [GOAL]
    assert len(kept_ids) == len(set(kept_ids))


def test_off_the_archive_is_only_summarised() -> None:
    record = _manager(fill_from_archive=False).build_context().record
    assert not [d for d in record.messages if d.note == ROOM_LEFT]
    food = next(d for d in record.messages if d.id == "food")
    assert food.decision == "summarised" and food.tier == "archive"
    on = _manager().build_context().record
    verbatim = lambda r: sum(1 for d in r.messages if d.decision in ("kept", "recent"))  # noqa: E731
    assert verbatim(on) > verbatim(record)  # the same budget holds more original messages


def test_rank_puts_archive_chains_last_and_fill_keeps_them_as_working() -> None:
    from relevance_memory._models import RelevanceScore, ScoreSource
    from relevance_memory.pipeline._state import Chain

    def score(v: int, w: float) -> RelevanceScore:
        return RelevanceScore(id="x", score=v, reason="", source=ScoreSource.OFFLINE, weight=w)

    chains = {i: Chain(root=i, members=(i,), tokens=10) for i in range(4)}
    scores = {0: score(4, 0.0), 1: score(1, 0.9), 2: score(2, 0.0), 3: score(1, 0.1)}
    common = {"core_score": 4, "archive_score": 2, "referenced_by": {}, "promote_after_references": 2}
    tier, order = rank(chains, scores, **common, spare=0.0)  # type: ignore[arg-type]
    assert order == (0, 2, 1, 3)  # core, then the archive by score, then weight
    assert rank(chains, scores, **common)[1] == (0,)  # type: ignore[arg-type]
    strong = {0: 5.0, 1: 0.1, 2: 0.3, 3: 0.25}  # 1 is forgotten (below a 0.2 floor): never tried
    assert rank(chains, scores, **common, strengths=strong, spare=0.2)[1] == (0, 2, 3)  # type: ignore[arg-type]
    by_recency = OrderPolicy(core=DEFAULT_ORDER.core, working=DEFAULT_ORDER.working, spare=RECENCY)
    assert rank(chains, scores, **common, spare=0.0, order=by_recency)[1] == (0, 3, 2, 1)  # type: ignore[arg-type]
    selection = fill(tier, order, {r: 10 for r in chains}, 30)
    assert selection.kept == {0, 2, 1}
    assert selection.tier[2] == selection.tier[1] == "working" and selection.notes[1] == ROOM_LEFT
    assert selection.tier[3] == "archive" and 3 not in selection.notes  # did not fit: stays archived, no note

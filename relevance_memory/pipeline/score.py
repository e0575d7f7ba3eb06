"""Score (SPEC §3 step 4, §6): cache look-up first, then the scorer for the misses only.

The stage is the build's one I/O call and its only await point, so it comes in three parts:
:func:`request` (pure: cache hits, and the misses as :class:`ScoreItem` s), the call
(:func:`call`, or :func:`acall` in an async build), and :func:`accept` (pure but for
writing the cache: exactly one score per requested id, fallback scores for the rest).

Cache keys (SPEC §6) name the rubric version, model, final goal and subtask (the per-build
:func:`score_cache_prefix`), and the message's content hash, role and type. Every score is
stored under a key naming the message, so equal texts keep their own scores and a rebuild
reads back exactly what the build before it scored; a scorer whose score depends only on
content also shares it under SPEC §6's content key (a re-ingested or resynced history
hits). A context-dependent scorer (the offline one) gets only the per-message key, with
the message's current reference count, in a cache of its own history.

A scorer that raises is replaced by offline scores for the whole batch
(``source="fallback"``, a :class:`RuntimeWarning` and a record warning): nothing is lost
because a scorer failed.
"""

from __future__ import annotations

import asyncio
import functools
import warnings
from collections.abc import Sequence

from .._models import Message, RelevanceScore, ScoreSource, TaskGoal, content_text, user_authored
from .._requests import is_correction, is_request
from ..scoring._capabilities import AsyncScorer
from ..scoring._scorer import (
    ScoreItem,
    ScorerUsage,
    ScoringContext,
    ScoringResult,
    message_cache_key,
    score_cache_prefix,
)
from ._state import BuildState, Scored, ScoreRequest, Seams, required

__all__ = ["acall", "accept", "cache_keys", "call", "request"]


def _prefix(seams: Seams, goal: TaskGoal) -> str:
    scorer = seams.scorer
    return score_cache_prefix(rubric_version=scorer.rubric_version, model=scorer.model, goal=goal)


def is_request_of(message: Message) -> bool:
    """Whether a user's message is one of their requests (at least a few words, or a correction)."""
    if not user_authored(message.role, message.msg_type.value):
        return False
    text = content_text(message.content)
    return is_request(text) or is_correction(text)


def notice_of(seams: Seams, message: Message) -> str:
    """``"newest"`` / ``"older"`` for a copy of a format notice the harness repeats, else ``""``
    (:class:`~relevance_memory._requests.NoticeIndex`; O(new messages) per build)."""
    if message.role != "user":
        return ""
    seams.notices.update(seams.store.messages)
    if not seams.notices.is_notice(message):
        return ""
    return "newest" if seams.notices.copies(message)[-1] == message.index else "older"


def cache_keys(seams: Seams, prefix: str, message: Message) -> tuple[str, ...]:
    """Score-cache keys of ``message`` under a build's ``prefix``, the first to read first (module doc)."""
    key = functools.partial(
        message_cache_key, prefix, content_hash=message.content_hash, role=message.role,
        msg_type=message.msg_type.value,
    )
    notice = notice_of(seams, message)
    if seams.capabilities.context_dependent:
        references = len(seams.store.referenced_by.get(message.id, ()))
        # a notice's copies change status as new copies arrive: the status is part of the key
        return (key(message_id=f"{message.id}~{notice}" if notice else message.id, referenced_by=references),)
    return (key(message_id=message.id), key())


def _items(state: BuildState, seams: Seams, indices: Sequence[int]) -> tuple[ScoreItem, ...]:
    store = seams.store
    task_index = store.first_user_index if required(state.partition, "partition").task_root is not None else None
    requests = state.goal.source == "user_requests"
    return tuple(
        ScoreItem(
            id=m.id,
            role=m.role,
            msg_type=m.msg_type.value,
            source=m.source,
            text=m.text,
            token_count=m.token_count,
            step=m.step,
            referenced_by=len(store.referenced_by.get(m.id, ())),
            is_task_statement=i == task_index,
            content_hash=m.content_hash,
            terms=store.terms[i],
            identifiers=store.idents[i],
            superseded_by=_superseded(seams, m.id),
            episode=store.episodes[i],
            notice=notice_of(seams, m),
            request=requests and is_request_of(m),
        )
        for i, m in ((i, store[i]) for i in indices)
    )


def _superseded(seams: Seams, message_id: str) -> str:
    link = seams.store.superseded_by.get(message_id) if seams.config.supersede else None
    return f"{link.newer}: {link.reason}" if link is not None else ""


def request(state: BuildState, seams: Seams) -> ScoreRequest:
    """Cache look-up for every candidate member the prefilter left to score (SPEC §6)."""
    store = seams.store
    prefix = _prefix(seams, state.goal)
    cached: dict[int, RelevanceScore] = {}
    misses: list[int] = []
    for i in required(state.prefilter, "prefilter").to_score:
        hit = None
        for key in cache_keys(seams, prefix, store[i]):
            hit = seams.score_cache.get(key)
            if hit is not None:
                break
        if hit is None:
            misses.append(i)
        else:
            cached[i] = hit
    return ScoreRequest(cached=cached, misses=tuple(misses), items=_items(state, seams, misses))


def _context(seams: Seams) -> ScoringContext:
    return ScoringContext(doc_freq=seams.store.doc_freq, doc_count=len(seams.store))


def _fallback_all(goal: TaskGoal, seams: Seams, items: Sequence[ScoreItem], exc: BaseException) -> ScoringResult:
    message = f"scorer {seams.scorer.name} failed ({type(exc).__name__}: {exc}); offline scores used"
    warnings.warn(message, RuntimeWarning, stacklevel=5)
    offline = seams.fallback.score(goal, items, _context(seams))
    return ScoringResult(
        scores=[s.model_copy(update={"source": ScoreSource.FALLBACK}) for s in offline.scores],
        usage=ScorerUsage(fallbacks=len(items)),
        warnings=[message],
    )


def call(state: BuildState, seams: Seams, pending: ScoreRequest) -> ScoringResult | None:
    """Send the misses to the scorer (the build's I/O); ``None`` when there are none.

    A scorer that raises is replaced by offline fallback scores (module doc).
    """
    if not pending.misses:
        return None
    try:
        return seams.scorer.score(state.goal, pending.items, _context(seams))
    except Exception as exc:
        return _fallback_all(state.goal, seams, pending.items, exc)


async def acall(state: BuildState, seams: Seams, pending: ScoreRequest) -> ScoringResult | None:
    """Async :func:`call`: awaits the scorer's ``ascore`` when it has one (an
    :class:`~relevance_memory.AsyncScorer`), else runs its blocking ``score`` in a worker thread."""
    if not pending.misses:
        return None
    scorer = seams.scorer
    if not isinstance(scorer, AsyncScorer):
        return await asyncio.to_thread(call, state, seams, pending)
    try:
        return await scorer.ascore(state.goal, pending.items, _context(seams))
    except Exception as exc:
        return _fallback_all(state.goal, seams, pending.items, exc)


def accept(state: BuildState, seams: Seams, pending: ScoreRequest, result: ScoringResult | None) -> Scored:
    """Take exactly one score per requested id (extra and repeated ids are ignored), fill
    gaps with fallback scores, and cache every score that is not a fallback."""
    scores: dict[int, RelevanceScore] = dict(pending.cached)
    if result is not None:
        by_id = {item.id: item for item in pending.items}
        got: dict[str, RelevanceScore] = {}
        for score in result.scores:
            if score.id in by_id and score.id not in got:
                got[score.id] = score
        missing = [item for item in pending.items if item.id not in got]
        if missing:
            result.warnings.append(f"scorer returned no score for {len(missing)} message(s); offline fallback used")
            result.usage.fallbacks += len(missing)
            for score in seams.fallback.score(state.goal, missing, _context(seams)).scores:
                got[score.id] = score.model_copy(update={"source": ScoreSource.FALLBACK})
        prefix = _prefix(seams, state.goal)
        for i in pending.misses:
            message = seams.store[i]
            score = got[message.id]
            scores[i] = score
            if score.source != ScoreSource.FALLBACK:
                for key in cache_keys(seams, prefix, message):
                    seams.score_cache.set(key, score)
    return Scored(
        scores=scores,
        from_cache=frozenset(pending.cached),
        result=result,
        hits=len(pending.cached),
        misses=len(pending.misses),
    )


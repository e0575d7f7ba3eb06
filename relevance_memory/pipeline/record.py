"""Record (SPEC §8): the decision record of a build — per message what was decided and why.

The stage reads every earlier stage's output and the pheromone memory (each message's
strength) and writes the :class:`DecisionRecord`: per message its score and source, tier,
decision (``kept | recent | summarised | dropped``) and the reason; the build's budget,
tokens before and after, where the budget went (the ledger's breakdown by purpose), scorer
usage, cache hits and warnings.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

from .._models import Message, ScoreSource, user_authored
from .._record import BudgetBreakdown, BudgetLine, DecisionRecord, MessageDecision, SummaryRecord
from .._tokenizer import REPLY_PRIMING_TOKENS
from ..pheromone._field import PheromoneField
from ..pheromone._math import settled_strength
from ..scoring._scorer import ScorerUsage
from ._state import BuildState, Partitioned, Seams, required
from .ledger import Purpose
from .partition import newest_user_index

__all__ = ["compaction_breakdown", "record"]


@dataclass(frozen=True)
class _Memory:
    """What the record reads of the pheromone memory, as of the build: each message's strength
    (rounded to 4 places; ``None`` without the field) and latest score. A plain
    :class:`~relevance_memory.pheromone._field.PheromoneField` is read from the (immutable) cells it
    holds at the build, settled when the record is built (the same floats); another memory (a
    board's) is read at the build, so the record is built then too."""

    strength: Callable[[str], float | None]
    latest_score: Callable[[str], int | None]
    deferrable: bool


def _memory(seams: Seams) -> _Memory:
    field = seams.pheromone
    enabled = seams.config.pheromone.enabled
    if not isinstance(field, PheromoneField) or type(field).strength is not PheromoneField.strength \
            or type(field).latest_score is not PheromoneField.latest_score:
        return _Memory(lambda mid: round(field.strength(mid), 4) if enabled else None, field.latest_score, False)
    tick, config = field.tick, field.config
    # the cells as of this build (immutable; the record may be read later): one copy of the
    # table in C, not a list of every message's id and cell (issue 24)
    cells = field.cells_now()

    def strength(mid: str) -> float | None:
        if not enabled:
            return None
        cell = cells.get(mid)
        return round(settled_strength(cell, tick, config), 4) if cell else 0.0

    def latest_score(mid: str) -> int | None:
        cell = cells.get(mid)
        return cell.latest_score if cell else None

    return _Memory(strength, latest_score, True)


def _common(seams: Seams, memory: _Memory, message: Message) -> dict[str, Any]:
    strength = memory.strength(message.id)
    out: dict[str, Any] = {
        "id": message.id, "index": message.index, "step": message.step, "role": message.role,
        "msg_type": message.msg_type.value, "tokens": message.token_count, "strength": strength,
        "producer": message.producer, "scope": message.scope,
    }
    store = seams.store
    link = store.superseded_by.get(message.id)
    if link is not None:  # SPEC §8 supersede links, both ways
        out["superseded_by"] = link.newer
        out["supersede_reason"] = link.reason
    newer = store.supersedes.get(message.id)
    if newer:
        out["supersedes"] = list(newer)
    return out


def _decisions(
    state: BuildState, seams: Seams, part: Partitioned, memory: _Memory, users_only: bool = False
) -> list[MessageDecision]:
    """Per stored message, the build's decision (or, with ``users_only``, per message a user
    wrote: :func:`~relevance_memory._models.user_authored`)."""
    store, config = seams.store, seams.config
    chain_root = store.chain_root  # a member's root in part.chains (all but the excluded and pinned)
    summarised = state.summarised
    selection = summarised.selection if summarised is not None else None
    asked: Iterable[Message] = store.messages
    few = users_only and seams.chains.covers(store)
    if few:  # the user-role messages only, not every message
        messages = store.messages
        asked = [messages[i] for i in seams.chains.user_role]
    covered: AbstractSet[str] = set()
    pointed: AbstractSet[str] = set()
    if summarised is not None and few:  # only the asked ids looked up in the summaries
        covered = summarised.pyramid.covering(m.id for m in asked)
        pointed = summarised.pyramid.covering((m.id for m in asked), pointer=True)
    elif summarised is not None:
        covered, pointed = summarised.pyramid.covered, summarised.pyramid.pointed
    held = summarised.held if summarised is not None else frozenset()
    skipped = state.prefilter.skipped if state.prefilter is not None else {}
    scored = state.scored
    superseded = state.ranked.superseded if state.ranked is not None else {}
    preferred = state.ranked.preferred if state.ranked is not None else {}
    first_recent_step = store.step_count - config.keep_recent
    chains = seams.chains
    newest_user = (newest_user_index(chains, part.excluded) if chains.covers(store) else
                   next((m.index for m in reversed(store.messages) if m.role == "user" and m.index not in part.excluded), None))
    newest_user_root = chain_root(newest_user) if newest_user is not None and newest_user not in part.pinned else None
    rendered = dict(part.renditions)
    if selection is not None:
        rendered.update(selection.rendered)

    def sent(i: int, note: str = "") -> dict[str, Any]:
        """The fidelity fields (and the note) of a message sent in the context."""
        found = rendered.get(i)
        if found is None:
            return {"fidelity": "verbatim", "sent_tokens": store[i].token_count, "note": note}
        return {"fidelity": found.fidelity, "sent_tokens": found.tokens,
                "note": "; ".join(n for n in (found.note, note) if n)}

    decisions: list[MessageDecision] = []
    for message in asked:
        if users_only and not user_authored(message.role, message.msg_type.value):
            continue
        i = message.index
        common = _common(seams, memory, message)
        if i in part.excluded:
            decisions.append(MessageDecision(
                **common, tier="archive", decision="dropped", chain_id=store[store.chain_root(i)].id,
                reason="excluded on ingest", note=part.excluded[i],
            ))
            continue
        if i in part.pinned:
            decisions.append(MessageDecision(
                **common, tier="pinned", decision="kept", score_source=ScoreSource.PINNED,
                reason="system prompt (pinned)", chain_id=message.id, **sent(i),
            ))
            continue
        root = chain_root(i)
        chain_id = store[root].id
        if root in part.recent:
            if part.identity:
                reason = "the whole history fits the budget"
            elif newest_user_root == root and message.role == "user" and message.step < first_recent_step:
                reason = "newest user message (always kept verbatim)"
            else:
                reason = "working memory (last steps)"
            decisions.append(MessageDecision(
                **common, tier="recent", decision="recent", score_source=ScoreSource.RECENT,
                reason=reason, chain_id=chain_id, **sent(i),
            ))
            continue
        assert selection is not None and scored is not None
        summarised_here = message.id in covered
        gone = "summarised" if summarised_here else "dropped"
        if root in skipped:
            latest = memory.latest_score(message.id) if root not in selection.tier else None
            decisions.append(MessageDecision(
                **common, score=latest, reason=skipped[root], tier="archive",
                decision=gone, chain_id=chain_id,  # type: ignore[arg-type]
                note="in a summary; original restorable from the store" if summarised_here
                else "archived; restorable from the store",
            ))
            continue
        score = scored.scores[i]
        tier = selection.tier[root]
        kept = root in selection.kept
        if kept:
            note = selection.notes.get(root, "")
        elif root in superseded:
            note = superseded[root] + (
                "; in a summary, original restorable from the store" if summarised_here
                else "; no summary fitted: named in the restore pointer" if message.id in pointed
                else "; restorable from the store")
        elif i in held and summarised_here:
            note = "over budget: a user message scored ≥ 4 is only in a summary (restorable from the store)"
        elif i in held:
            note = "over budget; restorable from the store"
        elif summarised_here:
            note = selection.notes.get(root, "archived") + "; in a summary, original restorable from the store"
        elif message.id in pointed:
            note = selection.notes.get(root, "archived") + "; no summary fitted: named in the restore pointer"
        else:
            note = selection.notes.get(root, "archived; restorable from the store")
        if kept and root in superseded:
            note = "; ".join(n for n in (note, superseded[root]) if n)
        if root in preferred:
            note = "; ".join(n for n in (note, preferred[root]) if n)
        reason = score.reason
        members = part.candidates[root].members if root in part.candidates else (i,)
        partner = max(members, key=lambda j: (scored.scores[j].score if j in scored.scores else 0, -j))
        if partner != i and partner in scored.scores and scored.scores[partner].score > score.score:
            # a chain is kept or dropped whole and takes its best member's score (SPEC §3 step 6)
            verb = "kept" if kept else "archived"
            reason += (
                f"; {verb} with its chain: {store[partner].id} in the same chain scored "
                f"{scored.scores[partner].score} (tier {tier})"
            )
        decisions.append(MessageDecision(
            **common, score=score.score,
            score_source=ScoreSource.CACHE if i in scored.from_cache else score.source, reason=reason,
            tier=tier,  # type: ignore[arg-type]
            decision="kept" if kept else gone, chain_id=chain_id,  # type: ignore[arg-type]
            **(sent(i, note) if kept else {"note": note}),
        ))
    return decisions


def _embedder_label(seams: Seams) -> str:
    vectors = seams.store.message_vectors() if seams.config.embeddings else None
    return f"{vectors.embedder.name}@{vectors.version}" if vectors is not None else ""


def record(state: BuildState, seams: Seams) -> DecisionRecord:
    """The record stage (module doc): reads every stage's output; writes the decision record."""
    part = required(state.partition, "partition")
    assembled = required(state.assembled, "assemble")
    store, config, scorer = seams.store, seams.config, seams.scorer
    memory = _memory(seams)
    scored, summarised = state.scored, state.summarised
    result = scored.result if scored is not None else None
    warnings = list(part.warnings) + (list(summarised.warnings) if summarised is not None else [])
    warnings += list(result.warnings) if result is not None else []
    warnings += summarised.pyramid.warnings if summarised is not None else []
    warnings += list(seams.approximations)
    goal = state.goal
    build_id = hashlib.sha256(
        f"{state.build_number}|{len(store)}|{goal.final}|{goal.subtask}|{state.budget}".encode()
    ).hexdigest()[:12]
    if seams.chains.covers(store):  # the chain index's running total, less the excluded: O(excluded)
        history_tokens = seams.chains.total_tokens - sum(store[i].token_count for i in part.excluded)
    else:
        history_tokens = sum(m.token_count for m in store.messages if m.index not in part.excluded)
    tokens_before = REPLY_PRIMING_TOKENS + history_tokens
    pyramid = summarised.pyramid if summarised is not None else None
    breakdown = (summarised.ledger if summarised is not None else part.ledger).breakdown()
    budget = state.budget
    if state.limit is not None and state.limit > state.budget:
        breakdown = compaction_breakdown(breakdown, state.limit)
        budget = state.limit
    built = DecisionRecord(
        build_id=build_id,
        created_at=seams.clock(),
        goal=goal,
        budget=budget,
        encoding=seams.tokenizer.name,
        tokens_approximate=any(note.startswith("token counts are approximate") for note in seams.approximations),
        tokens_before=tokens_before,
        tokens_after=assembled.tokens,
        messages_before=len(store),
        messages_after=len(assembled.messages),
        keep_recent=config.keep_recent,
        working_steps=len({store[i].step for r in part.recent for i in part.chains[r].members}),
        identity=part.identity and not part.excluded,
        goal_block=summarised is not None and summarised.goal_text is not None,
        scorer=scorer.name,
        scorer_model=scorer.model,
        rubric_version=scorer.rubric_version,
        embedder=_embedder_label(seams),
        usage=result.usage if result is not None else ScorerUsage(),
        cache_hits=scored.hits if scored is not None else 0,
        cache_misses=scored.misses if scored is not None else 0,
        chains_kept=len(assembled.kept_roots),
        chains_total=len(part.chains),
        # made as validated (an int, lists of str): validating a million-id summary's ids cost ~0.07 s
        summaries=[
            SummaryRecord.model_construct(
                level=s.level, covered_ids=list(s.covered_ids), tokens=s.tokens, exact_values=list(s.exact_values)
            )
            for s in (pyramid.summaries if pyramid is not None else [])
        ],
        warnings=warnings,
        budget_breakdown=breakdown,
        mode=state.mode,
        mode_reason=state.mode_reason,
        target=state.budget if budget != state.budget else None,
    )
    if memory.deferrable:  # built on first use (relmem explain, a board, a recording span): O(1) here
        built.defer_messages(functools.partial(_decisions, state, seams, part, memory),
                             functools.partial(_decisions, state, seams, part, memory, users_only=True))
    else:
        built.messages = _decisions(state, seams, part, memory)
    return built


def compaction_breakdown(breakdown: BudgetBreakdown, limit: int) -> BudgetBreakdown:
    """A compaction's breakdown against the whole budget ``limit`` (tokens): the stages filled
    the target (``breakdown.budget``); the rest stays free for the steps appended until the
    next compaction (SPEC §3.1), noted as a reserve line."""
    room = limit - breakdown.budget
    lines = [*breakdown.lines, BudgetLine(
        purpose=Purpose.APPENDED.value, tokens=room, kind="reserve",
        note=f"the compaction filled {breakdown.budget:,} of {limit:,}; the rest takes the steps appended until the next one",
    )]
    return BudgetBreakdown(budget=limit, spent=dict(breakdown.spent), unused=breakdown.unused + room, lines=lines)

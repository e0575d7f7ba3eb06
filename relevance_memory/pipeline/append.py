"""Prefix-stable builds (SPEC §3.1): append between compactions, compact to a target.

Between compactions a build sends the previous context unchanged, byte for byte, plus the
new messages verbatim (:func:`append`): no partition, scoring, selection or summary runs,
so an append costs O(new messages) — its decision record is the last compaction's plus the
appended messages, built on first use. A compaction (the whole pipeline, SPEC §3 steps
2–8) runs when appending would exceed the budget, when the final goal or the budget
changes, when the previous context cannot simply grow (a stray tool result), or when the
caller asks; it fills a **target** below the budget (``CachePolicy.target_fraction``) so
that many steps fit before the next one. The decision itself is
:func:`~relevance_memory._cache_policy.decide_build_mode`.

:class:`PrefixState` is what a memory keeps between builds; :func:`plan` decides the
next build, :func:`append` makes an appended one, :func:`remember` records a build as the
prefix of the next one. :mod:`.cycle` runs them, and the pipeline, in that order.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel

from .._cache_policy import PrefixDecision, decide_build_mode
from .._exceptions import InvalidMessageError, RelevanceMemoryError
from .._models import ScoreSource, TaskGoal, call_rows, freeze, thaw
from .._record import BudgetBreakdown, BudgetLine, DecisionRecord, MessageDecision
from .._tokenizer import REPLY_PRIMING_TOKENS
from ..pheromone._field import PheromoneField
from ..pheromone._math import settled_strength
from ..scoring._scorer import ScorerUsage
from ..summary._summary import RenderedSummary
from ._copies import CopyPlan, copy_plan, plain_copies
from ._prefix import AppendPlan, TailItem, plan_append, shared_prefix_tokens
from ._state import BuiltContext, Seams, StoreView
from .assemble import check_context, subtask_note
from .fidelity import Rendition, cap_of, entry_caps, entry_renditions, newest_user_excerpt
from .ledger import Purpose

__all__ = ["BuildStep", "PrefixState", "append", "plan", "remember", "tail_start", "typical_step"]

@dataclass(frozen=True)
class PrefixState:
    """The latest request a memory built, which the next build may extend (SPEC §3.1).

    Attributes:
        messages: the context without the subtask note (what an append extends), as
            read-only copies (:func:`~relevance_memory._models.freeze`; callers get plain
            copies of them).
        sources: per message of ``messages``, the store index it copies, or ``None``.
        tokens: tokens of ``messages`` with reply priming (tokens).
        sent_tokens: tokens of the request as sent (``tokens`` plus the subtask note).
        note: the subtask note sent at the end, or ``None``.
        next_index: the first store index the next append starts at.
        final_goal: the final goal the context was built for (:attr:`TaskGoal.key`).
        budget: the budget it was built within (tokens).
        base: the record of the last compaction or full rebuild.
        base_length: how many stored messages ``base.messages`` describes.
        appended: store indices appended since ``base`` (ascending).
        skipped: store indices passed over since ``base`` (excluded on ingest).
        appended_tokens: their tokens (tokens).
        appended_ids: the message ids of ``appended``.
        appended_roots: the trace chains (root indices) of ``appended``.
        appended_steps: the steps of ``appended`` (carried so an append reads only its new
            messages, issue 24).
        history_tokens: tokens of every stored message not excluded on ingest, up to
            ``counted`` (tokens; the record's ``tokens_before`` without priming).
        counted: how many stored messages ``history_tokens`` covers.
        last_build_id: the id of the latest build.
        restore_tool: the restore tool the model was offered when ``base`` was built (its
            goal block says so), or ``None``.
        renditions: store index → the excerpt each message appended since ``base`` was sent as.
        summaries: the summaries ``base`` emitted (the next compaction carries them).
        copies: per message of ``messages``, how an append copies it for the caller
            (:func:`~relevance_memory.pipeline._copies.copy_plan`); when the lengths differ,
            every message is thawed.
    """

    messages: tuple[dict[str, Any], ...]
    sources: tuple[int | None, ...]
    tokens: int
    sent_tokens: int
    note: dict[str, Any] | None
    next_index: int
    final_goal: str
    budget: int
    base: DecisionRecord
    base_length: int
    appended: tuple[int, ...] = ()
    skipped: tuple[int, ...] = ()
    appended_tokens: int = 0
    appended_ids: tuple[str, ...] = ()
    appended_roots: frozenset[int] = frozenset()
    appended_steps: frozenset[int] = frozenset()
    history_tokens: int = 0
    counted: int = 0
    last_build_id: str = ""
    restore_tool: str | None = None
    renditions: Mapping[int, Rendition] = field(default_factory=dict)
    summaries: tuple[RenderedSummary, ...] = ()
    copies: tuple[CopyPlan, ...] = ()

    @property
    def sent(self) -> list[dict[str, Any]]:
        """The messages of the latest request as sent (the subtask note included)."""
        return [*self.messages, self.note] if self.note is not None else list(self.messages)


@dataclass(frozen=True)
class BuildStep:
    """The next build's decision and, for an append, its plan.

    Attributes:
        decision: mode, why and the target the pipeline fills.
        plan: what an append adds (``None`` without a previous context).
        note: the subtask note an append sends at the end, or ``None``.
        note_tokens: its tokens (tokens).
        renditions: store index → the excerpt a new message is appended as (SPEC §11).
    """

    decision: PrefixDecision
    plan: AppendPlan | None = None
    note: dict[str, Any] | None = None
    note_tokens: int = 0
    renditions: Mapping[int, Rendition] = field(default_factory=dict)




def _tail(store: StoreView, start: int, renditions: Mapping[int, Rendition]) -> list[TailItem]:
    """The stored messages from ``start`` as :class:`TailItem` (O(new)); an excerpted one
    counts its excerpt's tokens."""
    excluded = store.excluded
    return [
        TailItem(
            index=m.index, tokens=renditions[m.index].tokens if m.index in renditions else m.token_count, role=m.role,
            call_ids=tuple([row[0] for row in call_rows(m)]), tool_call_id=m.tool_call_id, excluded=m.id in excluded,
        )
        for m in store.messages[start:]
    ]


def _tail_renditions(previous: PrefixState, seams: Seams, goal: TaskGoal) -> dict[int, Rendition]:
    """The excerpts the new messages enter as (SPEC §11, as in a compaction: larger than their
    share of the budget). While the context is the history itself and the new messages fit
    whole, none: the context stays the history (SPEC §9)."""
    store = seams.store
    new = range(previous.next_index, len(store))
    # (the base's identity alone is not enough: an append since may have sent an excerpt, and then
    # the context is no longer the history — an oversized new message enters as an excerpt again)
    if (previous.base.identity and not previous.renditions
            and previous.tokens + sum(store[i].token_count for i in new) <= previous.budget):
        return {}
    # the pinned prompt leads the store (step -1 only while the leading system messages last): O(pinned)
    pinned = sum(m.token_count for m in itertools.takewhile(lambda m: m.step == -1, itertools.islice(store.messages, previous.next_index)))
    newest_user = next((i for i in reversed(new) if store[i].role == "user"), None)
    newest_user_tokens = 0 if newest_user is None else store[newest_user].token_count
    room = previous.budget - REPLY_PRIMING_TOKENS - pinned  # what the pinned prompt leaves
    goal_text = f"{goal.final}\n{goal.subtask}"
    # as in a compaction (partition): the other new messages enter within what the newest user
    # message leaves as it is sent
    user = newest_user_excerpt(store.messages, newest_user, room, budget=previous.budget,
                               share=seams.config.excerpt_share, goal_text=goal_text, memo=seams.renditions,
                               counter=seams.tokenizer)
    sent = user.tokens if user is not None else newest_user_tokens
    renditions = entry_renditions(
        store.messages, [i for i in new if i != newest_user], budget=previous.budget,
        share=seams.config.excerpt_share, goal_text=goal_text, memo=seams.renditions, counter=seams.tokenizer,
        room=max(1, room - sent),
    )
    if user is not None and newest_user is not None:
        renditions[newest_user] = user
    return renditions


def _note(seams: Seams, goal: TaskGoal, base: DecisionRecord) -> tuple[dict[str, Any] | None, int]:
    """The subtask note an append ends with (only after a compaction: an identity context is
    the history itself), and its tokens."""
    config = seams.config
    if not (config.cache_policy.subtask_at_end and goal.subtask and goal.subtask != goal.final) or base.identity:
        return None, 0
    note = subtask_note(goal.subtask, config.context_role)
    return note, seams.tokenizer.count_message(note)


TYPICAL_STEPS = 8
"""How many of the newest steps :func:`typical_step` averages."""


def typical_step(store: StoreView, budget: int, share: float) -> int:
    """Mean tokens of the agent's newest :data:`TYPICAL_STEPS` steps, each message counted at most
    at its entry cap (an oversized one enters as an excerpt), the newest step included
    (tokens; 0 for an empty history). O(those steps)."""
    totals: dict[int, int] = {}
    caps = entry_caps(budget, share)  # read once, not per message
    for message in reversed(store.messages):
        step = message.step
        if step < 0:
            continue
        total = totals.get(step)
        if total is None:
            if len(totals) == TYPICAL_STEPS:
                break
            total = 0
        cap, tokens = cap_of(message, caps), message.token_count
        totals[step] = total + (tokens if tokens < cap else cap)
    return sum(totals.values()) // len(totals) if totals else 0


def plan(
    previous: PrefixState | None, seams: Seams, *, goal: TaskGoal, budget: int, requested: bool = False
) -> BuildStep:
    """Decide the next build (:func:`decide_build_mode`) and plan its append (O(new)).

    Raises:
        InvalidMessageError: a tool call has no result and ``on_invalid`` is ``"raise"``
            (as a full build would).
    """
    store, config = seams.store, seams.config
    if config.on_invalid == "raise" and store.pending_calls:
        pending = store.pending_calls[0]
        raise InvalidMessageError(
            f"tool call(s) {', '.join(store.unanswered_calls(pending))} have no result; add the tool results before "
            "building, or set on_invalid='repair' to leave the unanswered call out of the context",
            index=pending,
        )
    policy = config.cache_policy
    if previous is None:
        decision = decide_build_mode(
            policy, has_previous=False, goal_changed=False, previous_budget=None, budget=budget,
            appended_tokens=0, new_messages=0, requested=requested,
        )
        return BuildStep(decision)
    renditions = _tail_renditions(previous, seams, goal)
    steps = plan_append(_tail(store, previous.next_index, renditions), previous.next_index)
    note, note_tokens = _note(seams, goal, previous.base)
    appended = previous.tokens + steps.tokens + note_tokens
    blocked = steps.blocked
    if blocked is None and seams.restore_tool != previous.restore_tool:
        # the request's tools changed, so the provider's cache misses anyway: the goal block
        # may as well say how to read archived messages
        blocked = f"the restore tool {seams.restore_tool!r} was offered (the tools changed); the goal block says so"

    def decide(step_tokens: int) -> PrefixDecision:
        return decide_build_mode(
            policy,
            step_tokens=step_tokens,
            has_previous=True,
            goal_changed=goal.key != previous.final_goal,
            previous_budget=previous.budget,
            budget=budget,
            appended_tokens=appended,
            new_messages=len(steps.indices),
            requested=requested,
            append_blocked=blocked,
        )

    # the typical step sets only a compaction's target: unasked, an append is decided without
    # it (the rules that append never read the target), and it is read when the build compacts
    unasked = None if requested else decide(0)
    decision = unasked if unasked is not None and unasked.mode == "appended" else decide(
        typical_step(store, previous.budget, config.excerpt_share))
    return BuildStep(decision, steps, note, note_tokens, renditions)


def _history_tokens(previous: PrefixState, store: StoreView) -> tuple[int, int]:
    """``(tokens, counted)``: tokens of the stored messages not excluded on ingest (O(new))."""
    total, excluded = previous.history_tokens, store.excluded
    for message in store.messages[previous.counted:]:
        if message.id not in excluded:
            total += message.token_count
    return total, len(store)


def append(
    previous: PrefixState, step: BuildStep, seams: Seams, *, goal: TaskGoal, build_number: int, budget: int
) -> tuple[BuiltContext, PrefixState]:
    """An appended build: the previous context byte for byte plus ``step.plan``'s messages,
    and the prefix state after it (what :func:`remember` gives for a pipeline build;
    ``budget``: the build's budget, tokens).

    Costs O(new messages) plus a copy of the context (the caller's own plain dicts); the
    decision record's per-message list is built on first use
    (:meth:`DecisionRecord.defer_messages`), with the strengths as of this build.
    """
    store, config, policy = seams.store, seams.config, seams.config.cache_policy
    steps = step.plan
    assert steps is not None
    # each new message's read-only form (the next append's prefix), the caller's plain copy and
    # its copy plan: a verbatim one's read-only form is the stored one (no copy)
    new_frozen = [freeze(step.renditions[i].message) if i in step.renditions else store[i].raw for i in steps.indices]
    new = [thaw(m) for m in new_frozen]
    new_plans = [copy_plan(m, plain) for m, plain in zip(new_frozen, new, strict=True)]  # before the caller has them
    messages = plain_copies(previous.messages, previous.copies)  # plain copies: O(context), mostly in C
    messages += new
    sources: list[int | None] = [*previous.sources, *steps.indices]
    if step.note is not None:
        messages.append(dict(step.note))
        sources.append(None)
    tokens = previous.tokens + steps.tokens + step.note_tokens
    # the previous context was checked and ends with whole tool blocks (plan_append holds a
    # chain back until all its results arrived): the appended tail is checked on its own
    problems = check_context(messages[len(previous.messages):])
    if problems or tokens > previous.budget:  # plan_append and the decision rule this out
        raise RelevanceMemoryError(
            f"internal error: appended context is invalid ({problems}) or over budget ({tokens} > "
            f"{previous.budget}); please report this with the decision record"
        )
    prefix = previous.tokens - REPLY_PRIMING_TOKENS
    base = previous.base
    history, counted = _history_tokens(previous, store)
    held = set(steps.held_back)
    appended = (*previous.appended, *steps.indices)
    skipped = (*previous.skipped, *steps.skipped)
    roots, steps_seen = _appended_chains(previous, steps.indices, store)
    appended_roots = len(roots)
    appended_tokens = previous.appended_tokens + steps.tokens
    build_id = hashlib.sha256(
        f"{build_number}|{len(store)}|{goal.final}|{goal.subtask}|{previous.budget}|appended".encode()
    ).hexdigest()[:12]
    # the excerpts the messages appended since the base were sent as, these included
    sent_renditions = {**previous.renditions, **{i: r for i, r in step.renditions.items() if i in steps.indices}}
    warnings = list(base.warnings)
    if held:
        warnings.append(
            f"{len(held)} message(s) of a tool chain whose results have not all arrived are held back; "
            "they are appended with their results"
        )
    record = _made_like(
        DecisionRecord,
        build_id=build_id,
        created_at=seams.clock(),
        goal=goal,
        budget=previous.budget,
        encoding=seams.tokenizer.name,
        tokens_before=REPLY_PRIMING_TOKENS + history - sum(store[i].token_count for i in held),
        tokens_after=tokens,
        messages_before=len(store),
        messages_after=len(messages),
        keep_recent=config.keep_recent,
        working_steps=base.working_steps + len(steps_seen - {-1}),
        # the context is the history itself only while every appended message went verbatim
        identity=base.identity and not held and not skipped and not sent_renditions,
        goal_block=base.goal_block,
        scorer=base.scorer,
        scorer_model=base.scorer_model,
        rubric_version=base.rubric_version,
        usage=_made_like(ScorerUsage),
        chains_kept=base.chains_kept + appended_roots,
        chains_total=base.chains_total + appended_roots,
        summaries=list(base.summaries),
        warnings=warnings,
        budget_breakdown=_appended_breakdown(base.budget_breakdown, previous.budget, appended_tokens, len(appended),
                                             step.note_tokens, base.build_id),
        mode="appended",
        mode_reason=step.decision.why,
        base_build_id=base.build_id,
        appended_ids=[store[i].id for i in steps.indices],
        prefix_tokens=prefix,
        cacheable_tokens=policy.cacheable(prefix),
    )
    others = [*held, *steps.skipped]
    strengths = _strengths(seams, [*appended, *others],
                           [*previous.appended_ids, *record.appended_ids, *(store[i].id for i in others)])
    renditions = {**previous.renditions, **step.renditions}
    record.defer_messages(_lazy_decisions(base, previous.base_length, store, appended, skipped, held, strengths,
                                          renditions))
    built = BuiltContext(messages=messages, record=record, sources=tuple(sources))
    end = len(messages) - (1 if step.note is not None else 0)
    state = PrefixState(
        messages=(*previous.messages, *new_frozen), sources=tuple(sources[:end]),
        tokens=tokens - step.note_tokens, sent_tokens=tokens, note=step.note,
        next_index=steps.next_index, final_goal=goal.key, budget=budget, base=base,
        base_length=previous.base_length, appended=appended, skipped=skipped, appended_tokens=appended_tokens,
        history_tokens=history, counted=counted, appended_ids=(*previous.appended_ids, *record.appended_ids),
        appended_roots=roots, appended_steps=steps_seen, last_build_id=build_id, restore_tool=previous.restore_tool,
        renditions=sent_renditions,
        summaries=previous.summaries, copies=(*previous.copies, *new_plans),
    )
    return built, state


_Model = TypeVar("_Model", bound=BaseModel)
_TEMPLATES: dict[tuple[type[BaseModel], frozenset[str]], tuple[Any, tuple[tuple[str, type], ...]]] = {}


def _made_like(cls: type[_Model], **fields: Any) -> _Model:
    """``cls(**fields)``, made as a copy of an instance validated once with the same fields,
    updated with these (``model_copy``), when each value is of the exact type validation gave
    that field then (every list and dict passed must be a new one the model may own). Any other
    value — a clock's string, a seam's float or str subclass — is validated, as before. An
    append makes its record this way: validating a record's 35 fields runs more of pydantic's
    code than the rest of the append, a cost paid in full on the first append after a
    compaction, whose CPU caches the compaction emptied (issue 24). Equal to the validated
    instance, field types included (tested)."""
    key = (cls, frozenset(fields))
    known = _TEMPLATES.get(key)
    if known is None:
        made = cls(**fields)
        kinds = tuple((name, type(made.__dict__[name])) for name in fields)
        # the template holds none of this call's values (every copy replaces them all): a
        # record's summaries or breakdown are not kept alive by it
        _TEMPLATES[key] = (made.model_copy(update=dict.fromkeys(fields)), kinds)
        return made
    template, kinds = known
    for name, kind in kinds:
        if type(fields[name]) is not kind:  # not what validation gives: validate
            return cls(**fields)
    copy: _Model = template.model_copy(update=fields)
    return copy


_APPENDED, _SUBTASK = Purpose.APPENDED.value, Purpose.SUBTASK.value  # read once (an enum's value is a Python property)


def _appended_breakdown(
    base: BudgetBreakdown | None, budget: int, appended: int, count: int, note_tokens: int, base_id: str
) -> BudgetBreakdown:
    """The base build's breakdown plus the messages appended since it (and the subtask note)."""
    spent = dict(base.spent) if base is not None else {}
    lines = list(base.lines) if base is not None else []
    spent[_APPENDED] = spent.get(_APPENDED, 0) + appended
    lines.append(_made_like(
        BudgetLine, purpose=_APPENDED, tokens=appended, kind="spend",
        note=f"{count} message(s) appended verbatim since build {base_id}",
    ))
    base_note = spent.get(_SUBTASK, 0)
    if base_note != note_tokens:
        spent[_SUBTASK] = note_tokens
        lines.append(_made_like(BudgetLine, purpose=_SUBTASK, tokens=note_tokens, kind="spend",
                                note="the current subtask, shown at the end"))
    return _made_like(BudgetBreakdown, budget=budget, spent=spent, unused=budget - sum(spent.values()), lines=lines)


def _lazy_decisions(
    base: DecisionRecord,
    base_length: int,
    store: StoreView,
    appended: Sequence[int],
    skipped: Sequence[int],
    held: set[int],
    strengths_at_build: Callable[[], dict[int, float | None]],
    renditions: Mapping[int, Rendition],
) -> Callable[[], list[MessageDecision]]:
    """The appended build's per-message decisions, computed when first read: the base build's
    decisions, then every message stored since, as appended (``recent``), held back or
    excluded (strengths as of the build: ``strengths_at_build``)."""
    length = len(store)
    added, passed = set(appended), set(skipped)
    excluded = dict(store.excluded)

    def build() -> list[MessageDecision]:
        strengths = strengths_at_build()
        out: list[MessageDecision] = []
        for decision in base.messages:
            out.append(_appended_decision(store, decision.index, strengths, renditions) if decision.index in added
                       else _linked(store, decision))
        for i in range(base_length, length):
            message = store[i]
            if i in added:
                out.append(_appended_decision(store, i, strengths, renditions))
                continue
            common: dict[str, Any] = {
                "id": message.id, "index": i, "step": message.step, "role": message.role,
                "msg_type": message.msg_type.value, "tokens": message.token_count, "strength": strengths.get(i),
                "chain_id": store[store.chain_root(i)].id, "tier": "archive", "decision": "dropped",
            }
            if i in passed or message.id in excluded:
                decision = MessageDecision(**common, reason="excluded on ingest", note=excluded.get(message.id, ""))
            elif i in held:
                decision = MessageDecision(
                    **common, reason="tool chain waiting for its results",
                    note="held back; appended together with its tool results",
                )
            else:  # not reachable: every stored message is appended, held, skipped or in the base
                decision = MessageDecision(**common, reason="not in this context")
            out.append(_linked(store, decision))
        return out

    return build


def _appended_chains(previous: PrefixState, indices: Sequence[int], store: StoreView) -> tuple[frozenset[int], frozenset[int]]:
    """The chain roots and steps of every message appended since the base, the previous
    build's plus ``indices``' (O(new)). A message joined to an older chain by a caller's
    ``trace_id`` may merge chains, moving earlier messages' roots: then every root is read
    again."""
    if any(store[i].trace_id is not None for i in indices):
        appended = (*previous.appended, *indices)
        roots = frozenset(store.chain_root(i) for i in appended)
    else:
        roots = previous.appended_roots | {store.chain_root(i) for i in indices}
    return roots, previous.appended_steps | {store[i].step for i in indices}


def _strengths(seams: Seams, indices: Sequence[int], ids: Sequence[str]) -> Callable[[], dict[int, float | None]]:
    """Pheromone strength of each message (``indices``, with their ``ids``) as of now
    (``None`` without the field), computed when called. A plain
    :class:`~relevance_memory.pheromone._field.PheromoneField` is read from the cells it holds now
    (immutable: one lookup each, settled later, the same floats); another memory (a
    board's) is asked now."""
    if not seams.config.pheromone.enabled:
        return lambda: dict.fromkeys(indices)
    field = seams.pheromone
    if not isinstance(field, PheromoneField) or type(field).strength is not PheromoneField.strength:
        now: dict[int, float | None] = {i: round(field.strength(m), 4) for i, m in zip(indices, ids, strict=True)}
        return lambda: now
    tick, config, cells = field.tick, field.config, field.cells_of(ids)

    def settle() -> dict[int, float | None]:
        return {i: round(settled_strength(c, tick, config), 4) if c is not None else 0.0
                for i, c in zip(indices, cells, strict=True)}

    return settle


def _linked(store: StoreView, decision: MessageDecision) -> MessageDecision:
    """``decision`` with the supersede links the store holds now, both ways (SPEC §8; issue 23:
    an appended build's record marks a value restated since the last compaction)."""
    link = store.superseded_by.get(decision.id)
    newer = list(store.supersedes.get(decision.id, ()))
    superseded_by, reason = (link.newer, link.reason) if link is not None else (None, "")
    if (decision.superseded_by, decision.supersede_reason, decision.supersedes) == (superseded_by, reason, newer):
        return decision
    return decision.model_copy(update={"superseded_by": superseded_by, "supersede_reason": reason, "supersedes": newer})


def _appended_decision(
    store: StoreView, i: int, strengths: dict[int, float | None], renditions: Mapping[int, Rendition]
) -> MessageDecision:
    message = store[i]
    found = renditions.get(i)
    return _linked(store, MessageDecision(
        id=message.id, index=i, step=message.step, role=message.role, msg_type=message.msg_type.value,
        tokens=message.token_count, strength=strengths.get(i),
        tier="recent", decision="recent", score_source=ScoreSource.RECENT,
        reason="appended since the last compaction" if found else "appended verbatim since the last compaction",
        chain_id=store[store.chain_root(i)].id,
        fidelity=found.fidelity if found else "verbatim", sent_tokens=found.tokens if found else message.token_count,
        note=found.note if found else "",
    ))


def tail_start(store: StoreView) -> int:
    """Where the next append starts after a full build: one past the last stored message,
    or the first message of a trailing tool chain still waiting for results (left out of
    the build under ``on_invalid="repair"``; it is appended with its results)."""
    pending = store.pending_calls
    if not pending:
        return len(store)
    roots = {store.chain_root(p) for p in pending}
    start = min(roots)
    if all(store.chain_root(i) in roots for i in range(start, len(store))):
        return start
    return len(store)


def remember(
    previous: PrefixState | None,
    built: BuiltContext,
    seams: Seams,
    *,
    final_goal: str,
    budget: int,
) -> PrefixState:
    """The prefix state after the pipeline build ``built`` (an appended build makes its own:
    :func:`append`); also fills the record's prefix accounting against the previous request
    (``prefix_tokens``, ``cacheable_tokens``).
    """
    store, policy = seams.store, seams.config.cache_policy
    record = built.record
    counter = seams.tokenizer
    if previous is not None:
        prefix = shared_prefix_tokens(
            previous.sent, built.messages, count_message=counter.count_message, count_text=counter.count_text
        )
        record.prefix_tokens = prefix
        record.cacheable_tokens = policy.cacheable(prefix)
    note_tokens = record.budget_breakdown.spent.get(Purpose.SUBTASK.value, 0) if record.budget_breakdown else 0
    has_note = bool(note_tokens) and bool(built.messages)
    body = built.messages[:-1] if has_note else built.messages
    sources = built.sources[:-1] if has_note else built.sources
    start = tail_start(store)
    held = sum(m.token_count for m in store.messages[start:] if m.id not in store.excluded)
    return PrefixState(
        messages=tuple(freeze(m) for m in body), sources=tuple(sources), copies=tuple(copy_plan(m) for m in body),
        tokens=record.tokens_after - note_tokens, sent_tokens=record.tokens_after,
        note=dict(built.messages[-1]) if has_note else None,
        next_index=start, final_goal=final_goal, budget=budget, base=record, base_length=len(store),
        history_tokens=record.tokens_before - REPLY_PRIMING_TOKENS + held, counted=len(store),
        last_build_id=record.build_id, restore_tool=seams.restore_tool, summaries=built.summaries,
    )

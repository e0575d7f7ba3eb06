"""The memory manager: wires ingest → partition → prefilter → score → pheromone → select →
summarise → assemble → record.

The manager holds state (the append-only store, the goal, the score cache) and does
no I/O itself; scoring goes through the :class:`Scorer` seam, token counting through
the :class:`TokenCounter` seam, time through the injected clock.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, cast

from ._assemble import check_context, goal_block_text
from ._cache import DiskScoreCache
from ._config import LOCAL_PREFILTER_MIN, MemoryConfig
from ._exceptions import ConfigError, ContextOverflowError, InvalidMessageError, RelevanceMemoryError
from ._models import Message, RelevanceScore, ScoreSource, TaskGoal, content_text
from ._pheromone import PheromoneField
from ._prefilter import ChunkedBM25, prefilter_chains
from ._record import DecisionRecord, MessageDecision, SummaryRecord
from ._scoring import (
    InMemoryScoreCache,
    OfflineScorer,
    ScoreCache,
    ScoreItem,
    Scorer,
    ScorerUsage,
    ScoringContext,
    ScoringResult,
    message_cache_key,
    score_cache_prefix,
)
from ._select import Chain, Partition, Selection, partition, select_chains
from ._store import MessageStore
from ._summary import OfflineSummarizer, PyramidResult, Summarizer, SummaryCache, SummaryItem, build_pyramid
from ._text import lexical_terms
from ._tokenizer import REPLY_PRIMING_TOKENS, TiktokenCounter, TokenCounter

__all__ = ["BuiltContext", "RelevanceMemoryManager"]

GOAL_EXCERPT_SHARE = 0.5
PREFILTER_RECENT_WEIGHT = 0.3
"""Weight of recent-step terms against goal + subtask terms in the prefilter's BM25."""
"""Share of the remaining budget a goal-block excerpt of an oversized task statement may take."""
PREFILTER_QUERY_TERMS = 256
"""Most distinct terms in the prefilter's BM25 query (goal terms first, then recent steps)."""
SUMMARY_RESERVE_SHARE = 0.1
"""Share of the budget reserved for summaries when ``summary_budget`` is 0."""
MIN_SUMMARY_RESERVE = 64
"""Least tokens reserved for summaries when ``summary_budget`` is 0 (room for one small summary)."""


@dataclass(frozen=True)
class BuiltContext:
    """The result of one build.

    Attributes:
        messages: OpenAI chat dicts to send, valid for the API and within the budget.
        record: the :class:`DecisionRecord` of the build.
    """

    messages: list[dict[str, Any]]
    record: DecisionRecord

    @property
    def token_count(self) -> int:
        """Tokens of ``messages`` including reply priming (tokens); ≤ ``record.budget``."""
        return self.record.tokens_after


@dataclass
class _Plan:
    """State of one build between the pure stages and the scoring seam."""

    budget: int
    goal: TaskGoal
    excluded: dict[int, str]
    part: Partition
    used: int
    goal_text: str | None
    goal_tokens: int
    recent: set[int] = field(default_factory=set)  # chain roots kept as working memory
    needs_scores: list[int] = field(default_factory=list)
    candidates: dict[int, Chain] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    task_root: int | None = None
    from_cache: set[int] = field(default_factory=set)
    skipped: dict[int, str] = field(default_factory=dict)  # candidate root → why it is not scored


class RelevanceMemoryManager:
    """Keeps every message and builds a relevant, budgeted context before each LLM call.

    Args:
        config: a :class:`MemoryConfig`; keyword overrides are applied on top of it.
        scorer: relevance scorer; default :class:`OfflineScorer` (no network).
        score_cache: score cache; default an in-process LRU (:class:`InMemoryScoreCache`), or
            :class:`DiskScoreCache` in ``config.score_cache_dir`` when that is set.
        summarizer: summarizer of the archive (SPEC §7); default :class:`OfflineSummarizer`.
        tokenizer: token counter; default exact tiktoken counts for ``config.model``.
        clock: returns "now" (timezone-aware); injected for tests.
        **overrides: any :class:`MemoryConfig` field, e.g. ``max_input_tokens=8000``.

    Raises:
        ConfigError: a setting is invalid.

    Example::

        memory = RelevanceMemoryManager(max_input_tokens=8000, keep_recent=4)
        memory.extend(history)                     # OpenAI chat dicts
        memory.set_goal(subtask="run the failing test")
        built = memory.build_context()
        client.chat.completions.create(model="gpt-4o", messages=built.messages)
    """

    def __init__(
        self,
        config: MemoryConfig | None = None,
        *,
        scorer: Scorer | None = None,
        score_cache: ScoreCache | None = None,
        tokenizer: TokenCounter | None = None,
        clock: Callable[[], datetime] | None = None,
        summarizer: Summarizer | None = None,
        **overrides: Any,
    ) -> None:
        if overrides:
            base = config.model_dump() if config else {}
            config = MemoryConfig.create(**{**base, **overrides})
        self.config = config or MemoryConfig()
        self.scorer: Scorer = scorer or OfflineScorer()
        self._offline = OfflineScorer()
        if score_cache is None and self.config.score_cache_dir:
            score_cache = DiskScoreCache(self.config.score_cache_dir)
        self.score_cache: ScoreCache = score_cache if score_cache is not None else InMemoryScoreCache()
        # a context-dependent scorer's score reads this history (references, task statement,
        # term statistics): it is cached for this manager only, never shared or on disk
        self._history_scores: ScoreCache = InMemoryScoreCache()
        self.summarizer: Summarizer = summarizer or OfflineSummarizer()
        self.summary_cache = SummaryCache()
        self.pheromone = PheromoneField(self.config.pheromone)
        self._bm25 = ChunkedBM25()
        self._bm25_docs: list[list[str]] = []
        self.tokenizer: TokenCounter = tokenizer or TiktokenCounter(
            self.config.resolved_encoding, image_tokens=self.config.image_tokens
        )
        self._clock = clock or (lambda: datetime.now(timezone.utc))
        self.store = MessageStore(
            self.tokenizer,
            on_invalid=self.config.on_invalid,
            reference_max_df=self.config.reference_max_df,
            clock=self._clock,
        )
        self._final: str | None = None
        self._subtask: str = ""
        self._builds = 0

    # ------------------------------------------------------------------ messages
    def add(self, message: Mapping[str, Any], **metadata: Any) -> Message:
        """Ingest one OpenAI chat dict (SPEC §3 step 1); returns the stored message.

        Keyword metadata: ``id``, ``msg_type``, ``trace_id``, ``parent_id``,
        ``producer``, ``scope``, ``timestamp``.

        Raises:
            InvalidMessageError: the message is invalid (see :class:`MessageStore`).
        """
        return self.store.add(message, **metadata)

    def extend(self, messages: Iterable[Mapping[str, Any]]) -> list[Message]:
        """Ingest many OpenAI chat dicts in order. Raises :class:`InvalidMessageError`."""
        return self.store.extend(messages)

    @property
    def messages(self) -> list[Message]:
        """Every stored message, oldest first (the append-only store)."""
        return self.store.messages

    def fresh(self, messages: Iterable[Mapping[str, Any]] = ()) -> RelevanceMemoryManager:
        """A new manager like this one, holding ``messages`` (OpenAI chat dicts, ingested in order).

        The store is append-only, so a caller whose history was edited starts over with
        this. The new manager shares the config, scorer, score cache (unchanged messages
        are not re-scored by a content-keyed scorer such as the LLM one), summarizer,
        tokenizer and clock, and carries over the explicit final goal and the subtask.

        Raises:
            InvalidMessageError: a message of ``messages`` is invalid.
        """
        other = RelevanceMemoryManager(
            self.config, scorer=self.scorer, score_cache=self.score_cache, tokenizer=self.tokenizer, clock=self._clock,
            summarizer=self.summarizer,
        )
        other.set_goal(final=self._final, subtask=self._subtask)
        other.extend(messages)
        return other

    # ------------------------------------------------------------------ goal
    def set_goal(self, final: str | None = None, subtask: str | None = None) -> TaskGoal:
        """Set the final goal and/or the current subtask; ``None`` leaves a layer as it is.

        Returns the goal in force. Until a final goal is set, the first user message is
        the final goal.
        """
        if final is not None:
            self._final = final.strip() or None
        if subtask is not None:
            self._subtask = subtask.strip()
        return self.goal

    @property
    def goal(self) -> TaskGoal:
        """The task goal in force (SPEC §2)."""
        if self._final:
            return TaskGoal(final=self._final, subtask=self._subtask, source="explicit")
        first = self.store.first_user_index
        if first is not None:
            text = content_text(self.store[first].content).strip()
            return TaskGoal(final=text, subtask=self._subtask, source="first_user_message")
        return TaskGoal(final="", subtask=self._subtask, source="none")

    # ------------------------------------------------------------------ build
    def build_context(self, *, budget: int | None = None) -> BuiltContext:
        """Build the context for the next LLM call (SPEC §3).

        Args:
            budget: token budget for this build (tokens); default from the config.

        Returns:
            A :class:`BuiltContext` with valid OpenAI messages within the budget.

        Raises:
            ContextOverflowError: the pinned prompt plus the newest step cannot fit.
            InvalidMessageError: tool calls have no results (with ``on_invalid="raise"``).
        """
        plan, early = self._begin(budget)
        if early is not None:
            return early
        scores, result, hits = self._lookup(plan)
        if plan.needs_scores:
            result = self._run_scorer(plan, scores)
        return self._finish(plan, scores, result, hits)

    async def abuild_context(self, *, budget: int | None = None) -> BuiltContext:
        """Async :meth:`build_context`: awaits the scorer's ``ascore`` when it has one,
        otherwise runs its blocking ``score`` in a worker thread."""
        plan, early = self._begin(budget)
        if early is not None:
            return early
        scores, result, hits = self._lookup(plan)
        if plan.needs_scores:
            ascore = getattr(self.scorer, "ascore", None)
            if ascore is not None:
                result = await self._arun_scorer(plan, scores, ascore)
            else:
                result = await asyncio.to_thread(self._run_scorer, plan, scores)
        return self._finish(plan, scores, result, hits)

    # ------------------------------------------------------------------ stages
    def _excluded(self) -> dict[int, str]:
        store = self.store
        excluded = {store.get(mid).index: why for mid, why in store.excluded.items()}
        for pending in store.pending_calls:  # kept incrementally on ingest: no scan per build
            message = store[pending]
            missing = store.unanswered_calls(pending)
            if self.config.on_invalid == "raise":
                raise InvalidMessageError(
                    f"tool call(s) {', '.join(missing)} have no result; add the tool results before "
                    "building, or set on_invalid='repair' to leave the unanswered call out of the context",
                    index=message.index,
                )
            root = store.chain_root(message.index)
            for other in store.messages[root:]:
                if store.chain_root(other.index) == root:
                    excluded[other.index] = f"tool call(s) {', '.join(missing)} have no result"
        return excluded

    def _begin(self, budget: int | None) -> tuple[_Plan, BuiltContext | None]:
        budget = budget if budget is not None else self.config.token_budget()
        if budget <= 0:
            raise ConfigError(f"budget must be a positive number of tokens, got {budget}")
        store = self.store
        goal = self.goal
        excluded = self._excluded()
        if self.config.pheromone.enabled:  # SPEC §5: new messages, reinforcement, ticks
            self.pheromone.observe(store.messages)
        roots = [store.chain_root(i) for i in range(len(store))]
        newest_user = next(
            (m.index for m in reversed(store.messages) if m.role == "user" and m.index not in excluded), None
        )
        part = partition(
            store.messages,
            roots,
            keep_recent=self.config.keep_recent,
            step_count=store.step_count,
            excluded=set(excluded),
            newest_user=newest_user,
        )
        pinned_tokens = sum(store[i].token_count for i in part.pinned)
        plan = _Plan(budget, goal, excluded, part, pinned_tokens + REPLY_PRIMING_TOKENS, None, 0)
        total = plan.used + sum(c.tokens for c in part.chains.values())
        if total <= budget:  # SPEC §9: under budget with nothing to drop, output == input
            plan.recent = set(part.chains)
            return plan, self._complete(plan, {}, None, 0, identity=True)

        forced_tokens = sum(part.chains[r].tokens for r in part.forced)
        if plan.used + forced_tokens > budget:
            raise ContextOverflowError(
                budget=budget, pinned_tokens=pinned_tokens, newest_step_tokens=forced_tokens + REPLY_PRIMING_TOKENS
            )
        plan.used += forced_tokens
        plan.recent.update(part.forced)
        first_user = store.first_user_index
        if first_user is not None and first_user not in excluded:
            # the first user message is the task statement of an agent run, also when the
            # caller states the goal in other words (--goal must add to it, not replace it)
            plan.task_root = roots[first_user]
        self._plan_goal_block(plan, final_excerpt=None)
        # the task statement outranks older working memory: keep room for it when it can fit
        reserve = 0
        if plan.task_root is not None and plan.task_root in part.candidates:
            task_tokens = part.chains[plan.task_root].tokens
            reserve = task_tokens if plan.used + task_tokens <= budget else 0
        # the rest of working memory, newest first, while it fits
        for n, root in enumerate(part.working):
            tokens = part.chains[root].tokens
            if plan.used + tokens + reserve > budget:
                shed = part.working[n:]
                plan.warnings.append(
                    f"working memory reduced: {len(shed)} older recent chain(s) did not fit the budget "
                    "and were scored like older messages"
                )
                part.candidates.extend(shed)
                break
            plan.used += tokens
            plan.recent.add(root)
        plan.candidates = {r: part.chains[r] for r in part.candidates}
        # SPEC §5 forget threshold: archive without re-scoring. Strengths and latest scores
        # were earned under a final goal; a different final goal (a new task, a new question)
        # starts from fresh scores, so forgetting and carry-over apply within one task only.
        if self.config.pheromone.enabled:
            threshold = self.config.pheromone.forget_threshold
            promote = self.config.promote_after_references
            for root, chain in plan.candidates.items():
                if (
                    root != plan.task_root
                    and all(
                        self.pheromone.forgotten_for(store[i].id, goal.final, goal.effective_subtask)
                        for i in chain.members
                    )
                    # a chain raised by references (SPEC §3 step 6) is not forgotten
                    and not any(len(store.referenced_by.get(store[i].id, ())) >= promote for i in chain.members)
                ):
                    plan.skipped[root] = f"forgotten: strength < {threshold} with score ≤ 2 (not re-scored)"
        plan.needs_scores = sorted(
            i for root, chain in plan.candidates.items() if root not in plan.skipped for i in chain.members
        )
        # an oversized task statement is shown as an excerpt inside the goal block
        if (
            goal.source == "first_user_message"
            and plan.task_root is not None
            and plan.task_root in plan.candidates
            and self.config.goal_block
        ):
            task_tokens = plan.candidates[plan.task_root].tokens
            if plan.used + task_tokens > budget and plan.used - plan.goal_tokens + task_tokens <= budget:
                # leaving the goal block out makes room for the task statement itself
                plan.used -= plan.goal_tokens
                plan.goal_text, plan.goal_tokens = None, 0
                plan.warnings.append("goal block left out to keep the task statement verbatim")
            elif plan.used + task_tokens > budget:
                room = budget - plan.used + plan.goal_tokens
                excerpt_tokens = max(0, int(room * GOAL_EXCERPT_SHARE))
                excerpt = _clip_to_tokens(self.tokenizer, goal.final, excerpt_tokens)
                plan.used -= plan.goal_tokens
                self._plan_goal_block(plan, final_excerpt=excerpt)
                plan.warnings.append(
                    f"task statement ({task_tokens} tokens) does not fit; the goal block carries an excerpt"
                )
        return plan, None

    def _plan_goal_block(self, plan: _Plan, *, final_excerpt: str | None) -> None:
        plan.goal_text, plan.goal_tokens = None, 0
        if not self.config.goal_block or (not plan.goal.final and not plan.goal.subtask):
            return
        first_user = self.store.first_user_index
        pointer = final_excerpt is None and plan.goal.source == "first_user_message"
        text = goal_block_text(
            plan.goal,
            final_excerpt=None if pointer else (final_excerpt if final_excerpt is not None else plan.goal.final),
            task_statement_id=self.store[first_user].id if first_user is not None else None,
        )
        tokens = self.tokenizer.count_message({"role": self.config.context_role, "content": text})
        if plan.used + tokens > plan.budget:
            plan.warnings.append(f"goal block ({tokens} tokens) left out: it does not fit the budget")
            return
        plan.goal_text, plan.goal_tokens = text, tokens
        plan.used += tokens

    def _items(self, plan: _Plan, indices: Sequence[int]) -> list[ScoreItem]:
        store = self.store
        task_index = self.store.first_user_index if plan.task_root is not None else None
        items = []
        for i in indices:
            m = store[i]
            items.append(
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
                )
            )
        return items

    @property
    def _cache_for_scorer(self) -> ScoreCache:
        """The shared score cache (SPEC §6), or this manager's own for a context-dependent
        scorer: the offline scorer's scores depend on the history (term statistics,
        references, which message is the task statement), so another history — in another
        manager or process, through a shared ``score_cache_dir`` — must never read them."""
        return self._history_scores if getattr(self.scorer, "context_dependent", False) else self.score_cache

    def _cache_keys(self, prefix: str, message: Message) -> tuple[str, ...]:
        """Score-cache keys of ``message``, the first to read first (SPEC §6).

        Every score is stored under a key naming the message, so equal texts keep their own
        scores and a rebuild reads back exactly what the build before it scored; a scorer
        whose score depends only on content also shares it under SPEC §6's content key (a
        re-ingested or resynced history hits). A ``context_dependent`` scorer (the offline
        one) gets only the per-message key, with the message's current reference count.
        """
        key = functools.partial(
            message_cache_key, prefix, content_hash=message.content_hash, role=message.role,
            msg_type=message.msg_type.value,
        )
        if getattr(self.scorer, "context_dependent", False):
            return (key(message_id=message.id, referenced_by=len(self.store.referenced_by.get(message.id, ()))),)
        return (key(message_id=message.id), key())

    def _cache_prefix(self, goal: TaskGoal) -> str:
        return score_cache_prefix(rubric_version=self.scorer.rubric_version, model=self.scorer.model, goal=goal)

    def _lookup(self, plan: _Plan) -> tuple[dict[int, RelevanceScore], ScoringResult | None, int]:
        """Cache look-up (SPEC §6); leaves only the misses in ``plan.needs_scores``."""
        scores: dict[int, RelevanceScore] = {}
        misses: list[int] = []
        prefix = self._cache_prefix(plan.goal)
        for i in plan.needs_scores:
            cached = None
            for key in self._cache_keys(prefix, self.store[i]):
                cached = self._cache_for_scorer.get(key)
                if cached is not None:
                    break
            if cached is None:
                misses.append(i)
            else:
                scores[i] = cached
                plan.from_cache.add(i)
        plan.needs_scores = misses
        self._prefilter(plan, scores)
        hits = sum(1 for i in scores if self._root_of(i) not in plan.skipped)
        return scores, None, hits

    def _root_of(self, index: int) -> int:
        return self.store.chain_root(index)

    def _prefilter(self, plan: _Plan, scores: dict[int, RelevanceScore]) -> None:
        """SPEC §3 step 3: when candidates exceed ``prefilter_top_n``, BM25 over goal +
        subtask + recent steps picks the chains the build considers (and the scorer sees).

        Every live candidate chain is ranked, scored or not, and the quota counts every
        message, so the same history and goal always admit the same chains: a rebuild
        with nothing new is stable and sends nothing to the scorer. Chains with the task
        statement, a user instruction, a high-strength member, or a member scored core
        (≥ ``core_score``; SPEC says core is always kept) by an earlier subtask of this task
        always pass; the rest go to ``archive`` as "prefiltered out" (summarised, restorable).
        Score and strength are the message's own memory from *before* the current subtask
        (pheromone field by id: :meth:`PheromoneField.score_before`, ``strength_for``), not
        a cache hit through identical content nor this subtask's own deposit, so what a build
        admits never depends on cache state and a rebuild admits exactly the same chains."""
        config = self.config
        store = self.store
        # rank every candidate, forgotten ones too (they keep consuming the quota but stay
        # archived), so chains forgotten after a build do not slide the window on the next
        candidates = sum(len(c.members) for c in plan.candidates.values())
        if config.prefilter is False or candidates <= config.prefilter_top_n:
            return
        if config.prefilter == "auto" and getattr(self.scorer, "local", False) and candidates <= LOCAL_PREFILTER_MIN:
            return
        ranked = {r: c.members for r, c in plan.candidates.items()}
        subtask = plan.goal.effective_subtask
        always = {
            r
            for r, members in ranked.items()
            if r == plan.task_root
            or any(store[i].msg_type.value == "user_instruction" for i in members)
            or (
                config.pheromone.enabled
                and any(
                    (self.pheromone.score_before(store[i].id, plan.goal.final, subtask) or 0) >= config.core_score
                    or self.pheromone.strength_for(store[i].id, plan.goal.final, subtask)
                    >= config.pheromone.prefilter_pass
                    for i in members
                )
            )
        }
        for i in range(len(self._bm25_docs), len(store)):
            self._bm25_docs.append(list(store.terms[i]))
        # the goal and subtask lead; recent steps add context at a lower weight (their
        # text can be unrelated to the goal, e.g. the newest chat turn)
        def terms_of(texts: list[str]) -> list[str]:
            query: list[str] = []
            for text in texts:
                query.extend(lexical_terms(text[:4_000]))
            return list(dict.fromkeys(query))[:PREFILTER_QUERY_TERMS]

        goal_query = terms_of([plan.goal.final, plan.goal.subtask])
        in_goal = set(goal_query)
        recent_query = [
            t
            for t in terms_of([store[i].text for r in plan.recent for i in plan.part.chains[r].members])
            if t not in in_goal
        ]
        doc_scores = self._bm25.scores(self._bm25_docs, goal_query) if goal_query else [0.0] * len(store)
        if recent_query:
            recent_scores = self._bm25.scores(self._bm25_docs, recent_query)
            doc_scores = [g + PREFILTER_RECENT_WEIGHT * r for g, r in zip(doc_scores, recent_scores, strict=True)]
        result = prefilter_chains(
            ranked,
            doc_scores,
            top_n=config.prefilter_top_n,
            always=always,
            tokens={r: plan.candidates[r].tokens for r in ranked},
            min_tokens=2 * max(0, plan.budget - plan.used),
        )
        for root, best in result.rejected.items():
            plan.skipped.setdefault(root, f"prefiltered out (BM25 {best:.2f} below the top {config.prefilter_top_n})")
        if result.rejected:
            plan.needs_scores = [i for i in plan.needs_scores if self._root_of(i) not in plan.skipped]
            for i in [i for i in scores if self._root_of(i) in plan.skipped]:
                del scores[i]

    def _context(self) -> ScoringContext:
        return ScoringContext(doc_freq=self.store.doc_freq, doc_count=len(self.store))

    def _run_scorer(self, plan: _Plan, scores: dict[int, RelevanceScore]) -> ScoringResult:
        items = self._items(plan, plan.needs_scores)
        try:
            result = self.scorer.score(plan.goal, items, self._context())
        except Exception as exc:
            result = self._fallback_all(plan, items, exc)
        self._accept(plan, scores, items, result)
        return result

    async def _arun_scorer(
        self, plan: _Plan, scores: dict[int, RelevanceScore], ascore: Callable[..., Any]
    ) -> ScoringResult:
        items = self._items(plan, plan.needs_scores)
        try:
            result = cast(ScoringResult, await ascore(plan.goal, items, self._context()))
        except Exception as exc:
            result = self._fallback_all(plan, items, exc)
        self._accept(plan, scores, items, result)
        return result

    def _fallback_all(self, plan: _Plan, items: list[ScoreItem], exc: BaseException) -> ScoringResult:
        message = f"scorer {self.scorer.name} failed ({type(exc).__name__}: {exc}); offline scores used"
        warnings.warn(message, RuntimeWarning, stacklevel=4)
        offline = self._offline.score(plan.goal, items, self._context())
        return ScoringResult(
            scores=[s.model_copy(update={"source": ScoreSource.FALLBACK}) for s in offline.scores],
            usage=ScorerUsage(fallbacks=len(items)),
            warnings=[message],
        )

    def _accept(
        self, plan: _Plan, scores: dict[int, RelevanceScore], items: list[ScoreItem], result: ScoringResult
    ) -> None:
        """Take exactly one score per requested id; fill gaps with fallback scores."""
        by_id = {item.id: item for item in items}
        got: dict[str, RelevanceScore] = {}
        for score in result.scores:
            if score.id in by_id and score.id not in got:
                got[score.id] = score
        missing = [item for item in items if item.id not in got]
        if missing:
            result.warnings.append(
                f"scorer returned no score for {len(missing)} message(s); offline fallback used"
            )
            result.usage.fallbacks += len(missing)
            for score in self._offline.score(plan.goal, missing, self._context()).scores:
                got[score.id] = score.model_copy(update={"source": ScoreSource.FALLBACK})
        prefix = self._cache_prefix(plan.goal)
        for i in plan.needs_scores:
            message = self.store[i]
            score = got[message.id]
            scores[i] = score
            if score.source != ScoreSource.FALLBACK:
                for key in self._cache_keys(prefix, message):
                    self._cache_for_scorer.set(key, score)

    def _finish(
        self, plan: _Plan, scores: dict[int, RelevanceScore], result: ScoringResult | None, hits: int
    ) -> BuiltContext:
        if self.config.pheromone.enabled:  # SPEC §3 step 5: deposits, once per (message, subtask)
            self.pheromone.deposit(
                {self.store[i].id: s.score for i, s in scores.items()}, plan.goal.effective_subtask, plan.goal.final
            )
        return self._complete(plan, scores, result, hits, identity=False)

    def _select(self, plan: _Plan, scores: Mapping[int, RelevanceScore], available: int) -> Selection:
        """SPEC §3 step 6 over the scored candidates (skipped chains stay archived)."""
        config = self.config
        store = self.store
        chains = {r: c for r, c in plan.candidates.items() if r not in plan.skipped}
        referenced = {i: len(store.referenced_by.get(store[i].id, ())) for c in chains.values() for i in c.members}
        strengths = None
        if config.pheromone.enabled:
            # memory earned under another final goal (another task or question) does not
            # order or carry this one's working tier
            strengths = {
                i: self.pheromone.strength_for(store[i].id, plan.goal.final, plan.goal.effective_subtask)
                for c in chains.values()
                for i in c.members
            }
        select = functools.partial(
            select_chains,
            scores=scores,
            available=available,
            core_score=config.core_score,
            archive_score=config.archive_score,
            referenced_by=referenced,
            promote_after_references=config.promote_after_references,
            strengths=strengths,
            carry_threshold=config.pheromone.carry_threshold if strengths is not None else None,
            strength_resolution=config.pheromone.order_resolution,
            first=[plan.task_root] if plan.task_root is not None else (),
        )
        selection = select(chains)
        repeats = self._repeats(plan, chains, selection)
        if not repeats:
            return selection
        # the older copies give their room back; the selection is kept only if every newest
        # copy is still kept verbatim (greedy filling could, in principle, displace one)
        second = select({r: c for r, c in chains.items() if r not in repeats})
        if not all(newest in second.kept or newest in plan.recent for newest in set(repeats.values())):
            return selection
        for root, newest in repeats.items():
            second.tier[root] = selection.tier[root]
            second.notes[root] = f"repeat of {store[newest].id}, which is kept verbatim"
        second.repeats = repeats
        return second

    def _repeats(self, plan: _Plan, chains: Mapping[int, Chain], selection: Selection) -> dict[int, int]:
        """Older copies of a user message whose newest copy is in the context verbatim.

        Agent harnesses repeat the same user notice many times (the SWE-bench runs here repeat
        "Please always provide EXACTLY ONE action …" up to 8 times); each copy reads as a
        hard constraint and would be kept verbatim, spending the budget on one text. A
        single-message user chain is a repeat when a later user message with the same
        content and ``name`` (the speaker) is kept verbatim or in working memory; repeats are
        neither kept nor summarised (the text is in the context), and restorable from the
        store. The task statement is never a repeat.

        Returns:
            repeat chain root → index of the newest copy.
        """
        store = self.store
        shown: dict[tuple[str, str | None], int] = {}  # (content hash, name) → newest shown copy
        for root in (*plan.recent, *selection.kept):
            chain = plan.part.chains[root] if root in plan.recent else chains[root]
            for i in chain.members:
                message = store[i]
                key = (message.content_hash, message.name)
                if message.role == "user" and i > shown.get(key, -1):
                    shown[key] = i
        repeats: dict[int, int] = {}
        for root, chain in chains.items():
            message = store[root]
            if root == plan.task_root or len(chain.members) != 1 or message.role != "user":
                continue
            newest = shown.get((message.content_hash, message.name))
            if newest is not None and newest > root:
                repeats[root] = newest
        return repeats

    def _select_and_summarise(
        self, plan: _Plan, scores: Mapping[int, RelevanceScore]
    ) -> tuple[Selection, PyramidResult, set[int]]:
        """SPEC §3 steps 6–7 with the summary budget reserved.

        The reserve (``summary_budget``, or 10 % of the budget, at least
        :data:`MIN_SUMMARY_RESERVE` tokens) is never taken from the task statement or from
        user messages scored ≥ ``core_score`` (SPEC §7: a user constraint is never only in
        a summary); other chains yield to it, lowest priority first. When the
        summaries do not fit it, the reserve grows to what they need at most (working-tier
        chains yield first, they are then summarised too), and a goal block that only points
        at the kept task statement yields its room last.
        """
        config = self.config
        available = plan.budget - plan.used
        selection = self._select(plan, scores, available)
        if not config.summaries or len(selection.kept) == len(plan.candidates):
            return selection, PyramidResult(), set()
        store = self.store
        protected = sum(  # the task statement and user messages scored ≥ core never yield to summaries
            plan.candidates[r].tokens
            for r in selection.kept
            if selection.tier[r] == "core"
            and (
                r == plan.task_root
                or any(
                    store[i].role == "user" and scores[i].score >= config.core_score
                    for i in plan.candidates[r].members
                )
            )
        )
        most = max(0, available - protected)
        share = max(MIN_SUMMARY_RESERVE, int(plan.budget * SUMMARY_RESERVE_SHARE))
        reserve = min(most, config.summary_budget or share)

        def attempt(reserve: int, extra: int = 0) -> tuple[Selection, PyramidResult, set[int]]:
            chosen = self._select(plan, scores, available - reserve) if reserve > 0 else selection
            room = available - chosen.used + extra
            cap = min(room, config.summary_budget) if config.summary_budget else room
            pyramid, held = self._summarise(plan, scores, set(plan.recent) | chosen.kept, cap, chosen.repeats)
            return chosen, pyramid, held

        chosen, pyramid, held = attempt(reserve)
        for _ in range(3):  # grow the reserve to what the summaries need
            if pyramid.summaries or reserve >= most:
                break
            kept_now = set(plan.recent) | chosen.kept
            probe, _ = self._summarise(plan, scores, kept_now, most, chosen.repeats)
            if not probe.summaries:
                break
            reserve = min(most, max(reserve + 1, probe.tokens))
            chosen, pyramid, held = attempt(reserve)
        if not pyramid.summaries and self._goal_block_is_pointer(plan, set(plan.recent) | chosen.kept):
            freed = plan.goal_tokens
            plan.used -= freed
            plan.goal_text, plan.goal_tokens = None, 0
            chosen, pyramid, held = attempt(reserve, extra=freed)
            plan.warnings.append(
                f"goal block ({freed} tokens) left out to make room for the summary; "
                "it only pointed at the kept task statement"
            )
        return chosen, pyramid, held

    def _goal_block_is_pointer(self, plan: _Plan, kept_roots: set[int]) -> bool:
        """The goal block only points at the task statement, which is kept, and names no subtask."""
        return (
            plan.goal_text is not None
            and plan.goal.source == "first_user_message"
            and not plan.goal.subtask
            and plan.task_root is not None
            and plan.task_root in kept_roots
        )

    def _tool_name(self, message: Message) -> str:
        """The tool a tool result answers (from its call), else the message's source label."""
        if message.role == "tool" and message.parent_id is not None:
            parent = self.store.get(message.parent_id)
            for call in parent.tool_calls:
                if call.id == message.tool_call_id:
                    return call.name
        return message.source

    def _summarise(
        self,
        plan: _Plan,
        scores: Mapping[int, RelevanceScore],
        kept_roots: set[int],
        cap: int,
        repeats: Mapping[int, int] | None = None,
    ) -> tuple[PyramidResult, set[int]]:
        """SPEC §3 step 7: runs of consecutive archived messages → the summary pyramid.

        Returns the pyramid and the user messages scored ≥ ``core_score`` that had to be
        summarised (SPEC §7 wants them verbatim; when they cannot fit, their values in a
        summary beat dropping them, and the record warns).
        """
        store = self.store
        runs: list[list[SummaryItem]] = [[]]
        held: set[int] = set()
        for message in store.messages:
            i = message.index
            if i in plan.excluded or i in plan.part.pinned or (repeats and i in repeats):
                continue
            if store.chain_root(i) in kept_roots:
                if runs[-1]:
                    runs.append([])
                continue
            score = scores.get(i)
            if message.role == "user" and score is not None and score.score >= self.config.core_score:
                # SPEC §7 wants such a message verbatim; when even that cannot fit, its
                # values in a summary beat losing it: summarise it and say so loudly
                held.add(i)
            runs[-1].append(
                SummaryItem(
                    id=message.id,
                    role=message.role,
                    msg_type=message.msg_type.value,
                    text=content_text(message.content),
                    content_hash=message.content_hash,
                    tool_calls=tuple((c.name, c.arguments) for c in message.tool_calls),
                    source=self._tool_name(message),
                )
            )
        pyramid = build_pyramid(
            runs,
            summarizer=self.summarizer,
            cache=self.summary_cache,
            count=self.tokenizer.count_message,
            role=self.config.context_role,
            cap=cap,
        )
        if held:
            covered = {cid for summary in pyramid.summaries for cid in summary.covered_ids}
            in_summary = [store[i].id for i in sorted(held) if store[i].id in covered]
            dropped = [store[i].id for i in sorted(held) if store[i].id not in covered]
            core = self.config.core_score
            if in_summary:
                pyramid.warnings.append(
                    f"{len(in_summary)} user message(s) scored ≥ {core} ({', '.join(in_summary)}) did not fit the "
                    "budget verbatim; they are only in a summary — raise the budget to keep them whole"
                )
            if dropped:
                pyramid.warnings.append(
                    f"{len(dropped)} user message(s) scored ≥ {core} ({', '.join(dropped)}) did not fit the "
                    "budget verbatim nor in a summary; they are out of this context (restorable from the store) "
                    "— raise the budget to keep them"
                )
        return pyramid, held

    def _complete(
        self,
        plan: _Plan,
        scores: dict[int, RelevanceScore],
        result: ScoringResult | None,
        hits: int,
        *,
        identity: bool,
    ) -> BuiltContext:
        store = self.store
        config = self.config
        part = plan.part
        roots = {i: root for root, chain in part.chains.items() for i in chain.members}
        selection = None
        pyramid = PyramidResult()
        held: set[int] = set()
        if not identity:
            selection, pyramid, held = self._select_and_summarise(plan, scores)
        kept_roots = set(plan.recent) | (selection.kept if selection else set())
        out: list[dict[str, Any]] = [store[i].to_openai() for i in part.pinned]
        if plan.goal_text is not None and not identity:
            out.append({"role": config.context_role, "content": plan.goal_text})
        out.extend(dict(s.message) for s in pyramid.summaries)
        kept_indices = sorted(i for r in kept_roots for i in part.chains[r].members)
        out.extend(store[i].to_openai() for i in kept_indices)
        covered = pyramid.covered

        tokens_after = (
            REPLY_PRIMING_TOKENS
            + sum(store[i].token_count for i in part.pinned)
            + sum(store[i].token_count for i in kept_indices)
            + (plan.goal_tokens if not identity else 0)
            + pyramid.tokens
        )
        problems = check_context(out)
        if problems or tokens_after > plan.budget:
            raise RelevanceMemoryError(
                f"internal error: built context is invalid ({problems}) or over budget "
                f"({tokens_after} > {plan.budget}); please report this with the decision record"
            )

        decisions: list[MessageDecision] = []
        first_recent_step = store.step_count - config.keep_recent
        last_steps = {m.index for m in store.messages if m.step >= first_recent_step}
        newest_user_root = next(
            (roots.get(m.index) for m in reversed(store.messages) if m.role == "user" and m.index not in plan.excluded),
            None,
        )
        with_strength = config.pheromone.enabled
        for message in store.messages:
            i = message.index
            common: dict[str, Any] = {
                "id": message.id, "index": i, "step": message.step, "role": message.role,
                "msg_type": message.msg_type.value, "tokens": message.token_count,
                "strength": round(self.pheromone.strength(message.id), 4) if with_strength else None,
            }
            if i in plan.excluded:
                decisions.append(MessageDecision(
                    **common, tier="archive", decision="dropped", chain_id=store[store.chain_root(i)].id,
                    reason="excluded on ingest", note=plan.excluded[i],
                ))
                continue
            if i in part.pinned:
                decisions.append(MessageDecision(
                    **common, tier="pinned", decision="kept", score_source=ScoreSource.PINNED,
                    reason="system prompt (pinned)", chain_id=message.id,
                ))
                continue
            root = roots[i]
            chain_id = store[root].id
            if root in plan.recent:
                if identity:
                    reason = "the whole history fits the budget"
                elif newest_user_root == root and store[i].role == "user" and i not in last_steps:
                    reason = "newest user message (always kept verbatim)"
                else:
                    reason = "working memory (last steps)"
                decisions.append(MessageDecision(
                    **common, tier="recent", decision="recent", score_source=ScoreSource.RECENT,
                    reason=reason, chain_id=chain_id,
                ))
                continue
            assert selection is not None
            summarised = message.id in covered
            gone = "summarised" if summarised else "dropped"
            if root in plan.skipped:
                latest = self.pheromone.latest_score(message.id) if root not in selection.tier else None
                decisions.append(MessageDecision(
                    **common, score=latest, reason=plan.skipped[root], tier="archive",
                    decision=gone, chain_id=chain_id,  # type: ignore[arg-type]
                    note="in a summary; original restorable from the store" if summarised
                    else "archived; restorable from the store",
                ))
                continue
            score = scores[i]
            tier = selection.tier[root]
            kept = root in selection.kept
            if kept:
                note = selection.notes.get(root, "")
            elif i in held and summarised:
                note = "over budget: a user message scored ≥ 4 is only in a summary (restorable from the store)"
            elif i in held:
                note = "over budget; restorable from the store"
            elif summarised:
                note = selection.notes.get(root, "archived") + "; in a summary, original restorable from the store"
            else:
                note = selection.notes.get(root, "archived; restorable from the store")
            decisions.append(MessageDecision(
                **common, score=score.score,
                score_source=ScoreSource.CACHE if i in plan.from_cache else score.source, reason=score.reason,
                tier=tier,  # type: ignore[arg-type]
                decision="kept" if kept else gone, chain_id=chain_id,  # type: ignore[arg-type]
                note=note,
            ))

        usage = result.usage if result is not None else ScorerUsage()
        record_warnings = (
            list(plan.warnings) + (list(result.warnings) if result is not None else []) + pyramid.warnings
        )
        self._builds += 1
        build_id = hashlib.sha256(
            f"{self._builds}|{len(store)}|{plan.goal.final}|{plan.goal.subtask}|{plan.budget}".encode()
        ).hexdigest()[:12]
        tokens_before = REPLY_PRIMING_TOKENS + sum(
            m.token_count for m in store.messages if m.index not in plan.excluded
        )
        record = DecisionRecord(
            build_id=build_id,
            created_at=self._clock(),
            goal=plan.goal,
            budget=plan.budget,
            encoding=self.tokenizer.name,
            tokens_before=tokens_before,
            tokens_after=tokens_after,
            messages_before=len(store),
            messages_after=len(out),
            keep_recent=config.keep_recent,
            working_steps=len({store[i].step for r in plan.recent for i in part.chains[r].members}),
            identity=identity and not plan.excluded,
            goal_block=plan.goal_text is not None and not identity,
            scorer=self.scorer.name,
            scorer_model=self.scorer.model,
            rubric_version=self.scorer.rubric_version,
            usage=usage,
            cache_hits=hits,
            cache_misses=len(plan.needs_scores),
            chains_kept=len(kept_roots),
            chains_total=len(part.chains),
            summaries=[
                SummaryRecord(
                    level=s.level, covered_ids=list(s.covered_ids), tokens=s.tokens, exact_values=list(s.exact_values)
                )
                for s in pyramid.summaries
            ],
            warnings=record_warnings,
            messages=decisions,
        )
        return BuiltContext(messages=out, record=record)


def _clip_to_tokens(counter: TokenCounter, text: str, max_tokens: int) -> str:
    """Head and tail of ``text`` within about ``max_tokens`` tokens, with a cut marker."""
    if counter.count_text(text) <= max_tokens:
        return text
    marker = " […cut…] "
    low, high = 0, len(text)
    best = ""
    while low <= high:  # binary search on characters; counts are monotone enough for this
        mid = (low + high) // 2
        head = mid * 2 // 3
        candidate = text[:head] + marker + text[len(text) - (mid - head):] if mid else marker.strip()
        if counter.count_text(candidate) <= max_tokens:
            best, low = candidate, mid + 1
        else:
            high = mid - 1
    return best


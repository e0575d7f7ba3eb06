"""The memory manager: holds a memory's state and wires it to the build pipeline.

State: the append-only store (ingest, SPEC §3 step 1), the goal, the score and summary
caches, the pheromone memory, the prefilter's index and the build count. A build
(:meth:`RelevanceMemoryManager.build_context`) hands a :class:`BuildState` and the seams to
:mod:`relevance_memory.pipeline`, which runs the stages; the manager does no I/O itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timezone
from typing import Any

from . import pipeline
from ._cache import DiskScoreCache
from ._capabilities import ScorerCapabilities
from ._config import MemoryConfig
from ._exceptions import ConfigError, ContextOverflowError
from ._models import Message, TaskGoal, content_text
from ._pheromone import PheromoneField
from ._scoring import InMemoryScoreCache, OfflineScorer, ScoreCache, Scorer
from ._store import MessageStore
from ._summary import OfflineSummarizer, Summarizer, SummaryCache
from ._tokenizer import TiktokenCounter, TokenCounter
from .pipeline import BuildState, BuiltContext, Seams
from .pipeline import append as prefix_builds
from .pipeline._bm25 import PrefilterIndex
from .pipeline._deposits import DepositLog
from .pipeline.append import BuildStep, PrefixState
from .pipeline.order import DEFAULT_ORDER, OrderPolicy

__all__ = ["BuiltContext", "RelevanceMemoryManager"]

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
        order: how selection orders each tier (:class:`OrderPolicy`; default
            :data:`~relevance_memory.pipeline.order.DEFAULT_ORDER`, SPEC §3 step 6).
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
        order: OrderPolicy | None = None,
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
        self._deposits = DepositLog()
        self._prefilter_index = PrefilterIndex()
        self.order: OrderPolicy = order or DEFAULT_ORDER
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
        self._prefix: PrefixState | None = None

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
        this (the managed client does, on every resync). The new manager shares the config,
        scorer, tokenizer, clock, order policy and summarizer, carries over the explicit
        final goal and the subtask, and keeps the memory of what did not change:

        - the score caches (the shared one, and this history's own for a context-dependent
          scorer such as the offline one): unchanged messages are not re-scored;
        - the summary cache: unchanged runs of archived messages are not summarised again;
        - the pheromone memory of the leading messages that are the same as here (id, role,
          content, tool calls): this memory's deposits are replayed for them onto the new
          field, so their strengths and latest scores carry over (SPEC §5); messages from the
          first changed one on start afresh.

        Raises:
            InvalidMessageError: a message of ``messages`` is invalid.
        """
        other = RelevanceMemoryManager(
            self.config, scorer=self.scorer, score_cache=self.score_cache, tokenizer=self.tokenizer, clock=self._clock,
            summarizer=self.summarizer, order=self.order,
        )
        other._history_scores = self._history_scores
        other.summary_cache = self.summary_cache
        other.set_goal(final=self._final, subtask=self._subtask)
        other.extend(messages)
        ours, theirs = self.store.messages, other.store.messages
        keep = next(
            (n for n, (a, b) in enumerate(zip(ours, theirs, strict=False)) if _identity(a) != _identity(b)),
            min(len(ours), len(theirs)),
        )
        if self.config.pheromone.enabled:
            other._deposits = self._deposits.replay(other.pheromone, theirs, keep)
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
    def build_context(self, *, budget: int | None = None, compact: bool = False) -> BuiltContext:
        """Build the context for the next LLM call (SPEC §3 and §3.1).

        Prefix-stable by default (``config.cache_policy``, :mod:`relevance_memory.pipeline.append`):
        the previous context is sent unchanged plus the new messages while that fits the
        budget (``record.mode == "appended"``, O(new messages)); otherwise the pipeline
        (:mod:`relevance_memory.pipeline`) compacts down to the policy's target
        (``"compacted"``), or rebuilds within the whole budget on the first build, a new
        final goal, a new budget or with ``CachePolicy(always_rebuild=True)``
        (``"full_rebuild"``). ``record.mode_reason`` says why.

        Args:
            budget: token budget for this build (tokens); default from the config.
            compact: compact now (unless it would free fewer than
                ``cache_policy.clear_at_least`` tokens; the record says so).

        Returns:
            A :class:`BuiltContext` with valid OpenAI messages within the budget.

        Raises:
            ConfigError: ``budget`` is not a positive number of tokens.
            ContextOverflowError: the pinned prompt plus the newest step cannot fit.
            InvalidMessageError: tool calls have no result (with ``on_invalid="raise"``).
        """
        budget, step, seams = self._plan(budget, compact)
        if step.decision.mode == "appended":
            return self._appended(step, seams, budget)
        target, limit = self._first_target(step, budget)
        while True:
            state = self._state(budget, target, limit, step)
            try:
                built = pipeline.build(state, seams)
            except ContextOverflowError:
                if target >= budget:
                    raise
                target, limit = budget, None
                continue
            grown = self._grown(built, target, budget)
            if grown is None:
                return self._finish(state, built, step, seams, budget)
            target, limit = grown, (budget if grown < budget else None)

    async def abuild_context(self, *, budget: int | None = None, compact: bool = False) -> BuiltContext:
        """Async :meth:`build_context`: awaits the scorer's ``ascore`` when it has one
        (:class:`AsyncScorer`), otherwise runs its blocking ``score`` in a worker thread."""
        budget, step, seams = self._plan(budget, compact)
        if step.decision.mode == "appended":
            return self._appended(step, seams, budget)
        target, limit = self._first_target(step, budget)
        while True:
            state = self._state(budget, target, limit, step)
            try:
                built = await pipeline.abuild(state, seams)
            except ContextOverflowError:
                if target >= budget:
                    raise
                target, limit = budget, None
                continue
            grown = self._grown(built, target, budget)
            if grown is None:
                return self._finish(state, built, step, seams, budget)
            target, limit = grown, (budget if grown < budget else None)

    @property
    def prefix(self) -> PrefixState | None:
        """The latest request this memory built, which the next build may extend (SPEC §3.1)."""
        return self._prefix

    # ------------------------------------------------------------------ wiring
    def _plan(self, budget: int | None, compact: bool) -> tuple[int, BuildStep, Seams]:
        budget = budget if budget is not None else self.config.token_budget()
        if budget <= 0:
            raise ConfigError(f"budget must be a positive number of tokens, got {budget}")
        seams = self._seams()
        return budget, prefix_builds.plan(self._prefix, seams, goal=self.goal, budget=budget, requested=compact), seams

    @staticmethod
    def _first_target(step: BuildStep, budget: int) -> tuple[int, int | None]:
        """``(target, limit)`` of a pipeline build: a compaction fills its target (the whole
        budget stays the limit), a full rebuild the whole budget."""
        target = step.decision.target
        return (target, budget) if step.decision.mode == "compacted" and target < budget else (budget, None)

    def _state(self, budget: int, target: int, limit: int | None, step: BuildStep) -> BuildState:
        reason = step.decision.why
        if target != step.decision.target and step.decision.mode == "compacted":
            reason += f"; target grown to {target} tokens to keep the task statement and user constraints verbatim"
        return BuildState(
            budget=target, goal=self.goal, build_number=self._builds + 1, limit=limit,
            mode=step.decision.mode, mode_reason=reason,
        )

    def _grown(self, built: BuiltContext, target: int, budget: int) -> int | None:
        """The next target of a compaction that left out must-keep messages, or ``None``."""
        if target >= budget:
            return None
        return prefix_builds.grown_target(
            built.record, first_user=self.store.first_user_index, core_score=self.config.core_score,
            target=target, budget=budget,
        )

    def _appended(self, step: BuildStep, seams: Seams, budget: int) -> BuiltContext:
        assert self._prefix is not None
        if self.config.pheromone.enabled:  # O(new): the field takes in what arrived
            self.pheromone.observe(self.store.messages)
        goal = self.goal
        built = prefix_builds.append(self._prefix, step, seams, goal=goal, build_number=self._builds + 1)
        self._builds += 1
        self._prefix = prefix_builds.remember(self._prefix, built, step, seams, final_goal=goal.final, budget=budget)
        return built

    def _finish(self, state: BuildState, built: BuiltContext, step: BuildStep, seams: Seams, budget: int) -> BuiltContext:
        self._builds = state.build_number
        self._prefix = prefix_builds.remember(
            self._prefix, built, step, seams, final_goal=state.goal.final, budget=budget
        )
        return built

    def _seams(self) -> Seams:
        """The build's seams; the scorer's capabilities are read afresh (it may be replaced)."""
        capabilities = ScorerCapabilities.of(self.scorer)
        return Seams(
            config=self.config,
            store=self.store,
            scorer=self.scorer,
            capabilities=capabilities,
            fallback=self._offline,
            # a context-dependent scorer's scores read this history: cached for this
            # manager only, never in a shared or on-disk cache (SPEC §6)
            score_cache=self._history_scores if capabilities.context_dependent else self.score_cache,
            pheromone=self.pheromone,
            deposit_log=self._deposits,
            summarizer=self.summarizer,
            summary_cache=self.summary_cache,
            tokenizer=self.tokenizer,
            clock=self._clock,
            prefilter_index=self._prefilter_index,
            order=self.order,
        )


def _identity(message: Message) -> tuple[str, str, str | None, str | None]:
    """What makes a message the same one in another store: id, content hash (role, content
    and tool calls), tool call id and name."""
    return (message.id, message.content_hash, message.tool_call_id, message.name)

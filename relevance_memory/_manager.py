"""The memory manager: holds a memory's state and wires it to the build pipeline.

State: the append-only store (ingest, SPEC §3 step 1), the goal, the score and summary
caches, the pheromone memory, the prefilter's index and the build cycle's state. A build
(:meth:`RelevanceMemoryManager.build_context`) hands that state and the seams to
:mod:`relevance_memory.pipeline.cycle` once, which appends, compacts or rebuilds; the manager
does no I/O itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from . import _telemetry
from ._config import MemoryConfig, warn_once
from ._exceptions import ConfigError
from ._models import Message, TaskGoal
from ._requests import GoalTracker
from ._tokenizer import TiktokenCounter, TokenCounter
from .board import AgentLink, MemoryBoard, PublishRule
from .pheromone._field import PheromoneField
from .pipeline import BuiltContext, Seams, cycle
from .pipeline._bm25 import PrefilterIndex
from .pipeline._deposits import DepositLog
from .pipeline._state import ChainIndex
from .pipeline.append import PrefixState
from .pipeline.fidelity import Renditions
from .pipeline.order import DEFAULT_ORDER, OrderPolicy
from .scoring._cache import DiskScoreCache
from .scoring._capabilities import ScorerCapabilities
from .scoring._embedding import VectorIndex, load_embedder
from .scoring._scorer import InMemoryScoreCache, OfflineScorer, ScoreCache, Scorer
from .scoring._semantic import SemanticScorer
from .store._history import HistoryTracker, diverged_error, kept_stamps, repeated_prefix, unchanged_prefix
from .store._restore import RESTORE_TOOL_NAME, RestoreHandler, restore_tool_definition
from .store._snapshot import StoreSnapshot
from .store._store import MessageStore
from .summary._pyramid import SummaryItems
from .summary._summary import OfflineSummarizer, Summarizer, SummaryCache

__all__ = ["BuiltContext", "RelevanceMemoryManager"]


class RelevanceMemoryManager:
    """Keeps every message and builds a relevant, budgeted context before each LLM call.

    Args:
        config: a :class:`MemoryConfig`; keyword overrides are applied on top of it.
        scorer: relevance scorer; default the offline scorer (no network): lexical rules
            fused with the embedding's cosine to the goal (:class:`SemanticScorer`) when
            ``config.embeddings`` and the bundled model are there, else lexical only
            (:class:`OfflineScorer`; the first build's record says why).
        score_cache: score cache; default an in-process LRU (:class:`InMemoryScoreCache`), or
            :class:`DiskScoreCache` in ``config.score_cache_dir`` when that is set.
        summarizer: summarizer of the archive (SPEC §7); default :class:`OfflineSummarizer`.
        tokenizer: token counter; default exact tiktoken counts for ``config.model``.
        clock: returns "now" (timezone-aware); injected for tests. A batch of messages is
            stamped with one reading (``extend``).
        order: how selection orders each tier (:class:`OrderPolicy`; default
            :data:`~relevance_memory.pipeline.order.DEFAULT_ORDER`, SPEC §3 step 6).
        vectors: the message-vector index to keep vectors in (by content hash; shared by
            :meth:`fresh` so a resync embeds nothing twice); default a new one on the bundled
            model when ``config.embeddings``, ``None`` otherwise.
        agent: the agent this memory belongs to (SPEC §10): its messages get ids unique
            across agents (``<agent>:m<n>``) and ``producer=agent``.
        board: a memory board (:mod:`relevance_memory.board`; needs ``agent``): the
            agent's journal and pheromone memory live there, it publishes to and reads from
            ``scopes``, and a restarted agent resumes from it. A :class:`RedisBoard` is
            wrapped in a :class:`MirroredBoard`, so builds go on when Redis is unreachable.
        scopes: the shared scopes the agent reads and publishes to (default ``("shared",)``).
        publish: which messages go to a shared scope (default :class:`PublishRule`: tool
            results and user instructions); an explicit ``scope=`` on :meth:`add` wins.
        **overrides: any :class:`MemoryConfig` field, e.g. ``max_input_tokens=8000``.

    Raises:
        ConfigError: a setting is invalid, or ``embedder="minilm"`` without its extra installed.

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
        vectors: VectorIndex | None = None,
        agent: str | None = None,
        board: MemoryBoard | None = None,
        scopes: Sequence[str] = ("shared",),
        publish: PublishRule | None = None,
        _resume: bool = True,
        **overrides: Any,
    ) -> None:
        if overrides:
            base = config.model_dump() if config else {}
            config = MemoryConfig.create(**{**base, **overrides})
        self.config = config or MemoryConfig()
        if vectors is None and self.config.embeddings:
            embedder = load_embedder(self.config.embedder)  # ConfigError: minilm without its extra
            vectors = VectorIndex(embedder) if embedder is not None else None
        self.vectors: VectorIndex | None = vectors if self.config.embeddings else None
        # without the bundled model the semantic scorer is the lexical one and its first
        # result says why (once); with embeddings off it is exactly the lexical scorer
        self.scorer: Scorer = scorer or (
            SemanticScorer(index=self.vectors) if self.config.embeddings else OfflineScorer()
        )
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
        self._renditions = Renditions()  # excerpts and elided outputs, the same bytes from build to build
        self._summary_items = SummaryItems()  # archived messages as summarizer items, made once
        self._chains = ChainIndex()  # the history's trace chains, grown with the store
        self._goal = GoalTracker()  # the goal set, else formed from the user's messages
        self.order: OrderPolicy = order or DEFAULT_ORDER
        self.tokenizer: TokenCounter = tokenizer or TiktokenCounter(
            self.config.resolved_encoding, image_tokens=self.config.image_tokens
        )
        # what this memory only guesses (unknown model: approximate counts, assumed window);
        # warned once per model, and every decision record says so
        # a given tokenizer is taken as exact unless it says it stands in (``approximate``)
        guessed = tokenizer is None or bool(getattr(tokenizer, "approximate", False))
        self.approximations: tuple[str, ...] = tuple(
            note for kind, note in self.config.approximations() if kind != "tokens" or guessed
        )
        for kind, note in self.config.approximations():
            if kind != "tokens" or guessed:
                warn_once(self.config.model, kind, note, stacklevel=3)
        self._lock = cycle.BuildLock()  # builds of this memory run one at a time
        self.restore_tool_offered: str | None = None
        """Name of the restore tool once :meth:`restore_tool` handed it out: the goal block then
        tells the model it can fetch archived messages with it."""
        self._clock = clock or (lambda: datetime.now(timezone.utc))
        self._history = HistoryTracker()  # what sync_history has matched of the caller's list
        self._capabilities: tuple[Scorer, ScorerCapabilities] | None = None
        self.store = MessageStore(
            self.tokenizer, on_invalid=self.config.on_invalid, reference_max_df=self.config.reference_max_df,
            clock=self._clock, vectors=self.vectors, supersede=self.config.supersede,
            episode_gap_s=self.config.episode_gap_s,
        )
        self._cycle = cycle.Cycle()  # the latest request and the build count (SPEC §3.1)
        self.agent = agent
        self._link: AgentLink | None = None
        if board is not None:
            if agent is None:
                raise ConfigError("a memory board needs agent=<name>: whose memory it holds")
            self._link = AgentLink.attach(self.config.pheromone, board, agent, scopes=scopes, publish=publish,
                                          clock=self._clock)
            self.pheromone = self._link.memory
            if _resume:  # a restarted agent: the store is rebuilt from its journal
                self._link.resume(self.store)

    # ------------------------------------------------------------------ messages
    def add(self, message: Mapping[str, Any], **metadata: Any) -> Message:
        """Ingest one OpenAI chat dict (SPEC §3 step 1); returns the stored message.

        Keyword metadata: ``id``, ``msg_type``, ``trace_id``, ``parent_id``,
        ``producer``, ``scope``, ``timestamp``.

        With an ``agent``, the id defaults to ``<agent>:m<n>`` and the producer to the agent;
        with a board, the message is journaled and, when its scope is shared (explicitly
        or by the publish rule), published.

        Raises:
            InvalidMessageError: the message is invalid (see :class:`MessageStore`).
        """
        if self.agent is None:
            return self.store.add(message, **metadata)
        cursor = metadata.pop("_cursor", None)
        meta = {"id": f"{self.agent}:m{len(self.store)}", "producer": self.agent, **metadata}
        if self._link is None:
            return self.store.add(message, **meta)
        return self._link.add(self.store, message, meta, cursor)

    def extend(self, messages: Iterable[Mapping[str, Any]]) -> list[Message]:
        """Ingest many OpenAI chat dicts in order (atomically; see :class:`MessageStore`).

        A loop that passes its whole, growing history every step wants :meth:`sync_history`.
        Passed here, the history would be stored twice — the system prompt and the task sent
        twice — so ``extend`` refuses to duplicate it (issue 22):

        - a batch that starts with every message this memory holds, at the same positions
          (two or more, or a system prompt), stores only what follows them and warns
          (:class:`RuntimeWarning`);
        - a batch that starts with two or more of them and then differs (an edited or
          trimmed copy of the history) raises :class:`HistoryDivergedError` (nothing stored).

        Raises:
            InvalidMessageError: a message is invalid (nothing of the batch is stored).
            HistoryDivergedError: the batch repeats the start of the history, then differs.
        """
        items = list(messages)
        with self.store.lock:
            repeated = repeated_prefix(items, self.store.messages)
            return self._extend_new(items[repeated:])

    def sync_history(self, messages: Sequence[Any]) -> list[Message]:
        """Store what is new in the caller's whole, growing history; returns the messages stored.

        For the agent loop that keeps one list and passes all of it every step (issue 22):
        ``messages`` must start with every message this memory holds, in order (the model's
        replies included once the caller appended them); the rest is stored, each message
        once. A message object passed before is recognised by identity without being read,
        any other is compared with the stored copy (:mod:`relevance_memory.store._history`), so a
        step costs O(new messages) plus one pointer comparison per message held.

        Raises:
            HistoryDivergedError: ``messages`` does not start with the messages held (an
                edited, trimmed or reordered message; ``index`` names the first): nothing is
                stored. Start over with :meth:`fresh` (it keeps the caches and the memory of
                the unchanged messages).
            InvalidMessageError: a new message is invalid (nothing is stored).
        """
        given = list(messages)
        with self.store.lock:
            stored = self.store.messages
            held = len(stored)
            diverged = self._history.diverged_at(stored, given)
            if diverged is not None:
                raise diverged_error(stored, given, diverged)
            added = self._extend_new(given[held:])
            self._history.matched(given, held)
            return added

    def _extend_new(self, messages: list[Any]) -> list[Message]:
        """Ingest ``messages`` as they are (no repeat check; :meth:`extend`)."""
        if self.agent is None:
            return self.store.extend(messages)
        return [self.add(m) for m in messages]

    def sync(self) -> int:
        """Import what other agents published to this agent's scopes since the last sync
        (each a ``user`` message named after its producer); returns how many. Builds sync
        first on their own; 0 without a board."""
        if self._link is None:
            return 0
        known = {m.id for m in self.store.messages}

        def take(raw: Mapping[str, Any], **meta: Any) -> Message | None:
            return self.add(raw, **meta) if meta["id"] not in known else None

        return self._link.sync(take)

    def forget(self, message_id: str, *, archive: bool = False, reason: str = "") -> str:
        """Forget (or archive) a shared item on the board for every agent; refused while
        another agent uses it (SPEC §10 lifetimes). Returns the board's outcome.

        Raises:
            ConfigError: this memory has no board.
        """
        if self._link is None:
            raise ConfigError("forget() needs a memory board")
        return self._link.forget(message_id, self.store.messages, archive=archive, reason=reason)

    @property
    def messages(self) -> list[Message]:
        """Every stored message, oldest first (the append-only store)."""
        return self.store.messages

    def get(self, message_id: str) -> Message:
        """The stored message with ``message_id`` — any message ever added, whatever a build kept.

        Raises:
            KeyError: no message has that id (the message names it).
        """
        return self.store.get(message_id)

    def restore(self, ids: Sequence[str]) -> list[dict[str, Any]]:
        """The OpenAI dicts of the messages ``ids`` name, in store order, each once (plain
        copies, exactly as given on ingest). Ids may be spans as contexts write them
        (``m12–m20``, ``from m12 to m20``).

        Raises:
            KeyError: an id or span names no stored message (all unknown ones are listed).
        """
        if isinstance(ids, str):  # one id, not its characters ('m0' is not ['m', '0'])
            ids = [ids]
        found, missing = RestoreHandler(self.store).resolve(ids)
        if missing:
            raise KeyError(f"no message with id {', '.join(repr(m) for m in missing)}")
        return [m.to_openai() for m in found]

    def restore_tool(self, name: str = RESTORE_TOOL_NAME) -> dict[str, Any]:
        """The ``tools=`` entry that lets the model fetch archived messages by id
        (:func:`restore_tool_definition`); answer its calls with :meth:`restore_handler`.

        From the next build on, the goal block tells the model to call it (before, it only
        says the summaries name the archived ids: a promise the model cannot act on is not made).
        """
        definition = restore_tool_definition(name)
        self.restore_tool_offered = name
        return definition

    def restore_handler(self, *, max_tokens: int = 4000, name: str = RESTORE_TOOL_NAME) -> RestoreHandler:
        """A :class:`RestoreHandler` over this memory: ``handler.handles(call)`` /
        ``handler.answer(call)`` turn the model's restore calls into tool messages."""
        return RestoreHandler(self.store, max_tokens=max_tokens, name=name, counter=self.tokenizer)

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
          first changed one on start afresh;
        - with a board, the agent and its board memory: shared strengths stay on the board,
          the journal restarts from the new history, nothing published is published again.

        Raises:
            InvalidMessageError: a message of ``messages`` is invalid.
        """
        link = self._link
        other = RelevanceMemoryManager(
            self.config, scorer=self.scorer, score_cache=self.score_cache, tokenizer=self.tokenizer, clock=self._clock,
            summarizer=self.summarizer, order=self.order, vectors=self.vectors, agent=self.agent,
            board=link.board if link else None, scopes=link.memory.scopes if link else ("shared",),
            publish=link.publish if link else None, _resume=False,
        )
        if link is not None and other._link is not None:  # the same agent: its board memory stays
            other._link.carry_over(link)
            other._link.reset_journal()
        other._history_scores = self._history_scores
        other.restore_tool_offered = self.restore_tool_offered
        other.summary_cache = self.summary_cache
        other.set_goal(final=self._goal.final, subtask=self._goal.subtask)
        given = list(messages)
        stamps = kept_stamps(given, self.store.messages, self.store.clock_stamped)
        for message, stamp in zip(given, stamps, strict=False):  # a resync does not restamp the history
            other.add(message, **stamp)
        other._extend_new(given[len(stamps):])
        if self.config.pheromone.enabled:
            keep = unchanged_prefix(self.store.messages, other.store.messages)
            other._deposits = self._deposits.replay(other.pheromone, other.store.messages, keep)
        return other

    # ------------------------------------------------------------------ goal
    def set_goal(self, final: str | None = None, subtask: str | None = None) -> TaskGoal:
        """Set the final goal and/or the current subtask; ``None`` leaves a layer as it is.

        Returns the goal in force. Until a final goal is set, the first user message is
        the final goal.

        Raises:
            ConfigError: ``final`` or ``subtask`` is not a string (or ``None``).
        """
        self._goal.set(final, subtask)
        return self.goal

    @property
    def goal(self) -> TaskGoal:
        """The task goal in force (SPEC §2)."""
        return self._goal.goal(self.store.messages, self.store.first_user_index)

    # ------------------------------------------------------------------ build
    @_telemetry.build_span
    def build_context(
        self, *, budget: int | None = None, tools: Sequence[Any] | None = None, compact: bool = False
    ) -> BuiltContext:
        """Build the context for the next LLM call (SPEC §3 and §3.1).

        Prefix-stable (``config.cache_policy``; :mod:`relevance_memory.pipeline.cycle`): the
        previous context plus the new messages while that fits the budget (``record.mode ==
        "appended"``, O(new messages)); else the pipeline compacts to the policy's target
        (``"compacted"``) or, on the first build, a new final goal or budget, or with
        ``CachePolicy(always_rebuild=True)``, rebuilds (``"full_rebuild"``); ``record.mode_reason`` says why.

        Safe under concurrency: the build reads a snapshot of the store (messages added
        meanwhile by other threads or tasks wait for the next build) and builds of one memory
        run one at a time.

        Args:
            budget: token budget for this build (tokens); default from the config.
            tools: the ``tools=`` you will send with the request; their schema's tokens
                (:func:`tools_tokens`) are taken from the budget, as the managed client does.
            compact: compact now (unless it would free fewer than
                ``cache_policy.clear_at_least`` tokens; the record says so).

        Returns:
            A :class:`BuiltContext` with valid OpenAI messages within the budget.

        Raises:
            ConfigError: ``budget`` is not a positive whole number of tokens (an int; a bool, float or str is refused),
                or the ``tools`` schema takes the whole budget (the message names both, in tokens).
            ContextOverflowError: the pinned prompt plus the newest step cannot fit.
            InvalidMessageError: tool calls have no result (with ``on_invalid="raise"``).
            RuntimeError: called from inside an event loop while an :meth:`abuild_context`
                of this memory is running on it (waiting would deadlock; await that instead).
        """
        if self._link is not None:
            self.sync()
        with self._lock.hold():
            return self._built(cycle.run(self._cycle, self._seams(), goal=self.goal, budget=budget, tools=tools,
                                         compact=compact))

    @_telemetry.abuild_span
    async def abuild_context(
        self, *, budget: int | None = None, tools: Sequence[Any] | None = None, compact: bool = False
    ) -> BuiltContext:
        """Async :meth:`build_context`: awaits the scorer's ``ascore`` when it has one
        (:class:`AsyncScorer`), otherwise runs its blocking ``score`` in a worker thread.
        Concurrent builds of one memory (tasks or threads) wait their turn without blocking
        the event loop."""
        if self._link is not None:
            self.sync()
        async with self._lock.ahold():
            outcome = await cycle.arun(self._cycle, self._seams(), goal=self.goal, budget=budget, tools=tools,
                                       compact=compact)
            return self._built(outcome)

    @property
    def prefix(self) -> PrefixState | None:
        """The latest request this memory built, which the next build may extend (SPEC §3.1)."""
        return self._cycle.prefix

    def _built(self, outcome: cycle.Outcome) -> BuiltContext:
        """Keep the cycle a build left; with a board, lease the shared items the build uses and
        put their provenance and the board's faults in the record (SPEC §8, §10)."""
        self._cycle, built = outcome.cycle, outcome.built
        if self._link is not None:
            self._link.lease(built, self.store.messages, self._cycle.builds)
        return built

    # ------------------------------------------------------------------ wiring
    def _seams(self) -> Seams:
        """The build's seams; the scorer's capabilities are read again whenever the scorer is
        another object (it may be replaced; reading them is ~0.1 ms of Protocol checks, more
        than the rest of an appended build's set-up)."""
        scorer, known = self.scorer, self._capabilities
        if known is None or known[0] is not scorer:
            known = self._capabilities = (scorer, ScorerCapabilities.of(scorer))
        capabilities = known[1]
        return Seams(
            config=self.config, tokenizer=self.tokenizer, clock=self._clock, order=self.order,
            store=StoreSnapshot(self.store),  # a consistent view: concurrent writes wait for the next build
            scorer=_telemetry.traced_scorer(self.scorer),  # each call a child span of the build's
            capabilities=capabilities, fallback=self._offline,
            # a context-dependent scorer's scores read this history: cached for this
            # manager only, never in a shared or on-disk cache (SPEC §6)
            score_cache=self._history_scores if capabilities.context_dependent else self.score_cache,
            pheromone=self.pheromone, deposit_log=self._deposits, prefilter_index=self._prefilter_index,
            summarizer=self.summarizer, summary_cache=self.summary_cache, renditions=self._renditions,
            summary_items=self._summary_items, chains=self._chains,
            approximations=self.approximations, restore_tool=self.restore_tool_offered, notices=self._goal.notices,
        )


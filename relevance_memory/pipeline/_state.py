"""What flows through a build: the seams it reads (:class:`Seams`) and the build state
(:class:`BuildState`) that every stage reads and adds its own output to.

A stage is a function ``stage(state, seams) -> Output``; the runner
(:mod:`relevance_memory.pipeline._run`) stores the output in the stage's slot of the state.
A stage reads the slots of earlier stages and never writes another stage's slot. The seams
are the only way out of the pure core: the store view, the scorer (the one I/O call, the
only await point of an async build), the score and summary caches, the pheromone memory,
the summarizer, the tokenizer and the clock.

To add a stage output: add a frozen dataclass here, a slot for it in :class:`BuildState`,
the stage function in its own module, and one line in the runner.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, TypeVar

from .._cache_policy import BuildMode
from .._config import MemoryConfig
from .._models import Message, RelevanceScore, TaskGoal, has_tool_calls
from .._record import DecisionRecord
from .._requests import NoticeIndex
from .._tokenizer import TokenCounter
from ..pheromone._field import PheromoneField
from ..scoring._capabilities import ScorerCapabilities
from ..scoring._embedding import VectorIndex
from ..scoring._scorer import OfflineScorer, ScoreCache, Scorer, ScoringResult
from ..store._supersede import SupersedeLink
from ..summary._pyramid import SummaryItems
from ..summary._summary import PyramidResult, RenderedSummary, Summarizer, SummaryCache
from ._bm25 import PrefilterIndex
from ._deposits import DepositLog
from .fidelity import MIN_ENTRY_CAP, MIN_EXCERPT_TOKENS, Rendition, Renditions
from .ledger import BudgetLedger
from .order import OrderPolicy

__all__ = [
    "Assembled",
    "BuildState",
    "BuiltContext",
    "Chain",
    "ChainOption",
    "Partitioned",
    "Prefiltered",
    "Ranked",
    "ScoreRequest",
    "Scored",
    "Seams",
    "Selection",
    "StoreView",
    "Summarised",
    "required",
]

T = TypeVar("T")


def required(value: T | None, stage: str) -> T:
    """``value``, the output of ``stage``; raises ``RuntimeError`` when that stage has not run."""
    if value is None:
        raise RuntimeError(f"internal error: the {stage} stage has not run before a stage that reads it")
    return value


class StoreView(Protocol):
    """What the stages read of the append-only store (:class:`MessageStore` satisfies it).

    Stages only read; ingest (SPEC §3 step 1) is the store's own work, on ``add``.
    """

    @property
    def messages(self) -> Sequence[Message]: ...

    @property
    def excluded(self) -> Mapping[str, str]: ...

    @property
    def referenced_by(self) -> Mapping[str, Sequence[str]]: ...

    @property
    def terms(self) -> Sequence[frozenset[str]]: ...

    @property
    def idents(self) -> Sequence[frozenset[str]]: ...

    @property
    def episodes(self) -> Sequence[int]: ...

    @property
    def doc_freq(self) -> Mapping[str, int]: ...

    @property
    def first_user_index(self) -> int | None: ...

    @property
    def step_count(self) -> int: ...

    @property
    def chain_merges(self) -> int: ...

    @property
    def pending_calls(self) -> list[int]: ...

    @property
    def superseded_by(self) -> Mapping[str, SupersedeLink]: ...

    @property
    def supersedes(self) -> Mapping[str, Sequence[str]]: ...

    def edited_views(self) -> dict[str, str]: ...

    def file_edits(self) -> dict[str, str]: ...

    def message_vectors(self) -> VectorIndex | None: ...

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> Message: ...

    def get(self, message_id: str) -> Message: ...

    def indices(self, message_ids: Iterable[str]) -> list[int]: ...

    def chain_root(self, index: int) -> int: ...

    def unanswered_calls(self, index: int) -> list[str]: ...


@dataclass(frozen=True)
class Seams:
    """The one context object of a build: configuration and every seam the stages use.

    Attributes:
        config: the validated :class:`MemoryConfig`.
        store: the store view (read-only for the stages).
        scorer: the relevance scorer (SPEC §4), with its declared ``capabilities``.
        fallback: the offline scorer used when ``scorer`` fails or leaves ids out.
        score_cache: where this scorer's scores are cached (the shared cache, or the
            manager's own for a context-dependent scorer; SPEC §6).
        pheromone: the pheromone memory (SPEC §5); read and written only through its methods.
        deposit_log: the deposits made so far (replayed by a resync, :class:`DepositLog`).
        summarizer: the archive's summarizer (SPEC §7) and ``summary_cache`` its drafts.
        tokenizer: counts tokens (the same counter the store counted with).
        clock: "now", timezone-aware (the record's ``created_at``).
        prefilter_index: the BM25 index over the store's terms (grows with the store).
        order: how selection orders each tier (:mod:`relevance_memory.pipeline.order`).
        approximations: what the memory only guesses (an unknown model's approximate token
            counts, an assumed context window), for the record.
        restore_tool: name of the restore tool the model was offered (the goal block says
            it can fetch archived messages with it), or ``None``.
        renditions: the memo of excerpts and elided outputs (:mod:`.fidelity`): the same
            message is cut the same way from build to build.
        notices: user messages by notice key (format notices a harness repeats).
        summary_items: the memo of archived messages as summarizer items (made once per memory).
        chains: the history's trace chains, grown with the store (:class:`ChainIndex`).
    """

    config: MemoryConfig
    store: StoreView
    scorer: Scorer
    capabilities: ScorerCapabilities
    fallback: OfflineScorer
    score_cache: ScoreCache
    pheromone: PheromoneField
    deposit_log: DepositLog
    summarizer: Summarizer
    summary_cache: SummaryCache
    tokenizer: TokenCounter
    clock: Callable[[], datetime]
    prefilter_index: PrefilterIndex
    order: OrderPolicy
    approximations: tuple[str, ...] = ()
    restore_tool: str | None = None
    renditions: Renditions = field(default_factory=Renditions)
    notices: NoticeIndex = field(default_factory=NoticeIndex)
    summary_items: SummaryItems = field(default_factory=SummaryItems)
    chains: ChainIndex = field(default_factory=lambda: ChainIndex())  # defined below


# --------------------------------------------------------------------------- outputs
@dataclass(frozen=True, slots=True)
class Chain:
    """A trace chain: messages kept or dropped together (SPEC §2).

    Attributes:
        root: index of its first message; ``members`` are indices in original order.
        tokens: total tokens of the members (tokens).
    """

    root: int
    members: tuple[int, ...]
    tokens: int

    @property
    def last(self) -> int:
        """Index of the chain's newest message (its recency)."""
        return self.members[-1]


class ChainIndex:
    """The history's trace chains and chain roots, kept across builds (a seam: one per memory).

    What :func:`~relevance_memory.pipeline.partition.group_chains` gives for every stored message (nothing skipped), grown by the
    messages stored since the last build (issue 24: a compaction grouped the whole history
    again). It holds because the store is append-only and appending never moves an older
    message's chain root — except when a new message joins two older chains; the store counts
    those merges (``chain_merges``) and the index then starts over. Roots are each chain's
    first (smallest) index, so the chains are in root order, as :func:`~relevance_memory.pipeline.partition.group_chains` orders
    them. Also keeps the indices of the messages large enough to ever need an excerpt
    (:func:`~relevance_memory.pipeline.fidelity.entry_renditions`'s caps are at least :data:`~relevance_memory.pipeline.fidelity.MIN_EXCERPT_TOKENS`, and at
    least :data:`~relevance_memory.pipeline.fidelity.MIN_ENTRY_CAP` when the room allows).
    """

    def __init__(self) -> None:
        self._start(0)

    def _start(self, merges: int) -> None:
        self._n = 0
        self._merges = merges
        # index → chain root, 4 bytes a message (a new array after a merge: readers keep theirs)
        self.roots: array[int] = array("i")
        self.chains: dict[int, Chain] = {}  # root → Chain, every stored message
        self.over_entry_cap: list[int] = []  # indices with more than MIN_ENTRY_CAP tokens, ascending
        self.over_excerpt_min: list[int] = []  # indices with more than MIN_EXCERPT_TOKENS tokens, ascending
        self.user_role: list[int] = []  # indices of messages with role "user", ascending
        self.total_tokens = 0  # tokens of every message read (tokens)
        self.tool_tokens: dict[int, int] = {}  # root → tokens of its tool traffic (results, calling messages)
        self.recounted: dict[int, tuple[Chain, Chain]] = {}  # root → (chain, with its excerpts' tokens): the partition's
        self.traffic: object = None  # the select stage's running sums of tool traffic over the last candidates

    def update(self, store: StoreView) -> ChainIndex:
        """Take in the messages stored since the last call (O(new); O(history) after a merge
        of older chains, or for another, shorter store); returns itself."""
        n = len(store)
        if n < self._n or store.chain_merges != self._merges:
            self._start(store.chain_merges)
        if n == self._n:
            return self
        chain_root, roots = store.chain_root, self.roots
        tool_tokens = self.tool_tokens
        # root → [tokens, member, member …] of the messages arrived now: a chain is its members'
        # one tuple (no list of every member beside it; issue 24), grown by the new ones
        arrived: dict[int, list[int]] = {}
        added = 0
        for message in store.messages[self._n:n]:
            index, count = message.index, message.token_count
            added += count
            root = chain_root(index)
            roots.append(root)
            got = arrived.get(root)
            if got is None:
                arrived[root] = [count, index]
            else:
                got[0] += count
                got.append(index)
            if message.role == "user":
                self.user_role.append(index)
            elif message.role == "tool" or has_tool_calls(message):
                tool_tokens[root] = tool_tokens.get(root, 0) + count
            if count > MIN_EXCERPT_TOKENS:
                self.over_excerpt_min.append(index)
                if count > MIN_ENTRY_CAP:
                    self.over_entry_cap.append(index)
        chains = self.chains
        for root, got in arrived.items():  # a new root is the newest index: it goes last, in root order
            held = chains.get(root)
            chains[root] = (Chain(root, tuple(got[1:]), got[0]) if held is None else
                            Chain(root, held.members + tuple(got[1:]), held.tokens + got[0]))
        self.total_tokens += added
        self._n = n
        return self

    def covers(self, store: StoreView) -> bool:
        """Whether the index holds exactly ``store``'s messages (updated for it, nothing since)."""
        return self._n == len(store) and self._merges == store.chain_merges

    def without(self, skip: set[int] | frozenset[int], messages: Sequence[Message]) -> dict[int, Chain] | None:
        """:func:`~relevance_memory.pipeline.partition.group_chains` of the history skipping ``skip`` (O(chains) in C, plus the chains
        ``skip`` touches), or ``None`` when a skipped root leaves members behind (that chain
        would be placed by its first member left: :func:`~relevance_memory.pipeline.partition.group_chains` orders it)."""
        out = dict(self.chains)
        roots = self.roots
        for root in {roots[i] for i in skip}:
            chain = out.get(root)
            if chain is None:
                continue
            kept = tuple(i for i in chain.members if i not in skip)
            if not kept:
                del out[root]
            elif root in skip:
                return None
            elif len(kept) != len(chain.members):
                out[root] = Chain(root, kept, sum(messages[i].token_count for i in kept))
        return out


@dataclass(frozen=True)
class ChainOption:
    """One form a chain may be kept in (SPEC §11 graded fidelity).

    Attributes:
        fidelity: ``verbatim``, ``excerpt`` or ``elided`` (what its bulky outputs become).
        tokens: the chain's tokens in this form (tokens).
        rendered: message index → :class:`Rendition` for members not sent verbatim.
    """

    fidelity: str
    tokens: int
    rendered: Mapping[int, Rendition] = field(default_factory=dict)


@dataclass
class Selection:
    """Which candidate chains a fill keeps.

    Attributes:
        tier: chain root → ``core`` / ``working`` / ``archive``.
        kept: chain roots kept verbatim.
        notes: chain root → why it was not kept although its tier asked for it.
        used: tokens the kept chains take (tokens).
        repeats: chain root → index of the newer, kept copy it repeats (such chains are
            neither kept nor summarised).
        fidelity: chain root → ``excerpt`` or ``elided`` for a kept chain sent below verbatim
            (SPEC §11 graded fidelity; absent: verbatim).
        rendered: message index → the :class:`Rendition` it is sent as, for members of such
            chains.
        sizes: chain root → tokens it takes as kept (its form's tokens).
    """

    tier: dict[int, str] = field(default_factory=dict)
    kept: set[int] = field(default_factory=set)
    notes: dict[int, str] = field(default_factory=dict)
    used: int = 0
    repeats: dict[int, int] = field(default_factory=dict)
    fidelity: dict[int, str] = field(default_factory=dict)
    rendered: dict[int, Rendition] = field(default_factory=dict)
    sizes: dict[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Partitioned:
    """Output of :func:`~relevance_memory.pipeline.partition.partition` (SPEC §3 step 2).

    Attributes:
        excluded: message index → why it is kept out of every context (invalid on ingest,
            or an unanswered tool call under ``on_invalid="repair"``).
        pinned: indices of the leading system/developer messages.
        chains: chain root → :class:`Chain` for every message neither pinned nor excluded.
        recent: roots of the chains kept as working memory (verbatim).
        candidates: root → chain of everything else, in store order (scored and selected).
        task_root: root of the task statement's chain (the first user message), if any.
        goal_text: the goal block's text, or ``None`` when there is none.
        identity: the whole history fits the budget: the context is the history.
        ledger: pinned, reply priming, goal block and working memory spent.
        warnings: what the partition had to give up (for the record).
        renditions: message index → the excerpt it enters as (SPEC §11: larger than its share
            of the budget, or cut so the newest step fits); chain tokens count these.
    """

    excluded: Mapping[int, str]
    pinned: tuple[int, ...]
    chains: Mapping[int, Chain]
    recent: frozenset[int]
    candidates: Mapping[int, Chain]
    task_root: int | None
    goal_text: str | None
    identity: bool
    ledger: BudgetLedger
    warnings: tuple[str, ...] = ()
    renditions: Mapping[int, Rendition] = field(default_factory=dict)


@dataclass(frozen=True)
class Prefiltered:
    """Output of :func:`~relevance_memory.pipeline.prefilter.prefilter` (SPEC §3 step 3).

    Attributes:
        skipped: candidate root → why it is archived without a score (forgotten, or
            prefiltered out by BM25).
        to_score: indices of the candidate members that need a score, in store order.
        kept: the candidate roots not skipped, in the candidates' order (``None``: read
            ``skipped`` against the candidates).
    """

    skipped: Mapping[int, str]
    to_score: tuple[int, ...]
    kept: tuple[int, ...] | None = None


@dataclass(frozen=True)
class ScoreRequest:
    """The score stage before its I/O: cache hits and the misses for the scorer.

    Attributes:
        cached: message index → score read from the cache.
        misses: indices sent to the scorer, in store order.
        items: the scorer's view of ``misses`` (:class:`ScoreItem` list).
    """

    cached: Mapping[int, RelevanceScore]
    misses: tuple[int, ...]
    items: tuple[Any, ...]


@dataclass(frozen=True)
class Scored:
    """Output of the score stage (SPEC §3 step 4).

    Attributes:
        scores: message index → score for every candidate member that needed one.
        from_cache: indices whose score came from the cache.
        result: what the scorer returned (usage, warnings), or ``None`` when nothing was asked.
        hits: cache hits counted for the record; ``misses`` = ``len`` of the request's misses.
    """

    scores: Mapping[int, RelevanceScore]
    from_cache: frozenset[int]
    result: ScoringResult | None
    hits: int
    misses: int


@dataclass(frozen=True)
class Ranked:
    """Output of :func:`~relevance_memory.pipeline.select.select` (SPEC §3 step 6, ranking).

    Attributes:
        tier: chain root → ``core`` / ``working`` / ``archive`` for every scored candidate.
        order: the roots to keep, in the order they are tried (core by the core order, then
            working by the working order); archive roots are not in it.
        tokens: chain root → tokens.
        repeat_keys: root → (content hash, name) of a single-message user chain that may
            repeat a later copy (the task statement never does).
        shown_by: root → ((content hash, name), index) of every user message of the chain.
        recent_shown: (content hash, name) → newest index of a user message in working memory.
        recent_roots: roots of the working-memory chains (shown verbatim whatever the fill).
        superseded: root → note, for candidate chains whose content a newer message
            supersedes (issue 11): archived unless the goal asks for earlier values.
        preferred: root → note, for chains raised because they restate a fact with a new
            value (the newer is preferred over what it supersedes).
        current_views: roots of chains holding the newest view of a file the agent edited
            (issue 11): tried before other chains, and the summary reserve yields to them.
        options: chain root → the forms it may be kept in, best first (SPEC §11; chains with a
            bulky tool output only; the others are verbatim or nothing).
        needs: chain root → roots of the chains holding the newer values of what it holds
            (issue 23, newest wins): it is kept only with all of them shown, and they are tried
            first (:func:`~relevance_memory.pipeline.select.newer_first`).
    """

    tier: Mapping[int, str]
    order: tuple[int, ...]
    tokens: Mapping[int, int]
    repeat_keys: Mapping[int, tuple[str, str | None]]
    shown_by: Mapping[int, tuple[tuple[tuple[str, str | None], int], ...]]
    recent_shown: Mapping[tuple[str, str | None], int]
    recent_roots: frozenset[int]
    superseded: Mapping[int, str] = field(default_factory=dict)
    preferred: Mapping[int, str] = field(default_factory=dict)
    current_views: frozenset[int] = frozenset()
    options: Mapping[int, tuple[ChainOption, ...]] = field(default_factory=dict)
    needs: Mapping[int, frozenset[int]] = field(default_factory=dict)


@dataclass(frozen=True)
class Summarised:
    """Output of :func:`~relevance_memory.pipeline.summarise.summarise` (SPEC §3 steps 6–7).

    The summary reserve is negotiated over the ledger here, so this holds the final fill.

    Attributes:
        selection: which candidate chains are kept verbatim (after the summary reserve).
        pyramid: the summaries, in context order.
        held: user messages scored ≥ ``core_score`` that could only be summarised.
        goal_text: the goal block's text in the end (``None`` when it yielded to a summary).
        ledger: the partition's ledger plus core, working and summaries (and a released goal block).
        warnings: what had to give (for the record).
    """

    selection: Selection
    pyramid: PyramidResult
    held: frozenset[int]
    goal_text: str | None
    ledger: BudgetLedger
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class Assembled:
    """Output of :func:`~relevance_memory.pipeline.assemble.assemble` (SPEC §3 step 8).

    Attributes:
        messages: the OpenAI chat dicts to send, in context order.
        kept_roots: roots of every chain emitted verbatim (working memory and kept candidates).
        tokens: tokens of ``messages`` including reply priming (tokens); equals the ledger's spend.
        sources: per message of ``messages``, the store index it copies, or ``None`` for a
            message the build made (goal block, summary, subtask note).
        subtask_note: the subtask note at the end of ``messages`` (``CachePolicy.subtask_at_end``),
            or ``None``; it is not part of the prefix the next append extends.
    """

    messages: list[dict[str, Any]]
    kept_roots: frozenset[int]
    tokens: int
    sources: tuple[int | None, ...] = ()
    subtask_note: dict[str, Any] | None = None


@dataclass(frozen=True)
class BuiltContext:
    """The result of one build.

    Attributes:
        messages: OpenAI chat dicts to send, valid for the API and within the budget.
        record: the :class:`DecisionRecord` of the build.
        sources: per message of ``messages``, the index of the stored message it copies, or
            ``None`` for a message the build made (goal block, summary, subtask note);
            empty when unknown.
        summaries: the summaries in ``messages`` (the next compaction carries them, issue 21).
    """

    messages: list[dict[str, Any]]
    record: DecisionRecord
    sources: tuple[int | None, ...] = ()
    summaries: tuple[RenderedSummary, ...] = ()

    @property
    def token_count(self) -> int:
        """Tokens of ``messages`` including reply priming (tokens); ≤ ``record.budget``."""
        return self.record.tokens_after


@dataclass
class BuildState:
    """One build's state: its inputs, then one slot per stage, filled in stage order.

    Attributes:
        budget: the token budget the stages fill (tokens, > 0): the build's budget, or a
            compaction's target (SPEC §3.1).
        goal: the task goal in force (SPEC §2).
        build_number: this manager's count of builds, this one included (part of the build id).
        limit: the build's budget when ``budget`` is a compaction's target below it (tokens),
            else ``None``; the record reports it as the budget.
        mode: ``compacted`` or ``full_rebuild`` (the pipeline never appends) and
            ``mode_reason`` why (:func:`~relevance_memory._cache_policy.decide_build_mode`).
        carried: the summaries of the previous compaction, in the provider's cached prefix: a
            compaction emits again those whose messages are all still archived (issue 21).
        previous: the previous request's messages (a compaction places its new summaries after
            the kept messages that repeat it, so the cached prefix runs through them).
        partition … record: each stage's output (``None`` until the stage ran; the stages
            after ``partition`` do not run when the whole history fits).
    """

    budget: int
    goal: TaskGoal
    build_number: int
    limit: int | None = None
    mode: BuildMode = "full_rebuild"
    mode_reason: str = ""
    carried: tuple[RenderedSummary, ...] = ()
    previous: tuple[dict[str, Any], ...] = ()
    partition: Partitioned | None = None
    prefilter: Prefiltered | None = None
    scored: Scored | None = None
    ranked: Ranked | None = None
    summarised: Summarised | None = None
    assembled: Assembled | None = None
    record: DecisionRecord | None = None

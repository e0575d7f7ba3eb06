"""The decision record (SPEC §8): the per-build account of what was kept and why."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field, ModelWrapValidatorHandler, PrivateAttr, computed_field, model_validator

from ._cache_policy import BuildMode
from ._models import ScoreSource, TaskGoal, user_authored
from .scoring._scorer import ScorerUsage

__all__ = ["BudgetBreakdown", "BudgetLine", "DecisionRecord", "MessageDecision", "SummaryRecord"]

Tier = Literal["pinned", "recent", "core", "working", "archive"]
Decision = Literal["kept", "recent", "summarised", "dropped"]


class MessageDecision(BaseModel):
    """What one build decided about one message.

    Attributes:
        id, index, step, role, msg_type: the message's identity and place.
        tokens: the message's token count (tokens).
        score: relevance score 1–5, or ``None`` when it was not scored (pinned,
            working memory, or the whole history fitted).
        score_source: ``llm|cache|offline|fallback|pinned|recent`` (SPEC §8).
        reason: the scorer's reason, or why the message was not scored.
        strength: pheromone strength when the pheromone field is on, else ``None``.
        tier: ``pinned`` (system prompt), ``recent`` (working memory), or the score tier
            ``core`` / ``working`` / ``archive`` (SPEC §2).
        decision: ``kept`` (verbatim), ``recent`` (verbatim, working memory),
            ``summarised`` (folded into the summary pyramid), ``dropped`` (not in the context).
        chain_id: id of the trace chain's first message.
        note: extra detail (``"over budget"``, ``"orphan tool result"`` …).
        superseded_by: id of the newer message that supersedes this one (SPEC §10; the
            message is never deleted), ``None`` when nothing does.
        supersede_reason: why (``"the same call (bash …) returned a newer result at step 31"``).
        supersedes: ids of the older messages this one supersedes (the other end of the link).
        producer: the agent that produced the message (SPEC §8 provenance), or ``None``.
        scope: its visibility scope (``private``, ``private:<agent>``, ``shared``, ``global`` …).
        fidelity: how a message in the context was sent (SPEC §11): ``verbatim``, ``excerpt``
            (cut to its head, tail and named lines, with a marker line) or ``elided`` (its
            content replaced by one restorable line); ``None`` when it is not in the context.
        sent_tokens: tokens it took in the context (tokens; equals ``tokens`` when verbatim,
            ``None`` when it is not in the context).
    """

    id: str
    index: int
    step: int
    role: str
    msg_type: str
    tokens: int
    score: int | None = None
    score_source: ScoreSource | None = None
    reason: str = ""
    strength: float | None = None
    tier: Tier
    decision: Decision
    chain_id: str
    note: str = ""
    superseded_by: str | None = None
    supersede_reason: str = ""
    supersedes: list[str] = Field(default_factory=list)
    producer: str | None = None
    scope: str = "private"
    fidelity: Literal["verbatim", "excerpt", "elided"] | None = None
    sent_tokens: int | None = None


class BoardReport(BaseModel):
    """What a build read from and did on its memory board (SPEC §8, §10).

    Attributes:
        board: the board's name.
        agent: the agent whose build this is.
        source: where the shared strengths came from: ``memory``, ``redis`` or
            ``local copy`` (the server was unreachable).
        scopes: the shared scopes the agent reads.
        imported: messages of other agents in this memory so far.
        faults: what went wrong with the board since the previous build, one sentence each.
        items: per shared message in the context (kept or recent): ``scope``, ``producer``, ``status``,
            ``superseded_by``, ``contributions`` (agent → strength it added), ``deposits``,
            ``reinforcements``, ``users`` (agent → tick of its latest use),
            ``first_selected`` (``[agent, build]``) and the newest ``events``
            (``[agent, op, tick, amount, time]``).
    """

    board: str
    agent: str
    source: str
    scopes: list[str] = Field(default_factory=list)
    imported: int = 0
    faults: list[str] = Field(default_factory=list)
    items: dict[str, dict[str, Any]] = Field(default_factory=dict)


class SummaryRecord(BaseModel):
    """One summary emitted into the context (filled by the summary pyramid, SPEC §7)."""

    level: int
    covered_ids: list[str]
    tokens: int
    exact_values: list[str] = Field(default_factory=list)


class BudgetLine(BaseModel):
    """One line of a build's budget ledger (see :mod:`relevance_memory.pipeline.ledger`).

    Attributes:
        purpose: ``reply_priming``, ``pinned``, ``goal_block``, ``working_memory``,
            ``task_statement``, ``core``, ``working`` or ``summaries``.
        tokens: how many tokens (tokens).
        kind: ``spend``, ``release`` (tokens spent earlier given back) or ``reserve`` (held
            back for a later purpose while another filled the rest; an accounting note).
        note: why, in words.
    """

    purpose: str
    tokens: int
    kind: Literal["spend", "release", "reserve"]
    note: str = ""


class BudgetBreakdown(BaseModel):
    """Where a build's budget went (SPEC §8: the budget breakdown by purpose).

    Attributes:
        budget: the build's budget (tokens).
        spent: purpose → tokens in the context, net of releases, in spending order;
            ``sum(spent.values()) + unused == budget``.
        unused: tokens of the budget left (tokens).
        lines: the ledger's lines in the order the stages wrote them.
    """

    budget: int
    spent: dict[str, int] = Field(default_factory=dict)
    unused: int = 0
    lines: list[BudgetLine] = Field(default_factory=list)


class DecisionRecord(BaseModel):
    """The account of one build (SPEC §8); serialises to JSON and back.

    Token fields are in tokens of the configured encoding, including the 3 tokens that
    prime the reply; ``budget`` is the limit ``tokens_after`` never exceeds, and
    ``budget_breakdown`` says where it went (``spent`` per purpose sums to ``tokens_after``).

    Prefix stability (SPEC §3.1): ``mode`` says how the build was made — ``appended`` (the
    previous context byte for byte plus ``appended_ids``, extending build
    ``base_build_id``), ``compacted`` (selected and summarised down to ``target`` tokens)
    or ``full_rebuild`` — and ``mode_reason`` why; ``prefix_tokens`` is how many tokens at
    the start of this request repeat the previous request exactly, ``cacheable_tokens``
    what of that a provider bills as cached (OpenAI's rule: from 1,024 tokens, in steps of
    128), and ``provider_cached_tokens`` what the provider reported for the request
    (``usage.prompt_tokens_details.cached_tokens`` or Anthropic's
    ``cache_read_input_tokens``; set by the managed client, ``None`` when unknown), and
    ``provider_cache_creation_tokens`` what it wrote to its cache (Anthropic's
    ``cache_creation_input_tokens``).

    ``messages`` (one :class:`MessageDecision` per stored message) is built on first use for
    an appended build — the last compaction's decisions plus the appended messages — so an
    append costs O(new messages); it is serialised like a field.
    """

    build_id: str
    created_at: datetime | None = None
    goal: TaskGoal
    budget: int
    encoding: str
    tokens_approximate: bool = Field(
        default=False, description="token counts use an OpenAI encoding for a model whose tokenizer is unknown"
    )
    tokens_before: int
    tokens_after: int
    messages_before: int
    messages_after: int
    keep_recent: int
    working_steps: int
    identity: bool = Field(description="the whole history fitted; output equals input")
    goal_block: bool = False
    scorer: str = "offline"
    scorer_model: str = "offline-v2"
    rubric_version: str = "offline-v2"
    embedder: str = Field(
        default="",
        description="the message-vector model as name@version (issue 11), empty when the build was lexical only",
    )
    usage: ScorerUsage = Field(default_factory=ScorerUsage)
    cache_hits: int = 0
    cache_misses: int = 0
    chains_kept: int = 0
    chains_total: int = 0
    summaries: list[SummaryRecord] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    budget_breakdown: BudgetBreakdown | None = Field(
        default=None, description="where the budget went, by purpose (None in records written before it existed)"
    )
    mode: BuildMode = Field(default="full_rebuild", description="appended | compacted | full_rebuild (SPEC §3.1)")
    mode_reason: str = Field(default="", description="why this mode ran, with the numbers that decided it")
    target: int | None = Field(default=None, description="a compaction's target (tokens); None otherwise")
    base_build_id: str | None = Field(default=None, description="the build an appended build extends")
    appended_ids: list[str] = Field(default_factory=list, description="ids of the messages this build appended")
    prefix_tokens: int = Field(default=0, description="tokens shared exactly with the previous request's start")
    cacheable_tokens: int = Field(default=0, description="of prefix_tokens, what a provider bills as cached")
    provider_cached_tokens: int | None = Field(default=None, description="cached tokens the provider reported")
    provider_cache_creation_tokens: int | None = Field(
        default=None, description="tokens the provider reported writing to its prompt cache (Anthropic)"
    )
    board: BoardReport | None = Field(default=None, description="the memory board's part (None without a board)")

    _messages: list[MessageDecision] | None = PrivateAttr(default=None)
    _lazy_messages: Callable[[], list[MessageDecision]] | None = PrivateAttr(default=None)
    _lazy_user_messages: Callable[[], list[MessageDecision]] | None = PrivateAttr(default=None)

    @model_validator(mode="wrap")
    @classmethod
    def _take_messages(cls, data: Any, handler: ModelWrapValidatorHandler[DecisionRecord]) -> DecisionRecord:
        """Accept ``messages`` as input (keyword or JSON) although it is a computed field."""
        messages = None
        if isinstance(data, dict) and "messages" in data:
            data = dict(data)
            messages = data.pop("messages")
        record = handler(data)
        if messages is not None:
            record._messages = [
                m if isinstance(m, MessageDecision) else MessageDecision.model_validate(m) for m in messages
            ]
            record._lazy_messages = record._lazy_user_messages = None
        return record

    @computed_field  # type: ignore[prop-decorator]
    @property
    def messages(self) -> list[MessageDecision]:
        """Per stored message, what the build decided (built on first use for an appended build)."""
        if self._messages is None:
            lazy, self._lazy_messages, self._lazy_user_messages = self._lazy_messages, None, None
            self._messages = lazy() if lazy is not None else []
        return self._messages

    @messages.setter
    def messages(self, value: list[MessageDecision]) -> None:
        self._messages = list(value)
        self._lazy_messages = self._lazy_user_messages = None

    def defer_messages(
        self, build: Callable[[], list[MessageDecision]], users: Callable[[], list[MessageDecision]] | None = None
    ) -> None:
        """Build :attr:`messages` with ``build()`` on first use instead of now (O(1) here);
        ``users()``, when given, builds only the decisions about messages a user wrote
        (:meth:`user_decisions`), the same objects' content as ``build()`` gives them."""
        # the private attributes' own dict (a record always has one): set in one call, not three
        self.__pydantic_private__.update(_messages=None, _lazy_messages=build, _lazy_user_messages=users)  # type: ignore[union-attr]

    def user_decisions(self) -> list[MessageDecision]:
        """The decisions about messages a user wrote (:func:`~relevance_memory._models.user_authored`),
        in store order, without building the others while :attr:`messages` is not built yet
        (a compaction reads them to check it kept the task statement and the user's constraints)."""
        if self._messages is None and self._lazy_user_messages is not None:
            return self._lazy_user_messages()
        return [d for d in self.messages if user_authored(d.role, d.msg_type)]

    def cost_units(self, cached_price: float = 0.1) -> float:
        """This request's input cost in uncached-token units: ``uncached + p × cached``.

        Cached tokens are the provider's reported ``provider_cached_tokens`` when known,
        else ``cacheable_tokens`` (the estimate from the exact shared prefix).
        """
        cached = self.provider_cached_tokens if self.provider_cached_tokens is not None else self.cacheable_tokens
        cached = max(0, min(cached, self.tokens_after))
        return (self.tokens_after - cached) + cached_price * cached

    @property
    def cache_hit_rate(self) -> float:
        """Share of score look-ups answered by the cache (0..1; 0 when none)."""
        total = self.cache_hits + self.cache_misses
        return self.cache_hits / total if total else 0.0

    def decision_counts(self) -> dict[str, int]:
        """How many messages got each decision (``kept``, ``recent``, ``summarised``, ``dropped``)."""
        counts = Counter(d.decision for d in self.messages)
        return {k: counts.get(k, 0) for k in ("kept", "recent", "summarised", "dropped")}

    def decision_for(self, message_id: str) -> MessageDecision:
        """The decision about ``message_id``. Raises ``KeyError`` naming the id."""
        for decision in self.messages:
            if decision.id == message_id:
                return decision
        raise KeyError(f"no decision for message {message_id!r}")

    def to_json(self, *, indent: int | None = 2) -> str:
        """The record as JSON text."""
        return self.model_dump_json(indent=indent)

    @classmethod
    def from_json(cls, text: str | bytes) -> DecisionRecord:
        """Parse a record written by :meth:`to_json`. Raises ``pydantic.ValidationError``."""
        return cls.model_validate_json(text)

"""Scoring seam (SPEC §3 step 4, §4): the Scorer protocol, the score cache key, and the
deterministic offline scorer that is the embedded default and the fallback.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter, OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, Field

from .._models import MessageType, RelevanceScore, ScoreSource, TaskGoal
from .._text import asks_when, has_constraint, has_time_expression, identifiers, is_error_output, lexical_terms, stem

__all__ = [
    "InMemoryScoreCache",
    "LLMCall",
    "OfflineScorer",
    "ScoreCache",
    "ScoreItem",
    "Scorer",
    "ScorerUsage",
    "ScoringContext",
    "ScoringResult",
    "message_cache_key",
    "score_cache_key",
    "score_cache_prefix",
]

REQUEST_REASON = "one of the user's requests the goal is formed from"
"""The offline scorer's reason for a user request it scores 4 when the goal follows the user's
requests (it is kept before other chains, and yields the summary reserve its share: issue 23)."""


@dataclass(frozen=True, slots=True)
class ScoreItem:
    """One message as a scorer sees it.

    Attributes:
        id: the message id; replies must use exactly these ids.
        role: OpenAI role.
        msg_type: :class:`MessageType` value.
        source: tool name or role, shown to the model.
        text: content plus tool-call names and arguments.
        token_count: the message's tokens (tokens).
        step: the step the message belongs to.
        referenced_by: how many later messages reference it.
        is_task_statement: it is the first user message (the task of an agent run).
        content_hash: the message's content hash (part of the cache key).
        terms: the message's lexical terms as computed on ingest (empty: derive from text).
        identifiers: the message's identifiers as computed on ingest (``None``: derive from text).
        superseded_by: ``"<newer id>: <why>"`` when a newer message supersedes this one
            (issue 11); the LLM scorer's prompt shows the mark.
        episode: the message's episode (conversation session) number
            (:attr:`MessageStore.episodes`); items of one episode give each other context.
        notice: for a format notice the harness repeats (:class:`~relevance_memory._requests.NoticeIndex`),
            ``"newest"`` for its newest copy and ``"older"`` for the others; ``""`` otherwise.
        request: one of the user's requests the final goal is formed from (``TaskGoal.source ==
            "user_requests"``, SPEC §11): the offline scorer scores it 4.
    """

    id: str
    role: str
    msg_type: str
    source: str
    text: str
    token_count: int = 0
    step: int = 0
    referenced_by: int = 0
    is_task_statement: bool = False
    notice: str = ""
    request: bool = False
    content_hash: str = ""
    terms: frozenset[str] = frozenset()
    identifiers: frozenset[str] | None = None
    superseded_by: str = ""
    episode: int = 0


@dataclass(frozen=True)
class ScoringContext:
    """Corpus statistics the offline scorer uses for IDF (pure data).

    Attributes:
        doc_freq: term → number of messages containing it.
        doc_count: number of messages the statistics cover.
    """

    doc_freq: Mapping[str, int] = field(default_factory=dict)
    doc_count: int = 0


class ScorerUsage(BaseModel):
    """Usage accounting of one build's scoring (SPEC §8): calls, tokens, latency, failures."""

    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = Field(default=0.0, description="wall time inside scorer calls (seconds)")
    retries: int = 0
    fallbacks: int = 0

    def add(self, other: ScorerUsage) -> None:
        """Accumulate ``other`` into this object."""
        self.llm_calls += other.llm_calls
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.latency_s += other.latency_s
        self.retries += other.retries
        self.fallbacks += other.fallbacks


class LLMCall(BaseModel):
    """One HTTP request an LLM scorer sent (issue 14: per-call latency and tokens).

    Attributes:
        batch: index of the batch the request belongs to (0-based, in item order).
        kind: ``ask`` (first request of a batch), ``reask`` (only the ids not yet validly
            scored, with a short fixed correction), ``split`` (half of a request whose
            reply was cut at the token cap), ``retry`` (transport re-send of the same
            request) or ``format`` (re-sent with a simpler ``response_format`` after the
            endpoint rejected one).
        ids: message ids the request asked to score.
        outcome: ``parsed`` (a score list was read), ``unparsed`` (no usable JSON, or an
            ambiguous reply), ``cut`` (reply cut at the token cap), ``timeout``, ``error``
            (connection error or HTTP status; see ``status``).
        status: HTTP status, when there was a response.
        taken: ids this reply scored validly.
        latency_s: wall time of the request (seconds).
        prompt_tokens / completion_tokens: as the server reported them (tokens); for a
            request that got no reply (timeout, reset) ``prompt_tokens`` is the scorer's own
            count of what it sent and ``estimated`` is true.
        max_tokens: the completion cap sent (tokens), ``None`` when none was sent.
        finish_reason: as the server reported it.
    """

    batch: int
    kind: str
    ids: int
    outcome: str
    status: int | None = None
    taken: int = 0
    latency_s: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    estimated: bool = False
    max_tokens: int | None = None
    finish_reason: str | None = None


class ScoringResult(BaseModel):
    """What a scorer returns: one score per requested id, usage, warnings, and (LLM
    scorers) one :class:`LLMCall` per HTTP request sent."""

    scores: list[RelevanceScore]
    usage: ScorerUsage = Field(default_factory=ScorerUsage)
    warnings: list[str] = Field(default_factory=list)
    calls: list[LLMCall] = Field(default_factory=list)


@runtime_checkable
class Scorer(Protocol):
    """Seam for relevance scoring. Implementations return exactly one score per item.

    Attributes:
        name: short label for records and the CLI (``"offline"``, ``"llm"``).
        model: model id (part of the cache key; ``"offline-v2"`` for the offline scorer).
        rubric_version: prompt template id (part of the cache key and decision record).
        local: optional; ``True`` when scoring costs no call per message (the offline
            scorer), so ``MemoryConfig.prefilter="auto"`` lets it see every candidate.
        context_dependent: optional; ``True`` when a score depends on the message's place
            in the history (references, task statement, term statistics), not only on its
            content: its scores are cached by the manager for its own history only (never in
            a shared or on-disk cache), keyed by message id and reference count
            (:func:`message_cache_key`), never shared between equal texts. A
            scorer that delegates to :class:`OfflineScorer` should copy ``local`` and
            ``context_dependent`` from it. Without the flag a rebuild is still stable (the
            manager reads a per-message entry before the shared one), but a score stays
            cached after new references arrive.
    """

    name: str
    model: str
    rubric_version: str

    def score(
        self, goal: TaskGoal, items: Sequence[ScoreItem], context: ScoringContext | None = None
    ) -> ScoringResult:
        """Score ``items`` for ``goal``; must not raise for model failures (fall back instead)."""
        ...


def score_cache_prefix(*, rubric_version: str, model: str, goal: TaskGoal) -> str:
    """The per-build part of the cache key: sha256 over rubric version, model, final goal
    and subtask (hex). Computed once per build, not once per message."""
    payload = "\x1f".join([rubric_version, model, goal.final, goal.effective_subtask])
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def message_cache_key(
    prefix: str,
    *,
    content_hash: str,
    role: str,
    msg_type: str,
    message_id: str | None = None,
    referenced_by: int | None = None,
) -> str:
    """The cache key of one message under a build's :func:`score_cache_prefix`.

    Without ``message_id`` the key is SPEC §6's: content hash, role and type, shared by
    every message with the same text. With it the key names one message (and, with
    ``referenced_by``, how many later messages referenced it when it was scored): the
    manager reads such a key first, so two messages with the same text keep their own
    scores, and for a scorer whose score reads the message's place in the history
    (``Scorer.context_dependent``: references, task statement) a new reference re-scores
    the message instead of serving a stale score.
    """
    key = f"{prefix}:{content_hash}:{role}:{msg_type}"
    if message_id is not None:
        key = f"{key}:{message_id}"
        if referenced_by is not None:
            key = f"{key}@{referenced_by}"
    return key


def score_cache_key(
    *, rubric_version: str, model: str, goal: TaskGoal, content_hash: str, role: str, msg_type: str
) -> str:
    """Cache key of one score (SPEC §6): covers rubric version, model, final goal, subtask,
    message content hash, role and type. A build computes the prefix once and calls
    :func:`message_cache_key` per message."""
    prefix = score_cache_prefix(rubric_version=rubric_version, model=model, goal=goal)
    return message_cache_key(prefix, content_hash=content_hash, role=role, msg_type=msg_type)


@runtime_checkable
class ScoreCache(Protocol):
    """Seam for the score cache: a mapping from :func:`score_cache_key` to scores."""

    def get(self, key: str) -> RelevanceScore | None:
        """The cached score, or ``None``."""
        ...

    def set(self, key: str, score: RelevanceScore) -> None:
        """Store a score."""
        ...


class InMemoryScoreCache:
    """A bounded in-process LRU score cache.

    Args:
        maxsize: most entries kept (oldest used are evicted first).
    """

    def __init__(self, maxsize: int = 100_000) -> None:
        self._data: OrderedDict[str, RelevanceScore] = OrderedDict()
        self._maxsize = maxsize

    def get(self, key: str) -> RelevanceScore | None:
        """The cached score, or ``None``; marks the entry as recently used."""
        score = self._data.get(key)
        if score is not None:
            self._data.move_to_end(key)
        return score

    def set(self, key: str, score: RelevanceScore) -> None:
        """Store a score, evicting the least recently used beyond ``maxsize``."""
        self._data[key] = score
        self._data.move_to_end(key)
        while len(self._data) > self._maxsize:
            self._data.popitem(last=False)

    def __len__(self) -> int:
        return len(self._data)


# --------------------------------------------------------------------------- offline
_BASE_PRIOR = {
    MessageType.USER_INSTRUCTION.value: 4,
    MessageType.SYSTEM.value: 4,
    MessageType.SUMMARY.value: 3,
}
LEXICAL_STRONG = 0.35
"""Share of the goal's IDF mass a message must cover for +2 (tuned on LoCoMo, issue 5)."""
LEXICAL_WEAK = 0.12
"""Share of the goal's IDF mass a message must cover for +1."""
IDENTIFIER_WEIGHT = 0.25
"""Added to a score's ``weight`` (tie-break within a score) when an identifier of the goal is quoted."""
WEIGHT_LENGTH_TOKENS = 200
"""Messages longer than this get a ``weight`` scaled by ``sqrt(200 / tokens)`` (value per token:
a long message that matches as well as a short one costs more of the budget; issue 5, LongMemEval)."""
TIME_WEIGHT = 0.1
"""Added to ``weight`` when the goal asks *when* and the message states a time (issue 5, LoCoMo temporal)."""


_CHAT_TYPES = frozenset({MessageType.USER_CHAT.value, MessageType.ASSISTANT_REASONING.value})


_USER_TYPES = frozenset({MessageType.USER_INSTRUCTION.value, MessageType.USER_CHAT.value})

NOTICE_SCORE = 4
"""Score of the newest copy of a format notice a harness repeats (SPEC §11: the next step needs
it — it says how to write the next action — but it is not a hard constraint of the task)."""
REPEAT_SCORE = 2
"""Score of an older copy of such a notice: a repeat of the newest, scored once as it."""


class OfflineScorer:
    """Deterministic relevance scorer with no network (SPEC §4, the embedded default).

    Rules, in order (reason strings name the rules that fired):

    - the task statement (first user message) → 5; a user instruction stating a hard
      constraint ("must / never / only / 必须 / 不要 / 禁止" …) → 5 (the store types every
      user message with such a cue as ``user_instruction``; a caller that types a message
      ``user_chat`` explicitly — e.g. a chat transcript between people — opts out);
    - otherwise a prior by type (other user instructions and later system messages 4,
      summaries 3, everything else 2), then
      ``+2`` / ``+1`` when the message covers ≥ 35 % / ≥ 12 % of the IDF-weighted terms
      of the subtask (or final goal, whichever is higher), ``+1`` when it quotes an exact
      identifier of the goal (path, id, number), ``+1`` when the goal asks *when* and a
      message that already matches the goal lexically states a time ("yesterday", "last
      week", a date, 昨天 …), ``+1`` when later messages reference it (for chat and
      assistant prose only when it also matches the goal: in a chat, names and numbers
      recur everywhere), ``+1`` for an error
      output of a tool; ``−1`` when nothing fired at all;
    - clipped to 1..5.

    Terms are compared after a light English suffix stemming (:func:`stem`: plurals,
    ``-ing``, ``-ed``), so "camping" matches "camp". Each score carries a ``weight``: the
    goal coverage (0..1) plus small bonuses, which selection uses to order messages of
    equal score (the best lexical match per token first instead of the newest): coverage
    scaled by ``sqrt(200 / tokens)`` for messages over 200 tokens. For chat and assistant
    prose (not tool results or instructions) the thresholds above use that scaled coverage
    too, so a long reply does not reach 4–5 by sheer length. Outside chat the weight is
    rounded to one decimal, so recency still orders messages that match about equally.

    IDF comes from :class:`ScoringContext` (the store's incremental statistics), so a
    message's score does not depend on which batch it is scored in.
    """

    name = "offline"
    local = True  # no per-message cost: ``prefilter="auto"`` does not rank in front of it
    context_dependent = True  # references and the task statement count: cache per message id
    model = "offline-v2"
    rubric_version = "offline-v2"

    def score(
        self, goal: TaskGoal, items: Sequence[ScoreItem], context: ScoringContext | None = None
    ) -> ScoringResult:
        """Score every item; never raises for ordinary input. Returns ``source=offline``."""
        features = _GoalFeatures.of(goal, context)
        return ScoringResult(scores=[self._score(features, item) for item in items])

    def score_one(self, goal: TaskGoal, item: ScoreItem, context: ScoringContext | None = None) -> RelevanceScore:
        """Score one item (see class docstring)."""
        return self._score(_GoalFeatures.of(goal, context), item)

    @staticmethod
    def _score(features: _GoalFeatures, item: ScoreItem) -> RelevanceScore:
        if item.is_task_statement:
            return RelevanceScore(id=item.id, score=5, reason="task statement", source=ScoreSource.OFFLINE, weight=1.0)
        if item.notice:  # SPEC §11: a notice the harness repeats is a format notice, not a hard constraint
            newest = item.notice == "newest"
            return RelevanceScore(
                id=item.id, score=NOTICE_SCORE if newest else REPEAT_SCORE, source=ScoreSource.OFFLINE,
                reason="format notice the harness repeats (not a hard constraint): "
                + ("its newest copy" if newest else "an older copy; the newest is the one kept"),
            )
        coverage = features.coverage(item.terms or frozenset(lexical_terms(item.text)))
        if item.msg_type == MessageType.USER_INSTRUCTION.value and item.role == "user" and has_constraint(item.text):
            return RelevanceScore(
                id=item.id, score=5, reason="user states a hard constraint", source=ScoreSource.OFFLINE,
                weight=coverage,
            )
        if item.request and item.role == "user" and item.msg_type in _USER_TYPES:
            return RelevanceScore(
                id=item.id, score=4, reason=REQUEST_REASON, source=ScoreSource.OFFLINE,
                weight=max(coverage, 0.5),
            )
        score = _BASE_PRIOR.get(item.msg_type, 2)
        weight = coverage * min(1.0, math.sqrt(WEIGHT_LENGTH_TOKENS / max(item.token_count, 1)))
        # the reason reads as the sum it is: "base 2 for a tool result; +1 quotes …; = 4"
        kind = item.msg_type.replace("_", " ")
        # "an assistant reasoning", "a user chat" (user starts with a consonant sound)
        reasons: list[str] = [f"base {score} for {'an' if kind[:1] in 'aeio' else 'a'} {kind}"]
        fired = False
        if item.msg_type in _CHAT_TYPES and weight < coverage:
            coverage = weight  # a long chat message must match densely, not by sheer length
        if coverage >= LEXICAL_STRONG:
            score += 2
            reasons.append(f"+2 covers {coverage:.0%} of the goal's terms")
            fired = True
        elif coverage >= LEXICAL_WEAK:
            score += 1
            reasons.append(f"+1 covers {coverage:.0%} of the goal's terms")
            fired = True
        item_ids = item.identifiers if item.identifiers is not None else identifiers(item.text)
        if features.identifiers and features.identifiers & item_ids:
            score += 1
            weight += IDENTIFIER_WEIGHT
            reasons.append("+1 quotes an identifier of the goal")
            fired = True
        if features.asks_when and coverage >= LEXICAL_WEAK and has_time_expression(item.text):
            score += 1
            weight += TIME_WEIGHT
            reasons.append("+1 states a time the goal asks for")
        if item.referenced_by and (item.msg_type not in _CHAT_TYPES or coverage >= LEXICAL_WEAK):
            score += 1
            reasons.append(f"+1 referenced by {item.referenced_by} later message(s)")
            fired = True
        if item.msg_type == MessageType.TOOL_RESULT.value and is_error_output(item.text):
            score += 1
            reasons.append("+1 error output")
            fired = True
        if not fired and item.msg_type not in _BASE_PRIOR:
            score -= 1
            reasons.append("−1 unrelated to the goal")
        total = score
        score = max(1, min(5, score))
        if len(reasons) > 1:
            reasons.append(f"= {score}" + (f" (clipped from {total})" if total != score else ""))
        # chat: the best match wins; tool runs: only clearly better matches jump ahead, and
        # recency breaks near-ties (the latest file state / output usually matters most)
        digits = 4 if item.msg_type in _CHAT_TYPES else 1
        return RelevanceScore(
            id=item.id, score=score, reason="; ".join(reasons), source=ScoreSource.OFFLINE,
            weight=round(weight, digits),
        )


@dataclass(frozen=True)
class _GoalFeatures:
    """The goal's lexical terms with IDF weights and its identifiers, computed once per call."""

    queries: tuple[dict[str, float], ...]
    identifiers: frozenset[str]
    asks_when: bool = False

    @classmethod
    def of(cls, goal: TaskGoal, context: ScoringContext | None) -> _GoalFeatures:
        n = max(context.doc_count if context else 0, 1)
        df = context.doc_freq if context else {}
        queries: list[dict[str, float]] = []
        texts = [goal.effective_subtask, goal.final]
        if goal.source == "user_requests" and goal.final:
            texts.append(goal.final.rsplit("\n", 1)[-1])  # the newest request on its own (SPEC §11)
        for query in dict.fromkeys(texts):
            weights: dict[str, float] = {}
            for term in Counter(lexical_terms(query)):
                idf = math.log(1 + (n - df.get(term, 0) + 0.5) / (df.get(term, 0) + 0.5))
                key = stem(term)
                weights[key] = max(weights.get(key, 0.0), idf)
            if sum(weights.values()) > 0:
                queries.append(weights)
        text = goal.final + "\n" + goal.subtask
        return cls(tuple(queries), frozenset(identifiers(text)), asks_when(text))

    def coverage(self, doc_terms: frozenset[str]) -> float:
        """Largest share of a query's IDF mass that ``doc_terms`` covers (0..1)."""
        if not doc_terms:
            return 0.0
        stems = {stem(t) for t in doc_terms}
        best = 0.0
        for weights in self.queries:
            total = sum(weights.values())
            best = max(best, sum(w for t, w in weights.items() if t in stems) / total)
        return best

"""Rubric iteration: a labelled-set format, a builder from evidence-labelled data, and
metrics of a scorer (+ prompt version) against the gold labels.

Labelled-set JSON::

    {"name": str, "source": str,
     "examples": [{"id": str, "goal": {"final": str, "subtask": str},
                   "messages": [{"id": str, "role": str, "content": str, "msg_type"?: str}],
                   "gold": {message id: int 1..5}}]}

A message is *relevant* when its gold score is ≥ 4. Messages without a gold score give
context (and IDF statistics) but are not measured.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from .._exceptions import ConfigError
from .._models import ScoreSource, TaskGoal
from .._tokenizer import TiktokenCounter, TokenCounter
from ..scoring._scorer import LLMCall, OfflineScorer, ScoreItem, Scorer, ScorerUsage, ScoringContext
from ..store._store import MessageStore
from ._datasets import EvalDataset

__all__ = [
    "LabelledExample",
    "LabelledMessage",
    "LabelledSet",
    "RubricReport",
    "ScoreMetrics",
    "auroc",
    "build_labelled_set",
    "evaluate_rubric",
    "make_scorer",
    "score_metrics",
]

RELEVANT_AT = 4
"""Gold scores ≥ this are *relevant*; predicted scores ≥ this count as a positive call."""


class LabelledMessage(BaseModel):
    """One message of an example (OpenAI fields plus id and optional type)."""

    id: str
    role: str
    content: str
    msg_type: str | None = None


class LabelledExample(BaseModel):
    """One goal with its messages and gold scores (message id → 1..5)."""

    id: str
    goal: TaskGoal
    messages: list[LabelledMessage]
    gold: dict[str, int]


class LabelledSet(BaseModel):
    """A labelled set (see module docstring)."""

    name: str
    source: str = ""
    examples: list[LabelledExample] = Field(default_factory=list)

    @classmethod
    def load(cls, path: str | Path) -> LabelledSet:
        """Read a labelled set. Raises ``OSError`` / ``pydantic.ValidationError``."""
        return cls.model_validate_json(Path(path).read_bytes())

    def save(self, path: str | Path) -> None:
        """Write the set as JSON, creating parent folders."""
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(self.model_dump_json(indent=1) + "\n", encoding="utf-8")


def build_labelled_set(
    dataset: EvalDataset, *, negatives: int = 8, seed: int = 0, limit: int | None = None
) -> LabelledSet:
    """Derive a labelled set from LoCoMo / LongMemEval questions.

    For each question with evidence: gold 5 for each evidence turn; gold 1 for
    ``negatives`` other turns — half the evidence's neighbours (hard negatives: same
    session, adjacent), the rest sampled at random (``random.Random(seed)``). Messages
    are kept in time order; goal final = subtask = the question.

    Args:
        dataset: loaded data set.
        negatives: other turns per question.
        seed: sampling seed (deterministic output for a seed).
        limit: at most this many examples.
    """
    rng = random.Random(seed)
    examples: list[LabelledExample] = []
    for conv in dataset.conversations:
        position = {t.id: n for n, t in enumerate(conv.turns)}
        for q in conv.questions:
            if not q.evaluable:
                continue
            if limit is not None and len(examples) >= limit:
                break
            evidence = set(q.evidence)
            near: list[int] = []
            for e in q.evidence:
                for j in (position[e] - 1, position[e] + 1):
                    if 0 <= j < len(conv.turns) and conv.turns[j].id not in evidence and j not in near:
                        near.append(j)
            hard = near[: negatives // 2]
            pool = [j for j in range(len(conv.turns)) if conv.turns[j].id not in evidence and j not in hard]
            easy = rng.sample(pool, min(len(pool), negatives - len(hard)))
            picked = sorted({position[e] for e in q.evidence} | set(hard) | set(easy))
            messages = [
                LabelledMessage(
                    id=conv.turns[j].id, role=conv.turns[j].role, content=conv.turns[j].text,
                    msg_type=conv.turns[j].message_type,
                )
                for j in picked
            ]
            gold = {conv.turns[j].id: 5 if conv.turns[j].id in evidence else 1 for j in picked}
            examples.append(LabelledExample(
                id=q.id, goal=TaskGoal(final=q.question, subtask=q.question, source="explicit"),
                messages=messages, gold=gold,
            ))
    return LabelledSet(name=f"{dataset.name}-evidence", source=dataset.name, examples=examples)


def auroc(positive: Sequence[float], negative: Sequence[float]) -> float:
    """Area under the ROC curve: P(score of a random positive > a random negative), ties
    counting one half (the Mann–Whitney U statistic / (n₊·n₋)). NaN when a side is empty."""
    if not positive or not negative:
        return math.nan
    ranked = sorted([(s, 1) for s in positive] + [(s, 0) for s in negative])
    rank_sum = 0.0
    i = 0
    while i < len(ranked):
        j = i
        while j < len(ranked) and ranked[j][0] == ranked[i][0]:
            j += 1
        mid_rank = (i + 1 + j) / 2  # average 1-based rank of the tie group
        rank_sum += mid_rank * sum(1 for k in range(i, j) if ranked[k][1] == 1)
        i = j
    n_pos, n_neg = len(positive), len(negative)
    return (rank_sum - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


class ScoreMetrics(BaseModel):
    """Metrics of one set of scores against the gold labels.

    Attributes:
        messages: messages measured (with a gold score); relevant: those with gold ≥ 4.
        auroc: AUROC of the score, relevant vs not (NaN when a side is empty).
        precision_at_4: share of messages scored ≥ 4 that are relevant (NaN when none).
        recall_at_4: share of relevant messages scored ≥ 4 (NaN when none are relevant).
        histogram: ``{"relevant": [n(1)..n(5)], "other": [...]}``.
    """

    messages: int
    relevant: int
    auroc: float
    precision_at_4: float
    recall_at_4: float
    histogram: dict[str, list[int]]


def score_metrics(scores: dict[tuple[str, str], int], gold: dict[tuple[str, str], int]) -> ScoreMetrics:
    """:class:`ScoreMetrics` of ``scores`` (key → 1..5) over the keys they share with ``gold``."""
    keys = sorted(k for k in scores if k in gold)
    pos = [float(scores[k]) for k in keys if gold[k] >= RELEVANT_AT]
    neg = [float(scores[k]) for k in keys if gold[k] < RELEVANT_AT]
    called = [k for k in keys if scores[k] >= RELEVANT_AT]
    hist = {"relevant": [0] * 5, "other": [0] * 5}
    for k in keys:
        hist["relevant" if gold[k] >= RELEVANT_AT else "other"][scores[k] - 1] += 1
    hits = sum(1 for k in called if gold[k] >= RELEVANT_AT)
    return ScoreMetrics(
        messages=len(keys), relevant=len(pos), auroc=auroc(pos, neg),
        precision_at_4=hits / len(called) if called else math.nan,
        recall_at_4=hits / len(pos) if pos else math.nan,
        histogram=hist,
    )


class RubricReport(BaseModel):
    """Metrics of one scorer + prompt version on a labelled set.

    The top-level metrics are of every score the scorer returned, **with fallbacks**
    (what a build would use); :attr:`judge` are of the judge's own scores alone — those
    whose source is not ``fallback`` (issue 14: a metric that mixes them hides a broken
    judge: 275 of 281 fallbacks once read as AUROC 0.76 "for the LLM").

    Attributes:
        scorer, model, rubric_version: what was measured.
        examples, messages, relevant, auroc, precision_at_4, recall_at_4, histogram:
            as :class:`ScoreMetrics`, over all scores (first run).
        judge: :class:`ScoreMetrics` of the judge's own scores (first run).
        judged_share: ``judge.messages / messages``.
        repeats: runs; agreement: share of messages with the same score in every run
            (1.0 for one run).
        llm_calls, prompt_tokens, completion_tokens, latency_s, fallbacks, retries:
            summed over all runs (``latency_s`` in seconds).
        parse_rate: share of answered requests whose reply held a usable score list
            (NaN without requests); reasks, splits, timeouts: requests of those kinds.
        batches: first requests (one per batch); seconds_per_call, seconds_per_message
            (seconds; per message scored by the judge itself).
    """

    scorer: str
    model: str
    rubric_version: str
    examples: int
    messages: int
    relevant: int
    auroc: float
    precision_at_4: float
    recall_at_4: float
    histogram: dict[str, list[int]]
    judge: ScoreMetrics
    judged_share: float
    repeats: int
    agreement: float
    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    fallbacks: int = 0
    retries: int = 0
    parse_rate: float = math.nan
    batches: int = 0
    reasks: int = 0
    splits: int = 0
    timeouts: int = 0
    seconds_per_call: float = math.nan
    seconds_per_message: float = math.nan


def example_items(example: LabelledExample, counter: TokenCounter) -> tuple[list[ScoreItem], ScoringContext]:
    """Ingest an example's messages into a fresh store; return the scorer's items and the
    IDF statistics of those messages."""
    store = MessageStore(counter, on_invalid="repair")
    for m in example.messages:
        store.add({"role": m.role, "content": m.content}, id=m.id, msg_type=m.msg_type)
    items = [
        ScoreItem(
            id=msg.id, role=msg.role, msg_type=msg.msg_type.value, source=msg.source, text=msg.text,
            token_count=msg.token_count, step=msg.step,
            referenced_by=len(store.referenced_by.get(msg.id, ())),
            content_hash=msg.content_hash, terms=frozenset(store.terms[msg.index]),
        )
        for msg in store.messages
    ]
    return items, ScoringContext(doc_freq=store.doc_freq, doc_count=len(store))


def evaluate_rubric(labelled: LabelledSet, scorer: Scorer, *, repeats: int = 1,
                    encoding: Literal["cl100k_base", "o200k_base"] = "cl100k_base") -> RubricReport:
    """Score every example ``repeats`` times with ``scorer`` and compute the metrics of
    :class:`RubricReport`. Scorer exceptions propagate (the set is the thing under test)."""
    counter: TokenCounter = TiktokenCounter(encoding)
    usage = ScorerUsage()
    calls: list[LLMCall] = []
    runs: list[dict[tuple[str, str], int]] = []
    own: dict[tuple[str, str], int] = {}
    gold: dict[tuple[str, str], int] = {}
    prepared = [(ex, *example_items(ex, counter)) for ex in labelled.examples]
    for run in range(max(1, repeats)):
        scores: dict[tuple[str, str], int] = {}
        for ex, items, context in prepared:
            result = scorer.score(ex.goal, items, context)
            usage.add(result.usage)
            calls.extend(result.calls)
            for s in result.scores:
                if s.id in ex.gold:
                    scores[(ex.id, s.id)] = s.score
                    gold[(ex.id, s.id)] = ex.gold[s.id]
                    if run == 0 and s.source != ScoreSource.FALLBACK:
                        own[(ex.id, s.id)] = s.score
        runs.append(scores)
    first = runs[0]
    keys = sorted(gold)
    everything = score_metrics(first, gold)
    judge = score_metrics(own, gold)
    same = sum(1 for k in keys if all(run.get(k) == first[k] for run in runs))
    answered = [c for c in calls if c.outcome in ("parsed", "unparsed", "cut")]
    seconds = sum(c.latency_s for c in calls) if calls else usage.latency_s
    judged_total = len(own) * len(runs)
    return RubricReport(
        scorer=scorer.name, model=scorer.model, rubric_version=scorer.rubric_version,
        examples=len(labelled.examples), **everything.model_dump(),
        judge=judge, judged_share=len(own) / len(keys) if keys else math.nan,
        repeats=len(runs), agreement=same / len(keys) if keys else math.nan,
        llm_calls=usage.llm_calls, prompt_tokens=usage.prompt_tokens, completion_tokens=usage.completion_tokens,
        latency_s=round(usage.latency_s, 3), fallbacks=usage.fallbacks, retries=usage.retries,
        parse_rate=sum(1 for c in answered if c.outcome == "parsed") / len(answered) if answered else math.nan,
        batches=sum(1 for c in calls if c.kind == "ask"), reasks=sum(1 for c in calls if c.kind == "reask"),
        splits=sum(1 for c in calls if c.kind == "split"), timeouts=sum(1 for c in calls if c.outcome == "timeout"),
        seconds_per_call=round(seconds / len(calls), 3) if calls else math.nan,
        seconds_per_message=round(seconds / judged_total, 3) if calls and judged_total else math.nan,
    )


def make_scorer(spec: str, **options: Any) -> Scorer:
    """A scorer from a short spec: ``offline``, ``lexical``, or ``llm`` / ``llm:<prompt version>``.

    ``offline`` is the default offline scorer a manager uses (:class:`SemanticScorer`: lexical
    rules fused with the bundled embedding, lexical alone when the model is not installed);
    ``lexical`` is the lexical rules alone (:class:`OfflineScorer`, the default before issue 11).

    The LLM scorer is imported lazily from ``relevance_memory`` (it needs an endpoint
    configured the way :class:`LLMScorer` documents); ``options`` go to its constructor.

    Raises:
        ConfigError: unknown spec, or the LLM scorer is not available in this build.
    """
    name, _, version = spec.partition(":")
    if name == "offline":
        from ..scoring._semantic import SemanticScorer  # local: loads the embedding model on first use

        return SemanticScorer()
    if name == "lexical":
        return OfflineScorer()
    if name == "llm":
        import relevance_memory

        cls = getattr(relevance_memory, "LLMScorer", None)
        if cls is None:
            raise ConfigError("the LLM scorer is not available in this build of relevance-memory")
        if version:
            options.setdefault("rubric_version", version)
        scorer: Scorer = cls(**options)
        return scorer
    raise ConfigError(f"unknown scorer {spec!r}; expected 'offline', 'lexical', 'llm' or 'llm:<prompt version>'")

"""Semantic evidence for the offline scorer (issue 11): lexical + embedding fusion.

:class:`SemanticScorer` wraps the lexical :class:`OfflineScorer` and an :class:`Embedder`:
it scores every item lexically, measures each item's cosine to the goal (the larger of
final goal and subtask), ranks the items by it, and fuses the two signals into the 1–5
score and the in-tier ``weight`` as :class:`SemanticFusion` says. The fusion variants
exist so they can be compared by measurement (``benchmarks/ablation_semantic.py``):

``weight``    score unchanged; ``weight += weight_mix × cosine`` (orders ties only).
``score``     a top-ranked cosine counts as evidence: ``+1`` when the item's cosine rank is
              in the top ``weak_share`` of the candidates (and at least ``min_cosine``),
              ``+1`` more in the top ``strong_share``; "unrelated" no longer applies; the
              weight blends as in ``weight``.
``rrf``       reciprocal-rank fusion (Cormack et al., 2009, k = 60) of the lexical order
              (score, weight) and the cosine order; the fused rank's top shares add the
              same bonuses as ``score``; the weight is the RRF value.
``weighted``  ``mix × lexical weight + (1 − mix) × cosine``; its rank's top shares add the
              bonuses; the weight is that blend.

Bonuses apply to message types in ``SemanticFusion.types`` (what people say, by default:
an assistant's long replies resemble every question on their topic, and tool output embeds
poorly against a task statement) and never lift a score above ``max_score``. An LLM assistant's
reply (``SemanticFusion.unranked_types``) is not ordered by its cosine either: its lexical
score and weight stand. A turn said
in the same episode (conversation session) as a strong match can earn the weak bonus from
that context (:func:`episode_context`). The default model is English-centric (a Llama-2 vocabulary: most CJK
characters fall back to shared byte tokens), so a goal or message that is mostly CJK text
(:data:`CJK_SHARE`) gets no semantic bonus; the lexical rules (CJK bigrams) decide it. Each item's reason says what fired ("semantic match 0.41 to the goal,
top 3%"). Ranks are taken over the items scored together, which for the offline scorer is
every candidate of the build (it is ``local``: no prefilter runs in front of it).

Vectors are computed once per content hash (:class:`VectorIndex`) and once per goal text.
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from .._models import MessageType, RelevanceScore, TaskGoal
from ._embedding import Embedder, VectorIndex, default_embedder, embedder_unavailable_reason
from ._scorer import OfflineScorer, ScoreItem, ScoringContext, ScoringResult

__all__ = [
    "CJK_SHARE", "RRF_K", "SemanticFusion", "SemanticScorer", "episode_context", "mostly_cjk", "rrf_fuse",
    "semantic_ranks",
]

RRF_K = 60
"""Reciprocal-rank fusion constant (Cormack, Clarke & Büttcher, SIGIR 2009)."""
RANK_FLOOR = 50
"""Ranks are shares of ``max(candidates, 50)``: in a small history only the very best
few can be "top 5 %"."""

CJK_SHARE = 0.3
"""Share of CJK characters above which a text is left to the lexical rules."""
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")


def mostly_cjk(text: str) -> bool:
    """Whether more than :data:`CJK_SHARE` of the text's non-space characters are CJK."""
    sample = "".join(text[:2000].split())
    return bool(sample) and len(_CJK.findall(sample)) / len(sample) > CJK_SHARE


FusionMode = Literal["off", "weight", "score", "rrf", "weighted"]
_WARNED_PROCESS: list[bool] = []  # the missing-model warning is raised once per process


@dataclass(frozen=True)
class SemanticFusion:
    """How lexical and semantic evidence are fused (see module docstring).

    The defaults are the variant that won the ablation (``benchmarks/ablation_semantic.py``,
    BENCHMARKS.md): ``score`` mode, +1 for the top 10 % of candidates by cosine, +2 for the
    top 2 %, capped at 4.

    Attributes:
        mode: ``off`` | ``weight`` | ``score`` | ``rrf`` | ``weighted``.
        weak_share: top share of candidates (by the fused or cosine rank) that earns +1.
        strong_share: top share that earns +2.
        min_cosine: least cosine for a bonus (``score`` mode).
        max_score: a semantic bonus never lifts a score above this (4: "needed next";
            5 stays for hard constraints and the task statement).
        weight_mix: cosine's share in the weight (``weight``/``score``), or the lexical
            share of the blend (``weighted``).
        types: message types that can earn a bonus: what people say (``user_chat``). An LLM
            assistant's reply is not lifted: it restates the question's topic at length, so its
            mean vector resembles every question on the topic while it rarely holds the user's
            fact (LongMemEval S: 500–700-token answers filled the core tier; lifting only user
            turns gained 2 points at every budget, equal on the oracle set; BENCHMARKS.md).
            Tool output embeds poorly against a task.
        unranked_types: message types whose in-tier weight the cosine does not enter either:
            an LLM assistant's reply (``assistant_reasoning``) keeps its lexical weight. Ranked
            by its cosine it still went ahead of the user's own turns of the same score in the
            working tier (LongMemEval S 4k / 8k 0.851 / 0.894 → 0.894 / 0.957 without it, oracle
            2k 0.860 → 0.866). Tool results stay ranked by it: on the SWE runs it orders a
            superseded result behind the newer ones (superseded tokens kept at 16k: 16,869 with
            it, 22,872 without; BENCHMARKS.md). Empty: every type, as before that ablation.
        lift_unrelated: the score a message the lexical rules found unrelated gets for a
            weak / strong semantic match (the "unrelated" malus no longer applies).
        lift_matched: what a weak / strong semantic match adds to a message the lexical
            rules already matched.
        episode_mix: weight of the episode context (:func:`episode_context`): ``cosine +
            episode_mix × the best cosine of another item of the same episode``. 0 turns it
            off; it changes nothing when every item is in one episode.
        episode_mode: ``lift`` (default): an item that earned no bonus by its own cosine
            earns the weak one (+1) when its context cosine is in the top ``weak_share``;
            ``rank``: the context cosine replaces the cosine everywhere (ranks, bonuses,
            weight). ``rank`` helps a haystack of many unrelated sessions most (LongMemEval S
            8k 0.894 → 0.936) but favours one session over the others when several hold
            evidence (LongMemEval oracle 4k 0.887 → 0.866, below BM25), so it is not the default.
    """

    mode: FusionMode = "score"
    weak_share: float = 0.1
    strong_share: float = 0.02
    min_cosine: float = 0.2
    max_score: int = 4
    weight_mix: float = 1.0
    types: frozenset[str] = field(default_factory=lambda: frozenset({MessageType.USER_CHAT.value}))
    lift_unrelated: tuple[int, int] = (3, 4)
    lift_matched: tuple[int, int] = (1, 2)
    episode_mix: float = 0.5
    episode_mode: Literal["rank", "lift"] = "lift"
    unranked_types: frozenset[str] = field(default_factory=lambda: frozenset({MessageType.ASSISTANT_REASONING.value}))

    @property
    def label(self) -> str:
        """Short id for records and cache keys (``score-w0.05-s0.01-c0.2-m4-x1.0``)."""
        return (f"{self.mode}-w{self.weak_share:g}-s{self.strong_share:g}-c{self.min_cosine:g}"
                f"-m{self.max_score}-x{self.weight_mix:g}-u{self.lift_unrelated[0]}{self.lift_unrelated[1]}"
                f"-l{self.lift_matched[0]}{self.lift_matched[1]}"
                + f"-t{''.join(sorted(t[0] + t.split('_')[-1][0] for t in self.types))}"
                + (f"-e{self.episode_mix:g}{self.episode_mode[0]}" if self.episode_mix else "")
                + (f"-n{''.join(sorted(t[0] + t.split('_')[-1][0] for t in self.unranked_types))}"
                   if self.unranked_types else ""))


def rrf_fuse(
    lexical: Sequence[float] | npt.NDArray[np.float64], semantic: Sequence[float] | npt.NDArray[np.float64],
    k: int = RRF_K,
) -> list[float]:
    """:func:`rrf_fuse_array` as a list of floats."""
    return rrf_fuse_array(lexical, semantic, k).tolist()  # type: ignore[no-any-return]


def rrf_fuse_array(
    lexical: Sequence[float] | npt.NDArray[np.float64], semantic: Sequence[float] | npt.NDArray[np.float64],
    k: int = RRF_K, *, semantic_order: npt.NDArray[np.int64] | None = None,
) -> npt.NDArray[np.float64]:
    """Reciprocal-rank fusion (Cormack, Clarke & Büttcher, SIGIR 2009): ``Σ 1 / (k + rank)``
    over the two orders (rank from 1; ties go to the later position, i.e. the newer message).
    A message with lexical score ≤ 0 gets only its semantic term, so every message has a
    positive fused score and BM25's misses can still rank by meaning. Ranked with numpy
    (the same floats as Python's: one division and one addition per message).

    Only the messages with a positive lexical score are ordered by it (they rank before every
    other, and only their lexical ranks count); ``semantic_order``: the positions of
    ``semantic`` in rank order (:func:`rank_order`), when the caller keeps it (issue 24: two
    sorts of every message's score at every compaction).

    Returns:
        ``(n,)`` fused scores (float64).
    """
    n = len(lexical)
    lex_values = np.asarray(lexical, dtype=np.float64)
    fused = np.zeros(n, dtype=np.float64)
    positive = np.flatnonzero(lex_values > 0)
    if len(positive):
        by_lexical = positive[rank_order(lex_values[positive], positive)]
        fused[by_lexical] = 1.0 / (k + np.arange(1, len(positive) + 1))
    order = rank_order(np.asarray(semantic, dtype=np.float64)) if semantic_order is None else semantic_order
    sem = np.empty(n, dtype=np.int64)
    sem[order] = np.arange(1, n + 1)
    return fused + 1.0 / (k + sem)  # type: ignore[no-any-return]


def rank_order(values: npt.NDArray[np.float64], positions: npt.NDArray[np.int64] | None = None) -> npt.NDArray[np.int64]:
    """Indices of ``values`` in rank order: the largest first, equal values the later position
    (``positions``, default ``0..n-1``) first — :func:`rrf_fuse_array`'s order."""
    at = np.arange(len(values)) if positions is None else positions
    return np.lexsort((-at, -values))  # type: ignore[no-any-return]


def grown_rank_order(
    order: npt.NDArray[np.int64], values: npt.NDArray[np.float64]
) -> npt.NDArray[np.int64]:
    """:func:`rank_order` of ``values``, given ``order``, that of its first ``len(order)``
    values (values only appended since): the new values ordered among themselves and merged in
    (each after the older values larger than it, before the equal ones: it is newer). O(n) in
    numpy, not a sort of every value; NaNs anywhere sort every value again."""
    n_old = len(order)
    if n_old == 0 or np.isnan(values).any():
        return rank_order(values)
    new = values[n_old:]
    if not len(new):
        return order
    added = np.arange(n_old, len(values))[rank_order(new)]
    descending = -values[order]  # ascending: the old values, largest first
    return np.insert(order, np.searchsorted(descending, -values[added], side="left"), added)  # type: ignore[no-any-return]


def episode_context(cosines: Sequence[float], episodes: Sequence[int], mix: float) -> list[float]:
    """Each item's cosine plus ``mix`` × the best cosine among the *other* items of its
    episode (0 for an item alone in its episode).

    The cluster hypothesis (van Rijsbergen, *Information Retrieval*, 1979: "closely
    associated documents tend to be relevant to the same requests"), applied to
    conversation sessions as passage retrieval uses the enclosing document's score
    (Callan, SIGIR 1994): the turn that states a fact ("I clean my Sony lens with …") often
    does not resemble the question itself ("accessories for my photography setup"), while
    another turn of the same session does. When every item is in one episode the term is
    the same for all but the best item and the cosine order is unchanged, so the plain
    cosines are returned.

    Args:
        cosines: ``(n,)`` cosines to the goal.
        episodes: ``(n,)`` episode numbers (:attr:`ScoreItem.episode`).
        mix: the context's weight (≥ 0).

    Returns:
        ``(n,)`` context cosines (cosine units).
    """
    if mix <= 0 or len(set(episodes)) < 2:
        return [float(c) for c in cosines]
    best: dict[int, tuple[float, float]] = {}  # episode → (best, second best)
    for c, e in zip(cosines, episodes, strict=True):
        first, second = best.get(e, (-math.inf, -math.inf))
        best[e] = (c, first) if c > first else (first, max(second, c))
    out: list[float] = []
    for c, e in zip(cosines, episodes, strict=True):
        first, second = best[e]
        other = second if c == first else first
        out.append(float(c) + mix * (other if other > -math.inf else 0.0))
    return out


def semantic_ranks(values: Sequence[float]) -> list[float]:
    """Rank share of each value among ``values`` (0 = best; ties share the better rank):
    ``(number of strictly larger values) / max(len(values), RANK_FLOOR)``."""
    n = max(len(values), RANK_FLOOR)
    order = sorted(values, reverse=True)
    out: list[float] = []
    import bisect

    neg = [-v for v in order]
    for v in values:
        out.append(bisect.bisect_left(neg, -v) / n)
    return out


class SemanticScorer:
    """The offline scorer with semantic evidence (deterministic, no network).

    Args:
        fusion: how the signals are fused (:class:`SemanticFusion`).
        embedder: the embedder; default :func:`default_embedder` (loaded once per process,
            also in a worker process). When none is available the scorer is the lexical one
            and its first result's warnings say why (and a ``RuntimeWarning``, once per process).
        index: vector store to reuse (keyed by content hash); default a new one.

    The scorer is picklable (the embedder is reloaded in a worker process).
    """

    name = "offline"
    local = True
    context_dependent = True

    def __init__(
        self, fusion: SemanticFusion | None = None, *, embedder: Embedder | None = None, index: VectorIndex | None = None
    ) -> None:
        self.fusion = fusion or SemanticFusion()
        self._lexical = OfflineScorer()
        self._goal_vectors: dict[str, Any] = {}
        self._warned = False
        self._default = embedder is None and index is None
        self._resolve(embedder, index)

    def _resolve(self, embedder: Embedder | None, index: VectorIndex | None) -> None:
        self._reason_off = ""
        if index is None and embedder is None:
            embedder = default_embedder()
            if embedder is None:
                self._reason_off = embedder_unavailable_reason()
        if index is None and embedder is not None:
            index = VectorIndex(embedder)
        self._index = index
        if index is None or self.fusion.mode == "off":
            self.model = self._lexical.model
        else:
            self.model = f"{self._lexical.model}+{index.embedder.name}@{index.version}:{self.fusion.label}"
        self.rubric_version = self.model
        """``offline-v2`` plus the embedder, its version and the fusion (part of every score-cache key)."""

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        if self._default:  # a worker process loads the bundled model itself
            state["_index"] = None
        state["_goal_vectors"] = {}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if self._default:
            self._resolve(None, None)

    def _ensure(self) -> VectorIndex | None:
        return self._index

    @property
    def embedder_name(self) -> str:
        """The embedder's name, or ``""`` when semantic evidence is off."""
        return self._index.embedder.name if self._index is not None else ""

    # ----------------------------------------------------------------- scoring
    def _goal_vector(self, text: str) -> Any:
        vec = self._goal_vectors.get(text)
        if vec is None:
            index = self._index
            assert index is not None
            vec = index.embed_query(text)
            if len(self._goal_vectors) > 256:
                self._goal_vectors.clear()
            self._goal_vectors[text] = vec
        return vec

    def cosines(self, goal: TaskGoal, items: Sequence[ScoreItem]) -> list[float]:
        """Each item's cosine to the goal: the larger of final goal and subtask (exact, see
        :func:`cosine_scores`); zeros when semantic evidence is off."""
        index = self._ensure()
        if index is None or not items:
            return [0.0] * len(items)
        index.add((item.content_hash or item.id, item.text) for item in items)
        keys = [item.content_hash or item.id for item in items]
        best = np.zeros(len(items), dtype=np.float64)
        for text in dict.fromkeys([goal.final, goal.effective_subtask]):
            if text.strip():
                best = np.maximum(best, index.similarity(self._goal_vector(text), keys))
        return [float(x) for x in best]

    def score(
        self, goal: TaskGoal, items: Sequence[ScoreItem], context: ScoringContext | None = None
    ) -> ScoringResult:
        """Lexical scores fused with semantic evidence (module docstring). Never raises for
        ordinary input; without an embedder, the lexical scores plus one warning."""
        lexical = self._lexical.score(goal, items, context)
        fusion = self.fusion
        index = self._ensure()
        if index is None or fusion.mode == "off" or not items:
            result = lexical
            if index is None and not self._warned and self._reason_off:
                self._warned = True
                result.warnings.append(self._reason_off)
                if not _WARNED_PROCESS:
                    _WARNED_PROCESS.append(True)
                    warnings.warn(self._reason_off, RuntimeWarning, stacklevel=2)
            return result
        if mostly_cjk(f"{goal.final} {goal.subtask}"):
            return lexical
        cos = self.cosines(goal, items)
        cos = [0.0 if mostly_cjk(item.text) else c for item, c in zip(items, cos, strict=True)]
        own = cos
        context_cos = episode_context(own, [item.episode for item in items], fusion.episode_mix)
        context_shares: list[float] | None = None
        if fusion.episode_mode == "rank":
            cos = context_cos
        elif context_cos != own:
            context_shares = semantic_ranks(context_cos)
        base = lexical.scores
        if fusion.mode == "rrf":
            lex_rank = _order_ranks([(s.score, s.weight) for s in base])
            sem_rank = _order_ranks([(c, 0.0) for c in cos])
            fused = [1.0 / (RRF_K + a + 1) + 1.0 / (RRF_K + b + 1) for a, b in zip(lex_rank, sem_rank, strict=True)]
        elif fusion.mode == "weighted":
            top = max((s.weight for s in base), default=0.0) or 1.0
            fused = [fusion.weight_mix * (s.weight / top) + (1 - fusion.weight_mix) * c
                     for s, c in zip(base, cos, strict=True)]
        else:
            fused = cos
        shares = semantic_ranks(fused)
        out: list[RelevanceScore] = []
        for n, (item, score, c, o, share, f) in enumerate(zip(items, base, cos, own, shares, fused, strict=True)):
            episode = None if context_shares is None else (context_cos[n], context_shares[n])
            out.append(self._fuse(item, score, c, share, f, own=o, episode=episode))
        return ScoringResult(scores=out, usage=lexical.usage, warnings=lexical.warnings)

    def _fuse(
        self, item: ScoreItem, score: RelevanceScore, cos: float, share: float, fused: float, *, own: float,
        episode: tuple[float, float] | None = None,
    ) -> RelevanceScore:
        fusion = self.fusion
        mode = fusion.mode
        if item.msg_type in fusion.unranked_types:
            return score  # neither lifted nor ranked by meaning: the lexical score and weight
        if mode == "weight":
            weight = score.weight + fusion.weight_mix * cos
            return score.model_copy(update={"weight": round(weight, 4)})
        if mode == "rrf":
            weight = fused * RRF_K  # ~(0, 2]: both first → 2/61·60
        elif mode == "weighted":
            weight = fused
        else:
            weight = score.weight + fusion.weight_mix * cos
        level = 0  # 1 weak, 2 strong
        if item.msg_type in fusion.types and cos >= fusion.min_cosine and score.score < fusion.max_score:
            if share < fusion.strong_share:
                level = 2
            elif share < fusion.weak_share:
                level = 1
        by_episode = False
        if (not level and episode is not None and item.msg_type in fusion.types and score.score < fusion.max_score
                and episode[0] >= fusion.min_cosine and episode[1] < fusion.weak_share):
            level, by_episode = 1, True
        value = score.score
        reason = score.reason
        base = value
        if level:
            if _UNRELATED in reason:  # the lexical rules found nothing: meaning did
                base = value + 1  # the −1 malus no longer applies
                value = max(base, fusion.lift_unrelated[level - 1])
            else:
                value += fusion.lift_matched[level - 1]
            value = min(fusion.max_score, value)
        fired = bool(level) and value != score.score
        if fired:
            context, rank_share = (episode[0], episode[1]) if by_episode and episode is not None else (cos, share)
            reason = _with(reason, own, rank_share, value - base, value, context=context - own)
        return score.model_copy(update={"score": max(1, min(5, value)), "weight": round(weight, 4), "reason": reason})


_UNRELATED = "−1 unrelated to the goal"


def _with(reason: str, cos: float, share: float, added: int, total: int, *, context: float = 0.0) -> str:
    """The lexical reason's sum with the semantic term added, so it still reads as the sum it
    is ("base 2 for a user chat; +2 semantic match 0.41 to the goal (top 3%); = 4"); an
    "unrelated" malus no longer applies and is dropped."""
    parts = [p for p in reason.split("; ") if p and p != _UNRELATED and not p.startswith("= ")]
    top = max(1, math.ceil(share * 100)) if share > 0 else 1
    sign = "+" if added >= 0 else "−"
    episode = f", {context:+.2f} from its episode" if context >= 0.005 else ""
    parts.append(f"{sign}{abs(added)} semantic match {cos:.2f} to the goal{episode} (top {top}%)")
    parts.append(f"= {total}")
    return "; ".join(parts)


def _order_ranks(keys: Sequence[tuple[float, float]]) -> list[int]:
    """0-based rank of each key in descending order (ties: the earlier item first)."""
    order = sorted(range(len(keys)), key=lambda i: (-keys[i][0], -keys[i][1], i))
    ranks = [0] * len(keys)
    for rank, i in enumerate(order):
        ranks[i] = rank
    return ranks

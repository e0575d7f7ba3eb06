"""Partition and selection (SPEC §3 steps 2 and 6): pure functions over message data.

Nothing here does I/O or reads a clock: inputs are messages, chain roots, scores and
numbers; outputs are index sets and tiers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ._models import Message, RelevanceScore

__all__ = ["Chain", "Partition", "Selection", "group_chains", "partition", "select_chains"]


@dataclass(frozen=True)
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


def group_chains(messages: Sequence[Message], roots: Sequence[int], skip: set[int] | frozenset[int] = frozenset()) -> dict[int, Chain]:
    """Group message indices by chain root, skipping ``skip``; returns root → :class:`Chain`."""
    members: dict[int, list[int]] = {}
    for message in messages:
        if message.index in skip:
            continue
        members.setdefault(roots[message.index], []).append(message.index)
    return {
        root: Chain(root, tuple(idx), sum(messages[i].token_count for i in idx)) for root, idx in members.items()
    }


@dataclass
class Partition:
    """The pinned / working / candidate split of one build (SPEC §3 step 2).

    Attributes:
        pinned: indices of the leading system/developer messages, emitted unchanged.
        forced: chain roots that must be kept: the newest user message's chain and,
            when ``keep_recent ≥ 1``, the newest step's chain.
        working: chain roots of the rest of working memory, newest first.
        candidates: chain roots of everything older.
        chains: root → :class:`Chain` for every non-pinned, non-excluded message.
    """

    pinned: list[int]
    forced: list[int]
    working: list[int]
    candidates: list[int]
    chains: dict[int, Chain]


def partition(
    messages: Sequence[Message],
    roots: Sequence[int],
    *,
    keep_recent: int,
    step_count: int,
    excluded: set[int],
    newest_user: int | None,
) -> Partition:
    """Split the history into pinned prompt, working memory and candidates.

    Working memory is every chain with a member in the last ``keep_recent`` steps
    (so an unfinished chain is never split); the newest user message's chain is always
    forced in (SPEC §9).
    """
    pinned = [m.index for m in messages if m.step == -1 and m.index not in excluded]
    chains = group_chains(messages, roots, excluded | set(pinned))
    first_recent_step = step_count - keep_recent
    working_roots: set[int] = set()
    newest_step_root: int | None = None
    for message in reversed(messages):
        if message.step == -1 or message.index in excluded:
            continue
        root = roots[message.index]
        if newest_step_root is None:
            newest_step_root = root
        if message.step < first_recent_step:
            break
        working_roots.add(root)
    forced: list[int] = []
    if newest_user is not None and newest_user not in excluded:
        forced.append(roots[newest_user])
    if keep_recent > 0 and newest_step_root is not None and newest_step_root not in forced:
        forced.append(newest_step_root)
    working = sorted((r for r in working_roots if r not in forced), key=lambda r: -chains[r].last)
    taken = set(forced) | working_roots
    candidates = [r for r in chains if r not in taken]
    return Partition(pinned=pinned, forced=forced, working=working, candidates=candidates, chains=chains)


@dataclass
class Selection:
    """The outcome of :func:`select_chains`.

    Attributes:
        tier: chain root → ``core`` / ``working`` / ``archive``.
        kept: chain roots kept verbatim.
        notes: chain root → why it was not kept although its tier asked for it.
        used: tokens the kept chains take (tokens).
        repeats: chain root → index of the newer, kept copy it repeats (set by the manager;
            such chains are neither kept nor summarised).
    """

    tier: dict[int, str] = field(default_factory=dict)
    kept: set[int] = field(default_factory=set)
    notes: dict[int, str] = field(default_factory=dict)
    used: int = 0
    repeats: dict[int, int] = field(default_factory=dict)


def select_chains(
    chains: Mapping[int, Chain],
    scores: Mapping[int, RelevanceScore],
    *,
    available: int,
    core_score: int,
    archive_score: int,
    referenced_by: Mapping[int, int],
    promote_after_references: int,
    strengths: Mapping[int, float] | None = None,
    carry_threshold: float | None = None,
    strength_resolution: float = 1.0,
    first: Sequence[int] = (),
) -> Selection:
    """Assign tiers to candidate chains and fill ``available`` tokens (SPEC §3 step 6).

    - A chain's score is the max of its members' scores.
    - score ≥ ``core_score`` → core; ≤ ``archive_score`` → archive; between → working.
      A chain holding a message referenced by ≥ ``promote_after_references`` later
      messages is raised one tier. With a pheromone field, an archive chain whose
      strength ≥ ``carry_threshold`` joins working (carry-over, SPEC §5).
    - Core chains are added first (``first`` roots, then score, strength, the score's
      ``weight``, recency); then working chains by strength, weight, then recency (SPEC §3:
      "by strength then recency"; the weight is the scorer's finer match within a score).
      Strength is compared in bands of ``strength_resolution``: differences smaller than
      one score-3 deposit (Δ = 1, SPEC §5) — the initial strength of a message type, one
      reinforcement, a few ticks of evaporation — do not outrank the weight.
      A chain that does not fit is skipped (smaller later ones may still fit) and noted
      ``over budget``.

    Args:
        chains: candidate root → chain.
        scores: message index → score (every candidate member must have one).
        available: tokens left for candidates (tokens).
        referenced_by: message index → number of later messages referencing it.
        strengths: message index → pheromone strength, or ``None`` without the field.
        strength_resolution: width of a strength band when ordering (strength units).
        first: roots to try before any other core chain (e.g. the task statement).
    """
    selection = Selection()
    chain_score: dict[int, int] = {}
    chain_strength: dict[int, float] = {}
    chain_weight: dict[int, float] = {}
    for root, chain in chains.items():
        chain_score[root] = max(scores[i].score for i in chain.members)
        chain_weight[root] = max(scores[i].weight for i in chain.members if scores[i].score == chain_score[root])
        chain_strength[root] = max((strengths or {}).get(i, 0.0) for i in chain.members)
        tier = "core" if chain_score[root] >= core_score else "archive" if chain_score[root] <= archive_score else "working"
        if any(referenced_by.get(i, 0) >= promote_after_references for i in chain.members):
            tier = {"archive": "working", "working": "core"}.get(tier, tier)
        if (
            tier == "archive"
            and strengths is not None
            and carry_threshold is not None
            and chain_strength[root] >= carry_threshold
        ):
            tier = "working"
        selection.tier[root] = tier
    priority = {root: n for n, root in enumerate(first)}

    def band(root: int) -> int:
        return math.floor(chain_strength[root] / strength_resolution)

    core = sorted(
        (r for r, t in selection.tier.items() if t == "core"),
        key=lambda r: (
            priority.get(r, len(priority)), -chain_score[r], -band(r), -chain_weight[r], -chains[r].last
        ),
    )
    working = sorted(
        (r for r, t in selection.tier.items() if t == "working"),
        key=lambda r: (-band(r), -chain_weight[r], -chains[r].last),
    )
    for root in [*core, *working]:
        tokens = chains[root].tokens
        if selection.used + tokens <= available:
            selection.kept.add(root)
            selection.used += tokens
        else:
            selection.notes[root] = "over budget"
    return selection

"""Select (SPEC §3 step 6): tiers for the scored candidate chains, and the order that fills the budget.

Selection is two pure steps. :func:`rank` gives each chain a tier and puts the chains to
keep in order (once per build); :func:`fill` walks that order and keeps what fits a number
of tokens (cheap, so the summary reserve can be negotiated over it without ranking again).

- A chain's score is the max of its members' scores.
- score ≥ ``core_score`` → core; ≤ ``archive_score`` → archive; between → working. A chain
  holding a message referenced by ≥ ``promote_after_references`` later messages is raised
  one tier. With a pheromone field, an archive chain whose strength ≥ ``carry_threshold``
  joins working (carry-over, SPEC §5).
- Core chains are tried first, then working chains, each tier in its
  :class:`~relevance_memory.pipeline.order.OrderPolicy` order (default: core by the task
  statement first, the user's hard constraints (:data:`CONSTRAINT_SCORE`), the newest view
  of each file the agent edited (the file edited last first), then score, strength band,
  weight, recency; working by strength band, weight, recency). A chain that does not fit is
  skipped (smaller later ones may still fit) and noted ``over budget``.
- Then, with ``MemoryConfig.fill_from_archive`` (default) and the pheromone field on, the
  archive chains not forgotten (strength ≥ the forget threshold, SPEC §5) in the room left
  (``OrderPolicy.spare``: score, strength band, weight, recency); the summary reserve is
  negotiated first (:mod:`~relevance_memory.pipeline.summarise`), so only the room beyond it
  is theirs, and they yield to it first. One that fits joins working, noted :data:`ROOM_LEFT`.
- Older copies of a user message whose newest copy is shown verbatim give their room back
  (:func:`fill_ranked`): agent harnesses repeat a notice many times.
- A chain whose content a newer message supersedes (issue 11, SPEC §10: the same call
  again, the same file shown again, a fact restated with a new value) goes to the archive
  — summarised as the earlier value, restorable from the store — unless the goal asks for
  earlier values ("initially", "before", "used to" …; :func:`asks_for_history`). Its tool
  call, a parallel call's fresh result or any message no newer one replaces keeps the
  chain where its score puts it (:func:`superseded_chains`).

Nothing here does I/O or reads a clock; :func:`select` (the stage) reads the pheromone
memory through its methods only.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Collection, Iterable, Mapping, Sequence

import numpy as np
import numpy.typing as npt

from .._memo import same_prefix
from .._models import USER_AUTHORED_TYPES, RelevanceScore, TaskGoal, content_text, has_tool_calls
from ..store._supersede import SupersedeLink, asks_for_history
from ._state import (
    BuildState,
    Chain,
    ChainIndex,
    ChainOption,
    Partitioned,
    Ranked,
    Seams,
    Selection,
    StoreView,
    required,
)
from .fidelity import MIN_EXCERPT_TOKENS, Rendition, keep_names
from .order import DEFAULT_ORDER, ChainFacts, OrderPolicy

__all__ = [
    "AGENT_TRAFFIC_SHARE", "BULKY_TOKENS", "CONSTRAINT_SCORE", "NEWER_LEFT_OUT", "ROOM_LEFT", "Selection", "chain_options", "current_file_views", "fill", "fill_ranked", "newer_first", "newer_needs", "preferred_newer", "rank", "select", "select_chains",
    "superseded_chains", "tool_traffic_share", "view_edits",
]

CONSTRAINT_SCORE = 5
"""Least score of a user's own message that is a hard constraint, tried before the newest views
of edited files (SPEC §4: 5 "decides the task's success"; a score-4 user message still comes
before every other chain of its score, and never yields to the summary reserve)."""
ROOM_LEFT = "room left: kept verbatim from the archive (the core and working tiers left it)"
"""Record note of an archived chain kept in the room the core and working tiers left beyond
the summary reserve (``MemoryConfig.fill_from_archive``)."""
NEWER_LEFT_OUT = "left out: the newer value it is superseded by did not fit (newest wins; the summary says since when)"
"""Record note of a chain kept only with the chains holding its newer values, one of which did
not fit (issue 23: an older value never appears without the newer one)."""

AGENT_TRAFFIC_SHARE = 0.5
"""Share of the candidates' tokens that are tool traffic from which the history is an agent's
(:attr:`OrderPolicy.agent_core` orders its core chains)."""
PREFERRED_FLOOR = 3
"""Least score of a message that restates a fact with a new value (working tier: kept when
room allows, before weaker matches of equal strength)."""
TRIVIAL_TOKENS = 24
"""A member this small (an empty tool output, "<returncode>0</returncode>") carries no content
of its own: it does not keep a superseded chain out of the archive (tokens)."""


def rank(
    chains: Mapping[int, Chain],
    scores: Mapping[int, RelevanceScore],
    *,
    core_score: int,
    archive_score: int,
    referenced_by: Mapping[int, int],
    promote_after_references: int,
    strengths: Mapping[int, float] | None = None,
    carry_threshold: float | None = None,
    strength_resolution: float = 1.0,
    first: Sequence[int] = (),
    order: OrderPolicy = DEFAULT_ORDER,
    memory: Mapping[int, float] | None = None,
    current_views: Collection[int] = (),
    edited_at: Mapping[int, int] | None = None,
    constraints: Collection[int] = (),
    user_core: Collection[int] = (),
    spare: float | None = None,
    spare_skip: Collection[int] = (),
) -> tuple[dict[int, str], tuple[int, ...]]:
    """Tiers of ``chains`` and the order their core and working chains are tried in (module doc).

    Args:
        chains: candidate root → chain.
        scores: message index → score (every member must have one).
        referenced_by: message index → number of later messages referencing it.
        strengths: message index → pheromone strength, or ``None`` without the field.
        carry_threshold: strength that carries an archive chain into working (strength units).
        strength_resolution: width of a strength band when ordering (strength units).
        first: roots to try before any other core chain (e.g. the task statement).
        order: the tier order policy.
        memory: message index → strength earned for this task by earlier subtasks
            (:meth:`PheromoneField.memory_for`); the strength band is cut from it when given,
            else from ``strengths`` (strength units).
        current_views: roots of chains holding the newest view of a file the agent edited
            (:data:`~relevance_memory.pipeline.order.CURRENT_VIEW`).
        edited_at: such a root → index of the newest message that edited one of its files
            (:data:`~relevance_memory.pipeline.order.EDIT_RECENCY`).
        constraints: roots of chains holding a user's hard constraint
            (:data:`~relevance_memory.pipeline.order.USER_CONSTRAINT`).
        user_core: roots of chains holding a user's own message scored ≥ ``core_score``
            (:data:`~relevance_memory.pipeline.order.USER_CORE`).
        spare: also try the archive chains whose strength is at least this, after the working
            ones, in the room they leave (``MemoryConfig.fill_from_archive``; ordered by
            ``order.spare``); ``None``: never. A forgotten chain (strength below the forget
            threshold, SPEC §5) is not brought back verbatim.
        spare_skip: archive roots never tried in the room left (an assistant's reply to a
            forgotten remark: :func:`_echoes_of_forgotten`).

    Returns:
        ``(tier, order)``: root → tier for every chain, and the core then working roots (then,
        with ``spare``, the archive roots) in the order to try them.
    """
    tier: dict[int, str] = {}
    facts: dict[int, ChainFacts] = {}
    priority = {root: n for n, root in enumerate(first)}
    for root, chain in chains.items():
        score = max(scores[i].score for i in chain.members)
        weight = max(scores[i].weight for i in chain.members if scores[i].score == score)
        strength = max((strengths or {}).get(i, 0.0) for i in chain.members)
        banded = strength if memory is None else max(memory.get(i, 0.0) for i in chain.members)
        kind = "core" if score >= core_score else "archive" if score <= archive_score else "working"
        if any(referenced_by.get(i, 0) >= promote_after_references for i in chain.members):
            kind = {"archive": "working", "working": "core"}.get(kind, kind)
        if kind == "archive" and strengths is not None and carry_threshold is not None and strength >= carry_threshold:
            kind = "working"
        tier[root] = kind
        facts[root] = ChainFacts(
            root=root, last=chain.last, score=score, weight=weight, strength=strength,
            band=math.floor(banded / strength_resolution), priority=priority.get(root, len(priority)),
            current_view=root in current_views, edited_at=(edited_at or {}).get(root, -1),
            constraint=root in constraints, user_core=root in user_core,
        )
    core = sorted((r for r, t in tier.items() if t == "core"), key=lambda r: order.core_key(facts[r]))
    working = sorted((r for r, t in tier.items() if t == "working"), key=lambda r: order.working_key(facts[r]))
    archive = sorted(
        (r for r, t in tier.items() if t == "archive" and facts[r].strength >= spare and r not in spare_skip), key=lambda r: order.spare_key(facts[r])
    ) if spare is not None else []
    return tier, (*core, *working, *archive)


def fill(
    tier: Mapping[int, str],
    order: Iterable[int],
    tokens: Mapping[int, int],
    available: int,
    *,
    skip: frozenset[int] | set[int] = frozenset(),
    options: Mapping[int, Sequence[ChainOption]] | None = None,
    needs: Mapping[int, Collection[int]] | None = None,
    shown: Collection[int] = (),
) -> Selection:
    """Keep chains in ``order`` while they fit ``available`` tokens (greedy; pure).

    Each chain takes the best of its ``options`` that fits (SPEC §11 graded fidelity: verbatim,
    else an excerpt of its bulky outputs, else those outputs elided; a chain with no options
    is verbatim or nothing). A chain none of whose forms fits is noted ``over budget`` and
    skipped; a smaller later one may still fit. Roots in ``skip`` are passed over (and not
    noted). An archive chain in the order (:func:`rank` with ``spare``) that fits is kept in the
    working tier with the note :data:`ROOM_LEFT`; one that does not stays archived, with no note.

    Newest wins (issue 23): a root listed in ``needs`` is kept only when every root it needs (the
    chains holding the newer values of what it holds, :func:`newer_first`) is kept before it or
    in ``shown`` (working memory); otherwise it is skipped, noted :data:`NEWER_LEFT_OUT`.
    """
    selection = Selection(tier=dict(tier))
    for root in order:
        if root in skip:
            continue
        missing = [n for n in (needs or {}).get(root, ()) if n not in selection.kept and n not in shown]
        if missing:
            if tier[root] != "archive":
                selection.notes[root] = NEWER_LEFT_OUT
            continue
        choices = options.get(root) if options else None
        for option in choices or (ChainOption("verbatim", tokens[root]),):
            if selection.used + option.tokens <= available:
                break
        else:
            if tier[root] != "archive":
                selection.notes[root] = "over budget"
            continue
        selection.kept.add(root)
        selection.used += option.tokens
        selection.sizes[root] = option.tokens
        if option.fidelity != "verbatim":
            selection.fidelity[root] = option.fidelity
            selection.rendered.update(option.rendered)
        if tier[root] == "archive":
            selection.tier[root] = "working"
            selection.notes[root] = ROOM_LEFT
    return selection


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
    order: OrderPolicy = DEFAULT_ORDER,
) -> Selection:
    """:func:`rank` then :func:`fill` ``available`` tokens (arguments as there; tokens)."""
    tier, ordered = rank(
        chains, scores, core_score=core_score, archive_score=archive_score, referenced_by=referenced_by,
        promote_after_references=promote_after_references, strengths=strengths, carry_threshold=carry_threshold,
        strength_resolution=strength_resolution, first=first, order=order,
    )
    return fill(tier, ordered, {r: c.tokens for r, c in chains.items()}, available)


def fill_ranked(ranked: Ranked, available: int, store: StoreView) -> Selection:
    """Fill ``available`` tokens from a ranking, letting repeated user messages yield.

    A single-message user chain repeats when a later user message with the same content and
    ``name`` (the speaker) is shown verbatim — in working memory or kept here. Agent
    harnesses repeat the same notice many times (the SWE-bench runs here repeat "Please
    always provide EXACTLY ONE action …" up to 8 times); each copy reads as a hard
    constraint. The older copies give their room back, and the fill is redone without them;
    it is kept only if every newest copy is still shown (a greedy fill could, in principle,
    displace one). Repeats are neither kept nor summarised, and restorable from the store.

    Args:
        ranked: the select stage's output.
        available: tokens the kept chains may take (tokens).
        store: the store view (message ids for the repeat notes).
    """
    first = fill(ranked.tier, ranked.order, ranked.tokens, available, options=ranked.options, needs=ranked.needs,
                 shown=ranked.recent_roots)
    repeats = _repeats(ranked, first.kept)
    if not repeats:
        return first
    second = fill(ranked.tier, ranked.order, ranked.tokens, available, skip=set(repeats), options=ranked.options,
                  needs=ranked.needs, shown=ranked.recent_roots)
    shown = second.kept | set(ranked.recent_roots)
    if not all(newest in shown for newest in set(repeats.values())):
        return first
    for root, newest in repeats.items():
        second.notes[root] = f"repeat of {store[newest].id}, which is kept verbatim"
    second.repeats = repeats
    return second


def _repeats(ranked: Ranked, kept: Iterable[int]) -> dict[int, int]:
    """Repeat chain root → index of the newest shown copy (see :func:`fill_ranked`)."""
    shown = dict(ranked.recent_shown)
    for root in kept:
        for key, index in ranked.shown_by.get(root, ()):
            if index > shown.get(key, -1):
                shown[key] = index
    repeats: dict[int, int] = {}
    for root, key in ranked.repeat_keys.items():
        newest = shown.get(key)
        if newest is not None and newest > root:
            repeats[root] = newest
    return repeats


def select(state: BuildState, seams: Seams) -> Ranked:
    """The select stage: rank the scored candidate chains (skipped ones stay archived).

    Reads the partition, the prefilter's skipped chains, the scores and the pheromone
    memory (strength as memory of this task, from before the current subtask); writes the
    :class:`Ranked` output. The budget is filled later, by :func:`fill_ranked`, while the
    summary reserve is negotiated (:mod:`relevance_memory.pipeline.summarise`).
    """
    part = required(state.partition, "partition")
    prefiltered = required(state.prefilter, "prefilter")
    scores = required(state.scored, "score").scores
    config = seams.config
    store = seams.store
    goal = state.goal
    if prefiltered.kept is not None:  # the prefilter's one pass over the candidates
        chains = {r: part.candidates[r] for r in prefiltered.kept}
    else:
        chains = {r: c for r, c in part.candidates.items() if r not in prefiltered.skipped}
    referenced = {i: len(store.referenced_by.get(store[i].id, ())) for c in chains.values() for i in c.members}
    strengths = memory = None
    if config.pheromone.enabled:
        # memory earned under another final goal (another task or question) does not
        # order or carry this one's working tier; the band is what earlier subtasks of this
        # task deposited (type priors and evaporation since arrival order nothing)
        members = [i for c in chains.values() for i in c.members]
        pheromone = seams.pheromone
        strengths = {i: pheromone.strength_for(store[i].id, goal.final, goal.effective_subtask) for i in members}
        memory = {i: pheromone.memory_for(store[i].id, goal.final, goal.effective_subtask) for i in members}
    demoted = (
        superseded_chains(chains, store, facts=config.supersede_archives_facts) if config.supersede else {}
    )
    asked = bool(demoted) and asks_for_history(f"{goal.final}\n{goal.subtask}\n{_newest_user_text(store, seams.chains)}")
    preferred = preferred_newer(chains, store, scores) if config.supersede else {}
    if preferred:
        scores = {**scores, **{i: s for i, (s, _) in preferred.items()}}
    views = current_file_views(chains, store, scores, config.core_score) if config.supersede else {}
    if views:
        scores = {**scores, **{i: s for i, (s, _) in views.items()}}
        preferred = {**preferred, **views}
    view_roots = frozenset(store.chain_root(i) for i in views)
    constraints: set[int] = set()  # a user's hard constraint (USER_CONSTRAINT)
    user_core: set[int] = set()  # what a person said (a user, or a second person typed user_chat), scored core
    for r, c in chains.items():
        for i in c.members:
            if i not in scores or store[i].msg_type.value not in USER_AUTHORED_TYPES:
                continue
            if scores[i].score >= config.core_score:
                user_core.add(r)
            if scores[i].score >= CONSTRAINT_SCORE and store[i].role == "user":
                constraints.add(r)
    spare_floor = config.pheromone.forget_threshold if config.fill_from_archive and strengths is not None else None
    echoes = _echoes_of_forgotten(chains, store, scores, seams, goal, config.archive_score, spare_floor)
    tier, order = rank(
        {r: c for r, c in chains.items() if asked or r not in demoted},
        scores,
        core_score=config.core_score,
        archive_score=config.archive_score,
        referenced_by=referenced,
        promote_after_references=config.promote_after_references,
        strengths=strengths,
        carry_threshold=config.pheromone.carry_threshold if strengths is not None else None,
        strength_resolution=config.pheromone.order_resolution,
        first=[part.task_root] if part.task_root is not None else (),
        order=seams.order.for_agent(tool_traffic_share(store, chains.values()) >= AGENT_TRAFFIC_SHARE),
        memory=memory,
        current_views=view_roots,
        edited_at=view_edits(store) if views else None,
        constraints=constraints,
        user_core=user_core,
        # without the field nothing says what was forgotten (SPEC §5), and the fill without that
        # floor keeps S01's one-off coupon reminder verbatim: the room goes to the summary then
        spare=spare_floor,
        spare_skip=echoes,
    )
    superseded: dict[int, str] = {}
    for root, note in demoted.items():
        if asked:
            superseded[root] = f"{note} (not archived: the goal asks for earlier values)"
        else:
            tier[root] = "archive"
            superseded[root] = f"{note}; archived (the newer one is preferred)"
    repeat_keys: dict[int, tuple[str, str | None]] = {}
    shown_by: dict[int, tuple[tuple[tuple[str, str | None], int], ...]] = {}
    seams.notices.update(store.messages)

    def repeat_key(i: int) -> tuple[str, str | None]:
        """What a repeat shares: the content, or for a notice the harness repeats with small
        changes ("found 0 actions" / "found 2 actions") its notice key (SPEC §11)."""
        message = store[i]
        if seams.notices.is_notice(message):
            copies = seams.notices.copies(message)
            return f"notice:{store[copies[-1]].content_hash}", message.name
        return message.content_hash, message.name

    for root, chain in chains.items():
        users = tuple((repeat_key(i), i) for i in chain.members if store[i].role == "user")
        if users:
            shown_by[root] = users
        if root != part.task_root and len(chain.members) == 1 and store[root].role == "user":
            repeat_keys[root] = users[0][0]
    recent_shown: dict[tuple[str, str | None], int] = {}
    for root in part.recent:
        for i in part.chains[root].members:
            message = store[i]
            if message.role != "user":
                continue
            key = repeat_key(i)
            if i > recent_shown.get(key, -1):
                recent_shown[key] = i
    needs = newer_needs(chains, store) if config.supersede else {}
    if needs:
        order = newer_first(order, needs)
    return Ranked(
        tier=tier,
        order=order,
        tokens={r: c.tokens for r, c in chains.items()},
        options=chain_options(chains, order, part, seams, goal) if config.graded_fidelity else {},
        repeat_keys=repeat_keys,
        shown_by=shown_by,
        recent_shown=recent_shown,
        recent_roots=part.recent,
        superseded=superseded,
        preferred={store.chain_root(i): note for i, (_, note) in preferred.items()},
        current_views=view_roots,
        needs=needs,
    )


BULKY_TOKENS = 96
"""A tool output larger than this is *bulky*: a chain kept below verbatim sends it as an excerpt
or one elided line (SPEC §11); smaller outputs, the agent's own calls and reasoning and what
people said stay whole (tokens)."""
EXCERPT_RATIO = 0.25
"""An older chain's excerpt keeps about this share of each bulky output (at least
:data:`~relevance_memory.pipeline.fidelity.MIN_EXCERPT_TOKENS`)."""


def chain_options(
    chains: Mapping[int, Chain], order: Sequence[int], part: Partitioned, seams: Seams, goal: TaskGoal
) -> dict[int, tuple[ChainOption, ...]]:
    """Per chain in ``order`` with a bulky tool output (:data:`BULKY_TOKENS`), the forms it may
    be kept in, best first (SPEC §11): verbatim; an excerpt of each bulky output
    (:data:`EXCERPT_RATIO` of it); each bulky output elided to one restorable line. The agent's
    calls and reasoning stay whole in every form: they are small and name what it does next.
    Chains without a bulky output have one form (verbatim) and are not listed."""
    store, counter, memo = seams.store, seams.tokenizer, seams.renditions
    goal_text = f"{goal.final}\n{goal.subtask}"
    out: dict[int, tuple[ChainOption, ...]] = {}
    for root in order:
        chain = chains[root]
        entry = {i: part.renditions[i] for i in chain.members if i in part.renditions}

        def size(i: int, entry: dict[int, Rendition] = entry) -> int:
            return entry[i].tokens if i in entry else store[i].token_count

        bulky = [i for i in chain.members if store[i].role == "tool" and size(i) > BULKY_TOKENS]
        if not bulky:
            continue
        forms = [ChainOption("verbatim", chain.tokens, entry)]
        for fidelity in ("excerpt", "elided"):
            rendered = dict(entry)
            for i in bulky:
                keep = functools.partial(keep_names, store.messages, i, goal_text)
                cap = max(MIN_EXCERPT_TOKENS, int(size(i) * EXCERPT_RATIO))
                rendered[i] = memo.get(store[i], "excerpt" if fidelity == "excerpt" else "elided", cap, keep, counter,
                                       goal.final)
            tokens = sum(rendered[i].tokens if i in rendered else store[i].token_count for i in chain.members)
            if tokens < forms[-1].tokens:
                forms.append(ChainOption(fidelity, tokens, rendered))  # type: ignore[arg-type]
        if len(forms) > 1:
            out[root] = tuple(forms)
    return out


def _echoes_of_forgotten(
    chains: Mapping[int, Chain], store: StoreView, scores: Mapping[int, RelevanceScore], seams: Seams,
    goal: TaskGoal, archive_score: int, floor: float | None,
) -> set[int]:
    """Roots of archived assistant replies whose user turn (the nearest earlier user message)
    the pheromone forgot (score ≤ ``archive_score``, strength below ``floor``): the reply
    outlives the remark it answers (an assistant reply starts stronger and fades more slowly
    than a chat turn, SPEC §5), and kept verbatim in the room left it would bring the one-off
    remark back ("Sure, the takeaway coupon is valid today."). Empty without a floor."""
    if floor is None:
        return set()
    replies = sorted(
        root for root, chain in chains.items()
        if all(store[i].role == "assistant" and store[i].msg_type.value == "assistant_reasoning"
               and not has_tool_calls(store[i]) and i in scores and scores[i].score <= archive_score for i in chain.members)
    )
    out: set[int] = set()
    user = -1  # the nearest user message before the reply: one forward pass, not a walk back per reply
    position = 0
    for root in replies:
        for j in range(position, root):
            if store[j].role == "user":
                user = j
        position = max(position, root)
        if (user >= 0 and user in scores and scores[user].score <= archive_score
                and seams.pheromone.strength_for(store[user].id, goal.final, goal.effective_subtask) < floor):
            out.add(root)
    return out


def _newest_user_text(store: StoreView, chains: ChainIndex | None = None) -> str:
    """The newest user message's text (its first 2,000 characters; ``""`` without one): from
    the chain index's user-role indices when it holds exactly ``store`` (O(1); an agent's
    newest user message may be its task statement, at the start of a long history), else
    by reading the history backwards."""
    if chains is not None and chains.covers(store):
        users = chains.user_role
        return content_text(store[users[-1]].content)[:2_000] if users else ""
    for message in reversed(store.messages):
        if message.role == "user":
            return content_text(message.content)[:2_000]
    return ""


def preferred_newer(
    chains: Mapping[int, Chain], store: StoreView, scores: Mapping[int, RelevanceScore]
) -> dict[int, tuple[RelevanceScore, str]]:
    """Newer messages raised to the score of what they supersede — a restated fact to at
    least working (:data:`PREFERRED_FLOOR`), a newer tool result or file view to the older
    one's score: selection prefers the newer value (issue 11). Returns index → (raised
    score, note) for the members it raises (pure)."""
    out: dict[int, tuple[RelevanceScore, str]] = {}
    by_id = {store[i].id: i for c in chains.values() for i in c.members}
    for chain in chains.values():
        for i in chain.members:
            olders = store.supersedes.get(store[i].id)
            if not olders or i not in scores:
                continue
            links = [store.superseded_by[o] for o in olders if o in store.superseded_by]
            if not links:
                continue
            old_scores = [scores[by_id[o]].score for o in olders if o in by_id and by_id[o] in scores]
            # a restated fact is at least working; a newer result or view takes the older's place
            floor = max([PREFERRED_FLOOR if any(link.kind == "fact" for link in links) else 1, *old_scores])
            score = scores[i]
            if score.score < floor:
                note = f"supersedes {', '.join(olders)}: preferred over it"
                out[i] = (score.model_copy(update={"score": floor, "reason": f"{score.reason}; {note}"}), note)
    return out

def newer_needs(chains: Mapping[int, Chain], store: StoreView) -> dict[int, frozenset[int]]:
    """Candidate chain root → roots of the chains holding the newer values of what it holds
    (issue 23; pure): for each member a newer message supersedes (``store.superseded_by``), the
    root of that newer message's chain, when it is another chain. An assistant message that only
    calls tools carries no value of its own and needs nothing."""
    links = store.superseded_by
    out: dict[int, frozenset[int]] = {}
    if not links:
        return out
    for root, chain in chains.items():
        newer: set[int] = set()
        for i in chain.members:
            link = links.get(store[i].id)
            if link is None:
                continue
            try:
                other = store.chain_root(store.get(link.newer).index)
            except KeyError:
                continue
            if other != root:
                newer.add(other)
        if newer:
            out[root] = frozenset(newer)
    return out


def newer_first(order: Sequence[int], needs: Mapping[int, Collection[int]]) -> tuple[int, ...]:
    """``order`` with the chains holding newer values moved just before the first chain that
    needs them, when they came later (issue 23: the newer one is placed first; pure). A needed
    root not in ``order`` (working memory, or archived) stays where it is; cycles cannot occur
    (a newer message is always later), but are guarded against."""
    position = set(order)
    placed: set[int] = set()
    out: list[int] = []

    def place(root: int, trail: frozenset[int]) -> None:
        if root in placed or root in trail:
            return
        for newer in sorted(needs.get(root, ())):
            if newer in position:
                place(newer, trail | {root})
        placed.add(root)
        out.append(root)

    for root in order:
        place(root, frozenset())
    return tuple(out)


def tool_traffic_share(store: StoreView, chains: Iterable[Chain], index: ChainIndex | None = None) -> float:
    """Share (0..1) of the tokens of ``chains`` that are an agent's tool traffic: tool results,
    and assistant messages that call tools (0.0 for no tokens). With ``index`` holding
    ``store``, a chain that is one of its chains whole (the same members) is read from its
    sums, not message by message, and the running sums over ``chains`` are kept in ``index``
    (its only write: a memo): the next call reads only the chains after the longest run of the
    same chain objects (issue 24)."""
    whole = index.chains if index is not None and index.covers(store) else None
    tool_tokens = index.tool_tokens if index is not None else {}
    messages = store.messages[0:len(store)]  # one list: each index of a snapshot view is a Python call
    chains = list(chains)
    # a chain's sums depend only on its members (stored messages never change): those of the
    # chains an earlier build read, the same objects in the same places, are its running sums
    kept = index.traffic if whole is not None and index is not None and isinstance(index.traffic, _TrafficSums) else None
    k = same_prefix(kept.chains, chains) if kept is not None else 0
    totals: list[int] = []
    traffic: list[int] = []
    for chain in chains[k:]:
        if whole is not None:
            known = whole.get(chain.root)
            if known is not None and known.members is chain.members:
                totals.append(known.tokens)
                traffic.append(tool_tokens.get(chain.root, 0))
                continue
        total = tools = 0
        for i in chain.members:
            message = messages[i]
            total += message.token_count
            if message.role == "tool" or has_tool_calls(message):
                tools += message.token_count
        totals.append(total)
        traffic.append(tools)
    sums = _TrafficSums.grown(kept, k, chains, totals, traffic)
    if whole is not None and index is not None:
        index.traffic = sums
    total, tools = sums.total, sums.tools
    return tools / total if total else 0.0


class _TrafficSums:
    """Running sums of :func:`tool_traffic_share` over a list of chains (kept by the chain
    index from build to build): ``totals_upto[k]`` / ``tools_upto[k]`` the tokens and
    tool-traffic tokens of ``chains[:k + 1]`` (int64 arrays: exact below 2**63 tokens, and no
    list of ints for the collector to traverse after each compaction, issue 24)."""

    __slots__ = ("chains", "tools_upto", "totals_upto")

    def __init__(self, chains: list[Chain], totals_upto: npt.NDArray[np.int64], tools_upto: npt.NDArray[np.int64]) -> None:
        self.chains, self.totals_upto, self.tools_upto = chains, totals_upto, tools_upto

    @property
    def total(self) -> int:
        return int(self.totals_upto[-1]) if len(self.totals_upto) else 0

    @property
    def tools(self) -> int:
        return int(self.tools_upto[-1]) if len(self.tools_upto) else 0

    @classmethod
    def grown(cls, kept: _TrafficSums | None, k: int, chains: list[Chain], totals: list[int],
              traffic: list[int]) -> _TrafficSums:
        """The sums of ``chains``: ``kept``'s for its first ``k``, then ``totals`` / ``traffic``."""
        empty = np.zeros(0, dtype=np.int64)
        sums = []
        for upto, added in ((kept.totals_upto[:k] if kept is not None else empty, totals),
                            (kept.tools_upto[:k] if kept is not None else empty, traffic)):
            start = int(upto[-1]) if len(upto) else 0  # each running on from the kept sum
            sums.append(np.concatenate([upto, start + np.cumsum(np.asarray(added, dtype=np.int64))]))
        return cls(chains, sums[0], sums[1])


def current_file_views(
    chains: Mapping[int, Chain], store: StoreView, scores: Mapping[int, RelevanceScore], core_score: int
) -> dict[int, tuple[RelevanceScore, str]]:
    """The newest view of each file the agent edited, raised to core (issue 11; pure).

    An agent repairing files needs their current state: for every file it edited (a heredoc
    write, ``sed -i``, ``> F``), the newest message showing or writing it
    (:meth:`MessageStore.edited_views`) is scored at least ``core_score`` ("needed for the next
    steps", SPEC §4) and tried before every other chain but the task statement and the user's
    hard constraints (:data:`~relevance_memory.pipeline.order.CURRENT_VIEW`); the summary
    reserve yields to it. Returns index → (raised score,
    note) for the candidate members that hold such a view; a view already scored that high
    is listed too (with its own score), so the order key sees it.
    """
    members = {i for c in chains.values() for i in c.members}
    out: dict[int, tuple[RelevanceScore, str]] = {}
    for path, message_id in sorted(store.edited_views().items()):
        try:
            i = store.get(message_id).index
        except KeyError:
            continue
        if i not in members or i not in scores:
            continue
        score = scores[i]
        note = f"newest view of {path}, a file the agent edited"
        if score.score < core_score:
            score = score.model_copy(update={"score": core_score, "reason": f"{score.reason}; {note}: raised to {core_score}"})
        out[i] = (score, note)
    return out


def view_edits(store: StoreView) -> dict[int, int]:
    """Chain root of each edited file's newest view → index of the newest message that edited
    one of the files it shows (:meth:`MessageStore.file_edits`; the larger of two when one view
    shows two edited files). Selection tries the file edited last first (issue 11; pure)."""
    edits = store.file_edits()
    out: dict[int, int] = {}
    for path, view_id in store.edited_views().items():
        edit_id = edits.get(path)
        try:
            root = store.chain_root(store.get(view_id).index)
            edit = store.get(edit_id).index if edit_id is not None else -1
        except KeyError:
            continue
        out[root] = max(out.get(root, -1), edit)
    return out


def superseded_chains(chains: Mapping[int, Chain], store: StoreView, *, facts: bool = True) -> dict[int, str]:
    """Candidate chains whose content newer messages supersede: root → note (pure).

    A chain is superseded when at least one member is, and every member that carries
    content of its own is too: tool results and chat or prose messages count, an assistant
    message that only calls tools does not (its value is its call's result), nor does a
    member of at most :data:`TRIVIAL_TOKENS` tokens. So a read whose output a newer read
    replaces is superseded, a parallel call with one fresh result is not.
    """
    links = store.superseded_by
    if not links:
        return {}
    get = links.get

    def link_of(message_id: str) -> SupersedeLink | None:  # fact links left out unless ``facts``
        link = get(message_id)
        return link if link is not None and (facts or link.kind != "fact") else None

    out: dict[int, str] = {}
    messages = store.messages[0:len(store)]  # one list: each index of a snapshot view is a Python call
    for root, chain in chains.items():
        linked = [i for i in chain.members if link_of(messages[i].id) is not None]
        if not linked:
            continue
        if all(
            link_of(messages[i].id) is not None
            or messages[i].token_count <= TRIVIAL_TOKENS
            or (messages[i].role == "assistant" and has_tool_calls(messages[i]))
            for i in chain.members
        ):
            first = link_of(messages[linked[0]].id)
            assert first is not None
            out[root] = f"superseded by {first.newer}: {first.reason}"
    return out

"""Partition (SPEC §3 step 2): pinned prompt, working memory and candidates, and what they cost.

The stage splits the history into the pinned system prompt(s), working memory (the last
``keep_recent`` steps, newest first while they fit, plus the newest user message's chain,
which always stays) and the candidates (everything older, grouped in trace chains), and
spends the budget on what is kept whatever the scores say: the reply priming, the pinned
prompt, the goal block and working memory. When the whole history fits, the context is
the history (SPEC §9) and no later stage runs. A message larger than its share of the budget
enters as an excerpt, restorable by id (SPEC §11); only a pinned prompt that cannot fit the
budget raises :class:`ContextOverflowError` with the numbers.

The pure split is :func:`split_history`; :func:`partition` is the stage.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from .._exceptions import ContextOverflowError, InvalidMessageError
from .._markers import GOAL_BLOCK_MARKER
from .._models import Message, TaskGoal, content_text, user_authored
from .._tokenizer import REPLY_PRIMING_TOKENS, TokenCounter
from ._state import BuildState, Chain, ChainIndex, Partitioned, Seams, StoreView
from .assemble import subtask_note
from .fidelity import (
    MIN_ENTRY_CAP,
    Rendition,
    entry_caps,
    entry_renditions,
    fit_chain,
    least_chain_tokens,
    newest_user_excerpt,
)
from .ledger import BudgetLedger, Purpose

__all__ = [
    "GOAL_EXCERPT_SHARE",
    "GOAL_POINTER",
    "GOAL_POINTER_EXCERPT",
    "Chain",
    "ChainIndex",
    "Split",
    "clip_to_tokens",
    "goal_block_text",
    "goal_is_task_statement",
    "group_chains",
    "newest_user_index",
    "partition",
    "split_history",
]

_TOKENS = operator.attrgetter("tokens")  # a chain's tokens, read in C (map over ~chains a build)

GOAL_EXCERPT_SHARE = 0.5
"""Share of the remaining budget a goal-block excerpt of an oversized task statement may take."""


def group_chains(
    messages: Sequence[Message],
    roots: Sequence[int],
    skip: set[int] | frozenset[int] = frozenset(),
    tokens: Mapping[int, int] | None = None,
) -> dict[int, Chain]:
    """Group message indices by chain root, skipping ``skip``; returns root → :class:`Chain`.
    A chain's tokens are its members' (``tokens`` overrides some, e.g. with their excerpts)."""
    members: dict[int, list[int]] = {}
    for message in messages:
        if message.index in skip:
            continue
        members.setdefault(roots[message.index], []).append(message.index)
    counts = [m.token_count for m in messages]
    for i, sized in (tokens or {}).items():
        counts[i] = sized
    count = counts.__getitem__
    return {root: Chain(root, tuple(idx), sum(map(count, idx))) for root, idx in members.items()}


def _with_renditions(
    chains: dict[int, Chain], roots: Sequence[int], renditions: Mapping[int, Rendition], messages: Sequence[Message],
    recounted: dict[int, tuple[Chain, Chain]] | None = None,
) -> dict[int, Chain]:
    """``chains`` with the tokens of the chains holding an excerpted member recounted (each
    such member at its excerpt's tokens): what :func:`group_chains` with those tokens gives,
    in the same order, touching only those chains (O(excerpts), not O(history)).

    ``recounted``: root → (chain, recounted chain) of earlier builds (the caller's, kept across
    builds); a chain recounted to the same tokens again is the same object as before, so the
    prefilter's :func:`~relevance_memory.pipeline.prefilter.chain_layout` finds it unchanged."""
    if not renditions:
        return chains
    out = dict(chains)
    for root in {roots[i] for i in renditions}:
        chain = out.get(root)
        if chain is not None:
            tokens = sum(renditions[i].tokens if i in renditions else messages[i].token_count for i in chain.members)
            known = recounted.get(root) if recounted is not None else None
            if known is not None and known[0] is chain and known[1].tokens == tokens:
                out[root] = known[1]
                continue
            out[root] = replace(chain, tokens=tokens)
            if recounted is not None:
                recounted[root] = (chain, out[root])
    return out


@dataclass
class Split:
    """The pinned / working / candidate split of a history (:func:`split_history`).

    Attributes:
        pinned: indices of the leading system/developer messages, emitted unchanged.
        forced: chain roots that must be kept: the newest user message's chain and,
            when ``keep_recent ≥ 1``, the newest step's chain.
        working: chain roots of the rest of working memory, newest first.
        candidates: chain roots of everything older.
        chains: root → :class:`Chain` for every non-pinned, non-excluded message.
        root_order: whether ``chains`` are in ascending root order (each chain placed by its
            root; not so when a skipped root left members, placed by the first one left).
    """

    pinned: list[int]
    forced: list[int]
    working: list[int]
    candidates: list[int]
    chains: dict[int, Chain]
    root_order: bool = False


def split_history(
    messages: Sequence[Message],
    roots: Sequence[int],
    *,
    keep_recent: int,
    step_count: int,
    excluded: set[int],
    newest_user: int | None,
    grouped: ChainIndex | None = None,
) -> Split:
    """Split the history into pinned prompt, working memory and candidates (pure).

    Working memory is every chain with a member in the last ``keep_recent`` steps
    (so an unfinished chain is never split); the newest user message's chain is always
    forced in (SPEC §9). ``grouped``: the memory's :class:`ChainIndex`, up to date with
    ``messages`` (a store's, whose step ``-1`` messages lead it): the chains are taken from
    it instead of grouping every message again.
    """
    from_index: dict[int, Chain] | None = None
    if grouped is None:
        pinned = [m.index for m in messages if m.step == -1 and m.index not in excluded]
        chains = group_chains(messages, roots, excluded | set(pinned))
    else:  # the pinned prompt leads the store: read only it
        pinned = [m.index for m in itertools.takewhile(lambda m: m.step == -1, messages) if m.index not in excluded]
        skip = excluded | set(pinned)
        from_index = grouped.without(skip, messages)
        chains = from_index if from_index is not None else group_chains(messages, roots, skip)
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
    candidates = list(itertools.filterfalse(taken.__contains__, chains))  # in C: ~chains at 1M messages
    return Split(pinned=pinned, forced=forced, working=working, candidates=candidates, chains=chains,
                 root_order=from_index is not None)


def excluded_messages(store: StoreView, on_invalid: str) -> dict[int, str]:
    """Message index → why it stays out of the context: invalid on ingest, or (with
    ``on_invalid="repair"``) a chain whose tool call has no result yet.

    Raises:
        InvalidMessageError: a tool call has no result and ``on_invalid`` is ``"raise"``.
    """
    excluded = {store.get(mid).index: why for mid, why in store.excluded.items()}
    for pending in store.pending_calls:  # kept incrementally on ingest: no scan per build
        message = store[pending]
        missing = store.unanswered_calls(pending)
        if on_invalid == "raise":
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


def clip_to_tokens(counter: TokenCounter, text: str, max_tokens: int) -> str:
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


GOAL_POINTER = "kept verbatim here"
"""How a goal block that points at the kept task statement says so (instead of repeating it)."""
GOAL_POINTER_EXCERPT = "kept here as an excerpt (the whole is restorable by id)"
"""How it says so when the task statement is larger than its share of the budget and enters as
an excerpt (SPEC §11)."""


def goal_block_text(
    goal: TaskGoal,
    *,
    final_excerpt: str | None,
    task_statement_id: str | None,
    restore_tool: str | None = None,
    task_excerpted: bool = False,
) -> str:
    """Text of the goal block: the final goal only (SPEC §3.1).

    The subtask is not in it: the goal block sits near the start of the context, and a
    subtask changes often; it conditions scoring at the next compaction and, with
    ``CachePolicy.subtask_at_end``, is shown at the very end
    (:func:`~relevance_memory.pipeline.assemble.subtask_note`).

    It promises only what is true: archived messages stay in the store and
    :meth:`RelevanceMemoryManager.restore` returns them by id; that the model itself can fetch
    them is said only once the restore tool was offered (:meth:`RelevanceMemoryManager.restore_tool`).

    Args:
        goal: the task goal.
        final_excerpt: the final goal's text to show, or ``None`` to point at the task
            statement message instead (when the goal was derived from it and it is kept).
        task_statement_id: id of the first user message, used in the pointer.
        restore_tool: name of the restore tool the model was given, if any.
        task_excerpted: the task statement the pointer names is sent as an excerpt.
    """
    lines = [
        GOAL_BLOCK_MARKER,
        "This context was compacted: older messages were selected by relevance to the task "
        "goal; the rest are archived and restorable by message id"
        + (f" (call {restore_tool} with their ids to read any of them)." if restore_tool else "."),
    ]
    if goal.source == "user_requests":
        lines.append("Final goal: what the user asked for in their messages, newest last (their requests stay in "
                     "this context word for word while they fit; a correction replaces what it corrects).")
    elif final_excerpt is None:
        where = GOAL_POINTER_EXCERPT if task_excerpted else GOAL_POINTER
        lines.append(f"Final goal: as stated in the first user message ({task_statement_id}), {where}.")
    else:
        lines.append(f"Final goal: {final_excerpt}")
    return "\n".join(lines)


def goal_is_task_statement(goal: TaskGoal, store: StoreView) -> bool:
    """Whether the final goal is the task statement's text: derived from the first user
    message, or set explicitly to that same text (``set_goal(final=task)``, as a board agent
    whose task arrives as the planner's imported ``[planner · user instruction]`` message
    does). Then the goal block points at the kept task statement instead of repeating it
    (the task's tokens would be spent twice)."""
    if goal.source == "first_user_message":
        return True
    first = store.first_user_index
    final = goal.final.strip()
    if goal.source != "explicit" or first is None or not final:
        return False
    message = store[first]
    return user_authored(message.role, message.msg_type.value) and content_text(message.content).strip().endswith(final)


def _goal_block(
    goal: TaskGoal,
    seams: Seams,
    ledger: BudgetLedger,
    warnings: list[str],
    *,
    final_excerpt: str | None,
    task_excerpted: bool = False,
) -> tuple[str | None, BudgetLedger]:
    """The goal block's text and the ledger with it spent; ``None`` when there is none or it
    does not fit (said in ``warnings``). Without an excerpt, a goal taken from the first user
    message points at it instead of repeating it."""
    config = seams.config
    if not config.goal_block or not goal.final:
        return None, ledger
    first_user = seams.store.first_user_index
    pointer = final_excerpt is None and goal_is_task_statement(goal, seams.store)
    text = goal_block_text(
        goal,
        final_excerpt=None if pointer else (final_excerpt if final_excerpt is not None else goal.final),
        task_statement_id=seams.store[first_user].id if first_user is not None else None,
        restore_tool=seams.restore_tool,
        task_excerpted=task_excerpted,
    )
    tokens = seams.tokenizer.count_message({"role": config.context_role, "content": text})
    if not ledger.fits(tokens):
        warnings.append(f"goal block ({tokens} tokens) left out: it does not fit the budget")
        return None, ledger
    return text, ledger.spend(Purpose.GOAL_BLOCK, tokens, "excerpt of the task statement" if final_excerpt else "")


def newest_user_index(grouped: ChainIndex, excluded: Mapping[int, str]) -> int | None:
    """The index of the newest user-role message not in ``excluded``, from the user-role indices
    the chain index keeps (``grouped`` must hold the store read: :meth:`ChainIndex.covers`):
    O(1) for an agent whose newest user message is its task statement, not a read of the
    history backwards. ``None`` without one."""
    return next((i for i in reversed(grouped.user_role) if i not in excluded), None)


def partition(state: BuildState, seams: Seams) -> Partitioned:
    """The partition stage (module doc): reads the store and the budget; spends the budget
    on reply priming, the pinned prompt, the goal block and working memory.

    Raises:
        ContextOverflowError: the pinned prompt cannot fit (or, in the extreme, not even the
            excerpts of the newest step fit beside it).
        InvalidMessageError: a tool call has no result (with ``on_invalid="raise"``).
    """
    store, config, goal, budget = seams.store, seams.config, state.goal, state.budget
    excluded = excluded_messages(store, config.on_invalid)
    grouped = seams.chains.update(store)  # the chains and roots, grown by what arrived (O(new))
    roots = grouped.roots
    messages = store.messages[0:len(store)]  # one list: each index of a snapshot view is a Python call
    newest_user = (newest_user_index(grouped, excluded) if grouped.covers(store) else  # it does: just updated
                   next((m.index for m in reversed(messages) if m.role == "user" and m.index not in excluded), None))
    split = split_history(
        messages,
        roots,
        keep_recent=config.keep_recent,
        step_count=store.step_count,
        excluded=set(excluded),
        newest_user=newest_user,
        grouped=grouped,
    )
    chains = split.chains
    pinned_tokens = sum(store[i].token_count for i in split.pinned)
    if REPLY_PRIMING_TOKENS + pinned_tokens > budget and (state.limit is None or pinned_tokens + REPLY_PRIMING_TOKENS > state.limit):
        # the one thing no excerpt can help: the system prompt is sent unchanged (SPEC §9)
        raise ContextOverflowError(budget=state.limit or budget, pinned_tokens=pinned_tokens + REPLY_PRIMING_TOKENS,
                                   newest_step_tokens=0)
    ledger = BudgetLedger(budget).spend(Purpose.REPLY_PRIMING, REPLY_PRIMING_TOKENS).spend(Purpose.PINNED, pinned_tokens)
    history_tokens = sum(map(_TOKENS, chains.values()))
    if ledger.fits(history_tokens):  # SPEC §9: under budget with nothing to drop, output == input
        return Partitioned(
            excluded=excluded, pinned=tuple(split.pinned), chains=chains, recent=frozenset(chains), candidates={},
            task_root=None, goal_text=None, identity=True,
            ledger=ledger.spend(Purpose.WORKING_MEMORY, history_tokens, "the whole history fits the budget"),
        )
    # SPEC §11: a message larger than its share of the whole budget enters as an excerpt
    whole = state.limit or budget
    goal_terms = f"{goal.final}\n{goal.subtask}"
    newest_user_tokens = store[newest_user].token_count if newest_user is not None else 0
    room = whole - REPLY_PRIMING_TOKENS - pinned_tokens
    # the other messages enter within what the newest user message leaves as it is sent
    user_excerpt = newest_user_excerpt(messages, newest_user, room, budget=whole, share=config.excerpt_share,
                                       goal_text=goal_terms, memo=seams.renditions, counter=seams.tokenizer)
    # only a message above the least cap can be cut (the index lists those over either floor);
    # asked in chain order, as the chains list them
    entry_room = max(1, room - (newest_user_tokens if user_excerpt is None else user_excerpt.tokens))
    if split.root_order:
        least = min(entry_caps(whole, config.excerpt_share, entry_room))
        large = grouped.over_entry_cap if least >= MIN_ENTRY_CAP else grouped.over_excerpt_min
        skip = excluded.keys() | set(split.pinned)
        asked = sorted((i for i in large if i not in skip), key=lambda i: (roots[i], i))
    else:
        asked = [i for c in chains.values() for i in c.members]
    renditions: dict[int, Rendition] = entry_renditions(
        messages, asked, budget=whole,
        share=config.excerpt_share, goal_text=goal_terms, memo=seams.renditions, counter=seams.tokenizer,
        room=entry_room,
    )
    if newest_user is not None:
        renditions.pop(newest_user, None)
        if user_excerpt is not None:
            renditions[newest_user] = user_excerpt
    chains = _with_renditions(chains, roots, renditions, messages, grouped.recounted)
    forced_tokens = sum(chains[r].tokens for r in split.forced)
    if not ledger.fits(forced_tokens):
        if state.limit is not None and state.limit > budget:
            # a compaction's target too small for the newest step: the manager grows the target
            raise ContextOverflowError(
                budget=budget, pinned_tokens=pinned_tokens, newest_step_tokens=forced_tokens + REPLY_PRIMING_TOKENS
            )
        forced_members = [i for r in split.forced for i in chains[r].members]
        cut = None
        if newest_user is not None and newest_user in forced_members and newest_user not in renditions:
            # the newest user message stays verbatim while it alone fits (SPEC §9): the newest
            # step is cut around it first, not to one common cap with it
            cut = fit_chain(store.messages, [i for i in forced_members if i != newest_user],
                            ledger.left - newest_user_tokens, current=renditions, goal_text=goal_terms,
                            memo=seams.renditions, counter=seams.tokenizer)
        if cut is None:
            cut = fit_chain(store.messages, forced_members, ledger.left, current=renditions, goal_text=goal_terms,
                            memo=seams.renditions, counter=seams.tokenizer)
        if cut is None:
            least = least_chain_tokens(store.messages, forced_members, current=renditions, goal_text=goal_terms,
                                       memo=seams.renditions, counter=seams.tokenizer)
            raise ContextOverflowError(
                budget=budget, pinned_tokens=pinned_tokens, newest_step_tokens=forced_tokens + REPLY_PRIMING_TOKENS,
                least_newest_step_tokens=least + REPLY_PRIMING_TOKENS,
            )
        renditions.update(cut)
        chains = {r: (replace(c, tokens=sum(renditions[i].tokens if i in renditions else store[i].token_count
                                            for i in c.members)) if r in split.forced else c)
                  for r, c in chains.items()}
        forced_tokens = sum(chains[r].tokens for r in split.forced)
    ledger = ledger.spend(Purpose.WORKING_MEMORY, forced_tokens, "the newest step and the newest user message")
    recent = set(split.forced)
    warnings: list[str] = []
    if config.cache_policy.subtask_at_end and goal.subtask and goal.subtask != goal.final:
        note_tokens = seams.tokenizer.count_message(subtask_note(goal.subtask, config.context_role))
        if ledger.fits(note_tokens):
            ledger = ledger.spend(Purpose.SUBTASK, note_tokens, "the current subtask, shown at the end")
        else:
            warnings.append(f"subtask note ({note_tokens} tokens) left out: it does not fit the budget")
    first_user = store.first_user_index
    # the first user message is the task statement of an agent run, also when the caller
    # states the goal in other words (--goal must add to it, not replace it)
    task_root = roots[first_user] if first_user is not None and first_user not in excluded else None
    goal_text, ledger = _goal_block(goal, seams, ledger, warnings, final_excerpt=None,
                                    task_excerpted=first_user is not None and first_user in renditions)
    # the task statement outranks older working memory: keep room for it when it can fit
    reserve = 0
    if task_root is not None and task_root in split.candidates:
        task_tokens = chains[task_root].tokens
        reserve = task_tokens if ledger.fits(task_tokens) else 0
    if reserve:
        ledger = ledger.reserve(Purpose.TASK_STATEMENT, reserve, "room kept for the task statement")
    # the rest of working memory, newest first, while it fits
    candidates = list(split.candidates)
    working_tokens = 0
    for n, root in enumerate(split.working):
        tokens = chains[root].tokens
        if not ledger.fits(working_tokens + tokens, keep=reserve):
            shed = split.working[n:]
            warnings.append(
                f"working memory reduced: {len(shed)} older recent chain(s) did not fit the budget "
                "and were scored like older messages"
            )
            candidates.extend(shed)
            break
        working_tokens += tokens
        recent.add(root)
    if working_tokens:
        ledger = ledger.spend(Purpose.WORKING_MEMORY, working_tokens, "the last steps")
    candidate_chains = dict(zip(candidates, map(chains.__getitem__, candidates), strict=True))
    # an oversized task statement is shown as an excerpt inside the goal block; a goal formed
    # from the user's requests starts with the task statement, which outranks the block's note
    if (
        (goal_is_task_statement(goal, store) or goal.source == "user_requests")
        and task_root is not None
        and task_root in candidate_chains
        and config.goal_block
    ):
        task_tokens = candidate_chains[task_root].tokens
        goal_tokens = ledger.spent_on(Purpose.GOAL_BLOCK)
        if not ledger.fits(task_tokens) and ledger.fits(task_tokens - goal_tokens):
            # leaving the goal block out makes room for the task statement itself
            ledger = ledger.release(Purpose.GOAL_BLOCK, goal_tokens, "left out to keep the task statement verbatim")
            goal_text = None
            warnings.append("goal block left out to keep the task statement verbatim")
        elif not ledger.fits(task_tokens) and goal.source != "user_requests":
            room = ledger.left + goal_tokens
            excerpt = clip_to_tokens(seams.tokenizer, goal.final, max(0, int(room * GOAL_EXCERPT_SHARE)))
            if goal_tokens:
                ledger = ledger.release(Purpose.GOAL_BLOCK, goal_tokens, "replaced by an excerpt of the task statement")
            goal_text, ledger = _goal_block(goal, seams, ledger, warnings, final_excerpt=excerpt)
            warnings.append(f"task statement ({task_tokens} tokens) does not fit; the goal block carries an excerpt")
    return Partitioned(
        excluded=excluded,
        pinned=tuple(split.pinned),
        chains=chains,
        recent=frozenset(recent),
        candidates=candidate_chains,
        task_root=task_root,
        goal_text=goal_text,
        identity=False,
        ledger=ledger,
        warnings=tuple(warnings),
        renditions=renditions,
    )

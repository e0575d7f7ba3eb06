"""Prefix-stable builds (SPEC §3.1): the cost-aware policy and the append-or-compact decision.

Providers bill the longest prefix of a request that they saw recently at a fraction of
the input price (OpenAI: automatic for prompts of 1,024+ tokens, exact prefix match,
in 128-token increments; Anthropic cache reads at 0.1×; Mistral 10 %). A context is
therefore cheap only when consecutive requests share their beginning. Between
**compactions** a build sends the previous context unchanged plus the new messages
(``appended``); a **compaction** selects and summarises as a full build does, down to a
target well below the budget, when appending would exceed the budget or the caller asks;
a **full rebuild** (today's build at the whole budget) runs on the first build, when the
final goal or the budget changes, or always with ``always_rebuild``.

Everything here is pure: data in, a decision out. The manager holds the state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "BuildMode",
    "CachePolicy",
    "PrefixDecision",
    "compaction_target",
    "decide_build_mode",
    "least_freed",
]

BuildMode = Literal["appended", "compacted", "full_rebuild"]
"""How a build was made: ``appended`` (the previous context byte for byte plus the new
messages), ``compacted`` (select and summarise down to the policy's target), or
``full_rebuild`` (select and summarise within the whole budget, as every build did before
prefix stability)."""


class CachePolicy(BaseModel):
    """When a build appends, compacts or rebuilds, and how the provider's cache is priced.

    Attributes:
        always_rebuild: build every call from scratch within the whole budget (the
            behaviour before prefix stability; the beginning of the context can change on
            every call, so the provider's prompt cache rarely hits).
        target_fraction: a compaction builds down to at most ``target_fraction × budget``
            tokens, and less when the agent's steps are large (``steps_ahead``), so that
            several steps can be appended before the next one. Default 0.8, chosen on the
            cost/support curve of ``benchmarks/agent_support.py`` (BENCHMARKS.md): with cache-aware
            compactions (carried summaries, the kept run that repeats the previous request) a
            fuller context costs little more and holds much more of what the next step uses.
            The task statement and user constraints scored ≥ 4 are not bound by the target
            (they may use the whole budget).
        steps_ahead: a compaction leaves room for this many steps of the agent's typical size
            (the mean of its last 8 steps) before the next one: with 2k-token tool outputs at
            an 8k budget a 0.8 target would compact at every step, and every compaction is a
            cache miss. 0: the target is ``target_fraction`` alone. Default 5, chosen with
            ``benchmarks/agent_support.py`` at 8k (BENCHMARKS.md): 4 kept 0.874 of what the SWE
            runs' next steps use but served 76.9 % of the synthetic 2k-output loop's tokens from
            the cache; 5 keeps 0.847 and 80.5 % (6: 0.841 and 81.8 %).
        min_target_fraction: the target never goes below this share of the budget, whatever
            the steps' size.
        clear_at_least: least tokens a compaction the caller asks for must free to be worth
            a cache miss (Anthropic's context editing calls this ``clear_at_least``); one
            that would free less is not run (the build appends and says why). Capped at
            ``(1 − target_fraction) × budget``, what a compaction at the high-water mark
            always frees. Default 1,024 tokens = OpenAI's smallest cacheable prefix.
        cached_price: price of a cached input token as a share of an uncached one, used
            for the cost units in the decision record (OpenAI up to 0.1 on recent models,
            Anthropic cache reads 0.1, Mistral 0.1; 0.5 on older OpenAI models).
        cache_min_tokens: shortest prefix a provider caches (OpenAI: 1,024 tokens).
        cache_step_tokens: cached prefixes count in steps of this many tokens (OpenAI: 128).
        subtask_at_end: show the current subtask to the model as a short marked message at
            the very end of the context (after the newest messages, as agents that recite
            their plan do). Off by default: the subtask only conditions scoring at the next
            compaction and never rewrites the prefix.
        carry_summaries: a compaction sends the previous compaction's summaries again, byte
            for byte, when none of their messages is kept now, and summarises only what they do
            not cover, after them; its new summaries go after the kept messages that repeat the
            previous request (issue 21): the cached prefix runs through all of that. ``False``:
            every compaction summarises the archive afresh (for ablations).

    Sources: OpenAI's prompt caching guide (``developers.openai.com/api/docs/guides/
    prompt-caching``) and cookbook *Prompt Caching 201*: "Cache hits require an exact,
    repeated prefix match and works automatically for prompts containing 1024 tokens or
    more, with cache hits occurring in increments of 128 tokens"; Anthropic's context
    editing docs (``clear_at_least``: "Minimum number of tokens that must be cleared when
    triggered"); Manus, *Context Engineering for AI Agents* ("make your context
    append-only", "ensure your serialization is deterministic").
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    always_rebuild: bool = False
    target_fraction: float = Field(default=0.8, gt=0.0, le=1.0)
    steps_ahead: int = Field(default=5, ge=0)
    min_target_fraction: float = Field(default=0.4, gt=0.0, le=1.0)
    clear_at_least: int = Field(default=1024, ge=0)
    cached_price: float = Field(default=0.1, ge=0.0, le=1.0)
    cache_min_tokens: int = Field(default=1024, ge=0)
    cache_step_tokens: int = Field(default=128, ge=1)
    subtask_at_end: bool = False
    carry_summaries: bool = True

    def target_tokens(self, budget: int) -> int:
        """Size a compaction aims for: ``floor(target_fraction × budget)`` (tokens, ≥ 1)."""
        return max(1, int(budget * self.target_fraction))

    def cacheable(self, prefix_tokens: int) -> int:
        """Tokens of a shared prefix the provider bills as cached (OpenAI's rule).

        0 below ``cache_min_tokens``; otherwise ``prefix_tokens`` rounded down to a whole
        number of ``cache_step_tokens`` (1,024, 1,152, 1,280, … for OpenAI).
        """
        if prefix_tokens < self.cache_min_tokens or prefix_tokens <= 0:
            return 0
        return prefix_tokens - prefix_tokens % self.cache_step_tokens

    def cost(self, sent_tokens: int, cached_tokens: int, cached_price: float | None = None) -> float:
        """Cost units of one request: ``uncached + p × cached`` (tokens of uncached input).

        Args:
            sent_tokens: tokens of the request (tokens).
            cached_tokens: of those, tokens billed as cached (tokens; ≤ ``sent_tokens``).
            cached_price: ``p``; default :attr:`cached_price`.

        Raises:
            ValueError: ``cached_tokens`` outside ``[0, sent_tokens]``.
        """
        if not 0 <= cached_tokens <= sent_tokens:
            raise ValueError(f"cached tokens ({cached_tokens}) must lie in [0, sent tokens ({sent_tokens})]")
        p = self.cached_price if cached_price is None else cached_price
        return (sent_tokens - cached_tokens) + p * cached_tokens


@dataclass(frozen=True)
class PrefixDecision:
    """What the next build does, and why (recorded in the decision record).

    Attributes:
        mode: ``appended``, ``compacted`` or ``full_rebuild``.
        why: one sentence with the numbers that decided it.
        target: token budget the pipeline builds within (tokens): the whole budget for a
            full rebuild, the compaction target for a compaction, the budget for an append.
    """

    mode: BuildMode
    why: str
    target: int


def compaction_target(policy: CachePolicy, budget: int, step_tokens: int = 0) -> int:
    """Budget a compaction fills (tokens), in ``[1, budget]``:
    ``min(target_fraction × budget, budget − steps_ahead × step_tokens)``, never below
    ``min_target_fraction × budget``.

    What is left, ``budget − target``, is room for the steps appended until the next
    compaction. (The task statement and user constraints scored ≥ 4 may still use the
    whole budget: the manager grows the target when a compaction left them out.)

    Args:
        policy: the cache policy.
        budget: the build's budget (tokens, > 0).
        step_tokens: the agent's typical step (tokens; 0 when unknown).

    Raises:
        ValueError: ``budget`` is not positive.
    """
    if budget <= 0:
        raise ValueError(f"budget must be a positive number of tokens, got {budget}")
    target = policy.target_tokens(budget)
    if step_tokens > 0 and policy.steps_ahead:
        floor = max(1, int(budget * min(policy.min_target_fraction, policy.target_fraction)))
        target = max(floor, min(target, budget - policy.steps_ahead * step_tokens))
    return max(1, min(budget, target))


def least_freed(policy: CachePolicy, budget: int) -> int:
    """Tokens a requested compaction must free to run: ``clear_at_least``, capped at what a
    compaction at the high-water mark frees, ``budget − target`` (tokens)."""
    return min(policy.clear_at_least, budget - compaction_target(policy, budget))


def decide_build_mode(
    policy: CachePolicy,
    *,
    has_previous: bool,
    goal_changed: bool,
    previous_budget: int | None,
    budget: int,
    appended_tokens: int,
    new_messages: int,
    requested: bool = False,
    append_blocked: str | None = None,
    step_tokens: int = 0,
) -> PrefixDecision:
    """Append, compact or rebuild (SPEC §3.1) — the first rule that applies wins.

    1. ``always_rebuild`` → full rebuild.
    2. No previous context (first build, or the memory was reset) → full rebuild, or a
       compaction when the caller asks for one.
    3. The final goal changed since the last compaction → full rebuild (a new task or
       question gets today's build; LoCoMo / LongMemEval recall is unaffected).
    4. The budget changed → full rebuild.
    5. The caller asked for a compaction → compaction, unless it would free fewer than
       :func:`least_freed` tokens (then append, and say so).
    6. The previous context cannot be extended verbatim (``append_blocked`` says why,
       e.g. a held-back tool chain was answered after later messages) → compaction.
    7. The appended context would exceed the budget (the high-water mark) → compaction.
    8. Otherwise → append.

    Args:
        policy: the cache policy.
        has_previous: a previous context exists to append to.
        goal_changed: the final goal differs from the one of the previous context.
        previous_budget: budget of the previous build (tokens), or ``None``.
        budget: budget of this build (tokens, > 0).
        appended_tokens: tokens of the previous context plus the new messages, reply
            priming included (tokens).
        new_messages: how many messages the append would add.
        requested: the caller asked for a compaction.
        append_blocked: why the previous context cannot be extended, or ``None``.
        step_tokens: the agent's typical step (tokens; :func:`compaction_target`).

    Returns:
        The :class:`PrefixDecision`.

    Raises:
        ValueError: ``budget`` is not positive.
    """
    if budget <= 0:
        raise ValueError(f"budget must be a positive number of tokens, got {budget}")
    if policy.always_rebuild:
        return PrefixDecision("full_rebuild", "cache policy always_rebuild", budget)
    if not has_previous:
        if requested:  # no cached prefix to lose: compact as asked
            return PrefixDecision("compacted", "compaction requested by the caller",
                                  compaction_target(policy, budget, step_tokens))
        return PrefixDecision("full_rebuild", "first build: no previous context to append to", budget)
    if goal_changed:
        return PrefixDecision("full_rebuild", "the final goal changed", budget)
    if previous_budget is not None and previous_budget != budget:
        return PrefixDecision("full_rebuild", f"the budget changed ({previous_budget} → {budget} tokens)", budget)
    target = compaction_target(policy, budget, step_tokens)
    if requested:
        freed, least = appended_tokens - target, least_freed(policy, budget)
        if freed >= least:
            return PrefixDecision("compacted", "compaction requested by the caller", target)
        if appended_tokens <= budget and append_blocked is None:
            return PrefixDecision(
                "appended",
                f"compaction requested, but it would free about {max(0, freed)} tokens "
                f"(< {least}, clear_at_least); appended {new_messages} message(s) instead",
                budget,
            )
    if append_blocked is not None:
        return PrefixDecision("compacted", append_blocked, target)
    if appended_tokens > budget:
        return PrefixDecision(
            "compacted",
            f"appending {new_messages} message(s) would exceed the budget ({appended_tokens} > {budget} tokens); "
            f"compacted to a target of {target}",
            target,
        )
    return PrefixDecision(
        "appended", f"{new_messages} new message(s) fit the budget ({appended_tokens} ≤ {budget} tokens)", budget
    )

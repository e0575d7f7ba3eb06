"""One validated configuration object with the SPEC defaults and their sources."""

from __future__ import annotations

import math
import warnings
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ._cache_policy import CachePolicy
from ._exceptions import ConfigError

__all__ = [
    "MemoryConfig",
    "PheromoneConfig",
    "context_window_for",
    "context_window_is_known",
    "encoding_for",
    "encoding_is_exact",
    "half_life_to_rate",
    "rate_to_half_life",
    "warn_once",
]

# Context windows (tokens) of common model families, from the providers' model pages.
# Longest prefix wins; unknown models fall back to DEFAULT_CONTEXT_WINDOW.
_CONTEXT_WINDOWS: dict[str, int] = {
    "gpt-5": 400_000,
    "gpt-4.1": 1_047_576,
    "gpt-4o": 128_000,
    "gpt-4-turbo": 128_000,
    "gpt-4": 8_192,
    "gpt-3.5-turbo": 16_385,
    "o1": 200_000,
    "o3": 200_000,
    "o4": 200_000,
    "gemini": 1_048_576,
    "claude": 200_000,
}
DEFAULT_CONTEXT_WINDOW = 128_000

LOCAL_PREFILTER_MIN = 5_000
"""Candidates (messages) above which ``prefilter="auto"`` ranks with BM25 even in front of a
local scorer: past this, scoring every candidate on a cold build costs more time than the
prefilter saves recall (``benchmarks/overhead.py``)."""

# Model families that use cl100k_base; everything else uses o200k_base (GPT-4o and later).
_CL100K_PREFIXES = ("gpt-4-", "gpt-4", "gpt-3.5", "text-embedding-3", "text-embedding-ada")
_O200K_PREFIXES = ("gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "o1", "o3", "o4", "chatgpt-4o")


def encoding_for(model: str) -> Literal["o200k_base", "cl100k_base"]:
    """The tiktoken encoding of a model family: ``cl100k_base`` for GPT-4/3.5, else ``o200k_base``.

    Source: tiktoken's ``model.py`` prefix table. Unknown models (local servers, other
    vendors) get ``o200k_base``, the encoding of current OpenAI models.
    """
    name = model.lower().split("/")[-1]
    if name.startswith(_O200K_PREFIXES):
        return "o200k_base"
    if name.startswith(_CL100K_PREFIXES):
        return "cl100k_base"
    return "o200k_base"


def encoding_is_exact(model: str) -> bool:
    """Whether ``model`` is an OpenAI model family whose tokenizer is known exactly
    (tiktoken's prefix table); other models' counts with an OpenAI encoding are approximate."""
    return model.lower().split("/")[-1].startswith(_O200K_PREFIXES + _CL100K_PREFIXES)


def context_window_is_known(model: str) -> bool:
    """Whether ``model`` matches a family of the context-window table (else 128,000 is a guess)."""
    name = model.lower().split("/")[-1]
    return any(name.startswith(prefix) for prefix in _CONTEXT_WINDOWS)


_WARNED: set[tuple[str, str]] = set()


def warn_once(model: str, what: str, message: str, *, stacklevel: int = 3) -> bool:
    """Warn (:class:`UserWarning`) about ``what`` for ``model`` once per process; returns
    whether it warned now."""
    key = (model, what)
    if key in _WARNED:
        return False
    _WARNED.add(key)
    warnings.warn(f"{message} (shown once per model)", UserWarning, stacklevel=stacklevel)
    return True


def context_window_for(model: str) -> int:
    """Context window of a model family in tokens (longest matching prefix, else 128,000)."""
    name = model.lower().split("/")[-1]
    best = ""
    for prefix in _CONTEXT_WINDOWS:
        if name.startswith(prefix) and len(prefix) > len(best):
            best = prefix
    return _CONTEXT_WINDOWS[best] if best else DEFAULT_CONTEXT_WINDOW


EmbedderName = Literal["wordllama", "minilm"]
"""Names of the bundled embedders (``MemoryConfig.embedder``; :func:`~relevance_memory.scoring._embedding.load_embedder`)."""

EPISODE_GAP_S = 1800.0
"""Default silence between two messages that starts a new episode (seconds): the 30-minute
inactivity timeout web analytics cut sessions with (``MemoryConfig.episode_gap_s``)."""


class MemoryConfig(BaseModel):
    """Every setting of a memory manager, validated, with SPEC defaults.

    Strict: a value of the wrong type is refused, not converted (``max_input_tokens=True``
    or ``"8000"``, ``keep_recent=2.5``) with a :class:`ConfigError` naming the option; an int
    is accepted where a float is expected, and a dict for a nested config.

    Budget (SPEC §3): ``max_input_tokens`` when given; otherwise
    ``context_window × input_fraction``, with ``output_reserve`` of the window kept free
    for the reply on top of it, so ``input_fraction + output_reserve`` must not exceed 1.

    Attributes:
        model: model name; picks the tokenizer encoding and the default context window.
        encoding: tiktoken encoding override (``o200k_base`` or ``cl100k_base``).
        max_input_tokens: explicit token budget for the built context (tokens).
        context_window: the model's window (tokens); default from the model name.
        input_fraction: share of the window the built context may use (SPEC §3: 0.6).
        output_reserve: share of the window kept for the reply (SPEC §3: 0.1).
        keep_recent: working memory size in steps (SPEC §2); the newest step is always kept.
        core_score: scores ≥ this are ``core`` tier, always kept (SPEC §3 step 6: 4).
        archive_score: scores ≤ this are ``archive`` tier (SPEC §3 step 6: 2).
        promote_after_references: a message referenced by at least this many later
            messages is raised one tier (SPEC §3 step 6: 2).
        goal_block: emit the goal block (final goal + subtask) when compacting.
        context_role: role of the goal block and summaries; never ``assistant`` (SPEC §7).
        on_invalid: ``"raise"`` on orphan tool results / unanswered tool calls, or
            ``"repair"``: keep them in the store, leave them out of the context and
            say so in the decision record.
        image_tokens: cost of an image whose size cannot be read, high/auto detail
            (tokens; default 765 = OpenAI's tile rule for a 1024×1024 image).
        batch_max_messages: most messages per scorer call (SPEC §4).
        batch_max_tokens: most prompt tokens per scorer call (SPEC §4) (tokens).
        prefilter_top_n: candidates above which a local ranking prefilters (SPEC §3: 50).
        summary_budget: tokens the summary pyramid may take; 0 = a share of the budget: 10 %
            for a conversation, up to ``tool_summary_share`` for an agent's tool traffic.
        tool_summary_share: share of the budget the summary reserve takes when every older
            message is an agent's tool traffic (tool results and tool calls; in between, in
            proportion to their tokens). An agent's next step names paths, functions and line
            numbers it met earlier, and the summary lists them (SPEC §11 action support).
        reference_max_df: an identifier shared by more earlier messages than this is
            too common to count as a reference.
        rubric_version: id of the scoring prompt template (part of every cache key).
        prefilter: rank candidates locally (BM25) when they exceed ``prefilter_top_n``:
            ``"auto"`` (default) for scorers that cost a call per message (the LLM
            scorer, custom scorers) and not for a local scorer (``scorer.local``, the
            offline scorer, which already ranks every candidate at BM25's cost — a BM25
            pass in front of it only hides what its stemming and time cues would find)
            unless the candidates exceed :data:`LOCAL_PREFILTER_MIN` messages; ``True``
            always, ``False`` never. SPEC §3 step 3: the prefilter "picks what the LLM sees".
        summaries: fold archived messages into the summary pyramid (SPEC §7); off →
            archived messages are dropped (still restorable from the store).
        fill_from_archive: when the core and working tiers leave room beyond the summary
            reserve, keep the best archived chains verbatim in it (by score, strength band,
            weight, recency: :attr:`~relevance_memory.pipeline.order.OrderPolicy.spare`)
            instead of handing all of it to an ever longer summary; the record says
            "room left" for each. A forgotten chain (pheromone strength below
            ``pheromone.forget_threshold`` with score ≤ 2, SPEC §5: a one-off remark long
            past) is never brought back; without the pheromone field nothing says what was
            forgotten, so nothing is brought back (the room goes to the summary: filling it
            with every archived chain keeps S01's one-off coupon reminder verbatim). A short history whose archive holds its evidence gains most: LongMemEval
            oracle recall 0.866 / 0.887 / 0.929 → 0.925 / 0.944 / 0.967 at 2k / 4k / 8k
            (BENCHMARKS.md). ``False``: SPEC §3 step 6 to the letter (score ≤ 2 is only
            summarised).
        score_cache_dir: directory of the on-disk score cache (SPEC §6); ``None`` keeps
            the cache in process only.
        embeddings: read meaning as well as words (issue 11, SPEC §3 "embeddings
            optional"): each message is embedded once on ingest with the default static
            model (WordLlama, shipped in its wheel; nothing is downloaded), the offline
            scorer fuses the cosine to the goal into its score and weight, and the prefilter
            ranks by BM25 and cosine (reciprocal-rank fusion). Without the ``wordllama``
            package the build is lexical and its record says so once. ``False``: lexical only.
        embedder: which model embeds (:data:`~relevance_memory.scoring._embedding.EMBEDDERS`):
            ``"wordllama"`` (the default: static, ≈0.3 ms a message, same bits on every
            machine) or ``"minilm"`` (all-MiniLM-L6-v2 int8 on onnxruntime, the
            ``[minilm]`` extra: reads meaning better — LoCoMo 0.753 against 0.699 at 2k
            tokens — at ≈23–70 ms a message, ~150× the static model; its floats come from onnxruntime's kernels, so
            vectors may differ in their last bits between CPU families). Asking for
            ``"minilm"`` without the extra raises :class:`ConfigError` when the manager is made.
        supersede: mark older messages that a newer one supersedes (the same call again,
            the same file shown again, a fact restated with a new value; SPEC §10), and
            prefer the newer in selection: the older one is archived (summarised as the
            earlier value) unless the goal asks for history. Nothing is deleted.
        supersede_archives_facts: also archive a chat message whose fact a newer one restates
            (off by default: on LongMemEval S it cost evidence recall, 0.809 → 0.745 at 2k,
            BENCHMARKS.md); by default such a message is only marked (record, summary, LLM
            prompt) and the newer one is preferred. Tool results and file views are archived.
        episode_gap_s: silence between two messages that starts a new episode (a
            conversation session; seconds, default 1,800 — the 30-minute inactivity timeout
            web analytics cut sessions with). The offline scorer lifts a turn said in the same
            episode as a strong match (:class:`~relevance_memory.scoring._semantic.SemanticFusion`).
            Messages without timestamps form one episode; the manager's clock stamps a message
            the caller gave no timestamp, and once the caller gives timestamps only the
            caller's cut (:attr:`~relevance_memory.store._store.MessageStore.episodes`).
        excerpt_share: no message is ever too large to enter (SPEC §11): a tool output or an
            assistant's tool call larger than this share of the budget (any other message — the
            task statement, an instruction, a chat turn — up to eight times it, half the budget
            at the default) enters every context as an excerpt of that size: its head and tail lines
            and the lines naming what the goal and the recent steps name, with a marker line
            saying what was left out and the id that restores it — in appended builds and
            compactions alike, so one ``find /`` output neither ends the loop nor forces a
            compaction. ``ContextOverflowError`` is left for a system prompt that cannot fit.
            Default 1/16 (500 tokens of an 8k budget, 2,000 of 32k), chosen on
            ``benchmarks/agent_support.py`` (BENCHMARKS.md): every new output is uncached, so
            with 2k-token outputs at 8k a quarter left at most ~75 % of the tokens cacheable
            (an eighth 73 %, a sixteenth 80.5 %), and on the SWE runs a sixteenth also held more
            of what the next step uses at 8k (support 0.841 against 0.793 with an eighth).
        graded_fidelity: an older chain with a bulky tool output may be kept as an excerpt
            of it or with it elided to one restorable line when it does not fit verbatim (SPEC
            §11; the agent's own calls and reasoning stay whole), instead of only verbatim or
            summarised. ``False``: keep-or-summarise (for ablations).
        pheromone: the pheromone field's parameters (:class:`PheromoneConfig`, SPEC §5).
        cache_policy: when a build appends to the previous context, compacts or rebuilds
            (:class:`CachePolicy`, SPEC §3.1: prefix-stable by default, so the provider's
            prompt cache keeps hitting; ``CachePolicy(always_rebuild=True)`` rebuilds every call).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    model: str = "gpt-4o"
    encoding: Literal["o200k_base", "cl100k_base"] | None = None
    max_input_tokens: int | None = Field(default=None, gt=0)
    context_window: int | None = Field(default=None, gt=0)
    input_fraction: float = Field(default=0.6, gt=0, le=1)
    output_reserve: float = Field(default=0.1, ge=0, lt=1)
    keep_recent: int = Field(default=4, ge=0)
    core_score: int = Field(default=4, ge=1, le=5)
    archive_score: int = Field(default=2, ge=0, le=5)
    promote_after_references: int = Field(default=2, ge=1)
    goal_block: bool = True
    context_role: Literal["system", "user"] = "system"
    on_invalid: Literal["raise", "repair"] = "raise"
    image_tokens: int = Field(default=765, ge=0)
    batch_max_messages: int = Field(default=20, ge=1)
    batch_max_tokens: int = Field(default=6000, ge=100)
    prefilter_top_n: int = Field(default=50, ge=1)
    summary_budget: int = Field(default=0, ge=0)
    tool_summary_share: float = Field(default=0.45, ge=0, le=0.9)
    reference_max_df: int = Field(default=4, ge=1)
    rubric_version: str = "score_v1"
    prefilter: bool | Literal["auto"] = "auto"
    summaries: bool = True
    fill_from_archive: bool = True
    score_cache_dir: str | None = None
    embeddings: bool = True
    embedder: EmbedderName = "wordllama"
    supersede: bool = True
    supersede_archives_facts: bool = False
    episode_gap_s: float = Field(default=EPISODE_GAP_S, gt=0, allow_inf_nan=False, strict=True)  # not True, not "30"
    excerpt_share: float = Field(default=0.0625, gt=0, le=1)
    graded_fidelity: bool = True
    pheromone: PheromoneConfig = Field(default_factory=lambda: PheromoneConfig())
    cache_policy: CachePolicy = Field(default_factory=CachePolicy)

    @model_validator(mode="after")
    def _consistent(self) -> MemoryConfig:
        if self.input_fraction + self.output_reserve > 1.0 + 1e-9:
            raise ValueError(
                f"input_fraction ({self.input_fraction}) + output_reserve "
                f"({self.output_reserve}) must not exceed 1"
            )
        if self.archive_score >= self.core_score:
            raise ValueError(
                f"archive_score ({self.archive_score}) must be below core_score ({self.core_score})"
            )
        return self

    def approximations(self) -> list[tuple[str, str]]:
        """What this config only guesses, as ``(kind, sentence)`` (pure): ``("tokens", …)``
        when ``model`` is not an OpenAI family (its tokenizer is unknown; an OpenAI encoding
        approximates it), ``("window", …)`` when the budget comes from a context window
        assumed for an unknown model. Empty when nothing is guessed. The manager warns once
        per model and puts them in the decision record.
        """
        out: list[tuple[str, str]] = []
        if not encoding_is_exact(self.model):
            chosen = "chosen" if self.encoding else "assumed"
            out.append((
                "tokens",
                f"token counts are approximate: {self.model!r} is not an OpenAI model family, so its tokenizer is "
                f"unknown and {self.resolved_encoding} ({chosen}) stands in for it; pass tokenizer= for exact counts",
            ))
        if self.max_input_tokens is None and self.context_window is None and not context_window_is_known(self.model):
            out.append((
                "window",
                f"context window of {self.model!r} is unknown; {DEFAULT_CONTEXT_WINDOW:,} tokens is assumed — "
                "pass context_window= or max_input_tokens=",
            ))
        return out

    @property
    def token_counts_exact(self) -> bool:
        """Whether the tiktoken counts are exact for ``model`` (an OpenAI family); see :meth:`approximations`."""
        return encoding_is_exact(self.model)

    @classmethod
    def create(cls, **values: object) -> MemoryConfig:
        """Validate ``values`` into a config, raising :class:`ConfigError` on bad input."""
        try:
            return cls.model_validate(values)
        except ValueError as exc:  # pydantic.ValidationError is a ValueError
            raise ConfigError(f"invalid memory config: {exc}") from exc

    @property
    def resolved_encoding(self) -> Literal["o200k_base", "cl100k_base"]:
        """The encoding in force: the override or the model family's."""
        return self.encoding or encoding_for(self.model)

    @property
    def resolved_context_window(self) -> int:
        """The context window in force (tokens)."""
        return self.context_window or context_window_for(self.model)

    def token_budget(self) -> int:
        """The build budget in tokens: ``max_input_tokens`` or ``window × input_fraction``."""
        if self.max_input_tokens is not None:
            return self.max_input_tokens
        return int(self.resolved_context_window * self.input_fraction)


# --------------------------------------------------------------------------- pheromone
def half_life_to_rate(half_life_steps: float, tick_every: int) -> float:
    """Evaporation rate per tick from a half-life (SPEC §5): ``η = 1 − 0.5^(tick_every / half_life)``.

    Args:
        half_life_steps: steps after which an untouched strength halves (> 0; ``inf`` → 0).
        tick_every: new messages per tick (> 0).

    Returns:
        η in [0, 1): the share of strength lost per tick.

    Raises:
        ValueError: a non-positive half-life or tick.
    """
    if half_life_steps <= 0 or tick_every <= 0:
        raise ValueError(f"half-life ({half_life_steps}) and tick_every ({tick_every}) must be positive")
    if math.isinf(half_life_steps):
        return 0.0
    return float(1.0 - 0.5 ** (tick_every / half_life_steps))


def rate_to_half_life(rate: float, tick_every: int) -> float:
    """Inverse of :func:`half_life_to_rate`: the half-life in steps of a per-tick rate η.

    ``half_life = tick_every · ln 0.5 / ln(1 − η)``; η = 0 gives ``inf``.

    Raises:
        ValueError: η outside [0, 1) or a non-positive tick.
    """
    if not 0.0 <= rate < 1.0 or tick_every <= 0:
        raise ValueError(f"rate must be in [0, 1) and tick_every positive, got {rate}, {tick_every}")
    if rate == 0.0:
        return math.inf
    return tick_every * math.log(0.5) / math.log(1.0 - rate)


PHEROMONE_KINDS = (
    "user_instruction",
    "preference",
    "user_chat",
    "assistant_reasoning",
    "tool_call",
    "tool_result",
    "system",
    "summary",
)
"""Kinds of message the pheromone field distinguishes: the message types plus ``preference``
(a user message stating a taste or habit, SPEC §5)."""


class PheromoneConfig(BaseModel):
    """Every parameter of the pheromone field (SPEC §5), validated, with its defaults.

    Attributes:
        enabled: run the field (strengths in the record, carry-over, working-tier order).
        tick_every: new messages per evaporation tick (SPEC §5: 5).
        deposits: score (1–5) → deposit Δ (SPEC §5: 5→4, 4→2, 3→1, 2→0.3, 1→0).
        s_max: soft cap; an effective deposit is ``Δ·max(0, 1 − S/S_max)`` (SPEC §5: 10).
        reinforce_delta: added to a message each time a later one references it (0.5).
        edge_delta: added to the edge (earlier → later) per reference (0.2).
        half_life_steps: kind → half-life in steps (SPEC §5: user instruction 200,
            preference 50, tool result 15, assistant reasoning 8, chat 5; tool calls
            share reasoning's, system prompts and summaries are long-lived).
        initial_strength: kind → strength of a new message (SPEC §5: instruction 8,
            tool result 3, reasoning 1, chat 0.5).
        protect_ticks: ticks a new message does not evaporate (SPEC §5: 3).
        exempt_score: messages whose latest score ≥ this do not evaporate (SPEC §5: 4).
        carry_threshold: a message scored ≤ 2 with strength ≥ this joins ``working``
            (SPEC §5 carry-over; default 4.0: reached by a deposit from a score ≥ 4 or by
            repeated references, not by a fresh tool result at 3.0).
        forget_threshold: score ≤ 2 and strength below this → archive without
            re-scoring (SPEC §5: 0.2).
        prefilter_pass: strength from which the prefilter always lets a message through
            (SPEC §3 step 3 "high-strength messages always pass"; default 8.0, near the
            cap: with a subtask that changes every step, deposits once per subtask push
            every useful message above ``carry_threshold``, and passing all of those would
            re-score nearly everything on every step).
        history_top_n: strongest messages recorded per tick in the history (SPEC §5).
        order_resolution: selection orders tiers by the strength earlier subtasks of the
            task deposited, in bands this wide (strength units; default 1.0 = one score-3
            deposit), then by the score's weight, then recency: small differences do not
            outrank a better match (LoCoMo, 635 questions: 1k recall 0.583 → 0.619 against
            exact-strength ordering; ``benchmarks/ablation_locomo.py``). Type priors and
            evaporation since arrival are not banded at all (issue 11: LongMemEval S and
            oracle recall +1 to +3 points at 2k and 4k, LoCoMo unchanged; BENCHMARKS.md).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    enabled: bool = True
    tick_every: int = Field(default=5, ge=1)
    deposits: dict[int, float] = Field(default_factory=lambda: {5: 4.0, 4: 2.0, 3: 1.0, 2: 0.3, 1: 0.0})
    s_max: float = Field(default=10.0, gt=0)
    reinforce_delta: float = Field(default=0.5, ge=0)
    edge_delta: float = Field(default=0.2, ge=0)
    half_life_steps: dict[str, float] = Field(
        default_factory=lambda: {
            "user_instruction": 200.0,
            "preference": 50.0,
            "tool_result": 15.0,
            "assistant_reasoning": 8.0,
            "tool_call": 8.0,
            "user_chat": 5.0,
            "system": math.inf,
            "summary": 50.0,
        }
    )
    initial_strength: dict[str, float] = Field(
        default_factory=lambda: {
            "user_instruction": 8.0,
            "preference": 3.0,
            "tool_result": 3.0,
            "assistant_reasoning": 1.0,
            "tool_call": 1.0,
            "user_chat": 0.5,
            "system": 8.0,
            "summary": 1.0,
        }
    )
    protect_ticks: int = Field(default=3, ge=0)
    exempt_score: int = Field(default=4, ge=1, le=5)
    carry_threshold: float = Field(default=4.0, ge=0)
    forget_threshold: float = Field(default=0.2, ge=0)
    prefilter_pass: float = Field(default=8.0, ge=0)
    history_top_n: int = Field(default=20, ge=1)
    order_resolution: float = Field(default=1.0, gt=0)

    @field_validator("half_life_steps", mode="before")
    @classmethod
    def _null_is_infinite(cls, value: Any) -> Any:
        """``null`` / ``None`` half-life = never evaporates: standard JSON has no infinity, so
        ``model_dump_json()`` (and the field's ``to_json``) writes ``inf`` as ``null``, and
        ``model_validate_json`` of that text must give the same config back."""
        if isinstance(value, dict):
            return {k: math.inf if v is None else v for k, v in value.items()}
        return value

    @model_validator(mode="after")
    def _complete(self) -> PheromoneConfig:
        if set(self.deposits) != {1, 2, 3, 4, 5}:
            raise ValueError(f"deposits must give Δ for every score 1..5, got {sorted(self.deposits)}")
        if any(d < 0 for d in self.deposits.values()):
            raise ValueError("deposits must be ≥ 0")
        for name, table in (("half_life_steps", self.half_life_steps), ("initial_strength", self.initial_strength)):
            missing = set(PHEROMONE_KINDS) - set(table)
            if missing:
                raise ValueError(f"{name} lacks kinds {sorted(missing)}")
        if any(h <= 0 for h in self.half_life_steps.values()):
            raise ValueError("half-lives must be positive (use inf for no evaporation)")
        if any(not 0 <= s <= self.s_max for s in self.initial_strength.values()):
            raise ValueError(f"initial strengths must lie in [0, s_max={self.s_max}]")
        if self.forget_threshold > self.carry_threshold:
            raise ValueError("forget_threshold must not exceed carry_threshold")
        return self

    def rate(self, kind: str) -> float:
        """Evaporation rate η per tick of ``kind`` (from its half-life, SPEC §5)."""
        return half_life_to_rate(self.half_life_steps[kind], self.tick_every)


MemoryConfig.model_rebuild()

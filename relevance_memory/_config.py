"""One validated configuration object with the SPEC defaults and their sources."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ._exceptions import ConfigError

__all__ = ["MemoryConfig", "context_window_for", "encoding_for"]

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


def context_window_for(model: str) -> int:
    """Context window of a model family in tokens (longest matching prefix, else 128,000)."""
    name = model.lower().split("/")[-1]
    best = ""
    for prefix in _CONTEXT_WINDOWS:
        if name.startswith(prefix) and len(prefix) > len(best):
            best = prefix
    return _CONTEXT_WINDOWS[best] if best else DEFAULT_CONTEXT_WINDOW


class MemoryConfig(BaseModel):
    """Every setting of a memory manager, validated, with SPEC defaults.

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
        summary_budget: tokens the summary pyramid may take; 0 = 10% of the budget.
        reference_max_df: an identifier shared by more earlier messages than this is
            too common to count as a reference.
        rubric_version: id of the scoring prompt template (part of every cache key).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

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
    reference_max_df: int = Field(default=4, ge=1)
    rubric_version: str = "score_v1"

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

"""Which scorer runs, and why — without importing ``openai`` or ``instructor``.

Issue 13 items 10 and 15: nothing is sent to an endpoint unless asked for (``--scorer
llm`` / ``kind="llm"``, an explicit ``base_url``, or ``RELMEM_SCORER=llm``); an API key
in the environment alone never switches scoring to an LLM. The LLM scorer module (and
with it ``openai`` + ``instructor``, ~3 s of imports) is loaded only when it is chosen.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from .._exceptions import ConfigError
from ._llm_env import ENV_SCORER, llm_endpoint_configured
from ._scorer import OfflineScorer

if TYPE_CHECKING:
    from .._config import MemoryConfig
    from ._llm_scorer import LLMScorer

__all__ = ["resolve_scorer"]

def resolve_scorer(
    kind: Literal["auto", "llm", "offline"],
    *,
    model: str | None = None,
    base_url: str | None = None,
    config: MemoryConfig | None = None,
    environ: Mapping[str, str] | None = None,
    **options: Any,
) -> tuple[LLMScorer | OfflineScorer, str]:
    """The scorer for a ``--scorer`` choice and one sentence saying which runs and why.

    ``auto`` picks :class:`LLMScorer` only when asked for: an explicit ``base_url``, or
    ``RELMEM_SCORER=llm``; otherwise :class:`OfflineScorer`, and the sentence says how
    to ask for the LLM when an endpoint is configured but not chosen. ``options`` go to
    the :class:`LLMScorer` constructor (timeout, max_tokens, batch size, …).

    Raises:
        ConfigError: ``llm`` was asked for but no endpoint is configured, or
            ``RELMEM_SCORER`` holds something other than ``llm`` / ``offline``.
    """
    env = os.environ if environ is None else environ
    configured = (env.get(ENV_SCORER) or "").strip().lower()
    if configured not in ("", "llm", "offline", "auto"):
        raise ConfigError(f"{ENV_SCORER}={configured!r}: expected llm or offline")
    if kind == "offline":
        return OfflineScorer(), "offline (deterministic, no network; --scorer offline)"
    if kind == "auto":
        if configured == "offline":
            return OfflineScorer(), f"offline (deterministic, no network; {ENV_SCORER}=offline)"
        if not base_url and configured != "llm":
            hint = (
                f"an endpoint is configured, but sending the transcript needs --scorer llm or {ENV_SCORER}=llm"
                if llm_endpoint_configured(env) else "no LLM endpoint asked for: pass --scorer llm and an endpoint to score with an LLM"
            )
            return OfflineScorer(), f"offline (deterministic, no network; {hint})"
    from ._llm_scorer import LLMScorer  # openai + instructor load here, on the LLM path only

    kwargs: dict[str, Any] = {"model": model, "base_url": base_url, **options}
    scorer = LLMScorer.from_config(config, **kwargs) if config is not None else LLMScorer(**kwargs)
    why = "--scorer llm" if kind == "llm" else (f"{ENV_SCORER}=llm" if configured == "llm" else "--base-url given")
    return scorer, f"llm ({scorer.describe()}; {why}) — message contents are sent to this endpoint"

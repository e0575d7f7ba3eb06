"""The LLM scorer's environment: variable names, the default model, whether an endpoint is set.

Shared by :mod:`._choice` (which scorer runs, without importing ``openai``) and
:mod:`._llm_scorer` (the scorer itself), so neither imports the other for them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

__all__ = [
    "DEFAULT_SCORER_MODEL",
    "ENV_API_KEY",
    "ENV_BASE_URL",
    "ENV_MODE",
    "ENV_MODEL",
    "ENV_SCORER",
    "llm_endpoint_configured",
]

DEFAULT_SCORER_MODEL = "gpt-4o-mini"
"""Scorer model when neither the ``model`` argument nor ``RELMEM_MODEL`` is set."""
ENV_MODEL = "RELMEM_MODEL"
ENV_MODE = "RELMEM_SCORER_MODE"
ENV_SCORER = "RELMEM_SCORER"
"""``llm`` or ``offline``: the configured scorer for ``auto`` (``relmem build`` default)."""
ENV_API_KEY = "OPENAI_API_KEY"
ENV_BASE_URL = "OPENAI_BASE_URL"


def llm_endpoint_configured(environ: Mapping[str, str] | None = None) -> bool:
    """Whether an LLM endpoint is configured in the environment: ``OPENAI_API_KEY`` or
    ``OPENAI_BASE_URL`` is set and non-empty (``environ`` defaults to ``os.environ``).
    A configured endpoint alone does not make ``auto`` pick the LLM scorer."""
    env = os.environ if environ is None else environ
    return bool(env.get(ENV_API_KEY) or env.get(ENV_BASE_URL))

"""The LLM scorer's command-line options, shared by ``relmem build`` and ``relmem rubric``.

Each option maps to one :class:`LLMScorer` argument; an option left unset keeps the
scorer's default (``None`` values are dropped). Importing this module imports neither
``openai`` nor ``instructor``.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

__all__ = [
    "BaseUrl",
    "BatchSize",
    "ContextLength",
    "MaxTokens",
    "ResponseFormat",
    "ScorerMode",
    "ScorerModel",
    "SystemRole",
    "Timeout",
    "llm_options",
]

_PANEL = "LLM scorer (used with --scorer llm)"

ScorerModel = Annotated[str | None, typer.Option(
    help="Model the LLM scorer calls. Default: $RELMEM_MODEL, else --model.", rich_help_panel=_PANEL)]
BaseUrl = Annotated[str | None, typer.Option(
    help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8080/v1. Default: $OPENAI_BASE_URL, else OpenAI.",
    rich_help_panel=_PANEL)]
Timeout = Annotated[float | None, typer.Option(
    min=1.0, help="Seconds per scoring request (a timed-out request is re-sent). Default 60; a CPU server needs more.",
    rich_help_panel=_PANEL)]
MaxTokens = Annotated[int | None, typer.Option(
    "--max-tokens", min=1,
    help="Upper cap of a reply (tokens). Default: 24 + 64 per message of the request.", rich_help_panel=_PANEL)]
BatchSize = Annotated[int | None, typer.Option(
    "--batch-size", min=1, help="Most messages per scoring request. Default 20.", rich_help_panel=_PANEL)]
ContextLength = Annotated[int | None, typer.Option(
    "--context-length", min=256,
    help="The scorer model's window (tokens): requests are sized to fit it. Default: the model family's window, "
         "else 128,000 — set it for local servers (e.g. llama.cpp -c / --n_ctx).", rich_help_panel=_PANEL)]
SystemRole = Annotated[str | None, typer.Option(
    "--system-role", help="system (default) or user: put the rubric in the user message, for models without a "
    "system role (in the json/md_json modes instructor still adds its schema as a system message).",
    rich_help_panel=_PANEL)]
ScorerMode = Annotated[str | None, typer.Option(
    "--scorer-mode", help="tools (default), json_schema, json or md_json. Default: $RELMEM_SCORER_MODE.",
    rich_help_panel=_PANEL)]
ResponseFormat = Annotated[str | None, typer.Option(
    "--response-format", help="How the JSON modes send the schema: auto (default: detect), json_schema, "
    "json_object_schema, json_object or none.", rich_help_panel=_PANEL)]


def llm_options(
    *, timeout: float | None = None, max_tokens: int | None = None, batch_size: int | None = None,
    context_length: int | None = None, system_role: str | None = None, scorer_mode: str | None = None,
    response_format: str | None = None,
) -> dict[str, Any]:
    """The :class:`LLMScorer` keyword arguments for the options that were set.

    Raises:
        ValueError: ``system_role`` is not ``system`` or ``user``.
    """
    if system_role is not None and system_role not in ("system", "user"):
        raise ValueError(f"--system-role must be system or user, not {system_role!r}")
    options = {
        "timeout": timeout, "max_tokens": max_tokens, "batch_max_messages": batch_size,
        "context_length": context_length, "system_role": system_role, "mode": scorer_mode,
        "response_format": response_format,
    }
    return {k: v for k, v in options.items() if v is not None}

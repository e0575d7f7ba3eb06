"""``manage(client)``: the one line that wraps an OpenAI or Anthropic client (the managed
clients are :mod:`._openai` and :mod:`._anthropic`)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from .._manager import BuiltContext, RelevanceMemoryManager
from ._anthropic import AsyncManagedAnthropic, ManagedAnthropic, manage_anthropic
from ._openai import AsyncManagedOpenAI, ManagedOpenAI
from ._session import OnDivergence

__all__ = ["manage"]


def manage(
    client: Any,
    memory: RelevanceMemoryManager | None = None,
    *,
    on_build: Callable[[BuiltContext], None] | None = None,
    on_divergence: OnDivergence = "resync",
    **config: Any,
) -> ManagedOpenAI | AsyncManagedOpenAI | ManagedAnthropic | AsyncManagedAnthropic:
    """Wrap an OpenAI or Anthropic client so its requests send a managed context (one line).

    Returns :class:`AsyncManagedOpenAI` for an async OpenAI client (``openai.AsyncOpenAI``,
    ``AsyncAzureOpenAI``, or any client whose ``chat.completions.create`` is a coroutine
    function), else :class:`ManagedOpenAI`; for an Anthropic client (one with ``messages``
    and no ``chat``: ``anthropic.Anthropic`` / ``AsyncAnthropic``) :class:`ManagedAnthropic` /
    :class:`AsyncManagedAnthropic`. Arguments as for :class:`ManagedOpenAI`.
    """
    if not hasattr(client, "chat") and hasattr(client, "messages"):
        return manage_anthropic(client, memory, on_build=on_build, on_divergence=on_divergence, **config)
    create = inspect.unwrap(client.chat.completions.create)
    is_async = inspect.iscoroutinefunction(create) or any(
        kind.__name__.startswith("Async") for kind in type(client).__mro__
    )
    cls = AsyncManagedOpenAI if is_async else ManagedOpenAI
    return cls(client, memory, on_build=on_build, on_divergence=on_divergence, **config)

"""LangChain messages and tools as OpenAI chat dicts and back, shared by both LangChain
adapters (:mod:`.langchain`, :mod:`._langchain_agent`). Needs ``langchain-core``."""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from langchain_core.messages import BaseMessage

__all__ = ["from_openai_messages", "thread_id_of", "to_openai_messages"]

_EXTRA_HINT = "the LangChain adapter needs langchain-core: pip install 'relevance-memory[langchain]'"


def _messages_module() -> Any:
    try:
        from langchain_core import messages
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise ImportError(_EXTRA_HINT) from exc
    return messages


def to_openai_messages(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """LangChain messages as OpenAI chat dicts (``AIMessage.tool_calls`` → ``tool_calls`` with JSON arguments).

    Raises:
        ImportError: ``langchain-core`` is not installed (names the extra).
    """
    converted = _messages_module().convert_to_openai_messages(list(messages))
    return [dict(m) for m in converted]


def from_openai_messages(messages: Sequence[Mapping[str, Any]]) -> list[BaseMessage]:
    """OpenAI chat dicts as LangChain messages (``tool_calls`` → ``AIMessage.tool_calls`` with parsed args).

    Raises:
        ImportError: ``langchain-core`` is not installed (names the extra).
    """
    return list(_messages_module().convert_to_messages([dict(m) for m in messages]))


def thread_id_of(config: Mapping[str, Any] | None) -> Hashable | None:
    """The conversation key of a LangChain/LangGraph run config: ``configurable.thread_id``
    (``None`` when absent)."""
    if not config:
        return None
    configurable = config.get("configurable") or {}
    thread = configurable.get("thread_id") if isinstance(configurable, Mapping) else None
    return thread if isinstance(thread, Hashable) else str(thread)


def _openai_tools(tools: Sequence[Any]) -> list[dict[str, Any]]:
    """LangChain tools (``BaseTool``, functions, or dicts) as OpenAI ``tools=`` entries, for counting.

    A provider's built-in tool given as a dict (``{"type": "web_search"}``) is kept as it is.
    """
    if not tools:
        return []
    from langchain_core.utils.function_calling import convert_to_openai_tool

    out: list[dict[str, Any]] = []
    for tool in tools:
        try:
            out.append(dict(convert_to_openai_tool(tool)))
        except (ValueError, TypeError):  # a provider's own tool dict: counted as its JSON
            out.append(dict(tool) if isinstance(tool, Mapping) else {"tool": repr(tool)})
    return out

"""LangChain messages and tools as OpenAI chat dicts and back, shared by both LangChain
adapters (:mod:`.langchain`, :mod:`._langchain_agent`). Needs ``langchain-core``."""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..clients._anthropic_messages import final_turn_thinking, starts_thinking, thinking_first, thinking_reserve

if TYPE_CHECKING:
    from langchain_core.messages import BaseMessage

    from .._manager import BuiltContext, RelevanceMemoryManager

__all__ = [
    "budget_after_prompt",
    "from_openai_messages",
    "loop_thinking_reserve",
    "project_to_messages",
    "thread_id_of",
    "to_openai_messages",
    "to_store_messages",
]

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


_TOOL_MEDIA = {"image_url": "image", "file": "input_file", "input_audio": "audio"}
"""A tool message's media parts the store refuses there under their OpenAI chat type (OpenAI
chat takes them only in user messages), as a type it keeps in any message and counts as the
media it is (an image by its size, a file or audio at the placeholder cost)."""


def _tool_part(part: Any) -> Any:
    if isinstance(part, Mapping) and part.get("type") in _TOOL_MEDIA:
        return {**part, "type": _TOOL_MEDIA[part["type"]]}
    return part


def to_store_messages(messages: Sequence[Any]) -> tuple[list[dict[str, Any]], list[int]]:
    """LangChain messages as the memory keeps them: OpenAI chat dicts (:func:`to_openai_messages`)
    and, per dict, the index of the message it came from. Two differences:

    - a message LangChain turns into several dicts (a user turn in Anthropic form holding
      ``tool_result`` blocks: one tool message per block, then the turn's other blocks) maps
      back to that one message, its tool messages first (each answers the call before it);
    - an image or file in a tool message (a tool that returned a screenshot, which Anthropic
      and Gemini chat models take) keeps its place as a part the store accepts there
      (:data:`_TOOL_MEDIA`), counted as the media it is.

    Raises:
        ImportError: ``langchain-core`` is not installed (names the extra).
    """
    convert = _messages_module().convert_to_openai_messages
    out: list[dict[str, Any]] = []
    owners: list[int] = []
    for k, message in enumerate(messages):
        converted = [dict(m) for m in convert([message])]
        converted.sort(key=lambda m: m.get("role") != "tool")  # stable: tool results first
        for d in converted:
            if d.get("role") == "tool" and isinstance(d.get("content"), list):
                d["content"] = [_tool_part(p) for p in d["content"]]
            out.append(d)
            owners.append(k)
    return out, owners


def project_to_messages(
    built: BuiltContext, memory: RelevanceMemoryManager, messages: Sequence[Any], owners: Sequence[int]
) -> list[Any]:
    """The built context as LangChain messages: the caller's own object for a message all of
    whose dicts (:func:`to_store_messages`) were sent whole, once; a new message for each dict
    the build made, shortened, or sent without the rest of its message."""
    from ..clients._session import project_built

    sources: list[tuple[int | None, Any]] = [(owner, i) for i, owner in enumerate(owners)]
    tagged = project_built(built, memory, sources, lambda m: (None, m))
    whole = Counter(owner for owner, _ in tagged if owner is not None)
    parts = Counter(owners)
    stored = memory.messages
    out: list[Any] = []
    last: int | None = None
    for owner, what in tagged:
        if owner is None:
            out.append(from_openai_messages([what])[0])
        elif whole[owner] == parts[owner]:
            if owner != last:
                out.append(messages[owner])
        else:
            out.append(from_openai_messages([stored[what].to_openai()])[0])
        last = owner
    loop = final_turn_thinking(stored)
    if loop is not None:  # the final tool-loop turn sent shortened: its thinking blocks first (loop_thinking_reserve)
        for message in out:
            calls = getattr(message, "tool_calls", None) or ()
            if any(c.get("id") == loop[0] for c in calls) and not any(message is m for m in messages) \
                    and not starts_thinking({"content": message.content}):
                message.content = thinking_first(message.content, loop[1])
    return out


def loop_thinking_reserve(memory: RelevanceMemoryManager, built: BuiltContext) -> int:
    """Tokens to keep free for the thinking blocks of the final tool-loop turn (tokens) when
    ``built`` sent that turn shortened without them, 0 otherwise (the shared
    :func:`~relevance_memory.clients._anthropic_messages.thinking_reserve`): a model with extended
    thinking on (Anthropic's) refuses a request whose final tool-loop turn does not open with
    them. The adapters build again with that much less, and :func:`project_to_messages` puts
    them back."""
    return thinking_reserve(final_turn_thinking(memory.messages), built.messages, memory.tokenizer)


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


def _response_format_tools(response_format: Any) -> list[dict[str, Any]]:
    """The structured-output schema ``create_agent`` sends with each request (after every
    middleware ran, so not in ``request.tools``) as OpenAI ``tools=`` entries, for counting: a
    ``ToolStrategy``'s tools, a ``ProviderStrategy``'s schema, or an ``AutoStrategy`` / raw
    schema as the tools it may become."""
    if response_format is None:
        return []
    specs = getattr(response_format, "schema_specs", None)
    if specs is None and getattr(response_format, "schema_spec", None) is not None:
        specs = [response_format.schema_spec]
    if specs is None:
        try:
            from langchain.agents.structured_output import ToolStrategy

            specs = ToolStrategy(schema=getattr(response_format, "schema", response_format)).schema_specs
        except (ImportError, TypeError, ValueError):  # a schema LangChain itself would refuse
            return []
    return [{"type": "function", "function": {"name": str(getattr(spec, "name", "") or ""),
                                              "description": str(getattr(spec, "description", "") or ""),
                                              "parameters": getattr(spec, "json_schema", {})}} for spec in specs]


def budget_after_prompt(budget: int, prompt_tokens: int) -> int:
    """The messages' budget once the system prompt every request carries is taken (tokens).

    Raises:
        ContextOverflowError: the system prompt (with the reply priming) takes the whole
            budget; it names the request budget the caller set, not what is left of it.
    """
    from .._exceptions import ContextOverflowError
    from .._tokenizer import REPLY_PRIMING_TOKENS

    if prompt_tokens and budget - prompt_tokens <= REPLY_PRIMING_TOKENS:
        raise ContextOverflowError(budget=budget, pinned_tokens=prompt_tokens + REPLY_PRIMING_TOKENS, newest_step_tokens=0)
    return budget - prompt_tokens


"""Anthropic Messages and the store: conversion both ways, the validity check, cache breakpoints.

The store keeps OpenAI chat dicts (SPEC §2); an Anthropic history maps onto them so the
pipeline sees the same steps and trace chains as for an OpenAI one (:func:`from_anthropic`):

- ``system=`` (a string or text blocks) → a leading ``system`` message: the pinned prompt;
- a ``user`` turn → one ``tool`` message per ``tool_result`` block (``tool_call_id`` its
  ``tool_use_id``, ``name`` the called tool's, ``content`` the result's content), then one
  ``user`` message holding the turn's other blocks (text, images, documents …), if any;
- an ``assistant`` turn → one ``assistant`` message: ``content`` its other blocks (text,
  thinking …), ``tool_calls`` its ``tool_use`` blocks (``arguments`` the input as JSON);
- a ``system`` message inside ``messages`` (the SDK's ``SystemMessageParam``) → a ``system``
  message, sent back in place.

So an assistant turn's ``tool_use`` blocks and the next turn's ``tool_result`` blocks form one
chain (kept, summarised or left out together; parallel calls whole). Block fields with no
OpenAI counterpart (a result's ``is_error``, a call's ``caller``) ride along under the
message key :data:`ANTHROPIC_FIELD` and come back on the way out. On the way in,
``cache_control`` is dropped (breakpoints are placed per request:
:func:`place_cache_breakpoints`) and so are ``None``-valued fields, so a reply appended as
the SDK's objects, their ``model_dump()`` or hand-written dicts converts to the same dict
(and one plain text block to its string, the API's shorthand for it).
Images and documents stay Anthropic blocks and are counted at the tokenizer's fixed cost
(:func:`~relevance_memory._tokenizer.image_tokens`).

:func:`to_anthropic` turns a built context back into a valid request: the pinned prompt is
``system=``; a message the build made (goal block, summaries, subtask note) becomes a text
block of a user turn; every tool message a ``tool_result`` block of the user turn right after
its ``tool_use``; adjacent turns of one role merge (what the API does with them anyway), so
turns strictly alternate; the first turn is a user turn. :func:`check_anthropic_context` is
the validity check of that shape, :func:`anthropic_request_tokens` its size, and
:class:`AnthropicTokenCounter` counts store messages at their Anthropic cost (an upper bound:
merging turns only removes framing), so a context within the budget gives a request within it.

Pure functions over plain data; nothing here imports ``anthropic``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from .._exceptions import InvalidMessageError
from .._markers import GOAL_BLOCK_MARKER, SUMMARY_MARKER
from .._tokenizer import REPLY_PRIMING_TOKENS, TiktokenCounter, TokenCounter, tools_tokens
from ..store._validate import _NAME_RE

__all__ = [
    "ANTHROPIC_FIELD",
    "CONTINUATION_TEXT",
    "MAX_CACHE_BREAKPOINTS",
    "TOOL_USE_SYSTEM_PROMPT_TOKENS",
    "AnthropicContext",
    "AnthropicTokenCounter",
    "CacheBreakpoint",
    "PlacedRequest",
    "anthropic_request_tokens",
    "check_anthropic_context",
    "convert_history",
    "from_anthropic",
    "place_cache_breakpoints",
    "to_anthropic",
]

ANTHROPIC_FIELD = "anthropic"
"""Key of a store dict holding what its Anthropic source carried beyond the OpenAI fields:
``origin`` (``"system"``: the ``system=`` parameter; ``"message"``: a system message of
``messages``), ``tool_result`` (a result's extra fields, e.g. ``is_error``) and ``tool_use``
(per call id, a call's extra fields, e.g. ``caller``)."""

MAX_CACHE_BREAKPOINTS = 4
"""Anthropic's limit of ``cache_control`` breakpoints per request (tools, system and
messages together; the top-level automatic one takes a slot too)."""

TOOL_USE_SYSTEM_PROMPT_TOKENS = 346
"""Tokens of the system prompt Anthropic adds to every request with ``tools`` (Claude 4
models and Claude Sonnet 3.7 with ``tool_choice`` auto or none; 313 with any or tool;
Anthropic's "Tool use pricing" table). The managed client takes them from the budget."""

CONTINUATION_TEXT = "[relevance-memory: the conversation continues from earlier turns]"
"""Text of the user turn :func:`to_anthropic` puts first when a built context would start
with an assistant turn (the API wants a user turn first)."""

_NOT_CACHEABLE = frozenset({"thinking", "redacted_thinking"})
"""Block types a ``cache_control`` breakpoint may not sit on (Anthropic's prompt-caching guide)."""
_DROPPED = frozenset({"cache_control", "parsed_output"})
"""Block fields dropped on ingest: breakpoints (placed per request) and the SDK's parse result."""


# --------------------------------------------------------------------------- blocks
def _get(obj: Any, key: str, default: Any = None) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(key, default)
    return getattr(obj, key, default)


def _dump(value: Any) -> Any:
    """An SDK (pydantic) object as a dict without ``None`` fields; anything else unchanged."""
    dump = getattr(value, "model_dump", None)
    if callable(dump) and not isinstance(value, type):
        return dump(exclude_none=True)
    return value


def _plain(value: Any) -> Any:
    """JSON-like ``value`` as plain dicts and lists, ``None``-valued keys dropped."""
    value = _dump(value)
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _verbatim(value: Any) -> Any:
    """A plain copy of a tool's ``input`` (SDK objects dumped; ``None`` values and every key kept)."""
    value = _dump(value)
    if isinstance(value, Mapping):
        return {k: _verbatim(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_verbatim(v) for v in value]
    return value


def _block(block: Any, where: str) -> dict[str, Any]:
    """One content block as a plain dict: ``None`` fields, ``cache_control`` and the SDK's
    ``parsed_output`` dropped; a tool call's ``input`` copied as it is."""
    raw = _dump(block)
    if not isinstance(raw, Mapping) or not isinstance(raw.get("type"), str):
        hint = ' (write {"type": "text", "text": ...})' if isinstance(block, str) else ""
        raise InvalidMessageError(f"{where} must be a content block with a string 'type'{hint}")
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if value is None or key in _DROPPED:
            continue
        if key == "input":
            out[key] = _verbatim(_get(block, "input", value))
        elif key == "content" and isinstance(value, (list, tuple)):
            out[key] = [_block(inner, f"{where}.content[{n}]") for n, inner in enumerate(value)]
        else:
            out[key] = _plain(value)
    return out


def _blocks(content: Any, where: str) -> list[dict[str, Any]]:
    if isinstance(content, (str, bytes, Mapping)) or not isinstance(content, Iterable):
        raise InvalidMessageError(f"{where} must be a string or a list of content blocks, got {type(content).__name__}")
    return [_block(b, f"{where}[{n}]") for n, b in enumerate(content)]


def _system_content(system: Any, where: str) -> str | list[dict[str, Any]]:
    if isinstance(system, str):
        return system
    blocks = _blocks(system, where)
    for n, block in enumerate(blocks):
        if block["type"] != "text" or not isinstance(block.get("text"), str):
            raise InvalidMessageError(f"{where}[{n}] must be a text block (a system prompt holds text only)")
    return blocks


# --------------------------------------------------------------------------- Anthropic → store
def convert_history(messages: Iterable[Any], system: Any = None) -> tuple[list[dict[str, Any]], list[int | None]]:
    """:func:`from_anthropic`, plus per store dict the index of the Anthropic message it came
    from (``None`` for the ``system=`` prompt): an ingest error can then name the caller's message."""
    out: list[dict[str, Any]] = []
    origins: list[int | None] = []
    if isinstance(system, (str, list, tuple)) and system:  # the SDK's omit / NOT_GIVEN: no system prompt
        out.append({"role": "system", "content": _system_content(system, "system"), ANTHROPIC_FIELD: {"origin": "system"}})
        origins.append(None)
    names: dict[str, str] = {}
    for k, message in enumerate(messages):
        where = f"messages[{k}]"
        role = _get(message, "role")
        content = _get(message, "content")
        if content is None:
            raise InvalidMessageError(f"{where} has no content", index=k)
        try:
            converted = _convert_one(role, content, where, names)
        except InvalidMessageError as exc:
            raise InvalidMessageError(exc.reason, index=k) from None
        out.extend(converted)
        origins.extend(k for _ in converted)
    return out, origins


def _convert_one(role: Any, content: Any, where: str, names: dict[str, str]) -> list[dict[str, Any]]:
    if role == "system":
        return [{"role": "system", "content": _system_content(content, f"{where}.content"),
                 ANTHROPIC_FIELD: {"origin": "message"}}]
    if role not in ("user", "assistant"):
        hint = " (an OpenAI tool message? convert the history, or use the OpenAI client)" if role == "tool" else ""
        raise InvalidMessageError(f"{where} has role {role!r}; Anthropic messages are user, assistant or system{hint}")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    blocks = _blocks(content, f"{where}.content")
    if role == "assistant":
        return [_assistant(blocks, where, names)]
    results = [b for b in blocks if b["type"] == "tool_result"]
    others = [b for b in blocks if b["type"] != "tool_result"]
    if any(b["type"] == "tool_use" for b in others):
        raise InvalidMessageError(f"{where}: a tool_use block belongs in an assistant turn, not a user turn")
    out = [_tool_message(b, f"{where}.content", names) for b in results]
    if others or not results:
        out.append({"role": "user", "content": _shorthand(others)})
    return out


def _shorthand(blocks: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    """One plain text block as its string (the API's shorthand for it: the same prompt), so a
    reply appended as ``message.content`` or as its text converts the same; else the blocks."""
    if len(blocks) == 1 and set(blocks[0]) == {"type", "text"} and blocks[0]["type"] == "text" and blocks[0]["text"]:
        return str(blocks[0]["text"])
    return blocks


def _assistant(blocks: list[dict[str, Any]], where: str, names: dict[str, str]) -> dict[str, Any]:
    uses = [b for b in blocks if b["type"] == "tool_use"]
    others = [b for b in blocks if b["type"] != "tool_use"]
    if any(b["type"] == "tool_result" for b in others):
        raise InvalidMessageError(f"{where}: a tool_result block belongs in a user turn, not an assistant turn")
    message: dict[str, Any] = {"role": "assistant", "content": _shorthand(others) if others or not uses else None}
    if not uses:
        return message
    calls = []
    extras: dict[str, dict[str, Any]] = {}
    for use in uses:
        call_id, name, arguments = use.get("id"), use.get("name"), use.get("input", {})
        if not isinstance(call_id, str) or not call_id or not isinstance(name, str) or not name:
            raise InvalidMessageError(f"{where}: a tool_use block needs a string 'id' and 'name'")
        if not isinstance(arguments, Mapping):
            raise InvalidMessageError(f"{where}: tool_use {call_id!r} needs an object 'input'")
        calls.append({"id": call_id, "type": "function",
                      "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)}})
        names[call_id] = name
        extra = {k: v for k, v in use.items() if k not in ("type", "id", "name", "input")}
        if extra:
            extras[call_id] = extra
    message["tool_calls"] = calls
    if extras:
        message[ANTHROPIC_FIELD] = {"tool_use": extras}
    return message


def _tool_message(block: dict[str, Any], where: str, names: dict[str, str]) -> dict[str, Any]:
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str) or not call_id:
        raise InvalidMessageError(f"{where}: a tool_result block needs a string 'tool_use_id'")
    content = block.get("content", "")
    message: dict[str, Any] = {"role": "tool", "tool_call_id": call_id, "content": content}
    name = names.get(call_id)
    if name is not None and _NAME_RE.match(name):
        message["name"] = name
    extra = {k: v for k, v in block.items() if k not in ("type", "tool_use_id", "content")}
    if extra:
        message[ANTHROPIC_FIELD] = {"tool_result": extra}
    return message


def from_anthropic(messages: Iterable[Any], *, system: Any = None) -> list[dict[str, Any]]:
    """Anthropic ``messages`` (and ``system=``) as the store's OpenAI chat dicts (module doc).

    Args:
        messages: Anthropic ``MessageParam`` dicts, or SDK objects with ``role`` and
            ``content`` (a reply: ``{"role": "assistant", "content": message.content}``).
        system: the ``system=`` parameter (a string or text blocks), if any.

    Returns:
        New plain dicts, ready for :meth:`RelevanceMemoryManager.extend`; converting a longer
        history gives the same dicts for its first messages (prefix-stable).

    Raises:
        InvalidMessageError: a message has an unknown role or malformed content; ``index``
            is its position in ``messages``.
    """
    return convert_history(messages, system)[0]


# --------------------------------------------------------------------------- store → Anthropic
@dataclass
class AnthropicContext:
    """A context in Anthropic's shape: ``system`` (``None`` when there is none) and ``messages``."""

    system: str | list[dict[str, Any]] | None
    messages: list[dict[str, Any]]


@dataclass
class _Turn:
    role: str
    blocks: list[dict[str, Any]]
    text: str | None = None  # the turn is one message whose content was this string: sent as given

    def add(self, blocks: list[dict[str, Any]]) -> None:
        self.blocks.extend(blocks)
        self.text = None
        if self.role == "user":  # the API wants a turn's tool_result blocks first
            self.blocks.sort(key=lambda b: b.get("type") != "tool_result")

    def message(self) -> dict[str, Any]:
        return {"role": self.role, "content": self.text if self.text is not None else self.blocks}


def _copy(value: Any) -> Any:
    return json.loads(json.dumps(value, ensure_ascii=False, default=str))


def _content_blocks(content: Any) -> list[dict[str, Any]]:
    """A store message's content as Anthropic blocks (OpenAI ``image_url`` parts become image blocks)."""
    if content is None or content == "":
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    out = []
    for part in content:
        if isinstance(part, str):
            part = {"type": "text", "text": part}
        block = _copy(part)
        if block.get("type") == "image_url":
            block = _image_block(block)
        if block.get("type") == "text" and not block.get("text"):
            continue  # the API refuses empty text blocks
        out.append(block)
    return out


def _image_block(part: dict[str, Any]) -> dict[str, Any]:
    url = str((part.get("image_url") or {}).get("url", ""))
    if url.startswith("data:") and ";base64," in url:
        media_type, data = url[5:].split(";base64,", 1)
        return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}
    return {"type": "image", "source": {"type": "url", "url": url}}


def _tool_uses(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    extras = (message.get(ANTHROPIC_FIELD) or {}).get("tool_use") or {}
    out = []
    for call in message.get("tool_calls") or ():
        function = call.get("function") or call.get("custom") or {}
        arguments = function.get("arguments", function.get("input", ""))
        try:
            parsed = json.loads(arguments) if arguments else {}
        except (TypeError, ValueError):
            parsed = None
        block = {"type": "tool_use", "id": call["id"], "name": function.get("name", ""),
                 "input": parsed if isinstance(parsed, dict) else {"arguments": arguments}}
        block.update(_copy(extras.get(call["id"], {})))
        out.append(block)
    return out


def _tool_result(message: Mapping[str, Any]) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": message.get("tool_call_id")}
    block.update(_copy((message.get(ANTHROPIC_FIELD) or {}).get("tool_result") or {}))
    content = message.get("content")
    if content not in (None, ""):
        block["content"] = _copy(content)
    return block


def to_anthropic(messages: Sequence[Mapping[str, Any]]) -> AnthropicContext:
    """A built context (the store's OpenAI dicts) as a valid Anthropic request (module doc).

    The ``system=`` prompt comes back as given; a caller's system message of ``messages``
    stays in place; any other system message (goal block, summaries, subtask note) becomes
    text blocks of a user turn. Tool messages become ``tool_result`` blocks (first in their
    turn), tool calls ``tool_use`` blocks after the turn's other blocks. Adjacent turns of
    one role merge; a turn with nothing to send (an empty reply) is left out; a context
    that would start with an assistant turn gets a :data:`CONTINUATION_TEXT` user turn
    first. A turn that is one message with string content keeps the string.

    Raises nothing: every store dict converts (unknown part types are kept as blocks).
    """
    system: str | list[dict[str, Any]] | None = None
    turns: list[_Turn] = []
    for message in messages:
        role = str(message.get("role"))
        content = message.get("content")
        origin = (message.get(ANTHROPIC_FIELD) or {}).get("origin")
        # a user or assistant message with string content and nothing else is sent as given
        as_given = content if isinstance(content, str) and content and role in ("user", "assistant") and not message.get(
            "tool_calls") else None
        if role in ("system", "developer"):
            if origin == "system" and system is None and not turns:
                system = _copy(content)
                continue
            if origin == "message":  # the caller's own system message: kept in place, as given
                turns.append(_Turn("system", _content_blocks(content), content if isinstance(content, str) else None))
                continue
            role, blocks = "user", _content_blocks(content)
        elif role == "tool":
            role, blocks = "user", [_tool_result(message)]
        else:
            blocks = _content_blocks(content) + (_tool_uses(message) if role == "assistant" else [])
        if not blocks:
            continue
        if turns and turns[-1].role == role:
            turns[-1].add(blocks)
        else:
            turns.append(_Turn(role, blocks, text=as_given))
    first = next((t for t in turns if t.role != "system"), None)
    if first is not None and first.role == "assistant":
        turns.insert(turns.index(first), _Turn("user", [{"type": "text", "text": CONTINUATION_TEXT}], CONTINUATION_TEXT))
    return AnthropicContext(system=system, messages=[t.message() for t in turns])


# --------------------------------------------------------------------------- validity
def _as_blocks(content: Any) -> list[Any] | None:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if isinstance(content, list):
        return content
    return None


def _breakpoints_in(value: Any) -> list[Any]:
    """Every ``cache_control`` value inside ``value`` (blocks, nested tool_result content, tools)."""
    if isinstance(value, Mapping):
        found = [value["cache_control"]] if value.get("cache_control") is not None else []
        for key, item in value.items():
            if key not in ("cache_control", "input"):
                found.extend(_breakpoints_in(item))
        return found
    if isinstance(value, (list, tuple)):
        return [c for item in value for c in _breakpoints_in(item)]
    return []


def check_anthropic_context(
    messages: Sequence[Mapping[str, Any]],
    *,
    system: Any = None,
    tools: Sequence[Any] | None = None,
    automatic_cache: bool = False,
    thinking: bool = False,
) -> list[str]:
    """Problems that would make the Anthropic Messages API reject a request (empty list: valid).

    The sibling of :func:`~relevance_memory.pipeline.assemble.check_context` for Anthropic's
    shape. Checks: roles are ``user`` / ``assistant`` (or ``system`` holding text); the first
    turn is a user turn; user and assistant turns strictly alternate; no turn is empty (but a
    final assistant prefill) and no text block is empty; ``tool_use`` blocks only in assistant
    turns, with unique ids; every ``tool_use`` has exactly one ``tool_result`` in the user turn
    right after it, and every ``tool_result`` answers a ``tool_use`` of the turn right before,
    ``tool_result`` blocks first in their turn; no goal block or summary in an assistant turn
    (SPEC §7); at most :data:`MAX_CACHE_BREAKPOINTS` ``cache_control`` breakpoints over
    ``tools``, ``system`` and ``messages`` (plus one for ``automatic_cache``, the top-level
    ``cache_control``), each ``{"type": "ephemeral"}`` (optionally with ``ttl``), none on a
    thinking block. With ``thinking`` (the request turns extended thinking on), a request that
    ends in a tool loop — its last turn holds ``tool_result`` blocks — has that loop's final
    assistant turn start with a ``thinking`` or ``redacted_thinking`` block.
    """
    problems: list[str] = []
    breakpoints = _breakpoints_in(list(tools or ())) + (_breakpoints_in(system) if system is not None else [])
    if system is not None and not isinstance(system, str) and (
        not isinstance(system, list) or any(not isinstance(b, Mapping) or b.get("type") != "text" for b in system)
    ):
        problems.append("system must be a string or a list of text blocks")
    pending: set[str] | None = None  # tool_use ids of the previous assistant turn
    owner = -1
    seen_ids: set[str] = set()
    previous: tuple[int, str] | None = None
    started = False
    last = len(messages) - 1
    for n, message in enumerate(messages):
        role = message.get("role")
        blocks = _as_blocks(message.get("content"))
        if role not in ("user", "assistant", "system"):
            problems.append(f"message {n} has role {role!r}; the API takes user and assistant turns")
            continue
        if blocks is None:
            problems.append(f"message {n} content must be a string or a list of blocks")
            continue
        breakpoints.extend(_breakpoints_in(blocks))
        if role == "system":
            if pending:
                problems.append(f"system message {n} sits between the tool_use of message {owner} and its tool_result")
            if any(not isinstance(b, Mapping) or b.get("type") != "text" for b in blocks):
                problems.append(f"system message {n} may hold text only")
            previous = None  # turns on either side of a system message are not adjacent
            continue
        if not started and role != "user":
            problems.append(f"message {n}: the first turn must be a user turn, not {role}")
        if previous is not None and previous[1] == role:
            problems.append(f"messages {previous[0]} and {n} are both {role} turns; turns must alternate")
        if not blocks and not (role == "assistant" and n == last):
            problems.append(f"message {n} ({role}) has empty content")
        kinds = [b.get("type") if isinstance(b, Mapping) else None for b in blocks]
        for j, block in enumerate(blocks):
            if not isinstance(block, Mapping) or not isinstance(block.get("type"), str):
                problems.append(f"message {n} block {j} is not a content block with a 'type'")
                continue
            if block["type"] == "text" and not block.get("text"):
                problems.append(f"message {n} block {j} is an empty text block")
            if block.get("cache_control") is not None and block["type"] in _NOT_CACHEABLE:
                problems.append(f"message {n} block {j}: a {block['type']} block cannot carry cache_control")
            if role == "assistant" and block["type"] == "text" and str(block.get("text", "")).startswith(
                (GOAL_BLOCK_MARKER, SUMMARY_MARKER)
            ):
                problems.append(f"message {n}: a goal block or summary must not be in an assistant turn")
        if role == "user":
            if "tool_use" in kinds:
                problems.append(f"message {n}: tool_use blocks belong in assistant turns")
            results = [str(b.get("tool_use_id")) for b in blocks if isinstance(b, Mapping) and b.get("type") == "tool_result"]
            first_other = next((j for j, k in enumerate(kinds) if k != "tool_result"), len(kinds))
            if any(k == "tool_result" for k in kinds[first_other:]):
                problems.append(f"message {n}: tool_result blocks must come before the turn's other blocks")
            for call_id in results:
                if pending is None or call_id not in pending:
                    problems.append(f"message {n}: tool_result for {call_id!r} does not answer a tool_use of the turn right before")
            if pending:
                missing = sorted(c for c in pending if c not in results)
                twice = sorted({c for c in results if results.count(c) > 1})
                if missing:
                    problems.append(f"assistant message {owner} has tool_use without a tool_result in the next turn: {missing}")
                if twice:
                    problems.append(f"message {n} answers {twice} more than once")
            pending = None
        else:
            if pending:
                problems.append(f"assistant message {owner} has tool_use without a tool_result in the next turn: {sorted(pending)}")
            if "tool_result" in kinds:
                problems.append(f"message {n}: tool_result blocks belong in user turns")
            ids = [str(b.get("id")) for b in blocks if isinstance(b, Mapping) and b.get("type") == "tool_use"]
            for call_id in ids:
                if call_id in seen_ids:
                    problems.append(f"message {n}: tool_use id {call_id!r} is used twice")
                seen_ids.add(call_id)
            pending, owner = (set(ids), n) if ids else (None, n)
        previous, started = (n, role), True
    if pending:
        problems.append(f"assistant message {owner} has tool_use without a tool_result in the next turn: {sorted(pending)}")
    if thinking and last >= 1 and messages[last].get("role") == "user" and messages[last - 1].get("role") == "assistant":
        closing = _as_blocks(messages[last].get("content")) or []
        if any(isinstance(b, Mapping) and b.get("type") == "tool_result" for b in closing) and not starts_thinking(
                {"content": _as_blocks(messages[last - 1].get("content"))}):
            problems.append(f"assistant message {last - 1}, the final turn of a tool loop, must start with its thinking "
                            "blocks when extended thinking is on")
    for value in breakpoints:
        if not isinstance(value, Mapping) or value.get("type") != "ephemeral" or set(value) - {"type", "ttl"}:
            problems.append(f"cache_control must be {{'type': 'ephemeral'}} (optionally with 'ttl'), got {value!r}")
    total = len(breakpoints) + (1 if automatic_cache else 0)
    if total > MAX_CACHE_BREAKPOINTS:
        problems.append(f"{total} cache_control breakpoints; the API allows at most {MAX_CACHE_BREAKPOINTS}")
    return problems


# --------------------------------------------------------------------------- thinking
_THINKING = frozenset({"thinking", "redacted_thinking"})


def final_turn_thinking(messages: Sequence[Any]) -> tuple[str, list[dict[str, Any]]] | None:
    """The first tool call id and the thinking blocks of the assistant message (store
    :class:`Message` objects) whose tool calls the history's newest tool results answer, or
    ``None`` (no such turn, or it has no thinking). With extended thinking on, Anthropic refuses
    a request whose final assistant turn of a tool loop does not start with them, unchanged."""
    k = len(messages) - 1
    while k >= 0 and messages[k].role != "assistant":
        k -= 1
    if k < 0 or not any(m.role == "tool" for m in messages[k + 1 :]):
        return None
    raw = messages[k].raw
    calls = raw.get("tool_calls") or []
    content = raw.get("content")
    blocks = [dict(b) for b in content if isinstance(b, Mapping) and b.get("type") in _THINKING] if isinstance(
        content, list) else []
    return (str(calls[0]["id"]), blocks) if calls and blocks else None


def thinking_turn(messages: Sequence[Mapping[str, Any]], call_id: str, *, anthropic: bool) -> Mapping[str, Any] | None:
    """The assistant message (store form) or turn (``anthropic``) holding tool call ``call_id``."""
    for message in messages:
        if message.get("role") != "assistant":
            continue
        if anthropic:
            content = message.get("content")
            if isinstance(content, list) and any(
                isinstance(b, Mapping) and b.get("type") == "tool_use" and b.get("id") == call_id for b in content
            ):
                return message
        elif any(isinstance(c, Mapping) and c.get("id") == call_id for c in message.get("tool_calls") or ()):
            return message
    return None


def starts_thinking(message: Mapping[str, Any] | None) -> bool:
    """Whether ``message``'s content opens with a thinking block."""
    content = message.get("content") if message is not None else None
    return isinstance(content, list) and bool(content) and isinstance(content[0], Mapping) and (
        content[0].get("type") in _THINKING)


def thinking_reserve(
    loop: tuple[str, list[dict[str, Any]]] | None, sent: Sequence[Mapping[str, Any]], counter: TokenCounter
) -> int:
    """Tokens to keep free for the final tool-loop turn's thinking blocks (``loop``:
    :func:`final_turn_thinking`, or ``None`` when they are not needed) when the built messages
    ``sent`` (store form) carry that turn without them — a long thinking block made it an
    excerpt — else 0 (tokens). The Anthropic client and the LangChain adapters then build again
    with that much less and put the blocks back (:func:`thinking_first`)."""
    if loop is None or starts_thinking(thinking_turn(sent, loop[0], anthropic=False)):
        return 0
    return counter.count_message({"role": "assistant", "content": loop[1]})


def thinking_first(content: Any, blocks: Sequence[Mapping[str, Any]]) -> list[Any]:
    """``content`` (a string or a list of blocks) with the thinking ``blocks`` before it."""
    return [*blocks, *(content if isinstance(content, list) else [{"type": "text", "text": content}])]


# --------------------------------------------------------------------------- tokens
class AnthropicTokenCounter:
    """A :class:`TokenCounter` that counts each store message at what it costs in an Anthropic
    request, as the request :func:`to_anthropic` makes (tokens; an upper bound).

    A tool message costs a user turn holding its ``tool_result`` block (framing, the block's
    overhead and its content), which is more than an OpenAI tool message; every other message
    costs what ``inner`` counts (an assistant's ``tool_calls`` cost what its ``tool_use``
    blocks do: the same name and input JSON). Merging turns and moving the pinned prompt to
    ``system=`` only remove framing, so the request counted by
    :func:`anthropic_request_tokens` never exceeds the sum of its messages' counts.

    Args:
        inner: the counter of text and blocks; default :class:`TiktokenCounter` with
            ``encoding`` and ``image_tokens`` (an OpenAI encoding standing in for Claude's
            tokenizer, which is not public: counts are approximate).
    """

    def __init__(
        self,
        inner: TokenCounter | None = None,
        *,
        encoding: Literal["o200k_base", "cl100k_base"] = "o200k_base",
        image_tokens: int = 765,
    ) -> None:
        self.inner: TokenCounter = inner or TiktokenCounter(encoding, image_tokens=image_tokens)
        self.name = f"{self.inner.name}+anthropic"
        self.approximate = bool(getattr(self.inner, "approximate", isinstance(self.inner, TiktokenCounter)))
        """Whether the counts stand in for Claude's tokenizer (the manager says so in its records)."""

    def count_text(self, text: str) -> int:
        """Tokens of a plain string (``inner``'s count)."""
        return self.inner.count_text(text)

    def count_texts(self, texts: Sequence[str]) -> list[int]:
        """Tokens of many strings, in order (``inner``'s counts)."""
        return self.inner.count_texts(texts)

    def count_message(self, message: Mapping[str, Any]) -> int:
        """Tokens of one store message in an Anthropic request, framing included (class doc)."""
        if message.get("role") == "tool":
            return self.inner.count_message({"role": "user", "content": [_tool_result(message)]})
        return self.inner.count_message(message)


def anthropic_request_tokens(
    counter: TokenCounter,
    *,
    messages: Sequence[Mapping[str, Any]],
    system: Any = None,
    tools: Sequence[Any] | None = None,
) -> int:
    """Tokens of an Anthropic request as ``counter`` counts it (tokens): every turn framed like
    a chat message, blocks by what they carry (images and documents at the fixed cost), the
    ``system`` prompt as a system message, the ``tools`` JSON plus
    :data:`TOOL_USE_SYSTEM_PROMPT_TOKENS` when tools are given, and the reply priming.
    """
    total = REPLY_PRIMING_TOKENS + sum(counter.count_message(m) for m in messages)
    if system:
        total += counter.count_message({"role": "system", "content": system})
    if tools:
        total += tools_tokens(counter, tools) + TOOL_USE_SYSTEM_PROMPT_TOKENS
    return total


# --------------------------------------------------------------------------- cache breakpoints
@dataclass(frozen=True)
class CacheBreakpoint:
    """Where a ``cache_control`` breakpoint went, and why.

    Attributes:
        where: ``tools``, ``system`` or ``messages``.
        index: the tool, system block, or message (turn) index.
        block: the block index within the turn (0 for tools and system).
        reason: ``end`` (the request's last block: the next request reads up to here),
            ``prefix`` (the end of what repeats the previous request: read now),
            ``system`` (tools and system prompt, long enough to cache) or ``head`` (the
            stable head a compaction keeps before its goal block and summaries).
    """

    where: Literal["tools", "system", "messages"]
    index: int
    block: int
    reason: Literal["end", "prefix", "system", "head"]


@dataclass
class PlacedRequest:
    """A request with its breakpoints: send ``system``, ``messages`` and ``tools``; keep
    ``keys`` to pass as ``previous`` next time."""

    system: str | list[dict[str, Any]] | None
    messages: list[dict[str, Any]]
    tools: list[Any] | None
    breakpoints: list[CacheBreakpoint] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Item:
    where: Literal["tools", "system", "messages"]
    index: int
    block: int
    key: str
    cacheable: bool
    marker: bool = False  # a text block opening with the goal-block or summary marker


def _key(*parts: Any) -> str:
    return json.dumps(parts, ensure_ascii=False, sort_keys=True, separators=(",", ":"), default=str)


def _without_breakpoint(block: Any) -> Any:
    if isinstance(block, Mapping):
        return {k: v for k, v in block.items() if k != "cache_control"}
    return block


def _items(system: Any, messages: Sequence[Mapping[str, Any]], tools: Sequence[Any]) -> list[_Item]:
    """The request as the cache reads it, tools → system → messages, one item per block."""
    items = [_Item("tools", i, 0, _key("tool", _without_breakpoint(_plain(t))), True) for i, t in enumerate(tools)]
    for j, block in enumerate(_as_blocks(system) or []):
        items.append(_Item("system", 0, j, _key("system", _without_breakpoint(block)), True))
    for t, message in enumerate(messages):
        for j, block in enumerate(_as_blocks(message.get("content")) or []):
            kind = block.get("type")
            text = block.get("text") if kind == "text" else None
            items.append(_Item(
                "messages", t, j, _key(t, message.get("role"), _without_breakpoint(block)),
                cacheable=kind not in _NOT_CACHEABLE and not (kind == "text" and not text),
                marker=isinstance(text, str) and text.startswith((GOAL_BLOCK_MARKER, SUMMARY_MARKER)),
            ))
    return items


def place_cache_breakpoints(
    context: AnthropicContext,
    tools: Sequence[Any] | None = None,
    *,
    previous: Sequence[str] | None,
    counter: TokenCounter,
    min_tokens: int = 1024,
    automatic: bool = False,
) -> PlacedRequest:
    """Put ``cache_control: {"type": "ephemeral"}`` where Anthropic's prompt cache pays.

    Anthropic caches a request prefix at each breakpoint and, on a later request, finds a
    cached prefix at a breakpoint or up to about 20 blocks before it (its prompt-caching
    guide). Candidates, in priority order, at most :data:`MAX_CACHE_BREAKPOINTS` in all
    (minus those the caller's ``tools`` carry, minus one with ``automatic``, the top-level
    ``cache_control``, which marks the last block itself):

    1. ``end``: the last cacheable block — written now, read by the next request when it
       extends this one (an appended build, SPEC §3.1); left to the API with ``automatic``;
    2. ``prefix``: the last block this request shares with ``previous`` (the part that
       repeats the previous request, compared block by block without breakpoints) — where
       the previous request wrote, so it is read now however many blocks were appended;
    3. ``system``: the last system block (the last tool when there is no system prompt)
       when tools plus system prompt reach ``min_tokens`` — survives every compaction;
    4. ``head``: the last block before the first goal block or summary — the stable head a
       compaction keeps (the task statement), read again after the next compaction.

    A breakpoint never sits on a thinking block or an empty text block (the API refuses
    them): it moves back to the nearest cacheable block. The inputs are not changed: a turn
    (or system prompt) given as a string becomes one text block when it gets a breakpoint.

    Args:
        context: the request's system prompt and messages (:func:`to_anthropic`).
        tools: the request's ``tools``, sent as given (copied when one gets a breakpoint).
        previous: :attr:`PlacedRequest.keys` of the previous request of this conversation.
        counter: counts the system prompt and tools for the ``min_tokens`` rule.
        min_tokens: the shortest prefix worth a breakpoint on the system prompt (tokens;
            Anthropic's minimum cacheable length is 1,024 on most models).
        automatic: the caller sends the top-level ``cache_control``.
    """
    tool_list = list(tools or [])
    items = _items(context.system, context.messages, tool_list)
    keys = [i.key for i in items]
    shared = 0
    for mine, theirs in zip(keys, previous or (), strict=False):
        if mine != theirs:
            break
        shared += 1

    def back_from(position: int, *, floor: int = 0) -> int | None:
        """The nearest cacheable message block at or before ``position`` (not before ``floor``)."""
        for n in range(position, floor - 1, -1):
            if items[n].where == "messages" and items[n].cacheable:
                return n
        return None

    candidates: list[tuple[int | None, Literal["end", "prefix", "system", "head"]]] = []
    if not automatic and items:
        candidates.append((back_from(len(items) - 1), "end"))
    if 0 < shared < len(items):
        candidates.append((back_from(shared - 1), "prefix"))
    system_items = [n for n, i in enumerate(items) if i.where == "system"]
    tool_items = [n for n, i in enumerate(items) if i.where == "tools"]
    caller_marks = len(_breakpoints_in(tool_list))
    prompt_tokens = tools_tokens(counter, tool_list) + (
        counter.count_message({"role": "system", "content": context.system}) if context.system else 0
    )
    if prompt_tokens >= min_tokens and (system_items or (tool_items and not caller_marks)):
        candidates.append(((system_items or tool_items)[-1], "system"))
    marker = next((n for n, i in enumerate(items) if i.marker), None)
    if marker is not None and marker > 0:
        candidates.append((back_from(marker - 1), "head"))
    limit = MAX_CACHE_BREAKPOINTS - caller_marks - (1 if automatic else 0)
    chosen: dict[int, Literal["end", "prefix", "system", "head"]] = {}
    for position, reason in candidates:
        if position is not None and position not in chosen and len(chosen) < limit:
            chosen[position] = reason

    system = context.system
    messages = [dict(m) for m in context.messages]
    placed: list[CacheBreakpoint] = []
    for position, reason in sorted(chosen.items()):
        item = items[position]
        placed.append(CacheBreakpoint(item.where, item.index, item.block, reason))
        if item.where == "tools":
            marked = {**_dump(tool_list[item.index]), "cache_control": {"type": "ephemeral"}}
            tool_list = [*tool_list[: item.index], marked, *tool_list[item.index + 1 :]]
        elif item.where == "system":
            blocks = [dict(b) for b in _as_blocks(system) or []]
            blocks[item.block]["cache_control"] = {"type": "ephemeral"}
            system = blocks
        else:
            blocks = [dict(b) for b in _as_blocks(messages[item.index]["content"]) or []]
            blocks[item.block]["cache_control"] = {"type": "ephemeral"}
            messages[item.index]["content"] = blocks
    return PlacedRequest(system=system, messages=messages, tools=tool_list if tools is not None else None,
                         breakpoints=placed, keys=keys)

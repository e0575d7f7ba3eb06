"""Prefix accounting and append planning for prefix-stable builds (SPEC §3.1).

- :func:`serialise_context`: the request's messages as JSON text, key order and tool-call
  argument strings exactly as built (the same state gives byte-identical text).
- :func:`shared_prefix_tokens`: tokens of the exact common prefix of two consecutive
  requests, as a provider's prompt cache sees it.
- :func:`plan_append`: which new messages an appended build adds, holding back a tool
  chain whose results have not all arrived (they arrive with the next append), and when
  the previous context cannot be extended verbatim.

Pure functions over plain data; token counts come from the caller's
:class:`~relevance_memory._tokenizer.TokenCounter`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._tokenizer import TOKENS_PER_MESSAGE

__all__ = [
    "AppendPlan",
    "CacheMeter",
    "TailItem",
    "message_key",
    "plan_append",
    "serialise_context",
    "shared_prefix_tokens",
]


def serialise_context(messages: Sequence[Mapping[str, Any]]) -> str:
    """The messages as compact JSON text, keys in their built order, non-ASCII kept.

    This is what an SDK puts on the wire (modulo whitespace): two builds from the same
    state must give the same text byte for byte (issue 10), so nothing here sorts,
    re-encodes tool-call arguments or normalises content.
    """
    return json.dumps(list(messages), ensure_ascii=False, separators=(",", ":"))


def message_key(message: Mapping[str, Any]) -> str:
    """A message's identity as a provider's prompt renders it: JSON with sorted keys.

    Two messages with the same key render to the same prompt tokens (the chat template
    reads fields, not their order in the JSON object).
    """
    return json.dumps(message, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def shared_prefix_tokens(
    previous: Sequence[Mapping[str, Any]],
    current: Sequence[Mapping[str, Any]],
    *,
    count_message: Callable[[Mapping[str, Any]], int],
    count_text: Callable[[str], int],
    key: Callable[[Mapping[str, Any]], str] = message_key,
) -> int:
    """Tokens at the start of ``current`` that repeat the start of ``previous`` exactly.

    Whole leading messages that are equal (by ``key``) count their full tokens (framing
    included, as ``count_message`` counts them). In the first message that differs, when
    both have the same role and string contents, the common start of the two contents
    counts too: when both have the same role, the message header (``TOKENS_PER_MESSAGE − 1``
    framing tokens plus the role), and when both contents are strings, the tokens of their
    common start minus one (the last token may be cut differently). Reply priming is never part of the prefix. No rounding here: apply
    :meth:`CachePolicy.cacheable` for the provider's 1,024 / 128 rule.

    Args:
        previous: the messages of the previous request.
        current: the messages of this request.
        count_message: tokens of one message, framing included (tokens).
        count_text: tokens of a plain string (tokens).
        key: identity of a message; default :func:`message_key`.

    Returns:
        The shared prefix in tokens (≥ 0).
    """
    tokens = 0
    for old, new in zip(previous, current, strict=False):
        if key(old) == key(new):
            tokens += count_message(new)
            continue
        if old.get("role") == new.get("role"):
            tokens += TOKENS_PER_MESSAGE - 1 + count_text(str(new.get("role", "")))
            a, b = old.get("content"), new.get("content")
            if isinstance(a, str) and isinstance(b, str):
                tokens += max(0, count_text(_common_start(a, b)) - 1)
        break
    return tokens


def _common_start(a: str, b: str) -> str:
    """The longest common start of two strings (characters)."""
    n = 0
    limit = min(len(a), len(b))
    while n < limit and a[n] == b[n]:
        n += 1
    return a[:n]


@dataclass(frozen=True)
class TailItem:
    """What :func:`plan_append` needs to know about one new stored message.

    Attributes:
        index: the message's position in the store.
        tokens: its token count, framing included (tokens).
        role: ``system``/``developer``/``user``/``assistant``/``tool``.
        call_ids: ids of its ``tool_calls`` (assistant messages).
        tool_call_id: the call a tool message answers.
        excluded: never part of a context (left out on ingest, e.g. an orphan tool result).
    """

    index: int
    tokens: int
    role: str
    call_ids: tuple[str, ...] = ()
    tool_call_id: str | None = None
    excluded: bool = False


@dataclass(frozen=True)
class AppendPlan:
    """The messages an appended build adds, in store order.

    Attributes:
        indices: store indices to append (all of one complete tool chain or none of it).
        tokens: their tokens (tokens).
        next_index: first store index the next append starts from (a held-back chain's
            assistant message, or one past the last new message).
        held_back: indices of a trailing tool chain whose results have not all arrived.
        skipped: indices left out because they are excluded on ingest.
        blocked: why the previous context cannot be extended verbatim (the build must
            compact), or ``None``.
    """

    indices: tuple[int, ...] = ()
    tokens: int = 0
    next_index: int = 0
    held_back: tuple[int, ...] = ()
    skipped: tuple[int, ...] = field(default_factory=tuple)
    blocked: str | None = None


def plan_append(items: Sequence[TailItem], start: int) -> AppendPlan:
    """Plan an append of the new stored messages ``items`` (store order, from ``start``).

    Rules (SPEC §9: an appended build never splits a tool chain):

    - an assistant message with tool calls goes in together with the tool messages right
      after it, once every call has its result; if the store ends before all results
      arrived, the chain is held back and the next append starts at its assistant message;
    - excluded messages (orphan results left out on ingest) are skipped;
    - a tool message that does not answer the assistant right before it, or calls left
      unanswered while later messages follow, mean the context cannot simply grow: the
      plan is ``blocked`` and the build compacts (the full pipeline validates and repairs).

    Args:
        items: the new messages, consecutive store indices starting at ``start``.
        start: store index of the first new message (the previous plan's ``next_index``).

    Returns:
        The :class:`AppendPlan`.

    Raises:
        ValueError: ``items`` are not consecutive from ``start``.
    """
    for n, item in enumerate(items):
        if item.index != start + n:
            raise ValueError(f"new messages must be consecutive from index {start}; got {item.index} at position {n}")
    take: list[int] = []
    skipped: list[int] = []
    tokens = 0
    i = 0
    count = len(items)
    while i < count:
        item = items[i]
        if item.excluded:
            skipped.append(item.index)
            i += 1
            continue
        if item.role == "tool":
            return AppendPlan(
                tuple(take), tokens, start + i, skipped=tuple(skipped),
                blocked=f"tool message {item.index} does not follow the assistant message that called it "
                "at the end of the context",
            )
        if item.role != "assistant" or not item.call_ids:
            take.append(item.index)
            tokens += item.tokens
            i += 1
            continue
        wanted = set(item.call_ids)
        j = i + 1
        block: list[TailItem] = []
        while j < count and items[j].role == "tool":
            if not items[j].excluded:
                block.append(items[j])
            j += 1
        answered = {t.tool_call_id for t in block}
        if answered >= wanted and all(t.tool_call_id in wanted for t in block):
            take.append(item.index)
            tokens += item.tokens
            for t in block:
                take.append(t.index)
                tokens += t.tokens
            skipped.extend(items[k].index for k in range(i + 1, j) if items[k].excluded)
            i = j
            continue
        if j == count and all(t.tool_call_id in wanted for t in block):
            held = tuple(items[k].index for k in range(i, count))
            return AppendPlan(tuple(take), tokens, item.index, held_back=held, skipped=tuple(skipped))
        missing = sorted(wanted - answered)
        return AppendPlan(
            tuple(take), tokens, start + i, skipped=tuple(skipped),
            blocked=f"tool call(s) {', '.join(missing) or '?'} of message {item.index} are unanswered "
            "while later messages follow",
        )
    return AppendPlan(tuple(take), tokens, start + count, skipped=tuple(skipped))


@dataclass
class CacheMeter:
    """Running totals of consecutive requests against sending the full history each time.

    Feed it one request at a time (:meth:`add`): the tokens sent and how many of them a
    provider bills as cached, and the same for the full history at that point. Cost units
    are ``uncached + p × cached`` (tokens of uncached input; ``p`` the cached-price ratio).

    Attributes:
        requests: requests added.
        sent, cached: tokens sent and cached over all requests (tokens).
        full_sent, full_cached: the same for the full history (tokens).
    """

    requests: int = 0
    sent: int = 0
    cached: int = 0
    full_sent: int = 0
    full_cached: int = 0

    def add(self, sent: int, cached: int, full_sent: int, full_cached: int) -> None:
        """Add one request (tokens). Raises ``ValueError`` when cached exceeds sent."""
        if not (0 <= cached <= sent and 0 <= full_cached <= full_sent):
            raise ValueError(f"cached tokens must lie in [0, sent]: {cached}/{sent}, {full_cached}/{full_sent}")
        self.requests += 1
        self.sent += sent
        self.cached += cached
        self.full_sent += full_sent
        self.full_cached += full_cached

    @property
    def share(self) -> float:
        """Share of the tokens sent that were cached (0..1)."""
        return self.cached / self.sent if self.sent else 0.0

    def cost(self, cached_price: float) -> float:
        """Cost units of the requests: ``(sent − cached) + p × cached``."""
        return (self.sent - self.cached) + cached_price * self.cached

    def full_cost(self, cached_price: float) -> float:
        """Cost units of sending the full history instead."""
        return (self.full_sent - self.full_cached) + cached_price * self.full_cached

    def ratio(self, cached_price: float) -> float:
        """:meth:`cost` / :meth:`full_cost` (< 1: cheaper than the full history; 0 when empty)."""
        full = self.full_cost(cached_price)
        return self.cost(cached_price) / full if full else 0.0

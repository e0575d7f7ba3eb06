"""Plain copies of the previous context's messages, made mostly in C (issue 24).

Every build hands the caller plain, mutable copies of its messages; an appended build copies
the whole previous context again (:func:`~relevance_memory.pipeline.append.append`), so at a
long context the copy is the largest part of an append (~0.8 µs a message in
:func:`~relevance_memory._models.thaw`, whose recursion is Python). Each message of the
prefix gets a *copy plan* once, when it enters the prefix:

- ``None``: every value is immutable (strings, numbers, ``None``): ``dict(message)`` is a
  deep copy;
- :data:`TOOL_CALLS`: every value immutable but ``tool_calls``, a list of calls whose values
  are immutable but a flat ``function`` dict (the OpenAI call shape, most of an agent's
  context's nested values): the dicts and the list are copied, their strings shared (~1 µs a
  message, against ~2 µs for ``marshal.loads``, which makes every string again);
- ``bytes``: the message's :mod:`marshal` form (any other nested lists and dicts):
  ``marshal.loads`` rebuilds them in C;
- ``b""``: a value ``marshal`` cannot write (an object of the caller's, a ``str`` or ``int``
  subclass): :func:`thaw` copies it, as before.

The copies equal :func:`thaw`'s (tested), except that nested containers ``marshal`` writes
— sets, bytes — are copied rather than shared (``thaw`` keeps non-JSON leaves as they are).
"""

from __future__ import annotations

import marshal
from collections.abc import Mapping, Sequence
from typing import Any

from .._models import FrozenDict, FrozenList, thaw

__all__ = ["TOOL_CALLS", "CopyPlan", "copy_plan", "plain_copies"]

CopyPlan = bytes | int | None
"""How one message is copied (module doc)."""

TOOL_CALLS = 1
"""The copy plan of a message whose only nested values are OpenAI tool calls (module doc)."""

_IMMUTABLE = frozenset({str, int, float, bool, type(None)})
_DICTS = (dict, FrozenDict)
_LISTS = (list, FrozenList)


def _flat(value: Any) -> bool:
    """Whether ``value`` is a dict (plain or frozen) of immutable values only."""
    return type(value) in _DICTS and _IMMUTABLE.issuperset(map(type, value.values()))


def _tool_calls_shape(message: Mapping[str, Any]) -> bool:
    """Whether ``message``'s values are immutable but ``tool_calls``, a list of dicts whose values
    are immutable but ``function``, a flat dict (:data:`TOOL_CALLS`)."""
    calls = message.get("tool_calls")
    if not isinstance(calls, _LISTS) or type(calls) not in _LISTS or not _IMMUTABLE.issuperset(
        type(v) for k, v in message.items() if k != "tool_calls"
    ):
        return False
    for call in calls:
        if type(call) not in _DICTS or not _IMMUTABLE.issuperset(type(v) for k, v in call.items() if k != "function"):
            return False
        if "function" in call and not _flat(call["function"]):
            return False
    return True


def _copy_calls(message: Mapping[str, Any]) -> dict[str, Any]:
    """The plain copy of a :data:`TOOL_CALLS` message: new dicts and list, strings shared."""
    return {**message, "tool_calls": [
        {**call, "function": {**call["function"]}} if "function" in call else {**call} for call in message["tool_calls"]
    ]}


def copy_plan(message: Mapping[str, Any], thawed: dict[str, Any] | None = None) -> CopyPlan:
    """The copy plan of ``message`` (a plain or frozen message dict; module doc). O(its size).
    ``thawed``: ``thaw(message)`` when the caller has it (not mutated since), so it is not made again."""
    if _IMMUTABLE.issuperset(map(type, message.values())):  # every value immutable (in C)
        return None
    if _tool_calls_shape(message):
        return TOOL_CALLS
    try:  # thawed: what the plan rebuilds is thaw's copy (no tuples)
        return marshal.dumps(thawed if thawed is not None else thaw(message))
    except ValueError:  # an object marshal cannot write: thaw it each time
        return b""


def plain_copies(messages: Sequence[Mapping[str, Any]], plans: Sequence[CopyPlan]) -> list[dict[str, Any]]:
    """Plain, mutable deep copies of ``messages`` (equal to ``[thaw(m) for m in messages]``),
    by their ``plans`` (one per message, from :func:`copy_plan`); every message is thawed
    when the lengths differ. O(the messages' size), mostly in C."""
    if len(plans) != len(messages):
        return [thaw(m) for m in messages]
    loads = marshal.loads
    return [
        dict(m) if plan is None else (loads(plan) if plan else thaw(m)) if isinstance(plan, bytes) else _copy_calls(m)
        for m, plan in zip(messages, plans, strict=True)
    ]

"""Plain copies of the previous context's messages, made mostly in C (issue 24).

Every build hands the caller plain, mutable copies of its messages; an appended build copies
the whole previous context again (:func:`~relevance_memory.pipeline.append.append`), so at a
long context the copy is the largest part of an append (~0.8 µs a message in
:func:`~relevance_memory._models.thaw`, whose recursion is Python). Each message of the
prefix gets a *copy plan* once, when it enters the prefix:

- ``None``: every value is immutable (strings, numbers, ``None``): ``dict(message)`` is a
  deep copy;
- ``bytes``: the message's :mod:`marshal` form (a tool call's nested lists and dicts):
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

from .._models import thaw

__all__ = ["CopyPlan", "copy_plan", "plain_copies"]

CopyPlan = bytes | None
"""How one message is copied (module doc)."""

_IMMUTABLE = frozenset({str, int, float, bool, type(None)})


def copy_plan(message: Mapping[str, Any], thawed: dict[str, Any] | None = None) -> CopyPlan:
    """The copy plan of ``message`` (a plain or frozen message dict; module doc). O(its size).
    ``thawed``: ``thaw(message)`` when the caller has it (not mutated since), so it is not made again."""
    if _IMMUTABLE.issuperset(map(type, message.values())):  # every value immutable (in C)
        return None
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
    return [dict(m) if plan is None else loads(plan) if plan else thaw(m) for m, plan in zip(messages, plans, strict=True)]

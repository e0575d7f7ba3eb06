"""The cyclic garbage collector around the library's large batches (issue 24; no I/O).

Ingesting a long history, or building over one, allocates millions of objects that are not
garbage (messages, their indexes, a build's per-message tables, freed by reference counting).
CPython's collector traverses them again and again while they accumulate — each full
collection a pass over the whole heap: at 300,000 messages 28 % of an ingest and 21 % of a
first build (``benchmarks/scale.py``), more at a million. :func:`paused_collector` pauses the
collector for such a batch and collects once at its end; nothing is lost (a cycle created
meanwhile is collected then).

The pause is process-wide (the collector is). It is taken only when the collector is enabled,
is shared by overlapping batches of several threads (the last to finish resumes it), and
never enables a collector the program disabled.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["PAUSE_MIN_MESSAGES", "paused_collector"]

PAUSE_MIN_MESSAGES = 5_000
"""From how many messages (a batch ingested, or the history a build reads) the collector pauses."""

_lock = threading.Lock()
_holders = 0  # batches inside a pause
_resume = False  # whether the collector was enabled when the first of them paused it


@contextmanager
def paused_collector(messages: int, *, full: bool = False) -> Iterator[None]:
    """Pause the cyclic garbage collector for a batch over ``messages`` messages (at least
    :data:`PAUSE_MIN_MESSAGES`; a smaller batch runs as it is), then collect once: the young
    generations (``gc.collect(1)``), or with ``full`` every generation (``gc.collect()``: after
    a large ingest, so that the collector's next full pass does not fall in a later step)."""
    global _holders, _resume
    if messages < PAUSE_MIN_MESSAGES:
        yield
        return
    with _lock:
        if _holders == 0:
            _resume = gc.isenabled()
            gc.disable()
        _holders += 1
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            resume = _holders == 0 and _resume
            if resume:
                gc.enable()
        if resume:
            gc.collect() if full else gc.collect(1)

"""A circuit breaker for a remote board: after a failed call, fail fast for a back-off period.

States (the classic pattern, as in Nygard's *Release It!* and Polly / resilience4j):

- **closed** — calls go to the server;
- **open** — a call failed (timed out, or the connection was refused after its retries):
  every call fails at once with :class:`~relevance_memory.BoardUnavailableError`, without
  touching the network, until ``backoff_s`` seconds have passed;
- **half-open** — the back-off is over: exactly one call (the *probe*) goes to the server,
  the others keep failing fast. The probe's success closes the circuit; its failure opens
  it again for twice the back-off (capped at ``max_backoff_s``).

A :class:`~relevance_memory.board.MirroredBoard` (what a manager wraps a
:class:`~relevance_memory.board.RedisBoard` in) serves its local copy while the circuit is
open, and sends what was written meanwhile once a probe gets through. So a paused, stopped
or slow server costs one step at most one timed-out call, not one per board operation.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Literal

from .._exceptions import BoardUnavailableError

__all__ = ["CircuitBreaker"]

State = Literal["closed", "open", "half_open"]


class CircuitBreaker:
    """Fail fast while a remote board is known unreachable (see the module doc). Thread-safe.

    Args:
        backoff_s: seconds the circuit stays open after it first opens (default 1.0).
        max_backoff_s: cap of the back-off, which doubles after each failed probe (default 30.0).
        clock: monotonic seconds (injected for tests; default :func:`time.monotonic`).

    Attributes:
        state: ``"closed"``, ``"open"`` or ``"half_open"``.
        opened: how many times the circuit opened (a failed probe counts).
        rejected: calls failed fast, without a round trip to the server.
        probes: calls let through to test a server that had failed.
        faults: what happened, one sentence each, since :meth:`take_faults` last ran
            (opened, probe failed, closed) — for the decision record's board faults.

    Raises:
        ValueError: a back-off that is not a positive number of seconds.
    """

    def __init__(self, backoff_s: float = 1.0, max_backoff_s: float = 30.0, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not backoff_s > 0 or not max_backoff_s >= backoff_s:
            raise ValueError(f"need 0 < backoff_s <= max_backoff_s seconds, got {backoff_s}, {max_backoff_s}")
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self._clock = clock
        self.state: State = "closed"
        self.opened = 0
        self.rejected = 0
        self.probes = 0
        self.faults: list[str] = []
        self._wait = backoff_s
        self._until = 0.0
        self._since = 0.0
        self._lock = threading.Lock()

    def enter(self, what: str) -> bool:
        """Ask to make a call; returns whether it is the half-open probe (try it once only).

        Raises:
            BoardUnavailableError: the circuit is open (or another call is probing): fail fast.
        """
        if self.state == "closed":  # the hot path takes no lock (a stale read lets one call through)
            return False
        with self._lock:
            state: State = self.state  # again, under the lock
            if state == "closed":
                return False
            now = self._clock()
            if self.state == "open" and now >= self._until:
                self.state = "half_open"
                self.probes += 1
                return True
            self.rejected += 1
            left = max(0.0, self._until - now)
            why = "a probe is under way" if self.state == "half_open" else f"next probe in {left:.2f} s"
            raise BoardUnavailableError(f"{what}: circuit open, failing fast ({why})", attempts=0)

    def success(self) -> None:
        """The call reached the server: close the circuit (and reset the back-off)."""
        if self.state == "closed" and self._wait == self.backoff_s:
            return
        with self._lock:
            if self.state != "closed":
                self.faults.append(f"server reached again after {self._clock() - self._since:.2f} s: circuit closed")
            self.state = "closed"
            self._wait = self.backoff_s

    def failure(self, cause: BaseException) -> None:
        """The call timed out or could not connect: open the circuit for the back-off."""
        with self._lock:
            now = self._clock()
            if self.state == "half_open":
                self._wait = min(self._wait * 2, self.max_backoff_s)
                self.faults.append(f"probe failed ({cause}); circuit open {self._wait:g} s more")
            elif self.state == "closed":
                self._since = now
                self.faults.append(f"call failed ({cause}); circuit open: board calls fail fast for {self._wait:g} s")
            else:
                return  # a call that entered before another one opened the circuit
            self.state = "open"
            self.opened += 1
            self._until = now + self._wait

    def take_faults(self) -> list[str]:
        """The faults since the last call (and clear them)."""
        with self._lock:
            out, self.faults = self.faults, []
            return out

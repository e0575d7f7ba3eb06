"""Transport faults of the LLM scorer: which are retried, how long to wait, what to tell.

No I/O here (the sends live in :mod:`._llm_scorer`); these are the pure decisions the
sync and async send loops share: :class:`TransportPolicy` (``tenacity`` stop and wait),
:func:`transient` (timeouts, connection errors, 429, 5xx), :func:`retry_after_seconds`
and :func:`transport_error` (one line naming the endpoint, the status and a hint).
"""

from __future__ import annotations

import email.utils
import inspect
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import openai
from tenacity import RetryCallState, stop_after_attempt, stop_before_delay, wait_exponential_jitter

from .._exceptions import ConfigError, ScorerError, ScorerRequestError, ScorerTransportError

__all__ = ["TransportPolicy", "rejects_format", "retry_after_seconds", "status_of", "transient", "transport_error"]

_RETRYABLE_STATUS = frozenset({429}) | frozenset(range(500, 600))

# tenacity 9.1 renamed ``wait_exponential_jitter(initial=...)`` to ``multiplier`` (the old name
# warns); the range we support spans both, so pick the name the installed version takes.
_BACKOFF_FIRST_WAIT_ARG = (
    "multiplier" if "multiplier" in inspect.signature(wait_exponential_jitter.__init__).parameters else "initial"
)


def status_of(exc: BaseException) -> int | None:
    """The HTTP status of an SDK error, ``None`` for connection errors and timeouts."""
    return exc.status_code if isinstance(exc, openai.APIStatusError) else None


def rejects_format(exc: BaseException) -> bool:
    """Whether an error answers the request's ``response_format`` itself: HTTP 400/422, or
    a 5xx whose body names ``response_format`` (llama-cpp-python's server answers a
    ``json_schema`` type it does not know with a 500 carrying the validation error)."""
    status = status_of(exc)
    if status in (400, 422):
        return True
    if status is None or status < 500:
        return False
    body = getattr(exc, "body", None)
    text = f"{getattr(exc, 'message', '')} {body if body is not None else ''}"
    return "response_format" in text


def transient(exc: BaseException) -> bool:
    """Timeouts, connection errors, 429 and 5xx are worth re-sending (a 5xx that rejects
    the ``response_format`` is not: re-sending it cannot help)."""
    if isinstance(exc, openai.APIConnectionError):  # includes APITimeoutError
        return True
    status = status_of(exc)
    return status is not None and status in _RETRYABLE_STATUS and not rejects_format(exc)


def retry_after_seconds(exc: BaseException, *, now: datetime | None = None) -> float | None:
    """Seconds a 429/503 response asks us to wait (``retry-after-ms`` or ``Retry-After``:
    seconds or an HTTP date), or ``None`` when it does not say."""
    if not isinstance(exc, openai.APIStatusError):
        return None
    headers = exc.response.headers
    raw_ms = headers.get("retry-after-ms")
    if raw_ms:
        try:
            return max(0.0, float(raw_ms) / 1000)
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if not raw:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, (when - (now or datetime.now(timezone.utc))).total_seconds())


@dataclass(frozen=True)
class TransportPolicy:
    """How transport faults are retried (all times in seconds).

    Attributes:
        attempts: most sends of one request, the first included.
        max_total_s: stop when the next wait would pass this much time since the first
            send. ``None`` (default) sizes it from the request timeout:
            ``attempts × (timeout + max_wait_s)``, so a timed-out request is always
            re-sent (issue 14: a budget equal to one timeout never retried one).
        initial_wait_s: first backoff wait; doubles per attempt (``wait_exponential_jitter``).
        max_wait_s: cap of one backoff wait, and of an honoured ``Retry-After``.
        jitter_s: random extra wait, uniform in ``[0, jitter_s]``.
    """

    attempts: int = 3
    max_total_s: float | None = None
    initial_wait_s: float = 0.5
    max_wait_s: float = 20.0
    jitter_s: float = 0.5

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ConfigError(f"TransportPolicy.attempts must be at least 1, got {self.attempts}")
        if self.max_total_s is not None and self.max_total_s <= 0:
            raise ConfigError(f"TransportPolicy.max_total_s must be positive, got {self.max_total_s}")

    def budget_s(self, timeout_s: float) -> float:
        """The total retry budget for requests with ``timeout_s`` (seconds)."""
        if self.max_total_s is not None:
            return self.max_total_s
        return self.attempts * (timeout_s + self.max_wait_s)

    def check(self, timeout_s: float) -> None:
        """Raise :class:`ConfigError` when a timed-out request could never be re-sent."""
        if self.attempts > 1 and self.budget_s(timeout_s) <= timeout_s:
            raise ConfigError(
                f"TransportPolicy.max_total_s={self.max_total_s} s is not above the request timeout of {timeout_s} s: "
                "a timed-out request would never be retried (raise max_total_s, or leave it unset to size it "
                "from the timeout)"
            )

    def wait(self, state: RetryCallState) -> float:
        """Seconds to wait before the next send: ``Retry-After`` when given, else backoff."""
        exc = state.outcome.exception() if state.outcome is not None else None
        hinted = retry_after_seconds(exc) if exc is not None else None
        if hinted is not None:
            return min(hinted, self.max_wait_s)
        first_wait = {_BACKOFF_FIRST_WAIT_ARG: self.initial_wait_s}
        backoff = wait_exponential_jitter(max=self.max_wait_s, jitter=self.jitter_s, **first_wait)
        return float(backoff(state))

    def stop(self, timeout_s: float = 60.0) -> Any:
        """The tenacity stop condition: attempts or total time, whichever comes first."""
        return stop_after_attempt(self.attempts) | stop_before_delay(self.budget_s(timeout_s))


def _short(text: str, n: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def transport_error(exc: BaseException, attempts: int, endpoint: str) -> ScorerError:
    """The scorer error for an SDK error after ``attempts`` sends: :class:`ScorerRequestError`
    (fail fast, with a hint) for a 4xx other than 429, else :class:`ScorerTransportError`."""
    status = status_of(exc)
    if status is not None and not transient(exc):
        detail = _short(str(getattr(exc, "message", "") or exc), 200)
        hint = {
            401: "check the API key",
            403: "check the key's permissions",
            404: "check the model name and base URL",
        }.get(status, "check the request settings (model, mode, response format, base URL)")
        return ScorerRequestError(
            f"{endpoint} rejected the scoring request with HTTP {status}: {detail} ({hint})",
            attempts=attempts, status=status,
        )
    kind = f"HTTP {status}" if status is not None else type(exc).__name__
    return ScorerTransportError(
        f"{endpoint} failed with {kind} after {attempts} attempt(s): {_short(str(exc), 160)}",
        attempts=attempts, status=status,
    )

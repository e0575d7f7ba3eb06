"""The one exception hierarchy of relevance-memory.

Every error the library raises on purpose derives from :class:`RelevanceMemoryError`,
so ``except RelevanceMemoryError`` catches them all. The tree::

    RelevanceMemoryError
    ├── ConfigError                 (also ValueError)  a setting is out of range or inconsistent
    ├── InvalidMessageError         (also ValueError)  a message cannot be ingested as given
    │   ├── TranscriptFormatError                      a file is not a transcript we can read
    │   └── HistoryDivergedError                       a managed client's history no longer extends the memory
    ├── ContextOverflowError                           pinned prompt + newest step exceed the budget
    ├── TokenizerError                                 the offline encoding could not be loaded
    ├── BoardError                                     a memory board refused or failed an operation
    │   ├── ScopeError              (also PermissionError) an agent asked for another agent's private scope
    │   └── BoardUnavailableError                      the board could not be reached after retries
    ├── MissingExtraError           (also ImportError) an optional dependency is missing: names the extra
    └── ScorerError                                    the relevance scorer failed (see below)
        ├── ScorerTransportError                       timeouts, resets, 429/5xx after retries
        ├── ScorerRequestError                         a 4xx (not 429) from the endpoint: fail fast
        └── ScorerValidationError                      replies never validated within the retry budget

Split as pydantic-ai does: ``ConfigError``/``InvalidMessageError``/``ContextOverflowError``
mean "you used the API wrong or asked for the impossible"; ``ScorerError`` means "the
model run failed". The build pipeline catches ``ScorerError`` itself and degrades to the
offline scorer (SPEC §4: nothing is ever lost because a scorer failed), so callers only
see it when they call a scorer directly.
"""

from __future__ import annotations

__all__ = [
    "BoardError",
    "BoardUnavailableError",
    "ConfigError",
    "ContextOverflowError",
    "HistoryDivergedError",
    "InvalidMessageError",
    "MissingExtraError",
    "RelevanceMemoryError",
    "ScopeError",
    "ScorerError",
    "ScorerRequestError",
    "ScorerTransportError",
    "ScorerValidationError",
    "TokenizerError",
    "TranscriptFormatError",
]


class RelevanceMemoryError(Exception):
    """Base class of every error raised by relevance-memory."""


class ConfigError(RelevanceMemoryError, ValueError):
    """A configuration value is out of range or inconsistent with another one."""


class InvalidMessageError(RelevanceMemoryError, ValueError):
    """A message cannot be ingested as given.

    Attributes:
        index: position of the offending message in the input (0-based), or ``None``.
        reason: one sentence naming the problem.
    """

    def __init__(self, reason: str, *, index: int | None = None) -> None:
        self.index = index
        self.reason = reason
        where = f"message {index}: " if index is not None else ""
        super().__init__(f"{where}{reason}")


class TranscriptFormatError(InvalidMessageError):
    """A transcript file is not JSON/JSONL in a format we can read."""


class HistoryDivergedError(InvalidMessageError):
    """The history passed to a managed client does not start with the messages the memory holds.

    A managed client (:class:`ManagedOpenAI`) and :meth:`RelevanceMemoryManager.sync_history`
    sync by prefix: each call's ``messages`` must begin with every message already recorded
    (earlier inputs and the model's replies), in order. Raised (by a client with
    ``on_divergence="raise"``) when the caller edited, trimmed or reordered that prefix, and
    by :meth:`RelevanceMemoryManager.extend` when a batch repeats the start of the history
    and then differs; ``index`` is the first position that differs.

    Attributes:
        index: first position (0-based) where the history and the memory differ.
        expected: the recorded message at ``index`` (OpenAI dict).
        got: the caller's message at ``index``, or ``None`` when the history is shorter
            than the memory (it was trimmed, or a recorded reply was not appended).
    """

    def __init__(self, reason: str, *, index: int, expected: object = None, got: object = None) -> None:
        self.expected = expected
        self.got = got
        super().__init__(reason, index=index)


def _tokens(count: int) -> str:
    """``"1 token"``, ``"8000 tokens"``."""
    return f"{count} token{'' if count == 1 else 's'}"


class ContextOverflowError(RelevanceMemoryError):
    """The pinned system prompt cannot fit the token budget (or, in the extreme, not even the
    excerpts of the newest step's messages fit beside it).

    SPEC §3: never emit an over-budget context silently; SPEC §11: no message is too large to
    enter — an oversized one enters as an excerpt — so this is left for a system prompt that
    cannot fit (it is sent unchanged, SPEC §9). The numbers are attached so a caller can react
    (raise the budget, shorten the system prompt).

    Attributes:
        budget: the token budget of the build (tokens).
        pinned_tokens: tokens of the pinned system prompt(s) (tokens).
        newest_step_tokens: tokens of the newest step, including reply priming, as it enters
            (each message at most at its entry cap, SPEC §11; tokens).
        least_newest_step_tokens: the newest step's tokens with each message cut to its least
            excerpt, reply priming included — what the budget would have to hold at the least —
            or ``None`` when not known (then ``newest_step_tokens``; tokens).
    """

    def __init__(
        self, *, budget: int, pinned_tokens: int, newest_step_tokens: int, least_newest_step_tokens: int | None = None
    ) -> None:
        self.budget = budget
        self.pinned_tokens = pinned_tokens
        self.newest_step_tokens = newest_step_tokens
        self.least_newest_step_tokens = newest_step_tokens if least_newest_step_tokens is None else least_newest_step_tokens
        need = pinned_tokens + self.least_newest_step_tokens
        from ._tokenizer import REPLY_PRIMING_TOKENS  # here: _tokenizer imports this module
        if newest_step_tokens <= 0 and pinned_tokens <= REPLY_PRIMING_TOKENS:  # no system prompt at all
            message = (
                f"context cannot fit: the reply priming every request spends takes {pinned_tokens} tokens "
                f"(there is no system prompt) but the budget is {_tokens(budget)}; raise the budget"
            )
        elif newest_step_tokens <= 0:
            message = (
                f"context cannot fit: the pinned system prompt takes {pinned_tokens} tokens (with the reply "
                f"priming) but the budget is {_tokens(budget)}; it is sent unchanged, so raise the budget or "
                "shorten the system prompt"
            )
        else:
            least = self.least_newest_step_tokens
            step = (f"{least} tokens with each of its messages cut to its least excerpt" if least < newest_step_tokens
                    else f"{newest_step_tokens} tokens, even as excerpts")
            message = (
                f"context cannot fit: the pinned system prompt ({pinned_tokens} tokens) plus the "
                f"newest step ({step}) need {need} tokens but the budget is "
                f"{_tokens(budget)}; raise the budget or shorten the newest step"
            )
        super().__init__(message)


class MissingExtraError(RelevanceMemoryError, ImportError):
    """An optional dependency is not installed; the message names the extra that installs it.

    Attributes:
        module: the missing module (``matplotlib`` …).
        extra: the ``pyproject.toml`` extra that installs it (``plot`` …).
    """

    def __init__(self, module: str, extra: str, feature: str) -> None:
        self.module = module
        self.extra = extra
        super().__init__(f"{feature} needs {module}, which is not installed: pip install 'relevance-memory[{extra}]'")


class TokenizerError(RelevanceMemoryError):
    """The offline token encoding could not be loaded or failed its checksum."""


class ScorerError(RelevanceMemoryError):
    """A relevance scorer failed. The build pipeline falls back to the offline scorer.

    Attributes:
        attempts: how many calls were made before giving up.
        last_reply: the last raw completion text, when there was one.
        status: the HTTP status that ended the request, when there was one.
    """

    def __init__(
        self, message: str, *, attempts: int = 0, last_reply: str | None = None, status: int | None = None
    ) -> None:
        self.attempts = attempts
        self.last_reply = last_reply
        self.status = status
        super().__init__(message)


class ScorerTransportError(ScorerError):
    """Timeouts, connection resets, 429 or 5xx that outlived the retry policy."""


class ScorerRequestError(ScorerError):
    """The endpoint rejected the request with a 4xx other than 429 (bad key, bad model)."""


class ScorerValidationError(ScorerError):
    """Replies never validated (ids, score range, JSON) within the retry budget."""


class BoardError(RelevanceMemoryError):
    """A memory board (SPEC §10) refused or failed an operation."""


class ScopeError(BoardError, PermissionError):
    """An agent read or wrote a scope it may not: another agent's ``private:<agent>`` scope,
    or a scope name that is not ``[A-Za-z0-9_.-]+`` optionally followed by ``:<agent>``."""


class BoardUnavailableError(BoardError):
    """The board's server could not be reached, or kept timing out, after the retry policy.

    A :class:`~relevance_memory.board.MirroredBoard` catches it and serves its local copy.

    Attributes:
        attempts: how many tries were made.
    """

    def __init__(self, message: str, *, attempts: int = 0) -> None:
        self.attempts = attempts
        super().__init__(message)

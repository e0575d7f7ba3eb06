"""The LLM relevance scorer (SPEC §4): ``openai`` SDK wrapped by ``instructor``.

Three retry layers, innermost first:

1. **transport** (this module, ``tenacity``): timeouts, connection resets, 429 (honouring
   ``Retry-After``) and 5xx are re-sent with exponential backoff and jitter, bounded by
   attempts and total time; any other 4xx fails fast with :class:`ScorerRequestError`.
2. **validation** (``instructor``'s re-ask loop): a reply that is not JSON, has a score
   outside 1..5 / not an integer, or names unknown or duplicate ids is fed back to the
   model with the error text and asked again, up to ``max_retries`` times.
3. **missing ids** (this module): ids the model left out of a valid reply are asked
   again, only those, in a fresh request, up to ``max_reasks`` rounds.

Whatever is still unscored after that gets the offline score with
``source="fallback"``, a reason starting ``fallback (…)`` and a warning in the result:
:meth:`LLMScorer.score` never raises for model or endpoint failures, and a failure can
always be told apart from a real score.

Replies are parsed tolerantly (case C06): a bare array, an array in code fences, an
object wrapping the array, or an array inside prose that itself contains braces. The
parser tries :meth:`json.JSONDecoder.raw_decode` at every ``[`` / ``{`` and takes the
first value shaped like a score list; when nothing decodes, the first decode error is
raised and re-asked (case C07).
"""

from __future__ import annotations

import asyncio
import contextvars
import email.utils
import inspect
import json
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Literal, cast

import instructor
import openai
from instructor.core.exceptions import IncompleteOutputException, InstructorRetryException
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    stop_before_delay,
    wait_exponential_jitter,
)

from ._config import MemoryConfig, encoding_for
from ._exceptions import ConfigError, ScorerError, ScorerRequestError, ScorerTransportError, ScorerValidationError
from ._models import RelevanceScore, ScoreSource, TaskGoal
from ._prompts import DEFAULT_PREVIEW_CHARS, ScoringPrompt, load_prompt
from ._scoring import OfflineScorer, ScoreItem, ScorerUsage, ScoringContext, ScoringResult
from ._tokenizer import TiktokenCounter, TokenCounter

__all__ = [
    "DEFAULT_SCORER_MODEL",
    "LLMScorer",
    "ScoreEntry",
    "ScoreReply",
    "TransportPolicy",
    "extract_json_reply",
    "llm_endpoint_configured",
    "resolve_scorer",
    "retry_after_seconds",
]

DEFAULT_SCORER_MODEL = "gpt-4o-mini"
"""Scorer model when neither the ``model`` argument nor ``RELMEM_MODEL`` is set."""
ENV_MODEL = "RELMEM_MODEL"
ENV_MODE = "RELMEM_SCORER_MODE"
ENV_API_KEY = "OPENAI_API_KEY"
ENV_BASE_URL = "OPENAI_BASE_URL"
LOCAL_API_KEY = "sk-no-key-required"
"""API key sent to a custom ``base_url`` when none is configured (local servers ignore it)."""

_MODES: dict[str, instructor.Mode] = {
    "tools": instructor.Mode.TOOLS,
    "json": instructor.Mode.JSON,
    "json_schema": instructor.Mode.JSON_SCHEMA,
    "md_json": instructor.Mode.MD_JSON,
}
_SCAN_LIMIT = 500
"""Most ``[``/``{`` positions the tolerant parser tries in one reply."""
_MESSAGE_OVERHEAD_TOKENS = 8
_RETRYABLE_STATUS = frozenset({429}) | frozenset(range(500, 600))


# --------------------------------------------------------------------------- reply model
_EXPECTED_IDS: contextvars.ContextVar[frozenset[str] | None] = contextvars.ContextVar(
    "relmem_expected_ids", default=None
)
"""Ids the current request asked for; read by :class:`ScoreReply` validation. A context
variable instead of instructor's ``context=`` because instructor renders the messages as
Jinja templates when a context is given, and message contents are untrusted data."""


class ScoreEntry(BaseModel):
    """One message's score as the model returns it; ``reason`` comes before ``score``.

    Attributes:
        id: the message id exactly as shown in brackets (surrounding brackets are tolerated).
        reason: a short justification, written before the score.
        score: integer 1..5; floats, strings, booleans and out-of-range values are
            validation errors (re-asked, never clipped).
    """

    model_config = ConfigDict(extra="ignore", json_schema_extra={"description": "the score of one message"})

    id: str = Field(description="the message id exactly as shown in square brackets, e.g. m12")
    reason: str = Field(description="at most 20 words: why this score")
    score: int = Field(ge=1, le=5, strict=True, description="relevance 1 (unrelated) to 5 (decides the task)")

    @field_validator("id", mode="before")
    @classmethod
    def _clean_id(cls, value: Any) -> Any:
        if isinstance(value, str):
            return value.strip().strip("[]").strip()
        return value


class ScoreReply(BaseModel):
    """The response model sent to instructor: ``{"scores": [ScoreEntry, ...]}``.

    Validation rejects ids that were not requested and duplicate ids (the error text
    names them and lists the valid ids, for the re-ask). Missing ids are *not* a
    validation error here: the scorer re-asks only those in a fresh request.

    ``model_validate_json`` is tolerant of the reply shapes real models produce (see
    :func:`extract_json_reply`); every instructor mode parses replies through it.
    """

    model_config = ConfigDict(json_schema_extra={"description": "relevance scores, one per listed message"})

    scores: list[ScoreEntry] = Field(description="one entry per listed message, in any order")

    @model_validator(mode="after")
    def _ids_as_requested(self) -> ScoreReply:
        expected = _EXPECTED_IDS.get()
        if expected is None:
            return self
        seen: set[str] = set()
        unknown: list[str] = []
        duplicate: list[str] = []
        for entry in self.scores:
            if entry.id not in expected:
                unknown.append(entry.id)
            elif entry.id in seen:
                duplicate.append(entry.id)
            seen.add(entry.id)
        problems = []
        if unknown:
            problems.append("unknown id(s) " + ", ".join(repr(i) for i in unknown[:10]))
        if duplicate:
            problems.append("duplicate id(s) " + ", ".join(repr(i) for i in duplicate[:10]))
        if problems:
            raise ValueError(
                "; ".join(problems) + ". Score each of these ids exactly once and no others: " + ", ".join(sorted(expected))
            )
        return self

    @classmethod
    def model_validate_json(
        cls,
        json_data: str | bytes | bytearray,
        *,
        strict: bool | None = None,
        context: Any | None = None,
        **kwargs: Any,
    ) -> ScoreReply:
        """Parse a raw reply tolerantly, then validate.

        Raises:
            json.JSONDecodeError: no JSON value could be decoded from the reply.
            pydantic.ValidationError: the JSON does not have the expected shape or values.
        """
        text = json_data.decode("utf-8", "replace") if isinstance(json_data, (bytes, bytearray)) else json_data
        return cls.model_validate(_as_reply(extract_json_reply(text)), context=context)


def _score_list(value: Any) -> list[Any] | None:
    """The list of score entries ``value`` holds, or ``None`` when it is not score-shaped."""
    if isinstance(value, list):
        return value if all(isinstance(v, dict) for v in value) else None
    if isinstance(value, dict):
        if isinstance(value.get("scores"), list):
            return _score_list(value["scores"])
        if "id" in value and "score" in value:
            return [value]
        lists = [v for v in value.values() if isinstance(v, list)]
        if len(value) == 1 and len(lists) == 1:
            return _score_list(lists[0])
    return None


def _as_reply(value: Any) -> Any:
    found = _score_list(value)
    return {"scores": found} if found is not None else value


def extract_json_reply(text: str) -> Any:
    """The JSON value in a model reply (case C06), tolerant of wrappers.

    Tries :meth:`json.JSONDecoder.raw_decode` at each ``[`` and ``{`` (at most 500
    positions) and returns the first decoded value shaped like a score list (an array
    of objects, or an object holding one); otherwise the first value that decoded at
    all. Code fences and surrounding prose — even prose with braces — are skipped;
    raw control characters (newlines) inside strings are accepted.

    Raises:
        json.JSONDecodeError: nothing decodes; the message is the first decode error
            (e.g. single quotes), or says that the reply holds no JSON at all.
    """
    decoder = json.JSONDecoder(strict=False)  # raw newlines/tabs inside strings are common and harmless
    first_value: Any = None
    decoded_any = False
    first_error: json.JSONDecodeError | None = None
    tried = 0
    for pos, char in enumerate(text):
        if char not in "[{":
            continue
        tried += 1
        if tried > _SCAN_LIMIT:
            break
        try:
            value, _end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            if first_error is None:
                first_error = exc
            continue
        if _score_list(value) is not None:
            return value
        if not decoded_any:
            first_value, decoded_any = value, True
    if decoded_any:
        return first_value
    if first_error is not None:
        raise json.JSONDecodeError(f"reply is not valid JSON: {first_error.msg}", first_error.doc, first_error.pos)
    raise json.JSONDecodeError("reply holds no JSON array or object", text, 0)


# --------------------------------------------------------------------------- transport policy
def _status(exc: BaseException) -> int | None:
    return exc.status_code if isinstance(exc, openai.APIStatusError) else None


def _transient(exc: BaseException) -> bool:
    """Timeouts, connection errors, 429 and 5xx are worth re-sending."""
    if isinstance(exc, openai.APIConnectionError):  # includes APITimeoutError
        return True
    status = _status(exc)
    return status is not None and status in _RETRYABLE_STATUS


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


# tenacity 9.1 renamed ``wait_exponential_jitter(initial=...)`` to ``multiplier`` (the old name
# warns); the range we support spans both, so pick the name the installed version takes.
_BACKOFF_FIRST_WAIT_ARG = (
    "multiplier" if "multiplier" in inspect.signature(wait_exponential_jitter.__init__).parameters else "initial"
)


@dataclass(frozen=True)
class TransportPolicy:
    """How transport faults are retried (all times in seconds).

    Attributes:
        attempts: most sends of one request, the first included.
        max_total_s: stop when the next wait would pass this much time since the first send.
        initial_wait_s: first backoff wait; doubles per attempt (``wait_exponential_jitter``).
        max_wait_s: cap of one backoff wait, and of an honoured ``Retry-After``.
        jitter_s: random extra wait, uniform in ``[0, jitter_s]``.
    """

    attempts: int = 4
    max_total_s: float = 60.0
    initial_wait_s: float = 0.5
    max_wait_s: float = 20.0
    jitter_s: float = 0.5

    def wait(self, state: RetryCallState) -> float:
        """Seconds to wait before the next send: ``Retry-After`` when given, else backoff."""
        exc = state.outcome.exception() if state.outcome is not None else None
        hinted = retry_after_seconds(exc) if exc is not None else None
        if hinted is not None:
            return min(hinted, self.max_wait_s)
        first_wait = {_BACKOFF_FIRST_WAIT_ARG: self.initial_wait_s}
        backoff = wait_exponential_jitter(max=self.max_wait_s, jitter=self.jitter_s, **first_wait)
        return float(backoff(state))

    def stop(self) -> Any:
        """The tenacity stop condition: attempts or total time, whichever comes first."""
        return stop_after_attempt(self.attempts) | stop_before_delay(self.max_total_s)


# --------------------------------------------------------------------------- accounting
@dataclass
class _Tally:
    """Usage of one ``score``/``ascore`` call (mutable, single-threaded)."""

    calls: int = 0
    retries: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    fallbacks: int = 0
    warnings: list[str] = field(default_factory=list)

    def add_response(self, response: Any) -> None:
        usage = getattr(response, "usage", None)
        if usage is not None:
            self.prompt_tokens += int(getattr(usage, "prompt_tokens", 0) or 0)
            self.completion_tokens += int(getattr(usage, "completion_tokens", 0) or 0)

    def usage(self, latency_s: float) -> ScorerUsage:
        return ScorerUsage(
            llm_calls=self.calls,
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            latency_s=latency_s,
            retries=self.retries,
            fallbacks=self.fallbacks,
        )


@dataclass
class _Batch:
    items: list[ScoreItem]
    rendered: list[str]


def _last_reply_text(completion: Any) -> str | None:
    try:
        message = completion.choices[0].message
    except (AttributeError, IndexError, TypeError):
        return None
    calls = getattr(message, "tool_calls", None) or []
    if calls:
        return str(calls[0].function.arguments)
    content = getattr(message, "content", None)
    return content if isinstance(content, str) else None


def _short(text: str, n: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _error_summary(exc: BaseException) -> str:
    """One line naming what was wrong with a reply (pydantic errors as ``loc: msg``)."""
    if isinstance(exc, ValidationError):
        parts = []
        for err in exc.errors()[:4]:
            loc = ".".join(str(p) for p in err.get("loc", ()))
            parts.append(f"{loc}: {err.get('msg', '')}" if loc else str(err.get("msg", "")))
        more = f" (+{exc.error_count() - 4} more)" if exc.error_count() > 4 else ""
        return "; ".join(parts) + more
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def llm_endpoint_configured(environ: dict[str, str] | None = None) -> bool:
    """Whether an LLM endpoint is configured in the environment: ``OPENAI_API_KEY`` or
    ``OPENAI_BASE_URL`` is set and non-empty (``environ`` defaults to ``os.environ``)."""
    env = os.environ if environ is None else environ
    return bool(env.get(ENV_API_KEY) or env.get(ENV_BASE_URL))


# --------------------------------------------------------------------------- the scorer
class LLMScorer:
    """Relevance scorer backed by any OpenAI-compatible chat endpoint (SPEC §4).

    Implements the :class:`Scorer` protocol (``score``) plus ``ascore`` for
    :meth:`RelevanceMemoryManager.abuild_context`. Items are split into batches of at
    most ``batch_max_messages`` messages and ``batch_max_tokens`` prompt tokens (counted
    with the project tokenizer); async batches run concurrently, at most
    ``max_concurrency`` at a time. Requests use temperature 0.

    Usage in :class:`ScorerUsage` (per ``score``/``ascore`` call, i.e. per build):
    ``llm_calls`` = HTTP requests sent, every attempt counted (failed ones too);
    ``retries`` = how many of those were re-sends (transport retry, validation re-ask or
    missing-id re-ask), so ``llm_calls - retries`` is the number of batches sent;
    ``prompt_tokens`` / ``completion_tokens`` as the server reported them (tokens);
    ``latency_s`` = wall time of the call (seconds); ``fallbacks`` = ids given offline scores.

    Args:
        model: model id; default ``$RELMEM_MODEL``, else ``"gpt-4o-mini"``. Part of the
            score cache key.
        base_url: endpoint, e.g. ``http://127.0.0.1:8080/v1``; default ``$OPENAI_BASE_URL``,
            else OpenAI.
        api_key: default ``$OPENAI_API_KEY``; with a custom ``base_url`` and no key, a
            placeholder is sent (local servers ignore it).
        mode: instructor mode ``"tools"`` (default; OpenAI, llama.cpp), ``"json_schema"``
            (``response_format`` JSON schema: OpenAI, vLLM, Ollama), ``"json"`` or
            ``"md_json"`` (any server); also an :class:`instructor.Mode` or
            ``$RELMEM_SCORER_MODE``.
        rubric_version: prompt template id in ``prompts/`` (``MemoryConfig.rubric_version``).
        preview_chars: characters of each message shown, head + tail (chars).
        batch_max_messages: most messages per request (``MemoryConfig`` default 20).
        batch_max_tokens: most prompt tokens per request (tokens; default 6000).
        max_concurrency: most batches in flight in :meth:`ascore`.
        max_retries: validation re-asks per request after the first reply (C07: 2).
        max_reasks: rounds re-asking only the ids a valid reply left out.
        transport: :class:`TransportPolicy` for timeouts / 429 / 5xx.
        timeout: seconds per HTTP request (connect + read).
        max_tokens: completion cap per request (tokens); ``None`` sends none.
        system_role: ``"system"`` sends the rubric as a system message; ``"user"`` puts it
            at the top of the user message, for models without a system role (Gemma).
        client / async_client: ready ``openai.OpenAI`` / ``openai.AsyncOpenAI`` clients
            (their own retries are switched off; this class retries).
        http_client / async_http_client: HTTP clients for the clients built here
            (tests inject transports this way).
        tokenizer: token counter for batching; default tiktoken for ``model``'s family.
        sleep / asleep: how to wait between transport retries (injected in tests).
        clock: monotonic seconds, for the latency in :class:`ScorerUsage`.
        on_failure: ``"fallback"`` (default, SPEC §4) gives failed ids offline scores
            with ``source="fallback"``; ``"raise"`` raises the :class:`ScorerError`.

    Raises:
        ConfigError: no endpoint (no key and no base URL), an unknown mode, or bad limits.
    """

    name = "llm"

    def __init__(
        self,
        model: str | None = None,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        mode: instructor.Mode | str | None = None,
        rubric_version: str = "score_v1",
        preview_chars: int = DEFAULT_PREVIEW_CHARS,
        batch_max_messages: int = 20,
        batch_max_tokens: int = 6000,
        max_concurrency: int = 4,
        max_retries: int = 2,
        max_reasks: int = 1,
        transport: TransportPolicy | None = None,
        timeout: float = 60.0,
        max_tokens: int | None = None,
        system_role: Literal["system", "user"] = "system",
        client: openai.OpenAI | None = None,
        async_client: openai.AsyncOpenAI | None = None,
        http_client: Any | None = None,
        async_http_client: Any | None = None,
        tokenizer: TokenCounter | None = None,
        sleep: Callable[[float], None] | None = None,
        asleep: Callable[[float], Awaitable[None]] | None = None,
        clock: Callable[[], float] = time.perf_counter,
        on_failure: Literal["fallback", "raise"] = "fallback",
    ) -> None:
        self.model = model or os.environ.get(ENV_MODEL) or DEFAULT_SCORER_MODEL
        self.base_url = base_url or os.environ.get(ENV_BASE_URL) or None
        key = api_key or os.environ.get(ENV_API_KEY)
        if not key and client is None and async_client is None:
            if not self.base_url:
                raise ConfigError(
                    "LLMScorer needs an endpoint: set OPENAI_API_KEY (OpenAI) or OPENAI_BASE_URL / base_url "
                    "(any OpenAI-compatible server), or use the offline scorer"
                )
            key = LOCAL_API_KEY
        self._api_key = key
        self.mode = _resolve_mode(mode if mode is not None else os.environ.get(ENV_MODE))
        if batch_max_messages < 1 or batch_max_tokens < 1 or max_concurrency < 1:
            raise ConfigError("batch_max_messages, batch_max_tokens and max_concurrency must be at least 1")
        if max_retries < 0 or max_reasks < 0:
            raise ConfigError("max_retries and max_reasks must not be negative")
        self.prompt: ScoringPrompt = load_prompt(rubric_version, preview_chars=preview_chars)
        self.rubric_version = self.prompt.version
        self.batch_max_messages = batch_max_messages
        self.batch_max_tokens = batch_max_tokens
        self.max_concurrency = max_concurrency
        self.max_retries = max_retries
        self.max_reasks = max_reasks
        self.transport = transport or TransportPolicy()
        self.timeout = timeout
        self.max_tokens = max_tokens
        self.system_role = system_role
        self.on_failure = on_failure
        self._client = client.with_options(max_retries=0) if client is not None else None
        self._async_client = async_client.with_options(max_retries=0) if async_client is not None else None
        self._http_client = http_client
        self._async_http_client = async_http_client
        self._tokenizer = tokenizer
        self._sleep = sleep or time.sleep
        self._asleep = asleep or asyncio.sleep
        self._clock = clock
        self._offline = OfflineScorer()
        self._base_tokens: int | None = None

    @classmethod
    def from_config(cls, config: MemoryConfig, **kwargs: Any) -> LLMScorer:
        """A scorer using ``config``'s ``batch_max_messages``, ``batch_max_tokens`` and
        ``rubric_version``; ``kwargs`` as for the constructor (they win)."""
        defaults: dict[str, Any] = {
            "batch_max_messages": config.batch_max_messages,
            "batch_max_tokens": config.batch_max_tokens,
            "rubric_version": config.rubric_version,
        }
        return cls(**{**defaults, **kwargs})

    def __repr__(self) -> str:
        return f"LLMScorer(model={self.model!r}, base_url={self.base_url!r}, mode={self.mode.value!r})"

    # ------------------------------------------------------------------ clients
    def close(self) -> None:
        """Close the HTTP connections of the sync client built here (idempotent)."""
        if self._client is not None:
            self._client.close()

    async def aclose(self) -> None:
        """Close the HTTP connections of the async client built here (idempotent)."""
        if self._async_client is not None:
            await self._async_client.close()

    def __enter__(self) -> LLMScorer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def endpoint(self) -> str:
        """The base URL requests go to (for messages)."""
        client = self._client or self._async_client
        if client is not None:
            return str(client.base_url)
        return self.base_url or "https://api.openai.com/v1"

    def _client_options(self) -> dict[str, Any]:
        # retries are ours (tenacity), never the SDK's
        return {"api_key": self._api_key, "base_url": self.base_url, "timeout": self.timeout, "max_retries": 0}

    def _sync_client(self) -> openai.OpenAI:
        if self._client is None:
            self._client = openai.OpenAI(**self._client_options(), http_client=self._http_client)
        return self._client

    def _aclient(self) -> openai.AsyncOpenAI:
        if self._async_client is None:
            self._async_client = openai.AsyncOpenAI(**self._client_options(), http_client=self._async_http_client)
        return self._async_client

    @property
    def tokenizer(self) -> TokenCounter:
        """Token counter for batching (tiktoken, the scorer model's family)."""
        if self._tokenizer is None:
            self._tokenizer = cast(TokenCounter, TiktokenCounter(encoding_for(self.model)))
        return self._tokenizer

    # ------------------------------------------------------------------ batching
    def _fixed_tokens(self, goal: TaskGoal) -> int:
        schema = json.dumps(ScoreReply.model_json_schema())
        return (
            self.tokenizer.count_text(self.prompt.system)
            + self.tokenizer.count_text(self.prompt.render_user(goal, [], []))
            + self.tokenizer.count_text(schema)
            + 2 * _MESSAGE_OVERHEAD_TOKENS
        )

    def batches(self, goal: TaskGoal, items: Sequence[ScoreItem]) -> list[list[ScoreItem]]:
        """Split ``items`` (in order) into request batches within the message and token limits.

        A batch always holds at least one item, even when that item alone exceeds
        ``batch_max_tokens`` (its preview is bounded by ``preview_chars``).
        """
        return [b.items for b in self._plan(goal, items)]

    def _plan(self, goal: TaskGoal, items: Sequence[ScoreItem]) -> list[_Batch]:
        fixed = self._fixed_tokens(goal)
        rendered = [self.prompt.render_item(item) for item in items]
        sizes = self.tokenizer.count_texts(rendered)
        out: list[_Batch] = []
        current = _Batch([], [])
        used = fixed
        for item, text, size in zip(items, rendered, sizes, strict=True):
            size += 2  # the blank line between items
            full = len(current.items) >= self.batch_max_messages or used + size > self.batch_max_tokens
            if current.items and full:
                out.append(current)
                current, used = _Batch([], []), fixed
            current.items.append(item)
            current.rendered.append(text)
            used += size
        if current.items:
            out.append(current)
        return out

    # ------------------------------------------------------------------ public API
    def score(
        self, goal: TaskGoal, items: Sequence[ScoreItem], context: ScoringContext | None = None
    ) -> ScoringResult:
        """Score ``items`` for ``goal`` with blocking requests, batch after batch.

        Returns exactly one :class:`RelevanceScore` per item, in item order: ``source=llm``
        for model scores, ``source=fallback`` (offline score, reason ``fallback (…): …``)
        for ids the model never scored validly, plus usage and warnings.

        Raises:
            ScorerError: only with ``on_failure="raise"``.
        """
        started = self._clock()
        tally = _Tally()
        got: dict[str, RelevanceScore] = {}
        failed: dict[str, str] = {}
        fatal: ScorerError | None = None
        for batch in self._plan(goal, items):
            if fatal is not None:
                failed.update({i.id: f"not sent after earlier error: {_short(str(fatal), 120)}" for i in batch.items})
                continue
            try:
                self._run_batch_sync(goal, batch, tally, got, failed)
            except ScorerRequestError as exc:
                fatal = exc
                failed.update({i.id: _short(str(exc), 200) for i in batch.items if i.id not in got})
        return self._result(goal, items, context, got, failed, tally, started, fatal)

    async def ascore(
        self, goal: TaskGoal, items: Sequence[ScoreItem], context: ScoringContext | None = None
    ) -> ScoringResult:
        """Async :meth:`score`: batches run concurrently, at most ``max_concurrency`` at once."""
        started = self._clock()
        tally = _Tally()
        got: dict[str, RelevanceScore] = {}
        failed: dict[str, str] = {}
        gate = asyncio.Semaphore(self.max_concurrency)
        fatal: list[ScorerError] = []

        async def run(batch: _Batch) -> None:
            async with gate:
                if fatal:
                    reason = f"not sent after earlier error: {_short(str(fatal[0]), 120)}"
                    failed.update({i.id: reason for i in batch.items})
                    return
                try:
                    await self._run_batch_async(goal, batch, tally, got, failed)
                except ScorerRequestError as exc:
                    fatal.append(exc)
                    failed.update({i.id: _short(str(exc), 200) for i in batch.items if i.id not in got})

        await asyncio.gather(*(run(b) for b in self._plan(goal, items)))
        return self._result(goal, items, context, got, failed, tally, started, fatal[0] if fatal else None)

    # ------------------------------------------------------------------ batches
    def _request(self, goal: TaskGoal, items: Sequence[ScoreItem], rendered: Sequence[str]) -> dict[str, Any]:
        user = self.prompt.render_user(goal, items, rendered)
        if self.system_role == "user":
            messages = [{"role": "user", "content": f"{self.prompt.system}\n\n{user}"}]
        else:
            messages = [{"role": "system", "content": self.prompt.system}, {"role": "user", "content": user}]
        kwargs: dict[str, Any] = {"model": self.model, "temperature": 0, "messages": messages}
        if self.max_tokens is not None:
            kwargs["max_tokens"] = self.max_tokens
        return kwargs

    def _run_batch_sync(
        self, goal: TaskGoal, batch: _Batch, tally: _Tally, got: dict[str, RelevanceScore], failed: dict[str, str]
    ) -> None:
        pending = list(zip(batch.items, batch.rendered, strict=True))
        for round_no in range(self.max_reasks + 1):
            if round_no:
                tally.retries += 1
            items = [i for i, _ in pending]
            try:
                reply = self._ask_sync(self._request(goal, items, [r for _, r in pending]), items, tally)
            except ScorerRequestError:
                raise
            except ScorerError as exc:
                failed.update({i.id: self._failure_text(exc) for i in items})
                return
            pending = self._take(reply, pending, got)
            if not pending:
                return
        failed.update({i.id: f"id missing from {self.max_reasks + 1} valid replies" for i, _ in pending})

    async def _run_batch_async(
        self, goal: TaskGoal, batch: _Batch, tally: _Tally, got: dict[str, RelevanceScore], failed: dict[str, str]
    ) -> None:
        pending = list(zip(batch.items, batch.rendered, strict=True))
        for round_no in range(self.max_reasks + 1):
            if round_no:
                tally.retries += 1
            items = [i for i, _ in pending]
            try:
                reply = await self._ask_async(self._request(goal, items, [r for _, r in pending]), items, tally)
            except ScorerRequestError:
                raise
            except ScorerError as exc:
                failed.update({i.id: self._failure_text(exc) for i in items})
                return
            pending = self._take(reply, pending, got)
            if not pending:
                return
        failed.update({i.id: f"id missing from {self.max_reasks + 1} valid replies" for i, _ in pending})

    @staticmethod
    def _take(
        reply: ScoreReply, pending: list[tuple[ScoreItem, str]], got: dict[str, RelevanceScore]
    ) -> list[tuple[ScoreItem, str]]:
        wanted = {i.id for i, _ in pending}
        for entry in reply.scores:
            if entry.id in wanted and entry.id not in got:
                got[entry.id] = RelevanceScore(
                    id=entry.id, score=entry.score, reason=_short(entry.reason, 300), source=ScoreSource.LLM
                )
        return [(i, r) for i, r in pending if i.id not in got]

    @staticmethod
    def _failure_text(exc: ScorerError) -> str:
        text = _short(str(exc), 200)
        if exc.last_reply:
            text += f"; last reply: {_short(exc.last_reply, 80)!r}"
        return text

    # ------------------------------------------------------------------ one request (validation loop)
    def _ask_sync(self, kwargs: dict[str, Any], items: Sequence[ScoreItem], tally: _Tally) -> ScoreReply:
        sends = 0

        def create(*args: Any, **kw: Any) -> Any:
            nonlocal sends
            sends += 1
            return self._send_sync(kw, tally)

        patched = instructor.patch(create=create, mode=self.mode)
        token = _EXPECTED_IDS.set(frozenset(i.id for i in items))
        try:
            return patched(response_model=ScoreReply, max_retries=self.max_retries, **kwargs)  # type: ignore[no-any-return]
        except (InstructorRetryException, IncompleteOutputException) as exc:
            raise self._translate(exc, sends) from exc
        finally:
            _EXPECTED_IDS.reset(token)
            tally.retries += max(0, sends - 1)

    async def _ask_async(self, kwargs: dict[str, Any], items: Sequence[ScoreItem], tally: _Tally) -> ScoreReply:
        sends = 0

        async def create(*args: Any, **kw: Any) -> Any:
            nonlocal sends
            sends += 1
            return await self._send_async(kw, tally)

        patched = instructor.patch(create=create, mode=self.mode)
        token = _EXPECTED_IDS.set(frozenset(i.id for i in items))
        try:
            return await patched(response_model=ScoreReply, max_retries=self.max_retries, **kwargs)  # type: ignore[no-any-return,misc]
        except (InstructorRetryException, IncompleteOutputException) as exc:
            raise self._translate(exc, sends) from exc
        finally:
            _EXPECTED_IDS.reset(token)
            tally.retries += max(0, sends - 1)

    def _translate(self, exc: Exception, sends: int) -> ScorerError:
        cause = exc.__cause__
        if isinstance(cause, ScorerError):
            return cause
        if isinstance(exc, IncompleteOutputException):
            return ScorerValidationError(
                f"reply cut off at max_tokens={self.max_tokens}", attempts=sends,
                last_reply=_last_reply_text(getattr(exc, "last_completion", None)),
            )
        last = _last_reply_text(getattr(exc, "last_completion", None))
        return ScorerValidationError(
            f"no valid reply after {sends} attempt(s): {_error_summary(cause or exc)}", attempts=sends, last_reply=last
        )

    # ------------------------------------------------------------------ one HTTP request (transport loop)
    def _retrying_kwargs(self, tally: _Tally) -> dict[str, Any]:
        def before_sleep(state: RetryCallState) -> None:
            tally.retries += 1

        return {
            "stop": self.transport.stop(),
            "wait": self.transport.wait,
            "retry": retry_if_exception(_transient),
            "before_sleep": before_sleep,
            "reraise": True,
        }

    def _send_sync(self, kwargs: dict[str, Any], tally: _Tally) -> Any:
        client = self._sync_client()
        attempts = 0
        try:
            for attempt in Retrying(sleep=self._sleep, **self._retrying_kwargs(tally)):
                with attempt:
                    attempts += 1
                    tally.calls += 1
                    response = client.chat.completions.create(**kwargs)
        except (openai.APIConnectionError, openai.APIStatusError) as exc:
            raise self._transport_error(exc, attempts) from exc
        tally.add_response(response)
        return response

    async def _send_async(self, kwargs: dict[str, Any], tally: _Tally) -> Any:
        client = self._aclient()
        attempts = 0
        try:
            async for attempt in AsyncRetrying(sleep=self._asleep, **self._retrying_kwargs(tally)):
                with attempt:
                    attempts += 1
                    tally.calls += 1
                    response = await client.chat.completions.create(**kwargs)
        except (openai.APIConnectionError, openai.APIStatusError) as exc:
            raise self._transport_error(exc, attempts) from exc
        tally.add_response(response)
        return response

    def _transport_error(self, exc: Exception, attempts: int) -> ScorerError:
        status = _status(exc)
        if status is not None and not _transient(exc):
            detail = ""
            if isinstance(exc, openai.APIStatusError):
                detail = _short(str(getattr(exc, "message", "") or exc), 200)
            hint = {
                401: "check the API key",
                403: "check the key's permissions",
                404: "check the model name and base URL",
            }.get(status, "check the request settings (model, mode, base URL)")
            return ScorerRequestError(
                f"{self.endpoint} rejected the scoring request with HTTP {status}: {detail} ({hint})",
                attempts=attempts,
            )
        kind = f"HTTP {status}" if status is not None else type(exc).__name__
        return ScorerTransportError(
            f"{self.endpoint} failed with {kind} after {attempts} attempt(s): {_short(str(exc), 160)}",
            attempts=attempts,
        )

    # ------------------------------------------------------------------ result
    def _result(
        self,
        goal: TaskGoal,
        items: Sequence[ScoreItem],
        context: ScoringContext | None,
        got: dict[str, RelevanceScore],
        failed: dict[str, str],
        tally: _Tally,
        started: float,
        fatal: ScorerError | None,
    ) -> ScoringResult:
        missing = [i for i in items if i.id not in got]
        warnings: list[str] = []
        if missing:
            if self.on_failure == "raise":
                if fatal is not None:
                    raise fatal
                first = failed.get(missing[0].id, "no score")
                raise ScorerValidationError(f"{len(missing)} message(s) not scored by the LLM: {first}")
            offline = {s.id: s for s in self._offline.score(goal, missing, context).scores}
            by_reason: dict[str, list[str]] = {}
            for item in missing:
                why = failed.get(item.id, "no score")
                by_reason.setdefault(why, []).append(item.id)
                base = offline[item.id]
                got[item.id] = base.model_copy(
                    update={"source": ScoreSource.FALLBACK, "reason": f"fallback ({_short(why, 100)}): {base.reason}"}
                )
            tally.fallbacks += len(missing)
            for why, ids in by_reason.items():
                shown = ", ".join(ids[:8]) + (f" … (+{len(ids) - 8})" if len(ids) > 8 else "")
                warnings.append(f"LLM scorer: {len(ids)} message(s) got offline fallback scores [{shown}]: {why}")
        latency = max(0.0, self._clock() - started)
        return ScoringResult(
            scores=[got[i.id] for i in items], usage=tally.usage(latency), warnings=warnings
        )


def _resolve_mode(mode: instructor.Mode | str | None) -> instructor.Mode:
    if mode is None or mode == "":
        return instructor.Mode.TOOLS
    if isinstance(mode, instructor.Mode):
        if mode not in _MODES.values():
            raise ConfigError(f"unsupported instructor mode {mode}; use one of {', '.join(_MODES)}")
        return mode
    key = str(mode).strip().lower().replace("-", "_")
    if key not in _MODES:
        raise ConfigError(f"unknown scorer mode {mode!r}; use one of {', '.join(_MODES)}")
    return _MODES[key]


def resolve_scorer(
    kind: Literal["auto", "llm", "offline"],
    *,
    model: str | None = None,
    base_url: str | None = None,
    config: MemoryConfig | None = None,
) -> tuple[LLMScorer | OfflineScorer, str]:
    """The scorer for a ``--scorer`` choice and a sentence saying which one runs and why.

    ``auto`` picks :class:`LLMScorer` when ``base_url`` is given or
    :func:`llm_endpoint_configured`, else :class:`OfflineScorer`.

    Raises:
        ConfigError: ``llm`` was asked for but no endpoint is configured.
    """
    if kind == "offline":
        return OfflineScorer(), "offline (deterministic, no network; --scorer offline)"
    if kind == "auto" and not (base_url or llm_endpoint_configured()):
        return OfflineScorer(), "offline (no LLM endpoint: set OPENAI_API_KEY or --base-url to score with an LLM)"
    kwargs: dict[str, Any] = {"model": model, "base_url": base_url}
    scorer = LLMScorer.from_config(config, **kwargs) if config is not None else LLMScorer(**kwargs)
    why = "--scorer llm" if kind == "llm" else "auto: endpoint configured"
    return scorer, f"llm ({scorer.model} at {scorer.endpoint}, {scorer.mode.value} mode; {why})"


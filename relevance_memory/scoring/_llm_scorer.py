"""The LLM relevance scorer (SPEC §4): ``openai`` SDK wrapped by ``instructor``.

This module holds the I/O: the clients, the sync and async send loops, and the wiring.
Every step that does no I/O is shared by both paths and lives elsewhere:

- :mod:`._llm_reply` — the grammar-enforceable reply schema and the tolerant, strict parser;
- :mod:`._llm_steps` — batching, the request, what a reply means (take / re-ask / split /
  fall back), the ``response_format`` ladder, usage and the result;
- :mod:`._llm_transport` — which transport faults are retried and how long to wait.

Retry layers, innermost first:

1. **transport** (``tenacity``): timeouts, connection resets, 429 (honouring
   ``Retry-After``) and 5xx are re-sent with exponential backoff and jitter, bounded by
   attempts and a total budget sized from the timeout; any other 4xx fails fast with
   :class:`ScorerRequestError` (an error rejecting the ``response_format`` — 400/422, or
   the 500 llama-cpp-python's server sends — first steps down to a simpler format).
2. **reply** (:class:`._llm_steps.BatchRun`): instructor builds the mode's request and
   parses the reply in one attempt; ids not validly scored are re-asked alone with a
   fixed correction; a reply cut at the token cap is split in halves.

Whatever is still unscored gets the offline score with ``source="fallback"``, a reason
starting ``fallback (…)`` and a warning: :meth:`LLMScorer.score` never raises for model
or endpoint failures, and a failure can always be told apart from a real score.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal, cast

import instructor
import openai
from tenacity import AsyncRetrying, RetryCallState, Retrying, retry_if_exception

from .._config import _CL100K_PREFIXES, _O200K_PREFIXES, MemoryConfig, context_window_for, encoding_for
from .._exceptions import ConfigError, ScorerError, ScorerRequestError
from .._models import TaskGoal
from .._tokenizer import TiktokenCounter, TokenCounter
from ._llm_env import (
    DEFAULT_SCORER_MODEL,
    ENV_API_KEY,
    ENV_BASE_URL,
    ENV_MODE,
    ENV_MODEL,
)
from ._llm_reply import ScoreEntry, ScoreReply, extract_json_reply
from ._llm_steps import RESPONSE_FORMATS, FormatLadder, Outcome, Request, ScorerPlan, Tally, assemble_result, short
from ._llm_transport import (
    TransportPolicy,
    rejects_format,
    retry_after_seconds,
    status_of,
    transient,
    transport_error,
)
from ._prompts import DEFAULT_PREVIEW_CHARS, ScoringPrompt, load_prompt
from ._scorer import OfflineScorer, ScoreItem, ScoringContext, ScoringResult

__all__ = [
    "LLMScorer",
    "ScoreEntry",
    "ScoreReply",
    "TransportPolicy",
    "extract_json_reply",
    "retry_after_seconds",
]

LOCAL_API_KEY = "sk-no-key-required"
"""API key sent to a custom ``base_url`` when none is configured (local servers ignore it)."""
FOREIGN_TOKENIZER_MARGIN = 1.25
"""Default ``token_margin`` for models tiktoken does not know: local models' tokenizers
counted 1.17–1.22× more than tiktoken on our fixtures (issue 14, defect 4)."""

_MODES: dict[str, instructor.Mode] = {
    "tools": instructor.Mode.TOOLS,
    "json": instructor.Mode.JSON,
    "json_schema": instructor.Mode.JSON_SCHEMA,
    "md_json": instructor.Mode.MD_JSON,
}
_INSTRUCTOR_FAILURES: tuple[type[BaseException], ...] = (Exception,)
"""instructor raises its own retry/incomplete-output exceptions (module paths moved
between releases), pydantic and JSON errors: every non-scorer exception from the parse
is a reply that did not parse."""


def _openai_family(model: str) -> bool:
    name = model.lower().split("/")[-1]
    return name.startswith(_O200K_PREFIXES) or name.startswith(_CL100K_PREFIXES)


class LLMScorer:
    """Relevance scorer backed by any OpenAI-compatible chat endpoint (SPEC §4).

    Implements the :class:`Scorer` protocol (``score``) plus ``ascore`` for
    :meth:`RelevanceMemoryManager.abuild_context`. Items are split into batches (see
    :mod:`._llm_steps`); async batches run concurrently, at most ``max_concurrency`` at a
    time. Requests use temperature 0 and a reply cap sized by the batch.

    Usage in :class:`ScorerUsage` (per ``score``/``ascore`` call, i.e. per build):
    ``llm_calls`` = HTTP requests sent, every attempt counted (failed ones too);
    ``retries`` = how many of those were re-sends (transport retry, re-ask, split, format
    step-down), so ``llm_calls - retries`` is the number of batches sent;
    ``prompt_tokens`` / ``completion_tokens`` as the server reported them, plus the
    scorer's own count of the prompt of requests that got no reply (timeouts);
    ``latency_s`` = wall time of the call (seconds); ``fallbacks`` = ids given offline
    scores. :attr:`ScoringResult.calls` lists every request (:class:`LLMCall`).

    Args:
        model: model id; default ``$RELMEM_MODEL``, else ``"gpt-4o-mini"``. Part of the
            score cache key.
        base_url: endpoint, e.g. ``http://127.0.0.1:8080/v1``; default ``$OPENAI_BASE_URL``,
            else OpenAI.
        api_key: default ``$OPENAI_API_KEY``; with a custom ``base_url`` and no key, a
            placeholder is sent (local servers ignore it).
        mode: instructor mode ``"tools"`` (default; OpenAI, vLLM, llama.cpp: the tool's
            schema becomes a grammar), ``"json_schema"`` / ``"json"`` (the schema goes in
            ``response_format``, see ``response_format``), ``"md_json"`` (no constraint);
            also an :class:`instructor.Mode` or ``$RELMEM_SCORER_MODE``.
        response_format: in the JSON modes, how the schema is sent: ``"auto"`` (default:
            ``json_schema``, stepping down to ``json_object_schema`` then ``json_object``
            when the endpoint answers 400/422), or one of ``json_schema``,
            ``json_object_schema``, ``json_object``, ``none`` to pin it.
        rubric_version: prompt template id in ``prompts/`` (``MemoryConfig.rubric_version``).
        preview_chars: characters of each message shown, head + tail (chars).
        batch_max_messages: most messages per request (``MemoryConfig`` default 20).
        batch_max_tokens: most prompt tokens per request, tiktoken count (tokens; 6000).
        context_length: the scorer model's window (tokens): prompt × ``token_margin`` plus
            the reply cap must fit. Default: the known window of ``model``'s family, else
            128,000 — set it for local models (e.g. 8192 for a llama.cpp ``--n_ctx 8192``).
        token_margin: factor on tiktoken counts for the model's own tokenizer; default
            1.0 for OpenAI model names, else 1.25.
        max_tokens: upper cap of the reply (tokens); ``None``: only the per-batch cap.
        max_tokens_per_message: reply tokens allowed per message in a request; the cap
            sent is ``24 + max_tokens_per_message × n`` (tokens; raise it for models that
            think before answering).
        max_concurrency: most batches in flight in :meth:`ascore`.
        max_retries: re-asks after a reply that did not parse at all (C07: 2).
        max_reasks: rounds re-asking only the ids a parsed reply left out or scored
            invalidly.
        transport: :class:`TransportPolicy` for timeouts / 429 / 5xx.
        timeout: seconds per HTTP request (connect + read); a timed-out request is
            re-sent within the policy's budget.
        system_role: ``"system"`` sends the rubric as a system message; ``"user"`` puts it
            at the top of the user message, for models without a system role (Gemma).
        client / async_client: ready ``openai.OpenAI`` / ``openai.AsyncOpenAI`` clients
            (their own retries are switched off; this class retries).
        http_client / async_http_client: HTTP clients for the clients built here
            (tests inject transports this way).
        tokenizer: token counter for batching; default tiktoken for ``model``'s family.
        sleep / asleep: how to wait between transport retries (injected in tests).
        clock: monotonic seconds, for latencies.
        on_failure: ``"fallback"`` (default, SPEC §4) gives failed ids offline scores
            with ``source="fallback"``; ``"raise"`` raises the :class:`ScorerError`.

    Raises:
        ConfigError: no endpoint (no key and no base URL), an unknown mode or response
            format, bad limits, or a transport budget that could never retry a timeout.
    """

    name = "llm"

    def __init__(
        self,
        model: str | None = None,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        mode: instructor.Mode | str | None = None,
        response_format: str = "auto",
        rubric_version: str = "score_v1",
        preview_chars: int = DEFAULT_PREVIEW_CHARS,
        batch_max_messages: int = 20,
        batch_max_tokens: int = 6000,
        context_length: int | None = None,
        token_margin: float | None = None,
        max_tokens: int | None = None,
        max_tokens_per_message: int = 64,
        max_concurrency: int = 4,
        max_retries: int = 2,
        max_reasks: int = 1,
        transport: TransportPolicy | None = None,
        timeout: float = 60.0,
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
        if response_format != "auto" and response_format not in RESPONSE_FORMATS:
            raise ConfigError(f"unknown response_format {response_format!r}; use auto or {', '.join(RESPONSE_FORMATS)}")
        limits = {"batch_max_messages": batch_max_messages, "batch_max_tokens": batch_max_tokens,
                  "max_concurrency": max_concurrency, "max_tokens_per_message": max_tokens_per_message}
        bad = [f"{k}={v}" for k, v in limits.items() if v < 1]
        bad += [f"{k}={v}" for k, v in {"max_retries": max_retries, "max_reasks": max_reasks}.items() if v < 0]
        if max_tokens is not None and max_tokens < 1:
            bad.append(f"max_tokens={max_tokens}")
        if timeout <= 0:
            bad.append(f"timeout={timeout}")
        if context_length is not None and context_length < 256:
            bad.append(f"context_length={context_length} (at least 256)")
        if token_margin is not None and not 1.0 <= token_margin <= 4.0:
            bad.append(f"token_margin={token_margin} (1.0 to 4.0)")
        if bad:
            raise ConfigError("invalid LLM scorer setting(s): " + ", ".join(bad))
        self.prompt: ScoringPrompt = load_prompt(rubric_version, preview_chars=preview_chars)
        self.rubric_version = self.prompt.version
        self.transport = transport or TransportPolicy()
        self.transport.check(timeout)
        self.timeout = timeout
        self.max_concurrency = max_concurrency
        self.on_failure = on_failure
        self.formats = FormatLadder(self.mode_name, response_format)
        self._tokenizer = tokenizer
        self.plan = ScorerPlan(
            model=self.model, prompt=self.prompt, tokenizer=self.tokenizer, system_role=system_role,
            batch_max_messages=batch_max_messages, batch_max_tokens=batch_max_tokens,
            context_length=context_length or context_window_for(self.model),
            token_margin=token_margin if token_margin is not None else
            (1.0 if _openai_family(self.model) else FOREIGN_TOKENIZER_MARGIN),
            max_tokens=max_tokens, max_tokens_per_message=max_tokens_per_message,
            max_retries=max_retries, max_reasks=max_reasks,
        )
        self._client = client.with_options(max_retries=0) if client is not None else None
        self._async_client = async_client.with_options(max_retries=0) if async_client is not None else None
        self._http_client = http_client
        self._async_http_client = async_http_client
        self._sleep = sleep or time.sleep
        self._asleep = asleep or asyncio.sleep
        self._clock = clock
        self._offline = OfflineScorer()

    @classmethod
    def from_config(cls, config: MemoryConfig, **kwargs: Any) -> LLMScorer:
        """A scorer using ``config``'s ``batch_max_messages``, ``batch_max_tokens`` and
        ``rubric_version``; ``kwargs`` as for the constructor (they win; ``None`` values
        are dropped)."""
        defaults: dict[str, Any] = {
            "batch_max_messages": config.batch_max_messages,
            "batch_max_tokens": config.batch_max_tokens,
            "rubric_version": config.rubric_version,
        }
        return cls(**{**defaults, **{k: v for k, v in kwargs.items() if v is not None}})

    def __repr__(self) -> str:
        return f"LLMScorer(model={self.model!r}, base_url={self.base_url!r}, mode={self.mode_name!r})"

    def describe(self) -> str:
        """One line: model, endpoint, mode, response format, rubric, limits (for the CLI)."""
        fmt = f", response_format {self.formats.current}" if self.formats.current != "none" else ""
        return (
            f"{self.model} at {self.endpoint}, {self.mode_name} mode{fmt}, rubric {self.rubric_version}, "
            f"timeout {self.timeout:g} s, ≤{self.plan.batch_max_messages} messages per call"
        )

    @property
    def mode_name(self) -> str:
        """The mode as this scorer names it: ``tools``, ``json``, ``json_schema`` or ``md_json``."""
        return next(k for k, v in _MODES.items() if v == self.mode)

    # ------------------------------------------------------------------ settings read by tests and tools
    @property
    def batch_max_messages(self) -> int:
        return self.plan.batch_max_messages

    @property
    def batch_max_tokens(self) -> int:
        return self.plan.batch_max_tokens

    @property
    def max_tokens(self) -> int | None:
        return self.plan.max_tokens

    @property
    def system_role(self) -> str:
        return self.plan.system_role

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
        return self.plan.fixed_tokens(goal)

    def batches(self, goal: TaskGoal, items: Sequence[ScoreItem]) -> list[list[ScoreItem]]:
        """Split ``items`` (in order) into request batches within the message, token and
        window limits (see :mod:`._llm_steps`). A batch always holds at least one item."""
        return [b for b, _, _ in self.plan.batches(goal, items)]

    # ------------------------------------------------------------------ public API
    def score(
        self, goal: TaskGoal, items: Sequence[ScoreItem], context: ScoringContext | None = None
    ) -> ScoringResult:
        """Score ``items`` for ``goal`` with blocking requests, batch after batch.

        Returns exactly one :class:`RelevanceScore` per item, in item order: ``source=llm``
        for model scores, ``source=fallback`` (offline score, reason ``fallback (…): …``)
        for ids the model never scored validly, plus usage, warnings and calls.

        Raises:
            ScorerError: only with ``on_failure="raise"``.
        """
        started = self._clock()
        tally = Tally()
        got: dict[str, Any] = {}
        failed: dict[str, str] = {}
        fatal: ScorerError | None = None
        for n, (batch, rendered, _) in enumerate(self.plan.batches(goal, items)):
            run = self.plan.start(goal, n, batch, rendered)
            if fatal is not None:
                run.abandon(f"not sent after earlier error: {short(str(fatal), 120)}")
            while (request := run.next_request()) is not None:
                try:
                    outcome, call = self._ask_sync(request, tally)
                except ScorerRequestError as exc:
                    fatal = exc
                    run.abandon(short(str(exc), 200))
                    break
                run.feed(outcome, call)
                tally.retries += 1 if run.queue else 0
            got.update(run.got)
            failed.update(run.failed)
        return assemble_result(goal, items, context, got, failed, tally, max(0.0, self._clock() - started),
                               offline=self._offline, on_failure=self.on_failure, fatal=fatal)

    async def ascore(
        self, goal: TaskGoal, items: Sequence[ScoreItem], context: ScoringContext | None = None
    ) -> ScoringResult:
        """Async :meth:`score`: batches run concurrently, at most ``max_concurrency`` at once."""
        started = self._clock()
        tally = Tally()
        got: dict[str, Any] = {}
        failed: dict[str, str] = {}
        gate = asyncio.Semaphore(self.max_concurrency)
        fatal: list[ScorerError] = []

        async def run_batch(n: int, batch: list[ScoreItem], rendered: list[str]) -> None:
            run = self.plan.start(goal, n, batch, rendered)
            async with gate:
                while (request := run.next_request()) is not None:
                    if fatal:
                        run.abandon(f"not sent after earlier error: {short(str(fatal[0]), 120)}")
                        break
                    try:
                        outcome, call = await self._ask_async(request, tally)
                    except ScorerRequestError as exc:
                        fatal.append(exc)
                        run.abandon(short(str(exc), 200))
                        break
                    run.feed(outcome, call)
                    tally.retries += 1 if run.queue else 0
            got.update(run.got)
            failed.update(run.failed)

        await asyncio.gather(*(run_batch(n, b, r) for n, (b, r, _) in enumerate(self.plan.batches(goal, items))))
        return assemble_result(goal, items, context, got, failed, tally, max(0.0, self._clock() - started),
                               offline=self._offline, on_failure=self.on_failure, fatal=fatal[0] if fatal else None)

    # ------------------------------------------------------------------ one request: instructor builds and parses
    def _ask_sync(self, request: Request, tally: Tally) -> tuple[Outcome, Any]:
        holder: dict[str, Any] = {}

        def create(*args: Any, **kw: Any) -> Any:
            return self._send_sync(kw, request, tally, holder)

        patched = instructor.patch(create=create, mode=self.mode)
        try:
            reply = patched(response_model=request.response_model, max_retries=0, **request.kwargs)
        except _INSTRUCTOR_FAILURES as exc:
            return self._failed_parse(exc, holder), holder.get("call")
        return Outcome(reply=reply, completion=holder.get("completion")), holder.get("call")

    async def _ask_async(self, request: Request, tally: Tally) -> tuple[Outcome, Any]:
        holder: dict[str, Any] = {}

        async def create(*args: Any, **kw: Any) -> Any:
            return await self._send_async(kw, request, tally, holder)

        patched = instructor.patch(create=create, mode=self.mode)
        try:
            reply = await patched(response_model=request.response_model, max_retries=0, **request.kwargs)  # type: ignore[misc]
        except _INSTRUCTOR_FAILURES as exc:
            return self._failed_parse(exc, holder), holder.get("call")
        return Outcome(reply=cast(ScoreReply, reply), completion=holder.get("completion")), holder.get("call")

    @staticmethod
    def _failed_parse(exc: BaseException, holder: dict[str, Any]) -> Outcome:
        """The outcome of a request instructor did not return a reply for.

        Raises:
            ScorerRequestError: the endpoint rejected the request (fatal for the call).
        """
        cause = exc.__cause__ if exc.__cause__ is not None and not isinstance(exc, ScorerError) else exc
        transport = holder.get("transport") or (cause if isinstance(cause, ScorerError) else None)
        if isinstance(transport, ScorerRequestError):
            raise transport
        if transport is not None:
            return Outcome(transport=transport)
        return Outcome(error=cause, completion=holder.get("completion"))

    # ------------------------------------------------------------------ one HTTP request (transport loop)
    def _retrying(self, tally: Tally) -> dict[str, Any]:
        def before_sleep(state: RetryCallState) -> None:
            tally.retries += 1

        return {"stop": self.transport.stop(self.timeout), "wait": self.transport.wait,
                "retry": retry_if_exception(transient), "before_sleep": before_sleep, "reraise": True}

    def _log_failure(self, request: Request, tally: Tally, kind: str, exc: BaseException, started: float) -> None:
        tally.record(request, kind, error=exc, status=status_of(exc), latency_s=self._clock() - started,
                     timed_out=isinstance(exc, openai.APITimeoutError))

    def _after_transport_failure(
        self, exc: BaseException, sent: str, attempts: int, tally: Tally, holder: dict[str, Any]
    ) -> None:
        """Returns when the request is to be re-sent with a simpler ``response_format``
        (the endpoint rejected ``sent`` with 400/422); raises the scorer error otherwise."""
        if self.formats.step_down(rejects_format(exc), sent):
            tally.retries += 1
            return
        error = transport_error(exc, attempts, self.endpoint)
        holder["transport"] = error
        raise error from exc

    def _send_sync(self, kwargs: dict[str, Any], request: Request, tally: Tally, holder: dict[str, Any]) -> Any:
        client = self._sync_client()
        kind: str = request.kind
        while True:
            sent = self.formats.current
            body = self.formats.apply(kwargs, request.schema, sent)
            attempts = 0
            try:
                for attempt in Retrying(sleep=self._sleep, **self._retrying(tally)):
                    with attempt:
                        attempts += 1
                        started = self._clock()
                        try:
                            response = client.chat.completions.create(**body)
                        except (openai.APIConnectionError, openai.APIStatusError) as exc:
                            self._log_failure(request, tally, kind, exc, started)
                            kind = "retry"
                            raise
            except (openai.APIConnectionError, openai.APIStatusError) as exc:
                self._after_transport_failure(exc, sent, attempts, tally, holder)
                kind = "format"
                continue
            holder["completion"] = response
            holder["call"] = tally.record(request, kind, completion=response, latency_s=self._clock() - started)
            return response

    async def _send_async(self, kwargs: dict[str, Any], request: Request, tally: Tally, holder: dict[str, Any]) -> Any:
        client = self._aclient()
        kind: str = request.kind
        while True:
            sent = self.formats.current
            body = self.formats.apply(kwargs, request.schema, sent)
            attempts = 0
            try:
                async for attempt in AsyncRetrying(sleep=self._asleep, **self._retrying(tally)):
                    with attempt:
                        attempts += 1
                        started = self._clock()
                        try:
                            response = await client.chat.completions.create(**body)
                        except (openai.APIConnectionError, openai.APIStatusError) as exc:
                            self._log_failure(request, tally, kind, exc, started)
                            kind = "retry"
                            raise
            except (openai.APIConnectionError, openai.APIStatusError) as exc:
                self._after_transport_failure(exc, sent, attempts, tally, holder)
                kind = "format"
                continue
            holder["completion"] = response
            holder["call"] = tally.record(request, kind, completion=response, latency_s=self._clock() - started)
            return response


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

"""Every step of LLM scoring that does no I/O, shared by the sync and async paths.

:class:`ScorerPlan` holds the settings; it splits items into batches (:meth:`batches`),
builds each request (:meth:`request`), and starts a :class:`BatchRun` per batch — a
small state machine that says which request to send next (:meth:`BatchRun.next_request`)
and what a reply means (:meth:`BatchRun.feed`). The scorer's sync and async loops only
send what it asks for. :func:`assemble_result` turns what was taken and what failed into
a :class:`ScoringResult`, with offline fallbacks for the rest.

What a batch does (issue 14, defects 2, 4, 5, 6):

- **batch size** — at most ``batch_max_messages`` messages and ``batch_max_tokens``
  prompt tokens (counted with tiktoken), and the prompt × ``token_margin`` (other
  tokenizers count up to ~1.22× more than tiktoken) plus the reply cap must fit
  ``context_length``.
- **reply cap** — ``max_tokens = reply_base_tokens + max_tokens_per_message × n`` for a
  request of n ids (never above the configured ``max_tokens``).
- **a reply cut at the cap** (the server says ``length``, or the reply's JSON is
  unterminated and it used the whole cap) → the request is split in halves; a single id
  cut off falls back.
- **re-asks** — ids a parsed reply left out or scored invalidly are asked again alone,
  in a fresh request with one short fixed correction line (never the validation error
  text, which small models copy; the prompt never grows), up to ``max_reasks`` rounds; a
  reply that does not parse at all (or is ambiguous) is re-asked up to ``max_retries``
  times the same way.
"""

from __future__ import annotations

import json
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from .._exceptions import ScorerError, ScorerValidationError
from .._models import RelevanceScore, ScoreSource, TaskGoal
from .._tokenizer import TokenCounter
from ._llm_reply import ScoreReply, is_cut_off, reply_model, reply_schema
from ._prompts import ScoringPrompt
from ._scorer import LLMCall, OfflineScorer, ScoreItem, ScorerUsage, ScoringContext, ScoringResult

__all__ = [
    "CORRECTION",
    "RESPONSE_FORMATS",
    "BatchRun",
    "FormatLadder",
    "Outcome",
    "Request",
    "ScorerPlan",
    "Tally",
    "assemble_result",
    "last_reply_text",
]

CORRECTION = (
    "Your previous reply did not give a valid score for the messages below. "
    "Reply again with JSON only, one entry per listed id."
)
"""The fixed correction line that opens every re-ask (issue 14, defect 6)."""
_MESSAGE_OVERHEAD_TOKENS = 8
_ID_SCHEMA_TOKENS = 4
"""Extra schema tokens per requested id (its entry in the ``enum``)."""

RESPONSE_FORMATS = ("json_schema", "json_object_schema", "json_object", "none")
"""``response_format`` variants, most constraining first:
``json_schema`` — ``{"type": "json_schema", "json_schema": {"name", "schema"}}`` (OpenAI,
vLLM, Ollama, llama.cpp's llama-server); ``json_object_schema`` —
``{"type": "json_object", "schema": …}`` (llama-cpp-python's server); ``json_object`` — any
JSON, the schema only in the prompt; ``none`` — no ``response_format``."""


def short(text: str, n: int = 160) -> str:
    """``text`` on one line, at most ``n`` chars (``…`` marks a cut)."""
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def last_reply_text(completion: Any) -> str | None:
    """The reply text of a chat completion: the first tool call's arguments, else the content."""
    try:
        message = completion.choices[0].message
    except (AttributeError, IndexError, TypeError):
        return None
    calls = getattr(message, "tool_calls", None) or []
    if calls:
        return str(calls[0].function.arguments)
    content = getattr(message, "content", None)
    return content if isinstance(content, str) else None


def _usage_of(completion: Any) -> tuple[int, int]:
    usage = getattr(completion, "usage", None)
    if usage is None:
        return 0, 0
    return int(getattr(usage, "prompt_tokens", 0) or 0), int(getattr(usage, "completion_tokens", 0) or 0)


def _finish_reason(completion: Any) -> str | None:
    try:
        reason = completion.choices[0].finish_reason
    except (AttributeError, IndexError, TypeError):
        return None
    return str(reason) if reason is not None else None


def error_summary(exc: BaseException) -> str:
    """One line naming what was wrong with a reply (pydantic errors as ``loc: msg``)."""
    errors = getattr(exc, "errors", None)
    if callable(errors) and hasattr(exc, "error_count"):
        parts = []
        for err in errors()[:4]:
            loc = ".".join(str(p) for p in err.get("loc", ()))
            parts.append(f"{loc}: {err.get('msg', '')}" if loc else str(err.get("msg", "")))
        return "; ".join(parts)
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# --------------------------------------------------------------------------- response formats
class FormatLadder:
    """Which ``response_format`` variant to send, stepping down when the endpoint rejects one.

    ``auto`` starts at ``json_schema`` (mode ``json_schema``) or ``json_object_schema``
    (mode ``json``) and steps down when the endpoint rejects the format; a pinned variant never changes. TOOLS
    and MD_JSON modes send none (the tool's schema is the constraint in TOOLS mode).
    """

    def __init__(self, mode: str, setting: str) -> None:
        if mode not in ("json", "json_schema"):
            self.variants: tuple[str, ...] = ("none",)
        elif setting != "auto":
            self.variants = (setting,)
        else:
            start = 0 if mode == "json_schema" else 1
            self.variants = RESPONSE_FORMATS[start:3]
        self.index = 0

    @property
    def current(self) -> str:
        """The variant sent now."""
        return self.variants[self.index]

    def step_down(self, rejected: bool, sent: str) -> bool:
        """After an error to a request sent with ``sent`` (``rejected``: the error answers
        the ``response_format``, see :func:`._llm_transport.rejects_format`): whether to
        re-send with the next variant. Idempotent under concurrency."""
        if not rejected or self.variants == ("none",):
            return False
        if sent != self.current:
            return True  # another request already stepped down
        if self.index + 1 >= len(self.variants):
            return False
        self.index += 1
        return True

    def apply(self, kwargs: dict[str, Any], schema: dict[str, Any], variant: str | None = None) -> dict[str, Any]:
        """``kwargs`` (as instructor built them) with ``response_format`` set to ``variant``."""
        chosen = variant or self.current
        if self.variants == ("none",):
            return kwargs
        out = dict(kwargs)
        if chosen == "json_schema":
            out["response_format"] = {"type": "json_schema", "json_schema": {"name": "ScoreReply", "schema": schema}}
        elif chosen == "json_object_schema":
            out["response_format"] = {"type": "json_object", "schema": schema}
        elif chosen == "json_object":
            out["response_format"] = {"type": "json_object"}
        else:
            out.pop("response_format", None)
        return out


# --------------------------------------------------------------------------- requests and outcomes
@dataclass
class Request:
    """One request to send: the batch's items (or the part still unscored) and the
    chat-completion arguments before instructor adds the mode's schema."""

    batch: int
    kind: Literal["ask", "reask", "split"]
    items: list[ScoreItem]
    rendered: list[str]
    kwargs: dict[str, Any]
    response_model: type[ScoreReply]
    prompt_tokens: int
    """The scorer's own count of the prompt (tokens, margin applied): the usage of a
    request that never got a reply."""

    @property
    def max_tokens(self) -> int | None:
        value = self.kwargs.get("max_tokens")
        return int(value) if value is not None else None

    @property
    def schema(self) -> dict[str, Any]:
        return reply_schema(self.response_model.expected_ids)


@dataclass
class Outcome:
    """What came back for a :class:`Request`: a parsed reply, or the parse error, with
    the last raw completion; or a transport failure (retries exhausted)."""

    reply: ScoreReply | None = None
    error: BaseException | None = None
    completion: Any = None
    transport: ScorerError | None = None


@dataclass
class _Group:
    items: list[ScoreItem]
    rendered: list[str]
    kind: Literal["ask", "reask", "split"] = "ask"
    reasks: int = 0
    parse_fails: int = 0


@dataclass
class Tally:
    """Usage and calls of one ``score``/``ascore`` call (single event loop or thread)."""

    calls: list[LLMCall] = field(default_factory=list)
    retries: int = 0
    fallbacks: int = 0

    def record(
        self, request: Request, kind: str, *, completion: Any = None, error: BaseException | None = None,
        status: int | None = None, latency_s: float = 0.0, timed_out: bool = False,
    ) -> LLMCall:
        """Log one HTTP send; returns its :class:`LLMCall` (``outcome`` filled in later)."""
        prompt, completion_tokens = _usage_of(completion)
        estimated = completion is None and (timed_out or status is None) and error is not None
        if estimated:
            prompt = request.prompt_tokens
        call = LLMCall(
            batch=request.batch, kind=kind, ids=len(request.items),
            outcome="timeout" if timed_out else ("error" if error is not None else "parsed"),
            status=status, latency_s=round(latency_s, 4), prompt_tokens=prompt, completion_tokens=completion_tokens,
            estimated=estimated, max_tokens=request.max_tokens, finish_reason=_finish_reason(completion),
        )
        self.calls.append(call)
        return call

    def usage(self, latency_s: float) -> ScorerUsage:
        return ScorerUsage(
            llm_calls=len(self.calls),
            prompt_tokens=sum(c.prompt_tokens for c in self.calls),
            completion_tokens=sum(c.completion_tokens for c in self.calls),
            latency_s=latency_s,
            retries=self.retries,
            fallbacks=self.fallbacks,
        )


# --------------------------------------------------------------------------- the plan
@dataclass
class ScorerPlan:
    """The settings every no-I/O step reads (see :class:`LLMScorer` for their meaning)."""

    model: str
    prompt: ScoringPrompt
    tokenizer: TokenCounter
    system_role: Literal["system", "user"] = "system"
    batch_max_messages: int = 20
    batch_max_tokens: int = 6000
    context_length: int = 128_000
    token_margin: float = 1.0
    max_tokens: int | None = None
    max_tokens_per_message: int = 64
    reply_base_tokens: int = 24
    max_retries: int = 2
    max_reasks: int = 1
    temperature: float = 0.0

    def reply_cap(self, n: int) -> int:
        """Completion tokens allowed for a reply scoring ``n`` ids (tokens)."""
        cap = self.reply_base_tokens + self.max_tokens_per_message * n
        return min(cap, self.max_tokens) if self.max_tokens is not None else cap

    def fixed_tokens(self, goal: TaskGoal) -> int:
        """Prompt tokens of a request with no items: rubric, goal, open reply schema (tokens)."""
        count = self.tokenizer.count_text
        return (
            count(self.prompt.system) + count(self.prompt.render_user(goal, [], [])) + count(CORRECTION)
            + count(json.dumps(reply_schema(None))) + 2 * _MESSAGE_OVERHEAD_TOKENS
        )

    def batches(self, goal: TaskGoal, items: Sequence[ScoreItem]) -> list[tuple[list[ScoreItem], list[str], int]]:
        """Split ``items`` (in order) into batches within every limit: ``(items, rendered
        previews, prompt tokens counted)``. A batch always holds at least one item, even
        when that item alone exceeds a limit (its preview is bounded by ``preview_chars``)."""
        fixed = self.fixed_tokens(goal)
        rendered = [self.prompt.render_item(item) for item in items]
        sizes = self.tokenizer.count_texts(rendered)
        out: list[tuple[list[ScoreItem], list[str], int]] = []
        cur: list[ScoreItem] = []
        cur_text: list[str] = []
        used = fixed
        for item, text, size in zip(items, rendered, sizes, strict=True):
            size += 2 + _ID_SCHEMA_TOKENS  # the blank line between items, the id in the schema
            n = len(cur) + 1
            fits_window = math.ceil((used + size) * self.token_margin) + self.reply_cap(n) <= self.context_length
            full = len(cur) >= self.batch_max_messages or used + size > self.batch_max_tokens or not fits_window
            if cur and full:
                out.append((cur, cur_text, used))
                cur, cur_text, used = [], [], fixed
            cur.append(item)
            cur_text.append(text)
            used += size
        if cur:
            out.append((cur, cur_text, used))
        return out

    def request(self, goal: TaskGoal, batch: int, group: _Group) -> Request:
        """The request for ``group`` (a whole batch, a half, or the ids left to re-ask)."""
        user = self.prompt.render_user(goal, group.items, group.rendered)
        if group.kind == "reask":
            user = f"{CORRECTION}\n\n{user}"
        if self.system_role == "user":
            messages = [{"role": "user", "content": f"{self.prompt.system}\n\n{user}"}]
        else:
            messages = [{"role": "system", "content": self.prompt.system}, {"role": "user", "content": user}]
        n = len(group.items)
        kwargs: dict[str, Any] = {"model": self.model, "temperature": self.temperature, "messages": messages,
                                  "max_tokens": self.reply_cap(n)}
        counted = sum(self.tokenizer.count_text(m["content"]) for m in messages) + len(messages) * _MESSAGE_OVERHEAD_TOKENS
        return Request(
            batch=batch, kind=group.kind, items=list(group.items), rendered=list(group.rendered), kwargs=kwargs,
            response_model=reply_model([i.id for i in group.items]),
            prompt_tokens=math.ceil(counted * self.token_margin),
        )

    def start(self, goal: TaskGoal, batch: int, items: list[ScoreItem], rendered: list[str]) -> BatchRun:
        """A :class:`BatchRun` for one batch."""
        return BatchRun(self, goal, batch, _Group(items, rendered))


class BatchRun:
    """The requests of one batch, one after another; see the module docstring.

    ``got`` collects taken scores (``source=llm``), ``failed`` the ids given up with why.
    """

    def __init__(self, plan: ScorerPlan, goal: TaskGoal, batch: int, first: _Group) -> None:
        self.plan = plan
        self.goal = goal
        self.batch = batch
        self.queue: deque[_Group] = deque([first])
        self.got: dict[str, RelevanceScore] = {}
        self.failed: dict[str, str] = {}

    def next_request(self) -> Request | None:
        """The next request to send, or ``None`` when the batch is done."""
        return self.plan.request(self.goal, self.batch, self.queue[0]) if self.queue else None

    def abandon(self, why: str) -> None:
        """Give up every id still queued (a fatal request error)."""
        while self.queue:
            for item in self.queue.popleft().items:
                if item.id not in self.got:
                    self.failed[item.id] = why

    def feed(self, outcome: Outcome, call: LLMCall | None = None) -> None:
        """What the reply to the request from :meth:`next_request` means; queues what follows.

        ``call`` (the log entry of the last send) gets its ``outcome`` and ``taken``.
        """
        group = self.queue.popleft()
        ids = [i.id for i in group.items]
        if outcome.transport is not None:
            why = short(str(outcome.transport), 200)
            self.failed.update({i: why for i in ids if i not in self.got})
            return
        completion = outcome.completion
        text = last_reply_text(completion) or ""
        cap = self.plan.reply_cap(len(ids))
        _, used = _usage_of(completion)
        cut = _finish_reason(completion) == "length" or (used >= cap and is_cut_off(text))
        if cut:
            if call is not None:
                call.outcome = "cut"
            if len(group.items) > 1:
                half = len(group.items) // 2
                for part in ((group.items[half:], group.rendered[half:]), (group.items[:half], group.rendered[:half])):
                    self.queue.appendleft(_Group(part[0], part[1], "split", group.reasks, group.parse_fails))
            else:
                self.failed[ids[0]] = f"reply cut off at max_tokens={cap}; last reply: {short(text, 80)!r}"
            return
        if outcome.reply is None:
            if call is not None:
                call.outcome = "unparsed"
            if group.parse_fails < self.plan.max_retries:
                self.queue.append(_Group(group.items, group.rendered, "reask", group.reasks, group.parse_fails + 1))
                return
            summary = error_summary(outcome.error) if outcome.error is not None else "no reply"
            why = f"no valid reply after {group.parse_fails + 1} attempt(s): {summary}"
            if text:
                why += f"; last reply: {short(text, 80)!r}"
            self.failed.update({i: why for i in ids})
            return
        reply = outcome.reply
        wanted = set(ids)
        taken = 0
        for entry in reply.scores:
            if entry.id in wanted and entry.id not in self.got:
                self.got[entry.id] = RelevanceScore(id=entry.id, score=entry.score, reason=short(entry.reason, 300),
                                                    source=ScoreSource.LLM)
                taken += 1
        if call is not None:
            call.outcome, call.taken = "parsed", taken
        missing = [(i, r) for i, r in zip(group.items, group.rendered, strict=True) if i.id not in self.got]
        if not missing:
            return
        if group.reasks < self.plan.max_reasks:
            self.queue.append(_Group([i for i, _ in missing], [r for _, r in missing], "reask",
                                     group.reasks + 1, group.parse_fails))
            return
        rounds = group.reasks + 1
        for item, _ in missing:
            rejected = reply.rejected.get(item.id)
            self.failed[item.id] = (
                f"{rejected} in {rounds} valid repl{'y' if rounds == 1 else 'ies'}" if rejected
                else f"id missing from {rounds} valid repl{'y' if rounds == 1 else 'ies'}"
            )


# --------------------------------------------------------------------------- result
def assemble_result(
    goal: TaskGoal,
    items: Sequence[ScoreItem],
    context: ScoringContext | None,
    got: dict[str, RelevanceScore],
    failed: dict[str, str],
    tally: Tally,
    latency_s: float,
    *,
    offline: OfflineScorer,
    on_failure: Literal["fallback", "raise"],
    fatal: ScorerError | None,
) -> ScoringResult:
    """One score per item, in item order: the LLM's, else the offline score with
    ``source=fallback`` and reason ``fallback (why): …``; warnings group failures by why.

    Raises:
        ScorerError: ids are unscored and ``on_failure="raise"`` (the fatal error if any).
    """
    missing = [i for i in items if i.id not in got]
    warnings: list[str] = []
    scores = dict(got)
    if missing:
        if on_failure == "raise":
            if fatal is not None:
                raise fatal
            first = failed.get(missing[0].id, "no score")
            raise ScorerValidationError(f"{len(missing)} message(s) not scored by the LLM: {first}")
        base = {s.id: s for s in offline.score(goal, missing, context).scores}
        by_reason: dict[str, list[str]] = {}
        for item in missing:
            why = failed.get(item.id, "no score")
            by_reason.setdefault(why, []).append(item.id)
            scores[item.id] = base[item.id].model_copy(
                update={"source": ScoreSource.FALLBACK, "reason": f"fallback ({short(why, 100)}): {base[item.id].reason}"}
            )
        tally.fallbacks += len(missing)
        for why, ids in by_reason.items():
            shown = ", ".join(ids[:8]) + (f" … (+{len(ids) - 8})" if len(ids) > 8 else "")
            warnings.append(f"LLM scorer: {len(ids)} message(s) got offline fallback scores [{shown}]: {why}")
    unanswered = [c for c in tally.calls if c.estimated]
    if unanswered:
        warnings.append(
            f"LLM scorer: {len(unanswered)} request(s) got no reply (timeout or reset); their "
            f"{sum(c.prompt_tokens for c in unanswered):,} prompt tokens are the scorer's own count"
        )
    return ScoringResult(
        scores=[scores[i.id] for i in items], usage=tally.usage(latency_s), warnings=warnings, calls=list(tally.calls)
    )

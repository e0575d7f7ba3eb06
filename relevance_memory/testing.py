"""Fakes for testing your own agent code with relevance-memory: no network, no API key.

A real scorer is an LLM behind an HTTP endpoint. To test the code *around* the memory —
that your agent's hard constraint survives compaction, that a tool result your planner
needs is kept, that a failing scorer does not break your loop — swap it for one of these
:class:`~relevance_memory.Scorer` s, which answer exactly as you tell them:

- :class:`FixedScorer` — the same score for every message, or a table of scores by id;
- :class:`FunctionScorer` — a function of the message (and goal) decides each score;
- :class:`ScriptedScorer` — one scripted reply per scorer call, like a recorded LLM:
  scores by id (leaving ids out makes the memory fall back for them, as it does when an
  LLM forgets some), or an exception to raise (the memory falls back to offline scores).

Each fake records what it was asked (:attr:`FakeScorer.calls`), has an async ``ascore``
too (an async build awaits it), and gives scores with ``source="llm"`` unless told
otherwise, so the decision record reads as it would with an LLM.

    from relevance_memory import RelevanceMemoryManager
    from relevance_memory.testing import FixedScorer, assert_valid_context

    scorer = FixedScorer(1, scores={"m1": 5})       # only the constraint in m1 matters
    memory = RelevanceMemoryManager(max_input_tokens=2000, scorer=scorer)
    memory.extend(history)
    built = memory.build_context()
    assert_valid_context(history, built, memory.tokenizer)   # SPEC §9, raises AssertionError
    assert built.record.decision_for("m1").decision == "kept"
    assert scorer.calls[0].ids == [...]                       # what the memory sent to score

Scores are cached like any scorer's (SPEC §6: per goal, subtask and message), so a second
build for the same subtask asks nothing; change the subtask, or use a new memory, to be
asked again.

:func:`assert_valid_context` checks a build against the SPEC §9 invariants (valid for the
API, within budget, system prompt first, no duplicate, order kept, newest user message
verbatim, whole tool chains, the budget breakdown adding up).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from ._exceptions import RelevanceMemoryError
from ._markers import ELIDED_MARKER, EXCERPT_MARKER, GOAL_BLOCK_MARKER, SUBTASK_MARKER, SUMMARY_MARKER
from ._models import RelevanceScore, ScoreSource, TaskGoal
from ._tokenizer import REPLY_PRIMING_TOKENS, TokenCounter
from .pipeline import BuiltContext
from .pipeline.assemble import check_context
from .pipeline.partition import GOAL_POINTER
from .scoring._scorer import ScoreItem, ScorerUsage, ScoringContext, ScoringResult

__all__ = [
    "FakeScorer",
    "FixedScorer",
    "FunctionScorer",
    "ScorerCall",
    "ScriptExhaustedError",
    "ScriptedScorer",
    "assert_valid_context",
    "is_generated",
]

ScoreValue = int | tuple[int, str] | RelevanceScore
"""What a fake may answer for one message: a score 1–5, ``(score, reason)``, or a full score."""


class ScriptExhaustedError(RelevanceMemoryError):
    """A :class:`ScriptedScorer` was called more often than its script has replies."""


@dataclass(frozen=True)
class ScorerCall:
    """One call the memory made to a fake scorer.

    Attributes:
        goal: the task goal the messages were scored for.
        items: the messages, as the scorer saw them.
    """

    goal: TaskGoal
    items: tuple[ScoreItem, ...]

    @property
    def ids(self) -> list[str]:
        """The ids of the messages asked for, in order."""
        return [item.id for item in self.items]


class FakeScorer:
    """What the fakes share: a :class:`~relevance_memory.Scorer` with no I/O that records its calls.

    Subclasses implement :meth:`answer`.

    Args:
        name, model, rubric_version: shown in the decision record; part of the score-cache key.
        source: the score source the fake's scores carry (default ``llm``).

    Attributes:
        calls: every call, oldest first (:class:`ScorerCall`).
    """

    def __init__(
        self, *, name: str = "fake", model: str = "fake-1", rubric_version: str = "fake-1",
        source: ScoreSource = ScoreSource.LLM,
    ) -> None:
        self.name = name
        self.model = model
        self.rubric_version = rubric_version
        self.source = source
        self.calls: list[ScorerCall] = []

    def answer(self, goal: TaskGoal, items: Sequence[ScoreItem]) -> Mapping[str, ScoreValue]:
        """Message id → score for this call (ids left out get the memory's fallback)."""
        raise NotImplementedError

    def score(self, goal: TaskGoal, items: Sequence[ScoreItem], context: ScoringContext | None = None) -> ScoringResult:
        """Record the call and answer it (the :class:`~relevance_memory.Scorer` protocol)."""
        self.calls.append(ScorerCall(goal, tuple(items)))
        answers = self.answer(goal, items)
        scores = [self._score(item.id, answers[item.id]) for item in items if item.id in answers]
        return ScoringResult(scores=scores, usage=ScorerUsage(llm_calls=1))

    async def ascore(
        self, goal: TaskGoal, items: Sequence[ScoreItem], context: ScoringContext | None = None
    ) -> ScoringResult:
        """Async :meth:`score` (an async build awaits it)."""
        return self.score(goal, items, context)

    @property
    def asked(self) -> list[str]:
        """Every id the memory asked to score, over all calls, in order."""
        return [i for call in self.calls for i in call.ids]

    def _score(self, message_id: str, value: ScoreValue) -> RelevanceScore:
        if isinstance(value, RelevanceScore):
            return value.model_copy(update={"id": message_id})
        score, reason = value if isinstance(value, tuple) else (value, f"{self.name} scorer")
        return RelevanceScore(id=message_id, score=score, reason=reason, source=self.source)


class FixedScorer(FakeScorer):
    """Every message gets ``default``, except those named in ``scores``.

    Args:
        default: the score of a message not in ``scores`` (1–5).
        scores: message id → score (1–5, ``(score, reason)`` or a :class:`RelevanceScore`).

    Raises:
        ValueError: a score is outside 1..5 (pydantic's ``ValidationError``).

    Example: ``FixedScorer(1, scores={"m1": 5})`` — only ``m1`` matters.
    """

    def __init__(
        self, default: ScoreValue = 3, *, scores: Mapping[str, ScoreValue] | None = None, name: str = "fixed",
        model: str = "fixed-1", rubric_version: str = "fixed-1", source: ScoreSource = ScoreSource.LLM,
    ) -> None:
        super().__init__(name=name, model=model, rubric_version=rubric_version, source=source)
        self.default = default
        self.scores: dict[str, ScoreValue] = dict(scores or {})
        for value in (default, *self.scores.values()):
            self._score("check", value)  # a score outside 1..5 fails here, not inside a build

    def answer(self, goal: TaskGoal, items: Sequence[ScoreItem]) -> Mapping[str, ScoreValue]:
        """``scores[id]`` or ``default`` for every item."""
        return {item.id: self.scores.get(item.id, self.default) for item in items}


class FunctionScorer(FakeScorer):
    """A function decides each message's score: ``function(item, goal)``.

    Args:
        function: ``(ScoreItem, TaskGoal) -> int | (int, reason) | RelevanceScore | None``;
            ``None`` leaves the message unscored (the memory gives it a fallback score).

    Example: ``FunctionScorer(lambda item, goal: 5 if "deadline" in item.text else 2)``.
    """

    def __init__(
        self, function: Callable[[ScoreItem, TaskGoal], ScoreValue | None], *, name: str = "function",
        model: str = "function-1", rubric_version: str = "function-1", source: ScoreSource = ScoreSource.LLM,
    ) -> None:
        super().__init__(name=name, model=model, rubric_version=rubric_version, source=source)
        self.function = function

    def answer(self, goal: TaskGoal, items: Sequence[ScoreItem]) -> Mapping[str, ScoreValue]:
        """``function(item, goal)`` for every item that gets a score."""
        out: dict[str, ScoreValue] = {}
        for item in items:
            value = self.function(item, goal)
            if value is not None:
                out[item.id] = value
        return out


Reply = Mapping[str, ScoreValue] | BaseException | Callable[[Sequence[ScoreItem], TaskGoal], Mapping[str, ScoreValue]]
"""One scripted reply: scores by id, an exception to raise, or a function of the call."""


class ScriptedScorer(FakeScorer):
    """Answers the memory's calls from a script, one reply per call, like a recorded LLM.

    Args:
        script: the replies in call order. A reply is a mapping id → score (ids it leaves
            out get the memory's fallback score, as when an LLM forgets some), an exception
            instance (raised: the memory falls back to offline scores for that call and
            warns), or a function ``(items, goal) -> mapping``.
        then: what every call after the script gets: a score for every message, or
            ``None`` to raise :class:`ScriptExhaustedError` (which the memory, too, turns
            into a fallback with a warning — check :attr:`remaining` or :meth:`assert_done`).

    Example::

        ScriptedScorer([{"m1": 5, "m2": 1}, TimeoutError("endpoint down")], then=2)
    """

    def __init__(
        self, script: Iterable[Reply], *, then: ScoreValue | None = None, name: str = "scripted",
        model: str = "scripted-1", rubric_version: str = "scripted-1", source: ScoreSource = ScoreSource.LLM,
    ) -> None:
        super().__init__(name=name, model=model, rubric_version=rubric_version, source=source)
        self.script: list[Reply] = list(script)
        self.then = then

    @property
    def remaining(self) -> int:
        """Replies of the script not used yet."""
        return max(0, len(self.script) - len(self.calls))

    def assert_done(self) -> None:
        """Raise ``AssertionError`` unless every reply of the script was used."""
        if self.remaining:
            raise AssertionError(f"{self.remaining} scripted repl{'y' if self.remaining == 1 else 'ies'} not used")

    def answer(self, goal: TaskGoal, items: Sequence[ScoreItem]) -> Mapping[str, ScoreValue]:
        """The next reply of the script (raised when it is an exception)."""
        n = len(self.calls) - 1  # score() recorded this call already
        if n >= len(self.script):
            if self.then is None:
                raise ScriptExhaustedError(f"the script has {len(self.script)} repl(ies); this is call {n + 1}")
            return {item.id: self.then for item in items}
        reply = self.script[n]
        if isinstance(reply, BaseException):
            raise reply
        if callable(reply):
            return reply(items, goal)
        return reply


# --------------------------------------------------------------------------- invariants
def is_generated(message: Mapping[str, object]) -> bool:
    """Whether a built message was made by the memory (the goal block or a summary), not given."""
    content = message.get("content")
    return isinstance(content, str) and content.startswith((GOAL_BLOCK_MARKER, SUMMARY_MARKER))


def assert_valid_context(
    history: Sequence[Mapping[str, object]], built: BuiltContext, counter: TokenCounter, *, budget: int | None = None
) -> None:
    """Assert every SPEC §9 invariant of ``built`` against the ``history`` it was built from.

    Checks: valid for the API (:func:`~relevance_memory.check_context`); within ``budget``
    (default the record's) counted by ``counter``, and equal to ``record.tokens_after``; the
    budget breakdown adds up; the original system message first, once, byte for byte;
    generated messages never use the assistant role; stored messages once each, in
    original order, unchanged unless the record says they were sent as an excerpt or elided
    (then marked, with their role, call ids and ``tool_call_id`` — SPEC §11); the newest user message kept; kept tool calls with all their
    results; a goal block pointing at the task statement only when it is there; a subtask
    note only as the last message; ``BuiltContext.sources`` naming the stored message each
    verbatim message copies; an appended build's ``prefix_tokens`` equal to the tokens of the
    context before its new messages; output == input when the record says the whole history
    fitted.

    Args:
        history: the OpenAI chat dicts the memory holds, in order.
        built: what :meth:`RelevanceMemoryManager.build_context` returned.
        counter: the memory's tokenizer (``memory.tokenizer``).

    Raises:
        AssertionError: naming the first invariant that does not hold.
    """
    out, record = built.messages, built.record
    limit = record.budget if budget is None else budget
    problems = check_context(out)
    _check(not problems, f"not valid for the API: {problems}")
    counted = REPLY_PRIMING_TOKENS + sum(counter.count_message(m) for m in out)
    _check(counted == record.tokens_after, f"counted {counted} tokens, the record says {record.tokens_after}")
    _check(counted <= limit, f"{counted} tokens exceed the budget of {limit}")
    breakdown = record.budget_breakdown
    if breakdown is not None:
        spent = sum(breakdown.spent.values())
        _check(spent == record.tokens_after, f"the budget breakdown spends {spent}, the context holds {record.tokens_after}")
        _check(spent + breakdown.unused == record.budget, "the budget breakdown does not add up to the budget")
    if history and history[0].get("role") == "system":
        first = json.dumps(history[0], sort_keys=True)
        _check(bool(out) and json.dumps(out[0], sort_keys=True) == first, "the system message is not first, unchanged")
        _check(sum(1 for m in out if m == history[0]) == 1, "the system message appears more than once")
    _check(all(m.get("role") != "assistant" for m in out if is_generated(m)), "a generated message uses the assistant role")
    verbatim = [m for m in out if not is_generated(m)]
    kept = [d.index for d in record.messages if d.decision in ("kept", "recent")]
    _check(len(verbatim) == len(kept), f"{len(verbatim)} verbatim messages, the record keeps {len(kept)}")
    _check(kept == sorted(set(kept)), "kept messages are repeated or out of order")
    fidelity = {d.index: d.fidelity for d in record.messages if d.decision in ("kept", "recent")}
    for message, index in zip(verbatim, kept, strict=False):
        _check(_sent_as(message, history[index], fidelity.get(index)), f"message {index} is not verbatim")
    users = [i for i, m in enumerate(history) if m.get("role") == "user"]
    _check(not users or users[-1] in kept, "the newest user message is not kept")
    _check_whole_chains(history, set(kept))
    for m in out:
        if is_generated(m) and GOAL_POINTER in str(m.get("content")):
            _check(bool(users) and history[users[0]] in out, "the goal block points at a task statement that is not kept")
    # the subtask never rewrites the prefix (SPEC §3.1): a subtask note is the very last message
    notes = [n for n, m in enumerate(out) if is_generated(m) and str(m.get("content")).startswith(SUBTASK_MARKER)]
    _check(notes in ([], [len(out) - 1]), "the subtask note is not the last message")
    if built.sources:  # per built message, the stored message it copies (None: made by the build)
        _check(len(built.sources) == len(out), "BuiltContext.sources does not name every message")
        for message, source in zip(out, built.sources, strict=True):
            _check((source is None) == is_generated(message), "BuiltContext.sources mixes generated and stored messages")
            _check(source is None or _sent_as(message, history[source], fidelity.get(source)),
                   f"BuiltContext.sources names the wrong message {source}")
    if record.mode == "appended":  # the previous request is the start of this one, byte for byte
        new = len(record.appended_ids) + len(notes)
        shared = sum(counter.count_message(m) for m in out[: len(out) - new])
        _check(record.base_build_id is not None, "an appended build names no base build")
        _check(record.prefix_tokens == shared, f"an appended build shares {shared} tokens, the record says {record.prefix_tokens}")
    if record.identity:
        _check(list(out) == list(history), "the whole history fitted but the context differs from it")


def _sent_as(message: Mapping[str, object], original: Mapping[str, object], fidelity: str | None) -> bool:
    """Whether ``message`` is ``original`` as the record says it was sent (SPEC §11): byte for
    byte when verbatim; an excerpt or elided output keeps the role, ``tool_call_id``, ``name``
    and tool-call ids, and its content opens with the marker naming the message."""
    if fidelity in (None, "verbatim"):
        return message == original
    content = str(message.get("content") or "")
    marked = content.startswith((EXCERPT_MARKER, ELIDED_MARKER))
    same = all(message.get(k) == original.get(k) for k in ("role", "tool_call_id", "name"))
    calls = [c.get("id") for c in _calls(message) if isinstance(c, Mapping)]
    wanted = [c.get("id") for c in _calls(original) if isinstance(c, Mapping)]
    return marked and same and calls == wanted and message != original


def _calls(message: Mapping[str, object]) -> list[object]:
    calls = message.get("tool_calls")
    return list(calls) if isinstance(calls, (list, tuple)) else []


def _check_whole_chains(history: Sequence[Mapping[str, object]], kept: set[int]) -> None:
    for i in kept:
        calls = history[i].get("tool_calls") or []
        for call in calls if isinstance(calls, Iterable) else ():
            call_id = call.get("id") if isinstance(call, Mapping) else None
            answered = any(history[j].get("role") == "tool" and history[j].get("tool_call_id") == call_id for j in kept)
            _check(answered, f"tool call {call_id} of message {i} is kept without its result")


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(message)

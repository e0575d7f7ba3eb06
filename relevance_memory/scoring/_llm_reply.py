"""The LLM scorer's reply: a grammar-enforceable JSON schema and a strict, tolerant parser.

No I/O. Used by :mod:`._llm_steps` (what a batch asks for and what its reply means) and
by instructor, which builds each mode's request from :meth:`ScoreReply.model_json_schema`
and parses every mode's reply through :meth:`ScoreReply.model_validate_json`.

**Schema** (issue 14, defect 1). :func:`reply_model` gives each request a
:class:`ScoreReply` subclass whose schema a JSON grammar (llama.cpp, vLLM/outlines,
Ollama) can enforce token by token, without relying on ``minimum``/``maximum`` that some
servers ignore::

    {"scores": [{"id": <enum of the requested ids>, "reason": <string, ≤ 160 chars>,
                 "score": <enum 1, 2, 3, 4, 5>}, ...]}     minItems = maxItems = len(ids)

**Parsing** (cases C06, C07; issue 13 item 9). A reply is decoded with
:func:`extract_json_reply`: a bare array, an array in code fences, an object wrapping the
array, or an array inside prose with braces. A reply holding *two different* score
lists (a quoted example, then the real one) is **ambiguous** and rejected as a whole —
never resolved by taking one of them. Within one decoded list, each entry is judged on
its own: a requested id with an integer score 1..5 is taken; anything else (unknown id,
score 9, ``"4"``, ``4.5``, ``true``, an id given two different scores) is *rejected* with
a reason, and the scorer re-asks only those ids (see :mod:`._llm_steps`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator

__all__ = [
    "REASON_MAX_CHARS",
    "AmbiguousReplyError",
    "ScoreEntry",
    "ScoreReply",
    "extract_json_reply",
    "is_cut_off",
    "reply_model",
    "reply_schema",
]

REASON_MAX_CHARS = 160
"""Longest ``reason`` the schema allows (chars): a grammar stops runaway reasons here."""
SCORE_VALUES = (1, 2, 3, 4, 5)
_SCAN_LIMIT = 500
"""Most ``[``/``{`` positions the tolerant parser tries in one reply."""


class AmbiguousReplyError(json.JSONDecodeError):
    """A reply holds two or more different score lists (issue 13 item 9): a parse failure."""


class ScoreEntry(BaseModel):
    """One message's score as the model returns it; ``reason`` comes before ``score``.

    Attributes:
        id: the message id exactly as shown in brackets (surrounding brackets are tolerated).
        reason: a short justification, written before the score.
        score: integer 1..5 (floats, strings, booleans and out-of-range values are rejected,
            never clipped or rounded).
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


def reply_schema(ids: Sequence[str] | None) -> dict[str, Any]:
    """The JSON schema of a reply scoring exactly ``ids`` (each once, any order).

    Every constraint is one a grammar can enforce: ``enum`` for ids and scores,
    ``minItems``/``maxItems`` for the count, ``maxLength`` for the reason, all fields
    required, no extra properties. ``ids=None`` gives the open schema (any id).
    """
    id_schema: dict[str, Any] = {"type": "string", "description": "the message id exactly as shown in square brackets"}
    if ids is not None:
        id_schema["enum"] = list(dict.fromkeys(ids))
    entry = {
        "type": "object",
        "description": "the score of one message",
        "properties": {
            "id": id_schema,
            "reason": {"type": "string", "maxLength": REASON_MAX_CHARS, "description": "at most 20 words: why this score"},
            "score": {"type": "integer", "enum": list(SCORE_VALUES),
                      "description": "relevance 1 (unrelated) to 5 (decides the task)"},
        },
        "required": ["id", "reason", "score"],
        "additionalProperties": False,
    }
    scores: dict[str, Any] = {"type": "array", "items": entry, "description": "one entry per listed message"}
    if ids is not None:
        scores["minItems"] = scores["maxItems"] = len(id_schema["enum"])
    return {
        "type": "object",
        "title": "ScoreReply",
        "description": "relevance scores, one per listed message",
        "properties": {"scores": scores},
        "required": ["scores"],
        "additionalProperties": False,
    }


class ScoreReply(BaseModel):
    """The response model sent to instructor: ``{"scores": [ScoreEntry, ...]}``.

    ``scores`` holds only the entries that were taken (requested id, integer 1..5, no
    conflicting duplicate); :attr:`rejected` maps every other id seen (or requested and
    scored invalidly) to the reason it was not taken. Missing ids appear in neither.
    Use :func:`reply_model` for a model bound to the requested ids; on this base class any
    id is accepted.
    """

    model_config = ConfigDict(json_schema_extra={"description": "relevance scores, one per listed message"})

    expected_ids: ClassVar[tuple[str, ...] | None] = None
    scores: list[ScoreEntry] = Field(description="one entry per listed message, in any order")
    _rejected: dict[str, str] = PrivateAttr(default_factory=dict)

    @property
    def rejected(self) -> dict[str, str]:
        """Ids whose entry was not taken → why (unknown id, invalid score, conflicting duplicate)."""
        return self._rejected

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The grammar-enforceable schema of :func:`reply_schema` for this model's ids."""
        return reply_schema(cls.expected_ids)

    @classmethod
    def model_validate_json(
        cls,
        json_data: str | bytes | bytearray,
        *,
        strict: bool | None = None,
        context: Any | None = None,
        **kwargs: Any,
    ) -> ScoreReply:
        """Parse a raw reply tolerantly (see the module docstring), then judge each entry.

        Raises:
            AmbiguousReplyError: the reply holds two different score lists.
            json.JSONDecodeError: no JSON value could be decoded from the reply.
            ValueError: the JSON decoded but holds no score list at all.
        """
        text = json_data.decode("utf-8", "replace") if isinstance(json_data, (bytes, bytearray)) else json_data
        return cls.from_value(extract_json_reply(text))

    @classmethod
    def from_value(cls, value: Any) -> ScoreReply:
        """Judge a decoded JSON value entry by entry (see the class docstring).

        Raises:
            ValueError: ``value`` is not shaped like a score list.
        """
        found = _score_list(value)
        if found is None:
            found = _score_mapping(value, cls.expected_ids)
        if found is None:
            raise ValueError(f"reply is JSON but holds no score list: {_short(json.dumps(value), 80)}")
        expected = None if cls.expected_ids is None else set(cls.expected_ids)
        taken: dict[str, ScoreEntry] = {}
        rejected: dict[str, str] = {}
        for raw in found:
            entry, (ident, why) = _judge_entry(raw, expected)
            if not ident or ident in rejected:
                continue
            prior = taken.pop(ident, None)
            if entry is None:
                rejected[ident] = why if prior is None else f"scored twice ({prior.score}, then invalid: {why})"
            elif prior is not None and prior.score != entry.score:
                rejected[ident] = f"two different scores ({prior.score} and {entry.score})"
            else:
                taken[ident] = prior or entry
        reply = cls(scores=list(taken.values()))
        reply._rejected = rejected
        return reply


def _judge_entry(raw: dict[str, Any], expected: set[str] | None) -> tuple[ScoreEntry | None, tuple[str, str]]:
    """An entry that may be taken, or ``None`` and ``(id, why not)`` (id ``""`` if unreadable)."""
    raw_id = raw.get("id")
    ident = raw_id.strip().strip("[]").strip() if isinstance(raw_id, str) else ""
    if not ident:
        return None, ("", "entry without an id")
    if expected is not None and ident not in expected:
        return None, (ident, "not a requested id")
    score = raw.get("score")
    if isinstance(score, bool) or not isinstance(score, int):
        return None, (ident, f"score {_short(json.dumps(score), 30)} is not an integer")
    if score not in SCORE_VALUES:
        return None, (ident, f"score {score} is outside 1..5")
    reason = raw.get("reason")
    text = reason if isinstance(reason, str) else ""
    return ScoreEntry(id=ident, reason=_short(text, 300), score=score), (ident, "")


def reply_model(ids: Sequence[str]) -> type[ScoreReply]:
    """A :class:`ScoreReply` subclass bound to ``ids``: its schema enumerates them and
    asks for exactly ``len(ids)`` entries; its parser takes only these ids. The class is
    named ``ScoreReply`` (instructor's tool name in TOOLS mode)."""
    bound = tuple(dict.fromkeys(ids))
    return type("ScoreReply", (ScoreReply,), {"expected_ids": bound, "__module__": __name__})


def _short(text: str, n: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _score_list(value: Any, depth: int = 0) -> list[dict[str, Any]] | None:
    """The list of score entries ``value`` holds, or ``None`` when it is not score-shaped.

    An object wrapping the list may say ``scores``, hold it as its only value, or hold it
    beside other values (``{"ratings": [...], "note": "…"}``) or one object deeper
    (``{"result": {"scores": [...]}}``) — then the one list whose entries carry an ``id`` and a
    ``score`` (case C06's kind: a wrapped array is still the answer)."""
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
        if depth < 3:
            inner = [found for v in value.values() if isinstance(v, (list, dict))
                     if (found := _score_list(v, depth + 1)) and all("id" in e and "score" in e for e in found)]
            if len(inner) == 1:
                return inner[0]
    return None


def _score_mapping(value: Any, expected: Sequence[str] | None) -> list[dict[str, Any]] | None:
    """Entries from a reply that maps ids to scores (``{"m1": 5, "m2": 1}``, also under
    ``scores``), when every key is a requested id; the scores are judged as in a list."""
    if isinstance(value, dict) and isinstance(value.get("scores"), dict):
        value = value["scores"]
    if not isinstance(value, dict) or not value or expected is None:
        return None
    ids = {str(k).strip().strip("[]").strip(): v for k, v in value.items()}
    if not set(ids) <= set(expected) or any(isinstance(v, (dict, list)) for v in ids.values()):
        return None
    return [{"id": k, "reason": "", "score": v} for k, v in ids.items()]


_REASONING_RE = re.compile(r"<(think|thinking|reasoning)>.*?</\1>", re.DOTALL | re.IGNORECASE)
_REASONING_END_RE = re.compile(r"^.*</(?:think|thinking|reasoning)>", re.DOTALL | re.IGNORECASE)


def _without_reasoning(text: str) -> str:
    """``text`` without a reasoning model's ``<think>…</think>`` blocks (a draft score list in
    them is not the answer), nor what precedes a closing tag whose opening the server cut."""
    if "</" not in text:
        return text
    text = _REASONING_RE.sub("", text)
    return _REASONING_END_RE.sub("", text)


def extract_json_reply(text: str) -> Any:
    """The JSON value in a model reply (cases C06, C07; issue 13 item 9).

    Tries :meth:`json.JSONDecoder.raw_decode` at each ``[`` and ``{`` outside values
    already decoded (at most 500 positions). Returns the one score list found (an array
    of objects, or an object holding one); loose entries (``{"id": …, "score": …}`` one
    after another, as JSON lines) are gathered into one list; when nothing is
    score-shaped, the first value that decoded at all. Code fences and prose around the
    JSON — even prose with braces — are skipped; raw control characters inside strings
    are accepted. The same list repeated verbatim counts once.

    Raises:
        AmbiguousReplyError: two different score lists, or a list plus loose entries
            (e.g. a quoted example, then the real answer): taking either would be a
            silent guess.
        json.JSONDecodeError: nothing decodes; the message is the first decode error
            (e.g. single quotes, or an unterminated string of a reply cut off), or says
            that the reply holds no JSON at all.
    """
    decoder = json.JSONDecoder(strict=False)  # raw newlines/tabs inside strings are common and harmless
    text = _without_reasoning(text)
    if text.strip().startswith('"'):  # the whole answer JSON-encoded once more, as one string
        try:
            inner = json.loads(text)
        except json.JSONDecodeError:
            inner = None
        if isinstance(inner, str) and inner.strip()[:1] in ("[", "{"):
            text = inner
    lists: list[Any] = []
    loose: list[dict[str, Any]] = []
    first_value: Any = None
    decoded_any = False
    first_error: json.JSONDecodeError | None = None
    tried = 0
    pos = 0
    while pos < len(text):
        if text[pos] not in "[{":
            pos += 1
            continue
        tried += 1
        if tried > _SCAN_LIMIT:
            break
        try:
            value, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            if first_error is None:
                first_error = exc
            pos += 1
            continue
        if isinstance(value, dict) and "id" in value and "score" in value:
            loose.append(value)
        elif _score_list(value) is not None:
            if value not in lists:
                lists.append(value)
        elif not decoded_any:
            first_value, decoded_any = value, True
        pos = max(end, pos + 1)
    if len(lists) > 1 or (lists and loose):
        found = len(lists) + (1 if loose else 0)
        raise AmbiguousReplyError(f"ambiguous reply: {found} different score lists", text, 0)
    if lists:
        return lists[0]
    if loose:
        return loose
    if decoded_any:
        return first_value
    if first_error is not None:
        raise json.JSONDecodeError(f"reply is not valid JSON: {first_error.msg}", first_error.doc, first_error.pos)
    raise json.JSONDecodeError("reply holds no JSON array or object", text, 0)


def is_cut_off(text: str) -> bool:
    """Whether the reply's outermost JSON value is unterminated (it starts, never ends):
    the sign of a reply cut at the token cap even when the server reports a normal finish."""
    starts = [i for i in (text.find("{"), text.find("[")) if i >= 0]
    if not starts:
        return False
    try:
        json.JSONDecoder(strict=False).raw_decode(text, min(starts))
    except json.JSONDecodeError as exc:
        return exc.pos >= len(text.rstrip()) - 1 or "Unterminated" in exc.msg
    return False

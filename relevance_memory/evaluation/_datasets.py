"""Loaders for the evidence-labelled chat data sets: LoCoMo and LongMemEval.

Both become the same shape: an :class:`EvalConversation` (turns in time order, each with
a stable id, role, speaker, text and timestamp) plus :class:`EvalQuestion` items whose
``evidence`` lists the ids of the turns that hold the answer.

Sources:
- LoCoMo (Maharana et al., 2024; ``snap-research/LoCoMo``, CC BY-NC 4.0): ``locomo10.json``,
  10 conversations, turn ids ``D<session>:<turn>``, questions with categories 1 multi-hop,
  2 temporal, 3 open-domain, 4 single-hop, 5 adversarial.
- LongMemEval (Wu et al., 2025, MIT), the 2025-09 cleaned release as one JSON file per
  question: the haystack is the history, turns with ``has_answer: true`` are evidence.

The data sets are not shipped; pass the path of your copy.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

__all__ = [
    "LOCOMO_CATEGORIES",
    "EvalConversation",
    "EvalDataset",
    "EvalQuestion",
    "EvalTurn",
    "load_dataset",
    "load_locomo",
    "load_longmemeval",
    "repair_locomo_evidence",
    "select_questions",
]

LOCOMO_CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
"""LoCoMo ``category`` number → name (from the LoCoMo paper and repository)."""


@dataclass(frozen=True)
class EvalTurn:
    """One turn of a conversation.

    Attributes:
        id: stable id, used as the message id (LoCoMo ``D3:12``; LongMemEval ``S3:12``,
            session and turn counted from 1).
        role: OpenAI role, ``user`` or ``assistant``.
        speaker: the speaker's name (LoCoMo) or the role (LongMemEval).
        text: the message content as sent to a model (LoCoMo: ``"Name: text"`` plus a
            shared photo's caption).
        timestamp: the session's date and time (naive dates are taken as UTC), or ``None``.
        session: session number, from 1.
        msg_type: the message type the turn is added as (SPEC §2): ``user_chat`` for a
            person's words, ``assistant_reasoning`` for an LLM assistant's reply. LoCoMo's
            two speakers are both people, so both are ``user_chat`` (the second speaker
            still has the ``assistant`` role so that turns alternate as a chat API expects).
    """

    id: str
    role: str
    speaker: str
    text: str
    timestamp: datetime | None
    session: int
    msg_type: str = ""

    @property
    def message_type(self) -> str:
        """``msg_type``, or by role (``user_chat`` / ``assistant_reasoning``) when none was given."""
        return self.msg_type or ("user_chat" if self.role == "user" else "assistant_reasoning")


@dataclass(frozen=True)
class EvalQuestion:
    """One question with its evidence turn ids.

    Attributes:
        id: question id (LoCoMo ``conv-26#q0``; LongMemEval ``question_id``).
        question: the question text.
        answer: the gold answer (``adversarial_answer`` for LoCoMo category 5).
        category: category / question type name (``single-hop``, ``temporal-reasoning`` …).
        evidence: ids of the evidence turns after repair; empty for most abstention questions.
        unresolved: raw evidence ids that could not be resolved to a turn.
        conversation_id: the conversation it is asked about.
    """

    id: str
    question: str
    answer: str
    category: str
    evidence: tuple[str, ...]
    unresolved: tuple[str, ...] = ()
    conversation_id: str = ""

    @property
    def evaluable(self) -> bool:
        """It has at least one resolved evidence turn (recall is defined; unresolved ids are dropped and reported)."""
        return bool(self.evidence)


@dataclass
class EvalConversation:
    """A history and the questions asked after it."""

    id: str
    turns: list[EvalTurn]
    questions: list[EvalQuestion]


@dataclass
class EvalDataset:
    """A loaded data set.

    Attributes:
        name: ``locomo`` or ``longmemeval``.
        conversations: in file order.
        repaired: (question id, raw id, repaired ids) for each malformed evidence id fixed.
        unresolved: (question id, raw id) for each evidence id that matches no turn.
    """

    name: str
    conversations: list[EvalConversation]
    repaired: list[tuple[str, str, tuple[str, ...]]] = field(default_factory=list)
    unresolved: list[tuple[str, str]] = field(default_factory=list)

    @property
    def questions(self) -> list[EvalQuestion]:
        """Every question of every conversation, in order."""
        return [q for c in self.conversations for q in c.questions]


_LOCOMO_ID = re.compile(r"D:?(\d+):0*(\d+)")


def repair_locomo_evidence(raw: str, known: set[str] | frozenset[str]) -> tuple[list[str], list[str]]:
    """Split and normalise one LoCoMo evidence string into turn ids.

    Handles the malformed forms seen in ``locomo10.json``: several ids in one string
    (``'D8:6; D9:17'``, ``'D9:1 D4:4 D4:6'``), a stray colon (``'D:11:26'``) and a
    zero-padded turn (``'D30:05'``).

    Args:
        raw: the evidence string as stored.
        known: every turn id of the conversation.

    Returns:
        ``(resolved, unresolved)``: ids present in ``known``, and the pieces that are
        not (malformed beyond repair, e.g. ``'D'``, or pointing at a missing turn).
    """
    resolved: list[str] = []
    unresolved: list[str] = []
    for piece in re.split(r"[;,\s]+", raw.strip()):
        if not piece:
            continue
        match = _LOCOMO_ID.fullmatch(piece)
        candidate = f"D{int(match.group(1))}:{int(match.group(2))}" if match else piece
        (resolved if candidate in known else unresolved).append(candidate if match else piece)
    return resolved, unresolved


def _parse_locomo_date(text: str) -> datetime | None:
    try:
        return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=timezone.utc)
    except ValueError:
        return None


def _parse_lme_date(text: str) -> datetime | None:
    cleaned = re.sub(r"\s*\([A-Za-z]+\)\s*", " ", text).strip()
    for fmt in ("%Y/%m/%d %H:%M", "%Y/%m/%d"):
        try:
            return datetime.strptime(cleaned, fmt).replace(tzinfo=timezone.utc)
        except ValueError:
            continue
    return None


def load_locomo(path: str | Path) -> EvalDataset:
    """Load LoCoMo's ``locomo10.json``.

    Speaker A's turns become ``user`` messages and speaker B's ``assistant`` messages;
    a shared photo adds ``[shares <caption>]`` to the text. Turn timestamps are the
    session's ``session_<n>_date_time``. Malformed evidence ids are repaired with
    :func:`repair_locomo_evidence`; the rest are counted in ``unresolved`` (never raises
    for them).

    Raises:
        OSError: the file cannot be read.
        ValueError: the file is not LoCoMo-shaped JSON.
    """
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, list) or not all(isinstance(x, dict) and "conversation" in x for x in data):
        raise ValueError(f"{path}: not a LoCoMo file (expected a list of samples with 'conversation')")
    dataset = EvalDataset(name="locomo", conversations=[])
    for sample in data:
        conv: dict[str, Any] = sample["conversation"]
        cid = str(sample.get("sample_id", f"conv-{len(dataset.conversations)}"))
        speaker_a = conv.get("speaker_a")
        sessions = sorted(
            (int(m.group(1)), key) for key in conv if (m := re.fullmatch(r"session_(\d+)", key))
        )
        turns: list[EvalTurn] = []
        for number, key in sessions:
            stamp = _parse_locomo_date(str(conv.get(f"{key}_date_time", "")))
            for turn in conv[key] or []:
                text = f"{turn['speaker']}: {turn.get('text', '')}"
                if turn.get("blip_caption"):
                    text += f" [shares {turn['blip_caption']}]"
                role = "user" if turn["speaker"] == speaker_a else "assistant"
                turns.append(EvalTurn(str(turn["dia_id"]), role, str(turn["speaker"]), text, stamp, number, "user_chat"))
        known = {t.id for t in turns}
        questions: list[EvalQuestion] = []
        for n, qa in enumerate(sample.get("qa", [])):
            qid = f"{cid}#q{n}"
            evidence: list[str] = []
            bad: list[str] = []
            for raw in qa.get("evidence", []):
                ok, missing = repair_locomo_evidence(str(raw), known)
                if ok and (missing or ok != [raw]):
                    dataset.repaired.append((qid, str(raw), tuple(ok)))
                evidence.extend(ok)
                bad.extend(missing)
                dataset.unresolved.extend((qid, m) for m in missing)
            category = int(qa.get("category", 0))
            answer = qa.get("answer", qa.get("adversarial_answer", ""))
            questions.append(EvalQuestion(
                id=qid, question=str(qa["question"]), answer=str(answer),
                category=LOCOMO_CATEGORIES.get(category, str(category)),
                evidence=tuple(dict.fromkeys(evidence)), unresolved=tuple(bad), conversation_id=cid,
            ))
        dataset.conversations.append(EvalConversation(cid, turns, questions))
    return dataset


def _lme_files(path: Path) -> list[Path]:
    if path.is_dir():
        return sorted(path.glob("*.json"))
    return [path]


def load_longmemeval(path: str | Path) -> EvalDataset:
    """Load LongMemEval questions: a directory of per-question JSON files, or one file
    (one question object or a list of them).

    Each question has its own haystack, so each becomes one :class:`EvalConversation`
    (id = ``question_id``). Turn ids are ``S<session>:<turn>`` counted from 1; turns with
    ``has_answer: true`` are the evidence; timestamps come from ``haystack_dates``.

    Raises:
        OSError: a file cannot be read.
        ValueError: a file is not LongMemEval-shaped JSON.
    """
    dataset = EvalDataset(name="longmemeval", conversations=[])
    items: list[dict[str, Any]] = []
    for file in _lme_files(Path(path)):
        data = json.loads(file.read_text(encoding="utf-8"))
        items.extend(data if isinstance(data, list) else [data])
    for item in items:
        if not isinstance(item, dict) or "haystack_sessions" not in item:
            raise ValueError(f"{path}: not a LongMemEval question (no 'haystack_sessions')")
        qid = str(item["question_id"])
        dates = item.get("haystack_dates") or []
        turns: list[EvalTurn] = []
        evidence: list[str] = []
        for s, session in enumerate(item["haystack_sessions"], start=1):
            stamp = _parse_lme_date(str(dates[s - 1])) if s - 1 < len(dates) else None
            for t, turn in enumerate(session, start=1):
                tid = f"S{s}:{t}"
                role = "assistant" if turn.get("role") == "assistant" else "user"
                turns.append(EvalTurn(tid, role, role, str(turn.get("content", "")), stamp, s,
                                      "assistant_reasoning" if role == "assistant" else "user_chat"))
                if turn.get("has_answer"):
                    evidence.append(tid)
        question = EvalQuestion(
            id=qid, question=str(item["question"]), answer=str(item.get("answer", "")),
            category=str(item.get("question_type", "unknown")) + ("-abs" if qid.endswith("_abs") else ""),
            evidence=tuple(evidence), conversation_id=qid,
        )
        dataset.conversations.append(EvalConversation(qid, turns, [question]))
    return dataset


def load_dataset(name: str, path: str | Path) -> EvalDataset:
    """Load ``locomo`` or ``longmemeval`` from ``path``. Raises ``ValueError`` for other names."""
    if name == "locomo":
        return load_locomo(path)
    if name == "longmemeval":
        return load_longmemeval(path)
    raise ValueError(f"unknown data set {name!r}; expected 'locomo' or 'longmemeval'")


def select_questions(dataset: EvalDataset, ids: Iterable[str] | None, limit: int | None) -> None:
    """Keep only the questions whose id is in ``ids`` (when given), then the first
    ``limit`` questions (when given); conversations left without questions are dropped.
    Modifies ``dataset`` in place."""
    wanted = set(ids) if ids else None
    left = limit
    kept: list[EvalConversation] = []
    for conv in dataset.conversations:
        qs = [q for q in conv.questions if wanted is None or q.id in wanted or q.id.split("#")[-1] in wanted]
        if left is not None:
            qs = qs[: max(left, 0)]
            left -= len(qs)
        if qs:
            kept.append(EvalConversation(conv.id, conv.turns, qs))
    dataset.conversations = kept

"""Sentence and value extraction for the offline summarizer (SPEC §7): the exact values a
summary must keep (:func:`extract_values`: dates, ids, paths, numbers with a unit, label or
name), prose split into sentences (``sentencex``; code blocks, tabular rows and list markers
left out), tool results read as lines or ``key: value`` facts, the priority of a sentence,
newest-first selection under a token estimate, and the "left out for space" note. Pure text
functions; :class:`~relevance_memory.summary._summary.OfflineSummarizer` builds on them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import sentencex

from .._memo import TextMemo
from .._models import is_blob
from .._text import ERROR_RE, has_constraint, identifiers
from .._tokenizer import unshared

# --------------------------------------------------------------------------- offline
_NUMBER_RE = re.compile(r"\d")
_DATE_TIME_RE = re.compile(
    r"\d{4}-\d{1,2}-\d{1,2}(?:[T ]\d{1,2}:\d{2}(?::\d{2})?)?|\d{1,2}/\d{1,2}(?:/\d{2,4})?|\d{1,2}:\d{2}(?:\s*[ap]\.?m\.?)?|\b\d{1,2}\s*[ap]\.?m\.?(?![a-z])"
    r"|(?:上午|下午|晚上|中午|早上|凌晨|傍晚)?\s*\d{1,2}\s*点(?:\s*\d{1,2}\s*分|半)?"
    r"|\d{1,2}\s*月\s*\d{1,2}\s*[日号]|周[一二三四五六日天]|星期[一二三四五六日天]"
    r"|\b(?:Mon|Tues|Wednes|Thurs|Fri|Satur|Sun)day\b"
    r"|\b(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]*\.? \d{1,2}(?:st|nd|rd|th)?(?:,? \d{4})?\b",
    re.IGNORECASE,
)
_NAME_RE = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][a-z]{2,}\b")
_NUM = r"\d[\d,]*(?:\.\d+)?"
_UNITS = (
    r"%|percent|ms|sec(?:ond)?s?|min(?:ute)?s?|hours?|hrs?|days?|nights?|weeks?|months?|years?|"
    r"[kKMGT]i?B|bytes?|tokens?|rows?|lines?|items?|files?|tests?|errors?|failures?|passed|failed|"
    r"bags?|seats?|passengers?|people|persons?|adults?|children|guests?|rooms?|tickets?|pieces?|"
    r"kg|lbs?|km|miles?|cm|mm|°[CF]|degrees?|USD|EUR|GBP|CNY|RMB|JPY|CHF|dollars?|euros?|yuan|"
    r"元|块|个|人|天|晚|小时|分钟|岁|公斤|公里|件|张|次|位|间|份"
)
_UNIT_VALUE_RE = re.compile(
    rf"[$€£¥]\s?{_NUM}(?:\s?(?:k|K|M|million|billion))?(?![\w])|(?<![\w.]){_NUM}\s?(?:{_UNITS})(?![A-Za-z])"
)
_LABELLED_RE = re.compile(rf"(?<![\w.])([A-Za-z_][\w-]{{1,30}})\"?\s*(?:=|:)\s*\"?({_NUM})(?![\w.:/-])")
_NAMED_NUMBER_RE = re.compile(r"(?<![\w#])((?:[A-Z][a-z]+\s|No\.\s?|#)\d[\d-]*)(?![\w.:/-])")
_NOT_NAMES = frozenset(
    ["The", "This", "That", "These", "Those", "There", "Here", "In", "On", "At", "For", "From", "To", "And", "But", "Or", "If", "When", "While", "After", "Before", "Step", "Line", "Lines", "Page", "Item", "Part", "Option", "Case", "Run", "Try", "Test", "Version", "Python", "Section", "Chapter", "Figure", "Table", "Row", "Column"]
)
_BARE_NUMBER_RE = re.compile(rf"(?<![\w.-]){_NUM}(?![\w.:/-])")
_ABBREVIATION_RE = re.compile(r"(?:[a-zA-Z]\.){1,3}[a-zA-Z]?")
_WORD_PAIR_RE = re.compile(r"[a-z]{1,12}/[a-z]{1,12}")
_LS_ROW_RE = re.compile(r"^\s*[dlcbps-][rwxsStT-]{9}[.+@]?\s")
_FENCE_RE = re.compile(r"```[^\n]*\n.*?(?:```|\Z)", re.DOTALL)
_MARKER_RE = re.compile(
    r"^\s*(?:(?:#{1,6}|[-*•+>]|\d{1,3}[.)]|[a-zA-Z][.)]|\(\d{1,3}\))\s+|(?:THOUGHT|THINKING|Thought|Reasoning)\s*:\s*)+"
)
_WORD_RE = re.compile(r"[^\W\d_]{2,}")
_CJK_CHAR_RE = re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")


_WIDE_RE = re.compile("[\u1100-\u115f\u2e80-\u303e\u3041-\u33ff\u3400-\u4dbf\u4e00-\u9fff\ua000-\ua4cf\uac00-\ud7a3\uf900-\ufaff\ufe30-\ufe4f\uff00-\uff60\uffe0-\uffe6]")


def _estimate_tokens(text: str) -> int:
    """Cheap upper-ish token estimate: one per wide (CJK) character, one per 3 others."""
    cjk = len(_WIDE_RE.findall(text))
    return cjk + (len(text) - cjk + 2) // 3


def _is_table_row(line: str) -> bool:
    """A row of tabular tool output (``ls -l``, ``ps``, ``df``, aligned columns): its fields are
    columns, not facts a reader needs."""
    known = _TABLE_ROWS.get(line)
    if known is not None:
        return known
    if _LS_ROW_RE.match(line):
        return _TABLE_ROWS.put(line, True)
    fields = line.split()
    if len(fields) < 5:
        return _TABLE_ROWS.put(line, False)
    isdigit, isalpha = str.isdigit, str.isalpha  # map over a field's characters: no generator per field
    numeric = sum(1 for f in fields if any(map(isdigit, f)) and not any(map(isalpha, f.strip("%"))))
    return _TABLE_ROWS.put(line, numeric >= 3 and numeric * 2 >= len(fields) - 1)


_TABLE_ROWS: TextMemo[bool] = TextMemo(longest=500, max_chars=2_000_000)
"""Memo of :func:`_is_table_row` by line (tool output repeats its lines across messages)."""


def extract_values(text: str, *, bare_numbers: bool = False) -> list[str]:
    """Exact values a reader of a summary needs, in order of appearance, unique (pure;
    the same text gives the same list in every process).

    Kept: dates and times; ids (letters mixed with digits: ``ORD-1001``, ``HAT136``,
    ``mia_li_3668``); paths and file names; numbers with a unit or currency (``50,000 EUR``,
    ``$1,250``, ``3 bags``, ``15%``), with a label (``total: 41872``, ``price=450``) or a name
    (``Room 418``, ``#123``); code names (``snake_case``, ``CamelCase``, ``dotted.name``).
    Left out: bare numbers (``4096``, ``184``) unless ``bare_numbers`` (a short tool result
    whose number *is* the fact), and every column of tabular output (``ls -l`` rows).
    """
    return list(kept_values(text, bare_numbers=bare_numbers))


def kept_values(text: str, *, bare_numbers: bool = False) -> tuple[str, ...]:
    """:func:`extract_values` as the tuple its memo keeps (never copied: the summarizer's memo of
    a message's lines shares it, issue 24)."""
    known = _VALUES.get(text, bare_numbers)
    if known is not None:
        return known
    found: dict[str, None] = {}
    lines = [line for line in text.splitlines() if not _is_table_row(line)]
    clean = "\n".join(lines)
    spans: list[tuple[int, str]] = []
    for match in _DATE_TIME_RE.finditer(clean):
        spans.append((match.start(), " ".join(match.group(0).split())))
    for match in _UNIT_VALUE_RE.finditer(clean):
        spans.append((match.start(), " ".join(match.group(0).split())))
    for match in _LABELLED_RE.finditer(clean):
        spans.append((match.start(), f"{match.group(1)}: {match.group(2)}"))
    for match in _NAMED_NUMBER_RE.finditer(clean):
        if match.group(1).split()[0] not in _NOT_NAMES and not _DATE_TIME_RE.fullmatch(match.group(1)):
            spans.append((match.start(), match.group(1)))
    for ident in identifiers(clean):
        plain = ident.replace(",", "").replace(".", "")
        if plain.isdigit() or (_NUMBER_RE.search(ident) and not any(ch.isalpha() for ch in ident) and "/" not in ident):
            continue  # a bare number (or 1.2.3): only kept with a unit, label or name above
        if _ABBREVIATION_RE.fullmatch(ident) or _WORD_PAIR_RE.fullmatch(ident):
            continue  # "e.g", "i.e"; "queue/stack", "and/or": prose, not a name or a path
        spans.append((clean.find(ident), ident))
    if bare_numbers:
        for match in _BARE_NUMBER_RE.finditer(clean):
            if len(match.group(0)) >= 2:  # "0"/"1" exit codes and counts say little alone
                spans.append((match.start(), match.group(0)))
    # a total order: ``identifiers`` is a set, so its iteration order changes with
    # PYTHONHASHSEED; at one position the longest value goes first (it holds the others)
    for _, value in sorted(spans, key=lambda s: (s[0], -len(s[1]), s[1])):
        if value and value not in found and not any(value in v for v in found):
            found[value] = None
    return _VALUES.put(text, tuple(found), bare_numbers)


_VALUES: TextMemo[tuple[str, ...]] = TextMemo()
"""Memo of :func:`extract_values` by text (the summarizer and the excerpts ask about the same
sentences again and again: 60,000 calls on 14,000 distinct texts in a 30,000-message build)."""


def _json_facts(text: str) -> list[str]:
    """``key: value`` facts of a JSON tool result: leaves that are ids, dates, numbers or short names."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return []
    facts: list[str] = []

    def walk(value: Any, key: str) -> None:
        if len(facts) >= 24:
            return
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, str(k))
        elif isinstance(value, list):
            for v in value[:12]:
                walk(v, key)
        elif isinstance(value, bool) or value is None:
            return
        elif isinstance(value, (int, float)):
            if key:
                facts.append(f"{key}: {value}")
        elif isinstance(value, str) and key and 0 < len(value) <= 60 and not is_blob(value):
            facts.append(f"{key}: {value}")

    walk(data, "")
    return list(dict.fromkeys(facts))


def _segment(text: str) -> list[str]:
    """Sentences of a prose line (``sentencex``, Wikimedia's rule-based segmenter; given a copy
    of a non-ASCII line, :func:`~relevance_memory._tokenizer.unshared`: a Rust reader keeps a
    UTF-8 copy inside the string it read, and a line may be a stored message's whole text)."""
    return [" ".join(s.split()) for s in sentencex.segment("en", unshared(text)) if s.strip()]


_BRACKETED_RE = re.compile(r"^[(（\[【][^)）\]】]{0,30}[)）\]】]$")


def _is_fragment(sentence: str) -> bool:
    """Too little text to stand alone ("1.", "Ah!", "`", "So:")."""
    return len(_WORD_RE.findall(sentence)) < 2 and len(_CJK_CHAR_RE.findall(sentence)) < 2


def _sentences(text: str) -> list[str]:
    """Prose sentences of ``text``: fenced code blocks and tabular rows left out, list and
    heading markers stripped (a line "1." alone joins the next one), each line segmented by
    ``sentencex``; fragments are glued to their neighbour or dropped; a short bracketed
    fragment such as "（第 3 轮）" stays with the sentence before it."""
    known = _SENTENCES.get(text)
    if known is not None:
        return list(known)
    out: list[str] = []
    carry = ""
    for raw_line in _FENCE_RE.sub("\n", text).splitlines():
        if _is_table_row(raw_line):
            continue
        line = _MARKER_RE.sub("", raw_line).strip()
        if not line or set(line) <= set("`*_-=#|:. "):
            continue
        for sentence in _segment(line):
            if out and _BRACKETED_RE.match(sentence):
                out[-1] += sentence
            elif _is_fragment(sentence):
                carry = f"{carry} {sentence}".strip() if kept_values(sentence) else carry
            else:
                out.append(f"{carry} {sentence}".strip() if carry else sentence)
                carry = ""
    if carry and (kept_values(carry) or not _is_fragment(carry)):
        out.append(carry)
    return list(_SENTENCES.put(text, tuple(out)))


_SENTENCES: TextMemo[tuple[str, ...]] = TextMemo(longest=4_000)
"""Memo of :func:`_sentences` by text (segmenting is the costly part of reading prose, and
the same messages' texts are read by every compaction's summary and excerpts)."""


def _take_newest(entries: list[str], max_tokens: int, rank: Callable[[str], int] | None = None) -> list[str]:
    """The ``entries`` (later in the list = newer) that fit ``max_tokens`` (estimated), higher
    ``rank`` first and newest first within a rank, returned in chronological order."""
    chosen: list[int] = []
    used = 0
    by_rank = sorted(range(len(entries)), key=lambda i: (-(rank(entries[i]) if rank else 0), -i))
    for index in by_rank:
        cost = _estimate_tokens(entries[index]) + 1
        if used + cost > max_tokens:
            continue
        chosen.append(index)
        used += cost
    return [entries[i] for i in sorted(chosen)]


def _value_rank(value: str) -> int:
    """2 for a date, id, path or number (the values SPEC §7 wants to survive), 1 for a code name."""
    return 2 if _NUMBER_RE.search(value) or "/" in value else 1


_QUESTION_RE = re.compile(
    r"[?？]|[吗呢][\s。.!！]*$|^\W*(?:what|how|which|why|when|where|who|whom|whose|"
    r"(?:can|could|would|will|should|do|does|did|is|are) (?:you|i|we|it|they|he|she|there))\b",
    re.IGNORECASE,
)


def is_question(sentence: str) -> bool:
    """Whether a sentence asks rather than states: it holds a question mark (``?``, ``？``; a
    bracketed tail such as "… Portuguese?(question 93)" included), or opens with an interrogative
    ("how do I …", "can you …") though the mark is missing. What a user asks is answered in the
    turn after it; what they state (a name, a number, a decision, a constraint) holds until
    they restate it (issue 23)."""
    return _QUESTION_RE.search(sentence) is not None


_LEAD_IN_RE = re.compile(r"^\W*[^\W\d_][\w'’ -]{0,30}?:\s+(?=\S)")


def fact_clause(sentence: str) -> str:
    """The part of a user's statement that holds the fact, for a summary line (issue 23: a
    dozen facts fit the user's share of a small summary): a short lead-in label with no value
    ("For the record: …", "Decision made: …", "Hard constraint: …", up to four words before a
    colon) is left out, and of clauses split by ``;`` only those that hold a value, a name or a
    constraint are kept (the first clause when none does), each as written, so
    :func:`~relevance_memory.summary._pyramid.mark_held` finds them in the message. Pure."""
    text = sentence
    lead = _LEAD_IN_RE.match(text)
    if lead and len(lead.group(0).split()) <= 4 and len(text[lead.end():].split()) >= 3 and not _NUMBER_RE.search(lead.group(0)):
        text = text[lead.end():]
    clauses = [c.strip() for c in text.split(";") if c.strip()]
    if len(clauses) > 1:
        keep = [c for c in clauses if kept_values(c) or _NAME_RE.search(c) or has_constraint(c)]
        text = "; ".join(keep or clauses[:1])
    return text or sentence


def _sentence_priority(sentence: str, role: str = "user") -> int:
    """Why an extractive summary keeps a sentence: 4 a constraint stated by the user or the
    system (an assistant's "we must …" is reasoning, a tool's is code or prose), 3 an exact value (date, id, path, number with a
    unit/label/name), 2 a code name only, 1 a capitalised name, 0 nothing (dropped)."""
    if role in ("user", "system", "developer") and has_constraint(sentence):
        return 4
    values = kept_values(sentence)
    if any(_NUMBER_RE.search(v) or "/" in v or "." in v.strip(".") for v in values):
        return 3
    if values:
        return 2
    if _NAME_RE.search(sentence):
        return 1
    return 0



def _tool_lines(text: str, max_chars: int) -> list[tuple[int, str, tuple[str, ...]]]:
    """What a tool result says, as (priority, text, values): a short result whole; a JSON
    result as its ``key: value`` facts; else its error lines and a first line that holds a
    value. Tool output is read by lines, never split into "sentences". The values are the
    tuples their memo keeps (:func:`kept_values`; issue 24: the summarizer's memo shares them)."""
    stripped = text.strip()
    if not stripped:
        return []
    facts = _json_facts(stripped) if stripped[:1] in "{[" else []
    if facts:
        return [(3, "; ".join(facts[:12]), tuple(facts))]
    lines = [line.strip() for line in stripped.splitlines() if line.strip()]
    if len(stripped) <= 200 and len(lines) <= 3:
        joined = " ".join(" ".join(line.split()) for line in lines)
        values = kept_values(stripped, bare_numbers=True)
        return [(3 if values else 2, joined, values)]
    out: list[tuple[int, str, tuple[str, ...]]] = []
    errors = [line for line in lines if ERROR_RE.search(line) and not _is_table_row(line)]
    for line in dict.fromkeys([*errors[:1], *errors[-1:]]):
        out.append((3, line[:max_chars], kept_values(line)))
    first = lines[0]
    if not errors and not _is_table_row(first):
        values = kept_values(first)
        if values:
            out.append((1, first[:max_chars], values))
    return out


_NOTE_RE = re.compile(r"^\((\d+) (?:more|older) sentence\(s\) with values left out for space\.\)$")


def _left_out_note(count: int) -> str:
    return f"({count} older sentence(s) with values left out for space.)"

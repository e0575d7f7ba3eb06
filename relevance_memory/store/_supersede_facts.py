"""Fact statements for supersede detection (SPEC §10, issue 11): first-person sentences that
state a value (counts, amounts, times, dates, levels, attributes, preferences), their values
normalised ("five" = 5, "$1,200" = 1200 USD, "7 pm" = 19:00), the rule deciding that a newer
statement restates an older one with a new value, and the cue that a goal asks about an
earlier value. Pure text analysis, no state; :class:`~relevance_memory.store._supersede.SupersedeDetector`
keeps the live facts (``fact`` links).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from .._text import STOPWORDS, stem

_MAX_TEXT_CHARS = 4_000
"""Characters of a chat message read for facts (facts are stated in sentences, not in pastes)."""
FACT_MIN_SHARED = 3
"""Words (besides the value) two sentences must share to state the same fact."""
FACT_MIN_SHARED_CUED = 2
"""The same when the newer sentence carries an explicit change cue ("update:", "now", "actually" …)."""
FACT_MIN_OVERLAP = 0.1
"""Share of the shorter sentence's words the two must share."""


# --------------------------------------------------------------------------- facts
_NUMBER_WORDS = {
    "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
    "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15, "sixteen": 16,
    "seventeen": 17, "eighteen": 18, "nineteen": 19, "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50,
    "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90, "hundred": 100, "dozen": 12,
}
_ORDINAL_WORDS = {  # "first" / "second" are too common in other senses to be values
    "third": 3, "fourth": 4, "fifth": 5, "sixth": 6, "seventh": 7, "eighth": 8,
    "ninth": 9, "tenth": 10, "eleventh": 11, "twelfth": 12,
}
_MONTHS = {
    m: n
    for n, names in enumerate(
        [("january", "jan"), ("february", "feb"), ("march", "mar"), ("april", "apr"), ("may",), ("june", "jun"),
         ("july", "jul"), ("august", "aug"), ("september", "sep", "sept"), ("october", "oct"),
         ("november", "nov"), ("december", "dec")],
        start=1,
    )
    for m in names
}
_LEVELS = ("bronze", "silver", "gold", "platinum", "diamond", "beginner", "intermediate", "advanced", "expert")

_VALUE_RE = re.compile(
    r"(?P<money>[$€£]\s?\d[\d,]*(?:\.\d+)?\s?(?:k|K|million|m\b)?|\d[\d,]*(?:\.\d+)?\s?(?:dollars|usd|euros?|pounds)\b)"
    r"|(?P<time>\b\d{1,2}(?::\d{2})?\s?(?:am|pm|a\.m\.|p\.m\.)|\b\d{1,2}:\d{2}\b)"
    r"|(?P<date>\b(?:" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?\s+\d{1,2}(?:st|nd|rd|th)?\b"
    r"|\b\d{1,2}(?:st|nd|rd|th)?\s+(?:of\s+)?(?:" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\b"
    r"|\b\d{1,2}/\d{1,2}(?:/\d{2,4})?\b|\b\d{4}-\d{2}-\d{2}\b)"
    r"|(?P<percent>\b\d+(?:\.\d+)?\s?%|\b\d+(?:\.\d+)?\s(?:percent)\b)"
    r"|(?P<ordinal>\b\d+(?:st|nd|rd|th)\b|\b(?:" + "|".join(_ORDINAL_WORDS) + r")\b)"
    r"|(?P<count>\b\d[\d,]*(?:\.\d+)?\b|\b(?:" + "|".join(_NUMBER_WORDS) + r")\b)"
    r"|(?P<level>\b(?:" + "|".join(_LEVELS) + r")\b)",
    re.IGNORECASE,
)
_FIRST_PERSON = re.compile(r"\b(?:i|i'm|i've|i'd|i'll|my|me|mine|we|we're|we've|our|ours)\b", re.IGNORECASE)
_CHANGE_CUE = re.compile(
    r"\b(?:update[sd]?|updating|correction|correct myself|actually|now|currently|anymore|no longer|not anymore|"
    r"switched|changed?|moved|instead|these days|lately|recently|just (?:got|reached|hit|finished|bought))\b",
    re.IGNORECASE,
)
_STATE_CUE = re.compile(
    r"\b(?:now|currently|so far|since|already|at this point|in total|a total of|anymore|no longer|actually|"
    r"update[sd]?|correction|correct myself|these days|lately|still|up to|at the moment|right now|usually|"
    r"i've|i have|we've|we have|i'm|i am|we're|i now|i currently|i usually|i normally|i own|i lead|i manage|"
    r"i need|i live|i work|my (?:\w+ ){0,3}(?:is|are|has|have)\b)",
    re.IGNORECASE,
)
"""A sentence states a *state* (a count so far, a current level, a standing value), not a
one-off event ("I sold 12 jars on Saturday"): only such a sentence supersedes an older
value. Events of the same kind add up; they do not replace each other."""
def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_UNITS = _words(
    "hour hours minute minutes min mins second seconds mile miles km kilometer kilometers meter meters gallon "
    "gallons liter liters pound pounds lb lbs kg kilo kilos ounce ounces oz inch inches foot feet cm mm "
    "dollar dollars buck bucks cent cents euro euros percent times piece pieces"
)
_HISTORY_CUE = re.compile(
    r"\b(?:initially|originally|at first|first time|previous(?:ly)?|before|earlier|used to|formerly|at the start|"
    r"when i (?:just )?(?:started|began)|in the beginning|changed?|how has|how did .* change|over time|history|"
    r"old value|was it|did i (?:use|have|used)|last time)\b|之前|以前|原来|最初|起初|一开始|上次",
    re.IGNORECASE,
)
_SENTENCE = re.compile(r"(?<=[.!?;。！？；])\s+|\n+")
_WORD = re.compile(r"[a-z][a-z0-9'&]*")
_FACT_STOP = STOPWORDS | _words(
    "i'm i've i'd i'll we're we've im ive really actually just now currently lately recently already so far "
    "way thing things lot bit little much many time times day days week weeks month months year years "
    "today yesterday tomorrow get got getting go going went gone make made think know like want need "
    "also still even well good great new old one ones since by way speaking anyway oh hey around over past "
    "about under nearly almost total least most only more less each every per another other few several "
    "some any all both either many much last next ago far already total"
)


def asks_for_history(goal_text: str) -> bool:
    """Whether a goal asks about an earlier value ("initially", "before", "used to",
    "previously", "how has it changed", 之前 …) — then superseded messages are asked for."""
    return _HISTORY_CUE.search(goal_text) is not None


@dataclass(frozen=True, slots=True)
class FactStatement:
    """One first-person sentence stating a value.

    Attributes:
        sentence: the sentence (trimmed).
        kind: value kind (``count`` (ordinals too), ``money``, ``time``, ``date``, ``percent``,
            ``year``, ``level``).
        value: normalised value (``"5"``, ``"1200 USD"``, ``"19:00"``).
        raw: the value as written.
        anchor: stemmed words beside the value (its attribute: "point", "baseball").
        words: stemmed content words of the sentence, values excluded.
        cued: the sentence carries a change cue ("update", "now", "actually" …).
        state: the sentence states a standing value, not a one-off event (:data:`_STATE_CUE`).
        label: the attribute as written ("autographed baseballs", "favorite color").
    """

    sentence: str
    kind: str
    value: str
    raw: str
    anchor: frozenset[str]
    words: frozenset[str]
    cued: bool
    state: bool = True
    label: str = ""


def _norm_value(kind: str, raw: str) -> str:
    text = raw.lower().replace(",", "").strip()
    if kind == "count":
        return str(_NUMBER_WORDS.get(text, text))
    if kind == "ordinal":
        if text in _ORDINAL_WORDS:
            return str(_ORDINAL_WORDS[text])
        return re.sub(r"(st|nd|rd|th)$", "", text)
    if kind == "money":
        number = re.sub(r"[^\d.]", "", text.split()[0] if text[0].isdigit() else text)
        mult = 1000 if re.search(r"\dk\b|k$", text) else 1_000_000 if "million" in text or text.endswith("m") else 1
        try:
            amount = float(number) * mult
        except ValueError:
            return text
        currency = "EUR" if ("€" in text or "euro" in text) else "GBP" if ("£" in text or "pound" in text) else "USD"
        return f"{amount:g} {currency}"
    if kind == "time":
        m = re.match(r"(\d{1,2})(?::(\d{2}))?\s?(am|pm|a\.m\.|p\.m\.)?", text)
        if not m:
            return text
        hour, minute = int(m.group(1)), int(m.group(2) or 0)
        if m.group(3) and m.group(3).startswith("p") and hour < 12:
            hour += 12
        if m.group(3) and m.group(3).startswith("a") and hour == 12:
            hour = 0
        return f"{hour:02d}:{minute:02d}"
    if kind == "date":
        words = re.findall(r"[a-z]+|\d+", text)
        month = next((_MONTHS[w] for w in words if w in _MONTHS), None)
        digits = [int(w) for w in words if w.isdigit()]
        if month is not None and digits:
            return f"{month:02d}-{digits[0]:02d}"
        return "-".join(str(d) for d in digits)
    if kind == "percent":
        return re.sub(r"[^\d.]", "", text) + "%"
    return text


def _stems(words: Iterable[str]) -> list[str]:
    return [stem(w) for w in words if w not in _FACT_STOP and len(w) > 1 and not w.isdigit()]


_ATTRIBUTE_RE = re.compile(
    r"\bmy ((?:[a-z][a-z'&-]* ){0,3}?[a-z][a-z'&-]*?)(?:'s name)? (?:is|are|has become|changed to) "
    r"(?:now |actually |still |currently |called |named |officially )*"
    r"([a-z0-9$€£][^.,;!?()]{0,60})"
)
_LOCATION_RE = re.compile(
    r"\b(?:i|we) (?:now |currently |still |actually |just )*(live|work|moved|relocated|stay)(?: now)? (?:in|at|to|for) "
    r"([a-z0-9][^.,;!?()]{0,40})"
)
_PREFERENCE_RE = re.compile(
    r"\b(?:i|we) (?:really |absolutely |still |now |actually |honestly |totally )*"
    r"(?:(?P<neg>do not like|don't like|do not enjoy|don't enjoy|no longer like|no longer enjoy|can't stand|"
    r"cannot stand|hate|dislike|detest|don't eat|do not eat|stopped eating|stopped drinking|gave up|quit)"
    r"|(?P<pos>like|love|enjoy|prefer|adore|am into|am a fan of|am obsessed with|'m obsessed with|'m into))"
    r" (?:to |eating |drinking |having |using |playing )?([a-z][^.,;!?()]{0,40})"
)
_BAD_VALUE_START = re.compile(r"^(?:to|that|if|because|a little|a bit|not sure|the same|so|very|really|quite|too|just)\b")
_VALUE_WORDS = 5


_VALUE_END = _words(
    "now anymore currently these lately last since please and but because which who when where so though although "
    "for with from as at in on by this that these"
)


def _value_stems(text: str) -> tuple[str, frozenset[str]]:
    words: list[str] = []
    for w in _WORD.findall(text):
        if (words and w in _VALUE_END) or len(words) == _VALUE_WORDS:
            break
        words.append(w)
    content = [w for w in words if w not in _FACT_STOP or w.isdigit()]
    return " ".join(words), frozenset(stem(w) for w in content)


def _attribute_statements(sentence: str, lowered: str, words: frozenset[str], cued: bool) -> list[FactStatement]:
    out: list[FactStatement] = []
    for m in _ATTRIBUTE_RE.finditer(lowered):
        attr_words = [w for w in _WORD.findall(m.group(1)) if w not in STOPWORDS]
        value_text = m.group(2).strip()
        if not attr_words or _BAD_VALUE_START.match(value_text):
            continue
        raw, stems = _value_stems(value_text)
        if not stems:
            continue
        anchor = frozenset(stem(w) for w in attr_words)
        out.append(FactStatement(sentence, "attribute", " ".join(sorted(stems)), raw, anchor, words, cued,
                                 label=" ".join(attr_words)))
    for m in _LOCATION_RE.finditer(lowered):
        raw, stems = _value_stems(m.group(2))
        if stems:
            verb = "live" if m.group(1) in ("live", "moved", "relocated", "stay") else "work"
            out.append(FactStatement(sentence, "attribute", " ".join(sorted(stems)), raw, frozenset({verb}), words, cued,
                                     label=f"{verb}s in"))
    for m in _PREFERENCE_RE.finditer(lowered):
        raw, stems = _value_stems(m.group(3))
        if not stems or _BAD_VALUE_START.match(m.group(3)):
            continue
        polarity = "dislikes" if m.group("neg") else "prefers" if m.group("pos") == "prefer" else "likes"
        value = f"prefers {' '.join(sorted(stems))}" if polarity == "prefers" else polarity
        head = frozenset({stem(raw.split()[-1])}) if polarity == "prefers" else stems
        out.append(FactStatement(sentence, "preference", value, f"{polarity} {raw}", head, words, cued,
                                 label=raw if polarity != "prefers" else raw.split()[-1]))
    return out


def fact_statements(text: str) -> list[FactStatement]:
    """First-person sentences of ``text`` that state a value, one entry per value.

    - Quantities (counts, amounts, times, dates, percentages, years, levels): the value's
      anchor is the content words right after it (up to two) and the one right before it
      ("15 autographed baseballs", "page 220", "score … 132 points").
    - Attributes: "my <attribute> is <value>" ("my name is Sam", "my favourite colour is
      green"), "I live / work / moved in|at|to <place>": the anchor is the attribute.
    - Preferences: "I like / love / prefer / enjoy <object>" and "I don't like / hate /
      no longer eat <object>": the anchor is the object, the value the polarity.

    Sentences that are questions are skipped (asking is not stating). Never raises.
    """
    out: list[FactStatement] = []
    for sentence in _SENTENCE.split(text[:_MAX_TEXT_CHARS]):
        sentence = sentence.strip()
        if len(sentence) < 8 or sentence.endswith("?") or not _FIRST_PERSON.search(sentence):
            continue
        lowered = sentence.lower().replace("’", "'")
        matches = list(_VALUE_RE.finditer(lowered))
        spans = [(m.start(), m.end()) for m in matches]
        words_all = [(w.start(), w.group()) for w in _WORD.finditer(lowered)]
        content = [
            (pos, w) for pos, w in words_all
            if not any(a <= pos < b for a, b in spans) and w not in _FACT_STOP and len(w) > 1
        ]
        words = frozenset(stem(w) for _, w in content)
        cued = _CHANGE_CUE.search(lowered) is not None
        state = _STATE_CUE.search(lowered) is not None
        for m in matches:
            kind = m.lastgroup or "count"
            raw = m.group().strip()
            value = _norm_value(kind, raw)
            if kind == "ordinal":  # "my 5th project" restates "4 projects"
                kind = "count"
            if kind == "count" and raw.isdigit() and len(raw) == 4 and raw.startswith(("19", "20")):
                kind = "year"
            after = [w for pos, w in content if pos >= m.end() and w not in _UNITS][:2]
            before = [w for pos, w in content if pos < m.start() and w not in _UNITS][-1:]
            anchor = frozenset(stem(w) for w in (*after, *before))
            if not anchor:
                continue
            label = " ".join((*before, *after))
            out.append(FactStatement(sentence, kind, value, raw, anchor, words, cued, state, label))
        out.extend(_attribute_statements(sentence, lowered, words, cued))
    return out


def _restates(older: FactStatement, newer: FactStatement) -> bool:
    """Whether ``newer`` states ``older``'s fact (same attribute, enough shared words)
    with a different value of the same kind."""
    if older.kind != newer.kind or older.value == newer.value or older.sentence == newer.sentence:
        return False
    if older.kind == "attribute":  # the attribute is named: the same words, another value
        return older.anchor == newer.anchor and not (set(newer.value.split()) <= set(older.value.split()))
    if older.kind == "preference":  # the same object, the other polarity (or another preferred kind of it)
        if older.value.startswith("prefers") != newer.value.startswith("prefers"):
            return False
        shared = len(older.anchor & newer.anchor)
        return shared >= max(1, (min(len(older.anchor), len(newer.anchor)) + 1) // 2)
    if not newer.state:
        return False
    if not older.anchor & newer.anchor:
        return False
    shared = len(older.words & newer.words)
    need = FACT_MIN_SHARED_CUED if newer.cued else FACT_MIN_SHARED
    smaller = max(1, min(len(older.words), len(newer.words)))
    return shared >= need and shared / smaller >= FACT_MIN_OVERLAP

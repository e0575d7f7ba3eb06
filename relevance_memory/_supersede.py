"""Supersede detection (SPEC §10, issue 11): which older messages a newer one makes stale.

Pure and deterministic: it reads message text, roles and tool calls, never a clock, a
model or the network, and the same messages in the same order give the same links. It
is incremental — :class:`SupersedeDetector` sees each message once, on ingest, and keeps
bounded indexes — so a 100k-message history costs O(messages). Nothing is deleted: a
link only says *older* is superseded by *newer*, and why.

Three kinds of link:

``tool_call``
    the same tool called again with the same arguments (arguments compared as canonical
    JSON): the newer result supersedes every older result of that call that differs from
    it.
``resource``
    the same file read again (``cat F``, ``nl -ba F``, ``sed -n 'a,bp' F``, ``head -n N F``,
    ``cat F | head``, ``nl -ba F | sed -n 'a,bp'``, ``cd D && …``) or written whole
    (``cat <<'EOF' > F``): the newer view supersedes each older view of ``F`` whose line
    range it contains. A write's view is the assistant message carrying the content.
``fact``
    the same speaker restates a fact with a new value: two first-person sentences that
    share the value's attribute (the words beside it: "autographed baseballs",
    "highest score … points", "page") and enough other words, with a different value of
    the same kind (count, amount, time, date, ordinal, level), or an explicit change cue
    ("update:", "actually", "switched to", "no longer", "now") with a preference / state
    that differs. Values are normalised ("five" = 5, "$1,200" = 1200 USD, "7 pm" = 19:00).

An identical repeat — the same result, view or sentence again — adds nothing and deletes
nothing: no link is made, and both messages stay as they are.
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from collections import OrderedDict, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from ._models import Message, content_text
from ._text import STOPWORDS, is_error_output, stem

__all__ = [
    "FileView",
    "SupersedeDetector",
    "SupersedeItem",
    "SupersedeKind",
    "SupersedeLink",
    "asks_for_history",
    "canonical_arguments",
    "command_of",
    "detect_supersedes",
    "fact_statements",
    "file_views",
    "items_from_messages",
]

SupersedeKind = Literal["tool_call", "resource", "fact"]

_MAX_LIVE_PER_KEY = 64
"""Live (not yet superseded) entries kept per tool call, file or fact attribute (bounds memory)."""
_MAX_TEXT_CHARS = 4_000
"""Characters of a chat message read for facts (facts are stated in sentences, not in pastes)."""
_MAX_COMMAND_CHARS = 1_000
"""Characters of a shell command's first line parsed for file views (heredoc bodies are not parsed)."""
FACT_MIN_SHARED = 3
"""Words (besides the value) two sentences must share to state the same fact."""
FACT_MIN_SHARED_CUED = 2
"""The same when the newer sentence carries an explicit change cue ("update:", "now", "actually" …)."""
FACT_MIN_OVERLAP = 0.1
"""Share of the shorter sentence's words the two must share."""


@dataclass(frozen=True, slots=True)
class SupersedeItem:
    """What detection reads from one message (pure data; build it from a stored message).

    Attributes:
        id: message id.
        index: position in the store.
        step: the message's step.
        role: OpenAI role.
        text: plain content text.
        content_hash: content hash (equal hashes = identical repeat).
        speaker: who states facts (the ``name`` field, else the role).
        call: for a tool result, ``(tool name, arguments)`` of the call it answers.
        calls: for an assistant message, its tool calls as ``(name, arguments)``.
    """

    id: str
    index: int
    step: int
    role: str
    text: str
    content_hash: str = ""
    speaker: str = ""
    call: tuple[str, str] | None = None
    calls: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class SupersedeLink:
    """``older`` is superseded by ``newer`` (never deleted; see module docstring).

    Attributes:
        older: id of the superseded message.
        newer: id of the message that supersedes it.
        kind: ``tool_call``, ``resource`` or ``fact``.
        key: what was restated (``bash {"command": "ls"}``, ``file a/b.py lines 1–40``,
            ``"autographed baseball"``).
        reason: one line for the decision record.
        old_value: the superseded value (facts; empty otherwise).
        new_value: the value that replaces it.
        older_step, newer_step: steps of the two messages.
    """

    older: str
    newer: str
    kind: SupersedeKind
    key: str
    reason: str
    old_value: str = ""
    new_value: str = ""
    older_step: int = 0
    newer_step: int = 0


# --------------------------------------------------------------------------- tool calls
def canonical_arguments(arguments: str) -> str:
    """Tool-call arguments as canonical JSON (sorted keys, no spaces) when they parse,
    else the raw string stripped — so ``{"a":1, "b":2}`` equals ``{"b": 2, "a": 1}``."""
    try:
        return json.dumps(json.loads(arguments), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (ValueError, TypeError):
        return arguments.strip()


def command_of(arguments: str) -> str | None:
    """The shell command of a ``bash``-style tool call (``{"command": …}``, ``{"cmd": …}``)."""
    try:
        parsed = json.loads(arguments)
    except (ValueError, TypeError):
        return None
    if isinstance(parsed, Mapping):
        for key in ("command", "cmd", "script"):
            value = parsed.get(key)
            if isinstance(value, str):
                return value
    return None


# --------------------------------------------------------------------------- file views
@dataclass(frozen=True, slots=True)
class FileView:
    """A view of a file that a command shows or writes.

    Attributes:
        path: normalised path (``cd D && cat F`` → ``D/F``).
        start, end: 1-based line range shown, ``end`` ``None`` for "to the end".
        write: the command writes the whole file (its content is in the call).
    """

    path: str
    start: int = 1
    end: int | None = None
    write: bool = False

    def contains(self, other: FileView) -> bool:
        """Whether this view shows every line ``other`` shows (same path)."""
        if self.path != other.path or self.start > other.start:
            return False
        if self.end is None:
            return True
        return other.end is not None and other.end <= self.end

    @property
    def label(self) -> str:
        """``a/b.py`` (whole file) or ``a/b.py lines 10–40``."""
        if self.start == 1 and self.end is None:
            return self.path
        return f"{self.path} lines {self.start}–{self.end if self.end is not None else 'end'}"


_HEREDOC_WRITE = re.compile(
    r"^\s*cat\s+(?:<<-?\s*['\"]?\w+['\"]?\s*>\s*(?P<a>[^\s;&|<>]+)|>\s*(?P<b>[^\s;&|<>]+)\s*<<-?\s*['\"]?\w+['\"]?)\s*$"
)
_VIEW_START = re.compile(r"\s*(?:cd\s+\S+\s*(?:&&|;)\s*)*(?:cat|nl|sed|head)\s")
_SED_RANGE = re.compile(r"^(\d+)(?:,(\d+|\$))?p$")
_SEPARATORS = frozenset({"&&", ";", "||", "\n"})


def _norm_path(path: str, cwd: str) -> str | None:
    if not path or path.startswith("-") or any(c in path for c in "*?$`{}"):
        return None
    joined = path if path.startswith("/") or not cwd else posixpath.join(cwd, path)
    return posixpath.normpath(joined)


def _range_of(stage: list[str]) -> tuple[int, int | None] | None:
    """Line range a range filter (``sed -n 'a,bp'``, ``head -n N``) keeps; ``None`` if not one."""
    if not stage:
        return None
    if stage[0] == "sed" and len(stage) == 3 and stage[1] == "-n":
        m = _SED_RANGE.match(stage[2])
        if m:
            start = int(m.group(1))
            end = m.group(2)
            return start, (None if end == "$" else int(end) if end else start)
    if stage[0] == "head":
        args = stage[1:]
        if len(args) == 2 and args[0] == "-n" and args[1].isdigit():
            return 1, int(args[1])
        if len(args) == 1 and args[0].startswith("-") and args[0][1:].isdigit():
            return 1, int(args[0][1:])
        if len(args) == 1 and args[0].startswith("-n") and args[0][2:].isdigit():
            return 1, int(args[0][2:])
    return None


def _source_view(stage: list[str], cwd: str) -> FileView | None:
    """The file a pipeline's first stage shows, with its range (``None`` if not a view)."""
    if not stage:
        return None
    cmd, args = stage[0], stage[1:]
    files: list[str] = []
    start, end = 1, None
    if cmd == "cat":
        flags = [a for a in args if a.startswith("-")]
        if any(f not in ("-n", "-A", "-v", "-e", "-t") for f in flags):
            return None
        files = [a for a in args if not a.startswith("-")]
    elif cmd == "nl":
        files = [a for a in args if not a.startswith("-")]
    elif cmd == "sed":
        if len(args) != 3 or args[0] != "-n":
            return None
        m = _SED_RANGE.match(args[1])
        if not m:
            return None
        start = int(m.group(1))
        end = None if m.group(2) == "$" else int(m.group(2)) if m.group(2) else start
        files = [args[2]]
    elif cmd == "head":
        rng = _range_of(stage[:-1]) if len(stage) > 2 else (1, 10)
        if rng is None:
            return None
        start, end = rng
        files = [stage[-1]]
    else:
        return None
    if len(files) != 1:
        return None
    path = _norm_path(files[0], cwd)
    return FileView(path, start, end) if path else None


def file_views(command: str) -> list[FileView]:
    """Files a shell command shows (reads) or writes whole, with the lines shown.

    Recognised: ``cat F``, ``cat -n F``, ``nl [-ba] F``, ``sed -n 'a,bp' F``,
    ``head [-n N] F``, those piped into ``sed -n 'a,bp'`` or ``head -n N``,
    ``cd D && …`` (paths resolved against ``D``), and heredoc writes
    ``cat <<'EOF' > F`` / ``cat > F <<EOF``. Anything else (redirections, globs,
    variables, several files, ``grep``) is not a view. Never raises.

    Returns:
        the views in command order (usually zero or one).
    """
    first_line, _, _ = command.partition("\n")
    write = _HEREDOC_WRITE.match(first_line)
    if write:
        path = _norm_path(write.group("a") or write.group("b") or "", "")
        return [FileView(path, 1, None, write=True)] if path else []
    if _VIEW_START.match(first_line) is None:  # cheap test first: shlex is slow (pure Python)
        return []
    text = first_line[:_MAX_COMMAND_CHARS]
    try:
        lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|<>")
        lexer.whitespace_split = True
        lexer.commenters = ""
        tokens = list(lexer)
    except ValueError:
        return []
    views: list[FileView] = []
    cwd = ""
    segment: list[str] = []
    for token in [*tokens, ";"]:
        if token not in _SEPARATORS and token != "&" and not (set(token) <= set(";&")):
            segment.append(token)
            continue
        if segment:
            if segment[0] == "cd" and len(segment) == 2:
                cwd = _norm_path(segment[1], cwd) or cwd
            elif not any(t in ("<", ">", ">>", "<<", "<<<", "&>", ">&") for t in segment):
                stages: list[list[str]] = [[]]
                for t in segment:
                    if t == "|":
                        stages.append([])
                    else:
                        stages[-1].append(t)
                view = _source_view(stages[0], cwd)
                if view is not None:
                    for stage in stages[1:]:
                        rng = _range_of(stage)
                        if rng is None:
                            view = None
                            break
                        lo = view.start + rng[0] - 1
                        hi = None if rng[1] is None else view.start + rng[1] - 1
                        if view.end is not None:
                            hi = view.end if hi is None else min(hi, view.end)
                        view = FileView(view.path, lo, hi)
                    if view is not None:
                        views.append(view)
        segment = []
    return views


_RETURNCODE = re.compile(r"<returncode>\s*(-?\d+)\s*</returncode>|\bexit code:?\s*(-?\d+)", re.IGNORECASE)


def _failed(output: str) -> bool:
    m = _RETURNCODE.search(output[:500])
    if m:
        return (m.group(1) or m.group(2)) != "0"
    return is_error_output(output[:2_000])


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


@dataclass
class _LiveFact:
    item_id: str
    step: int
    fact: FactStatement
    superseded: bool = False


# --------------------------------------------------------------------------- detector
@dataclass
class _LiveView:
    item_id: str
    step: int
    view: FileView
    content_hash: str


@dataclass
class SupersedeDetector:
    """Incremental supersede detection: :meth:`observe` each message once, in order.

    Holds bounded indexes (at most :data:`_MAX_LIVE_PER_KEY` live entries per tool call,
    file or fact attribute, least recently touched keys evicted beyond ``max_keys``), so
    memory stays bounded on any history.

    Args:
        fact_roles: roles whose messages state facts (default ``user``: the person; an
            assistant's restatements are not the user's facts).
        max_keys: most tool-call / file / fact keys remembered.
    """

    fact_roles: frozenset[str] = frozenset({"user"})
    max_keys: int = 50_000
    _calls: OrderedDict[str, list[tuple[str, int, str]]] = field(default_factory=OrderedDict)
    _views: OrderedDict[str, list[_LiveView]] = field(default_factory=OrderedDict)
    _facts: OrderedDict[tuple[str, str, str], deque[_LiveFact]] = field(default_factory=OrderedDict)

    def _touch(self, table: OrderedDict[str, list[_LiveView]] | OrderedDict[str, list[tuple[str, int, str]]] | OrderedDict[tuple[str, str, str], deque[_LiveFact]], key: object) -> None:
        table.move_to_end(key)  # type: ignore[arg-type]
        while len(table) > self.max_keys:
            table.popitem(last=False)

    def observe(self, item: SupersedeItem) -> list[SupersedeLink]:
        """Links in which ``item`` is the newer message (possibly none)."""
        links: list[SupersedeLink] = []
        if item.role == "tool" and item.call is not None:
            links.extend(self._observe_result(item))
        if item.role == "assistant" and item.calls:
            links.extend(self._observe_writes(item))
        if item.role in self.fact_roles and item.text:
            links.extend(self._observe_facts(item))
        # one link per older message (the first reason found wins: call, then view, then fact)
        seen: set[str] = set()
        unique = []
        for link in links:
            if link.older not in seen:
                seen.add(link.older)
                unique.append(link)
        return unique

    # ------------------------------------------------------------- tool results
    def _observe_result(self, item: SupersedeItem) -> list[SupersedeLink]:
        assert item.call is not None
        name, arguments = item.call
        args = canonical_arguments(arguments)
        key = f"{name} {args}"
        links: list[SupersedeLink] = []
        live = self._calls.setdefault(key, [])
        self._touch(self._calls, key)
        shown = args if len(args) <= 120 else args[:117] + "…"
        kept: list[tuple[str, int, str]] = []
        for older_id, older_step, older_hash in live:
            if older_hash == item.content_hash:
                kept.append((older_id, older_step, older_hash))  # identical repeat: nothing changes
                continue
            links.append(SupersedeLink(
                older_id, item.id, "tool_call", f"{name} {shown}",
                f"the same call ({name} {shown}) returned a newer result at step {item.step}",
                older_step=older_step, newer_step=item.step,
            ))
        kept.append((item.id, item.step, item.content_hash))
        self._calls[key] = kept[-_MAX_LIVE_PER_KEY:]
        command = command_of(arguments)
        if command is not None and not _failed(item.text):
            for view in file_views(command):
                if not view.write:
                    links.extend(self._observe_view(item.id, item.step, view, item.content_hash))
        return links

    def _observe_writes(self, item: SupersedeItem) -> list[SupersedeLink]:
        links: list[SupersedeLink] = []
        for _name, arguments in item.calls:
            command = command_of(arguments)
            if command is None:
                continue
            for view in file_views(command):
                if view.write:
                    links.extend(self._observe_view(item.id, item.step, view, item.content_hash))
        return links

    def _observe_view(self, item_id: str, step: int, view: FileView, content_hash: str) -> list[SupersedeLink]:
        live = self._views.setdefault(view.path, [])
        self._touch(self._views, view.path)
        links: list[SupersedeLink] = []
        kept: list[_LiveView] = []
        for older in live:
            if older.item_id != item_id and view.contains(older.view) and older.content_hash != content_hash:
                verb = "written whole" if view.write else "shown again"
                links.append(SupersedeLink(
                    older.item_id, item_id, "resource", f"file {older.view.label}",
                    f"file {older.view.label} {verb} at step {step} ({view.label})",
                    older_step=older.step, newer_step=step,
                ))
            else:
                kept.append(older)
        kept.append(_LiveView(item_id, step, view, content_hash))
        self._views[view.path] = kept[-_MAX_LIVE_PER_KEY:]
        return links

    # ------------------------------------------------------------- facts
    def _observe_facts(self, item: SupersedeItem) -> list[SupersedeLink]:
        facts = fact_statements(item.text)
        if not facts:
            return []
        links: list[SupersedeLink] = []
        speaker = item.speaker or item.role
        for fact in facts:
            for word in sorted(fact.anchor):
                key = (speaker, fact.kind, word)
                live = self._facts.get(key)
                if not live:
                    continue
                for older in live:
                    if older.superseded or older.item_id == item.id:
                        continue
                    if _restates(older.fact, fact):
                        older.superseded = True
                        label = fact.label or " ".join(sorted(older.fact.anchor & fact.anchor))
                        links.append(SupersedeLink(
                            older.item_id, item.id, "fact", label,
                            f"restated with a new value at step {item.step}: {older.fact.raw} → {fact.raw} ({label})",
                            old_value=older.fact.raw, new_value=fact.raw,
                            older_step=older.step, newer_step=item.step,
                        ))
        for fact in facts:
            for word in sorted(fact.anchor):
                key = (speaker, fact.kind, word)
                live = self._facts.setdefault(key, deque(maxlen=_MAX_LIVE_PER_KEY))
                self._touch(self._facts, key)
                live.append(_LiveFact(item.id, item.step, fact))
        return links


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


def items_from_messages(messages: Iterable[Message]) -> list[SupersedeItem]:
    """:class:`SupersedeItem` views of stored messages, in order: each tool result carries
    the ``(name, arguments)`` of the call it answers (found by ``tool_call_id`` among the
    calls seen so far), each assistant message its own calls."""
    calls: dict[str, tuple[str, str]] = {}
    out: list[SupersedeItem] = []
    for m in messages:
        for c in m.tool_calls:
            calls[c.id] = (c.name, c.arguments)
        out.append(SupersedeItem(
            id=m.id, index=m.index, step=m.step, role=m.role, text=content_text(m.content),
            content_hash=m.content_hash, speaker=m.name or m.role,
            call=calls.get(m.tool_call_id) if m.role == "tool" and m.tool_call_id else None,
            calls=tuple((c.name, c.arguments) for c in m.tool_calls),
        ))
    return out


def detect_supersedes(items: Iterable[SupersedeItem], *, fact_roles: Sequence[str] = ("user",)) -> list[SupersedeLink]:
    """All links of a history, oldest newer message first (see :class:`SupersedeDetector`)."""
    detector = SupersedeDetector(fact_roles=frozenset(fact_roles))
    links: list[SupersedeLink] = []
    for item in items:
        links.extend(detector.observe(item))
    return links

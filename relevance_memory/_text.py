"""Pure text helpers: lexical terms (with CJK bigrams), constraint cues, identifiers.

Used by ingest (reference detection, message typing) and by the offline scorer.
"""

from __future__ import annotations

import re
from itertools import repeat

from ._memo import TextMemo, remember

__all__ = [
    "CONSTRAINT_RE",
    "ERROR_RE",
    "asks_when",
    "code_names",
    "distinct_terms",
    "has_constraint",
    "has_time_expression",
    "identifiers",
    "is_error_output",
    "lexical_terms",
    "preview",
    "stem",
]

# Hard-constraint cues (SPEC §4 offline scorer: "must / never / only / 必须 / 不要 / 禁止").
_NOT_IMPERATIVE = r"(?!\s+(?:have|know|think|remember|see|understand|want|need|like|mind|care|get|feel|find|believe|recall|wait)\b)"
CONSTRAINT_RE = re.compile(
    r"\b(?:must(?:n't| not)?|never|shall not|required?|requirements?|forbidden|prohibited|mandatory|"
    r"not allowed|at most|at least|no more than|no later than|deadline|avoid|make sure|ensure|allergic|"
    r"under no circumstances|hard rules?|constraints?)\b"
    rf"|\b(?:do not|don't|cannot|can't){_NOT_IMPERATIVE}\b"
    r"|\bonly\s+(?:use|buy|book|pay|ship|eat|drink|choose|pick|accept|allow|work|call|run|edit|touch|"
    r"modify|change|deploy|push|from|with|via)\b"
    r"|\balways\s+(?:use|include|provide|reply|answer|respond|ask|check|run|keep|write|format|cc|confirm)\b"
    r"|必须|不要|禁止|千万|(?<![特区分个类告识辨级性派差离道])别(?=[给忘再用让碰吃喝做放])|不能|不准|不得|务必|一定要|只能|"
    r"避开|不吃|不喝|过敏|切记|严禁|不可以|不许|记住|"
    r"必須|"  # traditional Chinese shares the other cues
    # German, French, Spanish, Portuguese, Italian, Dutch (modal "must", "never", "forbidden",
    # "mandatory", "not exceed", "at most / at least", "exclusively")
    r"\b(?:muss|müssen|darf nicht|dürfen nicht|nicht überschreiten|niemals|verboten|ausschließlich|unbedingt|"
    r"auf keinen fall|keinesfalls|höchstens|mindestens|spätestens|zwingend|"
    r"doit|doivent|ne jamais|interdite?s?|obligatoires?|uniquement|impérativement|au maximum|au plus|"
    r"ne pas dépasser|règles? absolues?|"
    r"debe|deben|no debe|nunca|prohibid[oa]s?|obligatori[oa]s?|únicamente|exclusivamente|no puede superar|"
    r"no pueden superar|como máximo|como mínimo|no más de|"
    r"deve|devem|não deve|não pode|não podem|proibid[oa]s?|obrigatóri[oa]s?|somente|no máximo|no mínimo|"
    r"devono|non deve|non devono|non può|vietat[oa]|obbligatori[oa]|esclusivamente|al massimo|al minimo|"
    r"moet|moeten|mag niet|nooit|verboden|verplicht|uitsluitend|maximaal|"
    # Russian
    r"долж(?:ен|на|но|ны)|нельзя|запрещен[оаы]?|обязательно|никогда|не более|не менее|строго|"
    r"только у|только из|только через)\b"
    # Japanese, Korean, Arabic, Hindi
    r"|必ず|してはいけない|してはならない|しないでください|厳禁|絶対に|以内に|必須|のみ(?=[でを使購]|です)|"
    r"반드시|절대|금지|안 됩니다|안 돼|하지 마|필수|에서만|"
    r"يجب|ممنوع|لا يجوز|فقط|أبدا|إلزامي|"
    r"ज़रूर|जरूर|अनिवार्य|केवल|नहीं होना चाहिए|नहीं चाहिए|कभी नहीं|मना है",
    re.IGNORECASE,
)
"""Hard-constraint cues (SPEC §4: "must / never / only / 必须 / 不要 / 禁止"), in English and
Chinese and in the other languages users write rules in (German, French, Spanish,
Portuguese, Italian, Dutch, Russian, Japanese, Korean, Arabic, Hindi: case C05's kind).
"don't", "can't", "only" and "always" count only in imperative use ("don't use", "only buy
from", "always include"), not in "I don't have my id" or "have they always been …"."""

_SENTENCE_END = re.compile(r"(?<=[.!?;؟])\s+|(?<=[。！？；])\s*|\n+")
"""Where sentences end: a Latin stop followed by a space (not the one inside "50.000" or
"v2.1", which cut "¿Debe ser menor de 50.000?" into a statement and "000?"), a CJK stop, a line break."""


ERROR_RE = re.compile(
    r"Traceback \(most recent call last\)|\b\w*(?:Error|Exception)\b:|\bFAILED\b|\bfatal:|"
    r"\berror:|command not found|No such file or directory|\bpanic:|Segmentation fault",
)

_CJK = r"\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_TERM_RE = re.compile(rf"[{_CJK}]+|[^\W_]+(?:['’][a-z]+)?", re.UNICODE)
_TERM_ASCII_RE = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
""":data:`_TERM_RE` on lower-cased ASCII text (``[^\\W_]`` is ``[a-z0-9]`` there)."""
_TERM_BYTES = bytes(c if chr(c) in "abcdefghijklmnopqrstuvwxyz0123456789'" else 32 for c in range(256))
"""Byte table keeping what a :data:`_TERM_ASCII_RE` match is made of (``[a-z0-9']``), the rest a space."""


def _ascii_runs(text: str, table: bytes, joiner: str, pattern: re.Pattern[str]) -> list[str]:
    """``pattern.findall(text)`` for ASCII ``text`` whose matches are made only of the bytes
    ``table`` keeps (the rest it makes spaces): the matches are those of the runs of kept bytes,
    one run after the other, and a run without ``joiner`` (the one kept character on which the
    expression itself decides where matches end) is one match, read without the expression (issue 24: a byte translation
    and a split cost a third to a fifth of it)."""
    runs = text.encode("ascii").translate(table).decode("ascii").split()
    if joiner not in text:
        return runs
    out: list[str] = []
    for run in runs:
        if joiner in run:
            out += pattern.findall(run)
        else:
            out.append(run)
    return out


def _ascii_terms(text: str) -> list[str]:
    """``_TERM_ASCII_RE.findall(text)`` for ASCII ``text``, the same list: a match never spans a
    character outside ``[a-z0-9']``, and a run without ``'`` is one match (:func:`_ascii_runs`)."""
    return _ascii_runs(text, _TERM_BYTES, "'", _TERM_ASCII_RE)


_CJK_RUN = re.compile(rf"^[{_CJK}]+$")
_ANY_CJK = re.compile(rf"[{_CJK}]")

STOPWORDS = frozenset(
    ["a", "an", "and", "are", "as", "at", "be", "been", "but", "by", "can", "could", "did", "do", "does", "for", "from", "had", "has", "have", "he", "her", "him", "his", "how", "i", "if", "in", "into", "is", "it", "its", "let", "me", "my", "no", "not", "of", "on", "or", "our", "she", "so", "than", "that", "the", "their", "them", "then", "there", "these", "they", "this", "those", "to", "too", "up", "us", "was", "we", "were", "what", "when", "where", "which", "who", "why", "will", "with", "would", "you", "your", "yes", "ok", "okay", "just", "also", "about", "all", "any", "more", "some", "very", "can't", "don't", "i'm", "it's", "that's", "please", "thanks", "thank"]
)

# candidate tokens: runs of word characters and the separators ids and paths use
_TOKEN_RE = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![\w,])|[\w./:\\-]+")
_TOKEN_ASCII_RE = re.compile(_TOKEN_RE.pattern, re.ASCII)
""":data:`_TOKEN_RE` for ASCII text (the same matches; ASCII classes are quicker to test)."""
_TOKEN_BYTES = bytes(
    c if chr(c) in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./:\\-" else 32 for c in range(256)
)
"""Byte table keeping what the second branch of :data:`_TOKEN_ASCII_RE` matches (``[\\w./:\\\\-]``
in ASCII), the rest a space."""
_DIGIT_COMMA = re.compile(r"\d,\d")


_TOKEN_COMMA_BYTES = bytes(c if c == 44 else _TOKEN_BYTES[c] for c in range(256))
""":data:`_TOKEN_BYTES` keeping the comma too: what a :data:`_TOKEN_ASCII_RE` match is made of."""


def _ascii_tokens(text: str) -> list[str]:
    """``_TOKEN_ASCII_RE.findall(text)`` for ASCII ``text``, the same list (issue 24).

    The first branch (``50,000``) needs a digit, a comma and a digit: without them only the
    second matches, and its matches are the runs of ``[\\w./:\\\\-]``. Otherwise a match never spans a
    character outside ``[\\w./:\\\\-,]`` (and one that ends a run is followed by none of ``[\\w,]``,
    as the first branch asks), and a run without a comma is one match (:func:`_ascii_runs`)."""
    if "," not in text or _DIGIT_COMMA.search(text) is None:
        return text.encode("ascii").translate(_TOKEN_BYTES).decode("ascii").split()
    return _ascii_runs(text, _TOKEN_COMMA_BYTES, ",", _TOKEN_ASCII_RE)


_FILE_EXT = re.compile(
    r"\.(?:py|pyi|js|ts|tsx|json|md|rst|txt|ya?ml|toml|cfg|ini|rs|go|java|c|h|cpp|hpp|html|css|sh|sql|csv|log)$"
)
_HAS_DIGIT = re.compile(r"\d")
_HAS_ALPHA = re.compile(r"[^\W\d_]")
_NUMBER = re.compile(r"\d[\d,.:/-]*\d$")
_CODE_NAME = re.compile(r"[a-z][a-z0-9]*_[a-z0-9_]+$|[A-Z][a-z0-9]+[A-Z]\w+$|[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+$")
_MAX_IDENTS = 200


def lexical_terms(text: str) -> list[str]:
    """Lower-cased terms for lexical ranking: words (stopwords removed) and CJK bigrams.

    CJK runs have no spaces, so each run becomes its overlapping character bigrams
    (a single character stays a unigram), the usual choice for BM25 over Chinese.
    """
    lowered = text.lower()
    if lowered.isascii():  # the same terms, by a simpler expression (no CJK, no ’)
        return [t for t in _ascii_terms(lowered) if t not in STOPWORDS and (len(t) > 1 or t.isdigit())]
    if _ANY_CJK.search(lowered) is None:
        return [t for t in _TERM_RE.findall(lowered) if t not in STOPWORDS and (len(t) > 1 or t.isdigit())]
    out: list[str] = []
    for term in _TERM_RE.findall(lowered):
        if _CJK_RUN.match(term):
            if len(term) == 1:
                out.append(term)
            else:
                out.extend(term[i : i + 2] for i in range(len(term) - 1))
        elif term not in STOPWORDS and (len(term) > 1 or term.isdigit()):
            out.append(term)
    return out


_ASCII_DROPPED = STOPWORDS | frozenset("abcdefghijklmnopqrstuvwxyz")
"""What :func:`lexical_terms` leaves out of lower-cased ASCII text: stopwords and one-letter
terms (a term of ``[a-z0-9]+(?:'[a-z]+)?`` of one character is a letter or a digit)."""


def distinct_terms(text: str) -> tuple[str, ...]:
    """``tuple(dict.fromkeys(lexical_terms(text)))``: each term once, first-seen order, the
    ASCII case deduplicated before it is filtered (issue 24: ingest reads every message's terms)."""
    lowered = text.lower()
    if lowered.isascii():
        seen = dict.fromkeys(_ascii_terms(lowered))
        for dropped in _ASCII_DROPPED.intersection(seen):
            del seen[dropped]
        return tuple(seen)
    return tuple(dict.fromkeys(lexical_terms(text)))


_WHEN_RE = re.compile(
    r"\bwhen\b|\bwhat (?:year|month|day|date|time)\b|\bhow long (?:ago|since)\b|\bwhich (?:year|month|day|date)\b"
    r"|什么时候|哪天|哪一天|哪年|几号|几点|何时",
    re.IGNORECASE,
)
_TIME_RE = re.compile(
    r"\b(?:yesterday|today|tonight|tomorrow|ago|last|next|recently|earlier|weekend|week|month|year|"
    r"morning|afternoon|evening|night|monday|tuesday|wednesday|thursday|friday|saturday|sunday|"
    r"january|february|march|april|may|june|july|august|september|october|november|december|"
    r"(?:19|20)\d\d)\b|\d{1,4}[/-]\d{1,2}[/-]\d{1,4}"
    r"|昨天|今天|明天|前天|上周|下周|上个月|下个月|去年|明年|周末|星期|礼拜|\d+月|\d+号|\d+日",
    re.IGNORECASE,
)


def asks_when(text: str) -> bool:
    """Whether ``text`` asks for a time ("when", "what year", 什么时候 …)."""
    return _WHEN_RE.search(text) is not None


def has_time_expression(text: str) -> bool:
    """Whether ``text`` states a time ("yesterday", "last week", "May", "2023", 昨天 …)."""
    return _TIME_RE.search(text) is not None


_STEM_CACHE: dict[str, str] = {}


def stem(term: str) -> str:
    """A light English suffix stem for matching: ``-ies → -y``, plural ``-s``/``-es``,
    ``-ing``, ``-ed`` (``camping → camp``, ``parties → party``, ``classes → class``).

    A trailing ``-e`` is dropped too, so ``make`` and ``making`` meet (``mak``). Terms of
    CJK, digits, or 3 characters or fewer are returned unchanged. Cached.
    """
    cached = _STEM_CACHE.get(term)
    if cached is not None:
        return cached
    out = term
    if len(term) > 3 and term.isascii() and term.isalpha():
        if term.endswith("ies"):
            out = term[:-3] + "y"
        elif term.endswith(("sses", "shes", "ches", "xes")):
            out = term[:-2]
        elif term.endswith("s") and not term.endswith(("ss", "us", "is")):
            out = term[:-1]
        elif term.endswith("ing") and len(term) > 5:
            out = term[:-3]
        elif term.endswith("ed") and len(term) > 4:
            out = term[:-2]
        if len(out) > 3 and out[-1] == out[-2] and out[-1] not in "aeiouls":
            out = out[:-1]  # running → run, planned → plan
        if out.endswith("e") and len(out) > 3:
            out = out[:-1]  # make/making → mak, share/shared → shar
    if len(_STEM_CACHE) < 500_000:
        _STEM_CACHE[term] = out
    return out


def has_constraint(text: str) -> bool:
    """Whether ``text`` states a hard constraint (must, never, only, 必须, 不要, 禁止 …).

    Questions are not constraints: a sentence ending in ``?`` or ``？`` does not count.
    """
    if CONSTRAINT_RE.search(text) is None:
        return False
    for sentence in _SENTENCE_END.split(text):
        stripped = sentence.strip()
        if stripped and not stripped.endswith(("?", "？", "؟")) and CONSTRAINT_RE.search(stripped):
            return True
    return False


def is_error_output(text: str) -> bool:
    """Whether a tool output looks like an error (traceback, ``Error:``, ``FAILED`` …)."""
    return ERROR_RE.search(text) is not None


def identifiers(text: str) -> set[str]:
    """Distinctive tokens a later message may quote: paths, ids, numbers, code names.

    A token (a run of word characters, ``. / : - \\``) counts when it is a path or file
    name (``src/app/models.py``, ``design.md``), mixes letters and digits (``ORD-1001``,
    ``call_a1``), is a number of at least 3 characters (``41872``, ``50,000``,
    ``2026-11-20``), or is a code name (``snake_case``, ``CamelCase``, ``dotted.name``).
    At most 200 per message, so huge tool outputs stay cheap. Linear in the text
    length: one tokenising pass, then a check per distinct token.

    Returns a set: its iteration order changes with ``PYTHONHASHSEED``, so never let it
    reach a context or a record unsorted (same input → same bytes, issue 11).
    """
    memo = _IDENT_MEMO
    tokens = _ascii_tokens(text) if text.isascii() else _TOKEN_RE.findall(text)
    unique = set(tokens)
    if len(unique) <= _ALL_AT_ONCE:  # a message's worth: every token's memo entry in one pass
        # in the set's order (a set of identifiers is the same in any order; the memo holds a
        # pure function, so the order it fills in changes only speed; issue 24)
        known = list(map(memo.get, unique, repeat(_UNSEEN, len(unique))))
        if _UNSEEN in known:
            for n, raw in enumerate(unique):  # the same order again: the set is not changed
                if known[n] is _UNSEEN:
                    known[n] = _remember(memo, raw)
        found: set[str] = set(filter(None, known))
        if len(found) <= _MAX_IDENTS:
            return found
    found = set()  # the first identifiers, in order, up to the cap (a huge output stops early)
    for raw in dict.fromkeys(tokens):  # first occurrences, in order (deterministic)
        token = memo.get(raw, _UNSEEN)
        if token is _UNSEEN:
            token = _remember(memo, raw)
        if token is not None:
            found.add(token)
            if len(found) >= _MAX_IDENTS:
                break
    return found


def _remember(memo: dict[str, str | None], raw: str) -> str | None:
    return remember(memo, raw, _identifier(raw), _IDENT_MEMO_MAX)


_ALL_AT_ONCE = 1000
"""Distinct tokens up to which :func:`identifiers` reads all of a text's memo entries at once."""
_IDENT_MEMO: dict[str, str | None] = {}
"""Raw token → the identifier it is (stripped), or ``None``: tokens repeat across messages, and
the checks are several regular expressions each (issue 24)."""
_IDENT_MEMO_MAX = 200_000
_UNSEEN = ""  # never a memo value: an identifier has at least 3 characters


def _identifier(raw: str) -> str | None:
    """The identifier a raw token of :func:`identifiers` is, or ``None``."""
    token = raw.strip(".,:-/\\")
    if len(token) < 3:
        return None
    if token.isalpha():  # plain words: only CamelCase names count
        if token[1:] != token[1:].lower() and token[1:] != token[1:].upper() and _CODE_NAME.match(token):
            return token
        return None
    if token.isdigit():
        return token
    has_digit = _HAS_DIGIT.search(token) is not None
    has_alpha = _HAS_ALPHA.search(token) is not None
    if (
        ("/" in token and has_alpha)
        or (has_digit and has_alpha)
        or (has_digit and _NUMBER.match(token))
        or _FILE_EXT.search(token)
        or (not has_digit and _CODE_NAME.match(token))
    ):
        return token
    return None


_NAME_TOKEN_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./\-]*")
_NAME_PATH = re.compile(r"[A-Za-z0-9_./\-]*\.[A-Za-z][A-Za-z0-9]{0,7}")
_NAME_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
_NAME_CAMEL = re.compile(r"[a-z][a-z0-9]*[A-Z][A-Za-z0-9]*|[A-Z][a-z0-9]+[A-Z][A-Za-z0-9]*")
_NAME_MAX_CHARS = 120


def code_names(text: str, *, min_chars: int = 4) -> list[str]:
    """The names an agent's next action may use again, in order of first appearance, unique
    (pure, deterministic): paths and file names with an extension, dotted names, names with an
    underscore (dunders and private names too), camelCase / PascalCase names and numbers of 3+
    digits — each a maximal run of word characters, dots, slashes and dashes, trimmed of
    trailing punctuation, at least ``min_chars`` characters and at most 120.

    This is the identifier rule of *action support* (SPEC §11): excerpts keep the lines that
    carry such names, elided outputs and summaries list them. Linear in the text length.
    """
    return list(kept_code_names(text, min_chars=min_chars))


def kept_code_names(text: str, *, min_chars: int = 4) -> tuple[str, ...]:
    """:func:`code_names` as the tuple its memo keeps (never copied: a caller that keeps the names
    shares the memo's tuple, issue 24). Each name is one string object however many texts hold
    it (:data:`_NAME_VERDICTS` gives the first one read: a name recurs in every message of an
    agent's history; issue 24)."""
    known = _CODE_NAMES.get(text, min_chars)
    if known is not None:
        return known
    found: dict[str, None] = {}
    verdicts = _NAME_VERDICTS
    for match in _NAME_TOKEN_RE.finditer(text):
        token = match.group(0).rstrip("./-")
        if len(token) < min_chars or len(token) > _NAME_MAX_CHARS or token in found:
            continue
        name = verdicts.get(token)
        if name is None:
            name = remember(verdicts, token, token if _is_code_name(token) else "", _NAME_VERDICTS_MAX)
        if name:
            found[name] = None
    return _CODE_NAMES.put(text, tuple(found), min_chars)


_CODE_NAMES: TextMemo[tuple[str, ...]] = TextMemo()
"""Memo of :func:`code_names` by text (a build reads the same lines and sentences again and
again: at 30,000 messages a first build asked 120,000 times about 17,000 distinct texts)."""


_NAME_VERDICTS: dict[str, str] = {}
"""Memo of :func:`_is_code_name` (a token's verdict depends on the token alone; the same words
recur in every message of a history): token → the token as first read when it is a name (the
string every later text's names share, issue 24), ``""`` when it is not. Bounded: emptied at
:data:`_NAME_VERDICTS_MAX` tokens."""
_NAME_VERDICTS_MAX = 65_536


def _is_code_name(token: str) -> bool:
    """Whether a trimmed token of :func:`code_names` is a name (its docstring says which)."""
    return (
        (token.isdigit() and len(token) >= 3)
        or ("_" in token and any(map(str.isalpha, token)))
        or _NAME_PATH.fullmatch(token) is not None
        or _NAME_DOTTED.fullmatch(token) is not None
        or _NAME_CAMEL.fullmatch(token) is not None
    )


def preview(text: str, max_chars: int) -> str:
    """Head and tail of ``text`` with a marker saying how much was cut (chars)."""
    if len(text) <= max_chars:
        return text
    head = max_chars * 2 // 3
    tail = max_chars - head
    cut = len(text) - head - tail
    return f"{text[:head]} […{cut} chars cut…] {text[-tail:]}"


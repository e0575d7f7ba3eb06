"""Fidelity (SPEC §11): how a message enters a context — verbatim, as an excerpt, or elided.

A chain of an agent's history can be sent at four fidelities: *verbatim*; *excerpt* (each
large member cut to its head and tail lines plus the lines that carry names the goal or
the recent steps use, with one marker line naming the message id and what was left out);
*elided* (the call kept, its output replaced by one restorable line that names the output's
most relevant names); *summary* (folded into the pyramid, :mod:`.summarise`). This module
makes the first three as OpenAI chat dicts, counts them, and caps what one message may take:

- :func:`entry_cap` — no message is ever too large to enter: one larger than its share of the
  budget (``MemoryConfig.excerpt_share``; twice that for a person's own message) enters as an
  excerpt of that size, in every build mode, so one ``find /`` output never ends the loop;
- :func:`excerpt_message` / :func:`elide_message` — the renditions (pure: the same message,
  cap and names give the same bytes in every process);
- :class:`Renditions` — a memo of renditions per (message, cap, fidelity, final goal), so an
  appended excerpt is the same bytes at the next append and the provider's cache holds.

The original always stays in the store (``memory.get(id)`` / ``memory.restore``); every
excerpt and elided output starts with :data:`EXCERPT_MARKER` / :data:`ELIDED_MARKER`, so a
model, a test and ``relmem explain`` can tell it from the original.
"""

from __future__ import annotations

import functools
import json
import re
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from .._markers import ELIDED_MARKER, EXCERPT_MARKER
from .._memo import TextMemo
from .._models import Message, content_text, has_tool_calls, thaw
from .._text import ERROR_RE, code_names, kept_code_names
from .._tokenizer import FRAMED_FIELDS, TiktokenCounter, TokenCounter

__all__ = [
    "ELIDED_MARKER",
    "EXCERPT_MARKER",
    "MIN_ENTRY_CAP",
    "MIN_EXCERPT_TOKENS",
    "Fidelity",
    "Rendition",
    "Renditions",
    "cap_of",
    "elide_message",
    "entry_cap",
    "entry_caps",
    "entry_renditions",
    "excerpt_message",
    "excerpt_text",
    "fit_chain",
    "goal_fields",
    "is_rendition",
    "keep_names",
    "least_chain_tokens",
    "newest_user_excerpt",
]

Fidelity = Literal["verbatim", "excerpt", "elided"]
"""How a message is sent: whole, cut to an excerpt, or (a tool output) replaced by one line."""

PROSE_FACTOR = 8.0
"""A message that is neither a tool output nor a tool call — what a person wrote (the task
statement, an instruction, a chat turn) or an assistant's plain answer — may take this many
times the share a tool output or a call may (:func:`entry_cap`): an agent's bulky traffic is
cut early, a conversation's turns only when they would crowd out everything else."""
MIN_ENTRY_CAP = 256
"""A message of at most this many tokens enters whole whatever the share (tokens): at small
budgets a sixteenth would cut an ordinary file view; only what cannot fit beside the pinned
prompt and the newest user message is cut below it (:func:`entry_renditions`' ``room``)."""
MIN_EXCERPT_TOKENS = 48
"""Least tokens an excerpt is cut to: the marker line plus a line or two (tokens)."""
HEAD_LINES = 4
"""Lines of the head an excerpt keeps first (then as many as fit after the named lines)."""
TAIL_LINES = 4
"""Lines of the tail an excerpt keeps first."""
MAX_LINE_CHARS = 400
"""A longer line (a minified blob, a base64 string) is clipped to its head and tail (chars)."""
ELIDED_NAMES = 8
"""Most names an elided output's one line lists (the ones the goal and recent steps use first)."""


@dataclass(frozen=True, slots=True)
class Rendition:
    """One message as a build sends it.

    Attributes:
        message: the OpenAI chat dict sent (callers copy it before handing it out).
        tokens: its token count, framing included (tokens).
        fidelity: ``verbatim``, ``excerpt`` or ``elided``.
        original_tokens: the stored message's tokens (tokens).
        note: what was left out, for the decision record (``""`` when verbatim).
    """

    message: dict[str, Any]
    tokens: int
    fidelity: Fidelity
    original_tokens: int
    note: str = ""


def is_rendition(message: Mapping[str, Any]) -> bool:
    """Whether a built message is an excerpt or an elided output (its text starts with a marker)."""
    text = content_text(message.get("content"))
    return text.startswith(EXCERPT_MARKER) or text.startswith(ELIDED_MARKER)


def entry_cap(message: Message, budget: int, share: float) -> int:
    """Most tokens ``message`` may take in a context of ``budget`` tokens (SPEC §11): ``share``
    of the budget for a tool output or an assistant's tool call, :data:`PROSE_FACTOR` times that
    (at most the whole budget) for any other message, never below :data:`MIN_ENTRY_CAP` (tokens)."""
    return cap_of(message, entry_caps(budget, share))


def cap_of(message: Message, caps: tuple[int, int]) -> int:
    """``message``'s entry cap out of ``caps`` (:func:`entry_caps`' pair; tokens): a caller
    reading many messages' caps at one budget computes the pair once."""
    return caps[0] if message.role == "tool" or has_tool_calls(message) else caps[1]  # no ToolCall objects made


def entry_caps(budget: int, share: float, room: int | None = None) -> tuple[int, int]:
    """``(a tool output's or a call's cap, any other message's cap)`` in a context of ``budget``
    tokens (:func:`entry_cap`; tokens); with ``room`` (what the pinned prompt and the newest user
    message leave), each at most ``room`` and at least :data:`MIN_EXCERPT_TOKENS`."""
    tool_cap = max(MIN_ENTRY_CAP, int(budget * min(1.0, share)))  # share × 1.0
    prose_cap = max(MIN_ENTRY_CAP, int(budget * min(1.0, share * PROSE_FACTOR)))
    if room is None:
        return tool_cap, prose_cap
    return max(MIN_EXCERPT_TOKENS, min(tool_cap, room)), max(MIN_EXCERPT_TOKENS, min(prose_cap, room))


# --------------------------------------------------------------------------- excerpts
def _clip_line(line: str) -> str:
    if len(line) <= MAX_LINE_CHARS:
        return line
    head = MAX_LINE_CHARS * 2 // 3
    return f"{line[:head]} […{len(line) - MAX_LINE_CHARS:,} chars…] {line[-(MAX_LINE_CHARS - head):]}"


def _priorities(lines: Sequence[str], keep: Collection[str]) -> list[int]:
    """Per line, when an excerpt takes it: 0 head/tail, 1 names a kept name or an error,
    2 names any code name, 3 the rest (lower first)."""
    out: list[int] = []
    n = len(lines)
    for i, line in enumerate(lines):
        if i < HEAD_LINES or i >= n - TAIL_LINES:
            out.append(0)
        elif (keep and any(name in line for name in code_names(line, min_chars=3) if name in keep)) or ERROR_RE.search(line):
            out.append(1)
        elif code_names(line):
            out.append(2)
        else:
            out.append(3)
    return out


def excerpt_text(
    text: str, max_tokens: int, keep: Collection[str], counter: TokenCounter
) -> tuple[str, int, int]:
    """An excerpt of ``text`` within about ``max_tokens`` tokens (pure).

    Lines are taken by priority — head and tail (:data:`HEAD_LINES`, :data:`TAIL_LINES`), then
    lines naming a name in ``keep`` or an error, then lines naming any code name, then the rest
    — and within a priority head first, then tail, then in order; they are shown in original
    order with one ``…`` line per gap. A line longer than :data:`MAX_LINE_CHARS` is clipped.

    Returns:
        ``(excerpt, lines kept, lines in all)``.
    """
    names = keep if isinstance(keep, frozenset) else frozenset(keep)
    if type(counter).__hash__ is None:  # a counter that cannot key a memo: cut afresh
        return _excerpt_text(text, max_tokens, names, counter)
    variant = (max_tokens, names, counter)
    known = _EXCERPTS.get(text, variant)
    if known is not None:
        return known
    return _EXCERPTS.put(text, _excerpt_text(text, max_tokens, names, counter), variant)


_EXCERPTS: TextMemo[tuple[str, int, int]] = TextMemo(longest=50_000, max_chars=4_000_000, by_variant=False)
"""Memo of :func:`excerpt_text` by text, budget, kept names and counter (an agent reads the
same file or runs the same command again: each repeat was cut line by line anew). Keyed by
``(text, variant)``: nearly every excerpt has its own kept names (issue 24)."""


_STEP_NAMES: TextMemo[tuple[str, ...]] = TextMemo(longest=100_000, max_chars=4_000_000)
"""Memo of the code names of an assistant message :func:`keep_names` reads, for the texts longer
than :func:`~relevance_memory._text.code_names`' own memo keeps (a call's long arguments): each
such message is read by the keep names of every oversized result of the next steps, and an agent
runs the same long call again (issue 24: at 200,000 messages, 5 % of a first build)."""


def _step_names(text: str) -> tuple[str, ...]:
    """``code_names(text, min_chars=3)``, memoised by text however long (:data:`_STEP_NAMES`)."""
    known = _STEP_NAMES.get(text)
    if known is not None:
        return known
    return _STEP_NAMES.put(text, kept_code_names(text, min_chars=3))


_TOKENS: TextMemo[int] = TextMemo(longest=100_000, max_chars=8_000_000)
"""Memo of a text's tokens by text and counter, for the texts an excerpt measures (a repeated
command's arguments, a file's lines read again): the same counter counts a text the same."""


def _tokens(counter: TokenCounter, text: str) -> int:
    """``counter.count_text(text)``, memoised (:data:`_TOKENS`) for a counter that can key a memo."""
    if type(counter).__hash__ is None:
        return counter.count_text(text)
    known = _TOKENS.get(text, counter)
    return known if known is not None else _TOKENS.put(text, counter.count_text(text), counter)


def _excerpt_text(text: str, max_tokens: int, keep: frozenset[str], counter: TokenCounter) -> tuple[str, int, int]:
    lines = [_clip_line(line) for line in text.split("\n")]
    costs = [_tokens(counter, line) for line in lines]
    gap = _tokens(counter, "\n…") + 1
    priority = _priorities(lines, keep)
    n = len(lines)
    order = sorted(range(n), key=lambda i: (priority[i], 0 if i < n // 2 else 1, i if i < n // 2 else n - i))
    chosen: set[int] = set()
    seen: set[str] = set()
    used = 0
    for i in order:
        key = lines[i].strip()
        if priority[i] and key in seen:
            continue  # a repeated line says nothing new (the same error line 30 times)
        cost = costs[i] + 1 + gap  # the newline, and at worst one more gap
        if used + cost > max_tokens:
            continue
        chosen.add(i)
        seen.add(key)
        used += cost
    out: list[str] = []
    previous = -1
    for i in sorted(chosen):
        if i != previous + 1:
            out.append("…")
        out.append(lines[i])
        previous = i
    if chosen and previous != n - 1:
        out.append("…")
    return "\n".join(out), len(chosen), n


GOAL_FIELDS = 6
"""Most ``key: value`` fields of a JSON tool result an excerpt or elided line names (issue 23)."""
_WORD_RE = re.compile(r"[a-z0-9][a-z0-9_\-]{2,}")


def goal_fields(text: str, goal: str) -> str:
    """The fields of a JSON object tool result that answer the goal (pure; issue 23: a status,
    an owner, an id the goal names survives an excerpt or elision): ``"status: escalated,
    owner: Marta Kovacs"``, those whose key is a word of ``goal`` (``order_id`` answers "order")
    or whose value the goal quotes, at most :data:`GOAL_FIELDS` of them, one level of nesting
    read, values clipped to 60 characters; ``""`` for other text or when none answers."""
    stripped = text.lstrip()
    if not goal or not stripped.startswith("{"):
        return ""
    try:
        data = json.loads(stripped)
    except ValueError:
        return ""
    if not isinstance(data, dict):
        return ""
    words = set(_WORD_RE.findall(goal.lower()))
    words |= {w[:-1] for w in words if w.endswith("s") and len(w) > 3}
    lowered = goal.lower()
    out: list[str] = []

    def visit(obj: Mapping[str, Any], depth: int) -> None:
        for key, value in obj.items():
            if len(out) >= GOAL_FIELDS:
                return
            if isinstance(value, dict):
                if depth < 1:
                    visit(value, depth + 1)
                continue
            if isinstance(value, (list, tuple)) or value is None:
                continue
            shown = str(value)
            parts = set(str(key).lower().replace("-", "_").split("_"))
            if parts & words or (len(shown) >= 3 and shown.lower() in lowered):
                out.append(f"{key}: {shown if len(shown) <= 60 else shown[:59] + '…'}")

    visit(data, 0)
    return ", ".join(out)


def _marker_ends(message: Message, kind: str) -> tuple[str, str]:
    """A marker line's text before and after its detail (:func:`_marker`)."""
    return (f"{kind} of {message.id} ({message.role}{', ' + message.msg_type.value if message.role != 'tool' else ''}): ",
            f"; the whole message is restorable by id {message.id}]")


def _marker(message: Message, kind: str, detail: str) -> str:
    head, tail = _marker_ends(message, kind)
    return f"{head}{detail}{tail}"


def _shrink_arguments(arguments: str, max_tokens: int, keep: Collection[str], counter: TokenCounter) -> str:
    """Tool-call arguments within about ``max_tokens``: a JSON object keeps its keys and its
    short values, its long strings excerpted (still valid JSON); anything else is excerpted as
    text."""
    if _tokens(counter, arguments) <= max_tokens:
        return arguments
    try:
        data = json.loads(arguments)
    except (ValueError, RecursionError):
        data = None
    if isinstance(data, dict):
        strings = {k: v for k, v in data.items() if isinstance(v, str)}
        fixed = counter.count_text(json.dumps({k: v for k, v in data.items() if k not in strings}, ensure_ascii=False))
        room = max(8, (max_tokens - fixed) // max(1, len(strings)))
        out = {k: (excerpt_text(v, room, keep, counter)[0] if k in strings and _tokens(counter, v) > room else v)
               for k, v in data.items()}
        shrunk = json.dumps(out, ensure_ascii=False)
        return _SHRUNK.get(shrunk) or _SHRUNK.put(shrunk, shrunk)
    return excerpt_text(arguments, max_tokens, keep, counter)[0]


_SHRUNK: TextMemo[str] = TextMemo(longest=50_000, max_chars=2_000_000)
"""The shrunk JSON arguments :func:`_shrink_arguments` made, each kept once (text → itself): a
command run again is cut to the same JSON, and every excerpt of it kept its own copy in the
renditions memo (issue 24: ~70 bytes a stored message of a 100,000-message agent history)."""


def _with_content(message: Message, content: Any, calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """``message`` with ``content`` (and ``calls``) in place of its own; fields beyond the chat
    fields (``reasoning_content``, ``thinking_blocks`` …) are left out with the content, or a
    large one would keep an excerpt over its cap (case C08's kind)."""
    out: dict[str, Any] = {k: v for k, v in message.to_openai().items() if k in FRAMED_FIELDS}
    out["content"] = content
    if calls is not None:
        out["tool_calls"] = calls
    return out


_LEFT = "{left}"
"""The placeholder of an excerpt's marker for the tokens left out, in the draft counted first."""


def _filled_count(counter: TokenCounter, draft_tokens: int, left: int) -> int | None:
    """Tokens of an excerpt whose draft (``draft_tokens``) had :data:`_LEFT` where the final
    says `` {left:,}`` — without counting the whole excerpt again (issue 24: counting each
    excerpt twice was 18 % of a first build at a million messages) — or ``None`` when only a
    count of the final can say.

    Exact for :class:`TiktokenCounter` (``o200k_base``, ``cl100k_base``): their pre-tokenizers
    cut `` (about {left} of`` into `` (`` · ``about`` · `` {`` · ``left`` · ``}`` · `` of`` and
    `` (about 4,908 of`` into `` (`` · ``about`` · `` `` · ``4`` · ``,`` · ``908`` · `` of`` — the
    placeholder and the figure are pieces of their own, with a letter before and a space after
    them, and BPE runs within a piece, so each side's count is its own pieces' (tested against
    the count of the final on real excerpts and on figures of every length). Another counter
    (a subclass too: it may count otherwise) counts the final."""
    if type(counter) is not TiktokenCounter:
        return None
    return draft_tokens - counter.count_text(" " + _LEFT) + counter.count_text(f" {left:,}")


def excerpt_message(
    message: Message, cap: int, keep: Collection[str], counter: TokenCounter, goal: str = ""
) -> Rendition:
    """``message`` cut to at most ``cap`` tokens (SPEC §11 *excerpt*; pure).

    The content becomes one marker line (:data:`EXCERPT_MARKER`: the id to restore, lines and
    tokens left out) plus :func:`excerpt_text` of the text; an assistant's tool-call arguments
    keep their JSON shape with long strings excerpted; image and other non-text parts are left
    out (the marker says how many). Role, ``tool_call_id``, ``name`` and call ids stay, so the
    chain stays valid. A message already within ``cap`` comes back verbatim. The marker names
    the fields of a JSON result that answer ``goal`` (:func:`goal_fields`, issue 23).
    """
    original = message.token_count
    if original <= cap:
        return Rendition(message.to_openai(), original, "verbatim", original)
    text = content_text(message.content)
    parts = message.content if isinstance(message.content, list) else []
    other_parts = sum(1 for p in parts if not (isinstance(p, Mapping) and p.get("type") in ("text", "input_text")))
    calls = [thaw(c) for c in (message.raw.get("tool_calls") or [])]
    frame = counter.count_message(_with_content(message, "", [] if calls else None)) + 16
    target = max(8, cap - frame)
    text_tokens = _tokens(counter, text) if text else 0
    fields = goal_fields(text, goal) if message.role == "tool" else ""
    for _ in range(6):
        text_room = min(text_tokens, target // 2) if calls else target  # a short THOUGHT stays whole
        call_room = target - text_room
        new_calls = None
        if calls:
            new_calls = []
            per_call = max(8, call_room // len(calls))
            for call in calls:
                if call.get("type") == "custom":  # a custom tool call carries its input as free text
                    custom = dict(call.get("custom") or {})
                    if "input" in custom:
                        custom["input"] = _shrink_arguments(str(custom["input"] or ""), per_call, keep, counter)
                    new_calls.append({**call, "custom": custom})
                    continue
                function = dict(call.get("function") or {})
                if "arguments" in function:
                    function["arguments"] = _shrink_arguments(str(function["arguments"]), per_call, keep, counter)
                new_calls.append({**call, "function": function})
        body, kept, total = excerpt_text(text, max(0, text_room), keep, counter) if text else ("", 0, 0)
        detail = f"{kept} of {total} lines kept" if total else "content cut"
        if fields:
            detail += f"; answers the goal: {fields}"
        if other_parts:
            detail += f", {other_parts} non-text part(s) left out"
        # the marker says how many tokens were left out, a figure the excerpt's own count gives:
        # counted with a placeholder first (only the marker's own one is filled in; a body
        # that says "{left}" keeps it)
        head, tail = _marker_ends(message, EXCERPT_MARKER)
        before, after = f"{head}{detail} (about ", f" of {original:,} tokens left out){tail}"
        draft = _with_content(message, f"{before}{_LEFT}{after}\n{body}" if body else f"{before}{_LEFT}{after}", new_calls)
        tokens = counter.count_message(draft)
        left = max(0, original - tokens)
        final = _with_content(message, f"{before}{left:,}{after}\n{body}" if body else f"{before}{left:,}{after}",
                              new_calls)
        filled = _filled_count(counter, tokens, left)
        tokens = counter.count_message(final) if filled is None else filled
        if tokens <= cap:
            note = f"excerpt: {tokens:,} of {original:,} tokens sent ({detail}); the original is restorable by id"
            return Rendition(final, tokens, "excerpt", original, note)
        target = max(8, target - (tokens - cap) - 8)
    bare = _with_content(message, _marker(message, EXCERPT_MARKER, f"all {original:,} tokens left out"
                                                 + (f"; answers the goal: {fields}" if fields else "")),
                         [_bare_call(c) for c in calls] if calls else None)
    tokens = counter.count_message(bare)
    return Rendition(bare, tokens, "excerpt", original, f"excerpt: only a marker fits ({tokens} tokens); restorable by id")


def _bare_call(call: dict[str, Any]) -> dict[str, Any]:
    """``call`` with its arguments (a custom call: its input) left out, its id and name kept."""
    if call.get("type") == "custom":
        return {**call, "custom": {**(call.get("custom") or {}), "input": ""}}
    return {**call, "function": {**(call.get("function") or {}), "arguments": "{}"}}


def elide_message(message: Message, keep: Collection[str], counter: TokenCounter, goal: str = "") -> Rendition:
    """``message``'s content replaced by one restorable line (SPEC §11 *elided*; pure): the
    id, how many lines and tokens were left out, the fields of a JSON result that answer
    ``goal`` (:func:`goal_fields`, issue 23: "answers the goal: status: escalated") and up to
    :data:`ELIDED_NAMES` of its code names (those in ``keep`` first). Tool calls stay whole
    (the call is the step; its output is what is elided). Meant for tool results; any message
    with content can be elided."""
    text = content_text(message.content)
    names = code_names(text)
    ranked = [n for n in names if n in keep] + [n for n in names if n not in keep]
    shown = ", ".join(ranked[:ELIDED_NAMES])
    lines = text.count("\n") + 1 if text else 0
    fields = goal_fields(text, goal) if message.role == "tool" else ""
    detail = (f"{lines:,} line(s), {message.token_count:,} tokens left out"
              + (f"; answers the goal: {fields}" if fields else "") + (f"; names: {shown}" if shown else ""))
    line = f"{ELIDED_MARKER} output of {message.id}: {detail}; restorable by id {message.id}]"
    if message.role != "tool":
        line = f"{ELIDED_MARKER} content of {message.id} ({message.role}): {detail}; restorable by id {message.id}]"
    draft = _with_content(message, line)
    tokens = counter.count_message(draft)
    if tokens >= message.token_count:
        return Rendition(message.to_openai(), message.token_count, "verbatim", message.token_count)
    return Rendition(draft, tokens, "elided", message.token_count,
                     f"elided: {tokens} of {message.token_count:,} tokens sent (one restorable line)")


class Renditions:
    """Memo of renditions by (message id, content hash, fidelity, cap, final goal): the same
    message at the same cap is the same bytes from build to build (an appended excerpt stays in
    the provider's cached prefix). Bounded (LRU): ``maxsize`` renditions in all, and at most
    ``per_message`` of one message.

    Every build asks for the rendition of every oversized stored message, oldest first: an LRU
    smaller than their number misses on every one of them (issue 24: about 2.6 % of an agent's
    messages are oversized, 26,000 at a million messages, above the old 20,000 entries — each
    compaction cut them all again). The default holds those of ~10 million messages; an entry is
    one excerpt (at most its entry cap, a few kB). A build asks for a few caps of one message (its
    entry cap, the selection's excerpt and elided forms, the caps that fit its chain); a budget
    that changes from build to build (a window less what the tools and reply take) asks for new
    ones each time, and without ``per_message`` every oversized message kept an excerpt for every
    budget seen (issue 24: 48 per message after 60 such builds, growing without end)."""

    def __init__(self, maxsize: int = 250_000, per_message: int = 8) -> None:
        # message id → (content hash, fidelity, cap, goal) → rendition, both least recently used first
        self._data: OrderedDict[str, dict[tuple[Any, ...], Rendition]] = OrderedDict()
        self._size = 0  # renditions held in all
        self._maxsize = maxsize
        self._per_message = per_message

    def __len__(self) -> int:
        """Renditions held."""
        return self._size

    def get(
        self, message: Message, fidelity: Fidelity, cap: int, keep: Collection[str] | Callable[[], Collection[str]],
        counter: TokenCounter, goal: str,
    ) -> Rendition:
        """The rendition of ``message`` at ``fidelity`` (``cap`` only matters for an excerpt).
        ``keep`` may be a callable, called only when the rendition is not memoised yet (the
        names cost a scan of the steps before the message: a compaction at 100k messages
        re-read them for every oversized message)."""
        if fidelity == "verbatim":
            return Rendition(message.to_openai(), message.token_count, "verbatim", message.token_count)
        key = (message.content_hash, fidelity, cap if fidelity == "excerpt" else 0, goal)
        held = self._data.get(message.id)
        if held is not None:
            self._data.move_to_end(message.id)
            found = held.pop(key, None)
            if found is not None:
                held[key] = found  # most recently used last
                return found
        names = keep() if callable(keep) else keep
        made = (excerpt_message(message, cap, names, counter, goal) if fidelity == "excerpt"
                else elide_message(message, names, counter, goal))
        if held is None:
            held = self._data[message.id] = {}
        held[key] = made
        self._size += 1
        if len(held) > self._per_message:
            del held[next(iter(held))]
            self._size -= 1
        while self._size > self._maxsize and len(self._data) > 1:
            _, dropped = self._data.popitem(last=False)
            self._size -= len(dropped)
        return made


def keep_names(messages: Sequence[Message], index: int, goal_text: str, *, steps_back: int = 3) -> frozenset[str]:
    """Names an excerpt or elided line of message ``index`` favours (pure): those of the goal
    (final goal and subtask, ``goal_text``), of the message's own call (a tool result's
    assistant message) and of the assistant messages of the ``steps_back`` steps before it —
    what the agent was looking for when the output arrived. Depends only on the goal and on
    messages up to ``index``, so the same message is cut the same way in every later build."""
    names = set(code_names(goal_text, min_chars=3))
    message = messages[index]
    step = message.step
    for j in range(index - 1, -1, -1):
        other = messages[j]
        if other.step < step - steps_back:
            break
        if other.role == "assistant":
            names.update(_step_names(other.text))
    return frozenset(names)


def entry_renditions(
    messages: Sequence[Message],
    indices: Sequence[int],
    *,
    budget: int,
    share: float,
    goal_text: str,
    memo: Renditions,
    counter: TokenCounter,
    room: int | None = None,
) -> dict[int, Rendition]:
    """The excerpts messages ``indices`` enter a context of ``budget`` tokens as (SPEC §11):
    index → :class:`Rendition` for each message larger than its :func:`entry_cap` (or than
    ``room``, what the pinned prompt and the newest user message leave); the others enter
    verbatim and are not listed. Memoised in ``memo``, so a build costs a comparison per
    message plus the cut of each new oversized one."""
    out: dict[int, Rendition] = {}
    caps = entry_caps(budget, share, room)  # read once, not per message
    least = min(caps)
    for i in indices:
        message = messages[i]
        if message.token_count <= least:
            continue
        cap = cap_of(message, caps)
        if message.token_count > cap:
            out[i] = memo.get(message, "excerpt", cap, functools.partial(keep_names, messages, i, goal_text), counter,
                              goal_text)
    return out


def newest_user_excerpt(
    messages: Sequence[Message],
    index: int | None,
    room: int,
    *,
    budget: int,
    share: float,
    goal_text: str,
    memo: Renditions,
    counter: TokenCounter,
) -> Rendition | None:
    """How the newest user message (``index``; ``None``: there is none) enters a context whose
    pinned prompt leaves ``room`` tokens: ``None`` — verbatim — while it alone fits (SPEC §9),
    else its excerpt capped by that room (:func:`entry_renditions`), not by that room less
    itself, which left a long task statement a bare marker while the budget went unused. A
    compaction and an append both ask this first, then fit the other messages in what it leaves."""
    if index is None or messages[index].token_count <= room:
        return None
    return entry_renditions(messages, [index], budget=budget, share=share, goal_text=goal_text, memo=memo,
                            counter=counter, room=max(1, room)).get(index)


FIT_ATTEMPTS = 16
"""How many common caps :func:`fit_chain` tries, the last of them the excerpt floor."""


def least_chain_tokens(
    messages: Sequence[Message],
    members: Sequence[int],
    *,
    current: Mapping[int, Rendition],
    goal_text: str,
    memo: Renditions,
    counter: TokenCounter,
) -> int:
    """Tokens of a chain with each member above :data:`MIN_EXCERPT_TOKENS` cut to its least
    excerpt (a bare marker for most): what :func:`fit_chain`'s last try sends, the figure a
    :class:`~relevance_memory.ContextOverflowError` names when not even that fits (tokens)."""
    return _cut_to(messages, members, MIN_EXCERPT_TOKENS, current, goal_text, memo, counter)[1]


def _cut_to(
    messages: Sequence[Message], members: Sequence[int], cap: int, current: Mapping[int, Rendition],
    goal_text: str, memo: Renditions, counter: TokenCounter,
) -> tuple[dict[int, Rendition], int]:
    """``(renditions, tokens)`` of a chain with every member larger than ``cap`` tokens cut to an
    excerpt at ``cap`` (the others as ``current`` has them, or whole): one try of :func:`fit_chain`."""
    out: dict[int, Rendition] = {}
    total = 0
    for i in members:
        size = current[i].tokens if i in current else messages[i].token_count
        if size > cap:
            out[i] = memo.get(messages[i], "excerpt", cap, functools.partial(keep_names, messages, i, goal_text),
                              counter, goal_text)
            size = out[i].tokens
        elif i in current:
            out[i] = current[i]
        total += size
    return out, total


def fit_chain(
    messages: Sequence[Message],
    members: Sequence[int],
    room: int,
    *,
    current: Mapping[int, Rendition],
    goal_text: str,
    memo: Renditions,
    counter: TokenCounter,
) -> dict[int, Rendition] | None:
    """Excerpts that fit a whole chain (the newest step, which must be sent) into ``room``
    tokens: the largest members are cut to one common cap (water-filling), the small ones stay
    as they are. ``None`` when not even that fits (every member at :data:`MIN_EXCERPT_TOKENS`)."""

    def size(i: int) -> int:
        return current[i].tokens if i in current else messages[i].token_count

    if sum(size(i) for i in members) <= room:
        return {i: current[i] for i in members if i in current}
    sizes = sorted((size(i) for i in members), reverse=True)
    cap = room
    floor_tried = False
    for k in range(1, len(sizes) + 1):  # the common cap when the k largest are cut
        rest = sum(sizes[k:])
        cap = (room - rest) // k
        if k == len(sizes) or cap >= sizes[k]:
            break
    for attempt in range(FIT_ATTEMPTS):
        if cap < MIN_EXCERPT_TOKENS or attempt == FIT_ATTEMPTS - 1:
            if floor_tried:
                return None
            # a member whose least excerpt (a bare marker) is above the common cap overshoots
            # it: the others may still fit at the floor, so it is tried once before giving up —
            # also when the cap has not come down to it in FIT_ATTEMPTS - 1 tries, so a chain
            # whose least excerpts fit (least_chain_tokens) always fits
            cap = MIN_EXCERPT_TOKENS
        floor_tried = cap == MIN_EXCERPT_TOKENS
        out, total = _cut_to(messages, members, cap, current, goal_text, memo, counter)
        if total <= room:
            return out
        cap -= max(8, (total - room) // max(1, len(out)) + 1)
    return None

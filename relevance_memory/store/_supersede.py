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

import hashlib
import json
import posixpath
from collections import OrderedDict, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Literal, cast

from .._memo import remember
from .._models import Message, content_text
from ._supersede_facts import FACT_MIN_OVERLAP as FACT_MIN_OVERLAP
from ._supersede_facts import FACT_MIN_SHARED as FACT_MIN_SHARED
from ._supersede_facts import FACT_MIN_SHARED_CUED as FACT_MIN_SHARED_CUED
from ._supersede_facts import FactStatement, _restates, asks_for_history, fact_statements
from ._supersede_files import FileView, _edited_paths, _failed, file_views

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
    "parse_call",
]

SupersedeKind = Literal["tool_call", "resource", "fact"]

_MAX_LABELS = 4096
"""Link keys :class:`SupersedeDetector` shares one string for (the latest, about)."""
_MAX_LIVE_PER_KEY = 64
"""Live (not yet superseded) entries kept per tool call, file or fact attribute (bounds memory)."""



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
_CANONICAL_JSON = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
"""``json.dumps(…, sort_keys=True, separators=(",", ":"), ensure_ascii=False)``, built once."""


def canonical_arguments(arguments: str) -> str:
    """Tool-call arguments as canonical JSON (sorted keys, no spaces) when they parse,
    else the raw string stripped — so ``{"a":1, "b":2}`` equals ``{"b": 2, "a": 1}``."""
    try:
        return _CANONICAL_JSON.encode(json.loads(arguments))
    except (ValueError, TypeError):
        return arguments.strip()


def command_of(arguments: str) -> str | None:
    """The shell command of a ``bash``-style tool call (``{"command": …}``, ``{"cmd": …}``)."""
    try:
        parsed = json.loads(arguments)
    except (ValueError, TypeError):
        return None
    return _command_in(parsed)


def _command_in(parsed: object) -> str | None:
    if isinstance(parsed, Mapping):
        for key in ("command", "cmd", "script"):
            value = parsed.get(key)
            if isinstance(value, str):
                return value
    return None


@dataclass(frozen=True, slots=True)
class ParsedCall:
    """What supersede detection reads from one tool call's arguments, parsed once.

    Attributes:
        canonical: :func:`canonical_arguments`.
        views: the files its shell command shows or writes (:func:`file_views`).
        edited: the files its shell command edits (:func:`edited_paths`), sorted.
    """

    canonical: str
    views: tuple[FileView, ...] = ()
    edited: tuple[str, ...] = ()


@lru_cache(maxsize=1024)
def parse_call(arguments: str) -> ParsedCall:
    """The arguments of a tool call parsed once (JSON once, the shell command once): an
    assistant's call and the tool result answering it share the string, so the result's
    lookup is a cache hit (issue 24: each command used to be parsed about three times).
    Bounded (least recently used of 1,024 dropped: the result follows its call closely, and an
    entry holds the canonical arguments, ~0.5 KB; 4,096 of them were ~20 bytes of every one of
    100,000 stored messages); pure, so the cache changes only speed."""
    try:
        parsed = json.loads(arguments)
    except (ValueError, TypeError):
        return ParsedCall(arguments.strip())
    canonical = _CANONICAL_JSON.encode(parsed)
    command = _command_in(parsed)
    if command is None:
        return ParsedCall(canonical)
    views = tuple(file_views(command))
    return ParsedCall(canonical, views, tuple(sorted(_edited_paths(command, views))))


@dataclass(slots=True)
class _LiveFact:
    item_id: str
    step: int
    fact: FactStatement
    superseded: bool = False


# --------------------------------------------------------------------------- detector
@dataclass(slots=True)
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
    _calls: OrderedDict[bytes, list[str | int]] = field(default_factory=OrderedDict)  # [hash, id, step, id, step, …]
    _labels: dict[str, str] = field(default_factory=dict)  # a link key → its one string (bounded)
    _views: OrderedDict[str, list[_LiveView]] = field(default_factory=OrderedDict)
    _facts: OrderedDict[tuple[str, str, str], deque[_LiveFact]] = field(default_factory=OrderedDict)
    _edited: OrderedDict[str, str] = field(default_factory=OrderedDict)  # file → id of its newest edit
    _current: dict[str, str] | None = None
    _by_name: dict[str, set[str]] = field(default_factory=dict)  # file name → viewed paths

    def edited_views(self) -> dict[str, str]:
        """Every file the agent edited (:func:`edited_paths`: heredoc writes, ``sed -i``,
        ``> F``) → the id of the newest message showing or writing it, for the files shown
        at all; a view and an edit name the same file when one path ends with the other
        (``/testbed/a/b.py`` and ``a/b.py``). Memoised until a message shows or edits a file
        (a step that does neither, e.g. a test run, leaves it as it was: an append reads it at
        every build, issue 24)."""
        if self._current is None:
            current: dict[str, str] = {}
            for edited in self._edited:
                newest: _LiveView | None = None
                for path in sorted(self._by_name.get(posixpath.basename(edited), ())):
                    live = self._views.get(path)
                    same = path == edited or path.endswith("/" + edited) or edited.endswith("/" + path)
                    if live and same and (newest is None or live[-1].step >= newest.step):
                        newest = live[-1]
                if newest is not None:
                    current[edited] = newest.item_id
            self._current = current
        return dict(self._current)

    def edits(self) -> dict[str, str]:
        """Every file the agent edited (:func:`edited_paths`) → the id of the newest message
        that edited it (the assistant message whose tool call made the edit)."""
        return dict(self._edited)

    def _touch(self, table: OrderedDict[str, list[_LiveView]] | OrderedDict[bytes, list[str | int]] | OrderedDict[tuple[str, str, str], deque[_LiveFact]], key: object) -> None:
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
        parsed = parse_call(arguments)
        args = parsed.canonical
        # the call's key by digest: an index entry per distinct call holds 16 bytes, not its
        # whole arguments (a heredoc may be kilobytes)
        key = hashlib.blake2b(f"{name} {args}".encode("utf-8", "surrogatepass"), digest_size=16).digest()
        links: list[SupersedeLink] = []
        calls = self._calls
        live = calls.get(key)
        # a call's live results all have one content hash (a result of another hash supersedes
        # them all), kept flat: [hash, id, step, id, step, …] — a repeat of the same result is an
        # append, not a pass over the live results (issue 24)
        if live is None:
            calls[key] = [item.content_hash, item.id, item.step]
            self._touch(calls, key)
        elif live[0] == item.content_hash:  # identical repeats: nothing changes
            calls.move_to_end(key)
            live += (item.id, item.step)
            if len(live) > 1 + 2 * _MAX_LIVE_PER_KEY:
                del live[1:3]
        else:
            calls.move_to_end(key)
            shown = args if len(args) <= 120 else args[:117] + "…"
            for n in range(1, len(live), 2):
                links.append(SupersedeLink(
                    cast(str, live[n]), item.id, "tool_call", self._label(f"{name} {shown}"),
                    f"the same call ({name} {shown}) returned a newer result at step {item.step}",
                    older_step=cast(int, live[n + 1]), newer_step=item.step,
                ))
            calls[key] = [item.content_hash, item.id, item.step]
        if parsed.views and not _failed(item.text):
            for view in parsed.views:
                if not view.write:
                    links.extend(self._observe_view(item.id, item.step, view, item.content_hash))
        return links

    def _label(self, key: str) -> str:
        """``key`` as the one string every link of that key holds (a call or a file superseded
        again and again: one key string, not one per link; issue 24). Bounded; equal either way."""
        got = self._labels.get(key)
        return got if got is not None else remember(self._labels, key, key, _MAX_LABELS)

    def _observe_writes(self, item: SupersedeItem) -> list[SupersedeLink]:
        links: list[SupersedeLink] = []
        for _name, arguments in item.calls:
            parsed = parse_call(arguments)
            for path in parsed.edited:
                self._current = None  # what edited_views reads changed
                self._edited[path] = item.id
                self._edited.move_to_end(path)
                while len(self._edited) > self.max_keys:
                    self._edited.popitem(last=False)
            for view in parsed.views:
                if view.write:
                    links.extend(self._observe_view(item.id, item.step, view, item.content_hash))
        return links

    def _observe_view(self, item_id: str, step: int, view: FileView, content_hash: str) -> list[SupersedeLink]:
        self._current = None  # what edited_views reads changes
        live = self._views.setdefault(view.path, [])
        self._touch(self._views, view.path)
        self._by_name.setdefault(posixpath.basename(view.path), set()).add(view.path)
        links: list[SupersedeLink] = []
        kept: list[_LiveView] = []
        for older in live:
            if older.item_id != item_id and view.contains(older.view) and older.content_hash != content_hash:
                verb = "written whole" if view.write else "shown again"
                links.append(SupersedeLink(
                    older.item_id, item_id, "resource", self._label(f"file {older.view.label}"),
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

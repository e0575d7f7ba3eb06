"""Versioned scoring prompt templates (SPEC §4): loading and rendering, no network.

A template is a text file ``prompts/<version>.txt``: ``key: value`` header lines (at
least ``version:``, equal to the file name), then three sections introduced by
``=== system ===``, ``=== user ===`` and ``=== item ===``. Sections use
:class:`string.Template` placeholders (``$name``), so braces in the template or in the
substituted message contents need no escaping and contents are never re-interpreted.

Files are read with :mod:`importlib.resources` from ``relevance_memory/prompts`` (where
the wheel puts them), falling back to the repository's top-level ``prompts/`` directory
in an editable install.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from string import Template

from .._exceptions import ConfigError
from .._models import TaskGoal
from .._text import preview
from ._scorer import ScoreItem

__all__ = ["DEFAULT_PREVIEW_CHARS", "ScoringPrompt", "available_prompts", "load_prompt"]

DEFAULT_PREVIEW_CHARS = 1200
"""Characters of a message shown to the scorer (head + tail with a cut marker)."""
GOAL_PREVIEW_CHARS = 4000
"""Characters of the final goal / subtask shown to the scorer (head + tail)."""

_SECTION_RE = re.compile(r"^=== (system|user|item) ===[ \t]*$", re.MULTILINE)
_DATA_CLOSE_RE = re.compile(r"</(data|goal|subtask)", re.IGNORECASE)
_VERSION_RE = re.compile(r"^[A-Za-z0-9_.-]+$")


def _neutralise(text: str) -> str:
    """Escape closing delimiter tags so quoted content cannot end its own data block."""
    return _DATA_CLOSE_RE.sub(lambda m: "<\\/" + m.group(1), text)


@dataclass(frozen=True)
class ScoringPrompt:
    """A parsed scoring template.

    Attributes:
        version: the template's version id (the rubric version in cache keys and records).
        system: the system message text (rubric, rules, reply format).
        user: the user message template (``$final_goal $subtask $messages $ids $count``).
        item: the per-message template (``$id $role $msg_type $source $preview``).
        preview_chars: characters of each message shown, head + tail (chars).
    """

    version: str
    system: str
    user: str
    item: str
    preview_chars: int = DEFAULT_PREVIEW_CHARS

    def render_item(self, item: ScoreItem) -> str:
        """One message as ``[id] (role/msg_type, source)`` plus its delimited preview; a
        superseded message (issue 11) gets one more line naming the newer message."""
        text = Template(self.item).substitute(
            id=item.id,
            role=item.role,
            msg_type=item.msg_type,
            source=_neutralise(item.source),
            preview=_neutralise(preview(item.text, self.preview_chars)),
        )
        if item.superseded_by:
            text += f"\n(superseded by {_neutralise(preview(item.superseded_by, 200))}; its value is out of date)"
        return text

    def render_user(self, goal: TaskGoal, items: Sequence[ScoreItem], rendered: Sequence[str] | None = None) -> str:
        """The user message for ``items`` (``rendered``: their :meth:`render_item` texts, if known)."""
        blocks = list(rendered) if rendered is not None else [self.render_item(i) for i in items]
        return Template(self.user).substitute(
            final_goal=_neutralise(preview(goal.final, GOAL_PREVIEW_CHARS)) or "(not stated)",
            subtask=_neutralise(preview(goal.effective_subtask, GOAL_PREVIEW_CHARS)) or "(not stated)",
            messages="\n\n".join(blocks),
            ids=", ".join(i.id for i in items),
            count=str(len(items)),
        )

    def messages(self, goal: TaskGoal, items: Sequence[ScoreItem]) -> list[dict[str, str]]:
        """The chat messages (system + user) asking for scores of ``items``."""
        return [
            {"role": "system", "content": self.system},
            {"role": "user", "content": self.render_user(goal, items)},
        ]


def _prompt_text(version: str) -> str:
    name = f"{version}.txt"
    try:
        packaged = resources.files("relevance_memory").joinpath("prompts").joinpath(name)
        if packaged.is_file():
            return packaged.read_text(encoding="utf-8")
    except (ModuleNotFoundError, FileNotFoundError, NotADirectoryError):  # pragma: no cover - odd loaders
        pass
    repo = _repo_prompts_dir() / name
    if repo.is_file():
        return repo.read_text(encoding="utf-8")
    raise ConfigError(
        f"scoring prompt {version!r} not found (looked for relevance_memory/prompts/{name} and {repo}); "
        f"available: {', '.join(available_prompts()) or 'none'}"
    )


def _repo_prompts_dir() -> Path:
    return Path(__file__).resolve().parent.parent.parent / "prompts"


def available_prompts() -> list[str]:
    """Version ids of the prompt templates that can be loaded, sorted."""
    names: set[str] = set()
    try:
        packaged = resources.files("relevance_memory").joinpath("prompts")
        if packaged.is_dir():
            names.update(p.name[:-4] for p in packaged.iterdir() if p.name.endswith(".txt"))
    except (ModuleNotFoundError, FileNotFoundError, NotADirectoryError):  # pragma: no cover
        pass
    repo = _repo_prompts_dir()
    if repo.is_dir():
        names.update(p.stem for p in repo.glob("*.txt"))
    return sorted(names)


@lru_cache(maxsize=16)
def _parse(version: str) -> tuple[str, str, str]:
    text = _prompt_text(version)
    parts = _SECTION_RE.split(text)
    header, sections = parts[0], dict(zip(parts[1::2], parts[2::2], strict=True))
    meta = {}
    for line in header.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            meta[key.strip()] = value.strip()
    if meta.get("version") != version:
        raise ConfigError(f"prompt file {version}.txt declares version {meta.get('version')!r}, expected {version!r}")
    missing = [s for s in ("system", "user", "item") if s not in sections]
    if missing:
        raise ConfigError(f"prompt {version!r} lacks section(s) {', '.join(missing)}")
    return sections["system"].strip(), sections["user"].strip(), sections["item"].strip()


def load_prompt(version: str = "score_v1", *, preview_chars: int = DEFAULT_PREVIEW_CHARS) -> ScoringPrompt:
    """Load the scoring template ``version`` (e.g. ``"score_v1"``).

    Args:
        version: template version id; the file is ``prompts/<version>.txt``.
        preview_chars: characters of each message content shown, head + tail (chars, ≥ 40).

    Raises:
        ConfigError: no such template, a malformed file, or ``preview_chars`` < 40.
    """
    if not _VERSION_RE.match(version):
        raise ConfigError(f"invalid prompt version id {version!r}")
    if preview_chars < 40:
        raise ConfigError(f"preview_chars must be at least 40, got {preview_chars}")
    system, user, item = _parse(version)
    return ScoringPrompt(version=version, system=system, user=user, item=item, preview_chars=preview_chars)

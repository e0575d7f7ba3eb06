"""Score cache on disk (SPEC §6): an in-process LRU in front of ``diskcache``.

The key is :func:`score_cache_key` (rubric version, model, final goal, subtask,
message content hash, role, msg_type). This module is the only one importing
``diskcache``. Disk trouble is never fatal: a corrupt cache database is moved aside
and rebuilt; an unwritable or unreadable directory makes the cache warn once and
carry on in memory only.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from pathlib import Path
from typing import Any

from .._models import RelevanceScore
from ._scorer import InMemoryScoreCache

__all__ = ["DiskScoreCache"]


class DiskScoreCache:
    """Two-level score cache: LRU in memory, ``diskcache.Cache`` in ``directory``.

    Args:
        directory: cache directory (created if missing).
        maxsize: entries in the in-memory LRU.
        size_limit: bytes the disk cache may take (diskcache evicts beyond it).

    Attributes:
        disk_ok: the disk level works; ``False`` after a warning (memory only).
        warnings: what went wrong with the disk, in order.
    """

    def __init__(self, directory: str | os.PathLike[str], *, maxsize: int = 100_000, size_limit: int = 2**30) -> None:
        self.directory = Path(directory)
        self._memory = InMemoryScoreCache(maxsize)
        self._size_limit = size_limit
        self.warnings: list[str] = []
        self._disk: Any = None
        self.disk_ok = False
        self._open()

    def _warn(self, message: str) -> None:
        self.warnings.append(message)
        warnings.warn(message, RuntimeWarning, stacklevel=3)

    def _open(self) -> None:
        import diskcache

        try:
            self._disk = diskcache.Cache(str(self.directory), size_limit=self._size_limit)
            self._disk.get("\x00probe")
            self.disk_ok = True
            return
        except Exception as exc:
            first = exc
        db = self.directory / "cache.db"
        if db.is_file():  # corrupt database: move it aside and start afresh
            try:
                db.replace(db.with_name(f"cache.db.corrupt-{os.getpid()}"))
                self._disk = diskcache.Cache(str(self.directory), size_limit=self._size_limit)
                self._disk.get("\x00probe")
                self.disk_ok = True
                self._warn(f"score cache at {self.directory} was corrupt ({first}); rebuilt empty")
                return
            except Exception as exc:
                first = exc
        self._disk = None
        self._warn(f"score cache at {self.directory} is unusable ({type(first).__name__}: {first}); memory only")

    def get(self, key: str) -> RelevanceScore | None:
        """The cached score or ``None``; a disk hit is promoted into the LRU."""
        score = self._memory.get(key)
        if score is not None or not self.disk_ok:
            return score
        try:
            raw = self._disk.get(key)
        except Exception as exc:
            self.disk_ok = False
            self._warn(f"score cache read failed ({type(exc).__name__}: {exc}); memory only from now on")
            return None
        if raw is None:
            return None
        try:
            score = RelevanceScore.model_validate_json(raw)
        except ValueError:
            return None  # a damaged entry is a miss
        self._memory.set(key, score)
        return score

    def set(self, key: str, score: RelevanceScore) -> None:
        """Store ``score`` in memory and (when it works) on disk."""
        self._memory.set(key, score)
        if not self.disk_ok:
            return
        try:
            self._disk.set(key, score.model_dump_json())
        except Exception as exc:
            self.disk_ok = False
            self._warn(f"score cache write failed ({type(exc).__name__}: {exc}); memory only from now on")

    def close(self) -> None:
        """Close the disk cache (safe to call twice)."""
        if self._disk is not None:
            with contextlib.suppress(Exception):
                self._disk.close()

    def __len__(self) -> int:
        return len(self._memory)

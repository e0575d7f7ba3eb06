"""Guide snippets a newcomer copies run as written (issue 40 item 3): docs/testing.md's example
(its asserts hold on the shipped fixture), docs/chat-memory.md's embedder seam and docs/boards.md's
SqliteBoard, each with its imports."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]


def _python_blocks(page: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (REPO / "docs" / page).read_text(encoding="utf-8"), flags=re.S)


def _run(code: str) -> dict[str, Any]:
    scope: dict[str, Any] = {"__name__": "snippet"}
    exec(compile(code, "<snippet>", "exec"), scope)  # the docs' own code
    return scope


def test_the_testing_guide_example_holds_on_the_shipped_fixture(monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = _python_blocks("testing.md")
    assert len(blocks) == 1
    monkeypatch.chdir(REPO)  # the fixture's path is the repo's
    scope = _run(blocks[0])
    record = scope["built"].record
    assert record.decision_for("m21").tier == "core" and record.decision_for("m1").tier == "recent"


def test_the_chat_memory_embedder_seam_runs_with_its_imports() -> None:
    seam = next(b for b in _python_blocks("chat-memory.md") if "VectorIndex" in b)
    scope = _run(seam)
    memory = scope["memory"]
    memory.extend([{"role": "user", "content": "Walk Biscuit on Saturday"}, {"role": "assistant", "content": "Sure."}])
    built = memory.build_context()
    assert memory.vectors.embedder.name == "my-model" and built.record.embedder == "my-model@my-model-1"


def test_the_sqlite_board_snippet_runs_with_its_imports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    snippet = next(b for b in _python_blocks("boards.md") if "SqliteBoard" in b)
    monkeypatch.chdir(tmp_path)
    memory = _run(snippet)["memory"]
    memory.add({"role": "user", "content": "Rename foo.py"})
    assert (tmp_path / "memory.db").is_file() and len(memory.store) == 1

"""Transcript loaders: OpenAI chat JSON/JSONL, SWE-bench agent runs, τ-bench runs.

Formats recognised (first match wins):

- a JSON list of OpenAI chat dicts (``openai``);
- a JSON object with ``messages`` (``swebench`` when it also has ``task``, else ``openai``);
- a JSON list of τ-bench results ``{task_id, trial, reward, info, traj}`` (``tau_bench``;
  pick one with ``index``), or one such object;
- JSONL: one chat dict per line (``jsonl``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._exceptions import TranscriptFormatError

__all__ = ["Transcript", "load_transcript", "parse_transcript"]


@dataclass
class Transcript:
    """Messages read from a file, plus what the file said about them.

    Attributes:
        messages: OpenAI chat dicts, in order, exactly as stored in the file.
        format: ``openai``, ``jsonl``, ``swebench`` or ``tau_bench``.
        task: the task statement the file carries, if any (SWE ``task``, τ-bench
            ``info.task.instruction``).
        meta: other top-level fields (instance id, model, reward …).
        count: how many transcripts the file holds (τ-bench files hold many).
    """

    messages: list[dict[str, Any]]
    format: str
    task: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    count: int = 1


def _messages(value: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not all(isinstance(m, dict) for m in value):
        raise TranscriptFormatError(f"{where} must be a list of chat message objects")
    return value


def parse_transcript(data: Any, *, index: int = 0, name: str = "transcript") -> Transcript:
    """Recognise the format of already-parsed JSON ``data`` (see module doc).

    Raises:
        TranscriptFormatError: no known format matches, or ``index`` is out of range.
    """
    if isinstance(data, list) and data and all(isinstance(x, dict) and "traj" in x for x in data):
        if not 0 <= index < len(data):
            raise TranscriptFormatError(f"{name} holds {len(data)} τ-bench runs; index {index} is out of range")
        item = data[index]
        task = ((item.get("info") or {}).get("task") or {}).get("instruction")
        meta = {k: item.get(k) for k in ("task_id", "trial", "reward")}
        return Transcript(_messages(item["traj"], f"{name}[{index}].traj"), "tau_bench", task, meta, len(data))
    if isinstance(data, dict) and "traj" in data:
        return parse_transcript([data], index=0, name=name)
    if isinstance(data, list):
        if data and all(isinstance(x, dict) and "role" in x for x in data):
            return Transcript(data, "openai")
        if not data:
            return Transcript([], "openai")
        raise TranscriptFormatError(
            f"{name} is a JSON list but not of chat messages (objects with a 'role') or τ-bench runs"
        )
    if isinstance(data, dict) and "messages" in data:
        meta = {k: v for k, v in data.items() if k not in ("messages", "task", "tools")}
        kind = "swebench" if "task" in data else "openai"
        task = data.get("task") if isinstance(data.get("task"), str) else None
        return Transcript(_messages(data["messages"], f"{name}.messages"), kind, task, meta)
    raise TranscriptFormatError(
        f"{name}: unknown transcript format; expected a list of OpenAI chat messages, an object "
        "with 'messages', τ-bench results with 'traj', or JSONL with one message per line"
    )


def load_transcript(path: str | Path, *, index: int = 0) -> Transcript:
    """Read a transcript file (JSON or JSONL) and recognise its format.

    Args:
        path: the file.
        index: which run to take from a file holding many (τ-bench).

    Raises:
        TranscriptFormatError: unreadable file, invalid JSON, or unknown format.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")  # a leading BOM is tolerated
    except UnicodeDecodeError as exc:
        raise TranscriptFormatError(
            f"{path} is not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start}); "
            "save the transcript as UTF-8 JSON or JSONL"
        ) from None
    except OSError as exc:
        raise TranscriptFormatError(f"cannot read {path}: {exc.strerror or exc}") from exc
    if not text.strip():
        raise TranscriptFormatError(f"{path} is empty")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as whole_error:
        rows = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as line_error:
                if number == 1 or "\n" not in text.strip():
                    raise TranscriptFormatError(
                        f"{path} is neither JSON nor JSONL: {whole_error.msg} at line {whole_error.lineno}"
                    ) from None
                raise TranscriptFormatError(
                    f"{path} looks like JSONL but line {number} is not JSON: {line_error.msg}"
                ) from None
        if rows and all(isinstance(r, dict) and "role" in r for r in rows):
            return Transcript(rows, "jsonl")
        raise TranscriptFormatError(f"{path} is JSONL but its lines are not chat messages") from None
    return parse_transcript(data, index=index, name=str(path))

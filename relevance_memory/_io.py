"""Message and transcript input: SDK message objects as dicts; transcript file loaders.

:func:`message_to_dict` turns whatever an agent loop holds — a dict, a ``TypedDict``
(``ChatCompletionMessageParam``), the SDK's ``ChatCompletionMessage`` (a reply's
``choices[0].message``) or another pydantic model with a ``role`` — into a plain OpenAI
chat dict. Ingest (:class:`MessageStore`), the managed client and the adapters all call
it, so every entry point accepts the same shapes.

Transcript formats recognised by :func:`parse_transcript` (first match wins):

- a JSON list of OpenAI chat dicts (``openai``);
- a JSON object with ``messages`` (``swebench`` when it also has ``task``, else ``openai``);
- a JSON list of τ-bench results ``{task_id, trial, reward, info, traj}`` (``tau_bench``;
  pick one with ``index``), or one such object;
- JSONL: one chat dict per line (``jsonl``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._exceptions import TranscriptFormatError

__all__ = ["Transcript", "json_safe", "load_transcript", "message_to_dict", "parse_transcript"]


def json_safe(value: Any) -> Any:
    """``value`` with every non-finite float (``inf``, ``nan``) as ``None``, so ``json.dumps``
    writes standard JSON (``Infinity`` is not JSON; parsers such as ``JSON.parse`` and ``jq``
    reject it). Mappings, lists and tuples are copied; other values are kept."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


# --------------------------------------------------------------------------- messages
def _get(obj: Any, key: str, default: Any = None) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(key, default)
    return getattr(obj, key, default)


def _plain(value: Any) -> Any:
    """``value`` with every pydantic model inside it dumped (``exclude_none``), mappings as
    dicts and tuples as lists; other values unchanged."""
    dump = getattr(value, "model_dump", None)
    if callable(dump) and not isinstance(value, type):
        return _plain(dump(exclude_none=True))
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _tool_call_dict(call: Any) -> Any:
    """A tool call as a request dict. A mapping is kept as it is (ingest validates it and
    names what is missing); an SDK object becomes ``{id, type, function: {name, arguments}}``
    (or its own payload for a custom tool call)."""
    if isinstance(call, Mapping) or not hasattr(call, "id"):
        return _plain(call)  # a dict, or not a tool call at all: ingest names what is wrong
    function = _get(call, "function")
    kind = _get(call, "type") or "function"
    if function is None and kind != "function":  # a custom tool call: keep its own payload
        return {"id": _get(call, "id"), "type": kind, kind: _plain(_get(call, kind))}
    return {
        "id": _get(call, "id"),
        "type": kind,
        "function": {"name": _get(function, "name"), "arguments": _get(function, "arguments")},
    }


def message_to_dict(message: Any) -> dict[str, Any]:
    """An OpenAI chat message as a plain request dict (a new object; the input is not changed).

    Accepted shapes: a mapping (``dict``, ``TypedDict``) — nested SDK objects inside it
    (``tool_calls`` entries, content parts) are dumped too, tuples become lists; an SDK
    message object (``response.choices[0].message``) or any object with a ``role``
    attribute — it becomes ``{role, content, tool_calls?, name?, tool_call_id?}``, leaving
    out response-only fields (``refusal``, ``annotations``, ``audio``); a reply with no
    content and no tool calls gets ``content=""`` (its refusal text when it has one).

    Values are copied at the top level and where a conversion happened; ingest takes its
    own deep, read-only copy (:func:`relevance_memory._models.freeze`).

    Raises:
        TypeError: ``message`` is neither a mapping nor an object with a ``role``.
    """
    if isinstance(message, Mapping):
        out = {k: _plain(v) for k, v in message.items()}
        calls = message.get("tool_calls")
        if isinstance(calls, (list, tuple)):
            out["tool_calls"] = [_tool_call_dict(c) for c in calls]
        return out
    role = getattr(message, "role", None)
    if role is None:
        raise TypeError(f"expected an OpenAI chat message (dict or SDK object), got {type(message).__name__}")
    out = {"role": role, "content": _plain(getattr(message, "content", None))}
    calls = getattr(message, "tool_calls", None)
    if calls:
        out["tool_calls"] = [_tool_call_dict(c) for c in calls]
    for key in ("name", "tool_call_id"):
        value = getattr(message, key, None)
        if value:
            out[key] = value
    if out["content"] is None and not calls:
        out["content"] = getattr(message, "refusal", None) or ""
    return out


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


def _refuse_benchmark(data: Any, name: str) -> None:
    """A LoCoMo or LongMemEval file is a labelled benchmark, not one transcript: say where it goes."""
    first = data[0] if isinstance(data, list) and data and isinstance(data[0], dict) else data
    if not isinstance(first, dict):
        return
    kind = (
        "locomo" if "conversation" in first and "qa" in first
        else "longmemeval" if "haystack_sessions" in first and "question" in first
        else None
    )
    if kind is not None:
        label = "LoCoMo" if kind == "locomo" else "LongMemEval"
        raise TranscriptFormatError(
            f"{name} is a {label} benchmark file (conversations with labelled questions), not one transcript; "
            f"measure evidence recall with: relmem eval {kind} {name}"
        )


def parse_transcript(data: Any, *, index: int = 0, name: str = "transcript") -> Transcript:
    """Recognise the format of already-parsed JSON ``data`` (see module doc).

    Raises:
        TranscriptFormatError: no known format matches, ``index`` is out of range, or the
            file is a LoCoMo / LongMemEval benchmark (the error names ``relmem eval``).
    """
    _refuse_benchmark(data, name)
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

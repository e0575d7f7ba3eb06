"""Value objects: messages with their metadata, the task goal, relevance scores.

Names follow SPEC §2. These models are pure data: no I/O, no clock.
"""

from __future__ import annotations

import copy
import hashlib
import json
from datetime import datetime
from enum import Enum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = [
    "Message",
    "MessageType",
    "RelevanceScore",
    "Role",
    "ScoreSource",
    "TaskGoal",
    "ToolCall",
    "content_hash",
    "content_text",
]

Role = Literal["system", "developer", "user", "assistant", "tool"]
"""OpenAI chat roles we accept. ``developer`` is OpenAI's newer name for ``system``."""

ROLES: frozenset[str] = frozenset({"system", "developer", "user", "assistant", "tool"})


class MessageType(str, Enum):
    """What a message is, beyond its role (SPEC §2). Drives score priors and half-lives."""

    USER_INSTRUCTION = "user_instruction"
    USER_CHAT = "user_chat"
    ASSISTANT_REASONING = "assistant_reasoning"
    TOOL_CALL = "tool_call"
    TOOL_RESULT = "tool_result"
    SYSTEM = "system"
    SUMMARY = "summary"


class ScoreSource(str, Enum):
    """Where a message's score in a decision record came from (SPEC §8)."""

    LLM = "llm"
    CACHE = "cache"
    OFFLINE = "offline"
    FALLBACK = "fallback"
    PINNED = "pinned"
    RECENT = "recent"


class ToolCall(BaseModel):
    """One entry of an assistant message's ``tool_calls`` (OpenAI format).

    ``arguments`` is the raw JSON string the model produced; it is counted as tokens
    but never parsed, because models emit invalid JSON and the API still accepts it.
    """

    model_config = ConfigDict(frozen=True)

    id: str = Field(min_length=1)
    type: str = "function"
    name: str
    arguments: str = ""


class Message(BaseModel):
    """One chat message plus the metadata assigned on ingest (SPEC §2).

    Build messages with :meth:`RelevanceMemoryManager.add` or :func:`ingest`, which
    validate, classify, count and link them; the constructor alone does not.

    Attributes:
        id: stable id inside one memory (``m0``, ``m1`` … unless given).
        index: 0-based position in the append-only store.
        role: OpenAI role.
        content: the content exactly as given (string, ``None`` or a list of parts).
        tool_calls: parsed view of the assistant's ``tool_calls`` (empty if none).
        tool_call_id: for ``tool`` messages, the call they answer.
        name: the optional ``name`` field (tool name on tool messages).
        msg_type: see :class:`MessageType`.
        step: the step this message belongs to (SPEC §2); ``-1`` for pinned system prompts.
        token_count: tokens this message costs in a request, counted once on ingest,
            framing overhead included (tokens).
        trace_id: explicit grouping given by the caller; messages sharing it form one chain.
        chain_id: id of the trace chain (SPEC §2) this message belongs to.
        parent_id: the message this one answers (a tool result's call), if known.
        producer: name of the agent that produced it (multi-agent provenance).
        scope: visibility scope (``private`` by default; shared boards come later).
        timestamp: when the message was added (clock injected into the manager).
        content_hash: sha256 over role, content and tool calls (hex, 16 chars).
        references: ids of earlier messages this one refers to (identifiers, paths,
            numbers, or the tool call it answers).
        raw: the original OpenAI dict, exported unchanged by :meth:`to_openai`.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    id: str
    index: int
    role: Role
    content: str | list[Any] | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    msg_type: MessageType
    step: int
    token_count: int = Field(ge=0)
    trace_id: str | None = None
    chain_id: str = ""
    parent_id: str | None = None
    producer: str | None = None
    scope: str = "private"
    timestamp: datetime | None = None
    content_hash: str = ""
    references: tuple[str, ...] = ()
    raw: dict[str, Any] = Field(default_factory=dict, repr=False)

    def to_openai(self) -> dict[str, Any]:
        """The message as an OpenAI chat dict, exactly as it was given (a deep copy)."""
        return copy.deepcopy(self.raw)

    @property
    def text(self) -> str:
        """Plain text of the content plus tool-call names and arguments (for scoring)."""
        parts = [content_text(self.content)]
        for call in self.tool_calls:
            parts.append(f"{call.name}({call.arguments})")
        return "\n".join(p for p in parts if p)

    @property
    def source(self) -> str:
        """Short provenance label used in scoring prompts: tool name or role."""
        if self.tool_calls:
            return ",".join(sorted({c.name for c in self.tool_calls}))
        if self.role == "tool" and self.name:
            return self.name
        return self.producer or self.role


class TaskGoal(BaseModel):
    """The two-layer task goal (SPEC §2): the whole job and what is being done now.

    Attributes:
        final: the whole job with every hard requirement.
        subtask: what is being done now; defaults to the final goal when empty.
        source: ``"explicit"`` when set by the caller, ``"first_user_message"`` when
            derived from the first user message, ``"none"`` when there is none yet.
    """

    model_config = ConfigDict(frozen=True)

    final: str = ""
    subtask: str = ""
    source: Literal["explicit", "first_user_message", "none"] = "none"

    @property
    def effective_subtask(self) -> str:
        """The subtask, or the final goal when no subtask was given."""
        return self.subtask or self.final


class RelevanceScore(BaseModel):
    """A 1–5 relevance score with its reason (SPEC §4 rubric).

    5 decides the task's success; 4 needed for upcoming key steps; 3 useful
    background; 2 weakly related; 1 unrelated.
    """

    model_config = ConfigDict(frozen=True)

    id: str
    score: int = Field(ge=1, le=5)
    reason: str = ""
    source: ScoreSource = ScoreSource.OFFLINE
    weight: float = Field(
        default=0.0,
        description="finer relevance within the same score (higher first; 0 when the scorer gives none); "
        "selection breaks ties between equal scores by it before recency",
    )

    @field_validator("score", mode="before")
    @classmethod
    def _no_bool_or_float(cls, value: Any) -> Any:
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ValueError(f"score must be an integer 1..5, got {value!r}")
        return value


def content_text(content: str | list[Any] | None) -> str:
    """Text of an OpenAI ``content`` value: the string, or the text parts joined.

    Non-text parts are shown as ``[image]``/``[audio]``/``[file]`` placeholders.
    """
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    out: list[str] = []
    for part in content:
        if isinstance(part, dict):
            kind = part.get("type")
            if kind in ("text", "input_text", "output_text"):
                out.append(str(part.get("text", "")))
            elif kind in ("image_url", "image", "input_image"):
                out.append("[image]")
            elif kind == "input_audio":
                out.append("[audio]")
            elif kind == "refusal":
                out.append(str(part.get("refusal", "")))
            else:
                out.append(f"[{kind}]")
        elif isinstance(part, str):
            out.append(part)
    return "\n".join(out)


def content_hash(role: str, content: Any, tool_calls: Any = None) -> str:
    """Stable 16-hex-digit sha256 over role, content and tool calls (SPEC §2, §6)."""
    if isinstance(content, str) and not tool_calls:
        payload = f"{role}\x1f{content}"
    else:
        payload = json.dumps([role, content, tool_calls], sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:16]

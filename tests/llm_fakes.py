"""Canned OpenAI chat-completion replies for scorer tests.

A *script* is a list of steps; each step answers one HTTP request: a reply dict from
:func:`content`, :func:`tool`, :func:`status`, a callable ``request_json -> reply``, or
an exception instance to raise (timeouts, resets). :func:`scripted_transport` turns a
script into an ``httpx2.MockTransport``. With ``--record-mode=rewrite`` vcrpy records
what that transport answers into the test's cassette (synthetic cassettes); in replay
(``--record-mode=none``, the default) the cassette answers and the script is unused.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import httpx2

Reply = dict[str, Any]
Step = Reply | Callable[[dict[str, Any]], Reply] | BaseException


def _completion(message: dict[str, Any], finish: str, prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    return {
        "id": "chatcmpl-synthetic",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "synthetic-model",
        "choices": [{"index": 0, "finish_reason": finish, "message": message}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def content(text: str, *, prompt_tokens: int = 120, completion_tokens: int = 30) -> Reply:
    """A 200 reply whose message content is ``text`` (JSON / MD_JSON / JSON_SCHEMA modes)."""
    return {"status": 200, "json": _completion({"role": "assistant", "content": text}, "stop", prompt_tokens, completion_tokens)}


def tool(arguments: Any, *, prompt_tokens: int = 150, completion_tokens: int = 40) -> Reply:
    """A 200 reply calling the ``ScoreReply`` tool with ``arguments`` (TOOLS mode)."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "ScoreReply", "arguments": args}}],
    }
    return {"status": 200, "json": _completion(message, "tool_calls", prompt_tokens, completion_tokens)}


def status(code: int, *, headers: dict[str, str] | None = None, message: str = "error") -> Reply:
    """An error reply with an OpenAI-style error body."""
    return {"status": code, "headers": headers or {}, "json": {"error": {"message": message, "type": "test", "code": code}}}


def requested_ids(request_json: dict[str, Any]) -> list[str]:
    """Ids listed in the scoring prompt of a request (``Rate exactly these ids, each once: …``)."""
    text = "\n".join(str(m.get("content") or "") for m in request_json.get("messages", []))
    found = re.findall(r"Rate exactly these ids, each once: (.*)", text)
    return [i.strip() for i in found[-1].split(",")] if found else []


def scripted_transport(script: list[Step], *, seen: list[dict[str, Any]] | None = None) -> httpx2.MockTransport:
    """A mock transport answering requests with ``script``'s steps, in order."""
    steps = list(script)

    def handler(request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content or b"{}")
        if seen is not None:
            seen.append(body)
        if not steps:
            raise AssertionError("the script has no reply left for this request")
        step = steps.pop(0)
        if isinstance(step, BaseException):
            raise step
        reply = step(body) if callable(step) else step
        return httpx2.Response(reply["status"], json=reply["json"], headers=reply.get("headers") or {})

    return httpx2.MockTransport(handler)


_WORD_RE = re.compile(r"[a-z0-9]+")
_STOPWORDS = frozenset(
    ["a", "an", "and", "are", "as", "at", "be", "by", "did", "do", "does", "for", "from", "had", "has", "have", "he", "her", "his", "how", "i", "in", "is", "it", "its", "me", "my", "of", "on", "or", "our", "she", "so", "that", "the", "their", "them", "they", "this", "to", "was", "we", "were", "what", "when", "where", "which", "who", "why", "will", "with", "you", "your"]
)


def _content_words(text: str) -> set[str]:
    return {w[:6] for w in _WORD_RE.findall(text.lower()) if w not in _STOPWORDS and len(w) > 2}


def capable_judge(request_json: dict[str, Any]) -> Reply:
    """A scripted judge that *reads the prompt it is sent*: it finds the goal and subtask
    blocks and each requested id's ``<data>`` block, and scores a message by how many
    content words it shares with them (0 → 1, 1 → 2, 2 → 3, 3 → 4, ≥ 4 → 5). A prompt
    that drops the goal, mangles the ids or cuts the evidence out of a preview scores
    worse with it; it cannot judge wording. Answers in the request's mode (a tool call
    when the request carries tools)."""
    text = "\n".join(str(m.get("content") or "") for m in request_json.get("messages", []))
    goal = " ".join(re.findall(r"<(?:goal|subtask)>\n(.*?)\n</(?:goal|subtask)>", text, flags=re.S))
    wanted = _content_words(goal)
    blocks = dict(re.findall(r'<data id="([^"]+)">\n(.*?)\n</data>', text, flags=re.S))
    scores = [
        {"id": i, "reason": "shares words with the goal" if i in blocks else "not shown",
         "score": 1 + min(4, len(wanted & _content_words(blocks.get(i, ""))))}
        for i in requested_ids(request_json)
    ]
    if request_json.get("tools"):
        return tool({"scores": scores})
    return content(json.dumps({"scores": scores}))

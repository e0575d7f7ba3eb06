"""What the user asked for (SPEC §11 *Goal*): the final goal of a chat-style agent, and the
notices an agent harness repeats.

- A chat-style agent's first user message is often an opener that carries no task of its own
  ("Hi! I need to make a few changes to my upcoming trip."), and the customer's real requests
  come in later turns (τ-bench). When the first message is such an opener, or the history is an
  agent's (it has tool calls) and a person keeps asking, the final goal is formed from the
  user's requests as they arrive (:func:`goal_from_requests`): the first message, then each
  later request, newest last, a correction marking the request it corrects; the decision
  record says so (``TaskGoal.source == "user_requests"``). A plain chat whose first message
  has a task of its own (hard rules, a question), and an agent run whose user only spoke once
  (a SWE-bench task: the harness's notices are no requests) keep the first message as the goal.
- A message the harness repeats verbatim or near-verbatim (mini-swe-agent's "Please always
  provide EXACTLY ONE action …", up to 8 times in one run) is a format notice, not a hard
  constraint (:class:`NoticeIndex`): the offline scorer scores its newest copy once, as
  background, and its older copies as repeats.

Pure functions plus two incremental indexes (O(new messages) per build): the notices, and the
user's own messages that :class:`GoalTracker` forms the goal in force from.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from ._exceptions import ConfigError
from ._models import Message, TaskGoal, content_text, has_tool_calls, user_authored

__all__ = [
    "NOTICE_MIN_WORDS",
    "OPENER_MAX_WORDS",
    "REQUEST_MIN_WORDS",
    "GoalTracker",
    "NoticeIndex",
    "goal_from_requests",
    "is_correction",
    "is_opener",
    "is_request",
    "notice_key",
]

NOTICE_MIN_WORDS = 6
"""A repeated user message shorter than this many words ("ok", "go on", "thanks") is a person's
short turn, never a format notice: a harness's notice says what to do differently."""
OPENER_MAX_WORDS = 60
"""A first user message of at most this many words may be an opener (a greeting, a vague
request): when the user speaks again, the goal follows their requests."""
REQUEST_MIN_WORDS = 4
"""A user turn of fewer words ("ok", "thanks", "go on") is no request of its own."""
GOAL_MAX_CHARS = 2_400
"""The longest goal formed from the user's requests (characters; the newest requests win)."""
REQUEST_MAX_CHARS = 400
"""Each request is clipped to this many characters in that goal."""

_WORD = re.compile(r"\w+")
_CORRECTION = re.compile(
    r"\b(?:wrong|mistake|mistaken|actually|instead|sorry,? (?:i|it|that)|i meant|correction|change of plans?|"
    r"scratch that|never mind|not that one|rather than)\b|搞错|说错|改成|不是.{0,12}而是",
    re.IGNORECASE,
)
_DIGITS = re.compile(r"\d+")
_SPACE = re.compile(r"\s+")


_GREETING = re.compile(
    r"^\W*(?:hi|hello|hey|hiya|howdy|greetings|good (?:morning|afternoon|evening|day)|bonjour|salut|hola|hallo|"
    r"ciao|ola|olá|你好|您好|嗨|こんにちは|안녕하세요)\b",
    re.IGNORECASE,
)


def is_opener(text: str) -> bool:
    """Whether a first user message carries no task of its own (SPEC §11): a short message (at
    most :data:`OPENER_MAX_WORDS` words) that opens with a greeting ("Hi! I need to make a few
    changes to my upcoming trip."), or one of at most :data:`REQUEST_MIN_WORDS` words. A task
    statement ("Fix the date parser in parser.py", a GitHub issue, hard rules) is not one."""
    words = len(_WORD.findall(text))
    return words < REQUEST_MIN_WORDS or (words <= OPENER_MAX_WORDS and _GREETING.search(text) is not None)


def is_request(text: str) -> bool:
    """Whether a user turn says enough to be a request (at least :data:`REQUEST_MIN_WORDS`
    words): "ok", "thanks", "go on" are not."""
    return len(_WORD.findall(text)) >= REQUEST_MIN_WORDS


def is_correction(text: str) -> bool:
    """Whether a user message corrects an earlier one ("I provided the wrong reservation ID",
    "actually, …", "… instead", "change of plan")."""
    return _CORRECTION.search(text) is not None


def notice_key(text: str) -> str:
    """What a near-verbatim repeat shares: the text lower-cased, digits as ``#``, whitespace
    collapsed, hashed ("found 0 actions" and "found 2 actions" are one notice)."""
    normal = _SPACE.sub(" ", _DIGITS.sub("#", text.lower())).strip()
    return hashlib.sha256(normal.encode()).hexdigest()[:16]


def goal_from_requests(messages: Sequence[Message], first_user: int, notices: NoticeIndex | None = None) -> str:
    """The final goal of a chat-style agent (module doc): every message the user wrote, from
    the first, in order — a request a later correction corrects marked ``(corrected below)``,
    format notices and repeats left out — each clipped to :data:`REQUEST_MAX_CHARS`; when they
    exceed :data:`GOAL_MAX_CHARS`, the first and the newest are kept. Pure."""
    requests: list[str] = []
    seen: set[str] = set()
    for message in messages[first_user:]:
        if not user_authored(message.role, message.msg_type.value):
            continue
        if notices is not None and notices.is_notice(message):
            continue
        text = " ".join(content_text(message.content).split())
        if not text or text in seen or (requests and not is_request(text) and not is_correction(text)):
            continue
        seen.add(text)
        if requests and is_correction(text):
            requests[-1] += " (corrected below)"
        requests.append(text if len(text) <= REQUEST_MAX_CHARS else text[: REQUEST_MAX_CHARS - 1] + "…")
    if not requests:
        return ""
    first, later = requests[0], requests[1:]
    out: list[str] = []
    used = len(first) + 1
    for request in reversed(later):
        if out and used + len(request) + 1 > GOAL_MAX_CHARS:
            break
        out.append(request)
        used += len(request) + 1
    return "\n".join([first, *reversed(out)])


@dataclass
class NoticeIndex:
    """User messages by :func:`notice_key`, grown incrementally with the store (O(new)).

    In an agent run (a history with tool calls), a user message of at least
    :data:`NOTICE_MIN_WORDS` words is a *format notice* when its key occurs at least twice: the
    harness says it again every time the agent breaks its format. In a conversation a person's
    repeated question ("What is the lead time of option 2?", "… option 3?") is a new question,
    never a notice.
    """

    _seen: int = 0
    _copies: dict[str, list[int]] = field(default_factory=dict)
    _keys: dict[int, str] = field(default_factory=dict)
    _tools: bool = False

    def update(self, messages: Sequence[Message]) -> None:
        """Index the messages stored since the last call."""
        for message in messages[self._seen:]:
            if has_tool_calls(message):
                self._tools = True
            if message.role == "user" and user_authored(message.role, message.msg_type._value_):
                text = content_text(message.content)
                if len(_WORD.findall(text)) < NOTICE_MIN_WORDS:
                    continue  # "ok", "thanks", "go on": short turns people repeat, not notices
                key = notice_key(text)
                self._keys[message.index] = key
                self._copies.setdefault(key, []).append(message.index)
        self._seen = max(self._seen, len(messages))

    def copies(self, message: Message) -> list[int]:
        """Store indices of the message's copies (itself included), oldest first."""
        key = self._keys.get(message.index)
        return self._copies.get(key, []) if key is not None else []

    @property
    def agent_run(self) -> bool:
        """Whether the history indexed so far holds a tool call (an agent, not a plain chat)."""
        return self._tools

    def is_notice(self, message: Message) -> bool:
        """Whether ``message`` is a format notice (class doc)."""
        return self._tools and len(self.copies(message)) >= 2


class GoalTracker:
    """The task goal in force (SPEC §2, §11): the final goal and subtask a caller set; without a
    final goal, the first user message — or, for a chat-style agent, the user's requests as
    they arrive (module doc). The store is read only where it grew since the last call.
    """

    def __init__(self) -> None:
        self.final: str | None = None
        self.subtask = ""
        self.notices = NoticeIndex()  # user messages by notice key: repeated harness notices
        self._said: list[int] = []  # indices of the user's own messages, grown with the store (O(new))
        self._said_read = 0  # how much of the store ``_said`` has read
        self._made: TaskGoal | None = None  # the last goal made (frozen): given again while its fields hold
        # the first user message's index, stripped text and whether it is an opener (is_opener)
        self._first_text: tuple[int, str, bool] | None = None

    def set(self, final: str | None, subtask: str | None) -> None:
        """Set the final goal and/or the subtask (stripped); ``None`` leaves a layer as it is.

        Raises:
            ConfigError: ``final`` or ``subtask`` is not a string (or ``None``).
        """
        for name, value in (("final", final), ("subtask", subtask)):
            if value is not None and not isinstance(value, str):
                raise ConfigError(f"set_goal({name}=...) takes a string or None, got {type(value).__name__} {value!r}")
        if final is not None:
            self.final = final.strip() or None
        if subtask is not None:
            self.subtask = subtask.strip()

    def goal(self, messages: Sequence[Message], first_user: int | None) -> TaskGoal:
        """The goal in force over the stored ``messages`` (``first_user``: the first user message's index)."""
        if self.final:
            return self._goal(self.final, "explicit")
        if first_user is None:
            return self._goal("", "none")
        if self._first_text is None or self._first_text[0] != first_user:  # stored messages never change
            text = content_text(messages[first_user].content).strip()
            self._first_text = (first_user, text, is_opener(text))
        _, text, opener = self._first_text
        said = self._user_messages(messages, first_user)
        if (opener or self.notices.agent_run) and self._user_spoke_again(messages, said):
            # a chat-style agent: the goal follows the user's requests (SPEC §11)
            final = goal_from_requests([messages[i] for i in said], 0, self.notices)
            return self._goal(final, "user_requests")
        return self._goal(text, "first_user_message")

    def _goal(self, final: str, source: Literal["explicit", "first_user_message", "user_requests", "none"]) -> TaskGoal:
        """``TaskGoal(final, self.subtask, source)``: the last one made when equal (it is frozen)."""
        made = self._made
        if made is None or made.final != final or made.subtask != self.subtask or made.source != source:
            made = self._made = TaskGoal(final=final, subtask=self.subtask, source=source)
        return made

    def _user_messages(self, messages: Sequence[Message], first: int) -> list[int]:
        """Indices of the user's own messages from the first user message on (the store is read
        only where it grew since the last call; the notice index is brought up to date too)."""
        self.notices.update(messages)
        start, self._said_read = max(first, self._said_read), len(messages)
        self._said.extend(i for i in range(start, len(messages))
                          if user_authored(messages[i].role, messages[i].msg_type._value_))
        return self._said

    def _user_spoke_again(self, messages: Sequence[Message], said: list[int]) -> bool:
        """Whether a person wrote a request after the first user message (``said[0]``; format
        notices and acknowledgements such as "ok" aside)."""
        for i in reversed(said[1:]):
            message = messages[i]
            if not self.notices.is_notice(message) and is_request(content_text(message.content)):
                return True
        return False

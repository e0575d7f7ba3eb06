"""What ties one agent's manager to a board: its journal, what it publishes, what it reads.

- **Journal**: every message the agent's store takes in (its own, and other agents' it
  imported) is appended to its private log ``private:<agent>`` with the exact OpenAI dict
  and metadata, so a restarted agent rebuilds the same store and resumes reading the
  shared scopes where it stopped.
- **Publish**: a message whose scope is shared (explicitly, or by the
  :class:`PublishRule`) is appended to that scope's log as :func:`log_entry` fields.
- **Sync**: before a build, the agent reads each of its scopes' logs since its cursor and
  imports other agents' messages (:func:`imported_message`); its own are skipped.
- **Lease**: after a build, the shared items it used are leased, and their provenance and the
  board's faults go into the decision record (:meth:`AgentLink.lease`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .._config import PheromoneConfig
from .._exceptions import BoardError
from .._models import Message
from .._record import BoardReport
from ..pheromone._field import pheromone_kind
from ._agent import AgentMemory
from ._mirror import MirroredBoard
from ._model import Add, Archive, Forget, LogEntry
from ._protocol import MemoryBoard
from ._publish import PublishRule, imported_message, log_entry
from ._redis import RedisBoard

if TYPE_CHECKING:
    from ..pipeline._state import BuiltContext
    from ..store._store import MessageStore

__all__ = ["AgentLink", "call_of"]

Adder = Callable[..., "Message | None"]
CHUNK = 500
"""Log entries per append or read call (bounded request and reply sizes)."""


class AgentLink:
    """The board side of one agent's manager (see the module doc).

    Args:
        memory: the agent's :class:`AgentMemory` (its board, agent and scopes).
        publish: the rule deciding what goes to a shared scope.
    """

    def __init__(self, memory: AgentMemory, publish: PublishRule) -> None:
        self.memory = memory
        self.board: MemoryBoard = memory.board
        self.agent = memory.agent
        self.publish = publish
        self.cursors: dict[str, str | None] = dict.fromkeys(memory.scopes)
        self.imported = 0
        """Messages of other agents imported so far."""
        self.published: set[str] = set()
        """Ids this agent has published (a resynced history does not publish them again)."""
        self._journal: list[dict[str, str]] = []
        self._batching = False

    @classmethod
    def attach(
        cls, config: PheromoneConfig, board: MemoryBoard, agent: str, *, scopes: Sequence[str],
        publish: PublishRule | None, clock: Callable[[], datetime],
    ) -> AgentLink:
        """The link of ``agent``'s memory on ``board`` (a :class:`RedisBoard` is wrapped in a
        :class:`MirroredBoard`, so builds go on when Redis is unreachable); ``clock`` gives "now"."""
        if isinstance(board, RedisBoard):
            board = MirroredBoard(board)
        memory = AgentMemory(config, board, agent, scopes=scopes, clock=lambda: clock().timestamp())
        return cls(memory, publish or PublishRule())

    def add(self, store: MessageStore, message: Mapping[str, Any], meta: dict[str, Any], cursor: str | None) -> Message:
        """Store an agent's message (``meta``: its metadata, id and producer included), journal it
        and, when its scope is shared (explicitly or by the publish rule), publish it; a message
        imported from a shared scope (``cursor``: where its log was read) is journaled only."""
        if cursor is None and "scope" not in meta:
            # the rule reads the type the store will give it (messages are frozen once stored)
            meta["scope"] = self.scope_for(store.message_type(message, meta.get("msg_type")).value)
        added = store.add(message, **meta)
        self.journal(added, message, meta, cursor)
        if cursor is None:
            self.announce(added, call_of(added, store.messages))
        return added

    def resume(self, store: MessageStore) -> None:
        """Rebuild ``store`` from the agent's journal (a restarted agent), strengths included."""
        entries = self.replay()
        for raw, meta in entries:
            store.add(raw, **meta)
        if entries:
            self.memory.resume_from_board()

    def carry_over(self, other: AgentLink) -> None:
        """Take ``other``'s cursors, counts and published ids (a resync: the same agent)."""
        self.cursors = dict(other.cursors)
        self.imported = other.imported
        self.published = other.published

    def reset_journal(self) -> None:
        """Mark the journal: a restart replays only what follows (the history was replaced)."""
        try:
            self.board.append(self.memory.private, [{"reset": "1"}], agent=self.agent)
        except BoardError as exc:
            self._note("journal reset not written", exc)

    def _note(self, what: str, exc: Exception) -> None:
        self.memory.faults.append(f"board {self.board.name!r}: {what} ({exc})")

    def metadata(self, index: int, metadata: Mapping[str, Any]) -> dict[str, Any]:
        """The metadata of the agent's own ``index``-th message: an id unique across agents
        (``<agent>:m<index>`` unless given), ``producer=agent``, a scope by the rule."""
        meta = dict(metadata)
        meta.setdefault("id", f"{self.agent}:m{index}")
        meta.setdefault("producer", self.agent)
        return meta

    def scope_for(self, msg_type: str) -> str:
        """The board scope of a new own message of type ``msg_type`` by the publish rule
        (a scope this agent does not use falls back to its private scope)."""
        scope = self.publish.scope_for(msg_type, self.agent)
        return scope if scope in self.memory.scopes else self.memory.private

    def journal(self, message: Message, raw: Mapping[str, Any], meta: Mapping[str, Any],
                cursor: str | None = None) -> None:
        """Append the message to the agent's private log (for a restart).

        A timestamp the clock gave is journaled as ``clock_timestamp``, so the restarted
        agent's message keeps its time, and its episode (the store reads it as the clock's)."""
        meta = dict(meta)
        if meta.get("timestamp") is None and message.timestamp is not None:
            meta["clock_timestamp"] = message.timestamp.isoformat()
        entry = {"raw": json.dumps(dict(raw), ensure_ascii=False), "meta": json.dumps(meta, ensure_ascii=False,
                                                                                   default=str)}
        if cursor is not None:
            entry["cursor"], entry["from"] = cursor, message.scope
        self._journal.append(entry)
        if not self._batching:
            self.flush()

    def flush(self) -> None:
        """Write the journal entries not yet written, in one append."""
        if not self._journal:
            return
        entries, self._journal = self._journal, []
        for lo in range(0, len(entries), CHUNK):
            try:
                self.board.append(self.memory.private, entries[lo:lo + CHUNK], agent=self.agent)
            except BoardError as exc:
                self._note(f"{len(entries[lo:lo + CHUNK])} journal entr(ies) not written", exc)

    def announce(self, message: Message, call: Mapping[str, str] | None) -> None:
        """Publish an own message to its shared scope's log."""
        if message.scope not in self.memory.scopes or message.id in self.published:
            return
        self.published.add(message.id)
        kind = pheromone_kind(message.msg_type.value, message.role, message.text)
        try:
            # the item exists on the board from the moment it is published (born at the
            # scope's tick, produced by this agent), before anyone imports it
            self.board.apply([Add(message.scope, message.id, kind, self.agent, at=self.memory.now())])
            self.board.append(message.scope, [log_entry(message, self.agent, message.scope, call)], agent=self.agent)
        except BoardError as exc:
            self._note(f"{message.id} not published to {message.scope!r}", exc)

    def sync(self, add: Adder) -> int:
        """Import what other agents published since the last sync; returns how many.

        ``add(message_dict, **metadata)`` ingests one message into the agent's store (the
        manager's own ``add``, which journals it)."""
        count = 0
        self._batching = True
        try:
            count = self._import(add)
        finally:
            self._batching = False
            self.flush()
        self.imported += count
        take = getattr(self.board, "take_faults", None)
        if callable(take):
            self.memory.faults.extend(take())
        return count

    def _import(self, add: Adder) -> int:
        count = 0
        for scope in self.memory.scopes:
            entries = self._read_all(scope, self.cursors[scope])
            for entry in entries:
                self.cursors[scope] = entry.cursor
                fields = entry.fields
                if fields.get("producer") == self.agent or "id" not in fields:
                    continue
                raw, meta = imported_message(fields)
                add(raw, _cursor=entry.cursor, **meta)
                count += 1
        return count

    def _read_all(self, scope: str, since: str | None) -> list[LogEntry]:
        out: list[LogEntry] = []
        while True:
            try:
                got = self.board.read(scope, since, agent=self.agent, count=CHUNK)
            except BoardError as exc:
                self._note(f"{scope!r} not read", exc)
                return out
            out += got
            if len(got) < CHUNK:
                return out
            since = got[-1].cursor

    def replay(self) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        """The journal, as ``(message dict, metadata)`` in order, and the scope cursors it
        had reached (a restarted agent re-ingests these without journaling them again)."""
        entries = self._read_all(self.memory.private, None)
        out: list[tuple[dict[str, Any], dict[str, Any]]] = []
        for entry in entries:
            fields = entry.fields
            if fields.get("reset"):
                out = []
                continue
            if "raw" not in fields:
                continue
            out.append((json.loads(fields["raw"]), json.loads(fields.get("meta", "{}"))))
            if fields.get("cursor") and fields.get("from") in self.cursors:
                self.cursors[fields["from"]] = fields["cursor"]
        return out

    def lease(self, built: BuiltContext, messages: Sequence[Message], build_number: int) -> None:
        """Lease the shared items ``built`` uses (``messages``: the agent's store), and put their
        provenance and the board's faults in its record (SPEC §8, §10)."""
        memory = self.memory
        if built.sources:  # O(context): an appended build's per-message record stays unbuilt
            emitted = [messages[i] for i in built.sources if i is not None]
            used = [m.id for m in emitted]
            shared = [m.id for m in emitted if m.scope in memory.scopes]
        else:
            used = [d.id for d in built.record.messages if d.decision in ("kept", "recent")]
            shared = [d.id for d in built.record.messages if d.scope in memory.scopes and d.decision in ("kept", "recent")]
        memory.use(used, build_number)
        items = memory.provenance(shared)
        built.record.board = BoardReport(
            board=memory.board.name, agent=memory.agent, source=memory.source, scopes=list(memory.scopes),
            imported=self.imported, faults=memory.take_faults(), items=items,
        )
        if built.record.board.faults:
            built.record.warnings.append(
                f"memory board {memory.board.name!r}: {len(built.record.board.faults)} fault(s), see record.board")

    def forget(self, message_id: str, messages: Sequence[Message], *, archive: bool, reason: str) -> str:
        """Forget (or archive) the item ``message_id`` on the board for every agent (``messages``:
        the agent's store, whose copy names its scope when the board does not); returns the
        board's outcome (refused while another agent uses it)."""
        memory = self.memory
        held = next((m for m in messages if m.id == message_id), None)
        scope = memory.scope_of(message_id) or (memory.board_scope(held) if held is not None else memory.private)
        op = (Archive if archive else Forget)(scope, message_id, memory.agent, reason)
        outcome = memory.board.apply([op]).outcomes[0]
        memory.refresh()
        return outcome


def call_of(message: Message, messages: Sequence[Message]) -> dict[str, str] | None:
    """The tool call (name and arguments) a tool ``message`` answers, found in ``messages``, or ``None``."""
    if message.role != "tool" or message.tool_call_id is None:
        return None
    for other in reversed(messages):
        for call in other.tool_calls:
            if call.id == message.tool_call_id:
                return {"name": call.name, "arguments": call.arguments}
    return None

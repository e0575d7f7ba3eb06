"""Memory boards (SPEC §10): private memories and shared pheromone boards for several agents.

A board holds pheromone cells per *scope* (``private:<agent>``, ``shared``, ``global``, or
a team scope), each cell carrying its SPEC §5 memory plus provenance (producer, who
deposited, reinforced or used it, when) and a lifecycle (active, archived, forgotten,
superseded). Reads are pure snapshots — evaporation computed into the view; writes are
batches of operations applied atomically. Backends:

- :class:`InMemoryBoard` — in this process (the reference);
- :class:`RedisBoard` — on Redis (extra ``relevance-memory[redis]``), one Lua script per batch;
- :class:`SqliteBoard` — in one SQLite file (stdlib): durable, crash-safe, no server;
- :class:`MirroredBoard` — a remote board plus a local copy that keeps builds going when
  the server is unreachable, and says so (a :class:`CircuitBreaker` in the remote board
  makes an unreachable server cost one bounded call, not one per operation).
"""

from __future__ import annotations

from .._exceptions import BoardError, BoardUnavailableError, MissingExtraError, ScopeError
from ._agent import AgentMemory
from ._breaker import CircuitBreaker
from ._link import AgentLink
from ._memory import InMemoryBoard
from ._mirror import MirroredBoard
from ._model import (
    Add,
    Advance,
    Archive,
    BatchResult,
    BoardCell,
    BoardConfig,
    CellView,
    Deposit,
    Event,
    Forget,
    LogEntry,
    Op,
    Reinforce,
    Repair,
    Restore,
    Snapshot,
    Supersede,
    Use,
    check_access,
    decode_cell,
    encode_cell,
    is_private,
    private_scope,
    task_key,
)
from ._protocol import MemoryBoard
from ._publish import PublishRule, imported_message, log_entry
from ._redis import BoardRetry, RedisBoard  # imports redis-py only when a RedisBoard is made
from ._sqlite import SqliteBoard

__all__ = [
    "Add",
    "Advance",
    "AgentLink",
    "AgentMemory",
    "Archive",
    "BatchResult",
    "BoardCell",
    "BoardConfig",
    "BoardError",
    "BoardRetry",
    "BoardUnavailableError",
    "CellView",
    "CircuitBreaker",
    "Deposit",
    "Event",
    "Forget",
    "InMemoryBoard",
    "LogEntry",
    "MemoryBoard",
    "MirroredBoard",
    "MissingExtraError",
    "Op",
    "PublishRule",
    "RedisBoard",
    "Reinforce",
    "Repair",
    "Restore",
    "ScopeError",
    "Snapshot",
    "SqliteBoard",
    "Supersede",
    "Use",
    "check_access",
    "decode_cell",
    "encode_cell",
    "imported_message",
    "is_private",
    "log_entry",
    "private_scope",
    "task_key",
]

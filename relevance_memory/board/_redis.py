"""A memory board on Redis (optional extra ``relevance-memory[redis]``: redis-py, msgpack).

Layout, for board ``B`` under prefix ``P`` (the ``{B}`` hash tag puts a whole board in one
Redis Cluster slot, so one script may touch all its keys)::

    P:{B}:cells:<scope>     hash   item id → the cell, one MessagePack array (``_packed``);
                                   "" → the scope's tick (no item id is empty)
    P:{B}:events:<scope>    hash   "<id>\t<seq>" → one provenance event (the newest
                                   ``events_kept`` seqs of each item; form 1: "<id>" → its
                                   events packed end to end, moved by the first batch that
                                   writes the cell)
    P:{B}:meta:<scope>      hash   "logged" → entries appended to the log
    P:{B}:edges:<scope>     hash   "<id>\\t<source>" → edge strength
    P:{B}:log:<scope>       stream the scope's shared message log
    P:{B}:batch:<id>        string marker of an applied batch (expires after batch_ttl_seconds)

Writes: one Lua script (``_board.lua``) applies a whole batch atomically — it settles the
evaporation of the cells it touches in closed form, then adds the soft-capped,
share-capped deposit (``HINCRBYFLOAT`` alone cannot express the cap); a cell is one
MessagePack array (exact doubles, no JSON, no decimal formatting) and each of its events
a hash field of its own, written and deleted but never read by a batch; a scope costs a
batch one ``HMGET`` and one ``HSET`` of its tick and cells, one ``HSET`` of their new
events and one ``HDEL`` of the oldest. Reads: one ``HMGET`` of the tick and the ids per
snapshot (with ``provenance=True`` a second one of their events, whose fields the cells
name), each cell decoded once per change and viewed once per (tick, task) by the same
pure functions as the in-memory board. A batch keeps its id across retries, so
it is applied at most once even when a reply was lost.

Faults never stall a step: every socket operation is bounded (``from_url``: 200 ms to
connect, 200 ms per read or write), a timeout is not retried, and a
:class:`~relevance_memory.board.CircuitBreaker` turns the first failed call into fast
failures (no round trip) for a back-off period, then lets one probe through. A call
that fails therefore waits at most :data:`CALL_BOUND_S` (0.46 s with the defaults), and
every later call of the same step returns at once while the circuit is open. (The bound
is per socket operation: a server that answers each one just inside it is slow, not down.)
"""

from __future__ import annotations

import itertools
import json
import os
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from importlib import resources
from typing import Any, TypeVar, cast

from tenacity import (
    RetryError,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential,
)

from .._config import PHEROMONE_KINDS
from .._exceptions import BoardError, BoardUnavailableError, MissingExtraError
from ._apply import check_ops, prominence_cap, views
from ._breaker import CircuitBreaker
from ._model import (
    Add,
    Advance,
    Archive,
    BatchResult,
    BoardCell,
    BoardConfig,
    CellView,
    Deposit,
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
    is_private,
)
from ._packed import (
    event_fields,
    pack_cell,
    pack_events,
    read_slots,
    stored_events,
    subtask_digests,
    task_digest,
    unpack_cell,
    unpack_events,
)

__all__ = ["CALL_BOUND_S", "CONNECT_TIMEOUT_S", "OP_TIMEOUT_S", "BoardRetry", "RedisBoard"]

CONNECT_TIMEOUT_S = 0.2
"""Default bound of one connection attempt (seconds; :meth:`RedisBoard.from_url`)."""
OP_TIMEOUT_S = 0.2
"""Default bound of one socket read or write (seconds; :meth:`RedisBoard.from_url`)."""

T = TypeVar("T")

_APPEND_LUA = """
-- KEYS: the append marker, the scope's log stream, its meta hash, its cells hash (the
-- tick is its field ""); ARGV: marker ttl,
-- log_tick_every (0 = none), then one JSON [[field, value], ...] per entry
local got = redis.call('GET', KEYS[1])
if got then return got end
local every = tonumber(ARGV[2])
local ids = {}
for i = 3, #ARGV do
  local entry = cjson.decode(ARGV[i])
  local args = {}
  for _, kv in ipairs(entry) do args[#args + 1] = kv[1]; args[#args + 1] = kv[2] end
  ids[#ids + 1] = redis.call('XADD', KEYS[2], '*', unpack(args))
  if every > 0 then
    local n = redis.call('HINCRBY', KEYS[3], 'logged', 1)
    if n % every == 0 then redis.call('HINCRBY', KEYS[4], '', 1) end
  end
end
local out = cjson.encode(ids)
redis.call('SET', KEYS[1], out, 'EX', ARGV[1])
return out
"""

_ADOPT_TICK_LUA = """
-- KEYS: the scope's meta hash, its cells hash. A board written before the tick moved into
-- the cells hash (field "") kept it in the meta hash's field "tick": move it, once.
local old = redis.call('HGET', KEYS[1], 'tick')
if old then
  redis.call('HSETNX', KEYS[2], '', old)
  redis.call('HDEL', KEYS[1], 'tick')
end
return old
"""


def _redis() -> Any:
    try:
        import redis
    except ImportError as exc:  # pragma: no cover - exercised where the extra is absent
        raise MissingExtraError("redis", "redis", "RedisBoard (a memory board on Redis)") from exc
    return redis


def _msgpack() -> Any:
    try:
        import msgpack
    except ImportError as exc:  # pragma: no cover - exercised where the extra is absent
        raise MissingExtraError("msgpack", "redis", "RedisBoard (a memory board on Redis)") from exc
    return msgpack


@dataclass(frozen=True)
class BoardRetry:
    """How a remote board retries a refused or reset connection (tenacity). A timeout is
    never retried: it opens the :class:`CircuitBreaker` at once.

    Attributes:
        attempts: tries in all (≥ 1).
        first_wait_s: first backoff wait (seconds); doubles per try.
        max_wait_s: cap of one wait (seconds).
        max_total_s: no new try once this much time has passed (seconds).
    """

    attempts: int = 3
    first_wait_s: float = 0.02
    max_wait_s: float = 0.1
    max_total_s: float = 0.2


CALL_BOUND_S = CONNECT_TIMEOUT_S + OP_TIMEOUT_S + BoardRetry.first_wait_s * 3
"""The longest a failing board call waits with the defaults (seconds): a connection attempt, a
timed-out read, and the retry waits before them (0.02 + 0.04 s). A step (an ``add()``, a
build) makes at most one such call: the circuit is open after it."""


def _config_lua(config: BoardConfig) -> str:
    """The board's config as Lua constants, written into the batch script (no decoding per
    call). ``repr`` of a float is its shortest round-trip text: Lua reads the same double."""
    p = config.pheromone

    def table(values: Mapping[str, float]) -> str:
        return "{" + ", ".join(f"[{json.dumps(k)}] = {float(v)!r}" for k, v in values.items()) + "}"

    deposits = ", ".join(repr(float(p.deposits[score])) for score in range(1, 6))
    return (f"local RATES = {table({k: p.rate(k) for k in PHEROMONE_KINDS})}\n"
            f"local INIT = {table({k: p.initial_strength[k] for k in PHEROMONE_KINDS})}\n"
            f"local DEP = {{{deposits}}}\n"
            f"local SMAX, RF, EDGE = {float(p.s_max)!r}, {float(p.reinforce_delta)!r}, {float(p.edge_delta)!r}\n"
            f"local PROTECT, EXEMPT = {int(p.protect_ticks)}, {int(p.exempt_score)}\n"
            f"local KEPT, LEASE = {int(config.events_kept)}, {int(config.lease_ticks)}\n"
            f"local BATCH_TTL = '{int(config.batch_ttl_seconds)}'")  # text: a number argument of redis.call is sprintf'd


def _binary(mod: Any, client: Any) -> Any:
    """``client`` when it returns bytes, else a twin on the same server that does."""
    pool = getattr(client, "connection_pool", None)
    if pool is None or not pool.connection_kwargs.get("decode_responses"):
        return client
    kwargs = {**pool.connection_kwargs, "decode_responses": False}
    return mod.Redis(connection_pool=mod.ConnectionPool(connection_class=pool.connection_class, **kwargs))


def _s(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


_NONE = False  # "none" in a MessagePack slot (see _packed)
_TICK = ""  # the field of a scope's tick in its cells hash (no item id is empty: check_ops)


_OPLEN = 8  # slots per op in the batch's flat op array (_board.lua's OPLEN)
_PAD = (_NONE,) * _OPLEN


def _pack_op(op: Op, index: Mapping[str, int], out: list[Any]) -> None:
    """Append one operation to the batch's flat op array as the Lua script reads it:
    ``_OPLEN`` slots, ``[code, scope number, id, agent, at, ...]`` padded with ``False``
    (the codes: ``_board.lua``'s ``DEPOSIT`` … ``ADVANCE``)."""
    scope = index[op.scope]
    if isinstance(op, Deposit):  # the most frequent, first; the task keys as their bytes (_packed)
        goal, sub = task_digest(op.goal), task_digest(op.subtask)
        out += (1, scope, op.id, op.agent, float(op.at), op.score, _NONE if sub is None else sub,
                _NONE if goal is None else goal)
        return
    if isinstance(op, Advance):
        slots: list[Any] = [10, scope, op.ticks, _NONE if op.to is None else op.to]
    elif isinstance(op, Repair):
        slots = [9, scope, op.id, op.agent, pack_cell(op.cell), pack_events(op.cell)]
    elif isinstance(op, Reinforce):
        slots = [2, scope, op.id, op.agent, float(op.at), _NONE if op.source is None else op.source,
                 _NONE if op.delta is None else float(op.delta)]
    elif isinstance(op, Add):
        slots = [3, scope, op.id, op.agent, float(op.at), op.kind, _NONE if op.strength is None else float(op.strength)]
    elif isinstance(op, Use):
        slots = [4, scope, op.id, op.agent, float(op.at), op.build]
    elif isinstance(op, Forget):
        slots = [5, scope, op.id, op.agent, float(op.at)]
    elif isinstance(op, Archive):
        slots = [6, scope, op.id, op.agent, float(op.at)]
    elif isinstance(op, Supersede):
        slots = [7, scope, op.id, op.agent, float(op.at), op.by]
    elif isinstance(op, Restore):
        slots = [8, scope, op.id, op.agent, float(op.at)]
    else:
        raise TypeError(f"not a board operation: {op!r}")
    out += [_NONE if v is None else v for v in slots]  # a nil would make a hole in the flat array
    out += _PAD[len(slots):]


class RedisBoard:
    """A :class:`~relevance_memory.board.MemoryBoard` on a Redis server (SPEC §10).

    Args:
        client: a ``redis.Redis`` client (``decode_responses`` either way).
        name: the board's name (its hash tag: one board, one cluster slot).
        config: a :class:`BoardConfig`.
        prefix: the key prefix (default ``"relmem"``).
        retry: the :class:`BoardRetry` policy for refused or reset connections.
        breaker: the :class:`CircuitBreaker` (default: a new one, 1 s back-off doubling to 30 s).
        sleep: the backoff's sleep (injected for tests).

    Raises:
        MissingExtraError: redis-py is not installed (``pip install 'relevance-memory[redis]'``).
    """

    def __init__(self, client: Any, name: str = "board", config: BoardConfig | None = None, *,
                 prefix: str = "relmem", retry: BoardRetry | None = None, breaker: CircuitBreaker | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self._mod = _redis()
        self._msgpack = _msgpack()
        self.client = client
        self.name = name
        self.config = config or BoardConfig()
        self.prefix = prefix
        self.retry = retry or BoardRetry()
        self.breaker = breaker or CircuitBreaker()
        self._sleep = sleep
        self._base = f"{prefix}:{{{name}}}"
        self._raw = _binary(self._mod, client)  # cells are MessagePack bytes: a client that leaves them so
        source = resources.files(__package__).joinpath("_board.lua").read_text(encoding="utf-8")
        self._script = self._raw.register_script(source.replace("--@CONFIG@", _config_lua(self.config), 1))
        self._append_script = client.register_script(_APPEND_LUA)
        self._adopt_script = client.register_script(_ADOPT_TICK_LUA)
        self._adopted: set[str] = set()  # scopes whose tick this client has checked for the old layout
        self._scope_keys: dict[str, tuple[tuple[str, str, str], Any]] = {}  # scope → its batch keys, share cap
        self._ids: tuple[int, str, Iterator[int]] = (0, "", iter(()))  # pid, prefix, counter of new batch ids
        self.retries = 0
        """Connection errors retried so far (for the decision record)."""
        self.round_trips = 0
        """Calls that went to the server (each try counts; a fast failure does not)."""
        self._decoded: dict[str, dict[str, tuple[bytes, BoardCell, Any, CellView | None, int, bytes | None]]] = {}
        # scope → id → (the stored bytes, their cell without events, the tick, task and
        # clock of its last view, that view, the seq of its next event or -1 in stored form
        # 1, the subtask digests of form 3 or None): a snapshot decodes only the cells that
        # changed since this client last read them (reusing the subtask keys the change
        # only appended to), and views again only what it has not seen so

    @classmethod
    def from_url(cls, url: str, name: str = "board", config: BoardConfig | None = None, *,
                 socket_timeout: float = OP_TIMEOUT_S, socket_connect_timeout: float = CONNECT_TIMEOUT_S,
                 **kwargs: Any) -> RedisBoard:
        """A board on the server at ``url`` (``redis://host:port/db``).

        ``socket_timeout`` bounds each socket read or write, ``socket_connect_timeout`` each
        connection attempt (seconds; defaults :data:`OP_TIMEOUT_S`, :data:`CONNECT_TIMEOUT_S`).
        redis-py's own retries are turned off: :class:`BoardRetry` and the
        :class:`CircuitBreaker` decide. (Before, 2 s reads and four tries of every timed-out
        call cost ~6 s a call, ~25 s an ``add()`` on a paused server. A client you make
        yourself with ``redis.Redis(host=…)`` retries on its own — redis-py 8: 10 tries
        with back-off — so pass ``retry=Retry(NoBackoff(), 0)`` to it.)

        Raises:
            MissingExtraError: redis-py is not installed.
        """
        redis = _redis()
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        client = redis.Redis.from_url(url, decode_responses=True, socket_timeout=socket_timeout,
                                      socket_connect_timeout=socket_connect_timeout, retry=Retry(NoBackoff(), 0),
                                      retry_on_timeout=False)
        return cls(client, name, config, **kwargs)

    # ------------------------------------------------------------------ keys
    def key(self, kind: str, scope: str) -> str:
        """The Redis key of ``kind`` (``cells``, ``events``, ``meta``, ``edges``, ``log``) for ``scope``
        (the scope's tick is the field ``""`` of its ``cells`` hash)."""
        return f"{self._base}:{kind}:{scope}"


    def _adopt_tick(self, scope: str) -> None:
        """Move ``scope``'s tick from the layout before issue 24 (``meta:<scope>`` field
        ``tick``) into its cells hash, once per scope and client (one round trip; atomic in
        a script, so concurrent clients agree). Raises what :meth:`_call` raises."""
        if scope in self._adopted:
            return
        keys = [self.key("meta", scope), self.key("cells", scope)]
        self._call(f"tick of {scope!r}", lambda: self._adopt_script(keys=keys))
        self._adopted.add(scope)

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        probe = self.breaker.enter(f"board {self.name!r}: {what}")  # raises while the circuit is open
        refused, timeout = self._mod.ConnectionError, self._mod.TimeoutError

        def attempt() -> T:
            self.round_trips += 1
            return fn()

        try:
            try:
                out = attempt()  # the first try is a plain call: no retry machinery on the hot path
            except refused:
                if probe or self.retry.attempts < 2:
                    raise
                out = self._retrying(refused)(attempt)
        except RetryError as exc:
            attempts = exc.last_attempt.attempt_number + 1
            cause = exc.last_attempt.exception()
            self.breaker.failure(cause or exc)
            raise BoardUnavailableError(
                f"board {self.name!r}: {what} failed after {attempts} tries: {cause}", attempts=attempts
            ) from cause
        except refused as exc:
            self.breaker.failure(exc)
            raise BoardUnavailableError(f"board {self.name!r}: {what} failed: {exc}", attempts=1) from exc
        except timeout as exc:
            self.breaker.failure(exc)
            raise BoardUnavailableError(f"board {self.name!r}: {what} timed out: {exc}", attempts=1) from exc
        except self._mod.ResponseError as exc:
            self.breaker.success()  # the server answered
            raise BoardError(f"board {self.name!r}: {what} was refused by the server: {exc}") from exc
        except BaseException:  # anything else (a bug, an interrupt) says nothing of the server
            if probe:
                self.breaker.success()  # never leave the circuit half-open with no probe under way
            raise
        self.breaker.success()
        return out

    def _retrying(self, refused: type[BaseException]) -> Retrying:
        """The tries after a refused first one (waits of first_wait_s, doubling)."""
        policy = self.retry
        self._count_retry()
        self._sleep(policy.first_wait_s)
        return Retrying(
            stop=stop_after_attempt(policy.attempts - 1) | stop_after_delay(policy.max_total_s),
            wait=wait_exponential(multiplier=2 * policy.first_wait_s, max=policy.max_wait_s),
            retry=retry_if_exception(lambda e: isinstance(e, refused)), sleep=self._sleep, reraise=False,
            before_sleep=lambda state: self._count_retry(),
        )

    def _count_retry(self) -> None:
        self.retries += 1

    def take_faults(self) -> list[str]:
        """The circuit breaker's faults since the last call (opened, probe failed, closed)."""
        return [f"board {self.name!r}: {f}" for f in self.breaker.take_faults()]

    # ------------------------------------------------------------------ reads
    def snapshot(self, scope: str, ids: Iterable[str] | None = None, *, agent: str, goal: str | None = None,
                 subtask: str | None = None, now: float | None = None, provenance: bool = False) -> Snapshot:
        """See :meth:`MemoryBoard.snapshot`: one ``HMGET`` of the tick and the ids (with
        ``provenance``, a second of the events the cells name; without ids, one pipelined
        ``HGETALL`` of the cells, and of the events with ``provenance``)."""
        check_access(scope, agent)
        self._adopt_tick(scope)
        wanted = None if ids is None else list(dict.fromkeys(ids))
        cells_key = self.key("cells", scope)

        def read() -> list[Any]:
            if wanted is not None:
                return [self._raw.hmget(cells_key, [_TICK, *wanted])]
            pipe = self._raw.pipeline(transaction=False)
            pipe.hgetall(cells_key)
            if provenance:
                pipe.hgetall(self.key("events", scope))
            return list(pipe.execute())

        got = self._call(f"snapshot of {scope!r}", read)
        raw: Iterable[tuple[str, Any]]
        if wanted is None:
            every = got[0] or {}
            stored = every.pop(b"", None)
            raw = [(_s(k), v) for k, v in every.items()]
        else:
            stored = got[0][0]
            raw = zip(wanted, got[0][1:], strict=True)
        tick = int(stored) if stored is not None else 0
        missing, corrupt, faults = [], [], []
        known = self._decoded.get(scope)
        if known is None:
            known = self._decoded[scope] = {}
        unpackb = self._msgpack.unpackb
        # a view depends on the cell's bytes, the tick, the task and (with a TTL) the clock
        at = (tick, goal, subtask, now if scope in self.config.ttl_seconds else None)
        found: dict[str, CellView | None] = {}
        fresh: dict[str, BoardCell] = {}
        for item, value in raw:
            if value is None:
                missing.append(item)
                continue
            hit = known.get(item)
            if hit is not None and hit[0] == value:
                if hit[2] == at and not provenance:
                    found[item] = hit[3]
                    continue
                cell = hit[1]
            else:
                try:
                    slots = read_slots(unpackb, value)
                    cell = unpack_cell(slots, prior=None if hit is None or hit[5] is None else
                                       (hit[5], hit[1].memory.subtasks))
                except ValueError as exc:  # msgpack's own errors are ValueErrors too
                    corrupt.append(item)
                    faults.append(f"cell {item!r} in {scope!r} is corrupt on the board ({exc}); treated as missing")
                    continue
                known[item] = (value, cell, None, None, slots[24] if len(slots) > 24 else -1,  # an int: unpack_cell checked
                               subtask_digests(slots))
            found[item] = None
            fresh[item] = cell
        if provenance:
            self._events(scope, fresh, known, got[1] if wanted is None else None, faults)
        made = views(fresh, tick, self.config, scope, goal=goal, subtask=subtask, now=now, cap=False)
        for item, view in made.items():
            found[item] = view  # in place: the ids keep their order
            if not provenance:
                value, cell, _, _, next_seq, subs = known[item]
                known[item] = (value, cell, at, view, next_seq, subs)
        cells = cast(dict[str, CellView], found)  # every slot filled now
        return Snapshot(scope=scope, tick=tick, missing=tuple(missing), corrupt=tuple(corrupt), source="redis",
                        faults=tuple(faults), cells=prominence_cap(cells, self.config, scope))

    def _events(self, scope: str, fresh: dict[str, BoardCell], known: Mapping[str, tuple[Any, ...]],
                every: Mapping[bytes, bytes] | None, faults: list[str]) -> None:
        """Give the ``fresh`` cells their newest events (in place): from ``every`` (the
        scope's whole events hash) when given, else by one ``HMGET`` of the fields the cells
        name (none when no cell has an event). A batch applied between the two reads may
        have deleted the oldest of them: those are left out."""
        kept = self.config.events_kept
        if kept == 0 or not fresh:
            return
        fields = {item: [item] if known[item][4] < 0 else event_fields(item, known[item][4], kept) for item in fresh}
        got: dict[str, Any]
        if every is None:
            names = [name for some in fields.values() for name in some]
            if not names:
                return
            key = self.key("events", scope)
            values = self._call(f"events of {scope!r}", lambda: self._raw.hmget(key, names))
            got = dict(zip(names, values, strict=True))
        else:
            got = {_s(k): v for k, v in every.items()}
        unpackb = self._msgpack.unpackb
        for item, names in fields.items():
            try:
                if known[item][4] < 0:  # stored form 1: one blob
                    events = unpack_events(self._msgpack.Unpacker(), got.get(item), kept)
                else:
                    events = stored_events(unpackb, [got.get(name) for name in names])
            except ValueError as exc:
                faults.append(f"events of {item!r} in {scope!r} are corrupt on the board ({exc}); left out")
                continue
            if events:
                fresh[item] = replace(fresh[item], events=events)

    def tick(self, scope: str) -> int:
        """See :meth:`MemoryBoard.tick`."""
        self._adopt_tick(scope)
        got = self._call("tick", lambda: self.client.hget(self.key("cells", scope), _TICK))
        return int(_s(got)) if got is not None else 0

    def edges(self, scope: str) -> dict[tuple[str, str], float]:
        """(earlier id, later id) → edge strength in ``scope``."""
        got = self._call("edges", lambda: self.client.hgetall(self.key("edges", scope)))
        out = {}
        for k, v in got.items():
            a, b = _s(k).split("\t", 1)
            out[(a, b)] = float(_s(v))
        return out

    # ------------------------------------------------------------------ writes
    def apply(self, ops: Sequence[Op], *, batch_id: str | None = None) -> BatchResult:
        """See :meth:`MemoryBoard.apply`: one Lua script call, retried under the same batch id."""
        check_ops(ops)
        batch_id = batch_id or self._new_batch_id()
        if not ops:
            return BatchResult(batch_id, (), ())
        scopes = list(dict.fromkeys(op.scope for op in ops))
        index = {sc: i + 1 for i, sc in enumerate(scopes)}
        keys = [f"{self._base}:batch:{batch_id}"]
        caps: list[Any] = []
        for scope in scopes:
            got = self._scope_keys.get(scope)
            if got is None:
                self._adopt_tick(scope)
                cap = self.config.share_cap(scope)
                got = self._scope_keys[scope] = ((self.key("cells", scope), self.key("edges", scope),
                                                  self.key("events", scope)), _NONE if cap is None else cap)
            keys += got[0]
            caps.append(got[1])
        flat: list[Any] = []
        digest = task_digest
        for op in ops:
            if type(op) is Deposit:  # the most frequent: _pack_op's first case, inline
                goal, sub = op.goal, digest(op.subtask)
                flat += (1, index[op.scope], op.id, op.agent, float(op.at), op.score, _NONE if sub is None else sub,
                         _NONE if goal is None else digest(goal))
            else:
                _pack_op(op, index, flat)
        # bytes (task digests) as MessagePack str: the cmsgpack of Redis 7.0 reads no bin type;
        # the caps, then the ops (_board.lua reads the ops' values after their array's header)
        packb = self._msgpack.packb  # a Packer is not thread-safe
        payload = packb(caps, use_bin_type=False) + packb(flat, use_bin_type=False)
        reply = self._call(f"batch {batch_id}", lambda: self._run_script(keys, payload))
        data = self._msgpack.unpackb(reply)
        if data[0]:
            return BatchResult(batch_id, (), (), duplicate=True)
        return BatchResult(batch_id, tuple(data[1]), tuple(map(float, data[2])))

    def _run_script(self, keys: list[str], payload: bytes) -> Any:
        """``EVALSHA`` of the batch script on a connection of the binary client's pool: the
        reply's bytes, or what the connection raises (a ``ResponseError`` for an error
        reply). redis-py's command path around the same two socket operations (its
        ``Script`` call, retry wrapper and metrics) cost ~30-45 µs of client CPU a batch,
        as much as the batch's own packing; a client it cannot take a connection from
        (no ``connection_pool``, or one connection of its own) goes through it. A
        connection that failed mid-call is disconnected (redis-py's connection does so
        itself; so does this, for anything it raises): the next use reconnects, and a late
        reply is never read as the next call's. A
        server that does not know the script (``NOSCRIPT``: restarted, flushed) is sent it
        once and the call made again, as redis-py's ``Script`` does."""
        script, raw = self._script, self._raw
        pool = getattr(raw, "connection_pool", None)
        if pool is None or getattr(raw, "connection", None) is not None or not hasattr(pool, "get_connection"):
            return script(keys=keys, args=[payload])
        try:
            conn = pool.get_connection()
        except TypeError:  # redis-py 5.0 asks for the command's name (later versions deprecate it)
            conn = pool.get_connection("EVALSHA")
        try:
            try:
                conn.send_command("EVALSHA", script.sha, len(keys), *keys, payload)
                return conn.read_response()
            except self._mod.exceptions.NoScriptError:
                conn.send_command("SCRIPT", "LOAD", script.script)
                script.sha = _s(conn.read_response())
                conn.send_command("EVALSHA", script.sha, len(keys), *keys, payload)
                return conn.read_response()
        except self._mod.ResponseError:
            raise  # a whole error reply was read: the connection is fine
        except BaseException:
            conn.disconnect()  # a timeout, a reset, an interrupt: what is left on it is unknown
            raise
        finally:
            pool.release(conn)

    def _new_batch_id(self) -> str:
        """A batch id no other batch has: a random prefix per client and process, then a
        count (``uuid4`` per batch costs a ``getrandom`` system call: ~4 µs)."""
        pid, prefix, count = self._ids
        if pid != os.getpid():  # a new client, or a forked copy of one: a prefix of its own
            pid, prefix, count = os.getpid(), uuid.uuid4().hex, itertools.count()
            self._ids = (pid, prefix, count)
        return f"{prefix}{next(count):x}"

    # ------------------------------------------------------------------ log
    def append(self, scope: str, entries: Sequence[Mapping[str, str]], *, agent: str,
               append_id: str | None = None) -> list[str]:
        """See :meth:`MemoryBoard.append`: ``XADD`` to the scope's stream, at most once per
        ``append_id`` (a retry after a lost reply does not duplicate entries)."""
        check_access(scope, agent)
        if not entries:
            return []
        for entry in entries:
            if not entry:
                raise BoardError("a log entry needs at least one field")
        append_id = append_id or uuid.uuid4().hex
        every = 0 if is_private(scope) or self.config.log_tick_every is None else self.config.log_tick_every
        args = [str(self.config.batch_ttl_seconds), str(every)] + [
            json.dumps([[str(k), str(v)] for k, v in entry.items()], ensure_ascii=False) for entry in entries
        ]
        keys = [f"{self._base}:append:{append_id}", self.key("log", scope), self.key("meta", scope),
                self.key("cells", scope)]
        reply = self._call(f"append to {scope!r}", lambda: self._append_script(keys=keys, args=args))
        return [str(c) for c in json.loads(_s(reply))]

    def read(self, scope: str, since: str | None = None, *, agent: str, count: int | None = None) -> list[LogEntry]:
        """See :meth:`MemoryBoard.read`: ``XRANGE`` after ``since`` (exclusive)."""
        check_access(scope, agent)
        start = "-" if since is None else f"({since}"
        got = self._call(f"read of {scope!r}",
                         lambda: self.client.xrange(self.key("log", scope), min=start, max="+", count=count))
        return [LogEntry(_s(cursor), {_s(k): _s(v) for k, v in fields.items()}) for cursor, fields in got]

    def close(self) -> None:
        """Close the client's connections."""
        self.client.close()
        if self._raw is not self.client:
            self._raw.close()

"""A real ``redis-server`` for the board tests, on 127.0.0.1 and a random free port.

``.ci/run`` starts one for the whole run and exports ``RELMEM_REDIS_URL``; without it a
developer's plain ``python -m pytest`` starts one here when the ``redis-server`` binary is
on ``PATH`` (Debian: ``apt-get install redis-server``). Fault tests start their own (they
stop and restart it).
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

SLOW_OK: dict[str, float] = {"socket_timeout": 10.0, "socket_connect_timeout": 10.0}
"""Timeouts for the tests that are not about faults: a loaded CI machine must not trip the
circuit breaker (the 200 ms defaults are for agents, which fall back to a local copy)."""

BoardFactory = Callable[..., Any]
"""Makes a fresh board of the backend under test: ``make(config=None)``."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ping(port: int, timeout: float = 0.2) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """One ``redis-server`` process we started (and only we stop).

    Args:
        binary: the server binary (default: ``redis-server`` on PATH).
        persist: keep data across :meth:`restart` (append-only file, fsync always).
    """

    def __init__(self, binary: str | None = None, *, persist: bool = False) -> None:
        found = binary or shutil.which("redis-server")
        if found is None:
            raise FileNotFoundError("redis-server is not on PATH (Debian: apt-get install redis-server)")
        self.binary = found
        self.persist = persist
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="relmem-redis-"))
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0``."""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, wait_s: float = 10.0) -> RedisServer:
        """Start the server and wait until it answers PING.

        Raises:
            RuntimeError: it did not answer within ``wait_s`` seconds.
        """
        args = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir),
                "--save", "", "--daemonize", "no", "--protected-mode", "yes"]
        args += ["--appendonly", "yes", "--appendfsync", "always"] if self.persist else ["--appendonly", "no"]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.proc.returncode} on port {self.port}")
            if _ping(self.port):
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"redis-server did not answer on port {self.port} within {wait_s} s")

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 5 s)."""
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def restart(self) -> None:
        """Stop and start again on the same port (data kept when ``persist``)."""
        self.stop()
        self.start()

    def close(self) -> None:
        """Stop and remove the data directory."""
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


# --------------------------------------------------------------------------- worker processes
def hammer(url: str, name: str, agent: str, rounds: int, barrier: Any, config: dict[str, Any]) -> None:
    """One writer process: ``rounds`` batches, each reinforcing ``hot`` and depositing on
    ``deep`` (a fresh subtask each time), plus a log append — all on the shared scope."""
    from relevance_memory.board import BoardConfig, Deposit, RedisBoard, Reinforce

    board = RedisBoard.from_url(url, name, BoardConfig(**config), **SLOW_OK)
    barrier.wait()
    for j in range(rounds):
        board.apply([Reinforce("shared", "hot", agent, at=float(j)),
                     Deposit("shared", "deep", 3, f"{agent}-{j}", "the task", agent, at=float(j))])
        board.append("shared", [{"agent": agent, "n": str(j)}], agent=agent)
    board.close()


def race(url: str, name: str, agent: str, items: list[str], what: str, barrier: Any, results: Any) -> None:
    """One racer: supersede (or forget) every item of ``items``; reports its outcomes."""
    from relevance_memory.board import Forget, RedisBoard, Supersede

    board = RedisBoard.from_url(url, name, **SLOW_OK)
    barrier.wait()
    out = []
    for item in items:
        op = Supersede("shared", item, f"{item}-by-{agent}", agent) if what == "supersede" else \
            Forget("shared", item, agent)
        out.append(board.apply([op]).outcomes[0])
    results.put((agent, out))
    board.close()


# --------------------------------------------------------------------------- a slow network
class DelayProxy:
    """A TCP proxy on 127.0.0.1 that holds every reply from the server for :attr:`delay`
    seconds before passing it on (a slow or congested link). Threads; :meth:`close` stops all."""

    def __init__(self, target_port: int) -> None:
        import threading

        self.target_port = target_port
        self.delay = 0.0
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self.port = int(self._listener.getsockname()[1])
        self._sockets: list[socket.socket] = []
        self._closed = False
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _accept(self) -> None:
        import threading

        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            self._sockets += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, True), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, slow: bool) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if slow and self.delay:
                    time.sleep(self.delay)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        for s in self._sockets:
            with contextlib.suppress(OSError):
                s.close()


# --------------------------------------------------------------------------- faults without waiting
class Ticker:
    """A monotonic clock the test moves by hand (a circuit breaker's back-off, with no sleep)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def bounded(fn: Callable[[], Any], seconds: float = 10.0) -> Any:
    """Run ``fn`` in a thread and return its result; fail if it is still running after
    ``seconds`` (a hang guard, not a timing assertion: the bound is far above any wait
    the code under test may make)."""
    import threading

    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["out"] = fn()
        except BaseException as exc:  # re-raised in the test's thread
            box["exc"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"hung: still running after {seconds} s"
    if "exc" in box:
        raise box["exc"]
    return box.get("out")


@contextlib.contextmanager
def paused(server: RedisServer) -> Any:
    """The server process stopped with SIGSTOP (it accepts connections, never answers)
    until the block ends (SIGCONT), even when the block fails."""
    import os
    import signal

    assert server.proc is not None
    os.kill(server.proc.pid, signal.SIGSTOP)
    try:
        yield server
    finally:
        os.kill(server.proc.pid, signal.SIGCONT)

"""Snapshot of 100 random ids beside a raw HMGET of them, one process, no concurrency: a
writer applies PER batches (board_throughput's shape, 4 agents) between two reads, so about
half the ids read have changed since this client last decoded them; p50 of READS reads
(the first 100 dropped). Run from each tree (PYTHONPATH), alternating; needs $REDIS_URL.

    REDIS_URL=redis://127.0.0.1:6399/0 PYTHONPATH=<tree> python snapshot_ab.py <label> [PER] [READS]
"""
from __future__ import annotations

import os
import random
import statistics
import sys
import time
import uuid

from relevance_memory.board import Add, BoardConfig, Deposit, RedisBoard, Reinforce

url = os.environ["REDIS_URL"]
per = int(sys.argv[2]) if len(sys.argv) > 2 else 20
reads = int(sys.argv[3]) if len(sys.argv) > 3 else 600
name = "s-" + uuid.uuid4().hex[:6]
slow = {"socket_timeout": 30.0, "socket_connect_timeout": 30.0}
reader = RedisBoard.from_url(url, name, BoardConfig(agent_share=None), **slow)
reader.apply([Add("shared", f"m{i}", "tool_result", "seed") for i in range(1000)])
writer = RedisBoard.from_url(url, name, BoardConfig(agent_share=None), **slow)
rng = random.Random(1)
raw, key = reader._raw, reader.key("cells", "shared")
snaps, hmgets, k = [], [], 0
for i in range(reads):
    for _ in range(per):
        w = f"w{k % 4}"
        writer.apply([Deposit("shared", f"m{rng.randrange(1000)}", rng.choice((3, 4, 5)), f"{w}-{k}-{j}", "the task",
                              w, at=float(k)) for j in range(10)] + [Reinforce("shared", f"m{rng.randrange(1000)}", w)])
        k += 1
    ids = [f"m{rng.randrange(1000)}" for _ in range(100)]
    t0 = time.perf_counter()
    raw.hmget(key, ids)
    t1 = time.perf_counter()
    reader.snapshot("shared", ids, agent="reader", goal="the task", subtask="now")
    t2 = time.perf_counter()
    if i >= 100:
        hmgets.append(t1 - t0)
        snaps.append(t2 - t1)
s, h = statistics.median(snaps), statistics.median(hmgets)
print(f"{sys.argv[1]}: {per} batches between reads, {reads} reads: snapshot p50 {s * 1e3:.3f} ms, "
      f"raw HMGET p50 {h * 1e3:.3f} ms, ratio {s / h:.2f}")

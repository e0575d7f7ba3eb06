"""One writer, no reader: client CPU (process_time) and wall time per batch of
``RedisBoard.apply``, and the server's ``usec_per_call`` of EVALSHA, for the tree on
PYTHONPATH (its own redis-server, 1000 items, board_throughput's batches: 10 deposits + 1
reinforcement; 2000 batches first, then the median of 4 × 1000). Run alternating per tree:

    PYTHONPATH=<tree> python benchmarks/results/board7/one_writer_ab.py
"""
import os
import random
import shutil
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import board_throughput as bt
import redis

from relevance_memory.board import BoardConfig, RedisBoard

proc, url, folder = bt.start_redis()
try:
    r = RedisBoard.from_url(url, "x", BoardConfig(agent_share=None), **bt.SLOW_OK)
    bt._seed(r, 1000)
    rng = random.Random(3)
    ops = [bt._ops(rng, "w", k, 1000, 10) for k in range(6000)]
    for o in ops[:2000]:
        r.apply(o)
    st = redis.Redis.from_url(url)
    cpu, wall, srv = [], [], []
    for rep in range(4):
        st.config_resetstat()
        part = ops[2000 + rep * 1000: 3000 + rep * 1000]
        t = time.process_time()
        w = time.perf_counter()
        for o in part:
            r.apply(o)
        cpu.append((time.process_time() - t) * 1000)
        wall.append((time.perf_counter() - w) * 1000)
        srv.append(float(st.info("commandstats")["cmdstat_evalsha"]["usec_per_call"]))
    print(f"client cpu µs/batch {statistics.median(cpu):.0f}  wall µs/batch {statistics.median(wall):.0f}  "
          f"server usec_per_call {statistics.median(srv):.0f}")
finally:
    proc.terminate()
    proc.wait()
    shutil.rmtree(folder, ignore_errors=True)

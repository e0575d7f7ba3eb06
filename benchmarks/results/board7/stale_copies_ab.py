"""Eight clients of one board in one process take turns (each applies every eighth batch of
board_throughput's shape on 1000 items, so the cells it knows have mostly changed since it wrote
them: the stale case of 4-16 writers, without their scheduling noise): client CPU a batch and the
server's usec_per_call of EVALSHA, 3000 batches first, then 5000. For the tree on PYTHONPATH:

    PYTHONPATH=<tree> python benchmarks/results/board7/stale_copies_ab.py
"""
import os
import random
import shutil
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import board_throughput as bt
import redis

from relevance_memory.board import BoardConfig, RedisBoard

proc, url, folder = bt.start_redis()
try:
    boards = [RedisBoard.from_url(url, "x", BoardConfig(agent_share=None), **bt.SLOW_OK) for _ in range(8)]
    bt._seed(boards[0], 1000)
    rng = random.Random(3)
    ops = [bt._ops(rng, "w", k, 1000, 10) for k in range(8000)]
    for k, o in enumerate(ops[:3000]):
        boards[k % 8].apply(o)
    st = redis.Redis.from_url(url)
    st.config_resetstat()
    t = time.process_time()
    for k, o in enumerate(ops[3000:8000]):
        boards[k % 8].apply(o)
    cpu = (time.process_time() - t) * 1e6 / 5000
    server = float(st.info("commandstats")["cmdstat_evalsha"]["usec_per_call"])
    print(f"client cpu µs/batch {cpu:.0f}  server usec_per_call {server:.0f}  "
          f"(client 0: computed {getattr(boards[0], 'computed', '-')}, computed again {getattr(boards[0], 'recomputed', '-')})")
finally:
    proc.terminate()
    proc.wait()
    shutil.rmtree(folder, ignore_errors=True)

"""Client CPU of the parts of one RedisBoard.apply (the tree on PYTHONPATH must be board42's):
check_ops, _computed (the 11 cells of a batch computed here), the command's RESP, and the whole
apply; 2000 batches of board_throughput's shape first, then 1000 measured.

    PYTHONPATH=<tree> python benchmarks/results/board7/client_pieces.py
"""
import os
import random
import shutil
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import board_throughput as bt

from relevance_memory.board import BoardConfig, RedisBoard
from relevance_memory.board import _redis as board_redis
from relevance_memory.board._apply import check_ops

proc, url, folder = bt.start_redis()
try:
    r = RedisBoard.from_url(url, "x", BoardConfig(agent_share=None), **bt.SLOW_OK)
    bt._seed(r, 1000)
    rng = random.Random(3)
    ops = [bt._ops(rng, "w", k, 1000, 10) for k in range(3000)]
    for o in ops[:2000]:
        r.apply(o)

    def tm(label, fn):
        t = time.process_time()
        for o in ops[2000:3000]:
            fn(o)
        print(f"{label}: {(time.process_time() - t) * 1e3:.1f} µs")

    tm("check_ops", check_ops)
    tm("_computed", lambda o: r._computed(o, ["shared"], [b"x"]))
    args = [b"x" * 900]
    r._computed(ops[2000], ["shared"], args)
    print("arguments", len(args), "bytes", sum(len(x) for x in args if isinstance(x, bytes)))
    tm("_resp", lambda o: board_redis._resp(["EVALSHA", "sha", 4, "k1", "k2", "k3", "k4", *args]))
    tm("apply", r.apply)
finally:
    proc.terminate()
    proc.wait()
    shutil.rmtree(folder, ignore_errors=True)

"""Client CPU per batch of RedisBoard.apply against a trivial script (the same reply, no server
work), so the server's time and the machine's load move it little: the client's own cost.
Run from each tree (PYTHONPATH), alternating; needs a redis-server at $REDIS_URL.

    REDIS_URL=redis://127.0.0.1:6399/0 PYTHONPATH=<tree> python client_cpu_ab.py <label>
"""
from __future__ import annotations

import os
import random
import sys
import time
import uuid

from relevance_memory.board import BoardConfig, Deposit, RedisBoard, Reinforce

REPLY = ("return cmsgpack.pack({false, {'deposited','deposited','deposited','deposited','deposited','deposited',"
         "'deposited','deposited','deposited','deposited','reinforced'}, {1,1,1,1,1,1,1,1,1,1,1}})")
board = RedisBoard.from_url(os.environ["REDIS_URL"], "ab" + uuid.uuid4().hex[:6], BoardConfig(agent_share=None),
                            socket_timeout=30.0, socket_connect_timeout=30.0)
board._script = board._raw.register_script(REPLY)
rng = random.Random(1)
ops = [[Deposit("shared", f"m{rng.randrange(1000)}", rng.choice((3, 4, 5)), f"w-{k}-{j}", "the task", "w", at=float(k))
        for j in range(10)] + [Reinforce("shared", f"m{rng.randrange(1000)}", "w", at=float(k))] for k in range(4000)]
for o in ops[:500]:
    board.apply(o)
res = []
for _ in range(5):
    t0 = time.process_time()
    for o in ops[500:]:
        board.apply(o)
    res.append((time.process_time() - t0) / 3500 * 1e6)
print(f"{sys.argv[1]}: client CPU µs/batch (trivial script), min {min(res):.1f}, median {sorted(res)[2]:.1f}")

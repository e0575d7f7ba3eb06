"""Compactions on one long history, with the garbage collector's share (issue 24).

Ingests the repeated django history (``scale.py``'s ``history_of``) of ``--size`` messages,
builds once, then adds ``--steps`` agent steps (``append_step.new_step``), building after each;
prints the CPU time of ingest, of the first build and of every build that did not append
(compactions), each with the time the garbage collector spent inside it
(``scale.GcPauses``) and the oldest generation it collected. ``--freeze`` calls
``gc.collect(); gc.freeze()`` after the first build (what a caller holding a large history may
do). One process; CPU times (``time.process_time``), so other jobs on the machine move them less.

    PYTHONPATH=. nice -n 10 .venv/bin/python benchmarks/compaction_gc.py --size 1000000
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from append_step import new_step
from scale import GcPauses, history_of

from relevance_memory import RelevanceMemoryManager


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=300_000)
    parser.add_argument("--steps", type=int, default=110)
    parser.add_argument("--budget", type=int, default=8000)
    parser.add_argument("--freeze", action="store_true")
    args = parser.parse_args()
    history = history_of("repeated", args.size, 400)
    memory = RelevanceMemoryManager(max_input_tokens=args.budget, keep_recent=4)
    start = time.process_time()
    memory.extend(history)
    memory.store.message_vectors()
    print(f"ingest cpu {time.process_time() - start:.1f} s", flush=True)
    start = time.process_time()
    memory.build_context()
    print(f"first build cpu {time.process_time() - start:.1f} s", flush=True)
    del history
    if args.freeze:
        gc.collect()
        gc.freeze()
    pauses = GcPauses()
    for k in range(args.steps):
        memory.extend(new_step(k))
        pauses.reset()
        start = time.process_time()
        built = memory.build_context()
        cpu = time.process_time() - start
        if built.record.mode != "appended":
            print(f"step {k}: {built.record.mode} cpu {cpu:.2f} s, garbage collector {pauses.total:.2f} s "
                  f"(oldest generation {pauses.oldest})", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The pheromone field before and after issue 9 item 4 (pure functions, reads that never write).

Runs the same replay through today's :class:`PheromoneField` and through the field of a
given earlier commit (its ``relevance_memory/pheromone/_field.py`` and ``_config.py`` loaded
from ``git show``), in one process, alternating: messages of a SWE run (repeated to
``--messages``) observed one build at a time (every ``--every`` messages), a deposit of
every observed message's score per build, and the reads a build makes (``strength_for``,
``score_before``, ``forgotten_for`` per message). Prints seconds and the ratio.

    python benchmarks/pheromone_field.py --baseline 19e52e0
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

from relevance_memory import RelevanceMemoryManager, load_transcript
from relevance_memory.pheromone._field import PheromoneField

REPO = Path(__file__).resolve().parents[1]


def _old_field(commit: str) -> type:
    folder = Path(tempfile.mkdtemp(prefix="relmem-old-")) / "relevance_memory_old"
    folder.mkdir()
    for name in ("__init__.py", "_pheromone.py", "_config.py", "_models.py", "_exceptions.py", "_text.py"):
        try:
            text = subprocess.run(["git", "show", f"{commit}:relevance_memory/{name}"], cwd=REPO, check=True,
                                  capture_output=True, text=True).stdout
        except subprocess.CalledProcessError:
            text = ""
        (folder / name).write_text("" if name == "__init__.py" else text)
    sys.path.insert(0, str(folder.parent))
    spec = importlib.util.spec_from_file_location("relevance_memory_old._pheromone", folder / "_pheromone.py",
                                                  submodule_search_locations=None)
    module: ModuleType = importlib.import_module("relevance_memory_old._pheromone")
    del spec
    return module.PheromoneField  # type: ignore[no-any-return]


def replay(field_cls: type, messages: list, every: int) -> float:
    field = field_cls()
    t0 = time.perf_counter()
    for n in range(every, len(messages) + 1, every):
        field.observe(messages[:n])
        field.deposit({m.id: 1 + (m.index % 5) for m in messages[:n]}, f"sub{n // (every * 4)}", "goal")
        for m in messages[:n]:
            field.strength_for(m.id, "goal", f"sub{n // (every * 4)}")
            field.score_before(m.id, "goal", "next")
            field.forgotten_for(m.id, "goal", "next")
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", default="19e52e0", help="the commit to compare with")
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--every", type=int, default=20, help="messages per build")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    raw = load_transcript(REPO / "fixtures" / "django__django-15280.json").messages
    memory = RelevanceMemoryManager()
    while len(memory.store) < args.messages:
        for m in raw:
            if m.get("role") in ("user", "assistant") and not m.get("tool_calls"):
                memory.add({"role": m["role"], "content": m.get("content") or "…"})
    messages = memory.messages[: args.messages]
    old = _old_field(args.baseline)
    times: dict[str, list[float]] = {"baseline": [], "now": []}
    for _ in range(args.rounds):
        times["baseline"].append(replay(old, messages, args.every))
        times["now"].append(replay(PheromoneField, messages, args.every))
    b, n = min(times["baseline"]), min(times["now"])
    print(f"{len(messages)} messages, a build every {args.every}: baseline {args.baseline} {b:.2f} s, "
          f"now {n:.2f} s, now/baseline {n / b:.2f} (best of {args.rounds})")


if __name__ == "__main__":
    main()

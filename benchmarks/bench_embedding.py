"""Cost of the embedding seam (issue 11): time and memory per message, up to 100k messages.

For each corpus the default embedder (WordLlama l2_supercat_256, read from its wheel) embeds
every message once into a :class:`VectorIndex` (int8 rows keyed by content hash), in
batches of 256 as an ingest would. Reports milliseconds per message, characters per
message, Python memory per message (tracemalloc, a separate pass: the rows plus the key
dict), and the peak while embedding. Baseline in the same run: the existing ingest
(``MessageStore.add``: token counting, terms, identifiers, hashing) of the same messages,
so the embedding's cost reads as a ratio.

    PYTHONPATH=. python benchmarks/bench_embedding.py [--synthetic 100000] [--json out.json]
    PYTHONPATH=. python benchmarks/bench_embedding.py --embedder minilm --corpora swe,locomo --synthetic 2000

``--embedder minilm`` measures the optional all-MiniLM-L6-v2 int8 model (the ``[minilm]``
extra) instead; ``--corpora`` picks corpora (``swe``, ``locomo``, ``lme_s``).

Corpora: the 14 SWE-bench runs, LongMemEval S haystacks (first 10), LoCoMo (all 10), and a
synthetic agent run of ``--synthetic`` messages (texts drawn from the SWE runs with a
unique suffix, so every message is a new key).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from relevance_memory._tokenizer import TiktokenCounter
from relevance_memory.scoring._embedding import Embedder, VectorIndex, load_embedder
from relevance_memory.store._store import MessageStore

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
BATCH = 256


def swe_messages() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for path in sorted((DATA / "swebench_trajectories").glob("*.json")):
        out.extend(json.loads(path.read_text())["messages"])
    return out


def chat_messages(name: str) -> list[dict[str, Any]]:
    from relevance_memory.evaluation import load_locomo, load_longmemeval

    if name == "locomo":
        convs = load_locomo(DATA / "locomo" / "locomo10.json").conversations
    else:
        convs = load_longmemeval(DATA / "longmemeval" / "s_subset").conversations[:10]
    return [{"role": t.role, "content": t.text} for c in convs for t in c.turns]


def text_of(m: dict[str, Any]) -> str:
    text = m.get("content") or ""
    if not isinstance(text, str):
        text = " ".join(str(p.get("text", "")) for p in text if isinstance(p, dict))
    for call in m.get("tool_calls") or []:
        text += f"\n{call['function']['name']}({call['function'].get('arguments', '')})"
    return text


def synthetic(n: int, base: list[dict[str, Any]]) -> Iterator[tuple[str, str]]:
    texts = [text_of(m)[:2000] for m in base if text_of(m)]
    for i in range(n):
        yield f"k{i}", f"{texts[i % len(texts)]} #{i}"


def measure(
    label: str, pairs: list[tuple[str, str]], messages: list[dict[str, Any]] | None, embedder: Embedder
) -> dict[str, Any]:
    row: dict[str, Any] = {"corpus": label, "embedder": embedder.name, "messages": len(pairs),
                           "chars_per_message": round(sum(len(t) for _, t in pairs) / max(len(pairs), 1))}
    index = VectorIndex(embedder)
    t0 = time.perf_counter()
    for start in range(0, len(pairs), BATCH):
        index.add(pairs[start:start + BATCH])
    row["embed_ms_per_message"] = round(1000 * (time.perf_counter() - t0) / max(len(pairs), 1), 3)
    if messages is not None:
        store = MessageStore(TiktokenCounter("o200k_base"), on_invalid="repair")
        t0 = time.perf_counter()
        for m in messages:
            store.add(m)
        row["ingest_ms_per_message"] = round(1000 * (time.perf_counter() - t0) / max(len(messages), 1), 3)
        row["embed_over_ingest"] = round(row["embed_ms_per_message"] / max(row["ingest_ms_per_message"], 1e-9), 2)
    del index
    gc.collect()
    tracemalloc.start()
    index = VectorIndex(embedder)
    before = tracemalloc.get_traced_memory()[0]
    for start in range(0, len(pairs), BATCH):
        index.add(pairs[start:start + BATCH])
    held, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    row["bytes_per_message"] = round((held - before) / max(len(pairs), 1))
    row["vector_bytes_per_message"] = round(index.nbytes / max(len(pairs), 1))
    row["peak_mib_while_embedding"] = round((peak - before) / 2**20, 1)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--synthetic", type=int, default=100_000)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--embedder", default="wordllama", help="wordllama (default) or minilm")
    parser.add_argument("--corpora", default="swe,locomo,lme_s")
    args = parser.parse_args()
    embedder = load_embedder(args.embedder)
    assert embedder is not None, "pip install wordllama"
    corpora = args.corpora.split(",")
    rows = []
    swe = swe_messages()
    if "swe" in corpora:
        rows.append(measure("SWE-bench runs (14)", [(f"s{i}", text_of(m)) for i, m in enumerate(swe)], swe, embedder))
    for name in ("locomo", "lme_s"):
        if name not in corpora:
            continue
        msgs = chat_messages(name)
        rows.append(measure({"locomo": "LoCoMo (10 conversations)", "lme_s": "LongMemEval S (10 haystacks)"}[name],
                            [(f"c{i}", text_of(m)) for i, m in enumerate(msgs)], msgs, embedder))
    if args.synthetic:
        rows.append(measure(f"synthetic agent run ({args.synthetic:,})", list(synthetic(args.synthetic, swe)), None,
                            embedder))
    keys = ["corpus", "embedder", "messages", "chars_per_message", "embed_ms_per_message", "ingest_ms_per_message",
            "embed_over_ingest", "bytes_per_message", "vector_bytes_per_message", "peak_mib_while_embedding"]
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for r in rows:
        print("| " + " | ".join(str(r.get(k, "")) for k in keys) + " |")
    if args.json:
        args.json.write_text(json.dumps({"machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
                                         "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()

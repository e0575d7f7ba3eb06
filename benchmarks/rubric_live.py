"""Rubric metrics of a live LLM judge beside the offline scorer, in the same run (issue 14).

For each labelled set, scores every example with the offline scorer and with the LLM
scorer in each instructor mode × prompt version asked for, and writes one JSON with every
:class:`RubricReport` (judge-only and with-fallback metrics, parse rate, re-asks, splits,
calls, tokens, seconds). Prints a markdown table per set.

    python benchmarks/rubric_live.py --base-url http://127.0.0.1:PORT/v1 --model smollm2-135m-instruct \\
        --set locomo=benchmarks/results/rubric_subset_locomo.json \\
        --set longmemeval=benchmarks/results/rubric_subset_lme.json \\
        --modes tools,json --prompts score_v1,score_v2 --context-length 4096 \\
        --out benchmarks/results/rubric_live_smollm2.json

The LLM scorer gets the settings of the README's llama.cpp recipe (timeout, window,
batch size); ``--scripted-judge`` replaces the endpoint by the scripted capable judge of
``tests/llm_fakes.py`` (no server), to compare prompt versions on a judge that reads them.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from relevance_memory import LLMScorer
from relevance_memory.evaluation import LabelledSet, RubricReport, evaluate_rubric
from relevance_memory.evaluation._rubric import make_scorer

ROOT = Path(__file__).resolve().parents[1]


def f(v: float, digits: int = 3) -> str:
    return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{digits}f}"


def row(label: str, r: RubricReport) -> str:
    j = r.judge
    return (
        f"| {label} | {f(r.parse_rate, 2)} | {r.reasks / r.batches if r.batches else 0:.2f} | {r.splits} | "
        f"{r.fallbacks} / {r.messages} | {f(r.judge.auroc)} ({j.messages}) | {f(r.auroc)} | "
        f"{f(j.precision_at_4)} / {f(j.recall_at_4)} | {f(r.precision_at_4)} / {f(r.recall_at_4)} | "
        f"{r.llm_calls} | {r.prompt_tokens + r.completion_tokens:,} | {f(r.seconds_per_call, 1)} | "
        f"{f(r.seconds_per_message, 2)} |"
    )


HEADER = (
    "| scorer · mode · prompt | parse rate | re-asks / batch | splits | fallbacks / msgs | AUROC judge alone (n) | "
    "AUROC with fallbacks | P / R ≥ 4 judge | P / R ≥ 4 with fallbacks | calls | tokens | s / call | s / judged msg |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--set", action="append", required=True, help="name=path of a labelled set (repeatable)")
    ap.add_argument("--base-url", default=None)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--modes", default="tools,json")
    ap.add_argument("--prompts", default="score_v1,score_v2")
    ap.add_argument("--timeout", type=float, default=900.0)
    ap.add_argument("--context-length", type=int, default=4096)
    ap.add_argument("--batch-max-messages", type=int, default=10)
    ap.add_argument("--scripted-judge", action="store_true", help="the scripted capable judge instead of a server")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()

    results: dict[str, Any] = {
        "command": " ".join(sys.argv),
        "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                 cwd=ROOT).stdout.strip(),
        "machine": f"{platform.machine()}, {platform.python_version()}, shared and loaded (6 engineers, 2 cores)",
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "sets": {},
    }
    for spec in args.set:
        name, _, path = spec.partition("=")
        labelled = LabelledSet.load(path)
        reports: list[tuple[str, RubricReport]] = [("offline", evaluate_rubric(labelled, make_scorer("offline")))]
        for mode in args.modes.split(","):
            for version in args.prompts.split(","):
                options: dict[str, Any] = {
                    "mode": mode, "rubric_version": version, "timeout": args.timeout,
                    "context_length": args.context_length, "batch_max_messages": args.batch_max_messages,
                }
                if args.scripted_judge:
                    sys.path.insert(0, str(ROOT / "tests"))
                    import httpx2
                    from llm_fakes import capable_judge, scripted_transport

                    options["http_client"] = httpx2.Client(transport=scripted_transport([capable_judge] * 100_000))
                    scorer = LLMScorer("scripted-capable-judge", base_url="http://judge.test/v1", api_key="sk-none",
                                       **options)
                else:
                    scorer = LLMScorer(args.model, base_url=args.base_url, **options)
                started = time.perf_counter()
                report = evaluate_rubric(labelled, scorer)
                label = f"llm · {mode} · {version}"
                print(f"{name}: {label} done in {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
                reports.append((label, report))
                results["sets"][name] = {"path": path, "reports": {lb: r.model_dump() for lb, r in reports}}
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(json.dumps(results, indent=1, default=str) + "\n", encoding="utf-8")
        results["sets"][name] = {"path": path, "reports": {label: r.model_dump() for label, r in reports}}
        print(f"\n### {name} ({len(labelled.examples)} examples, {reports[0][1].messages} labelled messages)\n")
        print(HEADER)
        for label, r in reports:
            print(row(label, r))
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1, default=str) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

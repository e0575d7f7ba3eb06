"""``relmem eval`` and ``relmem rubric``: evidence recall and rubric iteration commands.

The heavy modules (evaluation, bm25s, matplotlib) are imported inside the commands so
``relmem build`` starts fast.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import platform
import shlex
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from .._exceptions import RelevanceMemoryError
from .._extras import MissingExtraError
from ._common import EMBEDDER_HELP, console, err, fail, read_json_model, tagged
from ._scorer_options import (
    BaseUrl,
    BatchSize,
    ContextLength,
    MaxTokens,
    ResponseFormat,
    ScorerMode,
    ScorerModel,
    SystemRole,
    Timeout,
    llm_options,
)

__all__ = ["eval_app", "rubric_app"]

eval_app = typer.Typer(help="Evidence recall at a token budget on LoCoMo / LongMemEval, baselines side by side.",
                       no_args_is_help=True)
rubric_app = typer.Typer(help="Rubric iteration: score a labelled set, compare two scorers / prompt versions.",
                         no_args_is_help=True)

DEFAULT_BUDGETS = {"locomo": "1000,2000,4000", "longmemeval": "2000,4000,8000"}


def _ints(text: str, what: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.replace(" ", "").split(",") if x)
    except ValueError:
        raise fail(f"{what} must be comma-separated integers, got {text!r}") from None
    if not values or any(v <= 0 for v in values):
        raise fail(f"{what} must be positive integers, got {text!r}")
    return values


def _categories(text: str | None) -> set[str]:
    """The LoCoMo categories ``--categories`` names (none: every question).

    Raises:
        typer.Exit: a name is not a LoCoMo category (the error lists the known ones).
    """
    from ..evaluation._datasets import LOCOMO_CATEGORIES

    wanted = {c.strip() for c in (text or "").split(",") if c.strip()}
    unknown = sorted(wanted - set(LOCOMO_CATEGORIES.values()))
    if unknown:
        raise fail(f"--categories: unknown LoCoMo categor{'y' if len(unknown) == 1 else 'ies'} "
                   f"{', '.join(map(repr, unknown))}; the categories are {', '.join(LOCOMO_CATEGORIES.values())}")
    return wanted


def _provenance() -> dict[str, Any]:
    commit = ""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5,
            cwd=Path(__file__).resolve().parent,
        ).stdout.strip()
    return {
        "command": "relmem " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
        "commit": commit,
        "machine": {"python": platform.python_version(), "platform": platform.platform(),
                    "cpus": os.cpu_count(), "processor": platform.processor()},
    }


def _run_eval(
    name: str, path: Path, budgets_text: str, limit: int | None, questions: str | None,
    categories: str | None, scorers: str, keep_recent: int, goal_block: bool, jobs: int,
    out: Path, details: bool, embedder: str = "wordllama", model_name: str = "gpt-4o",
) -> None:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from .._config import encoding_for
    from ..evaluation import (
        RecallRun,
        load_dataset,
        make_scorer,
        plot_recall,
        recall_table,
        results_as_dicts,
        run_recall,
        select_questions,
        summarise_results,
        write_json,
    )
    from ..scoring._embedding import embedder_unavailable_reason, load_embedder

    budgets = _ints(budgets_text or DEFAULT_BUDGETS[name], "--budgets")
    wanted = _categories(categories)
    encoding = encoding_for(model_name)  # as `relmem build` / `replay` count for the same --model
    try:
        dataset = load_dataset(name, path)
    except (OSError, ValueError) as exc:
        raise fail(f"cannot load {name} from {path}: {exc}") from None
    if wanted:
        for conv in dataset.conversations:
            conv.questions = [q for q in conv.questions if q.category in wanted]
    select_questions(dataset, [q.strip() for q in questions.split(",")] if questions else None, limit)
    evaluable = [q for q in dataset.questions if q.evaluable]
    if not evaluable:
        raise fail("no question with evidence selected (check --questions / --categories / --limit)")
    if dataset.unresolved:
        console.print(Text.assemble((f"{len(dataset.unresolved)} evidence id(s) of the data set could not be resolved", "yellow"),
                                    " (dropped from their question): ",
                                    ", ".join(f"{q} {raw!r}" for q, raw in dataset.unresolved)))
    if dataset.repaired:
        console.print(f"{len(dataset.repaired)} malformed evidence id(s) of the data set repaired")
    results = []
    try:  # before the run: an unwritable --out should not cost the whole evaluation
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise fail(f"cannot write results to {out}: {exc.strerror or exc}") from None
    labels = [s.strip() for s in scorers.split(",") if s.strip()]
    try:  # before the run: a missing extra is said now, not after the first conversation
        model = load_embedder(embedder)
    except RelevanceMemoryError as exc:
        raise fail(str(exc)) from None
    if "offline" in labels and model is None:
        # said once, here, instead of a Python warning per process from the first score
        console.print(tagged("note:", f"{embedder_unavailable_reason()}: 'offline' below is the lexical scorer alone"),
                      highlight=False)
    started = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="semantic relevance off", category=RuntimeWarning)
            for n, spec in enumerate(labels):
                # the manager's own default for "offline": its scorer shares the store's message vectors
                scorer = None if spec.partition(":")[0] == "offline" else make_scorer(spec)
                run = RecallRun(
                    budgets=budgets, methods=_first_methods(model is not None) if n == 0 else ("manager",),
                    keep_recent=keep_recent, goal_block=goal_block, scorer=scorer, label=spec.split(":")[0],
                    embedder=embedder, encoding=encoding,
                )
                with Progress(TextColumn(f"{name} · {spec}", markup=False), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                              console=err, transient=True) as bar:
                    task = bar.add_task("questions", total=len(dataset.questions))
                    advance = functools.partial(bar.advance, task)
                    results.extend(run_recall(dataset, run, jobs=jobs, progress=advance))
    except RelevanceMemoryError as exc:
        raise fail(str(exc)) from None
    elapsed = time.perf_counter() - started
    summary = summarise_results(results)
    embedded = model.name if model is not None else "none: lexical"
    title = f"{name}: evidence recall at a token budget ({len(evaluable):,} questions, tokens counted in {encoding} ({model_name}), embedder {embedded})"
    console.print(recall_table(summary, budgets, title=title))
    json_path, png_path = out / f"{name}.json", out / f"{name}.png"
    payload: dict[str, Any] = {
        "dataset": name, "path": str(path), **_provenance(), "elapsed_s": round(elapsed, 1),
        "config": {"budgets": list(budgets), "model": model_name, "encoding": encoding, "keep_recent": keep_recent,
                   "goal_block": goal_block, "scorers": scorers, "categories": categories, "limit": limit,
                   "embedder": embedder, "embedder_version": model.version if model is not None else None},
        "questions": len(evaluable),
        "repaired_evidence": [list(r) for r in dataset.repaired],
        "unresolved_evidence": [list(u) for u in dataset.unresolved],
        "summary": summary,
    }
    if details:
        payload["results"] = results_as_dicts(results)
    write_json(json_path, payload)
    try:
        plot_recall(summary, budgets, png_path, title=f"{name} ({len(evaluable):,} questions)", encoding=encoding)
        plotted = Text.assemble(" · plot → ", (str(png_path), "bold"))
    except MissingExtraError as exc:  # the numbers are in the JSON: a missing plot library costs only the PNG
        plotted = Text(f" · no plot: {exc}")
    console.print(Text.assemble(f"{elapsed:.0f} s · results → ", (str(json_path), "bold"), plotted))
    _report_failed_builds(results, labels)


def _report_failed_builds(results: list[Any], labels: list[str]) -> None:
    """Say which manager builds failed (each is counted as a miss, so a column of failures reads
    as recall 0); every one failing is an error (exit 2), not a result.

    Raises:
        typer.Exit: every build of the manager failed.
    """
    managed = [r for r in results if r.method in {spec.split(":")[0] for spec in labels}]
    failed = [r for r in managed if r.error]
    for method, budget in dict.fromkeys((r.method, r.budget) for r in failed):
        cell = [r for r in managed if (r.method, r.budget) == (method, budget)]
        errors = [r.error for r in cell if r.error]
        console.print(tagged("warning:", f"{method} at budget {budget:,}: {len(errors)} of {len(cell)} builds failed, "
                                         f"counted as misses (first: {errors[0]})"))
    if managed and len(failed) == len(managed):
        raise fail(f"every one of the manager's {len(managed):,} builds failed: its recall above is not a measurement; "
                   "raise --budgets")


_BUDGETS = typer.Option("--budgets", help="Comma-separated token budgets. Default: 1000,2000,4000 (LoCoMo), 2000,4000,8000 (LongMemEval).")
_LIMIT = typer.Option(help="Only the first N questions.")
_QUESTIONS = typer.Option(help="Only these question ids, comma-separated (conv-26#q0 or q0).")
_LME_QUESTIONS = typer.Option("--questions", help="Only these question ids, comma-separated (the question_id of each "
                              "question, e.g. 001be529).")
_SCORERS = typer.Option("--scorer", help="Manager scorer(s), comma-separated: offline (the default: lexical + embedding), "
                        "lexical (words only), llm, llm:<prompt version>.")
_KEEP = typer.Option("--keep-recent", min=0, help="Manager working memory in steps (QA: 0 = the newest turn only).")
_GOAL = typer.Option("--goal-block/--no-goal-block", help="Let the manager add its goal block (costs tokens the baselines do not spend).")
_JOBS = typer.Option(min=1, help="Worker processes (conversations run in parallel).")
_OUT = typer.Option(help="Folder for <dataset>.json and <dataset>.png.")
_DETAILS = typer.Option("--details/--no-details", help="Also write every (question, method, budget) row to the JSON.")
_MODEL = typer.Option("--model", help="Model name; picks the tokenizer (o200k/cl100k) every method counts budgets in, "
                      "as in relmem build / replay. gpt-4 or gpt-3.5-turbo: cl100k (the encoding of the runs in BENCHMARKS.md).")
_EMBEDDER = typer.Option("--embedder", help=EMBEDDER_HELP.replace("offline scorer", "manager and the embedding baselines"))


@eval_app.command("locomo")
def eval_locomo(
    path: Annotated[Path, typer.Argument(help="locomo10.json")],
    budgets: Annotated[str, _BUDGETS] = "",
    limit: Annotated[int | None, _LIMIT] = None,
    questions: Annotated[str | None, _QUESTIONS] = None,
    categories: Annotated[str, typer.Option(
        help="Categories to measure, comma-separated names (adversarial excluded by default).",
        show_default="multi-hop, temporal, open-domain, single-hop")] = "multi-hop,temporal,open-domain,single-hop",
    scorer: Annotated[str, _SCORERS] = "offline",
    keep_recent: Annotated[int, _KEEP] = 0,
    goal_block: Annotated[bool, _GOAL] = False,
    jobs: Annotated[int, _JOBS] = 1,
    out: Annotated[Path, _OUT] = Path("relmem-eval"),
    details: Annotated[bool, _DETAILS] = False,
    embedder: Annotated[str, _EMBEDDER] = "wordllama",
    model: Annotated[str, _MODEL] = "gpt-4o",
) -> None:
    """Evidence recall on LoCoMo: manager vs recency, BM25 and full history at each budget."""
    _run_eval("locomo", path, budgets, limit, questions, categories, scorer, keep_recent, goal_block, jobs, out, details,
              embedder, model)


@eval_app.command("longmemeval")
def eval_longmemeval(
    path: Annotated[Path, typer.Argument(help="A folder of per-question JSON files (oracle/, s_subset/) or one file.")],
    budgets: Annotated[str, _BUDGETS] = "",
    limit: Annotated[int | None, _LIMIT] = None,
    questions: Annotated[str | None, _LME_QUESTIONS] = None,
    scorer: Annotated[str, _SCORERS] = "offline",
    keep_recent: Annotated[int, _KEEP] = 0,
    goal_block: Annotated[bool, _GOAL] = False,
    jobs: Annotated[int, _JOBS] = 1,
    out: Annotated[Path, _OUT] = Path("relmem-eval"),
    details: Annotated[bool, _DETAILS] = False,
    embedder: Annotated[str, _EMBEDDER] = "wordllama",
    model: Annotated[str, _MODEL] = "gpt-4o",
) -> None:
    """Evidence recall on LongMemEval: manager vs recency, BM25 and full history at each budget."""
    _run_eval("longmemeval", path, budgets, limit, questions, None, scorer, keep_recent, goal_block, jobs, out, details,
              embedder, model)


# --------------------------------------------------------------------------- rubric
@rubric_app.command("build")
def rubric_build(
    dataset: Annotated[str, typer.Argument(help="locomo or longmemeval")],
    path: Annotated[Path, typer.Argument(help="The data set's file or folder.")],
    out: Annotated[Path, typer.Option(help="Where to write the labelled set (JSON).")] = Path("labelled.json"),
    negatives: Annotated[int, typer.Option(help="Non-evidence turns per question (half of them adjacent to the evidence).")] = 8,
    seed: Annotated[int, typer.Option(help="Sampling seed.")] = 0,
    limit: Annotated[int | None, typer.Option(help="At most N examples.")] = None,
) -> None:
    """Derive a labelled set from LoCoMo / LongMemEval: evidence turns gold 5, sampled others gold 1."""
    from ..evaluation import build_labelled_set, load_dataset

    try:
        data = load_dataset(dataset, path)
    except (OSError, ValueError) as exc:
        raise fail(f"cannot load {dataset} from {path}: {exc}") from None
    labelled = build_labelled_set(data, negatives=negatives, seed=seed, limit=limit)
    labelled.save(out)
    n = sum(len(e.gold) for e in labelled.examples)
    console.print(Text.assemble(f"{len(labelled.examples):,} examples, {n:,} labelled messages → ", (str(out), "bold")))


def _load_set(path: Path) -> Any:
    from ..evaluation import LabelledSet

    return read_json_model(path, LabelledSet.model_validate_json, what="a labelled set",
                           hint="make one with relmem rubric build (locomo or longmemeval)")


def _report_rows(reports: list[Any]) -> Table:
    """Every metric of each report; the judge's own scores and the scores with fallbacks on
    separate rows (issue 14: a metric that mixes them hides a broken judge)."""
    table = Table(title="rubric metrics", show_header=True,
                  caption="judge alone = the scorer's own scores; with fallbacks = every score, as a build uses them")
    table.add_column("metric")
    for r in reports:
        # the rubric's name (its full version, with the embedder's fingerprint, is in the JSON); folded, not cut
        table.add_column(f"{r.scorer} · {r.rubric_version.split('@')[0]}" + (f"\n{r.model}" if r.scorer != "offline" else ""),
                         justify="right", overflow="fold")

    def f(v: float) -> str:
        return "—" if v != v else f"{v:.3f}"

    def per_batch(r: Any) -> str:
        return f"{r.reasks / r.batches:.2f}" if r.batches else "—"

    rows = [
        ("examples / messages", [f"{r.examples:,} / {r.messages:,}" for r in reports]),
        ("relevant (gold ≥ 4)", [f"{r.relevant:,}" for r in reports]),
        ("scored by the judge itself", [f"{r.judge.messages:,} ({f(r.judged_share)})" for r in reports]),
        ("fallbacks", [f"{r.fallbacks:,}" for r in reports]),
        ("AUROC · judge alone", [f(r.judge.auroc) for r in reports]),
        ("AUROC · with fallbacks", [f(r.auroc) for r in reports]),
        ("precision of ≥ 4 · judge alone", [f(r.judge.precision_at_4) for r in reports]),
        ("precision of ≥ 4 · with fallbacks", [f(r.precision_at_4) for r in reports]),
        ("recall of ≥ 4 · judge alone", [f(r.judge.recall_at_4) for r in reports]),
        ("recall of ≥ 4 · with fallbacks", [f(r.recall_at_4) for r in reports]),
        ("histogram relevant 1..5 · judge", [" ".join(map(str, r.judge.histogram["relevant"])) for r in reports]),
        ("histogram other 1..5 · judge", [" ".join(map(str, r.judge.histogram["other"])) for r in reports]),
        ("agreement over runs", [f"{f(r.agreement)} ({r.repeats} run{'s' if r.repeats > 1 else ''})" for r in reports]),
        ("replies parsed", [f(r.parse_rate) for r in reports]),
        ("re-asks per batch / splits / timeouts", [f"{per_batch(r)} / {r.splits} / {r.timeouts}" for r in reports]),
        ("LLM calls / tokens", [f"{r.llm_calls:,} / {r.prompt_tokens + r.completion_tokens:,}" for r in reports]),
        ("seconds (per call / per judged msg)",
         [f"{r.latency_s:,.1f} ({f(r.seconds_per_call)} / {f(r.seconds_per_message)})" for r in reports]),
    ]
    for name, cells in rows:
        table.add_row(name, *cells)
    return table


def _evaluate(set_path: Path, specs: list[str], repeats: int, json_out: Path | None, options: dict[str, Any],
              with_offline: bool) -> None:
    from ..evaluation import evaluate_rubric, make_scorer, write_json

    logging.getLogger("instructor").addHandler(logging.NullHandler())  # failures show in the metrics
    logging.getLogger("instructor").propagate = False
    labelled = _load_set(set_path)
    if with_offline and "offline" not in specs and any(s.startswith("llm") for s in specs):
        specs = [*specs, "offline"]  # the offline scorer beside the judge, in the same run
    reports = []
    try:
        for spec in specs:
            scorer = make_scorer(spec, **(options if spec.startswith("llm") else {}))
            if spec.startswith("llm"):
                from ..scoring._llm_scorer import LLMScorer

                label = scorer.describe() if isinstance(scorer, LLMScorer) else spec
                err.print(f"scorer: llm ({label}) — message contents are sent to this "
                          "endpoint", highlight=False)
            reports.append(evaluate_rubric(labelled, scorer, repeats=repeats))
    except RelevanceMemoryError as exc:
        raise fail(str(exc)) from None
    console.print(_report_rows(reports))
    if json_out is not None:
        write_json(json_out, {"set": str(set_path), **_provenance(), "reports": [r.model_dump() for r in reports]})
        console.print(Text.assemble("metrics → ", (str(json_out), "bold")))


def _scorer_settings(
    scorer_model: str | None, base_url: str | None, timeout: float | None, max_tokens: int | None,
    batch_size: int | None, context_length: int | None, system_role: str | None, scorer_mode: str | None,
    response_format: str | None,
) -> dict[str, Any]:
    try:
        options = llm_options(timeout=timeout, max_tokens=max_tokens, batch_size=batch_size,
                              context_length=context_length, system_role=system_role, scorer_mode=scorer_mode,
                              response_format=response_format)
    except ValueError as exc:
        raise fail(str(exc)) from None
    if scorer_model:
        options["model"] = scorer_model
    if base_url:
        options["base_url"] = base_url
    return options


_WITH_OFFLINE = typer.Option("--with-offline/--no-offline",
                             help="Also score the set with the offline scorer in the same run (when an LLM is measured).")


@rubric_app.command("eval")
def rubric_eval(
    labelled: Annotated[Path, typer.Argument(help="A labelled set (JSON; see `relmem rubric build`).")],
    scorer: Annotated[str, typer.Option(help="offline, llm or llm:<prompt version>.")] = "offline",
    repeats: Annotated[int, typer.Option(help="Score the set this many times (agreement across runs).")] = 1,
    json_out: Annotated[Path | None, typer.Option("--json", help="Also write the metrics as JSON here.")] = None,
    with_offline: Annotated[bool, _WITH_OFFLINE] = True,
    scorer_model: ScorerModel = None,
    base_url: BaseUrl = None,
    timeout: Timeout = None,
    max_tokens: MaxTokens = None,
    batch_size: BatchSize = None,
    context_length: ContextLength = None,
    system_role: SystemRole = None,
    scorer_mode: ScorerMode = None,
    response_format: ResponseFormat = None,
) -> None:
    """Metrics of one scorer + prompt version on a labelled set: AUROC and precision/recall of ≥ 4 of the
    judge alone and with fallbacks, parse rate, re-asks, calls, tokens, seconds (the offline scorer beside it)."""
    options = _scorer_settings(scorer_model, base_url, timeout, max_tokens, batch_size, context_length, system_role,
                               scorer_mode, response_format)
    _evaluate(labelled, [scorer], repeats, json_out, options, with_offline)


@rubric_app.command("compare")
def rubric_compare(
    labelled: Annotated[Path, typer.Argument(help="A labelled set (JSON).")],
    a: Annotated[str, typer.Argument(help="First scorer: offline, llm or llm:<prompt version>.")],
    b: Annotated[str, typer.Argument(help="Second scorer, e.g. llm:score_v2.")],
    repeats: Annotated[int, typer.Option(help="Runs per scorer (agreement across runs).")] = 1,
    json_out: Annotated[Path | None, typer.Option("--json", help="Also write both reports as JSON here.")] = None,
    with_offline: Annotated[bool, _WITH_OFFLINE] = True,
    scorer_model: ScorerModel = None,
    base_url: BaseUrl = None,
    timeout: Timeout = None,
    max_tokens: MaxTokens = None,
    batch_size: BatchSize = None,
    context_length: ContextLength = None,
    system_role: SystemRole = None,
    scorer_mode: ScorerMode = None,
    response_format: ResponseFormat = None,
) -> None:
    """Run two scorers / prompt versions on the same labelled set and print them side by side
    (with the offline scorer beside them when an LLM is measured)."""
    options = _scorer_settings(scorer_model, base_url, timeout, max_tokens, batch_size, context_length, system_role,
                               scorer_mode, response_format)
    _evaluate(labelled, [a, b], repeats, json_out, options, with_offline)

def _first_methods(embedding: bool) -> tuple[str, ...]:
    """Baselines measured with the first scorer: recency, BM25, full history, and — when the
    embedding model is installed (``embedding``) — the embedding alone and BM25 + embedding
    (issue 11)."""
    base = ("recency", "bm25", "full", "manager")
    return (*base, "embedding", "bm25+embedding") if embedding else base

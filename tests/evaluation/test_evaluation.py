"""Evaluation: loaders (malformed LoCoMo ids), metric code on tiny hand-made data, smoke runs."""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone
from pathlib import Path

import pytest
from typer.testing import CliRunner

from relevance_memory import OfflineScorer, TaskGoal
from relevance_memory.cli import app
from relevance_memory.evaluation import (
    LabelledExample,
    LabelledMessage,
    LabelledSet,
    QuestionResult,
    RecallRun,
    auroc,
    bm25_select,
    build_labelled_set,
    evaluate_rubric,
    evidence_hit,
    load_locomo,
    load_longmemeval,
    recency_select,
    repair_locomo_evidence,
    run_recall,
    select_questions,
    summarise_results,
)
from relevance_memory.scoring._embedding import default_embedder

KNOWN = {"D8:6", "D9:17", "D11:26", "D30:5", "D1:1"}


@pytest.mark.parametrize(
    ("raw", "resolved", "unresolved"),
    [
        ("D1:1", ["D1:1"], []),
        ("D8:6; D9:17", ["D8:6", "D9:17"], []),
        ("D:11:26", ["D11:26"], []),
        ("D30:05", ["D30:5"], []),
        ("D", [], ["D"]),
        ("D4:36", [], ["D4:36"]),
        ("D1:1 D4:36", ["D1:1"], ["D4:36"]),
    ],
)
def test_repair_locomo_evidence(raw: str, resolved: list[str], unresolved: list[str]) -> None:
    assert repair_locomo_evidence(raw, KNOWN) == (resolved, unresolved)


def _tiny_locomo(tmp_path: Path) -> Path:
    sample = {
        "sample_id": "conv-x",
        "conversation": {
            "speaker_a": "Ann", "speaker_b": "Bob",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a puppy named Biscuit."},
                {"speaker": "Bob", "dia_id": "D1:2", "text": "Lovely! What breed?", "blip_caption": "a photo of a dog"},
                {"speaker": "Ann", "dia_id": "D1:3", "text": "A beagle."},
            ],
            "session_2_date_time": "10:00 am on 9 May, 2023",
            "session_2": [
                {"speaker": "Bob", "dia_id": "D2:1", "text": "I went hiking in the Alps yesterday."},
                {"speaker": "Ann", "dia_id": "D2:2", "text": "Sounds great, how was the weather?"},
            ],
        },
        "qa": [
            {"question": "What is the name of Ann's puppy?", "answer": "Biscuit", "evidence": ["D1:1"], "category": 4},
            {"question": "Which breed is the puppy?", "answer": "beagle", "evidence": ["D1:1; D1:03"], "category": 1},
            {"question": "When did Bob go hiking?", "answer": "8 May", "evidence": ["D:2:1", "D7:7"], "category": 2},
            {"question": "Unknowable?", "evidence": ["D"], "category": 5, "adversarial_answer": "x"},
        ],
    }
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps([sample]), encoding="utf-8")
    return path


def test_load_locomo_tiny(tmp_path: Path) -> None:
    data = load_locomo(_tiny_locomo(tmp_path))
    conv = data.conversations[0]
    assert [t.id for t in conv.turns] == ["D1:1", "D1:2", "D1:3", "D2:1", "D2:2"]
    assert [t.role for t in conv.turns] == ["user", "assistant", "user", "assistant", "user"]
    assert conv.turns[1].text == "Bob: Lovely! What breed? [shares a photo of a dog]"
    assert conv.turns[0].timestamp == datetime(2023, 5, 8, 13, 56, tzinfo=timezone.utc)
    assert conv.turns[3].timestamp == datetime(2023, 5, 9, 10, 0, tzinfo=timezone.utc)
    q = conv.questions
    assert [x.evidence for x in q] == [("D1:1",), ("D1:1", "D1:3"), ("D2:1",), ()]
    assert [x.category for x in q] == ["single-hop", "multi-hop", "temporal", "adversarial"]
    assert q[3].answer == "x"
    assert [x.evaluable for x in q] == [True, True, True, False]
    assert data.unresolved == [("conv-x#q2", "D7:7"), ("conv-x#q3", "D")]
    assert ("conv-x#q1", "D1:1; D1:03", ("D1:1", "D1:3")) in data.repaired
    assert ("conv-x#q2", "D:2:1", ("D2:1",)) in data.repaired


def test_load_longmemeval_tiny(tmp_path: Path) -> None:
    item = {
        "question_id": "abc_abs", "question_type": "single-session-user", "question": "What car do I drive?",
        "question_date": "2023/05/30 (Tue) 16:42", "answer": "a Prius",
        "haystack_dates": ["2023/05/20 (Sat) 03:38", "2023/05/21 (Sun) 12:00"],
        "haystack_session_ids": ["a", "b"],
        "haystack_sessions": [
            [{"role": "user", "content": "hi", "has_answer": False}, {"role": "assistant", "content": "hello"}],
            [{"role": "user", "content": "I drive a Prius", "has_answer": True}],
        ],
    }
    (tmp_path / "abc_abs.json").write_text(json.dumps(item), encoding="utf-8")
    data = load_longmemeval(tmp_path)
    conv = data.conversations[0]
    assert [t.id for t in conv.turns] == ["S1:1", "S1:2", "S2:1"]
    assert conv.turns[2].timestamp == datetime(2023, 5, 21, 12, 0, tzinfo=timezone.utc)
    assert conv.questions[0].evidence == ("S2:1",)
    assert conv.questions[0].category == "single-session-user-abs"


def test_hit_and_selection_helpers() -> None:
    assert evidence_hit(["a", "b"], {"a", "b", "c"}, set()) == (True, True, 1.0)
    assert evidence_hit(["a", "b"], {"a"}, {"b"}) == (False, True, 0.5)
    assert evidence_hit([], {"a"}, set()) == (False, False, 0.0)
    # priming 3 tokens; newest first until one does not fit
    assert recency_select([10, 10, 10, 10], 25) == ([2, 3], 23)
    # best scores first, skip what does not fit, zero scores never taken, time order out
    assert bm25_select([0.5, 3.0, 0.0, 2.0], [10, 30, 1, 5], 20) == ([0, 3], 18)


def test_summarise_results_known_values() -> None:
    rows = [
        QuestionResult("q1", "a", "bm25", 1000, True, True, 1.0, 900),
        QuestionResult("q2", "a", "bm25", 1000, False, True, 0.5, 800),
        QuestionResult("q3", "b", "bm25", 1000, True, True, 1.0, 700),
    ]
    s = summarise_results(rows)
    overall = s["overall"]["bm25"]["1000"]
    assert overall["n"] == 3
    assert overall["recall"] == pytest.approx(2 / 3)
    assert overall["recall_any"] == 1.0
    assert overall["found"] == pytest.approx(2.5 / 3)
    assert overall["tokens"] == 800
    assert s["by_category"]["a"]["bm25"]["1000"]["recall"] == 0.5


def test_auroc_known_values() -> None:
    assert auroc([5, 4], [1, 2]) == 1.0
    assert auroc([1, 2], [5, 4]) == 0.0
    assert auroc([3], [3]) == 0.5
    assert auroc([3, 4], [1, 3]) == pytest.approx(0.875)  # pairs: (3>1)=1, (3=3)=.5, (4>1)=1, (4>3)=1
    assert math.isnan(auroc([], [1]))


def test_evaluate_rubric_tiny_set() -> None:
    msgs = [
        LabelledMessage(id="m0", role="user", content="Ann: my puppy Biscuit is a beagle", msg_type="user_chat"),
        LabelledMessage(id="m1", role="assistant", content="Bob: the weather in the Alps was cold"),
        LabelledMessage(id="m2", role="user", content="Ann: I like tea", msg_type="user_chat"),
    ]
    labelled = LabelledSet(name="tiny", examples=[LabelledExample(
        id="e1", goal=TaskGoal(final="What breed is Biscuit the puppy?", subtask="What breed is Biscuit the puppy?",
                               source="explicit"),
        messages=msgs, gold={"m0": 5, "m1": 1, "m2": 1},
    )])
    report = evaluate_rubric(labelled, OfflineScorer(), repeats=2)
    assert report.messages == 3
    assert report.relevant == 1
    assert report.auroc == 1.0
    assert report.precision_at_4 == 1.0
    assert report.recall_at_4 == 1.0
    assert report.histogram == {"relevant": [0, 0, 0, 1, 0], "other": [2, 0, 0, 0, 0]}
    assert report.agreement == 1.0
    assert report.repeats == 2
    assert report.llm_calls == 0


SEMANTIC = ("embedding", "bm25+embedding") if default_embedder() is not None else ()


def test_recall_run_tiny(tmp_path: Path) -> None:
    data = load_locomo(_tiny_locomo(tmp_path))
    select_questions(data, ["q0"], None)
    assert [q.id for q in data.questions] == ["conv-x#q0"]
    results = run_recall(data, RecallRun(budgets=(40,)))
    by_method = {r.method: r for r in results}
    assert set(by_method) == {"recency", "bm25", "full", "offline"}
    assert by_method["bm25"].hit and by_method["offline"].hit
    assert not by_method["recency"].hit
    assert all(r.tokens <= 40 for r in results if r.method != "full")


def test_labelled_set_builder_tiny(tmp_path: Path) -> None:
    data = load_locomo(_tiny_locomo(tmp_path))
    labelled = build_labelled_set(data, negatives=2, seed=1)
    assert len(labelled.examples) == 3
    first = labelled.examples[0]
    assert first.gold["D1:1"] == 5
    assert sorted(v for v in first.gold.values()) == [1, 1, 5]
    assert "D1:2" in first.gold  # the evidence's neighbour is a hard negative
    again = build_labelled_set(data, negatives=2, seed=1)
    assert again == labelled
    path = tmp_path / "set.json"
    labelled.save(path)
    assert LabelledSet.load(path) == labelled


# --------------------------------------------------------------------------- real data
runner = CliRunner()


@pytest.mark.data
def test_locomo_loader_real(data_dir: Path) -> None:
    data = load_locomo(data_dir / "locomo" / "locomo10.json")
    assert len(data.questions) == 1986
    assert sorted(data.unresolved) == [("conv-42#q58", "D10:19"), ("conv-42#q88", "D"), ("conv-47#q38", "D4:36")]
    assert len(data.repaired) == 6
    assert sum(q.evaluable for q in data.questions if q.category != "adversarial") == 1536


@pytest.mark.data
def test_cli_eval_smoke(data_dir: Path, tmp_path: Path) -> None:
    for name, path in [("locomo", data_dir / "locomo" / "locomo10.json"),
                       ("longmemeval", data_dir / "longmemeval" / "oracle")]:
        out = tmp_path / name
        result = runner.invoke(app, ["eval", name, str(path), "--limit", "2", "--out", str(out)])
        assert result.exit_code == 0, result.output
        payload = json.loads((out / f"{name}.json").read_text())
        assert payload["questions"] == 2
        # the embedding baselines (issue 11) are measured whenever the bundled model is installed
        assert set(payload["summary"]["overall"]) == {"recency", "bm25", "full", "offline", *SEMANTIC}
        assert (out / f"{name}.png").stat().st_size > 1000


@pytest.mark.data
def test_cli_rubric_smoke(data_dir: Path, tmp_path: Path) -> None:
    labelled = tmp_path / "set.json"
    result = runner.invoke(app, ["rubric", "build", "locomo", str(data_dir / "locomo" / "locomo10.json"),
                                 "--limit", "2", "--out", str(labelled)])
    assert result.exit_code == 0, result.output
    assert len(LabelledSet.load(labelled).examples) == 2
    result = runner.invoke(app, ["rubric", "eval", str(labelled), "--json", str(tmp_path / "m.json")])
    assert result.exit_code == 0, result.output
    assert "AUROC" in result.output
    result = runner.invoke(app, ["rubric", "compare", str(labelled), "offline", "offline", "--repeats", "2"])
    assert result.exit_code == 0, result.output
    reports = json.loads((tmp_path / "m.json").read_text())["reports"]
    assert reports[0]["messages"] == sum(len(e.gold) for e in LabelledSet.load(labelled).examples)


def test_cli_rubric_unknown_scorer(tmp_path: Path) -> None:
    labelled = tmp_path / "set.json"
    LabelledSet(name="empty").save(labelled)
    result = runner.invoke(app, ["rubric", "eval", str(labelled), "--scorer", "nope"])
    assert result.exit_code == 2


def test_cli_eval_tiny_file(tmp_path: Path) -> None:
    path = _tiny_locomo(tmp_path)
    out = tmp_path / "out"
    result = runner.invoke(app, ["eval", "locomo", str(path), "--budgets", "40,80", "--questions", "q0,q1",
                                 "--out", str(out), "--details"])
    assert result.exit_code == 0, result.output
    payload = json.loads((out / "locomo.json").read_text())
    assert payload["questions"] == 2
    assert payload["config"]["budgets"] == [40, 80]
    assert payload["unresolved_evidence"] == [["conv-x#q2", "D7:7"], ["conv-x#q3", "D"]]
    rows = payload["results"]
    assert {r["method"] for r in rows} == {"recency", "bm25", "full", "offline", *SEMANTIC}
    methods = 3 + len(SEMANTIC)
    assert len(rows) == 2 * (1 + methods * 2)  # per question: full once, the other methods × two budgets


def test_make_scorer_llm_unavailable_or_offline() -> None:
    import relevance_memory
    from relevance_memory import ConfigError
    from relevance_memory.evaluation import make_scorer

    assert make_scorer("offline").name == "offline"
    # "offline" is the default offline scorer (lexical + embedding), "lexical" the words alone
    from relevance_memory import OfflineScorer
    from relevance_memory.scoring._semantic import SemanticScorer

    assert isinstance(make_scorer("offline"), SemanticScorer)
    assert type(make_scorer("lexical")) is OfflineScorer and make_scorer("lexical").name == "offline"
    if not hasattr(relevance_memory, "LLMScorer"):
        with pytest.raises(ConfigError, match="not available"):
            make_scorer("llm:score_v1")
    with pytest.raises(ConfigError, match="unknown scorer"):
        make_scorer("gpt")


def test_recall_table_names_every_method_whole_and_says_what_each_is() -> None:
    from rich.console import Console

    from relevance_memory.evaluation._report import recall_table

    rows = [QuestionResult("q1", "single-session-preference", m, 2000, True, True, 1.0, 1900)
            for m in ("recency", "bm25", "offline", "embedding", "bm25+embedding")]
    rows.append(QuestionResult("q1", "single-session-preference", "full", 0, True, True, 1.0, 104639))
    console = Console(width=80, record=True, color_system=None)
    console.print(recall_table(summarise_results(rows), [2000, 4000, 8000], title="t"))
    text = console.export_text()
    assert "bm25+embedding" in text  # not "bm25+emb…" in an 80-column terminal
    assert "(104,639)" in text and "(1,900)" in text  # nor "(104,6…"
    assert "offline = this library's default scorer" in " ".join(text.split())

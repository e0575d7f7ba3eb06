"""Which scorer runs, and why (issue 13 items 10 and 15): nothing is sent to an endpoint
unless asked for, and the offline path never imports ``openai`` or ``instructor``."""

from __future__ import annotations

import subprocess
import sys

import pytest

from relevance_memory import ConfigError, OfflineScorer
from relevance_memory.scoring._choice import resolve_scorer


def test_an_api_key_alone_never_switches_to_the_llm() -> None:
    scorer, note = resolve_scorer("auto", environ={"OPENAI_API_KEY": "sk-live-looking-key"})
    assert isinstance(scorer, OfflineScorer)
    assert note == (
        "offline (deterministic, no network; an endpoint is configured, but sending the transcript "
        "needs --scorer llm or RELMEM_SCORER=llm)"
    )
    scorer, _ = resolve_scorer("auto", environ={"OPENAI_BASE_URL": "http://127.0.0.1:9/v1"})
    assert isinstance(scorer, OfflineScorer)


def test_the_llm_runs_when_asked_and_the_note_says_so() -> None:
    env = {"RELMEM_SCORER": "llm"}
    scorer, note = resolve_scorer("auto", base_url="http://127.0.0.1:9/v1", environ=env, timeout=300.0)
    assert scorer.name == "llm" and note.startswith("llm (gpt-4o-mini at http://127.0.0.1:9/v1, tools mode")
    assert "timeout 300 s" in note and note.endswith("RELMEM_SCORER=llm) — message contents are sent to this endpoint")
    _, note = resolve_scorer("llm", base_url="http://127.0.0.1:9/v1", environ={})
    assert "; --scorer llm)" in note
    _, note = resolve_scorer("auto", base_url="http://127.0.0.1:9/v1", environ={})
    assert "; --base-url given)" in note
    scorer, note = resolve_scorer("auto", environ={"RELMEM_SCORER": "offline", "OPENAI_API_KEY": "k"})
    assert isinstance(scorer, OfflineScorer) and "RELMEM_SCORER=offline" in note


def test_bad_configured_scorer_is_named() -> None:
    with pytest.raises(ConfigError, match="RELMEM_SCORER='gpt': expected llm or offline"):
        resolve_scorer("auto", environ={"RELMEM_SCORER": "gpt"})


def test_offline_choice_imports_neither_openai_nor_instructor() -> None:
    code = (
        "import sys; from relevance_memory.scoring._choice import resolve_scorer; "
        "s, _ = resolve_scorer('auto', environ={'OPENAI_API_KEY': 'k'}); "
        "print(sorted(m for m in ('openai', 'instructor') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"

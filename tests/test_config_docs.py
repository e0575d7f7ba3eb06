"""docs/configuration.md is generated from the settings' docstrings (issue 25): it fails here
when a field, a default or a description changed and the page was not regenerated."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from pydantic import BaseModel

REPO = Path(__file__).resolve().parents[1]


def _script() -> object:
    spec = importlib.util.spec_from_file_location("gen_config_docs", REPO / "scripts" / "gen_config_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_configuration_reference_is_up_to_date() -> None:
    gen = _script()
    page = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert page == gen.render(), "docs/configuration.md is out of date: run python scripts/gen_config_docs.py"  # type: ignore[attr-defined]


def test_every_field_is_documented_with_its_default() -> None:
    from relevance_memory import CachePolicy, MemoryConfig

    page = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    for cls in (MemoryConfig, CachePolicy):
        for name in cls.model_fields:
            assert f"- **`{name}`** · " in page, name
    assert "- **`keep_recent`** · `int` · default `4`" in page
    assert "- **`target_fraction`** · `float` · default `0.8`" in page


class _HalfDocumented(BaseModel):
    """A settings class.

    Attributes:
        documented: has an entry.
    """

    documented: int = 1
    extra: int = 2


def test_an_undocumented_field_fails_the_script() -> None:
    gen = _script()
    with pytest.raises(SystemExit, match="_HalfDocumented: no 'Attributes:' entry for extra"):
        gen.section(_HalfDocumented, "")  # type: ignore[attr-defined]

"""benchmarks/check_page.py (issue 25): BENCHMARKS.md's quick figures are marked blocks the
script re-runs; here its parsing and tolerance, without running the benchmarks (no timings
in tests)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_page", REPO / "benchmarks" / "check_page.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("check_page", module)  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


def test_every_marked_block_on_the_page_names_a_known_check() -> None:
    check = _script()
    found = check.blocks((REPO / "BENCHMARKS.md").read_text(encoding="utf-8"))
    assert set(found) == set(check.CHECKS) == {"build", "replay-example", "replay", "anthropic-example", "overhead"}
    assert any(line.startswith("TOTAL calls=96 ") for line in found["replay-example"])
    assert all(found.values())


def test_lines_match_by_their_text_before_the_first_digit() -> None:
    check = _script()
    assert check.key("│ trace chains kept       │        │ 11 of 97 │") == "trace chains kept"
    assert check.key("scores: 184 offline, 9 recent") == "scores:"
    assert check.compare("│ a │ 11 of 97 │", "│ a      │ 11 of 97        │", None) is None  # table padding
    assert check.compare("scores: 184 offline", "scores: 185 offline", None) is not None  # exact


def test_timings_pass_within_the_documented_factor_and_derived_ratios_are_not_compared() -> None:
    check = _script()
    timing, derived = check.CHECKS["overhead"].timing, check.CHECKS["overhead"].derived
    page = "1,000 msgs | cold 2.000s warm 0.001s | ratio cold 1.6×"
    assert check.compare(page, "1,000 msgs | cold 4.900s warm 0.009s | ratio cold 9.9×", timing, derived) is None
    assert check.compare(page, "1,000 msgs | cold 5.100s warm 0.001s | ratio cold 1.6×", timing, derived) is not None
    assert check.compare(page, "2,000 msgs | cold 2.000s warm 0.001s | ratio cold 1.6×", timing, derived) is not None
    assert check.TIMING_FACTOR == 2.5

"""The README is the front door (issue 25): its two commands are what CI runs, its links and
section anchors resolve, and every number in its results table is in the BENCHMARKS.md section
the row links to (where the command that reproduces it is)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")
PAGES = [REPO / "README.md", REPO / "BENCHMARKS.md", *sorted((REPO / "docs").glob("*.md"))]


def _commands() -> list[str]:
    block = README.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line and not line.startswith("#")]


def test_the_readme_test_command_is_what_ci_runs() -> None:
    setup, tests = _commands()
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()
    assert ci[-1] == tests == ".venv/bin/python -m pytest -q"
    assert ".venv/bin/pip install -q -e '.[dev]'" in ci and "pip install -q -e '.[dev]'" in setup


def test_the_main_job_runs_on_a_shipped_run() -> None:
    setup, _ = _commands()
    build = setup.split("&& ")[-1].split()
    assert build[:2] == [".venv/bin/relmem", "build"] and (REPO / build[2]).is_file()


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but ``-`` and ``_`` dropped, spaces → ``-``."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return {_slug(h) for h in re.findall(r"^#{1,6} (.+)$", text, flags=re.M)}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_links_and_anchors_resolve(page: Path) -> None:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        assert linked.exists(), f"{page.name}: {target}"
        if anchor and linked.suffix == ".md":
            assert anchor in _anchors(linked), f"{page.name}: {target}"


def test_every_number_in_the_results_table_is_in_its_section() -> None:
    table = README.split("## Results", 1)[1].split("\n\n", 2)[2].split("\n\n", 1)[0]
    benchmarks = (REPO / "BENCHMARKS.md").read_text(encoding="utf-8")
    sections = {_slug(h): body for h, body in re.findall(r"^## ([^\n]+)\n(.*?)(?=^## |\Z)", benchmarks, flags=re.M | re.S)}
    rows = [r for r in table.splitlines() if r.startswith("| [")]
    assert len(rows) == 6
    for row in rows:
        anchor = re.search(r"\(BENCHMARKS\.md#([\w-]+)\)", row)
        assert anchor, row
        body = sections[anchor.group(1)]
        claim = row.split("|")[2:]  # the figures, not the row's description
        for number in re.findall(r"\d[\d,]*(?:\.\d+)?", " ".join(claim)):
            assert number in body, f"{anchor.group(1)}: {number}"

"""The README quotes the import cost from one place: benchmarks/RESULTS.md's "Import cost"
section, linked by its heading, with the same figures (doc-vs-doc, so the two cannot drift)."""

from __future__ import annotations

import os
import re

REPO = os.path.join(os.path.dirname(__file__), "..", "..")


def _read(*parts: str) -> str:
    with open(os.path.join(REPO, *parts), encoding="utf-8") as handle:
        return handle.read()


def _anchor(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_readme_import_figure_points_to_the_results_section_and_matches_it():
    readme, results = _read("README.md"), _read("benchmarks", "RESULTS.md")
    (bullet,) = [b for b in readme.split("\n- ") if b.startswith("**On the caller's thread")]
    (link,) = re.findall(r"\(benchmarks/RESULTS\.md#([^)]+)\)", bullet)
    headings = [line[3:] for line in results.splitlines() if line.startswith("## ")]
    (section_heading,) = [h for h in headings if _anchor(h) == link]
    section = results.split("## " + section_heading, 1)[1].split("\n## ", 1)[0]
    figures = re.findall(r"\d+-\d+ ms", bullet)
    assert figures, "the README quotes a figure"
    for figure in figures:
        assert figure in section, f"README's {figure} is not in RESULTS.md's section"
    assert "74-77 ms" not in readme  # the figure that no longer held

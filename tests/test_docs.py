"""The pages a user reads (the README, docs/, each corpus's README and results page) link to what
exists: every relative link names a file of the repository, and every #anchor into a Markdown
page one of its headings (as GitHub makes anchors of them). They stay short enough to read, and
none leads into the archive of experiments."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "data").glob("*/*.md"))]
ARCHIVE = ROOT / "docs" / "archive"
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation out, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)  # no headings in code blocks
    return {anchor(line.lstrip("#")) for line in text.splitlines() if line.startswith("#")}


def page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


@pytest.mark.parametrize("page", [*PAGES, *sorted(ARCHIVE.glob("*.md"))], ids=page_id)
def test_every_relative_link_and_anchor_resolves(page: Path) -> None:
    broken = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto
        path, _, fragment = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(target)
        elif fragment and linked.suffix == ".md" and fragment not in anchors(linked):
            broken.append(target)
    assert not broken, f"{page.name}: {broken}"


def test_the_pages_a_user_reads_are_short_and_never_lead_into_the_archive() -> None:
    lines = sum(len(page.read_text().splitlines()) for page in PAGES)
    assert lines < 2000, f"the pages a user reads hold {lines} lines: move what is an experiment to docs/archive/"
    into_archive = [
        page_id(page)
        for page in PAGES
        for target in LINK.findall(page.read_text())
        if ARCHIVE in (page.parent / target.partition("#")[0]).resolve().parents
    ]
    assert not into_archive, f"linked to the archive from {into_archive}"

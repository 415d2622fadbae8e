"""The README stays a newcomer's page (under 200 lines) whose every link into the repository resolves; the rest
of what it used to say lives in docs/ (docs/readme-map.md lists where each old section went)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_readme_fits_on_a_screen_or_two() -> None:
    assert len((REPO / "README.md").read_text().splitlines()) < 200


def test_every_relative_link_of_the_readme_resolves() -> None:
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", (REPO / "README.md").read_text())
    relative = [link for link in links if "://" not in link]
    assert len(relative) > 20
    assert [link for link in relative if not (REPO / link).exists()] == []


def test_the_map_names_every_page_it_sends_an_old_section_to() -> None:
    rows = re.findall(r"\]\(([\w/.-]+\.md)\)", (REPO / "docs" / "readme-map.md").read_text())
    assert len(rows) >= 37
    assert [page for page in rows if not (REPO / "docs" / page).exists()] == []

"""The user's door stays a door: the README's size, its two commands, no run diary, links that
resolve, and the licence setup.cfg declares (issue #25, DESIGN.md 5)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

TOP = Path(__file__).resolve().parents[2]
README = TOP / "README.md"
DOCS = sorted([README, TOP / "CHANGELOG.md", TOP / "ansible" / "README.md", *(TOP / "docs").rglob("*.md")])


def test_readme_is_at_most_300_lines():
    assert len(README.read_text().splitlines()) <= 300


def test_readme_gives_the_demo_and_the_tests_as_its_two_commands():
    blocks = re.findall(r"```(?:\w*)\n(.*?)```", README.read_text(), flags=re.S)
    commands = [b.strip() for b in blocks if b.strip() in ("./scripts/demo", "./scripts/test")]
    assert commands == ["./scripts/demo", "./scripts/test"]
    for script in ("scripts/demo", "scripts/test"):
        assert (TOP / script).stat().st_mode & 0o111, script


def test_no_run_diary_in_readme_or_changelog():
    """History is git's: no dates of our runs, no commit hashes, no CI timings."""
    for path in (README, TOP / "CHANGELOG.md"):
        text = path.read_text()
        assert not re.search(r"\b20\d\d-\d\d-\d\d\b", text), path
        assert not re.search(r"\b(?:on|of|at) [0-9a-f]{7,40}\b", text), path


def test_licence_file_is_the_one_setup_cfg_declares():
    assert "license = Apache-2.0" in (TOP / "setup.cfg").read_text()
    text = (TOP / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(TOP)))
def test_relative_links_resolve(doc):
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", doc.read_text()):
        if re.match(r"[a-z]+:", target):
            continue
        assert (doc.parent / target).exists(), f"{doc.relative_to(TOP)}: broken link {target}"

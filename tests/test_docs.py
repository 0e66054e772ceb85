"""The docs: the README's first screen holds the two Quickstart commands, the pages generated from the code are
current, and the site builds with every link and anchor checked (mkdocs --strict), which a broken link fails."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from peerify_dagster.cli import build_parser
from peerify_dagster.docs_pages import stale_pages
from peerify_dagster.lineage import read_snapshot

REPO = Path(__file__).resolve().parents[1]


def test_the_readme_is_short_and_its_first_screen_has_the_two_commands():
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= 200
    first_screen = "\n".join(lines[:30])
    assert "make demo" in first_screen and "make test" in first_screen and "apt-get" in "\n".join(lines[:40])


def test_the_generated_pages_are_the_code_s():
    assert stale_pages(REPO / "docs" / "reference", build_parser(), read_snapshot(REPO / "asset_graph.json")) == []
    cli = (REPO / "docs" / "reference" / "cli.md").read_text()
    assert "## `peerify`" in cli and "`peerify release diff`" in cli and "`peerify graph check`" in cli


def mkdocs(root: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)], cwd=root,
                          capture_output=True, text=True, timeout=300)


def test_the_site_builds_strictly_and_a_broken_link_fails_it(tmp_path):
    built = mkdocs(REPO, tmp_path / "site")
    assert built.returncode == 0, built.stderr[-3000:]
    assert (tmp_path / "site" / "reference" / "asset-graph" / "index.html").is_file()

    copy = tmp_path / "copy"
    copy.mkdir()
    shutil.copy2(REPO / "mkdocs.yml", copy / "mkdocs.yml")
    shutil.copytree(REPO / "docs", copy / "docs")
    page = copy / "docs" / "citations.md"
    page.write_text(page.read_text() + "\nSee [the missing page](maintainer/nowhere.md).\n")
    broken = mkdocs(copy, tmp_path / "broken-site")
    assert broken.returncode != 0 and "nowhere.md" in broken.stderr

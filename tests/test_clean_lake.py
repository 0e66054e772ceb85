"""`peerify clean-lake` (and `make clean-lake`): what a build makes again goes (the web app's page images with it);
human decisions, releases, the LLM call ledger, crawl snapshots and `peerify verify`'s uploads stay unless a flag
names them, the web app's session secret always, and the command says which."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import polars as pl
import pytest

from peerify_dagster import cli
from peerify_dagster.annotation.decisions import DecisionLedger, new_decision
from peerify_dagster.paths import REPO_ROOT
from peerify_dagster.resources.lake import Lake
from peerify_dagster.resources.runs import build_lock_path, exclusive_lock

VENUE = "X.cc/2026"


@pytest.fixture
def lake(tmp_path, monkeypatch) -> Path:
    """A lake with tables, a catalog, a PDF, human decisions, a release, ledger segments, a crawl snapshot, an upload
    of `peerify verify` and the web app's session secret and page images."""
    root = tmp_path / "lake"
    monkeypatch.setenv("PEERIFY_LAKE", str(root))
    Lake(root).write_table("submissions", VENUE, pl.DataFrame({"paper_id": ["P1"]}))
    Lake(root).refresh_catalog()
    DecisionLedger(root, VENUE).append([new_decision(
        venue=VENUE, claim_id="c1", source="thread", kind="arbitration", action="decide", choice="third_label",
        label="Supported", annotator="alice", queue_version="q1")])
    for name in ("pdfs/ab12.pdf", "releases/1.0.0/manifest.json", "llm_calls/part-1.parquet",
                 "snapshots/X.cc__2026/venue.json", "uploads/venues.yaml", "uploads/upload-0123456789ab/upload.json",
                 "web/session_secret", "web/page_images/ab12/1@1.0.png", ".gitkeep"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(b"x")
    return root


def clean(capsys, *flags: str) -> tuple[int, str]:
    code = cli.main(["clean-lake", *flags])
    return code, capsys.readouterr().out


def test_clean_lake_keeps_decisions_releases_ledger_snapshots_and_uploads_and_says_so(lake, capsys):
    ledger = DecisionLedger(lake, VENUE).path.read_bytes()
    code, out = clean(capsys)
    assert code == 0
    assert sorted(p.name for p in lake.iterdir()) == [".gitkeep", "human_decisions", "llm_calls", "releases",
                                                      "snapshots", "uploads", "web"]
    assert DecisionLedger(lake, VENUE).path.read_bytes() == ledger
    for kept, flag in (("human_decisions/", "--also-decisions"), ("releases/", "--also-releases"),
                       ("llm_calls/", "--also-ledger"), ("snapshots/", "--also-snapshots"),
                       ("uploads/", "--also-uploads")):
        assert any(line.startswith(f"kept {kept}") and flag in line for line in out.splitlines()), out
    assert sorted(path.relative_to(lake).as_posix() for path in (lake / "uploads").rglob("*")) == [
        "uploads/upload-0123456789ab", "uploads/upload-0123456789ab/upload.json", "uploads/venues.yaml"]
    # The page images are a cache; the session secret is not data, but a new one would sign everyone out.
    assert [path.name for path in (lake / "web").iterdir()] == ["session_secret"]
    assert "kept web/session_secret (the web app's session secret: removing it signs everyone out" in out
    assert "removed 4 rebuildable entries" in out and "submissions/" in out and "peerify.duckdb" in out
    assert "web/page_images/" in out


def test_clean_lake_removes_decisions_only_when_named(lake, capsys):
    code, out = clean(capsys, "--also-decisions")
    assert code == 0 and not (lake / "human_decisions").exists()
    assert "removed human_decisions/ (every arbitration and audit decision" in out and "--also-decisions asked" in out
    assert {"releases", "llm_calls", "snapshots"} <= {p.name for p in lake.iterdir()}
    code, out = clean(capsys, "--also-releases", "--also-ledger", "--also-snapshots")
    assert code == 0 and sorted(p.name for p in lake.iterdir()) == [".gitkeep", "uploads", "web"]
    code, out = clean(capsys, "--also-uploads")
    assert code == 0 and sorted(p.name for p in lake.iterdir()) == [".gitkeep", "web"]
    assert "removed uploads/ (what `peerify verify` was given" in out and "--also-uploads asked" in out


def test_make_clean_lake_passes_the_named_folders_as_flags():
    # Isolated from a calling make (`make test`): a sub-make would print its directory and inherit the flags.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    done = subprocess.run(["make", "-n", "--no-print-directory", "clean-lake", "ALSO=decisions,ledger"], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1].endswith("peerify clean-lake --also-decisions --also-ledger")


def test_clean_lake_refuses_while_a_build_holds_the_lake(lake, capsys):
    with exclusive_lock(build_lock_path(lake, VENUE), "the build of X.cc/2026 (pid 1234)", on_wait=print):
        before = sorted(path.relative_to(lake) for path in lake.rglob("*"))
        code = cli.main(["clean-lake"])
    assert code == 2
    assert "not cleaned: the build of X.cc/2026 (pid 1234) is building in" in capsys.readouterr().err
    assert sorted(path.relative_to(lake) for path in lake.rglob("*")) == before

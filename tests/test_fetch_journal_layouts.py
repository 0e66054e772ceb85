"""benchmarks/fetch_journal_layouts.py: the held-out journal set written beside the checkout from a git mirror, each
file checked against the manifest's hash (a mismatch skips its paper by name, the others go on), a second run
keeping what is in place, nothing fetched and exit 0 when no source answers, and no destination inside the
repository. HTTPS is pointed at a closed loopback port: the tests reach no network."""

from __future__ import annotations

import hashlib
import json
import subprocess

import pytest

from tests.benchmark_scripts import load_benchmark

PDF, TEI = b"%PDF-1.4 a journal paper", b"<TEI>its structure</TEI>"


@pytest.fixture(scope="module")
def script():
    return load_benchmark("fetch_journal_layouts")


@pytest.fixture
def mirror(tmp_path, monkeypatch, script):
    """A bare git mirror of `parsers/fixtures` holding one PDF and its TEI; HTTPS closed."""
    monkeypatch.setattr(script, "RAW_URL", "http://127.0.0.1:9/{repo}/{commit}/{path}")
    work = tmp_path / "work"
    (work / "papers").mkdir(parents=True)
    (work / "papers" / "a.pdf").write_bytes(PDF)
    (work / "papers" / "a.tei.xml").write_bytes(TEI)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run([*git, "init", "-q", str(work)], check=True)
    subprocess.run([*git, "-C", str(work), "add", "."], check=True)
    subprocess.run([*git, "-C", str(work), "commit", "-q", "-m", "fixtures"], check=True)
    commit = subprocess.run(["git", "-C", str(work), "rev-parse", "HEAD"], capture_output=True, text=True,
                            check=True).stdout.strip()
    mirrors = tmp_path / "mirrors"
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(mirrors / "parsers+fixtures")], check=True)
    return mirrors, commit


def entry(paper_id: str, commit: str, half: str, pdf: bytes = PDF) -> dict:
    return {"id": paper_id, "publisher": "P", "journal": "J", "year": "2020", "license": "CC BY", "half": half,
            "repo": "parsers/fixtures", "commit": commit, "pdf": "papers/a.pdf",
            "pdf_sha256": hashlib.sha256(pdf).hexdigest(), "ground_truth": "papers/a.tei.xml",
            "ground_truth_sha256": hashlib.sha256(TEI).hexdigest(), "ground_truth_format": "grobid-tei"}


def run(script, tmp_path, papers: list, *extra: str) -> int:
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"note": "test", "papers": papers}))
    return script.main(["--manifest", str(manifest), "--dest", str(tmp_path / "dest"), *extra])


def test_papers_come_from_the_mirror_into_their_halves_and_a_bad_hash_skips_only_its_paper(script, mirror, tmp_path,
                                                                                           capsys):
    mirrors, commit = mirror
    papers = [entry("dev-paper", commit, "dev"), entry("measured-paper", commit, "measured"),
              entry("fresh-paper", commit, "fresh"), entry("tampered", commit, "dev", pdf=b"other bytes"),
              entry("unknown-half", commit, "test")]
    assert run(script, tmp_path, papers, "--git-mirrors", str(mirrors)) == 0
    out = capsys.readouterr().out
    assert (tmp_path / "dest" / "dev" / "dev-paper.pdf").read_bytes() == PDF
    assert (tmp_path / "dest" / "dev" / "dev-paper.tei.xml").read_bytes() == TEI
    assert (tmp_path / "dest" / "measured" / "measured-paper.pdf").is_file()
    assert (tmp_path / "dest" / "fresh" / "fresh-paper.pdf").is_file()
    assert not (tmp_path / "dest" / "dev" / "tampered.pdf").exists()
    assert "3 fetched" in out and "skipped tampered: hash mismatch" in out
    assert "skipped unknown-half: bad manifest entry: half 'test' is not one of dev, measured, fresh" in out
    assert f"has sha256 {hashlib.sha256(PDF).hexdigest()}" in out  # both hashes named
    assert run(script, tmp_path, papers[:3], "--git-mirrors", str(mirrors)) == 0
    assert "0 fetched, 3 already in place" in capsys.readouterr().out


def test_no_source_reachable_fetches_nothing_and_exits_cleanly(script, mirror, tmp_path, capsys):
    _, commit = mirror
    empty = tmp_path / "no-mirrors"
    empty.mkdir()
    assert run(script, tmp_path, [entry("dev-paper", commit, "dev")], "--git-mirrors", str(empty)) == 0
    assert "no source reachable" in capsys.readouterr().err
    assert not (tmp_path / "dest").exists()


def test_a_destination_inside_the_repository_is_refused(script, tmp_path, capsys):
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"papers": []}))
    assert script.main(["--manifest", str(manifest), "--dest", str(script.REPO_ROOT / "journal-layouts")]) == 2
    assert "inside the repository" in capsys.readouterr().err

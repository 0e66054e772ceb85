"""`peerify release diff`: domain/release_diff.py on releases written here by the release writer's own functions
(domain/label_release.release_files), the command through its module's parser and through `peerify` itself."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import polars as pl
import pytest

from peerify_dagster import cli
from peerify_dagster.cli.release import register_diff
from peerify_dagster.domain import label_release as rel
from peerify_dagster.domain.labels import LABELS, NOT_SUPPORTED, SUPPORTED
from peerify_dagster.domain.release_diff import html_report, markdown_report, release_diff
from peerify_dagster.domain.release_lineage import lineage_lines
from peerify_dagster.domain.slices import REBUTTAL_SOURCED, SLICE_SCHEMA, SLICES
from peerify_dagster.resources.llm_gateway import LEDGER_SCHEMA

VENUE = {"venue": "toy", "openreview_id": "Toy.cc/2026", "source": "snapshot", "seed": 1, "sample_size": None,
         "sampling": None, "labelling": None, "slices": None, "licence": "Apache-2.0",
         "licence_url": "https://www.apache.org/licenses/LICENSE-2.0", "source_description": "Written for a test.",
         "citation": None}


def _row(claim: str, label: str, calls: list[str], decisions: list[str]) -> dict:
    return {"venue": "toy", "slice": REBUTTAL_SOURCED, "claim_id": claim, "paper_id": "p1", "review_id": "r1",
            "claim_text": f"claim {claim}", "claim_type": "factual", "gold_label": label, "gold_source": "thread",
            "gold_provenance": "agreed", "gold_chunk_ids": [], "gold_call_ids": calls, "gold_decision_ids": decisions}


def write_release(folder: Path, version: str, rows: list[dict], lineage: dict | None = None) -> Path:
    """A release of `rows` written by label_release.release_files (no calls, no decisions behind them); `lineage`:
    the manifest's `upstream` and `environment`, when given."""
    frame = rel.slice_rows(pl.DataFrame(rows, schema=SLICE_SCHEMA))
    files, counts = {}, {}
    for name in SLICES:
        part = frame.filter(pl.col("slice") == name)
        for file_name, data in zip(rel.slice_files(name), (rel.slice_parquet(part), rel.slice_jsonl(part))):
            files[file_name], counts[file_name] = data, part.height
    files[rel.CALLS], counts[rel.CALLS] = rel.parquet_bytes(LEDGER_SCHEMA.empty_table()), 0
    files[rel.DECISIONS], counts[rel.DECISIONS] = b"", 0
    manifest = {"format": rel.FORMAT, "version": version, "created_at": "2026-01-01T00:00:00+00:00",
                "venues": [{**VENUE, "rows": {n: frame.filter(pl.col("slice") == n).height for n in SLICES}}],
                "seeds": {"toy": 1}, "models": {}, "prompts": {}, "arbitration": {}, "left_out": {},
                "slices": {n: {"rows": frame.filter(pl.col("slice") == n).height, "labels": labels}
                           for n, labels in rel.label_counts(frame).items()}, **(lineage or {})}
    folder.mkdir(parents=True)
    for name, data in rel.release_files(manifest, files, counts).items():
        (folder / name).write_bytes(data)
    return folder


@pytest.fixture
def two_releases(tmp_path) -> tuple[Path, Path]:
    old = write_release(tmp_path / "1.0.0", "1.0.0", [_row("c1", SUPPORTED, ["k1"], []),
                                                      _row("c2", NOT_SUPPORTED, ["k2"], []),
                                                      _row("c4", SUPPORTED, ["k4"], [])])
    new = write_release(tmp_path / "1.1.0", "1.1.0", [_row("c1", NOT_SUPPORTED, ["k1"], ["d1"]),
                                                      _row("c3", SUPPORTED, ["k3"], []),
                                                      _row("c4", SUPPORTED, ["k4"], ["d9"])])
    return old, new


def _slices(folder: Path) -> dict[str, pl.DataFrame]:
    contents, problems = rel.read_release(folder, LEDGER_SCHEMA)
    assert problems == []
    return contents.slices


def test_the_diff_names_additions_removals_and_label_changes_with_their_cause(two_releases):
    old, new = two_releases
    diff = release_diff("1.0.0", _slices(old), "1.1.0", _slices(new))
    [rebuttal] = [s for s in diff.slices if s.name == REBUTTAL_SOURCED]
    assert (rebuttal.old_rows, rebuttal.new_rows) == (3, 3)
    assert rebuttal.added == [("toy", "c3")] and rebuttal.removed == [("toy", "c2")]
    [change] = rebuttal.changed  # c4 gained a decision but kept its label: not a change
    assert (change.claim_id, change.old_label, change.new_label, change.decision_ids, change.call_ids) == (
        "c1", SUPPORTED, NOT_SUPPORTED, ("d1",), ())
    assert diff.changes == 3 and all(s.unchanged for s in diff.slices if s.name != REBUTTAL_SOURCED)
    markdown = markdown_report(diff)
    assert "# Release 1.0.0 -> 1.1.0: 3 change(s)" in markdown
    assert f"| {REBUTTAL_SOURCED} | 3 | 3 | 1 | 1 | 1 |" in markdown
    assert f"- c1 (toy): {SUPPORTED} -> {NOT_SUPPORTED}, by decision d1" in markdown
    assert "- c3 (toy)" in markdown and "- c2 (toy)" in markdown and "c4" not in markdown
    page = html_report(diff)
    assert page.startswith("<!doctype html>") and "by decision d1</li>" in page and "&gt;" in page


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="peerify release")
    register_diff(parser.add_subparsers(dest="release_command"))
    return parser


def run_diff(*argv: str) -> int:
    args = _parser().parse_args(["diff", *argv])
    return args.func(args)


def test_the_command_writes_markdown_to_stdout_and_html_to_a_file(two_releases, tmp_path, capsys):
    old, new = two_releases
    assert run_diff(str(old), str(new)) == 0
    assert f"{SUPPORTED} -> {NOT_SUPPORTED}, by decision d1" in capsys.readouterr().out
    out = tmp_path / "diff.html"
    assert run_diff(str(old), str(new), "--format", "html", "--out", str(out)) == 0
    assert "<h2>RebuttalSourced</h2>" in out.read_text()


def test_the_command_refuses_what_is_no_release_and_a_release_that_does_not_verify(two_releases, tmp_path, capsys):
    old, new = two_releases
    assert run_diff(str(old), str(tmp_path / "nowhere")) == 2
    assert "not a release folder" in capsys.readouterr().err
    with pytest.raises(SystemExit) as usage:
        run_diff(str(old))
    assert usage.value.code == 2
    (new / rel.slice_files(REBUTTAL_SOURCED)[1]).write_bytes(b"{}\n")
    assert run_diff(str(old), str(new)) == 1
    err = capsys.readouterr().err
    assert f"release {new} does not verify" in err and "RebuttalSourced.jsonl: content changed" in err


def test_peerify_release_diff(two_releases, capsys):
    """Through `peerify` itself (cli/release.py registers the command with `register_diff(actions)`)."""
    old, new = two_releases
    assert cli.main(["release", "diff", str(old), str(new)]) == 0
    assert f"c1 (toy): {SUPPORTED} -> {NOT_SUPPORTED}, by decision d1" in capsys.readouterr().out


def _lineage(slices_version: str, lock_sha: str) -> dict:
    return {"upstream": [
        {"asset": "benchmark_slices", "partition": "toy", "code_version": slices_version, "data_version": "d"},
        {"asset": "claim_labels", "partition": "toy", "code_version": "bbbb", "data_version": "d"}],
        "environment": {"python": "3.11.7", "locks": {"dev.txt": lock_sha, "base.txt": "9" * 64},
                        "installed_from": "dev.txt"}}


def test_diff_names_the_code_versions_and_dependencies_that_changed(tmp_path, capsys):
    rows = [_row("c1", SUPPORTED, ["k1"], [])]
    old = write_release(tmp_path / "1.0.0", "1.0.0", rows, _lineage("aaaa", "1" * 64))
    new = write_release(tmp_path / "1.1.0", "1.1.0", rows, _lineage("cccc", "2" * 64))
    assert cli.main(["release", "diff", str(old), str(new)]) == 0
    report = capsys.readouterr().out
    assert "# Release 1.0.0 -> 1.1.0: 0 change(s)" in report
    assert "- benchmark_slices: aaaa -> cccc" in report and "claim_labels:" not in report
    assert f"- installed from: dev.txt (sha256 {'1' * 16}) -> dev.txt (sha256 {'2' * 16})" in report

    same = write_release(tmp_path / "1.1.1", "1.1.1", rows, _lineage("cccc", "2" * 64))
    assert cli.main(["release", "diff", str(new), str(same)]) == 0
    report = capsys.readouterr().out
    assert "- none: every released table was computed by the same code" in report
    assert "## Dependencies changed\n\n- none" in report
    page = html_report(release_diff("1.0.0", _slices(old), "1.1.0", _slices(new), _read(old), _read(new)))
    assert "<li>benchmark_slices: aaaa -&gt; cccc</li>" in page


def _read(folder: Path) -> dict:
    return json.loads((folder / rel.MANIFEST).read_text())


def test_verify_lines_name_the_lock_and_each_code_version_or_say_none_was_recorded():
    lines = lineage_lines(_lineage("cccc", "2" * 64))
    assert lines[0] == f"installed from: dev.txt (sha256 {'2' * 16}), Python 3.11.7"
    assert lines[1:] == ["code versions:", "  benchmark_slices  cccc", "  claim_labels      bbbb"]
    assert lineage_lines({})[0] == "installed from: not recorded (a release made before environments were recorded)"
    unlocked = {"environment": {"python": "3.11.7", "locks": {}, "installed_from": None}}
    assert lineage_lines(unlocked)[0].startswith("installed from: none: the environment matched no lock file")


def test_a_synthetic_release_lists_and_hashes_its_metadata_files(two_releases):
    old, _ = two_releases
    manifest = json.loads((old / rel.MANIFEST).read_text())
    assert {rel.CARD, rel.CROISSANT, rel.DATASHEET} <= set(manifest["files"])
    assert manifest["files"][rel.CROISSANT]["sha256"] == rel.sha256_hex((old / rel.CROISSANT).read_bytes())
    assert set(LABELS) == set(manifest["slices"][REBUTTAL_SOURCED]["labels"])


def test_a_venues_licence_and_source_come_from_its_registry_entry(tmp_path):
    """The registry's optional licence fields: the sample states its own, an API venue defaults to OpenReview's,
    a malformed one is refused naming the venue."""
    from peerify_dagster.domain.venues import OPENREVIEW_LICENCE, RegistryError, load_registry
    from peerify_dagster.paths import REPO_ROOT

    registry = load_registry(REPO_ROOT / "venues.yaml")
    assert registry["sample"].terms["licence"] == "Apache-2.0"
    assert "OpenReview" not in registry["sample"].terms["source_description"].replace("no OpenReview text", "")
    crawled = registry["ICLR.cc/2024/Conference"].terms
    assert crawled["licence"] == OPENREVIEW_LICENCE and "read from OpenReview" in crawled["source_description"]
    bad = tmp_path / "venues.yaml"
    bad.write_text("venues:\n  X:\n    seed: 1\n    licence: 4\n")
    with pytest.raises(RegistryError, match="venue 'X': licence must be a string"):
        load_registry(bad)

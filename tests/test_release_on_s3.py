"""Releases and reports in an S3 lake (SeaweedFS on loopback, tests/conftest.py `s3_service`): the session's built
sample copied into a bucket prefix and released there by `peerify release`; `peerify release verify` by the release's
s3:// location and by its version, a tampered object named (exit 1), a prefix without a manifest refused (exit 2);
`peerify rebuild-from-release` reproducing every label from the bucket; `peerify import-release` of a published
release from an s3:// source into an S3 lake; and `peerify report` on the S3 lake naming its objects by URL."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from peerify_dagster import cli
from peerify_dagster.domain import label_release as rel
from peerify_dagster.domain.release_import import IMPORTED_TABLES
from peerify_dagster.domain.slices import SLICES
from peerify_dagster.domain.venues import load_registry
from peerify_dagster.resources.lake import CATALOG_FILE, Lake
from peerify_dagster.resources.report_files import viewable_report
from tests.cli_support import cli_env, fresh_home, peerify
from tests.support import SAMPLE_RECORDING, sample_registry
from tests.test_release_import import write_release

BUCKET = "releases-on-s3"
VERSION = "1.0.0"
RELEASE_FILES = sorted([name for s in SLICES for name in rel.slice_files(s)]
                       + [rel.CALLS, rel.DECISIONS, rel.DATASHEET, rel.CARD, rel.CROISSANT, rel.MANIFEST])


def object_keys(fs, location: str) -> list[str]:
    """The objects under an s3:// location, relative to it (not SeaweedFS's marker of the prefix itself)."""
    prefix = location.removeprefix("s3://")
    return sorted(key[len(prefix) + 1:] for key in fs.find(prefix) if key != prefix)


def upload_folder(fs, folder: Path, location: str) -> None:
    """Every file of a local lake or release folder as an object under `location`, but the machine's own files (the
    DuckDB catalog and the lock files, which an S3 lake keeps in each machine's cache folder)."""
    for path in sorted(folder.rglob("*")):
        key = path.relative_to(folder).as_posix()
        if path.is_file() and not path.name.startswith(".") and not key.startswith(CATALOG_FILE):
            fs.put_file(str(path), f"{location.removeprefix('s3://')}/{key}")


@pytest.fixture(scope="module")
def s3_sample(sample_lake, s3_service, tmp_path_factory) -> dict:
    """The built sample copied into a prefix of the bucket, a copy of its Dagster home beside it (its runs hold the
    gate results the release checks), and released there as 1.0.0 by `peerify release`."""
    tmp = tmp_path_factory.mktemp("release_on_s3")
    lake, fs = f"{s3_service.make_bucket(BUCKET)}/lake", s3_service.filesystem()
    upload_folder(fs, sample_lake, lake)
    home = Path(shutil.copytree(sample_lake.parent / "home", tmp / "home"))
    registry = sample_registry(tmp, llm_recording=str(SAMPLE_RECORDING))
    variables = {**s3_service.env(), "PEERIFY_LAKE": lake, "PEERIFY_LAKE_CACHE": str(tmp / "cache")}
    env = cli_env(Path(lake), registry, home, **variables)
    released = peerify("release", "--venue", "sample", "--version", VERSION, env=env, timeout=600)
    assert released.returncode == 0, released.stderr[-3000:]
    release = f"{lake}/releases/{VERSION}"
    assert f"release {VERSION} written to {release}" in released.stdout
    return {"lake": lake, "release": release, "fs": fs, "env": env, "tmp": tmp,
            "variables": {**variables, "PEERIFY_VENUES": str(registry), "DAGSTER_HOME": str(home)}}


@pytest.fixture
def in_s3_lake(s3_sample, monkeypatch, tmp_path) -> dict:
    """This process pointed at the S3 lake (for `cli.main`), in a working folder without a folder named 1.0.0."""
    for name, value in s3_sample["variables"].items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)
    return s3_sample


def copy_release(s3_sample: dict, version: str) -> str:
    """A copy of the release under another version of the lake, to tamper with."""
    fs, copy = s3_sample["fs"], f"{s3_sample['lake']}/releases/{version}"
    for name in object_keys(fs, s3_sample["release"]):
        fs.copy(f"{s3_sample['release'].removeprefix('s3://')}/{name}", f"{copy.removeprefix('s3://')}/{name}")
    return copy


# -- verify ------------------------------------------------------------------------------------------------------------
def test_a_release_in_s3_verifies_by_its_location_and_by_its_version(in_s3_lake, capsys):
    fs, release = in_s3_lake["fs"], in_s3_lake["release"]
    assert object_keys(fs, release) == RELEASE_FILES  # written into the bucket, every file an object
    manifest_sha256 = rel.sha256_hex(fs.cat_file(f"{release.removeprefix('s3://')}/{rel.MANIFEST}"))
    for named in (release, VERSION, f"{release}/"):
        assert cli.main(["release", "verify", named, "--manifest-sha256", manifest_sha256]) == 0, named
        captured = capsys.readouterr()
        assert captured.err == "" and captured.out.startswith(f"release {VERSION} verified: {len(RELEASE_FILES)} "
                                                              "files"), captured
    assert cli.main(["release", "verify", VERSION, "--manifest-sha256", "0" * 64]) == 1
    assert f"MISMATCH in release {release}: {rel.MANIFEST}: sha256 {manifest_sha256} is not the published" \
        in capsys.readouterr().err


def test_a_tampered_object_is_named_and_a_prefix_without_a_manifest_is_no_release(in_s3_lake, capsys):
    fs, lake = in_s3_lake["fs"], in_s3_lake["lake"]
    tampered = copy_release(in_s3_lake, "1.0.1")
    jsonl = rel.slice_files(SLICES[0])[1]
    key = f"{tampered.removeprefix('s3://')}/{jsonl}"
    fs.pipe_file(key, fs.cat_file(key) + b"\n")
    assert cli.main(["release", "verify", tampered]) == 1
    assert capsys.readouterr().err.startswith(f"MISMATCH in release {tampered}: {jsonl}: content changed")
    assert cli.main(["rebuild-from-release", "1.0.1"]) == 1
    assert capsys.readouterr().err.startswith(f"cannot rebuild {tampered}: the release does not verify: {jsonl}: "
                                              "content changed")

    fs.rm_file(f"{tampered.removeprefix('s3://')}/{rel.MANIFEST}")
    for command in (["release", "verify"], ["rebuild-from-release"]):
        assert cli.main([*command, tampered]) == 2
        assert capsys.readouterr().err == f"{tampered}: not a release folder (no {rel.MANIFEST})\n"
    assert cli.main(["release", "verify", "7.7.7"]) == 2
    assert capsys.readouterr().err == f"{lake}/releases/7.7.7: not a release folder (no such folder)\n"


# -- rebuild -----------------------------------------------------------------------------------------------------------
def test_rebuild_from_a_release_in_s3_reproduces_every_slice_file(in_s3_lake, tmp_path, capsys):
    fs, release = in_s3_lake["fs"], in_s3_lake["release"]
    out = tmp_path / "rebuilt"
    assert cli.main(["rebuild-from-release", release, "--out", str(out)]) == 0, capsys.readouterr().err
    assert f"{2 * len(SLICES)} of {2 * len(SLICES)} slice files byte-identical" in capsys.readouterr().out
    rebuilt = sorted(path.name for path in out.iterdir())
    assert rebuilt == sorted(name for s in SLICES for name in rel.slice_files(s))
    assert all((out / name).read_bytes() == fs.cat_file(f"{release.removeprefix('s3://')}/{name}")
               for name in rebuilt)


# -- import-release ----------------------------------------------------------------------------------------------------
def test_a_published_release_imports_from_s3_into_an_s3_lake_as_from_a_folder(s3_service, monkeypatch, tmp_path,
                                                                               capsys):
    fs, bucket = s3_service.filesystem(), s3_service.make_bucket(BUCKET)
    published = write_release(tmp_path / "tiny")
    source = f"{bucket}/published/tiny"
    upload_folder(fs, published, source)
    registry = tmp_path / "venues.yaml"
    registry.write_text("venues:\n")
    for name, value in {**s3_service.env(), "PEERIFY_LAKE": f"{bucket}/imported", "DAGSTER_HOME":
                        str(fresh_home(tmp_path / "home")), "PEERIFY_VENUES": str(registry),
                        "PEERIFY_LAKE_CACHE": str(tmp_path / "cache")}.items():
        monkeypatch.setenv(name, value)

    assert cli.main(["import-release", source]) == 0, capsys.readouterr().err
    assert "imported release-tiny" in capsys.readouterr().out
    assert load_registry(registry)["release-tiny"].release == source
    assert [key for key in object_keys(fs, f"{bucket}/imported") if key.endswith(".parquet")] == sorted(
        f"{table}/release-tiny.parquet" for table in IMPORTED_TABLES)
    # The same tables as the same release imported from its folder into a folder lake (with a registry of its own).
    (tmp_path / "folder.yaml").write_text("venues:\n")
    monkeypatch.setenv("PEERIFY_LAKE", str(tmp_path / "lake"))
    monkeypatch.setenv("PEERIFY_VENUES", str(tmp_path / "folder.yaml"))
    assert cli.main(["import-release", str(published)]) == 0, capsys.readouterr().err
    in_s3, in_folder = Lake(f"{bucket}/imported"), Lake(tmp_path / "lake")
    for table in IMPORTED_TABLES:
        assert in_s3.read_table(table, "release-tiny").equals(in_folder.read_table(table, "release-tiny")), table

    capsys.readouterr()
    assert cli.main(["import-release", f"{bucket}/published/nowhere"]) == 2
    assert capsys.readouterr().err == f"not imported: release folder {bucket}/published/nowhere does not exist\n"


# -- report ------------------------------------------------------------------------------------------------------------
def test_peerify_report_on_an_s3_lake_writes_and_names_its_objects(in_s3_lake):
    fs, lake = in_s3_lake["fs"], in_s3_lake["lake"]
    reports = f"{lake}/reports/sample"
    fs.rm(reports.removeprefix("s3://"), recursive=True)  # the copied build's report: this run must write its own
    assert object_keys(fs, reports) == []
    done = peerify("report", "--venue", "sample", env=in_s3_lake["env"], timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[-2:] == [f"report: {reports}/report.html",
                                             f"markdown: {reports}/report.md (figures beside it)"]
    written = object_keys(fs, reports)
    assert {"report.html", "report.md"} < set(written) and any(name.endswith(".png") for name in written)
    page = fs.cat_file(f"{reports.removeprefix('s3://')}/report.html")
    assert b"data:image/png;base64," in page
    # What `--open` opens: a local copy of the page, read through the store, in this machine's cache folder.
    local = viewable_report(Lake(lake), "sample")
    assert local.is_relative_to((in_s3_lake["tmp"] / "cache").resolve()) and local.read_bytes() == page

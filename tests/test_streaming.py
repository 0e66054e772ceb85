"""Whole venues in bounded memory: raw notes and the forum tables are streamed to the lake a batch of forums at a time
(one Parquet row group per batch), give the same tables as building the venue in one go, and a build that dies or
fails mid-stream leaves the previous partition files as they were."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import polars as pl
import pyarrow.parquet as pq
import pytest

from peerify_dagster.assets import forum_tables as forum_tables_stage
from peerify_dagster.assets.forum_tables import TABLE_SCHEMAS
from peerify_dagster.definitions import build_resources
from peerify_dagster.domain.forum_tables import build_tables, forum_batches
from peerify_dagster.partitions import venue_partitions
from peerify_dagster.paths import REPO_ROOT
from peerify_dagster.resources.dagster_resources import VenueRegistryResource
from peerify_dagster.resources.files import remove_stale_temporaries
from peerify_dagster.resources.lake import Lake
from peerify_dagster.resources.openreview import SnapshotReader
from tests.fakes.synthetic_venue import synthetic_venue
from tests.support import ALL_ASSETS, write_registry

INGESTION = dg.AssetSelection.groups("ingestion", "forum_tables")
STREAMED_STEPS = ("raw_openreview_notes", "forum_tables")
KEY = "synthetic"


def build(registry: Path, lake_root: Path, forums_per_batch: int, selection: dg.AssetSelection = INGESTION,
          steps: tuple[str, ...] = STREAMED_STEPS) -> dg.ExecuteInProcessResult:
    """Materialise `selection` of the synthetic venue, the streamed `steps` among it `forums_per_batch` at a time."""
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(venue_partitions.name, [KEY])
    resources = build_resources(str(lake_root), venue_registry=VenueRegistryResource(path=str(registry)))
    config = {"ops": {step: {"config": {"forums_per_batch": forums_per_batch}} for step in steps}}
    return dg.materialize(ALL_ASSETS, selection=selection, instance=instance, partition_key=KEY, resources=resources,
                          raise_on_error=False, run_config=config)


def venue(folder: Path, forums: int) -> tuple[Path, Path]:
    snapshot = folder / "snapshot"
    synthetic_venue(snapshot, forums)
    return snapshot, write_registry(folder, KEY, source="snapshot", snapshot=str(snapshot), seed=1)


def digests(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*.parquet"))}


def temporaries(folder: Path) -> list[Path]:
    return sorted(folder.rglob(".*.tmp"))


@pytest.fixture(scope="module")
def streamed(tmp_path_factory):
    """A 12-forum synthetic venue built 5 forums at a time."""
    tmp = tmp_path_factory.mktemp("streamed")
    snapshot, registry = venue(tmp, 12)
    result = build(registry, tmp / "lake", forums_per_batch=5)
    assert result.success
    return snapshot, Lake(tmp / "lake"), result


def test_raw_notes_are_written_one_row_group_per_batch_of_whole_forums(streamed):
    snapshot, lake, _ = streamed
    raw = pq.ParquetFile(lake.table_path("raw_openreview_notes", KEY))
    groups = [raw.read_row_group(i, columns=["forum_id"])["forum_id"].to_pylist() for i in range(raw.num_row_groups)]
    assert [len(set(g)) for g in groups] == [5, 5, 2]
    forums_in_order = [f for g in groups for f in dict.fromkeys(g)]
    assert forums_in_order == sorted(p.stem for p in (snapshot / "forums").glob("*.json"))  # each forum in one group
    assert sum(map(len, groups)) == sum(len(json.loads(p.read_text())["notes"])
                                        for p in (snapshot / "forums").glob("*.json"))


def test_streamed_forum_tables_equal_the_venue_built_in_one_go(streamed):
    snapshot, lake, result = streamed
    reader = SnapshotReader(snapshot)
    whole = build_tables(KEY, [reader.forum(p.stem) for p in (snapshot / "forums").glob("*.json")], 2)
    for table, schema in TABLE_SCHEMAS.items():
        expected = pl.DataFrame(whole.rows[table], schema=schema)
        assert lake.read_table(table, KEY).equals(expected), table
    reviews = pq.ParquetFile(lake.table_path("reviews", KEY))
    assert reviews.num_row_groups == 3 and reviews.metadata.num_rows == len(whole.rows["reviews"])
    checks = {(c.asset_key.to_user_string(), c.check_name): c for c in result.get_asset_check_evaluations()}
    assert all(c.passed for c in checks.values())
    accounted = checks[("note_errors", "every_note_accounted_for")]
    assert accounted.metadata["notes_received"].value == pq.ParquetFile(
        lake.table_path("raw_openreview_notes", KEY)).metadata.num_rows


def test_a_forum_split_across_read_slices_is_regrouped_whole():
    rows = pl.DataFrame({"forum_id": ["A", "A", "B", "B", "B", "C", "D", "D"], "note_id": list("12345678")})
    slices = [rows[0:3], rows[3:4], rows[4:7], rows[7:8]]  # B and D each run across two slices
    batches = list(forum_batches(iter(slices), forums_per_batch=2))
    assert [b["forum_id"].unique(maintain_order=True).to_list() for b in batches] == [["A", "B"], ["C", "D"]]
    assert pl.concat(batches).equals(rows)


def test_a_failure_mid_stream_leaves_every_previous_table_file_intact(streamed, tmp_path, monkeypatch):
    snapshot, built_lake, _ = streamed
    lake_root = tmp_path / "lake"
    registry = write_registry(tmp_path, KEY, source="snapshot", snapshot=str(snapshot), seed=1)
    assert build(registry, lake_root, forums_per_batch=5).success
    before = digests(lake_root)
    real_build_tables, calls = forum_tables_stage.build_tables, []

    def failing_on_the_second_batch(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("the machine ran out of something")
        return real_build_tables(*args, **kwargs)

    monkeypatch.setattr(forum_tables_stage, "build_tables", failing_on_the_second_batch)
    result = build(registry, lake_root, forums_per_batch=5, selection=dg.AssetSelection.groups("forum_tables"),
                   steps=("forum_tables",))
    assert not result.success and len(calls) == 2  # the first batch had been written when the step failed
    assert digests(lake_root) == before
    assert temporaries(lake_root) == []


RAW_NOTES = dg.AssetSelection.assets("raw_openreview_notes").required_multi_asset_neighbors()
KILLED_BUILD = """
import sys
from pathlib import Path
from tests.test_streaming import RAW_NOTES, build
build(Path(sys.argv[1]), Path(sys.argv[2]), forums_per_batch=5, selection=RAW_NOTES, steps=("raw_openreview_notes",))
"""


def test_a_build_killed_mid_stream_leaves_the_previous_partition_file_visible(tmp_path):
    snapshot, registry = venue(tmp_path, 1500)
    lake = Lake(tmp_path / "lake")
    assert build(registry, lake.root, forums_per_batch=500, selection=RAW_NOTES | dg.AssetSelection.assets(
        "paper_sample"), steps=("raw_openreview_notes",)).success
    path = lake.table_path("raw_openreview_notes", KEY)
    before, rows = digests(lake.root), lake.read_table("raw_openreview_notes", KEY).height
    lake.refresh_catalog()

    child = subprocess.Popen([sys.executable, "-c", KILLED_BUILD, str(registry), str(lake.root)], cwd=REPO_ROOT,
                             env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, stderr=subprocess.PIPE)
    temporary = path.with_name(f".{path.name}.{child.pid}.tmp")
    deadline = time.monotonic() + 120
    while not (temporary.exists() and temporary.stat().st_size > 0):  # a first batch is on disk
        assert child.poll() is None, child.stderr.read().decode()[-2000:]
        assert time.monotonic() < deadline
        time.sleep(0.01)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()

    assert temporary.exists()  # the kill landed mid-stream: the new file was being written ...
    assert digests(lake.root) == before  # ... and the partition file readers see is the previous one
    assert lake.read_table("raw_openreview_notes", KEY).height == rows
    assert lake.query("select count(*) from raw_openreview_notes")[1] == [(rows,)]
    assert remove_stale_temporaries(lake.root) == [temporary] and temporaries(lake.root) == []

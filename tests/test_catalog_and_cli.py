"""The catalog never blocks work: unreadable files are named and left out, a process holding the catalog stops
neither a build nor a query, `peerify sql` only reads, and a truncated partition is named and rebuilt."""

from __future__ import annotations

import hashlib
from pathlib import Path

import dagster as dg
import polars as pl
import pytest
from dagster._core.events import DagsterEventType

from peerify_dagster.cli.build import venue_summary
from peerify_dagster.definitions import build_resources
from peerify_dagster.resources.dagster_resources import LakeResource, VenueRegistryResource
from peerify_dagster.resources.lake import Lake
from peerify_dagster.sensors import catalog_refresh_sensor
from tests.cli_support import cli_env, hold_catalog, peerify
from tests.support import ALL_ASSETS, materialise, sample_registry

INGESTION = dg.AssetSelection.groups("ingestion", "forum_tables")


def truncate(path: Path) -> None:
    """What a crash or a full disk outside the lake's atomic writes leaves: the first half of a real Parquet file."""
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def small_lake(root: Path) -> Lake:
    lake = Lake(root)
    lake.write_table("reviews", "sample", pl.DataFrame({"venue": ["sample", "sample"], "review_id": ["r1", "r2"]}))
    lake.write_table("reviews", "Other.cc/2026", pl.DataFrame({"venue": ["Other.cc/2026"], "review_id": ["r3"]}))
    lake.write_table("chunks", "sample", pl.DataFrame({"venue": ["sample"], "chunk_id": ["c1"]}))
    return lake


def files_of(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and not p.name.startswith("peerify.duckdb")}


@pytest.fixture(scope="module")
def sql_lake(tmp_path_factory) -> tuple[Lake, dict[str, str]]:
    tmp = tmp_path_factory.mktemp("sql")
    lake = small_lake(tmp / "lake")
    return lake, cli_env(lake.root, tmp / "venues.yaml", None)


WRITES = [
    "copy (select 1 as x) to '{lake}/reviews/sample.parquet'",  # the example: it replaced the partition
    "copy reviews to '{lake}/reviews/copy.parquet'",
    "explain analyze copy (select 1 as x) to '{lake}/reviews/explained.parquet'",
    "select 1; copy (select 1 as x) to '{lake}/reviews/second.parquet'",
    "attach '{lake}/other.duckdb' as other",
    "install httpfs",
    "load httpfs",
    "create table t as select 1 as x",
    "create view v as select 1 as x",
    "insert into reviews values ('x', 'y')",
    "update reviews set venue = 'x'",
    "delete from reviews",
    "drop view reviews",
    "export database '{lake}/exported'",
    "import database '{lake}/exported'",
    "set enable_external_access = true",
    "pragma enable_profiling",
    "checkpoint",
]


@pytest.mark.parametrize("statement", WRITES)
def test_sql_refuses_every_write_form(sql_lake, statement):
    lake, env = sql_lake
    before = files_of(lake.root)
    result = peerify("sql", statement.format(lake=lake.root.as_posix()), env=env)
    assert result.returncode == 2, result.stderr
    assert "refused" in result.stderr and "only reads" in result.stderr
    assert files_of(lake.root) == before  # nothing written, the reviews partition untouched


@pytest.mark.parametrize("statement", [
    "select count(*) as n from reviews", "with r as (select * from reviews) select count(*) as n from r",
    "show tables", "describe reviews", "summarize reviews", "explain select * from reviews",
    "pragma table_info('reviews')", "select count(*) as n from read_parquet('{lake}/reviews/*.parquet')",
])
def test_sql_runs_read_statements(sql_lake, statement):
    lake, env = sql_lake
    result = peerify("sql", statement.format(lake=lake.root.as_posix()), env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()


def test_sql_cannot_read_files_outside_the_lake(sql_lake, tmp_path):
    lake, env = sql_lake
    outside = tmp_path / "secret.csv"
    outside.write_text("token\nabc123\n")
    result = peerify("sql", f"select * from read_csv('{outside}')", env=env)
    assert result.returncode == 1 and "abc123" not in result.stdout
    assert "disabled by configuration" in result.stderr


def test_unreadable_file_is_named_and_left_out_of_its_view(tmp_path):
    lake = small_lake(tmp_path / "lake")
    other = lake.table_path("reviews", "Other.cc/2026")
    truncate(other)
    truncate(lake.table_path("chunks", "sample"))
    env = cli_env(lake.root, tmp_path / "venues.yaml", None)

    result = peerify("sql", "select review_id from reviews order by 1", env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[2:] == ["r1", "r2"]  # the other venues' rows still answer
    named = [line for line in result.stderr.splitlines() if str(other) in line]
    assert named and "peerify build Other.cc/2026" in named[0] and "magic bytes" in named[0]
    assert "view chunks: not defined (every file is unreadable)" in result.stderr

    lake.write_table("reviews", "Other.cc/2026", pl.DataFrame({"venue": ["Other.cc/2026"], "review_id": ["r3"]}))
    repaired = peerify("sql", "select review_id from reviews order by 1", env=env)
    assert repaired.stdout.split()[2:] == ["r1", "r2", "r3"]
    assert str(other) not in repaired.stderr


def test_a_reader_never_blocks_sql_and_a_writer_is_waited_for(tmp_path):
    lake = small_lake(tmp_path / "lake")
    lake.refresh_catalog()
    env = cli_env(lake.root, tmp_path / "venues.yaml", None)
    query = "select count(*) as n from reviews"

    reader = hold_catalog(lake.catalog_path, read_only=True)
    try:
        result = peerify("sql", query, env=env)
        assert result.returncode == 0 and result.stdout.split()[-1] == "3", result.stderr
    finally:
        reader.kill()
        reader.wait()

    brief_writer = hold_catalog(lake.catalog_path, read_only=False, seconds=2)
    result = peerify("sql", query, env=env)
    brief_writer.wait()
    assert result.returncode == 0 and result.stdout.split()[-1] == "3", result.stderr

    writer = hold_catalog(lake.catalog_path, read_only=False)
    try:
        result = peerify("sql", query, env=env)
    finally:
        writer.kill()
        writer.wait()
    assert result.returncode == 1
    assert f"PID {writer.pid}" in result.stderr and "read_only=True" in result.stderr
    assert 4 < result.seconds < 15  # it waited a few seconds for the writer before giving up


def test_summary_reads_the_files_not_the_locked_catalog(tmp_path):
    lake = small_lake(tmp_path / "lake")
    lake.refresh_catalog()
    truncate(lake.table_path("chunks", "sample"))
    writer = hold_catalog(lake.catalog_path, read_only=False)
    try:
        columns, rows = venue_summary(lake, "sample")
    finally:
        writer.kill()
        writer.wait()
    counts = dict(rows)
    assert counts["reviews"] == 2
    assert counts["chunks"].startswith("unreadable: sample.parquet")


def test_truncated_partition_is_named_then_rebuilt_while_the_catalog_is_held(tmp_path):
    registry = sample_registry(tmp_path)
    root = tmp_path / "lake"
    instance = dg.DagsterInstance.ephemeral()
    assert materialise("sample", registry, root, instance, INGESTION).success
    lake = Lake(root)
    assert not lake.catalog_path.exists()  # asset steps never touch the catalog
    raw = lake.table_path("raw_openreview_notes", "sample")
    notes = lake.read_table("raw_openreview_notes", "sample")
    truncate(raw)

    resources = build_resources(str(root), venue_registry=VenueRegistryResource(path=str(registry)))
    downstream_only = dg.materialize(ALL_ASSETS, selection=dg.AssetSelection.groups("forum_tables"), instance=instance,
                                     partition_key="sample", resources=resources, raise_on_error=False)
    assert not downstream_only.success
    failure = next(e for e in downstream_only.all_events if e.is_step_failure)
    message = str(failure.event_specific_data.error.message)
    assert str(raw) in message and "raw_openreview_notes" in message and "'sample'" in message
    assert "`peerify build sample` rebuilds it" in message

    # Another table's file is corrupt and a process holds the catalog for writing: neither stops the rebuild.
    lake.refresh_catalog()
    truncate(lake.table_path("submissions", "sample"))
    holder = hold_catalog(lake.catalog_path, read_only=False)
    try:
        rebuilt = materialise("sample", registry, root, instance, dg.AssetSelection.groups("ingestion"))
    finally:
        holder.kill()
        holder.wait()
    assert rebuilt.success
    assert lake.read_table("raw_openreview_notes", "sample").height == notes.height

    # After a run in `make dev`, the sensor refreshes the catalog and names what it left out.
    run = instance.get_run_by_id(rebuilt.run_id)
    success = instance.all_logs(run.run_id, of_type=DagsterEventType.RUN_SUCCESS)[0].dagster_event
    context = dg.build_run_status_sensor_context(
        sensor_name=catalog_refresh_sensor.name, dagster_instance=instance, dagster_run=run, dagster_event=success,
        resources={"lake": LakeResource(root=str(root))},
    )
    catalog_refresh_sensor(context)
    _, rows = lake.query("select count(*) from raw_openreview_notes", refresh=False)
    assert rows == [(notes.height,)]
    _, views = lake.query("select table_name from information_schema.tables", refresh=False)
    assert ("submissions",) not in views and ("reviews",) in views

"""README promises about crawls, each driven end to end against the loopback OpenReview server with the real client:
`--refetch` (the run config `peerify build --refetch` sends) re-fetches stored forums, the weekly refresh schedule's
run requests do the same when run, a live crawl's landing folder replays as a `source: snapshot` venue into the
same tables, and PEERIFY_LAKE moves the lake of a run that names no lake."""

from __future__ import annotations

import datetime
import json
import shutil
from pathlib import Path

import dagster as dg
import polars as pl
import pytest
from dagster._core.storage.defs_state.base import set_defs_state_storage

from peerify_dagster.definitions import build_resources
from peerify_dagster.jobs import REFRESH_RUN_CONFIG
from peerify_dagster.partitions import venue_partitions
from peerify_dagster.resources.dagster_resources import LakeResource, OpenReviewResource, VenueRegistryResource
from peerify_dagster.resources.lake import Lake
from peerify_dagster.sensors import venue_refresh_schedule
from tests.fakes.openreview_server import FakeOpenReviewServer
from tests.support import ALL_ASSETS, SAMPLE, materialise, write_registry

INGESTION = dg.AssetSelection.groups("ingestion", "forum_tables")
KEY = "PeerifySample.cc/2026/Workshop"
FAST = OpenReviewResource(timeout_s=5.0, retries=1, backoff_s=0.01)
FORUM_TABLES = ("submissions", "reviews", "author_responses", "reviewer_followups", "chair_comments",
                "public_comments", "decisions", "meta_reviews", "status_notes", "review_threads", "note_errors")


def live_registry(folder: Path, url: str) -> Path:
    return write_registry(folder, KEY, source="api", seed=20260110, api_url=url)


def forum_fetches(server: FakeOpenReviewServer, since: int = 0) -> set[str]:
    return {r.params["forum"] for r in server.requests[since:] if r.path == "/notes" and "forum" in r.params}


def edit_first_review(served: Path) -> tuple[str, str]:
    """Edits a review on the server side (newer tmdate): what a reviewer does after the first crawl."""
    forum_file = sorted((served / "forums").glob("*.json"))[0]
    record = json.loads(forum_file.read_text())
    review = next(n for n in record["notes"] if n["invitations"][0].endswith("/-/Official_Review"))
    review["content"]["summary"] = {"value": "Edited after the first crawl."}
    review["tmdate"] = review["mdate"] = review["tmdate"] + 1
    forum_file.write_text(json.dumps(record))
    return review["id"], "Edited after the first crawl."


@pytest.fixture
def crawled(tmp_path):
    """The sample served live and crawled once into a lake; then a review is edited on the server."""
    served = tmp_path / "served"
    shutil.copytree(SAMPLE, served)
    lake_root, instance = tmp_path / "lake", dg.DagsterInstance.ephemeral()
    with FakeOpenReviewServer(served) as server:
        assert materialise(KEY, live_registry(tmp_path, server.url), lake_root, instance, INGESTION, FAST).success
    return served, lake_root, instance, edit_first_review(served)


def summary_of(lake_root: Path, review_id: str) -> str:
    reviews = Lake(lake_root).read_table("reviews", KEY)
    return reviews.filter(pl.col("review_id") == review_id)["summary"].item()


def test_refetch_fetches_stored_forums_again(crawled, tmp_path):
    served, lake_root, instance, (review_id, edited) = crawled
    forums = {p.stem for p in (served / "forums").glob("*.json")}
    with FakeOpenReviewServer(served) as server:
        registry = live_registry(tmp_path, server.url)
        assert materialise(KEY, registry, lake_root, instance, INGESTION, FAST).success
        assert forum_fetches(server) == set()  # a plain build resumes: nothing stored is fetched again
        assert summary_of(lake_root, review_id) != edited
        before = len(server.requests)
        assert materialise(KEY, registry, lake_root, instance, INGESTION, FAST, refetch=True).success
        assert forum_fetches(server, before) == forums
    assert summary_of(lake_root, review_id) == edited


def test_weekly_refresh_run_requests_refetch_when_run(crawled, tmp_path):
    served, lake_root, _, (review_id, edited) = crawled
    forums = {p.stem for p in (served / "forums").glob("*.json")}
    # As in test_registry_and_cli: evaluating a schedule leaves a process-wide state storage behind otherwise.
    with FakeOpenReviewServer(served) as server, dg.instance_for_test() as instance, set_defs_state_storage(None):
        registry = VenueRegistryResource(path=str(live_registry(tmp_path, server.url)))
        instance.add_dynamic_partitions(venue_partitions.name, [KEY])
        context = dg.build_schedule_context(instance=instance, resources={"venue_registry": registry,
                                                                          "lake": LakeResource(root=str(lake_root))},
                                            scheduled_execution_time=datetime.datetime(2026, 11, 30, 3))
        [request] = venue_refresh_schedule(context)
        assert request.run_config == REFRESH_RUN_CONFIG
        result = dg.materialize(ALL_ASSETS, selection=INGESTION, instance=instance,
                                partition_key=request.partition_key, run_config=request.run_config,
                                resources=build_resources(str(lake_root), venue_registry=registry, openreview=FAST))
        assert result.success
        assert forum_fetches(server) == forums
    assert summary_of(lake_root, review_id) == edited


def test_landing_folder_replays_as_a_snapshot_venue_in_a_lake_moved_by_peerify_lake(crawled, tmp_path, monkeypatch):
    _, live_lake, _, _ = crawled
    landing = live_lake / "snapshots" / KEY.replace("/", "__")
    (tmp_path / "replay").mkdir()
    registry = write_registry(tmp_path / "replay", KEY, source="snapshot", snapshot=str(landing), seed=20260110)
    moved = tmp_path / "moved-lake"
    monkeypatch.setenv("PEERIFY_LAKE", str(moved))
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(venue_partitions.name, [KEY])
    # No lake given: the resources find it through PEERIFY_LAKE when the run opens it.
    resources = build_resources(venue_registry=VenueRegistryResource(path=str(registry)))
    result = dg.materialize(ALL_ASSETS, selection=INGESTION, instance=instance, partition_key=KEY,
                            resources=resources, raise_on_error=False)
    assert result.success
    live, replayed = Lake(live_lake), Lake(moved)
    assert replayed.read_table("submissions", KEY).height > 0
    for table in FORUM_TABLES:
        assert replayed.read_table(table, KEY).equals(live.read_table(table, KEY)), table
    crawl_log = replayed.read_table("forum_crawl_log", KEY)
    assert set(crawl_log["status"]) == {"stored"}  # replayed from the folder, nothing fetched

"""OpenReview API v1 venues (before 2023): the real `openreview.Client` against the loopback server serving v1
notes, live crawls and snapshot replays into the same tables, API version detection, and the loud failure of a
v1 venue read as v2. The real ICLR 2020 forum (`../shared/real-data/openreview-v1`) is used where present."""

from __future__ import annotations

import json
import os
from pathlib import Path

import dagster as dg
import openreview
import polars as pl
import pytest

from peerify_dagster.domain.venues import DEFAULT_API_URL, RegistryError, load_registry
from peerify_dagster.resources.dagster_resources import OpenReviewResource
from peerify_dagster.resources.lake import Lake
from peerify_dagster.resources.openreview import (
    DEFAULT_API_V1_URL,
    HttpPolicy,
    SnapshotReader,
    api_url_for,
    make_client,
    probe_api_version,
    resolve_api_version,
)
from tests.fakes.openreview_server import FakeOpenReviewServer
from tests.notes_factory import V1_VENUE, v1_forum
from tests.real_data import ICLR_2020, V1_DIR, needs, v1_replies, v1_submission, write_snapshot, write_v1_snapshot
from tests.support import SAMPLE, materialise, write_registry

INGESTION = dg.AssetSelection.groups("ingestion", "forum_tables")
FAST = OpenReviewResource(timeout_s=5.0, retries=1, backoff_s=0.01)


@pytest.fixture(autouse=True)
def caller_environment_ignored(monkeypatch):
    for name in list(os.environ):
        if name.startswith(("PEERIFY_", "OPENREVIEW_")):
            monkeypatch.delenv(name)


def synthetic_v1_snapshot(folder: Path, api_version: int | None = 1) -> Path:
    """Two v1 forums of `Test.cc/2020/Conference` (blind submissions, reviews, nested comments, a decision)."""
    forums = {forum_id: v1_forum(forum_id, number) for number, forum_id in enumerate(("V1", "V2"), start=1)}
    for number, (forum_id, notes) in enumerate(forums.items(), start=1):
        for note in notes[1:]:  # the factory's reply ids are per forum; keep them unique across the venue
            note["id"] = f"{forum_id}{note['id']}"
            note["replyto"] = note["replyto"] if note["replyto"] == forum_id else f"{forum_id}{note['replyto']}"
    return write_snapshot(folder, V1_VENUE, api_version, forums, [notes[0] for notes in forums.values()])


def _kinds_by_invitation(notes: list[dict]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for note in notes:
        suffix = note["invitation"].rsplit("/", 1)[-1]
        counts[suffix] = counts.get(suffix, 0) + 1
    return counts


# --- the loopback server speaks API v1 to the real v1 client ---------------------------------------------


def test_v1_client_lists_blind_submissions_with_their_replies(tmp_path):
    snapshot = synthetic_v1_snapshot(tmp_path / "served")
    with FakeOpenReviewServer(snapshot, page_size=1) as server:
        client = make_client(server.url, HttpPolicy(timeout_s=5, retries=0), api_version=1)
        assert type(client) is openreview.Client
        notes = client.get_all_notes(invitation=f"{V1_VENUE}/-/Blind_Submission", details="replies")
        forum = client.get_all_notes(forum="V1")
    assert sorted(n.id for n in notes) == ["V1", "V2"]
    replies = {n.id: sorted(r["id"] for r in n.details["replies"]) for n in notes}
    assert replies["V1"] == ["V1VC1", "V1VC2", "V1VD1", "V1VR1", "V1VR2"]
    assert notes[0].invitation == f"{V1_VENUE}/-/Blind_Submission" and notes[0].content["title"] == "An old paper"
    assert sorted(n.id for n in forum) == ["V1", "V1VC1", "V1VC2", "V1VD1", "V1VR1", "V1VR2"]
    listing = [r for r in server.requests if r.path == "/notes" and "invitation" in r.params]
    assert listing[0].params == {"invitation": f"{V1_VENUE}/-/Blind_Submission", "details": "replies",
                                 "sort": "id", "limit": "1000"}
    assert len(listing) == 3  # paged one by one: V1, V2, and the empty page that ends it


# --- live crawls and replays build the same tables ---------------------------------------------------------


def _v1_sources() -> list:
    return [
        pytest.param("synthetic", id="synthetic-v1-notes"),
        pytest.param("real", id="real-iclr2020-forum", marks=needs(V1_DIR)),
    ]


def _served(kind: str, folder: Path) -> tuple[Path, str, list[dict]]:
    """(snapshot to serve, venue id, every note of the venue as served)."""
    if kind == "real":
        return write_v1_snapshot(folder, api_version=1), ICLR_2020, [v1_submission(), *v1_replies()]
    snapshot = synthetic_v1_snapshot(folder)
    notes = [n for path in sorted((snapshot / "forums").glob("*.json")) for n in json.loads(path.read_text())["notes"]]
    return snapshot, V1_VENUE, notes


@pytest.mark.parametrize("kind", _v1_sources())
def test_live_v1_crawl_lands_v1_notes_and_builds_the_typed_tables(tmp_path, kind):
    served, venue_id, notes = _served(kind, tmp_path / "served")
    lake_root = tmp_path / "lake"
    with FakeOpenReviewServer(served) as server:
        # No api_version in the registry: the year in the venue id (before 2023) selects API v1.
        registry = write_registry(tmp_path, venue_id, source="api", seed=1, api_url=server.url)
        result = materialise(venue_id, registry, lake_root, dg.DagsterInstance.ephemeral(), INGESTION, FAST)
        requests = server.requests
    assert result.success
    assert [c.check_name for c in result.get_asset_check_evaluations() if not c.passed] == []
    assert any(r.path == "/notes" and r.params.get("invitation") == f"{venue_id}/-/Blind_Submission" for r in requests)
    landed = SnapshotReader(lake_root / "snapshots" / venue_id.replace("/", "__"))
    assert landed.venue()["api_version"] == 1
    landed_notes = [n for forum_id in (n["id"] for n in landed.submissions()) for n in landed.forum(forum_id).notes]
    assert sorted(landed_notes, key=lambda n: n["id"]) == sorted(notes, key=lambda n: n["id"])  # exactly as served

    lake = Lake(lake_root)
    kinds = _kinds_by_invitation(notes)
    assert lake.read_table("submissions", venue_id).height == kinds["Blind_Submission"]
    assert lake.read_table("reviews", venue_id).height == kinds["Official_Review"]
    assert lake.read_table("decisions", venue_id).height == kinds["Decision"]
    comments = lake.read_table("author_responses", venue_id).height + lake.read_table("reviewer_followups",
                                                                                      venue_id).height
    assert comments == kinds["Official_Comment"]
    assert lake.read_table("note_errors", venue_id).height == 0
    raw = lake.read_table("raw_openreview_notes", venue_id)
    assert set(raw["api_version"]) == {1} and raw["kind"].null_count() == 0
    assert raw.filter(pl.col("note_id") == notes[0]["id"])["invitations"].to_list() == [[notes[0]["invitation"]]]


@needs(V1_DIR)
def test_real_v1_forum_replayed_from_a_snapshot_fills_the_same_tables(tmp_path):
    snapshot = write_v1_snapshot(tmp_path / "snapshot")  # no api_version anywhere: detected from the year
    registry = write_registry(tmp_path, "iclr2020", openreview_id=ICLR_2020, source="snapshot", snapshot=str(snapshot),
                              seed=1)
    result = materialise("iclr2020", registry, tmp_path / "lake", dg.DagsterInstance.ephemeral(), INGESTION)
    assert result.success
    lake = Lake(tmp_path / "lake")
    replies = v1_replies()
    reviews = [r for r in replies if r["invitation"].endswith("/Official_Review")]
    expected_ratings = {r["id"]: int(r["content"]["rating"].split(":")[0]) for r in reviews}
    got = {r["review_id"]: r["rating_score"] for r in lake.read_table("reviews", "iclr2020").iter_rows(named=True)}
    assert got == expected_ratings and len(got) == 3
    author = [r for r in replies if r["invitation"].endswith("/Official_Comment")
              and r["signatures"][0].endswith("/Authors")]
    responses = lake.read_table("author_responses", "iclr2020")
    assert dict(zip(responses["response_id"], responses["review_id"])) == {r["id"]: r["replyto"] for r in author}
    [decision_note] = [r for r in replies if r["invitation"].endswith("/Decision")]
    [submission] = lake.read_table("submissions", "iclr2020").iter_rows(named=True)
    assert (submission["paper_id"], submission["title"]) == (v1_submission()["id"], v1_submission()["content"]["title"])
    assert (submission["decision"], submission["decision_text"]) == ("poster", decision_note["content"]["decision"])
    threads = lake.read_table("review_threads", "iclr2020")
    assert threads["n_author_responses"].sum() == len(author) == 5
    assert lake.read_table("note_errors", "iclr2020").height == 0


@pytest.mark.parametrize("kind", _v1_sources())
def test_v1_venue_read_as_v2_fails_loudly_naming_the_cause(tmp_path, kind):
    snapshot = (write_v1_snapshot(tmp_path / "snapshot") if kind == "real"
                else synthetic_v1_snapshot(tmp_path / "snapshot", api_version=None))
    registry = write_registry(tmp_path, "old", openreview_id="Old.cc/2020/Conference", source="snapshot",
                              snapshot=str(snapshot), seed=1, api_version=2)
    result = materialise("old", registry, tmp_path / "lake", dg.DagsterInstance.ephemeral(), INGESTION)
    assert not result.success
    [failure] = [e for e in result.all_events if e.is_step_failure]
    assert failure.step_key == "forum_tables"
    message = failure.event_specific_data.error.message
    assert "gave no submission or other typed row" in message
    assert "likely cause: API v1 notes in a v2 venue: set `api_version: 1`" in message
    [check] = [c for c in result.get_asset_check_evaluations() if c.check_name == "raw_notes_typed"]
    assert not check.passed and check.metadata["likely_cause"].value.startswith("API v1 notes in a v2 venue")
    lake = Lake(tmp_path / "lake")
    raw = lake.read_table("raw_openreview_notes", "old")
    # nothing committed by the failed step: the reasons are in the failure's metadata (and its log)
    assert failure.event_specific_data.user_failure_data.metadata["note_errors"].value == {
        "api_v1_note_in_v2_venue": raw.height}
    assert raw.height > 0 and not list((tmp_path / "lake" / "note_errors").iterdir())
    assert set(raw["problem"].str.contains("API v1 note")) == {True}


def test_a_failed_forum_tables_step_keeps_the_previous_partition_files(tmp_path):
    """Built once as v1, then read as v2: the step fails and commits nothing, so every table's file is as before."""
    snapshot = synthetic_v1_snapshot(tmp_path / "snapshot", api_version=None)
    instance = dg.DagsterInstance.ephemeral()

    def build(api_version: int) -> dg.ExecuteInProcessResult:
        registry = write_registry(tmp_path, "old", openreview_id="Old.cc/2020/Conference", source="snapshot",
                                  snapshot=str(snapshot), seed=1, api_version=api_version)
        return materialise("old", registry, tmp_path / "lake", instance, INGESTION)

    assert build(1).success
    tables = sorted((tmp_path / "lake").glob("*/old.parquet"))
    before = {path: path.read_bytes() for path in tables if path.parent.name != "raw_openreview_notes"}
    assert len(before) > 10 and Lake(tmp_path / "lake").read_table("submissions", "old").height == 2
    failed = build(2)
    assert not failed.success
    assert [e.step_key for e in failed.all_events if e.is_step_failure] == ["forum_tables"]
    assert {path: path.read_bytes() for path in before} == before
    assert not [path for path in (tmp_path / "lake").rglob("*") if ".tmp" in path.name]


# --- which API a venue uses --------------------------------------------------------------------------------


def test_registry_records_the_api_version(tmp_path):
    path = write_registry(tmp_path, "ICLR.cc/2020/Conference", source="api", seed=1, api_version=1)
    assert load_registry(path)["ICLR.cc/2020/Conference"].api_version == 1
    assert load_registry(write_registry(tmp_path, "X", source="api", seed=1))["X"].api_version is None
    for bad in (3, "1", True):
        with pytest.raises(RegistryError, match="api_version must be 1, 2 or absent"):
            load_registry(write_registry(tmp_path, "X", source="api", seed=1, api_version=bad))


def test_api_version_is_the_registry_s_else_detected(tmp_path):
    never = pytest.fail  # a probe must not happen when anything else decides
    v1_snapshot = SnapshotReader(synthetic_v1_snapshot(tmp_path / "v1", api_version=1))
    unmarked_v1 = SnapshotReader(synthetic_v1_snapshot(tmp_path / "unmarked", api_version=None))
    empty = SnapshotReader(tmp_path / "nothing-landed")
    assert resolve_api_version(2, "ICLR.cc/2020/Conference", v1_snapshot, False, never) == (2, "registry")
    assert resolve_api_version(None, "TMLR", v1_snapshot, False, never) == (1, "snapshot venue.json")
    assert resolve_api_version(None, "ICLR.cc/2020/Conference", empty, True, never) == (1, "venue year")
    assert resolve_api_version(None, "ICLR.cc/2024/Conference", empty, True, never) == (2, "venue year")
    assert resolve_api_version(None, "TMLR", unmarked_v1, False, never) == (1, "note shape")
    assert resolve_api_version(None, "TMLR", SnapshotReader(SAMPLE), True, never) == (2, "landed venue.json")
    assert resolve_api_version(None, "TMLR", empty, True, lambda: 1) == (1, "probe")


def test_probe_asks_the_v2_api_for_the_venue_s_submissions(tmp_path):
    with FakeOpenReviewServer(SAMPLE) as server:
        assert probe_api_version(make_client(server.url), "PeerifySample.cc/2026/Workshop") == 2
    with FakeOpenReviewServer(synthetic_v1_snapshot(tmp_path / "v1")) as server:
        assert probe_api_version(make_client(server.url), V1_VENUE) == 1
        assert [r.params.get("invitation") for r in server.requests if r.path == "/notes"] == [
            f"{V1_VENUE}/-/Submission"]


def test_v1_venues_registered_with_the_default_url_use_the_v1_host():
    assert api_url_for(DEFAULT_API_URL, 1) == DEFAULT_API_V1_URL
    assert api_url_for(DEFAULT_API_URL, 2) == DEFAULT_API_URL
    assert api_url_for("http://127.0.0.1:9", 1) == "http://127.0.0.1:9"

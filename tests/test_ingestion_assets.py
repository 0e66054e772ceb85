"""The ingestion assets end to end: the sample venue replayed from its snapshot, and a live-style crawl with the
real openreview-py client against the loopback API server (with injected faults), into temporary lakes."""

from __future__ import annotations

import json
import shutil

import dagster as dg
import polars as pl
import pytest

from peerify_dagster.assets import forum_tables as forum_tables_stage
from peerify_dagster.definitions import defs
from peerify_dagster.partitions import venue_partitions
from peerify_dagster.resources.dagster_resources import OpenReviewResource
from peerify_dagster.resources.lake import Lake
from peerify_dagster.resources.openreview import SnapshotReader
from tests.fakes.loopback import FaultRule
from tests.fakes.openreview_server import FakeOpenReviewServer
from tests.notes_factory import v1_note
from tests.support import SAMPLE, materialise, sample_registry, write_registry

INGESTION = dg.AssetSelection.groups("ingestion", "forum_tables")
TABLES = [
    "paper_sample", "raw_openreview_notes", "forum_crawl_log", "submissions", "reviews", "author_responses",
    "reviewer_followups", "chair_comments", "public_comments", "decisions", "meta_reviews", "status_notes",
    "review_threads", "note_errors", "manuscript_pdfs", "ingest_errors",
]


def sample_forums() -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in sorted((SAMPLE / "forums").glob("*.json"))}


def count_invitation(suffix: str) -> int:
    return sum(
        1 for f in sample_forums().values() for note in f["notes"]
        if any(i.endswith(f"/-/{suffix}") for i in note["invitations"])
    )


def area_chair_comments() -> dict[str, str]:
    """note id -> forum id of the sample's Official_Comments signed by an area chair, read from the files."""
    return {note["id"]: forum_id for forum_id, f in sample_forums().items() for note in f["notes"]
            if any(i.endswith("/-/Official_Comment") for i in note["invitations"])
            and any("/Area_Chair_" in s for s in note["signatures"])}


def failed_checks(result: dg.ExecuteInProcessResult) -> list[str]:
    evaluations = result.get_asset_check_evaluations()
    assert evaluations, "no asset checks ran"
    return [f"{c.asset_key.to_user_string()}:{c.check_name}" for c in evaluations if not c.passed]


@pytest.fixture(scope="module")
def sample_build(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sample")
    registry = sample_registry(tmp)
    lake_root = tmp / "lake"
    instance = dg.DagsterInstance.ephemeral()
    first = materialise("sample", registry, lake_root, instance, INGESTION)
    snapshot_first = {t: Lake(lake_root).read_table(t, "sample") for t in TABLES}
    second = materialise("sample", registry, lake_root, instance, INGESTION)
    return first, second, snapshot_first, Lake(lake_root)


def test_definitions_load():
    job = defs.resolve_job_def("build_venue")
    assert job.partitions_def == venue_partitions
    keys = {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}
    assert set(TABLES) <= keys


def test_sample_venue_materialises_every_table(sample_build):
    first, _, tables, lake = sample_build
    assert first.success
    assert failed_checks(first) == []
    forums = sample_forums()
    submissions = json.loads((SAMPLE / "submissions.json").read_text())["notes"]
    assert tables["paper_sample"].height == len(submissions)
    assert tables["submissions"].height == len(forums)
    assert tables["reviews"].height == count_invitation("Official_Review")
    assert tables["decisions"].height == count_invitation("Decision")
    assert tables["meta_reviews"].height == count_invitation("Meta_Review")
    assert tables["raw_openreview_notes"].height == sum(len(f["notes"]) for f in forums.values())
    assert tables["review_threads"].height == tables["reviews"].height
    # NeurIPS-style rebuttals (field `rebuttal`) are not lost, and follow-ups are not reviews.
    assert (tables["author_responses"]["kind"] == "rebuttal").sum() == count_invitation("Rebuttal")
    assert tables["reviewer_followups"].height > 0
    assert not set(tables["reviewer_followups"]["comment_id"]) & set(tables["reviews"]["review_id"])
    assert tables["submissions"]["withdrawn"].sum() == 1
    assert (tables["review_threads"]["n_author_responses"] > 0).sum() >= tables["reviews"].height - 3
    # The area chair's comment and the withdrawal note have tables of their own (both were once lost).
    chairs = tables["chair_comments"]
    assert dict(zip(chairs["comment_id"], chairs["paper_id"])) == area_chair_comments()
    assert set(tables["chair_comments"]["role"]) == {"area_chair"}
    assert tables["status_notes"]["kind"].to_list() == ["withdrawal"] * count_invitation("Withdrawal")
    assert tables["note_errors"].height == 0


def test_every_sample_note_is_accounted_for(sample_build):
    first, _, tables, _ = sample_build
    [check] = [c for c in first.get_asset_check_evaluations() if c.check_name == "every_note_accounted_for"]
    assert check.passed and check.metadata["failing_ids"].value == []
    assert check.metadata["notes_received"].value == tables["raw_openreview_notes"].height
    placed = sum(tables[t].height for t in ("submissions", "reviews", "author_responses", "reviewer_followups",
                                            "chair_comments", "public_comments", "decisions", "meta_reviews",
                                            "status_notes", "note_errors"))
    assert placed == tables["raw_openreview_notes"].height  # the sample has one version of each note
    decided = tables["submissions"].filter(pl.col("decision_source") == "decision_note")
    assert decided.height == count_invitation("Decision")
    assert set(decided["decision"]) <= {"oral", "spotlight", "poster", "accept", "reject"}


def test_a_lost_note_fails_the_blocking_accounting_check_with_its_forum(tmp_path, monkeypatch):
    """A classification bug that drops a table's rows (here: every chair comment) must not build green."""
    real_build_tables = forum_tables_stage.build_tables

    def losing_chair_comments(*args, **kwargs):
        built = real_build_tables(*args, **kwargs)
        built.rows["chair_comments"] = []
        return built

    monkeypatch.setattr(forum_tables_stage, "build_tables", losing_chair_comments)
    result = materialise("sample", sample_registry(tmp_path), tmp_path / "lake", dg.DagsterInstance.ephemeral(),
                         INGESTION)
    assert not result.success
    [check] = [c for c in result.get_asset_check_evaluations() if c.check_name == "every_note_accounted_for"]
    lost = area_chair_comments()
    assert not check.passed and check.severity == dg.AssetCheckSeverity.ERROR
    assert check.metadata["failing_ids"].value == sorted(set(lost.values()))
    assert check.metadata["unaccounted_note_ids"].value == {f: [n for n, g in lost.items() if g == f]
                                                              for f in sorted(set(lost.values()))}
    # Blocking: the step fails after writing its tables, and what reads them (ingest_errors) does not run.
    assert [e.step_key for e in result.all_events if e.is_step_failure] == ["forum_tables"]
    materialised = {e.asset_key.to_user_string() for e in result.all_events if e.is_step_materialization}
    assert "note_errors" in materialised and "ingest_errors" not in materialised
    assert "ingest_errors" not in {e.step_key for e in result.all_events if e.is_step_start}


def test_bad_notes_in_a_real_build_get_named_rows_and_the_rest_completes(tmp_path):
    snapshot = tmp_path / "snapshot"
    shutil.copytree(SAMPLE, snapshot)
    forum_id = sorted(sample_forums())[0]
    path = snapshot / "forums" / f"{forum_id}.json"
    record = json.loads(path.read_text())
    template = next(n for n in record["notes"] if n["id"] != forum_id)
    paper = template["signatures"][0].rsplit("/", 1)[0]
    record["notes"] += [
        {**template, "id": "OrphanNote1", "replyto": "NoSuchNote", "invitations": [f"{paper}/-/Official_Comment"],
         "signatures": [f"{paper}/Authors"], "content": {"comment": {"value": "Replying to a hidden note."}}},
        {**template, "id": "StrangerNote", "replyto": forum_id, "invitations": [f"{paper}/-/Official_Comment"],
         "signatures": ["~Some_Stranger1"], "content": {"comment": {"value": "Who am I?"}}},
        v1_note("V1Note", forum_id, "Official_Comment", "Authors", forum_id, template["cdate"], comment="v1 shape"),
    ]
    path.write_text(json.dumps(record))
    result = materialise("sample", sample_registry(tmp_path, snapshot), tmp_path / "lake",
                         dg.DagsterInstance.ephemeral(), INGESTION)
    assert result.success
    assert failed_checks(result) == []  # every note is accounted for: the bad ones in note_errors
    lake = Lake(tmp_path / "lake")
    errors = lake.read_table("ingest_errors", "sample").filter(pl.col("stage") == "note")
    assert sorted(errors.select("forum_id", "note_id", "reason").rows()) == [
        (forum_id, "OrphanNote1", "missing_parent"), (forum_id, "StrangerNote", "unknown_signer"),
        (forum_id, "V1Note", "api_v1_note_in_v2_venue")]
    assert lake.read_table("submissions", "sample").height == len(sample_forums())
    assert lake.read_table("reviews", "sample").height == count_invitation("Official_Review")


def test_sample_pdfs_and_errors(sample_build):
    _, _, tables, lake = sample_build
    pdfs = tables["manuscript_pdfs"]
    present = {p.stem for p in (SAMPLE / "pdfs").glob("*.pdf")}
    ok = pdfs.filter(pl.col("status") == "ok")
    assert set(ok["paper_id"]) == present
    assert (ok["version"] == "under_review").all()
    for row in ok.iter_rows(named=True):
        stored = lake.root / row["lake_path"]
        assert stored.read_bytes() == (SAMPLE / "pdfs" / f"{row['paper_id']}.pdf").read_bytes()
        assert row["pages"] >= 3
    missing = pdfs.filter(pl.col("status") != "ok")
    assert missing.height == 1 and missing["reason"][0] == "missing_pdf"
    errors = tables["ingest_errors"]
    assert errors.filter(pl.col("stage") == "pdf")["forum_id"].to_list() == missing["paper_id"].to_list()


def test_rematerialising_is_idempotent(sample_build):
    _, second, first_tables, lake = sample_build
    assert second.success
    for table, frame in first_tables.items():
        again = lake.read_table(table, "sample")
        if table == "forum_crawl_log":
            frame, again = frame.drop("seconds"), again.drop("seconds")
        assert again.equals(frame), table
        assert len(list((lake.root / table).glob("*.parquet"))) == 1


def test_catalog_views_match_the_lake(sample_build):
    _, _, tables, lake = sample_build
    for table in TABLES:
        _, rows = lake.query(f'select count(*) from "{table}"')
        assert rows[0][0] == tables[table].height, table
    _, rows = lake.query("select count(*) from review_threads t join reviews r using (review_id)")
    assert rows[0][0] == tables["reviews"].height


# --- live-style crawl through the real client -------------------------------------------------------


def test_crawl_with_faults_then_resume(tmp_path):
    forums = sorted(sample_forums())
    assert len(forums) >= 4
    with_pdf = sorted(p.stem for p in (SAMPLE / "pdfs").glob("*.pdf"))
    rate_limited, broken, malformed = forums[0], forums[1], forums[2]
    hanging_pdf, not_a_pdf = [f for f in with_pdf if f not in (broken, malformed)][:2]
    faults = [
        FaultRule(path="/notes", params={"forum": rate_limited}, action="retry_after", retry_after=0, times=2),
        FaultRule(path="/notes", params={"forum": broken}, action="status", status=500, times=3),
        FaultRule(path="/notes", params={"forum": malformed}, action="malformed_json", times=1),
        FaultRule(path="/references/pdf", params={"id": _edit_id(hanging_pdf)}, action="hang", hang_seconds=3, times=3),
        FaultRule(path="/references/pdf", params={"id": _edit_id(not_a_pdf)}, action="body", body=b"<html>nope</html>",
                  content_type="application/pdf", times=1),
    ]
    # The served venue carries one malformed note (a content field not wrapped in {"value": ...}).
    served = tmp_path / "served"
    shutil.copytree(SAMPLE, served)
    forum_file = served / "forums" / f"{rate_limited}.json"
    record = json.loads(forum_file.read_text())
    bad_note = {**record["notes"][-1], "id": "BadNote001", "content": {"comment": "not wrapped"}}
    record["notes"].append(bad_note)
    forum_file.write_text(json.dumps(record))
    registry = write_registry(tmp_path, "PeerifySample.cc/2026/Workshop", source="api", seed=20260110)
    lake_root = tmp_path / "lake"
    client_policy = OpenReviewResource(timeout_s=1.0, retries=2, backoff_s=0.01)
    instance = dg.DagsterInstance.ephemeral()
    key = "PeerifySample.cc/2026/Workshop"
    with FakeOpenReviewServer(served, faults=faults, page_size=3) as server:
        registry.write_text(registry.read_text() + f"    api_url: {json.dumps(server.url)}\n")
        first = materialise(key, registry, lake_root, instance, INGESTION, client_policy)
        assert first.success
        lake = Lake(lake_root)
        errors = lake.read_table("ingest_errors", key)
        by_forum = {(r["stage"], r["forum_id"]): r["reason"] for r in errors.iter_rows(named=True)}
        assert by_forum[("crawl", broken)] == "http_500"
        assert by_forum[("crawl", malformed)] == "malformed_json"
        assert by_forum[("pdf", hanging_pdf)] == "timeout"
        assert by_forum[("pdf", not_a_pdf)] == "not_a_pdf"
        assert ("crawl", rate_limited) not in by_forum  # the 429 burst was ridden through
        bad = errors.filter(pl.col("note_id") == "BadNote001").row(0, named=True)
        assert (bad["stage"], bad["reason"], bad["forum_id"]) == ("note", "malformed_note", rate_limited)
        assert "BadNote001" in bad["message"] and "not wrapped" in bad["message"]
        submissions = lake.read_table("submissions", key)
        assert set(submissions["paper_id"]) == set(forums) - {broken, malformed}
        landed = SnapshotReader(lake_root / "snapshots" / key.replace("/", "__"))
        by_id = lambda notes: sorted(notes, key=lambda n: n["id"])  # noqa: E731 - the API pages in id order
        assert by_id(landed.forum(rate_limited).notes) == by_id(record["notes"])  # landed exactly as served

        before = len(server.requests)
        second = materialise(key, registry, lake_root, instance, INGESTION, client_policy)
        assert second.success
        forum_requests = [r for r in server.requests[before:] if r.path == "/notes" and "forum" in r.params]
        assert {r.params["forum"] for r in forum_requests} == {broken, malformed}  # stored forums are not re-fetched
        assert lake.read_table("submissions", key).height == len(forums)
        assert lake.read_table("ingest_errors", key).filter(pl.col("stage") == "crawl").height == 0
        pdf_rows = lake.read_table("manuscript_pdfs", key)
        assert set(pdf_rows.filter(pl.col("status") == "ok")["paper_id"]) == set(with_pdf)


def _edit_id(forum_id: str) -> str:
    return json.loads((SAMPLE / "pdfs" / f"{forum_id}.json").read_text())["edit_id"]


def test_partition_write_is_atomic(tmp_path):
    lake = Lake(tmp_path)
    good = pl.DataFrame({"venue": ["v"], "x": [1]})
    lake.write_table("t", "v", good)
    unwritable = pl.DataFrame({"venue": ["v"], "x": [object()]}, schema={"venue": pl.String, "x": pl.Object})
    with pytest.raises(pl.exceptions.PolarsError):
        lake.write_table("t", "v", unwritable)
    assert lake.read_table("t", "v").equals(good)
    assert [p.name for p in (tmp_path / "t").iterdir()] == ["v.parquet"]


def test_unregistered_venue_fails_clearly(tmp_path):
    registry = write_registry(tmp_path, "sample", source="snapshot", snapshot=str(SAMPLE), seed=1)
    result = materialise("Nope.cc/2026", registry, tmp_path / "lake", dg.DagsterInstance.ephemeral(), INGESTION)
    assert not result.success
    failure = [e for e in result.all_events if e.is_step_failure][0]
    assert "Nope.cc/2026" in str(failure.event_specific_data.error)

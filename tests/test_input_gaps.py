"""Input gaps: an empty venue, answer-key claims about papers outside the venue, a paper without a usable
manuscript, and forum files of the wrong shape. Each fault is injected into a copy of the sample venue's
snapshot and built into a temporary lake with a fresh Dagster instance."""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from pathlib import Path

import dagster as dg
import polars as pl
import pytest

from peerify_dagster.domain import predictions as pred
from peerify_dagster.domain.gold_evidence import load_claim_key
from peerify_dagster.resources.lake import Lake
from peerify_dagster.resources.openreview import MalformedSnapshotFile, OpenReviewCrawler, SnapshotReader, make_client
from tests.fakes.openai_server import ScriptedOpenAIServer
from tests.fakes.openreview_server import FakeOpenReviewServer
from tests.support import (
    SAMPLE,
    SAMPLE_DIR,
    SAMPLE_RECORDING,
    materialise,
    materialise_predictions,
    materialization_metadata,
    sample_registry,
)
from tests.test_verification_assets import models_file

CLAIMS_PER_PAPER = Counter(r["paper_id"] for r in load_claim_key(SAMPLE_DIR / "claim_key.yaml"))
TRUNCATED = "Hp4sLx9TcV"  # a paper of the sample with a PDF and 13 claims in the answer key
INGESTION = dg.AssetSelection.groups("ingestion", "forum_tables")


def selection(*assets: str) -> dg.AssetSelection:
    return dg.AssetSelection.assets(*assets).upstream().required_multi_asset_neighbors()


def snapshot_copy(folder: Path) -> Path:
    snapshot = folder / "snapshot"
    shutil.copytree(SAMPLE, snapshot)
    return snapshot


def keep_submissions(snapshot: Path, forum_ids: list[str]) -> None:
    path = snapshot / "submissions.json"
    record = json.loads(path.read_text())
    record["notes"] = [n for n in record["notes"] if n["id"] in forum_ids]
    path.write_text(json.dumps(record))


@pytest.fixture(autouse=True, scope="module")
def caller_environment_ignored():
    """The caller's model, profile and key settings must not change what these builds do."""
    with pytest.MonkeyPatch.context() as env:
        for name in list(os.environ):
            if name.startswith(("PEERIFY_", "OPENAI_", "ANTHROPIC_", "VLLM_", "HF_", "OPENREVIEW_")):
                env.delenv(name)
        yield env


def test_sample_key_has_the_claims_these_tests_count():
    assert sum(CLAIMS_PER_PAPER.values()) == 47 and CLAIMS_PER_PAPER[TRUNCATED] == 13


# --- 1. an empty venue ---------------------------------------------------------------------------------


def test_empty_venue_fails_its_check_and_gets_an_error_row(tmp_path):
    snapshot = snapshot_copy(tmp_path)
    keep_submissions(snapshot, [])
    result = materialise("sample", sample_registry(tmp_path, snapshot), tmp_path / "lake",
                         dg.DagsterInstance.ephemeral(), selection("retrieval_metrics", "ingest_errors"))
    assert result.success  # the venue's tables are built (empty), but not green:
    failed = {(c.asset_key.to_user_string(), c.check_name): c for c in result.get_asset_check_evaluations()
              if not c.passed}
    assert list(failed) == [("paper_sample", "has_submissions")]
    check = failed[("paper_sample", "has_submissions")]
    assert check.severity == dg.AssetCheckSeverity.ERROR
    assert check.metadata["reason"].value == "venue has no submissions"
    assert check.metadata["population"].value == 0
    lake = Lake(tmp_path / "lake")
    errors = lake.read_table("ingest_errors", "sample")
    assert errors.select("venue", "forum_id", "stage", "severity", "reason").rows() == [
        ("sample", None, "crawl", "error", "no_submissions")]
    assert errors["message"][0] == "venue sample: venue has no submissions"
    # No claims of the answer key are emitted for papers the venue does not have, so no `no_chunks` rows either.
    assert lake.read_table("retrieval_queries", "sample").height == 0
    assert materialization_metadata(result, "retrieval_queries", "claims_not_in_venue") == [47]
    assert set(lake.read_table("retrieval_runs", "sample")["status"]) == {"unavailable"}


# --- 2. claims only for papers in the venue ------------------------------------------------------------


def test_claims_are_emitted_only_for_papers_in_the_venue(tmp_path):
    snapshot = snapshot_copy(tmp_path)
    keep_submissions(snapshot, ["Rk7bWq2NzA", "Tc9vPe5XmS"])  # 14 claims and none
    # The sample's recording answers the claim stage (its texts are the sample's): no model runs.
    registry = sample_registry(tmp_path, snapshot, llm_recording=str(SAMPLE_RECORDING))
    result = materialise("sample", registry, tmp_path / "lake",
                         dg.DagsterInstance.ephemeral(), selection("retrieval_queries", "raw_openreview_notes"))
    assert result.success
    assert materialization_metadata(result, "review_claims", "calls_made") == [0]
    queries = Lake(tmp_path / "lake").read_table("retrieval_queries", "sample")
    # PaperSourced claims come only from chunked papers of the venue too (Tc9vPe5XmS has no PDF); review claims come
    # from the venue's reviews, whether or not the paper has a manuscript (their predictions say no_manuscript).
    assert queries.filter(pl.col("source") == "answer_key").height == 14
    assert set(queries.filter(pl.col("source") != "review")["paper_id"]) == {"Rk7bWq2NzA"}
    assert set(queries["paper_id"]) <= {"Rk7bWq2NzA", "Tc9vPe5XmS"}
    assert materialization_metadata(result, "retrieval_queries", "claims_not_in_venue") == [33]
    assert materialization_metadata(result, "retrieval_queries", "papers_not_in_venue") == [
        ["Hp4sLx9TcV", "Wn6yBq3JhU", "Zd2fGm8KrE"]]


# --- 3. a paper without a usable manuscript -----------------------------------------------------------


@pytest.fixture(scope="module")
def truncated_build(tmp_path_factory, caller_environment_ignored):
    """The sample with one PDF cut in half, built through verification by a verifier on a loopback
    OpenAI-protocol server (the same client path as OpenAI and vLLM), which counts the calls it gets."""
    tmp = tmp_path_factory.mktemp("truncated")
    snapshot = snapshot_copy(tmp)
    pdf = snapshot / "pdfs" / f"{TRUNCATED}.pdf"
    pdf.write_bytes(pdf.read_bytes()[: pdf.stat().st_size // 2])
    configurations = tmp / "configurations.yaml"
    configurations.write_text("configurations:\n  keyed: {verifier: verifiers, mode: rag, retriever: hybrid, k: 3, "
                              "claims: [PaperSourced, AnswerKey]}\n")
    with ScriptedOpenAIServer() as server:
        caller_environment_ignored.setenv("PEERIFY_MODELS_FILE", str(models_file(tmp, server.base_url)))
        caller_environment_ignored.setenv("LOOPBACK_API_KEY", "test-key")
        caller_environment_ignored.setenv("PEERIFY_CONFIGURATIONS", str(configurations))
        instance, registry = dg.DagsterInstance.ephemeral(), sample_registry(tmp, snapshot)
        result = materialise("sample", registry, tmp / "lake", instance,
                             selection("retrieval_runs", "retrieval_metrics", "ingest_errors"))
        [predicted, _] = materialise_predictions("sample", ["keyed"], registry, tmp / "lake", instance)
        yield result, Lake(tmp / "lake"), server.request_count, predicted


def test_truncated_pdf_is_named_in_ingest_errors(truncated_build):
    result, lake, _, _ = truncated_build
    assert result.success
    errors = lake.read_table("ingest_errors", "sample").filter(pl.col("forum_id") == TRUNCATED)
    assert errors.select("stage", "reason").rows() == [("pdf", "truncated_pdf")]


def test_claims_without_manuscript_keep_their_rows_and_make_no_call(truncated_build):
    _, lake, requests, predicted = truncated_build
    assert predicted.success
    queries = lake.read_table("retrieval_queries", "sample").filter(pl.col("source") != "review")
    runs = lake.read_table("retrieval_runs", "sample").filter(pl.col("claim_id").is_in(queries["claim_id"]))
    no_chunks = runs.filter(pl.col("status") == "no_chunks")
    assert no_chunks.height == 13 * 3 and set(no_chunks["paper_id"]) == {TRUNCATED}
    rows = lake.read_table("predictions", "keyed|sample")
    assert rows.height == 47  # every answer-key and PaperSourced claim of the venue, one verifier
    lost = rows.filter(pl.col("status") == "no_manuscript")
    assert lost.height == 13 and set(lost["paper_id"]) == {TRUNCATED}
    assert lost["label"].null_count() == lost["call_id"].null_count() == lost["parse_ok"].null_count() == 13
    assert (lost["evidence_chunk_ids"].list.len() == 0).all()
    assert set(lost["error"]) == {f"paper {TRUNCATED} has no usable manuscript (no chunks)"}
    verified = rows.filter(pl.col("status") == "ok")
    assert verified.height == 34 and verified["call_id"].null_count() == 0
    _, [(verify_calls, all_calls)] = lake.query(
        "select count(*) filter (where prompt_id = 'verify'), count(*) from llm_calls")
    assert verify_calls == 34  # no call was made for the claims without a manuscript
    assert requests == all_calls  # the claim stage's requests (PaperSourced claims) are in the ledger too


def test_metrics_count_claims_without_manuscript_as_misses(truncated_build):
    _, lake, _, predicted = truncated_build
    queries = lake.read_table("retrieval_queries", "sample")
    with_evidence = queries.filter(pl.col("evidence_sentence").is_not_null())
    lost = with_evidence.filter(pl.col("paper_id") == TRUNCATED).height
    assert (with_evidence.height, lost) == (35, 10)
    metrics = lake.read_table("retrieval_metrics", "sample").filter(pl.col("status") == "ok")
    assert set(metrics["retriever"]) == {"bm25", "dense", "hybrid"}
    # The denominator is the intact venue's (35 claims with known evidence), whatever manuscripts were lost.
    assert set(metrics.select("n_claims", "n_claims_scored", "n_claims_without_manuscript").rows()) == {(35, 25, 10)}
    # The 10 lost claims score 0, so no metric can exceed the share of claims that were scored at all.
    for column in ("recall@1", "recall@5", "recall@10", "ndcg@10", "mrr@10"):
        assert (metrics[column] <= 25 / 35 + 1e-9).all(), column
    assert materialization_metadata(predicted, "predictions", "rows_by_status") == [{"ok": 34, "no_manuscript": 13}]


# --- 4. forum files of the wrong shape ------------------------------------------------------------------


def test_forum_files_of_the_wrong_shape_are_named_and_the_rest_completes(tmp_path):
    snapshot = snapshot_copy(tmp_path)
    forums = snapshot / "forums"
    (forums / "Zd2fGm8KrE.json").write_text(json.dumps([{"id": "Zd2fGm8KrE"}]))  # a list, not an object
    (forums / "Wn6yBq3JhU.json").write_text(json.dumps({"forum_id": "Wn6yBq3JhU", "notes": {"0": {}}}))
    record = json.loads((forums / "Rk7bWq2NzA.json").read_text())
    reviews = sum(any(i.endswith("/-/Official_Review") for i in n["invitations"]) for n in record["notes"])
    record["notes"].append("not a note")  # one note that is not an object; the forum's other notes are fine
    (forums / "Rk7bWq2NzA.json").write_text(json.dumps(record))

    result = materialise("sample", sample_registry(tmp_path, snapshot), tmp_path / "lake",
                         dg.DagsterInstance.ephemeral(), INGESTION)
    assert result.success
    lake = Lake(tmp_path / "lake")
    errors = lake.read_table("ingest_errors", "sample").filter(pl.col("stage") != "pdf")
    assert errors.select("forum_id", "stage", "reason").sort("forum_id").rows() == [
        ("Rk7bWq2NzA", "note", "malformed_note"),
        ("Wn6yBq3JhU", "crawl", "malformed_forum_file"),
        ("Zd2fGm8KrE", "crawl", "malformed_forum_file"),
    ]
    message = dict(zip(errors["forum_id"], errors["message"]))
    assert message["Zd2fGm8KrE"] == ("forum Zd2fGm8KrE: forums/Zd2fGm8KrE.json is a list, "
                                     "expected an object with a 'notes' list")
    assert message["Wn6yBq3JhU"] == "forum Wn6yBq3JhU: forums/Wn6yBq3JhU.json: 'notes' is an object, expected a list"
    assert "not a note" in message["Rk7bWq2NzA"]
    assert sorted(lake.read_table("submissions", "sample")["paper_id"]) == ["Hp4sLx9TcV", "Rk7bWq2NzA", "Tc9vPe5XmS"]
    assert lake.read_table("reviews", "sample").filter(pl.col("paper_id") == "Rk7bWq2NzA").height == reviews == 3


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("[]", "forums/F.json is a list, expected an object with a 'notes' list"),
        ('"notes"', "forums/F.json is a string, expected an object with a 'notes' list"),
        ('{"forum_id": "F"}', "forums/F.json: 'notes' is missing, expected a list"),
        ('{"notes": null}', "forums/F.json: 'notes' is null, expected a list"),
        ('{"notes": 3}', "forums/F.json: 'notes' is a number, expected a list"),
    ],
)
def test_snapshot_reader_names_the_file_and_the_wrong_shape(tmp_path, content, problem):
    (tmp_path / "forums").mkdir()
    (tmp_path / "forums" / "F.json").write_text(content)
    with pytest.raises(MalformedSnapshotFile) as raised:
        SnapshotReader(tmp_path).forum("F")
    assert str(raised.value) == problem


def test_live_crawl_skips_the_pdf_of_a_landed_forum_file_of_the_wrong_shape(tmp_path):
    landed = snapshot_copy(tmp_path)
    (landed / "forums" / "Zd2fGm8KrE.json").write_text("[]")
    with FakeOpenReviewServer(SAMPLE) as server:
        crawler = OpenReviewCrawler(make_client(server.url), "PeerifySample.cc/2026/Workshop", landed)
        outcome = crawler.land_pdf("Zd2fGm8KrE", refetch=True)
        assert (outcome.status, outcome.reason) == ("failed", "forum_unreadable")
        assert outcome.message == ("forum Zd2fGm8KrE: forums/Zd2fGm8KrE.json is a list, expected an object with a "
                                   "'notes' list, PDF skipped")
        assert server.requests == []


def test_submission_list_of_the_wrong_shape_is_named(tmp_path):
    (tmp_path / "submissions.json").write_text('{"notes": {"id": "x"}}')
    with pytest.raises(MalformedSnapshotFile, match=r"submissions\.json: 'notes' is an object, expected a list"):
        SnapshotReader(tmp_path).submissions()


# --- which claims a verifier is asked about -----------------------------------------------------------


def test_plan_predictions_gives_every_claim_a_status():
    claims = [{"claim_id": c, "paper_id": p, "source": pred.SOURCE_REVIEW}
              for c, p in (("c1", "A"), ("c2", "A"), ("c3", "B"), ("c4", "A"))]
    runs = [
        {"claim_id": "c1", "retriever": "hybrid", "rank": 2, "chunk_id": "A:2", "status": "ok", "error": None},
        {"claim_id": "c1", "retriever": "hybrid", "rank": 1, "chunk_id": "A:1", "status": "ok", "error": None},
        {"claim_id": "c1", "retriever": "hybrid", "rank": 4, "chunk_id": "A:4", "status": "ok", "error": None},
        {"claim_id": "c1", "retriever": "bm25", "rank": 1, "chunk_id": "A:9", "status": "ok", "error": None},
        {"claim_id": "c2", "retriever": "hybrid", "rank": None, "chunk_id": None, "status": "no_hits", "error": None},
        {"claim_id": "c3", "retriever": "hybrid", "rank": None, "chunk_id": None, "status": "no_chunks", "error": None},
        {"claim_id": "c4", "retriever": "hybrid", "rank": None, "chunk_id": None, "status": "error", "error": "boom"},
    ]
    chunks = {"A": [("A:1", "a"), ("A:2", "b"), ("A:4", "c")]}
    hybrid = pred.Configuration("c", "verifiers", pred.MODE_RAG, "hybrid", 3)
    planned = pred.plan_predictions(hybrid, claims, runs, chunks)
    assert [(p.claim["claim_id"], p.status, p.evidence_chunk_ids, p.reason) for p in planned] == [
        ("c1", "ok", ["A:1", "A:2"], None),
        ("c2", "no_evidence", [], "retriever hybrid gave no passages (no_hits)"),
        ("c3", "no_manuscript", [], "paper B has no usable manuscript (no chunks)"),
        ("c4", "no_evidence", [], "retriever hybrid gave no passages (error: boom)"),
    ]
    unavailable = [{"claim_id": None, "retriever": "hybrid+rerank", "rank": None, "chunk_id": None,
                    "status": "unavailable", "error": "needs a cross-encoder"}]
    reranked = pred.Configuration("c", "verifiers", pred.MODE_RAG, "hybrid+rerank", 3)
    [plan] = pred.plan_predictions(reranked, claims[:1], unavailable, chunks)
    assert plan.status == "no_evidence"
    assert plan.reason == "retriever hybrid+rerank gave no passages (unavailable: needs a cross-encoder)"

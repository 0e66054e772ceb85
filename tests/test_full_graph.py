"""The whole asset graph on the sample venue (what `make demo` builds: the venue graph, the predictions of a
configuration, the report), and the same graph on a copy of the sample whose PDFs were replaced by encrypted,
image-only and zero-page files."""

from __future__ import annotations

import shutil
from pathlib import Path

import dagster as dg
import polars as pl
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from peerify_dagster.domain.labels import LABELS
from peerify_dagster.resources.lake import Lake
from tests.fakes.openai_server import ScriptedOpenAIServer
from tests.fixtures_pdf import encrypted_paper, image_only_paper, zero_page_pdf
from tests.support import (
    SAMPLE,
    SAMPLE_RECORDING,
    materialise,
    materialise_predictions,
    materialization_metadata,
    sample_registry,
)
from tests.test_claims_assets import models_file, scripted_answer

# What the unparseable-PDF test reads, and what it is made from (with the multi-assets' other outputs).
UP_TO_RETRIEVAL = dg.AssetSelection.assets("parse_errors", "parsed_manuscripts", "chunks", "retrieval_runs") \
    .upstream().required_multi_asset_neighbors()

# The local model verifies the claims whose label retrieval_queries knows (a few minutes on 2 cores), not every
# review claim.
CONFIGURATION = "hybrid-top3"
CONFIGURATIONS = (f"configurations:\n  {CONFIGURATION}: {{verifier: verifiers, mode: rag, retriever: hybrid, k: 3, "
                  "claims: [PaperSourced, AnswerKey]}\n")


def claim_stage_recording(folder: Path) -> Path:
    """The sample's shipped recording without its verifier calls: the claim stage replays (as `make demo` does),
    while the verifier below really runs the local model."""
    path = folder / "claim_stage_recording.parquet"
    recorded = pq.read_table(SAMPLE_RECORDING)  # pyarrow keeps the ledger's exact schema, which installing checks
    pq.write_table(recorded.filter(pc.field("prompt_id") != "verify"), path)
    return path


def build(registry: Path, lake: Path, instance: dg.DagsterInstance) -> tuple[dg.ExecuteInProcessResult, ...]:
    venue = materialise("sample", registry, lake, instance)
    return venue, *materialise_predictions("sample", [CONFIGURATION], registry, lake, instance)


@pytest.fixture(scope="module")
def sample_graph(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("graph")
    registry = sample_registry(tmp, llm_recording=str(claim_stage_recording(tmp)))
    instance = dg.DagsterInstance.ephemeral()
    with pytest.MonkeyPatch.context() as env:
        (tmp / "configurations.yaml").write_text(CONFIGURATIONS)
        env.setenv("PEERIFY_CONFIGURATIONS", str(tmp / "configurations.yaml"))
        first = build(registry, tmp / "lake", instance)
        lake = Lake(tmp / "lake")
        tables = {t: lake.read_table(t, "sample") for t in ("chunks", "chunk_embeddings", "retrieval_runs")}
        tables["predictions"] = lake.read_table("predictions", f"{CONFIGURATION}|sample")
        second = build(registry, tmp / "lake", instance)
    return first, second, tables, lake


def test_full_graph_succeeds_with_every_check_passing_but_two_true_warnings(sample_graph):
    first, _, _, lake = sample_graph
    assert all(result.success for result in first)
    evaluations = [e for result in first for e in result.get_asset_check_evaluations()]
    assert len(evaluations) >= 20
    # As in `make demo`: SmolLM2's labellers answer Supported to nearly every manuscript claim, and Zd2fGm8KrE cites
    # only outside papers and the paper whose PDF is missing, so none of its cited papers can be had.
    failed = {e.check_name: e for e in evaluations if not e.passed}
    assert set(failed) <= {"label_distribution_within_bounds", "cited_papers_found"}
    assert {e.severity for e in failed.values()} == {dg.AssetCheckSeverity.WARN}
    assert failed["cited_papers_found"].metadata["failing_ids"].value == ["Zd2fGm8KrE"]
    assert {"parsed_manuscripts", "chunks", "chunk_stats", "chunk_embeddings", "retrieval_runs",
            "retrieval_metrics"} <= set(lake.tables())


def test_every_column_of_every_table_has_a_description(sample_graph):
    """The UI's column schema: each column of each asset the sample build writes says what it means."""
    first, _, _, _ = sample_graph
    schemas = {e.asset_key.to_user_string(): e.event_specific_data.materialization.metadata["dagster/column_schema"]
               for result in first for e in result.all_events if e.is_step_materialization}
    assert "predictions" in schemas and "venue_report" in schemas
    assert len(schemas) >= 25
    undescribed = [f"{table}.{column.name}" for table, schema in schemas.items() for column in schema.value.columns
                   if not (column.description or "").strip()]
    assert undescribed == []


def test_parsed_manuscripts_record_their_parser(sample_graph):
    _, _, _, lake = sample_graph
    parsed = lake.read_table("parsed_manuscripts", "sample")
    pdfs = lake.read_table("manuscript_pdfs", "sample").filter(pl.col("status") == "ok")
    assert sorted(parsed["paper_id"]) == sorted(pdfs["paper_id"])
    assert set(parsed["parser"]) == {"docling-native"}
    assert all("docling" in v for v in parsed["parser_version"])
    kinds = {b["kind"] for blocks in parsed["blocks"] for b in blocks}
    assert {"heading", "paragraph", "caption", "table", "reference"} <= kinds


def test_chunks_and_stats(sample_graph):
    _, _, tables, lake = sample_graph
    chunks = tables["chunks"]
    stats = lake.read_table("chunk_stats", "sample").row(0, named=True)
    assert stats["n_chunks"] == chunks.height and stats["n_empty"] == 0 and stats["n_runaway"] == 0
    assert stats["median_words"] == pytest.approx(chunks["word_count"].median())
    assert chunks["chunk_id"].n_unique() == chunks.height
    assert all(cid.startswith(f"{pid}:") for cid, pid in zip(chunks["chunk_id"], chunks["paper_id"]))
    assert (chunks["word_count"] > 0).all()
    # Reference lists are parsed (see parsed_manuscripts) but are not retrieval units by default.
    assert {"paragraph", "caption", "table",
            "appendix"} <= set(chunks["kind"]) and "reference" not in set(chunks["kind"])


def test_rebuild_embeds_nothing_calls_no_model_and_is_identical(sample_graph):
    _, second, first_tables, lake = sample_graph
    assert all(result.success for result in second)
    assert materialization_metadata(second[0], "chunk_embeddings", "embedded") == [0]  # all from the text-hash cache
    assert materialization_metadata(second[1], "predictions", "calls_made") == [0]  # all from the ledger
    for table, frame in first_tables.items():
        partition = f"{CONFIGURATION}|sample" if table == "predictions" else "sample"
        assert lake.read_table(table, partition).equals(frame), table
    vectors = first_tables["chunk_embeddings"]["embedding"].to_numpy()
    assert vectors.shape[1] == 384
    assert abs(float((vectors[0] ** 2).sum()) - 1.0) < 1e-4


def test_retrieval_runs_and_metrics(sample_graph):
    _, _, tables, lake = sample_graph
    runs = tables["retrieval_runs"]
    queries = lake.read_table("retrieval_queries", "sample")
    chunks = tables["chunks"]
    ok = runs.filter(pl.col("status") == "ok")
    assert set(ok["retriever"]) == {"bm25", "dense", "hybrid"}
    # Restricted to the claim's own manuscript.
    paper_of_chunk = dict(zip(chunks["chunk_id"], chunks["paper_id"]))
    assert all(paper_of_chunk[c] == p for c, p in zip(ok["chunk_id"], ok["paper_id"]))
    assert ok.group_by("claim_id", "retriever").len()["len"].max() <= 10
    # Claims of the paper without a PDF get an explicit empty result.
    no_pdf = set(queries["paper_id"]) - set(chunks["paper_id"])
    assert set(runs.filter(pl.col("status") == "no_chunks")["paper_id"]) == no_pdf
    metrics = lake.read_table("retrieval_metrics", "sample")
    measured = metrics.filter(pl.col("status") == "ok")
    assert set(measured["retriever"]) == {"bm25", "dense", "hybrid"}
    assert (measured["n_claims"] > 20).all()
    for column in ("recall@1", "recall@5", "recall@10", "ndcg@10", "mrr@10"):
        assert measured[column].is_between(0.0, 1.0).all(), column
    assert (measured["recall@1"] <= measured["recall@5"]).all()
    assert (measured["recall@5"] <= measured["recall@10"]).all()
    unavailable = metrics.filter(pl.col("status") == "unavailable")
    assert set(unavailable["retriever"]) == {"bm25+rerank", "dense+rerank", "hybrid+rerank"}
    assert all("cross-encoder" in r for r in unavailable["reason"])


def test_unparseable_pdfs_are_recorded_and_the_rest_completes(tmp_path, monkeypatch):
    snapshot = tmp_path / "snapshot"
    shutil.copytree(SAMPLE, snapshot)
    papers = sorted(p.stem for p in (snapshot / "pdfs").glob("*.pdf"))
    broken = {papers[0]: (encrypted_paper(), "encrypted"), papers[1]: (image_only_paper(), "no_text_layer"),
              papers[2]: (zero_page_pdf(), "zero_pages")}
    for paper, (data, _) in broken.items():
        (snapshot / "pdfs" / f"{paper}.pdf").write_bytes(data)
    # The paper without a PDF is provided by the venue as a Markdown manuscript instead.
    without_pdf = sorted(p.stem for p in (snapshot / "forums").glob("*.json") if p.stem not in papers)[0]
    (snapshot / "manuscripts").mkdir()
    shutil.copy(SAMPLE.parent / "manuscripts" / f"{without_pdf}.md", snapshot / "manuscripts" / f"{without_pdf}.md")
    # The Markdown manuscript's paper claims are in no recording: a scripted model on loopback answers the claim
    # stage (what is tested here is the parsing, not a model; the labels and slices are left out).
    with ScriptedOpenAIServer(responder=scripted_answer) as server:
        monkeypatch.setenv("PEERIFY_MODELS_FILE", str(models_file(tmp_path, server.base_url)))
        result = materialise("sample", sample_registry(tmp_path, snapshot), tmp_path / "lake",
                             dg.DagsterInstance.ephemeral(), UP_TO_RETRIEVAL)
    assert result.success
    lake = Lake(tmp_path / "lake")
    errors = {r["paper_id"]: r for r in lake.read_table("parse_errors", "sample").iter_rows(named=True)}
    assert {p: errors[p]["reason"] for p in broken} == {p: reason for p, (_, reason) in broken.items()}
    assert all(p in errors[p]["message"] for p in broken)
    parsed = lake.read_table("parsed_manuscripts", "sample")
    assert dict(zip(parsed["paper_id"], parsed["parser"])) == {papers[3]: "docling-native",
                                                                without_pdf: "docling-markdown"}
    chunks = lake.read_table("chunks", "sample")
    assert set(chunks["paper_id"]) == {papers[3], without_pdf}
    markdown_sections = {s for s, p in zip(chunks["section"], chunks["paper_id"]) if p == without_pdf}
    assert {"2 Model", "3 Training setup"} <= markdown_sections
    runs = lake.read_table("retrieval_runs", "sample")
    assert set(runs.filter(pl.col("status") == "no_chunks")["paper_id"]) >= set(broken)


def test_local_model_verifies_every_claim_with_evidence(sample_graph):
    """The offline profile: the packaged SmolLM2 served by llama.cpp on loopback, started and stopped by the run."""
    first, _, tables, lake = sample_graph
    rows = tables["predictions"]
    chunked = set(tables["chunks"]["paper_id"])
    queries = lake.read_table("retrieval_queries", "sample").filter(pl.col("source") != "review")
    assert rows.height == queries.height == queries.filter(pl.col("paper_id").is_in(chunked)).height
    assert set(rows["verifier"]) == {"smollm2-135m-verifier"} and set(rows["status"]) == {"ok"}
    parsed = rows.filter(pl.col("parse_ok"))
    # json_schema constrained decoding: the answers parse, so an all-unparsed run is a failure, not a vacuous pass.
    assert parsed.height >= 1 and parsed["label"].is_in(list(LABELS)).all()
    assert rows.filter(~pl.col("parse_ok"))["label"].null_count() == rows.filter(~pl.col("parse_ok")).height
    _, ledger = lake.query("select count(distinct call_id), min(model), max(model) from llm_calls "
                           "where error is null and role = 'verifiers'")
    assert ledger[0] == (rows.height, "smollm2-135m-verifier", "smollm2-135m-verifier")
    assert (rows["tokens_in"] > 0).all()
    assert materialization_metadata(first[1], "predictions", "calls_made") == [rows.height]


def test_venue_report_writes_png_figures(sample_graph):
    _, _, _, lake = sample_graph
    report = lake.read_table("venue_report", "sample")
    assert set(report["figure"]) == {"slice_labels.png", f"confusion_{CONFIGURATION}.png",
                                     f"labels_{CONFIGURATION}.png", "retrieval_metrics.png", "chunk_words.png"}
    for path in report["path"]:
        data = Path(path).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    folder = Path(report["path"][0]).parent
    markdown = (folder / "report.md").read_text()
    assert all(f"]({name})" in markdown for name in report["figure"])
    assert "(not built for this venue)" not in markdown  # an ordinary venue builds every table the report reads


def test_metrics_score_the_configuration_on_the_slices_it_predicts(sample_graph):
    _, _, tables, lake = sample_graph
    metrics = lake.read_table("metrics", "sample").filter(pl.col("configuration") == CONFIGURATION)
    slices = lake.read_table("benchmark_slices", "sample")
    paper = metrics.filter(pl.col("slice") == "PaperSourced").row(0, named=True)
    assert paper["n_claims"] == slices.filter(pl.col("slice") == "PaperSourced").height
    predicted = tables["predictions"].filter(pl.col("claim_source") == "paper_sourced")
    correct = predicted.filter(pl.col("label") == "Supported").height  # every PaperSourced gold label is Supported
    assert paper["accuracy"] == pytest.approx(correct / paper["n_claims"])

"""`peerify import-release`: a release in the published format (B1, B3, B4, B6 JSONL) becomes a venue with the
standard slice, chunk, query and thread tables; the `thread` prediction mode; `claim_threads` of a crawled venue;
and a release venue built end to end with the local SmolLM2."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import polars as pl
import pytest

from peerify_dagster import cli
from peerify_dagster.definitions import build_resources
from peerify_dagster.domain import labelling as lab
from peerify_dagster.domain import predictions as pred
from peerify_dagster.domain.chunking import CHUNK_SCHEMA
from peerify_dagster.domain.labelling import CLAIM_THREAD_SCHEMA
from peerify_dagster.domain.release import RELEASE_FILES, passage_id_for
from peerify_dagster.domain.release_import import IMPORTED_TABLES, RELEASE_ROW_SCHEMA, claim_id_for, import_release
from peerify_dagster.domain.retrieval import QUERY_SCHEMA
from peerify_dagster.domain.slices import SLICE_SCHEMA
from peerify_dagster.domain.venues import load_registry
from peerify_dagster.partitions import venue_partitions
from peerify_dagster.resources.dagster_resources import VenueRegistryResource
from peerify_dagster.resources.lake import Lake
from tests.cli_support import cli_env, fresh_home, peerify
from tests.support import ALL_ASSETS, write_registry

SHARED_RELEASE = Path(__file__).resolve().parents[2] / "shared" / "peerify-release"
VENUE = "release-tiny"
PARAGRAPH = {"P1": "The method reaches 81 percent top-1 accuracy on ImageNet with a ResNet-50 backbone.",
             "P2": "We train every model for 90 epochs with SGD and a cosine learning-rate schedule."}
CLAIM_A = "The paper lacks an ablation of the filter."
CLAIM_B = "The paper does not report training time."
RESPONSE = "We added the ablation of the filter in Table 21 of the appendix, as the reviewer asked."


def b1(paper: str, claim: str) -> dict:
    return {"claim": claim, "original_claim": claim + " (original)", "paragraph": PARAGRAPH[paper],
            "section_name": "4 Experiments", "paper_id": paper, "label": "Supported"}


def review_row(claim: str, label: str, review: str = "R1", paper: str = "P1", claim_type: str = "methodology",
               evidence: object = "\u201cWe remove the low pass filter to keep useful information.\u201d") -> dict:
    return {"claim": claim, "claim_type": claim_type, "paper_id": paper, "review_id": review, "label": label,
            "justification": "because", "evidence": evidence, "section": "Section 3"}


def write_release(folder: Path, **overrides: list) -> Path:
    """A small release in the published format; `overrides` replaces a file's lines (dicts or raw strings)."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {
        "B1": [b1("P1", "ResNet-50 reaches 81 percent on ImageNet."), b1("P2", "Models train for 90 epochs.")],
        "B3": [review_row(CLAIM_A, "Contradicted"), review_row(CLAIM_B, "Undetermined", claim_type="subjective"),
               review_row("The baseline is too weak.", "Supported", review="R2", paper="P2")],
        "B4": [{**review_row(CLAIM_A, "x"), "b2_label": "Contradicted", "b3_label": "Contradicted",
                "agreement": True, "b2_evidence": RESPONSE, "b3_evidence": ["We remove the low pass filter."]}],
        "B6": [{**review_row("  the paper LACKS an ablation of the filter. ", "Partially Supported"),
                "author_response": RESPONSE, "combined_author_response": RESPONSE + " Thanks."}],
        **overrides,
    }
    for kind, rows in files.items():
        lines = [row if isinstance(row, str) else json.dumps(row) for row in rows]
        (folder / RELEASE_FILES[kind]).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


@pytest.fixture
def workspace(tmp_path, monkeypatch) -> dict[str, Path]:
    registry = tmp_path / "venues.yaml"
    registry.write_text("# kept comment\nvenues:\n")
    home = fresh_home(tmp_path / "home")
    for name, value in (("PEERIFY_LAKE", tmp_path / "lake"), ("PEERIFY_VENUES", registry), ("DAGSTER_HOME", home)):
        monkeypatch.setenv(name, str(value))
    return {"root": tmp_path, "registry": registry, "lake": tmp_path / "lake", "home": home}


def import_cli(folder: Path, *extra: str) -> int:
    return cli.main(["import-release", str(folder), "--venue", VENUE, *extra])


def lake_files(lake: Path) -> list[Path]:
    return sorted(lake.rglob("*.parquet")) if lake.exists() else []


def test_a_release_with_problems_is_refused_naming_every_line_and_nothing_is_written(workspace, capsys):
    folder = write_release(workspace["root"] / "bad", B3=[
        review_row(CLAIM_A, "Contradicted"),
        "{not json",
        {k: v for k, v in review_row(CLAIM_B, "Supported").items() if k != "claim"},
        review_row("Another claim.", "Maybe"),
        review_row(" the paper lacks an ABLATION of the filter.", "Supported"),
        {k: v for k, v in review_row("No review id here.", "Supported").items() if k != "review_id"},
    ], B4=[{**review_row(CLAIM_A, "x"), "b2_label": "Supported", "b3_label": "Contradicted"}],
        B6=[review_row(CLAIM_A, "Supported")])
    before = workspace["registry"].read_text()

    assert import_cli(folder) == 2

    err = capsys.readouterr().err
    b3, b4, b6 = RELEASE_FILES["B3"], RELEASE_FILES["B4"], RELEASE_FILES["B6"]
    assert "7 problem(s)" in err and "nothing was written" in err
    for expected in (f"{b3}:2: ", f"{b3}:3: missing or empty field(s) claim", f"{b3}:4: label 'Maybe' is not a known",
                     f"{b3}:5: the same claim (paper, review and text) as line 1",
                     f"{b3}:6: missing or empty field(s) review_id",
                     f"{b4}:1: b2_label 'Supported' and b3_label 'Contradicted' differ",
                     f"{b6}:1: missing or empty field(s) author_response"):
        assert expected in err, expected
    assert lake_files(workspace["lake"]) == [] and workspace["registry"].read_text() == before


def test_a_missing_file_refuses_the_import(workspace, capsys):
    folder = write_release(workspace["root"] / "partial")
    (folder / RELEASE_FILES["B6"]).unlink()
    assert import_cli(folder) == 2
    assert f"{RELEASE_FILES['B6']}: file is missing" in capsys.readouterr().err
    assert lake_files(workspace["lake"]) == []


@pytest.fixture
def imported(workspace, capsys) -> dict:
    folder = write_release(workspace["root"] / "tiny")
    assert import_cli(folder) == 0
    out = capsys.readouterr().out
    lake = Lake(workspace["lake"])
    return {**workspace, "folder": folder, "out": out,
            "tables": {table: lake.read_table(table, VENUE) for table in IMPORTED_TABLES}}


def test_imported_tables_have_the_standard_schemas(imported):
    expected = {"benchmark_slices": SLICE_SCHEMA, "chunks": CHUNK_SCHEMA, "retrieval_queries": QUERY_SCHEMA,
                "claim_threads": CLAIM_THREAD_SCHEMA, "release_rows": RELEASE_ROW_SCHEMA}
    for table, schema in expected.items():
        assert dict(imported["tables"][table].schema) == schema, table


def test_slices_map_the_release_files_with_one_claim_id_per_claim(imported):
    slices = imported["tables"]["benchmark_slices"]
    by_slice = {name: slices.filter(pl.col("slice") == name) for name in slices["slice"].unique()}
    claim_a = claim_id_for("P1", "R1", CLAIM_A)
    assert by_slice["PaperSourced"].height == 2 and set(by_slice["PaperSourced"]["gold_label"]) == {"Supported"}
    assert by_slice["PaperSourced"]["gold_chunk_ids"].to_list() == [[passage_id_for(PARAGRAPH["P1"])],
                                                                    [passage_id_for(PARAGRAPH["P2"])]]
    judged = dict(zip(by_slice["LLMJudged"]["claim_id"], by_slice["LLMJudged"]["gold_label"]))
    assert judged[claim_a] == "Not Supported" and judged[claim_id_for("P1", "R1", CLAIM_B)] == "Not Determined"
    assert by_slice["LLMJudged"]["gold_provenance"].to_list() == ["release:B3:1", "release:B3:2", "release:B3:3"]
    # B4 and B6 write claim A with other spacing and case: the same claim id, so HighAgreement checks against B3.
    agreed = by_slice["HighAgreement"].row(0, named=True)
    assert (agreed["claim_id"], agreed["gold_label"], agreed["gold_source"], agreed["gold_provenance"]) == (
        claim_a, "Not Supported", "thread+manuscript", "release:B4:1")
    assert by_slice["HumanVerified"]["claim_id"].to_list() == [claim_a]
    assert by_slice["HumanVerified"]["gold_label"].to_list() == ["Partially Supported"]
    assert set(by_slice["VerifiableOnly"]["claim_id"]) == set(judged) - {claim_id_for("P1", "R1", CLAIM_B)}
    assert "RebuttalSourced" not in by_slice and "RebuttalSourced is empty" in imported["out"]


def test_passages_queries_and_threads(imported):
    tables = imported["tables"]
    chunks = tables["chunks"]
    gold = chunks.filter(pl.col("kind") == "paragraph")
    assert set(gold["chunk_id"]) == {passage_id_for(text) for text in PARAGRAPH.values()}
    assert set(gold["section"]) == {"4 Experiments"}
    assert "We remove the low pass filter to keep useful information." in chunks["text"].to_list()
    queries = tables["retrieval_queries"]
    paper = queries.filter(pl.col("source") == pred.SOURCE_PAPER)
    assert set(paper["manuscript_label"]) == {"Supported"}
    assert paper["gold_chunk_ids"].to_list() == [[passage_id_for(PARAGRAPH["P1"])], [passage_id_for(PARAGRAPH["P2"])]]
    review = queries.filter(pl.col("source") == pred.SOURCE_REVIEW)
    assert review.height == 3 and review["claim_id"].n_unique() == 3  # B3, B4 and B6 claim A once
    threads = tables["claim_threads"]
    assert threads.select("claim_id", "thread_mode", "thread_text").rows() == [
        (claim_id_for("P1", "R1", CLAIM_A), "release", RESPONSE)]


def test_label_deviations_are_reported_and_the_raw_values_kept(imported):
    out = imported["out"]
    assert f"{RELEASE_FILES['B3']} label: Contradicted -> Not Supported (1), Undetermined -> Not Determined (1)" in out
    assert f"{RELEASE_FILES['B4']} b2_label: Contradicted -> Not Supported (1)" in out
    rows = imported["tables"]["release_rows"]
    assert rows.height == 2 + 3 + 1 + 1
    b3 = rows.filter(pl.col("row_id") == "B3:2").row(0, named=True)
    assert b3["labels"] == [{"field": "label", "raw": "Undetermined", "mapped": "Not Determined"}]
    assert (b3["release_file"], b3["line"], b3["claim_type_raw"]) == (RELEASE_FILES["B3"], 2, "subjective")
    written = (imported["folder"] / RELEASE_FILES["B3"]).read_text().splitlines()[1]
    assert b3["row_json"] == written
    b4 = rows.filter(pl.col("row_id") == "B4:1").row(0, named=True)
    assert [label["field"] for label in b4["labels"]] == ["b2_label", "b3_label"]
    assert b4["evidence"] == [RESPONSE, "We remove the low pass filter."]


def test_the_venue_is_registered_and_the_partitions_recorded_in_dagster(imported, capsys):
    venue = load_registry(imported["registry"])[VENUE]
    assert (venue.source, venue.release) == ("release", "tiny")  # relative to the registry file
    assert "# kept comment" in imported["registry"].read_text()
    assert cli.main(["venues", "list"]) == 0 and VENUE in capsys.readouterr().out
    instance = dg.DagsterInstance.get()
    for table in IMPORTED_TABLES:
        [record] = instance.fetch_materializations(dg.AssetRecordsFilter(
            asset_key=dg.AssetKey(table), asset_partitions=[VENUE]), limit=5).records
        metadata = record.asset_materialization.metadata
        assert metadata["rows"].value == imported["tables"][table].height
        assert set(metadata["file_sha256"].value) == set(RELEASE_FILES.values())
        assert record.run_id == ""  # runless: no run wrote it
    checks = _check_results(instance)
    # The release's B4 claims are not in RebuttalSourced (no B2 file): the subset gate fails, reported, not fatal.
    assert checks["high_agreement_in_both_sources"] is False and checks["paper_sourced_all_supported"] is True
    assert "gate high_agreement_in_both_sources: FAILED" in imported["out"]


def _check_results(instance: dg.DagsterInstance) -> dict[str, bool]:
    """The latest evaluation of each gate of benchmark_slices recorded in the instance: passed or not."""
    keys = [dg.AssetCheckKey(dg.AssetKey("benchmark_slices"), name)
            for name in ("high_agreement_in_both_sources", "paper_sourced_all_supported")]
    latest = instance.event_log_storage.get_latest_asset_check_execution_by_key(keys)
    return {key.name: latest[key].event.dagster_event.event_specific_data.passed for key in keys}


def test_a_second_import_is_refused_without_replace(imported, capsys):
    files = {path: path.stat().st_mtime_ns for path in lake_files(imported["lake"])}
    changed = write_release(imported["root"] / "tiny", B6=[])
    assert import_cli(changed) == 2
    assert "already imported" in capsys.readouterr().err
    assert {path: path.stat().st_mtime_ns for path in lake_files(imported["lake"])} == files
    assert import_cli(changed, "--replace") == 0
    assert Lake(imported["lake"]).read_table("claim_threads", VENUE).height == 0
    assert list(load_registry(imported["registry"])) == [VENUE]  # replaced, not added twice


def test_a_seeded_sample_keeps_at_most_n_claims_per_slice(tmp_path):
    folder = write_release(tmp_path / "tiny")
    full = import_release(folder, VENUE)
    first, again = (import_release(folder, VENUE, per_slice=1, seed=3) for _ in range(2))
    sizes = first.slice_sizes()
    assert all(size <= 1 for size in sizes.values()) and sum(sizes.values()) == 5
    assert first.tables == again.tables
    kept = {row["claim_id"] for row in first.tables["benchmark_slices"]}
    assert {row["claim_id"] for row in first.tables["retrieval_queries"]} == kept
    assert {row["claim_id"] for row in first.tables["release_rows"]} == kept
    assert len(full.tables["retrieval_queries"]) == 2 + 3


@pytest.mark.skipif(not SHARED_RELEASE.is_dir(), reason=f"shared Peerify release not present at {SHARED_RELEASE}")
def test_the_shared_release_imports_with_the_sizes_its_readme_gives():
    imported = import_release(SHARED_RELEASE, "release-shared")
    sizes = imported.slice_sizes()
    # README table: B1 295, B3 455, B4 128, B6 106 rows; RebuttalSourced has no file in this part.
    assert {name: sizes[name] for name in ("PaperSourced", "LLMJudged", "HighAgreement", "HumanVerified",
                                           "RebuttalSourced")} == {
        "PaperSourced": 295, "LLMJudged": 455, "HighAgreement": 128, "HumanVerified": 106, "RebuttalSourced": 0}
    b3 = [json.loads(line) for line in (SHARED_RELEASE / RELEASE_FILES["B3"]).read_text().splitlines()]
    assert sizes["VerifiableOnly"] == sum(row["claim_type"] != "subjective" for row in b3)
    slices = pl.DataFrame(imported.tables["benchmark_slices"], schema=SLICE_SCHEMA)
    judged = slices.filter(pl.col("slice") == "LLMJudged")
    # Claim merging: every B4 and B6 claim is a B3 claim, and B4's agreed label is B3's label.
    for name in ("HighAgreement", "HumanVerified"):
        assert set(slices.filter(pl.col("slice") == name)["claim_id"]) <= set(judged["claim_id"])
    agreed = slices.filter(pl.col("slice") == "HighAgreement").join(judged, on="claim_id")
    assert (agreed["gold_label"] == agreed["gold_label_right"]).all()
    queries = imported.tables["retrieval_queries"]
    assert len(queries) == 295 + 455 and len(imported.tables["claim_threads"]) == 106
    assert len(imported.tables["release_rows"]) == 295 + 455 + 128 + 106
    assert imported.deviations[f"{RELEASE_FILES['B3']} label"] == {"Contradicted -> Not Supported": sum(
        row["label"] == "Contradicted" for row in b3)}
    chunk_ids = {row["chunk_id"] for row in imported.tables["chunks"]}
    assert all(set(row["gold_chunk_ids"]) <= chunk_ids and row["gold_chunk_ids"]
               for row in queries if row["source"] == pred.SOURCE_PAPER)


# -- the thread prediction mode -----------------------------------------------------------------------------------

THREAD = pred.Configuration("thread", "verifiers", pred.MODE_THREAD, claims=("RebuttalSourced", "HumanVerified"))
CLAIMS = [
    {"claim_id": "r1", "paper_id": "A", "claim_text": "claim with a thread", "source": pred.SOURCE_REVIEW},
    {"claim_id": "r2", "paper_id": "B", "claim_text": "claim without a thread", "source": pred.SOURCE_REVIEW},
    {"claim_id": "r3", "paper_id": "A", "claim_text": "claim with a long thread", "source": pred.SOURCE_REVIEW},
    {"claim_id": "p1", "paper_id": "A", "claim_text": "paper claim", "source": pred.SOURCE_PAPER},
]
THREADS = {"r1": "We agree and added it.", "r2": None, "r3": "x" * 3000}


def test_thread_mode_shows_the_thread_and_counts_claims_without_one():
    planned = {p.claim["claim_id"]: p for p in pred.plan_predictions(THREAD, CLAIMS, [], {}, 500, THREADS)}
    assert list(planned) == ["r1", "r2", "r3"]  # review claims only; no manuscript needed (paper B has no chunks)
    assert (planned["r1"].status, planned["r1"].thread_text) == (pred.STATUS_OK, THREADS["r1"])
    assert planned["r2"].status == pred.STATUS_NO_THREAD and planned["r2"].thread_text is None
    assert planned["r3"].status == pred.STATUS_TOO_LONG and "window of 500 tokens" in planned["r3"].reason
    assert pred.verifier_items(planned.values(), {}) == [{"claim": "claim with a thread",
                                                          "author_response": THREADS["r1"]}]
    assert THREAD.prompt_id == lab.THREAD_PROMPT == "label_rebuttal"
    assert pred.Configuration("o", "verifiers", pred.MODE_ORACLE).prompt_id == "verify"


def test_the_shipped_thread_configuration_and_release_defaults():
    from peerify_dagster.paths import REPO_ROOT
    from peerify_dagster.resources.llm_gateway.registry import ModelRegistry

    configurations = pred.load_configurations(REPO_ROOT / "configurations.yaml", ModelRegistry.load(env={}).models)
    assert configurations.get("thread").mode == pred.MODE_THREAD
    assert "thread" not in [c.name for c in configurations.for_venue("sample")]
    assert [c.name for c in configurations.for_venue("release-x", release=True)] == [
        "oracle", "thread", "bm25-top10", "dense-top10"]
    assert configurations.for_venue("release-x") == configurations.for_venue("ICLR.cc/2024/Conference")  # paper grid


def test_release_venues_naming_an_unknown_configuration_is_refused(tmp_path):
    path = tmp_path / "configurations.yaml"
    path.write_text("configurations:\n  a: {verifier: verifiers, mode: thread}\nrelease_venues: [a, b]\n")
    with pytest.raises(pred.ConfigurationError, match=r"release_venues names unknown configurations \['b'\]"):
        pred.load_configurations(path, ["smollm2-135m"])


# -- claim_threads of a crawled venue ------------------------------------------------------------------------------

def test_claim_threads_assemble_the_thread_as_the_thread_labeller_sees_it(tmp_path):
    lake = Lake(tmp_path / "lake")
    lake.write_table("review_claims", "v", pl.DataFrame({
        "claim_id": ["c1", "c2"], "paper_id": ["P", "P"], "review_id": ["R1", "R2"], "claim_order": [0, 1]}))
    responses = [{"response_id": "a1", "review_id": "R1", "replyto": "R1", "text": "Short reply.", "cdate": 1},
                 {"response_id": "a2", "review_id": "R1", "replyto": "R1", "text": "A much longer reply here.",
                  "cdate": 2}]
    lake.write_table("author_responses", "v", pl.DataFrame(responses))
    lake.write_table("reviewer_followups", "v", pl.DataFrame({
        "comment_id": ["f1"], "review_id": ["R1"], "text": ["Thanks, raised my score."], "cdate": [3],
        "own_review": [True]}))
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(venue_partitions.name, ["v"])
    for option, expected_mode in (("longest_author_reply", lab.MODE_LONGEST_REPLY),
                                  ("thread_with_followups", lab.MODE_THREAD_WITH_FOLLOWUPS)):
        registry = write_registry(tmp_path, "v", source="snapshot", snapshot="x", seed=1,
                                  labelling={"thread_evidence": option})
        result = dg.materialize(ALL_ASSETS, selection=["claim_threads"], instance=instance, partition_key="v",
                                resources=build_resources(str(lake.root),
                                                          venue_registry=VenueRegistryResource(path=str(registry))))
        assert result.success
        rows = {r["claim_id"]: r for r in lake.read_table("claim_threads", "v").iter_rows(named=True)}
        with_followups = [{**r, "id": r["response_id"]} for r in responses]
        followups = [{"id": "f1", "text": "Thanks, raised my score.", "cdate": 3, "own_review": True}]
        expected = lab.thread_evidence("R1", with_followups, followups, option)
        assert (rows["c1"]["thread_mode"], rows["c1"]["thread_text"]) == (expected_mode, expected.text)
        assert rows["c1"]["thread_tokens"] > 0
        assert (rows["c2"]["thread_mode"], rows["c2"]["thread_text"]) == (lab.MODE_NO_AUTHOR_RESPONSE, None)


# -- end to end: a tiny release imported and built with the local model ---------------------------------------------

E2E_CONFIGURATIONS = """configurations:
  oracle: {verifier: verifiers, mode: oracle, claims: [PaperSourced]}
  thread: {verifier: verifiers, mode: thread, claims: [RebuttalSourced, HumanVerified]}
  bm25-top10: {verifier: verifiers, mode: rag, retriever: bm25, k: 10}
release_venues: [oracle, thread]
"""


def test_a_tiny_release_is_imported_and_built_with_the_local_model(tmp_path):
    folder = write_release(tmp_path / "tiny", B3=[review_row(CLAIM_A, "Contradicted"),
                                                  review_row(CLAIM_B, "Supported", review="R2")])
    registry = tmp_path / "venues.yaml"
    registry.write_text("venues:\n")
    (tmp_path / "configurations.yaml").write_text(E2E_CONFIGURATIONS)
    env = cli_env(tmp_path / "lake", registry, fresh_home(tmp_path / "home"),
                  PEERIFY_CONFIGURATIONS=str(tmp_path / "configurations.yaml"))
    imported = peerify("import-release", str(folder), "--venue", VENUE, env=env, timeout=300)
    assert imported.returncode == 0, imported.stderr[-3000:]

    built = peerify("build", VENUE, env=env, timeout=900)

    assert built.returncode == 0, built.stderr[-3000:]
    lake = Lake(tmp_path / "lake")
    assert lake.read_table("chunk_embeddings", VENUE).height == lake.read_table("chunks", VENUE).height
    assert set(lake.read_table("retrieval_runs", VENUE)["retriever"]) >= {"bm25", "dense"}
    oracle = lake.read_table("predictions", f"oracle|{VENUE}")
    assert oracle.height == 2 and set(oracle["status"]) == {"ok"} and set(oracle["prompt_id"]) == {"verify"}
    thread = {r["claim_id"]: r for r in lake.read_table("predictions", f"thread|{VENUE}").iter_rows(named=True)}
    with_thread = claim_id_for("P1", "R1", CLAIM_A)
    assert set(thread) == {with_thread, claim_id_for("P1", "R2", CLAIM_B)}  # every review claim keeps its row
    assert thread[with_thread]["status"] == "ok" and thread[with_thread]["prompt_id"] == "label_rebuttal"
    assert thread[with_thread]["call_id"] and thread[with_thread]["tokens_in"] > 0
    assert thread[claim_id_for("P1", "R2", CLAIM_B)]["status"] == "no_thread"
    assert not (lake.root / "predictions" / f"bm25-top10|{VENUE}.parquet").exists()  # not a release default
    # nothing of the crawl side ran for the release venue
    assert not lake.table_path("raw_openreview_notes", VENUE).exists()
    assert not lake.table_path("claim_labels", VENUE).exists()

"""The citation half's bad inputs, asset by asset, through the real `verify_citations` job: one small snapshot venue
of three fpdf2 manuscripts, its library folder, a loopback scholarly server speaking Crossref, OpenAlex and Semantic
Scholar with faults, and a loopback OpenAI-protocol verifier. Every bad input of issue 20 is a named row with its
reason, and the rest of the venue completes:

* paper A (CITING) cites paper B of the same venue by its exact title [1], a DOI the services answer with another
  title [2] (its library file is encrypted), a DOI Crossref answers 429 before the record [3] (its library file has
  no text layer), a DOI OpenAlex answers 500 and Semantic Scholar with malformed JSON [4] (its library file is
  another paper), a library paper found by its arXiv id [5], and a marker "[9]" that matches no entry;
* paper B (CITED) has no references section;
* paper C (UNKNOWN_STYLE) has references in no known style, and a marker none of them carries.

A hanging service costs the asset SCHOLARLY_POLICY's 10 s timeout four times per entry and no venue option shortens
it, so the hang is tested on the client (the asset's own `ScholarlyClient`) with a short policy, on the entries the
venue's `bibliography` holds."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
import polars as pl
import pytest

from peerify_dagster.assets.steps.citations import entries_of
from peerify_dagster.definitions import build_resources
from peerify_dagster.domain.citations.metrics import STAGES
from peerify_dagster.domain.frames import rows_where
from peerify_dagster.resources.dagster_resources import VenueRegistryResource
from peerify_dagster.resources.lake import Lake
from peerify_dagster.resources.openreview import HttpPolicy
from peerify_dagster.resources.scholarly import ScholarlyClient
from tests import fixtures_pdf
from tests.citation_support import run_citation_job, write_citation_venue
from tests.fakes.loopback import FaultRule, RecordedRequest
from tests.fakes.openai_server import ScriptedOpenAIServer
from tests.fakes.scholarly_server import CorpusWork, FakeScholarlyServer
from tests.support import ALL_ASSETS
from tests.test_verification_assets import models_file

KEY = "citefaults"
CITING, CITED, UNKNOWN_STYLE = "CitingPapA", "CitedPaprB", "UnknStyleC"
CITED_TITLE = "Contrastive Pretraining of Citation Graph Encoders"
EVIDENCE_TITLE = "Sentence-Level Evidence for Citation Verification"
DRIFT, WINDOWS, GATED = "10.5555/drift.2019", "10.5555/windows.2020", "10.5555/gated.2021"
EVIDENCE_ARXIV = "2201.01234"
# The record the services hold under DRIFT: another paper than the one entry [2] names.
DRIFT_RECORD_TITLE = "Soil Bacteria Communities Under Drought Stress"

CITING_PDF = fixtures_pdf.citing_paper("Citation-Aware Retrieval for Scientific Claim Checking", (
    "Contrastive pretraining of citation graph encoders improves the retrieval of cited passages [1]. "
    "Earlier studies of claim drift reported the opposite trend [2, 3]. "
    "Gated attention was proposed for citation recommendation [4]. "
    "Sentence-level evidence makes citation verification more reliable [5]. "
    "A related effect was noted in a survey we could not find [9]. "
    "Gated models and the missing survey both report it [4, 9].",
    "We build on these results and evaluate on three benchmarks of scientific claims."), (
    f"[1] Bea Baker and Carl Chen. {CITED_TITLE}. In Proceedings of the Test Workshop, 2026.",
    f"[2] Dana Diaz. Measuring Claim Drift in Scholarly Citations. Journal of Citation Studies, 2019. doi:{DRIFT}",
    f"[3] Eli Evans and Fay Fox. Sentence Windows for Evidence Retrieval. Transactions on Retrieval, 2020. "
    f"doi:{WINDOWS}",
    f"[4] Gil Green. Gated Attention for Citation Recommendation. Retrieval Conference, 2021. doi:{GATED}",
    f"[5] Hal Hill. {EVIDENCE_TITLE}. arXiv:{EVIDENCE_ARXIV}, 2022."))
CITED_PDF = fixtures_pdf.citing_paper(CITED_TITLE, (
    "We pretrain a graph encoder on citation links with a contrastive objective. Pretraining improves the retrieval "
    "of cited passages by eleven points of recall on our benchmark. The encoder is trained for three epochs.",))
UNKNOWN_STYLE_PDF = fixtures_pdf.citing_paper("Notes on Verifying Citations by Hand", (
    "Manual checking of citations is slow and error prone [1]. We report what we learned.",), (
    "~~ ## @@ !! :: ;; %%.", "Lab wiki, 1987."))
EVIDENCE_PDF = fixtures_pdf.citing_paper(EVIDENCE_TITLE, (
    "Verifying a citation against sentence-level evidence of the cited paper makes the verdict more reliable than "
    "reading its abstract. Windows of three sentences were enough for most descriptive claims.",))
LIBRARY = {  # file name -> bytes: each named by the identifier of the entry it claims to be
    "10.5555_drift.2019.pdf": fixtures_pdf.encrypted_paper(),
    "10.5555_windows.2020.pdf": fixtures_pdf.image_only_paper(),
    "10.5555_gated.2021.pdf": fixtures_pdf.structured_paper(),  # "Grounded Verification of Reviewer Claims"
    f"{EVIDENCE_ARXIV}.pdf": EVIDENCE_PDF,
}
WORKS = (
    CorpusWork(DRIFT_RECORD_TITLE, (("Ida", "Ingram"),), 2019, doi=DRIFT),
    CorpusWork("Sentence Windows for Evidence Retrieval", (("Eli", "Evans"), ("Fay", "Fox")), 2020, doi=WINDOWS),
    CorpusWork("Gated Attention for Citation Recommendation", (("Gil", "Green"),), 2021, doi=GATED),
    CorpusWork(EVIDENCE_TITLE, (("Hal", "Hill"),), 2022, arxiv_id=EVIDENCE_ARXIV),
)
CROSSREF_LIMITED = f"/crossref/works/{WINDOWS}"
OPENALEX_FAILING = f"/openalex/works/doi:{GATED}"
S2_MALFORMED = f"/s2/graph/v1/paper/DOI:{GATED}"
FAULTS = (
    FaultRule(CROSSREF_LIMITED, "retry_after", retry_after=1),  # once, then the record
    FaultRule(OPENALEX_FAILING, "status", status=500, times=4),  # every try of one look-up (1 + 3 retries)
    FaultRule(S2_MALFORMED, "malformed_json"),
)
VERDICT = {"verdict": "Supported", "explanation": "The passage states the cited finding."}
TABLES = ("bibliography", "citances", "citance_enrichment", "reference_checks", "cited_papers", "cited_manuscripts",
          "citation_evidence", "citation_verdicts", "citation_metrics")


def entry(paper_id: str, index: int) -> str:
    return f"{paper_id}:r{index}"


def write_venue(folder: Path, base_urls: dict[str, str]) -> Path:
    """The venue's snapshot, its library folder, and a venues.yaml naming both and the citation options; returns the
    registry file."""
    citations = {"metadata": ["crossref", "openalex", "semantic_scholar"], "mailto": "tests@example.org",
                 "base_urls": base_urls, "library": "library", "resolve": ["library", "venue"], "retriever": "bm25",
                 "k": 2}
    return write_citation_venue(folder, KEY, {CITING: CITING_PDF, CITED: CITED_PDF, UNKNOWN_STYLE: UNKNOWN_STYLE_PDF},
                                citations, LIBRARY)




@dataclass
class Built:
    result: dg.ExecuteInProcessResult
    tables: dict[str, pl.DataFrame]  # as the first run left them
    scholarly: FakeScholarlyServer
    verifier_requests: int
    first_run_requests: list[RecordedRequest]
    registry: Path
    lake_root: Path
    instance: dg.DagsterInstance

    def rows(self, table: str, **where: Any) -> list[dict]:
        return rows_where(self.tables[table], **where)

    def one(self, table: str, **where: Any) -> dict:
        [row] = self.rows(table, **where)
        return row


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The venue built once by the `verify_citations` job; the scholarly server stays up for the tests."""
    folder = tmp_path_factory.mktemp("citation_faults")
    with FakeScholarlyServer(WORKS, FAULTS) as scholarly, \
            ScriptedOpenAIServer(responder=lambda request: json.dumps(VERDICT)) as verifier, \
            pytest.MonkeyPatch.context() as env:
        env.setenv("PEERIFY_MODELS_FILE", str(models_file(folder, verifier.base_url)))
        env.setenv("LOOPBACK_API_KEY", "test-key")
        registry = write_venue(folder, scholarly.base_urls)
        lake_root = folder / "lake"
        result, instance = run_citation_job(KEY, registry, lake_root)
        lake = Lake(lake_root)
        tables = {name: lake.read_table(name, KEY) for name in TABLES}
        yield Built(result, tables, scholarly, verifier.request_count, scholarly.requests, registry, lake_root,
                    instance)


# -- the run ---------------------------------------------------------------------------------------------------------
def test_the_run_completes_and_its_warnings_name_the_bad_rows(built):
    assert built.result.success, [event.step_key for event in built.result.all_events if event.is_step_failure]
    assert set(built.tables["bibliography"]["paper_id"]) == {CITING, CITED, UNKNOWN_STYLE}
    failed = {evaluation.check_name: evaluation for evaluation in built.result.get_asset_check_evaluations()
              if not evaluation.passed}
    assert set(failed) == {"every_entry_parsed", "markers_resolve", "no_suspicious_references", "cited_papers_found"}
    assert {evaluation.severity for evaluation in failed.values()} == {dg.AssetCheckSeverity.WARN}
    named = {name: evaluation.metadata["failing_ids"].value for name, evaluation in failed.items()}
    assert named == {"every_entry_parsed": [entry(UNKNOWN_STYLE, 1)],
                     "markers_resolve": [f"{CITING}:c5", f"{CITING}:c6", f"{UNKNOWN_STYLE}:c1"],
                     # r2 contradicts its record; r1 is known to no service asked (not_found)
                     "no_suspicious_references": [entry(CITING, 1), entry(CITING, 2)],
                     "cited_papers_found": [UNKNOWN_STYLE]}


# -- a manuscript without references, references in an unknown style, a marker matching no entry ----------------------
def test_a_manuscript_without_references_is_one_no_references_row(built):
    assert built.rows("bibliography", paper_id=CITED) == [built.one("bibliography", entry_id=f"{CITED}:none")]
    row = built.one("bibliography", paper_id=CITED)
    assert (row["parse_status"], row["parse_reason"], row["entry_index"]) == (
        "no_references", "no references section was found in the manuscript", None)
    for table in ("reference_checks", "cited_papers"):  # nothing to check or resolve, and no row pretends otherwise
        assert built.rows(table, paper_id=CITED) == []


def test_references_in_an_unknown_style_keep_their_rows_with_the_reason(built):
    rows = {row["raw_text"]: row for row in built.rows("bibliography", paper_id=UNKNOWN_STYLE)}
    assert list(rows) == ["~~ ## @@ !! :: ;; %%.", "Lab wiki, 1987."]
    garbage, dated = rows.values()
    assert (garbage["parse_status"], garbage["parse_reason"]) == (
        "unparsed", "no author, year or title could be told apart")
    assert (dated["parse_status"], dated["parse_reason"], dated["year"], dated["title"]) == (
        "partial", "no title found", 1987, None)
    for row in rows.values():  # checked and resolved as far as they can be, each with why not
        check = built.one("reference_checks", entry_id=row["entry_id"])
        assert (check["status"], check["reasons"]) == (
            "unvalidatable", ["the entry has no DOI, arXiv id or title to look up"])
        paper = built.one("cited_papers", entry_id=row["entry_id"])
        assert paper["status"] == "unresolved" and "venue: not_applicable (the entry has no title to look up)" in \
            paper["reason"]
    # The manuscript's own marker names none of them (they carry no label): kept, with its key.
    [citance] = built.rows("citances", paper_id=UNKNOWN_STYLE)
    assert (citance["resolution"], citance["entry_ids"]) == ("none", [])
    assert [(m["text"], m["unresolved_keys"]) for m in citance["markers"]] == [("[1]", ["1"])]


def test_a_marker_matching_no_entry_keeps_its_key_and_the_sentence_the_keys_it_resolves(built):
    alone = built.one("citances", citance_id=f"{CITING}:c5")
    assert alone["text"] == "A related effect was noted in a survey we could not find [9]."
    assert (alone["resolution"], alone["entry_ids"]) == ("none", [])
    assert [(m["text"], m["entry_ids"], m["unresolved_keys"]) for m in alone["markers"]] == [("[9]", [], ["9"])]
    beside = built.one("citances", citance_id=f"{CITING}:c6")
    assert (beside["resolution"], beside["entry_ids"]) == ("some", [entry(CITING, 4)])
    assert [(m["text"], m["unresolved_keys"]) for m in beside["markers"]] == [("[4, 9]", ["9"])]
    # No pair is made for the key that names nothing; the resolved key of the same sentence is judged.
    assert built.rows("citation_verdicts", citance_id=f"{CITING}:c5") == []
    assert [row["entry_id"] for row in built.rows("citation_verdicts", citance_id=f"{CITING}:c6")] == [entry(CITING, 4)]


# -- cited papers -----------------------------------------------------------------------------------------------------
def test_an_entry_naming_a_manuscript_of_the_venue_resolves_to_it_and_is_judged(built):
    paper = built.one("cited_papers", entry_id=entry(CITING, 1))
    assert (paper["status"], paper["source"], paper["locator"], paper["cited_key"]) == (
        "resolved", "venue", CITED, f"forum:{CITED}")
    [evidence] = built.rows("citation_evidence", entry_id=entry(CITING, 1))
    assert evidence["status"] == "ok" and evidence["passage_id"].startswith(f"forum:{CITED}:")
    assert "eleven points of recall" in evidence["text"]  # the venue manuscript's own parse, cut into windows
    verdict = built.one("citation_verdicts", entry_id=entry(CITING, 1))
    assert (verdict["status"], verdict["label"], verdict["explanation"]) == (
        "ok", "Supported", VERDICT["explanation"])
    assert verdict["call_id"] and verdict["passage_ids"] == [evidence["passage_id"]]


@pytest.mark.parametrize(("index", "file_name", "outcome", "said"), [
    (2, "10.5555_drift.2019.pdf", "encrypted", "the PDF needs a password to open"),
    (3, "10.5555_windows.2020.pdf", "no_text_layer", "none of its 1 page(s) holds text"),
    (4, "10.5555_gated.2021.pdf", "wrong_paper",
     "0.00 of the title 'Gated Attention for Citation Recommendation' is on its first page"),
])
def test_a_cited_pdf_that_cannot_be_used_leaves_the_entry_rejected_naming_why(built, index, file_name, outcome, said):
    paper = built.one("cited_papers", entry_id=entry(CITING, index))
    assert (paper["status"], paper["source"], paper["locator"], paper["cited_key"]) == (
        "rejected", "library", file_name, None)
    assert f"library {file_name}: {outcome} (found by doi_in_file_name; " in paper["reason"] and said in paper["reason"]
    # the next source was tried all the same
    assert [(a["source"], a["outcome"]) for a in paper["attempts"]] == [("library", outcome), ("venue", "no_match")]


def test_only_the_right_cited_paper_is_stored_and_parsed(built):
    paper = built.one("cited_papers", entry_id=entry(CITING, 5))
    assert (paper["status"], paper["source"], paper["locator"]) == ("resolved", "library", f"{EVIDENCE_ARXIV}.pdf")
    [stored] = built.tables["cited_manuscripts"].to_dicts()
    assert stored["cited_key"] == paper["cited_key"] == f"sha256:{paper['pdf_sha256']}"
    assert stored["blocks"][0]["text"] == EVIDENCE_TITLE
    # the refused PDFs were never written to the lake
    assert [path.name for path in (built.lake_root / "cited_pdfs").iterdir()] == [f"{paper['pdf_sha256']}.pdf"]
    assert built.one("citation_verdicts", entry_id=entry(CITING, 5))["status"] == "ok"


# -- metadata services ------------------------------------------------------------------------------------------------
def test_a_doi_whose_record_has_another_title_is_suspicious_with_the_evidence(built):
    check = built.one("reference_checks", entry_id=entry(CITING, 2))
    assert (check["status"], check["matched_title"], check["errors"]) == ("suspicious", DRIFT_RECORD_TITLE, [])
    assert check["reasons"][0] == (
        f"title differs from crossref's record for doi {DRIFT}: 'Measuring Claim Drift in Scholarly Citations' vs "
        f"'{DRIFT_RECORD_TITLE}' (similarity 0.31)")


def test_a_429_is_asked_again_and_the_entry_validated(built):
    asked = [(r.status, r.fault) for r in built.first_run_requests if r.path == CROSSREF_LIMITED]
    assert asked == [(429, "retry_after"), (200, None)]
    check = built.one("reference_checks", entry_id=entry(CITING, 3))
    assert (check["status"], check["matched_service"], check["errors"]) == ("validated", "crossref", [])


def test_a_500_and_malformed_json_are_named_per_service_and_the_entry_still_checked(built):
    assert [r.status for r in built.first_run_requests if r.path == OPENALEX_FAILING] == [500] * 4
    check = built.one("reference_checks", entry_id=entry(CITING, 4))
    assert (check["status"], check["matched_service"]) == ("validated", "crossref")
    openalex, semantic_scholar = check["errors"]
    assert openalex == "openalex: HTTP 500 after 4 tries"
    assert semantic_scholar.startswith("semantic_scholar: malformed JSON (") and semantic_scholar.endswith(" bytes)")
    assert check["services"] == ["crossref", "openalex", "semantic_scholar"]


def test_metadata_answers_are_cached_and_a_rebuild_asks_again_only_what_failed(built):
    asked_before = len(built.scholarly.requests)
    result = dg.materialize(ALL_ASSETS, selection=["reference_checks"], instance=built.instance, partition_key=KEY,
                            resources=build_resources(str(built.lake_root),
                                                      venue_registry=VenueRegistryResource(path=str(built.registry))),
                            raise_on_error=False)
    assert result.success
    asked_again = built.scholarly.requests[asked_before:]
    # Every answer of the first build came from the cache; the two failures (not cached) were asked once more.
    assert sorted((r.path, r.status) for r in asked_again) == [(OPENALEX_FAILING, 200), (S2_MALFORMED, 200)]
    rebuilt = {row["entry_id"]: row for row in Lake(built.lake_root).read_table("reference_checks", KEY).to_dicts()}
    first = {row["entry_id"]: row for row in built.tables["reference_checks"].to_dicts()}
    assert rebuilt[entry(CITING, 4)]["errors"] == [] and rebuilt[entry(CITING, 4)]["status"] == "validated"
    assert {k: v for k, v in rebuilt.items() if k != entry(CITING, 4)} == \
        {k: v for k, v in first.items() if k != entry(CITING, 4)}


def test_a_hanging_service_is_named_per_entry_and_the_other_services_still_answer(built):
    """On the client: the asset's 10 s timeout is not a venue option (see the module docstring)."""
    entries = entries_of(built.tables["bibliography"])[CITING]
    hanging = [FaultRule(path, "hang", hang_seconds=5.0, times=None) for path in (
        "/s2/graph/v1/paper/search", f"/s2/graph/v1/paper/DOI:{DRIFT}", f"/s2/graph/v1/paper/DOI:{WINDOWS}",
        f"/s2/graph/v1/paper/DOI:{GATED}", f"/s2/graph/v1/paper/arXiv:{EVIDENCE_ARXIV}")]
    with FakeScholarlyServer(WORKS, hanging) as server:
        client = ScholarlyClient(["crossref", "semantic_scholar"], server.base_urls, cache_dir=None,
                                 policy=HttpPolicy(timeout_s=0.3, retries=1, backoff_s=0.05, backoff_max_s=0.1),
                                 requests_per_second={"semantic_scholar": 50.0})
        checks = client.check_all(entries)
    timed_out = "semantic_scholar: timed out after 0.3 s, 2 tries"
    skipped = "semantic_scholar: not asked: its last 3 requests timed out"
    # Several lookups are under way at once: those started before the third timeout time out too, the rest are not
    # asked; every entry names which.
    errors = [check.errors for check in checks]
    assert errors.count([timed_out]) >= 3 and errors.count([timed_out]) + errors.count([skipped]) == len(checks)
    assert [check.status for check in checks[1:4]] == ["suspicious", "validated", "validated"]  # Crossref answered


# -- verdicts and figures ---------------------------------------------------------------------------------------------
def test_a_pair_without_its_cited_paper_is_not_enough_information_without_a_call(built):
    verdicts = built.tables["citation_verdicts"]
    assert verdicts.height == 6 and set(verdicts["verifier"]) == {"loopback"}
    for row in verdicts.filter(pl.col("status") != "ok").to_dicts():
        paper = built.one("cited_papers", entry_id=row["entry_id"])
        assert paper["status"] == "rejected"
        assert (row["status"], row["label"], row["call_id"], row["tokens_in"], row["passage_ids"]) == (
            "no_cited_paper", "Not Enough Information", None, 0, [])
        assert row["reason"] == paper["reason"]
    called = verdicts.filter(pl.col("status") == "ok")
    assert sorted(called["entry_id"]) == [entry(CITING, 1), entry(CITING, 5)]
    assert built.verifier_requests == called.height  # one call per judged pair, none for the others


def test_citation_metrics_have_every_stage(built):
    metrics = built.tables["citation_metrics"]
    assert set(metrics["stage"]) == set(STAGES)
    figures = {row["metric"]: (row["value"], row["n"]) for row in metrics.to_dicts()}
    assert figures["manuscripts without references"] == (1.0, 3)
    assert figures["resolved share"] == (pytest.approx(2 / 7), 7)  # of the 7 entries, B and the library paper
    assert figures["no cited paper share (loopback, windows)"] == (pytest.approx(4 / 6), 6)

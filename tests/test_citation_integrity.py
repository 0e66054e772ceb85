"""The citation-integrity view: a venue's submissions ranked by references no metadata source knows (`not_found`) and
references a record contradicts (`suspicious`), every entry with each source's answer, and the CSV.

First the pure shaping (domain/citations/integrity.py) on hand-built bibliography and reference-check frames: the
ranking and its ties, a venue no source was asked for, every source's answer summarised (records, none, a failure,
unreadable evidence) and the CSV (RFC 4180, formula cells defused). Then the real thing: a small snapshot venue of
fpdf2 manuscripts built by the `verify_citations` job against the loopback Crossref / OpenAlex fake (one service
failing for one entry), its `citation_integrity` table and metadata, the page in a real browser (Debian's chromium
driven by Playwright) reached from the venue's overview, opened, filtered and downloaded, the CSV through Starlette's
TestClient, and the pages' access rules. The DuckDB catalog view of the table comes from asset_graph.json, which the
lead regenerates; it is not tested here."""

from __future__ import annotations

import csv
import html
import io
import json

import dagster as dg
import polars as pl
import pytest
from starlette.testclient import TestClient

from peerify_dagster.assets.citations import BIBLIOGRAPHY_SCHEMA, REFERENCE_CHECK_SCHEMA
from peerify_dagster.domain.citations.integrity import (
    ENTRY_SCHEMA,
    INTEGRITY_SCHEMA,
    NO_SOURCE_ASKED,
    UNREADABLE_EVIDENCE,
    integrity_csv,
    integrity_markdown,
    source_answers,
    venue_integrity,
)
from peerify_dagster.resources.lake import Lake
from peerify_dagster.web.app import create_app
from peerify_dagster.web.security import BLIND_MESSAGE
from tests import fixtures_pdf
from tests.citation_support import run_citation_job, write_citation_venue
from tests.fakes.loopback import FaultRule
from tests.fakes.scholarly_server import CorpusWork, FakeScholarlyServer
from tests.test_web_roles import annotator
from tests.web_support import live_server

VENUE = "hand"


# -- the pure view on hand-built frames ------------------------------------------------------------------------------
def bib(paper_id: str, index: int | None, title: str | None = None, authors: tuple[str, ...] = ("Ann Author",),
        year: int | None = 2020, raw: str | None = None) -> dict:
    if index is None:  # a manuscript without a references section
        return {"venue": VENUE, "paper_id": paper_id, "entry_id": f"{paper_id}:none", "parse_status": "no_references",
                "authors": [], "surnames": [], "field_sources": [], "regions": []}
    return {"venue": VENUE, "paper_id": paper_id, "entry_id": f"{paper_id}:r{index}", "entry_index": index,
            "raw_text": raw or f"{', '.join(authors)}. {title}. {year}.", "authors": list(authors),
            "surnames": [name.split()[-1] for name in authors], "title": title, "year": year,
            "parse_status": "parsed", "field_sources": [], "regions": []}


def check(entry_id: str, status: str, services: tuple[str, ...] = ("crossref", "openalex"),
          evidence: dict | str | None = None, reasons: tuple[str, ...] = ("a reason",), **matched) -> dict:
    if evidence is None:
        evidence = {service: {"error": None, "records": []} for service in services}
    return {"venue": VENUE, "paper_id": entry_id.split(":")[0], "entry_id": entry_id, "status": status,
            "reasons": list(reasons), "services": list(services), "errors": [], "matched_authors": [],
            "open_access_urls": [], "evidence_json": evidence if isinstance(evidence, str) else json.dumps(evidence),
            **matched}


def frames(bibliography: list[dict], checks: list[dict]) -> tuple[pl.DataFrame, pl.DataFrame]:
    return (pl.DataFrame(bibliography, schema=BIBLIOGRAPHY_SCHEMA),
            pl.DataFrame(checks, schema=REFERENCE_CHECK_SCHEMA))


def record(title: str | None, similarity: float | None) -> dict:
    return {"found_by": "title", "title": title, "authors": [], "year": 2020, "title_similarity": similarity}


def test_submissions_rank_by_not_found_then_suspicious_then_paper_id():
    bibliography, checks = frames(
        [bib("P_b", 1, "One"), bib("P_b", 2, "Two"), bib("P_a", 1, "Three"), bib("P_a", 2, "Four"),
         bib("P_c", 1, "Five"), bib("P_c", 2, "Six"), bib("P_c", 3, "Seven"), bib("P_d", None), bib("P_e", 1, "Eight")],
        [check("P_b:r1", "not_found"), check("P_b:r2", "validated"),
         check("P_a:r1", "not_found"), check("P_a:r2", "suspicious"),
         check("P_c:r1", "suspicious"), check("P_c:r2", "suspicious"), check("P_c:r3", "unvalidatable"),
         check("P_e:r1", "validated")])
    submissions = pl.DataFrame({"paper_id": ["P_a", "P_b", "P_c"], "title": ["Paper A", "Paper B", None]})
    integrity = venue_integrity(VENUE, bibliography, checks, submissions)
    ranking = integrity.ranking
    assert ranking.schema == pl.Schema(INTEGRITY_SCHEMA) and integrity.entries.schema == pl.Schema(ENTRY_SCHEMA)
    # P_a and P_b tie on not_found: P_a's suspicious entry puts it first; P_d and P_e tie on everything: paper id
    assert ranking.select("rank", "paper_id").rows() == [(1, "P_a"), (2, "P_b"), (3, "P_c"), (4, "P_d"), (5, "P_e")]
    first = ranking.row(0, named=True)
    assert first == {"venue": VENUE, "paper_id": "P_a", "title": "Paper A", "entries": 2, "not_found": 1,
                     "suspicious": 1, "unvalidatable": 0, "validated": 0, "checked": True, "rank": 1}
    no_references = ranking.filter(pl.col("paper_id") == "P_d").row(0, named=True)
    assert (no_references["entries"], no_references["checked"], no_references["title"]) == (0, False, None)
    assert ranking.filter(pl.col("paper_id") == "P_c")["suspicious"].item() == 2
    # entries: by their paper's rank, each paper's worst first
    assert integrity.entries["entry_id"].to_list() == ["P_a:r1", "P_a:r2", "P_b:r1", "P_b:r2", "P_c:r1", "P_c:r2",
                                                       "P_c:r3", "P_e:r1"]
    assert integrity.flagged == 5 and integrity.any_source_asked
    # the status filter keeps the submissions with such an entry, and only those entries
    rows = integrity.submission_rows("suspicious")
    assert [(row["paper_id"], [e["entry_id"] for e in row["entries_shown"]]) for row in rows] == [
        ("P_a", ["P_a:r2"]), ("P_c", ["P_c:r1", "P_c:r2"])]
    assert [row["paper_id"] for row in integrity.submission_rows()] == ["P_a", "P_b", "P_c", "P_d", "P_e"]
    assert integrity.submission_rows("nonsense") == []
    top = integrity_markdown(ranking, limit=2).splitlines()
    assert len(top) == 4 and top[0] == "| rank | paper_id | title | entries | not_found | suspicious | unvalidatable " \
                                       "| validated |" and top[2].startswith("| 1 | P_a | Paper A | 2 | 1 | 1 |")


def test_a_venue_no_source_was_asked_for_is_unchecked_and_an_entry_without_a_check_keeps_its_row():
    bibliography, checks = frames(
        [bib("P1", 1, "Alpha"), bib("P1", 2, "Beta"), bib("P2", 1, "Gamma")],
        [check("P1:r1", "unvalidatable", services=(), evidence={},
               reasons=("no metadata service is configured",)),
         check("P2:r1", "unvalidatable", services=(), evidence={},
               reasons=("no metadata service is configured",))])
    integrity = venue_integrity(VENUE, bibliography, checks)
    assert not integrity.any_source_asked and integrity.flagged == 0
    assert integrity.ranking["checked"].to_list() == [False, False]
    assert integrity.ranking["unvalidatable"].to_list() == [1, 1]
    unchecked = integrity.entries.filter(pl.col("entry_id") == "P1:r2").row(0, named=True)
    assert (unchecked["status"], unchecked["answers"], unchecked["sources"]) == (None, [], [])
    assert integrity.entries.filter(pl.col("entry_id") == "P1:r1")["answers"].item().to_list() == []
    assert "no source was asked" in NO_SOURCE_ASKED and "citations.metadata" in NO_SOURCE_ASKED


def test_every_sources_answer_is_summarised_in_one_string_in_the_order_asked():
    evidence = {
        "crossref": {"error": None, "records": [record("Deep Nets for Cats", 0.31),
                                                record("Deep Nets for Dogs", 0.42)]},
        "openalex": {"error": "HTTP 503", "records": []},
        "index": {"error": None, "records": []},
        "semantic_scholar": {"error": None, "records": [record(None, None)]},
    }
    assert source_answers("P1:r1", ["crossref", "openalex", "index", "semantic_scholar"], json.dumps(evidence)) == [
        "crossref: 2 records, closest 'Deep Nets for Dogs' (0.42)",
        "openalex: failed: HTTP 503",
        "index: no record",
        "semantic_scholar: 1 record, closest an untitled record",
    ]
    # a source asked but absent from the evidence, and one the evidence holds that the row does not list
    assert source_answers("P1:r1", ["crossref"], json.dumps({"index": {"error": None, "records": []}})) == [
        "crossref: no answer recorded", "index: no record"]


@pytest.mark.parametrize(("evidence", "why"), [
    ("{not json", "Expecting property name"),
    ("[1, 2]", "evidence_json is list, not an object"),
    (json.dumps({"crossref": "yes"}), "the answer of crossref is str, not an object"),
    (json.dumps({"crossref": {"error": None, "records": {"title": "x"}}}), "the records of crossref are not a list"),
])
def test_unreadable_evidence_names_the_entry_and_why_and_the_rest_is_shown(evidence, why):
    bibliography, checks = frames([bib("P1", 1, "Alpha"), bib("P1", 2, "Beta")],
                                  [check("P1:r1", "not_found", evidence=evidence), check("P1:r2", "validated")])
    entries = venue_integrity(VENUE, bibliography, checks).entries
    [answer] = entries.filter(pl.col("entry_id") == "P1:r1")["answers"].item().to_list()
    assert answer.startswith(f"{UNREADABLE_EVIDENCE} of P1:r1: ") and why in answer
    assert entries.filter(pl.col("entry_id") == "P1:r2")["answers"].item().to_list() == [
        "crossref: no record", "openalex: no record"]


def test_the_csv_is_rfc_4180_and_defuses_formula_cells():
    bibliography, checks = frames(
        [bib("P1", 1, "=HYPERLINK(\"http://x\")", authors=("+Plus Sign", "B. Other"),
             raw='-1, "quoted", and\na line break'),
         bib("P1", 2, "@SUM(A1)", year=None)],
        [check("P1:r1", "not_found", reasons=("no record of its title in any source asked", "crossref: no record")),
         check("P1:r2", "suspicious", matched_title="Another work", matched_doi="10.1/x")])
    entries = venue_integrity(VENUE, bibliography, checks).entries
    text = integrity_csv(entries)
    assert text.endswith("\r\n") and text.split("\r\n")[0] == ",".join(ENTRY_SCHEMA)
    rows = list(csv.DictReader(io.StringIO(text, newline="")))
    assert [row["entry_id"] for row in rows] == ["P1:r1", "P1:r2"]
    first, second = rows
    assert first["title"] == "'=HYPERLINK(\"http://x\")" and second["title"] == "'@SUM(A1)"
    assert first["first_author"] == "'+Plus Sign"
    assert first["raw_text"] == "'-1, \"quoted\", and\na line break"  # quoted, the comma, quote and break kept
    assert first["reasons"] == "no record of its title in any source asked\ncrossref: no record"
    assert first["sources"] == "crossref\nopenalex"
    assert first["answers"] == "crossref: no record\nopenalex: no record"
    assert (second["year"], second["matched_title"], second["matched_doi"]) == ("", "Another work", "10.1/x")
    assert integrity_csv(entries.clear()) == ",".join(ENTRY_SCHEMA) + "\r\n"


# -- a venue built by the verify_citations job ----------------------------------------------------------------------
KEY = "integrity"
FABRICATING, DRIFTING, NO_REFS = "FabPaperAA", "DriftPapBB", "NoRefPapCC"
KNOWN_DOI, DRIFT_DOI, GONE_DOI = "10.18653/v1/N18-3011", "10.5555/drift.2019", "10.5555/gone.2020"
KNOWN_TITLE = "Construction of the Literature Graph in Semantic Scholar"
FABRICATED = ("Quantum Gradient Folding for Sparse Tabular Yak Herding",
              "Hyperbolic Lattice Priors for Unsupervised Glacier Poetry",
              "Recursive Moth Attention Improves Submarine Translation")
WORKS = (
    CorpusWork(KNOWN_TITLE, (("Waleed", "Ammar"), ("Dirk", "Groeneveld")), 2018, doi=KNOWN_DOI),
    CorpusWork("Soil Bacteria Communities Under Drought Stress", (("Ida", "Ingram"),), 2019, doi=DRIFT_DOI),
    CorpusWork("Sparse Windows for Retrieval Under Budget", (("Kim", "Kato"),), 2020, doi=GONE_DOI,
               services=frozenset({"openalex"})),
)
# OpenAlex, the only source holding GONE_DOI, refuses its look-up (403: not retried, so the build stays fast), and
# Crossref knows nothing of it: a failed source is no evidence of fabrication, so the entry is unvalidatable.
FAULTS = (FaultRule(f"/openalex/works/doi:{GONE_DOI}", "status", status=403, times=None),)
PAPERS = {
    FABRICATING: fixtures_pdf.citing_paper("Citation Screening at Venue Scale", (
        "Prior work folds gradients [1] and lattices [2]. The literature graph is well known [3].",), (
        f"[1] Zed Quorra and Yuli Banx. {FABRICATED[0]}. Journal of Imaginary Results, 2021.",
        f"[2] Pim Oskarsson. {FABRICATED[1]}. Proceedings of Nowhere, 2022.",
        f"[3] Waleed Ammar and Dirk Groeneveld. {KNOWN_TITLE}. In Proceedings of NAACL, 2018. doi:{KNOWN_DOI}")),
    DRIFTING: fixtures_pdf.citing_paper("Claim Drift in Scholarly Citations", (
        "Moths attend recursively [1]. Claims drift [2]. Windows help [3].",), (
        f"[1] Ola Vantrepp. {FABRICATED[2]}. Transactions on Fiction, 2023.",
        f"[2] Dana Diaz. Measuring Claim Drift in Scholarly Citations. Journal of Citation Studies, 2019. "
        f"doi:{DRIFT_DOI}",
        f"[3] Kim Kato. Sparse Windows for Retrieval Under Budget. Retrieval Letters, 2020. doi:{GONE_DOI}")),
    NO_REFS: fixtures_pdf.citing_paper("Notes Without a Reference List", (
        "We report what we learned without citing anyone.",)),
}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The venue built once by the `verify_citations` job against the loopback metadata services; its lake."""
    folder = tmp_path_factory.mktemp("citation_integrity")
    with FakeScholarlyServer(WORKS, FAULTS) as scholarly:
        citations = {"metadata": ["crossref", "openalex"], "mailto": "tests@example.org",
                     "base_urls": scholarly.base_urls, "retriever": "bm25"}
        registry = write_citation_venue(folder, KEY, PAPERS, citations)
        result, _ = run_citation_job(KEY, registry, folder / "lake")
    assert result.success, [event.step_key for event in result.all_events if event.is_step_failure]
    return result, folder / "lake"


@pytest.fixture(scope="module")
def lake_root(built):
    return built[1]


def test_the_asset_ranks_the_venue_and_says_so_in_its_metadata(built):
    result, root = built
    ranking = Lake(root).read_table("citation_integrity", KEY)
    assert ranking.select("rank", "paper_id", "entries", "not_found", "suspicious", "unvalidatable", "validated",
                          "checked").rows() == [
        (1, FABRICATING, 3, 2, 0, 0, 1, True),
        (2, DRIFTING, 3, 1, 1, 1, 0, True),
        (3, NO_REFS, 0, 0, 0, 0, 0, False)]
    assert ranking["title"].to_list() == [f"Paper {paper}" for paper in (FABRICATING, DRIFTING, NO_REFS)]
    [materialised] = [event.event_specific_data.materialization for event in result.all_events
                      if event.is_step_materialization
                      and event.event_specific_data.materialization.asset_key == dg.AssetKey("citation_integrity")]
    metadata = materialised.metadata
    assert metadata["by_status"].value == {"not_found": 3, "suspicious": 1, "unvalidatable": 1, "validated": 1}
    counts = (metadata["submissions"].value, metadata["entries"].value, metadata["submissions_flagged"].value)
    assert counts == (3, 6, 2) and metadata["any_source_asked"].value is True
    assert f"| 1 | {FABRICATING} | Paper {FABRICATING} | 3 | 2 | 0 | 0 | 1 |" in metadata["top"].value
    described = {column.name: column.description for column in metadata["dagster/column_schema"].schema.columns}
    assert list(described) == list(INTEGRITY_SCHEMA) and all(described.values())
    assert described["rank"].startswith("Rank of the submission")


def test_the_csv_has_every_entry_with_each_sources_answer(lake_root):
    with TestClient(create_app(lake_root, token=None, allowed_hosts=frozenset({"testserver"}))) as client:
        answer = client.get(f"/venues/{KEY}/citation-integrity.csv")
        suspicious = client.get(f"/venues/{KEY}/citation-integrity.csv?status=suspicious")
        missing = client.get("/venues/nowhere/citation-integrity.csv")
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/csv")
    assert answer.headers["content-disposition"] == f'attachment; filename="{KEY}-citation-integrity.csv"'
    rows = list(csv.DictReader(io.StringIO(answer.text, newline="")))
    assert [(row["paper_id"], row["status"]) for row in rows] == [
        (FABRICATING, "not_found"), (FABRICATING, "not_found"), (FABRICATING, "validated"),
        (DRIFTING, "not_found"), (DRIFTING, "suspicious"), (DRIFTING, "unvalidatable")]
    fabricated = next(row for row in rows if row["title"] == FABRICATED[0])
    assert fabricated["answers"].splitlines() == ["crossref: no record", "openalex: no record"]
    assert fabricated["sources"].splitlines() == ["crossref", "openalex"]
    gone = next(row for row in rows if row["status"] == "unvalidatable")
    assert gone["answers"].splitlines()[1].startswith("openalex: failed: HTTP 403")
    drift = next(row for row in rows if row["status"] == "suspicious")
    assert drift["matched_doi"] == DRIFT_DOI and "title differs" in drift["reasons"]
    assert "crossref: 1 record, closest 'Soil Bacteria Communities Under Drought Stress'" in drift["answers"]
    assert suspicious.headers["content-disposition"].endswith('-suspicious.csv"')
    assert [row["entry_id"] for row in csv.DictReader(io.StringIO(suspicious.text, newline=""))] == [
        drift["entry_id"]]
    assert missing.status_code == 404


def test_the_page_ranks_opens_filters_and_downloads_in_a_real_browser(lake_root, browser_page, tmp_path):
    page = browser_page
    with live_server(lake_root) as server:
        page.goto(f"{server.url}/venues/{KEY}")
        page.click("[data-testid=citation-integrity]")
        page.wait_for_selector("[data-testid=submission]")
        submissions = page.locator("[data-testid=submission]")
        assert [submissions.nth(i).get_attribute("data-paper-id") for i in range(submissions.count())] == [
            FABRICATING, DRIFTING, NO_REFS]
        assert page.locator("[data-testid=integrity-note]").count() == 0  # sources were asked, entries flagged
        first = submissions.nth(0)
        assert not first.locator("[data-testid=entries]").is_visible()
        first.locator("summary").click()
        entries = first.locator("[data-testid=entries] tr[data-entry-id]")
        assert entries.first.is_visible()
        assert [entries.nth(i).get_attribute("data-status") for i in range(3)] == ["not_found", "not_found",
                                                                                   "validated"]
        assert first.locator("[data-testid=entry-status]").first.inner_text() == "not_found"
        assert "crossref: no record" in first.locator("[data-testid=answers]").first.inner_text()
        # the status filter swaps the results in place and keeps the choice in the address
        page.evaluate("window.notReloaded = true")
        page.select_option("select[name=status]", "unvalidatable")
        page.wait_for_function("document.querySelectorAll('[data-testid=submission]').length === 1")
        assert page.evaluate("window.notReloaded") is True and page.url.endswith("status=unvalidatable")
        shown = page.locator("[data-testid=submission]")
        assert shown.get_attribute("data-paper-id") == DRIFTING
        shown.locator("summary").click()
        assert "openalex: failed: HTTP 403" in shown.locator("[data-testid=answers]").inner_text()
        with page.expect_download() as download:
            page.goto(f"{server.url}/venues/{KEY}")
            page.click("[data-testid=citation-integrity]")
            page.click("[data-testid=integrity-csv]")
        saved = tmp_path / "integrity.csv"
        download.value.save_as(saved)
        assert download.value.suggested_filename == f"{KEY}-citation-integrity.csv"
        assert len(list(csv.DictReader(io.StringIO(saved.read_text(), newline="")))) == 6
        # the citance browser links here too
        page.goto(f"{server.url}/venues/{KEY}/citances")
        assert page.locator("[data-testid=citation-integrity]").get_attribute("href") == \
            f"/venues/{KEY}/citation-integrity"


def test_the_integrity_pages_are_the_maintainers(lake_root):
    with live_server(lake_root) as server:
        blind = annotator(server, "Cy")
        for path in (f"/venues/{KEY}/citation-integrity", f"/venues/{KEY}/citation-integrity.csv"):
            answer = blind.get(path)
            assert answer.status_code == 403 and BLIND_MESSAGE in html.unescape(answer.text), path
            assert "not_found" not in answer.text
        assert server.client().get(f"/venues/{KEY}/citation-integrity").status_code == 200


# -- the page's plain sentences, on a lake written by hand ----------------------------------------------------------
def write_lake(root, bibliography: list[dict], checks: list[dict]) -> None:
    lake = Lake(root)
    tables = frames(bibliography, checks)
    lake.write_table("bibliography", VENUE, tables[0])
    lake.write_table("reference_checks", VENUE, tables[1])
    lake.write_table("submissions", VENUE, pl.DataFrame({"paper_id": ["P1"], "title": ["Paper one"]}))


@pytest.mark.parametrize(("checks", "sentence"), [
    ([check("P1:r1", "unvalidatable", services=(), evidence={}, reasons=("no metadata service is configured",))],
     f"For this venue {NO_SOURCE_ASKED}."),
    ([check("P1:r1", "validated")], "No reference is not_found or suspicious"),
])
def test_the_page_says_plainly_when_no_source_was_asked_or_nothing_is_flagged(tmp_path, checks, sentence):
    write_lake(tmp_path / "lake", [bib("P1", 1, "Alpha")], checks)
    with TestClient(create_app(tmp_path / "lake", token=None, allowed_hosts=frozenset({"testserver"}))) as client:
        page = client.get(f"/venues/{VENUE}/citation-integrity")
    assert page.status_code == 200
    assert sentence in html.unescape(page.text)
    assert 'data-paper-id="P1"' in page.text

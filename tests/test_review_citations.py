"""Reviewers' own citations: detection on hand-written review sentences (domain/citations/review_citations.py), the
match against the submission's own entries, and the two assets (assets/review_citations.py) through the real
`verify_citations` job on a small snapshot venue of three fpdf2 manuscripts with reviews, a loopback scholarly server
and a loopback OpenAI-protocol verifier; then the claim page showing a review's cited works.

The venue: paper A (CITING) cites paper B (CITED) by its exact title [1] and an outside work [2]; paper C (EVIDENCE)
is cited by nobody. A's review cites B as "Baker and Chen (2026)" (the entry [1] of A, resolved to B), C by its quoted
title (resolved to the venue's manuscript C), a DOI the services know, a DOI they do not and an arXiv id; C's review
quotes C's own title (the reviewed paper is never its own cited work)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import dagster as dg
import polars as pl
import pytest

from peerify_dagster.assets.claims import REVIEW_CLAIM_SCHEMA
from peerify_dagster.definitions import build_resources
from peerify_dagster.domain.citations.entries import PARSED, ParsedEntry
from peerify_dagster.domain.citations.options import CitationOptions, CitationOptionsError
from peerify_dagster.domain.citations.review_citations import (
    ARXIV,
    AUTHOR_YEAR,
    DOI,
    TITLE,
    find_review_citations,
    match_paper_entry,
)
from peerify_dagster.domain.claim_view import ClaimTables, claim_detail
from peerify_dagster.domain.columns import column_description
from peerify_dagster.domain.frames import rows_where
from peerify_dagster.domain.retrieval import QUERY_SCHEMA
from peerify_dagster.resources.dagster_resources import VenueRegistryResource
from peerify_dagster.resources.lake import Lake
from tests import fixtures_pdf
from tests.citation_support import run_citation_job, write_citation_venue
from tests.fakes.openai_server import ScriptedOpenAIServer
from tests.fakes.scholarly_server import CorpusWork, FakeScholarlyServer
from tests.notes_factory import note
from tests.support import ALL_ASSETS
from tests.test_citation_assets import CITED_PDF, CITED_TITLE, EVIDENCE_PDF, EVIDENCE_TITLE
from tests.test_verification_assets import models_file
from tests.web_support import live_server


# -- detection --------------------------------------------------------------------------------------------------------
def _found(text: str) -> list[tuple[str, str, str]]:
    return [(c.kind, c.key, c.text) for c in find_review_citations(text)]


@pytest.mark.parametrize(("text", "expected"), [
    ("This was shown in Smith et al. 2020 already.", [(AUTHOR_YEAR, "smith|2020", "Smith et al. 2020")]),
    ("Smith et al. (2020) report the opposite.", [(AUTHOR_YEAR, "smith|2020", "Smith et al. (2020)")]),
    ("Prior work does it (Smith and Lee, 2019; Wu 2021a).",
     [(AUTHOR_YEAR, "smith|2019", "(Smith and Lee, 2019; Wu 2021a)"),
      (AUTHOR_YEAR, "wu|2021a", "(Smith and Lee, 2019; Wu 2021a)")]),
    ("See arXiv:2101.00001v3 for the proof.", [(ARXIV, "2101.00001", "arXiv:2101.00001v3")]),
    ("It is in https://arxiv.org/abs/hep-th/9901001 too.",
     [(ARXIV, "hep-th/9901001", "https://arxiv.org/abs/hep-th/9901001")]),
    ("The baseline is 10.1145/3292500.3330701.", [(DOI, "10.1145/3292500.3330701", "10.1145/3292500.3330701")]),
    ("Compare doi:10.18653/v1/N18-3011 with it.", [(DOI, "10.18653/v1/n18-3011", "doi:10.18653/v1/N18-3011")]),
    ("Read https://doi.org/10.1000/XYZ-12 (its appendix).",
     [(DOI, "10.1000/xyz-12", "https://doi.org/10.1000/XYZ-12")]),
    ('This is as in "Attention is all you need", with no recurrence.',
     [(TITLE, "attention is all you need", "Attention is all you need")]),
    ("The idea of “Deep Residual Learning for Image Recognition” applies.",
     [(TITLE, "deep residual learning for image recognition", "Deep Residual Learning for Image Recognition")]),
    ('"Attention is all you need" (NeurIPS 2017) already did this.',
     [(TITLE, "attention is all you need", "Attention is all you need")]),
])
def test_each_kind_of_cited_work_is_found_with_its_key(text, expected):
    assert _found(text) == expected


@pytest.mark.parametrize("text", [
    "Table 2 (2020 data) is hard to read.",
    "The code of v2.1 crashes on large graphs.",
    "In 2020 the benchmark changed.",
    "Results in [12] are not comparable.",  # a number in brackets points into the paper's own list
    'The authors claim "our method is strictly better than all prior baselines".',  # a quotation, not a title
    'Line 12: "we never tune the learning rate at all".',
    'The term "graph encoder" is vague.',  # fewer than four words
    "The ratio 1810.04805 is odd.",  # no arXiv prefix or URL
])
def test_what_is_no_cited_work_gives_none(text):
    assert _found(text) == []


def test_each_work_keeps_its_span_and_sentence_once_per_sentence():
    text = ("Summary: A method.\n\nWeaknesses: Smith et al. (2020) did this, and Smith et al. (2020) again. "
            "See doi:10.1234/abc.")
    works = find_review_citations(text)
    assert [(w.kind, w.key) for w in works] == [(AUTHOR_YEAR, "smith|2020"), (DOI, "10.1234/abc")]
    smith, doi = works
    assert text[smith.start:smith.end] == "Smith et al. (2020)" and smith.start == text.index("Smith")
    # The section's label the review text is assembled with is no part of the sentence.
    assert text[smith.sentence_start:smith.sentence_end] == \
        "Smith et al. (2020) did this, and Smith et al. (2020) again."
    assert text[doi.sentence_start:doi.sentence_end] == "See doi:10.1234/abc."
    # What is handed to the reference checks and the resolution: only what the review gives.
    assert (smith.record.surnames, smith.record.year, smith.record.title) == (("smith",), 2020, None)
    assert (doi.record.doi, doi.record.title) == ("10.1234/abc", None)
    # The evidence query is the sentence without the works it cites.
    assert smith.query == "did this, and again." and doi.query == "See."


def test_a_work_overlapping_another_is_read_once():
    # The digits of a DOI are no year, and a quotation holding a marker is the paper's words, not a title.
    assert _found("The results of doi:10.5555/smith.2020 hold.") == [(DOI, "10.5555/smith.2020",
                                                                      "doi:10.5555/smith.2020")]
    assert [kind for kind, _, _ in _found('As in "The Findings of Smith et al. (2020) Revisited Here".')] == \
        [AUTHOR_YEAR]


# -- the submission's own entries -------------------------------------------------------------------------------------
ENTRIES = [
    ParsedEntry(1, "Bea Baker and Carl Chen. Contrastive Pretraining. 2026.", label="1",
                surnames=("Baker", "Chen"), title="Contrastive Pretraining of Citation Graph Encoders", year=2026,
                status=PARSED),
    ParsedEntry(2, "Dana Diaz. Claim Drift. 2019. doi:10.5555/drift.2019", label="2", surnames=("Diaz",),
                title="Measuring Claim Drift in Scholarly Citations", year=2019, doi="10.5555/drift.2019",
                status=PARSED),
    ParsedEntry(3, "Wu Wei. A. 2021a.", surnames=("Wu",), title="First", year=2021, year_suffix="a", status=PARSED),
    ParsedEntry(4, "Wu Wei. B. 2021b.", surnames=("Wu",), title="Second", year=2021, year_suffix="b", status=PARSED),
    ParsedEntry(5, "Hal Hill. Evidence. arXiv:2201.01234.", surnames=("Hill",), title="Evidence", year=2022,
                arxiv_id="2201.01234", status=PARSED),
]


@pytest.mark.parametrize(("text", "index"), [
    ("As Baker and Chen (2026) show, it works.", 1),
    ("It works (Baker et al., 2026).", 1),
    ("The drift (doi:10.5555/DRIFT.2019) is known.", 2),
    ("See arXiv:2201.01234v2 for it.", 5),
    ('As in "Measuring claim drift in scholarly citation", drift grows.', 2),  # one letter off: the same title
    ("It was in Wu (2021b) first.", 4),
])
def test_a_work_the_paper_cites_names_its_entry(text, index):
    [work] = find_review_citations(text)
    assert match_paper_entry(work, ENTRIES) == (index, None)


def test_a_work_the_paper_does_not_cite_or_cannot_tell_apart_names_none_with_why():
    [other] = find_review_citations("Lee et al. (2018) disagree.")
    assert match_paper_entry(other, ENTRIES) == (None, "none of the paper's 5 entries is lee|2018")
    [two] = find_review_citations("It was in Wu (2021) first.")  # 2021a and 2021b: never guessed
    assert match_paper_entry(two, ENTRIES) == (None, "wu|2021 names several of the paper's 5 entries: not guessed")
    assert match_paper_entry(other, []) == (None, "the paper has no reference entries to match")


def test_the_option_is_off_unless_the_venue_turns_it_on():
    assert CitationOptions.from_mapping({}).review_citations is False
    assert CitationOptions.from_mapping({"review_citations": True}).review_citations is True
    with pytest.raises(CitationOptionsError, match="review_citations must be true or false, got 'yes'"):
        CitationOptions.from_mapping({"review_citations": "yes"})


# -- the assets on a venue with reviews --------------------------------------------------------------------------------
KEY = "reviewcites"
CITING, CITED, EVIDENCE = "CitingPapA", "CitedPaprB", "EvidencePC"
KNOWN_DOI, UNKNOWN_DOI, ARXIV_ID = "10.5555/known.2020", "10.5555/unknown.2021", "2101.00001"
CITING_PDF = fixtures_pdf.citing_paper("Citation-Aware Retrieval for Scientific Claim Checking", (
    "Contrastive pretraining of citation graph encoders improves the retrieval of cited passages [1]. "
    "Earlier studies of claim drift reported the opposite trend [2].",), (
    f"[1] Bea Baker and Carl Chen. {CITED_TITLE}. In Proceedings of the Test Workshop, 2026.",
    "[2] Dana Diaz. Measuring Claim Drift in Scholarly Citations. Journal of Citation Studies, 2019."))
CITING_REVIEW = (
    "As Baker and Chen (2026) showed, contrastive pretraining improves the retrieval of cited passages by eleven "
    "points of recall. "
    f'Checking citations against sentence-level evidence was studied in "{EVIDENCE_TITLE}" with windows of three '
    "sentences. "
    f"The same benchmark appears in doi:{KNOWN_DOI} and doi:{UNKNOWN_DOI}. "
    f"A proof is in arXiv:{ARXIV_ID}. Table 2 (2020 data) is unclear.")
EVIDENCE_REVIEW = f'This paper restates "{EVIDENCE_TITLE}" in its own title. The windows are too short.'
WORKS = (CorpusWork("A Benchmark of Checked Citations", (("Ann", "Able"),), 2020, doi=KNOWN_DOI),)
SUPPORTED = {"verdict": "Supported", "explanation": "The passage reports eleven points of recall."}
NOT_SUPPORTED = {"verdict": "Not Supported", "explanation": "The passage says nothing of the kind."}


def _with_reviews(registry: Path, reviews: dict[str, tuple[int, str]]) -> None:
    """Add one official review (forum -> (submission number, weaknesses text)) to each forum of the snapshot."""
    forums = registry.parent / "snapshot" / "forums"
    for forum, (number, weaknesses) in reviews.items():
        path = forums / f"{forum}.json"
        landed = json.loads(path.read_text())
        landed["notes"].append(note(f"Rev{forum}", forum, "Official_Review", "Reviewer_aaaa", forum, 200, number,
                                    summary="The paper checks citations.", weaknesses=weaknesses,
                                    rating="6: marginally above the acceptance threshold", confidence="3: fair"))
        path.write_text(json.dumps(landed))


def _answer(request) -> str:
    prompt = request["messages"][-1]["content"]
    return json.dumps(SUPPORTED if "eleven points of recall" in prompt else NOT_SUPPORTED)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The venue built once by the `verify_citations` job with `citations.review_citations` on."""
    folder = tmp_path_factory.mktemp("review_citations")
    with FakeScholarlyServer(WORKS) as scholarly, ScriptedOpenAIServer(responder=_answer) as verifier, \
            pytest.MonkeyPatch.context() as env:
        env.setenv("PEERIFY_MODELS_FILE", str(models_file(folder, verifier.base_url)))
        env.setenv("LOOPBACK_API_KEY", "test-key")
        registry = write_citation_venue(
            folder, KEY, {CITING: CITING_PDF, CITED: CITED_PDF, EVIDENCE: EVIDENCE_PDF},
            {"metadata": ["crossref"], "base_urls": scholarly.base_urls, "resolve": ["venue"], "retriever": "bm25",
             "k": 2, "review_citations": True})
        _with_reviews(registry, {CITING: (1, CITING_REVIEW), EVIDENCE: (3, EVIDENCE_REVIEW)})
        result, instance = run_citation_job(KEY, registry, folder / "lake")
        lake = Lake(folder / "lake")
        yield {"result": result, "instance": instance, "registry": registry, "lake": lake, "verifier": verifier,
               "requests": list(verifier.requests),
               "tables": {name: lake.read_table(name, KEY) for name in
                          ("reviews", "review_citations", "review_citation_verdicts")}}


def _review_prompts(built) -> list[str]:
    """The verifier calls that judged a review's sentence (the manuscript's citances are judged on the same server),
    each by the start of its sentence."""
    openings = ("As Baker and Chen (2026) showed", "Checking citations against", "The same benchmark", "A proof is in",
                "This paper restates")
    return [opening for request in built["requests"] for opening in openings
            if opening in request["messages"][-1]["content"]]


def _rows(built, table: str, **where) -> list[dict]:
    return rows_where(built["tables"][table], **where)


def test_the_run_completes_with_one_row_per_cited_work(built):
    assert built["result"].success, [e.step_key for e in built["result"].all_events if e.is_step_failure]
    works = built["tables"]["review_citations"]
    assert works.select("review_id", "kind", "key").rows() == [
        (f"Rev{CITING}", AUTHOR_YEAR, "baker|2026"), (f"Rev{CITING}", TITLE, EVIDENCE_TITLE.lower().replace("-", " ")),
        (f"Rev{CITING}", DOI, KNOWN_DOI), (f"Rev{CITING}", DOI, UNKNOWN_DOI), (f"Rev{CITING}", ARXIV, ARXIV_ID),
        (f"Rev{EVIDENCE}", TITLE, EVIDENCE_TITLE.lower().replace("-", " "))]
    review_text = _rows(built, "reviews", review_id=f"Rev{CITING}")[0]["review_text"]
    for row in _rows(built, "review_citations", review_id=f"Rev{CITING}"):  # the spans are the review text's
        assert row["text"] in review_text[row["char_start"]:row["char_end"]]
        assert review_text[row["sentence_start"]:].startswith(row["sentence"])
    for table, frame in built["tables"].items():
        assert all(column_description(table, column) for column in frame.columns), table


def test_a_work_the_paper_cites_takes_its_entry_check_and_cited_paper(built):
    [baker] = _rows(built, "review_citations", key="baker|2026")
    assert (baker["entry_id"], baker["entry_reason"]) == (f"{CITING}:r1", None)
    assert CITED_TITLE in baker["entry_text"]
    entry_check = rows_where(built["lake"].read_table("reference_checks", KEY), entry_id=f"{CITING}:r1")[0]
    assert (baker["check_status"], baker["check_reasons"]) == (entry_check["status"], entry_check["reasons"])
    assert (baker["resolution_status"], baker["source"], baker["locator"], baker["cited_key"]) == (
        "resolved", "venue", CITED, f"forum:{CITED}")


def test_a_quoted_title_of_a_sibling_paper_resolves_to_it_and_never_to_the_reviewed_paper(built):
    sibling, own = _rows(built, "review_citations", kind=TITLE)
    assert (sibling["entry_id"], sibling["resolution_status"], sibling["cited_key"]) == (
        None, "resolved", f"forum:{EVIDENCE}")
    assert sibling["entry_reason"] == f"none of the paper's 2 entries is {sibling['key']}"
    assert own["paper_id"] == EVIDENCE and own["resolution_status"] == "unresolved"
    assert "venue: no_match" in own["resolution_reason"] and EVIDENCE not in own["resolution_reason"]


def test_works_outside_the_paper_are_checked_against_the_venues_metadata_sources(built):
    known, unknown = _rows(built, "review_citations", kind=DOI)
    assert known["check_status"] == "validated" and "crossref" in known["check_reasons"][0]
    assert unknown["check_status"] == "not_found"
    [arxiv] = _rows(built, "review_citations", kind=ARXIV)
    assert arxiv["check_status"] in ("not_found", "unvalidatable") and ARXIV_ID in arxiv["check_reasons"][0]
    for row in (known, unknown, arxiv):  # no library, arXiv not asked: the reason names the venue's source
        assert row["resolution_status"] == "unresolved" and row["resolution_reason"].startswith("venue: ")


def test_the_reviewers_sentence_is_judged_against_the_cited_paper_through_the_gateway(built):
    verdicts = {row["citation_id"]: row for row in built["tables"]["review_citation_verdicts"].to_dicts()}
    works = {row["key"]: row["citation_id"] for row in _rows(built, "review_citations", review_id=f"Rev{CITING}")}
    baker = verdicts[works["baker|2026"]]
    assert (baker["status"], baker["label"], baker["verifier"], baker["cited_key"]) == (
        "ok", "Supported", "loopback", f"forum:{CITED}")
    assert baker["call_id"] and baker["tokens_in"] > 0 and baker["prompt_id"] == "verify_citation"
    assert baker["passages"] and "eleven points of recall" in baker["passages"][0]["text"]
    assert baker["cited_title"] == CITED_TITLE
    sibling = verdicts[works[EVIDENCE_TITLE.lower().replace("-", " ")]]
    assert (sibling["status"], sibling["label"], sibling["cited_key"]) == ("ok", "Not Supported", f"forum:{EVIDENCE}")
    # The reviewer's sentences went to the verifier, each once, beside the manuscript's own citance.
    assert sorted(_review_prompts(built)) == ["As Baker and Chen (2026) showed", "Checking citations against"]


def test_a_work_without_a_full_text_is_not_enough_information_without_a_call(built):
    verdicts = built["tables"]["review_citation_verdicts"]
    unresolved = {row["citation_id"]: row for row in _rows(built, "review_citations")
                  if row["resolution_status"] != "resolved"}
    assert len(unresolved) == 4
    for row in verdicts.filter(pl.col("citation_id").is_in(list(unresolved))).to_dicts():
        assert (row["status"], row["label"], row["call_id"], row["tokens_in"], row["passages"]) == (
            "no_cited_paper", "Not Enough Information", None, 0, [])
        assert row["reason"] == unresolved[row["citation_id"]]["resolution_reason"]
    assert len(_review_prompts(built)) == verdicts.filter(pl.col("status") == "ok").height == 2


# -- the claim page ---------------------------------------------------------------------------------------------------
def _claim_tables(built) -> tuple[pl.DataFrame, pl.DataFrame]:
    """A review claim of A's review on the sentence citing B, as retrieval_queries and review_claims hold it."""
    review = _rows(built, "reviews", review_id=f"Rev{CITING}")[0]
    text = review["review_text"]
    sentence = "contrastive pretraining improves the retrieval of cited passages by eleven points of recall."
    start = text.index(sentence)
    claim = {"venue": KEY, "claim_id": "claim-1", "paper_id": CITING, "review_id": review["review_id"],
             "claim_text": sentence}
    queries = pl.DataFrame([{**claim, "kind": "factual", "source": "review"}], schema=QUERY_SCHEMA)
    claims = pl.DataFrame([{**claim, "reviewer_id": review["reviewer_id"], "source": "review",
                            "source_id": review["review_id"], "section": "weaknesses", "claim_order": 1,
                            "raw_text": sentence, "span_start": start, "span_end": start + len(sentence),
                            "span_kind": "exact", "absorbed_claim_ids": []}], schema=REVIEW_CLAIM_SCHEMA)
    return queries, claims


def test_the_claim_view_puts_the_claims_cited_work_first_with_its_verdict(built):
    queries, claims = _claim_tables(built)
    tables = ClaimTables(queries=queries, review_claims=claims, reviews=built["tables"]["reviews"],
                         review_citations=built["tables"]["review_citations"],
                         review_citation_verdicts=built["tables"]["review_citation_verdicts"])
    detail = claim_detail(tables, "claim-1", {})
    works = detail.cited_works
    assert len(works) == 5 and [w.in_claim for w in works] == [True, False, False, False, False]
    first = works[0]
    assert (first.text, first.kind_name, first.entry_id, first.cited_key) == (
        "Baker and Chen (2026)", "author-year mention", f"{CITING}:r1", f"forum:{CITED}")
    assert [(v["label"], v["status"]) for v in first.verdicts] == [("Supported", "ok")]
    # Without the tables (a lake built before them) the page shows no panel, and nothing fails.
    assert claim_detail(replace(tables, review_citations=None), "claim-1", {}).cited_works == []


def test_the_claim_page_shows_the_works_the_review_cites(built):
    queries, claims = _claim_tables(built)
    built["lake"].write_table("retrieval_queries", KEY, queries)
    built["lake"].write_table("review_claims", KEY, claims)
    with live_server(built["lake"].root) as server:
        page = server.client().get(f"/venues/{KEY}/claims/claim-1")
    assert page.status_code == 200, page.text[-2000:]
    html = page.text
    assert html.count('data-testid="cited-work"') == 5
    assert 'data-in-claim="yes"' in html and html.count('data-in-claim="yes"') == 1
    assert "Baker and Chen (2026)" in html and f"forum:{CITED}" in html
    assert 'data-testid="cited-work-label">Supported<' in html and "eleven points of recall" in html
    assert "Not Enough Information" in html and "venue: " in html  # an unresolved work says why


def test_with_the_option_off_no_model_is_asked(built):
    """Last: it rebuilds the verdicts in the shared lake."""
    registry = built["registry"]
    registry.write_text(registry.read_text().replace('"review_citations": true', '"review_citations": false'))
    assert '"review_citations": false' in registry.read_text()
    asked_before = built["verifier"].request_count
    result = dg.materialize(ALL_ASSETS, selection=["review_citation_verdicts"], instance=built["instance"],
                            partition_key=KEY, resources=build_resources(
                                str(built["lake"].root), venue_registry=VenueRegistryResource(path=str(registry))),
                            raise_on_error=False)
    assert result.success and built["verifier"].request_count == asked_before
    off = built["lake"].read_table("review_citation_verdicts", KEY)
    assert off.height == built["tables"]["review_citations"].height
    assert set(off["status"]) == {"off"} and off["call_id"].null_count() == off.height

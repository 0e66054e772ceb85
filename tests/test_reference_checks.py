"""Reference checks (issue 20, item 3): bibliography entries against Crossref, OpenAlex and Semantic Scholar.

The parsers read bodies written the way each service sends them; the checks go through the real client (habanero
for Crossref, a requests session with the crawler's retry layer for OpenAlex and Semantic Scholar) against the
loopback server speaking the three APIs, with faults injected per path. Timeouts are one second or less and the
backoff milliseconds, so the module stays fast; the waits that are asserted (Retry-After) are real.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from peerify_dagster.domain.citations.entries import PARSED, ParsedEntry
from peerify_dagster.domain.citations.metadata import (
    BY_DOI,
    BY_TITLE,
    NOT_FOUND,
    SUSPICIOUS,
    UNVALIDATABLE,
    VALIDATED,
    MetadataFormatError,
    MetadataRecord,
    check_entry,
    records_from_crossref,
    records_from_openalex,
    records_from_semantic_scholar,
)
from peerify_dagster.domain.citations.options import CitationOptions
from peerify_dagster.resources.openreview import HttpPolicy
from peerify_dagster.resources.scholarly import S2_API_KEY_VARIABLE, ScholarlyClient
from tests.fakes.loopback import FaultRule
from tests.fakes.scholarly_server import CorpusWork, FakeScholarlyServer

ALL = ("crossref", "openalex", "semantic_scholar")
FAST = HttpPolicy(timeout_s=1.0, retries=1, backoff_s=0.01, backoff_max_s=0.05)

LITERATURE_GRAPH = CorpusWork(
    "Construction of the Literature Graph in Semantic Scholar",
    (("Waleed", "Ammar"), ("Dirk", "Groeneveld"), ("Chandra", "Bhagavatula"), ("Iz", "Beltagy")), 2018,
    doi="10.18653/v1/N18-3011", venue="Proceedings of the 2018 Conference of the North American Chapter of the "
    "Association for Computational Linguistics: Human Language Technologies, Volume 3 (Industry Papers)",
    pdf_url="https://aclanthology.org/N18-3011.pdf")
S2ORC = CorpusWork("S2ORC: The Semantic Scholar Open Research Corpus",
                   (("Kyle", "Lo"), ("Lucy Lu", "Wang"), ("Mark", "Neumann"), ("Rodney", "Kinney"), ("Daniel", "Weld")),
                   2020, doi="10.18653/v1/2020.acl-main.447", venue="Proceedings of the 58th Annual Meeting of the "
                   "Association for Computational Linguistics")
PREPRINT = CorpusWork("Sentence Windows for Checking Cited Claims against Full Texts",
                      (("Ada", "Moreau"), ("Bo", "Lindqvist")), 2024, arxiv_id="2405.01234")
RETRACTED = CorpusWork("Measuring Reviewer Agreement with Fabricated Survey Data",
                       (("Carl", "Hollis"),), 2019, doi="10.5555/retracted.2019.17",
                       retracted_by="10.5555/retraction.2021.3", venue="Journal of Peer Review Studies")
CORPUS = (LITERATURE_GRAPH, S2ORC, PREPRINT, RETRACTED)


def entry(index: int = 1, title: str | None = None, surnames: tuple[str, ...] = (), year: int | None = None,
          doi: str | None = None, arxiv_id: str | None = None) -> ParsedEntry:
    return ParsedEntry(index=index, raw_text=f"entry {index}", surnames=surnames, authors=surnames, title=title,
                       year=year, doi=doi, arxiv_id=arxiv_id, status=PARSED)


def graph_entry(index: int = 1, **changes) -> ParsedEntry:
    fields = {"title": "Construction of the literature graph in Semantic Scholar", "surnames": ("Ammar", "Groeneveld"),
              "year": 2018, "doi": "10.18653/v1/n18-3011", **changes}
    return entry(index, **fields)


@pytest.fixture(autouse=True)
def _no_semantic_scholar_key(monkeypatch):
    monkeypatch.delenv(S2_API_KEY_VARIABLE, raising=False)


@pytest.fixture
def server():
    with FakeScholarlyServer(CORPUS) as running:
        yield running


def client_for(server: FakeScholarlyServer, services=ALL, cache_dir: Path | None = None,
               policy: HttpPolicy = FAST) -> ScholarlyClient:
    return ScholarlyClient(services, server.base_urls, mailto="checks@example.org", cache_dir=cache_dir,
                           policy=policy, requests_per_second=dict.fromkeys(ALL, 50.0))


# -- the services' bodies ----------------------------------------------------------------------------------------------

CROSSREF_WORK = {
    "status": "ok", "message-type": "work", "message-version": "1.0.0",
    "message": {
        "indexed": {"date-parts": [[2024, 4, 3]], "date-time": "2024-04-03T21:41:06Z", "timestamp": 1712180466063},
        "reference-count": 22, "publisher": "Association for Computational Linguistics",
        "content-domain": {"domain": [], "crossmark-restriction": False},
        "published-print": {"date-parts": [[2018]]}, "DOI": "10.18653/v1/N18-3011", "type": "proceedings-article",
        "created": {"date-parts": [[2018, 6, 1]], "date-time": "2018-06-01T21:09:18Z", "timestamp": 1527887358000},
        "page": "84-91", "source": "Crossref", "is-referenced-by-count": 170,
        "title": ["Construction of the Literature Graph in Semantic Scholar"], "prefix": "10.18653",
        "author": [{"given": "Waleed", "family": "Ammar", "sequence": "first", "affiliation": []},
                   {"given": "Dirk", "family": "Groeneveld", "sequence": "additional", "affiliation": []},
                   {"name": "Allen Institute for Artificial Intelligence", "sequence": "additional",
                    "affiliation": []}],
        "member": "1643",
        "event": {"name": "Proceedings of the 2018 Conference of the North American Chapter of the Association for "
                          "Computational Linguistics: Human Language Technologies, Volume 3 (Industry Papers)",
                  "location": "New Orleans - Louisiana"},
        "container-title": ["Proceedings of the 2018 Conference of the North American Chapter of the Association "
                            "for Computational Linguistics: Human Language Technologies, Volume 3 (Industry Papers)"],
        "link": [{"URL": "http://www.aclweb.org/anthology/N18-3011.pdf", "content-type": "unspecified",
                  "content-version": "vor", "intended-application": "similarity-checking"},
                 {"URL": "https://aclanthology.org/N18-3011.pdf", "content-type": "application/pdf",
                  "content-version": "vor", "intended-application": "text-mining"},
                 {"URL": "https://aclanthology.org/N18-3011.pdf?check", "content-type": "application/pdf",
                  "content-version": "vor", "intended-application": "similarity-checking"}],
        "deposited": {"date-parts": [[2021, 3, 5]], "date-time": "2021-03-05T09:30:19Z", "timestamp": 1614936619000},
        "score": 1, "resource": {"primary": {"URL": "http://aclweb.org/anthology/N18-3011"}},
        "issued": {"date-parts": [[2018]]}, "references-count": 22, "URL": "http://dx.doi.org/10.18653/v1/n18-3011",
        "published": {"date-parts": [[2018]]},
    },
}


def test_crossref_work_and_work_list_are_read_as_sent():
    [record] = records_from_crossref(CROSSREF_WORK, found_by=BY_DOI)
    assert record.title == "Construction of the Literature Graph in Semantic Scholar"
    assert record.authors == ("Ammar", "Groeneveld", "Allen Institute for Artificial Intelligence")
    assert record.author_names[0] == "Waleed Ammar"
    assert (record.year, record.doi, record.found_by) == (2018, "10.18653/v1/n18-3011", BY_DOI)
    assert record.venue.startswith("Proceedings of the 2018 Conference")
    # only the reader's PDF link: not the similarity-checking ones, not a link of another content type
    assert record.open_access_urls == ("https://aclanthology.org/N18-3011.pdf",)
    assert not record.retracted and record.retraction_of == ()

    listing = {"status": "ok", "message-type": "work-list", "message-version": "1.0.0", "message": {
        "facets": {}, "total-results": 2, "items-per-page": 5, "query": {"start-index": 0, "search-terms": None},
        "items": [{**CROSSREF_WORK["message"], "score": 71.2},
                  {"DOI": "10.1007/S10207-021-00566-3", "title": ["A risk-level assessment system"],
                   "subtitle": ["the STRIDE/DREAD model for digital data marketplaces"],
                   "author": [{"given": "Lu", "family": "Zhang", "sequence": "first", "affiliation": []}],
                   "published-online": {"date-parts": [[2021, 9, 14]]}, "issued": {"date-parts": [[None]]},
                   "score": 12.5}]}}
    first, second = records_from_crossref(listing)
    assert first.title == "Construction of the Literature Graph in Semantic Scholar" and first.found_by == BY_TITLE
    assert second.title == "A risk-level assessment system: the STRIDE/DREAD model for digital data marketplaces"
    assert second.year == 2021  # `issued` without a year: the online date stands in
    assert second.doi == "10.1007/s10207-021-00566-3"


def test_crossref_retractions_are_read_from_updated_by_and_update_to():
    retracted = {**CROSSREF_WORK["message"], "DOI": "10.1021/am300292v", "updated-by": [
        {"DOI": "10.1021/acsami.9b11759", "type": "retraction", "label": "Retraction", "source": "retraction-watch",
         "updated": {"date-parts": [[2019, 7, 26]], "date-time": "2019-07-26T00:00:00Z", "timestamp": 1564099200000},
         "record-id": "20946"}]}
    corrected = {**CROSSREF_WORK["message"], "updated-by": [{"DOI": "10.5555/c1", "type": "correction",
                                                             "label": "Correction", "source": "publisher"}]}
    notice = {**CROSSREF_WORK["message"], "DOI": "10.1021/acsami.9b11759", "title": ["Retraction of ..."],
              "update-to": [{"DOI": "10.1021/am300292v", "type": "retraction", "label": "Retraction",
                             "source": "publisher", "updated": {"date-parts": [[2019, 7, 26]]}}]}
    read = [records_from_crossref({"status": "ok", "message-type": "work", "message": message})[0]
            for message in (retracted, corrected, notice)]
    assert [record.retracted for record in read] == [True, False, False]
    assert read[2].retraction_of == ("10.1021/am300292v",)


OPENALEX_WORK = {
    "id": "https://openalex.org/W2799040113", "doi": "https://doi.org/10.18653/v1/n18-3011",
    "title": "Construction of the Literature Graph in Semantic Scholar",
    "display_name": "Construction of the Literature Graph in Semantic Scholar", "publication_year": 2018,
    "publication_date": "2018-01-01",
    "ids": {"openalex": "https://openalex.org/W2799040113", "doi": "https://doi.org/10.18653/v1/n18-3011",
            "mag": "2799040113"},
    "language": "en",
    "primary_location": {"is_oa": True, "landing_page_url": "https://doi.org/10.18653/v1/n18-3011",
                         "pdf_url": "https://aclanthology.org/N18-3011.pdf",
                         "source": {"id": "https://openalex.org/S4363608652", "display_name": "Proceedings of NAACL",
                                    "type": "conference"}, "license": "cc-by", "version": "publishedVersion"},
    "type": "article",
    "open_access": {"is_oa": True, "oa_status": "hybrid", "oa_url": "https://aclanthology.org/N18-3011.pdf",
                    "any_repository_has_fulltext": True},
    "authorships": [
        {"author_position": "first",
         "author": {"id": "https://openalex.org/A5091843418", "display_name": "Waleed Ammar", "orcid": None},
         "institutions": [], "countries": [], "is_corresponding": False, "raw_author_name": "Waleed Ammar",
         "raw_affiliation_strings": []},
        {"author_position": "middle", "author": {"id": "https://openalex.org/A5034589245",
                                                 "display_name": "Madeleine van Zuylen", "orcid": None},
         "institutions": [], "countries": [], "is_corresponding": False, "raw_author_name": "Madeleine van Zuylen",
         "raw_affiliation_strings": []}],
    "is_retracted": False, "is_paratext": False,
    "locations": [
        {"is_oa": True, "landing_page_url": "https://doi.org/10.18653/v1/n18-3011",
         "pdf_url": "https://aclanthology.org/N18-3011.pdf", "source": None, "version": "publishedVersion"},
        {"is_oa": True, "landing_page_url": "https://arxiv.org/abs/1805.02262",
         "pdf_url": "https://arxiv.org/pdf/1805.02262", "version": "submittedVersion",
         "source": {"display_name": "arXiv (Cornell University)", "type": "repository"}},
        {"is_oa": False, "landing_page_url": "https://www.semanticscholar.org/paper/x",
         "pdf_url": "https://x/paywall.pdf"}],
    "best_oa_location": {"is_oa": True, "landing_page_url": "https://doi.org/10.18653/v1/n18-3011",
                         "pdf_url": "https://aclanthology.org/N18-3011.pdf", "version": "publishedVersion"},
    "cited_by_count": 170, "updated_date": "2025-01-05T10:11:12.000000", "created_date": "2018-05-11",
}


def test_openalex_work_and_search_are_read_as_sent():
    [record] = records_from_openalex(OPENALEX_WORK, found_by=BY_DOI)
    assert record.title == "Construction of the Literature Graph in Semantic Scholar"
    assert record.authors == ("Ammar", "van Zuylen")
    assert (record.year, record.doi, record.arxiv_id) == (2018, "10.18653/v1/n18-3011", "1805.02262")
    assert record.venue == "Proceedings of NAACL"
    assert record.open_access_urls == ("https://aclanthology.org/N18-3011.pdf", "https://arxiv.org/pdf/1805.02262")
    assert record.external_ids["mag"] == "2799040113"

    arxiv_only = {**OPENALEX_WORK, "doi": "https://doi.org/10.48550/arxiv.2405.01234v2", "locations": [],
                  "best_oa_location": None, "is_retracted": True}
    search = {"meta": {"count": 2, "db_response_time_ms": 31, "page": 1, "per_page": 5, "groups_count": None},
              "results": [OPENALEX_WORK, arxiv_only], "group_by": []}
    first, second = records_from_openalex(search)
    assert first.found_by == BY_TITLE and second.arxiv_id == "2405.01234"
    assert second.retracted and second.open_access_urls == ()


def test_semantic_scholar_paper_and_search_are_read_as_sent():
    paper = {"paperId": "2d5673caa9e6af3a7b82a43f19ee920992db07ad",
             "externalIds": {"DBLP": "journals/x/Turing50", "MAG": "2145482038", "DOI": "10.1093/MIND/LIX.236.433",
                             "CorpusId": 14636783},
             "title": "Computing Machinery and Intelligence", "venue": "The Philosophy of Artificial Intelligence",
             "year": 1950, "authors": [{"authorId": "2262347", "name": "A. Turing"}], "openAccessPdf": None,
             "journal": {"name": "Mind", "pages": "433-460", "volume": "LIX"}}
    [record] = records_from_semantic_scholar(paper, found_by=BY_DOI)
    assert (record.title, record.authors, record.year) == ("Computing Machinery and Intelligence", ("Turing",), 1950)
    assert record.doi == "10.1093/mind/lix.236.433" and record.open_access_urls == ()
    assert record.external_ids["s2"] == "2d5673caa9e6af3a7b82a43f19ee920992db07ad"

    search = {"total": 2, "offset": 0, "next": 2, "data": [
        {"paperId": "bf3551dbd18e8e2778b3f8eea9e06f0ce085d4bf", "title": "A preprint", "year": 2022,
         "externalIds": {"ArXiv": "2207.03985v2", "CorpusId": 1},
         "authors": [{"authorId": "1", "name": "Aäron van den Oord"}],
         "openAccessPdf": {"url": "https://arxiv.org/pdf/2207.03985", "status": "GREEN"}},
        {"paperId": "f1328e67a62218c365a5945d58123634db1895be", "title": "No PDF", "year": None,
         "externalIds": {}, "authors": [], "openAccessPdf": {"url": "", "status": None, "license": None}}]}
    first, second = records_from_semantic_scholar(search)
    assert first.arxiv_id == "2207.03985" and first.authors == ("van den Oord",)
    assert first.open_access_urls == ("https://arxiv.org/pdf/2207.03985",)
    assert second.open_access_urls == () and second.year is None


@pytest.mark.parametrize(("reader", "body"), [
    (records_from_crossref, {"status": "ok", "message-type": "member", "message": {}}),
    (records_from_crossref, ["not", "an", "object"]),
    (records_from_openalex, {"meta": {}}),
    (records_from_semantic_scholar, {"error": "Paper with id X not found"}),
])
def test_answers_of_another_shape_are_refused(reader, body):
    with pytest.raises(MetadataFormatError):
        reader(body)


# -- the decision, on records ------------------------------------------------------------------------------------------

def test_titles_that_only_partly_agree_prove_nothing_and_other_authors_are_suspicious():
    record = MetadataRecord("crossref", "Construction of the Literature Graph in Semantic Scholar: Lessons Learned "
                            "from a Decade of Production Use", authors=("Ammar",), author_names=("Waleed Ammar",),
                            year=2018, doi="10.18653/v1/n18-3011", found_by=BY_DOI)
    partial = check_entry(graph_entry(title="Construction of the literature graph at Semantic Scholar scale"),
                          {"crossref": [record]}, {})
    assert partial.status == UNVALIDATABLE and "similarity" in partial.reasons[0]
    assert partial.matched_service is None

    other_authors = check_entry(graph_entry(surnames=("Smith", "Jones"),
                                            title=record.title), {"crossref": [record]}, {})
    assert other_authors.status == SUSPICIOUS
    assert other_authors.reasons == ["authors differ from crossref's record for doi 10.18653/v1/n18-3011: "
                                     "Smith, Jones vs Ammar"]


def test_a_doi_no_service_knows_while_the_title_has_another_is_suspicious():
    by_title = MetadataRecord("openalex", "Construction of the Literature Graph in Semantic Scholar",
                              authors=("Ammar",), author_names=("Waleed Ammar",), year=2018,
                              doi="10.18653/v1/n18-3011", found_by=BY_TITLE)
    wrong = graph_entry(doi="10.18653/v1/n18-3911")
    check = check_entry(wrong, {"crossref": [], "openalex": [by_title]}, {})
    assert check.status == SUSPICIOUS
    assert check.reasons == ["doi 10.18653/v1/n18-3911 is unknown to crossref, openalex; openalex's record of this "
                             "title has doi 10.18653/v1/n18-3011"]
    # one service alone proves nothing (Crossref knows no DataCite DOI): the title's record validates
    assert check_entry(wrong, {"openalex": [by_title]}, {}).status == VALIDATED


# -- through the client and the loopback server ------------------------------------------------------------------------

def test_validated_by_doi_by_arxiv_id_and_by_title(server):
    client = client_for(server)
    by_doi, by_arxiv, by_title = client.check_all([
        graph_entry(1),
        entry(2, "Sentence windows for checking cited claims against full texts", ("Moreau",), 2024,
              arxiv_id="2405.01234"),
        entry(3, "S2ORC: the Semantic Scholar open research corpus", ("Lo", "Wang"), 2020)])

    assert by_doi.status == VALIDATED and by_doi.services == list(ALL) and by_doi.errors == []
    assert by_doi.matched_service == "crossref" and by_doi.matched_doi == "10.18653/v1/n18-3011"
    assert by_doi.reasons == ["crossref's record for doi 10.18653/v1/n18-3011 agrees (title similarity 1.00, "
                              "first author Ammar, year 2018)"]
    assert by_doi.open_access_urls == ["https://aclanthology.org/N18-3011.pdf"]
    evidence = json.loads(by_doi.evidence_json)
    assert [record["found_by"] for service in ALL for record in evidence[service]["records"]] == ["doi"] * 3

    # Crossref knows no arXiv-only work: it is asked by title and finds nothing; the others know the arXiv id
    assert by_arxiv.status == VALIDATED and by_arxiv.matched_service == "openalex"
    assert by_arxiv.matched_arxiv_id == "2405.01234"
    assert json.loads(by_arxiv.evidence_json)["crossref"]["records"] == []
    assert "https://arxiv.org/pdf/2405.01234" in by_arxiv.open_access_urls

    assert by_title.status == VALIDATED and by_title.matched_service == "crossref"
    assert by_title.reasons[0].startswith("crossref's record of this title agrees")
    asked = {request.path for request in server.requests}
    assert {"/crossref/works", "/openalex/works", "/s2/graph/v1/paper/search"} <= asked  # the title searches


def test_a_doi_that_names_another_paper_is_suspicious(server):
    check = client_for(server).check(graph_entry(title="Attention is all you need", surnames=("Ammar",)))
    assert check.status == SUSPICIOUS
    assert check.reasons[0] == ("title differs from crossref's record for doi 10.18653/v1/n18-3011: "
                                "'Attention is all you need' vs 'Construction of the Literature Graph in Semantic "
                                f"Scholar' (similarity {check.title_similarity:.2f})")
    assert len(check.reasons) == 3  # each service's record for the DOI says so
    assert check.open_access_urls == []  # the PDFs are another paper's


def test_a_year_off_by_more_than_one_is_suspicious(server):
    check = client_for(server).check(graph_entry(year=2014))
    assert check.status == SUSPICIOUS and check.year_delta == 4
    assert check.reasons[0] == ("year 2014 differs from crossref's record for doi 10.18653/v1/n18-3011 "
                                "(2018, 4 years apart)")
    assert client_for(server).check(graph_entry(year=2019)).status == VALIDATED  # one year apart agrees


def test_a_retracted_work_is_suspicious(server):
    check = client_for(server).check(entry(1, "Measuring reviewer agreement with fabricated survey data", ("Hollis",),
                                           2019, doi="10.5555/retracted.2019.17"))
    assert check.status == SUSPICIOUS and check.retracted
    assert check.reasons == ["retracted: crossref's record for doi 10.5555/retracted.2019.17 is marked retracted",
                             "retracted: openalex's record for doi 10.5555/retracted.2019.17 is marked retracted"]


def test_unvalidatable_without_services_when_all_fail_and_without_anything_to_ask(server):
    assert ScholarlyClient([]).check(graph_entry()).reasons == ["no metadata service is configured"]
    for path in ("/crossref/works/10.18653/v1/n18-3011", "/openalex/works/doi:10.18653/v1/n18-3011",
                 "/s2/graph/v1/paper/DOI:10.18653/v1/n18-3011"):
        server.add_fault(FaultRule(path, "status", status=503, times=None))
    failed = client_for(server).check(graph_entry())
    assert failed.status == UNVALIDATABLE
    assert failed.reasons == ["every service asked failed (crossref, openalex, semantic_scholar)"]
    assert failed.errors == ["crossref: HTTP 503 after 2 tries", "openalex: HTTP 503 after 2 tries",
                             "semantic_scholar: HTTP 503 after 2 tries"]

    nothing = client_for(server).check(entry(3, title=None, surnames=("Nobody",), year=2021))
    assert nothing.status == UNVALIDATABLE
    assert nothing.reasons == ["the entry has no DOI, arXiv id or title to look up"]


def test_a_reference_every_source_answered_without_a_record_is_not_found(server):
    made_up = entry(2, "A study nobody has written about anything at all", ("Nobody",), 2021)
    unknown = client_for(server).check(made_up)
    assert unknown.status == NOT_FOUND and unknown.errors == []
    assert unknown.reasons[0] == "no record of its title in any source asked"
    assert [reason.split(":")[0] for reason in unknown.reasons[1:4]] == list(ALL)  # each source's own answer
    # One source unreachable: nothing found proves nothing, the reference stays unvalidatable.
    server.add_fault(FaultRule("/openalex/works", "status", status=503, times=None))
    partly = client_for(server).check(made_up)
    assert partly.status == UNVALIDATABLE and "failed: openalex: HTTP 503" in partly.reasons[-1]


def test_a_doi_with_url_characters_is_asked_for_whole():
    doi = "10.1002/(sici)1097-4571(199806)49:8<693::aid-asi4>3.0.co;2-o#x?y"  # "#" and "?" end a URL's path
    with FakeScholarlyServer([CorpusWork("A work whose DOI has URL characters", (("Ann", "Bee"),), 1998,
                                         doi=doi)]) as odd:
        answers = client_for(odd).lookup(entry(doi=doi))
        assert {name: [record.doi for record in answer.records] for name, answer in answers.items()} == dict.fromkeys(
            ALL, [doi])


def test_an_unknown_doi_falls_back_to_the_title(server):
    check = client_for(server, services=("crossref",)).check(graph_entry(doi="10.5555/not.registered"))
    paths = [(request.path, request.status) for request in server.requests]
    assert paths == [("/crossref/works/10.5555/not.registered", 404), ("/crossref/works", 200)]
    assert check.status == VALIDATED and check.matched_doi == "10.18653/v1/n18-3011"


@pytest.mark.parametrize(("service", "path"), [
    ("crossref", "/crossref/works/10.18653/v1/n18-3011"),
    ("openalex", "/openalex/works/doi:10.18653/v1/n18-3011"),
    ("semantic_scholar", "/s2/graph/v1/paper/DOI:10.18653/v1/n18-3011"),
])
def test_a_429_is_asked_again_after_its_retry_after(server, service, path):
    server.add_fault(FaultRule(path, "retry_after", retry_after=1, times=1))
    started = time.monotonic()
    check = client_for(server, services=(service,)).check(graph_entry())
    assert time.monotonic() - started >= 1.0
    limited, answered = server.requests
    assert (limited.status, answered.status) == (429, 200)
    assert answered.answered_at - limited.answered_at >= 1.0  # the wait was the server's, not the backoff's
    assert check.status == VALIDATED and check.errors == []


@pytest.mark.parametrize(("service", "paths"), [
    ("crossref", "/crossref/works/{doi}"),
    ("openalex", "/openalex/works/doi:{doi}"),
    ("semantic_scholar", "/s2/graph/v1/paper/DOI:{doi}"),
])
def test_failures_are_named_and_the_other_entries_complete(server, service, paths):
    dois = ["10.5555/fails.500", "10.5555/fails.json", "10.5555/fails.hang", "10.5555/fails.limit"]
    server.works.extend(CorpusWork(f"Work number {n} about failing services", (("Ann", "Author"),), 2020, doi=doi)
                        for n, doi in enumerate(dois))
    server.add_fault(FaultRule(paths.format(doi=dois[0]), "status", status=500, times=None))
    server.add_fault(FaultRule(paths.format(doi=dois[1]), "malformed_json", times=None))
    server.add_fault(FaultRule(paths.format(doi=dois[2]), "hang", hang_seconds=2.5, times=None))
    server.add_fault(FaultRule(paths.format(doi=dois[3]), "retry_after", retry_after=0, times=None))
    entries = [entry(n, f"Work number {n} about failing services", ("Author",), 2020, doi=doi)
               for n, doi in enumerate(dois)] + [graph_entry(9)]
    checks = client_for(server, services=(service,), policy=HttpPolicy(timeout_s=0.5, retries=1,
                                                                        backoff_s=0.01)).check_all(entries)
    errors = [check.errors for check in checks]
    assert errors[0] == [f"{service}: HTTP 500 after 2 tries"]
    assert errors[1][0].startswith(f"{service}: malformed JSON")
    assert errors[2] == [f"{service}: timed out after 0.5 s, 2 tries"]
    assert errors[3] == [f"{service}: HTTP 429 after 2 tries"]
    assert [check.status for check in checks] == [UNVALIDATABLE] * 4 + [VALIDATED]
    assert checks[4].errors == []


def test_a_hanging_service_is_not_asked_again_after_three_timeouts(server):
    works = [CorpusWork(f"Hanging work {n}", (("Ann", "Author"),), 2020, doi=f"10.5555/hang.{n}") for n in range(40)]
    server.works.extend(works)
    for work in works:
        server.add_fault(FaultRule(f"/s2/graph/v1/paper/DOI:{work.doi}", "hang", hang_seconds=2.0, times=None))
    started = time.monotonic()
    client = client_for(server, services=("semantic_scholar",), policy=HttpPolicy(timeout_s=0.3, retries=0))
    in_flight = client.services["semantic_scholar"].in_flight
    checks = client.check_all([entry(n, work.title, ("Author",), 2020, doi=work.doi) for n, work in enumerate(works)])
    timed_out = sum(check.errors == ["semantic_scholar: timed out after 0.3 s"] for check in checks)
    skipped = sum(check.errors == ["semantic_scholar: not asked: its last 3 requests timed out"] for check in checks)
    # The lookups already under way when the third timeout came finish; every later one is not asked.
    assert 3 <= timed_out <= 3 + in_flight - 1 and timed_out + skipped == len(works) and skipped > 0
    assert time.monotonic() - started < 1.8  # one round of timeouts in parallel, not forty in a row


def test_the_cache_answers_a_rebuild_and_keeps_no_failure(server, tmp_path):
    cache = tmp_path / "scholarly_cache"
    server.add_fault(FaultRule("/openalex/works/doi:10.18653/v1/n18-3011", "status", status=500, times=2))
    entries = [graph_entry(1), entry(2, "S2ORC: the Semantic Scholar open research corpus", ("Lo",), 2020)]
    first = client_for(server, cache_dir=cache).check_all(entries)
    assert first[0].errors == ["openalex: HTTP 500 after 2 tries"]
    asked = len(server.requests)
    assert sorted(path.name for path in cache.iterdir()) == sorted(ALL)

    second = client_for(server, cache_dir=cache).check_all(entries)
    again = server.requests[asked:]
    # only the failed request is asked again; every other answer comes from the cache
    assert [(request.path, request.status) for request in again] == [("/openalex/works/doi:10.18653/v1/n18-3011", 200)]
    assert second[0].errors == [] and second[1] == first[1]

    third = client_for(server, cache_dir=cache).check_all(entries)
    assert len(server.requests) == asked + 1 and third == second


def test_an_answer_of_another_shape_is_named_and_not_cached(server, tmp_path):
    path = "/s2/graph/v1/paper/DOI:10.18653/v1/n18-3011"
    server.add_fault(FaultRule(path, "body", body=b'{"message": "Endpoint request timed out"}', times=1))
    cache = tmp_path / "cache"
    [check] = client_for(server, services=("semantic_scholar",), cache_dir=cache).check_all([graph_entry()])
    assert check.errors == ["semantic_scholar: unexpected answer: Semantic Scholar answer is neither a paper nor a "
                            "search result"]
    assert not list(cache.rglob("*.json"))
    assert client_for(server, services=("semantic_scholar",), cache_dir=cache).check(graph_entry()).status == VALIDATED


def test_the_semantic_scholar_key_is_sent_and_never_stored(tmp_path, monkeypatch):
    key = "s2-key-7f3a9c1e"
    with FakeScholarlyServer(CORPUS, s2_api_key=key) as keyed:
        refused = client_for(keyed, services=("semantic_scholar",)).check(graph_entry())
        assert refused.errors == ["semantic_scholar: HTTP 403"]

        monkeypatch.setenv(S2_API_KEY_VARIABLE, key)
        cache = tmp_path / "cache"
        check = client_for(keyed, services=("semantic_scholar",), cache_dir=cache).check(graph_entry())
        assert check.status == VALIDATED and check.errors == []
        assert keyed.requests[-1].status == 200
    stored = [path.read_text() for path in cache.rglob("*.json")]
    assert stored and not any(key in text for text in stored)
    assert key not in json.dumps(check.__dict__)


def test_the_venue_options_configure_the_client(server):
    options = CitationOptions.from_mapping({"metadata": ["semantic_scholar", "crossref"], "mailto": "x@example.org",
                                            "base_urls": {**server.base_urls, "arxiv": "http://127.0.0.1:9"}})
    client = ScholarlyClient.from_options(options, cache_dir=None, policy=FAST)
    assert list(client.services) == ["semantic_scholar", "crossref"]
    assert client.check(graph_entry()).services == ["crossref", "semantic_scholar"]
    crossref_request = next(request for request in server.requests if request.path.startswith("/crossref/"))
    assert crossref_request.status == 200


def test_answers_are_cached_per_host(server, tmp_path):
    cache = tmp_path / "scholarly_cache"
    client_for(server, services=("crossref",), cache_dir=cache).check(graph_entry())
    with FakeScholarlyServer(CORPUS) as mirror:  # another host: a mirror, or the public API
        client_for(mirror, services=("crossref",), cache_dir=cache).check(graph_entry())
        assert mirror.requests, "answered from the other host's cache"
    asked = len(server.requests)
    client_for(server, services=("crossref",), cache_dir=cache).check(graph_entry())
    assert len(server.requests) == asked  # its own answers still come from the cache

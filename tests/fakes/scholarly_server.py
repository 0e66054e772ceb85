"""A loopback fake of the three scholarly metadata APIs (Crossref, OpenAlex, Semantic Scholar) serving a small corpus
of works, with fault injection.

Each service lives under its own prefix, so one server stands in for all three (`base_urls` gives the roots a
client is pointed at):

* ``/crossref/works/{doi}`` and ``/crossref/works?query.bibliographic=...&rows=N``: Crossref's REST API bodies
  ({"status": "ok", "message-type": "work" | "work-list", "message": ...}), 404 as the plain text
  "Resource not found.", the X-Rate-Limit-* headers it sends on every answer;
* ``/openalex/works/doi:{doi}`` (or ``/openalex/works/https://doi.org/{doi}``) and
  ``/openalex/works?search=...&per-page=N``: OpenAlex work objects and lists ({"meta", "results", "group_by"}),
  404 as the Flask (Werkzeug) HTML page its API answers for an unknown id, arXiv works under their arXiv DOI
  (10.48550/arXiv.<id>) with an arxiv.org location;
* ``/s2/graph/v1/paper/{DOI:..|arXiv:..|paperId}`` and ``/s2/graph/v1/paper/search?query=...&fields=...``:
  Semantic Scholar graph API papers with only the fields asked (and `paperId`), search answers
  {"total", "offset", "data"}, 404 {"error": "Paper with id ... not found"}, 429 with the body the service sends,
  403 {"message": "Forbidden"} when the server is given an API key and a request lacks it (header x-api-key).

Faults (`FaultRule`s of testing/loopback.py, matched on the path with its DOI unquoted and the query) answer in each
service's own error shape: a status, 429 with Retry-After, a body cut in half, a hang, a custom body, a dropped
connection. Standard library only (plus the project's title normaliser for the search ranking).
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any
from urllib.parse import unquote

from peerify_dagster.domain.citations.options import NETWORK_METADATA_SERVICES
from peerify_dagster.domain.citations.titles import normalise_title
from tests.fakes.loopback import (
    JSON_CONTENT_TYPE,
    FaultRule,
    IncomingRequest,
    LoopbackServer,
    RecordedRequest,
    Reply,
)

CROSSREF, OPENALEX, SEMANTIC_SCHOLAR = NETWORK_METADATA_SERVICES
SERVICE_PREFIXES = {CROSSREF: "/crossref", OPENALEX: "/openalex", SEMANTIC_SCHOLAR: "/s2"}
S2_PAPER_PATH = "/s2/graph/v1/paper/"
ARXIV_DOI_PREFIX = "10.48550/arxiv."
# A search returns a work when this share of its title's words is in the query (Crossref's bibliographic query
# carries the authors and the year too, so the share is of the title's words, not the query's).
SEARCH_MIN_SHARE = 0.5
# What Werkzeug (the Flask behind OpenAlex's API) answers for abort(404) and an unhandled exception.
_WERKZEUG_PAGES = {
    404: ("Not Found", "The requested URL was not found on the server. If you entered the URL manually please "
                       "check your spelling and try again."),
    500: ("Internal Server Error", "The server encountered an internal error and was unable to complete your "
                                   "request. Either the server is overloaded or there is an error in the application."),
}
S2_RATE_LIMIT_MESSAGE = ("Too Many Requests. Please wait and try again or apply for a key for higher rate limits. "
                         "https://www.semanticscholar.org/product/api#api-key-form")
TEXT_CONTENT_TYPE = "text/plain; charset=utf-8"
HTML_CONTENT_TYPE = "text/html; charset=utf-8"


@dataclass(frozen=True)
class CorpusWork:
    """A work the fake services know. `retracted_by`: the DOI of the notice that retracts it (Crossref shows it in
    `updated-by`, OpenAlex sets `is_retracted`); `retraction_of`: this work is the retraction notice of that DOI
    (Crossref `update-to`); `services`: which of the three index it (Crossref only works with a DOI)."""

    title: str
    authors: tuple[tuple[str, str], ...]  # (given, family)
    year: int
    doi: str | None = None
    arxiv_id: str | None = None
    venue: str | None = None
    pdf_url: str | None = None
    retracted_by: str | None = None
    retraction_of: str | None = None
    services: frozenset[str] = frozenset(NETWORK_METADATA_SERVICES)

    @property
    def _digest(self) -> str:
        return hashlib.sha1(self.title.encode("utf-8")).hexdigest()

    @property
    def openalex_id(self) -> str:
        return f"https://openalex.org/W{int(self._digest[:10], 16) % 10**10}"

    @property
    def s2_paper_id(self) -> str:
        return self._digest

    @property
    def display_names(self) -> list[str]:
        return [f"{given} {family}".strip() for given, family in self.authors]


def _date(year: int) -> dict[str, Any]:
    return {"date-parts": [[year]]}


def crossref_work(work: CorpusWork, corpus: Iterable[CorpusWork] = ()) -> dict[str, Any]:
    """The `message` of Crossref's /works/{doi} for a work (`corpus`: where its retraction notices are found)."""
    assert work.doi is not None
    message: dict[str, Any] = {
        "indexed": {"date-parts": [[2026, 1, 5]], "date-time": "2026-01-05T10:11:12Z", "timestamp": 1767607872000},
        "reference-count": 0, "publisher": "Association for Computational Linguistics",
        "content-domain": {"domain": [], "crossmark-restriction": False},
        "DOI": work.doi, "type": "proceedings-article" if work.venue and "Proceedings" in work.venue
        else "journal-article",
        "created": {"date-parts": [[work.year, 6, 1]], "date-time": f"{work.year}-06-01T00:00:00Z"},
        "source": "Crossref", "is-referenced-by-count": 3, "title": [work.title], "prefix": work.doi.split("/")[0],
        "author": [{"given": given, "family": family, "sequence": "first" if position == 0 else "additional",
                    "affiliation": []} for position, (given, family) in enumerate(work.authors)],
        "member": "1643", "container-title": [work.venue] if work.venue else [],
        "published-print": _date(work.year), "issued": _date(work.year), "published": _date(work.year),
        "URL": f"https://doi.org/{work.doi}", "relation": {}, "subject": [], "score": 1.0,
    }
    if work.pdf_url:
        message["link"] = [{"URL": work.pdf_url, "content-type": "application/pdf", "content-version": "vor",
                            "intended-application": "text-mining"}]
    notices = [notice for notice in corpus if notice.retraction_of and work.doi
               and notice.retraction_of.lower() == work.doi.lower()]
    if work.retracted_by or notices:
        notice_doi = work.retracted_by or notices[0].doi
        message["updated-by"] = [{"DOI": notice_doi, "type": "retraction", "label": "Retraction",
                                  "source": "retraction-watch", "updated": _date(work.year + 1), "record-id": "4242"}]
    if work.retraction_of:
        message["update-to"] = [{"DOI": work.retraction_of, "type": "retraction", "label": "Retraction",
                                 "source": "publisher", "updated": _date(work.year)}]
    return message


def _location(url: str | None, pdf_url: str | None, source: str | None, repository: bool) -> dict[str, Any]:
    return {"is_oa": pdf_url is not None, "landing_page_url": url, "pdf_url": pdf_url,
            "source": {"id": "https://openalex.org/S4306400194", "display_name": source, "issn_l": None,
                       "issn": None, "is_oa": repository, "is_in_doaj": False, "is_core": False,
                       "host_organization": None, "type": "repository" if repository else "conference"}
            if source else None,
            "license": None, "license_id": None, "version": "submittedVersion" if repository else "publishedVersion",
            "is_accepted": not repository, "is_published": not repository}


def openalex_work(work: CorpusWork) -> dict[str, Any]:
    """OpenAlex's work object for a work: an arXiv-only one under its arXiv DOI, with an arxiv.org location."""
    doi = work.doi or (f"10.48550/arXiv.{work.arxiv_id}" if work.arxiv_id else None)
    locations = []
    if work.doi:
        locations.append(_location(f"https://doi.org/{work.doi}", work.pdf_url if not work.arxiv_id else None,
                                   work.venue, repository=False))
    if work.arxiv_id:
        locations.append(_location(f"https://arxiv.org/abs/{work.arxiv_id}", f"https://arxiv.org/pdf/{work.arxiv_id}",
                                   "arXiv (Cornell University)", repository=True))
    best = next((location for location in locations if location["is_oa"]), None)
    names = work.display_names
    return {
        "id": work.openalex_id, "doi": f"https://doi.org/{doi}" if doi else None, "title": work.title,
        "display_name": work.title, "publication_year": work.year, "publication_date": f"{work.year}-06-01",
        "ids": {"openalex": work.openalex_id, **({"doi": f"https://doi.org/{doi}"} if doi else {})},
        "language": "en", "primary_location": locations[0] if locations else None,
        "type": "preprint" if work.doi is None else "article", "type_crossref": "proceedings-article",
        "indexed_in": ["arxiv"] if work.arxiv_id else ["crossref"],
        "open_access": {"is_oa": best is not None, "oa_status": "green" if best else "closed",
                        "oa_url": best["pdf_url"] if best else None,
                        "any_repository_has_fulltext": bool(work.arxiv_id)},
        "authorships": [{"author_position": "first" if position == 0 else
                         "last" if position == len(names) - 1 else "middle",
                         "author": {"id": f"https://openalex.org/A{5000000000 + position}", "display_name": name,
                                    "orcid": None},
                         "institutions": [], "countries": [], "is_corresponding": position == 0,
                         "raw_author_name": name, "raw_affiliation_strings": [], "affiliations": []}
                        for position, name in enumerate(names)],
        "cited_by_count": 3, "biblio": {"volume": None, "issue": None, "first_page": None, "last_page": None},
        "is_retracted": work.retracted_by is not None, "is_paratext": False, "locations_count": len(locations),
        "locations": locations, "best_oa_location": best, "referenced_works_count": 0, "referenced_works": [],
        "updated_date": "2026-01-05T10:11:12.000000", "created_date": f"{work.year}-06-02",
    }


def semantic_scholar_paper(work: CorpusWork, fields: Iterable[str]) -> dict[str, Any]:
    """A graph API paper with `paperId` and the `fields` asked, as the service answers a `fields=` list."""
    external: dict[str, Any] = {"CorpusId": int(work.s2_paper_id[:8], 16)}
    if work.doi:
        external["DOI"] = work.doi
    if work.arxiv_id:
        external["ArXiv"] = work.arxiv_id
    pdf = work.pdf_url or (f"https://arxiv.org/pdf/{work.arxiv_id}" if work.arxiv_id else None)
    full = {
        "paperId": work.s2_paper_id, "externalIds": external, "title": work.title, "year": work.year,
        "venue": work.venue or ("arXiv.org" if work.arxiv_id else ""),
        "authors": [{"authorId": str(1000 + position), "name": name}
                    for position, name in enumerate(work.display_names)],
        "isOpenAccess": pdf is not None,
        # The service always sends the object; an absent PDF is an empty url.
        "openAccessPdf": {"url": pdf or "", "status": "GREEN" if pdf else None, "license": None,
                          "disclaimer": "Notice: Paper or abstract available at the url above."},
        "publicationDate": f"{work.year}-06-01", "journal": {"name": work.venue} if work.venue else None,
    }
    return {"paperId": work.s2_paper_id, **{name: full[name] for name in fields if name in full}}


def _werkzeug_page(status: int) -> Reply:
    title, text = _WERKZEUG_PAGES.get(status, (HTTPStatus(status).phrase, HTTPStatus(status).description))
    page = (f"<!doctype html>\n<html lang=en>\n<title>{status} {title}</title>\n<h1>{title}</h1>\n<p>{text}</p>\n")
    return Reply(status, page.encode("utf-8"), HTML_CONTENT_TYPE)


def _json(payload: Any, status: int = HTTPStatus.OK) -> Reply:
    return Reply(status, json.dumps(payload).encode("utf-8"), JSON_CONTENT_TYPE)


def error_reply(service: str, status: int, subject: str = "") -> Reply:
    """The body and content type each service answers an error status with (`subject`: the id not found)."""
    if service == CROSSREF:
        text = "Resource not found." if status == 404 else HTTPStatus(status).phrase
        return Reply(status, text.encode("utf-8"), TEXT_CONTENT_TYPE)
    if service == OPENALEX:
        if status in _WERKZEUG_PAGES:
            return _werkzeug_page(status)
        # the API's own errors (core/exceptions.py there): {"error": description, "message": detail}
        return _json({"error": HTTPStatus(status).phrase, "message": ""}, status)
    if status == 404:
        return _json({"error": f"Paper with id {subject} not found"}, status)
    if status == 429:
        return _json({"message": S2_RATE_LIMIT_MESSAGE, "code": "429"}, status)
    return _json({"message": HTTPStatus(status).phrase}, status)


@functools.lru_cache(maxsize=100_000)
def _title_words(title: str) -> frozenset[str]:
    """A work's title words, normalised once: a venue-sized benchmark searches thousands of works per request."""
    return frozenset(normalise_title(title).split())


class FakeScholarlyServer(LoopbackServer):
    """Serves `works` as Crossref, OpenAlex and Semantic Scholar on 127.0.0.1 in a background thread; a context
    manager. `s2_api_key`: when given, Semantic Scholar answers 403 to a request without that x-api-key header."""

    def __init__(self, works: Iterable[CorpusWork], faults: Iterable[FaultRule] = (),
                 s2_api_key: str | None = None) -> None:
        super().__init__(faults)
        self.works = list(works)
        self._s2_api_key = s2_api_key

    @property
    def base_urls(self) -> dict[str, str]:
        """The API root of each service on this server, as a venue's `base_urls` option gives them."""
        return {service: self.url + prefix for service, prefix in SERVICE_PREFIXES.items()}

    def requests_to(self, service: str) -> list[RecordedRequest]:
        return [request for request in self.requests if request.path.startswith(SERVICE_PREFIXES[service] + "/")]

    # Request handling -------------------------------------------------------------------------------------------------

    def request_path(self, url_path: str) -> str:
        return unquote(url_path)  # faults and look-ups see a DOI as written, however a client quoted it

    def reply_to(self, request: IncomingRequest, fault: FaultRule | None) -> Reply:
        path, params = request.path, request.params
        service = next((name for name, prefix in SERVICE_PREFIXES.items() if path.startswith(prefix + "/")), None)
        if service is None:
            return Reply(HTTPStatus.NOT_FOUND, b"Not Found", TEXT_CONTENT_TYPE)
        action = fault.action if fault else None
        if action == "status":
            reply = error_reply(service, fault.status)
        elif action == "retry_after":
            reply = error_reply(service, HTTPStatus.TOO_MANY_REQUESTS)
            reply.headers["Retry-After"] = str(fault.retry_after)
        elif action == "body":
            reply = Reply(HTTPStatus.OK, fault.body, fault.content_type)
        elif service == SEMANTIC_SCHOLAR and self._s2_api_key is not None \
                and request.headers.get("x-api-key") != self._s2_api_key:
            reply = _json({"message": "Forbidden"}, HTTPStatus.FORBIDDEN)
        else:
            reply = self._answer(service, path, params)
            if action == "malformed_json":  # a JSON document cut in half is always unterminated
                reply = Reply(HTTPStatus.OK, reply.body[: len(reply.body) // 2], JSON_CONTENT_TYPE)
        if service == CROSSREF:
            reply.headers.update({"X-Rate-Limit-Limit": "50", "X-Rate-Limit-Interval": "1s"})
        return reply

    def _answer(self, service: str, path: str, params: dict[str, str]) -> Reply:
        if service == CROSSREF:
            if path == "/crossref/works":
                return self._crossref_search(params)
            if path.startswith("/crossref/works/"):
                work = self._by_doi(path.removeprefix("/crossref/works/"), CROSSREF)
                if work is not None:
                    return _json({"status": "ok", "message-type": "work", "message-version": "1.0.0",
                                  "message": crossref_work(work, self.works)})
            return error_reply(CROSSREF, HTTPStatus.NOT_FOUND)
        if service == OPENALEX:
            if path == "/openalex/works":
                return self._openalex_search(params)
            identifier = path.removeprefix("/openalex/works/")
            for prefix in ("doi:", "https://doi.org/", "http://doi.org/"):
                if path.startswith("/openalex/works/") and identifier.lower().startswith(prefix):
                    work = self._by_doi(identifier[len(prefix):], OPENALEX)
                    if work is not None:
                        return _json(openalex_work(work))
            return error_reply(OPENALEX, HTTPStatus.NOT_FOUND)
        fields = [name for name in params.get("fields", "title").split(",") if name]
        if path == S2_PAPER_PATH + "search":
            return self._s2_search(params, fields)
        identifier = path.removeprefix(S2_PAPER_PATH)
        kind, _, value = identifier.partition(":")
        work = (self._by_doi(value, SEMANTIC_SCHOLAR) if kind.upper() == "DOI"
                else self._by_arxiv(value, SEMANTIC_SCHOLAR) if kind.upper() == "ARXIV"
                else next((w for w in self._indexed(SEMANTIC_SCHOLAR) if w.s2_paper_id == identifier), None))
        if path.startswith(S2_PAPER_PATH) and work is not None:
            return _json(semantic_scholar_paper(work, fields))
        return error_reply(SEMANTIC_SCHOLAR, HTTPStatus.NOT_FOUND, identifier)

    # Look-ups ---------------------------------------------------------------------------------------------------------

    def _indexed(self, service: str) -> list[CorpusWork]:
        return [work for work in self.works if service in work.services and (work.doi or service != CROSSREF)]

    def _by_doi(self, doi: str, service: str) -> CorpusWork | None:
        doi = doi.lower()
        for work in self._indexed(service):
            if work.doi and work.doi.lower() == doi:
                return work
            # arXiv's DataCite DOIs: OpenAlex and Semantic Scholar know them, Crossref does not
            if service != CROSSREF and work.arxiv_id and doi == ARXIV_DOI_PREFIX + work.arxiv_id.lower():
                return work
        return None

    def _by_arxiv(self, arxiv_id: str, service: str) -> CorpusWork | None:
        bare = re.sub(r"v\d+$", "", arxiv_id.lower())
        return next((work for work in self._indexed(service) if (work.arxiv_id or "").lower() == bare), None)

    def _search(self, query: str, service: str, limit: int) -> list[tuple[CorpusWork, float]]:
        words = set(normalise_title(query).split())
        scored = []
        for work in self._indexed(service):
            title_words = _title_words(work.title)
            share = len(title_words & words) / len(title_words) if title_words else 0.0
            if share >= SEARCH_MIN_SHARE:
                scored.append((work, share))
        scored.sort(key=lambda pair: -pair[1])
        return scored[:limit]

    def _crossref_search(self, params: dict[str, str]) -> Reply:
        query = params.get("query.bibliographic") or params.get("query") or ""
        rows = int(params.get("rows", "20"))
        hits = self._search(query, CROSSREF, rows)
        items = [{**crossref_work(work, self.works), "score": round(60 * share, 3)} for work, share in hits]
        return _json({"status": "ok", "message-type": "work-list", "message-version": "1.0.0", "message": {
            "facets": {}, "total-results": len(items), "items": items, "items-per-page": rows,
            "query": {"start-index": 0, "search-terms": None}}})

    def _openalex_search(self, params: dict[str, str]) -> Reply:
        per_page = int(params.get("per-page", params.get("per_page", "25")))
        hits = self._search(params.get("search", ""), OPENALEX, per_page)
        results = [{**openalex_work(work), "relevance_score": round(1000 * share, 3)} for work, share in hits]
        return _json({"meta": {"count": len(results), "db_response_time_ms": 14, "page": 1, "per_page": per_page,
                               "groups_count": None}, "results": results, "group_by": []})

    def _s2_search(self, params: dict[str, str], fields: list[str]) -> Reply:
        limit = int(params.get("limit", "100"))
        hits = self._search(params.get("query", ""), SEMANTIC_SCHOLAR, limit)
        return _json({"total": len(hits), "offset": 0,
                      "data": [semantic_scholar_paper(work, fields) for work, _ in hits]})


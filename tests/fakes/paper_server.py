"""A loopback stand-in for where cited papers' full texts come from: arXiv (its API and its PDF URLs) and any web
host serving an open-access PDF, with fault injection.

Routes, on 127.0.0.1 (a free port):
* ``GET /api/query?id_list=...&search_query=...&start=&max_results=``: arXiv's API answer, an Atom 1.0 feed as
  export.arxiv.org sends it (opensearch totals, one ``<entry>`` per article with its versioned ``/abs/`` id, title,
  summary, authors, ``alternate`` and ``pdf`` links, ``arxiv:primary_category``, ``arxiv:doi``). A malformed id in
  ``id_list`` gives the API's error feed (HTTP 200, one entry titled ``Error``, id under ``/api/errors``); a
  well-formed unknown id an empty feed. ``search_query`` understands field terms ``ti:``, ``abs:``, ``au:`` and
  ``all:`` (a word or a quoted phrase) joined by ``AND``: every term's words must be in that field.
* ``GET /pdf/<id>`` (with or without a version and ``.pdf``): the article's PDF, ``application/pdf``; 404 otherwise.
* any other path given in ``files``: its bytes, with its content type (an open-access location).

``FaultRule``s (testing/loopback.py, matched on the path and query) make a request misbehave: ``status`` answers
that status with an HTML page, ``retry_after`` a 429 with ``Retry-After``, ``malformed_json`` the normal body cut
in half, ``hang`` a late answer, ``body`` other bytes (an HTML page served as a PDF), ``drop`` a closed connection.
Standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any
from urllib.parse import urlencode
from xml.sax.saxutils import escape, quoteattr

from tests.fakes.loopback import FaultRule, IncomingRequest, LoopbackServer, Reply

ATOM_CONTENT_TYPE = "application/atom+xml; charset=UTF-8"
HTML_CONTENT_TYPE = "text/html; charset=utf-8"
PDF_CONTENT_TYPE = "application/pdf"
DEFAULT_MAX_RESULTS = 10
FEED_UPDATED = "2025-11-11T00:00:00Z"

_ID_FORMAT = re.compile(r"^(\d{4}\.\d{4,5}|[a-z][a-z\-]+(\.[A-Z]{2})?/\d{7})(v\d+)?$")
_PDF_PATH = re.compile(r"^/pdf/(?P<id>.+?)(?P<version>v\d+)?(\.pdf)?$")
_TERM = re.compile(r'(?P<field>ti|abs|au|all):(?:"(?P<phrase>[^"]*)"|(?P<word>[^\s()]+))')
_WORD = re.compile(r"[0-9a-z]+")


@dataclass(frozen=True)
class ArxivPaper:
    """One article the fake arXiv knows: its id without version, latest version number, metadata and PDF bytes."""

    arxiv_id: str
    title: str
    pdf: bytes
    authors: tuple[str, ...] = ()
    summary: str = ""
    version: int = 1
    doi: str | None = None
    primary_category: str = "cs.CL"
    published: str = "2024-01-15T18:00:00Z"

    def field_text(self, name: str) -> str:
        texts = {"ti": self.title, "abs": self.summary, "au": " ".join(self.authors)}
        return " ".join(texts.values()) if name == "all" else texts[name]


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _html(status: int, message: str) -> Reply:
    phrase = HTTPStatus(status).phrase
    page = f"<html><head><title>{status} {phrase}</title></head><body><h1>{phrase}</h1><p>{escape(message)}</p>" \
           "</body></html>"
    return Reply(status, page.encode("utf-8"), HTML_CONTENT_TYPE)


class PaperServer(LoopbackServer):
    """The fake arXiv and open-access host; a context manager (or start()/stop()). `url` is the base to give as
    `base_urls: {arxiv: ...}`, and open-access URLs are `url + path` for the paths in `files`."""

    methods = frozenset({"GET"})  # arXiv and open-access hosts are read only; anything else is answered 501

    def __init__(self, papers: Sequence[ArxivPaper] = (), files: Mapping[str, tuple[bytes, str]] | None = None,
                 faults: Sequence[FaultRule] = ()) -> None:
        super().__init__(faults)
        self.papers = {paper.arxiv_id: paper for paper in papers}
        self.files = dict(files or {})

    # -- what tests set and read ------------------------------------------------------------------------------

    def add_file(self, path: str, body: bytes, content_type: str = PDF_CONTENT_TYPE) -> str:
        """Serve `body` at `path`; its URL."""
        self.files[path] = (body, content_type)
        return self.url + path

    # -- requests ---------------------------------------------------------------------------------------------

    def reply_to(self, request: IncomingRequest, fault: FaultRule | None) -> Reply:
        path, params = request.path, request.params
        action = fault.action if fault else None
        if action == "status":
            return _html(fault.status, f"Injected fault: {path} answered {fault.status}")
        if action == "retry_after":
            reply = _html(HTTPStatus.TOO_MANY_REQUESTS, "Rate exceeded.")
            reply.headers["Retry-After"] = str(fault.retry_after)
            return reply
        if action == "body":
            return Reply(HTTPStatus.OK, fault.body, fault.content_type)
        reply = self._answer(path, params)
        if action == "malformed_json":  # the body cut short, as a dropped transfer leaves it
            reply.body = reply.body[: len(reply.body) // 2]
        return reply

    def _answer(self, path: str, params: dict[str, str]) -> Reply:
        if path == "/api/query":
            return Reply(HTTPStatus.OK, self._feed(params).encode("utf-8"), ATOM_CONTENT_TYPE)
        pdf = _PDF_PATH.match(path)
        if pdf and pdf.group("id") in self.papers:
            return Reply(HTTPStatus.OK, self.papers[pdf.group("id")].pdf, PDF_CONTENT_TYPE)
        if path in self.files:
            body, content_type = self.files[path]
            return Reply(HTTPStatus.OK, body, content_type)
        return _html(HTTPStatus.NOT_FOUND, f"{path} not found")

    # -- arXiv's Atom feed ------------------------------------------------------------------------------------

    def _feed(self, params: dict[str, str]) -> str:
        search_query, id_list = params.get("search_query", ""), params.get("id_list", "")
        start = int(params.get("start") or 0)
        max_results = int(params.get("max_results") or DEFAULT_MAX_RESULTS)
        query = {"search_query": search_query, "id_list": id_list, "start": start, "max_results": max_results}
        ids = [item.strip() for item in id_list.split(",") if item.strip()]
        bad = next((item for item in ids if not _ID_FORMAT.match(item)), None)
        if bad is not None:
            return _feed_xml(query, 1, [_error_entry(f"incorrect id format for {bad}")], start)
        if ids:  # a version in the list is accepted; the latest is described
            bare = [_ID_FORMAT.match(item).group(1) for item in ids]
            found = [self.papers[arxiv_id] for arxiv_id in bare if arxiv_id in self.papers]
        else:
            found = list(self.papers.values()) if search_query else []
        terms = [(term.group("field"), _words(term.group("phrase") or term.group("word") or ""))
                 for term in _TERM.finditer(search_query)]
        found = [paper for paper in found
                 if all(set(words) <= set(_words(paper.field_text(name))) for name, words in terms)]
        page = found[start:start + max_results]
        return _feed_xml(query, len(found), [self._entry(paper) for paper in page], start)

    def _entry(self, paper: ArxivPaper) -> str:
        versioned = f"{paper.arxiv_id}v{paper.version}"
        authors = "".join(f"\n    <author>\n      <name>{escape(name)}</name>\n    </author>" for name in paper.authors)
        doi = f"\n    <arxiv:doi>{escape(paper.doi)}</arxiv:doi>" if paper.doi else ""
        return f"""  <entry>
    <id>https://arxiv.org/abs/{versioned}</id>
    <title>{escape(paper.title)}</title>
    <updated>{paper.published}</updated>
    <link href="https://arxiv.org/abs/{versioned}" rel="alternate" type="text/html"/>
    <link href="https://arxiv.org/pdf/{versioned}" rel="related" type="application/pdf" title="pdf"/>
    <summary>{escape(paper.summary)}</summary>
    <category term="{paper.primary_category}" scheme="http://arxiv.org/schemas/atom"/>
    <published>{paper.published}</published>
    <arxiv:primary_category term="{paper.primary_category}"/>{authors}{doi}
  </entry>
"""


def _error_entry(message: str) -> str:
    anchor = "https://arxiv.org/api/errors#" + message.replace(" ", "_")
    return f"""  <entry>
    <id>{escape(anchor)}</id>
    <title>Error</title>
    <summary>{escape(message)}</summary>
    <updated>{FEED_UPDATED}</updated>
    <link href={quoteattr(anchor)} rel="alternate" type="text/html"/>
    <author>
      <name>arXiv api core</name>
    </author>
  </entry>
"""


def _feed_xml(query: Mapping[str, Any], total: int, entries: Sequence[str], start: int) -> str:
    query_text = urlencode(query)
    return f"""<?xml version='1.0' encoding='UTF-8'?>
<feed xmlns:opensearch="http://a9.com/-/spec/opensearch/1.1/" xmlns:arxiv="http://arxiv.org/schemas/atom" \
xmlns="http://www.w3.org/2005/Atom">
  <id>https://arxiv.org/api/loopback</id>
  <title>{escape(f"arXiv Query: {query_text}")}</title>
  <updated>{FEED_UPDATED}</updated>
  <link href={quoteattr("https://arxiv.org/api/query?" + query_text)} type="application/atom+xml"/>
  <opensearch:itemsPerPage>{query["max_results"]}</opensearch:itemsPerPage>
  <opensearch:totalResults>{total}</opensearch:totalResults>
  <opensearch:startIndex>{start}</opensearch:startIndex>
{"".join(entries)}</feed>
"""

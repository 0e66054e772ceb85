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

``FaultRule``s (the OpenReview fake's, matched on the path and query) make a request misbehave: ``status`` answers
that status with an HTML page, ``retry_after`` a 429 with ``Retry-After``, ``malformed_json`` the normal body cut
in half, ``hang`` a late answer, ``body`` other bytes (an HTML page served as a PDF), ``drop`` a closed connection.
Standard library only.
"""

from __future__ import annotations

import re
import socket
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit
from xml.sax.saxutils import escape, quoteattr

from peerify_dagster.testing.openreview_server import FaultRule, RecordedRequest

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


@dataclass
class _Reply:
    status: int
    body: bytes
    content_type: str
    headers: dict[str, str]


def _html(status: int, message: str) -> _Reply:
    phrase = HTTPStatus(status).phrase
    page = f"<html><head><title>{status} {phrase}</title></head><body><h1>{phrase}</h1><p>{escape(message)}</p>" \
           "</body></html>"
    return _Reply(status, page.encode("utf-8"), HTML_CONTENT_TYPE, {})


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    timeout = 30

    def setup(self) -> None:
        super().setup()
        self.server.track(self.connection, True)

    def finish(self) -> None:
        self.server.track(self.connection, False)
        super().finish()

    def do_GET(self) -> None:
        self.server.fake.handle(self)

    def log_message(self, format: str, *args: Any) -> None:
        """Silent: PaperServer.requests is the log."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, fake: PaperServer) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.fake = fake
        self.connections: set[socket.socket] = set()
        self.lock = threading.Lock()

    def track(self, connection: socket.socket, is_open: bool) -> None:
        with self.lock:
            (self.connections.add if is_open else self.connections.discard)(connection)

    def close_connections(self) -> None:
        with self.lock:
            connections = list(self.connections)
        for connection in connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # the client closed it already

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that gave up on a hanging answer closed its end; bugs still print.
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


class PaperServer:
    """The fake arXiv and open-access host; a context manager (or start()/stop()). `url` is the base to give as
    `base_urls: {arxiv: ...}`, and open-access URLs are `url + path` for the paths in `files`."""

    def __init__(self, papers: Sequence[ArxivPaper] = (), files: Mapping[str, tuple[bytes, str]] | None = None,
                 faults: Sequence[FaultRule] = ()) -> None:
        self.papers = {paper.arxiv_id: paper for paper in papers}
        self.files = dict(files or {})
        self._faults: list[list[Any]] = [[rule, rule.times] for rule in faults]
        self._requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle --------------------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("PaperServer has no address until start() is called")
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> PaperServer:
        self._stopping.clear()
        self._server = _Server(self)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="paper-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is None:
            return
        self._stopping.set()  # wakes handlers held by a "hang" fault
        self._server.shutdown()
        self._server.close_connections()
        self._server.server_close()
        assert self._thread is not None
        self._thread.join()
        self._server = self._thread = None

    def __enter__(self) -> PaperServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()

    # -- what tests set and read ------------------------------------------------------------------------------

    def add_file(self, path: str, body: bytes, content_type: str = PDF_CONTENT_TYPE) -> str:
        """Serve `body` at `path`; its URL."""
        self.files[path] = (body, content_type)
        return self.url + path

    def add_fault(self, rule: FaultRule) -> None:
        with self._lock:
            self._faults.append([rule, rule.times])

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    def _take_fault(self, path: str, params: dict[str, str]) -> FaultRule | None:
        with self._lock:
            for armed in self._faults:
                rule, remaining = armed
                if remaining != 0 and rule.matches(path, params):
                    if remaining is not None:
                        armed[1] = remaining - 1
                    return rule
        return None

    # -- requests ---------------------------------------------------------------------------------------------

    def handle(self, handler: _Handler) -> None:
        url = urlsplit(handler.path)
        path, params = url.path, dict(parse_qsl(url.query, keep_blank_values=True))
        fault = self._take_fault(path, params)
        if fault is not None and fault.action == "drop":
            handler.close_connection = True
            self._record(path, params, None, fault)
            return
        if fault is not None and fault.action == "hang":
            self._stopping.wait(fault.hang_seconds)
        reply = self._reply(fault, path, params)
        self._record(path, params, reply.status, fault)
        handler.send_response(reply.status)
        handler.send_header("Content-Type", reply.content_type)
        handler.send_header("Content-Length", str(len(reply.body)))
        for name, value in reply.headers.items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(reply.body)

    def _record(self, path: str, params: dict[str, str], status: int | None, fault: FaultRule | None) -> None:
        with self._lock:
            self._requests.append(RecordedRequest("GET", path, params, status, fault.action if fault else None))

    def _reply(self, fault: FaultRule | None, path: str, params: dict[str, str]) -> _Reply:
        action = fault.action if fault else None
        if action == "status":
            return _html(fault.status, f"Injected fault: {path} answered {fault.status}")
        if action == "retry_after":
            reply = _html(HTTPStatus.TOO_MANY_REQUESTS, "Rate exceeded.")
            reply.headers["Retry-After"] = str(fault.retry_after)
            return reply
        if action == "body":
            return _Reply(HTTPStatus.OK, fault.body, fault.content_type, {})
        reply = self._answer(path, params)
        if action == "malformed_json":  # the body cut short, as a dropped transfer leaves it
            reply.body = reply.body[: len(reply.body) // 2]
        return reply

    def _answer(self, path: str, params: dict[str, str]) -> _Reply:
        if path == "/api/query":
            return _Reply(HTTPStatus.OK, self._feed(params).encode("utf-8"), ATOM_CONTENT_TYPE, {})
        pdf = _PDF_PATH.match(path)
        if pdf and pdf.group("id") in self.papers:
            return _Reply(HTTPStatus.OK, self.papers[pdf.group("id")].pdf, PDF_CONTENT_TYPE, {})
        if path in self.files:
            body, content_type = self.files[path]
            return _Reply(HTTPStatus.OK, body, content_type, {})
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

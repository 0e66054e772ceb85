"""Cited papers' full texts: a local library indexed, PDFs downloaded (arXiv, open-access locations) with the crawler's
HTTP policy, each candidate parsed by the manuscript parser and checked to be the cited paper, and the ones taken
stored content-addressed in the lake.

`CitedPaperStore` keeps `<lake>/cited_pdfs/<sha256>.pdf`, each written once (atomically) and never rewritten, and the
parsed documents by content hash, so the same PDF found for two entries (or from two sources) is stored and parsed
once. `CitedPaperResolver.resolve_entry` tries the venue's `resolve` sources in order and records every try; the
decisions (what matches, what is the right paper, what the entry's row says) are `domain/citations/resolution.py`'s.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pypdfium2 as pdfium
import requests

from peerify_dagster.domain.citations.entries import ParsedEntry
from peerify_dagster.domain.citations.options import (
    SOURCE_ARXIV,
    SOURCE_LIBRARY,
    SOURCE_OPEN_ACCESS,
    SOURCE_VENUE,
    CitationOptions,
)
from peerify_dagster.domain.citations.resolution import (
    IDENTIFIER_PAGES,
    OUTCOME_NO_MATCH,
    OUTCOME_NOT_APPLICABLE,
    OUTCOME_RESOLVED,
    OUTCOME_WRONG_PAPER,
    RIGHT_PAPER_THRESHOLD,
    ArxivFeedError,
    ArxivRecord,
    Attempt,
    LibraryFile,
    Resolution,
    arxiv_pdf_url,
    arxiv_query_url,
    arxiv_title_query,
    below_threshold,
    closest_library_title,
    closest_title,
    conclude,
    entry_arxiv_id,
    first_page_text,
    match_library,
    parse_arxiv_feed,
    right_paper,
    right_paper_needs,
)
from peerify_dagster.domain.citations.titles import SAME_TITLE
from peerify_dagster.domain.pdfs import PdfProblem, inspect_pdf
from peerify_dagster.resources.document_parser import DocumentParser, ManuscriptParseError, ParsedDocument
from peerify_dagster.resources.openreview import HttpPolicy, describe_failure, retrying_adapter
from peerify_dagster.resources.store import LakeStore, Location

CITED_PDFS_DIR = "cited_pdfs"
DEFAULT_ARXIV_BASE = "https://export.arxiv.org"  # arXiv's API host; it serves /pdf/<id> too
# arXiv's terms of use ask for one request every three seconds at most.
ARXIV_REQUEST_INTERVAL_S = 3.0
MAX_PDF_BYTES = 64 * 1024 * 1024  # a cited paper's PDF; anything larger is a dataset or a thesis scan
ARXIV_SEARCH_RESULTS = 5
# Downloads wait less than the crawler (60 s): a cited paper is one of tens per manuscript, and a host that does not
# answer in half a minute is recorded and skipped.
CITED_PAPER_POLICY = HttpPolicy(timeout_s=30.0, retries=3, backoff_s=1.0, backoff_max_s=30.0)

_log = logging.getLogger(__name__)


class DownloadError(Exception):
    """A download that gave no usable bytes; `reason` is a short code ("http_404", "timeout", "too_large", ...)."""

    def __init__(self, url: str, reason: str, detail: str) -> None:
        super().__init__(f"{url}: {reason}: {detail}")
        self.url, self.reason, self.detail = url, reason, detail


def http_session(policy: HttpPolicy = CITED_PAPER_POLICY) -> requests.Session:
    """A session with the crawler's retry layer and timeout (`retrying_adapter`)."""
    session = requests.Session()
    adapter = retrying_adapter(policy)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


def download(session: requests.Session, url: str, max_bytes: int = MAX_PDF_BYTES,
             params: Mapping[str, str] | None = None) -> bytes:
    """The body of a GET, retried as the session's policy says (429 and 5xx, honouring Retry-After); raises
    `DownloadError` for a final error status, a failure of the connection or a body over `max_bytes`."""
    try:
        with session.get(url, params=params, stream=True) as response:
            if response.status_code != 200:
                raise DownloadError(url, f"http_{response.status_code}",
                                    f"answered {response.status_code} {response.reason}")
            declared = int(response.headers.get("Content-Length") or 0)
            if declared > max_bytes:
                raise DownloadError(url, "too_large", f"{declared} bytes declared, at most {max_bytes} taken")
            body = bytearray()
            for chunk in response.iter_content(chunk_size=1 << 16):
                body.extend(chunk)
                if len(body) > max_bytes:
                    raise DownloadError(url, "too_large", f"more than {max_bytes} bytes sent")
            return bytes(body)
    except requests.RequestException as error:
        reason, message = describe_failure(error)
        raise DownloadError(url, reason, message) from error


@dataclass
class LibraryIndex:
    """A library folder's PDFs (`files`) and the ones left out, each as "<name>: <reason>" (`skipped`)."""

    folder: Path
    files: list[LibraryFile] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def index_library(folder: Path | str) -> LibraryIndex:
    """Every PDF under `folder` with the text of its first pages (pypdfium2: milliseconds a file, where the layout
    parser takes seconds), its content hash and the identifiers its name and pages give. A file that is not a
    usable PDF (not one, truncated, unreadable) is skipped with the reason; one whose text cannot be read
    (encrypted, scanned) is kept with no text, so that a name still finds it and its rejection says why."""
    folder = Path(folder)
    index = LibraryIndex(folder)
    if not folder.is_dir():
        index.skipped.append(f"{folder}: not a folder")
        return index
    for path in sorted(item for item in folder.rglob("*") if item.suffix.lower() == ".pdf" and item.is_file()):
        name = path.relative_to(folder).as_posix()
        try:
            data = path.read_bytes()
            info = inspect_pdf(data, f"library file {name}")
        except (OSError, PdfProblem) as error:
            index.skipped.append(f"{name}: {getattr(error, 'reason', 'unreadable')}: {error}")
            continue
        pages: list[str] = []
        title = None
        if not info.encrypted:
            try:
                document = pdfium.PdfDocument(data)
                try:
                    pages = [document[number].get_textpage().get_text_range()
                             for number in range(min(IDENTIFIER_PAGES, len(document)))]
                    title = document.get_metadata_dict().get("Title")
                finally:
                    document.close()
            except pdfium.PdfiumError as error:
                _log.info("library file %s: no text read (%s)", name, error)
        index.files.append(LibraryFile.from_pages(name, info.sha256, pages, title))
    return index


class CitedPaperStore:
    """Cited PDFs under `<lake>/cited_pdfs/<sha256>.pdf` (written once, atomically, never rewritten) and their parses
    by the manuscript parser, kept by content hash for the life of the store."""

    def __init__(self, lake_root: Path | Location | str, parser: DocumentParser) -> None:
        self.files = LakeStore(lake_root)  # a folder or an S3 lake
        self.root = self.files.root / CITED_PDFS_DIR
        self.parser = parser
        self._documents: dict[str, ParsedDocument] = {}
        self._failures: dict[str, ManuscriptParseError] = {}

    @staticmethod
    def lake_path(sha256: str) -> str:
        """The stored PDF's path relative to the lake root (`cited_manuscripts.lake_path`)."""
        return f"{CITED_PDFS_DIR}/{sha256}.pdf"

    def path(self, sha256: str) -> Location:
        return self.root / f"{sha256}.pdf"

    def put(self, data: bytes) -> str:
        """Store the bytes under their hash, unless a file of that hash is there already; their sha256."""
        sha256 = hashlib.sha256(data).hexdigest()
        path = self.path(sha256)
        if not path.exists():
            self.files.write_bytes(path, data)
        return sha256

    def parse(self, sha256: str, data: bytes | None = None) -> ParsedDocument:
        """The PDF of that hash parsed as manuscripts are (its blocks and positions), from `data` or the stored file;
        raises the parser's `ManuscriptParseError` (encrypted, no_text_layer, ...), also when asked again."""
        if sha256 in self._documents:
            return self._documents[sha256]
        if sha256 in self._failures:
            raise self._failures[sha256]
        source = data if data is not None else self.path(sha256).read_bytes()
        try:
            document = self.parser.parse(source, source_name=f"{sha256}.pdf", paper_id=f"sha256:{sha256}")
        except ManuscriptParseError as error:
            self._failures[sha256] = error
            raise
        self._documents[sha256] = document
        return document


class CitedPaperResolver:
    """Finds an entry's full text in the venue's `resolve` order (see `resolution.py`), each candidate parsed and
    checked before it is stored. arXiv is asked at most once per `arxiv_interval_s` (its terms of use)."""

    def __init__(self, store: CitedPaperStore, policy: HttpPolicy = CITED_PAPER_POLICY,
                 max_bytes: int = MAX_PDF_BYTES, arxiv_interval_s: float = ARXIV_REQUEST_INTERVAL_S) -> None:
        self.store = store
        self.session = http_session(policy)
        self.max_bytes = max_bytes
        self.arxiv_interval_s = arxiv_interval_s
        self._last_arxiv_request = float("-inf")

    def resolve_entry(self, entry: ParsedEntry, options: CitationOptions, library: LibraryIndex | None = None,
                      venue_titles: Mapping[str, str] | None = None,
                      open_access_urls: Sequence[str] = ()) -> Resolution:
        """The entry's `cited_papers` row. `library`: the venue's library folder indexed (`index_library`);
        `venue_titles`: the venue's other manuscripts (paper id -> title, the citing paper left out);
        `open_access_urls`: the PDF locations the metadata check found for the entry."""
        attempts: list[Attempt] = []
        for source in options.resolve:
            if source == SOURCE_LIBRARY:
                attempts.extend(self._from_library(entry, library))
            elif source == SOURCE_VENUE:
                attempts.append(self._from_venue(entry, venue_titles or {}))
            elif source == SOURCE_ARXIV:
                attempts.extend(self._from_arxiv(entry, options.base_urls.get(SOURCE_ARXIV, DEFAULT_ARXIV_BASE)))
            elif source == SOURCE_OPEN_ACCESS:
                attempts.extend(self._from_open_access(entry, open_access_urls))
            if attempts and attempts[-1].outcome == OUTCOME_RESOLVED:
                break
        return conclude(attempts)

    # -- sources ------------------------------------------------------------------------------------------------

    def _from_library(self, entry: ParsedEntry, library: LibraryIndex | None) -> list[Attempt]:
        if library is None or not library.files:
            return [Attempt(SOURCE_LIBRARY, OUTCOME_NOT_APPLICABLE, detail="no library folder, or no PDF in it")]
        candidates = match_library(entry, library.files)
        if not candidates:
            detail = f"none of {len(library.files)} files has the entry's DOI, arXiv id or title"
            if closest := closest_library_title(entry, library.files):
                closest_file, score = closest
                named = f"{closest_file.title_guess!r} ({closest_file.name})" if closest_file.title_guess \
                    else repr(closest_file.name)
                detail = f"{below_threshold(named, score, RIGHT_PAPER_THRESHOLD)}; {detail}"
            return [Attempt(SOURCE_LIBRARY, OUTCOME_NO_MATCH, detail=detail)]
        attempts = []
        for library_file, how in candidates:
            try:
                data = (library.folder / library_file.name).read_bytes()
            except OSError as error:  # removed or unreadable since the folder was indexed
                attempts.append(Attempt(SOURCE_LIBRARY, "unreadable", library_file.name, str(error)))
                continue
            attempts.append(self._check(entry, SOURCE_LIBRARY, library_file.name, data, found_by=how))
            if attempts[-1].outcome == OUTCOME_RESOLVED:
                break
        return attempts

    def _from_venue(self, entry: ParsedEntry, venue_titles: Mapping[str, str]) -> Attempt:
        if not entry.title:
            return Attempt(SOURCE_VENUE, OUTCOME_NOT_APPLICABLE, detail="the entry has no title to look up")
        closest = closest_title(entry.title, venue_titles)
        if closest is None or closest[1] < SAME_TITLE:
            detail = f"no title among {len(venue_titles)} manuscripts of the venue is the entry's"
            if closest:
                named = f"{venue_titles[closest[0]]!r} ({closest[0]})"
                detail = f"{below_threshold(named, closest[1], SAME_TITLE)}; {detail}"
            return Attempt(SOURCE_VENUE, OUTCOME_NO_MATCH, detail=detail)
        paper_id, similarity = closest
        return Attempt(SOURCE_VENUE, OUTCOME_RESOLVED, paper_id, right_paper_score=round(similarity, 4),
                       detail=f"title similarity {similarity:.2f}")

    def _from_arxiv(self, entry: ParsedEntry, base: str) -> list[Attempt]:
        arxiv_id = entry_arxiv_id(entry)
        metadata_title = None
        if arxiv_id is None:
            if not entry.title:
                return [Attempt(SOURCE_ARXIV, OUTCOME_NOT_APPLICABLE, detail="the entry has no arXiv id and no title")]
            try:
                hits = self._arxiv_feed(base, {"search_query": arxiv_title_query(entry.title), "start": "0",
                                               "max_results": str(ARXIV_SEARCH_RESULTS)})
            except DownloadError as error:
                return [Attempt(SOURCE_ARXIV, error.reason, error.url, error.detail)]
            closest = closest_title(entry.title, {index: hit.title for index, hit in enumerate(hits)})
            if closest is None or closest[1] < SAME_TITLE:
                detail = "no arXiv title search hit has the entry's title"
                if closest:
                    named = f"{hits[closest[0]].title!r} ({hits[closest[0]].versioned_id})"
                    detail = f"{below_threshold(named, closest[1], SAME_TITLE)}; {detail}"
                return [Attempt(SOURCE_ARXIV, OUTCOME_NO_MATCH, arxiv_query_url(base), detail)]
            record = hits[closest[0]]
            arxiv_id, metadata_title = record.versioned_id, record.title
        elif not entry.title:
            # Without a title of its own the entry is checked against arXiv's title for the id.
            try:
                records = self._arxiv_feed(base, {"id_list": arxiv_id})
                metadata_title = records[0].title if records else None
            except DownloadError as error:
                _log.info("arXiv record of %s not read (%s); the PDF is checked by its stamp only", arxiv_id, error)
        url = arxiv_pdf_url(arxiv_id, base)
        try:
            self._wait_for_arxiv()
            data = download(self.session, url, self.max_bytes)
        except DownloadError as error:
            return [Attempt(SOURCE_ARXIV, error.reason, url, error.detail)]
        return [self._check(entry, SOURCE_ARXIV, url, data, metadata_title=metadata_title)]

    def _arxiv_feed(self, base: str, params: Mapping[str, str]) -> list[ArxivRecord]:
        url = arxiv_query_url(base)
        self._wait_for_arxiv()
        body = download(self.session, url, self.max_bytes, params=params)
        try:
            return parse_arxiv_feed(body)
        except ArxivFeedError as error:
            raise DownloadError(url, error.reason, error.detail) from error

    def _wait_for_arxiv(self) -> None:
        pause = self._last_arxiv_request + self.arxiv_interval_s - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        self._last_arxiv_request = time.monotonic()

    def _from_open_access(self, entry: ParsedEntry, urls: Sequence[str]) -> list[Attempt]:
        own = [entry.url] if entry.url and entry.url.lower().split("?")[0].endswith(".pdf") else []
        candidates = list(dict.fromkeys([*urls, *own]))
        if not candidates:
            return [Attempt(SOURCE_OPEN_ACCESS, OUTCOME_NOT_APPLICABLE, detail="no open-access PDF location known")]
        attempts = []
        for url in candidates:
            try:
                data = download(self.session, url, self.max_bytes)
            except DownloadError as error:
                attempts.append(Attempt(SOURCE_OPEN_ACCESS, error.reason, url, error.detail))
                continue
            attempts.append(self._check(entry, SOURCE_OPEN_ACCESS, url, data))
            if attempts[-1].outcome == OUTCOME_RESOLVED:
                break
        return attempts

    # -- the check every full text goes through -----------------------------------------------------------------

    def _check(self, entry: ParsedEntry, source: str, locator: str, data: bytes, found_by: str | None = None,
               metadata_title: str | None = None) -> Attempt:
        """Bytes that must be a whole PDF, parse, and pass the right-paper check on their parsed first page; stored
        only then."""
        found = f"found by {found_by}; " if found_by else ""
        try:
            sha256 = inspect_pdf(data, locator).sha256
        except PdfProblem as problem:
            return Attempt(source, problem.reason, locator, f"{found}{problem}")
        try:
            document = self.store.parse(sha256, data)
        except ManuscriptParseError as error:
            return Attempt(source, error.reason, locator, f"{found}{error.detail}", sha256, refused=True)
        score, ok = right_paper(entry, first_page_text(document.blocks), metadata_title)
        score = round(score, 4)
        if not ok:
            checked = entry.title or metadata_title
            what = f"{score:.2f} of the title {checked!r} is on its first page " \
                   f"(at least {right_paper_needs(checked):.2f} needed)" if checked else \
                "no title to compare and the entry's identifier is not printed on its first page"
            return Attempt(source, OUTCOME_WRONG_PAPER, locator, f"{found}{what}", sha256, score, refused=True)
        self.store.put(data)
        return Attempt(source, OUTCOME_RESOLVED, locator, f"{found}right-paper score {score:.2f}", sha256, score)

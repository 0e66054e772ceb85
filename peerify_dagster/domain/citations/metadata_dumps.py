"""Bibliographic dumps read into records for the offline metadata index (`resources/metadata_index.py`).

Three formats, each read from a binary stream the caller opens (and un-gzips); DBLP and JSON lines record by record,
so that a dump of gigabytes is never held whole:

* `dblp`: DBLP's XML (dblp.xml). Every publication element (article, inproceedings, proceedings, book,
  incollection, phdthesis, mastersthesis; not the `www` person pages) gives its key, authors (else editors), title
  (all its text, inline <i>, <sub>, <sup>, <tt> included), year, journal or booktitle, and the identifiers its
  `ee` and `url` links name: a doi.org link gives the DOI, an arxiv.org link (or a CoRR key,
  "journals/corr/abs-1810-04805") the arXiv id. DBLP writes accents as the character entities its DTD defines
  (&auml;, &eacute;, &szlig;), which ElementTree rejects (it never reads the external DTD the DOCTYPE names):
  `NumericEntities` rewrites them as numeric references on the way in, and the elements are cleared as soon as
  they are read, so memory stays flat on the 4 GB file.
* `jsonl`: one work a line, Crossref's (the `message` of /works/DOI, or the whole answer) or OpenAlex's (its "id"
  an https://openalex.org/W... URL), told apart per line and read by metadata.py's own readers.
* `bibtex`: a collection such as the ACL Anthology's anthology.bib, read whole by `bibtex.read_bibtex` (@string
  macros may be used anywhere after their definition) and each entry taken through `bibtex.to_parsed_entry`.

What a reader yields is a `DumpRecord` (the dump's own key for the work, and a `MetadataRecord` of service
METADATA_INDEX: the type the reference check compares entries with, so the index's answers need no conversion) or a
`DumpProblem` ("FILE:LINE: reason", or "FILE: KEY: reason" for DBLP, whose parser gives no line per element): a bad
line or entry is reported and the rest is read. A stream that is not of the format at all raises
`DumpFormatError`.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ElementTree
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from html.entities import name2codepoint
from typing import IO
from urllib.parse import unquote

from peerify_dagster.domain.citations.bibliography import surname
from peerify_dagster.domain.citations.bibtex import read_bibtex, to_parsed_entry
from peerify_dagster.domain.citations.metadata import (
    MetadataRecord,
    normalise_doi,
    records_from_crossref,
    records_from_openalex,
)
from peerify_dagster.domain.citations.options import METADATA_INDEX
from peerify_dagster.domain.citations.resolution import arxiv_id_of_link

DBLP, JSONL, BIBTEX = "dblp", "jsonl", "bibtex"
DUMP_FORMATS = (DBLP, JSONL, BIBTEX)
DBLP_RECORD_TYPES = frozenset({"article", "inproceedings", "proceedings", "book", "incollection", "phdthesis",
                               "mastersthesis"})
DBLP_ROOT = "dblp"
DEFAULT_CHUNK_SIZE = 1 << 20  # bytes read from a DBLP stream at a time
OPENALEX_WORK_PREFIX = "https://openalex.org/W"

# The five entities XML itself defines: the parser reads them, so they are left as they are.
_XML_ENTITIES = frozenset({"amp", "lt", "gt", "quot", "apos"})
_NAMED_ENTITY = re.compile(rb"&([A-Za-z][A-Za-z0-9]*);")
# The longest named entity reference held back at a chunk's end ("&thetasym;" is 10 bytes): an "&" further back
# without its ";" is not the start of one.
_LONGEST_ENTITY = 32
# DBLP tells apart people of one name by a number after it: "Wei Wang 0001".
_DISAMBIGUATION = re.compile(r"\s+\d{4}$")
_DOI_LINK = re.compile(r"^https?://(?:dx\.)?doi\.org/", re.IGNORECASE)
_CORR_KEY = re.compile(r"^journals/corr/abs-(\d{4})-(\d{4,5})$")
_YEAR = re.compile(r"\d{4}")


class DumpFormatError(ValueError):
    """A dump that is not of the format it was given as (not DBLP XML, no line a work, no BibTeX entry); the message
    names the file and says why."""


@dataclass(frozen=True)
class DumpRecord:
    """One work of a dump: `key` is what the dump names it by (a DBLP key, a DOI, an OpenAlex id, a BibTeX key)."""

    key: str
    record: MetadataRecord


@dataclass(frozen=True)
class DumpProblem:
    """A line or record of a dump that gave no record, or something the reader had to work around: "FILE:LINE:
    reason", or "FILE: KEY: reason" where no line is known."""

    message: str

    def __str__(self) -> str:
        return self.message


DumpItem = DumpRecord | DumpProblem


def _indexable(record: MetadataRecord) -> bool:
    """Whether an entry could ever be found by the record: by its title, DOI or arXiv id."""
    return bool(record.title or record.doi or record.arxiv_id)


# -- DBLP XML ----------------------------------------------------------------------------------------------------------

class NumericEntities:
    """A binary stream read through with each named character entity ("&auml;") written as a numeric reference
    ("&#228;"), chunk by chunk: an entity cut by a chunk's end is held back until its ";" arrives. Entities no
    table knows are kept as literal text ("&amp;name;") and counted in `unknown`."""

    def __init__(self, stream: IO[bytes], chunk_size: int = DEFAULT_CHUNK_SIZE) -> None:
        if chunk_size < 1:
            raise ValueError(f"chunk size must be positive, got {chunk_size}")
        self._stream, self._chunk_size = stream, chunk_size
        self._held = b""
        self.unknown: Counter[str] = Counter()

    def read(self, size: int = -1) -> bytes:
        """The next translated bytes (about a chunk, whatever `size` asks); b"" only at the stream's end."""
        while True:
            chunk = self._stream.read(self._chunk_size)
            data, self._held = self._held + chunk, b""
            if not chunk:
                return self._translate(data)
            start = data.rfind(b"&")
            if start != -1 and b";" not in data[start:] and len(data) - start <= _LONGEST_ENTITY:
                data, self._held = data[:start], data[start:]
            if data:
                return self._translate(data)

    def _translate(self, data: bytes) -> bytes:
        return _NAMED_ENTITY.sub(self._numeric, data)

    def _numeric(self, match: re.Match[bytes]) -> bytes:
        name = match.group(1).decode("ascii")
        if name in _XML_ENTITIES:
            return match.group(0)
        if (codepoint := name2codepoint.get(name)) is not None:
            return b"&#%d;" % codepoint
        self.unknown[name] += 1
        return b"&amp;" + match.group(0)[1:]


def read_dblp(stream: IO[bytes], source: str, chunk_size: int = DEFAULT_CHUNK_SIZE) -> Iterator[DumpItem]:
    """The publications of a DBLP XML dump (see the module docstring); `chunk_size` bytes are read at a time."""
    translated = NumericEntities(stream, chunk_size)
    root: ElementTree.Element | None = None
    depth = 0
    try:
        for event, element in ElementTree.iterparse(translated, events=("start", "end")):
            if event == "start":
                if root is None:
                    if element.tag != DBLP_ROOT:
                        raise DumpFormatError(f"{source}: not DBLP XML: the root element is <{element.tag}>, "
                                              f"not <{DBLP_ROOT}>")
                    root = element
                depth += 1
                continue
            depth -= 1
            if depth == 1:  # a child of <dblp>: one publication or person page, complete
                if element.tag in DBLP_RECORD_TYPES:
                    yield _dblp_item(element, source)
                root.clear()  # what was read is dropped: memory stays flat
    except ElementTree.ParseError as error:
        line, column = error.position
        raise DumpFormatError(f"{source}:{line}: not well-formed XML at column {column}: "
                              f"{str(error).split(':')[0]}") from error
    if translated.unknown:
        names = ", ".join(f"&{name}; ({count})" for name, count in translated.unknown.most_common(10))
        yield DumpProblem(f"{source}: character entities no table defines, kept as text: {names}")


def _element_text(element: ElementTree.Element) -> str:
    """All the text of an element, inline markup's included, its whitespace runs made one space."""
    return " ".join("".join(element.itertext()).split())


def _dblp_item(element: ElementTree.Element, source: str) -> DumpItem:
    key = element.get("key") or f"({element.tag} without a key)"
    title = _element_text(found) if (found := element.find("title")) is not None else ""
    # DBLP ends every title with a full stop it adds; a title's own "?" or "!" stays.
    title = title[:-1].rstrip() if title.endswith(".") and not title.endswith("..") else title
    people = element.findall("author") or element.findall("editor")
    names = tuple(_DISAMBIGUATION.sub("", _element_text(person)) for person in people)
    names = tuple(name for name in names if name)
    year_text = element.findtext("year", "").strip()
    doi = arxiv_id = None
    for link in (_element_text(link) for link in element.findall("ee") + element.findall("url")):
        if doi is None and _DOI_LINK.match(link):
            doi = normalise_doi(unquote(link))
        if arxiv_id is None:
            arxiv_id = arxiv_id_of_link(link)
    if arxiv_id is None and (corr := _CORR_KEY.match(key)):
        arxiv_id = f"{corr.group(1)}.{corr.group(2)}"
    venue = next((_element_text(found) for tag in ("journal", "booktitle") if (found := element.find(tag)) is not None),
                 None)
    record = MetadataRecord(
        service=METADATA_INDEX, title=title or None, authors=tuple(surname(name) for name in names),
        author_names=names, year=int(year_text) if _YEAR.fullmatch(year_text) else None, doi=doi, arxiv_id=arxiv_id,
        venue=venue or None)
    if not _indexable(record):
        return DumpProblem(f"{source}: {key}: no title, DOI or arXiv id")
    return DumpRecord(key, record)


# -- JSON lines of Crossref and OpenAlex works -------------------------------------------------------------------------

def read_work_lines(stream: IO[bytes], source: str) -> Iterator[DumpItem]:
    """The works of a JSON-lines dump, each line a Crossref work (or a whole /works answer) or an OpenAlex work. A
    line that is none of these is a problem; a file in which no line is one raises DumpFormatError."""
    works, first_problem = 0, None
    for number, line in enumerate(stream, start=1):
        if not line.strip():
            continue
        try:
            records = _line_records(line)
        except UnicodeDecodeError as error:
            problem = DumpProblem(f"{source}:{number}: not UTF-8 (byte {error.start})")
        except json.JSONDecodeError as error:
            problem = DumpProblem(f"{source}:{number}: not JSON ({error.msg} at column {error.colno})")
        except ValueError as error:  # metadata.MetadataFormatError too: a work of the wrong shape
            problem = DumpProblem(f"{source}:{number}: {error}")
        else:
            works += 1
            for record in records:
                key = (record.external_ids.get("openalex") or "").removeprefix("https://openalex.org/") or record.doi
                if _indexable(record) and key:
                    yield DumpRecord(key, replace(record, service=METADATA_INDEX))
                else:
                    yield DumpProblem(f"{source}:{number}: a work without a title, DOI or arXiv id")
            continue
        first_problem = first_problem or problem
        yield problem
    if not works:
        raise DumpFormatError(f"{source}: no line is a Crossref or OpenAlex work"
                              + (f" (first: {first_problem})" if first_problem else " (the file is empty)"))


def _line_records(line: bytes) -> list[MetadataRecord]:
    work = json.loads(line)
    if not isinstance(work, dict):
        raise ValueError(f"a JSON {type(work).__name__}, not a work object")
    if "message-type" in work:  # a whole Crossref answer, as /works/DOI sends it
        return records_from_crossref(work)
    if isinstance(work.get("DOI"), str):  # a Crossref work: the reader takes it inside its answer
        return records_from_crossref({"message-type": "work", "message": work})
    if isinstance(work.get("id"), str) and work["id"].startswith(OPENALEX_WORK_PREFIX):
        return records_from_openalex(work)
    raise ValueError(f'neither a Crossref work (no "DOI") nor an OpenAlex work (no "id" {OPENALEX_WORK_PREFIX}...)')


# -- BibTeX collections ------------------------------------------------------------------------------------------------

def read_bibtex_collection(stream: IO[bytes], source: str) -> Iterator[DumpItem]:
    """The entries of a .bib file (UTF-8; Latin-1 when it is not, with a problem saying so). Raises
    DumpFormatError when the file holds no entry."""
    data = stream.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        text = data.decode("latin-1")
        yield DumpProblem(f"{source}: not UTF-8 (byte {error.start}): read as Latin-1")
    collection = read_bibtex(text, source)
    if not collection.entries:
        raise DumpFormatError(f"{source}: no BibTeX entry" + (f" (first: {collection.problems[0]})"
                                                               if collection.problems else ""))
    yield from map(DumpProblem, collection.problems)  # already "FILE:LINE: reason"
    for index, bibtex_entry in enumerate(collection.entries, start=1):
        entry = to_parsed_entry(bibtex_entry, index)
        record = MetadataRecord(
            service=METADATA_INDEX, title=entry.title, authors=entry.surnames, author_names=entry.authors,
            year=entry.year, doi=entry.doi, arxiv_id=entry.arxiv_id, venue=entry.venue)
        if _indexable(record):
            yield DumpRecord(bibtex_entry.key, record)
        else:
            yield DumpProblem(f"{source}:{bibtex_entry.line}: entry '{bibtex_entry.key}' has no title, DOI or "
                              "arXiv id")


DUMP_READERS: dict[str, Callable[[IO[bytes], str], Iterator[DumpItem]]] = {
    DBLP: read_dblp, JSONL: read_work_lines, BIBTEX: read_bibtex_collection}

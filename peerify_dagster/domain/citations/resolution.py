"""Resolution: a reference entry to the full text of the paper it names, and the check that it is that paper.

Where a full text is looked for, in the venue's `resolve` order (see `options.RESOLVE_SOURCES`):
* `library`: a local folder of PDFs, by DOI (in the file name, "10.18653_v1_N18-3011.pdf" or the DOI's last part
  "N18-3011.pdf" as the ACL Anthology names its files, or printed on the first pages), then arXiv id (the file name
  "2203.00130v1.pdf", or the "arXiv:2203.00130" stamp of the first page), then title (found on the first page);
* `venue`: the venue's own manuscripts, by title (ML papers cite OpenReview papers of the same venue);
* `arxiv`: the entry's arXiv id, else an arXiv title search;
* `open_access`: the open-access PDF locations the metadata check found.
Every full text found passes the right-paper check (`right_paper`) before it is taken; one that fails is refused and
the next candidate is tried. Each try is recorded as an `Attempt`, and `conclude` turns them into the entry's
`Resolution` (a row of `cited_papers`). No I/O here: `resources/cited_papers.py` reads files and the network.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ElementTree
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, TypeVar

from peerify_dagster.domain.citations.entries import ParsedEntry
from peerify_dagster.domain.citations.options import SOURCE_VENUE
from peerify_dagster.domain.citations.titles import (
    Spellings,
    normalise_title,
    repair_title,
    title_in_text,
    title_similarity,
)
from peerify_dagster.domain.layout.blocks import Block

RESOLVED, UNRESOLVED, REJECTED = "resolved", "unresolved", "rejected"

# The right-paper check: the share of the cited title's words found in order on the candidate's first page
# (`titles.title_in_text`). The right paper scores 1.0 (its title is printed there); a line-break hyphen the text
# layer keeps, or a title cited with a word changed, costs a word or two, so 0.8 still accepts one word of five
# missing. Other papers' first pages share only common words with a title, scattered: on the real papers beside this
# project, every cited title of five words or more scored at most 0.5 against another paper's first page.
RIGHT_PAPER_THRESHOLD = 0.8
SHORT_TITLE_WORDS = 5
# Titles of fewer words ("Semantic Scholar", "Natural language processing") are found on many first pages: they may
# confirm a file found by identifier, never pick one from a library on their own.
MIN_MATCHING_TITLE_WORDS = 4
# How many first pages of a library file are searched for the file's own DOI or arXiv id (a journal prints its DOI
# on page 1 or 2; arXiv stamps page 1).
IDENTIFIER_PAGES = 2

# How a library file was matched (the attempt's detail names it).
BY_DOI_IN_NAME, BY_DOI_ON_PAGE = "doi_in_file_name", "doi_on_first_pages"
BY_ARXIV_IN_NAME, BY_ARXIV_ON_PAGE = "arxiv_id_in_file_name", "arxiv_id_on_first_page"
BY_TITLE = "title_on_first_page"

# Attempt outcomes besides the reasons a download or the parser gives ("http_500", "timeout", "not_a_pdf",
# "encrypted", "no_text_layer", ...).
OUTCOME_RESOLVED = "resolved"
OUTCOME_NO_MATCH = "no_match"  # the source was asked and had nothing for the entry
OUTCOME_NOT_APPLICABLE = "not_applicable"  # the entry gives the source nothing to look up (no id, no title)
OUTCOME_WRONG_PAPER = "wrong_paper"  # a full text was found but failed the right-paper check

_DOI = re.compile(r"\b10\.\d{4,9}/[^\s\"<>]+", re.IGNORECASE)
_DOI_TRAILING = ".,;:)]}'"
# New-style ids (2007 on): 2203.00130, optionally with a version; old-style: hep-th/9901001 (a file name may write
# the slash as "_" or leave it out).
_ARXIV_NEW = r"\d{4}\.\d{4,5}"
_ARXIV_OLD = r"[a-z][a-z\-]+(?:\.[a-z]{2})?/\d{7}"
_ARXIV_NAME = re.compile(rf"^(?:arxiv[_.:\-]?)?(?P<id>{_ARXIV_NEW}|[a-z][a-z\-]+(?:\.[a-z]{{2}})?[_/]?\d{{7}})"
                         rf"(?:v\d+)?$", re.IGNORECASE)
_ARXIV_STAMP = re.compile(rf"arxiv\s*:\s*(?P<id>{_ARXIV_NEW}|{_ARXIV_OLD})(?:v\d+)?", re.IGNORECASE)
_ARXIV_VERSION = re.compile(r"v\d+$")
_OLD_ARXIV_NAME = re.compile(r"^([a-z][a-z\-]+(?:\.[a-z]{2})?)[_/]?(\d{7})$", re.IGNORECASE)
# A soft hyphen the text layer keeps at a line end ("litera\ufffe" + "ture"): the word is whole without it.
_SOFT_HYPHEN_BREAK = re.compile("[\u00ad\ufffe]\\s*")
_NON_KEY = re.compile(r"[^0-9a-z.\-]+")


def clean_page_text(text: str) -> str:
    """Page text with the line-end soft hyphens of a PDF's text layer closed up."""
    return _SOFT_HYPHEN_BREAK.sub("", text)


def dois_in_text(text: str) -> tuple[str, ...]:
    """The DOIs printed in a text, lower-cased, trailing punctuation dropped, in order, each once."""
    found = (match.group(0).rstrip(_DOI_TRAILING).lower() for match in _DOI.finditer(text))
    return tuple(dict.fromkeys(found))


def canonical_arxiv_id(text: str) -> str:
    """An arXiv id without its version, old-style ids with their slash ("hep-th_9901001" -> "hep-th/9901001")."""
    bare = _ARXIV_VERSION.sub("", text.strip()).lower()
    old = _OLD_ARXIV_NAME.match(bare)
    return f"{old.group(1)}/{old.group(2)}" if old else bare


_ARXIV_LINK = re.compile(r"arxiv\.org/(?:abs|pdf)/([^?#\s]+?)(?:\.pdf)?/?$", re.IGNORECASE)


def arxiv_id_of_link(url: str) -> str | None:
    """The arXiv id an arxiv.org abstract or PDF link names, canonical ("https://arxiv.org/pdf/2101.00001v2.pdf" ->
    "2101.00001"); None for any other link."""
    match = _ARXIV_LINK.search(url)
    return canonical_arxiv_id(match.group(1)) if match else None


def arxiv_ids_in_text(text: str) -> tuple[str, ...]:
    """The arXiv ids stamped in a text ("arXiv:2203.00130v1 [cs.HC]"), without versions, each once."""
    return tuple(dict.fromkeys(canonical_arxiv_id(match.group("id")) for match in _ARXIV_STAMP.finditer(text)))


def arxiv_id_of_name(name: str) -> str | None:
    """The arXiv id a file is named by ("2203.00130v1.pdf", "arXiv_2203.00130.pdf", "hep-th_9901001.pdf"), or None."""
    match = _ARXIV_NAME.match(_stem(name))
    return canonical_arxiv_id(match.group("id")) if match else None


def entry_arxiv_id(entry: ParsedEntry) -> str | None:
    """The entry's arXiv id as library files and arXiv name it (no version; the bibliography parser already takes
    one from an arXiv DOI)."""
    return canonical_arxiv_id(entry.arxiv_id) if entry.arxiv_id else None


def arxiv_pdf_url(arxiv_id: str, base: str) -> str:
    """Where arXiv (or a mirror at `base`) serves an article's PDF: `<base>/pdf/<id>` (a version suffix, if given,
    picks that version)."""
    return f"{base.rstrip('/')}/pdf/{arxiv_id}"


def arxiv_query_url(base: str) -> str:
    """The arXiv API's query endpoint under `base` (arXiv itself: https://export.arxiv.org)."""
    return f"{base.rstrip('/')}/api/query"


def arxiv_title_query(title: str) -> str:
    """An arXiv `search_query` for a title phrase: its normalised words quoted after `ti:` (punctuation such as a
    subtitle's colon would be read as query syntax)."""
    return f'ti:"{normalise_title(title)}"'


def _stem(name: str) -> str:
    base = name.rsplit("/", 1)[-1]
    return base[:-4] if base.lower().endswith(".pdf") else base


def _identifier_key(text: str) -> str:
    """A DOI or a file stem compared loosely: case folded, any run of characters a file name cannot hold (the DOI's
    slashes) or may use instead ("_") made one "_"."""
    return _NON_KEY.sub("_", text.lower()).strip("_")


def doi_names_file(doi: str, name: str) -> bool:
    """Whether a file is named by a DOI: the whole DOI with its slashes written as "_" ("10.18653_v1_N18-3011.pdf"),
    or the DOI's last part when that part is an identifier of its own (the ACL Anthology's "N18-3011.pdf",
    "2020.acl-main.447.pdf": six characters or more, digits with letters or a dot, so that a bare number such as
    "123456.pdf" is not taken for one)."""
    stem_key = _identifier_key(_stem(name))
    if not stem_key:
        return False
    if stem_key == _identifier_key(doi):
        return True
    last_part = _identifier_key(doi.rsplit("/", 1)[-1])
    distinctive = (len(last_part) >= 6 and any(c.isdigit() for c in last_part)
                   and (any(c.isalpha() for c in last_part) or "." in last_part))
    return distinctive and stem_key == last_part


@dataclass(frozen=True)
class LibraryFile:
    """One PDF of a local library: its name (relative to the folder), content hash, the text of its first page and
    the DOIs / arXiv ids its name or first pages give, and a title guess (the PDF's own Title metadata, else its first
    line) for messages. An unreadable text layer leaves `first_page_text` empty: the file can still be found by
    name, and the parser then says why it cannot be used."""

    name: str
    sha256: str
    first_page_text: str
    dois: tuple[str, ...] = ()
    arxiv_ids: tuple[str, ...] = ()
    title_guess: str | None = None

    @classmethod
    def from_pages(cls, name: str, sha256: str, pages: Sequence[str], title_guess: str | None) -> LibraryFile:
        """A library file from the text of its first pages (`IDENTIFIER_PAGES` of them are searched for
        identifiers)."""
        cleaned = [clean_page_text(page) for page in pages[:IDENTIFIER_PAGES]]
        searched = "\n".join(cleaned)
        named_arxiv = arxiv_id_of_name(name)
        arxiv_ids = tuple(dict.fromkeys([*([named_arxiv] if named_arxiv else []), *arxiv_ids_in_text(searched)]))
        first_line = next((line.strip() for line in (cleaned[0] if cleaned else "").splitlines() if line.strip()), None)
        return cls(name, sha256, cleaned[0] if cleaned else "", dois_in_text(searched), arxiv_ids,
                   (title_guess or "").strip() or first_line)

    @cached_property
    def first_page_words(self) -> frozenset[str]:
        return frozenset(normalise_title(self.first_page_text).split())

    @cached_property
    def spellings(self) -> Spellings:
        """How the first page writes its words: what a cited title broken at a line end is repaired toward."""
        return Spellings.of([self.first_page_text])


def _title_words(title: str | None) -> list[str]:
    return normalise_title(title or "").split()


def below_threshold(best: str, score: float, threshold: float) -> str:
    """How a refusal names the closest candidate: "best 'X' scored 0.78 < 0.80"."""
    return f"best {best} scored {score:.2f} < {threshold:.2f}"


def _repaired_on_page(title: str, item: LibraryFile) -> tuple[str, float]:
    """The title repaired toward the file's first page, and the share of its words the page holds anywhere (what
    `title_in_text` cannot exceed: a cheap, exact bound before the windowed comparison)."""
    repaired = repair_title(title, candidate=item.spellings) or ""
    words = _title_words(repaired)
    return repaired, sum(word in item.first_page_words for word in words) / len(words) if words else 0.0


def _library_title_score(title: str, item: LibraryFile, floor: float) -> float | None:
    """`title_in_text` of the title repaired toward the file's first page; None, without computing it, when the page
    holds less than `floor` of the title's words."""
    repaired, share = _repaired_on_page(title, item)
    return title_in_text(repaired, item.first_page_text) if share and share >= floor else None


def closest_library_title(entry: ParsedEntry, files: Sequence[LibraryFile]) -> tuple[LibraryFile, float] | None:
    """The library file whose first page holds most of the entry's title in order (what a refusal names), with its
    score; None when no page holds any of its words. Files are scored in order of their bound, until none left can
    score more."""
    bounded = sorted(((share, item.name, repaired, item) for item in files
                      for repaired, share in [_repaired_on_page(entry.title or "", item)] if share > 0),
                     key=lambda row: (-row[0], row[1]))
    best: tuple[LibraryFile, float] | None = None
    for share, _name, repaired, item in bounded:
        if best is not None and share <= best[1]:
            break
        score = title_in_text(repaired, item.first_page_text)
        if best is None or score > best[1]:
            best = (item, score)
    return best


def match_library(entry: ParsedEntry, files: Sequence[LibraryFile]) -> list[tuple[LibraryFile, str]]:
    """The library files that may be the entry's paper, best first, each once, with how it was found: by DOI (file
    name, then first pages), arXiv id (file name, then first page), then title (on the first page, at least
    `RIGHT_PAPER_THRESHOLD` of its words in order; titles of fewer than `MIN_MATCHING_TITLE_WORDS` words are not
    matched). Every candidate still goes through the right-paper check, so a file misnamed by a DOI is refused and
    the next one tried."""
    found: dict[str, tuple[LibraryFile, str]] = {}

    def add(candidates: Iterable[LibraryFile], how: str) -> None:
        for library_file in sorted(candidates, key=lambda item: item.name):
            found.setdefault(library_file.name, (library_file, how))

    if entry.doi:
        doi = entry.doi.lower()
        add((item for item in files if doi_names_file(doi, item.name)), BY_DOI_IN_NAME)
        add((item for item in files if doi in item.dois), BY_DOI_ON_PAGE)
    arxiv_id = entry_arxiv_id(entry)
    if arxiv_id:
        add((item for item in files if arxiv_id_of_name(item.name) == arxiv_id), BY_ARXIV_IN_NAME)
        add((item for item in files if arxiv_id in item.arxiv_ids), BY_ARXIV_ON_PAGE)
    if len(_title_words(entry.title)) >= MIN_MATCHING_TITLE_WORDS:
        scored = []
        for item in files:
            score = _library_title_score(entry.title or "", item, RIGHT_PAPER_THRESHOLD)
            if score is not None and score >= RIGHT_PAPER_THRESHOLD:
                scored.append((-score, -title_similarity(entry.title, item.title_guess), item.name, item))
        for *_, item in sorted(scored, key=lambda row: row[:3]):
            found.setdefault(item.name, (item, BY_TITLE))
    return list(found.values())


Key = TypeVar("Key", bound=Hashable)


def closest_title(cited: str | None, titles: Mapping[Key, str]) -> tuple[Key, float] | None:
    """The key of the title most like the cited one (the cited title repaired toward each: `repair_title`), with its
    `title_similarity`, the first on a tie; None when there is no title or no cited title. Whether it is the cited
    work (`SAME_TITLE`) is the caller's to judge, and to say with the score when it is not."""
    if not cited or not titles:
        return None
    scored = ((title_similarity(repair_title(cited, candidate=Spellings.of([title])), title), key)
              for key, title in titles.items())
    best_score, best_key = max(scored, key=lambda pair: pair[0])
    return best_key, best_score


def first_page_text(blocks: Sequence[Block]) -> str:
    """The text of a parsed paper's first page, in reading order (what the right-paper check reads)."""
    first = min((block.page for block in blocks), default=1)
    return "\n".join(block.text for block in sorted(blocks, key=lambda block: block.order) if block.page == first)


def right_paper_needs(title: str | None) -> float:
    """The right-paper score a title must reach. A short title's words turn up on many first pages ("The ACL
    anthology network corpus": 4 of 5 on an unrelated ACL paper's), so a title of SHORT_TITLE_WORDS words or fewer
    must be there whole."""
    return 1.0 if len(_title_words(title)) <= SHORT_TITLE_WORDS else RIGHT_PAPER_THRESHOLD


def right_paper(entry: ParsedEntry, first_page: str, metadata_title: str | None = None) -> tuple[float, bool]:
    """(score, ok): whether a full text is the cited paper. The entry's title (else the metadata's, e.g. arXiv's
    record for the id), repaired toward the page's spellings (`repair_title`), must be found on the first page
    (`title_in_text` >= `right_paper_needs`). With no title at all, the entry's DOI or arXiv id printed on the first
    page is the only evidence (score 1.0), else 0.0."""
    page = clean_page_text(first_page)
    cited = entry.title or metadata_title
    if _title_words(cited):
        score = title_in_text(repair_title(cited, candidate=Spellings.of([page])), page)
        return score, score >= right_paper_needs(cited)
    arxiv_id = entry_arxiv_id(entry)
    printed = bool(entry.doi and entry.doi.lower() in dois_in_text(page)) or bool(
        arxiv_id and arxiv_id in arxiv_ids_in_text(page))
    return (1.0, True) if printed else (0.0, False)


# --- arXiv's API answers (Atom 1.0) --------------------------------------------------------------------------------

ATOM_NS = "http://www.w3.org/2005/Atom"
ARXIV_NS = "http://arxiv.org/schemas/atom"
OPENSEARCH_NS = "http://a9.com/-/spec/opensearch/1.1/"


class ArxivFeedError(ValueError):
    """An arXiv API answer that is not a usable feed; `reason` is "malformed_feed" (not Atom XML) or "arxiv_error"
    (the API's own error entry, e.g. "incorrect id format for 1234")."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class ArxivRecord:
    """One entry of an arXiv feed: the id without version, the version ("v3"), title, authors and DOI."""

    arxiv_id: str
    version: str | None
    title: str
    authors: tuple[str, ...] = ()
    doi: str | None = None

    @property
    def versioned_id(self) -> str:
        return f"{self.arxiv_id}{self.version or ''}"


def _text(element: ElementTree.Element | None) -> str:
    return " ".join((element.text or "").split()) if element is not None else ""


def parse_arxiv_feed(body: bytes | str) -> list[ArxivRecord]:
    """The entries of an arXiv API answer. The API reports a bad query as a feed holding one entry titled "Error"
    whose id is under `/api/errors` (HTTP 200): that becomes an `ArxivFeedError`."""
    try:
        root = ElementTree.fromstring(body)
    except ElementTree.ParseError as error:
        raise ArxivFeedError("malformed_feed", f"the arXiv API answer is not XML ({error})") from None
    if root.tag != f"{{{ATOM_NS}}}feed":
        raise ArxivFeedError("malformed_feed", f"the arXiv API answer is not an Atom feed (root {root.tag!r})")
    records = []
    for entry in root.iter(f"{{{ATOM_NS}}}entry"):
        entry_id = _text(entry.find(f"{{{ATOM_NS}}}id"))
        title = _text(entry.find(f"{{{ATOM_NS}}}title"))
        if "/api/errors" in entry_id or title == "Error":
            raise ArxivFeedError("arxiv_error", _text(entry.find(f"{{{ATOM_NS}}}summary")) or entry_id)
        identifier = entry_id.split("/abs/", 1)[-1]
        version = _ARXIV_VERSION.search(identifier)
        records.append(ArxivRecord(
            arxiv_id=canonical_arxiv_id(identifier), version=version.group(0) if version else None, title=title,
            authors=tuple(_text(author.find(f"{{{ATOM_NS}}}name")) for author in entry.iter(f"{{{ATOM_NS}}}author")),
            doi=_text(entry.find(f"{{{ARXIV_NS}}}doi")).lower() or None,
        ))
    return records


# --- attempts and the entry's resolution -----------------------------------------------------------------------


@dataclass(frozen=True)
class Attempt:
    """One try of one source: its outcome (OUTCOME_* or a download / parser reason), where it looked (`locator`: a
    file name, forum id or URL), the PDF it found and its right-paper score when it got that far, and a sentence.
    `refused` marks a full text that was found and turned down (wrong paper, unreadable PDF): the entry is then
    `rejected` rather than `unresolved` when nothing else is found."""

    source: str
    outcome: str
    locator: str | None = None
    detail: str | None = None
    pdf_sha256: str | None = None
    right_paper_score: float | None = None
    refused: bool = False

    def record(self) -> dict[str, Any]:
        """As `cited_papers.attempts` stores it."""
        return {"source": self.source, "outcome": self.outcome, "locator": self.locator, "detail": self.detail}

    def summary(self) -> str:
        where = f" {self.locator}" if self.locator else ""
        return f"{self.source}{where}: {self.outcome}" + (f" ({self.detail})" if self.detail else "")


@dataclass(frozen=True)
class Resolution:
    """An entry's row of `cited_papers` (without venue, paper_id and entry_id, which the caller knows): `cited_key`
    is `sha256:<hex>` of the stored PDF, or `forum:<paper_id>` for a manuscript of the same venue."""

    status: str
    source: str | None = None
    locator: str | None = None
    cited_key: str | None = None
    pdf_sha256: str | None = None
    right_paper_score: float | None = None
    reason: str | None = None
    attempts: tuple[Attempt, ...] = field(default_factory=tuple)

    def row(self) -> dict[str, Any]:
        return {"status": self.status, "source": self.source, "locator": self.locator, "cited_key": self.cited_key,
                "pdf_sha256": self.pdf_sha256, "right_paper_score": self.right_paper_score, "reason": self.reason,
                "attempts": [attempt.record() for attempt in self.attempts]}


def cited_key_of(attempt: Attempt) -> str:
    """The cited paper's key: the venue manuscript's forum, else the stored PDF's content hash."""
    return f"forum:{attempt.locator}" if attempt.source == SOURCE_VENUE else f"sha256:{attempt.pdf_sha256}"


def conclude(attempts: Sequence[Attempt]) -> Resolution:
    """The entry's resolution from its attempts in order: `resolved` by the first that resolved; else `rejected` when
    a full text was found and refused (the last one refused is named); else `unresolved`. The reason lists every
    attempt that did not resolve."""
    attempts = tuple(attempts)
    taken = next((attempt for attempt in attempts if attempt.outcome == OUTCOME_RESOLVED), None)
    if taken is not None:
        return Resolution(RESOLVED, taken.source, taken.locator, cited_key_of(taken), taken.pdf_sha256,
                          taken.right_paper_score, None, attempts)
    reason = "; ".join(attempt.summary() for attempt in attempts) or "no source to try (resolve is empty)"
    refused = [attempt for attempt in attempts if attempt.refused]
    if refused:
        last = refused[-1]
        return Resolution(REJECTED, last.source, last.locator, None, last.pdf_sha256, last.right_paper_score, reason,
                          attempts)
    return Resolution(UNRESOLVED, reason=reason, attempts=attempts)

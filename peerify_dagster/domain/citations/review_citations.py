"""Reviewers' own citations: the works a review's text cites, found so that they can be checked and resolved like a
manuscript's reference entries, and the reviewer's sentence judged against the cited paper.

What counts as a cited work in a review (`find_review_citations`):
* `author_year`: an author-year group or a narrative mention, as `detection.find_markers` reads them ("(Smith and
  Lee, 2019)", "Smith et al. (2020)", a bare "Smith et al. 2020"), one work per key of the marker; numeric markers
  ("[12]") are left out: in a review they point into the submission's own list as often as anywhere;
* `arxiv`: an arXiv id after "arXiv:" or in an arxiv.org URL, new style ("2101.00001") or old ("hep-th/9901001"),
  without its version;
* `doi`: a DOI, bare ("10.1145/3292500.3330701"), after "doi:" or in a doi.org URL;
* `title`: a title of four words or more in double quotes that reads as one (title case, a citing cue before it
  such as "as in" or "see", or a year after it) and not as a quotation of the paper ("the authors claim \"...\"").
A year alone ("In 2020"), a version ("v2.1") or a number in brackets after a word ("Table 2 (2020 data)") is none.

Each work keeps its span and the sentence it sits in (`sentences.split_sentences`), once per sentence, and a
`ParsedEntry` holding only what the review gives (first surname and year, the identifier, or the title): the
reference checks and the cited-paper resolution take it as they take a bibliography entry. `match_paper_entry`
looks the work up among the submission's own entries first (a reviewer often cites what the paper cites): author-year
by `detection.resolve_markers`, identifiers by equality, titles by `titles.SAME_TITLE`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from peerify_dagster.domain.citations import detection
from peerify_dagster.domain.citations.entries import PARTIAL, ParsedEntry
from peerify_dagster.domain.citations.evidence import query_of
from peerify_dagster.domain.citations.metadata import normalise_doi
from peerify_dagster.domain.citations.resolution import canonical_arxiv_id, closest_title, entry_arxiv_id
from peerify_dagster.domain.citations.sentences import split_sentences
from peerify_dagster.domain.citations.titles import SAME_TITLE, normalise_title

AUTHOR_YEAR, ARXIV, DOI, TITLE = "author_year", "arxiv", "doi", "title"
MIN_TITLE_WORDS = 4
MAX_TITLE_WORDS = 30  # a longer quotation is a passage, not a title

_ARXIV_ID = r"(?P<id>\d{4}\.\d{4,5}|[a-z][a-z\-]+(?:\.[A-Z]{2})?/\d{7})(?:v\d+)?"
_ARXIV = re.compile(rf"(?:\barxiv\s*:\s*|(?:\bhttps?://)?(?:www\.)?\barxiv\.org/(?:abs|pdf)/){_ARXIV_ID}(?:\.pdf)?"
                    r"(?![\w/])", re.IGNORECASE)
# After a resolver ("doi:", a doi.org URL) or standing alone (never inside another number or path: "1810.04805").
_DOI = re.compile(r"(?:\bhttps?://(?:dx\.)?doi\.org/|\bdoi\s*:\s*|(?<![\w/.]))(?P<doi>10\.\d{4,9}/[^\s\"<>]+)",
                  re.IGNORECASE)
_DOI_TRAILING = ".,;:)]}'\""
_ARXIV_DOI = re.compile(r"^10\.48550/arxiv\.(?P<id>.+)$", re.IGNORECASE)
_QUOTED = re.compile(r"\"(?P<a>[^\"\n]{8,400})\"|“(?P<b>[^”\n]{8,400})”|``(?P<c>[^'\n]{8,400})''")
_WORD = re.compile(r"[^\W_]+(?:[-'’][^\W_]+)*")
# What stands right before a quoted title (case aside): "as in", "see", "cf.", "the paper", "titled", ...
_TITLE_CUE = re.compile(r"\b(?:see|cf\.?|in|as in|like|e\.g\.?,?|i\.e\.?,?|paper|papers|work|article|preprint|study|"
                        r"titled|entitled|called|named)\s*,?\s*$", re.IGNORECASE)
# What makes a quotation the paper's own words: a verb of saying, or a pointer to a line, page or section of it.
_QUOTATION_CUE = re.compile(r"\b(?:states?|stated|claims?|claimed|writes?|wrote|written|says?|said|mentions?|"
                            r"mentioned|argues?|argued|asserts?|asserted|reads?|conclude[sd]?|phrase|sentence|"
                            r"lines?\s*\d*|l\.\s*\d+|page\s*\d*|p\.\s*\d+|sections?\s*[\d.]*|sec\.\s*[\d.]+)"
                            r"\s*(?:that\s*)?[:,]?\s*$|:\s*$", re.IGNORECASE)
# A year after the closing quote, bare or in brackets: '"Attention is all you need" (NeurIPS 2017)'.
_YEAR_AFTER = re.compile(r"\s*,?\s*[(\[]?[^()\[\]\n]{0,40}?\b(?:19|20)\d\d\b")
_TITLE_CASE_SHARE = 0.6
# What opens a paragraph of a review before its first sentence: the section's label the review text is assembled with
# ("Weaknesses: "), a list's bullet or number. No part of the sentence the verifier judges.
_PARAGRAPH_LEAD = re.compile(r"(?:[A-Z][A-Za-z ]{0,40}:\s+)?(?:[-*\u2022]\s+|\d+[.)]\s+)?")
_PRIORITY = {DOI: 0, ARXIV: 0, AUTHOR_YEAR: 1, TITLE: 2}  # of two overlapping spans, the lower is kept


@dataclass(frozen=True)
class ReviewCitation:
    """One work a review cites. `key`: the author-year key ("smith|2020a"), the arXiv id, the DOI (lower-cased) or the
    normalised title; `text`: the marker, identifier or title as written; `start`/`end` and the sentence's
    `sentence_start`/`sentence_end` are offsets in the review text; `record`: what the review gives of the work, as a
    reference entry; `query`: the sentence with every work it cites cut out (what retrieves the cited paper's
    passages); `marker`: an author-year work's marker narrowed to its key (what the paper's entries are matched
    against)."""

    kind: str
    key: str
    text: str
    start: int
    end: int
    sentence_start: int
    sentence_end: int
    record: ParsedEntry
    query: str
    marker: detection.Marker | None = None


@dataclass(frozen=True)
class _Found:
    kind: str
    key: str
    start: int
    end: int
    text: str
    record: ParsedEntry
    marker: detection.Marker | None = None


def _author_year_works(text: str) -> list[_Found]:
    found = []
    for marker in detection.find_markers(text):
        if marker.style not in (detection.AUTHOR_YEAR, detection.NARRATIVE):
            continue
        for key in marker.keys:
            surname, _, written_year = key.partition("|")
            year = re.fullmatch(r"(\d{4})([a-z]?)", written_year)
            record = ParsedEntry(index=0, raw_text=marker.text, surnames=(surname,),
                                 year=int(year.group(1)) if year else None,
                                 year_suffix=(year.group(2) or None) if year else None, status=PARTIAL)
            found.append(_Found(AUTHOR_YEAR, key, marker.start, marker.end, marker.text, record,
                                replace(marker, keys=(key,))))
    return found


def _identifier_works(text: str) -> list[_Found]:
    found = []
    for match in _ARXIV.finditer(text):
        arxiv_id = canonical_arxiv_id(match.group("id"))
        found.append(_Found(ARXIV, arxiv_id, match.start(), match.end(), match.group(0),
                            ParsedEntry(index=0, raw_text=match.group(0), arxiv_id=arxiv_id, status=PARTIAL)))
    for match in _DOI.finditer(text):
        written = match.group(0).rstrip(_DOI_TRAILING)
        doi = normalise_doi(match.group("doi").rstrip(_DOI_TRAILING))
        if not doi or "/" not in doi.rstrip("/"):
            continue
        from_arxiv = _ARXIV_DOI.match(doi)
        found.append(_Found(DOI, doi, match.start(), match.start() + len(written), written, ParsedEntry(
            index=0, raw_text=written, doi=doi, arxiv_id=canonical_arxiv_id(from_arxiv.group("id")) if from_arxiv
            else None, status=PARTIAL)))
    return found


def _reads_as_title(text: str, start: int, end: int, title: str) -> bool:
    """Whether the quoted `title` (the quotes at `start`..`end` of `text`) names a work rather than quotes one."""
    words = _WORD.findall(title)
    if not MIN_TITLE_WORDS <= len(words) <= MAX_TITLE_WORDS:
        return False
    before = text[max(0, start - 40):start]
    if _QUOTATION_CUE.search(before):
        return False
    long_words = [word for word in words if len(word) >= 4]
    title_case = words[0][:1].isupper() and bool(long_words) and \
        sum(word[:1].isupper() for word in long_words) / len(long_words) >= _TITLE_CASE_SHARE
    return title_case or bool(_TITLE_CUE.search(before)) or bool(_YEAR_AFTER.match(text, end))


def _title_works(text: str) -> list[_Found]:
    found = []
    for match in _QUOTED.finditer(text):
        inner = next(group for group in match.groups() if group is not None)
        title = inner.strip().rstrip(".,;:").strip()
        if _reads_as_title(text, match.start(), match.end(), title):
            found.append(_Found(TITLE, normalise_title(title), match.start(), match.end(), title,
                                ParsedEntry(index=0, raw_text=title, title=title, status=PARTIAL)))
    return found


def _without_overlaps(found: Sequence[_Found]) -> list[_Found]:
    """The works whose spans overlap no work kept before them: identifiers first (a DOI's or a URL's digits are no
    year), then author-year markers, then quoted titles (a quotation holding a marker is the paper's words, not a
    title). Author-year works of one marker share its span and are all kept."""
    kept: list[_Found] = []
    for work in sorted(found, key=lambda item: (_PRIORITY[item.kind], item.start)):
        if all(work.end <= other.start or work.start >= other.end
               or ((work.start, work.end) == (other.start, other.end) and work.kind == other.kind == AUTHOR_YEAR)
               for other in kept):
            kept.append(work)
    return sorted(kept, key=lambda item: (item.start, item.end))


def _sentence_of(text: str, sentences: Sequence[tuple[int, int]], work: _Found) -> tuple[int, int]:
    """The (start, end) of the sentence holding `work`, without a paragraph's lead before it ("Weaknesses: - ")."""
    start, end = next(((start, end) for start, end in sentences if start <= work.start < end), (work.start, work.end))
    if start == 0 or text[start - 1] == "\n":
        start = min(_PARAGRAPH_LEAD.match(text, start, end).end(), work.start)
    return start, max(end, work.end)


def find_review_citations(text: str) -> list[ReviewCitation]:
    """Every work `text` (a review) cites, in order of position, each once per sentence (see the module docstring),
    with the sentence's retrieval query: the sentence with every work it cites cut out, as a citance's markers are
    (`evidence.query_of`: the clauses citing this work weighed twice)."""
    works = _without_overlaps([*_identifier_works(text), *_author_year_works(text), *_title_works(text)])
    sentences = split_sentences(text)
    placed = [(_sentence_of(text, sentences, work), work) for work in works]
    citations: list[ReviewCitation] = []
    seen: set[tuple[int, str, str]] = set()
    for (sentence_start, sentence_end), work in placed:
        if (sentence_start, work.kind, work.key) in seen:
            continue
        seen.add((sentence_start, work.kind, work.key))
        in_sentence = [other for (start, _), other in placed if start == sentence_start]
        spans = list(dict.fromkeys((other.start - sentence_start, other.end - sentence_start)
                                   for other in in_sentence))
        own = [(other.start - sentence_start, other.end - sentence_start) for other in in_sentence
               if (other.kind, other.key) == (work.kind, work.key)]
        citations.append(ReviewCitation(work.kind, work.key, work.text, work.start, work.end, sentence_start,
                                        sentence_end, work.record, query_of(text[sentence_start:sentence_end], spans,
                                                                            own), work.marker))
    return citations


def match_paper_entry(citation: ReviewCitation, entries: Sequence[ParsedEntry]) -> tuple[int | None, str | None]:
    """(the index of the submission's entry that is the cited work, None) or (None, why none is): an author-year work
    by `detection.resolve_markers` (first surname, year and suffix; never guessed between several), an identifier by
    the entry's own, a title by `SAME_TITLE`."""
    if not entries:
        return None, "the paper has no reference entries to match"
    if citation.kind == AUTHOR_YEAR and citation.marker is not None:
        [resolved] = detection.resolve_markers([citation.marker], entries)
        if resolved.entry_indexes:
            return resolved.entry_indexes[0], None
        if resolved.ambiguous_keys:
            return None, f"{citation.key} names several of the paper's {len(entries)} entries: not guessed"
    elif citation.kind == DOI:
        index = next((entry.index for entry in entries if entry.doi and entry.doi.lower() == citation.key), None)
        if index is None and citation.record.arxiv_id:
            index = next((entry.index for entry in entries if entry_arxiv_id(entry) == citation.record.arxiv_id),
                         None)
        if index is not None:
            return index, None
    elif citation.kind == ARXIV:
        index = next((entry.index for entry in entries if entry_arxiv_id(entry) == citation.key), None)
        if index is not None:
            return index, None
    elif citation.kind == TITLE:
        closest = closest_title(citation.record.title, {entry.index: entry.title for entry in entries if entry.title})
        if closest is not None and closest[1] >= SAME_TITLE:
            return closest[0], None
    return None, f"none of the paper's {len(entries)} entries is {citation.key}"

"""Reference checks: a bibliography entry against the records Crossref, OpenAlex and Semantic Scholar hold.

The answers are read exactly as the services send them (`records_from_crossref`, `records_from_openalex`,
`records_from_semantic_scholar`: a single work, or a search's list) into `MetadataRecord`s, and `check_entry` decides
the entry's `reference_checks` row:

* `suspicious`: a record of the cited work contradicts the entry: the record found by the entry's DOI or arXiv id
  has another title or none of its authors, no record of the work has the entry's year within one, the work is
  retracted (or the entry's DOI names a retraction notice), or the entry's DOI is unknown to every service while a
  record of its title and first author has another DOI. The reasons give the evidence.
* `validated`: a record of the cited work agrees with it: its title (when the entry has one), its first author
  (when both have authors) and its year within one (when both have a year).
* `not_found`: every service asked answered, and none holds a record close enough to the entry: possibly a
  fabricated reference. The reasons give each service's answer and the nearest miss.
* `unvalidatable`: nothing could be asked (no service configured, nothing to look the entry up by), or a service
  failed and the others found nothing close: an unreachable source is never evidence of fabrication.

A record is "of the cited work" when it was found by the entry's DOI or arXiv id, or when a title search found it
with the entry's title and first author. No I/O here: `resources/scholarly.py` asks the services.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from peerify_dagster.domain.citations.bibliography import surname as surname_of
from peerify_dagster.domain.citations.detection import fold_name
from peerify_dagster.domain.citations.entries import ParsedEntry
from peerify_dagster.domain.citations.options import METADATA_SERVICES, NETWORK_METADATA_SERVICES
from peerify_dagster.domain.citations.resolution import arxiv_id_of_link, canonical_arxiv_id, entry_arxiv_id
from peerify_dagster.domain.citations.titles import (
    SAME_TITLE,
    Spellings,
    normalise_title,
    repair_title,
    title_similarity,
)
from peerify_dagster.domain.citations.vocabulary import (  # noqa: F401 - re-exported: the statuses checks give
    NOT_FOUND,
    REFERENCE_STATUSES,
    SUSPICIOUS,
    UNVALIDATABLE,
    VALIDATED,
)

CROSSREF, OPENALEX, SEMANTIC_SCHOLAR = NETWORK_METADATA_SERVICES
# How a record was found: by the entry's DOI, by its arXiv id, or by a search for its title.
BY_DOI, BY_ARXIV_ID, BY_TITLE = "doi", "arxiv_id", "title"
LOOKUPS = (BY_DOI, BY_ARXIV_ID, BY_TITLE)

# Below this, the record found by the entry's own DOI or arXiv id is of another work (the identifier is wrong, or
# the title is); between it and SAME_TITLE the titles only partly agree (a subtitle or a parsing slip), which is
# reported but proves nothing either way.
TITLE_CONTRADICTION = 0.6
# A title that begins another's (a parsed title with the venue glued on, or a record's title without the subtitle
# the entry gives) is the same title when it has at least this many words; shorter ones ("Deep learning") begin
# other works' titles as often.
MIN_LEADING_TITLE_WORDS = 4
# Years within one of each other agree: a preprint and its publication, an online-first and an issue date.
YEAR_TOLERANCE = 1
# Crossref's update types (`updated-by` on the work, `update-to` on the notice) that withdraw a work.
RETRACTION_UPDATES = frozenset({"retraction", "partial_retraction", "withdrawal", "removal"})

_DOI_RESOLVER = re.compile(r"^(?:https?://(?:dx\.)?doi\.org/|doi:)", re.IGNORECASE)
_ARXIV_DOI = re.compile(r"^10\.48550/arxiv\.(.+)$", re.IGNORECASE)
_SERVICE_NAMES = {CROSSREF: "Crossref", OPENALEX: "OpenAlex", SEMANTIC_SCHOLAR: "Semantic Scholar"}


class MetadataFormatError(ValueError):
    """A service's answer is JSON but not of the shape that service sends; the message says what is wrong."""


@dataclass(frozen=True)
class MetadataRecord:
    """One work as a service describes it. `authors`: family names in order (`author_names`: the names as given, to
    compare a surname against every part of a name); `open_access_urls`: PDF locations the service names;
    `retraction_of`: the DOIs this record is a retraction notice of; `found_by`: how the client found it (LOOKUPS)."""

    service: str
    title: str | None
    authors: tuple[str, ...] = ()
    author_names: tuple[str, ...] = ()
    year: int | None = None
    doi: str | None = None  # lower-cased, without a resolver prefix, as ParsedEntry.doi
    arxiv_id: str | None = None
    venue: str | None = None
    retracted: bool = False
    retraction_of: tuple[str, ...] = ()
    open_access_urls: tuple[str, ...] = ()
    external_ids: Mapping[str, str] = field(default_factory=dict)
    found_by: str = BY_TITLE


@dataclass(frozen=True)
class ReferenceCheck:
    """An entry's `reference_checks` row (without venue, paper_id and entry_id, which the asset adds). The matched_*
    fields and the comparison figures describe the record the status rests on (none when unvalidatable);
    `open_access_urls` are those of the cited work's records; `errors` are "service: reason"."""

    status: str
    reasons: list[str]
    services: list[str]
    matched_service: str | None = None
    matched_title: str | None = None
    matched_authors: list[str] = field(default_factory=list)
    matched_year: int | None = None
    matched_doi: str | None = None
    matched_arxiv_id: str | None = None
    title_similarity: float | None = None
    author_overlap: float | None = None
    year_delta: int | None = None
    retracted: bool = False
    open_access_urls: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    evidence_json: str = "{}"


# -- reading the services' answers -------------------------------------------------------------------------------------

def normalise_doi(doi: str | None) -> str | None:
    """A DOI lower-cased without "https://doi.org/" or "doi:" (as ParsedEntry keeps it); None for none."""
    if not doi or not isinstance(doi, str):
        return None
    return _DOI_RESOLVER.sub("", doi.strip()).lower() or None


def _arxiv_id_of_doi(doi: str | None) -> str | None:
    match = _ARXIV_DOI.match(doi or "")
    return canonical_arxiv_id(match.group(1)) if match else None


def _text(value: Any) -> str | None:
    return value.strip() or None if isinstance(value, str) else None


def _first_text(values: Any) -> str | None:
    """The first non-empty string of a list (Crossref gives titles and container titles as lists)."""
    if isinstance(values, list):
        return next((text for text in map(_text, values) if text), None)
    return _text(values)


def _year(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and 1000 <= value <= 2999 else None


def _dicts(value: Any) -> list[dict]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _surnames_of(names: Sequence[str]) -> tuple[str, ...]:
    return tuple(surname_of(name) for name in names if name.split())


def _object(body: Any, service: str) -> dict:
    if not isinstance(body, dict):
        raise MetadataFormatError(f"{_SERVICE_NAMES[service]} answered {type(body).__name__}, not a JSON object")
    return body


def records_from_crossref(body: Any, found_by: str = BY_TITLE) -> list[MetadataRecord]:
    """Crossref's `/works/{doi}` answer ({"status": "ok", "message-type": "work", "message": {...}}) or its `/works`
    search ("message-type": "work-list", the works in `message.items`)."""
    message = _object(body, CROSSREF).get("message")
    kind = body.get("message-type")
    if kind == "work" and isinstance(message, dict):
        works = [message]
    elif kind == "work-list" and isinstance(message, dict) and isinstance(message.get("items"), list):
        works = _dicts(message["items"])
    else:
        raise MetadataFormatError(f"Crossref answer of message-type {kind!r} has no work or list of works")
    return [_crossref_record(work, found_by) for work in works]


def _crossref_year(work: dict) -> int | None:
    # `issued` is the earliest of the print and online dates; the others stand in where a deposit lacks it.
    for key in ("issued", "published", "published-print", "published-online", "created"):
        parts = (work.get(key) or {}).get("date-parts") if isinstance(work.get(key), dict) else None
        if isinstance(parts, list) and parts and isinstance(parts[0], list) and parts[0]:
            if (year := _year(parts[0][0])) is not None:
                return year
    return None


def _crossref_record(work: dict, found_by: str) -> MetadataRecord:
    title = _first_text(work.get("title"))
    subtitle = _first_text(work.get("subtitle"))
    if title and subtitle and normalise_title(subtitle) not in normalise_title(title):
        title = f"{title}: {subtitle}"
    people = _dicts(work.get("author"))
    # A person has `family` (and usually `given`); an organisation as author has `name` only.
    surnames = tuple(name for name in (_text(p.get("family")) or _text(p.get("name")) for p in people) if name)
    names = tuple(" ".join(part for part in (_text(p.get("given")), _text(p.get("family")) or _text(p.get("name")))
                           if part) for p in people)
    doi = normalise_doi(work.get("DOI"))
    updates = _dicts(work.get("updated-by"))
    notices = _dicts(work.get("update-to"))
    pdfs = tuple(dict.fromkeys(
        link["URL"] for link in _dicts(work.get("link"))
        if link.get("content-type") == "application/pdf" and isinstance(link.get("URL"), str)
        # links for the similarity-check service (iThenticate) are not for readers
        and link.get("intended-application") != "similarity-checking"))
    return MetadataRecord(
        service=CROSSREF, title=title, authors=surnames, author_names=tuple(name for name in names if name),
        year=_crossref_year(work), doi=doi, arxiv_id=_arxiv_id_of_doi(doi),
        venue=_first_text(work.get("container-title")) or _text((work.get("event") or {}).get("name")
                                                                 if isinstance(work.get("event"), dict) else None),
        retracted=any(update.get("type") in RETRACTION_UPDATES for update in updates),
        retraction_of=tuple(normalise_doi(notice.get("DOI")) for notice in notices
                            if notice.get("type") in RETRACTION_UPDATES and normalise_doi(notice.get("DOI"))),
        open_access_urls=pdfs, external_ids={"doi": doi} if doi else {}, found_by=found_by)


def records_from_openalex(body: Any, found_by: str = BY_TITLE) -> list[MetadataRecord]:
    """OpenAlex's `/works/doi:{doi}` answer (one work object) or its `/works?search=` list ({"meta", "results"})."""
    body = _object(body, OPENALEX)
    if isinstance(body.get("results"), list):
        works = _dicts(body["results"])
    elif isinstance(body.get("id"), str):
        works = [body]
    else:
        raise MetadataFormatError("OpenAlex answer is neither a work (no 'id') nor a list of works (no 'results')")
    return [_openalex_record(work, found_by) for work in works]


def _openalex_record(work: dict, found_by: str) -> MetadataRecord:
    names = tuple(name for name in (
        _text((authorship.get("author") or {}).get("display_name")) or _text(authorship.get("raw_author_name"))
        for authorship in _dicts(work.get("authorships"))) if name)
    doi = normalise_doi(work.get("doi"))
    locations = _dicts(work.get("locations"))
    best = work.get("best_oa_location") if isinstance(work.get("best_oa_location"), dict) else None
    # best_oa_location is open access by definition; other locations only when OpenAlex says they are
    pdfs = [best.get("pdf_url")] if best else []
    pdfs += [location.get("pdf_url") for location in locations if location.get("is_oa")]
    arxiv_id = _arxiv_id_of_doi(doi)
    for location in locations if arxiv_id is None else ():
        for url in (location.get("landing_page_url"), location.get("pdf_url")):
            if isinstance(url, str) and (arxiv_id := arxiv_id_of_link(url)):
                break
        if arxiv_id:
            break
    primary = work.get("primary_location") if isinstance(work.get("primary_location"), dict) else {}
    source = primary.get("source") if isinstance(primary.get("source"), dict) else {}
    ids = work.get("ids") if isinstance(work.get("ids"), dict) else {}
    return MetadataRecord(
        service=OPENALEX, title=_text(work.get("title")) or _text(work.get("display_name")),
        authors=_surnames_of(names), author_names=names, year=_year(work.get("publication_year")), doi=doi,
        arxiv_id=arxiv_id, venue=_text(source.get("display_name")), retracted=work.get("is_retracted") is True,
        open_access_urls=tuple(dict.fromkeys(url for url in pdfs if isinstance(url, str) and url)),
        external_ids={key: str(value) for key, value in ids.items() if value is not None}, found_by=found_by)


def records_from_semantic_scholar(body: Any, found_by: str = BY_TITLE) -> list[MetadataRecord]:
    """Semantic Scholar's `/graph/v1/paper/{id}` answer (one paper with the fields asked) or its `/paper/search`
    answer ({"total", "offset", "data": [...]})."""
    body = _object(body, SEMANTIC_SCHOLAR)
    if isinstance(body.get("data"), list):
        papers = _dicts(body["data"])
    elif isinstance(body.get("paperId"), str):
        papers = [body]
    else:
        detail = f": {body['error']}" if isinstance(body.get("error"), str) else ""
        raise MetadataFormatError(f"Semantic Scholar answer is neither a paper nor a search result{detail}")
    return [_semantic_scholar_record(paper, found_by) for paper in papers]


def _semantic_scholar_record(paper: dict, found_by: str) -> MetadataRecord:
    names = tuple(name for name in (_text(author.get("name")) for author in _dicts(paper.get("authors"))) if name)
    external = paper.get("externalIds") if isinstance(paper.get("externalIds"), dict) else {}
    doi = normalise_doi(external.get("DOI"))
    arxiv = _text(external.get("ArXiv"))
    pdf = paper.get("openAccessPdf") if isinstance(paper.get("openAccessPdf"), dict) else {}
    journal = paper.get("journal") if isinstance(paper.get("journal"), dict) else {}
    ids = {key.lower(): str(value) for key, value in external.items() if value is not None}
    return MetadataRecord(
        service=SEMANTIC_SCHOLAR, title=_text(paper.get("title")), authors=_surnames_of(names), author_names=names,
        year=_year(paper.get("year")), doi=doi, arxiv_id=canonical_arxiv_id(arxiv) if arxiv else _arxiv_id_of_doi(doi),
        venue=_text(paper.get("venue")) or _text(journal.get("name")),
        # the service has no empty-string-free contract: an absent PDF is {"url": "", "status": null}
        open_access_urls=(pdf["url"],) if _text(pdf.get("url")) else (),
        external_ids={**ids, "s2": paper["paperId"]} if isinstance(paper.get("paperId"), str) else ids,
        found_by=found_by)


RECORD_READERS = {CROSSREF: records_from_crossref, OPENALEX: records_from_openalex,
                  SEMANTIC_SCHOLAR: records_from_semantic_scholar}


# -- comparing an entry with a record ----------------------------------------------------------------------------------

def title_agreement(cited: str | None, recorded: str | None) -> float | None:
    """How alike two titles are (`title_similarity`); 1.0 when one is the other's main title (before its colon:
    "PaperMage" for "PaperMage: A Unified Toolkit ...") or begins it with MIN_LEADING_TITLE_WORDS words or more;
    None when either is missing. The cited title is compared repaired toward the record's spellings (`repair_title`:
    "SciB-ERT" is the record's "SciBERT")."""
    if not cited or not recorded or not normalise_title(cited) or not normalise_title(recorded):
        return None
    cited = repair_title(cited, candidate=Spellings.of([recorded]))
    for whole, part in ((cited, recorded), (recorded, cited)):
        if ":" in whole and normalise_title(whole.split(":", 1)[0]) == normalise_title(part):
            return 1.0
    shorter, longer = sorted((normalise_title(cited), normalise_title(recorded)), key=len)
    if len(shorter.split()) >= MIN_LEADING_TITLE_WORDS and (longer + " ").startswith(shorter + " "):
        return 1.0
    return round(title_similarity(cited, recorded), 3)


def _name_agrees(surname: str, record: MetadataRecord, position: int | None) -> bool:
    """Whether a cited surname is the record's author at `position` (None: any author): its last word (without
    particles) equals the record's family name or any word of the name as given (a double surname, a name written
    family name first)."""
    words = surname.split()
    key = fold_name(words[-1]) if words else ""
    if not key:
        return False
    indices = range(len(record.authors)) if position is None else [position]
    for index in indices:
        candidates = {fold_name(record.authors[index])} if index < len(record.authors) else set()
        if index < len(record.author_names):
            candidates |= {fold_name(word) for word in record.author_names[index].split()}
        if key in candidates:
            return True
    return False


@dataclass(frozen=True)
class _Comparison:
    record: MetadataRecord
    title: float | None  # title_agreement
    first_author: bool | None  # None when the entry or the record has no authors
    author_overlap: float | None  # share of the entry's surnames among the record's authors
    year_delta: int | None

    @property
    def by_identifier(self) -> bool:
        return self.record.found_by in (BY_DOI, BY_ARXIV_ID)

    @property
    def of_cited_work(self) -> bool:
        """Found by the entry's identifier, or by its title with its title and first author."""
        return self.by_identifier or (self.title is not None and self.title >= SAME_TITLE
                                      and self.first_author is True)

    @property
    def other_work(self) -> bool:
        """Found by the entry's identifier, yet of another title or other authors."""
        return self.by_identifier and (
            (self.title is not None and self.title < TITLE_CONTRADICTION) or self.author_overlap == 0)

    @property
    def agrees(self) -> bool:
        title_ok = self.title >= SAME_TITLE if self.title is not None else self.by_identifier
        return (self.of_cited_work and title_ok and self.first_author is not False
                and (self.year_delta is None or self.year_delta <= YEAR_TOLERANCE))


def _compare(entry: ParsedEntry, record: MetadataRecord) -> _Comparison:
    surnames = [surname for surname in entry.surnames if surname.split()]
    has_authors = bool(surnames) and bool(record.authors)
    return _Comparison(
        record=record,
        title=title_agreement(entry.title, record.title),
        first_author=_name_agrees(surnames[0], record, 0) if has_authors else None,
        author_overlap=(round(sum(_name_agrees(surname, record, None) for surname in surnames) / len(surnames), 3)
                        if has_authors else None),
        year_delta=abs(entry.year - record.year) if entry.year is not None and record.year is not None else None)


def _record_label(comparison: _Comparison, entry: ParsedEntry) -> str:
    record = comparison.record
    if record.found_by == BY_DOI:
        return f"{record.service}'s record for doi {entry.doi}"
    if record.found_by == BY_ARXIV_ID:
        return f"{record.service}'s record for arXiv {entry_arxiv_id(entry)}"
    return f"{record.service}'s record of this title"


def _evidence(comparison: _Comparison) -> dict[str, Any]:
    record = comparison.record
    return {"found_by": record.found_by, "title": record.title, "authors": list(record.authors), "year": record.year,
            "doi": record.doi, "arxiv_id": record.arxiv_id, "venue": record.venue, "retracted": record.retracted,
            "retraction_of": list(record.retraction_of), "title_similarity": comparison.title,
            "first_author_agrees": comparison.first_author, "author_overlap": comparison.author_overlap,
            "year_delta": comparison.year_delta}


def _contradictions(entry: ParsedEntry, comparisons: Sequence[_Comparison]) -> list[tuple[_Comparison, str]]:
    """(the record, the reason) for each way the cited work's records contradict the entry."""
    found: list[tuple[_Comparison, str]] = []
    for comparison in comparisons:
        record, label = comparison.record, _record_label(comparison, entry)
        if comparison.by_identifier and comparison.title is not None and comparison.title < TITLE_CONTRADICTION:
            found.append((comparison, f"title differs from {label}: '{entry.title}' vs '{record.title}' "
                                      f"(similarity {comparison.title:.2f})"))
        if comparison.by_identifier and comparison.author_overlap == 0:
            found.append((comparison, f"authors differ from {label}: {', '.join(entry.surnames)} vs "
                                      f"{', '.join(record.authors)}"))
    same_work = [c for c in comparisons if c.of_cited_work and not c.other_work]
    for comparison in same_work:
        record, label = comparison.record, _record_label(comparison, entry)
        if record.retracted:
            found.append((comparison, f"retracted: {label} is marked retracted"))
        if record.retraction_of and comparison.by_identifier:
            found.append((comparison, f"{label} is a retraction notice (of doi {', '.join(record.retraction_of)})"))
    dated = [c for c in same_work if c.year_delta is not None]
    if dated and all(c.year_delta > YEAR_TOLERANCE for c in dated):
        for comparison in dated:
            found.append((comparison, f"year {entry.year} differs from {_record_label(comparison, entry)} "
                                      f"({comparison.record.year}, {comparison.year_delta} years apart)"))
    return found


def _unknown_doi(entry: ParsedEntry, comparisons: Sequence[_Comparison], services: Sequence[str],
                 errors: Mapping[str, str]) -> tuple[_Comparison, str] | None:
    """The entry's DOI unknown to every service asked (two or more, none failed) while a record of its title and first
    author has another DOI: the entry names the work with a wrong DOI. One service alone proves nothing: Crossref
    knows no DataCite DOI (Zenodo, arXiv), and a work can have a DOI per version."""
    if (not entry.doi or errors or len(services) < 2 or _arxiv_id_of_doi(entry.doi)
            or any(c.record.found_by == BY_DOI for c in comparisons)):
        return None
    for comparison in comparisons:
        if comparison.agrees and comparison.record.doi and comparison.record.doi != entry.doi:
            return comparison, (f"doi {entry.doi} is unknown to {', '.join(services)}; "
                                f"{comparison.record.service}'s record of this title has doi {comparison.record.doi}")
    return None


def _best(comparisons: Sequence[_Comparison]) -> _Comparison:
    """The record found by identifier first, then the closest title, then the service asked first."""
    order = {service: position for position, service in enumerate(METADATA_SERVICES)}
    return min(comparisons, key=lambda c: (not c.by_identifier, -(c.title or 0.0), order.get(c.record.service, 9)))


def _agreement_reason(entry: ParsedEntry, comparison: _Comparison) -> str:
    details = []
    if comparison.title is not None:
        details.append(f"title similarity {comparison.title:.2f}")
    if comparison.first_author:
        details.append(f"first author {entry.surnames[0]}")
    if comparison.year_delta is not None:
        details.append(f"year {comparison.record.year}")
    return f"{_record_label(comparison, entry)} agrees" + (f" ({', '.join(details)})" if details else "")


def _near_miss(entry: ParsedEntry, comparison: _Comparison) -> str:
    record, problems = comparison.record, []  # why the closest record does not agree
    if comparison.title is not None and comparison.title < SAME_TITLE:
        problems.append(f"title '{record.title}' (similarity {comparison.title:.2f})")
    if comparison.first_author is False:
        overlap = comparison.author_overlap or 0.0
        problems.append(f"first author {record.authors[0]} not {entry.surnames[0]}"
                        + (f" though {overlap:.0%} of the authors agree" if overlap else ""))
    elif comparison.first_author is None and not comparison.by_identifier:
        problems.append("no authors to compare")
    if comparison.year_delta is not None and comparison.year_delta > YEAR_TOLERANCE:
        problems.append(f"year {record.year}")
    return (f"no record agrees; the closest is {_record_label(comparison, entry)}: "
            + "; ".join(problems or ["nothing to compare it by"]))


def _answer_summary(comparisons: Sequence[_Comparison]) -> str:
    if not comparisons:
        return "no record"
    closest = max((c.title or 0.0) for c in comparisons)
    return f"{len(comparisons)} record{'s' if len(comparisons) != 1 else ''}, none close (best title similarity " \
           f"{closest:.2f})"


def check_entry(entry: ParsedEntry, answers: Mapping[str, Sequence[MetadataRecord]],
                errors: Mapping[str, str]) -> ReferenceCheck:
    """The entry's check from each asked service's records (`answers`: service -> the records it gave, none when it
    knew nothing) and the services that failed (`errors`: service -> a short reason)."""
    services = [service for service in METADATA_SERVICES if service in answers or service in errors]
    error_list = [f"{service}: {errors[service]}" for service in services if service in errors]
    comparisons = [_compare(entry, record) for service in services if service not in errors
                   for record in answers.get(service, ())]
    evidence: dict[str, Any] = {service: {"error": errors.get(service), "records": [
        _evidence(c) for c in comparisons if c.record.service == service]} for service in services}

    def unvalidatable(reason: str) -> ReferenceCheck:
        return ReferenceCheck(status=UNVALIDATABLE, reasons=[reason], services=services, errors=error_list,
                              evidence_json=json.dumps(evidence, ensure_ascii=False))

    if not services:
        return unvalidatable("no metadata service is configured")
    if not (entry.doi or entry.arxiv_id or (entry.title and normalise_title(entry.title))):
        return unvalidatable("the entry has no DOI, arXiv id or title to look up")
    if len(error_list) == len(services):
        return unvalidatable(f"every service asked failed ({', '.join(services)})")

    contradictions = _contradictions(entry, comparisons)
    if not contradictions and (wrong_doi := _unknown_doi(entry, comparisons, services, errors)):
        contradictions = [wrong_doi]
    agreeing = [c for c in comparisons if c.agrees]
    if contradictions:
        status, matched, reasons = SUSPICIOUS, contradictions[0][0], [reason for _, reason in contradictions]
    elif agreeing:
        matched = _best(agreeing)
        status, reasons = VALIDATED, [_agreement_reason(entry, matched)]
    else:
        looked_up = (f"doi {entry.doi}" if entry.doi else f"arXiv {entry.arxiv_id}" if entry.arxiv_id
                     else "its title")
        looked_up += " or its title" if (entry.doi or entry.arxiv_id) and entry.title else ""
        answered = [f"{service}: " + _answer_summary([c for c in comparisons if c.record.service == service])
                    for service in services if service not in errors]
        miss = [_near_miss(entry, _best(comparisons))] if comparisons else []
        # A record found by the entry's own identifier, or with a title that partly agrees, shows the work exists:
        # it proves nothing either way.
        if any(c.by_identifier or (c.title or 0.0) >= TITLE_CONTRADICTION for c in comparisons):
            return unvalidatable(miss[0] + (f" ({', '.join(error_list)})" if error_list else ""))
        if error_list:
            return unvalidatable("; ".join([*miss, f"no record agrees with {looked_up}", *answered,
                                            f"failed: {', '.join(error_list)}"]))
        return ReferenceCheck(status=NOT_FOUND, reasons=[f"no record of {looked_up} in any source asked", *answered,
                                                         *miss],
                              services=services, evidence_json=json.dumps(evidence, ensure_ascii=False))

    same_work = [c for c in comparisons if c.of_cited_work and not c.other_work]
    record = matched.record
    return ReferenceCheck(
        status=status, reasons=reasons, services=services, matched_service=record.service,
        matched_title=record.title, matched_authors=list(record.authors), matched_year=record.year,
        matched_doi=record.doi, matched_arxiv_id=record.arxiv_id, title_similarity=matched.title,
        author_overlap=matched.author_overlap, year_delta=matched.year_delta,
        retracted=any(c.record.retracted for c in same_work),
        open_access_urls=list(dict.fromkeys(url for c in same_work for url in c.record.open_access_urls)),
        errors=error_list, evidence_json=json.dumps(evidence, ensure_ascii=False))

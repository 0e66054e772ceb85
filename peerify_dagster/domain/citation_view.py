"""What the citation half shows, shaped from the lake's citation tables with no Dagster and no web import: the
citance browser's rows and filters (`/venues/<venue>/citances`), one citance with everything known about it (its
sentence with the markers, the entries they resolve to with their reference check, how each cited paper was found or
why not, the evidence passages and every verifier's verdict), where the citance lies on the citing manuscript's
page and where a passage lies on the cited paper's, and the summary `peerify verify --citations` prints and writes.

Every function takes plain polars frames (a table not built is passed as None) and returns plain values, so the
pages and the command hold no logic and the tests need no server.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import polars as pl

from peerify_dagster.domain.citations.vocabulary import CITATION_LABELS
from peerify_dagster.domain.frames import one_where, rows_where
from peerify_dagster.domain.regions import boxes_on_page, page_sizes_of, pages_of

PER_PAGE = 50
NO_VERDICT = "none"  # the verdict filter's value for a citance no verifier gave a label
NO_REFERENCES = "no_references"  # bibliography.parse_status of a manuscript without a references section
NO_REFERENCES_NOTE = "no references section found"
RESOLVED = "resolved"  # cited_papers.status of an entry whose full text was found
MARKER_RESOLUTIONS = ("all", "some", "none")  # citances.resolution
CITED_STATUSES = (RESOLVED, "unresolved", "rejected")  # cited_papers.status
FORUM_KEY_PREFIX = "forum:"  # cited_key of a cited paper that is one of the venue's own manuscripts


@dataclass(frozen=True)
class CitationTables:
    """A venue's tables the citation pages read (None: not built)."""

    citances: pl.DataFrame
    bibliography: pl.DataFrame | None = None
    reference_checks: pl.DataFrame | None = None
    cited_papers: pl.DataFrame | None = None
    cited_manuscripts: pl.DataFrame | None = None
    citation_evidence: pl.DataFrame | None = None
    citation_verdicts: pl.DataFrame | None = None
    citance_enrichment: pl.DataFrame | None = None
    manuscript_pdfs: pl.DataFrame | None = None
    parsed_manuscripts: pl.DataFrame | None = None
    submissions: pl.DataFrame | None = None


CITATION_TABLES = tuple(table.name for table in fields(CitationTables))  # each field is named as its lake table


def _ordered(frame: pl.DataFrame) -> pl.DataFrame:
    """Citances in reading order: by paper, then block, then place in the block."""
    return frame.sort("paper_id", "block_order", "char_start", nulls_last=True)


def _label_order(label: str | None) -> int:
    return CITATION_LABELS.index(label) if label in CITATION_LABELS else len(CITATION_LABELS)


# -- the citance browser -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CitanceFilter:
    """What the browser's form asks for; empty strings and None mean "any"."""

    paper: str | None = None
    verifier: str | None = None
    verdict: str | None = None  # one of CITATION_LABELS, or NO_VERDICT
    resolution: str | None = None  # citances.resolution: how many markers resolved to entries
    cited: str | None = None  # cited_papers.status of a cited entry
    page: int = 1

    @classmethod
    def from_query(cls, query: Mapping[str, str]) -> CitanceFilter:
        """From the page's query string; unknown values are kept (they match nothing), a bad page number is page 1."""
        page = query.get("page", "1")
        return cls(*(query.get(name) or None for name in ("paper", "verifier", "verdict", "resolution", "cited")),
                   page=int(page) if page.isdigit() and int(page) > 0 else 1)

    def query(self, **changes: Any) -> dict[str, str]:
        """The filter as query parameters (what links to another page of it carry), with `changes` applied."""
        values = {"paper": self.paper, "verifier": self.verifier, "verdict": self.verdict,
                  "resolution": self.resolution, "cited": self.cited, "page": self.page, **changes}
        return {name: str(value) for name, value in values.items() if value not in (None, "")}


@dataclass(frozen=True)
class CitanceIndex:
    """A venue's citances as the browser filters them: one row per citance, its cited entries with how each was
    resolved (`cited`: citance_id, entry_id, status), and every verdict (`verdicts`)."""

    citances: pl.DataFrame  # citance_id, paper_id, text, page, markers, resolution, entry_ids
    cited: pl.DataFrame  # citance_id, entry_id, status
    verdicts: pl.DataFrame  # citance_id, entry_id, verifier, label, status
    titles: dict[str, str]  # paper_id -> title

    @property
    def papers(self) -> list[str]:
        return sorted(set(self.citances["paper_id"]))

    @property
    def verifiers(self) -> list[str]:
        return sorted(set(self.verdicts["verifier"].drop_nulls()))


_CITED_SCHEMA = {"citance_id": pl.String, "entry_id": pl.String, "status": pl.String}
_VERDICT_SCHEMA = {"citance_id": pl.String, "entry_id": pl.String, "verifier": pl.String, "label": pl.String,
                   "status": pl.String}


def citance_index(tables: CitationTables) -> CitanceIndex:
    """The browser's index of a venue's citances."""
    citances = _ordered(tables.citances).select("citance_id", "paper_id", "text", "page", "markers", "resolution",
                                                "entry_ids")
    pairs = citances.select("citance_id", pl.col("entry_ids").alias("entry_id")).explode("entry_id") \
        .drop_nulls("entry_id")
    if tables.cited_papers is not None:
        cited = pairs.join(tables.cited_papers.select("entry_id", "status"), on="entry_id", how="left")
    else:
        cited = pairs.with_columns(pl.lit(None, pl.String).alias("status"))
    verdicts = tables.citation_verdicts.select(*_VERDICT_SCHEMA).cast(_VERDICT_SCHEMA) \
        if tables.citation_verdicts is not None else pl.DataFrame(schema=_VERDICT_SCHEMA)
    titles = {row["paper_id"]: row["title"] for row in rows_where(tables.submissions) if row.get("title")}
    return CitanceIndex(citances, cited.cast(_CITED_SCHEMA), verdicts, titles)


@dataclass(frozen=True)
class CitancePage:
    """One page of the browser: its rows, how many citances match, and the page count."""

    rows: list[dict]
    total: int
    page: int
    pages: int


def filter_citances(index: CitanceIndex, wanted: CitanceFilter, per_page: int = PER_PAGE) -> CitancePage:
    """The citances matching every part of `wanted`, one page of them, each with its cited entries' resolution and
    its verdicts.

    Verdict: a verdict (of the chosen verifier, any when none is chosen) with that label; NO_VERDICT keeps the
    citances that have no labelled verdict (of that verifier). Resolution: how many of the citance's markers resolved
    to bibliography entries (all, some, none). Cited: a cited entry whose full text was found (resolved) or not."""
    matching = index.citances
    if wanted.paper:
        matching = matching.filter(pl.col("paper_id") == wanted.paper)
    if wanted.resolution:
        matching = matching.filter(pl.col("resolution") == wanted.resolution)
    if wanted.cited:
        keep = index.cited.filter(pl.col("status") == wanted.cited).select("citance_id").unique()
        matching = matching.join(keep, on="citance_id", how="semi")
    verdicts = index.verdicts
    if wanted.verifier:
        verdicts = verdicts.filter(pl.col("verifier") == wanted.verifier)
    if wanted.verdict == NO_VERDICT:
        labelled = verdicts.filter(pl.col("label").is_not_null()).select("citance_id").unique()
        matching = matching.join(labelled, on="citance_id", how="anti")
    elif wanted.verdict:
        keep = verdicts.filter(pl.col("label") == wanted.verdict).select("citance_id").unique()
        matching = matching.join(keep, on="citance_id", how="semi")
    elif wanted.verifier:
        matching = matching.join(verdicts.select("citance_id").unique(), on="citance_id", how="semi")
    pages = max(1, math.ceil(matching.height / per_page))
    page = min(wanted.page, pages)
    shown = matching.slice((page - 1) * per_page, per_page)
    ids = shown["citance_id"].to_list()
    cited_of = _grouped(index.cited.filter(pl.col("citance_id").is_in(ids)))
    verdicts_of = _grouped(index.verdicts.filter(pl.col("citance_id").is_in(ids)).sort("verifier", "entry_id"))
    rows = [{**row, "title": index.titles.get(row["paper_id"]), "cited": cited_of.get(row["citance_id"], []),
             "verdicts": verdicts_of.get(row["citance_id"], [])} for row in shown.iter_rows(named=True)]
    return CitancePage(rows, matching.height, page, pages)


def _grouped(frame: pl.DataFrame) -> dict[str, list[dict]]:
    grouped: dict[str, list[dict]] = {}
    for row in frame.iter_rows(named=True):
        grouped.setdefault(row["citance_id"], []).append(row)
    return grouped


# -- one citance ---------------------------------------------------------------------------------------------------
@dataclass
class Document:
    """A PDF the pages can show: its content hash (None: not in the lake), page count and page sizes (PDF
    points)."""

    sha256: str | None
    pages: int | None
    page_sizes: dict[int, tuple[float, float]]

    @property
    def shown(self) -> bool:
        return self.sha256 is not None


@dataclass
class EvidencePassage:
    """One passage of the cited paper ranked for the citance (citation_evidence)."""

    passage_id: str
    mode: str | None
    retriever: str | None
    rank: int | None
    score: float | None
    text: str | None
    page: int | None
    regions: list[dict]
    window_sentences: int | None

    @property
    def pages(self) -> list[int]:
        """The pages the passage lies on: those of its regions, else the page it starts on."""
        return pages_of({"regions": self.regions, "page": self.page})


@dataclass
class VerdictView:
    """One verifier's verdict on the citance against one cited entry, and the passages it was shown."""

    verifier: str | None
    mode: str | None
    status: str | None
    label: str | None
    explanation: str | None
    call_id: str | None
    prompt_id: str | None
    passages: list[EvidencePassage]

    @property
    def outcome(self) -> str:
        """The label, else why there is none (the status: no_cited_paper, too_long, parse_failed, error)."""
        return self.label or self.status or "no verdict"


@dataclass
class EntryView:
    """One bibliography entry the citance cites: its parsed fields, its reference check, how its full text was
    found (or why not), the evidence passages ranked from it and every verdict."""

    entry_id: str
    entry: dict | None  # the bibliography row
    check: dict | None  # the reference_checks row
    cited: dict | None  # the cited_papers row (status, source, locator, reason, attempts)
    document: Document | None  # the cited paper's PDF, when it was had
    passages: list[EvidencePassage]  # the ranked passages (ok rows), in mode and rank order
    evidence_status: str | None  # citation_evidence.status when no passage was ranked (no_cited_paper, no_passages)
    verdicts: list[VerdictView]

    @property
    def title(self) -> str | None:
        return (self.entry or {}).get("title")

    @property
    def year(self) -> int | None:
        return (self.entry or {}).get("year")

    @property
    def resolution(self) -> str:
        return (self.cited or {}).get("status") or "not resolved yet"

    @property
    def unavailable_reason(self) -> str | None:
        """Why the cited paper's page cannot be shown, or None when it can."""
        if self.document is not None and self.document.shown:
            return None
        if self.cited is None:
            return "the entry has not been resolved to a full text (cited_papers is not built)"
        if self.cited.get("status") != RESOLVED:
            return f"the cited paper could not be had: {self.cited.get('reason') or self.cited.get('status')}"
        return f"the cited paper's PDF ({self.cited.get('cited_key')}) is not in this lake"


@dataclass
class MarkerView:
    """One citation marker of the sentence and the entries it resolves to."""

    text: str
    style: str | None
    entry_ids: list[str]
    unresolved_keys: list[str]


@dataclass
class CitanceDetail:
    """Everything the citance page (and the command's summary) shows about one citance."""

    citance: dict  # the citances row
    paper_title: str | None
    parts: list[tuple[str, int | None]]  # the sentence cut at its markers: (text, index into `markers` or None)
    markers: list[MarkerView]
    enrichment: dict | None  # the citance_enrichment row, when the tagger ran
    entries: list[EntryView]
    citing: Document  # the citing manuscript's PDF
    notes: list[str] = field(default_factory=list)

    @property
    def citance_id(self) -> str:
        return self.citance["citance_id"]

    def entry(self, entry_id: str | None) -> EntryView | None:
        return next((entry for entry in self.entries if entry.entry_id == entry_id), None)

    @property
    def default_entry(self) -> EntryView | None:
        """The entry the cited-paper pane opens on: the first whose paper can be shown, else the first."""
        return next((entry for entry in self.entries if entry.document and entry.document.shown and entry.passages),
                    self.entries[0] if self.entries else None)


def sentence_parts(text: str, char_start: int | None, markers: Sequence[Mapping]) -> list[tuple[str, int | None]]:
    """The sentence cut at its markers, each piece with the index of the marker it is (None: running text). Marker
    offsets are in the block's text, like the citance's own `char_start`; a marker that does not sit where its
    offsets say is not cut out."""
    parts: list[tuple[str, int | None]] = []
    cursor = 0
    base = char_start or 0
    for index, marker in sorted(enumerate(markers), key=lambda item: item[1].get("start") or 0):
        start, end = (marker.get("start") or 0) - base, (marker.get("end") or 0) - base
        if start < cursor or end > len(text) or text[start:end] != marker.get("text"):
            continue
        if start > cursor:
            parts.append((text[cursor:start], None))
        parts.append((text[start:end], index))
        cursor = end
    if cursor < len(text):
        parts.append((text[cursor:], None))
    return parts


def _passage(row: Mapping) -> EvidencePassage:
    return EvidencePassage(passage_id=row["passage_id"], mode=row.get("mode"), retriever=row.get("retriever"),
                           rank=row.get("rank"), score=row.get("score"), text=row.get("text"), page=row.get("page"),
                           regions=list(row.get("regions") or []), window_sentences=row.get("window_sentences"))


def citing_document(tables: CitationTables, paper_id: str) -> Document:
    """The citing manuscript's PDF (manuscript_pdfs) with its page sizes (parsed_manuscripts)."""
    pdf = one_where(tables.manuscript_pdfs, paper_id=paper_id)
    usable = pdf is not None and pdf.get("status") == "ok"
    return Document(pdf["sha256"] if usable else None, pdf.get("pages") if usable else None,
                    page_sizes_of(one_where(tables.parsed_manuscripts, paper_id=paper_id)))


def cited_document(tables: CitationTables, cited: Mapping | None) -> Document | None:
    """The cited paper's PDF: its cited_manuscripts row, or, for one of the venue's own manuscripts
    (`forum:<paper_id>`), that manuscript's PDF; None when the entry was not resolved to one."""
    key = (cited or {}).get("cited_key")
    if not key or (cited or {}).get("status") != RESOLVED:
        return None
    stored = one_where(tables.cited_manuscripts, cited_key=key)
    if stored is not None and stored.get("pdf_sha256"):
        return Document(stored["pdf_sha256"], stored.get("pages"), page_sizes_of(stored))
    if key.startswith(FORUM_KEY_PREFIX):
        document = citing_document(tables, key.removeprefix(FORUM_KEY_PREFIX))
        return document if document.shown else Document(None, None, {})
    return Document(None, None, {})


def citance_detail(tables: CitationTables, citance_id: str) -> CitanceDetail | None:
    """The citance page of `citance_id`, or None when the venue has no such citance."""
    citance = one_where(tables.citances, citance_id=citance_id)
    if citance is None:
        return None
    paper_id = citance["paper_id"]
    markers = [MarkerView(m["text"], m.get("style"), list(m.get("entry_ids") or []),
                          list(m.get("unresolved_keys") or [])) for m in citance.get("markers") or []]
    evidence = rows_where(tables.citation_evidence, citance_id=citance_id)
    verdicts = rows_where(tables.citation_verdicts, citance_id=citance_id)
    entries = []
    for entry_id in citance.get("entry_ids") or []:
        cited = one_where(tables.cited_papers, entry_id=entry_id)
        ranked = sorted((row for row in evidence if row["entry_id"] == entry_id),
                        key=lambda row: (row.get("mode") or "", row.get("rank") or 0))
        passages = [_passage(row) for row in ranked if row.get("status") == "ok" and row.get("passage_id")]
        by_id = {passage.passage_id: passage for passage in passages}
        views = [VerdictView(verifier=row.get("verifier"), mode=row.get("mode"), status=row.get("status"),
                             label=row.get("label"), explanation=row.get("explanation"), call_id=row.get("call_id"),
                             prompt_id=row.get("prompt_id"),
                             passages=[by_id[p] for p in row.get("passage_ids") or [] if p in by_id])
                 for row in sorted((r for r in verdicts if r["entry_id"] == entry_id),
                                   key=lambda r: (r.get("verifier") or "", r.get("mode") or ""))]
        entries.append(EntryView(
            entry_id=entry_id, entry=one_where(tables.bibliography, entry_id=entry_id),
            check=one_where(tables.reference_checks, entry_id=entry_id), cited=cited,
            document=cited_document(tables, cited), passages=passages,
            evidence_status=next((row["status"] for row in ranked if row.get("status") != "ok"), None),
            verdicts=views))
    notes = []
    if not markers:
        notes.append("The citance records no markers.")
    elif not entries:
        notes.append("None of the citance's markers resolves to an entry of the bibliography: "
                     + ", ".join(key for marker in markers for key in marker.unresolved_keys or [marker.text]))
    submission = one_where(tables.submissions, paper_id=paper_id)
    citing = citing_document(tables, paper_id)
    if not citing.shown:
        notes.append(f"The PDF of paper {paper_id} is not in this lake, so the citance cannot be shown on its page.")
    return CitanceDetail(citance=citance, paper_title=(submission or {}).get("title"),
                         parts=sentence_parts(citance["text"], citance.get("char_start"), citance.get("markers") or []),
                         markers=markers, enrichment=one_where(tables.citance_enrichment, citance_id=citance_id),
                         entries=entries, citing=citing, notes=notes)


def citing_page_view(detail: CitanceDetail, page: int | None = None) -> dict | None:
    """What the citing manuscript's pane shows: the citance's page (its first, or `page` when it is one of its
    pages), the pages it spans, and its boxes on that page; None without the PDF or a page."""
    regions = list(detail.citance.get("regions") or [])
    pages = pages_of(detail.citance)
    if not detail.citing.shown or not pages:
        return None
    shown = page if page in pages else pages[0]
    return {"sha256": detail.citing.sha256, "page": shown, "pages": pages, "of": detail.citing.pages,
            "boxes": boxes_on_page(regions, shown, detail.citing.page_sizes)}


def cited_page_view(detail: CitanceDetail, entry_id: str | None = None, passage_id: str | None = None,
                    page: int | None = None) -> dict | None:
    """What the cited paper's pane shows for one entry (the default entry when none is named): the passage asked for
    (else the top one), its place among the entry's passages (to step through them), its page and its boxes there;
    or, when the paper could not be had, the reason. None when the citance cites no entry."""
    entry = detail.entry(entry_id) or detail.default_entry
    if entry is None:
        return None
    view: dict[str, Any] = {"entry": entry, "reason": entry.unavailable_reason, "passage": None}
    if view["reason"] is not None:
        return view
    if not entry.passages:
        view["reason"] = ("no passage of the cited paper was ranked for the citance"
                          + (f" ({entry.evidence_status})" if entry.evidence_status else ""))
        return view
    index = next((i for i, p in enumerate(entry.passages) if p.passage_id == passage_id), 0)
    passage = entry.passages[index]
    pages = passage.pages
    shown = page if page in pages else (pages[0] if pages else None)
    view.update(passage=passage, index=index, count=len(entry.passages), page=shown, pages=pages,
                sha256=entry.document.sha256, of=entry.document.pages,
                previous=entry.passages[index - 1].passage_id if index > 0 else None,
                next=entry.passages[index + 1].passage_id if index + 1 < len(entry.passages) else None,
                boxes=boxes_on_page(passage.regions, shown, entry.document.page_sizes) if shown else [])
    return view


# -- the summary of `peerify verify --citations` -------------------------------------------------------------------
@dataclass
class CitationSummary:
    """One venue's citation half as the command prints and writes it."""

    venue: str
    title: str
    origin: str
    citances: list[CitanceDetail]
    entries: int  # bibliography entries parsed from the manuscripts
    resolved: int  # of them, resolved to a full text
    verdicts: dict[str, int]  # label (or status, for a verdict without one) -> verdicts
    notes: list[str] = field(default_factory=list)

    def counts_line(self) -> str:
        tally = ", ".join(f"{outcome} {n}" for outcome, n in self.verdicts.items()) or "none"
        return (f"{len(self.citances)} citances, {self.entries} bibliography entries, {self.resolved} resolved to a "
                f"full text; verdicts: {tally}")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def citation_summary(tables: CitationTables, venue: str, origin: str) -> CitationSummary:
    """Every citance of the venue in reading order with everything known about it, the counts and the notes (a
    manuscript without a references section says so)."""
    details = [detail for citance_id in _ordered(tables.citances)["citance_id"]
               if (detail := citance_detail(tables, citance_id)) is not None]
    bibliography = rows_where(tables.bibliography)
    entries = [row for row in bibliography if row["parse_status"] != NO_REFERENCES]
    resolved = {row["entry_id"] for row in rows_where(tables.cited_papers, status=RESOLVED)}
    notes = [f"{row['paper_id']}: {NO_REFERENCES_NOTE}" + (f" ({row['parse_reason']})" if row.get("parse_reason")
                                                           else "")
             for row in bibliography if row["parse_status"] == NO_REFERENCES]
    outcomes = [view.outcome for detail in details for entry in detail.entries for view in entry.verdicts]
    verdicts = {outcome: outcomes.count(outcome)
                for outcome in sorted(set(outcomes), key=lambda o: (_label_order(o), o))}
    submission = next(iter(rows_where(tables.submissions)), {})
    return CitationSummary(venue=venue, title=submission.get("title") or venue, origin=origin, citances=details,
                           entries=len(entries), resolved=sum(row["entry_id"] in resolved for row in entries),
                           verdicts=verdicts, notes=notes)


def _clip(text: str | None, width: int) -> str:
    flat = " ".join((text or "").split())
    return flat if len(flat) <= width else f"{flat[:width]}..."


def format_citations(summary: CitationSummary, width: int = 200) -> str:
    """The summary as the terminal shows it: each citance with its page and markers, each cited entry with its
    parsed title and year, its reference check and resolution (with the reason), and each verdict with its
    explanation and top passage; then the counts."""
    lines = [f"Citations of {summary.title} ({summary.origin}), venue {summary.venue}"]
    lines += [f"  note: {note}" for note in summary.notes]
    for number, detail in enumerate(summary.citances, start=1):
        citance = detail.citance
        lines += ["", f"{number}. p.{citance.get('page') or '?'} {_clip(citance['text'], width)}"]
        for marker in detail.markers:
            resolved = ", ".join(marker.entry_ids) or "no entry"
            unresolved = f" (unresolved: {', '.join(marker.unresolved_keys)})" if marker.unresolved_keys else ""
            lines.append(f"   marker {marker.text!r} ({marker.style}) -> {resolved}{unresolved}")
        lines += [f"   note: {note}" for note in detail.notes]
        for entry in detail.entries:
            year = f" ({entry.year})" if entry.year else ""
            lines.append(f"   [{entry.entry_id}] {_clip(entry.title, width) or '(no title parsed)'}{year}")
            check = entry.check or {}
            reasons = "; ".join(check.get("reasons") or [])
            lines.append(f"      reference check: {check.get('status') or 'not checked'}"
                         + (f" ({reasons})" if reasons else ""))
            cited = entry.cited or {}
            where = f" from {cited['source']} ({cited.get('locator')})" if cited.get("source") else ""
            reason = f": {cited['reason']}" if cited.get("reason") else ""
            lines.append(f"      resolution: {entry.resolution}{where}{reason}")
            for verdict in entry.verdicts:
                lines.append(f"      {verdict.verifier} ({verdict.mode}): {verdict.outcome}"
                             + (f": {_clip(verdict.explanation, width)}" if verdict.explanation else ""))
                top = (verdict.passages or entry.passages or [None])[0]
                if top is not None:
                    score = f", score {top.score:.3f}" if top.score is not None else ""
                    lines.append(f"         top passage p.{top.page or '?'}{score}: {_clip(top.text, width)}")
    lines += ["", summary.counts_line()]
    return "\n".join(lines)

"""What `peerify refs check` writes: one row per reference entry (its key, status, reasons and the sources asked),
as JSON, CSV, a self-contained HTML page or corrected BibTeX, and whether the run fails (`--fail-on`).

Corrections come only from a record that validates the entry (domain/citations/metadata.py `check_entry`): its
title, year and DOI replace or fill the entry's where they differ, each change listed. A suspicious entry is never
corrected (the record that contradicts it may be of another work), and a not_found one cannot be: both get a
comment with the reasons above them in the BibTeX, so a maintainer sees why. No I/O here.
"""

from __future__ import annotations

import csv
import html
import io
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from peerify_dagster.domain.citations.bibtex import BibtexEntry, corrected_entry, write_bibtex
from peerify_dagster.domain.citations.entries import ParsedEntry
from peerify_dagster.domain.citations.metadata import ReferenceCheck
from peerify_dagster.domain.citations.vocabulary import NOT_FOUND, REFERENCE_STATUSES, SUSPICIOUS, VALIDATED

REPORT_FORMATS = ("json", "csv", "html", "bibtex")
DEFAULT_FAIL_ON = (NOT_FOUND, SUSPICIOUS)
CSV_COLUMNS = ("key", "status", "reasons", "sources", "title", "first_author", "year", "doi", "matched_source",
               "matched_title", "matched_doi", "changes", "raw_text")


class FailOnError(ValueError):
    """A `--fail-on` list naming something that is no reference status."""


@dataclass(frozen=True)
class ReportRow:
    """One entry's line of the report. `key`: the BibTeX key or the list's label, else "r<index>"."""

    key: str
    entry: ParsedEntry
    check: ReferenceCheck
    corrected: BibtexEntry  # the entry as the corrected BibTeX writes it (unchanged unless validated)
    changes: tuple[str, ...] = ()

    def as_dict(self) -> dict:
        return {"key": self.key, "status": self.check.status, "reasons": list(self.check.reasons),
                "sources": list(self.check.services), "errors": list(self.check.errors),
                "title": self.entry.title, "first_author": self.entry.surnames[0] if self.entry.surnames else None,
                "year": self.entry.year, "doi": self.entry.doi, "arxiv_id": self.entry.arxiv_id,
                "matched_source": self.check.matched_service, "matched_title": self.check.matched_title,
                "matched_doi": self.check.matched_doi, "matched_year": self.check.matched_year,
                "changes": list(self.changes), "raw_text": self.entry.raw_text}


@dataclass
class ReferenceReport:
    """Every row of one input, in its order, and what reading the input said (`problems`: "FILE:LINE: reason")."""

    source: str
    rows: list[ReportRow]
    problems: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        counted = Counter(row.check.status for row in self.rows)
        return {status: counted[status] for status in REFERENCE_STATUSES}

    def failing(self, fail_on: Sequence[str]) -> list[ReportRow]:
        return [row for row in self.rows if row.check.status in fail_on]


def parse_fail_on(text: str) -> tuple[str, ...]:
    """"not_found,suspicious" -> the statuses; "" -> none (never fail)."""
    statuses = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [status for status in statuses if status not in REFERENCE_STATUSES]
    if unknown:
        raise FailOnError(f"--fail-on names {unknown}; expected some of {list(REFERENCE_STATUSES)}")
    return statuses


def entry_key(entry: ParsedEntry) -> str:
    return entry.label or f"r{entry.index}"


def _record_fields(check: ReferenceCheck) -> dict[str, str]:
    fields = {"title": check.matched_title, "year": str(check.matched_year) if check.matched_year else None,
              "doi": check.matched_doi}
    return {name: value for name, value in fields.items() if value}


def _generated_entry(entry: ParsedEntry) -> BibtexEntry:
    """A BibTeX entry for an entry read from a PDF or a .bbl: what it holds, as `misc`."""
    fields = [("author", " and ".join(entry.authors)), ("title", entry.title), ("year", entry.year),
              ("howpublished", entry.venue), ("doi", entry.doi), ("eprint", entry.arxiv_id), ("url", entry.url)]
    held = tuple((name, str(value)) for name, value in fields if value)
    return BibtexEntry("misc", entry_key(entry), held or (("note", entry.raw_text),))


def report_row(entry: ParsedEntry, check: ReferenceCheck, bibtex: BibtexEntry | None = None) -> ReportRow:
    """The entry's row, with its corrected BibTeX (`bibtex`: the entry as the .bib file holds it; else one made from
    the parsed fields) and the changes a validating record brings."""
    written = bibtex or _generated_entry(entry)
    if check.status != VALIDATED:
        return ReportRow(entry_key(entry), entry, check, written)
    corrected, changes = corrected_entry(written, _record_fields(check))
    return ReportRow(entry_key(entry), entry, check, corrected, tuple(changes))


def to_json(report: ReferenceReport) -> str:
    return json.dumps({"source": report.source, "counts": report.counts(), "problems": report.problems,
                       "references": [row.as_dict() for row in report.rows]}, ensure_ascii=False, indent=2)


def _cell(value: object) -> str:
    """A CSV cell; one a spreadsheet would run as a formula ("=", "+", "-", "@" first) is quoted with "'"."""
    text = "; ".join(map(str, value)) if isinstance(value, list) else "" if value is None else str(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@") else text


def to_csv(report: ReferenceReport) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for row in report.rows:
        values = row.as_dict()
        writer.writerow([_cell(values[column]) for column in CSV_COLUMNS])
    return out.getvalue()


_STATUS_COLOURS = {NOT_FOUND: "#b3261e", SUSPICIOUS: "#a15c00", VALIDATED: "#1e6b34"}


def to_html(report: ReferenceReport) -> str:
    """A page that needs nothing else: the counts, then one row per entry, worst first."""
    order = {status: position for position, status in enumerate(REFERENCE_STATUSES)}
    rows = sorted(report.rows, key=lambda row: (order.get(row.check.status, 9), row.entry.index))
    counts = ", ".join(f"{count} {status}" for status, count in report.counts().items())
    body = []
    for row in rows:
        colour = _STATUS_COLOURS.get(row.check.status, "#555")
        reasons = "".join(f"<li>{html.escape(reason)}</li>" for reason in row.check.reasons)
        changes = "".join(f"<li>{html.escape(change)}</li>" for change in row.changes)
        body.append(
            f"<tr><td><code>{html.escape(row.key)}</code></td>"
            f"<td><strong style=\"color:{colour}\">{html.escape(row.check.status)}</strong></td>"
            f"<td>{html.escape(row.entry.raw_text)}</td><td><ul>{reasons}</ul></td>"
            f"<td>{html.escape(', '.join(row.check.services) or 'none')}</td><td><ul>{changes}</ul></td></tr>")
    problems = "".join(f"<li>{html.escape(problem)}</li>" for problem in report.problems)
    return ("<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>References of "
            f"{html.escape(report.source)}</title><style>body{{font-family:sans-serif;margin:2em}}table{{border-"
            "collapse:collapse}}td,th{border:1px solid #ccc;padding:4px;vertical-align:top}</style></head><body>"
            f"<h1>References of {html.escape(report.source)}</h1><p>{len(report.rows)} entries: "
            f"{html.escape(counts)}.</p>" + (f"<h2>Problems reading it</h2><ul>{problems}</ul>" if problems else "")
            + "<table><thead><tr><th>key</th><th>status</th><th>entry</th><th>reasons</th><th>sources asked</th>"
            f"<th>corrections</th></tr></thead><tbody>{''.join(body)}</tbody></table></body></html>\n")


def _comment(lines: Sequence[str]) -> str:
    # BibTeX reads "@" anywhere outside an entry as the start of one: a reason holding one must not.
    return "".join(f"% {line.replace('@', ' at ')}\n" for line in lines)


def to_bibtex(report: ReferenceReport) -> str:
    """The corrected BibTeX: each entry with the changes listed above it, or why it was left as it was."""
    parts = [_comment([f"peerify refs check of {report.source}: "
                       + ", ".join(f"{count} {status}" for status, count in report.counts().items())])]
    for row in report.rows:
        if row.changes:
            notes = ["corrected from " + (row.check.matched_service or "a validating record") + ":", *row.changes]
        elif row.check.status == VALIDATED:
            notes = []
        else:
            notes = [f"{row.check.status}:", *row.check.reasons]
        parts.append(_comment(notes) + write_bibtex([row.corrected]))
    return "\n".join(parts)


WRITERS = {"json": to_json, "csv": to_csv, "html": to_html, "bibtex": to_bibtex}

"""A venue's citation integrity: which submissions cite references no metadata source knows (`not_found`, possibly
fabricated) or that a record contradicts (`suspicious`), for program chairs screening a whole venue.

From a venue's `bibliography` and `reference_checks` (and, optionally, the forum tables' `submissions` for the
titles), `venue_integrity` gives two frames:

* the ranking (INTEGRITY_SCHEMA, the `citation_integrity` table): one row per manuscript of the bibliography with its
  entries counted by check status, whether any metadata source was asked at all (`checked`), and its rank: most
  not_found first, then most suspicious, then paper id;
* the entries (ENTRY_SCHEMA, the page and the CSV): every reference entry with its parsed title, first author and
  year, its status and reasons, the sources asked and each source's answer in one string read from the check's
  `evidence_json` ("crossref: 2 records, closest 'X' (0.42)", "openalex: failed: HTTP 503 after 4 tries",
  "index: no record"), and the record the status rests on.

`integrity_csv` writes the entries as RFC 4180 CSV with a guard against spreadsheet formulas. An entry whose
evidence cannot be read keeps its row, its answer naming the entry and why. No I/O and no Dagster here.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

from peerify_dagster.domain.citation_view import NO_REFERENCES
from peerify_dagster.domain.citations.vocabulary import (
    NOT_FOUND,
    REFERENCE_STATUSES,
    SUSPICIOUS,
    UNVALIDATABLE,
    VALIDATED,
)
from peerify_dagster.domain.retrieval_metrics import markdown_table

INTEGRITY_SCHEMA = {
    "venue": pl.String, "paper_id": pl.String, "title": pl.String, "entries": pl.Int64, NOT_FOUND: pl.Int64,
    SUSPICIOUS: pl.Int64, UNVALIDATABLE: pl.Int64, VALIDATED: pl.Int64, "checked": pl.Boolean, "rank": pl.Int64,
}
ENTRY_SCHEMA = {
    "venue": pl.String, "paper_id": pl.String, "entry_id": pl.String, "entry_index": pl.Int64, "raw_text": pl.String,
    "title": pl.String, "first_author": pl.String, "year": pl.Int64, "status": pl.String, "reasons": pl.String,
    "sources": pl.List(pl.String), "answers": pl.List(pl.String), "matched_title": pl.String,
    "matched_doi": pl.String,
}
# A check's reasons are sentences that may hold "; " themselves: one per line keeps them apart in a cell.
REASON_SEPARATOR = "\n"
UNREADABLE_EVIDENCE = "unreadable evidence"
# What a spreadsheet reads as a formula when a cell starts with it (OWASP's CSV injection list: the four the
# spreadsheets evaluate, and tab and carriage return, which some strip before looking).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
TOP_ROWS = 10  # submissions in the asset's Markdown top list
NO_SOURCE_ASKED = "no source was asked: every reference is unvalidatable; add citations.metadata or an index"


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _answer(service: str, answer: Any) -> str:
    """One source's answer in one string: its failure, that it knew nothing, or its records and the closest title."""
    if not isinstance(answer, Mapping):
        raise ValueError(f"the answer of {service} is {type(answer).__name__}, not an object")
    if answer.get("error"):
        return f"{service}: failed: {answer['error']}"
    records = answer.get("records") or []
    if not isinstance(records, list) or not all(isinstance(record, Mapping) for record in records):
        raise ValueError(f"the records of {service} are not a list of objects")
    if not records:
        return f"{service}: no record"
    # The record whose title is closest to the entry's (a record without a similarity, e.g. an entry without a
    # title found by its DOI, counts as the least close).
    closest = max(records, key=lambda record: record.get("title_similarity") or -1.0)
    similarity = closest.get("title_similarity")
    title = f"'{closest['title']}'" if closest.get("title") else "an untitled record"
    return (f"{service}: {_plural(len(records), 'record')}, closest {title}"
            + (f" ({similarity:.2f})" if isinstance(similarity, (int, float)) else ""))


def source_answers(entry_id: str, services: Sequence[str], evidence_json: str | None) -> list[str]:
    """Each source's answer about the entry, in the order asked (`services`, then any other source the evidence
    holds). Evidence that cannot be read is one answer naming the entry and why: the rest of the venue is shown."""
    try:
        evidence = json.loads(evidence_json or "{}")
        if not isinstance(evidence, Mapping):
            raise ValueError(f"evidence_json is {type(evidence).__name__}, not an object")
        asked = list(dict.fromkeys([*services, *evidence]))
        return [_answer(service, evidence[service]) if service in evidence else f"{service}: no answer recorded"
                for service in asked]
    except ValueError as problem:  # json.JSONDecodeError is a ValueError
        return [f"{UNREADABLE_EVIDENCE} of {entry_id}: {problem}"]


def _status_order(status: str | None) -> int:
    return REFERENCE_STATUSES.index(status) if status in REFERENCE_STATUSES else len(REFERENCE_STATUSES)


def integrity_entries(bibliography: pl.DataFrame, reference_checks: pl.DataFrame) -> pl.DataFrame:
    """Every reference entry of the venue (ENTRY_SCHEMA) with its check; an entry without a check row (the checks
    built before the entry was parsed) keeps a null status. In paper id order, each paper's worst first."""
    checks = {row["entry_id"]: row for row in reference_checks.iter_rows(named=True)}
    rows = []
    for entry in bibliography.filter(pl.col("parse_status").ne_missing(NO_REFERENCES)).iter_rows(named=True):
        check = checks.get(entry["entry_id"], {})
        services = list(check.get("services") or [])
        people = entry.get("authors") or entry.get("surnames") or []
        rows.append({
            "venue": entry["venue"], "paper_id": entry["paper_id"], "entry_id": entry["entry_id"],
            "entry_index": entry["entry_index"], "raw_text": entry["raw_text"], "title": entry["title"],
            "first_author": people[0] if people else None, "year": entry["year"], "status": check.get("status"),
            "reasons": REASON_SEPARATOR.join(check.get("reasons") or []) or None, "sources": services,
            "answers": source_answers(entry["entry_id"], services, check.get("evidence_json")) if check else [],
            "matched_title": check.get("matched_title"), "matched_doi": check.get("matched_doi"),
        })
    rows.sort(key=lambda row: (row["paper_id"], _status_order(row["status"]), row["entry_index"] or 0))
    return pl.DataFrame(rows, schema=ENTRY_SCHEMA)


def integrity_ranking(venue: str, bibliography: pl.DataFrame, entries: pl.DataFrame,
                      titles: Mapping[str, str] | None = None) -> pl.DataFrame:
    """One row per manuscript of the bibliography (INTEGRITY_SCHEMA; a manuscript without references counts none),
    ranked: most not_found first, then most suspicious, then paper id."""
    titles = titles or {}
    counts: dict[str, dict[str, Any]] = {
        paper_id: {"venue": venue, "paper_id": paper_id, "title": titles.get(paper_id), "entries": 0,
                   **dict.fromkeys(REFERENCE_STATUSES, 0), "checked": False}
        for paper_id in bibliography["paper_id"].unique(maintain_order=True)}
    for entry in entries.iter_rows(named=True):
        row = counts[entry["paper_id"]]
        row["entries"] += 1
        if entry["status"] in REFERENCE_STATUSES:
            row[entry["status"]] += 1
        row["checked"] = row["checked"] or bool(entry["sources"])
    ranked = sorted(counts.values(), key=lambda row: (-row[NOT_FOUND], -row[SUSPICIOUS], row["paper_id"]))
    return pl.DataFrame([{**row, "rank": rank} for rank, row in enumerate(ranked, start=1)], schema=INTEGRITY_SCHEMA)


@dataclass(frozen=True)
class VenueIntegrity:
    """A venue's ranking (INTEGRITY_SCHEMA, by rank) and its entries (ENTRY_SCHEMA, by their paper's rank, each
    paper's worst first)."""

    ranking: pl.DataFrame
    entries: pl.DataFrame

    @property
    def any_source_asked(self) -> bool:
        return bool(self.ranking["checked"].any())

    @property
    def flagged(self) -> int:
        """Entries not_found or suspicious: what a chair looks at."""
        return int(self.ranking[NOT_FOUND].sum() + self.ranking[SUSPICIOUS].sum())

    def entries_with(self, status: str | None = None) -> pl.DataFrame:
        """The entries, those of one status when `status` is given."""
        return self.entries if not status else self.entries.filter(pl.col("status") == status)

    def submission_rows(self, status: str | None = None) -> list[dict]:
        """The ranked submissions, each with its entries (`entries_shown`) as dicts; with `status`, only the
        submissions that have an entry of that status, and only those entries."""
        shown: dict[str, list[dict]] = {}
        for entry in self.entries_with(status).iter_rows(named=True):
            shown.setdefault(entry["paper_id"], []).append(entry)
        return [{**row, "entries_shown": shown.get(row["paper_id"], [])} for row in self.ranking.iter_rows(named=True)
                if not status or row["paper_id"] in shown]


def venue_integrity(venue: str, bibliography: pl.DataFrame, reference_checks: pl.DataFrame,
                    submissions: pl.DataFrame | None = None) -> VenueIntegrity:
    """The venue's ranking and entries; `submissions` (the forum table) gives the titles."""
    titles = ({row["paper_id"]: row["title"] for row in submissions.select("paper_id", "title").iter_rows(named=True)
               if row["title"]} if submissions is not None else {})
    entries = integrity_entries(bibliography, reference_checks)
    ranking = integrity_ranking(venue, bibliography, entries, titles)
    order = {paper_id: rank for paper_id, rank in ranking.select("paper_id", "rank").iter_rows()}
    # sort is stable: each paper's entries keep their worst-first order
    entries = entries.sort(pl.col("paper_id").replace_strict(order, return_dtype=pl.Int64), maintain_order=True)
    return VenueIntegrity(ranking, entries)


def integrity_markdown(ranking: pl.DataFrame, limit: int = TOP_ROWS) -> str:
    """The first `limit` submissions of the ranking as a Markdown table (the asset's metadata)."""
    rows = [{**row, "title": (row["title"] or "").replace("|", "/").replace("\n", " ") or None}
            for row in ranking.head(limit).iter_rows(named=True)]
    return markdown_table(rows, ["rank", "paper_id", "title", "entries", *REFERENCE_STATUSES])


def _cell(value: Any) -> Any:
    """A CSV cell: a list one item per line, text that a spreadsheet would run as a formula behind an apostrophe."""
    if isinstance(value, list):
        value = "\n".join(str(item) for item in value)
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def integrity_csv(entries: pl.DataFrame) -> str:
    """The entries (ENTRY_SCHEMA) as RFC 4180 CSV: a header row, CRLF line ends, fields quoted where they hold a
    comma, a quote or a line break; a null is an empty field."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(entries.columns)
    writer.writerows([_cell(value) for value in row] for row in entries.iter_rows())
    return out.getvalue()

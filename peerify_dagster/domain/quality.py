"""Data-quality rules for the ingestion tables; each returns the ids that fail, for check metadata."""

from __future__ import annotations

import re

import polars as pl

_PDF_URL = re.compile(r"^(/pdf/[0-9a-f]{40}\.pdf|/attachment/.+|https?://.+)$")


def duplicate_ids(frame: pl.DataFrame, id_column: str) -> list[str]:
    counts = frame.group_by(id_column).len()
    return sorted(str(v) for v in counts.filter(pl.col("len") > 1)[id_column].to_list())


def orphan_ids(frame: pl.DataFrame, id_column: str, parents: pl.DataFrame, parent_column: str = "paper_id") -> list[str]:
    """Rows whose paper is not among the parent table's papers."""
    known = set(parents[parent_column].to_list())
    return sorted(str(r) for r, p in zip(frame[id_column], frame[parent_column]) if p not in known)


def empty_text_ids(frame: pl.DataFrame, id_column: str, text_column: str) -> list[str]:
    empty = frame.filter(pl.col(text_column).is_null() | (pl.col(text_column).str.strip_chars() == ""))
    return sorted(str(v) for v in empty[id_column].to_list())


def malformed_submission_ids(submissions: pl.DataFrame) -> list[str]:
    """Submissions without a title, with a PDF path of an unknown shape, without a creation time, or with a
    decision text that reads as none of the known outcomes."""
    bad = []
    for row in submissions.iter_rows(named=True):
        if not (row["title"] or "").strip():
            bad.append(row["paper_id"])
        elif row["pdf_url"] is not None and not _PDF_URL.match(row["pdf_url"]):
            bad.append(row["paper_id"])
        elif not row["cdate"] or row["cdate"] <= 0:
            bad.append(row["paper_id"])
        elif row["decision_text"] is not None and row["decision"] is None:
            bad.append(row["paper_id"])
    return sorted(bad)


def malformed_review_ids(reviews: pl.DataFrame, score_fields: tuple[str, ...]) -> list[str]:
    """Reviews with a numeric field present but no integer read from it, or without a signer id."""
    unreadable = [pl.col(f).is_not_null() & pl.col(f"{f}_score").is_null() for f in score_fields]
    bad = reviews.filter(pl.any_horizontal(*unreadable, pl.col("reviewer_id").is_null()))
    return sorted(bad["review_id"].to_list())


def unaccounted_notes(raw: pl.DataFrame, placed: pl.DataFrame) -> dict[str, list[str]]:
    """Per forum, the notes that are not in exactly one place.

    `raw`: (forum_id, note_id) per note version as landed (note_id null for entries that are not notes);
    `placed`: (forum_id, note_id, table) per row of every table that holds notes, `note_errors` included.
    A note id must be placed exactly once (older versions of it need no place of their own), no row may name
    a note the forum does not have, and entries without an id must be matched by as many id-less
    `note_errors` rows. Returns forum id -> the note ids missing, placed twice or unknown (`"<no id> x N"` for
    id-less entries), only for forums that fail."""
    failing: dict[str, list[str]] = {}
    expected = raw.filter(pl.col("note_id").is_not_null()).unique(["forum_id", "note_id"])
    counts = placed.filter(pl.col("note_id").is_not_null()).group_by("forum_id", "note_id").len()
    joined = expected.join(counts, on=["forum_id", "note_id"], how="left")
    for forum_id, note_id, times in joined.filter(pl.col("len").is_null() | (pl.col("len") != 1)).select(
            "forum_id", "note_id", "len").iter_rows():
        failing.setdefault(forum_id, []).append(note_id if times is None else f"{note_id} (placed {times} times)")
    for forum_id, note_id in counts.join(expected, on=["forum_id", "note_id"], how="anti").select(
            "forum_id", "note_id").iter_rows():
        failing.setdefault(forum_id, []).append(f"{note_id} (not among the forum's raw notes)")
    id_less = raw.filter(pl.col("note_id").is_null()).group_by("forum_id").len()
    errors_id_less = placed.filter(pl.col("note_id").is_null() & (pl.col("table") == "note_errors")).group_by(
        "forum_id").len().rename({"len": "placed"})
    for forum_id, entries, matched in id_less.join(errors_id_less, on="forum_id", how="left").iter_rows():
        if entries != (matched or 0):
            failing.setdefault(forum_id, []).append(f"<no id> x {entries - (matched or 0)}")
    return {forum_id: sorted(ids) for forum_id, ids in sorted(failing.items())}

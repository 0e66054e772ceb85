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
    """Submissions without a title, with a PDF path of an unknown shape, or without a creation time."""
    bad = []
    for row in submissions.iter_rows(named=True):
        if not (row["title"] or "").strip():
            bad.append(row["paper_id"])
        elif row["pdf_url"] is not None and not _PDF_URL.match(row["pdf_url"]):
            bad.append(row["paper_id"])
        elif not row["cdate"] or row["cdate"] <= 0:
            bad.append(row["paper_id"])
    return sorted(bad)


def malformed_review_ids(reviews: pl.DataFrame) -> list[str]:
    """Reviews whose rating/confidence is present but carries no leading score, or without a signer id."""
    bad = reviews.filter(
        (pl.col("rating").is_not_null() & pl.col("rating_score").is_null())
        | (pl.col("confidence").is_not_null() & pl.col("confidence_score").is_null())
        | pl.col("reviewer_id").is_null()
    )
    return sorted(bad["review_id"].to_list())

"""What the data-quality checks of the ingestion tables read. The row rules themselves are great-expectations
expectations (the asset modules); here, the columns they judge, computed one batch at a time so a streamed table's
checks keep ids and short fields, never its texts. `unaccounted_notes` stays a rule of its own (see the function)."""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

PDF_URL_PATTERN = r"^(?:/pdf/[0-9a-f]{40}\.pdf|/attachment/.+|https?://.+)$"
TEXT_CHARS = "text_chars"  # characters of a row's text without surrounding whitespace; null when there is no text


def checked_columns(table: str, id_column: str, text_column: str | None,
                    score_fields: Sequence[str]) -> list[pl.Expr]:
    """The columns of a typed table that its checks read: the row id and paper id (`unique_ids`,
    `belongs_to_submission`), `TEXT_CHARS` of its text (`non_empty_text`), and the fields `well_formed` judges:
    a submission's title, PDF path, creation time, decision and whether a decision text was read
    (`decision_text_given`); a review's reviewer id and, per numeric field, whether it was given (`<field>_given`)
    and the integer read from it (`<field>_score`)."""
    columns = [pl.col(id_column)] + ([pl.col("paper_id")] if id_column != "paper_id" else [])
    if text_column:
        columns.append(pl.col(text_column).str.strip_chars().str.len_chars().alias(TEXT_CHARS))
    if table == "submissions":
        columns += [pl.col("title", "pdf_url", "cdate", "decision"),
                    pl.col("decision_text").is_not_null().alias("decision_text_given")]
    elif table == "reviews":
        columns += [pl.col("reviewer_id"), *(pl.col(f).is_not_null().alias(f"{f}_given") for f in score_fields),
                    *(pl.col(f"{f}_score") for f in score_fields)]
    return columns


def with_found(frame: pl.DataFrame, column: str, known: pl.Series, found_column: str) -> pl.DataFrame:
    """`frame` with `found_column`: the value of `column` where it is among `known`, null where it is not (a left
    join, so that a not-null expectation on `found_column` names the rows whose `column` points nowhere)."""
    lookup = pl.DataFrame({found_column: known.unique()})
    return frame.join(lookup, left_on=column, right_on=found_column, how="left", coalesce=False)


def unaccounted_notes(raw: pl.DataFrame, placed: pl.DataFrame) -> dict[str, list[str]]:
    """Per forum, the notes that are not in exactly one place.

    `raw`: (forum_id, note_id) per note version as landed (note_id null for entries that are not notes);
    `placed`: (forum_id, note_id, table) per row of every table that holds notes, `note_errors` included.
    A note id must be placed exactly once (older versions of it need no place of their own), no row may name
    a note the forum does not have, and entries without an id must be matched by as many id-less
    `note_errors` rows. Returns forum id -> the note ids missing, placed twice or unknown (`"<no id> x N"` for
    id-less entries), only for forums that fail.

    Hand-coded rather than a great-expectations expectation: it reconciles counts per forum between the raw notes and
    every table at once (placed exactly once, id-less entries matched by number), which no GX expectation states:
    GX could only re-read this function's result."""
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

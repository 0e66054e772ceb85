"""Stage 2, typed tables: submissions, reviews, author responses, reviewer follow-ups, chair and public comments,
decisions, meta-reviews, status notes and review threads, built from the raw notes, with their data-quality checks."""

from collections.abc import Iterator
from contextlib import ExitStack

import dagster as dg
import polars as pl
import pyarrow.parquet as pq

from peerify_dagster.domain.forum_tables import (
    LIST_FIELDS,
    NOTE_TABLES,
    REVIEW_FIELDS,
    SCORE_FIELDS,
    StreamedChecks,
    build_tables,
    forum_batches,
    forums_of,
)
from peerify_dagster.domain.quality import PDF_URL_PATTERN, TEXT_CHARS, with_found
from peerify_dagster.partitions import venue_partitions
from peerify_dagster.quality.expectations import MAX_FAILING_IDS, Expect, gate
from peerify_dagster.resources.dagster_resources import LakeResource

RAW_COLUMNS = ["forum_id", "note_id", "note_json", "fetched_at"]
RAW_ROWS_PER_READ = 2048  # rows of the raw table read at a time; forums are then regrouped whole

_TEXT = pl.String
_COMMENT_COLUMNS = {
    "venue": _TEXT, "paper_id": _TEXT, "comment_id": _TEXT, "replyto": _TEXT, "review_id": _TEXT, "thread_id": _TEXT,
    "title": _TEXT, "text": _TEXT, "signatures": pl.List(_TEXT), "cdate": pl.Int64, "mdate": pl.Int64,
}
TABLE_SCHEMAS: dict[str, dict[str, pl.DataType]] = {
    "submissions": {
        "venue": _TEXT, "paper_id": _TEXT, "number": pl.Int64, "title": _TEXT, "abstract": _TEXT,
        "keywords": pl.List(_TEXT), "primary_area": _TEXT, "tldr": _TEXT, "venue_label": _TEXT, "venueid": _TEXT,
        "decision": _TEXT, "decision_text": _TEXT, "decision_source": _TEXT, "withdrawn": pl.Boolean,
        "desk_rejected": pl.Boolean, "pdf_url": _TEXT, "cdate": pl.Int64, "mdate": pl.Int64,
    },
    "reviews": {
        "venue": _TEXT, "paper_id": _TEXT, "review_id": _TEXT, "reviewer_id": _TEXT, "signatures": pl.List(_TEXT),
        "cdate": pl.Int64, "mdate": pl.Int64,
        **{f: pl.List(_TEXT) if f in LIST_FIELDS else _TEXT for f in REVIEW_FIELDS},
        **{f"{f}_score": pl.Int64 for f in SCORE_FIELDS}, "extra_fields_json": _TEXT, "review_text": _TEXT,
    },
    "author_responses": {
        "venue": _TEXT, "paper_id": _TEXT, "response_id": _TEXT, "kind": _TEXT, "invitation": _TEXT, "replyto": _TEXT,
        "review_id": _TEXT, "is_global": pl.Boolean, "title": _TEXT, "text": _TEXT, "signatures": pl.List(_TEXT),
        "cdate": pl.Int64, "mdate": pl.Int64,
    },
    "reviewer_followups": {
        "venue": _TEXT, "paper_id": _TEXT, "comment_id": _TEXT, "reviewer_id": _TEXT, "replyto": _TEXT,
        "review_id": _TEXT, "own_review": pl.Boolean, "title": _TEXT, "text": _TEXT, "cdate": pl.Int64,
    },
    "chair_comments": {**_COMMENT_COLUMNS, "role": _TEXT, "signer_id": _TEXT},
    "public_comments": _COMMENT_COLUMNS,
    "decisions": {
        "venue": _TEXT, "paper_id": _TEXT, "decision_id": _TEXT, "decision": _TEXT, "outcome": _TEXT, "comment": _TEXT,
        "signatures": pl.List(_TEXT), "cdate": pl.Int64,
    },
    "meta_reviews": {
        "venue": _TEXT, "paper_id": _TEXT, "meta_review_id": _TEXT, "area_chair_id": _TEXT, "metareview": _TEXT,
        "recommendation": _TEXT, "confidence": _TEXT, "cdate": pl.Int64,
    },
    "status_notes": {
        "venue": _TEXT, "paper_id": _TEXT, "note_id": _TEXT, "kind": _TEXT, "invitation": _TEXT,
        "signatures": pl.List(_TEXT), "content_json": _TEXT, "cdate": pl.Int64,
    },
    "review_threads": {
        "venue": _TEXT, "paper_id": _TEXT, "review_id": _TEXT, "reviewer_id": _TEXT, "review_text": _TEXT,
        "author_response_ids": pl.List(_TEXT), "n_author_responses": pl.Int64, "thread_author_response": _TEXT,
        "followup_ids": pl.List(_TEXT), "combined_author_response": _TEXT, "combined_response_words": pl.Int64,
    },
    "note_errors": {
        "venue": _TEXT, "forum_id": _TEXT, "note_id": _TEXT, "stage": _TEXT, "severity": _TEXT, "reason": _TEXT,
        "message": _TEXT,
    },
}
_DESCRIPTIONS = {
    "submissions": "One row per chosen paper (paper id = forum id): title, abstract, keywords, the decision (oral, "
                   "spotlight, poster, accept, reject, withdrawn, desk_rejected) with its text and source (Decision "
                   "note, else venueid / venue), withdrawn / desk-rejected flags from the current venueid, PDF url.",
    "reviews": "Official reviews only (never follow-up comments): every content field as a column, an integer "
               "`<field>_score` for each numeric field, ethics flags as a list, plus one assembled text; reviewer id "
               "from the signatures.",
    "author_responses": "Author notes: `-/Rebuttal` notes (field `rebuttal`, NeurIPS 2024) and author "
                        "`Official_Comment`s, "
                        "with the review whose reply tree holds them.",
    "reviewer_followups": "Reviewer comments that are not the original review, with the review thread they belong to.",
    "chair_comments": "`Official_Comment`s of area chairs, senior area chairs and program chairs (`role`), with the "
                      "note they reply to, the review whose thread holds them and the thread's first note.",
    "public_comments": "`Public_Comment`s, with the note they reply to, the review whose thread holds them and the "
                       "thread's first note.",
    "decisions": "Program chairs' decisions, with the decision text normalised to an outcome.",
    "meta_reviews": "Area chairs' meta-reviews.",
    "status_notes": "Withdrawal and desk-rejection notes and their reversals.",
    "review_threads": "Per review: the author responses in its reply tree (any depth, time order) and the paper's "
                      "combined "
                      "author response.",
    "note_errors": "Notes that could not be used, named with the reason: malformed, API version of another venue, "
                   "unknown invitation, unknown signer, missing parent, missing submission, wrong forum.",
}
_ID_COLUMNS = {table: column for table, column in NOTE_TABLES.items() if table != "note_errors"} | {
    "review_threads": "review_id"}
_TEXT_COLUMNS = {"reviews": "review_text", "author_responses": "text"}


def _check_specs() -> list[dg.AssetCheckSpec]:
    specs = [
        dg.AssetCheckSpec("unique_ids", asset=table, blocking=True,
                          description=f"No two rows share a {column}: a repeat would count one note twice in every "
                                      "table built from it. Failing ids in the metadata.")
        for table, column in _ID_COLUMNS.items()
    ]
    specs += [
        dg.AssetCheckSpec("belongs_to_submission", asset=table, blocking=True,
                          description="Every row belongs to a paper of this venue: a row whose paper_id is no "
                                      "submission here would be verified against no manuscript. Failing ids in the "
                                      "metadata.")
        for table in _ID_COLUMNS if table != "submissions"
    ]
    specs += [
        dg.AssetCheckSpec("non_empty_text", asset=table,
                          description=f"No {column} is empty: an empty text yields no claims and no evidence. A "
                                      "warning; failing ids in the metadata.")
        for table, column in _TEXT_COLUMNS.items()
    ]
    specs += [
        dg.AssetCheckSpec("well_formed", asset="submissions",
                          description="Each paper has a title, a usable PDF path, a creation date and a decision we "
                                      "could read. A warning; failing ids in the metadata."),
        dg.AssetCheckSpec("well_formed", asset="reviews",
                          description="Each review names its reviewer and its score fields hold a number. A warning; "
                                      "failing ids in the metadata."),
        dg.AssetCheckSpec("every_note_accounted_for", asset="note_errors", blocking=True,
                          description="No note lost: every note fetched is in exactly one table or in note_errors "
                                      "with a reason (an older version of a note gives way to its latest). Failing "
                                      "forums in the metadata."),
        dg.AssetCheckSpec("raw_notes_typed", asset="submissions", blocking=True,
                          description="Notes were fetched, so some must land in the tables; when none does the "
                                      "check names the likely cause (e.g. API v1 notes in a v2 venue)."),
    ]
    return specs


CHECK_SPECS = _check_specs()
_BLOCKING = {(spec.asset_key.to_user_string(), spec.name): spec.blocking for spec in CHECK_SPECS}


def streamed_checks() -> StreamedChecks:
    """The checks of these tables, to feed one batch of forums at a time."""
    return StreamedChecks(TABLE_SCHEMAS, _ID_COLUMNS, _TEXT_COLUMNS)


def table_gates(checks: StreamedChecks) -> Iterator[dg.AssetCheckResult]:
    """The great-expectations gates of the typed tables over every batch `checks` was fed, one result per gate."""
    expects = _gate_expectations({table: checks.checked_rows(table) for table in _ID_COLUMNS})
    for (table, name), table_expects in expects.items():
        yield gate(name, table_expects, _BLOCKING[table, name], asset_key=table)


def _given(column: str) -> dict[str, str]:
    """Keyword arguments that limit an expectation to the rows where `column` (a boolean) is true."""
    return {"row_condition": f"{column} == True", "condition_parser": "pandas"}


def _gate_expectations(rows: dict[str, pl.DataFrame]) -> dict[tuple[str, str], list[Expect]]:
    """The great-expectations expectations of each (table, check) over the venue's checked rows
    (`StreamedChecks.checked_rows`), in the order the checks report; each names a failing row by its table's id."""
    submission_ids = rows["submissions"]["paper_id"]
    expects: dict[tuple[str, str], list[Expect]] = {}
    for table, column in _ID_COLUMNS.items():
        expects[table, "unique_ids"] = [
            Expect(rows[table], "ExpectColumnValuesToBeUnique", (column,), {"column": column})]
        if table != "submissions":
            expects[table, "belongs_to_submission"] = [
                Expect(with_found(rows[table], "paper_id", submission_ids, "submission_id"),
                       "ExpectColumnValuesToNotBeNull", (column,), {"column": "submission_id"})]
    for table in _TEXT_COLUMNS:
        ids = (_ID_COLUMNS[table],)
        expects[table, "non_empty_text"] = [
            Expect(rows[table], "ExpectColumnValuesToNotBeNull", ids, {"column": TEXT_CHARS}),
            Expect(rows[table], "ExpectColumnValuesToBeBetween", ids, {"column": TEXT_CHARS, "min_value": 1})]
    submissions, paper = rows["submissions"], ("paper_id",)
    expects["submissions", "well_formed"] = [
        Expect(submissions, "ExpectColumnValuesToNotBeNull", paper, {"column": "title"}),
        Expect(submissions, "ExpectColumnValuesToMatchRegex", paper, {"column": "title", "regex": r"\S"}),
        Expect(submissions, "ExpectColumnValuesToMatchRegex", paper, {"column": "pdf_url", "regex": PDF_URL_PATTERN}),
        Expect(submissions, "ExpectColumnValuesToNotBeNull", paper, {"column": "cdate"}),
        Expect(submissions, "ExpectColumnValuesToBeBetween", paper, {"column": "cdate", "min_value": 1}),
        Expect(submissions, "ExpectColumnValuesToNotBeNull", paper,
               {"column": "decision", **_given("decision_text_given")}),  # a decision text that reads as no outcome
    ]
    reviews, review = rows["reviews"], ("review_id",)
    expects["reviews", "well_formed"] = [
        Expect(reviews, "ExpectColumnValuesToNotBeNull", review, {"column": "reviewer_id"}),
        *(Expect(reviews, "ExpectColumnValuesToNotBeNull", review,
                 {"column": f"{field}_score", **_given(f"{field}_given")}) for field in SCORE_FIELDS),
    ]
    return expects


def _check(table: str, name: str, failing: list[str], **metadata) -> dg.AssetCheckResult:
    """A check great-expectations does not express, with the same metadata as a gate's."""
    return dg.AssetCheckResult(
        asset_key=table, check_name=name, passed=not failing, severity=dg.AssetCheckSeverity.ERROR,
        metadata={"failing_count": len(failing), "failing_ids": dg.MetadataValue.json(failing[:MAX_FAILING_IDS]),
                  **metadata},
    )


class ForumTablesConfig(dg.Config):
    forums_per_batch: int = 100  # forums built and written (one row group per table) at a time: bounds memory


@dg.multi_asset(
    partitions_def=venue_partitions,
    group_name="forum_tables",
    outs={
        table: dg.AssetOut(kinds={"python", "parquet"}, description=_DESCRIPTIONS[table])
        for table in TABLE_SCHEMAS
    },
    check_specs=CHECK_SPECS,
)
def forum_tables(context: dg.AssetExecutionContext, config: ForumTablesConfig, lake: LakeResource,
                 raw_openreview_notes: pq.ParquetFile):
    """Classify every landed note by its invitations and signatures and thread the replies; API v1 notes are read
    into the same tables. Forums are built `forums_per_batch` at a time and each table is streamed to the lake, so a
    whole venue is never in memory. A venue whose raw notes give no submission at all fails, naming the likely
    cause, and commits none of its tables: the previous partition files stay."""
    raw = raw_openreview_notes
    if "api_version" not in raw.schema_arrow.names:
        raise dg.Failure(f"raw_openreview_notes of {context.partition_key} was built before notes carried their API "
                         "version; materialise raw_openreview_notes again, then these tables")
    api_version = raw.read_row_group(0, columns=["api_version"])["api_version"][0].as_py() \
        if raw.metadata.num_rows else 2
    checks = streamed_checks()
    slices = (pl.from_arrow(b) for b in raw.iter_batches(batch_size=RAW_ROWS_PER_READ, columns=RAW_COLUMNS))
    with ExitStack() as stack:
        writers = {t: stack.enter_context(lake.lake().stream_table(t, context.partition_key, schema))
                   for t, schema in TABLE_SCHEMAS.items()}
        for batch in forum_batches(slices, config.forums_per_batch):
            built = build_tables(context.partition_key, forums_of(batch), api_version)
            frames = {t: pl.DataFrame(built.rows[t], schema=schema) for t, schema in TABLE_SCHEMAS.items()}
            for table, frame in frames.items():
                writers[table].write(frame)
            checks.add(batch.select("forum_id", "note_id"), frames, built.superseded_versions)
            for row in built.rows["note_errors"]:
                context.log.warning(f"{row['reason']}: {row['message']}")
        streamed = {table: writer.finish() for table, writer in writers.items()}
    try:
        # Every check is decided before any output is handed over: the IO manager commits (renames into place) each
        # output it is given, so a failing step hands over none and the previous partition files stay.
        gates = list(table_gates(checks))
        # Hand-coded: these reconcile the raw notes with every table per forum and diagnose a venue without typed
        # rows; no great-expectations expectation states either (see quality.unaccounted_notes)
        unaccounted = checks.unaccounted_notes()
        gates.append(_check("note_errors", "every_note_accounted_for", list(unaccounted),
                            unaccounted_note_ids=dg.MetadataValue.json(dict(list(unaccounted.items())[:50])),
                            notes_received=checks.notes_received, superseded_versions=checks.superseded_versions))
        cause = checks.likely_cause_of_empty_tables()
        gates.append(_check("submissions", "raw_notes_typed", sorted(checks.raw_forums) if cause else [],
                            raw_notes=checks.notes_received, api_version=api_version,
                            **({"likely_cause": cause} if cause else {})))
        if cause:
            yield from gates
            errors = pl.read_parquet(streamed["note_errors"].temporary)
            raise dg.Failure(
                description=f"venue {context.partition_key}: {checks.notes_received} raw notes (read as API "
                            f"v{api_version}) gave no submission or other typed row; likely cause: {cause}. "
                            "Nothing was written; the note errors by reason are in this failure's metadata.",
                metadata={"likely_cause": cause, "note_errors": dg.MetadataValue.json(
                    dict(errors.group_by("reason").len().sort("reason").rows()))},
            )
        for table, table_file in streamed.items():
            yield dg.Output(table_file, output_name=table)
    finally:  # a table not handed over (the step failed on the way) leaves no temporary behind
        for table_file in streamed.values():
            table_file.temporary.unlink(missing_ok=True)
    yield from gates

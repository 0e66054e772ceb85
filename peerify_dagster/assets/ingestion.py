"""Stage 1, ingestion: sample a venue's papers and land their OpenReview forums as raw notes."""

import json

import dagster as dg
import polars as pl

from peerify_dagster.assets.steps.crawl import CrawlConfig, crawler_for
from peerify_dagster.domain.notes import MalformedNote, classify, read_note, superseded_positions
from peerify_dagster.domain.sampling import SamplingConfig, draw_sample
from peerify_dagster.partitions import venue_partitions
from peerify_dagster.resources.dagster_resources import LakeResource, OpenReviewResource, VenueRegistryResource
from peerify_dagster.resources.openreview import FetchOutcome, MalformedSnapshotFile, OpenReviewCrawler, SnapshotReader

NO_SUBMISSIONS = "venue has no submissions"
PAPER_SAMPLE_SCHEMA = {
    "venue": pl.String, "forum_id": pl.String, "draw_order": pl.Int64, "seed": pl.Int64, "sample_size": pl.Int64,
    "population": pl.Int64, "rank_key": pl.String, "sampling": pl.String, "review_scope": pl.String,
    "replied_review_ids": pl.List(pl.String), "paired_review_id": pl.String,
}


@dg.asset(
    partitions_def=venue_partitions,
    group_name="ingestion",
    kinds={"python", "parquet"},
    check_specs=[dg.AssetCheckSpec("has_submissions", asset="paper_sample",
                                   description="The venue lists at least one submission: none means a "
                                   "wrong venue id or an empty crawl.")],
)
def paper_sample(
    context: dg.AssetExecutionContext,
    venue_registry: VenueRegistryResource,
    lake: LakeResource,
    openreview: OpenReviewResource,
):
    """The venue's papers chosen for the benchmark, in draw order: forums ranked by a seeded hash of their id
    (stable when the listed population changes), filtered by the venue's `sampling:` options (the paper's
    pairing: no withdrawn / desk-rejected papers, a substantive direct author reply to a review, one
    review/response pair per paper), which every row records. A venue without submissions builds empty tables
    but fails the `has_submissions` check and gets an `ingest_errors` row: it never builds green."""
    venue = venue_registry.venue(context.partition_key)
    config = SamplingConfig.from_mapping(venue.sampling)
    crawler, reader, api_version = crawler_for(context, venue_registry, lake, openreview)
    submissions = crawler.land_submissions() if crawler else reader.submissions()
    forum_ids = [n["id"] for n in submissions if isinstance(n, dict) and isinstance(n.get("id"), str)]

    def forum_notes(forum_id: str) -> list | None:
        # Reply filters read the forum; a live venue lands it now, so the crawl after the draw resumes it.
        if crawler and crawler.land_forum(forum_id).status == "failed":
            return None
        try:
            return reader.forum(forum_id).notes
        except (OSError, ValueError):
            return None

    draw = draw_sample(submissions, venue.seed, venue.sample_size, config, forum_notes, api_version)
    context.log.info(f"{venue.key}: {len(draw.papers)} of {len(forum_ids)} submissions chosen (seed {venue.seed}); "
                     f"passed over: {dict((reason, len(ids)) for reason, ids in draw.skipped.items())}")
    if not forum_ids:
        context.log.error(f"{venue.key}: {NO_SUBMISSIONS} ({len(submissions)} entries listed, none with an id)")
    sampling_json = json.dumps(config.as_dict(), sort_keys=True)
    yield dg.Output(pl.DataFrame(
        [{"venue": venue.key, "forum_id": paper.forum_id, "draw_order": order, "seed": venue.seed,
          "sample_size": venue.sample_size, "population": len(forum_ids), "rank_key": paper.rank_key,
          "sampling": sampling_json, "review_scope": config.reviews, "replied_review_ids": paper.replied_review_ids,
          "paired_review_id": paper.paired_review_id} for order, paper in enumerate(draw.papers)],
        schema=PAPER_SAMPLE_SCHEMA,  # explicit, so an empty venue's table keeps its column types
    ), metadata={"api_version": api_version, "sampling": dg.MetadataValue.json(config.as_dict()),
                 "passed_over": dg.MetadataValue.json({reason: len(ids) for reason, ids in draw.skipped.items()})})
    yield dg.AssetCheckResult(
        check_name="has_submissions", passed=bool(forum_ids), severity=dg.AssetCheckSeverity.ERROR,
        metadata={"venue": venue.key, "population": len(forum_ids), "entries_listed": len(submissions),
                  **({} if forum_ids else {"reason": NO_SUBMISSIONS})},
    )


def _raw_row(venue: str, forum_id: str, note: object, fetched_at: int | None, api_version: int,
             superseded: bool) -> dict:
    try:
        kind, problem = classify(read_note(note, api_version)), None
    except MalformedNote as exc:
        kind, problem = None, str(exc)
    as_dict = note if isinstance(note, dict) else {}

    def as_list(key: str) -> list[str]:
        value = as_dict.get(key)
        return [str(v) for v in value] if isinstance(value, list) else []

    v1_invitation = as_dict.get("invitation") if isinstance(as_dict.get("invitation"), str) else None
    return {
        "venue": venue,
        "forum_id": forum_id,
        "note_id": as_dict.get("id") if isinstance(as_dict.get("id"), str) else None,
        "kind": kind,
        "api_version": api_version,
        "superseded": superseded,
        "invitations": as_list("invitations") or ([v1_invitation] if v1_invitation else []),
        "signatures": as_list("signatures"),
        "replyto": as_dict.get("replyto") if isinstance(as_dict.get("replyto"), str) else None,
        "number": as_dict.get("number") if isinstance(as_dict.get("number"), int) else None,
        "cdate": as_dict.get("cdate") if isinstance(as_dict.get("cdate"), int) else None,
        "tcdate": as_dict.get("tcdate") if isinstance(as_dict.get("tcdate"), int) else None,
        "mdate": as_dict.get("mdate") if isinstance(as_dict.get("mdate"), int) else None,
        "tmdate": as_dict.get("tmdate") if isinstance(as_dict.get("tmdate"), int) else None,
        "fetched_at": fetched_at,
        "problem": problem,
        "note_json": json.dumps(note, ensure_ascii=False),
    }


RAW_NOTE_SCHEMA = {
    "venue": pl.String, "forum_id": pl.String, "note_id": pl.String, "kind": pl.String, "api_version": pl.Int64,
    "superseded": pl.Boolean,
    "invitations": pl.List(pl.String), "signatures": pl.List(pl.String), "replyto": pl.String,
    "number": pl.Int64, "cdate": pl.Int64, "tcdate": pl.Int64, "mdate": pl.Int64, "tmdate": pl.Int64,
    "fetched_at": pl.Int64, "problem": pl.String, "note_json": pl.String,
}
CRAWL_LOG_SCHEMA = {
    "venue": pl.String, "forum_id": pl.String, "item": pl.String, "status": pl.String,
    "reason": pl.String, "message": pl.String, "seconds": pl.Float64,
}


def crawl_log_frame(venue: str, outcomes: list[FetchOutcome]) -> pl.DataFrame:
    return pl.DataFrame(
        [{"venue": venue, "forum_id": o.forum_id, "item": o.item, "status": o.status, "reason": o.reason,
          "message": o.message, "seconds": round(o.seconds, 4)} for o in outcomes],
        schema=CRAWL_LOG_SCHEMA,
    )


@dg.multi_asset(
    partitions_def=venue_partitions,
    group_name="ingestion",
    outs={
        "raw_openreview_notes": dg.AssetOut(
            kinds={"python", "parquet"},
            description="Every note of every chosen forum exactly as received (JSON), older versions of a note "
                        "included (`superseded`: a later version of the same id, by tmdate, replaces it), with the "
                        "API version it was read as, forum, invitations, signatures, replyto, timestamps, fetch time.",
        ),
        "forum_crawl_log": dg.AssetOut(
            kinds={"python", "parquet"},
            description="One row per chosen forum: fetched now, already stored (resumed crawl), or failed with a "
                        "reason; one venue-level row (item `submissions`) when the venue has no submissions.",
        ),
    },
)
def raw_openreview_notes(
    context: dg.AssetExecutionContext,
    config: CrawlConfig,
    paper_sample: pl.DataFrame,
    venue_registry: VenueRegistryResource,
    lake: LakeResource,
    openreview: OpenReviewResource,
):
    """Land each chosen forum (live venues: crawled with the real client into the lake's snapshot folder,
    resumable; snapshot venues: replayed), in forum id order, then read its landed notes as received. The notes are
    streamed to the lake `forums_per_batch` forums at a time, so a whole venue is never in memory."""
    venue_key = context.partition_key
    crawler, reader, api_version = crawler_for(context, venue_registry, lake, openreview)
    forum_ids = sorted(paper_sample["forum_id"].to_list())
    outcomes: list[FetchOutcome] = []
    if not forum_ids:  # the venue-level row that puts an empty venue into `ingest_errors`
        outcomes.append(FetchOutcome(None, "submissions", "failed", "no_submissions",
                                     f"venue {venue_key}: {NO_SUBMISSIONS}"))
    superseded_versions = 0
    with lake.lake().stream_table("raw_openreview_notes", venue_key, RAW_NOTE_SCHEMA) as writer:
        batch: list[dict] = []
        for done, forum_id in enumerate(forum_ids, start=1):
            outcome, rows = _land_and_read(venue_key, forum_id, crawler, reader, api_version, config.refetch)
            outcomes.append(outcome)
            batch += rows
            superseded_versions += sum(row["superseded"] for row in rows)
            if done % config.forums_per_batch == 0 or done == len(forum_ids):
                writer.write(batch)
                batch = []
            if done % 25 == 0 or done == len(forum_ids):
                context.log.info(f"{venue_key}: {done}/{len(forum_ids)} forums landed")
        raw = writer.finish()
    failed = [o for o in outcomes if o.status == "failed"]
    for outcome in failed:
        item = f"forum {outcome.forum_id}" if outcome.forum_id else f"venue {venue_key}"
        context.log.warning(f"{item}: {outcome.reason}: {outcome.message}")
    try:
        yield dg.Output(raw, output_name="raw_openreview_notes",
                        metadata={"forums_failed": len(failed), "api_version": api_version,
                                  "superseded_versions": superseded_versions})
    finally:  # not handed over (the step failed on the way): leave no temporary behind
        raw.temporary.unlink(missing_ok=True)
    yield dg.Output(crawl_log_frame(venue_key, outcomes), output_name="forum_crawl_log",
                    metadata={"fetched": sum(o.status == "fetched" for o in outcomes),
                              "resumed": sum(o.status == "stored" for o in outcomes), "failed": len(failed)})


def _land_and_read(venue_key: str, forum_id: str, crawler: OpenReviewCrawler | None, reader: SnapshotReader,
                   api_version: int, refetch: bool) -> tuple[FetchOutcome, list[dict]]:
    """Land one forum (crawl, or find it in the snapshot) and read its notes into raw rows; a forum that cannot be
    landed or read gives a failed outcome naming why, and no rows."""
    if crawler:
        outcome = crawler.land_forum(forum_id, refetch=refetch)
    elif reader.has_forum(forum_id):
        outcome = FetchOutcome(forum_id, "forum", "stored")
    else:
        outcome = FetchOutcome(forum_id, "forum", "failed", "not_in_snapshot",
                               f"forum {forum_id}: listed as a submission but absent from the snapshot")
    if outcome.status not in ("fetched", "stored"):
        return outcome, []
    try:
        forum = reader.forum(forum_id)
    except MalformedSnapshotFile as exc:
        return FetchOutcome(forum_id, "forum", "failed", "malformed_forum_file", f"forum {forum_id}: {exc}"), []
    except (OSError, ValueError) as exc:
        return FetchOutcome(forum_id, "forum", "failed", "unreadable_snapshot",
                            f"forum {forum_id}: snapshot file unreadable ({exc})"), []
    superseded = superseded_positions(forum.notes)
    return outcome, [_raw_row(venue_key, forum_id, note, forum.fetched_at, api_version, i in superseded)
                     for i, note in enumerate(forum.notes)]

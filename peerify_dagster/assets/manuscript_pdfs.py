"""Stage 1, ingestion: manuscript PDFs, stored content-addressed in the lake, plus the errors table."""

import dagster as dg
import polars as pl

from peerify_dagster.assets.steps.crawl import CrawlConfig, crawler_for
from peerify_dagster.cluster import queue_tags
from peerify_dagster.domain.pdfs import PdfProblem, inspect_pdf
from peerify_dagster.partitions import venue_partitions
from peerify_dagster.resources.dagster_resources import LakeResource, OpenReviewResource, VenueRegistryResource

PDF_SCHEMA = {
    "venue": pl.String, "paper_id": pl.String, "status": pl.String, "reason": pl.String, "message": pl.String,
    "sha256": pl.String, "size_bytes": pl.Int64, "pages": pl.Int64, "encrypted": pl.Boolean, "version": pl.String,
    "edit_id": pl.String,
    "source_url": pl.String, "lake_path": pl.String,
}


@dg.asset(
    partitions_def=venue_partitions,
    group_name="ingestion",
    kinds={"python", "parquet", "pdf"},
    deps=["raw_openreview_notes"],  # the reviewed PDF version is chosen from the landed forum's edits
    op_tags=queue_tags("pdf"),
)
def manuscript_pdfs(
    context: dg.AssetExecutionContext,
    config: CrawlConfig,
    paper_sample: pl.DataFrame,
    venue_registry: VenueRegistryResource,
    lake: LakeResource,
    openreview: OpenReviewResource,
) -> pl.DataFrame:
    """One row per chosen paper: its PDF stored under `<lake>/pdfs/<sha256>.pdf` with size, page count, source url and
    which version it is (`under_review`: the last version before the first review; `latest` otherwise), or the reason
    there is none (missing, not a PDF, truncated, unreadable). Encrypted or zero-page PDFs are stored as served;
    parsing records why they yield no text."""
    venue_key = context.partition_key
    crawler, reader, _ = crawler_for(context, venue_registry, lake, openreview)
    store = lake.lake().store
    rows = []
    for forum_id in paper_sample["forum_id"].to_list():
        row = dict.fromkeys(PDF_SCHEMA)
        row.update(venue=venue_key, paper_id=forum_id)
        outcome = crawler.land_pdf(forum_id, refetch=config.refetch) if crawler else None
        meta, data = reader.pdf_meta(forum_id), reader.pdf_bytes(forum_id)
        if outcome is not None and outcome.status == "failed":
            row.update(status="failed", reason=outcome.reason, message=outcome.message)
        elif data is None or meta is None:
            row.update(status="failed", reason="missing_pdf", message=f"paper {forum_id}: no PDF in the snapshot")
        else:
            try:
                info = inspect_pdf(data, f"paper {forum_id}")
            except PdfProblem as exc:
                row.update(status="failed", reason=exc.reason, message=str(exc))
            else:
                path = store.root / "pdfs" / f"{info.sha256}.pdf"
                if not path.exists():
                    store.write_bytes(path, data)
                row.update(status="ok", sha256=info.sha256, size_bytes=info.size_bytes, pages=info.pages,
                           encrypted=info.encrypted,
                           version=meta.get("version"), edit_id=meta.get("edit_id"),
                           source_url=meta.get("source_url"), lake_path=f"pdfs/{info.sha256}.pdf")
        if row["status"] != "ok":
            context.log.warning(f"paper {forum_id}: {row['reason']}: {row['message']}")
        rows.append(row)
    frame = pl.DataFrame(rows, schema=PDF_SCHEMA)
    context.add_output_metadata({
        "pdfs_ok": int((frame["status"] == "ok").sum()),
        "pdfs_failed": int((frame["status"] != "ok").sum()),
        "pages_total": int(frame["pages"].sum() or 0),
    })
    return frame


ERROR_SCHEMA = {
    "venue": pl.String, "forum_id": pl.String, "note_id": pl.String, "stage": pl.String, "severity": pl.String,
    "reason": pl.String, "message": pl.String,
}


@dg.asset(
    partitions_def=venue_partitions,
    group_name="forum_tables",  # it reads note_errors: in `ingestion` the collapsed lineage view would show a loop
    kinds={"python", "parquet"},
)
def ingest_errors(forum_crawl_log: pl.DataFrame, note_errors: pl.DataFrame,
                  manuscript_pdfs: pl.DataFrame) -> pl.DataFrame:
    """Every problem met while ingesting the venue, naming the forum/note and the reason: failed forum fetches,
    unusable notes, and missing or corrupt PDFs. The rest of the venue completes regardless."""
    crawl = forum_crawl_log.filter(pl.col("status") == "failed").select(
        "venue", "forum_id", pl.lit(None, pl.String).alias("note_id"), pl.lit("crawl").alias("stage"),
        pl.lit("error").alias("severity"), "reason", "message",
    )
    pdfs = manuscript_pdfs.filter(pl.col("status") != "ok").select(
        "venue", pl.col("paper_id").alias("forum_id"), pl.lit(None, pl.String).alias("note_id"),
        pl.lit("pdf").alias("stage"), pl.lit("error").alias("severity"), "reason", "message",
    )
    frames = [f.cast(ERROR_SCHEMA) for f in (crawl, note_errors.select(list(ERROR_SCHEMA)), pdfs)]
    return pl.concat(frames).sort("stage", "forum_id", "note_id", nulls_last=True)

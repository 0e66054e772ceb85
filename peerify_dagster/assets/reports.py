"""Stage 6, reports: the venue's report (the paper's main tables and PNG figures) written under
`<lake>/reports/<venue>/` as report.md (figures beside it) and a self-contained report.html, and shown whole in the
Dagster UI on the asset's page."""

import dagster as dg
import polars as pl

from peerify_dagster.domain.report import (
    REPORT_TABLES,
    UI_EMBED_BYTES,
    Input,
    build_report,
    render_html,
    render_markdown,
)
from peerify_dagster.partitions import VENUE_PREDICTIONS, prediction_key, venue_partitions
from peerify_dagster.resources.dagster_resources import LakeResource
from peerify_dagster.resources.lake import Lake, UnreadablePartitionError
from peerify_dagster.resources.report_files import REPORT_HTML, REPORT_MARKDOWN, report_folder

REPORT_SCHEMA = {"venue": pl.String, "figure": pl.String, "path": pl.String, "description": pl.String}


def _read(lake: Lake, table: str, partition: str, context: dg.AssetExecutionContext) -> Input:
    """The partition from the lake; a table not built for the venue (or unreadable) becomes a gap in the report."""
    try:
        return Input(table, partition, lake.read_table(table, partition))
    except FileNotFoundError:
        return Input(table, partition, None)
    except UnreadablePartitionError as exc:
        context.log.warning(str(exc))
        return Input(table, partition, None, f"unreadable ({exc.reason}); re-materialise {table} for {partition!r}")


@dg.asset(partitions_def=venue_partitions, group_name="reports", kinds={"python", "parquet", "matplotlib"},
          deps=[*REPORT_TABLES, VENUE_PREDICTIONS])
def venue_report(context: dg.AssetExecutionContext, lake: LakeResource) -> pl.DataFrame:
    """The venue's report from whichever of its tables are built (a venue imported from a release has no labels,
    usage or chunks: the report says "not built for this venue" there): slice statistics, accuracy by verifier x
    configuration x slice, accuracy vs macro-F1, retrieval metrics, labeller agreement and arbitration outcomes,
    token costs; figures: label distribution per slice, per configuration a confusion matrix and gold vs predicted
    labels per verifier and slice, retrieval metrics, chunk sizes. Each names the asset [partition] it came from.
    The table lists the PNG files."""
    venue, store = context.partition_key, lake.lake()
    inputs = {table: _read(store, table, venue, context) for table in REPORT_TABLES}
    metrics = inputs["metrics"].frame
    configurations = sorted(set(metrics["configuration"])) if metrics is not None else []
    predictions = {name: _read(store, "predictions", prediction_key(venue, name), context)
                   for name in configurations}
    report = build_report(venue, inputs, predictions)

    folder, files = report_folder(store, venue), store.store  # files: the lake's storage, a folder or S3
    for figure in report.figures:
        files.write_bytes(folder / figure.file_name, figure.png)
    for stale in set(folder.glob("*.png")) - {folder / figure.file_name for figure in report.figures}:
        files.delete(stale)  # figures of an earlier report (a configuration since removed) would outlive their tables
    markdown_path, html_path = folder / REPORT_MARKDOWN, folder / REPORT_HTML
    files.write_bytes(markdown_path, render_markdown(report).encode())
    files.write_bytes(html_path, render_html(report).encode())
    embedded = render_markdown(report, embed_up_to=UI_EMBED_BYTES)
    context.add_output_metadata({
        "report": dg.MetadataValue.md(embedded),
        "report_kib": round(len(embedded.encode()) / 1024, 1),
        "report_md": dg.MetadataValue.path(str(markdown_path)),
        "report_html": dg.MetadataValue.path(str(html_path)),
        "not_built": dg.MetadataValue.json(report.missing),
    })
    return pl.DataFrame([{"venue": venue, "figure": figure.file_name, "path": str(folder / figure.file_name),
                          "description": f"{figure.title} (source: {', '.join(i.source for i in figure.sources)})"}
                         for figure in report.figures], schema=REPORT_SCHEMA)

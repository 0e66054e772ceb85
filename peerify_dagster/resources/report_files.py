"""Where a venue's report lives in the lake: written by the report asset, shown by `peerify report` and
`peerify build`."""

from pathlib import Path

from peerify_dagster.resources.lake import Lake, partition_slug

REPORT_MARKDOWN, REPORT_HTML = "report.md", "report.html"


def report_folder(lake: Lake, venue: str) -> Path:
    """Where the venue's report.md, report.html and PNG figures are written."""
    return lake.root / "reports" / partition_slug(venue)

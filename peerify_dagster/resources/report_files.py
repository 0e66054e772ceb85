"""Where a venue's report lives in the lake: written by the report asset, shown by `peerify report` and
`peerify build`."""

from peerify_dagster.resources.lake import Lake, partition_slug
from peerify_dagster.resources.store import Location

REPORT_MARKDOWN, REPORT_HTML = "report.md", "report.html"


def report_folder(lake: Lake, venue: str) -> Location:
    """Where the venue's report.md, report.html and PNG figures are written."""
    return lake.root / "reports" / partition_slug(venue)

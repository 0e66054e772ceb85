"""Where a venue's report lives in the lake: written by the report asset, shown by `peerify report` and
`peerify build` (local paths in a folder lake, `s3://` URLs in an S3 lake)."""

from pathlib import Path

from peerify_dagster.resources.files import write_atomic
from peerify_dagster.resources.lake import Lake, partition_slug
from peerify_dagster.resources.store import Location

REPORT_MARKDOWN, REPORT_HTML = "report.md", "report.html"


def report_folder(lake: Lake, venue: str) -> Location:
    """Where the venue's report.md, report.html and PNG figures are written."""
    return lake.root / "reports" / partition_slug(venue)


def viewable_report(lake: Lake, venue: str) -> Path:
    """The venue's HTML report as a local file a browser opens (the page embeds its figures): the file itself in a
    folder lake; for an S3 lake a fresh copy in this machine's cache folder, read through the store (the object is
    replaced by each report build under the same name, so an earlier copy is never reused)."""
    page = report_folder(lake, venue) / REPORT_HTML
    if isinstance(page, Path):
        return page
    copy = lake.store.cache_dir / "reports" / partition_slug(venue) / REPORT_HTML
    write_atomic(copy, page.read_bytes())
    return copy

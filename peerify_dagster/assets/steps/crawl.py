"""Landing a venue's forums, shared by the ingestion assets (notes and PDFs): their code version, the crawl's
run config and the crawler (live venues) or snapshot reader of the venue."""

import dagster as dg

from peerify_dagster.resources.dagster_resources import LakeResource, OpenReviewResource, VenueRegistryResource
from peerify_dagster.resources.openreview import (
    OpenReviewCrawler,
    SnapshotReader,
    api_url_for,
    probe_api_version,
    resolve_api_version,
)


class CrawlConfig(dg.Config):
    refetch: bool = False  # True re-fetches forums and PDFs already in the snapshot (a refresh)
    forums_per_batch: int = 100  # forums whose raw notes are written at a time (one row group): bounds memory


def crawler_for(context: dg.AssetExecutionContext, registry: VenueRegistryResource, lake: LakeResource,
                openreview: OpenReviewResource) -> tuple[OpenReviewCrawler | None, SnapshotReader, int]:
    """A crawler for live venues (None for snapshot venues), the reader of the venue's snapshot, and the venue's
    OpenReview API version (registry, else detected), which decides the client and how notes are read."""
    venue = registry.venue(context.partition_key)
    reader = SnapshotReader(registry.snapshot_dir(venue, lake.lake()))
    live = venue.source == "api"
    if live:
        openreview.check_reachable(venue.api_url)
    api_version, decided_by = resolve_api_version(
        venue.api_version, venue.openreview_id, reader, live,
        probe=lambda: probe_api_version(openreview.client(venue.api_url), venue.openreview_id))
    context.log.info(f"{venue.key}: OpenReview API v{api_version} ({decided_by})")
    if not live:
        return None, reader, api_version
    api_url = api_url_for(venue.api_url, api_version)
    if api_url != venue.api_url:
        openreview.check_reachable(api_url)
    client = openreview.client(api_url, api_version)
    crawler = OpenReviewCrawler(client, venue.openreview_id, reader.folder, log=context.log.info,
                                api_version=api_version)
    return crawler, reader, api_version

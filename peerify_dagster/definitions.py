"""The code location: one Definitions object with every asset, check, resource, job, schedule and sensor."""

import dagster as dg

from assets import (
    claims,
    embeddings,
    forum_tables,
    ingestion,
    manuscript_pdfs,
    manuscripts,
    reports,
    retrieval,
    verification,
)
from peerify_dagster.partitions import venue_partitions
from peerify_dagster.resources.dagster_resources import (
    DocumentParserResource,
    EmbeddingResource,
    LakeResource,
    LLMGatewayResource,
    OpenReviewResource,
    ParquetLakeIOManager,
    RetrievalResource,
    VenueRegistryResource,
)

all_assets = dg.load_assets_from_modules(
    [ingestion, forum_tables, manuscript_pdfs, manuscripts, embeddings, claims, retrieval, verification, reports]
)

build_venue_job = dg.define_asset_job(
    "build_venue",
    selection=dg.AssetSelection.all(),
    partitions_def=venue_partitions,
    description="Materialise the whole venue-partitioned asset graph for one venue.",
)

REFRESH_RUN_CONFIG = {"ops": {"raw_openreview_notes": {"config": {"refetch": True}}}}


@dg.sensor(job=build_venue_job, minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.RUNNING)
def venue_registry_sensor(context: dg.SensorEvaluationContext, venue_registry: VenueRegistryResource):
    """Adds venues newly listed in the registry as partitions and builds the new `source: snapshot` ones (local
    files, no network). Live venues are only added: a crawl reaches OpenReview, so starting the UI never launches
    one; build them with `peerify build <venue>` or Materialize in the UI."""
    known = set(context.instance.get_dynamic_partitions(venue_partitions.name))
    new = [key for key in venue_registry.venue_keys() if key not in known]
    if not new:
        return dg.SkipReason("no new venues in the registry")
    replayed = [key for key in new if venue_registry.venue(key).source == "snapshot"]
    return dg.SensorResult(
        run_requests=[dg.RunRequest(partition_key=key, run_key=f"register:{key}") for key in replayed],
        dynamic_partitions_requests=[venue_partitions.build_add_request(new)],
        skip_reason=None if replayed else f"added live venue(s) {new} without building them: crawls run when asked",
    )


@dg.schedule(job=build_venue_job, cron_schedule="0 3 * * 1", default_status=dg.DefaultScheduleStatus.STOPPED)
def venue_refresh_schedule(context: dg.ScheduleEvaluationContext, venue_registry: VenueRegistryResource):
    """Weekly refresh of every registered venue: re-lists submissions and re-fetches forums (new replies)."""
    known = set(context.instance.get_dynamic_partitions(venue_partitions.name))
    return [
        dg.RunRequest(partition_key=key, run_config=REFRESH_RUN_CONFIG,
                      run_key=f"refresh:{key}:{context.scheduled_execution_time:%Y-%m-%d}")
        for key in venue_registry.venue_keys() if key in known
    ]


@dg.run_status_sensor(run_status=dg.DagsterRunStatus.SUCCESS, default_status=dg.DefaultSensorStatus.RUNNING)
def catalog_refresh_sensor(context: dg.RunStatusSensorContext, lake: LakeResource):
    """Refreshes the lake's DuckDB catalog after each successful run in `make dev`. Asset steps never touch the
    catalog, so a process holding it open or an unreadable file of another table cannot fail them."""
    for line in lake.lake().refresh_catalog().problems():
        context.log.warning(line)


def build_resources(lake_root: str | None = None, **overrides) -> dict:
    """The graph's resources; `lake_root=None` means PEERIFY_LAKE (read when a run opens the lake), else data_lake/."""
    resources = {
        "io_manager": ParquetLakeIOManager(root=lake_root),
        "lake": LakeResource(root=lake_root),
        "venue_registry": VenueRegistryResource(),
        "openreview": OpenReviewResource(),
        "document_parser": DocumentParserResource(),
        "embedding_model": EmbeddingResource(),
        "retrieval": RetrievalResource(),
        "llm": LLMGatewayResource(),
    }
    resources.update(overrides)
    return resources


defs = dg.Definitions(
    assets=all_assets,
    jobs=[build_venue_job],
    sensors=[venue_registry_sensor, catalog_refresh_sensor],
    schedules=[venue_refresh_schedule],
    resources=build_resources(),
)

"""The code location: one Definitions object with every asset, check, resource, job, schedule and sensor."""

from collections.abc import Iterable

import dagster as dg

from assets import (
    arbitration,
    audit,
    claims,
    embeddings,
    forum_tables,
    ingestion,
    labels,
    manuscript_pdfs,
    manuscripts,
    metrics,
    predictions,
    release,
    release_import,
    reports,
    retrieval,
    slices,
    verification,
)
from peerify_dagster.domain.venues import SOURCE_RELEASE, load_registry
from peerify_dagster.partitions import configuration_partitions, prediction_key, prediction_partitions, venue_partitions
from peerify_dagster.resources.decisions import DecisionLedger
from peerify_dagster.resources.dagster_resources import (
    DocumentParserResource,
    EmbeddingResource,
    LakeResource,
    LLMGatewayResource,
    OpenReviewResource,
    ParquetLakeIOManager,
    PredictionConfigurationsResource,
    RetrievalResource,
    VenueRegistryResource,
)

all_assets = [*dg.load_assets_from_modules(
    [ingestion, forum_tables, manuscript_pdfs, manuscripts, embeddings, claims, labels, arbitration, audit, slices,
     retrieval, verification, predictions, metrics, reports, release]
), release_import.release_rows]

# A job runs one partitions definition, so a venue is built in three steps (`peerify build` runs them in order):
# the venue's graph up to the predictions' inputs, the predictions of each of its configurations (one run per venue x
# configuration partition), then the venue's results that read every built configuration.
PREDICTIONS = dg.AssetSelection.assets("predictions")
RELEASE = dg.AssetSelection.assets("label_release")  # not partitioned: a release is its own run
build_venue_job = dg.define_asset_job(
    "build_venue",
    selection=dg.AssetSelection.all() - PREDICTIONS.downstream() - RELEASE,
    partitions_def=venue_partitions,
    description="Materialise the venue-partitioned asset graph for one venue, up to the predictions' inputs.",
)
predictions_job = dg.define_asset_job(
    "venue_predictions",
    selection=PREDICTIONS,
    partitions_def=prediction_partitions,
    description="Predictions of one configuration (configurations.yaml) for one venue.",
)
venue_results_job = dg.define_asset_job(
    "venue_results",
    selection=PREDICTIONS.downstream() - PREDICTIONS,
    partitions_def=venue_partitions,
    description="The venue's results over every configuration built for it (reports).",
)



def computed_from(imported: Iterable[str]) -> list[dg.AssetKey]:
    """The assets of the venue graph that follow from the `imported` tables alone, in dependency order: what a venue
    imported from a release builds (the rest of the graph needs its forums and manuscripts)."""
    graph = defs.resolve_asset_graph()
    venue_graph = defs.resolve_job_def(build_venue_job.name).asset_layer.selected_asset_keys
    available, chosen = {dg.AssetKey(name) for name in imported}, []
    while added := [key for key in sorted(venue_graph - available)
                    if (parents := graph.get(key).parent_keys) and parents <= available]:
        available |= set(added)
        chosen += added
    return chosen


release_job = dg.define_asset_job(
    "publish_label_release", selection=RELEASE,
    description="Write a versioned label release of venues' benchmark slices (run config: version, venues).",
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


PREDICTION_INPUTS = dg.AssetKey("retrieval_runs")  # rebuilt by every venue build: predictions older than it are stale


def _latest(instance: dg.DagsterInstance, asset: str | dg.AssetKey, partition: str):
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset) if isinstance(asset, str) else asset,
                              asset_partitions=[partition]), limit=1).records
    return records[0] if records else None


def stale_predictions(instance: dg.DagsterInstance, venue: str, configurations) -> list[str]:
    """The configurations of a built venue whose predictions partition is missing, was built from another
    definition (configuration hash), or is older than the venue's retrieval runs."""
    inputs = _latest(instance, PREDICTION_INPUTS, venue)
    if inputs is None:
        return []  # the venue is not built: its build runs its configurations
    stale = []
    for configuration in configurations:
        built = _latest(instance, "predictions", str(prediction_key(venue, configuration.name)))
        built_from = built and built.asset_materialization.metadata.get(predictions.CONFIGURATION_HASH)
        if built is None or built_from is None or built_from.value != configuration.content_hash() \
                or built.storage_id < inputs.storage_id:
            stale.append(configuration.name)
    return stale


@dg.sensor(jobs=[predictions_job, venue_results_job], minimum_interval_seconds=30,
           default_status=dg.DefaultSensorStatus.RUNNING)
def configurations_sensor(context: dg.SensorEvaluationContext,
                          prediction_configurations: PredictionConfigurationsResource,
                          venue_registry: VenueRegistryResource):
    """Adds the configurations of configurations.yaml as partitions, and for every built venue runs the
    predictions of each of its configurations that is new, changed or older than the venue's retrieval runs, one run
    per partition; once a venue's predictions are current, re-runs its results if a prediction is newer."""
    configurations = prediction_configurations.load()
    known = set(context.instance.get_dynamic_partitions(configuration_partitions.name))
    new = [name for name in configurations.configurations if name not in known]
    if new:  # the runs below need the partitions to exist first: they are requested at the next evaluation
        return dg.SensorResult(dynamic_partitions_requests=[configuration_partitions.build_add_request(new)])
    requests = []
    releases = {key for key, venue in load_registry(venue_registry.registry_file()).items()
                if venue.source == SOURCE_RELEASE}
    for venue in context.instance.get_dynamic_partitions(venue_partitions.name):
        chosen = configurations.for_venue(venue, release=venue in releases)
        stale = stale_predictions(context.instance, venue, chosen)
        inputs = _latest(context.instance, PREDICTION_INPUTS, venue)
        requests += [dg.RunRequest(job_name=predictions_job.name, partition_key=str(prediction_key(venue, name)),
                                   run_key=f"predictions:{venue}:{name}:{configurations.get(name).content_hash()}:"
                                           f"{inputs.storage_id}") for name in stale]
        if stale or inputs is None:
            continue
        built = [_latest(context.instance, "predictions", str(prediction_key(venue, c.name))) for c in chosen]
        newest = max((record.storage_id for record in built if record), default=0)
        report = _latest(context.instance, "venue_report", venue)
        if report is None or report.storage_id < newest:
            requests.append(dg.RunRequest(job_name=venue_results_job.name, partition_key=venue,
                                          run_key=f"results:{venue}:{newest}"))
    return requests or dg.SkipReason("every built venue's predictions and results are current")


# The assets that read a human decisions ledger when they run, by the ledger they read.
LEDGER_READERS = {"arbitration": dg.AssetKey("canonical_labels"), "audit": dg.AssetKey("human_audit")}


@dg.sensor(asset_selection=list(LEDGER_READERS.values()), minimum_interval_seconds=30,
           default_status=dg.DefaultSensorStatus.RUNNING)
def human_decisions_sensor(context: dg.SensorEvaluationContext, lake: LakeResource):
    """Re-materialises, per venue, the asset that reads a decisions ledger (canonical_labels: arbitration;
    human_audit: the audit) when that ledger has grown since the asset's last materialisation (metadata
    `ledger_lines`): a new human decision marks only that venue's asset stale. Assets never built are left to
    their build."""
    requests = []
    for venue in context.instance.get_dynamic_partitions(venue_partitions.name):
        for kind, asset_key in LEDGER_READERS.items():
            latest = _latest(context.instance, asset_key, venue)
            if latest is None:
                continue
            built_from = latest.asset_materialization.metadata.get("ledger_lines")
            lines = DecisionLedger(lake.lake().root, venue, kind).line_count()
            if built_from is None or lines > built_from.value:
                requests.append(dg.RunRequest(partition_key=venue, asset_selection=[asset_key],
                                              run_key=f"{asset_key.to_user_string()}:{venue}:{lines}"))
    return requests or dg.SkipReason("no decisions ledger has new lines")


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
        "prediction_configurations": PredictionConfigurationsResource(),
        "llm": LLMGatewayResource(),
    }
    resources.update(overrides)
    return resources


defs = dg.Definitions(
    assets=all_assets,
    jobs=[build_venue_job, predictions_job, venue_results_job, release_job],
    sensors=[venue_registry_sensor, catalog_refresh_sensor, human_decisions_sensor, configurations_sensor],
    schedules=[venue_refresh_schedule],
    resources=build_resources(),
)

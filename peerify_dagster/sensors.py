"""The sensors and schedule of the code location."""

import dagster as dg

from peerify_dagster.domain.venues import SOURCE_RELEASE, load_registry
from peerify_dagster.freshness import PREDICTION_INPUTS, latest_materialisation, stale_predictions
from peerify_dagster.jobs import REFRESH_RUN_CONFIG, build_venue_job, predictions_job, venue_results_job
from peerify_dagster.partitions import configuration_partitions, prediction_key, venue_partitions
from peerify_dagster.resources.dagster_resources import (
    LakeResource,
    PredictionConfigurationsResource,
    VenueRegistryResource,
)
from peerify_dagster.resources.decisions import DecisionLedger


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


@dg.sensor(jobs=[predictions_job, venue_results_job], minimum_interval_seconds=30,
           default_status=dg.DefaultSensorStatus.STOPPED)
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
        inputs = latest_materialisation(context.instance, PREDICTION_INPUTS, venue)
        requests += [dg.RunRequest(job_name=predictions_job.name, partition_key=str(prediction_key(venue, name)),
                                   run_key=f"predictions:{venue}:{name}:{configurations.get(name).content_hash()}:"
                                           f"{inputs.storage_id}") for name in stale]
        if stale or inputs is None:
            continue
        built = [latest_materialisation(context.instance, "predictions", str(prediction_key(venue, c.name))) for c in chosen]
        newest = max((record.storage_id for record in built if record), default=0)
        report = latest_materialisation(context.instance, "venue_report", venue)
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
            latest = latest_materialisation(context.instance, asset_key, venue)
            if latest is None:
                continue
            built_from = latest.asset_materialization.metadata.get("ledger_lines")
            lines = DecisionLedger(lake.lake().root, venue, kind).line_count()
            if built_from is None or lines > built_from.value:
                requests.append(dg.RunRequest(partition_key=venue, asset_selection=[asset_key],
                                              run_key=f"{asset_key.to_user_string()}:{venue}:{lines}"))
    return requests or dg.SkipReason("no decisions ledger has new lines")


SENSORS = [venue_registry_sensor, catalog_refresh_sensor, human_decisions_sensor, configurations_sensor]
SCHEDULES = [venue_refresh_schedule]

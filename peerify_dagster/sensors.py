"""The sensors and schedule of the code location. None of them builds, re-predicts or reports an upload venue of
`peerify verify` (`_benchmark_venues`): an upload is built on request only, up to its predictions, and has no slices
for the results to read."""

import dagster as dg

from peerify_dagster.domain.venues import SOURCE_RELEASE, SOURCE_SNAPSHOT, UPLOAD_KEY_PREFIX, load_registry
from peerify_dagster.freshness import (
    LEDGER_READERS,
    PREDICTION_INPUTS,
    latest_materialisation,
    ledgers_ahead,
    stale_predictions,
)
from peerify_dagster.jobs import REFRESH_RUN_CONFIG, build_venue_job, predictions_job, venue_results_job
from peerify_dagster.partitions import prediction_key, prediction_partitions, venue_partitions
from peerify_dagster.resources.dagster_resources import (
    LakeResource,
    PredictionConfigurationsResource,
    VenueRegistryResource,
)
from peerify_dagster.resources.runs import build_in_progress


@dg.sensor(minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.RUNNING)
def venue_registry_sensor(context: dg.SensorEvaluationContext, venue_registry: VenueRegistryResource):
    """Adds venues newly listed in the registry as `source: snapshot` as partitions, without building them: a build
    calls the LLM roles (claims, labels), so only `snapshot_build_sensor`, off by default, builds them. A live venue
    (or one imported from a release) stays registered but is no venue partition until its build adds it, so it
    never shows as missing work: a crawl reaches OpenReview, so starting the UI never launches one. The sensor's
    tick names these venues; build one with `peerify build <venue>`, or add the partition in the UI's Materialize
    dialog."""
    known = set(context.instance.get_dynamic_partitions(venue_partitions.name))
    unknown = {key: venue for key, venue in load_registry(venue_registry.registry_file()).items() if key not in known}
    snapshots = [key for key, venue in unknown.items() if venue.source == SOURCE_SNAPSHOT]
    unbuilt = [key for key in unknown if key not in snapshots]
    waiting = (f"registered, not built (`peerify build <venue>` builds one): {', '.join(unbuilt)}" if unbuilt
               else "no new venues in the registry")
    if not snapshots:
        return dg.SkipReason(waiting)
    context.log.info(waiting)
    return dg.SensorResult(dynamic_partitions_requests=[venue_partitions.build_add_request(snapshots)])


def _benchmark_venues(context: dg.SensorEvaluationContext | dg.ScheduleEvaluationContext) -> list[str]:
    """The venue partitions but the upload venues of `peerify verify`, which it adds as partitions when it builds
    them: told by their key prefix, theirs alone (domain/venues.py)."""
    return [key for key in context.instance.get_dynamic_partitions(venue_partitions.name)
            if not key.startswith(UPLOAD_KEY_PREFIX)]


def _free_venues(context: dg.SensorEvaluationContext | dg.ScheduleEvaluationContext, lake: LakeResource,
                 venues: list[str]) -> list[str]:
    """The venues no `peerify build` is computing now (a sensor's run would compute the same partitions twice, and
    call the same models); the others are logged and left to a later tick."""
    free = []
    for venue in venues:
        if holder := build_in_progress(context.instance, lake.lake().root, venue):
            context.log.info(f"{venue}: not requested, {holder} is computing it")
        else:
            free.append(venue)
    return free


@dg.sensor(job=build_venue_job, minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.STOPPED)
def snapshot_build_sensor(context: dg.SensorEvaluationContext, venue_registry: VenueRegistryResource,
                          lake: LakeResource):
    """Builds, once, each registered `source: snapshot` venue partition that was never built (local files, no
    network; its claims and labels call the LLM roles, so it is off by default: turn it on under Automation in the
    UI, or `dagster sensor start snapshot_build_sensor`)."""
    registry = load_registry(venue_registry.registry_file())
    never_built = [key for key in _benchmark_venues(context)
                   if key in registry and registry[key].source == SOURCE_SNAPSHOT
                   and latest_materialisation(context.instance, PREDICTION_INPUTS, key) is None]
    requests = [dg.RunRequest(partition_key=key, run_key=f"register:{key}")
                for key in _free_venues(context, lake, never_built)]
    return requests or dg.SkipReason("every registered snapshot venue is built or being built")


@dg.schedule(job=build_venue_job, cron_schedule="0 3 * * 1", default_status=dg.DefaultScheduleStatus.STOPPED)
def venue_refresh_schedule(context: dg.ScheduleEvaluationContext, venue_registry: VenueRegistryResource,
                           lake: LakeResource):
    """Weekly refresh of every registered venue: re-lists submissions and re-fetches forums (new replies). Off by
    default (a rebuild calls the LLM roles for new claims); a venue a `peerify build` is computing is skipped."""
    known = set(_benchmark_venues(context))
    return [
        dg.RunRequest(partition_key=key, run_config=REFRESH_RUN_CONFIG,
                      run_key=f"refresh:{key}:{context.scheduled_execution_time:%Y-%m-%d}")
        for key in _free_venues(context, lake, [key for key in venue_registry.venue_keys() if key in known])
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
                          venue_registry: VenueRegistryResource, lake: LakeResource):
    """For every built venue (not an upload of `peerify verify`: no slices for its results, and its verifiers run
    when a person asks) adds a predictions partition for each configuration of configurations.yaml it uses
    that has none yet, and runs the predictions of each of its configurations that is new, changed or older than the
    venue's retrieval runs, one run per partition; once a venue's predictions are current, re-runs its results if a
    prediction is newer. Off by default (its runs call the verifiers); a venue a `peerify build` is computing is
    skipped."""
    configurations = prediction_configurations.load()
    releases = {key for key, venue in load_registry(venue_registry.registry_file()).items()
                if venue.source == SOURCE_RELEASE}
    chosen_by_venue = {venue: configurations.for_venue(venue, release=venue in releases)
                       for venue in _free_venues(context, lake, _benchmark_venues(context))
                       if latest_materialisation(context.instance, PREDICTION_INPUTS, venue)}
    known = set(context.instance.get_dynamic_partitions(prediction_partitions.name))
    if new := [key for venue, chosen in chosen_by_venue.items() for configuration in chosen
               if (key := prediction_key(venue, configuration.name)) not in known]:
        # the runs below need the partitions to exist first: they are requested at the next evaluation
        return dg.SensorResult(dynamic_partitions_requests=[prediction_partitions.build_add_request(new)])
    requests = []
    for venue, chosen in chosen_by_venue.items():
        stale = stale_predictions(context.instance, venue, chosen)
        inputs = latest_materialisation(context.instance, PREDICTION_INPUTS, venue)
        requests += [dg.RunRequest(job_name=predictions_job.name, partition_key=prediction_key(venue, name),
                                   run_key=f"predictions:{venue}:{name}:{configurations.get(name).content_hash()}:"
                                           f"{inputs.storage_id}") for name in stale]
        if stale:
            continue
        built = [latest_materialisation(context.instance, "predictions", prediction_key(venue, c.name)) for c in chosen]
        newest = max((record.storage_id for record in built if record), default=0)
        report = latest_materialisation(context.instance, "venue_report", venue)
        if report is None or report.storage_id < newest:
            requests.append(dg.RunRequest(job_name=venue_results_job.name, partition_key=venue,
                                          run_key=f"results:{venue}:{newest}"))
    return requests or dg.SkipReason("every built venue's predictions and results are current")


@dg.sensor(asset_selection=list(LEDGER_READERS.values()), minimum_interval_seconds=30,
           default_status=dg.DefaultSensorStatus.RUNNING)
def human_decisions_sensor(context: dg.SensorEvaluationContext, lake: LakeResource):
    """Re-materialises, per venue, the asset that reads a decisions ledger (canonical_labels: arbitration;
    human_audit: the audit) when that ledger has grown since the asset's last materialisation (metadata
    `ledger_lines`): a new human decision marks only that venue's asset stale. Assets never built are left to
    their build, and a venue a `peerify build` is computing to a later tick. It calls no model: on by default."""
    requests = [dg.RunRequest(partition_key=venue, asset_selection=[ahead.reader],
                              run_key=f"{ahead.reader.to_user_string()}:{venue}:{ahead.lines}")
                for venue in _free_venues(context, lake, _benchmark_venues(context))
                for ahead in ledgers_ahead(context.instance, lake.lake().root, venue)]
    return requests or dg.SkipReason("no decisions ledger has new lines")


SENSORS = [venue_registry_sensor, snapshot_build_sensor, catalog_refresh_sensor, human_decisions_sensor,
           configurations_sensor]
SCHEDULES = [venue_refresh_schedule]

"""What is built and what is stale, read from a Dagster instance: shared by the CLI, the sensors and the release."""

from collections.abc import Iterable

import dagster as dg

from peerify_dagster.domain.predictions import CONFIGURATION_HASH
from peerify_dagster.jobs import build_venue_job
from peerify_dagster.partitions import prediction_key, venue_partitions

PREDICTION_INPUTS = dg.AssetKey("retrieval_runs")  # rebuilt by every venue build: predictions older than it are stale


def latest_materialisation(instance: dg.DagsterInstance, asset: str | dg.AssetKey, partition: str | None):
    """The latest materialisation record of the asset (of one partition, unless `partition` is None), or None."""
    key = dg.AssetKey(asset) if isinstance(asset, str) else asset
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=key, asset_partitions=[partition] if partition else None), limit=1).records
    return records[0] if records else None


def stale_predictions(instance: dg.DagsterInstance, venue: str, configurations) -> list[str]:
    """The configurations of a built venue whose predictions partition is missing, was built from another
    definition (configuration hash), or is older than the venue's retrieval runs."""
    inputs = latest_materialisation(instance, PREDICTION_INPUTS, venue)
    if inputs is None:
        return []  # the venue is not built: its build runs its configurations
    stale = []
    for configuration in configurations:
        built = latest_materialisation(instance, "predictions", str(prediction_key(venue, configuration.name)))
        built_from = built and built.asset_materialization.metadata.get(CONFIGURATION_HASH)
        if built is None or built_from is None or built_from.value != configuration.content_hash() \
                or built.storage_id < inputs.storage_id:
            stale.append(configuration.name)
    return stale


def computed_from(defs: dg.Definitions, imported: Iterable[str]) -> list[dg.AssetKey]:
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


def upstream_of(graph, asset: str) -> list[tuple[str, bool]]:
    """The materialisable assets upstream of `asset` that are partitioned by venue or not at all, by name, each with
    whether it is venue-partitioned (venue x configuration assets are left out: their partitions are per run)."""
    upstream = []
    for key in sorted(graph.get_ancestor_asset_keys(dg.AssetKey(asset)), key=lambda k: k.to_user_string()):
        node = graph.get(key)
        if node.is_materializable and node.partitions_def in (None, venue_partitions):
            upstream.append((key.to_user_string(), node.partitions_def is not None))
    return upstream

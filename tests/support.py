"""Shared test helpers: a venue registry in a temporary folder and in-process materialisation into a temporary lake."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from peerify_dagster.definitions import build_resources, defs
from peerify_dagster.partitions import venue_partitions
from peerify_dagster.resources.dagster_resources import OpenReviewResource, VenueRegistryResource
from peerify_dagster.testing.cli import SAMPLE, SAMPLE_DIR, sample_registry, write_registry  # noqa: F401 - re-exported

ALL_ASSETS = list(defs.assets)


def materialise(key: str, registry: Path, lake_root: Path, instance: dg.DagsterInstance,
                selection: dg.AssetSelection | None = None, openreview: OpenReviewResource | None = None,
                refetch: bool = False) -> dg.ExecuteInProcessResult:
    """Materialise the selected assets (default: the whole graph) for one venue partition."""
    if not instance.has_dynamic_partition(venue_partitions.name, key):
        instance.add_dynamic_partitions(venue_partitions.name, [key])
    resources = build_resources(str(lake_root), venue_registry=VenueRegistryResource(path=str(registry)),
                                openreview=openreview or OpenReviewResource())
    return dg.materialize(
        ALL_ASSETS, selection=selection, instance=instance, partition_key=key, resources=resources,
        raise_on_error=False, run_config={"ops": {"raw_openreview_notes": {"config": {"refetch": refetch}}}},
    )


def materialization_metadata(result: dg.ExecuteInProcessResult, asset: str, key: str) -> list:
    return [e.event_specific_data.materialization.metadata[key].value
            for e in result.all_events if e.is_step_materialization and e.asset_key == dg.AssetKey(asset)]

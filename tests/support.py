"""Shared test helpers: a venue registry in a temporary folder and in-process materialisation into a temporary lake."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from peerify_dagster.definitions import build_resources, defs
from peerify_dagster.jobs import build_venue_job
from peerify_dagster.partitions import add_venue_partitions, prediction_key
from peerify_dagster.resources.dagster_resources import OpenReviewResource, VenueRegistryResource
from tests.fakes.cli import (  # noqa: F401 - re-exported
    SAMPLE,
    SAMPLE_DIR,
    SAMPLE_RECORDING,
    sample_registry,
    write_registry,
)

ALL_ASSETS = list(defs.assets)
# The venue-partitioned graph up to the predictions' inputs (`peerify build`'s first run); a materialisation runs
# one partitions definition, so the predictions (venue x configuration) and what reads them run after it.
VENUE_GRAPH = dg.AssetSelection.assets(*defs.resolve_job_def(build_venue_job.name).asset_layer.selected_asset_keys)


def materialise(key: str, registry: Path, lake_root: Path, instance: dg.DagsterInstance,
                selection: dg.AssetSelection | None = None, openreview: OpenReviewResource | None = None,
                refetch: bool = False) -> dg.ExecuteInProcessResult:
    """Materialise the selected assets (default: the venue graph up to the predictions' inputs) for one venue
    partition."""
    add_venue_partitions(instance, key, [])
    resources = build_resources(str(lake_root), venue_registry=VenueRegistryResource(path=str(registry)),
                                openreview=openreview or OpenReviewResource())
    return dg.materialize(
        ALL_ASSETS, selection=selection or VENUE_GRAPH, instance=instance, partition_key=key, resources=resources,
        raise_on_error=False,
        # Only when asked: a selection without raw_openreview_notes refuses config for it.
        run_config={"ops": {"raw_openreview_notes": {"config": {"refetch": True}}}} if refetch else None,
    )


def materialization_metadata(result: dg.ExecuteInProcessResult, asset: str, key: str) -> list:
    return [e.event_specific_data.materialization.metadata[key].value
            for e in result.all_events if e.is_step_materialization and e.asset_key == dg.AssetKey(asset)]


def materialise_predictions(key: str, configurations: list[str], registry: Path, lake_root: Path,
                            instance: dg.DagsterInstance) -> list[dg.ExecuteInProcessResult]:
    """After the venue graph: the predictions of each configuration (PEERIFY_CONFIGURATIONS or configurations.yaml),
    one run per venue x configuration partition, then the venue's results (the report), as `peerify build` runs
    them."""
    add_venue_partitions(instance, key, configurations)
    resources = build_resources(str(lake_root), venue_registry=VenueRegistryResource(path=str(registry)))
    results = [dg.materialize(ALL_ASSETS, selection=["predictions"], instance=instance,
                              partition_key=prediction_key(key, name), resources=resources, raise_on_error=False)
               for name in configurations]
    results.append(dg.materialize(ALL_ASSETS, selection=dg.AssetSelection.assets("predictions").downstream()
                                  - dg.AssetSelection.assets("predictions"), instance=instance, partition_key=key,
                                  resources=resources, raise_on_error=False))
    return results

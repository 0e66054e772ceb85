"""Shared test helpers: a venue registry in a temporary folder and in-process materialisation into a temporary lake."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg

from peerify_dagster.definitions import build_resources, defs
from peerify_dagster.partitions import venue_partitions
from peerify_dagster.resources.dagster_resources import OpenReviewResource, VenueRegistryResource

SAMPLE_DIR = Path(__file__).resolve().parents[1] / "peerify_dagster" / "sample_venue"
SAMPLE = SAMPLE_DIR / "snapshot"
ALL_ASSETS = list(defs.assets)


def write_registry(folder: Path, key: str, **entry) -> Path:
    """A one-venue `venues.yaml` in `folder` (values JSON-quoted, which YAML reads back unchanged)."""
    path = folder / "venues.yaml"
    lines = ["venues:", f"  {key}:"] + [f"    {k}: {json.dumps(v)}" for k, v in entry.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def sample_registry(folder: Path, snapshot: Path = SAMPLE, **extra) -> Path:
    """The sample venue as a snapshot venue, with its answer key, replayed from `snapshot`."""
    return write_registry(folder, "sample", openreview_id="PeerifySample.cc/2026/Workshop", source="snapshot",
                          snapshot=str(snapshot), gold_claims=str(SAMPLE_DIR / "claim_key.yaml"), seed=20260110,
                          **extra)


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

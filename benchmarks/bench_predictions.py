"""Predictions on the sample venue: calls, tokens and seconds per configuration, and the time to add one configuration
to an already built venue.

Builds the sample's graph up to the predictions' inputs in a temporary lake and Dagster instance (the claim stage
answered from the shipped recording), prints `--estimate`'s table for the sample's configurations, then runs the
predictions of each configuration named with `--run` (the offline profile: SmolLM2 on this machine's CPU; calls the
recording holds are answered from it), one run per partition as `peerify build` does, and reports per configuration
its calls made, ledger hits, tokens and seconds. The last `--run` configuration is the "added" one: the venue and the
other configurations are built before it, so its seconds are the time to add it.

    .venv/bin/python benchmarks/bench_predictions.py --run oracle
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

import dagster as dg  # noqa: E402

from peerify_dagster import paths  # noqa: E402
from peerify_dagster.definitions import build_resources, defs  # noqa: E402
from peerify_dagster.domain.venues import load_registry  # noqa: E402
from peerify_dagster.estimate import estimate_build, format_estimate  # noqa: E402
from peerify_dagster.partitions import add_venue_partitions, prediction_key, venue_partitions  # noqa: E402
from peerify_dagster.resources.dagster_resources import (  # noqa: E402
    PredictionConfigurationsResource,
    VenueRegistryResource,
)
from peerify_dagster.resources.lake import Lake  # noqa: E402
from peerify_dagster.resources.llm_gateway import LLMGateway  # noqa: E402

VENUE = "sample"
INPUTS = dg.AssetSelection.assets("retrieval_queries", "retrieval_runs", "chunks").upstream() \
    .required_multi_asset_neighbors()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", action="append", default=[], help="configuration to run (repeatable, in order)")
    arguments = parser.parse_args()
    registry_file = Path(paths.registry_path())
    sample = load_registry(registry_file)[VENUE]
    recording = registry_file.parent / sample.llm_recording
    with tempfile.TemporaryDirectory(prefix="peerify-bench-predictions-") as scratch:
        lake = Lake(Path(scratch) / "lake")
        instance = dg.DagsterInstance.ephemeral()
        instance.add_dynamic_partitions(venue_partitions.name, [VENUE])
        registry = VenueRegistryResource(path=str(registry_file))
        resources = build_resources(str(lake.root), venue_registry=registry)
        from peerify_dagster.resources.llm_recording import install_recording

        install_recording(lake.root, recording)
        started = time.monotonic()
        venue = dg.materialize(list(defs.assets), selection=INPUTS, instance=instance, partition_key=VENUE,
                               resources=resources, raise_on_error=False)
        print(f"venue graph up to the predictions' inputs: {time.monotonic() - started:.1f} s, success {venue.success}")
        configurations = PredictionConfigurationsResource().load()
        chosen = configurations.for_venue(VENUE)
        estimate = estimate_build(lake, sample, registry.snapshot_dir(sample, lake), chosen, LLMGateway(lake.root))
        print(format_estimate(estimate, VENUE))
        add_venue_partitions(instance, VENUE, list(configurations.configurations))
        print("\n| configuration | claims | calls made | ledger hits | tokens in / out | seconds |")
        print("|---|---|---|---|---|---|")
        for name in arguments.run:
            started = time.monotonic()
            run = dg.materialize(list(defs.assets), selection=["predictions"], instance=instance,
                                 partition_key=prediction_key(VENUE, name), resources=resources, raise_on_error=False)
            seconds = time.monotonic() - started
            [meta] = [e.event_specific_data.materialization.metadata for e in run.all_events
                      if e.is_step_materialization]
            print(f"| {name} | {meta['claims'].value} | {meta['calls_made'].value} | {meta['cache_hits'].value} | "
                  f"{meta['tokens_in'].value} / {meta['tokens_out'].value} | {seconds:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Venue-scale pipeline throughput: the `build_venue` job on a synthetic snapshot venue of N papers.

The venue clones the sample venue's forums and PDFs under new ids (benchmarks/synthetic_venue.py), so
parsing and chunking do real work per paper, while the embedding cache (keyed by text hash) makes the
cloned chunk texts cost one embedding each: embedding throughput itself is measured by
bench_retrieval.py. Reports per-stage seconds and rates, and the peak RSS of the process.

    .venv/bin/python benchmarks/bench_venue.py --papers 500
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import dagster as dg  # noqa: E402

from peerify_dagster.definitions import build_resources, build_venue_job, defs  # noqa: E402
from peerify_dagster.partitions import venue_partitions  # noqa: E402
from peerify_dagster.resources.dagster_resources import VenueRegistryResource  # noqa: E402
from peerify_dagster.resources.lake import Lake  # noqa: E402
from synthetic_venue import synthetic_venue  # noqa: E402


def step_seconds(instance: dg.DagsterInstance, run_id: str) -> dict[str, float]:
    starts, seconds = {}, {}
    for record in instance.all_logs(run_id):
        event = record.dagster_event
        if event is None:
            continue
        if event.event_type_value == "STEP_START":
            starts[event.step_key] = record.timestamp
        elif event.event_type_value == "STEP_SUCCESS":
            seconds[event.step_key] = record.timestamp - starts[event.step_key]
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--papers", type=int, default=500)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        snapshot = Path(tmp) / "snapshot"
        notes = synthetic_venue(snapshot, args.papers)
        registry = Path(tmp) / "venues.yaml"
        registry.write_text(f"venues:\n  synthetic:\n    source: snapshot\n    snapshot: {json.dumps(str(snapshot))}\n    seed: 1\n")
        instance = dg.DagsterInstance.ephemeral()
        instance.add_dynamic_partitions(venue_partitions.name, ["synthetic"])
        job = dg.Definitions(
            assets=list(defs.assets), jobs=[build_venue_job],
            resources=build_resources(str(Path(tmp) / "lake"), venue_registry=VenueRegistryResource(path=str(registry))),
        ).resolve_job_def("build_venue")
        result = job.execute_in_process(partition_key="synthetic", instance=instance,
                                        run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}})
        lake = Lake(Path(tmp) / "lake")
        pages = int(lake.read_table("manuscript_pdfs", "synthetic")["pages"].sum())
        chunks = lake.read_table("chunks", "synthetic").height
        seconds = step_seconds(instance, result.run_id)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"papers: {args.papers}, notes: {notes}, pages: {pages}, chunks: {chunks}, run success: {result.success}\n")
    print("| stage | seconds | throughput |")
    print("|---|---|---|")
    rates = {
        "raw_openreview_notes": (notes, "notes/s"), "forum_tables": (notes, "notes/s"),
        "manuscript_pdfs": (args.papers, "papers/s"), "parsed_manuscripts": (pages, "pages/s"),
        "chunks": (chunks, "chunks/s"), "chunk_embeddings": (chunks, "chunks/s (cache-deduplicated)"),
    }
    for step, secs in sorted(seconds.items(), key=lambda kv: -kv[1]):
        count, unit = rates.get(step, (None, ""))
        rate = f"{count / secs:.1f} {unit}" if count and secs > 0 else ""
        print(f"| {step} | {secs:.2f} | {rate} |")
    print(f"\npeak RSS of the whole run: {peak:.0f} MiB")


if __name__ == "__main__":
    main()

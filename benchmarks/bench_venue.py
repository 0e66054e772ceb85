"""Venue-scale pipeline throughput and memory: materialisations of a synthetic snapshot venue of N papers.

The venue clones the sample venue's forums and PDFs under new ids (tests/fakes/synthetic_venue.py), so
parsing and chunking do real work per paper, while the embedding cache (keyed by text hash) makes the cloned chunk
texts cost one embedding each: embedding throughput itself is measured by bench_retrieval.py.

`--stages all` runs the whole `build_venue` job; `--stages ingestion` only paper_sample, raw_openreview_notes /
forum_crawl_log and forum_tables (every submission: sample_size null), the stages that read every note of the
venue. Each size runs in a child process of its own, so its peak RSS is its own (a 500-paper run never inherits a
20,000-paper run's peak); the venue is generated and removed by this parent. Reports per-stage seconds and rates,
forums/s and each run's peak RSS against the first size's.

    .venv/bin/python benchmarks/bench_venue.py --papers 500
    .venv/bin/python benchmarks/bench_venue.py --stages ingestion --papers 500 --papers 20000
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

import dagster as dg  # noqa: E402
from bench_crawl import peak_rss_mib  # noqa: E402

from peerify_dagster.definitions import build_resources, defs  # noqa: E402
from peerify_dagster.jobs import build_venue_job  # noqa: E402
from peerify_dagster.partitions import venue_partitions  # noqa: E402
from peerify_dagster.resources.dagster_resources import VenueRegistryResource  # noqa: E402
from peerify_dagster.resources.lake import Lake  # noqa: E402
from tests.fakes.synthetic_venue import synthetic_venue  # noqa: E402

INGESTION_STAGES = dg.AssetSelection.assets("paper_sample", "raw_openreview_notes", "submissions") \
    .required_multi_asset_neighbors()


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


def run_one(folder: Path, stages: str) -> dict:
    """Materialise the venue in `folder` (snapshot + registry made by the parent); what a parent prints."""
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(venue_partitions.name, ["synthetic"])
    resources = build_resources(str(folder / "lake"),
                                venue_registry=VenueRegistryResource(path=str(folder / "venues.yaml")))
    quiet = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
    started = time.perf_counter()
    if stages == "all":
        job = dg.Definitions(assets=list(defs.assets), jobs=[build_venue_job],
                             resources=resources).resolve_job_def("build_venue")
        result = job.execute_in_process(partition_key="synthetic", instance=instance, run_config=quiet)
    else:
        result = dg.materialize(list(defs.assets), selection=INGESTION_STAGES, instance=instance,
                                partition_key="synthetic", resources=resources, run_config=quiet)
    seconds = time.perf_counter() - started
    lake = Lake(folder / "lake")
    counts = {"forums": lake.read_table("paper_sample", "synthetic").height,
              "notes": lake.open_table("raw_openreview_notes", "synthetic").metadata.num_rows}
    if stages == "all":
        counts["pages"] = int(lake.read_table("manuscript_pdfs", "synthetic")["pages"].sum())
        counts["chunks"] = lake.read_table("chunks", "synthetic").height
    return {"success": result.success, "seconds": seconds, "steps": step_seconds(instance, result.run_id),
            "peak_rss_mib": peak_rss_mib(), **counts}


def measure(papers: int, stages: str) -> dict:
    """One size in a child process of its own, on a venue this parent generates (and removes)."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        synthetic_venue(folder / "snapshot", papers)
        (folder / "venues.yaml").write_text(
            f"venues:\n  synthetic:\n    source: snapshot\n    snapshot: {json.dumps(str(folder / 'snapshot'))}\n"
            "    seed: 1\n    sample_size: null\n")
        child = subprocess.run([sys.executable, __file__, "--run-in", tmp, "--stages", stages],
                               capture_output=True, text=True)
    if child.returncode:
        raise SystemExit(f"the {papers}-paper run failed:\n{child.stderr[-3000:]}")
    return json.loads(child.stdout.strip().splitlines()[-1])


def report(papers: int, stages: str, run: dict) -> None:
    print(f"\npapers: {papers}, forums: {run['forums']}, notes: {run['notes']}, stages: {stages}, "
          f"run success: {run['success']}, {run['seconds']:.1f} s, peak RSS {run['peak_rss_mib']:.0f} MiB\n")
    rates = {
        "paper_sample": (run["forums"], "forums/s"), "raw_openreview_notes": (run["forums"], "forums/s"),
        "forum_tables": (run["forums"], "forums/s"), "manuscript_pdfs": (papers, "papers/s"),
        "parsed_manuscripts": (run.get("pages"), "pages/s"), "chunks": (run.get("chunks"), "chunks/s"),
        "chunk_embeddings": (run.get("chunks"), "chunks/s (cache-deduplicated)"),
    }
    print("| stage | seconds | throughput |")
    print("|---|---|---|")
    for step, secs in sorted(run["steps"].items(), key=lambda kv: -kv[1]):
        count, unit = rates.get(step, (None, ""))
        rate = f"{count / secs:.1f} {unit}" if count and secs > 0 else ""
        print(f"| {step} | {secs:.2f} | {rate} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--papers", type=int, action="append", help="venue size; repeat for several (default 500)")
    parser.add_argument("--stages", choices=["all", "ingestion"], default="all")
    parser.add_argument("--run-in", help=argparse.SUPPRESS)  # the child: materialise the venue in this folder
    args = parser.parse_args()
    if args.run_in:
        print(json.dumps(run_one(Path(args.run_in), args.stages)))
        return
    runs = {papers: measure(papers, args.stages) for papers in args.papers or [500]}
    for papers, run in runs.items():
        report(papers, args.stages, run)
    first = next(iter(runs.values()))
    print("\n| forums | notes | seconds | forums/s | peak RSS (MiB) | RSS vs first size |")
    print("|---|---|---|---|---|---|")
    for run in runs.values():
        print(f"| {run['forums']} | {run['notes']} | {run['seconds']:.1f} | {run['forums'] / run['seconds']:.1f} "
              f"| {run['peak_rss_mib']:.0f} | {run['peak_rss_mib'] / first['peak_rss_mib']:.2f}x |")


if __name__ == "__main__":
    main()

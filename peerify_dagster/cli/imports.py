"""`peerify import-release SOURCE`: a published release's JSONL files (B1, B3, B4, B6) as a venue of its own.

SOURCE is the release's folder or its `s3://` location (copied down to a temporary folder through the store, then
read as a folder); the venue's tables go to the lake, a folder or an S3 lake alike.

The release is validated first: any malformed line, missing field or unknown label of any file is printed as
`file:line: reason` (all of them) and nothing is written (exit code 2). Otherwise the venue is registered in
venues.yaml (source `release`) and its benchmark_slices, chunks, retrieval_queries, claim_threads and release_rows
partitions are written to the lake with the standard schemas, recorded in the Dagster instance as runless
materialisations (lineage: the release folder and its files' sha256), and the slice gates are run on the imported
slices and recorded as check evaluations; a failing gate is reported, not fatal. `peerify build VENUE` then computes
what follows from those tables (embeddings, retrieval, predictions, metrics, report).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

from peerify_dagster import paths
from peerify_dagster.cli.common import EXIT_USAGE, say
from peerify_dagster.cli.home import open_home
from peerify_dagster.domain import release_import as ri
from peerify_dagster.domain.venues import SOURCE_RELEASE, RegistryError, Venue, add_venue, load_registry
from peerify_dagster.resources.lake import Lake
from peerify_dagster.resources.store import Location, local_folder, location_of

if TYPE_CHECKING:
    import dagster as dg

EXIT_REFUSED = EXIT_USAGE  # the release has problems, or the venue exists and --replace was not given: nothing written


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "import-release", help="import a published release (B1, B3, B4, B6 JSONL) as a venue: its slices, passages, "
                               "queries and threads; then `peerify build VENUE` evaluates the configured verifiers")
    parser.add_argument("source", metavar="SOURCE",
                        help="the release folder (B1_golden_supported.jsonl, ...), or its s3:// location")
    parser.add_argument("--venue", help="venue key (default: release-<folder name>)")
    parser.add_argument("--sample-per-slice", type=int, metavar="N",
                        help="keep a seeded sample of at most N claims of each slice (a quick evaluation)")
    parser.add_argument("--seed", type=int, default=0, help="seed of --sample-per-slice (default 0)")
    parser.add_argument("--replace", action="store_true", help="replace the venue's data from an earlier import")
    parser.set_defaults(func=cmd_import_release)


def table_schemas() -> dict[str, dict[str, pl.DataType]]:
    """The standard schema of each imported table (as the assets that compute them for crawled venues write it)."""
    from peerify_dagster.domain.chunking import CHUNK_SCHEMA
    from peerify_dagster.domain.labelling import CLAIM_THREAD_SCHEMA
    from peerify_dagster.domain.retrieval import QUERY_SCHEMA
    from peerify_dagster.domain.slices import SLICE_SCHEMA

    return {"benchmark_slices": SLICE_SCHEMA, "chunks": CHUNK_SCHEMA, "retrieval_queries": QUERY_SCHEMA,
            "claim_threads": CLAIM_THREAD_SCHEMA, "release_rows": ri.RELEASE_ROW_SCHEMA}


def cmd_import_release(args: argparse.Namespace) -> int:
    source = location_of(args.source)
    source = source.resolve() if isinstance(source, Path) else source  # named absolutely in the lineage
    venue_key = args.venue or f"release-{source.name}"
    if args.sample_per_slice is not None and args.sample_per_slice < 1:
        say("--sample-per-slice must be a positive number of claims")
        return EXIT_REFUSED
    if not source.is_dir():
        say(f"not imported: release folder {source} does not exist")
        return EXIT_REFUSED
    try:
        with local_folder(source) as folder:
            imported = ri.import_release(folder, venue_key, args.sample_per_slice, args.seed)
    except ri.ReleaseImportError as error:
        say(f"not imported: {len(error.problems)} problem(s) in {source}; nothing was written")
        for problem in error.problems:
            say(f"  {problem}")
        return EXIT_REFUSED
    registry_path, lake = Path(paths.registry_path()), Lake(paths.lake_root())
    if refusal := _refusal(registry_path, lake, venue_key, args.replace):
        say(f"not imported: {refusal}")
        return EXIT_REFUSED

    # The Dagster home first: a home that cannot be opened stops the import before anything is written.
    instance = open_home(f"`peerify import-release` (pid {os.getpid()})")
    schemas = table_schemas()
    frames = {table: pl.DataFrame(rows, schema=schemas[table]) for table, rows in imported.tables.items()}
    written = {table: lake.write_table(table, venue_key, frame) for table, frame in frames.items()}
    add_venue(registry_path, Venue(key=venue_key, openreview_id=venue_key, source=SOURCE_RELEASE, seed=args.seed,
                                   release=_registered_source(source, registry_path)), replace=args.replace)
    gates = _record_in_dagster(instance, imported, frames, written, source)
    _print_summary(imported, frames, gates, registry_path)
    return 0


def _registered_source(source: Location, registry_path: Path) -> str:
    """The release as venues.yaml names it: an S3 location as its URL, a folder as the other registry paths, relative
    to the registry file (no machine path in the repository)."""
    if not isinstance(source, Path):
        return str(source)
    try:
        return os.path.relpath(source, registry_path.resolve().parent)
    except ValueError:  # another drive
        return str(source)


def _refusal(registry_path: Path, lake: Lake, venue_key: str, replace: bool) -> str | None:
    """Why the import may not write the venue (None: it may)."""
    try:
        existing = load_registry(registry_path).get(venue_key)
    except RegistryError as error:
        return str(error)
    if existing is not None and existing.source != SOURCE_RELEASE:
        return f"venue {venue_key!r} is a {existing.source} venue in {registry_path}; choose another --venue"
    present = [table for table in ri.IMPORTED_TABLES if lake.table_path(table, venue_key).exists()]
    if (existing is not None or present) and not replace:
        return (f"venue {venue_key!r} was already imported ({'registered' if existing else 'not registered'}; "
                f"tables {present or 'none'} in {lake.root}); --replace replaces its data")
    return None


def _record_in_dagster(instance: dg.DagsterInstance, imported: ri.ImportedRelease, frames: dict[str, pl.DataFrame],
                       written: dict[str, Location], source: Location) -> list[tuple[str, bool, bool, int]]:
    """Each written partition as a runless materialisation, and the slice gates on the imported slices as runless
    check evaluations; returns (gate, blocking, passed, failing rows) per gate."""
    import dagster as dg

    from peerify_dagster.domain import slices as rules
    from peerify_dagster.partitions import venue_partitions
    from peerify_dagster.quality.expectations import gate
    from peerify_dagster.quality.slice_gates import GATES, gate_expectations
    from peerify_dagster.resources.dagster_resources import markdown_preview

    venue = imported.venue
    if not instance.has_dynamic_partition(venue_partitions.name, venue):
        instance.add_dynamic_partitions(venue_partitions.name, [venue])
    lineage = {"imported_from": dg.MetadataValue.path(str(source)),
               "file_sha256": dg.MetadataValue.json(imported.file_sha256),
               "label_deviations": dg.MetadataValue.json(imported.deviations),
               "sample": dg.MetadataValue.json(imported.sample), "notes": dg.MetadataValue.json(imported.notes)}
    for table, frame in frames.items():
        instance.report_runless_asset_event(dg.AssetMaterialization(
            asset_key=table, partition=venue, description=f"imported from the release {source.name}",
            metadata={**lineage, "rows": frame.height, "dagster/row_count": frame.height,
                      "path": dg.MetadataValue.path(str(written[table])),
                      "preview": dg.MetadataValue.md(markdown_preview(frame))}))
    slices = frames["benchmark_slices"]
    expects = gate_expectations(slices, rules.label_distribution(slices), rules.SliceConfig())
    outcomes = []
    for name, blocking, description in GATES:
        result = gate(name, expects[name], blocking)
        # Not tied to the partition: Dagster stores one runless evaluation per check and partition, so a re-import
        # (--replace) could not record its own; the venue is in the metadata.
        instance.report_runless_asset_event(dg.AssetCheckEvaluation(
            asset_key=dg.AssetKey("benchmark_slices"), check_name=name, passed=result.passed,
            metadata={**result.metadata, "venue": venue}, severity=result.severity,
            description=f"{description} (release venue {venue}, at import)", blocking=blocking))
        failing = result.metadata["failing_count"]
        outcomes.append((name, blocking, result.passed, getattr(failing, "value", failing)))
    return outcomes


def _print_summary(imported: ri.ImportedRelease, frames: dict[str, pl.DataFrame],
                   gates: list[tuple[str, bool, bool, int]], registry_path: Path) -> None:
    venue = imported.venue
    print(f"imported {venue} (registered in {registry_path}, source release)")
    print("tables: " + ", ".join(f"{table} {frame.height}" for table, frame in frames.items()))
    print("slices: " + ", ".join(f"{name} {size}" for name, size in imported.slice_sizes().items()))
    if imported.sample:
        print(f"sample: at most {imported.sample['per_slice']} claims per slice, seed {imported.sample['seed']}")
    print("label deviations (raw -> mapped, kept in release_rows.labels):"
          + ("" if imported.deviations else " none"))
    for where, counts in imported.deviations.items():
        print(f"  {where}: " + ", ".join(f"{change} ({n})" for change, n in counts.items()))
    for note in imported.notes:
        print(f"note: {note}")
    for name, blocking, passed, failing in gates:
        verdict = "passed" if passed else f"FAILED ({failing} rows; {'blocking' if blocking else 'warning'})"
        print(f"gate {name}: {verdict}")
    print(f"next: peerify build {venue}")

"""`peerify sql` (read-only statements against the DuckDB catalog) and `peerify venues list|add` (the registry)."""

from __future__ import annotations

import argparse
from pathlib import Path

import duckdb

from peerify_dagster import paths
from peerify_dagster.cli.common import EXIT_USAGE, format_table, registered_venues, say
from peerify_dagster.domain.venues import SOURCE_RELEASE, SOURCE_UPLOAD, SOURCES, RegistryError, Venue, add_venue
from peerify_dagster.resources.lake import CatalogBusyError, Lake, WriteStatementError


def register(subparsers: argparse._SubParsersAction) -> None:
    sql = subparsers.add_parser("sql", help="run read-only statements against the DuckDB catalog")
    sql.add_argument("query")
    sql.set_defaults(func=cmd_sql)

    venues = subparsers.add_parser("venues", help="the venue registry")
    venues_sub = venues.add_subparsers(dest="venues_command", required=True)
    venues_sub.add_parser("list").set_defaults(func=cmd_venues_list)
    add = venues_sub.add_parser("add", help="register a venue")
    add.add_argument("venue_id", help="partition key, normally the OpenReview venue id")
    add.add_argument("--openreview-id", help="OpenReview venue id when it differs from the key")
    add.add_argument("--source", choices=[s for s in SOURCES if s != SOURCE_RELEASE], default="api",
                     help="api or snapshot (a release venue is registered by `peerify import-release`)")
    add.add_argument("--seed", type=int, default=0)
    add.add_argument("--sample-size", type=int, default=None)
    add.add_argument("--api-url", default="https://api2.openreview.net")
    add.add_argument("--snapshot", help="snapshot folder (relative to venues.yaml) for --source snapshot")
    add.add_argument("--api-version", type=int, choices=(1, 2), default=None,
                     help="OpenReview API version (default: detected at the first build: before 2023 -> 1, else "
                          "probed)")
    add.set_defaults(func=cmd_venues_add)


def cmd_sql(args: argparse.Namespace) -> int:
    lake = Lake(paths.lake_root())
    # A process holding the catalog keeps it as it is (its glob views still see new partitions); the query runs.
    for line in lake.refresh_catalog(wait_s=0).problems(with_not_refreshed=False):
        say(line)
    try:
        columns, rows = lake.query(args.query, refresh=False)
    except WriteStatementError as exc:
        say(str(exc))
        return EXIT_USAGE
    except CatalogBusyError as exc:
        say(f"query not run: {exc}")
        return 1
    except duckdb.Error as exc:
        say(f"query failed: {exc}")
        return 1
    print(format_table(columns, rows))
    return 0


def cmd_venues_list(args: argparse.Namespace) -> int:
    registry = registered_venues()
    rows = [(v.key, v.openreview_id, v.source, v.seed, v.sample_size, v.release or v.snapshot,
             "lake (peerify verify)" if v.source == SOURCE_UPLOAD else "repository")
            for v in registry.values()]
    print(format_table(["venue", "openreview_id", "source", "seed", "sample_size", "folder", "registered in"], rows))
    if uploads := sum(v.source == SOURCE_UPLOAD for v in registry.values()):
        print(f"\n{uploads} upload venue{'s' * (uploads != 1)} of `peerify verify` (one paper and its reviews each, "
              "built up to its predictions; no labels, slices or report), registered in "
              f"{paths.upload_registry_path()}")
    return 0


def cmd_venues_add(args: argparse.Namespace) -> int:
    venue = Venue(
        key=args.venue_id, openreview_id=args.openreview_id or args.venue_id, source=args.source, seed=args.seed,
        sample_size=args.sample_size, api_url=args.api_url, snapshot=args.snapshot, api_version=args.api_version,
    )
    try:
        add_venue(Path(paths.registry_path()), venue)
    except RegistryError as exc:
        say(f"not added: {exc}")
        return EXIT_USAGE
    print(f"registered {venue.key}; the venue sensor adds it as a partition, or run `peerify build {venue.key}`")
    return 0

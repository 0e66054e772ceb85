"""The `peerify` command: build venues, manage the venue registry, and query the lake's catalog."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import duckdb

from peerify_dagster.domain.venues import SOURCES, RegistryError, Venue, add_venue, load_registry
from peerify_dagster.resources.dagster_resources import DEFAULT_LAKE, DEFAULT_REGISTRY
from peerify_dagster.resources.lake import Lake

# The LLM roles the asset graph calls today (verification); checked before a build starts.
LLM_ROLES_IN_GRAPH = ["verifiers"]


def _format_table(columns: list[str], rows: list[tuple], max_width: int = 80) -> str:
    cells = [[("NULL" if v is None else str(v)).replace("\n", " ")[:max_width] for v in row] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    line = lambda values: "  ".join(v.ljust(w) for v, w in zip(values, widths))  # noqa: E731
    return "\n".join([line(columns), line(["-" * w for w in widths])] + [line(r) for r in cells])


def venue_summary(lake: Lake, venue: str) -> tuple[list[str], list[tuple]]:
    """Row counts of every catalog table for one venue; tables shared by all venues (the LLM ledger) in total."""
    views = lake.refresh_catalog()
    if not views:
        return ["table", "rows"], []
    _, with_venue = lake.query(
        "select distinct table_name from information_schema.columns where column_name = 'venue'", refresh=False
    )
    per_venue = {name for (name,) in with_venue}
    union = " union all ".join(
        f"select '{v}' as \"table\", count(*) filter (where venue = $venue) as rows from \"{v}\"" if v in per_venue
        else f"select '{v} (all venues)', count(*) from \"{v}\""
        for v in views
    )
    return lake.query(f"select * from ({union}) order by 1", {"venue": venue}, refresh=False)


def cmd_build(args: argparse.Namespace) -> int:
    import dagster as dg

    from peerify_dagster.definitions import build_venue_job, defs
    from peerify_dagster.partitions import venue_partitions

    registry = load_registry(Path(DEFAULT_REGISTRY))
    if args.venue not in registry:
        print(f"venue {args.venue!r} is not registered; add it with `peerify venues add {args.venue}`", file=sys.stderr)
        return 2
    from peerify_dagster.resources.llm_gateway import LLMGateway, PreflightError

    try:  # missing API keys, packages or model files are reported before any work starts
        LLMGateway(DEFAULT_LAKE).preflight(LLM_ROLES_IN_GRAPH)
    except PreflightError as exc:
        print(f"cannot build {args.venue}: {exc}", file=sys.stderr)
        return 2
    instance = dg.DagsterInstance.get() if os.environ.get("DAGSTER_HOME") else dg.DagsterInstance.ephemeral()
    if not instance.has_dynamic_partition(venue_partitions.name, args.venue):
        instance.add_dynamic_partitions(venue_partitions.name, [args.venue])
    run_config = {
        "ops": {"raw_openreview_notes": {"config": {"refetch": args.refetch}}},
        "loggers": {"console": {"config": {"log_level": "INFO"}}},
    }
    job = defs.resolve_job_def(build_venue_job.name)
    result = job.execute_in_process(
        partition_key=args.venue, instance=instance, run_config=run_config, raise_on_error=False
    )
    lake = Lake(DEFAULT_LAKE)
    columns, rows = venue_summary(lake, args.venue)
    print(f"\nVenue {args.venue}: tables in {lake.root} (catalog {lake.catalog_path.name})\n")
    print(_format_table(columns, rows))
    checks = result.get_asset_check_evaluations()
    failed = [f"{c.asset_key.to_user_string()}:{c.check_name}" for c in checks if not c.passed]
    print(f"\nasset checks: {len(checks) - len(failed)} passed, {len(failed)} failed {failed if failed else ''}")
    if not result.success:
        print("the run failed; see the log above", file=sys.stderr)
        return 1
    return 0


def cmd_sql(args: argparse.Namespace) -> int:
    try:
        columns, rows = Lake(DEFAULT_LAKE).query(args.query)
    except duckdb.Error as exc:
        print(f"query failed: {exc}", file=sys.stderr)
        return 1
    print(_format_table(columns, rows))
    return 0


def cmd_venues_list(args: argparse.Namespace) -> int:
    registry = load_registry(Path(DEFAULT_REGISTRY))
    rows = [(v.key, v.openreview_id, v.source, v.seed, v.sample_size) for v in registry.values()]
    print(_format_table(["venue", "openreview_id", "source", "seed", "sample_size"], rows))
    return 0


def cmd_venues_add(args: argparse.Namespace) -> int:
    venue = Venue(
        key=args.venue_id, openreview_id=args.openreview_id or args.venue_id, source=args.source, seed=args.seed,
        sample_size=args.sample_size, api_url=args.api_url, snapshot=args.snapshot,
    )
    try:
        add_venue(Path(DEFAULT_REGISTRY), venue)
    except RegistryError as exc:
        print(f"not added: {exc}", file=sys.stderr)
        return 2
    print(f"registered {venue.key}; the venue sensor adds it as a partition, or run `peerify build {venue.key}`")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="peerify", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    build = sub.add_parser("build", help="materialise the venue's asset graph (crawls live venues)")
    build.add_argument("venue", help="a venue key from venues.yaml, e.g. sample or ICLR.cc/2024/Conference")
    build.add_argument("--refetch", action="store_true", help="re-fetch forums already in the snapshot")
    build.set_defaults(func=cmd_build)

    sql = sub.add_parser("sql", help="run a query against the DuckDB catalog")
    sql.add_argument("query")
    sql.set_defaults(func=cmd_sql)

    venues = sub.add_parser("venues", help="the venue registry")
    venues_sub = venues.add_subparsers(dest="venues_command", required=True)
    venues_sub.add_parser("list").set_defaults(func=cmd_venues_list)
    add = venues_sub.add_parser("add", help="register a venue")
    add.add_argument("venue_id", help="partition key, normally the OpenReview venue id")
    add.add_argument("--openreview-id", help="OpenReview venue id when it differs from the key")
    add.add_argument("--source", choices=SOURCES, default="api")
    add.add_argument("--seed", type=int, default=0)
    add.add_argument("--sample-size", type=int, default=None)
    add.add_argument("--api-url", default="https://api2.openreview.net")
    add.add_argument("--snapshot", help="snapshot folder (relative to venues.yaml) for --source snapshot")
    add.set_defaults(func=cmd_venues_add)

    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())

"""The `peerify` command: build venues, recover the Dagster home, manage the venue registry, and query the catalog.

`peerify build` checks its whole configuration (venue registry, Dagster home, LLM models) before it loads Dagster
or touches the lake, and reports a mistake as one line with exit code 2.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb
import pyarrow.parquet as pq
import yaml

from peerify_dagster.domain.release_import import IMPORTED_TABLES
from peerify_dagster.domain.venues import (
    SOURCE_RELEASE,
    SOURCES,
    RegistryError,
    Venue,
    add_venue,
    load_registry,
    missing_files,
)
from peerify_dagster import cli_arbitrate, cli_import, cli_queue, cli_release, cli_report, paths
from peerify_dagster.cli_common import ConfigError, say
from peerify_dagster.resources.files import remove_stale_temporaries
from peerify_dagster.resources.lake import (
    SHARED_TABLES,
    SQL_DIR,
    CatalogBusyError,
    Lake,
    WriteStatementError,
    partition_slug,
    unreadable_reason,
)

if TYPE_CHECKING:
    import dagster as dg

# The LLM roles the asset graph calls and their prompts (claims, verification); checked before a build starts.
LLM_PROMPTS_IN_GRAPH = {"extractor": ["extract_claims", "extract_paper_claim", "rephrase_claim"],
                        "fact_tagger": ["tag_fact"], "verifiers": ["verify"]}
LLM_ROLES_IN_GRAPH = list(LLM_PROMPTS_IN_GRAPH)


def _one_line(exc: BaseException) -> str:
    return "; ".join(line.strip(" -") for line in str(exc).splitlines() if line.strip(" -"))


def _format_table(columns: list[str], rows: list[tuple], max_width: int = 80) -> str:
    cells = [[("NULL" if v is None else str(v)).replace("\n", " ")[:max_width] for v in row] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    line = lambda values: "  ".join(v.ljust(w) for v, w in zip(values, widths))  # noqa: E731
    return "\n".join([line(columns), line(["-" * w for w in widths])] + [line(r) for r in cells])


def _row_count(files: list[Path]) -> int | str:
    """Rows in the files from their Parquet footers: no catalog, so no lock to wait for."""
    problems = [f"unreadable: {path.name} ({reason})" for path in files if (reason := unreadable_reason(path))]
    return problems[0] if problems else sum(pq.read_metadata(path).num_rows for path in files)


def venue_summary(lake: Lake, venue: str) -> tuple[list[str], list[tuple]]:
    """Row counts of every catalog table for one venue; tables shared by all venues (the LLM ledger) in total."""
    rows = []
    for table in sorted(path.stem for path in SQL_DIR.glob("*.sql")):
        if table in SHARED_TABLES:
            files = sorted((lake.root / table).glob("*.parquet"))
            label = f"{table} (all venues)"
        else:
            files = [path] if (path := lake.table_path(table, venue)).exists() else []
            label = table
        if files:
            rows.append((label, _row_count(files)))
        # Venue x configuration tables (predictions): one file per configuration, `<configuration>|<venue>`.
        for path in sorted((lake.root / table).glob(f"*|{partition_slug(venue)}.parquet")):
            rows.append((f"{table} ({path.stem.split('|')[0]})", _row_count([path])))
    return ["table", "rows"], rows


def check_dagster_home() -> None:
    home = os.environ.get("DAGSTER_HOME")
    if not home:
        return
    if not Path(home).is_absolute() or not Path(home).is_dir():
        raise ConfigError(f"DAGSTER_HOME={home!r} must be an existing folder given by its absolute path")
    settings = Path(home) / "dagster.yaml"
    try:
        yaml.safe_load(settings.read_text()) if settings.exists() else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f", line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"{settings}{where}: not valid YAML: {exc.problem or exc.context}") from None


def check_build_config(venue_key: str) -> Venue:
    """Everything a build needs, checked before any work: the venue's registry entry and files, the Dagster home,
    and the LLM models of the graph's roles (profiles, role models, API keys, packages, model files)."""
    registry_path = Path(paths.registry_path())
    registry = load_registry(registry_path)
    if venue_key not in registry:
        raise ConfigError(f"{registry_path}: venue {venue_key!r} is not registered; "
                          f"add it with `peerify venues add {venue_key}`")
    venue = registry[venue_key]
    missing = missing_files(venue, registry_path)
    if missing:
        raise ConfigError(missing[0])
    check_dagster_home()
    from peerify_dagster.resources.llm_gateway import CallLedger, LLMGateway, LLMGatewayError

    # Reading the ledger moves its unreadable segments aside. The ledger logs each one; here they are reported
    # below instead, once, whatever the preflight finds.
    ledger_log = logging.getLogger(CallLedger.__module__)
    ledger_log.disabled, gateway = True, None
    try:  # unknown profiles or models, missing API keys, packages or model files are reported before any work starts
        gateway = LLMGateway(paths.lake_root())
        gateway.preflight(LLM_ROLES_IN_GRAPH, prompts=LLM_PROMPTS_IN_GRAPH)
    except LLMGatewayError as exc:
        raise ConfigError(f"cannot build {venue_key}: {_one_line(exc)}") from None
    finally:
        ledger_log.disabled = False
        for record in gateway.quarantined if gateway else []:
            say(record.describe())
    return venue


def open_home(holder: str, capture_step_output: bool = True) -> dg.DagsterInstance:
    """The Dagster instance with its dead runs recovered, and stale temporaries gone from the lake."""
    from dagster import DagsterError

    from peerify_dagster.resources import runs

    try:
        instance, lines = runs.open_instance(holder, capture_step_output=capture_step_output, on_wait=lambda other: say(
            f"waiting for {other} to finish setting up the Dagster home"))
    except DagsterError as exc:
        raise ConfigError(f"DAGSTER_HOME={os.environ.get('DAGSTER_HOME')}: {_one_line(exc)}") from None
    removed = remove_stale_temporaries(Lake(paths.lake_root()).root)
    if removed:
        lines.append(f"removed {len(removed)} temporary file(s) left by killed writers under {paths.lake_root()}")
    for line in lines:
        say(f"recover: {line}")
    return instance


def check_configurations(venue_key: str, only: list[str] | None = None) -> list:
    """The prediction configurations the build runs for the venue (`only`: those named), checked against models.yaml
    and the known retrievers before any work."""
    from peerify_dagster.domain.predictions import ConfigurationError as BadConfiguration
    from peerify_dagster.domain.predictions import load_configurations
    from peerify_dagster.resources.llm_gateway import LLMGatewayError
    from peerify_dagster.resources.llm_gateway.registry import ModelRegistry

    registered = load_registry(Path(paths.registry_path())).get(venue_key)
    try:
        configurations = load_configurations(Path(paths.configurations_path()), ModelRegistry.load().models)
        return [configurations.get(name) for name in only] if only else configurations.for_venue(
            venue_key, release=registered is not None and registered.source == SOURCE_RELEASE)
    except (BadConfiguration, LLMGatewayError) as exc:
        raise ConfigError(f"cannot build {venue_key}: {_one_line(exc)}") from None


def run_job(instance: dg.DagsterInstance, job_name: str, partition_key, run_config: dict | None = None,
             asset_selection: list | None = None):
    """One in-process run of a job of the code location (`asset_selection`: only those of its assets) for one
    partition, reported while it waits for a pool."""
    from peerify_dagster.definitions import defs
    from peerify_dagster.resources import runs

    run_id = str(uuid.uuid4())
    # The process tags let `peerify recover` tell this run dead from alive. No automatic retry: a killed
    # terminal build is re-run by its user, not relaunched in the background by `dagster dev`'s daemon.
    tags = {**runs.process_tags(), "dagster/max_retries": "0"}
    run_config = {**(run_config or {}), "loggers": {"console": {"config": {"log_level": "INFO"}}}}
    with runs.PoolWaitReporter(instance, run_id, say):
        return defs.resolve_job_def(job_name).execute_in_process(
            partition_key=partition_key, instance=instance, run_config=run_config, raise_on_error=False,
            run_id=run_id, tags=tags, asset_selection=asset_selection,
        )


def print_estimate(venue_key: str, configurations: list) -> int:
    """`peerify build V --estimate`: the calls, tokens and cost the build would make, no model called."""
    registry_path = Path(paths.registry_path())
    if venue_key not in load_registry(registry_path):
        raise ConfigError(f"{registry_path}: venue {venue_key!r} is not registered")
    from peerify_dagster.estimate import estimate_build, format_estimate
    from peerify_dagster.resources.llm_gateway import LLMGateway, LLMGatewayError

    try:  # the gateway only reads the ledger here: not closed, so nothing is compacted or written
        estimate = estimate_build(Lake(paths.lake_root()), venue_key, configurations, LLMGateway(paths.lake_root()))
    except LLMGatewayError as exc:
        raise ConfigError(f"cannot estimate {venue_key}: {_one_line(exc)}") from None
    print(format_estimate(estimate, venue_key))
    return 0


def cmd_build(args: argparse.Namespace) -> int:
    configurations = check_configurations(args.venue, args.configuration)
    if args.estimate:
        return print_estimate(args.venue, configurations)
    venue = check_build_config(args.venue)
    lake = Lake(paths.lake_root())
    if args.configuration and not lake.table_path("retrieval_runs", venue.key).exists():
        raise ConfigError(f"--configuration needs a built venue: build {venue.key} first (`peerify build {venue.key}`)")
    release = venue.source == SOURCE_RELEASE
    if release and (missing := [t for t in IMPORTED_TABLES if not lake.table_path(t, venue.key).exists()]):
        raise ConfigError(f"venue {venue.key}: its imported tables {missing} are not in the lake {lake.root}; "
                          f"import the release first (`peerify import-release {venue.release} --venue {venue.key}`)")

    from dagster import AssetKey

    from assets.predictions import predictions
    from peerify_dagster.definitions import build_venue_job, computed_from, predictions_job, venue_results_job
    from peerify_dagster.partitions import configuration_partitions, prediction_key, venue_partitions
    from peerify_dagster.resources import runs

    me = f"the build of {venue.key} (pid {os.getpid()})"
    instance = open_home(me, capture_step_output=False)  # the terminal shows the output; no `tail` child
    results = []
    # Two builds of one venue write the same partitions: the second waits, then finds most work in the caches.
    with runs.exclusive_lock(lake.root / f".build-{venue.slug}.lock", me,
                             on_wait=lambda other: say(f"waiting for {other} to finish")):
        if not instance.has_dynamic_partition(venue_partitions.name, venue.key):
            instance.add_dynamic_partitions(venue_partitions.name, [venue.key])
        known = set(instance.get_dynamic_partitions(configuration_partitions.name))
        if new := [c.name for c in configurations if c.name not in known]:
            instance.add_dynamic_partitions(configuration_partitions.name, new)
        # A job runs one partitions definition: the venue's graph, then one run per configuration, then the results.
        inputs_built = True
        if not args.configuration:
            # A release venue's imported tables stand in for its forums: only what follows from them is built.
            results.append(run_job(instance, build_venue_job.name, venue.key, **(
                {"asset_selection": computed_from(IMPORTED_TABLES)} if release else
                {"run_config": {"ops": {"raw_openreview_notes": {"config": {"refetch": args.refetch}}}}})))
            # The predictions need only their inputs: a failure elsewhere (a blocking gate of the slices) fails the
            # build, not the predictions.
            built = {e.asset_key for e in results[0].all_events if e.is_step_materialization}
            built |= {AssetKey(table) for table in IMPORTED_TABLES} if release else set()
            inputs_built = predictions.dependency_keys <= built
            if not inputs_built:
                inputs = sorted(key.to_user_string() for key in predictions.dependency_keys)
                say(f"predictions not run: their inputs {inputs} were not all built")
        if inputs_built:
            for configuration in configurations:
                say(f"predictions of {venue.key} under configuration {configuration.name}")
                results.append(run_job(instance, predictions_job.name, prediction_key(venue.key, configuration.name)))
            results.append(run_job(instance, venue_results_job.name, venue.key))
    for line in lake.refresh_catalog().problems():
        say(line)
    columns, rows = venue_summary(lake, venue.key)
    print(f"\nVenue {venue.key}: tables in {lake.root} (catalog {lake.catalog_path.name})\n")
    print(_format_table(columns, rows))
    checks = [check for result in results for check in result.get_asset_check_evaluations()]
    failed = [f"{c.asset_key.to_user_string()}:{c.check_name}" for c in checks if not c.passed]
    print(f"\nasset checks: {len(checks) - len(failed)} passed, {len(failed)} failed {failed if failed else ''}")
    if any(e.is_step_materialization and e.asset_key.to_user_string() == cli_report.REPORT_ASSET
           for result in results for e in result.all_events):
        cli_report.print_report_paths(lake, venue.key)
    if not all(result.success for result in results):
        say("the run failed; see the log above")
        return 1
    return 0


def cmd_recover(args: argparse.Namespace) -> int:
    check_dagster_home()
    if not os.environ.get("DAGSTER_HOME"):
        say("DAGSTER_HOME is not set: every build used a temporary Dagster instance; no runs to recover")
    open_home(f"`peerify recover` (pid {os.getpid()})")
    return 0


def cmd_sql(args: argparse.Namespace) -> int:
    lake = Lake(paths.lake_root())
    # A process holding the catalog keeps it as it is (its glob views still see new partitions); the query runs.
    for line in lake.refresh_catalog(wait_s=0).problems(with_not_refreshed=False):
        say(line)
    try:
        columns, rows = lake.query(args.query, refresh=False)
    except WriteStatementError as exc:
        say(str(exc))
        return 2
    except CatalogBusyError as exc:
        say(f"query not run: {exc}")
        return 1
    except duckdb.Error as exc:
        say(f"query failed: {exc}")
        return 1
    print(_format_table(columns, rows))
    return 0


def cmd_venues_list(args: argparse.Namespace) -> int:
    registry = load_registry(Path(paths.registry_path()))
    rows = [(v.key, v.openreview_id, v.source, v.seed, v.sample_size, v.release or v.snapshot)
            for v in registry.values()]
    print(_format_table(["venue", "openreview_id", "source", "seed", "sample_size", "folder"], rows))
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
        return 2
    print(f"registered {venue.key}; the venue sensor adds it as a partition, or run `peerify build {venue.key}`")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="peerify", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    build = sub.add_parser("build", help="materialise the venue's asset graph (crawls live venues)")
    build.add_argument("venue", help="a venue key from venues.yaml, e.g. sample or ICLR.cc/2024/Conference")
    build.add_argument("--refetch", action="store_true", help="re-fetch forums already in the snapshot")
    build.add_argument("--estimate", action="store_true",
                       help="print the LLM calls, tokens and cost the build would make (ledger hits excluded, prices "
                            "from models.yaml) per stage, role and model, without calling any model or building")
    build.add_argument("--configuration", action="append", metavar="NAME",
                       help="only the predictions of this configuration (configurations.yaml; repeatable) and the "
                            "venue's results, for an already built venue: the other configurations are not recomputed")
    build.set_defaults(func=cmd_build)

    recover = sub.add_parser("recover", help="mark runs whose process is gone as failed, free their pool slots, "
                                             "and remove temporary files of killed writers (run by `make dev`)")
    recover.set_defaults(func=cmd_recover)

    sql = sub.add_parser("sql", help="run read-only statements against the DuckDB catalog")
    sql.add_argument("query")
    sql.set_defaults(func=cmd_sql)

    venues = sub.add_parser("venues", help="the venue registry")
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
                     help="OpenReview API version (default: detected at the first build: before 2023 -> 1, else probed)")
    add.set_defaults(func=cmd_venues_add)
    cli_arbitrate.register(sub)
    cli_queue.register(sub)
    cli_release.register(sub)
    cli_report.register(sub)
    cli_import.register(sub)

    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (ConfigError, RegistryError) as exc:
        say(str(exc))
        return 2


if __name__ == "__main__":
    sys.exit(main())

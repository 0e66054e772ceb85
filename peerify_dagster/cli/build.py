"""`peerify build` (with `--estimate`) and `peerify recover`: a venue's asset graph materialised in this process,
its configuration checked first (venue registry, Dagster home, LLM models) before Dagster loads or the lake is
touched, every mistake one line with exit code 2.
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Collection
from pathlib import Path

import pyarrow.parquet as pq

from peerify_dagster import paths
from peerify_dagster.annotation.decisions import ORPHANED_TABLE
from peerify_dagster.cli import report
from peerify_dagster.cli.build_session import BudgetSpent, BuildInterrupted, BuildSession, StopSignals
from peerify_dagster.cli.cluster import check_cluster_services
from peerify_dagster.cli.common import ConfigError, format_table, one_line, refuse_upload, registered_venues, say
from peerify_dagster.cli.home import check_dagster_home, open_home
from peerify_dagster.domain.citations.options import CitationOptions
from peerify_dagster.domain.citations.verdicts import CITANCE_TAGGER_ROLE
from peerify_dagster.domain.llm_stages import prompts_by_role
from peerify_dagster.domain.release_import import IMPORTED_TABLES
from peerify_dagster.domain.venues import SOURCE_RELEASE, Venue, missing_files
from peerify_dagster.resources.lake import SHARED_TABLES, Lake, catalog_views, partition_slug, unreadable_reason
from peerify_dagster.resources.store import readable


def _row_count(files: list[Path]) -> int | str:
    """Rows in the files from their Parquet footers: no catalog, so no lock to wait for."""
    problems = [f"unreadable: {path.name} ({reason})" for path in files if (reason := unreadable_reason(path))]
    return problems[0] if problems else sum(pq.read_metadata(readable(path)).num_rows for path in files)


def venue_summary(lake: Lake, venue: str) -> tuple[list[str], list[tuple]]:
    """Row counts of every catalog table for one venue; tables shared by all venues (the LLM ledger) in total."""
    rows = []
    for table in catalog_views():
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


def orphaned_decisions_line(lake: Lake, venue: str) -> str | None:
    """How many human decisions of the venue no longer apply because their claims changed (asset
    `orphaned_decisions`), and where they are listed; None when there are none."""
    path = lake.table_path(ORPHANED_TABLE, venue)
    count = _row_count([path]) if path.exists() else 0
    if not isinstance(count, int) or count == 0:  # an unreadable file is among the catalog's problems already
        return None
    what = "human decision no longer applies (its claim changed)" if count == 1 else \
        "human decisions no longer apply (their claims changed)"
    return f'{count} {what}: see `peerify sql "select * from {ORPHANED_TABLE}"`'


def check_build_config(venue_key: str, configurations: list) -> Venue:
    """Everything a build needs, checked before any work: the venue's registry entry and files, the Dagster home,
    and the LLM models of every role of every LLM stage (domain/llm_stages.py: extractor, fact tagger, labellers,
    verifiers; profiles, role models, API keys, packages, model files)."""
    registry_path = Path(paths.registry_path())
    registry = registered_venues()
    if venue_key not in registry:
        raise ConfigError(f"{registry_path}: venue {venue_key!r} is not registered; "
                          f"add it with `peerify venues add {venue_key}`")
    venue = registry[venue_key]
    missing = missing_files(venue, registry_path)
    if missing:
        raise ConfigError(missing[0])
    checked_recording(venue, registry_path)
    check_models(venue_key, configurations, called_roles(venue))
    return venue


def checked_recording(venue: Venue, registry_path: Path) -> Path | None:
    """The venue's LLM recording (None when it names none), its columns checked against the ledger's from its footer:
    a recording the first LLM step could not install is refused before the crawl and the parsing, not after them."""
    if not venue.llm_recording:
        return None
    from peerify_dagster.resources.llm_recording import RecordingError, check_recording

    recording = registry_path.parent / venue.llm_recording
    try:
        check_recording(recording)
    except RecordingError as error:
        raise ConfigError(f"{registry_path}: venue {venue.key!r}: {error}") from None
    return recording


def called_roles(venue: Venue) -> list[str]:
    """The roles a build of the venue may call: every stage's, but the citance tagger's only where the venue turns
    citation enrichment on (its build never calls it otherwise, so nothing of it is needed)."""
    tagging = CitationOptions.from_mapping(venue.citations).enrichment
    return [role for role in prompts_by_role() if tagging or role != CITANCE_TAGGER_ROLE]


def check_models(what: str, configurations: list, roles: Collection[str] | None = None) -> None:
    """The Dagster home, and the LLM models of every role (or of `roles`) a build of `what` calls, checked."""
    check_dagster_home()
    from peerify_dagster.resources.llm_gateway import CallLedger, LLMGateway, LLMGatewayError

    # Reading the ledger moves its unreadable segments aside. The ledger logs each one; here they are reported
    # below instead, once, whatever the preflight finds.
    ledger_log = logging.getLogger(CallLedger.__module__)
    ledger_log.disabled, gateway = True, None
    try:  # unknown profiles or models, missing API keys, packages or model files are reported before any work starts
        gateway = LLMGateway(paths.lake_root())
        prompts = {role: chosen for role, chosen in prompts_by_role(
            {c.prompt_id for c in configurations if c.nli_model is None}).items() if roles is None or role in roles}
        gateway.preflight(list(prompts), prompts=prompts)
    except LLMGatewayError as exc:
        raise ConfigError(f"cannot build {what}: {one_line(exc)}") from None
    finally:
        ledger_log.disabled = False
        for record in gateway.quarantined if gateway else []:
            say(record.describe())


def check_configurations(venue_key: str, only: list[str] | None = None) -> list:
    """The prediction configurations the build runs for the venue (`only`: those named), checked against models.yaml
    and the known retrievers before any work."""
    from peerify_dagster.domain.predictions import ConfigurationError as BadConfiguration
    from peerify_dagster.domain.predictions import load_configurations
    from peerify_dagster.resources.llm_gateway import LLMGatewayError
    from peerify_dagster.resources.llm_gateway.registry import ModelRegistry

    registered = registered_venues().get(venue_key)
    try:
        configurations = load_configurations(Path(paths.configurations_path()), ModelRegistry.load().models)
        return [configurations.get(name) for name in only] if only else configurations.for_venue(
            venue_key, release=registered is not None and registered.source == SOURCE_RELEASE)
    except (BadConfiguration, LLMGatewayError) as exc:
        raise ConfigError(f"cannot build {venue_key}: {one_line(exc)}") from None


def print_estimate(venue: Venue, snapshot: Path, configurations: list, stages: Collection[str] | None = None,
                   recording: Path | None = None) -> int:
    """The calls, tokens and cost a build of the venue would make, every LLM stage (or `stages`), as a range, its
    forums read from `snapshot` while nothing is built; no model called. `recording`: the LLM recording the build
    installs first (its calls are free)."""
    from peerify_dagster.estimate import estimate_build, format_estimate
    from peerify_dagster.resources.llm_gateway import LLMGateway, LLMGatewayError

    lake = Lake(paths.lake_root())
    try:  # the gateway only reads the ledger here: not closed, so nothing is compacted or written
        estimate = estimate_build(lake, venue, snapshot, configurations, LLMGateway(paths.lake_root()), stages)
    except LLMGatewayError as exc:
        raise ConfigError(f"cannot estimate {venue.key}: {one_line(exc)}") from None
    print(format_estimate(estimate, venue.key))
    if recording is not None:
        recorded = pq.read_metadata(recording).num_rows
        print(f"the venue's LLM recording ({recording}, {recorded} calls) answers every call it holds once the build "
              "installs it: those calls are free, and the counts above, which assume none is, an upper bound")
    return 0


def print_build_estimate(venue_key: str, configurations: list) -> int:
    """`peerify build V --estimate`: print_estimate of the registered venue."""
    registry_path = Path(paths.registry_path())
    registry = registered_venues()
    if venue_key not in registry:
        raise ConfigError(f"{registry_path}: venue {venue_key!r} is not registered")
    from peerify_dagster.resources.dagster_resources import VenueRegistryResource

    venue = registry[venue_key]
    snapshot = VenueRegistryResource(path=str(registry_path)).snapshot_dir(venue, Lake(paths.lake_root()))
    return print_estimate(venue, snapshot, configurations, recording=checked_recording(venue, registry_path))


def _run_build(session: BuildSession, venue: Venue, configurations: list, args: argparse.Namespace, me: str) -> None:
    """The build's runs: the venue's graph, then one run per configuration, then the results. Raises
    BuildInterrupted or BudgetSpent (from `session.run`) to stop before the next run."""
    from dagster import AssetKey

    from peerify_dagster.assets.predictions import predictions
    from peerify_dagster.definitions import defs
    from peerify_dagster.freshness import computed_from
    from peerify_dagster.jobs import build_venue_job, predictions_job, venue_results_job
    from peerify_dagster.partitions import add_venue_partitions, prediction_key
    from peerify_dagster.resources import runs

    release = venue.source == SOURCE_RELEASE
    # Two builds of one venue write the same partitions: the second waits, then finds most work in the caches.
    with runs.exclusive_lock(runs.build_lock_path(session.lake_root, venue.key), me,
                             on_wait=lambda other: say(f"waiting for {other} to finish")):
        add_venue_partitions(session.instance, venue.key, [c.name for c in configurations])
        # A job runs one partitions definition: the venue's graph, then one run per configuration, then the results.
        inputs_built = True
        if not args.configuration:
            # A release venue's imported tables stand in for its forums: only what follows from them is built.
            first = session.run(build_venue_job.name, venue.key, **(
                {"asset_selection": computed_from(defs, IMPORTED_TABLES)} if release else
                {"run_config": {"ops": {"raw_openreview_notes": {"config": {"refetch": args.refetch}}}}}))
            # The predictions need only their inputs: a failure elsewhere (a blocking gate of the slices) fails the
            # build, not the predictions.
            built = {e.asset_key for e in first.all_events if e.is_step_materialization}
            built |= {AssetKey(table) for table in IMPORTED_TABLES} if release else set()
            inputs_built = predictions.dependency_keys <= built
            if not inputs_built:
                inputs = sorted(key.to_user_string() for key in predictions.dependency_keys)
                say(f"predictions not run: their inputs {inputs} were not all built")
        if inputs_built:
            for configuration in configurations:
                say(f"predictions of {venue.key} under configuration {configuration.name}")
                session.run(predictions_job.name, prediction_key(venue.key, configuration.name))
            session.run(venue_results_job.name, venue.key)


def cmd_build(args: argparse.Namespace) -> int:
    for flag, limit in (("--max-cost-usd", args.max_cost_usd), ("--max-tokens", args.max_tokens)):
        if limit is not None and limit < 0:
            raise ConfigError(f"{flag} {limit}: a budget is zero or more")
    if (registered := registered_venues().get(args.venue)) is not None:
        refuse_upload(registered, "`peerify build`")
    configurations = check_configurations(args.venue, args.configuration)
    if args.estimate:
        return print_build_estimate(args.venue, configurations)
    venue = check_build_config(args.venue, configurations)
    check_cluster_services("`peerify build`", workers=True)
    lake = Lake(paths.lake_root())
    if args.configuration and not lake.table_path("retrieval_runs", venue.key).exists():
        raise ConfigError(f"--configuration needs a built venue: build {venue.key} first (`peerify build {venue.key}`)")
    release = venue.source == SOURCE_RELEASE
    if release and (missing := [t for t in IMPORTED_TABLES if not lake.table_path(t, venue.key).exists()]):
        raise ConfigError(f"venue {venue.key}: its imported tables {missing} are not in the lake {lake.root}; "
                          f"import the release first (`peerify import-release {venue.release} --venue {venue.key}`)")

    me = f"the build of {venue.key} (pid {os.getpid()})"
    instance = open_home(me, capture_step_output=False)  # the terminal shows the output; no `tail` child
    budget_spent = False
    with StopSignals() as stop:
        session = BuildSession(instance, lake.root, stop, args.max_cost_usd, args.max_tokens)
        try:
            _run_build(session, venue, configurations, args, me)
        except BuildInterrupted as interrupted:  # nothing more: the run in progress was stopped, no other starts
            say(interrupted.describe())
            return interrupted.exit_code
        except BudgetSpent as spent:
            say(str(spent))
            budget_spent = True
    results = session.results
    say(session.usage_line())
    for line in lake.refresh_catalog().problems():
        say(line)
    columns, rows = venue_summary(lake, venue.key)
    print(f"\nVenue {venue.key}: tables in {lake.root} (catalog {lake.catalog_path.name})\n")
    print(format_table(columns, rows))
    checks = [check for result in results for check in result.get_asset_check_evaluations()]
    failed = [f"{c.asset_key.to_user_string()}:{c.check_name}" for c in checks if not c.passed]
    print(f"\nasset checks: {len(checks) - len(failed)} passed, {len(failed)} failed {failed if failed else ''}")
    if orphaned := orphaned_decisions_line(lake, venue.key):
        say(orphaned)
    if any(e.is_step_materialization and e.asset_key.to_user_string() == report.REPORT_ASSET
           for result in results for e in result.all_events):
        report.print_report_paths(lake, venue.key)
    if budget_spent or not all(result.success for result in results):
        say("the budget was spent before the build ended" if budget_spent else "the run failed; see the log above")
        return 1
    return 0


def cmd_recover(args: argparse.Namespace) -> int:
    from peerify_dagster.resources.runs import RECENT_RUNS, lost_worker_report

    instance = open_home(f"`peerify recover` (pid {os.getpid()})")
    lost = lost_worker_report(instance)
    for line in lost:
        say(f"lost worker: {line}")
    if not lost:
        say(f"recover: no step of the last {RECENT_RUNS} failed runs lost its worker")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    build = subparsers.add_parser("build", help="materialise the venue's asset graph (crawls live venues)")
    build.add_argument("venue", help="a venue key from venues.yaml, e.g. sample or ICLR.cc/2024/Conference")
    build.add_argument("--refetch", action="store_true", help="re-fetch forums already in the snapshot")
    build.add_argument("--estimate", action="store_true",
                       help="print the LLM calls, tokens and cost the build would make (ledger hits excluded, prices "
                            "from models.yaml) per stage, role and model, without calling any model or building")
    build.add_argument("--max-cost-usd", type=float, metavar="USD",
                       help="the LLM budget of the whole build, all steps and runs together (ledger hits are free): "
                            "the step that finds it spent stops writing nothing, no further run starts, and the "
                            "build says what was spent")
    build.add_argument("--max-tokens", type=int, metavar="N", help="the same budget in tokens (input + output)")
    build.add_argument("--configuration", action="append", metavar="NAME",
                       help="only the predictions of this configuration (configurations.yaml; repeatable) and the "
                            "venue's results, for an already built venue: the other configurations are not recomputed")
    build.set_defaults(func=cmd_build)

    recover = subparsers.add_parser("recover", help="mark runs whose process is gone as failed, free their pool "
                                                    "slots, remove temporary files of killed writers (run by "
                                                    "`make dev`), and report steps that lost their Celery worker")
    recover.set_defaults(func=cmd_recover)

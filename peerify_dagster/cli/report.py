"""`peerify report --venue V`: (re)build the report of an already built venue and print where it is.

Builds `venue_report` in-process, as `peerify build` runs its jobs, and first `metrics` and `token_costs` when they
are not built for the venue (they only read its predictions: no model is called). On an S3 lake the report's objects
are named by their `s3://` URLs, and `--open` opens a copy of the HTML page fetched into this machine's cache folder.
"""

from __future__ import annotations

import argparse
import os
import webbrowser

from peerify_dagster import paths
from peerify_dagster.cli.common import ConfigError, guarded, refuse_upload, registered_venues, say
from peerify_dagster.cli.home import open_home, run_job
from peerify_dagster.resources.lake import Lake
from peerify_dagster.resources.report_files import REPORT_HTML, REPORT_MARKDOWN, report_folder, viewable_report
from peerify_dagster.resources.store import Location

REPORT_ASSET = "venue_report"
RESULTS_FIRST = ("metrics", "token_costs")  # what the report reads that the command builds when missing


def report_paths(lake: Lake, venue: str) -> tuple[Location, Location]:
    """The report's Markdown (figures beside it) and self-contained HTML files, in the lake."""
    return report_folder(lake, venue) / REPORT_MARKDOWN, report_folder(lake, venue) / REPORT_HTML


def print_report_paths(lake: Lake, venue: str) -> None:
    markdown, page = report_paths(lake, venue)
    print(f"report: {page}")
    print(f"markdown: {markdown} (figures beside it)")


def built_configurations(lake: Lake, venue: str) -> list[str]:
    """The configurations whose predictions are built for the venue."""
    from peerify_dagster.domain.predictions import venue_and_configuration

    return [venue_and_configuration(key)[1] for key in lake.prediction_keys(venue)]


@guarded(ConfigError)
def cmd_report(args: argparse.Namespace) -> int:
    import dagster as dg

    from peerify_dagster.jobs import venue_results_job
    from peerify_dagster.partitions import add_venue_partitions
    from peerify_dagster.resources import runs

    venue = registered_venues().get(args.venue)
    if venue is None:
        raise ConfigError(f"{paths.registry_path()}: venue {args.venue!r} is not registered")
    refuse_upload(venue, "`peerify report`")
    lake = Lake(paths.lake_root())
    if not lake.table_path("benchmark_slices", args.venue).exists():
        raise ConfigError(f"venue {args.venue!r} is not built in {lake.root}: build it first "
                          f"(`peerify build {args.venue}`)")
    configurations = built_configurations(lake, args.venue)
    missing = [asset for asset in RESULTS_FIRST if not lake.table_path(asset, args.venue).exists()]
    if missing and not configurations:
        say(f"{', '.join(missing)} not built: no predictions are built for {args.venue}; the report says so")
    selection = [*(missing if configurations else []), REPORT_ASSET]

    me = f"the report of {args.venue} (pid {os.getpid()})"
    instance = open_home(me, capture_step_output=False)
    with runs.exclusive_lock(runs.build_lock_path(lake.root, venue.key), me,
                             on_wait=lambda other: say(f"waiting for {other} to finish")):
        add_venue_partitions(instance, args.venue, configurations)
        result = run_job(instance, venue_results_job.name, args.venue,
                          asset_selection=[dg.AssetKey(asset) for asset in selection])
    if not result.success:
        say("the report run failed; see the log above")
        return 1
    print_report_paths(lake, args.venue)
    if args.open:
        webbrowser.open(viewable_report(lake, args.venue).as_uri())
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    report = subparsers.add_parser(
        "report", help="build the report of an already built venue (and its metrics and token costs if missing): "
                       "Markdown and self-contained HTML with the paper's tables and the figures; prints where they "
                       "are (paths, or s3:// URLs in an S3 lake)")
    report.add_argument("--venue", required=True, help="a built venue, e.g. sample")
    report.add_argument("--open", action="store_true", help="open the HTML report in the default browser")
    report.set_defaults(func=cmd_report)

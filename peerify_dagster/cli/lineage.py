"""`peerify graph snapshot|check`: the asset graph's committed snapshot (asset_graph.json), written and compared;
`peerify stale VENUE`: what Dagster calls stale in a venue's build, and why (its code changed, or something
upstream did), so a maintainer sees after an upgrade exactly what a rebuild will recompute."""

from __future__ import annotations

import argparse
import os

from peerify_dagster.cli.common import ConfigError, format_table, guarded, registered_venues, say
from peerify_dagster.paths import REPO_ROOT

SNAPSHOT = REPO_ROOT / "asset_graph.json"


def register(subparsers: argparse._SubParsersAction) -> None:
    graph = subparsers.add_parser("graph", help="the asset graph's committed snapshot (asset_graph.json)")
    graph_sub = graph.add_subparsers(dest="graph_command", required=True)
    graph_sub.add_parser("snapshot", help="write asset_graph.json from the code: keys, deps, groups, partitions, "
                         "code versions, checks, jobs").set_defaults(func=cmd_graph_snapshot)
    graph_sub.add_parser("check", help="exit 1, naming each difference, when the code's graph differs from "
                         "asset_graph.json").set_defaults(func=cmd_graph_check)
    stale = subparsers.add_parser("stale", help="the assets of a venue's build that Dagster calls stale, with why")
    stale.add_argument("venue")
    stale.set_defaults(func=cmd_stale)


def cmd_graph_snapshot(args: argparse.Namespace) -> int:
    from peerify_dagster.definitions import defs
    from peerify_dagster.lineage import graph_snapshot, read_snapshot, snapshot_differences, snapshot_text

    changes = snapshot_differences(read_snapshot(SNAPSHOT), graph_snapshot(defs))
    SNAPSHOT.write_text(snapshot_text(defs), encoding="utf-8")
    say(f"wrote {SNAPSHOT.name}: " + (f"{len(changes)} change(s)" if changes else "unchanged"))
    for line in changes:
        print(line)
    return 0


def cmd_graph_check(args: argparse.Namespace) -> int:
    from peerify_dagster.definitions import defs
    from peerify_dagster.lineage import graph_snapshot, read_snapshot, snapshot_differences

    changes = snapshot_differences(read_snapshot(SNAPSHOT), graph_snapshot(defs))
    for line in changes:
        print(line)
    if changes:
        say(f"the asset graph differs from {SNAPSHOT.name} ({len(changes)} change(s)); review them, then "
            "`peerify graph snapshot` and commit it")
        return 1
    say(f"the asset graph matches {SNAPSHOT.name}")
    return 0


@guarded(ConfigError)
def cmd_stale(args: argparse.Namespace) -> int:
    if args.venue not in registered_venues():
        raise ConfigError(f"unknown venue {args.venue!r}: `peerify venues list` shows the registered ones")
    from peerify_dagster.cli.home import open_home
    from peerify_dagster.definitions import defs
    from peerify_dagster.lineage import stale_assets

    instance = open_home(f"`peerify stale` (pid {os.getpid()})")
    stale = stale_assets(instance, defs, args.venue)
    if not stale:
        say(f"{args.venue}: nothing stale (every materialised asset was computed by today's code and inputs)")
        return 0
    print(format_table(["asset", "partition", "cause", "why"],
                       [(item.asset, item.partition or "", item.category, item.reason) for item in stale], 100))
    own = sorted({item.asset for item in stale if item.category == "CODE"})
    say(f"{args.venue}: {len({item.asset for item in stale})} stale asset(s); code changed for {len(own)}: "
        f"{', '.join(own) or 'none'}. `peerify build {args.venue}` recomputes them")
    return 0

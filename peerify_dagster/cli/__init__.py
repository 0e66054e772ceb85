"""The `peerify` command: one module per verb group under cli/, each registering its subcommands through
`build_parser` and never importing this module back. Its help text is written for users (docs/reference/cli.md is
generated from it); `peerify build` checks its whole configuration before it loads Dagster or touches the lake, and
reports a mistake as one line with exit code 2."""

from __future__ import annotations

import argparse

from peerify_dagster.cli import (
    arbitrate,
    build,
    catalog,
    clean,
    cluster,
    docs,
    imports,
    lineage,
    llm,
    queue,
    refs,
    release,
    report,
    serve,
    verify,
)
from peerify_dagster.cli.common import EXIT_USAGE, ConfigError, say
from peerify_dagster.domain.venues import RegistryError

VERB_GROUPS = (build, catalog, arbitrate, queue, release, report, imports, clean, serve, verify, cluster, llm, lineage,
               docs, refs)


DESCRIPTION = """Build, refresh and release peer-review claim-verification benchmarks, and check one review or one
manuscript's citations with the evidence on the page. Every table is a lineage-tracked Dagster asset in the lake
(data_lake/, or PEERIFY_LAKE)."""

EPILOG = """common tasks:
  peerify build sample                      build the bundled sample venue offline (what `make demo` runs)
  peerify venues add ID --seed 7            register an OpenReview venue; then `peerify build ID --estimate`
  peerify arbitrate --venue V --annotator A settle the two labellers' disagreements in the terminal
  peerify release --venue V --version 1.0.0 publish a label release; `peerify release verify 1.0.0` checks it
  peerify verify --pdf P.pdf --review R.txt verify one review against its paper
  peerify serve                             the web app: claims with their evidence, arbitration, verify
  peerify stale V                           what an upgrade of the code makes stale in a venue's build

Each command's own --help says more; docs/ (make docs) has the guides."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="peerify", description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for group in VERB_GROUPS:
        group.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ConfigError, RegistryError) as exc:
        say(str(exc))
        return EXIT_USAGE

"""The `peerify` command: build venues, recover the Dagster home, manage the venue registry, query the catalog,
arbitrate and audit labels, publish, verify and rebuild releases, clean the lake, verify one review against its
paper, and serve the web app over the lake. One module per verb group; each registers its subcommands here and
never imports this module back.

`peerify build` checks its whole configuration (venue registry, Dagster home, LLM models) before it loads Dagster
or touches the lake, and reports a mistake as one line with exit code 2.
"""

from __future__ import annotations

import argparse

from peerify_dagster.cli import (arbitrate, build, catalog, clean, cluster, imports, lineage, llm, queue, release,
                                 report, serve, verify)
from peerify_dagster.cli.common import EXIT_USAGE, ConfigError, say
from peerify_dagster.domain.venues import RegistryError

VERB_GROUPS = (build, catalog, arbitrate, queue, release, report, imports, clean, serve, verify, cluster, llm, lineage)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="peerify", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for group in VERB_GROUPS:
        group.register(sub)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (ConfigError, RegistryError) as exc:
        say(str(exc))
        return EXIT_USAGE

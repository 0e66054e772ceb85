"""`peerify docs generate|check`: the docs pages generated from the code (docs/reference/cli.md, tables.md,
asset-graph.md; peerify_dagster/docs_pages.py), written or compared."""

from __future__ import annotations

import argparse

from peerify_dagster.cli.common import say
from peerify_dagster.paths import REPO_ROOT

REFERENCE = REPO_ROOT / "docs" / "reference"


def register(subparsers: argparse._SubParsersAction) -> None:
    docs = subparsers.add_parser("docs", help="the docs pages generated from the code (command, column and asset "
                                 "graph references)")
    docs_sub = docs.add_subparsers(dest="docs_command", required=True)
    docs_sub.add_parser("generate", help="write docs/reference/cli.md, tables.md and asset-graph.md"
                        ).set_defaults(func=cmd_docs_generate)
    docs_sub.add_parser("check", help="exit 1, naming them, when generated pages differ from the code"
                        ).set_defaults(func=cmd_docs_check)


def _inputs():
    from peerify_dagster.cli import build_parser
    from peerify_dagster.cli.lineage import SNAPSHOT
    from peerify_dagster.lineage import read_snapshot

    return build_parser(), read_snapshot(SNAPSHOT)


def cmd_docs_generate(args: argparse.Namespace) -> int:
    from peerify_dagster.docs_pages import pages

    REFERENCE.mkdir(parents=True, exist_ok=True)
    for name, make in pages(*_inputs()).items():
        (REFERENCE / name).write_text(make(), encoding="utf-8")
        say(f"wrote docs/reference/{name}")
    return 0


def cmd_docs_check(args: argparse.Namespace) -> int:
    from peerify_dagster.docs_pages import stale_pages

    stale = stale_pages(REFERENCE, *_inputs())
    for name in stale:
        print(f"docs/reference/{name}: differs from the code; run `peerify docs generate`")
    return 1 if stale else 0

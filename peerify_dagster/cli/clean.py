"""`peerify clean-lake` (what `make clean-lake` runs): empty the lake of what a build makes again (tables, the
catalog, PDFs, caches, reports, the web app's page images) and keep what no build can make again (human decisions,
releases, the LLM call ledger, crawl snapshots, what `peerify verify` was given) unless a flag names it, and the web
app's session secret. It prints what it kept and what it removed."""

from __future__ import annotations

import argparse
import shutil
from dataclasses import dataclass
from pathlib import Path

from peerify_dagster import paths
from peerify_dagster.annotation.decisions import DECISIONS_DIR
from peerify_dagster.cli.common import EXIT_USAGE, say
from peerify_dagster.resources.lake import LEDGER_DIR, RELEASES_DIR, SNAPSHOTS_DIR
from peerify_dagster.resources.llm_gateway.batches import BATCHES_DIR
from peerify_dagster.resources.store import LakeStore, Location


@dataclass(frozen=True)
class Irreplaceable:
    """A lake folder no build can make again: kept unless `--also-<flag>` is given."""

    flag: str
    folder: str
    what: str


IRREPLACEABLE = (
    Irreplaceable("decisions", DECISIONS_DIR, "every arbitration and audit decision, and the audit samples"),
    Irreplaceable("releases", RELEASES_DIR, "the published label releases"),
    Irreplaceable("ledger", LEDGER_DIR, "the LLM call ledger: every call made (and paid for) and its answer"),
    Irreplaceable("batches", BATCHES_DIR, "the records of LLM batches submitted to a provider: without them the "
                                          "results of a batch not yet collected, paid for, are never collected"),
    Irreplaceable("snapshots", SNAPSHOTS_DIR, "what live crawls fetched from OpenReview"),
    Irreplaceable("uploads", Path(paths.uploads_root()).name,
                  "what `peerify verify` was given: the uploaded PDFs, reviews and responses, the upload venue "
                  "registry, the verify jobs and their result pages"),
)
# Never removed: the placeholder that keeps data_lake/ in git, and the run history of a lake outside the repository
# (paths.dagster_home), which a running `make dev` holds open.
ALWAYS_KEPT = {".gitkeep": "the placeholder that keeps the folder in git", ".dagster_home": "the Dagster run history"}
# Kept inside the web app's folder, whose page-image cache goes: the key of the sessions of `peerify serve`. Not data,
# but a new one signs every annotator out.
WEB_KEPT = "the web app's session secret: removing it signs everyone out of `peerify serve`"


def register(subparsers: argparse._SubParsersAction) -> None:
    clean = subparsers.add_parser(
        "clean-lake", help="remove what a build makes again from the lake; keeps human decisions, releases, the LLM "
                           "call ledger, crawl snapshots and `peerify verify`'s uploads unless a flag names them",
        description="Removes every table, the catalog, PDFs, caches, reports and the web app's page images from the "
                    "lake (PEERIFY_LAKE, else data_lake/), keeps the web app's session secret, and prints what it "
                    "kept and what it removed.")
    for item in IRREPLACEABLE:
        clean.add_argument(f"--also-{item.flag}", action="store_true",
                           help=f"also remove {item.folder}/ ({item.what}); nothing can rebuild it")
    clean.set_defaults(func=cmd_clean_lake)


def cmd_clean_lake(args: argparse.Namespace) -> int:
    store = LakeStore(paths.lake_root())
    root = store.root
    if not root.is_dir():
        say(f"{store.url(root)}: no lake there; nothing removed")
        return 0
    from peerify_dagster.resources.runs import lock_holder
    from peerify_dagster.web.security import SECRET_FILE, WEB_DIR

    # A build writing the lake now would lose files under its feet (and its lock file with them). An S3 lake's build
    # locks are in this machine's cache folder: a build on another machine is not seen.
    if holders := [holder for lock in sorted(store.cache_dir.glob(".build-*.lock")) if (holder := lock_holder(lock))]:
        say(f"not cleaned: {'; '.join(holders)} is building in {root}; run clean-lake again when it has finished")
        return EXIT_USAGE
    irreplaceable = {item.folder: item for item in IRREPLACEABLE}
    named = {item.folder for item in IRREPLACEABLE if getattr(args, f"also_{item.flag}")}
    removed = []  # what a build makes again
    for entry in sorted(root.iterdir()):
        if entry.name == WEB_DIR and entry.is_dir() and not entry.is_symlink():
            for inside in sorted(entry.iterdir()):
                if inside.name == SECRET_FILE:
                    print(f"kept {WEB_DIR}/{SECRET_FILE} ({WEB_KEPT})")
                else:
                    removed.append(_remove(inside, f"{WEB_DIR}/{inside.name}"))
        elif entry.name in ALWAYS_KEPT:
            print(f"kept {entry.name} ({ALWAYS_KEPT[entry.name]})")
        elif entry.name in irreplaceable and entry.name not in named:
            item = irreplaceable[entry.name]
            print(f"kept {entry.name}/ ({item.what}; --also-{item.flag} removes it)")
        elif entry.name in named:
            item = irreplaceable[entry.name]
            _remove(entry, entry.name)
            print(f"removed {entry.name}/ ({item.what}), as --also-{item.flag} asked")
        else:
            removed.append(_remove(entry, entry.name))
    if store.is_object_store:  # this machine's catalog, staged uploads and PDF copies are made again too
        for entry in sorted(store.cache_dir.iterdir()) if store.cache_dir.is_dir() else []:
            if not entry.name.startswith(".build-"):
                removed.append(_remove(entry, f"{entry.name} (cache folder {store.cache_dir})"))
    print(f"removed {len(removed)} rebuildable entr{'y' if len(removed) == 1 else 'ies'} from {store.url(root)}"
          + (f": {', '.join(removed)}" if removed else ""))
    return 0


def _remove(entry: Location, shown: str) -> str:
    """Remove a file or a folder (a link, not what it points to; every object under a prefix on S3); how the output
    names it."""
    folder = entry.is_dir() and not entry.is_symlink()
    if not isinstance(entry, Path):
        entry.fs.rm(entry.path, recursive=folder)
    elif folder:
        shutil.rmtree(entry)
    else:
        entry.unlink()
    return f"{shown}/" if folder else shown

"""`peerify refs`: reference lists checked against bibliographic metadata held on this machine.

`peerify refs index` imports bibliographic dumps (DBLP XML, BibTeX collections, JSON lines of Crossref or OpenAlex
works; each maybe gzipped) into the offline metadata index (resources/metadata_index.py) and prints, per dump, its
records, problems and throughput; `--stats` says what the index holds. Each verb of the group registers itself on
the group's subparsers (`_register_index`), so another drops in beside it.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from peerify_dagster.cli.common import ConfigError, format_table, guarded, say, visible
from peerify_dagster.cli.refs_check import register_check

if TYPE_CHECKING:  # loaded by the command itself: DuckDB and the metadata clients are not needed for --help
    from peerify_dagster.resources.metadata_index import ImportReport, IndexStats

SHOWN_PROBLEMS = 5  # per dump; the rest are counted
PROGRESS_EVERY_S = 10.0  # how often a long import says how far it is


def register(subparsers: argparse._SubParsersAction) -> None:
    refs = subparsers.add_parser("refs", help="reference lists checked offline: the metadata index of bibliographic "
                                              "dumps (DBLP, BibTeX, Crossref and OpenAlex works)")
    refs_sub = refs.add_subparsers(dest="refs_command", required=True)
    _register_index(refs_sub)
    register_check(refs_sub)


def _register_index(refs_sub: argparse._SubParsersAction) -> None:
    index = refs_sub.add_parser(
        "index", help="import bibliographic dumps into the offline metadata index, or say what it holds",
        description="Import bibliographic dumps into the offline metadata index (a DuckDB file) that references are "
                    "looked up in without any network service. Each option may be given many times and takes a "
                    "gzipped file (.gz) too. A file imported before unchanged is skipped; a new version of a file "
                    "(the same name) replaces the old one's records; an import that fails leaves the index as it "
                    "was.")
    index.add_argument("--index", type=Path, metavar="PATH",
                       help="the index file (default <lake>/metadata_index/index.duckdb; needed with an s3:// lake)")
    index.add_argument("--dblp", type=Path, action="append", default=[], metavar="FILE",
                       help="DBLP's XML dump (dblp.xml or dblp.xml.gz)")
    index.add_argument("--bibtex", type=Path, action="append", default=[], metavar="FILE",
                       help="a BibTeX collection (e.g. the ACL Anthology's anthology.bib)")
    index.add_argument("--jsonl", type=Path, action="append", default=[], metavar="FILE",
                       help="JSON lines, each a Crossref work (/works/DOI's message) or an OpenAlex work")
    index.add_argument("--stats", action="store_true", help="print what the index holds (after any import)")
    index.set_defaults(func=cmd_refs_index)


def _progress(name: str) -> Callable[[int], None]:
    """A progress callback that says, at most every PROGRESS_EVERY_S, how many records are in and how fast."""
    started = last = time.monotonic()

    def report(records: int) -> None:
        nonlocal last
        now = time.monotonic()
        if now - last >= PROGRESS_EVERY_S:
            last = now
            say(f"{name}: {records:,} records so far ({records / (now - started):,.0f} records/s)")
    return report


@guarded(ConfigError)
def cmd_refs_index(args: argparse.Namespace) -> int:
    from peerify_dagster.domain.citations.metadata_dumps import BIBTEX, DBLP, JSONL, DumpFormatError
    from peerify_dagster.resources.metadata_index import MetadataIndex, MetadataIndexError, default_index_path

    dumps = ([(DBLP, path) for path in args.dblp] + [(BIBTEX, path) for path in args.bibtex]
             + [(JSONL, path) for path in args.jsonl])
    if not dumps and not args.stats:
        raise ConfigError("nothing to do: give dumps to import (--dblp, --bibtex, --jsonl FILE) or --stats")
    if missing := [path for _, path in dumps if not path.is_file()]:
        raise ConfigError(f"{missing[0]}: no such file")
    try:
        with MetadataIndex(args.index or default_index_path()) as index:
            for format, path in dumps:
                _print_import(index.import_dump(path, format, progress=_progress(path.name)))
            if args.stats:
                _print_stats(index.stats())
    except (MetadataIndexError, DumpFormatError) as error:
        raise ConfigError(visible(str(error))) from error
    return 0


def _count(number: int, noun: str) -> str:
    return f"{number:,} {noun}" + ("" if number == 1 else "s")


def _print_import(report: ImportReport) -> None:
    if report.unchanged:
        print(f"{report.name} ({report.format}): unchanged since its import (sha256 {report.sha256[:12]}): "
              f"{_count(report.records, 'record')} kept")
        return
    replaced = f"; replaced the version of sha256 {report.replaced[:12]}" if report.replaced else ""
    print(f"{report.name} ({report.format}): {_count(report.records, 'record')}, "
          f"{_count(report.problem_count, 'problem')}, {report.seconds:.1f} s, "
          f"{report.records_per_second:,.0f} records/s{replaced}")
    for problem in report.problems[:SHOWN_PROBLEMS]:
        print(f"  {visible(problem)}")
    if report.problem_count > SHOWN_PROBLEMS:
        print(f"  ... and {_count(report.problem_count - SHOWN_PROBLEMS, 'more problem')}")


def _print_stats(stats: IndexStats) -> None:
    print(f"index: {stats.path}")
    print(f"records: {stats.records:,}; title words: {stats.title_words:,} ({stats.distinct_words:,} distinct)")
    if stats.dumps:
        print(format_table(["dump", "format", "records", "problems", "imported", "seconds", "sha256"], [
            (dump.name, dump.format, f"{dump.records:,}", f"{dump.problem_count:,}",
             dump.imported_at.strftime("%Y-%m-%d %H:%M"), f"{dump.seconds:.1f}", dump.sha256[:12])
            for dump in stats.dumps]))

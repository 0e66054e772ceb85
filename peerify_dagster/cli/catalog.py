"""`peerify sql` (read-only statements against the DuckDB catalog) and `peerify venues list|add` (the registry)."""

from __future__ import annotations

import argparse
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from peerify_dagster import paths
from peerify_dagster.cli.build import checked_recording
from peerify_dagster.cli.common import (
    EXIT_USAGE,
    ConfigError,
    format_table,
    one_line,
    registered_venues,
    say,
    table_cell,
    visible,
)
from peerify_dagster.domain.venues import (
    SOURCE_RELEASE,
    SOURCE_SNAPSHOT,
    SOURCE_UPLOAD,
    SOURCES,
    RegistryError,
    Venue,
    add_venue,
)
from peerify_dagster.resources.lake import (
    CATALOG_FILE,
    CatalogBusyError,
    Lake,
    WriteStatementError,
    result_columns,
    run_read,
)

# `peerify sql`'s limits, each raised by its flag: a query on a maintainer's terminal must not hang it, flood it or
# fill the machine's memory or disk (DuckDB's own defaults: 80% of the memory, spill up to 90% of the free disk).
SQL_TIMEOUT_S = 60.0
SQL_MAX_ROWS = 10_000
SQL_MEMORY_LIMIT = "2GB"
SQL_SPILL_LIMIT = "10GB"
SQL_FETCH_BATCH = 256  # rows converted to Python at a time
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command Ctrl-C ended
_SIZE = re.compile(r"\d+(\.\d+)?\s*([KMGT]i?B|B)", re.IGNORECASE)


def register(subparsers: argparse._SubParsersAction) -> None:
    sql = subparsers.add_parser(
        "sql", help="read-only statements against the DuckDB catalog: the maintainer's tool, not blind, never "
                    "an annotator's",
        description="Run read-only statements against the lake's DuckDB catalog and print the last one's result as a "
                    "table. It is the maintainer's tool, never an annotator's: the catalog's tables (claim ids, "
                    "labels, the LLM call ledger) join each arbitration item to the labellers behind it, so whoever "
                    "runs it is not blind. A query stops at its time limit, at most --max-rows rows are printed, "
                    "DuckDB's memory and its spill to disk are capped, Ctrl-C stops it, and control characters in "
                    "the values are shown escaped (\\x1b, \\r, \\u202e).")
    sql.add_argument("query")
    sql.add_argument("--timeout", type=_positive(float), default=SQL_TIMEOUT_S, metavar="SECONDS",
                     help=f"stop the query after this long (default {SQL_TIMEOUT_S:g})")
    sql.add_argument("--max-rows", type=_positive(int), default=SQL_MAX_ROWS, metavar="N",
                     help=f"print at most N rows and say when there are more (default {SQL_MAX_ROWS})")
    sql.add_argument("--memory-limit", type=_size, default=SQL_MEMORY_LIMIT, metavar="SIZE",
                     help=f"DuckDB's memory for the query, e.g. 8GB (default {SQL_MEMORY_LIMIT}); past it, it spills")
    sql.add_argument("--spill-limit", type=_size, default=SQL_SPILL_LIMIT, metavar="SIZE",
                     help=f"disk DuckDB may spill to, in {CATALOG_FILE}.tmp beside the catalog (default "
                          f"{SQL_SPILL_LIMIT})")
    sql.set_defaults(func=cmd_sql)

    venues = subparsers.add_parser("venues", help="the venue registry")
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
    add.add_argument("--snapshot", help="snapshot folder (relative to venues.yaml) for --source snapshot: a crawl's "
                                        "landing folder, its submissions.json an object with a `notes` list")
    add.add_argument("--llm-recording", metavar="FILE",
                     help="recorded LLM calls answering the venue's calls (Parquet with the llm_calls ledger's "
                          "columns, relative to venues.yaml), checked now")
    add.add_argument("--api-version", type=int, choices=(1, 2), default=None,
                     help="OpenReview API version (default: detected at the first build: before 2023 -> 1, else "
                          "probed)")
    add.set_defaults(func=cmd_venues_add)


def cmd_sql(args: argparse.Namespace) -> int:
    try:
        return _run_sql(args)
    except KeyboardInterrupt:
        say("interrupted")
        return EXIT_INTERRUPTED


def _run_sql(args: argparse.Namespace) -> int:
    lake = Lake(paths.lake_root())
    # A process holding the catalog keeps it as it is (its glob views still see new partitions); the query runs.
    for line in lake.refresh_catalog(wait_s=0).problems(with_not_refreshed=False):
        say(visible(line))
    # No progress bar: DuckDB draws it on standard output, which holds the result alone (`peerify sql ... > file`).
    settings = {"memory_limit": args.memory_limit, "max_temp_directory_size": args.spill_limit,
                "temp_directory": str(lake.catalog_path.with_name(f"{CATALOG_FILE}.tmp")),
                "enable_progress_bar": "false"}
    result = _Result()
    try:
        with lake.reader(refresh=False, settings=settings) as con:
            # The query runs in a thread so that this one stays in Python: Ctrl-C and the time limit reach it here
            # and stop the query with DuckDB's interrupt.
            threading.Thread(target=_fetch, args=(con, args.query, args.max_rows, result), daemon=True).start()
            _wait(result, con, args.timeout)
    except (CatalogBusyError, duckdb.Error) as exc:  # held by a writer, or unreadable: the query never started
        say(visible(f"query not run: {one_line(exc)}"))
        return 1
    if isinstance(result.error, WriteStatementError):
        say(visible(str(result.error)))
        return EXIT_USAGE
    if isinstance(result.error, duckdb.InterruptException):
        say(f"query stopped at its time limit of {args.timeout:g} s (--timeout SECONDS to allow more)")
        return 1
    if isinstance(result.error, duckdb.OutOfMemoryException):
        say(visible(f"query failed: it needs more than --memory-limit {args.memory_limit} and --spill-limit "
                    f"{args.spill_limit} allow (raise them): {str(result.error).splitlines()[0]}"))
        return 1
    if result.error is not None:  # DuckDB's own, or a value Python cannot hold (an interval of 10^8 years)
        cause = ("" if isinstance(result.error, duckdb.Error)
                 else f"{type(result.error).__name__} reading a value (cast it to varchar): ")
        say(visible(f"query failed: {cause}{one_line(result.error)}"))
        return 1
    print(format_table(result.columns, result.cells))
    if result.more:
        rows = f"{args.max_rows} row{'s' * (args.max_rows != 1)}"
        say(f"more than {rows}: the first {rows} shown (--max-rows N to see more)")
    return 0


@dataclass
class _Result:
    """What the query thread fetched: the cells as the table shows them, or the error that stopped it."""

    columns: list[str] = field(default_factory=list)
    cells: list[list[str]] = field(default_factory=list)
    more: bool = False  # rows beyond the cap exist; they are never fetched
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)


def _fetch(con: duckdb.DuckDBPyConnection, query: str, max_rows: int, result: _Result) -> None:
    """Fetch up to `max_rows` rows and one more (to know there are more) in batches, keeping only each cell's shown
    text, so memory stays bounded however large the result or its values."""
    try:
        cursor = run_read(con, query)
        result.columns = result_columns(cursor)
        while result.columns and len(result.cells) <= max_rows:
            batch = cursor.fetchmany(min(SQL_FETCH_BATCH, max_rows + 1 - len(result.cells)))
            if not batch:
                break
            result.cells += [[table_cell(value) for value in row] for row in batch]
        result.more = len(result.cells) > max_rows
        del result.cells[max_rows:]
    except Exception as exc:  # handed to the main thread, which reports it
        result.error = exc
    finally:
        result.done.set()


def _wait(result: _Result, con: duckdb.DuckDBPyConnection, timeout_s: float) -> None:
    """Wait for the query thread, interrupting its query at the time limit or when Ctrl-C ends the wait (an Event,
    not Thread.join: a join that Ctrl-C interrupts can report the thread ended while it runs on). The interrupt is
    sent again until the thread ends: one sent before DuckDB has started the query is lost when the query starts."""
    try:
        result.done.wait(min(timeout_s, threading.TIMEOUT_MAX))  # --timeout inf waits as long as it can
    finally:
        while not result.done.is_set():
            con.interrupt()
            result.done.wait(0.2)


def _positive(kind: type) -> Callable[[str], float | int]:
    def parse(text: str) -> float | int:
        try:
            value = kind(text)
        except ValueError:
            value = 0
        if not value > 0:
            raise argparse.ArgumentTypeError(f"{text!r} is not a positive {kind.__name__}")
        return value
    return parse


def _size(text: str) -> str:
    if not _SIZE.fullmatch(text.strip()):
        raise argparse.ArgumentTypeError(f"{text!r} is not a size like 500MB, 4GB or 2GiB")
    return text.strip()


def cmd_venues_list(args: argparse.Namespace) -> int:
    registry = registered_venues()
    rows = [(v.key, v.openreview_id, v.source, v.seed, v.sample_size, v.release or v.snapshot,
             "lake (peerify verify)" if v.source == SOURCE_UPLOAD else "repository")
            for v in registry.values()]
    print(format_table(["venue", "openreview_id", "source", "seed", "sample_size", "folder", "registered in"], rows))
    if uploads := sum(v.source == SOURCE_UPLOAD for v in registry.values()):
        print(f"\n{uploads} upload venue{'s' * (uploads != 1)} of `peerify verify` (one paper and its reviews each, "
              "built up to its predictions; no labels, slices or report), registered in "
              f"{paths.upload_registry_path()}")
    return 0


def cmd_venues_add(args: argparse.Namespace) -> int:
    venue = Venue(
        key=args.venue_id, openreview_id=args.openreview_id or args.venue_id, source=args.source, seed=args.seed,
        sample_size=args.sample_size, api_url=args.api_url, snapshot=args.snapshot, api_version=args.api_version,
        llm_recording=args.llm_recording,
    )
    registry_path = Path(paths.registry_path())
    try:
        # What the build reads from the files it names, checked now rather than minutes into a build.
        if args.snapshot is not None and args.source != SOURCE_SNAPSHOT:
            raise RegistryError(f"--snapshot is read by --source {SOURCE_SNAPSHOT} venues only (a live venue's crawl "
                                "lands in the lake)")
        if venue.snapshot is not None:
            _check_snapshot(registry_path.parent / venue.snapshot)
        if venue.llm_recording is not None:
            checked_recording(venue, registry_path)
        add_venue(registry_path, venue)
    except (RegistryError, ConfigError) as exc:
        say(f"not added: {exc}")
        return EXIT_USAGE
    print(f"registered {venue.key}; the venue sensor adds it as a partition, or run `peerify build {venue.key}`")
    return 0


def _check_snapshot(folder: Path) -> None:
    """RegistryError unless `folder` is a snapshot the build can replay: its submissions.json read as the snapshot
    reader reads it (resources/openreview.py)."""
    from peerify_dagster.resources.openreview import SnapshotReader

    if not folder.is_dir():
        raise RegistryError(f"--snapshot {folder}: {'not a folder' if folder.exists() else 'no such folder'}")
    try:
        SnapshotReader(folder).submissions()
    except (OSError, ValueError, RecursionError) as exc:  # missing or unreadable, not UTF-8 or JSON, misshapen
        raise RegistryError(f"--snapshot {folder}: not a venue snapshot ({' '.join(str(exc).split())})") from None

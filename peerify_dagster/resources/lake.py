"""The lake: one Parquet file per asset and partition, and one DuckDB catalog of views over them.

The lake is a folder or an S3 bucket prefix (store.py). Partition files are replaced whole (a local temporary
renamed over the file, or one upload of a local staging file to S3), so a re-run never appends duplicates and a
crash never leaves half a partition. A table too large to hold in memory is streamed: a `TableWriter`
appends one row group per batch to the temporary file and hands back a `StreamedTable`, which the IO manager
commits (renames over, or uploads as, the partition file) when the step returns it. The catalog (`peerify.duckdb`,
always a local file: in the lake folder, or in this machine's cache folder for an S3 lake) holds only
views: one per table of the asset graph (its committed snapshot, asset_graph.json), over the table's Parquet files,
unless `sql/<table>.sql` defines it otherwise (`{files}` there stands for the table's Parquet files). It is refreshed
outside asset steps (at the end of `peerify build`, by `peerify sql`, after runs in `make dev`), and a refresh
never raises: an unreadable partition file is left out of its view and reported by name, and a catalog
held by another process is reported as such. Queries open the catalog read-only and run read statements only.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import polars as pl
import pyarrow.parquet as pq

from peerify_dagster.domain.predictions import venue_and_configuration
from peerify_dagster.paths import REPO_ROOT
from peerify_dagster.resources.store import LakeStore, Location, readable

SQL_DIR = REPO_ROOT / "sql"  # views that need more than their table's files
GRAPH_SNAPSHOT = REPO_ROOT / "asset_graph.json"
# Assets of the graph with no catalog view, and why.
NO_VIEW = {
    "arbitration_key": "which labeller is which candidate: annotators work blind, so no view exposes it",
    "label_release": "a release folder (releases/X.Y.Z/), not a table",
}
TABLE_VIEW = "create or replace view {table} as\nselect * from read_parquet({{files}}, union_by_name = true);\n"
CATALOG_FILE = "peerify.duckdb"
# Lake folders that hold no table partitions: what a build cannot rebuild (see `peerify clean-lake`).
LEDGER_DIR = "llm_calls"  # the LLM call ledger's segments, shared by all venues
SNAPSHOTS_DIR = "snapshots"  # the landing data of live crawls, one folder per venue
RELEASES_DIR = "releases"  # published label releases, one folder per version
# Tables written by the LLM gateway for every venue at once (ledger segments), not one file per venue partition.
SHARED_TABLES = frozenset({LEDGER_DIR})
CATALOG_WAIT_S = 5.0  # how long to wait for another process's hold on the catalog before giving up

# `peerify sql` runs these statement kinds only; EXPLAIN is checked on the statement it explains.
READ_PRAGMAS = frozenset({
    "table_info", "show", "show_tables", "show_tables_expanded", "database_list", "database_size", "version",
    "storage_info", "metadata_info", "functions", "collations", "platform", "user_agent",
})
_EXPLAIN_PREFIX = re.compile(r"^\s*explain\s*(\([^)]*\))?\s*(analy[sz]e\b)?", re.IGNORECASE)
_PRAGMA_NAME = re.compile(r"^\s*pragma\s+(\w+)", re.IGNORECASE)


def partition_slug(partition_key: str | None) -> str:
    return "all" if partition_key is None else partition_key.replace("/", "__")


def partition_key_of(path: Location) -> str:
    """The partition key a partition file was written for (the inverse of `partition_slug`)."""
    return path.stem.replace("__", "/")


class UnreadablePartitionError(RuntimeError):
    """A partition file exists but cannot be read (truncated, not Parquet, ...)."""

    def __init__(self, table: str, partition_key: str | None, path: Location, reason: str):
        self.table, self.partition_key, self.path, self.reason = table, partition_key, path, reason
        super().__init__(f"{path} is unreadable: {reason}")


class CatalogBusyError(RuntimeError):
    """Another process holds the catalog in a way that excludes us, and kept it past the wait."""


class WriteStatementError(ValueError):
    """A statement given to a catalog query would write (files, the catalog, settings)."""


def catalog_views() -> dict[str, str]:
    """table -> the statement defining its view: every asset of the graph but NO_VIEW's over its Parquet files, and
    the views of sql/."""
    assets = json.loads(GRAPH_SNAPSHOT.read_text(encoding="utf-8"))["assets"]
    views = {table: TABLE_VIEW.format(table=table) for table in assets if table not in NO_VIEW}
    views.update({path.stem: path.read_text(encoding="utf-8") for path in SQL_DIR.glob("*.sql")})
    return dict(sorted(views.items()))


@dataclass
class CatalogReport:
    """What a catalog refresh did: the views defined, the files it left out, and the views it could not define."""

    views: list[str] = field(default_factory=list)
    left_out: list[tuple[str, Location, str]] = field(default_factory=list)  # (view, file, reason)
    skipped: dict[str, str] = field(default_factory=dict)  # view -> reason
    not_refreshed: str | None = None  # why the catalog was left as it was
    rebuilt: str | None = None  # why the catalog file was recreated

    def problems(self, with_not_refreshed: bool = True) -> list[str]:
        """One line per problem, naming the view or file and the fix."""
        lines = [f"catalog not refreshed: {self.not_refreshed}"] if self.not_refreshed and with_not_refreshed else []
        if self.rebuilt:
            lines.append(f"catalog {CATALOG_FILE} was unreadable ({self.rebuilt}); recreated it from sql/")
        for view, path, reason in self.left_out:
            fix = "" if view in SHARED_TABLES else (
                f"; re-materialise {view} for {partition_key_of(path)!r} (`peerify build {partition_key_of(path)}` "
                "rebuilds every asset of the venue)")
            lines.append(f"view {view}: left out unreadable file {path} ({reason}){fix}")
        lines += [f"view {view}: not defined ({reason})" for view, reason in self.skipped.items()]
        return lines


def unreadable_reason(path: Location) -> str | None:
    """Why a Parquet file cannot be read, from its footer (a truncated or foreign file lacks one); None if readable."""
    try:
        pq.read_metadata(readable(path))
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError, ArrowIOError an OSError
        return _first_line(exc)
    return None


def check_read_only(con: duckdb.DuckDBPyConnection, sql: str) -> None:
    """Raise WriteStatementError unless every statement in `sql` only reads (DuckDB's own parser decides)."""
    for statement in con.extract_statements(sql):
        problem = _write_problem(con, statement)
        if problem:
            raise WriteStatementError(f"refused {statement.query.strip()[:80]!r}: {problem}; `peerify sql` only reads")


def _write_problem(con: duckdb.DuckDBPyConnection, statement) -> str | None:  # noqa: ANN001
    kind = statement.type
    if kind == duckdb.StatementType.SELECT:
        return None
    if kind == duckdb.StatementType.EXPLAIN:  # EXPLAIN ANALYZE runs its statement, so that statement must read
        explained = _EXPLAIN_PREFIX.sub("", statement.query, count=1)
        inner = con.extract_statements(explained) if explained.strip() else []
        if len(inner) != 1:
            return "EXPLAIN of something other than one statement"
        return _write_problem(con, inner[0])
    if kind == duckdb.StatementType.PRAGMA:
        match = _PRAGMA_NAME.match(statement.query)
        if match and match.group(1).lower() in READ_PRAGMAS:
            return None
        return "not a read-only PRAGMA"
    return f"{kind.name} statements are not allowed"


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _is_lock_conflict(exc: duckdb.Error) -> bool:
    return "lock" in str(exc).lower() and ("conflicting" in str(exc).lower() or "could not set" in str(exc).lower())


def _sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


@dataclass(frozen=True)
class StreamedTable:
    """A partition file written batch by batch, complete but still under its temporary (local) name: `commit` makes
    it the partition file. Until then readers see the previous partition file, if any."""

    table: str
    partition_key: str | None
    temporary: Path
    path: Location
    rows: int
    schema: dict[str, pl.DataType]
    store: LakeStore = field(compare=False, repr=False)

    def commit(self) -> Location:
        self.store.commit(self.temporary, self.path)
        return self.path

    def head(self, rows: int = 5) -> pl.DataFrame:
        source = self.temporary if self.temporary.exists() else readable(self.path)
        return pl.read_parquet(source, n_rows=rows)


class TableWriter:
    """Appends batches of rows to a partition's temporary file, one Parquet row group per batch, so only one batch
    is ever held; `finish` completes the file and returns it as a `StreamedTable` to commit."""

    def __init__(self, table: str, partition_key: str | None, path: Location, schema: dict[str, pl.DataType],
                 store: LakeStore):
        self.table, self.partition_key, self.path, self.schema, self.store = table, partition_key, path, schema, store
        self.temporary = store.staging_path(path)
        # polars' own Arrow types for the schema, so every batch converts to exactly these columns
        self._arrow_schema = pl.DataFrame(schema=schema).to_arrow().schema
        self._writer = pq.ParquetWriter(self.temporary, self._arrow_schema, compression="zstd", write_statistics=True)
        self.rows = 0

    def write(self, rows: list[dict] | pl.DataFrame) -> None:
        frame = rows if isinstance(rows, pl.DataFrame) else pl.DataFrame(rows, schema=self.schema)
        if frame.height:
            self._writer.write_table(frame.to_arrow().cast(self._arrow_schema), row_group_size=frame.height)
            self.rows += frame.height

    def finish(self) -> StreamedTable:
        self._writer.close()
        return StreamedTable(self.table, self.partition_key, self.temporary, self.path, self.rows, self.schema,
                             self.store)

    def abandon(self) -> None:
        self._writer.close()
        self.temporary.unlink(missing_ok=True)


class Lake:
    def __init__(self, root: str | Path):
        self.store = LakeStore(root)
        self.root = self.store.root  # a Path for a folder lake, a UPath for an S3 lake

    @property
    def catalog_path(self) -> Path:
        return self.store.cache_dir / CATALOG_FILE

    def table_path(self, table: str, partition_key: str | None) -> Location:
        return self.root / table / f"{partition_slug(partition_key)}.parquet"

    def partition_keys(self, table: str) -> list[str]:
        """The partitions of the table that have a file in the lake."""
        return sorted(partition_key_of(path) for path in (self.root / table).glob("*.parquet"))

    def prediction_keys(self, venue: str) -> list[str]:
        """The predictions partitions (`<configuration>|<venue>`) built for the venue in the lake: what the venue's
        results read, whichever Dagster instance asks (an ephemeral one knows only the partitions of its own runs)."""
        return [key for key in self.partition_keys("predictions") if venue_and_configuration(key)[0] == venue]

    def write_table(self, table: str, partition_key: str | None, frame: pl.DataFrame) -> Location:
        path = self.table_path(table, partition_key)
        with self.store.writing(path) as temporary:
            frame.write_parquet(temporary, compression="zstd", statistics=True)
        return path

    @contextmanager
    def stream_table(self, table: str, partition_key: str | None,
                     schema: dict[str, pl.DataType]) -> Iterator[TableWriter]:
        """A writer for the partition's new file; if the block fails, its temporary file is removed and the previous
        partition file stays as it was. Call `finish()` inside the block and hand the result to the IO manager."""
        writer = TableWriter(table, partition_key, self.table_path(table, partition_key), schema, self.store)
        try:
            yield writer
        except BaseException:
            writer.abandon()
            raise

    def read_table(self, table: str, partition_key: str | None) -> pl.DataFrame:
        path = self._existing_path(table, partition_key)
        try:
            return pl.read_parquet(readable(path))
        except (pl.exceptions.PolarsError, OSError) as exc:
            raise UnreadablePartitionError(table, partition_key, path, _first_line(exc)) from exc

    def open_table(self, table: str, partition_key: str | None) -> pq.ParquetFile:
        """The partition file opened for reading batch by batch (`iter_batches`, `read_row_group`), not loaded."""
        path = self._existing_path(table, partition_key)
        try:
            return pq.ParquetFile(readable(path))
        except (OSError, ValueError) as exc:  # a missing footer: truncated or not Parquet
            raise UnreadablePartitionError(table, partition_key, path, _first_line(exc)) from exc

    def _existing_path(self, table: str, partition_key: str | None) -> Location:
        path = self.table_path(table, partition_key)
        if not path.exists():
            raise FileNotFoundError(f"lake table {table!r} has no partition {partition_key!r} ({path})")
        return path

    def tables(self) -> list[str]:
        return sorted(p.parent.name for p in self.root.glob("*/*.parquet"))

    # -- the catalog ---------------------------------------------------------------------------------
    def _connect(self, read_only: bool, wait_s: float) -> duckdb.DuckDBPyConnection:
        """Open the catalog, retrying while another process holds a conflicting lock on it (DuckDB allows one
        writer, or any number of readers). The connection can read the lake's files wherever they are stored."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                return self.store.register(duckdb.connect(str(self.catalog_path), read_only=read_only))
            except duckdb.IOException as exc:
                if not _is_lock_conflict(exc):
                    raise
                if time.monotonic() >= deadline:
                    raise CatalogBusyError(
                        f"{self.catalog_path} is held by another process ({_first_line(exc)}); close that connection "
                        "or open the catalog with duckdb.connect(path, read_only=True)") from exc
                time.sleep(0.2)

    def refresh_catalog(self, wait_s: float = CATALOG_WAIT_S) -> CatalogReport:
        """(Re)define the view of every catalog table that has data (`catalog_views`), one view at a time. Never
        raises for unreadable files or a held catalog: the report says what was left out and why."""
        report = CatalogReport()
        self.catalog_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            con = self._connect(read_only=False, wait_s=wait_s)
        except CatalogBusyError as exc:
            report.not_refreshed = str(exc)
            return report
        except duckdb.Error as exc:  # not a lock: the file itself is damaged; it holds only views, so recreate it
            report.rebuilt = _first_line(exc)
            for path in (self.catalog_path, self.catalog_path.with_name(CATALOG_FILE + ".wal")):
                path.unlink(missing_ok=True)
            con = self._connect(read_only=False, wait_s=wait_s)
        with con:
            for table, definition in catalog_views().items():
                self._define_view(con, table, definition, report)
        return report

    def _define_view(self, con: duckdb.DuckDBPyConnection, table: str, definition: str, report: CatalogReport) -> None:
        files = sorted((self.root / table).glob("*.parquet"))
        unreadable = {path: reason for path in files if (reason := unreadable_reason(path))}
        readable_files = [path for path in files if path not in unreadable]
        report.left_out += [(table, path, reason) for path, reason in unreadable.items()]
        if not readable_files:
            con.execute(f'drop view if exists "{table}"')
            if unreadable:
                report.skipped[table] = "every file is unreadable"
            return
        # A glob sees partitions added later without a refresh; a bad file narrows the view to the readable files.
        source = (_sql_string(f"{self.store.url(self.root)}/{table}/*.parquet") if not unreadable
                  else "[" + ", ".join(_sql_string(self.store.url(p)) for p in readable_files) + "]")
        try:
            con.execute(definition.replace("{files}", source))
        except duckdb.Error as exc:
            con.execute(f'drop view if exists "{table}"')
            report.skipped[table] = _first_line(exc)
            return
        report.views.append(table)

    @contextmanager
    def reader(self, refresh: bool = True, wait_s: float = CATALOG_WAIT_S,
               settings: dict[str, str] | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
        """The catalog opened read-only for `run_read` (waiting up to `wait_s` for a writer to let go), files outside
        the lake out of reach, DuckDB `settings` (memory_limit, temp_directory, ...) applied and all of it locked.
        Raises CatalogBusyError when a writer keeps the catalog."""
        if refresh or not self.catalog_path.exists():
            self.refresh_catalog(wait_s=0)  # a reader holding the catalog blocks a refresh, not a query: go on
        with self._connect(read_only=True, wait_s=wait_s) as con:
            for name, value in (settings or {}).items():
                con.execute(f"set {name} = {_sql_string(value)}")
            # Only the folders of the catalog's views: a table without a view (arbitration_key) stays unreadable.
            folders = [_sql_string(f"{self.store.url(self.root)}/{table}/") for table in catalog_views()]
            con.execute(f"set allowed_directories = [{', '.join(folders)}]")
            con.execute("set enable_external_access = false")
            con.execute("set lock_configuration = true")
            yield con

    def query(self, sql: str, params: dict | None = None, refresh: bool = True,
              wait_s: float = CATALOG_WAIT_S) -> tuple[list[str], list[tuple]]:
        """Run read statements against the catalog (`reader`); returns (column names, rows) of the last statement.
        Raises WriteStatementError for anything that writes, CatalogBusyError when a writer keeps the catalog."""
        with self.reader(refresh=refresh, wait_s=wait_s) as con:
            cursor = run_read(con, sql, params)
            return result_columns(cursor), cursor.fetchall()


def run_read(con: duckdb.DuckDBPyConnection, sql: str, params: dict | None = None) -> duckdb.DuckDBPyConnection:
    """Execute `sql` on a `Lake.reader` connection; its last statement's rows are streamed to whoever fetches them.
    Raises WriteStatementError, before running anything, if any statement would write."""
    check_read_only(con, sql)
    return con.execute(sql, params)


def result_columns(cursor: duckdb.DuckDBPyConnection) -> list[str]:
    return [d[0] for d in cursor.description] if cursor.description else []

"""The lake: one Parquet file per asset and partition, and one DuckDB catalog of views over them.

Partition files are replaced atomically (temp file + rename), so a re-run never appends duplicates
and a crash never leaves half a partition. The catalog (`peerify.duckdb`) holds only views, defined
in `sql/<table>.sql`; DuckDB allows one writer, so catalog refreshes take a file lock.
"""

from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import duckdb
import polars as pl

from peerify_dagster.resources.files import atomic_path

REPO_ROOT = Path(__file__).resolve().parents[2]
SQL_DIR = REPO_ROOT / "sql"
CATALOG_FILE = "peerify.duckdb"


def partition_slug(partition_key: str | None) -> str:
    return "all" if partition_key is None else partition_key.replace("/", "__")


class Lake:
    def __init__(self, root: str | os.PathLike):
        self.root = Path(root).resolve()

    @property
    def catalog_path(self) -> Path:
        return self.root / CATALOG_FILE

    def table_path(self, table: str, partition_key: str | None) -> Path:
        return self.root / table / f"{partition_slug(partition_key)}.parquet"

    def write_table(self, table: str, partition_key: str | None, frame: pl.DataFrame) -> Path:
        path = self.table_path(table, partition_key)
        with atomic_path(path) as temporary:
            frame.write_parquet(temporary, compression="zstd", statistics=True)
        return path

    def read_table(self, table: str, partition_key: str | None) -> pl.DataFrame:
        path = self.table_path(table, partition_key)
        if not path.exists():
            raise FileNotFoundError(f"lake table {table!r} has no partition {partition_key!r} ({path})")
        return pl.read_parquet(path)

    def tables(self) -> list[str]:
        return sorted(p.parent.name for p in self.root.glob("*/*.parquet"))

    @contextmanager
    def _catalog_lock(self) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / ".catalog.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def refresh_catalog(self, sql_dir: Path = SQL_DIR) -> list[str]:
        """(Re)create a view per `sql/<table>.sql` whose table has data; returns the views defined."""
        defined = []
        with self._catalog_lock(), duckdb.connect(str(self.catalog_path)) as con:
            for sql_file in sorted(sql_dir.glob("*.sql")):
                table = sql_file.stem
                if not any((self.root / table).glob("*.parquet")):
                    con.execute(f'drop view if exists "{table}"')
                    continue
                con.execute(sql_file.read_text().replace("{lake}", self.root.as_posix()))
                defined.append(table)
        return defined

    def query(self, sql: str, params: dict | None = None, refresh: bool = True) -> tuple[list[str], list[tuple]]:
        """Run a read-only query against the catalog; returns (column names, rows)."""
        if refresh:
            self.refresh_catalog()
        with duckdb.connect(str(self.catalog_path), read_only=True) as con:
            cursor = con.execute(sql, params)
            columns = [d[0] for d in cursor.description] if cursor.description else []
            return columns, cursor.fetchall()

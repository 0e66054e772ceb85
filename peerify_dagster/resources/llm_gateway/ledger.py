"""The `llm_calls` ledger: every model call, failed ones included, one durable row in Parquet segments.

Layout under `<lake>/llm_calls/` (DuckDB reads the rows as `read_parquet('<lake>/llm_calls/*.parquet')`):

- `call-<utc stamp>-<pid>-<random>.parquet`: one call's row, on disk before the call's result is returned
  (temporary file, fsync, rename, fsync of the folder), so a crash loses at most the calls in flight;
- `part-<utc stamp>-<random>.parquet`: compacted segments. Compaction merges the per-call segments, drops
  rows already stored (same call_id and created_at), writes the merged segment first and only then removes
  its sources: a reader or a crash in between sees every row, at worst twice until the next compaction;
- `.claims/<call_id>.lock`: locked (flock) by the process making that call; another process that needs
  the same call waits on it, then finds the row in the ledger instead of calling again (in the cluster profile a
  Postgres advisory lock of the same name instead: resources/locks.py);
- `quarantine/<segment>`: a segment that could not be read, moved aside with its original name and
  reported (`CallLedger.quarantined`) with the call ids it held, as far as they could be read.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import threading
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from peerify_dagster.resources.files import fsync_path
from peerify_dagster.resources.lake import LEDGER_DIR
from peerify_dagster.resources.locks import LockTimeout, exclusive
from peerify_dagster.resources.store import LakeStore, readable

logger = logging.getLogger(__name__)

LEDGER_SCHEMA = pa.schema([
    ("call_id", pa.string()),
    ("role", pa.string()),
    ("prompt_id", pa.string()),
    ("prompt_hash", pa.string()),
    ("backend", pa.string()),
    ("model", pa.string()),
    ("model_id", pa.string()),
    ("request", pa.string()),
    ("raw_response", pa.string()),
    ("parsed", pa.string()),
    ("parse_ok", pa.bool_()),
    ("label", pa.string()),
    ("tokens_in", pa.int64()),
    ("tokens_out", pa.int64()),
    ("latency_s", pa.float64()),
    ("cost_usd", pa.float64()),
    ("error", pa.string()),
    ("attempts", pa.int32()),
    ("created_at", pa.timestamp("us", tz="UTC")),
    ("run_id", pa.string()),
])

# The request column (rendered prompts) is the bulk of a row and not needed to answer a call.
_INDEX_COLUMNS = [name for name in LEDGER_SCHEMA.names if name != "request"]
_KEY_COLUMNS = ["call_id", "created_at"]
CALL_SEGMENT_PREFIX = "call-"
PART_SEGMENT_PREFIX = "part-"
# call_id is stored plain (no dictionary, no compression) and first, so the ids of a segment whose footer
# is lost can still be read from its first page; a compacted segment stays within one page of ids.
SEGMENT_MAX_ROWS = 10_000
_WRITE_OPTIONS: dict[str, Any] = {
    "use_dictionary": [name for name in LEDGER_SCHEMA.names if name != "call_id"],
    "compression": {name: "none" if name == "call_id" else "snappy" for name in LEDGER_SCHEMA.names},
}
# Parquet PLAIN encoding of consecutive 64-hex call ids: a 4-byte little-endian length (64), then the bytes.
_PLAIN_CALL_IDS = re.compile(rb"(?:\x40\x00\x00\x00[0-9a-f]{64})+")


@dataclass(frozen=True)
class QuarantinedSegment:
    """A ledger segment that could not be read, moved to `<lake>/llm_calls/quarantine/`."""

    segment: Path  # where it was
    moved_to: Path | None  # where it is now; None when another process moved it first
    reason: str  # the reader's error, one line
    call_ids: tuple[str, ...]  # the calls it held, as far as they could be read

    def describe(self) -> str:
        """One line for logs and reports."""
        if self.call_ids:
            shown = ", ".join(self.call_ids[:5]) + (", ..." if len(self.call_ids) > 5 else "")
            held = f"it held {len(self.call_ids)} calls ({shown}), which are made again if needed"
        else:
            held = "no call id could be read from it, so the calls it held are made again if needed"
        return (f"ledger segment {self.segment} is unreadable ({self.reason}); "
                f"moved to {self.moved_to or 'quarantine by another process'}; {held}")


class CallLedger:
    """The `llm_calls` table: one durable segment per call, compacted later, shared safely between processes."""

    def __init__(self, lake_root: Path | str, compact_every: int = 256):
        self.store = LakeStore(lake_root)
        self.directory = self.store.root / LEDGER_DIR
        # The claim and compaction lock files are local files: in the ledger folder of a folder lake, in this
        # machine's cache folder for an S3 lake (whose cross-machine claims are Postgres locks, resources/locks.py).
        self.local_directory = self.store.cache_dir / LEDGER_DIR
        self.claims_directory = self.local_directory / ".claims"
        self.quarantine_directory = self.directory / "quarantine"
        self.compact_every = compact_every
        self.quarantined: list[QuarantinedSegment] = []
        self._successes: dict[str, dict[str, Any]] = {}
        self._indexed_segments: set[str] = set()
        self._appended_since_compaction = 0
        self._lock = threading.RLock()
        self.refresh()

    # -- reading ---------------------------------------------------------------------------------
    def segments(self) -> list[Path]:
        return segments_in(self.directory)

    def refresh(self) -> None:
        """Index the segments written since the last refresh, by this process or another."""
        with self._lock:
            while True:
                vanished = False
                for segment in self.segments():
                    if segment.name in self._indexed_segments:
                        continue
                    try:
                        table = self._read(segment, _INDEX_COLUMNS)
                    except FileNotFoundError:
                        vanished = True
                        continue
                    self._indexed_segments.add(segment.name)
                    for row in table.to_pylist() if table is not None else ():
                        self._index(row)
                # A segment vanishes only when a compaction merged it, and the merged segment is written
                # before its sources are removed: listing again finds it.
                if not vanished:
                    return

    def _index(self, row: Mapping[str, Any]) -> None:
        keep_latest_success(self._successes, row)

    def _read(self, segment: Path, columns: list[str] | None) -> pa.Table | None:
        """The segment's rows; None when it was unreadable (it is then quarantined and reported).
        Raises FileNotFoundError when it vanished (compacted by another process)."""
        try:
            return pq.read_table(readable(segment), columns=columns)
        except FileNotFoundError:
            raise
        except (OSError, pa.ArrowException) as error:
            self._quarantine(segment, error)
            return None

    def lookup(self, call_id: str, since: datetime | None = None) -> dict[str, Any] | None:
        """The latest successful row with this call id (created at or after `since`), or None.

        A miss re-reads segments written since the last look, so calls recorded by another process count."""
        with self._lock:
            row = self._fresh(call_id, since)
            if row is None:
                self.refresh()
                row = self._fresh(call_id, since)
            return row

    def _fresh(self, call_id: str, since: datetime | None) -> dict[str, Any] | None:
        row = self._successes.get(call_id)
        return row if row is not None and (since is None or row["created_at"] >= since) else None

    def successful_call_ids(self) -> list[str]:
        """Ids of every call the ledger can answer."""
        self.refresh()
        with self._lock:
            return list(self._successes)

    def has_success(self, model: str, model_id: str, prompt_id: str, prompt_hash: str) -> bool:
        """Whether any call of this model with this version of this prompt succeeded."""
        with self._lock:
            return any(
                (row["model"], row["model_id"], row["prompt_id"], row["prompt_hash"])
                == (model, model_id, prompt_id, prompt_hash)
                for row in self._successes.values()
            )

    def spent_by_runs(self, run_ids: Collection[str]) -> tuple[int, int, float]:
        """Calls made live (failed ones included), their tokens and cost, over every row the runs `run_ids` wrote:
        what a budget spanning several steps and runs (`peerify build --max-cost-usd`) has spent so far."""
        wanted = set(run_ids)
        while True:
            rows: dict[tuple[str, datetime], tuple[int, float]] = {}  # a compaction in progress may show a row twice
            vanished = False
            for segment in self.segments():
                try:
                    table = self._read(segment, _KEY_COLUMNS + ["run_id", "tokens_in", "tokens_out", "cost_usd"])
                except FileNotFoundError:
                    vanished = True
                    continue
                for row in table.to_pylist() if table is not None else ():
                    if row["run_id"] in wanted:
                        rows[(row["call_id"], row["created_at"])] = (row["tokens_in"] + row["tokens_out"],
                                                                     row["cost_usd"])
            # As in `refresh`: a segment vanishes only into a merged one written before, which a new listing finds.
            if not vanished:
                return len(rows), sum(t for t, _ in rows.values()), sum(c for _, c in rows.values())

    @property
    def quarantined_call_ids(self) -> set[str]:
        return {call_id for record in self.quarantined for call_id in record.call_ids}

    # -- writing ---------------------------------------------------------------------------------
    def ensure_exists(self) -> None:
        """Write an empty segment when there is none, so `read_parquet` over the folder always works."""
        if not self.segments():
            self._write_segment(PART_SEGMENT_PREFIX, pa.Table.from_pylist([], schema=LEDGER_SCHEMA))

    def append(self, row: Mapping[str, Any]) -> Path:
        """Write one call's row as its own segment; on disk (fsynced) when this returns."""
        path = self._write_segment(CALL_SEGMENT_PREFIX, pa.Table.from_pylist([dict(row)], schema=LEDGER_SCHEMA))
        with self._lock:
            self._indexed_segments.add(path.name)
            self._index({key: row[key] for key in _INDEX_COLUMNS})
            self._appended_since_compaction += 1
            compaction_due = self._appended_since_compaction >= self.compact_every
        if compaction_due:
            self.compact()
        return path

    def _write_segment(self, prefix: str, table: pa.Table) -> Path:
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
        final = self.directory / f"{prefix}{stamp}-{os.getpid()}-{uuid.uuid4().hex[:8]}.parquet"
        with self.store.writing(final) as temporary:
            pq.write_table(table, temporary, **_WRITE_OPTIONS)
            fsync_path(temporary)
        self._fsync_directory(self.directory)  # the rename itself survives a power loss
        return final

    def _fsync_directory(self, directory: Path) -> None:
        if not self.store.is_object_store:  # an S3 object is durable once its PUT returns
            fsync_path(directory)

    def compact(self) -> list[Path]:
        """Merge the per-call segments into compacted ones, dropping rows already stored.

        Returns the segments written; [] when there was nothing to merge or another process is compacting.
        """
        # One compaction at a time across every process sharing the lake (a lock of resources/locks.py: across
        # machines in the cluster profile); whoever finds it taken leaves the merging to its holder. Nothing in the
        # compaction takes a lock of its own, so a LockTimeout can only be the compaction lock's.
        try:
            with exclusive("llm ledger compaction", self.local_directory / ".compaction.lock", timeout_s=0):
                return self._compact_alone()
        except LockTimeout:
            return []

    def _compact_alone(self) -> list[Path]:
        """`compact` while holding the compaction lock."""
        with self._lock:
            self._appended_since_compaction = 0
        self._remove_stale_claims()
        sources = sorted(self.directory.glob(f"{CALL_SEGMENT_PREFIX}*.parquet"))
        if not sources:
            return []
        stored = self._stored_keys()
        tables, merged_sources = [], []
        for source in sources:
            try:
                table = self._read(source, None)
            except FileNotFoundError:
                continue
            if table is not None:
                tables.append(table)
                merged_sources.append(source)
        rows = _new_rows(pa.concat_tables(tables), stored) if tables else pa.Table.from_pylist([], LEDGER_SCHEMA)
        written = [self._write_segment(PART_SEGMENT_PREFIX, rows.slice(start, SEGMENT_MAX_ROWS))
                   for start in range(0, rows.num_rows, SEGMENT_MAX_ROWS)]
        with self._lock:
            for row in rows.select(_INDEX_COLUMNS).to_pylist():
                self._index(row)
            self._indexed_segments.update(path.name for path in written)
        for source in merged_sources:
            self.store.delete(source)
        self._fsync_directory(self.directory)
        return written

    def _stored_keys(self) -> set[tuple[str, datetime]]:
        """(call_id, created_at) of every row in the compacted segments."""
        keys: set[tuple[str, datetime]] = set()
        for segment in self.directory.glob(f"{PART_SEGMENT_PREFIX}*.parquet"):
            table = self._read(segment, _KEY_COLUMNS)
            if table is not None:
                keys.update(zip(table["call_id"].to_pylist(), table["created_at"].to_pylist(), strict=True))
        return keys

    def _remove_stale_claims(self) -> None:
        """Claim files nobody holds (left by a crash; harmless, but they would pile up)."""
        for claim in self.claims_directory.glob("*.lock"):
            try:
                descriptor = os.open(claim, os.O_RDWR)
            except FileNotFoundError:
                continue
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
                claim.unlink(missing_ok=True)  # while locked, as `claim` expects
            except BlockingIOError:
                pass
            finally:
                os.close(descriptor)

    # -- claims ----------------------------------------------------------------------------------
    @contextmanager
    def claim(self, call_id: str) -> Iterator[None]:
        """Hold the lake-wide claim on `call_id` while the call is in flight (a lock of resources/locks.py: across
        machines in the cluster profile).

        Waits while another process (or thread) holds it; the claim is released when the block ends, and
        when the holder dies.
        """
        with exclusive(f"llm call {call_id}", self.claims_directory / f"{call_id}.lock", remove_when_released=True):
            yield

    # -- quarantine ------------------------------------------------------------------------------
    def _quarantine(self, segment: Path, error: Exception) -> None:
        call_ids = _salvage_call_ids(segment)
        if not self.store.is_object_store:
            self.quarantine_directory.mkdir(parents=True, exist_ok=True)
        moved_to: Path | None = self.quarantine_directory / segment.name
        try:
            self.store.move(segment, moved_to)
            self._fsync_directory(self.directory)
            self._fsync_directory(self.quarantine_directory)
        except FileNotFoundError:
            moved_to = None
        record = QuarantinedSegment(segment, moved_to, " ".join(str(error).split())[:300], tuple(call_ids))
        self.quarantined.append(record)
        logger.warning(record.describe())


def segments_in(directory: Path) -> list[Path]:
    """The ledger's segments (a half-written one ends in `.tmp`, so it is never among them)."""
    return sorted(directory.glob("*.parquet"))


def keep_latest_success(successes: dict[str, dict[str, Any]], row: Mapping[str, Any]) -> None:
    """Record `row` in `successes` (by call id) if it is a success at least as recent as the one held: the latest
    success wins, so a `refresh` run's new answer replaces the old one."""
    if row["error"] is not None:
        return
    current = successes.get(row["call_id"])
    if current is None or row["created_at"] >= current["created_at"]:
        successes[row["call_id"]] = dict(row)


def segment_successes(segment: Path, columns: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The latest successful row of each call one segment holds, reading only `columns` (and the columns that pick
    the row). Raises FileNotFoundError when the segment vanished (compacted), another OSError or a PolarsError when
    it is unreadable: it is left where it is, as a reader that only looks must leave the ledger (the gateway
    quarantines it)."""
    # Read with polars: pyarrow turns time-zoned timestamps into Python values through pandas, whose first import
    # would cost a web server's first claim page a quarter of a second.
    frame = pl.read_parquet(readable(segment), columns=list(dict.fromkeys([*_KEY_COLUMNS, "error", *columns])))
    successes: dict[str, dict[str, Any]] = {}
    for row in frame.iter_rows(named=True):
        keep_latest_success(successes, row)
    return successes


def latest_successes(lake_root: Path, call_ids: Collection[str],
                     read_segment: Callable[[Path], dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """The latest successful row of each of `call_ids` in the lake's ledger, found without opening a `CallLedger`
    (which indexes every row and quarantines what it cannot read): for readers that only look, such as the web app.
    `read_segment(path)` gives one segment's successes: `segment_successes` with the columns wanted, or a cache of
    it per segment version. Calls without a success are left out."""
    wanted = set(call_ids)
    while True:
        found: dict[str, dict[str, Any]] = {}
        vanished = False
        for segment in segments_in(LakeStore(lake_root).root / LEDGER_DIR):
            try:
                successes = read_segment(segment)
            except FileNotFoundError:
                vanished = True
                continue
            for call_id in wanted.intersection(successes):
                keep_latest_success(found, successes[call_id])
        # As in `CallLedger.refresh`: a segment vanishes only into a merged one written before, which a new listing
        # finds.
        if not vanished:
            return found


def _new_rows(table: pa.Table, stored: set[tuple[str, datetime]]) -> pa.Table:
    """The rows of `table` not in `stored` and not repeated, oldest first."""
    keep = []
    seen = set(stored)
    for index, key in enumerate(zip(table["call_id"].to_pylist(), table["created_at"].to_pylist(), strict=True)):
        if key not in seen:
            seen.add(key)
            keep.append(index)
    return table.take(pa.array(keep, type=pa.int64())).sort_by("created_at")


def _salvage_call_ids(segment: Path) -> list[str]:
    """The call ids an unreadable segment held: its call_id column if the footer survived, else the ids
    found at the start of its first page (see _WRITE_OPTIONS); [] when nothing is readable."""
    try:
        return pq.read_table(readable(segment), columns=["call_id"])["call_id"].to_pylist()
    except (OSError, pa.ArrowException):
        pass
    try:
        data = segment.read_bytes()
    except OSError:
        return []
    first_run = _PLAIN_CALL_IDS.search(data)
    if first_run is None:
        return []
    run = first_run.group(0)
    return [run[offset + 4: offset + 68].decode("ascii") for offset in range(0, len(run), 68)]




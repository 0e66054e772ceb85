"""The offline metadata index: bibliographic dumps a venue's chairs already have (DBLP, Crossref or OpenAlex works
as JSON lines, BibTeX collections) in one DuckDB file, looked up as the reference check looks a service up.

The file (default `<lake>/metadata_index/index.duckdb`; an S3 lake has no folder for it, so a path must be given)
holds these tables:
* `records`: one row per work of a dump (record_id, source_name: the dump's name, dump_sha256, key: what the dump
  names the work by, title, title_normalised, authors and author_names as JSON lists, year, venue, doi, arxiv_id);
* `title_words`: each distinct word of a record's normalised title (word -> record_id), with `word_counts` (word ->
  how many records' titles hold it) kept beside it for the candidate search;
* `dumps`: one row per dump name (format, sha256, records, problems and the first of them, imported_at, seconds).
DuckDB's ART indexes on the identifiers, the normalised title, the record id and the word make each lookup a few
index probes, however many records there are. Measured on a DBLP-shaped dump of a million records: the import runs
at 7,500 to 9,500 records/s (parsing the XML is most of it); the reader's memory stays flat, DuckDB's grows with its
cache and the indexes (0.55 to 0.75 GB in all after the million; DuckDB's memory_limit bounds its share); a lookup by
identifier or exact title takes about a millisecond, the similar-title search about 30 ms.

`import_dump` streams a dump's records (metadata_dumps.py reads them) into the tables in Arrow batches of
BATCH_RECORDS, all in one transaction: a dump imported again unchanged (same sha256) is a no-op, a new version of a
dump (same name) replaces the old one's records, and an import that fails or is killed half-way leaves the index as
it was. `lookup` answers for one entry the way `scholarly.MetadataService.lookup` does: the records of its DOI, else
of its arXiv id, else of its exact normalised title, else up to SEARCH_ROWS records sharing the title's rarest
indexed words, ranked by `title_similarity`; an index that cannot be read is an answer with an error, never an
exception. Lookups may run in many threads at once (each on its own cursor of one read-only connection); an import
needs the file to itself (DuckDB lets one process write a file, or any number read it).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import duckdb
import pyarrow as pa

from peerify_dagster import deployment, paths
from peerify_dagster.domain.citations.entries import ParsedEntry
from peerify_dagster.domain.citations.metadata import BY_ARXIV_ID, BY_DOI, BY_TITLE, MetadataRecord, normalise_doi
from peerify_dagster.domain.citations.metadata_dumps import (
    DUMP_FORMATS,
    DUMP_READERS,
    DumpFormatError,
    DumpProblem,
    DumpRecord,
)
from peerify_dagster.domain.citations.options import METADATA_INDEX
from peerify_dagster.domain.citations.resolution import entry_arxiv_id
from peerify_dagster.domain.citations.titles import normalise_title, title_similarity
from peerify_dagster.resources.scholarly import SEARCH_ROWS, ServiceAnswer

INDEX_DIR, INDEX_FILE = "metadata_index", "index.duckdb"
BATCH_RECORDS = 50_000  # records inserted at a time: one Arrow batch per table
KEPT_PROBLEMS = 20  # problems kept (and shown) per dump; all are counted
# The candidate search: records sharing any of the title's RAREST_WORDS least frequent indexed words, at most
# CANDIDATE_POOL of them (those sharing the most first), are ranked by title_similarity. A word with a typo is in no
# title, so the search rests on the others; a word of one letter ("a", a digit) singles out nothing and is not indexed.
RAREST_WORDS = 3
CANDIDATE_POOL = 50
MIN_WORD_LENGTH = 2
# Candidates less alike than this are of other works (titles.py: different works of one field score 0.39 to 0.73),
# left out so that a miss is an empty answer rather than five unrelated titles.
MIN_CANDIDATE_SIMILARITY = 0.5
GZIP_SUFFIX = ".gz"

_SCHEMA = """
create table if not exists records (
    record_id bigint not null, source_name varchar not null, dump_sha256 varchar not null, key varchar not null,
    title varchar, title_normalised varchar, authors varchar not null, author_names varchar not null, year integer,
    venue varchar, doi varchar, arxiv_id varchar);
create table if not exists title_words (word varchar not null, record_id bigint not null);
create table if not exists word_counts (word varchar not null, records bigint not null);
create table if not exists dumps (
    name varchar not null, format varchar not null, sha256 varchar not null, path varchar not null,
    records bigint not null, problems bigint not null, first_problems varchar not null,
    imported_at timestamptz not null, seconds double not null);
create index if not exists records_record_id on records (record_id);
create index if not exists records_doi on records (doi);
create index if not exists records_arxiv_id on records (arxiv_id);
create index if not exists records_title on records (title_normalised);
create index if not exists title_words_word on title_words (word);
"""
_RECORDS_SCHEMA = pa.schema([
    ("record_id", pa.int64()), ("source_name", pa.string()), ("dump_sha256", pa.string()), ("key", pa.string()),
    ("title", pa.string()), ("title_normalised", pa.string()), ("authors", pa.string()), ("author_names", pa.string()),
    ("year", pa.int32()), ("venue", pa.string()), ("doi", pa.string()), ("arxiv_id", pa.string())])
_WORDS_SCHEMA = pa.schema([("word", pa.string()), ("record_id", pa.int64())])
_RECOUNT_WORDS = """
create or replace table word_counts as select word, count(*) as records from title_words group by word;
create index word_counts_word on word_counts (word);
"""


class MetadataIndexError(Exception):
    """The index cannot be used as asked (no path for an S3 lake, a missing dump file, a held or unreadable index
    file); the message says what to do."""


@dataclass(frozen=True)
class ImportReport:
    """One dump's import. `unchanged`: the same file (sha256) was already imported, nothing was done; `replaced`: the
    sha256 of the dump's previous version, whose records are gone; `problems`: the first KEPT_PROBLEMS of
    `problem_count`."""

    name: str
    format: str
    path: str
    sha256: str
    records: int
    problem_count: int
    problems: tuple[str, ...]
    seconds: float
    unchanged: bool = False
    replaced: str | None = None

    @property
    def records_per_second(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0


@dataclass(frozen=True)
class DumpSummary:
    """A dump as the index holds it (its `dumps` row)."""

    name: str
    format: str
    sha256: str
    path: str
    records: int
    problem_count: int
    problems: tuple[str, ...]
    imported_at: datetime
    seconds: float


@dataclass(frozen=True)
class IndexStats:
    path: Path
    records: int
    title_words: int
    distinct_words: int
    dumps: tuple[DumpSummary, ...]


def lake_index_path(lake_root: str | Path) -> Path:
    """Where a folder lake keeps its metadata index: `<lake>/metadata_index/index.duckdb`."""
    return Path(lake_root) / INDEX_DIR / INDEX_FILE


def default_index_path() -> Path:
    """The index of the lake (PEERIFY_LAKE); MetadataIndexError for an S3 lake, where the index needs a local path."""
    lake = paths.lake_root()
    if deployment.is_object_store(lake):
        raise MetadataIndexError(f"the lake is {lake}: the metadata index is a local DuckDB file, so give its path "
                                 "(--index PATH)")
    return lake_index_path(lake)


def dump_name(path: Path) -> str:
    """The name a dump file is imported under (its file name, without .gz): a later file of that name replaces it."""
    return path.name.removesuffix(GZIP_SUFFIX)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while block := stream.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


@contextmanager
def _opened_dump(path: Path) -> Iterator[IO[bytes]]:
    with (gzip.open(path, "rb") if path.name.endswith(GZIP_SUFFIX) else path.open("rb")) as stream:
        yield stream


def _one(con: duckdb.DuckDBPyConnection, query: str, parameters: list[Any] | None = None) -> tuple | None:
    """The query's first row, its result read to the end (DuckDB refuses other work on a connection while a
    result is half read)."""
    rows = con.execute(query, parameters or []).fetchall()
    return rows[0] if rows else None


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def title_words(normalised_title: str) -> list[str]:
    """The distinct words of a normalised title that the index keeps (MIN_WORD_LENGTH or longer)."""
    return sorted({word for word in normalised_title.split() if len(word) >= MIN_WORD_LENGTH})


class _Batch:
    """The columns of the records (and their title words) waiting to be inserted."""

    def __init__(self) -> None:
        self.records: dict[str, list[Any]] = {name: [] for name in _RECORDS_SCHEMA.names}
        self.words: dict[str, list[Any]] = {name: [] for name in _WORDS_SCHEMA.names}

    def __len__(self) -> int:
        return len(self.records["record_id"])

    def add(self, record_id: int, source_name: str, sha256: str, item: DumpRecord) -> None:
        record = item.record
        normalised = normalise_title(record.title) if record.title else ""
        row = (record_id, source_name, sha256, item.key, record.title, normalised or None,
               json.dumps(list(record.authors), ensure_ascii=False),
               json.dumps(list(record.author_names), ensure_ascii=False), record.year, record.venue, record.doi,
               record.arxiv_id)
        for column, value in zip(self.records.values(), row, strict=True):  # in _RECORDS_SCHEMA's order
            column.append(value)
        words = title_words(normalised)
        self.words["word"] += words
        self.words["record_id"] += [record_id] * len(words)

    def insert(self, con: duckdb.DuckDBPyConnection) -> None:
        # from_arrow, not register: a registered table stays referenced until the transaction ends, so a dump's
        # batches would all be held in memory.
        con.from_arrow(pa.table(self.records, schema=_RECORDS_SCHEMA)).insert_into("records")
        con.from_arrow(pa.table(self.words, schema=_WORDS_SCHEMA)).insert_into("title_words")


def _record(row: tuple, found_by: str) -> MetadataRecord:
    source_name, key, title, authors, author_names, year, venue, doi, arxiv_id = row
    return MetadataRecord(
        service=METADATA_INDEX, title=title, authors=tuple(json.loads(authors)),
        author_names=tuple(json.loads(author_names)), year=year, doi=doi, arxiv_id=arxiv_id, venue=venue,
        external_ids={"dump": source_name, "key": key}, found_by=found_by)


_LOOKUP_COLUMNS = "source_name, key, title, authors, author_names, year, venue, doi, arxiv_id"


class MetadataIndex:
    """The index in the DuckDB file at `path` (created by the first import). `batch_records`: records inserted at a
    time."""

    def __init__(self, path: str | Path, batch_records: int = BATCH_RECORDS) -> None:
        if batch_records < 1:
            raise ValueError(f"batch_records must be positive, got {batch_records}")
        self.path = Path(path)
        self.batch_records = batch_records
        self._lock = threading.Lock()
        self._reader: duckdb.DuckDBPyConnection | None = None

    def close(self) -> None:
        """Close the read-only connection lookups share (the next lookup opens it again)."""
        with self._lock:
            if self._reader is not None:
                self._reader.close()
                self._reader = None

    def __enter__(self) -> MetadataIndex:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- importing -----------------------------------------------------------------------------------------------------

    @contextmanager
    def _writer(self) -> Iterator[duckdb.DuckDBPyConnection]:
        self.close()  # DuckDB opens a file in one mode per process: this object's readers go first
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            con = duckdb.connect(str(self.path))
        except duckdb.Error as error:
            raise MetadataIndexError(f"{self.path}: cannot open the index for writing ({_first_line(error)}); "
                                     "another process may be using it") from error
        try:
            con.execute(_SCHEMA)
            yield con
        finally:
            con.close()

    def import_dump(self, path: str | Path, format: str, name: str | None = None,
                    progress: Callable[[int], None] | None = None) -> ImportReport:
        """Import a dump file (`format` of DUMP_FORMATS; gzipped when its name ends in .gz) under `name` (default
        `dump_name`). `progress` is called with the records imported so far after each batch; whatever it raises
        ends the import with the index as it was. Raises MetadataIndexError for a missing file or unknown format,
        DumpFormatError (nothing imported) for a file that is not of the format."""
        path = Path(path)
        if format not in DUMP_FORMATS:
            raise MetadataIndexError(f"{path}: unknown dump format {format!r}; expected one of {list(DUMP_FORMATS)}")
        if not path.is_file():
            raise MetadataIndexError(f"{path}: no such file")
        name = name or dump_name(path)
        started = time.monotonic()
        sha256 = file_sha256(path)
        with self._writer() as con:
            previous = _one(con, "select sha256, records, problems, first_problems from dumps where name = ?", [name])
            if previous is not None and previous[0] == sha256:
                return ImportReport(name, format, str(path), sha256, previous[1], previous[2],
                                    tuple(json.loads(previous[3])), time.monotonic() - started, unchanged=True)
            con.begin()
            try:
                records, problems, problem_count = self._load(con, path, format, name, sha256, progress)
                seconds = time.monotonic() - started
                con.execute("delete from dumps where name = ?", [name])
                con.execute("insert into dumps values (?, ?, ?, ?, ?, ?, ?, ?, ?)", [
                    name, format, sha256, str(path), records, problem_count, json.dumps(problems, ensure_ascii=False),
                    datetime.now(UTC), seconds])
                con.commit()
            except BaseException:
                con.rollback()
                raise
        return ImportReport(name, format, str(path), sha256, records, problem_count, tuple(problems), seconds,
                            replaced=previous[0] if previous is not None else None)

    def _load(self, con: duckdb.DuckDBPyConnection, path: Path, format: str, name: str, sha256: str,
              progress: Callable[[int], None] | None) -> tuple[int, list[str], int]:
        """Inside the import's transaction: the dump's old records out, its new ones in, the word counts redone.
        Returns (records, the first problems, how many problems)."""
        con.execute("delete from title_words where record_id in (select record_id from records where source_name = ?)",
                    [name])
        con.execute("delete from records where source_name = ?", [name])
        next_id, = _one(con, "select coalesce(max(record_id), 0) + 1 from records")
        records, problems, problem_count, batch = 0, [], 0, _Batch()
        try:
            with _opened_dump(path) as stream:
                for item in DUMP_READERS[format](stream, str(path)):
                    if isinstance(item, DumpProblem):
                        problem_count += 1
                        if len(problems) < KEPT_PROBLEMS:
                            problems.append(str(item))
                        continue
                    batch.add(next_id + records, name, sha256, item)
                    records += 1
                    if len(batch) >= self.batch_records:
                        batch.insert(con)
                        batch = _Batch()
                        if progress is not None:
                            progress(records)
        except (EOFError, zlib.error, gzip.BadGzipFile) as error:  # a truncated or damaged .gz
            raise DumpFormatError(f"{path}: not a readable gzip file ({_first_line(error)})") from error
        batch.insert(con)
        if progress is not None:
            progress(records)
        con.execute(_RECOUNT_WORDS)
        return records, problems, problem_count

    # -- looking up ----------------------------------------------------------------------------------------------------

    def _cursor(self) -> duckdb.DuckDBPyConnection:
        """A cursor of its own for the calling thread, on the read-only connection (opened by the first call)."""
        with self._lock:
            if self._reader is None:
                if not self.path.is_file():
                    raise MetadataIndexError(f"{self.path}: no index there (build one with `peerify refs index`)")
                try:
                    self._reader = duckdb.connect(str(self.path), read_only=True)
                except duckdb.Error as error:
                    raise MetadataIndexError(f"{self.path}: cannot open the index ({_first_line(error)})") from error
            return self._reader.cursor()

    def lookup(self, entry: ParsedEntry) -> ServiceAnswer:
        """The index's records for the entry (see the module docstring), as a service's answer."""
        try:
            with self._cursor() as cursor:
                return ServiceAnswer(METADATA_INDEX, tuple(self._find(cursor, entry)))
        except MetadataIndexError as error:
            return ServiceAnswer(METADATA_INDEX, error=str(error))
        except duckdb.Error as error:
            return ServiceAnswer(METADATA_INDEX, error=f"{self.path}: cannot read the index ({_first_line(error)})")
        except Exception as error:  # noqa: BLE001 - one entry's surprise must not stop the batch
            return ServiceAnswer(METADATA_INDEX, error=f"unexpected error: {type(error).__name__}: {error}"[:300])

    def _find(self, cursor: duckdb.DuckDBPyConnection, entry: ParsedEntry) -> list[MetadataRecord]:
        if (doi := normalise_doi(entry.doi)) and (found := self._where(cursor, "doi = ?", [doi], BY_DOI)):
            return found
        if (arxiv_id := entry_arxiv_id(entry)) and (found := self._where(cursor, "arxiv_id = ?", [arxiv_id],
                                                                          BY_ARXIV_ID)):
            return found
        title = normalise_title(entry.title or "")
        if not title:
            return []
        return self._where(cursor, "title_normalised = ?", [title], BY_TITLE) or self._similar(cursor, entry.title)

    @staticmethod
    def _where(cursor: duckdb.DuckDBPyConnection, condition: str, parameters: list[Any],
               found_by: str) -> list[MetadataRecord]:
        rows = cursor.execute(f"select {_LOOKUP_COLUMNS} from records where {condition} "
                              f"limit {SEARCH_ROWS}", parameters).fetchall()
        return [_record(row, found_by) for row in rows]

    @staticmethod
    def _similar(cursor: duckdb.DuckDBPyConnection, title: str) -> list[MetadataRecord]:
        """Records sharing the title's rarest indexed words, the most alike first."""
        words = title_words(normalise_title(title))
        if not words:
            return []
        counted = cursor.execute("select word, records from word_counts where word = any(?)", [words]).fetchall()
        rarest = [word for word, _ in sorted(counted, key=lambda pair: (pair[1], pair[0]))[:RAREST_WORDS]]
        if not rarest:
            return []
        pool = [record_id for (record_id,) in cursor.execute(
            "select record_id from title_words where word = any(?) group by record_id "
            f"order by count(*) desc, record_id limit {CANDIDATE_POOL}", [rarest]).fetchall()]
        rows = cursor.execute(f"select {_LOOKUP_COLUMNS} from records where record_id = any(?)", [pool]).fetchall()
        scored = [(title_similarity(title, row[2]), _record(row, BY_TITLE)) for row in rows]
        ranked = sorted((pair for pair in scored if pair[0] >= MIN_CANDIDATE_SIMILARITY),
                        key=lambda pair: -pair[0])
        return [record for _, record in ranked[:SEARCH_ROWS]]

    # -- describing ----------------------------------------------------------------------------------------------------

    def stats(self) -> IndexStats:
        """What the index holds; MetadataIndexError when there is none or it cannot be read."""
        try:
            with self._cursor() as cursor:
                records, words, distinct = _one(cursor, "select (select count(*) from records), (select count(*) "
                                                        "from title_words), (select count(*) from word_counts)")
                rows = cursor.execute("select name, format, sha256, path, records, problems, first_problems, "
                                      "imported_at, seconds from dumps order by name").fetchall()
        except duckdb.Error as error:
            raise MetadataIndexError(f"{self.path}: cannot read the index ({_first_line(error)})") from error
        dumps = tuple(DumpSummary(name, format, sha256, path, count, problems, tuple(json.loads(first)), imported_at,
                                  seconds)
                      for name, format, sha256, path, count, problems, first, imported_at, seconds in rows)
        return IndexStats(self.path, records, words, distinct, dumps)

"""How the web app reads the lake: through the project's `Lake` (its partition files) and the LLM call ledger's own
reader, never through a path taken from a request, nor through the DuckDB catalog (its views name the folder the
lake was built in, so a copied or moved lake would show nothing, and a build holds it while it runs). Tables and
ledger segments are cached in memory and re-read when their file changes (a rebuild replaces it atomically), so a
page costs a few dictionary lookups once warm. Files are found by content hash only: a manuscript PDF through
`manuscript_pdfs.sha256` (a cited paper's through `cited_manuscripts.pdf_sha256`), a report figure through the digest
of the files `venue_report` lists.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import polars as pl
import pypdfium2 as pdfium

from peerify_dagster.domain.citation_view import CITATION_TABLES, CitanceIndex, CitationTables, citance_index
from peerify_dagster.domain.claim_view import ClaimIndex, ClaimTables, claim_index
from peerify_dagster.resources.files import atomic_path
from peerify_dagster.resources.lake import Lake
from peerify_dagster.resources.llm_gateway.ledger import latest_successes, segment_successes
from peerify_dagster.resources.report_files import report_folder
from peerify_dagster.web.security import WEB_DIR

SHA256 = re.compile(r"^[0-9a-f]{64}$")
PAGE_IMAGES_DIR = "page_images"  # under the lake's web folder: <sha256>/<page>@<scale>.png
PAGE_SCALES = (1.0, 1.5, 2.0)  # the only render scales (pixels per PDF point): a request cannot fill the disk
# A venue shows in the app once its forums are in the lake; every other table of it is optional on the pages.
VENUE_TABLE = "submissions"
ANSWER_COLUMNS = ("parsed",)  # what the pages quote of a ledger call: its parsed answer
# ClaimTables field -> lake table (the claims themselves, retrieval_queries, are required; predictions are read apart)
CLAIM_TABLES = {"review_claims": "review_claims", "reviews": "reviews", "followups": "reviewer_followups",
                "paper_claims": "paper_claims", "claim_labels": "claim_labels", "canonical": "canonical_labels",
                "slices": "benchmark_slices", "retrieval_runs": "retrieval_runs", "chunks": "chunks",
                "manuscript_pdfs": "manuscript_pdfs", "parsed_manuscripts": "parsed_manuscripts"}

T = TypeVar("T")


class NotInLake(LookupError):
    """A table, file or item the request asked for is not in the lake; the message says which and how to get it."""


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    return stat.st_mtime_ns, stat.st_size


class LakeData:
    """The lake as the pages see it: tables of a venue (cached per file version), derived views cached on the
    versions of the files they were computed from, and files by content hash."""

    def __init__(self, lake_root: str | Path):
        self.lake = Lake(lake_root)
        self._lock = threading.Lock()
        self._tables: dict[Path, tuple[tuple[int, int], pl.DataFrame]] = {}
        self._derived: dict[tuple, tuple[tuple, object]] = {}
        self._ledger_segments: dict[Path, tuple[tuple[int, int], dict[str, dict]]] = {}

    @property
    def root(self) -> Path:
        return self.lake.root

    # -- tables ---------------------------------------------------------------------------------------------------
    def venues(self) -> list[str]:
        """The venues with built data, in name order."""
        return self.lake.partition_keys(VENUE_TABLE)

    def has_venue(self, venue: str) -> bool:
        return _stamp(self.lake.table_path(VENUE_TABLE, venue)) is not None

    def table(self, name: str, venue: str) -> pl.DataFrame:
        """The venue's partition of a table; NotInLake when it has not been built."""
        frame = self.optional_table(name, venue)
        if frame is None:
            raise NotInLake(f"table {name} has no data for venue {venue!r} yet: build it with `peerify build {venue}`")
        return frame

    def optional_table(self, name: str, venue: str) -> pl.DataFrame | None:
        """The venue's partition of a table, or None when it has not been built."""
        return self._read(self.lake.table_path(name, venue), name, venue)

    def predictions(self, venue: str) -> pl.DataFrame | None:
        """Every configuration's predictions of the venue in one frame (one partition per configuration), or None."""
        def compute() -> pl.DataFrame | None:
            frames = [self._read(self.lake.table_path("predictions", key), "predictions", key)
                      for key in self.lake.prediction_keys(venue)]
            frames = [frame for frame in frames if frame is not None]
            return pl.concat(frames, how="diagonal_relaxed") if frames else None
        return self.derived(("predictions", venue), [("predictions", venue)], compute)

    # -- what the claim pages read --------------------------------------------------------------------------------
    def claim_tables(self, venue: str) -> ClaimTables:
        """The venue's tables the claim page reads; NotInLake when its claims (retrieval_queries) are not built."""
        return ClaimTables(queries=self.table("retrieval_queries", venue), predictions=self.predictions(venue),
                           **{name: self.optional_table(table, venue) for name, table in CLAIM_TABLES.items()})

    def claim_index(self, venue: str) -> ClaimIndex:
        """The claim browser's index of the venue, computed once per version of the tables it comes from."""
        tables = ("retrieval_queries", "review_claims", "benchmark_slices", "canonical_labels")
        return self.derived(("claim_index", venue), [(table, venue) for table in (*tables, "predictions")],
                            lambda: claim_index(self.table("retrieval_queries", venue),
                                                *(self.optional_table(table, venue) for table in tables[1:]),
                                                self.predictions(venue)))

    # -- what the citation pages read -----------------------------------------------------------------------------
    def citation_tables(self, venue: str) -> CitationTables:
        """The venue's citation tables (and the manuscripts' PDFs and page sizes); NotInLake when its citances are
        not built."""
        return CitationTables(**{name: self.table(name, venue) if name == "citances" else
                                 self.optional_table(name, venue) for name in CITATION_TABLES})

    def citance_index(self, venue: str) -> CitanceIndex:
        """The citance browser's index of the venue, computed once per version of the tables it comes from."""
        tables = ("citances", "cited_papers", "citation_verdicts", "submissions")
        return self.derived(("citance_index", venue), [(table, venue) for table in tables],
                            lambda: citance_index(self.citation_tables(venue)))

    def ledger_answers(self, call_ids: list[str]) -> dict[str, str | None] | None:
        """The parsed answer (JSON text) of each of the LLM calls that succeeded (its latest success, as the gateway
        answers it), read from the ledger's segments (each cached per file version); None when a segment cannot be
        read (the next build's gateway sets it aside)."""
        if not call_ids:
            return {}
        listed: set[Path] = set()

        def read(segment: Path) -> dict[str, dict]:
            listed.add(segment)
            stamp = _stamp(segment)
            if stamp is None:
                raise FileNotFoundError(segment)
            with self._lock:
                cached = self._ledger_segments.get(segment)
            if cached is not None and cached[0] == stamp:
                return cached[1]
            successes = segment_successes(segment, ANSWER_COLUMNS)
            with self._lock:
                self._ledger_segments[segment] = (stamp, successes)
            return successes
        try:
            found = latest_successes(self.root, call_ids, read)
        except (OSError, pl.exceptions.PolarsError):
            return None
        with self._lock:  # segments merged by a compaction are gone: forget them
            for segment in self._ledger_segments.keys() - listed:
                del self._ledger_segments[segment]
        return {call_id: row["parsed"] for call_id, row in found.items()}

    def _read(self, path: Path, name: str, partition: str) -> pl.DataFrame | None:
        stamp = _stamp(path)
        if stamp is None:
            return None
        with self._lock:
            cached = self._tables.get(path)
            if cached is not None and cached[0] == stamp:
                return cached[1]
        frame = self.lake.read_table(name, partition)
        with self._lock:
            self._tables[path] = (stamp, frame)
        return frame

    def derived(self, key: tuple, tables: list[tuple[str, str]], compute: Callable[[], T]) -> T:
        """`compute()` cached under `key` for as long as the partition files of `tables` ((table, partition) pairs,
        every configuration's predictions of a venue counted by ("predictions", venue)) stay as they are."""
        stamps = tuple(self._stamps(table, partition) for table, partition in tables)
        with self._lock:
            cached = self._derived.get(key)
            if cached is not None and cached[0] == stamps:
                return cached[1]  # type: ignore[return-value]
        value = compute()
        with self._lock:
            self._derived[key] = (stamps, value)
        return value

    def _stamps(self, table: str, partition: str) -> tuple:
        if table == "predictions":
            return tuple((key, _stamp(self.lake.table_path(table, key)))
                         for key in self.lake.prediction_keys(partition))
        return (_stamp(self.lake.table_path(table, partition)),)

    # -- files by content hash ------------------------------------------------------------------------------------
    def pdf_path(self, sha256: str) -> Path:
        """The PDF whose sha256 `manuscript_pdfs` (a venue's manuscript) or `cited_manuscripts` (a cited paper)
        records, wherever the lake keeps it; NotInLake if no venue has it."""
        if not SHA256.match(sha256):
            raise NotInLake("a manuscript is named by its sha256 (64 lower-case hex digits)")
        for table, column in (("manuscript_pdfs", "sha256"), ("cited_manuscripts", "pdf_sha256")):
            for venue in self.lake.partition_keys(table):
                pdfs = self.table(table, venue).filter(pl.col(column) == sha256)
                for stored in pdfs["lake_path"].drop_nulls():
                    path = (self.root / stored).resolve()
                    if path.is_relative_to(self.root) and path.is_file():
                        return path
        raise NotInLake(f"no manuscript with sha256 {sha256} is in the lake")

    def page_image(self, sha256: str, page: int, scale: float) -> Path:
        """The PNG of page `page` (1-based) of the manuscript, rendered once at `scale` and kept in the lake's web
        folder; NotInLake for an unknown manuscript or a page it does not have."""
        if scale not in PAGE_SCALES:
            raise NotInLake(f"pages are rendered at scales {', '.join(map(str, PAGE_SCALES))} only")
        pdf = self.pdf_path(sha256)
        target = self.root / WEB_DIR / PAGE_IMAGES_DIR / sha256 / f"{page}@{scale}.png"
        if target.exists():
            return target
        document = pdfium.PdfDocument(pdf)
        try:
            if not 1 <= page <= len(document):
                raise NotInLake(f"manuscript {sha256} has {len(document)} pages, not a page {page}")
            image = document[page - 1].render(scale=scale).to_pil()
        finally:
            document.close()
        with atomic_path(target) as temporary:
            image.save(temporary, format="PNG")
        return target

    def figures(self, venue: str) -> list[dict]:
        """The venue's report figures that exist on disk: file name, description and content hash (what the page
        links them by)."""
        report = self.optional_table("venue_report", venue)
        if report is None:
            return []
        folder = report_folder(self.lake, venue)

        def compute() -> list[dict]:
            found = []
            for row in report.iter_rows(named=True):
                path = folder / Path(row["figure"]).name
                if path.is_file():
                    found.append({"figure": row["figure"], "description": row["description"],
                                  "sha256": hashlib.sha256(path.read_bytes()).hexdigest(), "path": path})
            return found
        return self.derived(("figures", venue), [("venue_report", venue)], compute)

    def figure_path(self, sha256: str) -> Path:
        """The report figure with this content hash, of any venue; NotInLake when none has it."""
        for venue in self.venues():
            for figure in self.figures(venue):
                if figure["sha256"] == sha256:
                    return figure["path"]
        raise NotInLake(f"no report figure with sha256 {sha256} is in the lake")

"""The lake's parse cache (resources/parse_cache.py): a PDF parsed once per lake and parser. The same bytes again are
answered from the cache without Docling (its converters never built, its conversion never called), whatever paper id
they come under, and give the same document, rows and parse errors as a parse without the cache; a parser of another
identity (version, pipeline, options) misses; an entry that cannot be trusted (cut short, not gzip, not JSON, another
PDF's, not a document) is parsed again and replaced; a parse error caused by the PDF is kept, one caused by the
machine is not. The venue build's parse step, the cited papers' store and an S3 lake go through it alike."""

from __future__ import annotations

import gzip
import hashlib
import json
from dataclasses import replace
from pathlib import Path

import dagster as dg
import pytest

from peerify_dagster.assets.steps.parsed_tables import parsed_row
from peerify_dagster.resources import document_parser
from peerify_dagster.resources.cited_papers import CitedPaperStore
from peerify_dagster.resources.dagster_resources import DocumentParserResource
from peerify_dagster.resources.document_parser import DocumentParser, ManuscriptParseError
from peerify_dagster.resources.lake import Lake
from peerify_dagster.resources.parse_cache import PARSE_CACHE_DIR
from tests import fixtures_pdf
from tests.support import materialise
from tests.test_shards import MANUSCRIPTS, PARSING, VENUE, manuscript_bytes, stage_venue

SAMPLE_PDFS = sorted((Path(__file__).resolve().parents[1] / "peerify_dagster" / "sample_venue" / "snapshot"
                      / "pdfs").glob("*.pdf"))


@pytest.fixture(scope="module")
def two_column() -> bytes:
    return fixtures_pdf.two_column_paper()  # made once: each making differs (ids, dates), and so does its sha256


@pytest.fixture
def conversions(monkeypatch) -> list[str]:
    """The paper ids Docling is asked to convert (the real conversion runs)."""
    converted: list[str] = []
    convert = DocumentParser._convert

    def counting(self, kind, paper_id, name, data):  # noqa: ANN001, ANN202
        converted.append(paper_id)
        return convert(self, kind, paper_id, name, data)

    monkeypatch.setattr(DocumentParser, "_convert", counting)
    return converted


def entries(lake: Path) -> list[Path]:
    return sorted((lake / PARSE_CACHE_DIR).rglob("*.json.gz"))


def test_a_pdf_is_parsed_once_per_lake_and_answered_alike_under_any_paper_id(tmp_path, conversions):
    lake = tmp_path / "lake"
    for pdf in SAMPLE_PDFS:
        data = pdf.read_bytes()
        uncached = DocumentParser().parse(data, pdf.name, paper_id=pdf.stem)
        first = DocumentParser(cache_root=lake)
        assert first.parse(data, pdf.name, paper_id=pdf.stem) == uncached
        assert (first.cache.hits, first.cache.misses) == (0, 1)
        again = DocumentParser(cache_root=lake)  # a new process's parser: nothing held in memory
        conversions.clear()
        answered = again.parse(data, "upload.pdf", paper_id="upload-paper")
        assert (again.cache.hits, again.cache.misses, conversions, again._converters) == (1, 0, [], {})
        assert answered == replace(uncached, paper_id="upload-paper")
        sha256 = hashlib.sha256(data).hexdigest()
        assert parsed_row("v", sha256, answered) == parsed_row("v", sha256, replace(uncached, paper_id="upload-paper"))
    assert [path.name for path in entries(lake)] == sorted(f"{hashlib.sha256(pdf.read_bytes()).hexdigest()}.json.gz"
                                                           for pdf in SAMPLE_PDFS)


def test_another_parser_version_pipeline_or_option_misses_the_cache(tmp_path, two_column, conversions, monkeypatch):
    lake = tmp_path / "lake"
    DocumentParser(cache_root=lake).parse(two_column, "paper.pdf")
    folder = DocumentParser(cache_root=lake).cache.folder
    assert DocumentParser(cache_root=lake).cache.folder == folder
    assert DocumentParser(cache_root=lake, parser_threads=2).cache.folder != folder
    assert DocumentParser(artifacts_path=str(tmp_path), cache_root=lake).cache.folder != folder
    real_version = document_parser.parser_version()
    monkeypatch.setattr(document_parser, "parser_version", lambda: real_version.replace("peerify-layout", "rules 2"))
    conversions.clear()
    upgraded = DocumentParser(cache_root=lake)
    upgraded.parse(two_column, "paper.pdf")
    assert (upgraded.cache.hits, upgraded.cache.misses, conversions) == (0, 1, ["paper"])
    assert len(entries(lake)) == 2  # the old parser's entry is left for it


def _entry_of_another_pdf(entry: bytes, other: bytes) -> bytes:
    return other


def _not_a_document(entry: bytes, other: bytes) -> bytes:
    record = json.loads(gzip.decompress(entry))
    del record["result"]["document"]["blocks"]
    return gzip.compress(json.dumps(record).encode())


@pytest.mark.parametrize("spoil", [
    pytest.param(lambda entry, other: entry[: len(entry) // 2], id="cut-short"),
    pytest.param(lambda entry, other: b"\x00" * 64, id="not-gzip"),
    pytest.param(lambda entry, other: gzip.compress(b'{"format": 1, "pdf_sha256": '), id="not-json"),
    pytest.param(lambda entry, other: entry[:-12] + bytes(12), id="corrupted"),
    pytest.param(_entry_of_another_pdf, id="another-pdfs-entry"),
    pytest.param(_not_a_document, id="not-a-document"),
])
def test_an_entry_that_cannot_be_trusted_is_parsed_again_and_replaced(tmp_path, two_column, conversions, spoil):
    lake = tmp_path / "lake"
    expected = DocumentParser(cache_root=lake).parse(two_column, "paper.pdf")
    [entry] = entries(lake)
    DocumentParser(cache_root=lake).parse(fixtures_pdf.one_page_abstract(), "other.pdf")
    [other] = [path for path in entries(lake) if path != entry]
    entry.write_bytes(spoil(entry.read_bytes(), other.read_bytes()))
    conversions.clear()
    parser = DocumentParser(cache_root=lake)
    assert parser.parse(two_column, "paper.pdf") == expected
    assert (parser.cache.hits, parser.cache.misses, parser.cache.rejected, conversions) == (0, 1, 1, ["paper"])
    again = DocumentParser(cache_root=lake)
    assert again.parse(two_column, "paper.pdf") == expected and again.cache.hits == 1  # replaced by a whole entry


def test_a_parse_error_the_pdf_causes_is_kept_and_one_the_machine_causes_is_not(tmp_path, conversions):
    lake, scanned = tmp_path / "lake", fixtures_pdf.image_only_paper()
    for attempt in range(2):
        parser = DocumentParser(cache_root=lake)
        with pytest.raises(ManuscriptParseError) as raised:
            parser.parse(scanned, f"scan-{attempt}.pdf")
        assert (raised.value.reason, raised.value.paper_id) == ("no_text_layer", f"scan-{attempt}")
    assert conversions == ["scan-0"] and parser.cache.hits == 1
    # No layout model here: the layout pipeline fails for a reason of this machine, parsed again next time.
    for _ in range(2):
        with pytest.raises(ManuscriptParseError, match="layout_model_unavailable"):
            DocumentParser(artifacts_path=str(tmp_path), cache_root=lake).parse(scanned, "scan.pdf")
    assert len(entries(lake)) == 1


def test_cited_papers_found_again_are_not_parsed_again(tmp_path, two_column, conversions):
    lake = Lake(tmp_path / "lake")

    def store() -> CitedPaperStore:  # as the cited-papers step makes it, one per step
        return CitedPaperStore(lake.root, DocumentParserResource().parser(lake))

    sha256 = store().put(two_column)
    first = store().parse(sha256)
    assert store().parse(sha256) == first and conversions == [f"sha256:{sha256}"]


def test_an_s3_lake_keeps_the_parse_cache_too(s3_service, monkeypatch, tmp_path, two_column, conversions):
    for name, value in s3_service.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PEERIFY_LAKE_CACHE", str(tmp_path / "cache"))
    lake = f"{s3_service.make_bucket('parse-cache')}/lake"
    expected = DocumentParser(cache_root=lake).parse(two_column, "paper.pdf")
    [key] = [key for key in s3_service.filesystem().find(f"parse-cache/lake/{PARSE_CACHE_DIR}")
             if key.endswith(".json.gz")]
    conversions.clear()
    again = DocumentParser(cache_root=lake)
    assert again.parse(two_column, "paper.pdf") == expected and (again.cache.hits, conversions) == (1, [])
    s3_service.filesystem().pipe_file(key, b"cut short")
    spoilt = DocumentParser(cache_root=lake)
    assert spoilt.parse(two_column, "paper.pdf") == expected and spoilt.cache.rejected == 1
    assert len(s3_service.filesystem().cat_file(key)) > len(b"cut short")  # the entry written whole again


def parse_step_metadata(result: dg.ExecuteInProcessResult) -> dict[str, int]:
    """The parse steps' parse-cache counters, summed over the shards."""
    totals: dict[str, int] = {}
    for event in result.all_events:
        if event.is_successful_output and event.step_key.startswith("parsed_manuscripts.parse_shard"):
            for name, value in event.step_output_data.metadata.items():
                if name.startswith("parse_cache_"):
                    totals[name] = totals.get(name, 0) + value.value
    return totals


def test_a_venue_rebuilt_parses_none_of_its_pdfs_again(tmp_path, conversions):
    registry, lake_root = stage_venue(tmp_path, shards=3)
    first = materialise(VENUE, registry, lake_root, dg.DagsterInstance.ephemeral(), selection=PARSING)
    assert first.success
    tables = {table: Lake(lake_root).read_table(table, VENUE) for table in PARSING}
    parsed = len(conversions)
    assert parsed == len(MANUSCRIPTS) - 1  # the encrypted one fails before Docling
    rebuilt = materialise(VENUE, registry, lake_root, dg.DagsterInstance.ephemeral(), selection=PARSING)
    assert rebuilt.success and len(conversions) == parsed  # no PDF converted again
    assert parse_step_metadata(rebuilt) == {"parse_cache_hits": len(manuscript_bytes()), "parse_cache_misses": 0,
                                            "parse_cache_rejected": 0}
    for table, frame in tables.items():
        assert Lake(lake_root).read_table(table, VENUE).equals(frame), table
    assert tables["parse_errors"]["reason"].to_list() == ["encrypted", "no_text_layer"]

"""The lake behind one filesystem abstraction (resources/store.py): every operation the lake needs, on a local
folder and on a real S3 API (SeaweedFS on loopback, `s3_service`), with the lake's public API unchanged."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import dagster as dg
import duckdb
import polars as pl
import pytest

from peerify_dagster.resources.dagster_resources import ParquetLakeIOManager
from peerify_dagster.resources.lake import Lake, UnreadablePartitionError, WriteStatementError
from peerify_dagster.resources.store import LakeStore
from tests.test_llm_ledger import MODELS_YAML, synthetic_row  # noqa: F401 - conftest's `models_file` reads MODELS_YAML

FRAME = pl.DataFrame({"paper_id": ["p1", "p2", "p3"], "title": ["A", "B", "C"], "year": [2024, 2025, 2026]})
BACKENDS = ["local", "s3"]


@pytest.fixture(scope="module")
def bucket(request):
    """One bucket for the module's S3 cases; the S3 server starts only when an S3 case runs."""
    service = request.getfixturevalue("s3_service")
    return service, service.make_bucket("store-" + uuid.uuid4().hex[:8])


@pytest.fixture(params=BACKENDS)
def lake_root(request, tmp_path, monkeypatch) -> str:
    """A fresh, empty lake root: a local folder, or a fresh prefix in the module's bucket (AWS_* pointing at the
    loopback S3 server, the local catalog in a temporary folder)."""
    if request.param == "local":
        return str(tmp_path / "lake")
    service, bucket_url = request.getfixturevalue("bucket")
    for name, value in service.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PEERIFY_LAKE_CACHE", str(tmp_path / "cache"))
    return f"{bucket_url}/{uuid.uuid4().hex[:8]}"


def objects_under(lake: Lake, folder: str) -> list[str]:
    """The names under a lake folder, listed straight from the storage (not through the Lake)."""
    if lake.store.is_object_store:
        fs = lake.store.fs
        return sorted(path.rsplit("/", 1)[-1] for path in fs.ls(f"{lake.root.path}/{folder}", detail=False))
    return sorted(path.name for path in (lake.root / folder).iterdir())


def test_tables_write_and_read_back_with_one_object_per_partition(lake_root, tmp_path):
    lake = Lake(lake_root)
    for venue in ("ICLR.cc/2024", "ICLR.cc/2025", "sample"):
        lake.write_table("submissions", venue, FRAME)
    lake.write_table("venue_table", None, FRAME.head(1))

    assert objects_under(lake, "submissions") == ["ICLR.cc__2024.parquet", "ICLR.cc__2025.parquet", "sample.parquet"]
    assert lake.partition_keys("submissions") == ["ICLR.cc/2024", "ICLR.cc/2025", "sample"]
    assert lake.tables() == ["submissions", "submissions", "submissions", "venue_table"]
    assert lake.read_table("submissions", "ICLR.cc/2025").equals(FRAME)
    assert lake.open_table("submissions", "sample").metadata.num_rows == 3
    with pytest.raises(FileNotFoundError, match="no partition 'other'"):
        lake.read_table("submissions", "other")
    # The bytes are what a folder lake writes for the same frame: content hashes do not depend on the backend.
    local = Lake(tmp_path / "reference")
    assert (lake.table_path("submissions", "sample").read_bytes()
            == local.write_table("submissions", "sample", FRAME).read_bytes())


def test_a_streamed_table_appears_only_when_committed(lake_root):
    lake = Lake(lake_root)
    lake.write_table("notes", "sample", FRAME.head(1))
    with lake.stream_table("notes", "sample", dict(FRAME.schema)) as writer:
        writer.write(FRAME.head(2).to_dicts())
        writer.write(FRAME.tail(1))
        streamed = writer.finish()
    assert lake.read_table("notes", "sample").height == 1  # readers see the previous file until the commit
    assert streamed.head().height == 3
    assert str(streamed.commit()) == str(lake.table_path("notes", "sample"))
    assert lake.read_table("notes", "sample").equals(FRAME)
    assert not streamed.temporary.exists()
    assert lake.open_table("notes", "sample").metadata.num_row_groups == 2

    with pytest.raises(RuntimeError, match="stopped"), lake.stream_table("notes", "other", dict(FRAME.schema)) as w:
        w.write(FRAME)
        raise RuntimeError("stopped")
    assert lake.partition_keys("notes") == ["sample"]
    assert not w.temporary.exists()


CRASHING_WRITER = """
import os, sys, time
import polars as pl
from peerify_dagster.resources.lake import Lake
lake = Lake(sys.argv[1])
with lake.stream_table("notes", "sample", {"n": pl.Int64}) as writer:
    writer.write([{"n": i} for i in range(1000)])
    open(sys.argv[2], "w").write(str(writer.temporary))
    time.sleep(600)
"""


def test_a_writer_killed_mid_write_leaves_no_object(lake_root, tmp_path):
    marker = tmp_path / "writing"
    writer = subprocess.Popen([sys.executable, "-c", CRASHING_WRITER, lake_root, str(marker)], env=os.environ.copy())
    try:
        deadline = time.monotonic() + 60
        while not (marker.exists() and marker.read_text()) and writer.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert writer.poll() is None, "the writer ended before it was killed"
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait()
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
    lake = Lake(lake_root)
    assert Path(marker.read_text()).exists()  # the killed writer's temporary is a local file (cleaned up later)
    assert lake.partition_keys("notes") == []
    assert not lake.table_path("notes", "sample").exists()


def test_create_if_absent_lets_exactly_one_writer_win(lake_root):
    store = LakeStore(lake_root)
    target = store.root / "claims" / "call-1.json"
    results: dict[int, bool] = {}

    def claim(writer: int) -> None:
        results[writer] = store.create(target, f"writer {writer}".encode())

    threads = [threading.Thread(target=claim, args=(writer,)) for writer in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = [writer for writer, created in results.items() if created]
    assert len(winners) == 1
    assert target.read_bytes() == f"writer {winners[0]}".encode()
    assert store.create(target, b"late") is False
    assert target.read_bytes() == f"writer {winners[0]}".encode()
    assert objects_under(Lake(lake_root), "claims") == ["call-1.json"]  # no temporary left beside it


def test_whole_objects_exist_list_delete_and_copy_down(lake_root):
    store = LakeStore(lake_root)
    pdf = store.root / "pdfs" / ("ab" * 32 + ".pdf")
    store.write_bytes(pdf, b"%PDF-1.7 one")
    store.write_bytes(store.root / "pdfs" / "note.json", b"{}")
    assert pdf.exists() and pdf.read_bytes() == b"%PDF-1.7 one"
    assert [path.name for path in sorted((store.root / "pdfs").glob("*.pdf"))] == [pdf.name]
    with pdf.open("rb") as handle:
        assert handle.read(4) == b"%PDF"

    copy = store.local_copy(pdf)
    assert isinstance(copy, Path) and copy.read_bytes() == b"%PDF-1.7 one"
    assert store.is_object_store == (copy != pdf)  # an S3 object is copied into the local cache, a file is itself

    store.delete(pdf)
    store.delete(pdf)  # already gone: nothing to do
    assert not pdf.exists()
    assert [path.name for path in (store.root / "pdfs").glob("*")] == ["note.json"]


def test_an_unreadable_object_is_named_and_left_out_of_its_view(lake_root):
    lake = Lake(lake_root)
    lake.write_table("submissions", "sample", FRAME)
    bad = lake.table_path("submissions", "broken")
    lake.store.write_bytes(bad, b"not parquet at all")

    with pytest.raises(UnreadablePartitionError) as caught:
        lake.read_table("submissions", "broken")
    assert lake.store.url(bad) in str(caught.value)
    with pytest.raises(UnreadablePartitionError, match="broken.parquet"):
        lake.open_table("submissions", "broken")

    report = lake.refresh_catalog()
    assert [(view, str(path)) for view, path, _ in report.left_out] == [("submissions", str(bad))]
    assert any(lake.store.url(bad) in line for line in report.problems())
    assert lake.query("select count(*) from submissions", refresh=False)[1] == [(3,)]


def test_catalog_views_read_the_lake_and_queries_stay_read_only(lake_root):
    lake = Lake(lake_root)
    lake.write_table("submissions", "sample", FRAME)
    lake.write_table("arbitration_key", "sample", FRAME)  # a table without a view: never readable by a query
    assert lake.catalog_path.parent == (lake.root if not lake.store.is_object_store else lake.store.cache_dir)

    columns, rows = lake.query("select paper_id, year from submissions order by year desc")
    assert columns == ["paper_id", "year"] and rows[0] == ("p3", 2026)
    lake.write_table("submissions", "later", FRAME.head(1))  # a partition added later: the view's glob sees it
    assert lake.query("select count(*) from submissions", refresh=False)[1] == [(4,)]

    outside = lake.store.url(lake.table_path("arbitration_key", "sample"))
    with pytest.raises(duckdb.Error, match="disabled by configuration|Permission"):
        lake.query(f"select * from read_parquet('{outside}')", refresh=False)
    with pytest.raises(WriteStatementError):
        lake.query(f"copy (select 1) to '{lake.store.url(lake.root)}/submissions/evil.parquet'", refresh=False)
    with pytest.raises(WriteStatementError):
        lake.query("set enable_external_access = true", refresh=False)
    assert lake.partition_keys("submissions") == ["later", "sample"]


def test_the_io_manager_stores_asset_partitions_in_the_lake(lake_root):
    partitions = dg.StaticPartitionsDefinition(["sample", "ICLR.cc/2025"])

    @dg.asset(partitions_def=partitions)
    def submissions() -> pl.DataFrame:
        return FRAME

    @dg.asset(partitions_def=partitions)
    def titles(submissions: pl.DataFrame) -> pl.DataFrame:
        return submissions.select("title")

    for key in partitions.get_partition_keys():
        result = dg.materialize([submissions, titles], partition_key=key,
                                resources={"io_manager": ParquetLakeIOManager(root=lake_root)})
        assert result.success
    lake = Lake(lake_root)
    assert objects_under(lake, "titles") == ["ICLR.cc__2025.parquet", "sample.parquet"]
    assert lake.read_table("titles", "ICLR.cc/2025").equals(FRAME.select("title"))
    path = result.asset_materializations_for_node("titles")[0].metadata["path"].value
    assert path == lake.store.url(lake.table_path("titles", "ICLR.cc/2025"))


# -- what else lives in the lake: the LLM call ledger's segments, the embedding cache ----------------------------------
def test_the_llm_ledger_records_compacts_and_quarantines_in_the_lake(lake_root, models_file):
    from peerify_dagster.resources.llm_gateway import CallLedger, LLMGateway
    from tests.fakes.openai_server import ScriptedOpenAIServer

    with ScriptedOpenAIServer() as server:
        env = {"TEST_OPENAI_URL": server.base_url, "TEST_OPENAI_KEY": "sk-test"}
        claims = [f"The paper omits baseline {index}." for index in range(3)]
        with LLMGateway(lake_root, models_file=models_file, env=env, request_timeout_s=60) as gateway:
            made = [gateway.call("fact_tagger", "tag_fact", {"claim": claim}) for claim in claims]
        with LLMGateway(lake_root, models_file=models_file, env=env, request_timeout_s=60) as gateway:
            again = [gateway.call("fact_tagger", "tag_fact", {"claim": claim}) for claim in claims]
        assert server.request_count == 3  # the second gateway found every call in the lake's ledger
    assert [result.call_id for result in again] == [result.call_id for result in made]
    assert all(result.cached for result in again)

    lake = Lake(lake_root)
    stored = [name for name in objects_under(lake, "llm_calls") if name.endswith(".parquet")]
    assert stored and all(name.startswith(("call-", "part-")) for name in stored)  # no temporary among them
    ledger = CallLedger(lake_root)
    assert set(ledger.successful_call_ids()) == {result.call_id for result in made}
    row = synthetic_row(1)  # a call none of the made ones is
    appended = ledger.append(row)
    assert appended.name.startswith("call-") and appended.exists()
    written = ledger.compact()
    assert written and not appended.exists()
    assert set(CallLedger(lake_root).successful_call_ids()) == {row["call_id"], *(result.call_id for result in made)}
    assert lake.query("select count(distinct call_id) from llm_calls")[1] == [(4,)]
    from peerify_dagster.estimate import _mean_tokens  # what `peerify build --estimate` reads of the ledger

    assert ("scripted-gpt", "tag_fact") in _mean_tokens(lake)

    broken = lake.root / "llm_calls" / "call-20990101T000000000000Z-1-deadbeef.parquet"
    lake.store.write_bytes(broken, b"PAR1 truncated")
    reader = CallLedger(lake_root)
    assert [record.segment.name for record in reader.quarantined] == [broken.name]
    assert not broken.exists() and (lake.root / "llm_calls" / "quarantine" / broken.name).exists()


class LengthEmbedder:
    """A deterministic stand-in model (the cache, not the model, is under test): a text's vector from its length."""

    dimension = 2
    model_id = "length-embedder@1"

    def __init__(self):
        self.embedded: list[str] = []

    def embed(self, texts, progress=None):  # noqa: ANN001, ANN201
        import numpy as np

        self.embedded += list(texts)
        return np.asarray([[len(text), 1.0] for text in texts], dtype=np.float32)


def test_the_embedding_cache_keeps_its_parts_in_the_lake(lake_root):
    from peerify_dagster.resources.embedder import EmbeddingCache

    lake = Lake(lake_root)
    model = LengthEmbedder()
    first, hits, computed = EmbeddingCache(lake.root / "embedding_cache", model).embed_with_cache(["a", "bb"])
    assert (hits, computed) == (0, 2)
    second, hits, computed = EmbeddingCache(lake.root / "embedding_cache", model).embed_with_cache(["bb", "ccc"])
    assert (hits, computed) == (1, 1) and model.embedded == ["a", "bb", "ccc"]
    assert second.tolist() == [[2.0, 1.0], [3.0, 1.0]]
    (model_folder,) = objects_under(lake, "embedding_cache")
    parts = objects_under(lake, f"embedding_cache/{model_folder}")
    assert len(parts) == 2 and all(name.startswith("part-") and name.endswith(".parquet") for name in parts)


def test_a_crawl_lands_its_snapshot_in_the_lake(lake_root, tmp_path):
    from peerify_dagster.resources.openreview import HttpPolicy, OpenReviewCrawler, SnapshotReader, make_client
    from tests.fakes.openreview_server import FakeOpenReviewServer
    from tests.test_reviewed_pdf import REVIEWED, UNREVIEWED, VENUE, write_snapshot

    pdfs = write_snapshot(tmp_path / "served")
    lake = Lake(lake_root)
    landed = lake.root / "snapshots" / "pdfchoice"
    with FakeOpenReviewServer(tmp_path / "served") as server:
        crawler = OpenReviewCrawler(make_client(server.url, HttpPolicy(timeout_s=5, retries=0)), VENUE, landed,
                                    log=lambda line: None)
        assert len(crawler.land_submissions()) == 3
        for forum_id in (REVIEWED, UNREVIEWED):
            assert crawler.land_forum(forum_id).status == "fetched"
            assert crawler.land_pdf(forum_id).status == "fetched"
        assert crawler.land_forum(REVIEWED).status == "stored"  # what is landed is not fetched again

    assert objects_under(lake, "snapshots/pdfchoice") == ["forums", "pdfs", "submissions.json", "venue.json"]
    reader = SnapshotReader(lake.store.url(landed))  # as a string, as a registry names it
    assert reader.venue()["venue_id"] == VENUE and len(reader.submissions()) == 3
    assert REVIEWED in {note["id"] for note in reader.forum(REVIEWED).notes}
    assert reader.pdf_bytes(REVIEWED) == pdfs["E2"] and reader.pdf_meta(UNREVIEWED)["version"] == "latest"
    assert not reader.has_forum("Unknown")


def test_an_s3_lake_keeps_its_local_files_in_the_cache_folder(monkeypatch, tmp_path):
    from peerify_dagster import paths

    monkeypatch.setenv("PEERIFY_LAKE", "s3://bucket/team/lake")
    monkeypatch.setenv("PEERIFY_LAKE_CACHE", str(tmp_path / "cache"))
    lake = Lake(paths.lake_root())  # no request is made until the lake is read or written
    assert (lake.store.url(lake.table_path("reviews", "ICLR.cc/2025"))
            == "s3://bucket/team/lake/reviews/ICLR.cc__2025.parquet")
    assert lake.catalog_path == tmp_path / "cache" / "peerify.duckdb"
    staged = lake.store.staging_path(lake.table_path("reviews", "sample"))
    assert staged.parent == tmp_path / "cache" / "staging" / "reviews" and staged.name.endswith(".tmp")
    assert paths.dagster_home() == str(tmp_path / "cache" / ".dagster_home")

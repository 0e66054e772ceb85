"""A venue's heavy steps (parsing, chunking, embedding) run per shard of its papers: the assignment is stable,
balanced and covers every paper once; a venue parsed, chunked and embedded in 3 shards gives the tables one shard
gives; and a shard whose step fails is the only one a re-execution from failure runs again."""

from __future__ import annotations

import functools
import hashlib
import os
import random
import string
from pathlib import Path

import dagster as dg
import numpy as np
import polars as pl
import pytest

from peerify_dagster.assets import manuscripts as manuscripts_stage
from peerify_dagster.assets.manuscript_pdfs import PDF_SCHEMA
from peerify_dagster.definitions import build_resources, defs
from peerify_dagster.domain.shards import PAPERS_PER_SHARD, shard_count, shard_key, shard_of, shard_rows
from peerify_dagster.domain.venues import RegistryError, load_registry
from peerify_dagster.partitions import venue_partitions
from peerify_dagster.resources.dagster_resources import DocumentParserResource
from peerify_dagster.resources.lake import Lake
from peerify_dagster.resources.shard_io import SHARD, assemble_shards, split_into_shards
from tests import fixtures_pdf, shard_support
from tests.fakes.cli import write_registry
from tests.shard_support import Reexecution, fail_then_reexecute
from tests.support import materialise

VENUE = "synthetic"
SHARDS = 3
PARSING = ["parsed_manuscripts", "parse_errors"]
SHARDED_TABLES = [*PARSING, "chunks", "chunk_embeddings"]
# The synthetic venue's manuscripts (quick to parse): three that parse, two that give parse error rows (not step
# failures).
MANUSCRIPTS = [fixtures_pdf.two_column_paper, fixtures_pdf.one_page_abstract, fixtures_pdf.rotated_paper,
               fixtures_pdf.encrypted_paper, fixtures_pdf.image_only_paper]
FAIL_FLAG = "SHARDS_TEST_FAIL_FLAG"  # while the file it names exists, parsing (or chunking) the marked paper raises


# -- the assignment ------------------------------------------------------------------------------------------------
def forum_ids(count: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choices(string.ascii_letters + string.digits, k=10)) for _ in range(count)]


def test_every_paper_is_in_exactly_one_shard_and_the_shards_are_balanced():
    ids = forum_ids(4000)
    rows = shard_rows(ids, 8)
    assert sorted(position for positions in rows.values() for position in positions) == list(range(len(ids)))
    assert list(rows) == sorted(rows) and all(positions == sorted(positions) for positions in rows.values())
    sizes = [len(positions) for positions in rows.values()]
    assert len(sizes) == 8 and max(sizes) < 1.15 * len(ids) / 8 < 1.3 * min(sizes)


def test_a_papers_shard_depends_on_its_forum_id_only():
    ids = forum_ids(300)
    shuffled = random.Random(1).sample(ids, len(ids))
    again = {paper: shard for shard, positions in shard_rows(shuffled, 5).items() for paper in
             (shuffled[p] for p in positions)}
    assert again == {paper: shard_of(paper, 5) for paper in ids}
    # Fixed values: a change of hash would silently move the papers of a rerun to other shards.
    assert [shard_of(paper, 7) for paper in ("Hp4sLx9TcV", "Rk7bWq2NzA", "Wn6yBq3JhU", "Zd2fGm8KrE")] == [0, 2, 0, 3]


def test_a_papers_rows_stay_in_its_one_shard():
    papers = [paper for paper in forum_ids(50) for _ in range(3)]  # three chunks a paper
    rows = shard_rows(papers, 4)
    assert all(len({papers[p] for p in positions}) * 3 == len(positions) for positions in rows.values())
    assert sum(len(positions) for positions in rows.values()) == len(papers)


def test_shard_count_is_configured_or_automatic():
    assert shard_count(0) == 1 and shard_count(1) == 1 and shard_count(PAPERS_PER_SHARD) == 1
    assert shard_count(PAPERS_PER_SHARD + 1) == 2 and shard_count(20_000) == 20_000 // PAPERS_PER_SHARD
    assert shard_count(20_000, configured=3) == 3
    assert shard_rows([], 4) == {0: []}  # an empty venue still has one (empty) shard to assemble from
    assert shard_key(3) == "shard_0003"


def test_split_and_assemble_give_back_the_table_in_its_order_whatever_order_the_shards_come_in():
    frame = pl.DataFrame({"paper_id": forum_ids(40), "n": list(range(40))})
    outputs = list(split_into_shards(frame, frame["paper_id"].to_list(), 4))
    assert [o.mapping_key for o in outputs] == [shard_key(s) for s in range(4)]
    assert all(set(o.value[SHARD]) == {int(o.mapping_key[-4:])} for o in outputs)
    table, metadata = assemble_shards([o.value for o in reversed(outputs)])
    assert table.equals(frame) and metadata["shards"] == 4
    assert metadata["rows_per_shard"].data == {o.mapping_key: o.value.height for o in outputs}
    # A venue without rows: one empty shard, assembled into an empty table of the same columns.
    [empty] = list(split_into_shards(frame.clear(), [], 4))
    assert empty.mapping_key == shard_key(0) and assemble_shards([empty.value])[0].equals(frame.clear())


@pytest.mark.parametrize("value", [0, -2, "3", True, 1.5])
def test_a_bad_shard_count_in_the_registry_is_refused_naming_the_venue(tmp_path, value):
    registry = write_registry(tmp_path, VENUE, source="api", seed=1, shards=value)
    with pytest.raises(RegistryError, match=f"venue '{VENUE}': shards: must be a positive integer"):
        load_registry(registry)


# -- a sharded venue ----------------------------------------------------------------------------------------------
def paper_ids_over_shards() -> list[str]:
    """Six forum ids, two in each of the 3 shards, in shard order 2, 0, 1, 2, 0, 1: the venue's order is not the
    shards'."""
    by_shard: dict[int, list[str]] = {shard: [] for shard in range(SHARDS)}
    for paper in forum_ids(200, seed=3):
        if len(by_shard[shard_of(paper, SHARDS)]) < 2:
            by_shard[shard_of(paper, SHARDS)].append(paper)
    return [by_shard[shard][i] for i in range(2) for shard in (2, 0, 1)]


PAPERS = paper_ids_over_shards()
FAILING_PAPER = PAPERS[1]  # a good PDF, in shard 0


@functools.cache
def manuscript_bytes() -> list[bytes]:
    """The manuscripts made once: the fixture PDFs differ from one making to the next (ids, dates)."""
    return [make() for make in MANUSCRIPTS]


def stage_venue(folder: Path, shards: int) -> tuple[Path, Path]:
    """A registry naming the synthetic venue with `shards` shards, and a lake holding its manuscript_pdfs: the
    PDFs in `pdfs/`, and one paper without a PDF (nothing to parse)."""
    lake = Lake(folder / "lake")
    rows = []
    for paper, data in zip(PAPERS, manuscript_bytes()):
        digest = hashlib.sha256(data).hexdigest()
        (lake.root / "pdfs").mkdir(parents=True, exist_ok=True)
        (lake.root / "pdfs" / f"{digest}.pdf").write_bytes(data)
        rows.append({"venue": VENUE, "paper_id": paper, "status": "ok", "sha256": digest, "size_bytes": len(data),
                     "lake_path": f"pdfs/{digest}.pdf"})
    rows.insert(2, {"venue": VENUE, "paper_id": "NoPdfForum", "status": "failed", "reason": "missing_pdf",
                    "message": "paper NoPdfForum: no PDF in the snapshot"})
    lake.write_table("manuscript_pdfs", VENUE, pl.DataFrame(rows, schema=PDF_SCHEMA))
    (folder / "snapshot").mkdir(exist_ok=True)
    registry = write_registry(folder, VENUE, source="snapshot", snapshot=str(folder / "snapshot"), seed=1,
                              shards=shards)
    return registry, lake.root


def build(folder: Path, shards: int) -> tuple[dg.ExecuteInProcessResult, Path]:
    registry, lake_root = stage_venue(folder, shards)
    result = materialise(VENUE, registry, lake_root, dg.DagsterInstance.ephemeral(),
                         selection=dg.AssetSelection.assets(*SHARDED_TABLES))
    return result, lake_root


def file_digest(lake_root: Path, table: str) -> str:
    return shard_support.file_digest(lake_root, table, VENUE)


@pytest.fixture(scope="module")
def one_shard(tmp_path_factory) -> tuple[dg.ExecuteInProcessResult, Path]:
    result, lake_root = build(tmp_path_factory.mktemp("one-shard"), shards=1)
    assert result.success
    return result, lake_root


@pytest.fixture(scope="module")
def unsharded(one_shard) -> Path:
    return one_shard[1]


def materialisation(result: dg.ExecuteInProcessResult, asset: str) -> dg.AssetMaterialization:
    [event] = [e for e in result.all_events if e.is_step_materialization and e.asset_key == dg.AssetKey(asset)]
    return event.event_specific_data.materialization


def materialised(result: dg.ExecuteInProcessResult, asset: str) -> dict:
    return {key: value.value for key, value in materialisation(result, asset).metadata.items()}


def check_outcomes(result: dg.ExecuteInProcessResult) -> dict[str, tuple]:
    """The chunks' check results: passed, severity and the failing ids, by check."""
    return {e.check_name: (e.passed, e.severity, e.metadata["failing_ids"].value)
            for e in result.get_asset_check_evaluations() if e.asset_key == dg.AssetKey("chunks")}


def test_three_shards_give_the_tables_one_shard_gives(one_shard, tmp_path):
    unsharded_result, unsharded = one_shard
    result, lake_root = build(tmp_path, shards=SHARDS)
    assert result.success
    started = sorted(e.step_key for e in result.all_events if e.is_step_start)
    assert [key for key in started if "parse_shard" in key or "embed_shard" in key or "chunk_shard" in key] == [
        f"{asset}.{op}[{shard_key(shard)}]" for asset, op in (("chunk_embeddings", "embed_shard"),
                                                              ("chunks", "chunk_shard"),
                                                              ("parsed_manuscripts", "parse_shard"))
        for shard in range(SHARDS)]
    for table in ("parsed_manuscripts", "parse_errors", "chunks"):  # byte for byte: same rows, order, content
        assert file_digest(lake_root, table) == file_digest(unsharded, table), table
    parsed = Lake(lake_root).read_table("parsed_manuscripts", VENUE)
    errors = Lake(lake_root).read_table("parse_errors", VENUE)
    assert parsed["paper_id"].to_list() == PAPERS[:3]  # in the order of manuscript_pdfs, not of the shards
    assert sorted(errors["reason"].to_list()) == ["encrypted", "no_text_layer"]
    metadata = materialised(result, "parsed_manuscripts")
    assert metadata["shards"] == SHARDS and metadata["failed"] == 2
    assert metadata["rows_per_shard"] == {shard_key(0): 1, shard_key(1): 1, shard_key(2): 1}
    # Embeddings: same rows in the same order; each shard embeds its own batch of texts, so a vector may differ from
    # the one-batch vector in float32 rounding only.
    one, three = (Lake(root).read_table("chunk_embeddings", VENUE) for root in (unsharded, lake_root))
    assert one.height > 0 and one.drop("embedding").equals(three.drop("embedding"))
    np.testing.assert_allclose(np.stack(three["embedding"].to_numpy()), np.stack(one["embedding"].to_numpy()),
                               atol=1e-6)
    chunked, chunked_once = materialised(result, "chunks"), materialised(unsharded_result, "chunks")
    assert chunked["shards"] == SHARDS and chunked["chunking"] == chunked_once["chunking"]
    assert chunked["papers_per_shard"] == {shard_key(shard): 1 for shard in range(SHARDS)}  # the parsed papers
    assert check_outcomes(result) == check_outcomes(unsharded_result) and len(check_outcomes(result)) == 3
    embedded = materialised(result, "chunk_embeddings")
    assert embedded["shards"] == SHARDS and embedded["embedded"] == one["text_sha256"].n_unique()
    assert sum(embedded["rows_per_shard"].values()) == one.height
    # The shard count is no part of a code or data version: changing it marks nothing stale.
    for asset in SHARDED_TABLES:
        versions = [{tag: value for tag, value in materialisation(run, asset).tags.items()
                     if tag in ("dagster/code_version", "dagster/data_version")} for run in (unsharded_result, result)]
        assert versions[0] == versions[1] and len(versions[0]) == 2, asset


# -- a failed shard re-runs alone ---------------------------------------------------------------------------------
class FlakyParserResource(DocumentParserResource):
    """The real parser, except that parsing `fail_paper` raises (a step failure, not a parse error row) while the
    file named by SHARDS_TEST_FAIL_FLAG exists: a worker crashing on one shard."""

    fail_paper: str

    def parser(self, lake=None):  # noqa: ANN001 - a Lake
        real, fail_paper = super().parser(lake), self.fail_paper

        class Flaky:
            cache = real.cache

            def parse(self, source, source_name=None, paper_id=None):
                if paper_id == fail_paper and Path(os.environ[FAIL_FLAG]).exists():
                    raise RuntimeError(f"worker lost while parsing {paper_id}")
                return real.parse(source, source_name=source_name, paper_id=paper_id)

        return Flaky()


def sharded_job(name: str, selection: list[str], **resources) -> dg.JobDefinition:
    """`selection` of the code location with `resources` replaced; the lake and registry from PEERIFY_LAKE and
    PEERIFY_VENUES (a reconstructable job is rebuilt from a function of this module in the run's process)."""
    job = dg.define_asset_job(name, selection=selection, partitions_def=venue_partitions)
    return dg.Definitions(assets=list(defs.assets), jobs=[job],
                          resources=build_resources(**resources)).resolve_job_def(job.name)


def parsing_job() -> dg.JobDefinition:
    """The parse steps, with the flaky parser."""
    return sharded_job("sharded_parsing", PARSING, document_parser=FlakyParserResource(fail_paper=FAILING_PAPER))


def chunking_job() -> dg.JobDefinition:
    """The parse and chunk steps."""
    return sharded_job("sharded_chunking", [*PARSING, "chunks"])


def run_failing_then_again(job, table: str, tmp_path: Path, monkeypatch) -> tuple[Path, Reexecution]:  # noqa: ANN001
    """The staged venue's `table` built by `job` (reconstructable) in 3 shards while the flag file exists (FAILING_PAPER
    fails), then re-executed from its failure (shard_support.fail_then_reexecute); the lake's root and the runs."""
    registry, lake_root = stage_venue(tmp_path, shards=SHARDS)
    flag = tmp_path / "fail"
    flag.touch()
    for name, value in (("PEERIFY_LAKE", str(lake_root)), ("PEERIFY_VENUES", str(registry)), (FAIL_FLAG, str(flag))):
        monkeypatch.setenv(name, value)
    return lake_root, fail_then_reexecute(job, VENUE, tmp_path / "home", flag, Lake(lake_root).table_path(table, VENUE))


def assert_only_the_failed_shard_reran(runs: Reexecution, mapped_step: str, assembly_step: str) -> None:
    failing_step = f"{mapped_step}[{shard_key(shard_of(FAILING_PAPER, SHARDS))}]"
    assert runs.failed == {failing_step}
    assert {f"{mapped_step}[{shard_key(s)}]" for s in range(SHARDS)} - runs.succeeded == runs.failed
    assert runs.reran == {failing_step, assembly_step}


def test_a_failed_shard_is_the_only_step_a_reexecution_runs(unsharded, tmp_path, monkeypatch):
    lake_root, runs = run_failing_then_again(dg.reconstructable(parsing_job), "parsed_manuscripts", tmp_path,
                                             monkeypatch)
    assert_only_the_failed_shard_reran(runs, "parsed_manuscripts.parse_shard", "parsed_manuscripts.assemble_parsed")
    for table in PARSING:
        assert file_digest(lake_root, table) == file_digest(unsharded, table), table


def test_a_failed_chunking_shard_is_the_only_step_a_reexecution_runs(unsharded, tmp_path, monkeypatch):
    real_chunk_document = manuscripts_stage.chunk_document

    def flaky_chunk_document(paper_id, blocks, config):
        if paper_id == FAILING_PAPER and Path(os.environ[FAIL_FLAG]).exists():
            raise RuntimeError(f"worker lost while chunking {paper_id}")
        return real_chunk_document(paper_id, blocks, config)

    # The runs execute their steps in this process (in_process executor), so they chunk with the flaky function.
    monkeypatch.setattr(manuscripts_stage, "chunk_document", flaky_chunk_document)
    lake_root, runs = run_failing_then_again(dg.reconstructable(chunking_job), "chunks", tmp_path, monkeypatch)
    assert_only_the_failed_shard_reran(runs, "chunks.chunk_shard", "chunks.assemble_chunks")
    assert file_digest(lake_root, "chunks") == file_digest(unsharded, "chunks")

"""Every data-quality check of the forum tables and the chunks seen FAILING, with the failing ids read back from its
metadata; blocking checks stop what reads the checked tables, warnings do not. Each case breaks one row of the
real stage output (the build or chunking function is wrapped, the asset and its checks run unchanged)."""

from __future__ import annotations

import shutil
from dataclasses import replace

import dagster as dg
import pytest

from peerify_dagster.assets import forum_tables as forum_tables_stage
from peerify_dagster.assets import manuscripts as manuscripts_stage
from peerify_dagster.definitions import build_resources
from peerify_dagster.domain.chunking import Chunk
from peerify_dagster.partitions import venue_partitions
from peerify_dagster.resources.dagster_resources import VenueRegistryResource
from tests.support import ALL_ASSETS, materialise, sample_registry

INGESTION = dg.AssetSelection.groups("ingestion", "forum_tables")
# The forum tables and ingest_errors, which reads note_errors (later stages, e.g. LLM claim extraction, stay out).
FORUM_TABLES_AND_READERS = (dg.AssetSelection.assets("submissions").required_multi_asset_neighbors()
                            | dg.AssetSelection.assets("ingest_errors"))
CHUNKS_AND_READERS = dg.AssetSelection.assets("chunks", "chunk_stats")


def _first(rows: list[dict], **change) -> str:
    rows[0].update(change)
    return rows[0]


# (table, check, how one row is broken -> the id the check must name, blocking)
FORUM_CASES = {
    "duplicate review": ("reviews", "unique_ids", lambda r: r["reviews"].append(dict(r["reviews"][0]))
                         or r["reviews"][0]["review_id"], True),
    "orphan response": ("author_responses", "belongs_to_submission",
                        lambda r: _first(r["author_responses"], paper_id="NoSuchPaper")["response_id"], True),
    "empty review text": ("reviews", "non_empty_text", lambda r: _first(r["reviews"], review_text=" ")["review_id"],
                          False),
    "untitled submission": ("submissions", "well_formed", lambda r: _first(r["submissions"], title="")["paper_id"],
                            False),
    "review without signer": ("reviews", "well_formed",
                              lambda r: _first(r["reviews"], reviewer_id=None)["review_id"], False),
}


@pytest.fixture(scope="module")
def ingested(tmp_path_factory):
    """The sample venue's raw notes and PDFs in a lake, built once; each case copies it."""
    tmp = tmp_path_factory.mktemp("ingested")
    registry = sample_registry(tmp)
    assert materialise("sample", registry, tmp / "lake", dg.DagsterInstance.ephemeral(), INGESTION).success
    return registry, tmp / "lake"


def rebuild(selection: dg.AssetSelection, registry, lake_root) -> dg.ExecuteInProcessResult:
    """Materialise `selection` for the sample, reading everything upstream from the lake."""
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(venue_partitions.name, ["sample"])
    resources = build_resources(str(lake_root), venue_registry=VenueRegistryResource(path=str(registry)))
    return dg.materialize(ALL_ASSETS, selection=selection, instance=instance, partition_key="sample",
                          resources=resources, raise_on_error=False)


def _evaluation(result: dg.ExecuteInProcessResult, table: str, check: str):
    [evaluation] = [c for c in result.get_asset_check_evaluations()
                    if c.asset_key == dg.AssetKey(table) and c.check_name == check]
    return evaluation


@pytest.mark.parametrize("case", list(FORUM_CASES))
def test_each_forum_table_check_fails_and_names_the_bad_row(case, ingested, tmp_path, monkeypatch):
    table, check, breaks, blocking = FORUM_CASES[case]
    registry, built_lake = ingested
    shutil.copytree(built_lake, tmp_path / "lake")
    broken: list[str] = []
    real_build_tables = forum_tables_stage.build_tables

    def build_with_a_bad_row(*args, **kwargs):
        built = real_build_tables(*args, **kwargs)
        broken.append(breaks(built.rows))
        return built

    monkeypatch.setattr(forum_tables_stage, "build_tables", build_with_a_bad_row)
    result = rebuild(FORUM_TABLES_AND_READERS, registry, tmp_path / "lake")

    evaluation = _evaluation(result, table, check)
    assert not evaluation.passed
    assert evaluation.metadata["failing_ids"].value == broken
    assert evaluation.metadata["failing_count"].value == 1
    started = {e.step_key for e in result.all_events if e.is_step_start}
    if blocking:  # the step fails and ingest_errors, which reads its tables, never starts
        assert evaluation.severity == dg.AssetCheckSeverity.ERROR and evaluation.blocking
        assert not result.success and "ingest_errors" not in started
    else:
        assert evaluation.severity == dg.AssetCheckSeverity.WARN
        assert result.success and "ingest_errors" in started


def _emptied(chunks: list[Chunk]) -> tuple[list[Chunk], str]:
    return [replace(chunks[0], text="", word_count=0), *chunks[1:]], chunks[0].chunk_id


def _runaway(chunks: list[Chunk]) -> tuple[list[Chunk], str]:
    text = " ".join(["verification"] * 2000)
    return [replace(chunks[0], text=text, word_count=2000), *chunks[1:]], chunks[0].chunk_id


def _dropped(chunks: list[Chunk]) -> tuple[list[Chunk], str]:
    return [], chunks[0].paper_id


# check -> (how the first paper's chunks are broken -> the id the check must name, blocking)
CHUNK_CASES = {"no_empty_chunks": (_emptied, True), "no_runaway_chunks": (_runaway, False),
               "every_paper_has_chunks": (_dropped, False)}


@pytest.fixture(scope="module")
def parsed(ingested, tmp_path_factory):
    registry, lake = ingested
    assert rebuild(dg.AssetSelection.assets("parsed_manuscripts", "parse_errors"), registry, lake).success
    return registry, lake


@pytest.mark.parametrize("check", list(CHUNK_CASES))
def test_each_chunk_check_fails_and_names_the_bad_chunk(check, parsed, tmp_path, monkeypatch):
    breaks, blocking = CHUNK_CASES[check]
    registry, built_lake = parsed
    shutil.copytree(built_lake, tmp_path / "lake")
    broken: list[str] = []
    real_chunk_document = manuscripts_stage.chunk_document

    def chunking_with_a_bad_chunk(paper_id, blocks, config):
        chunks = real_chunk_document(paper_id, blocks, config)
        if broken or not chunks:
            return chunks
        chunks, bad_id = breaks(chunks)
        broken.append(bad_id)
        return chunks

    monkeypatch.setattr(manuscripts_stage, "chunk_document", chunking_with_a_bad_chunk)
    result = rebuild(CHUNKS_AND_READERS, registry, tmp_path / "lake")

    evaluation = _evaluation(result, "chunks", check)
    assert not evaluation.passed and evaluation.metadata["failing_ids"].value == broken
    assert [c.check_name for c in result.get_asset_check_evaluations() if not c.passed] == [check]
    started = {e.step_key for e in result.all_events if e.is_step_start}
    assert ("chunk_stats" not in started) if blocking else ("chunk_stats" in started and result.success)

"""The citation half's heavy steps (resolving and parsing the cited papers, the citance tagger's calls, ranking the
evidence windows, the citation verifiers' calls) run one step per shard of the venue's citing papers: the sample
built in 3 shards gives the tables 1 shard gives, byte for byte, every call answered from the shipped recording; a
cited PDF that citing papers of two shards resolve to is parsed in each and kept once; and a shard whose verifier
calls fail is the only one a re-execution from failure runs again."""

from __future__ import annotations

import shutil
from pathlib import Path

import dagster as dg

from peerify_dagster.definitions import build_resources, defs
from peerify_dagster.domain.shards import shard_key, shard_of
from peerify_dagster.partitions import venue_partitions
from peerify_dagster.resources.dagster_resources import VenueRegistryResource
from peerify_dagster.resources.lake import Lake
from tests import fixtures_pdf, shard_support
from tests.citation_support import write_citation_venue
from tests.shard_support import fail_then_reexecute
from tests.support import SAMPLE_RECORDING, materialise, materialization_metadata, sample_registry

VENUE = "sample"
SHARDS = 3
# Each sharded asset and its mapped (per shard) step.
SHARDED_STEPS = {"cited_papers": "resolve_cited_shard", "citance_enrichment": "tag_citance_shard",
                 "citation_evidence": "rank_evidence_shard", "citation_verdicts": "judge_citation_shard"}
TABLES = ["cited_papers", "cited_manuscripts", "citance_enrichment", "citation_evidence", "citation_verdicts"]
FAIL_FLAG = "CITATION_SHARDS_TEST_FAIL_FLAG"  # while the file it names exists, a call about the citance it holds raises


def sharded_copy(one_shard_lake: Path, folder: Path, shards: int) -> tuple[Path, Path]:
    """A copy of the one-shard lake (the stages' inputs, the ledger holding the recording) and a registry giving the
    sample `shards`."""
    lake_root = folder / "lake"
    shutil.copytree(one_shard_lake, lake_root)
    return sample_registry(folder, llm_recording=str(SAMPLE_RECORDING), shards=shards), lake_root


def started_shards(result: dg.ExecuteInProcessResult, asset: str) -> list[str]:
    step = f"{asset}.{SHARDED_STEPS[asset]}["
    return sorted(e.step_key for e in result.all_events if e.is_step_start and e.step_key.startswith(step))


def test_three_shards_give_the_citation_tables_one_shard_gives(sample_lake, tmp_path, monkeypatch):
    monkeypatch.setenv("PEERIFY_LLM_CACHE_MODE", "replay-only")
    registry, lake_root = sharded_copy(sample_lake, tmp_path, SHARDS)
    for table in TABLES:  # what the sharded run must write again
        Lake(lake_root).table_path(table, VENUE).unlink()
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(venue_partitions.name, [VENUE])
    result = dg.materialize(list(defs.assets), selection=TABLES, instance=instance, partition_key=VENUE,
                            resources=build_resources(str(lake_root),
                                                      venue_registry=VenueRegistryResource(path=str(registry))),
                            raise_on_error=False)
    assert result.success, [e.step_key for e in result.all_events if e.is_step_failure]
    lake = Lake(lake_root)
    for asset, step in SHARDED_STEPS.items():
        papers = set(lake.read_table(asset, VENUE)["paper_id"])
        expected = sorted({shard_of(paper, SHARDS) for paper in papers})
        assert len(expected) > 1, asset  # the sample's citing papers really are spread over several shards
        assert started_shards(result, asset) == [f"{asset}.{step}[{shard_key(shard)}]" for shard in expected], asset
        assert materialization_metadata(result, asset, "shards") == [len(expected)], asset
    for asset in ("citance_enrichment", "citation_verdicts"):  # the build's usage line reads these
        assert materialization_metadata(result, asset, "calls_made") == [0], asset
    [answered] = materialization_metadata(result, "citation_verdicts", "cache_hits")
    assert answered == lake.read_table("citation_verdicts", VENUE)["call_id"].drop_nulls().len() > 0
    for table in TABLES:  # byte for byte: the same rows in the same order, the same call ids
        assert shard_support.file_digest(lake_root, table, VENUE) == \
            shard_support.file_digest(sample_lake, table, VENUE), table
    assert not list((lake_root / "llm_calls").glob("call-*.parquet"))  # no call was made live


# -- a cited PDF two shards resolve to -----------------------------------------------------------------------------
CITED_TITLE = fixtures_pdf.TITLE  # the library paper's (structured_paper)
LIBRARY = {"grounded.pdf": fixtures_pdf.structured_paper()}


def citing_papers(shards: int) -> dict[str, bytes]:
    """Two citing papers in different shards of `shards`, each citing the library's paper by its title."""
    first, *others = (f"CitingPap{number}" for number in range(100))
    second = next(forum for forum in others if shard_of(forum, shards) != shard_of(first, shards))
    return {forum: fixtures_pdf.citing_paper(f"A Study Numbered {forum}", (
        f"Claims checked against their sources help reviewers [1]. This is paper {forum}.",), (
        f"[1] Ada Author and Ben Writer. {CITED_TITLE}. In Proceedings of the Test Workshop, 2021.",))
        for forum in (first, second)}


def build_cited_papers(folder: Path, shards: int) -> tuple[dg.ExecuteInProcessResult, Path]:
    registry = write_citation_venue(folder, "libraryvenue", citing_papers(SHARDS),
                                    {"library": "library", "resolve": ["library"]}, LIBRARY)
    registry.write_text(registry.read_text() + f"    shards: {shards}\n")
    result = materialise("libraryvenue", registry, folder / "lake", dg.DagsterInstance.ephemeral(),
                         selection=dg.AssetSelection.assets("cited_papers").upstream()
                         .required_multi_asset_neighbors())
    assert result.success, [e.step_key for e in result.all_events if e.is_step_failure]
    return result, folder / "lake"


def test_a_pdf_cited_from_two_shards_is_parsed_in_each_and_kept_once(tmp_path):
    one, one_lake = build_cited_papers(tmp_path / "one", 1)
    three, three_lake = build_cited_papers(tmp_path / "three", SHARDS)
    assert len(started_shards(one, "cited_papers")) == 1 and len(started_shards(three, "cited_papers")) == 2
    resolved = Lake(three_lake).read_table("cited_papers", "libraryvenue")
    assert resolved["status"].to_list() == ["resolved", "resolved"]
    assert resolved["pdf_sha256"].n_unique() == 1  # both entries cite the one library paper
    assert Lake(three_lake).read_table("cited_manuscripts", "libraryvenue").height == 1
    assert materialization_metadata(three, "cited_manuscripts", "pdfs_parsed") == [1]
    for table in ("cited_papers", "cited_manuscripts"):
        assert shard_support.file_digest(three_lake, table, "libraryvenue") == \
            shard_support.file_digest(one_lake, table, "libraryvenue"), table


# -- a failed shard re-runs alone ---------------------------------------------------------------------------------
def judging_job() -> dg.JobDefinition:
    """citation_verdicts alone, with the flaky gateway; the lake and registry from PEERIFY_LAKE and PEERIFY_VENUES
    (a reconstructable job is rebuilt from this function in the run's process)."""
    return shard_support.flaky_job("sharded_judging", ["citation_verdicts"], venue_partitions, FAIL_FLAG, "citance")


def test_a_failed_verdict_shard_is_the_only_step_a_reexecution_runs(sample_lake, tmp_path, monkeypatch):
    registry, lake_root = sharded_copy(sample_lake, tmp_path, SHARDS)
    lake = Lake(lake_root)
    judged = lake.read_table("citation_verdicts", VENUE)
    failing = judged.drop_nulls("call_id").row(0, named=True)
    citance = lake.read_table("citances", VENUE).filter(citance_id=failing["citance_id"]).row(0, named=True)
    shard_steps = {f"citation_verdicts.judge_citation_shard[{shard_key(shard_of(paper, SHARDS))}]"
                   for paper in judged["paper_id"]}
    lake.table_path("citation_verdicts", VENUE).unlink()  # what the re-execution must write again
    flag = tmp_path / "fail"
    flag.write_text(citance["text"].strip())  # the prompt's `citance` variable
    for name, value in (("PEERIFY_LAKE", str(lake_root)), ("PEERIFY_VENUES", str(registry)), (FAIL_FLAG, str(flag)),
                        ("PEERIFY_LLM_CACHE_MODE", "replay-only")):
        monkeypatch.setenv(name, value)
    failing_step = f"citation_verdicts.judge_citation_shard[{shard_key(shard_of(failing['paper_id'], SHARDS))}]"
    runs = fail_then_reexecute(dg.reconstructable(judging_job), VENUE, tmp_path / "home", flag,
                               lake.table_path("citation_verdicts", VENUE))
    assert runs.failed == {failing_step} and len(shard_steps) > 1
    assert shard_steps - runs.succeeded == runs.failed  # the other shards completed
    assert runs.reran == {failing_step, "citation_verdicts.assemble_citation_verdicts"}
    assert shard_support.file_digest(lake_root, "citation_verdicts", VENUE) == \
        shard_support.file_digest(sample_lake, "citation_verdicts", VENUE)

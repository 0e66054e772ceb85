"""The LLM stages of a venue (review_claims, claim_types, paper_claims, claim_labels, and each configuration's
predictions) run one step per shard of its papers: the sample built in 3 shards gives the tables 1 shard gives, byte
for byte, every call answered from the shipped recording (calls are keyed by their content, not by the step that
makes them); and a shard whose LLM step fails is the only one a re-execution from failure runs again."""

from __future__ import annotations

import shutil
from pathlib import Path

import dagster as dg
import pytest

from peerify_dagster.domain.predictions import load_configurations
from peerify_dagster.domain.shards import shard_key, shard_of
from peerify_dagster.partitions import prediction_key, prediction_partitions, venue_partitions
from peerify_dagster.paths import REPO_ROOT
from peerify_dagster.resources.lake import Lake
from peerify_dagster.resources.shard_io import SHARDS_DIR
from tests import shard_support
from tests.shard_support import fail_then_reexecute
from tests.support import (
    SAMPLE_RECORDING,
    materialise,
    materialise_predictions,
    materialization_metadata,
    sample_registry,
)

VENUE = "sample"
SHARDS = 3
# Each LLM stage's asset and its mapped (per shard) step.
LLM_STEPS = {"review_claims": "extract_shard", "claim_types": "type_shard", "paper_claims": "write_paper_claims_shard",
             "claim_labels": "label_shard"}
TABLES = ["review_claims", "claims_dropped", "claim_types", "paper_claims", "paper_claims_dropped", "claim_labels"]
FAIL_FLAG = "LLM_SHARDS_TEST_FAIL_FLAG"  # while the file it names exists, a call about the claim it holds raises


@pytest.fixture(scope="module")
def unsharded(sample_lake) -> Path:
    """The session's sample build (`peerify build sample` the default way, answered by the recording: 1 shard)."""
    return sample_lake


def sharded_copy(one_shard_lake: Path, folder: Path, shards: int) -> tuple[Path, Path]:
    """A copy of the one-shard lake (the stages' inputs, the ledger holding the recording) and a registry giving the
    sample `shards`."""
    lake_root = folder / "lake"
    shutil.copytree(one_shard_lake, lake_root)
    return sample_registry(folder, llm_recording=str(SAMPLE_RECORDING), shards=shards), lake_root


def file_digest(lake_root: Path, table: str) -> str:
    return shard_support.file_digest(lake_root, table, VENUE)


def shard_files(lake_root: Path, asset: str) -> list[str]:
    """The shards an LLM stage's mapped step wrote its answers for (resources/shard_io.py's `_shards/` tables)."""
    step = f"{asset}.{LLM_STEPS[asset]}"
    output = next(path for path in (lake_root / SHARDS_DIR).iterdir() if path.name.startswith(f"{step}."))
    return sorted(path.stem for path in (output / VENUE).glob("*.parquet"))


def test_the_default_build_runs_each_llm_stage_in_one_shard(unsharded):
    for asset in LLM_STEPS:
        assert shard_files(unsharded, asset) == [shard_key(0)], asset


def test_three_shards_give_the_tables_one_shard_gives(unsharded, tmp_path, monkeypatch):
    monkeypatch.setenv("PEERIFY_LLM_CACHE_MODE", "replay-only")
    registry, lake_root = sharded_copy(unsharded, tmp_path, SHARDS)
    result = materialise(VENUE, registry, lake_root, dg.DagsterInstance.ephemeral(),
                         selection=dg.AssetSelection.assets(*TABLES))
    assert result.success
    lake = Lake(lake_root)
    for asset, step in LLM_STEPS.items():
        papers = set(lake.read_table(asset, VENUE)["paper_id"])
        expected = sorted({shard_of(paper, SHARDS) for paper in papers})
        assert len(expected) > 1, asset  # the sample's papers really are spread over several shards
        started = sorted(e.step_key for e in result.all_events if e.is_step_start and f".{step}[" in e.step_key)
        assert started == [f"{asset}.{step}[{shard_key(shard)}]" for shard in expected], asset
        assert materialization_metadata(result, asset, "shards") == [len(expected)], asset
        assert materialization_metadata(result, asset, "calls_made") == [0], asset
    for table in TABLES:  # byte for byte: the same rows in the same order, the same call ids
        assert file_digest(lake_root, table) == file_digest(unsharded, table), table
    assert not list((lake_root / "llm_calls").glob("call-*.parquet"))


def sample_configurations() -> list[str]:
    """The configurations the sample builds (configurations.yaml), which its one-shard build predicted."""
    return [c.name for c in load_configurations(REPO_ROOT / "configurations.yaml", []).for_venue(VENUE)]


def test_three_shards_give_the_predictions_one_shard_gives(unsharded, tmp_path, monkeypatch):
    monkeypatch.setenv("PEERIFY_LLM_CACHE_MODE", "replay-only")
    registry, lake_root = sharded_copy(unsharded, tmp_path, SHARDS)
    configurations = sample_configurations()
    runs = materialise_predictions(VENUE, configurations, registry, lake_root, dg.DagsterInstance.ephemeral())
    assert all(run.success for run in runs)
    for name, result in zip(configurations, runs):
        key = prediction_key(VENUE, name)
        # byte for byte: the same rows in the same order (per verifier, then claim), the same call ids
        assert shard_support.file_digest(lake_root, "predictions", key) == \
            shard_support.file_digest(unsharded, "predictions", key), name
        rows = Lake(lake_root).read_table("predictions", key)
        expected = sorted({shard_of(paper, SHARDS) for paper in rows["paper_id"]})
        started = sorted(e.step_key for e in result.all_events if e.is_step_start and "predict_shard[" in e.step_key)
        assert started == [f"predictions.predict_shard[{shard_key(shard)}]" for shard in expected], name
        assert materialization_metadata(result, "predictions", "shards") == [len(expected)], name
        # Summed over the shards: every call answered by the ledger, as `peerify build`'s usage line counts them.
        called = rows.filter(rows["call_id"].is_not_null()).height
        assert called > 0 and materialization_metadata(result, "predictions", "calls_made") == [0], name
        assert materialization_metadata(result, "predictions", "cache_hits") == [called], name
        [usage] = materialization_metadata(result, "predictions", "usage_by_model")
        assert sum(model["cache_hits"] for model in usage.values()) == called, name
    assert not list((lake_root / "llm_calls").glob("call-*.parquet"))


# -- a failed shard re-runs alone ---------------------------------------------------------------------------------
def typing_job() -> dg.JobDefinition:
    """claim_types alone (a reconstructable job is rebuilt from this function in the run's process)."""
    return shard_support.flaky_job("sharded_typing", ["claim_types"], venue_partitions, FAIL_FLAG, "claim")


def predictions_job() -> dg.JobDefinition:
    """The predictions alone (a reconstructable job is rebuilt from this function in the run's process)."""
    return shard_support.flaky_job("sharded_predictions", ["predictions"], prediction_partitions, FAIL_FLAG, "claim")


def run_with_a_failing_claim(job, key: str, table: str, claim_text: str,  # noqa: ANN001 - a reconstructable job
                             lake_root: Path, registry: Path, tmp_path: Path, monkeypatch,
                             partitions: dg.DynamicPartitionsDefinition = venue_partitions,
                             ) -> shard_support.Reexecution:
    """`table`'s partition `key` written again by `job` (reconstructable), which fails while calling about
    `claim_text`, then re-executed from its failure (shard_support.fail_then_reexecute)."""
    Lake(lake_root).table_path(table, key).unlink()  # what the re-execution must write again
    flag = tmp_path / "fail"
    flag.write_text(claim_text)
    for name, value in (("PEERIFY_LAKE", str(lake_root)), ("PEERIFY_VENUES", str(registry)), (FAIL_FLAG, str(flag)),
                        ("PEERIFY_LLM_CACHE_MODE", "replay-only")):
        monkeypatch.setenv(name, value)
    return fail_then_reexecute(job, key, tmp_path / "home", flag, Lake(lake_root).table_path(table, key), partitions)


def test_a_failed_llm_shard_is_the_only_step_a_reexecution_runs(unsharded, tmp_path, monkeypatch):
    registry, lake_root = sharded_copy(unsharded, tmp_path, SHARDS)
    claims = Lake(lake_root).read_table("review_claims", VENUE)
    failing_claim = claims.row(0, named=True)
    shard_steps = {f"claim_types.type_shard[{shard_key(shard_of(paper, SHARDS))}]" for paper in claims["paper_id"]}
    failing_step = f"claim_types.type_shard[{shard_key(shard_of(failing_claim['paper_id'], SHARDS))}]"
    runs = run_with_a_failing_claim(dg.reconstructable(typing_job), VENUE, "claim_types", failing_claim["claim_text"],
                                    lake_root, registry, tmp_path, monkeypatch)
    assert runs.failed == {failing_step} and len(shard_steps) > 1
    assert shard_steps - runs.succeeded == runs.failed  # the other shards completed
    assert runs.reran == {failing_step, "claim_types.assemble_claim_types"}
    assert file_digest(lake_root, "claim_types") == file_digest(unsharded, "claim_types")


def test_a_failed_prediction_shard_is_the_only_step_a_reexecution_runs(unsharded, tmp_path, monkeypatch):
    registry, lake_root = sharded_copy(unsharded, tmp_path, SHARDS)
    key = prediction_key(VENUE, sample_configurations()[0])
    rows = Lake(lake_root).read_table("predictions", key)
    claims = Lake(lake_root).read_table("retrieval_queries", VENUE)
    failing = rows.filter(rows["call_id"].is_not_null()).row(0, named=True)
    [failing_claim] = claims.filter(claims["claim_id"] == failing["claim_id"])["claim_text"].to_list()
    shard_steps = {f"predictions.predict_shard[{shard_key(shard_of(paper, SHARDS))}]" for paper in rows["paper_id"]}
    failing_step = f"predictions.predict_shard[{shard_key(shard_of(failing['paper_id'], SHARDS))}]"
    runs = run_with_a_failing_claim(dg.reconstructable(predictions_job), key, "predictions", failing_claim, lake_root,
                                    registry, tmp_path, monkeypatch, partitions=prediction_partitions)
    assert runs.failed == {failing_step} and len(shard_steps) > 1
    assert shard_steps - runs.succeeded == runs.failed  # the other shards completed
    assert runs.reran == {failing_step, "predictions.assemble_predictions"}
    assert shard_support.file_digest(lake_root, "predictions", key) == \
        shard_support.file_digest(unsharded, "predictions", key)

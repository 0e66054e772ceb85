"""A ledger segment found unreadable is moved to quarantine and said where its user looks: a warning of the
`predictions` step (and its metadata) naming the segment and its call ids, and a line of `peerify build`
before any work."""

from __future__ import annotations

import dagster as dg
import polars as pl
import pytest

from peerify_dagster.definitions import build_resources
from peerify_dagster.partitions import add_venue_partitions, prediction_key
from peerify_dagster.resources.dagster_resources import VenueRegistryResource
from peerify_dagster.resources.lake import Lake
from peerify_dagster.resources.llm_gateway import CallLedger
from tests.fakes.cli import cli_env, fresh_home, peerify, write_registry
from tests.fakes.openai_server import ScriptedOpenAIServer
from tests.support import ALL_ASSETS, materialization_metadata, sample_registry
from tests.test_llm_ledger import synthetic_row
from tests.test_verification_assets import models_file

CONFIGURATION = "hybrid-top3"  # a configuration of the shipped configurations.yaml


def verify(lake: Lake, instance: dg.DagsterInstance, registry) -> dg.ExecuteInProcessResult:  # noqa: ANN001
    """Materialise the predictions of one configuration alone, their inputs read from the lake."""
    add_venue_partitions(instance, "sample", [CONFIGURATION])
    resources = build_resources(str(lake.root), venue_registry=VenueRegistryResource(path=str(registry)))
    return dg.materialize(ALL_ASSETS, selection=["predictions"], instance=instance,
                          partition_key=prediction_key("sample", CONFIGURATION), resources=resources,
                          raise_on_error=False)


def truncate(path) -> None:  # noqa: ANN001
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def one_claim_lake(lake: Lake) -> None:
    """The inputs of the predictions for one claim with one retrieved passage."""
    lake.write_table("retrieval_queries", "sample", pl.DataFrame({
        "claim_id": ["c1"], "paper_id": ["P"], "claim_text": ["The method beats the baseline on ImageNet."],
        "manuscript_label": ["Supported"], "source": ["answer_key"], "gold_chunk_ids": [None]}))
    lake.write_table("retrieval_runs", "sample", pl.DataFrame({
        "claim_id": ["c1"], "retriever": ["hybrid"], "rank": [1], "chunk_id": ["P:1"], "status": ["ok"],
        "error": pl.Series([None], dtype=pl.String)}))
    lake.write_table("chunks", "sample", pl.DataFrame({
        "chunk_id": ["P:1"], "paper_id": ["P"], "text": ["Our method reaches 81% on ImageNet, 3 points above."],
        "order": [0]}))


def test_the_verification_step_names_a_quarantined_segment_and_its_calls(tmp_path, monkeypatch):
    lake = Lake(tmp_path / "lake")
    one_claim_lake(lake)
    registry = sample_registry(tmp_path)
    instance = dg.DagsterInstance.ephemeral()
    with ScriptedOpenAIServer() as server:
        monkeypatch.setenv("PEERIFY_MODELS_FILE", str(models_file(tmp_path, server.base_url)))
        monkeypatch.setenv("LOOPBACK_API_KEY", "test-key")
        first = verify(lake, instance, registry)
        [call_id] = lake.read_table("predictions", prediction_key("sample", CONFIGURATION))["call_id"].to_list()
        [segment] = [p for p in (lake.root / "llm_calls").glob("part-*.parquet") if p.stat().st_size > 0]
        truncate(segment)
        second = verify(lake, instance, registry)
        assert first.success and second.success
        assert server.request_count == 2  # the quarantined call was made again ...

    [reported] = materialization_metadata(second, "predictions", "ledger_segments_quarantined")
    assert [(r["segment"], r["call_ids"]) for r in reported] == [(str(segment), [call_id])]
    assert reported[0]["moved_to"] == str(lake.root / "llm_calls" / "quarantine" / segment.name)
    warnings = [e.user_message for e in instance.all_logs(second.run_id)
                if e.level == 30 and "is unreadable" in e.user_message]  # 30: logging.WARNING
    assert len(warnings) == 1 and str(segment) in warnings[0] and call_id in warnings[0]  # ... and said so
    assert materialization_metadata(first, "predictions", "ledger_segments_quarantined") == [[]]


@pytest.mark.parametrize(("cache_mode", "exit_code"), [("use", 1), ("replay-only", 2)])
def test_build_names_a_quarantined_segment_before_any_work(tmp_path, cache_mode, exit_code):
    ledger = CallLedger(tmp_path / "lake")
    rows = [synthetic_row(index) for index in range(3)]
    for row in rows:
        ledger.append(row)
    [segment] = ledger.compact()
    truncate(segment)
    (tmp_path / "empty_snapshot").mkdir()  # no submissions.json: the build fails at its first step, quickly
    registry = write_registry(tmp_path, "v", source="snapshot", snapshot="empty_snapshot", seed=1)
    env = cli_env(tmp_path / "lake", registry, fresh_home(tmp_path / "home"), PEERIFY_LLM_CACHE_MODE=cache_mode)

    result = peerify("build", "v", env=env)
    assert result.returncode == exit_code, result.stderr  # replay-only fails its preflight: no successful call left
    [line] = [line for line in result.stderr.splitlines() if "is unreadable" in line]
    assert str(segment) in line and f"it held 3 calls ({rows[0]['call_id']}" in line
    assert (tmp_path / "lake" / "llm_calls" / "quarantine" / segment.name).is_file() and not segment.exists()

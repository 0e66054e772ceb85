"""The verification stage through the LLM gateway: a remote-style verifier on a loopback OpenAI-protocol server
(the same client path as OpenAI and vLLM), the `llm_calls` ledger, replay with zero model calls, `llm_usage`,
and the preflight error for a missing API key."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import polars as pl
import pytest

from peerify_dagster.definitions import build_resources
from peerify_dagster.partitions import venue_partitions
from peerify_dagster.resources.dagster_resources import LLMGatewayResource, VenueRegistryResource
from peerify_dagster.resources.lake import Lake
from peerify_dagster.testing.openai_server import ScriptedOpenAIServer
from tests.support import ALL_ASSETS, materialise, materialization_metadata, sample_registry

UP_TO_VERIFICATION = dg.AssetSelection.all() - dg.AssetSelection.groups("reports")


def verdict(request) -> str:
    """Supported for every claim except those about variance, which get an answer that is not JSON."""
    prompt = " ".join(str(m.get("content", "")) for m in request["messages"])
    if "variance" in prompt.split("Retrieved passages")[0]:
        return "I am not sure what to say."
    return json.dumps({"label": "Contradicted" if "does not" in prompt else "Supported", "justification": "Because."})


def models_file(folder: Path, base_url: str) -> Path:
    path = folder / "models.yaml"
    path.write_text(
        "default_profile: test\nmodels:\n  loopback:\n    backend: openai\n    model: scripted-model\n"
        f"    base_url: {base_url}\n    api_key_env: LOOPBACK_API_KEY\n    price_in_per_million: 1.0\n"
        "    price_out_per_million: 2.0\n    max_concurrency: 2\n    structured_output: json_schema\n"
        "profiles:\n  test:\n    extractor: loopback\n    labeller_a: loopback\n    labeller_b: loopback\n"
        "    fact_tagger: loopback\n    verifiers: [loopback]\n"
    )
    return path


def materialise_sample(tmp: Path, instance: dg.DagsterInstance) -> dg.ExecuteInProcessResult:
    return materialise("sample", sample_registry(tmp), tmp / "lake", instance, UP_TO_VERIFICATION)


@pytest.fixture(scope="module")
def verified(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("verify")
    with ScriptedOpenAIServer(responder=verdict) as server, pytest.MonkeyPatch.context() as env:
        env.setenv("PEERIFY_MODELS_FILE", str(models_file(tmp, server.base_url)))
        env.setenv("LOOPBACK_API_KEY", "test-key")
        instance = dg.DagsterInstance.ephemeral()
        first = materialise_sample(tmp, instance)
        requests_after_first = server.request_count
        lake = Lake(tmp / "lake")
        tables = {t: lake.read_table(t, "sample") for t in ("evidence_verifications", "llm_usage")}
        segments = sorted((tmp / "lake" / "llm_calls").glob("*.parquet"))
        second = materialise_sample(tmp, instance)
        yield first, second, tables, lake, requests_after_first, server.request_count, segments


def test_every_claim_with_evidence_is_verified_and_recorded(verified):
    first, _, tables, lake, requests, _, _ = verified
    assert first.success
    rows = tables["evidence_verifications"]
    queries = lake.read_table("retrieval_queries", "sample")
    chunked = set(lake.read_table("chunks", "sample")["paper_id"])
    assert rows.height == queries.filter(pl.col("paper_id").is_in(chunked)).height == queries.height
    assert set(rows["status"]) == {"ok"}  # every paper of the sample that has claims has a manuscript
    _, [(verify_calls, all_calls)] = lake.query(
        "select count(*) filter (where prompt_id = 'verify'), count(*) from llm_calls")
    assert verify_calls == rows.height  # one model request per claim
    assert requests == all_calls  # every request (the claim stage's included) is in the ledger
    assert set(rows["verifier"]) == {"loopback"} and set(rows["retriever"]) == {"hybrid"}
    assert (rows["evidence_chunk_ids"].list.len() == 3).all()
    # Labels are normalised (Contradicted -> Not Supported); an unparseable answer is never turned into one.
    parsed, unparsed = rows.filter(pl.col("parse_ok")), rows.filter(~pl.col("parse_ok"))
    assert parsed.height >= 1 and parsed["label"].null_count() == 0  # an empty or all-null result fails here
    assert set(parsed["label"]) <= {"Supported", "Not Supported"} and "Supported" in set(parsed["label"])
    assert unparsed.height >= 1 and unparsed["label"].null_count() == unparsed.height
    # The score against the answer key counts the unparsed answers as errors instead of leaving them out.
    keyed = rows.filter(pl.col("gold_label").is_not_null())
    right = keyed.filter(pl.col("label") == pl.col("gold_label")).height
    assert materialization_metadata(first, "evidence_verifications", "accuracy_vs_answer_key") == [
        pytest.approx(right / keyed.height)]
    _, ledger = lake.query("select call_id, prompt_id, prompt_hash, model, error from llm_calls")
    by_id = {row[0]: row for row in ledger}
    assert set(rows["call_id"]) <= set(by_id)
    assert all(by_id[c][1] == "verify" and len(by_id[c][2]) == 64 and by_id[c][4] is None for c in rows["call_id"])


def test_rebuild_with_nothing_changed_makes_zero_model_calls(verified):
    _, second, tables, lake, requests_first, requests_second, segments = verified
    assert second.success
    assert requests_second == requests_first
    assert lake.read_table("evidence_verifications", "sample").equals(tables["evidence_verifications"])
    assert sorted((lake.root / "llm_calls").glob("*.parquet"))[: len(segments)] == segments  # append-only
    assert materialization_metadata(second, "evidence_verifications", "calls_made") == [0]
    assert materialization_metadata(second, "evidence_verifications", "cache_hits") == [
        tables["evidence_verifications"].height]


def test_llm_usage_summarises_the_ledger(verified):
    _, _, tables, _, _, _, _ = verified
    usage = tables["llm_usage"].row(0, named=True)
    rows = tables["evidence_verifications"]
    assert (usage["model"], usage["role"], usage["prompt_id"]) == ("loopback", "verifiers", "verify")
    assert usage["calls"] == rows.height
    assert usage["parse_failures"] == rows.filter(~pl.col("parse_ok")).height
    assert usage["tokens_in"] > 0 and usage["cost_usd"] == pytest.approx(
        (usage["tokens_in"] * 1.0 + usage["tokens_out"] * 2.0) / 1e6)


def test_missing_api_key_fails_before_any_call(tmp_path, monkeypatch):
    with ScriptedOpenAIServer(responder=verdict) as server:
        monkeypatch.setenv("PEERIFY_MODELS_FILE", str(models_file(tmp_path, server.base_url)))
        monkeypatch.delenv("LOOPBACK_API_KEY", raising=False)
        result = materialise_sample(tmp_path, dg.DagsterInstance.ephemeral())
        assert not result.success
        failure = [e for e in result.all_events if e.is_step_failure][0]
        assert "LOOPBACK_API_KEY" in str(failure.event_specific_data.error)
        assert server.request_count == 0


def test_spent_budget_stops_the_llm_steps_cleanly(tmp_path, monkeypatch):
    """A cost budget smaller than one call: each step that calls a model fails naming the budget after at most the
    calls in flight (max_concurrency 2), every call made is in the ledger, and the failed steps write no table."""
    with ScriptedOpenAIServer(responder=verdict) as server:
        monkeypatch.setenv("PEERIFY_MODELS_FILE", str(models_file(tmp_path, server.base_url)))
        monkeypatch.setenv("LOOPBACK_API_KEY", "test-key")
        instance = dg.DagsterInstance.ephemeral()
        instance.add_dynamic_partitions(venue_partitions.name, ["sample"])
        resources = build_resources(str(tmp_path / "lake"), llm=LLMGatewayResource(max_cost_usd=1e-9),
                                    venue_registry=VenueRegistryResource(path=str(sample_registry(tmp_path))))
        result = dg.materialize(ALL_ASSETS, selection=UP_TO_VERIFICATION, instance=instance, partition_key="sample",
                                resources=resources, raise_on_error=False)
        made = server.request_count
    assert not result.success
    failures = [e for e in result.all_events if e.is_step_failure]
    assert failures and all("reached the run budget $0.0000" in str(e.event_specific_data.error) for e in failures)
    failed_steps = {e.step_key for e in failures}
    assert not failed_steps & {e.step_key for e in result.all_events if e.is_step_materialization}
    assert 1 <= made <= 2 * len(failures)
    ledger = pl.read_parquet(tmp_path / "lake" / "llm_calls" / "*.parquet")
    assert ledger.height == made and ledger["error"].null_count() == made
    materialised = {e.asset_key.to_user_string() for e in result.all_events if e.is_step_materialization}
    assert not {"evidence_verifications", "llm_usage"} & materialised

"""The verification stage (`predictions`, one partition per venue x configuration) through the LLM gateway: a
remote-style verifier on a loopback OpenAI-protocol server (the same client path as OpenAI and vLLM), built by the
real `peerify build` command; the `llm_calls` ledger; adding a configuration to a built venue computes only its
partition (by `peerify build --configuration` and by the configurations sensor); the preflight errors."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import polars as pl
import pytest
from dagster._core.instance.ref import InstanceRef

from peerify_dagster.definitions import build_resources, defs
from peerify_dagster.jobs import build_venue_job
from peerify_dagster.partitions import prediction_key, prediction_partitions, venue_partitions
from peerify_dagster.resources.dagster_resources import (
    LakeResource,
    LLMGatewayResource,
    PredictionConfigurationsResource,
    VenueRegistryResource,
)
from peerify_dagster.resources.lake import Lake
from peerify_dagster.sensors import configurations_sensor
from tests.cli_support import cli_env, fresh_home, peerify
from tests.fakes.openai_server import ScriptedOpenAIServer
from tests.support import ALL_ASSETS, materialise, sample_registry
from tests.test_claims_assets import scripted_answer
from tests.test_ui_behaviour import PRINTED_WARNING

UP_TO_VERIFICATION = defs.resolve_job_def(build_venue_job.name).asset_layer.selected_asset_keys
CONFIGURATIONS = ("configurations:\n"
                  "  hybrid-top3: {verifier: verifiers, mode: rag, retriever: hybrid, k: 3}\n"
                  "  oracle: {verifier: loopback, mode: oracle, claims: [PaperSourced]}\n")
ADDED_BY_COMMAND = "  bm25-top2: {verifier: verifiers, mode: rag, retriever: bm25, k: 2}\n"
ADDED_BY_SENSOR = "  dense-top1: {verifier: verifiers, mode: rag, retriever: dense, k: 1}\n"


def verdict(request) -> str:
    """The verifier: Supported for every claim except those about variance, which get an answer that is not JSON.
    The claim stage's prompts get the claim tests' scripted answers (claims from the review's sentences)."""
    user = str(request["messages"][-1].get("content", ""))
    if "Retrieved passages" not in user:
        return scripted_answer(request)
    claim = user.split("Retrieved passages")[0]
    if "variance" in claim:
        return "I am not sure what to say."
    return json.dumps({"label": "Contradicted" if "not" in claim.split() else "Supported", "justification": "Because."})


def models_file(folder: Path, base_url: str) -> Path:
    path = folder / "models.yaml"
    path.write_text(
        "default_profile: test\nmodels:\n  loopback:\n    backend: openai\n    model: scripted-model\n"
        f"    base_url: {base_url}\n    api_key_env: LOOPBACK_API_KEY\n    price_in_per_million: 1.0\n"
        "    price_out_per_million: 2.0\n    max_concurrency: 2\n    structured_output: json_schema\n"
        "profiles:\n  test:\n    extractor: loopback\n    labeller_a: loopback\n    labeller_b: loopback\n"
        "    fact_tagger: loopback\n    verifiers: [loopback]\n    citation_verifiers: [loopback]\n"
    )
    return path


def predictions_materialised(instance: dg.DagsterInstance) -> dict[str, int]:
    """Materialisations of `predictions` per partition key."""
    records = instance.fetch_materializations(dg.AssetKey("predictions"), limit=1000).records
    counts: dict[str, int] = {}
    for record in records:
        counts[record.partition_key] = counts.get(record.partition_key, 0) + 1
    return counts


def evaluate_sensor(instance: dg.DagsterInstance):
    """One tick of the configurations sensor; partitions it asks for are added, as the daemon does."""
    context = dg.build_sensor_context(
        instance=instance, resources={"prediction_configurations": PredictionConfigurationsResource(),
                                      "venue_registry": VenueRegistryResource(), "lake": LakeResource()})
    result = configurations_sensor(context)
    if isinstance(result, dg.SensorResult):
        for request in result.dynamic_partitions_requests or []:
            instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
        return list(result.run_requests or [])
    return result if isinstance(result, list) else []


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("verify")
    configurations = tmp / "configurations.yaml"
    configurations.write_text(CONFIGURATIONS)
    home = fresh_home(tmp / "home")
    with ScriptedOpenAIServer(responder=verdict) as server, pytest.MonkeyPatch.context() as env:
        settings = cli_env(tmp / "lake", sample_registry(tmp), home, PEERIFY_MODELS_FILE=str(
            models_file(tmp, server.base_url)), LOOPBACK_API_KEY="test-key", PEERIFY_CONFIGURATIONS=str(configurations))
        build = peerify("build", "sample", env=settings, timeout=900)
        assert build.returncode in (0, 1), build.stderr[-3000:]  # 1: a gate of the venue graph failed (see below)
        lake = Lake(tmp / "lake")
        first = {c: lake.read_table("predictions", prediction_key("sample", c)) for c in ("hybrid-top3", "oracle")}
        requests = {"build": server.request_count}
        ledger_before = set(pl.read_parquet(tmp / "lake" / "llm_calls" / "*.parquet")["call_id"])
        configurations.write_text(CONFIGURATIONS + ADDED_BY_COMMAND)
        estimate = peerify("build", "sample", "--estimate", env=settings, timeout=300)
        requests["estimate"] = server.request_count
        added = peerify("build", "sample", "--configuration", "bm25-top2", env=settings, timeout=600)
        requests["command"] = server.request_count
        for name, value in settings.items():  # the sensor's runs read the same settings
            env.setenv(name, value)
        instance = dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(home)))
        counts = {"command": predictions_materialised(instance)}
        ticks = {"current": evaluate_sensor(instance)}
        configurations.write_text(CONFIGURATIONS + ADDED_BY_COMMAND + ADDED_BY_SENSOR)
        ticks["added"] = evaluate_sensor(instance)
        ticks["requested"] = evaluate_sensor(instance)
        for request in ticks["requested"]:
            run = defs.resolve_job_def(request.job_name).execute_in_process(
                partition_key=request.partition_key, instance=instance, raise_on_error=False)
            assert run.success
        requests["sensor"] = server.request_count
        counts["sensor"] = predictions_materialised(instance)
        ticks["after"] = evaluate_sensor(instance)
        yield {"lake": lake, "first": first, "requests": requests, "ledger_before": ledger_before, "counts": counts,
               "ticks": ticks, "build": build, "added": added, "estimate": estimate, "instance": instance}


def test_the_predictions_and_results_runs_succeed_whatever_a_venue_gate_says(built):
    """`peerify build` runs the venue graph, then one run per configuration, then the results: the last two need
    only the predictions' inputs, so a failing gate elsewhere in the venue graph (a slice below its minimum) fails
    the build without holding back the predictions."""
    runs = built["instance"].get_runs()
    by_job = {}
    for run in runs:
        by_job.setdefault(run.job_name, []).append(run.status)
    assert len(by_job["venue_predictions"]) == 2 + 1 + 1  # build: 2 configurations; --configuration: 1; sensor: 1
    assert set(by_job["venue_predictions"]) == set(by_job["venue_results"]) == {dg.DagsterRunStatus.SUCCESS}
    assert len(by_job["build_venue"]) == 1  # `--configuration` and the sensor did not rebuild the venue
    assert built["added"].returncode == 0, built["added"].stderr[-3000:]
    if built["build"].returncode:
        assert by_job["build_venue"] == [dg.DagsterRunStatus.FAILURE]
        assert "predictions not run" not in built["build"].stderr


def test_every_claim_is_predicted_or_counted_and_recorded(built):
    lake, rows = built["lake"], built["first"]["hybrid-top3"]
    queries = lake.read_table("retrieval_queries", "sample")
    assert set(queries["source"]) == {"answer_key", "paper_sourced", "review"}  # review claims are queried too
    assert rows.height == queries.height and set(rows["claim_id"]) == set(queries["claim_id"])
    # The sample's paper without a PDF keeps its review claims' rows, with no call: status no_manuscript.
    chunked = set(lake.read_table("chunks", "sample")["paper_id"])
    expected = ["ok" if paper in chunked else "no_manuscript" for paper in rows["paper_id"]]
    assert rows["status"].to_list() == expected and set(expected) == {"ok", "no_manuscript"}
    assert rows.filter(pl.col("status") == "no_manuscript")["call_id"].null_count() == expected.count("no_manuscript")
    rows = rows.filter(pl.col("status") == "ok")
    assert set(rows["verifier"]) == {"loopback"} and set(rows["retriever"]) == {"hybrid"}
    assert (rows["evidence_chunk_ids"].list.len() == 3).all()
    ranked = lake.read_table("retrieval_runs", "sample").filter(pl.col("retriever") == "hybrid")
    some = rows.row(0, named=True)
    top = ranked.filter(pl.col("claim_id") == some["claim_id"]).sort("rank")["chunk_id"].to_list()[:3]
    assert some["evidence_chunk_ids"] == top  # the chunks the verifier saw, in rank order
    # Labels are normalised (Contradicted -> Not Supported, kept as written in raw_label); an unparseable answer is
    # never turned into one.
    parsed, unparsed = rows.filter(pl.col("parse_ok")), rows.filter(~pl.col("parse_ok"))
    assert parsed.height >= 1 and parsed["label"].null_count() == 0
    assert set(parsed["label"]) <= {"Supported", "Not Supported"} and "Supported" in set(parsed["label"])
    assert set(parsed.filter(pl.col("label") == "Not Supported")["raw_label"]) <= {"Contradicted"}
    assert unparsed.height >= 1 and unparsed["label"].null_count() == unparsed.height
    assert (parsed["tokens_in"] > 0).all() and (parsed["tokens_out"] > 0).all()
    _, ledger = lake.query("select call_id, prompt_id, role, tokens_in from llm_calls")
    by_id = {row[0]: row for row in ledger}
    assert all(by_id[c][1:3] == ("verify", "verifiers") for c in rows["call_id"])
    assert rows["tokens_in"].to_list() == [by_id[c][3] for c in rows["call_id"]]


def test_oracle_shows_the_gold_chunks_of_paper_sourced_claims(built):
    rows = built["first"]["oracle"]
    paper = built["lake"].read_table("paper_claims", "sample")
    assert sorted(rows["claim_id"]) == sorted(paper["claim_id"]) and set(rows["claim_source"]) == {"paper_sourced"}
    gold = dict(zip(paper["claim_id"], paper["gold_chunk_ids"].to_list()))
    assert all(shown == gold[claim] for claim, shown in zip(rows["claim_id"], rows["evidence_chunk_ids"].to_list()))


def test_adding_a_configuration_by_command_computes_only_its_partition(built):
    counts, requests = built["counts"]["command"], built["requests"]
    assert counts == {"hybrid-top3|sample": 1, "oracle|sample": 1, "bm25-top2|sample": 1}
    added = built["lake"].read_table("predictions", "bm25-top2|sample")
    assert added.height == built["first"]["hybrid-top3"].height  # every claim again, under the new configuration
    ranked = built["lake"].read_table("retrieval_runs", "sample").filter(
        (pl.col("retriever") == "bm25") & (pl.col("status") == "ok") & (pl.col("rank") <= 2))
    top2 = {claim: group.sort("rank")["chunk_id"].to_list() for (claim,), group in ranked.group_by("claim_id")}
    shown = added.filter(pl.col("status") == "ok")
    assert shown.height > 0 and dict(zip(shown["claim_id"], shown["evidence_chunk_ids"].to_list())) == {
        claim: top2[claim] for claim in shown["claim_id"]}
    # Only the new configuration's calls were made: those the ledger did not already hold.
    new_calls = set(added["call_id"].drop_nulls()) - built["ledger_before"]
    assert requests["command"] - requests["build"] == len(new_calls) > 0
    instance = built["instance"]
    venue_steps = instance.fetch_materializations(dg.AssetKey("retrieval_runs"), limit=10).records
    assert len(venue_steps) == 1  # the venue's graph was not rebuilt


def test_the_built_venue_has_a_predictions_partition_per_configuration_and_the_build_prints_no_warning(built):
    assert sorted(built["instance"].get_dynamic_partitions(prediction_partitions.name)) == [
        f"{name}|sample" for name in ("bm25-top2", "dense-top1", "hybrid-top3", "oracle")]
    assert not PRINTED_WARNING.search(built["build"].stderr), built["build"].stderr[-3000:]


def test_adding_a_configuration_to_the_file_runs_only_its_partition_from_the_sensor(built):
    ticks, counts = built["ticks"], built["counts"]
    assert ticks["current"] == []  # every configuration and the results are current
    assert ticks["added"] == []  # the first tick adds the partition
    assert "dense-top1|sample" in built["instance"].get_dynamic_partitions(prediction_partitions.name)
    assert [(r.job_name, r.partition_key) for r in ticks["requested"]] == [("venue_predictions", "dense-top1|sample")]
    assert counts["sensor"] == {**counts["command"], "dense-top1|sample": 1}
    assert built["requests"]["sensor"] > built["requests"]["command"]
    # Then the venue's results are re-run over the configurations it has now.
    assert [(r.job_name, r.partition_key) for r in ticks["after"]] == [("venue_results", "sample")]


def test_the_build_reports_each_configuration_and_the_report_draws_each(built):
    assert "predictions (hybrid-top3)" in built["build"].stdout and "predictions (oracle)" in built["build"].stdout
    figures = built["lake"].read_table("venue_report", "sample")["figure"].to_list()
    assert "confusion_hybrid-top3.png" in figures and "confusion_bm25-top2.png" in figures
    # The build ends by naming the report (`make demo` prints it last).
    report = built["lake"].root / "reports" / "sample"
    assert built["build"].stdout.splitlines()[-2:] == [f"report: {report / 'report.html'}",
                                                       f"markdown: {report / 'report.md'} (figures beside it)"]


def test_an_unknown_model_or_retriever_in_a_configuration_fails_before_any_work(tmp_path):
    configurations = tmp_path / "configurations.yaml"
    for entry, named in (("{verifier: gpt-6, mode: rag, retriever: bm25}", "unknown verifier 'gpt-6'"),
                         ("{verifier: verifiers, mode: rag, retriever: splade}", "unknown retriever 'splade'")):
        configurations.write_text(f"configurations:\n  mine: {entry}\n")
        env = cli_env(tmp_path / "lake", sample_registry(tmp_path), None, PEERIFY_CONFIGURATIONS=str(configurations))
        result = peerify("build", "sample", env=env, timeout=120)
        assert result.returncode == 2
        assert "configuration 'mine'" in result.stderr and named in result.stderr
        assert not (tmp_path / "lake").exists()


def test_missing_api_key_fails_before_any_call(tmp_path, monkeypatch):
    with ScriptedOpenAIServer(responder=verdict) as server:
        monkeypatch.setenv("PEERIFY_MODELS_FILE", str(models_file(tmp_path, server.base_url)))
        monkeypatch.delenv("LOOPBACK_API_KEY", raising=False)
        result = materialise("sample", sample_registry(tmp_path), tmp_path / "lake", dg.DagsterInstance.ephemeral(),
                             dg.AssetSelection.assets(*UP_TO_VERIFICATION))
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
        result = dg.materialize(ALL_ASSETS, selection=dg.AssetSelection.assets(*UP_TO_VERIFICATION),
                                instance=instance, partition_key="sample", resources=resources, raise_on_error=False)
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
    assert "llm_usage" not in materialised


def test_the_estimate_matches_the_calls_and_tokens_of_the_build_that_follows(built):
    """`--estimate` before adding a configuration: no model is called, and its calls are the requests the build then
    makes; its input tokens (an over-count: 3 characters per token) bound the loopback's (words) from above."""
    estimate, requests, lake = built["estimate"], built["requests"], built["lake"]
    assert estimate.returncode == 0, estimate.stderr
    assert requests["estimate"] == requests["build"]  # no model was called
    rows = {line.split()[0]: line.split()[1:8] for line in estimate.stdout.splitlines()
            if line.startswith("predictions:")}
    assert set(rows) == {"predictions:hybrid-top3", "predictions:oracle", "predictions:bm25-top2"}
    role, model, calls, hits, tokens_in, tokens_out, cost = rows["predictions:bm25-top2"]
    made = requests["command"] - requests["estimate"]
    assert (role, model) == ("verifiers", "loopback") and int(calls) == made > 0
    # The build just before answered every call of its own configurations: all are ledger hits.
    for name in ("hybrid-top3", "oracle"):
        ok = built["first"][name].filter(pl.col("status") == "ok").height
        assert rows[f"predictions:{name}"][2:4] == ["0", str(ok)]
    added = set(lake.read_table("predictions", "bm25-top2|sample")["call_id"].drop_nulls())
    new = pl.read_parquet(lake.root / "llm_calls" / "*.parquet").filter(
        pl.col("call_id").is_in(list(added - built["ledger_before"]))).unique("call_id")
    assert new.height == made
    assert new["tokens_in"].sum() <= int(tokens_in) <= 3 * new["tokens_in"].sum()
    # Output tokens: the mean answer of the calls already in the ledger, times the calls.
    assert int(tokens_out) == pytest.approx(made * new["tokens_out"].mean(), rel=0.5)
    assert float(cost) == pytest.approx((int(tokens_in) * 1.0 + int(tokens_out) * 2.0) / 1e6, abs=1e-4)
    # Every other LLM stage is estimated too: built, its calls are all answered by the ledger.
    labels = [line.split() for line in estimate.stdout.splitlines() if line.startswith("claim_labels ")]
    assert labels and all(cells[3] == "0" and int(cells[4]) > 0 and "lake" in cells for cells in labels)

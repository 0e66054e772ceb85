"""Cost control before money is spent: one registry of LLM stages that preflight, the estimate and llm_usage read;
the estimate of every stage (built, snapshot, or size alone); a budget for a whole `peerify build`; the paper's grid
for venues configurations.yaml does not list; a clean stop on SIGTERM."""

from __future__ import annotations

import os
import signal
import time
from dataclasses import replace
from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq
import pytest
from dagster._core.instance.ref import InstanceRef

from peerify_dagster import cli
from peerify_dagster.assets.citations import ENRICHMENT_SCHEMA, VERDICT_SCHEMA
from peerify_dagster.assets.claims import (
    CLAIM_TYPE_SCHEMA,
    DROPPED_SCHEMA,
    PAPER_CLAIM_GAP_SCHEMA,
    PAPER_CLAIM_SCHEMA,
    REVIEW_CLAIM_SCHEMA,
)
from peerify_dagster.assets.labels import CLAIM_LABEL_SCHEMA
from peerify_dagster.assets.predictions import PREDICTION_SCHEMA
from peerify_dagster.assets.review_citations import REVIEW_VERDICT_SCHEMA
from peerify_dagster.domain.llm_stages import LLM_STAGES, prompts_by_role
from peerify_dagster.domain.predictions import load_configurations
from peerify_dagster.domain.release_import import IMPORTED_TABLES
from peerify_dagster.domain.venues import Venue, load_registry
from peerify_dagster.estimate import BASIS_SIZE, RELEASE_STAGES, RUNS_STAND_IN, estimate_build, format_estimate
from peerify_dagster.paths import REPO_ROOT
from peerify_dagster.resources.files import TEMPORARY_NAME
from peerify_dagster.resources.lake import Lake
from peerify_dagster.resources.llm_gateway import LLMGateway
from peerify_dagster.resources.llm_gateway.registry import ModelRegistry
from tests.cli_support import cli_env, fresh_home, peerify, start_peerify
from tests.fakes.openai_server import ScriptedOpenAIServer
from tests.support import SAMPLE_RECORDING, sample_registry
from tests.test_claims_assets import scripted_answer
from tests.test_release_import import write_release

SCHEMAS = {"review_claims": REVIEW_CLAIM_SCHEMA, "claims_dropped": DROPPED_SCHEMA, "claim_types": CLAIM_TYPE_SCHEMA,
           "paper_claims": PAPER_CLAIM_SCHEMA, "paper_claims_dropped": PAPER_CLAIM_GAP_SCHEMA,
           "claim_labels": CLAIM_LABEL_SCHEMA, "predictions": PREDICTION_SCHEMA,
           "citance_enrichment": ENRICHMENT_SCHEMA, "citation_verdicts": VERDICT_SCHEMA,
           "review_citation_verdicts": REVIEW_VERDICT_SCHEMA}
SAMPLE_CONFIGURATIONS = ("hybrid-top3", "full-context-paper-sourced", "oracle")


def priced_models(folder: Path, base_url: str, price: float = 1.0, labeller_a: str = "loopback",
                  batch: bool = False) -> Path:
    """Every role on one loopback model at `price` dollars per million tokens (in and out), sent through the
    provider's batch API when `batch`; `labeller_a` may name `keyed`, a model that needs OPENAI_API_KEY."""
    path = folder / "models.yaml"
    path.write_text(
        "default_profile: test\nmodels:\n  loopback:\n    backend: openai\n    model: scripted-model\n"
        f"    batch: {str(batch).lower()}\n"
        f"    base_url: {base_url}\n    api_key_env: LOOPBACK_API_KEY\n    price_in_per_million: {price}\n"
        f"    price_out_per_million: {price}\n    max_concurrency: 1\n    structured_output: json_schema\n"
        "  keyed:\n    backend: openai\n    model: gpt-4o-mini\n    api_key_env: OPENAI_API_KEY\n"
        f"profiles:\n  test:\n    extractor: loopback\n    labeller_a: {labeller_a}\n    labeller_b: loopback\n"
        "    fact_tagger: loopback\n    verifiers: [loopback]\n    citation_verifiers: [loopback]\n"
        "    citance_tagger: loopback\n")
    return path


def temporaries(lake: Path) -> list[Path]:
    return [path for path in lake.rglob(".*.tmp") if TEMPORARY_NAME.match(path.name)]


# -- the registry ----------------------------------------------------------------------------------------------------
def test_the_registry_holds_every_prompt_and_role_and_the_tables_columns_that_reference_calls():
    prompts = {path.stem for path in (REPO_ROOT / "peerify_dagster" / "prompts").glob("*.md")}
    assert {prompt for stage in LLM_STAGES for prompt in stage.prompts} == prompts
    roles = set(ModelRegistry.load().roles)
    assert set(prompts_by_role()) == roles  # extractor, fact tagger, both labellers, verifiers, the citation roles
    assert prompts_by_role(["verify"])["verifiers"] == ["verify"]  # a build without a thread configuration
    for stage in LLM_STAGES:
        for table, columns in stage.call_id_columns.items():
            assert set(columns) <= set(SCHEMAS[table]), (stage.name, table)


def test_preflight_names_a_labeller_without_its_key_before_any_work(tmp_path, monkeypatch, capsys):
    models = priced_models(tmp_path, "http://127.0.0.1:9/v1", labeller_a="keyed")
    for name, value in cli_env(tmp_path / "lake", sample_registry(tmp_path), fresh_home(tmp_path / "home"),
                               PEERIFY_MODELS_FILE=str(models), LOOPBACK_API_KEY="k").items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert cli.main(["build", "sample"]) == 2
    err = capsys.readouterr().err
    assert "cannot build sample" in err and "'keyed'" in err and "OPENAI_API_KEY" in err
    assert not (tmp_path / "lake").exists()  # nothing crawled, parsed or extracted
    assert not list((tmp_path / "home").glob("history/runs/*"))


# -- the estimate ----------------------------------------------------------------------------------------------------
@pytest.fixture()
def estimate_of(tmp_path):
    """The estimate of a venue in an empty lake, under priced models (no server: nothing is called)."""
    def estimate(venue: Venue, configurations: list, batch: bool = False):
        lake = Lake(tmp_path / "lake")
        models = priced_models(tmp_path, "http://127.0.0.1:9/v1", price=1.0, batch=batch)
        gateway = LLMGateway(lake.root, models_file=models, env={"LOOPBACK_API_KEY": "k"})
        snapshot = (REPO_ROOT / venue.snapshot) if venue.snapshot else lake.root / "snapshots" / venue.slug
        return estimate_build(lake, venue, snapshot, configurations, gateway)
    return estimate


def sample_configurations(venue: str) -> list:
    configurations = load_configurations(REPO_ROOT / "configurations.yaml", ["loopback"])
    return configurations.for_venue(venue)


def test_reviews_citations_are_estimated_only_where_the_venue_turns_them_on(estimate_of):
    sample = load_registry(REPO_ROOT / "venues.yaml")["sample"]
    turned_on = replace(sample, citations={"review_citations": True})
    rows = {(r.stage, r.role): r for r in estimate_of(turned_on, []).rows}
    verdicts = rows[("review_citation_verdicts", "citation_verifiers")]
    sections = rows[("review_claims", "extractor")].calls[1]
    assert verdicts.calls == (0, sections)  # at most one cited work a review section, before anything is built
    assert ("review_citation_verdicts", "citation_verifiers") not in {
        (r.stage, r.role) for r in estimate_of(sample, []).rows}


def test_an_unbuilt_snapshot_venue_is_estimated_from_its_snapshot_for_every_stage_with_a_range(estimate_of):
    estimate = estimate_of(load_registry(REPO_ROOT / "venues.yaml")["sample"], sample_configurations("sample"))
    rows = {(r.stage, r.role): r for r in estimate.rows}
    # every venue stage, but the citance tagger and the reviews' citations: the sample turns neither on
    venue_stages = {(stage.name, role) for stage in LLM_STAGES if not stage.per_configuration for role in stage.roles
                    if stage.name not in ("citance_enrichment", "review_citation_verdicts")}
    assert set(rows) == venue_stages | {(f"predictions:{c}", "verifiers") for c in SAMPLE_CONFIGURATIONS}
    assert not estimate.not_known and {r.basis for r in estimate.rows} == {"snapshot"}
    sections = rows[("review_claims", "extractor")].calls
    assert sections[0] == sections[1] > 0  # the snapshot's review sections, counted
    labels, tags = rows[("claim_labels", "labeller_a")], rows[("claim_types", "fact_tagger")]
    assert tags.calls[0] < tags.calls[1] and labels.calls[1] == 2 * tags.calls[1]  # thread + manuscript
    assert 0 < labels.cost_usd[0] < labels.cost_usd[1]
    text = format_estimate(estimate, "sample")
    assert "total: 0 calls" not in text and "$0.0000" not in text.splitlines()[-1]


def test_a_batch_model_is_estimated_at_the_batch_price(estimate_of):
    venue = load_registry(REPO_ROOT / "venues.yaml")["sample"]
    listed = {(r.stage, r.role): r for r in estimate_of(venue, sample_configurations("sample")).rows}
    batched = {(r.stage, r.role): r for r in estimate_of(venue, sample_configurations("sample"), batch=True).rows}
    assert listed.keys() == batched.keys()
    for key, row in batched.items():
        assert row.calls == listed[key].calls
        assert row.cost_usd == pytest.approx(tuple(cost / 2 for cost in listed[key].cost_usd)), key


def test_a_venue_with_nothing_crawled_is_estimated_from_its_size_and_labelled_so(estimate_of):
    sized = Venue(key="New.cc/2026", openreview_id="New.cc/2026", source="api", seed=1, sample_size=10)
    estimate = estimate_of(sized, sample_configurations(sized.key))
    assert estimate.rows and {r.basis for r in estimate.rows} == {BASIS_SIZE}
    assert {r.stage for r in estimate.rows} >= {"review_claims", "claim_types", "paper_claims", "claim_labels",
                                                "predictions:bm25-top10"}
    assert "counted from the venue's size: nothing is crawled yet" in format_estimate(estimate, sized.key)
    unsized = estimate_of(Venue(key="All.cc/2026", openreview_id="All.cc/2026", source="api", seed=1),
                          sample_configurations("All.cc/2026"))
    assert not unsized.rows and "sample_size null" in format_estimate(unsized, "All.cc/2026")


def test_a_release_venue_is_estimated_for_the_stages_its_build_runs_only():
    """A release venue's build computes what follows from its imported tables: of the LLM stages, the predictions
    (per configuration) alone, which is what the estimate counts for it."""
    from peerify_dagster.definitions import defs
    from peerify_dagster.freshness import computed_from

    computed = {key.to_user_string() for key in computed_from(defs, IMPORTED_TABLES)}
    assert set(RELEASE_STAGES) == {stage.name for stage in LLM_STAGES
                                   if stage.name in computed or stage.per_configuration}


def test_the_estimate_of_an_imported_release_venue_counts_the_calls_its_build_makes(tmp_path):
    """The estimate of a release venue just imported counts every verifier call of every configuration it builds
    (the shipped `release_venues:`), checked against the calls a real build then makes: exact where no retrieval
    chooses the passages, at most one per claim with passages where one does (BM25 finds none for some claims)."""
    venue, registry, lake = "release-tiny", tmp_path / "venues.yaml", Lake(tmp_path / "lake")
    registry.write_text("venues:\n")
    with ScriptedOpenAIServer(responder=scripted_answer) as server:
        models = priced_models(tmp_path, server.base_url)
        env = cli_env(lake.root, registry, fresh_home(tmp_path / "home"), PEERIFY_MODELS_FILE=str(models),
                      LOOPBACK_API_KEY="k")
        imported = peerify("import-release", str(write_release(tmp_path / "tiny")), "--venue", venue, env=env,
                           timeout=300)
        assert imported.returncode == 0, imported.stderr[-3000:]
        configurations = load_configurations(REPO_ROOT / "configurations.yaml", ["loopback"]).for_venue(
            venue, release=True)
        gateway = LLMGateway(lake.root, models_file=models, env={"LOOPBACK_API_KEY": "k"})
        estimate = estimate_build(lake, load_registry(registry)[venue], tmp_path / "none", configurations, gateway)
        printed = peerify("build", venue, "--estimate", env=env, timeout=300)
        built = peerify("build", venue, env=env, timeout=900)
        made = server.request_count
    assert built.returncode == 0, built.stderr[-3000:]
    rows = {row.stage: row for row in estimate.rows}
    assert set(rows) == {f"predictions:{c.name}" for c in configurations} and not estimate.not_known
    total = sum(row.calls[1] for row in estimate.rows)
    assert f"total: {total} calls" in printed.stdout and "$0.0000" not in printed.stdout.splitlines()[-1]
    for configuration in configurations:
        row = rows[f"predictions:{configuration.name}"]
        called = lake.read_table("predictions", f"{configuration.name}|{venue}")["call_id"].drop_nulls().len()
        if configuration.retriever == "bm25":
            assert row.basis == RUNS_STAND_IN and 0 < called <= row.calls[0] == row.calls[1], configuration.name
        else:
            assert row.calls == (called, called) and called > 0, configuration.name
    assert 0 < made <= total


# -- configurations --------------------------------------------------------------------------------------------------
def test_a_venue_the_file_does_not_list_gets_the_papers_grid_only(tmp_path):
    shipped = load_configurations(REPO_ROOT / "configurations.yaml", ["loopback"])
    grid = [c.name for c in shipped.for_venue("ICLR.cc/2024/Conference")]
    assert {"bm25-top10", "bm25-rerank-top10", "dense-top10", "dense-rerank-top10", "full-context"} <= set(grid)
    assert not {"hybrid-top3", "full-context-paper-sourced"} & set(grid)
    assert [c.name for c in shipped.for_venue("sample")] == list(SAMPLE_CONFIGURATIONS)


# -- a whole build: its budget, its summary, a SIGTERM ---------------------------------------------------------------
def build_env(tmp_path: Path, server: ScriptedOpenAIServer, price: float) -> dict[str, str]:
    return cli_env(tmp_path / "lake", sample_registry(tmp_path), fresh_home(tmp_path / "home"),
                   PEERIFY_MODELS_FILE=str(priced_models(tmp_path, server.base_url, price)), LOOPBACK_API_KEY="k")


def runs_by_job(home: Path) -> dict[str, list[dg.DagsterRunStatus]]:
    with dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(home))) as instance:
        by_job: dict[str, list] = {}
        for run in instance.get_runs():
            by_job.setdefault(run.job_name, []).append(run.status)
        return by_job


def test_a_build_budget_stops_the_build_cleanly_and_says_what_was_spent(tmp_path):
    """At $1000 per million tokens one call costs more than a cent: `--max-cost-usd 0.01` lets the build's first LLM
    step make one call, stops it, starts no further run, and prints what was spent."""
    with ScriptedOpenAIServer(responder=scripted_answer) as server:
        result = peerify("build", "sample", "--max-cost-usd", "0.01", env=build_env(tmp_path, server, 1000.0),
                         timeout=900)
        made = server.request_count
    assert result.returncode == 1, result.stderr[-3000:]
    assert "LLM budget spent after run" in result.stderr and "reached the build budget $0.0100" in result.stderr
    assert f"LLM calls of this build: {made} made live" in result.stderr and "(budget $0.0100)" in result.stderr
    assert 1 <= made <= 2  # the call that spent it, and at most one more step's first call in flight: none
    assert runs_by_job(tmp_path / "home") == {"build_venue": [dg.DagsterRunStatus.FAILURE]}
    assert not Lake(tmp_path / "lake").table_path("claim_labels", "sample").exists()
    assert not temporaries(tmp_path / "lake")


def test_sigterm_stops_the_build_after_the_run_in_progress(tmp_path):
    def slow(request) -> str:
        time.sleep(1.0)
        return scripted_answer(request)

    with ScriptedOpenAIServer(responder=slow) as server:
        process = start_peerify("build", "sample", env=build_env(tmp_path, server, 1.0), logs=tmp_path / "build")
        try:
            deadline = time.monotonic() + 600
            while server.request_count < 2 and process.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
            assert process.poll() is None, (tmp_path / "build.err").read_text()[-3000:]
            os.kill(process.pid, signal.SIGTERM)
            process.wait(timeout=120)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    err = (tmp_path / "build.err").read_text()
    assert process.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert "stopped by SIGTERM: run" in err and "no further run was started" in err
    by_job = runs_by_job(tmp_path / "home")
    assert list(by_job) == ["build_venue"] and by_job["build_venue"][0] != dg.DagsterRunStatus.SUCCESS
    assert not temporaries(tmp_path / "lake")


def test_the_estimate_says_a_venues_llm_recording_answers_the_calls_it_holds(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PEERIFY_LAKE", str(tmp_path / "lake"))
    shipped = SAMPLE_RECORDING
    calls = pq.read_metadata(shipped).num_rows
    for recording, said in ((str(shipped), True), (None, False)):
        folder = tmp_path / str(said)
        folder.mkdir()
        extra = {"llm_recording": recording} if recording else {}
        monkeypatch.setenv("PEERIFY_VENUES", str(sample_registry(folder, **extra)))
        assert cli.main(["build", "sample", "--estimate"]) == 0
        out = capsys.readouterr().out
        assert ("the venue's LLM recording" in out and f"{calls} calls) answers every call it holds" in out) == said


# -- the build's usage line ------------------------------------------------------------------------------------------
@dg.asset
def llm_step(context) -> None:  # noqa: ANN001 - Dagster reads a string annotation as no context
    context.add_output_metadata({"calls_made": 1, "cache_hits": 3, "usage_by_model": dg.MetadataValue.json({})})


@dg.asset
def embedding_step(context) -> None:  # noqa: ANN001
    context.add_output_metadata({"cache_hits": 50, "embedded": 2})  # the embedding cache's hits, no ledger answers


def test_the_usage_line_counts_the_llm_steps_ledger_answers_only(tmp_path):
    from peerify_dagster.cli.build_session import BuildSession

    session = BuildSession(None, tmp_path / "lake", stop=None)
    with dg.instance_for_test() as instance:
        session.results.append(dg.materialize([llm_step, embedding_step], instance=instance))
    assert "0 made live, 3 answered from the ledger" in session.usage_line()

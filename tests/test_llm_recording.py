"""The sample venue's recorded LLM calls (what keeps `make demo` within minutes): installing a recording, and a
build of the whole sample graph in cache mode `replay-only` that must find every call it makes in the shipped
recording. When a prompt, a model setting or an input of an LLM call changes, that build fails here: regenerate
the recording with `.venv/bin/python scripts/record_sample_llm_calls.py`."""

from __future__ import annotations

import dagster as dg
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from peerify_dagster.domain.predictions import load_configurations
from peerify_dagster.domain.venues import load_registry
from peerify_dagster.paths import REPO_ROOT
from peerify_dagster.resources.lake import Lake
from peerify_dagster.resources.llm_gateway import CallLedger
from peerify_dagster.resources.llm_gateway.ledger import LEDGER_SCHEMA
from peerify_dagster.resources.llm_gateway.registry import ModelRegistry
from peerify_dagster.resources.llm_recording import RecordingError, check_recording, install_recording
from tests.cli_support import cli_env, fresh_home, peerify
from tests.support import (
    SAMPLE_RECORDING,
    materialise,
    materialise_predictions,
    materialization_metadata,
    sample_registry,
)

LLM_ASSETS = ("review_claims", "claim_types", "paper_claims", "claim_labels")
# The configurations `make demo` predicts for the sample (configurations.yaml's `venues: sample:`).
SAMPLE_CONFIGURATIONS = [c.name for c in load_configurations(
    REPO_ROOT / "configurations.yaml", ModelRegistry.load(env={}).models).for_venue("sample")]
REGENERATE = "the shipped recording lacks calls this build makes: run scripts/record_sample_llm_calls.py"


def test_install_copies_the_recording_once_and_its_calls_answer(tmp_path):
    segment = install_recording(tmp_path / "lake", SAMPLE_RECORDING)
    assert segment is not None and segment.read_bytes() == SAMPLE_RECORDING.read_bytes()
    assert install_recording(tmp_path / "lake", SAMPLE_RECORDING) is None  # already there: nothing written
    recorded = pq.read_table(SAMPLE_RECORDING, columns=["call_id"])["call_id"].to_pylist()
    ledger = CallLedger(tmp_path / "lake")
    assert recorded and all(ledger.lookup(call_id) is not None for call_id in recorded)


def test_a_file_that_is_not_a_ledger_recording_is_refused(tmp_path):
    other = tmp_path / "other.parquet"
    pq.write_table(pa.table({"call_id": ["x"]}), other)
    with pytest.raises(RecordingError, match=r"other.parquet: its columns \['call_id'\] are not the llm_calls "):
        install_recording(tmp_path / "lake", other)
    wrong_type = tmp_path / "wrong_type.parquet"
    recorded = pq.read_table(SAMPLE_RECORDING)
    pq.write_table(recorded.set_column(17, "attempts", pa.array([1] * recorded.num_rows, pa.int64())), wrong_type)
    with pytest.raises(RecordingError, match="wrong_type.parquet: column attempts is int64, the llm_calls ledger's is "
                                             "int32"):
        install_recording(tmp_path / "lake", wrong_type)
    with pytest.raises(RecordingError, match="missing.parquet: cannot be read"):
        install_recording(tmp_path / "lake", tmp_path / "missing.parquet")
    assert not (tmp_path / "lake" / "llm_calls").exists() or not list((tmp_path / "lake" / "llm_calls").iterdir())


def test_a_recording_written_by_polars_large_strings_and_all_installs_as_the_ledgers_columns(tmp_path):
    written = tmp_path / "polars.parquet"
    pl.read_parquet(SAMPLE_RECORDING).write_parquet(written)
    assert pa.large_string() in pq.read_schema(written).types  # what polars writes for its strings
    assert check_recording(written).names == LEDGER_SCHEMA.names
    segment = install_recording(tmp_path / "lake", written)
    assert pq.read_schema(segment).equals(LEDGER_SCHEMA, check_metadata=False)
    assert pq.read_table(segment).equals(pq.read_table(SAMPLE_RECORDING))
    assert install_recording(tmp_path / "lake", written) is None
    ledger = CallLedger(tmp_path / "lake")
    assert all(ledger.lookup(call_id) is not None for call_id in pq.read_table(written)["call_id"].to_pylist())


@pytest.mark.parametrize("recording", ["not parquet", "a folder", "other columns"])
def test_a_recording_that_cannot_be_installed_is_refused_before_any_work(tmp_path, recording):
    """By `venues add --llm-recording` and by the build's preflight, not by the first LLM step minutes later."""
    path = tmp_path / "recording.parquet"
    if recording == "a folder":
        path.mkdir()
    elif recording == "not parquet":
        path.write_text("call_id\nx\n")
    else:
        pq.write_table(pa.table({"call_id": ["x"]}), path)
    registry = sample_registry(tmp_path, llm_recording=str(path))
    env = cli_env(tmp_path / "lake", registry, fresh_home(tmp_path / "home"))
    for command in (("build", "sample"), ("build", "sample", "--estimate"),
                    ("venues", "add", "other", "--llm-recording", str(path))):
        done = peerify(*command, env=env, timeout=300)
        assert done.returncode == 2 and "Traceback" not in done.stderr, (command, done.stderr)
        assert f"LLM recording {path}: " in done.stderr and len(done.stderr.splitlines()) == 1, (command, done.stderr)
    assert not (tmp_path / "lake").exists()  # nothing crawled, parsed or called
    assert "other" not in load_registry(registry)


@pytest.fixture(scope="module")
def replayed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("replay")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("PEERIFY_LLM_CACHE_MODE", "replay-only")  # a call missing from the recording fails the build
        registry, instance = sample_registry(tmp, llm_recording=str(SAMPLE_RECORDING)), dg.DagsterInstance.ephemeral()
        result = materialise("sample", registry, tmp / "lake", instance)
        predicted = materialise_predictions("sample", SAMPLE_CONFIGURATIONS, registry, tmp / "lake", instance)
    return [result, *predicted], Lake(tmp / "lake")


def test_the_shipped_recording_answers_every_llm_call_of_a_sample_build(replayed):
    results, lake = replayed
    failures = [(error.cause or error).message.strip() for result in results for e in result.all_events
                if e.is_step_failure for error in [e.event_specific_data.error]]
    assert all(result.success for result in results), f"{REGENERATE}; {failures}"
    for asset in LLM_ASSETS:
        assert materialization_metadata(results[0], asset, "calls_made") == [0], asset
    for predicted in results[1:-1]:  # one run per configuration
        assert materialization_metadata(predicted, "predictions", "calls_made") == [0]
    assert not list((lake.root / "llm_calls").glob("call-*.parquet"))  # nothing new was written to the ledger


def test_the_replayed_sample_has_claims_for_every_review_and_paper_sourced_queries(replayed):
    _, lake = replayed
    reviews = set(lake.read_table("reviews", "sample")["review_id"])
    claims = lake.read_table("review_claims", "sample")
    drops = lake.read_table("claims_dropped", "sample")
    reasons = set(drops.filter((pl.col("level") == "source") & (pl.col("source") == "review"))["source_id"])
    assert claims.height > 0 and reviews == set(claims.filter(pl.col("source") == "review")["review_id"]) | reasons
    queries = lake.read_table("retrieval_queries", "sample")
    paper_sourced = queries.filter(pl.col("source") == "paper_sourced")
    assert paper_sourced.height == lake.read_table("paper_claims", "sample").height > 0
    predicted = lake.read_table("predictions", f"{SAMPLE_CONFIGURATIONS[0]}|sample")
    assert set(predicted["claim_id"]) == set(queries["claim_id"])

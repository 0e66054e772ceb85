"""What the project relies on from Dagster's private modules (peerify_dagster/dagster_private.py), pinned: an
upgrade of dagster that changes any of it fails here, by name."""

from __future__ import annotations

import inspect
import shutil
import sys
from pathlib import Path

import dagster as dg

from peerify_dagster.dagster_private import (
    NO_STEP_OUTPUT_CAPTURE,
    ExecuteStepArgs,
    RetryMode,
    StaleCauseCategory,
    StaleStatus,
    StepFailureData,
    compute_functions,
    instance_with_overrides,
    runs_stored_locally,
    serializable_error_info_from_exc_info,
    stale_status_resolver,
)
from peerify_dagster.definitions import all_assets

REPO = Path(__file__).resolve().parents[1]


def _home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy2(REPO / "dagster.yaml", home / "dagster.yaml")
    return home


def test_a_home_opens_with_its_step_output_capture_overridden(tmp_path):
    home = _home(tmp_path)
    capturing = instance_with_overrides(str(home), {})
    quiet = instance_with_overrides(str(home), NO_STEP_OUTPUT_CAPTURE)
    assert type(quiet.compute_log_manager).__name__ == "NoOpComputeLogManager"
    assert type(capturing.compute_log_manager).__name__ != "NoOpComputeLogManager"
    assert runs_stored_locally(capturing)  # the project's dagster.yaml keeps runs in the home's SQLite
    assert not runs_stored_locally(dg.DagsterInstance.ephemeral())  # in memory: no run process on this host to find


def _by_name(name: str) -> dg.AssetsDefinition:
    return next(a for a in all_assets if isinstance(a, dg.AssetsDefinition) and dg.AssetKey(name) in a.keys)


def test_compute_functions_are_the_users_functions_of_an_asset_and_of_a_graphs_ops():
    assert [f.__name__ for f in compute_functions(_by_name("canonical_labels"))] == ["canonical_labels"]
    functions = list(compute_functions(_by_name("chunk_embeddings")))
    assert {f.__name__ for f in functions} == {"split_chunks", "embed_shard", "assemble_embeddings"}
    assert all(inspect.isfunction(f) and f.__module__ == "peerify_dagster.assets.embeddings" for f in functions)


def _versioned(version: str) -> dg.AssetsDefinition:
    @dg.asset(name="counted", code_version=version)
    def counted() -> int:
        return 1

    return counted


def test_staleness_names_a_changed_code_version_as_its_cause():
    instance = dg.DagsterInstance.ephemeral()
    assert dg.materialize([_versioned("1")], instance=instance).success
    key = dg.AssetKey("counted")
    same = stale_status_resolver(instance, dg.Definitions(assets=[_versioned("1")]).resolve_asset_graph())
    assert same.get_status(key) == StaleStatus.FRESH and same.get_stale_causes(key) == []
    changed = stale_status_resolver(instance, dg.Definitions(assets=[_versioned("2")]).resolve_asset_graph())
    assert changed.get_status(key) == StaleStatus.STALE
    [cause] = changed.get_stale_causes(key)
    assert cause.category == StaleCauseCategory.CODE and cause.reason == "has a new code version"


def test_the_celery_step_submission_pieces_keep_their_shape():
    # celery_steps.submit_step builds ExecuteStepArgs with these keywords (GuardedStepTask unpacks them)
    parameters = set(inspect.signature(ExecuteStepArgs).parameters)
    assert {"job_origin", "run_id", "step_keys_to_execute", "instance_ref", "retry_mode", "known_state",
            "print_serialized_events"} <= parameters
    assert RetryMode.from_config({"enabled": {}}) == RetryMode.ENABLED
    assert RetryMode.from_config({"disabled": {}}) == RetryMode.DISABLED
    # a lost worker's failure is told by the error's class name (resources/runs.py lost_worker_failures)
    try:
        raise LookupError("the worker died")
    except LookupError:
        failure = StepFailureData(error=serializable_error_info_from_exc_info(sys.exc_info()), user_failure_data=None)
    assert failure.error.cls_name == "LookupError" and "the worker died" in failure.error.message

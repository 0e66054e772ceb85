"""A worker's guard before it runs a step (celery_steps.GuardedStepTask), on a real Celery task and a real Dagster
instance: a step whose build fingerprint differs from the worker's is refused naming the difference, and a step of a
run that has ended (one Redis redelivered long after its worker was lost) is refused naming the run; neither runs."""

from __future__ import annotations

import dagster as dg
import pytest
from celery import Celery
from dagster._core.test_utils import create_run_for_test

from peerify_dagster import step_fingerprint
from peerify_dagster.celery_steps import FINGERPRINT_ARGUMENT, StepRefused, step_task
from peerify_dagster.dagster_private import ExecuteStepArgs, RetryMode, pack_value


@dg.op
def touch_marker() -> None:
    raise AssertionError("a refused step must not run")


@dg.job
def guarded_job() -> None:
    touch_marker()


@pytest.fixture
def instance(tmp_path):
    with dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        yield instance


def step_arguments(instance: dg.DagsterInstance, status: dg.DagsterRunStatus) -> dict:
    run = create_run_for_test(instance, job_name="guarded_job", status=status)
    arguments = ExecuteStepArgs(job_origin=dg.reconstructable(guarded_job).get_python_origin(), run_id=run.run_id,
                                step_keys_to_execute=["touch_marker"], instance_ref=instance.get_ref(),
                                retry_mode=RetryMode.DISABLED, known_state=None, print_serialized_events=True)
    return {"execute_step_args_packed": pack_value(arguments), "executable_dict": {}}


def test_a_worker_of_another_lake_refuses_the_step(instance, monkeypatch, tmp_path):
    monkeypatch.setenv("PEERIFY_LAKE", str(tmp_path / "build-lake"))
    build = step_fingerprint.fingerprint()
    monkeypatch.setenv("PEERIFY_LAKE", str(tmp_path / "old-lake"))
    task = step_task(Celery("guard-test", broker="memory://"))
    with pytest.raises(StepRefused, match=r"refused step touch_marker: it does not match the build \(lake: build "
                                          r".*build-lake, this worker .*old-lake\)"):
        task(**step_arguments(instance, dg.DagsterRunStatus.STARTED), **{FINGERPRINT_ARGUMENT: build})


def test_a_step_of_an_ended_run_is_refused(instance):
    task = step_task(Celery("guard-test", broker="memory://"))
    arguments = step_arguments(instance, dg.DagsterRunStatus.FAILURE)
    with pytest.raises(StepRefused, match=r"refused step touch_marker: its run \S+ has ended \(FAILURE\)"):
        task(**arguments, **{FINGERPRINT_ARGUMENT: step_fingerprint.fingerprint()})


def test_a_matching_worker_goes_on_to_the_step(instance):
    task = step_task(Celery("guard-test", broker="memory://"))
    arguments = step_arguments(instance, dg.DagsterRunStatus.STARTED)
    # Past the guard, dagster_celery's own task reads the job it is given (none here): its error, not a refusal.
    with pytest.raises(Exception) as raised:  # noqa: PT011 - anything but a refusal
        task(**arguments, **{FINGERPRINT_ARGUMENT: step_fingerprint.fingerprint()})
    assert not isinstance(raised.value, StepRefused)

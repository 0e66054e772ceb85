"""The cluster profile's Celery executor: dagster_celery's, except that a step whose worker process died
(`WorkerLostError`: killed, out of memory), or whose worker stopped answering (its main process killed, its machine
lost: no heartbeat for HEARTBEAT_TTL_S), fails as that step, and the rest of the run goes on; and that every step
carries the build's fingerprint (step_fingerprint.py), which a worker that does not match refuses, as it refuses a
step of a run that has ended (a step Redis redelivered long after its worker was lost).

dagster_celery treats a task that raised as an error of the executor: it stops submitting steps, yet keeps waiting
for the ones it has not submitted, so a run with any step left hangs for ever. Read as the step's failure, the run
ends FAILURE with the step named (its downstream skipped, independent steps done), and its re-execution from the
failure runs what is missing: `peerify build` re-executes it when every failed step lost its worker
(resources/runs.py `lost_worker_steps`), as do the daemon's run retries and the UI. Imported only when
PEERIFY_EXECUTOR=celery (and by `peerify worker`).
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import celery
import dagster as dg
from celery.exceptions import WorkerLostError
from celery.states import READY_STATES, STARTED
from dagster_celery.config import TASK_EXECUTE_PLAN_NAME
from dagster_celery.core_execution_loop import core_celery_execution_loop
from dagster_celery.executor import CELERY_CONFIG, CeleryExecutor
from dagster_celery.tasks import create_task

from peerify_dagster import deployment, step_fingerprint
from peerify_dagster.dagster_private import (
    ExecuteStepArgs,
    RetryMode,
    StepFailureData,
    pack_value,
    serializable_error_info_from_exc_info,
    unpack_value,
)

FINGERPRINT_ARGUMENT = "build_fingerprint"


# Each worker's main process says it is alive in Redis every HEARTBEAT_EVERY_S, under a key that expires after
# HEARTBEAT_TTL_S: a build whose step runs on a worker with no key left fails the step as lost, well within a minute
# of a kill -9 of the worker, where Redis alone would redeliver the step after its visibility timeout (an hour).
HEARTBEAT_KEY = "peerify:worker-alive:"
HEARTBEAT_EVERY_S = 5.0
HEARTBEAT_TTL_S = 15


def redis_client(timeout_s: float = 5.0):  # noqa: ANN201 - redis.Redis
    import redis

    return redis.Redis.from_url(deployment.redis_url(), socket_connect_timeout=timeout_s, socket_timeout=timeout_s)


def start_heartbeat(nodename: str) -> threading.Thread:
    """A daemon thread of this process saying every HEARTBEAT_EVERY_S that worker `nodename` is alive."""
    import redis

    def beat() -> None:
        client = redis_client()
        while True:
            try:
                client.set(f"{HEARTBEAT_KEY}{nodename}", "1", ex=HEARTBEAT_TTL_S)
            except redis.RedisError:  # Redis away for a moment: the next beat tries again
                pass
            time.sleep(HEARTBEAT_EVERY_S)

    thread = threading.Thread(target=beat, name="peerify-worker-heartbeat", daemon=True)
    thread.start()
    return thread


def live_workers(client) -> set[str]:  # noqa: ANN001 - redis.Redis
    """The nodenames of the workers whose heartbeat has not expired."""
    return {key.decode()[len(HEARTBEAT_KEY):] for key in client.scan_iter(match=f"{HEARTBEAT_KEY}*", count=500)}


class StepRefused(Exception):  # noqa: N818 - what the build reads: the worker refused the step
    """A worker refused a step before running any of it (its fingerprint differs, or the step's run has ended)."""


class GuardedStepTask(celery.Task):
    """dagster_celery's step task, which a worker runs only for a build it matches and a run still going."""

    typing = False  # the build's fingerprint rides as a keyword the step function does not take: taken off here

    def __call__(self, *args, **kwargs):  # noqa: ANN002, ANN003, ANN204 - Celery's task call
        expected = kwargs.pop(FINGERPRINT_ARGUMENT, None)
        arguments = unpack_value(kwargs["execute_step_args_packed"], as_type=ExecuteStepArgs)
        steps = ", ".join(arguments.step_keys_to_execute or [])
        if expected is not None and (different := step_fingerprint.differences(expected,
                                                                                step_fingerprint.fingerprint())):
            raise StepRefused(f"worker {self.request.hostname} refused step {steps}: it does not match the build "
                              f"({'; '.join(different)}); start it with the build's environment and checkout")
        instance = dg.DagsterInstance.from_ref(arguments.instance_ref)
        try:
            run = instance.get_run_by_id(arguments.run_id)
        finally:
            instance.dispose()
        if run is not None and run.is_finished:
            raise StepRefused(f"worker {self.request.hostname} refused step {steps}: its run {arguments.run_id} has "
                              f"ended ({run.status.value}), so the step is not run again")
        return super().__call__(*args, **kwargs)


class WorkerWatch:
    """The workers alive (their heartbeats in Redis), read at most every HEARTBEAT_EVERY_S for all of a run's
    steps."""

    def __init__(self) -> None:
        self._client = redis_client()
        self._read_at = -HEARTBEAT_EVERY_S
        self._alive: set[str] = set()

    def alive(self) -> set[str]:
        if time.monotonic() - self._read_at >= HEARTBEAT_EVERY_S:
            self._alive = live_workers(self._client)
            self._read_at = time.monotonic()
        return self._alive


class StepResult:
    """A submitted step's Celery result, as the execution loop reads it. A lost worker process, a lost worker, or a
    refusal reads as the step's failure (recorded now, its pool slot freed: the dead process can do neither)."""

    def __init__(self, result, plan_context, step, watch: WorkerWatch):  # noqa: ANN001 - Celery's, Dagster's
        self._result, self._plan_context, self._step, self._watch = result, plan_context, step, watch
        self._lost_worker: str | None = None

    def ready(self) -> bool:
        state = self._result.state  # read once a round: each read asks the result backend
        if state in READY_STATES:
            return True
        # STARTED (task_track_started): a worker process runs it, and the result's meta names the worker
        if state == STARTED and isinstance(info := self._result.info, dict):
            worker = info.get("hostname")
            if worker and worker not in self._watch.alive():
                self._lost_worker = worker
                self._result.revoke()  # a worker that gets the message again drops it (and the run will have ended)
                return True
        return False

    def revoke(self) -> None:
        self._result.revoke()

    def get(self) -> list:
        key = self._step.key
        try:
            if self._lost_worker is not None:
                raise WorkerLostError(f"worker {self._lost_worker} stopped answering (no heartbeat for "
                                      f"{HEARTBEAT_TTL_S} s: its main process killed, or its machine lost)")
            return self._result.get()
        except WorkerLostError as lost:
            return self._failed(f'The Celery worker process running step "{key}" died: the step failed.'
                                if self._lost_worker is None else
                                f'Step "{key}" failed: the Celery {lost}.')
        except StepRefused as refused:
            return self._failed(str(refused))

    def _failed(self, message: str) -> list:
        context = self._plan_context.for_step(self._step)
        failure = dg.DagsterEvent.step_failure_event(
            context, StepFailureData(error=serializable_error_info_from_exc_info(sys.exc_info()),
                                     user_failure_data=None), message=message)
        context.instance.event_log_storage.free_concurrency_slot_for_step(context.run_id, self._step.key)
        return [dg.serialize_value(failure)]


def step_task(app):  # noqa: ANN001, ANN201 - Celery's app and task
    """dagster_celery's step task on `app` (guarded: GuardedStepTask), defined once. dagster_celery's own
    `_submit_task` defines it again for every step it submits, and Celery warns of each new definition under the same
    name (DuplicateTaskNameWarning)."""
    if TASK_EXECUTE_PLAN_NAME in app.tasks:
        return app.tasks[TASK_EXECUTE_PLAN_NAME]
    return create_task(app, base=GuardedStepTask)


def submit_step(app, plan_context, step, queue, priority, known_state, watch: WorkerWatch,  # noqa: ANN001
                fingerprint: dict[str, str]) -> StepResult:
    """dagster_celery's `_submit_task`, the step task defined once (`step_task`), with the build's fingerprint."""
    job = plan_context.reconstructable_job
    arguments = ExecuteStepArgs(job_origin=job.get_python_origin(), run_id=plan_context.dagster_run.run_id,
                                step_keys_to_execute=[step.key], instance_ref=plan_context.instance.get_ref(),
                                retry_mode=plan_context.executor.retries.for_inner_plan(), known_state=known_state,
                                print_serialized_events=True)
    signature = step_task(app).si(execute_step_args_packed=pack_value(arguments), executable_dict=job.to_dict(),
                                  **{FINGERPRINT_ARGUMENT: fingerprint})
    result = signature.apply_async(priority=priority, queue=queue, routing_key=f"{queue}.execute_plan")
    return StepResult(result, plan_context, step, watch)


class StepFailingCeleryExecutor(CeleryExecutor):
    def execute(self, plan_context, execution_plan):  # noqa: ANN001
        watch, fingerprint = WorkerWatch(), step_fingerprint.fingerprint()

        def submit(app, plan_context, step, queue, priority, known_state) -> StepResult:  # noqa: ANN001
            return submit_step(app, plan_context, step, queue, priority, known_state, watch, fingerprint)

        return core_celery_execution_loop(plan_context, execution_plan, step_execution_fn=submit)


@dg.executor(name="celery", config_schema=CELERY_CONFIG, requirements=dg.multiple_process_executor_requirements())
def celery_executor(init_context: dg.InitExecutorContext) -> StepFailingCeleryExecutor:
    """dagster_celery's `celery_executor` (the same config), a lost worker failing its step (module docstring)."""
    config = init_context.executor_config
    return StepFailingCeleryExecutor(broker=config.get("broker"), backend=config.get("backend"),
                                     config_source=config.get("config_source"), include=config.get("include"),
                                     retries=RetryMode.from_config(config["retries"]))


def worker_app(config_file: Path):  # noqa: ANN201 - Celery's app
    """The Celery app of a worker: the guarded step task, configured by `config_file` (cluster/celery.yaml: the
    broker and backend of PEERIFY_REDIS_URL)."""
    from dagster_celery.cli import get_validated_config
    from dagster_celery.make_app import make_app

    config = get_validated_config(str(config_file))  # environment variables resolved
    app = make_app(CeleryExecutor.for_cli(broker=config["broker"], backend=config["backend"],
                                          config_source=config.get("config_source")).app_args())
    step_task(app)
    return app

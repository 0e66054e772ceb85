"""The cluster profile's Celery executor: dagster_celery's, except that a step whose worker process died
(`WorkerLostError`: killed, out of memory) fails as that step, and the rest of the run goes on.

dagster_celery treats a task that raised as an error of the executor: it stops submitting steps, yet keeps waiting
for the ones it has not submitted, so a run with any step left hangs for ever. Read as the step's failure, the run
ends FAILURE with the step named (its downstream skipped, independent steps done), and its re-execution from the
failure runs what is missing: `peerify build` re-executes it when every failed step lost its worker
(`lost_worker_steps`), as do the daemon's run retries and the UI. Imported only when PEERIFY_EXECUTOR=celery.
"""

from __future__ import annotations

import sys

import dagster as dg
from celery.exceptions import WorkerLostError
from dagster_celery.config import TASK_EXECUTE_PLAN_NAME
from dagster_celery.core_execution_loop import core_celery_execution_loop
from dagster_celery.executor import CELERY_CONFIG, CeleryExecutor
from dagster_celery.tasks import create_task

from peerify_dagster.dagster_private import (
    ExecuteStepArgs,
    RetryMode,
    StepFailureData,
    pack_value,
    serializable_error_info_from_exc_info,
)

LOST_WORKER_ERROR = WorkerLostError.__name__  # the class name a lost worker's step failure records


class StepResult:
    """A submitted step's Celery result, as the execution loop reads it; a lost worker reads as the step's failure
    (recorded now, its pool slot freed: the dead process can do neither)."""

    def __init__(self, result, plan_context, step):  # noqa: ANN001 - Celery's AsyncResult, Dagster's contexts
        self._result, self._plan_context, self._step = result, plan_context, step

    def ready(self) -> bool:
        return self._result.ready()

    def revoke(self) -> None:
        self._result.revoke()

    def get(self) -> list:
        try:
            return self._result.get()
        except WorkerLostError:
            context = self._plan_context.for_step(self._step)
            failure = dg.DagsterEvent.step_failure_event(
                context, StepFailureData(error=serializable_error_info_from_exc_info(sys.exc_info()),
                                         user_failure_data=None),
                message=f'The Celery worker process running step "{self._step.key}" died: the step failed.')
            context.instance.event_log_storage.free_concurrency_slot_for_step(context.run_id, self._step.key)
            return [dg.serialize_value(failure)]


def step_task(app):  # noqa: ANN001, ANN201 - Celery's app and task
    """dagster_celery's step task on `app`, defined once. dagster_celery's own `_submit_task` defines it again for
    every step it submits, and Celery warns of each new definition under the same name (DuplicateTaskNameWarning)."""
    return app.tasks[TASK_EXECUTE_PLAN_NAME] if TASK_EXECUTE_PLAN_NAME in app.tasks else create_task(app)


def submit_step(app, plan_context, step, queue, priority, known_state) -> StepResult:  # noqa: ANN001
    """dagster_celery's `_submit_task`, the step task defined once (`step_task`)."""
    job = plan_context.reconstructable_job
    arguments = ExecuteStepArgs(job_origin=job.get_python_origin(), run_id=plan_context.dagster_run.run_id,
                                step_keys_to_execute=[step.key], instance_ref=plan_context.instance.get_ref(),
                                retry_mode=plan_context.executor.retries.for_inner_plan(), known_state=known_state,
                                print_serialized_events=True)
    signature = step_task(app).si(execute_step_args_packed=pack_value(arguments), executable_dict=job.to_dict())
    result = signature.apply_async(priority=priority, queue=queue, routing_key=f"{queue}.execute_plan")
    return StepResult(result, plan_context, step)


def lost_worker_steps(instance: dg.DagsterInstance, run_id: str) -> list[str]:
    """The failed steps of a run, when every one of them failed because its worker process died (StepResult);
    [] when any failed otherwise, or none did (the run itself failed): only then is re-executing it unchanged of
    use."""
    failures = instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_FAILURE)
    lost = [record.step_key for record in failures
            if (error := record.dagster_event.step_failure_data.error) and error.cls_name == LOST_WORKER_ERROR]
    return lost if failures and len(lost) == len(failures) else []


class StepFailingCeleryExecutor(CeleryExecutor):
    def execute(self, plan_context, execution_plan):  # noqa: ANN001
        return core_celery_execution_loop(plan_context, execution_plan, step_execution_fn=submit_step)


@dg.executor(name="celery", config_schema=CELERY_CONFIG, requirements=dg.multiple_process_executor_requirements())
def celery_executor(init_context: dg.InitExecutorContext) -> StepFailingCeleryExecutor:
    """dagster_celery's `celery_executor` (the same config), a lost worker failing its step (module docstring)."""
    config = init_context.executor_config
    return StepFailingCeleryExecutor(broker=config.get("broker"), backend=config.get("backend"),
                                     config_source=config.get("config_source"), include=config.get("include"),
                                     retries=RetryMode.from_config(config["retries"]))

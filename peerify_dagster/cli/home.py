"""The Dagster home and job runs every `peerify` command that builds shares: one home by default (the project's
`.dagster_home/`, as `make` uses), checked before Dagster loads, opened with its dead runs recovered, and in-process
runs of the code location's jobs that show under their job in the UI."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from peerify_dagster import paths
from peerify_dagster.cli.common import ConfigError, one_line, say
from peerify_dagster.resources.files import remove_stale_temporaries
from peerify_dagster.resources.lake import Lake

if TYPE_CHECKING:
    import dagster as dg

# The label the UI filters a job's runs by (`<repository>@<code location>`, workspace.yaml): in-process runs carry no
# code-location origin, so without it they never show under their job.
REPOSITORY_LABEL = "__repository__@peerify"


def check_dagster_home() -> Path:
    """The Dagster home, checked: DAGSTER_HOME must exist; the default one is created with the project's dagster.yaml,
    so a terminal build and `make dev` share one run history instead of an ephemeral instance per command."""
    home = os.environ.get("DAGSTER_HOME")
    if not home:
        default = Path(paths.dagster_home())
        default.mkdir(parents=True, exist_ok=True)
        if not (default / "dagster.yaml").exists():
            shutil.copyfile(paths.REPO_ROOT / "dagster.yaml", default / "dagster.yaml")
        return default
    if not Path(home).is_absolute() or not Path(home).is_dir():
        raise ConfigError(f"DAGSTER_HOME={home!r} must be an existing folder given by its absolute path")
    settings = Path(home) / "dagster.yaml"
    try:
        yaml.safe_load(settings.read_text()) if settings.exists() else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f", line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"{settings}{where}: not valid YAML: {exc.problem or exc.context}") from None
    return Path(home)


def open_home(holder: str, capture_step_output: bool = True) -> dg.DagsterInstance:
    """The Dagster instance with its dead runs recovered, and stale temporaries gone from the lake."""
    from dagster import DagsterError

    from peerify_dagster.resources import runs

    home = check_dagster_home()
    try:
        instance, lines = runs.open_instance(home, holder, capture_step_output=capture_step_output,
                                             on_wait=lambda other: say(
            f"waiting for {other} to finish setting up the Dagster home"))
    except DagsterError as exc:
        raise ConfigError(f"Dagster home {home}: {one_line(exc)}") from None
    # Temporaries are local files: in the lake folder, or for an S3 lake in this machine's cache folder (an S3
    # object is written by one PUT, so a killed writer leaves none in the bucket).
    local_folder = Lake(paths.lake_root()).store.cache_dir
    removed = remove_stale_temporaries(local_folder)
    if removed:
        lines.append(f"removed {len(removed)} temporary file(s) left by killed writers under {local_folder}")
    for line in lines:
        say(f"recover: {line}")
    return instance


def run_job(instance: dg.DagsterInstance, job_name: str, partition_key, run_config: dict | None = None,
            asset_selection: list | None = None):
    """One run of a job of the code location (`asset_selection`: only those of its assets) for one partition,
    reported while it waits for a pool: in this process, or with PEERIFY_EXECUTOR=celery on the Celery workers."""
    from peerify_dagster import deployment
    from peerify_dagster.definitions import defs
    from peerify_dagster.resources import runs

    # The process tags let `peerify recover` tell this run dead from alive. No automatic retry: a killed
    # terminal build is re-run by its user, not relaunched in the background by `dagster dev`'s daemon.
    tags = {**runs.process_tags(), "dagster/max_retries": "0", ".dagster/repository": REPOSITORY_LABEL}
    run_config = {**(run_config or {}), "loggers": {"console": {"config": {"log_level": "INFO"}}}}
    if deployment.executor() == "celery":
        return run_on_celery(instance, job_name, partition_key, run_config, asset_selection, tags)
    run_id = str(uuid.uuid4())
    with runs.PoolWaitReporter(instance, run_id, say):
        return defs.resolve_job_def(job_name).execute_in_process(
            partition_key=partition_key, instance=instance, run_config=run_config, raise_on_error=False,
            run_id=run_id, tags=tags, asset_selection=asset_selection,
        )


LAUNCH_TAG = "peerify/launch"  # finds the run `dg.execute_job` creates, whose id is not known before


class CeleryRun:
    """A run on the Celery workers and its re-executions from failure (`run_on_celery`), read as one run of the
    build: the last attempt's id and outcome, the events and checks of every attempt (what the first one built
    stays built)."""

    def __init__(self, attempts: list):
        self.attempts = attempts

    @property
    def run_id(self) -> str:
        return self.attempts[-1].run_id

    @property
    def run_ids(self) -> list[str]:
        return [attempt.run_id for attempt in self.attempts]

    @property
    def success(self) -> bool:
        return self.attempts[-1].success

    @property
    def all_events(self) -> list:
        return [event for attempt in self.attempts for event in attempt.all_events]

    def get_asset_check_evaluations(self) -> list:
        return [check for attempt in self.attempts for check in attempt.get_asset_check_evaluations()]


def counting_spend_of(run_config: dict, run_ids: list[str]) -> dict:
    """The run config of a re-execution: a build's LLM budget (BuildSession) counts the failed attempts' spend too."""
    llm = run_config.get("resources", {}).get("llm", {}).get("config")
    if llm is None:
        return run_config
    spent = {**llm, "build_run_ids": [*(llm.get("build_run_ids") or []), *run_ids]}
    return {**run_config, "resources": {**run_config["resources"], "llm": {"config": spent}}}


def run_on_celery(instance: dg.DagsterInstance, job_name: str, partition_key, run_config: dict,
                  asset_selection: list | None, tags: dict) -> CeleryRun:
    """A run whose steps go to the Celery workers (`peerify worker`): execute_in_process would ignore the executor.
    This process orchestrates the run (it submits the steps and records their events), so the process tags still
    name what keeps the run alive and `peerify recover` judges it as before. A run whose failed steps all lost their
    worker process is re-executed from its failure, at most PEERIFY_LOST_WORKER_RETRIES times; a step's own error
    never is."""
    import dagster as dg

    from peerify_dagster import deployment
    from peerify_dagster.definitions import defs
    from peerify_dagster.reconstruct import reconstructable_job
    from peerify_dagster.resources import runs
    from peerify_dagster.step_fingerprint import loaded_code

    loaded_code()  # the code this process loaded, which its workers must run too (step_fingerprint.py)
    job = defs.resolve_job_def(job_name)
    if partition_key is not None:
        tags = {**tags, **job.get_tags_for_partition_key(partition_key, asset_selection)}
    retries = deployment.lost_worker_retries()

    def attempt(reexecution: dg.ReexecutionOptions | None = None, config: dict = run_config):
        launch = str(uuid.uuid4())
        found_by = (LAUNCH_TAG, launch)
        with runs.PoolWaitReporter(instance, None, say, launch_tag=found_by), \
                runs.StepProgressReporter(instance, None, say, launch_tag=found_by):
            return dg.execute_job(reconstructable_job(job_name), instance, run_config=config,
                                  tags={**tags, LAUNCH_TAG: launch}, reexecution_options=reexecution,
                                  asset_selection=None if reexecution else asset_selection)

    run = CeleryRun([attempt()])
    while not run.success and (lost := runs.lost_worker_steps(instance, run.run_id)):
        what = f"run {run.run_id} ({job_name} {partition_key}): {'; '.join(m.rstrip('.') for m in lost.values())}"
        if len(run.attempts) > retries:
            say(f"{what}; not re-executed: {deployment.LOST_WORKER_RETRIES}={retries}, {retries} made")
            break
        say(f"{what}; re-executing the run from its failure ({len(run.attempts)} of {retries}, "
            f"{deployment.LOST_WORKER_RETRIES})")
        run.attempts.append(attempt(dg.ReexecutionOptions.from_failure(run.run_id, instance),
                                    counting_spend_of(run_config, run.run_ids)))
    return run

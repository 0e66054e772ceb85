"""Keeping the Dagster home honest: one initialisation at a time, one build per venue, dead runs failed and
their pool slots freed, and a step waiting for a pool told who holds it.

Runs launched by `peerify build` carry the pid, its start time and the host of the process that executes
them (tags below), so a run whose process is gone is told apart from a live one exactly. Runs launched by
`dagster dev` record their run worker's pid in their "Started process for run" event; with the local SQLite
storage that process lives on this machine and is checked the same way. Anything else is left to Dagster's
run monitoring (dagster.yaml).
"""

from __future__ import annotations

import fcntl
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import dagster as dg

from peerify_dagster import deployment
from peerify_dagster.dagster_private import NO_STEP_OUTPUT_CAPTURE, instance_with_overrides, runs_stored_locally
from peerify_dagster.domain.predictions import PAIR_SEPARATOR, venue_and_configuration
from peerify_dagster.resources.lake import partition_slug
from peerify_dagster.resources.processes import process_alive, process_start_time
from peerify_dagster.resources.store import LakeStore

PID_TAG = "peerify/pid"
PROCESS_START_TAG = "peerify/process_start"
HOST_TAG = "peerify/host"
HOME_LOCK = ".peerify-build.lock"
# A run is ours to judge only while it can still be running; QUEUED runs wait for the daemon, not for a process.
LIVE_STATUSES = [dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED,
                 dg.DagsterRunStatus.CANCELING]
ENDED_STATUSES = {dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED}
RUN_WORKER_EVENT = "Started process for run"


def process_tags() -> dict[str, str]:
    """Tags naming the process that executes a run launched from here."""
    pid = os.getpid()
    return {PID_TAG: str(pid), PROCESS_START_TAG: process_start_time(pid) or "", HOST_TAG: socket.gethostname()}


@contextmanager
def exclusive_lock(path: Path, holder: str, on_wait: Callable[[str], None]) -> Iterator[None]:
    """Hold an fcntl lock on `path` (released by the kernel if we die). While another process holds it, call
    `on_wait` once with that holder's description, which each holder writes into the file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            on_wait(handle.read().strip() or "another process")
            fcntl.flock(handle, fcntl.LOCK_EX)
        handle.truncate(0)
        handle.write(holder)
        handle.flush()
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def build_lock_path(lake_root: Path | str, venue: str) -> Path:
    """The lock `peerify build <venue>` holds in the lake for as long as it runs (a local file: for an S3 lake in
    this machine's cache folder, so it excludes the builds started on this machine)."""
    return LakeStore(lake_root).cache_dir / f".build-{partition_slug(venue)}.lock"


def lock_holder(path: Path) -> str | None:
    """The description of whoever holds the `exclusive_lock` at `path`, or None when nobody does."""
    try:
        handle = open(path)
    except FileNotFoundError:
        return None
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return handle.read().strip() or "another process"
        fcntl.flock(handle, fcntl.LOCK_UN)
        return None


def build_in_progress(instance: dg.DagsterInstance, lake_root: Path, venue: str) -> str | None:
    """Who is computing the venue's partitions now, from a terminal: the `peerify build` holding its lock, or a live
    run launched by one (process tags) for the venue or one of its venue x configuration partitions. None: nobody,
    so a sensor may request work for the venue."""
    if holder := lock_holder(build_lock_path(lake_root, venue)):
        return holder
    for record in instance.get_run_records(filters=dg.RunsFilter(statuses=LIVE_STATUSES)):
        run = record.dagster_run
        partition = run.tags.get("dagster/partition", "")
        partition_venue = venue_and_configuration(partition)[0] if PAIR_SEPARATOR in partition else partition
        if PID_TAG in run.tags and partition_venue == venue \
                and (process := run_process(instance, run)).alive() is not False:
            return f"run {run.run_id} of {process.describe()}"
    return None


@contextmanager
def home_lock(home: Path, holder: str, on_wait: Callable[[str], None]) -> Iterator[None]:
    """Serialises what must not run twice at once on one Dagster home: creating (migrating) its storage and
    recovering its dead runs. Concurrent first builds on a fresh home otherwise leave two alembic heads."""
    with exclusive_lock(home / HOME_LOCK, holder, on_wait):
        yield


# Dagster's local compute-log manager mirrors each step's output through a `tail -F` child and an orphan watcher,
# and those children inherit the build's whole environment (API keys included). A terminal build prints its step
# output to the terminal anyway, so it opens the home without capturing it: the build starts no child process.
def open_instance(home: Path, holder: str, on_wait: Callable[[str], None],
                  capture_step_output: bool = True) -> tuple[dg.DagsterInstance, list[str]]:
    """The instance of the Dagster home `home` and a line per dead run recovered in it. The storage is created
    (migrated) and the runs recovered under the home lock. Runs and events go to the home's storage either way;
    `capture_step_output=False` leaves the steps' stdout/stderr out of it (no child process)."""
    with home_lock(home, holder, on_wait):
        instance = instance_with_overrides(str(home), {} if capture_step_output else NO_STEP_OUTPUT_CAPTURE)
        instance.get_runs(limit=1)  # run, event-log and schedule storages exist (and are migrated) from here on
        return instance, recover_dead_runs(instance)


@dataclass(frozen=True)
class RunProcess:
    pid: int
    start_time: str | None
    host: str | None

    def describe(self) -> str:
        return f"pid {self.pid}" + (f" on {self.host}" if self.host and self.host != socket.gethostname() else "")

    def alive(self) -> bool | None:
        """True/False when this machine can tell, None for a process on another host."""
        if self.host and self.host != socket.gethostname():
            return None
        return process_alive(self.pid, self.start_time)


def run_process(instance: dg.DagsterInstance, run: dg.DagsterRun) -> RunProcess | None:
    """The process executing `run`, from our tags or from the run worker's start event (local storage only)."""
    if PID_TAG in run.tags:
        return RunProcess(int(run.tags[PID_TAG]), run.tags.get(PROCESS_START_TAG) or None, run.tags.get(HOST_TAG))
    if not runs_stored_locally(instance):  # shared storage: the worker may be on another host
        return None
    for record in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.ENGINE_EVENT):
        event = record.dagster_event
        if event and (event.message or "").startswith(RUN_WORKER_EVENT):
            pid = event.engine_event_data.metadata.get("pid")
            if pid is not None:
                return RunProcess(int(pid.value), None, None)
    return None


def recover_dead_runs(instance: dg.DagsterInstance) -> list[str]:
    """Mark failed every unfinished run whose process is gone, and free the pool slots of every finished run.

    Returns one line per run recovered. Dagster frees a run's slots only when the run itself ends them, so a
    killed run would otherwise keep its `llm` slot forever and every later build would wait for it.
    """
    lines = []
    for record in instance.get_run_records(filters=dg.RunsFilter(statuses=LIVE_STATUSES)):
        run = record.dagster_run
        process = run_process(instance, run)
        if process is None or process.alive() is not False:
            continue
        instance.report_run_failed(run, f"the process that ran this run ({process.describe()}) is gone; "
                                        "marked failed by `peerify recover`")
        lines.append(f"run {run.run_id} ({run.tags.get('dagster/partition', run.job_name)}): "
                     f"{process.describe()} is gone; marked FAILURE")
    storage = instance.event_log_storage
    if not storage.supports_global_concurrency_limits:
        return lines
    for run_id in sorted(storage.get_concurrency_run_ids()):  # slots and queued claims of every ended run
        run = instance.get_run_by_id(run_id)
        if run is None or run.status in ENDED_STATUSES:
            storage.free_concurrency_slots_for_run(run_id)
            lines.append(f"run {run_id}: {run.status.value if run else 'deleted'}, freed the pool slots it kept")
    return lines


class RunWatcher:
    """A thread of this process watching one run every `interval_s` until the context ends (`check`, a subclass's);
    an error in a round is skipped: a diagnostic must never disturb the build it watches."""

    name = "run-watcher"

    def __init__(self, instance: dg.DagsterInstance, run_id: str | None, report: Callable[[str], None],
                 interval_s: float = 2.0, launch_tag: tuple[str, str] | None = None):
        """`run_id` None: the run is found by its `launch_tag` (name, value) once it exists, as for a run that
        `dg.execute_job` creates (the cluster profile), whose id is not known before."""
        self.instance, self.run_id, self.report, self.interval_s = instance, run_id, report, interval_s
        self.launch_tag = launch_tag
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name=self.name, daemon=True)

    def watches(self) -> bool:
        """Whether there is anything to watch with this instance."""
        return True

    def __enter__(self) -> RunWatcher:
        if self.watches():
            self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _watch(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.check()
            except Exception:  # noqa: BLE001 - a diagnostic must never disturb the build it watches: next round
                continue

    def found_run(self) -> bool:
        """Whether the run is known (by its id, or found by its launch tag now)."""
        if self.run_id is None:
            launched = self.instance.get_run_ids(dg.RunsFilter(tags=dict([self.launch_tag])), limit=1)
            self.run_id = launched[0] if launched else None
        return self.run_id is not None

    def check(self) -> list[str]:
        raise NotImplementedError


class PoolWaitReporter(RunWatcher):
    """Watches one run's steps in the instance's pools and reports, once per change, who holds a pool a step waits
    for: Dagster itself logs "Step blocked by limit for pool" at DEBUG only, without naming the holder."""

    name = "pool-wait-reporter"

    def __init__(self, *args, **kwargs) -> None:  # noqa: ANN002, ANN003 - RunWatcher's
        super().__init__(*args, **kwargs)
        self._said: dict[str, str] = {}

    def watches(self) -> bool:
        return self.instance.event_log_storage.supports_global_concurrency_limits

    def check(self) -> list[str]:
        """Report each pool this run waits for, with the runs holding it; returns the lines reported now."""
        if not self.found_run():
            return []
        storage = self.instance.event_log_storage
        reported = []
        for pool in sorted(storage.get_concurrency_keys()):
            info = storage.get_concurrency_info(pool)
            waiting = sorted(step.step_key for step in info.pending_steps
                             if step.run_id == self.run_id and step.assigned_timestamp is None)
            if not waiting:
                self._said.pop(pool, None)
                continue
            holders = sorted({slot.run_id for slot in info.claimed_slots if slot.run_id})
            held_by = ", ".join(self._describe(run_id) for run_id in holders) or "nobody (slots being assigned)"
            line = f"waiting for pool {pool} ({', '.join(waiting)}): held by {held_by}"
            if self._said.get(pool) != line:
                self._said[pool] = line
                self.report(line)
                run = self.instance.get_run_by_id(self.run_id)
                if run is not None:
                    self.instance.report_engine_event(line, run, step_key=waiting[0])
                reported.append(line)
        return reported

    def _describe(self, run_id: str) -> str:
        run = self.instance.get_run_by_id(run_id)
        process = run_process(self.instance, run) if run else None
        return f"run {run_id}" + (f" ({process.describe()})" if process else "")


CELERY_WORKER_KEY = "Celery worker"  # what dagster_celery's step task names its worker with, in an engine event
STEP_EVENTS = {dg.DagsterEventType.STEP_START, dg.DagsterEventType.STEP_SUCCESS, dg.DagsterEventType.STEP_FAILURE,
               dg.DagsterEventType.ENGINE_EVENT}


class StepProgressReporter(RunWatcher):
    """Reports a run's steps as its events arrive, wherever the steps run (on Celery workers, the events come
    through the shared storage): each step's start with its worker, its end with its seconds, and every
    `summary_every_s` while steps run, how many are done and which run where, for how long."""

    name = "step-progress-reporter"

    def __init__(self, *args, summary_every_s: float = 30.0, **kwargs) -> None:  # noqa: ANN002, ANN003
        super().__init__(*args, **kwargs)
        self.summary_every_s = summary_every_s
        self._cursor: str | None = None
        self._workers: dict[str, str] = {}  # step key -> the worker running it
        self._running: dict[str, float] = {}  # step key -> its start timestamp
        self._done = self._failed = 0
        self._summarised_at = time.monotonic()

    def _where(self, key: str) -> str:
        return f" on {self._workers[key]}" if key in self._workers else ""

    def check(self) -> list[str]:
        """Report what happened since the last round; returns the lines reported now."""
        if not self.found_run():
            return []
        lines = []
        while True:
            connection = self.instance.get_records_for_run(self.run_id, cursor=self._cursor, of_type=STEP_EVENTS,
                                                           limit=500)
            self._cursor = connection.cursor
            for record in connection.records:
                lines += self._read(record.event_log_entry)
            if not connection.has_more:
                break
        if self._running and time.monotonic() - self._summarised_at >= self.summary_every_s:
            now = time.time()
            running = ", ".join(f"{key}{self._where(key)} ({now - started:.0f} s)"
                                for key, started in sorted(self._running.items(), key=lambda item: item[1]))
            lines.append(f"{self._done} step(s) done, {self._failed} failed, {len(self._running)} running: {running}")
        if lines:
            self._summarised_at = time.monotonic()
        for line in lines:
            self.report(line)
        return lines

    def _read(self, entry) -> list[str]:  # noqa: ANN001 - an EventLogEntry
        event, key = entry.dagster_event, entry.step_key
        if event is None or key is None:
            return []
        if event.event_type == dg.DagsterEventType.ENGINE_EVENT:
            data = event.engine_event_data
            if data is not None and CELERY_WORKER_KEY in data.metadata:
                self._workers[key] = str(data.metadata[CELERY_WORKER_KEY].value)
            return []
        if event.event_type == dg.DagsterEventType.STEP_START:
            self._running[key] = entry.timestamp
            return [f"step {key} started{self._where(key)}"]
        started = self._running.pop(key, None)
        took = f" in {entry.timestamp - started:.0f} s" if started is not None else ""
        if event.event_type == dg.DagsterEventType.STEP_SUCCESS:
            self._done += 1
            return [f"step {key} done{took}{self._where(key)}"]
        self._failed += 1
        return [f"step {key} failed{took}{self._where(key)}: {event.message or 'see the run in the UI'}"]


def _lost_worker_messages(failures: Sequence) -> dict[str, str]:
    """Of a run's STEP_FAILURE records, those of a lost worker (process): step key -> what the failure says."""
    return {record.step_key: record.dagster_event.message or "" for record in failures
            if (error := record.dagster_event.step_failure_data.error)
            and error.cls_name == deployment.LOST_WORKER_ERROR}


def lost_worker_failures(instance: dg.DagsterInstance, run_id: str) -> dict[str, str]:
    """The steps of a run that failed because their worker process died or their worker was lost, each with what its
    failure says."""
    return _lost_worker_messages(instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_FAILURE))


def lost_worker_steps(instance: dg.DagsterInstance, run_id: str) -> dict[str, str]:
    """The failed steps of a run (with what their failures say), when every one of them lost its worker;
    {} when any failed otherwise, or none did (the run itself failed): only then is re-executing it unchanged of
    use."""
    failures = instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_FAILURE)
    lost = _lost_worker_messages(failures)
    return lost if failures and len(lost) == len({record.step_key for record in failures}) else {}


RECENT_RUNS = 50  # the failed runs `peerify recover` looks through for steps that lost their worker


def lost_worker_report(instance: dg.DagsterInstance, limit: int = RECENT_RUNS) -> list[str]:
    """One line per step of the last `limit` failed runs that lost its worker: what happened, and whether a
    re-execution of the run took it up (and how that ended) or the venue must be built again."""
    recent = instance.get_runs(limit=4 * limit)  # a failed run's re-execution comes after it
    reexecuted_by = {run.parent_run_id: run for run in reversed(recent) if run.parent_run_id}
    lines = []
    for run in [run for run in recent if run.status == dg.DagsterRunStatus.FAILURE][:limit]:
        lost = lost_worker_failures(instance, run.run_id)
        if not lost:
            continue
        child = reexecuted_by.get(run.run_id)
        after = (f"re-executed by run {child.run_id} ({child.status.value})" if child
                 else "not re-executed: build the venue again")
        what = run.tags.get("dagster/partition", run.job_name)
        lines += [f"run {run.run_id} ({what}): {message.rstrip('.')}; {after}" for message in lost.values()]
    return lines

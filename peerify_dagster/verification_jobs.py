"""The web app's verification jobs: each a request a user submitted, kept in the lake (`uploads/jobs/<id>.json`, written
whole or not at all, with its PDF beside it) with its status, phase, message and percent, so a page reload or a server
restart loses nothing.

One worker thread of the server runs one job at a time, each in a child process (`python -m
peerify_dagster.cli.verification <job id>`) that calls `run_verification` in the server's lake
and reports every phase into the job file: the build's Dagster runs, Docling and the local model stay out of the
server's process (pages keep answering while a job runs) and the lake is the child's environment, not a change to the
server's. The child ends with the server (parent-death signal: it stops after the run in progress and puts its job
back in the queue); a server starting again re-queues the jobs left running by a dead one, and their re-run finds in
the ledger every call already made. Starting the server runs nothing else: only jobs a user submitted call a model.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from peerify_dagster.domain import uploads
from peerify_dagster.resources.files import write_atomic, write_json_atomic
from peerify_dagster.resources.processes import process_alive, process_start_time

# What the worker runs for a job: `python -m` this module runs one job (the verification's own code lives there).
CHILD_MODULE = "peerify_dagster.cli.verification"

JOBS_DIR = "jobs"  # under the lake's uploads/
JOB_ID = re.compile(r"^[0-9a-f]{16}$")
QUEUED, RUNNING, DONE, FAILED = "queued", "running", "done", "failed"
PDF_FILE = "paper.pdf"
STDERR_TAIL = 2000  # characters of a crashed child's output kept as the job's error


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def request_record(request: uploads.VerificationRequest) -> dict[str, Any]:
    """A request as its job file keeps it (the PDF bytes apart, in the job's folder)."""
    upload = request.upload
    return {"upload": None if upload is None else {
                "pdf_name": upload.pdf_name, "reviews": [asdict(text) for text in upload.reviews],
                "responses": [asdict(text) for text in upload.responses]},
            "venue": request.venue, "forum": request.forum, "configurations": list(request.configurations),
            "description": request.describe()}


class JobStore:
    """The jobs of one lake: `<lake>/uploads/jobs/<id>.json` and `<id>/paper.pdf`."""

    def __init__(self, lake_root: str | Path):
        self.folder = Path(lake_root) / "uploads" / JOBS_DIR

    def path(self, job_id: str) -> Path:
        if not JOB_ID.match(job_id):
            raise KeyError(job_id)
        return self.folder / f"{job_id}.json"

    def submit(self, request: uploads.VerificationRequest) -> dict[str, Any]:
        job_id = secrets.token_hex(8)
        if request.upload is not None:
            write_atomic(self.folder / job_id / PDF_FILE, request.upload.pdf)
        job = {"id": job_id, "status": QUEUED, "phase": "queued", "message": "waiting for the worker", "percent": 0.0,
               "history": [], "submitted_at": now(), "order": time.time_ns(), "request": request_record(request),
               "venue": None, "usage": None, "error": None, "worker": None}
        write_json_atomic(self.path(job_id), job)
        return job

    def get(self, job_id: str) -> dict[str, Any] | None:
        try:
            return json.loads(self.path(job_id).read_text())
        except (KeyError, FileNotFoundError, ValueError):
            return None

    def jobs(self) -> list[dict[str, Any]]:
        """Every job, newest first."""
        found = [job for path in self.folder.glob("*.json") if (job := self.get(path.stem))]
        return sorted(found, key=lambda job: job["order"], reverse=True)

    @contextmanager
    def _locked(self, job_id: str) -> Iterator[None]:
        """One writer of a job file at a time, across processes (the server's worker and the job's child)."""
        with open(self.folder / f".{job_id}.lock", "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            yield

    def update(self, job_id: str, **fields: Any) -> dict[str, Any]:
        with self._locked(job_id):
            job = self.get(job_id)
            if job is None:
                raise KeyError(job_id)
            job.update(fields)
            write_json_atomic(self.path(job_id), job)
            return job

    def progress(self, job_id: str, phase: str, message: str, percent: float) -> None:
        """The job's phase now, and when each phase began (the page lists them)."""
        with self._locked(job_id):
            job = self.get(job_id)
            if job is None:
                raise KeyError(job_id)
            if not job["history"] or job["history"][-1]["phase"] != phase:
                job["history"].append({"phase": phase, "at": now()})
            job.update(phase=phase, message=message, percent=round(percent, 1))
            write_json_atomic(self.path(job_id), job)

    def request(self, job: dict[str, Any]) -> uploads.VerificationRequest:
        """The job's request, its PDF read back from the job's folder."""
        record = job["request"]
        upload = record["upload"]
        return uploads.VerificationRequest(
            upload=None if upload is None else uploads.Upload(
                pdf=(self.folder / job["id"] / PDF_FILE).read_bytes(), pdf_name=upload["pdf_name"],
                reviews=tuple(uploads.UploadedText(**text) for text in upload["reviews"]),
                responses=tuple(uploads.UploadedText(**text) for text in upload["responses"])),
            venue=record["venue"], forum=record["forum"], configurations=tuple(record["configurations"]))

    def requeue_abandoned(self) -> list[str]:
        """Put back in the queue the jobs left running by a worker that is gone (a server killed, or stopped while a
        child still wrote); returns their ids."""
        requeued = []
        for job in self.jobs():
            if job["status"] == RUNNING and not _worker_alive(job):
                self.update(job["id"], status=QUEUED, worker=None,
                            message="re-queued: the server stopped while it ran; calls already made are in the ledger")
                requeued.append(job["id"])
        return requeued

    def claim(self, job_id: str) -> bool:
        """Mark a queued job running for this worker; False when another worker (a second server on the lake) took
        it first."""
        with self._locked(job_id):
            job = self.get(job_id)
            if job is None or job["status"] != QUEUED:
                return False
            job.update(status=RUNNING, started_at=now(), error=None, worker=None)
            write_json_atomic(self.path(job_id), job)
            return True

    def next_queued(self) -> dict[str, Any] | None:
        queued = [job for job in self.jobs() if job["status"] == QUEUED]
        return min(queued, key=lambda job: job["order"]) if queued else None

    def running(self) -> dict[str, Any] | None:
        """A job whose child process runs now (one left by a previous server included)."""
        return next((job for job in self.jobs() if job["status"] == RUNNING and _worker_alive(job)), None)


def _worker_alive(job: dict[str, Any]) -> bool:
    worker = job.get("worker") or {}
    return process_alive(worker.get("pid", 0), worker.get("start"))


def phase_steps(job: dict[str, Any]) -> list[tuple[str, str]]:
    """The job's phases in order (one `predicting <configuration>` each), with their state: done, current, failed or
    pending."""
    seen = [entry["phase"] for entry in job["history"]]
    steps = []
    for phase in uploads.PHASES:
        steps += ([name for name in seen if name.startswith(f"{uploads.PREDICTING} ")] or [uploads.PREDICTING]) \
            if phase == uploads.PREDICTING else [phase]
    reached = max((steps.index(name) for name in seen if name in steps), default=-1)
    states = []
    for index, name in enumerate(steps):
        if job["status"] == DONE or index < reached:
            states.append((name, "done"))
        elif index == reached:
            states.append((name, {FAILED: "failed", QUEUED: "pending"}.get(job["status"], "current")))
        else:
            states.append((name, "pending"))
    return states


class Worker:
    """The server's one worker thread: runs queued jobs one at a time, each in a child process."""

    def __init__(self, store: JobStore, lake_root: str | Path, poll_s: float = 2.0):
        self.store, self.lake_root, self.poll_s = store, Path(lake_root), poll_s
        self._wake, self._stop = threading.Event(), threading.Event()
        self._child: subprocess.Popen | None = None
        self._thread = threading.Thread(target=self._loop, name="verify-worker", daemon=True)

    def start(self) -> None:
        self.store.requeue_abandoned()
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop after the child's run in progress (SIGTERM: the child re-queues its job)."""
        self._stop.set()
        self._wake.set()
        if (child := self._child) is not None and child.poll() is None:
            child.send_signal(signal.SIGTERM)
        self._thread.join(timeout_s)

    def _loop(self) -> None:
        while not self._stop.is_set():
            job = None if self.store.running() else self.store.next_queued()
            if job is None:
                self._wake.wait(self.poll_s)
                self._wake.clear()
                continue
            try:
                self._run(job)
            except (OSError, KeyError, ValueError) as error:  # the job's files: the worker goes on with the next job
                with contextlib.suppress(OSError, KeyError, ValueError):
                    self.store.update(job["id"], status=FAILED, finished_at=now(), worker=None,
                                      error=f"the worker could not run the job: {error}")

    def _run(self, job: dict[str, Any]) -> None:
        if self._stop.is_set() or not self.store.claim(job["id"]):
            return
        env = {**os.environ, "PEERIFY_LAKE": str(self.lake_root)}
        log = self.store.folder / job["id"] / "worker.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "w") as output:
            command = [sys.executable, "-m", CHILD_MODULE, job["id"], str(os.getpid())]
            child = subprocess.Popen(command, env=env, stdout=output, stderr=subprocess.STDOUT)
            self._child = child
            self.store.update(job["id"], worker={"pid": child.pid, "start": process_start_time(child.pid)})
            child.wait()
            self._child = None
        ended = self.store.get(job["id"]) or {}
        if ended.get("status") == RUNNING:  # the child died without a word: its output says why
            self.store.update(job["id"], status=FAILED, finished_at=now(), worker=None,
                              error=f"the verification process ended with exit code {child.returncode}: "
                                    f"{log.read_text(errors='replace')[-STDERR_TAIL:]}")

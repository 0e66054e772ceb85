"""README "Running on a cluster", walked as a newcomer would on one machine: `peerify cluster up` starts Redis,
Postgres and an S3 server on loopback with the role, database and bucket and writes the variables; two workers and
`peerify build sample` run on them from that file. As the build embeds, one worker's main process is SIGKILLed: its
step processes end with it, the build notices within a minute (no heartbeat), fails the step as lost, says so,
re-executes the run on the other worker and completes; it shows each step's progress and worker as it goes, and
`peerify recover` reports the lost worker afterwards. A worker started with another lake refuses the next build's
step in one line naming the difference and writes nothing. `peerify cluster down` stops what `up` started."""

from __future__ import annotations

import os
import re
import shlex
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.instance.ref import InstanceRef

from peerify_dagster.resources.local_services import ENV_FILE, STATE_FILE
from peerify_dagster.resources.processes import process_alive
from tests.fakes.cli import (
    SAMPLE_RECORDING,
    cli_env,
    descendants,
    finish,
    peerify,
    sample_registry,
    start_peerify,
    stop_process,
    wait_for,
)

VENUE = "sample"
KILLED_OP = "embed_shard"  # seconds long (the embedding model loads): long enough to be killed in
BUILD_TIMEOUT_S = 900


def read_env_file(path: Path) -> dict[str, str]:
    """The variables of `cluster.env` as a shell sourcing it sees them."""
    found = {}
    for line in path.read_text().splitlines():
        name, _, value = line.removeprefix("export ").partition("=")
        found[name] = shlex.split(value)[0]
    return found


@dataclass
class Walk:
    folder: Path
    env: dict[str, str]
    up_stderr: str
    build_returncode: int
    console: str
    killed_worker: str
    killed_step: str
    kill_to_failure_s: float
    recover_stderr: str
    refused_returncode: int
    refused_console: str
    other_lake: Path
    down_stderr: str
    recorded: list[dict]


def instance_of(env: dict[str, str]) -> dg.DagsterInstance:
    return dg.DagsterInstance.from_ref(InstanceRef.from_dir(
        env["DAGSTER_HOME"], overrides={"storage": {"postgres": {"postgres_url": env["PEERIFY_POSTGRES_URL"]}}}))


@pytest.fixture(scope="module")
def walk(tmp_path_factory) -> Walk:
    import json

    root = tmp_path_factory.mktemp("walk")
    folder = root / "cluster"
    base = cli_env(root / "unused-lake", sample_registry(root, llm_recording=str(SAMPLE_RECORDING)), None,
                   PEERIFY_WORKER_REGISTRY=str(root / "machine-workers"), PEERIFY_LAKE_CACHE=str(root / "lake-cache"))
    base = {name: value for name, value in base.items() if name not in ("PEERIFY_LAKE", "DAGSTER_HOME")}
    up = peerify("cluster", "up", str(folder), env=base, timeout=300)
    assert up.returncode == 0, up.stderr[-3000:]
    recorded = json.loads((folder / STATE_FILE).read_text())
    workers = {}
    try:
        env = {**base, **read_env_file(folder / ENV_FILE)}
        for name in ("walk-w1", "walk-w2"):
            workers[name] = start_peerify("worker", "--name", name, env=env, logs=root / name)
        for name, process in workers.items():
            wait_for(f"worker {name}", lambda: " ready." in (root / f"{name}.err").read_text()
                     or process.poll() is not None, timeout=180)
            assert process.poll() is None, (root / f"{name}.err").read_text()[-3000:]
        instance = instance_of(env)
        build = start_peerify("build", VENUE, env=env, logs=root / "build")
        start = wait_for(f"a {KILLED_OP} step to start", lambda: [
            record for run in instance.get_runs(limit=1) for record in instance.all_logs(
                run.run_id, of_type=dg.DagsterEventType.STEP_START) if KILLED_OP in record.step_key],
            BUILD_TIMEOUT_S)[0]
        victim = next(name for name, process in workers.items() if start.dagster_event.pid in descendants(process.pid))
        os.kill(workers[victim].pid, signal.SIGKILL)  # the worker's main process, not its step process
        killed_at = time.time()
        workers[victim].wait(timeout=30)
        built = finish(build, root / "build", timeout=BUILD_TIMEOUT_S)
        [failed] = [record.timestamp for record in instance.all_logs(
            start.run_id, of_type=dg.DagsterEventType.STEP_FAILURE) if record.step_key == start.step_key]
        recover = peerify("recover", env=env, timeout=300)
        # A worker of another lake, alone: the next build's first step is refused and nothing is written.
        survivor = next(name for name in workers if name != victim)
        stop_process(workers.pop(survivor))
        other_lake = root / "other-lake"
        workers["walk-stray"] = start_peerify("worker", "--name", "walk-stray", env={**env, "PEERIFY_LAKE": str(
            other_lake)}, logs=root / "walk-stray")
        wait_for("the stray worker", lambda: " ready." in (root / "walk-stray.err").read_text(), timeout=180)
        refused = peerify("build", VENUE, env=env, timeout=BUILD_TIMEOUT_S)
        instance.dispose()
    finally:
        for process in workers.values():
            stop_process(process)
        down = peerify("cluster", "down", str(folder), env=base, timeout=120)
    return Walk(folder, env, up.stderr, built.returncode, built.stderr, victim, start.step_key, failed - killed_at,
                recover.stderr, refused.returncode, refused.stderr, other_lake, down.stderr, recorded)


def test_cluster_up_starts_the_services_with_their_role_database_and_bucket(walk):
    assert walk.env["PEERIFY_EXECUTOR"] == "celery" and walk.env["PEERIFY_LAKE"] == "s3://peerify-lake/lake"
    assert walk.env["PEERIFY_POSTGRES_URL"].startswith("postgresql+psycopg2://peerify:")
    assert walk.env["PEERIFY_POSTGRES_URL"].endswith("/dagster")
    assert "the Postgres storage is ready" in walk.up_stderr and "missing:" not in walk.up_stderr
    assert (Path(walk.env["DAGSTER_HOME"]) / "dagster.yaml").is_file()
    assert sorted(record["name"] for record in walk.recorded) == ["postgres", "redis", "seaweedfs"]


def test_the_build_on_the_walked_cluster_survives_a_killed_worker_and_completes(walk):
    assert walk.build_returncode == 0, walk.console[-4000:]
    assert 0 < walk.kill_to_failure_s < 60, walk.kill_to_failure_s
    lost = re.search(rf'Step "{re.escape(walk.killed_step)}" failed: the Celery worker {walk.killed_worker}@\S+ '
                     r"stopped answering", walk.console)
    assert lost, walk.console[-4000:]
    assert "re-executing the run from its failure (1 of 1, PEERIFY_LOST_WORKER_RETRIES)" in walk.console


def test_the_build_shows_each_step_with_its_worker_while_it_waits(walk):
    assert re.search(r"step \S+ started on walk-w\d@", walk.console), walk.console[-3000:]
    assert re.search(r"step \S+ done in \d+ s on walk-w\d@", walk.console), walk.console[-3000:]


def test_recover_reports_the_lost_worker_and_the_re_execution(walk):
    line = next(line for line in walk.recover_stderr.splitlines() if line.startswith("lost worker:"))
    assert walk.killed_step in line and walk.killed_worker in line and "re-executed by run" in line
    assert "(SUCCESS)" in line


def test_a_worker_of_another_lake_refuses_the_step_and_writes_nothing(walk):
    assert walk.refused_returncode != 0
    assert "walk-stray" in walk.refused_console and "refused step" in walk.refused_console
    assert f"lake: build s3://peerify-lake/lake, this worker {walk.other_lake}" in walk.refused_console
    assert not walk.other_lake.exists() or not any(walk.other_lake.rglob("*.parquet"))


def test_cluster_down_stops_every_server_it_started(walk):
    assert all(not process_alive(record["pid"], record["start_time"]) for record in walk.recorded)
    assert walk.down_stderr.count(": stopped") == 3, walk.down_stderr
    assert not (walk.folder / ENV_FILE).exists() and not (walk.folder / STATE_FILE).exists()

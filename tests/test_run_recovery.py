"""The Dagster home survives crashes and concurrency: runs whose process died are failed and their pool slots freed,
a step waiting for a pool is told who holds it, concurrent first builds initialise the home once, two builds of one
venue take turns, and temporaries of killed writers are removed."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid

import dagster as dg
from dagster._core.events import EngineEventData
from dagster._core.storage.dagster_run import DagsterRun, DagsterRunStatus

from peerify_dagster.resources.runs import PoolWaitReporter, process_tags
from tests.cli_support import cli_env, dead_pid, fresh_home, peerify, start_peerify
from tests.fakes.cli import alembic_heads
from tests.support import write_registry

# A process that starts a run of `build_venue` as `peerify build` does (tagged with its own process), claims the
# `llm` pool slot its predictions step would hold, and keeps running until it is killed.
RUN_HOLDING_A_SLOT = """
import sys, time
import dagster as dg
from dagster._core.storage.dagster_run import DagsterRun, DagsterRunStatus
from peerify_dagster.resources.runs import process_tags

instance = dg.DagsterInstance.get()
run = instance.add_run(DagsterRun(job_name="build_venue", run_id=sys.argv[1], status=DagsterRunStatus.STARTED,
                                  tags={**process_tags(), "dagster/partition": "sample"}))
claim = instance.event_log_storage.claim_concurrency_slot("llm", run.run_id, "predictions")
print("claimed" if claim.is_claimed else "blocked", flush=True)
time.sleep(600)
"""


def add_run(instance: dg.DagsterInstance, run_id: str, status: DagsterRunStatus, tags: dict[str, str]) -> DagsterRun:
    return instance.add_run(DagsterRun(job_name="build_venue", run_id=run_id, status=status, tags=tags))


def slot_holders(instance: dg.DagsterInstance, pool: str = "llm") -> set[str]:
    return {slot.run_id for slot in instance.event_log_storage.get_concurrency_info(pool).claimed_slots if slot.run_id}


def test_recover_fails_dead_runs_and_frees_their_pool_slots(tmp_path, monkeypatch):
    home = fresh_home(tmp_path / "home")
    env = cli_env(tmp_path / "lake", tmp_path / "venues.yaml", home)
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    with dg.DagsterInstance.get() as instance:
        instance.event_log_storage.set_concurrency_slots("llm", 4)

        killed = subprocess.Popen([sys.executable, "-c", RUN_HOLDING_A_SLOT, "killed-build"], env=env,
                                  stdout=subprocess.PIPE, text=True)
        assert killed.stdout.readline().strip() == "claimed"
        killed.kill()  # kill -9: the run stays STARTED and keeps its slot, as the issue measured
        killed.wait()
        # A run launched by `dagster dev`: no tags, its worker's pid in the "Started process for run" event.
        dev_run = add_run(instance, "dev-run", DagsterRunStatus.STARTED, {})
        gone = dead_pid()
        instance.report_engine_event(f"Started process for run (pid: {gone}).", dev_run,
                                     EngineEventData.in_process(gone))
        instance.event_log_storage.claim_concurrency_slot("llm", "dev-run", "predictions")
        # A run whose process is alive (this test), and a run that ended without giving its slot back.
        add_run(instance, "live-build", DagsterRunStatus.STARTED, process_tags())
        instance.event_log_storage.claim_concurrency_slot("llm", "live-build", "predictions")
        add_run(instance, "ended-run", DagsterRunStatus.FAILURE, {})
        instance.event_log_storage.claim_concurrency_slot("llm", "ended-run", "predictions")
        assert slot_holders(instance) == {"killed-build", "dev-run", "live-build", "ended-run"}

        result = peerify("recover", env=env)
        assert result.returncode == 0, result.stderr
        assert f"pid {killed.pid} is gone" in result.stderr and f"pid {gone} is gone" in result.stderr

        assert instance.get_run_by_id("killed-build").status == DagsterRunStatus.FAILURE
        assert instance.get_run_by_id("dev-run").status == DagsterRunStatus.FAILURE
        assert instance.get_run_by_id("live-build").status == DagsterRunStatus.STARTED
        assert slot_holders(instance) == {"live-build"}
        # nothing left to recover, and no lost worker to report
        assert peerify("recover", env=env).stderr == "recover: no step of the last 50 failed runs lost its worker\n"


def test_a_step_waiting_for_a_pool_is_told_who_holds_it(tmp_path, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", str(fresh_home(tmp_path / "home")))

    @dg.asset(pool="llm")
    def needs_the_llm() -> int:
        return 1

    with dg.DagsterInstance.get() as instance:
        instance.event_log_storage.set_concurrency_slots("llm", 1)
        holder = add_run(instance, str(uuid.uuid4()), DagsterRunStatus.STARTED, process_tags())
        instance.event_log_storage.claim_concurrency_slot("llm", holder.run_id, "predictions")
        said: list[str] = []
        run_id = str(uuid.uuid4())
        results: list[dg.ExecuteInProcessResult] = []
        job = dg.Definitions(assets=[needs_the_llm], jobs=[dg.define_asset_job("llm_job")]).resolve_job_def("llm_job")
        with PoolWaitReporter(instance, run_id, said.append, interval_s=0.2):
            build = threading.Thread(target=lambda: results.append(job.execute_in_process(instance=instance,
                                                                                          run_id=run_id)))
            build.start()
            deadline = time.monotonic() + 60
            while not said and time.monotonic() < deadline:
                time.sleep(0.2)
            instance.event_log_storage.free_concurrency_slots_for_run(holder.run_id)
            build.join(timeout=120)
        assert said == [f"waiting for pool llm (needs_the_llm): held by run {holder.run_id} (pid {os.getpid()})"]
        assert results and results[0].success
        logged = [e.message for e in instance.all_logs(run_id) if e.dagster_event and e.message == said[0]]
        assert logged  # also in the run's event log, at INFO, for the UI


def test_concurrent_first_builds_initialise_the_home_once(tmp_path):
    reference = fresh_home(tmp_path / "reference")
    assert peerify("recover", env=cli_env(tmp_path / "lake", tmp_path / "venues.yaml", reference)).returncode == 0
    expected = alembic_heads(reference)
    assert expected and all(len(heads) == 1 for heads in expected.values())
    for attempt in range(3):  # without the home lock, one attempt in three left two heads here
        home = fresh_home(tmp_path / f"home{attempt}")
        env = cli_env(tmp_path / "lake", tmp_path / "venues.yaml", home)
        processes = [start_peerify("recover", env=env) for _ in range(3)]
        outcomes = [(p.wait(timeout=120), p.stderr.read()) for p in processes]
        assert [code for code, _ in outcomes] == [0, 0, 0], outcomes
        assert alembic_heads(home) == expected


def test_two_builds_of_one_venue_take_turns_on_a_fresh_home(tmp_path):
    (tmp_path / "empty_snapshot").mkdir()  # no submissions.json: the build fails at its first step, quickly
    registry = write_registry(tmp_path, "v", source="snapshot", snapshot="empty_snapshot", seed=1)
    home = fresh_home(tmp_path / "home")
    env = cli_env(tmp_path / "lake", registry, home)
    first = start_peerify("build", "v", env=env)
    time.sleep(0.5)
    second = start_peerify("build", "v", env=env)
    errs = {p.pid: p.communicate(timeout=300)[1] for p in (first, second)}
    assert first.returncode == second.returncode == 1  # both ran the graph (and failed on the empty snapshot)
    # the build lock's wait, a line of its own (the home lock's wait names the same holder, then "setting up the
    # Dagster home": either build may first wait for the other's setup of the fresh home)
    waited = [(pid, err) for pid, err in errs.items()
              if any(line.startswith("waiting for the build of v (pid") and line.endswith(") to finish")
                     for line in err.splitlines())]
    assert len(waited) == 1, errs
    waiter, err = waited[0]
    other = first.pid if waiter == second.pid else second.pid
    assert f"waiting for the build of v (pid {other}) to finish" in err.splitlines()
    with dg.DagsterInstance.from_config(str(home)) as instance:
        runs = instance.get_runs()
    assert len(runs) == 2 and {run.status for run in runs} == {DagsterRunStatus.FAILURE}
    assert alembic_heads(home) and all(len(heads) == 1 for heads in alembic_heads(home).values())


def test_recover_removes_temporaries_of_killed_writers_only(tmp_path):
    lake = tmp_path / "lake"
    (lake / "reviews").mkdir(parents=True)
    stale = lake / "reviews" / f".sample.parquet.{dead_pid()}.tmp"
    in_flight = lake / "reviews" / f".other.parquet.{os.getpid()}.tmp"
    unrelated = lake / "reviews" / ".notes.tmp"
    for path in (stale, in_flight, unrelated):
        path.write_bytes(b"partial")
    result = peerify("recover", env=cli_env(lake, tmp_path / "venues.yaml", fresh_home(tmp_path / "home")))
    assert result.returncode == 0, result.stderr
    assert "removed 1 temporary file(s)" in result.stderr
    assert not stale.exists() and in_flight.exists() and unrelated.exists()

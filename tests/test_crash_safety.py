"""A real crash of a real build: `peerify build sample` (the local SmolLM2 models, as `make demo` runs them) is killed
with SIGKILL in the middle of its LLM calls, then two rebuilds start at once on the same lake and Dagster home while
another process holds the catalog open for writing. Nothing paid for is paid twice, nothing is left running, and the
Dagster home is left clean.

One scenario for the whole module; each test checks one promise of it. The venue is the sample drawn down to one
paper (`sample_size: 1`), with the sample's LLM recording installed in the lake first, as `make demo` has it: the
claim and labelling calls are answered from it, and the verifier's calls of a configuration the recording does not
hold (`hybrid-top2`) are made live by the local model; the build is killed in the middle of those. The recorded calls
are left out of every ledger promise below: nobody paid for them in this scenario.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import polars as pl
import pyarrow.parquet as pq
import pytest

from peerify_dagster.resources.lake import Lake
from peerify_dagster.resources.llm_recording import install_recording
from peerify_dagster.resources.runs import PID_TAG
from tests.fakes.cli import (
    SAMPLE_RECORDING,
    CliResult,
    KilledBuild,
    cli_env,
    finish,
    fresh_home,
    hold_catalog,
    kill_during_llm_calls,
    ledger_rows,
    peerify,
    sample_registry,
    start_peerify,
)


@dataclass
class Scenario:
    lake: Lake
    home: Path
    env: dict[str, str]
    killed: KilledBuild
    rebuilds: list[CliResult]
    rebuild_pids: list[int]
    ledger: list[dict]  # the rows of calls made in this scenario (the recording's left out)
    recorded: set[str]  # the call ids the installed recording answers
    runs: list[dg.DagsterRun]
    claimed_llm_slots: list

    def made_before_kill(self) -> set[str]:
        return self.killed.recorded_before_kill - self.recorded


@pytest.fixture(scope="module")
def scenario(tmp_path_factory) -> Scenario:
    tmp = tmp_path_factory.mktemp("crash")
    home = fresh_home(tmp / "home")
    lake = Lake(tmp / "lake")
    # One configuration the recording does not hold: its verifier calls are the ones made live (and killed).
    configurations = tmp / "configurations.yaml"
    configurations.write_text(CONFIGURATIONS)
    env = cli_env(lake.root, sample_registry(tmp, sample_size=1), home, PEERIFY_CONFIGURATIONS=str(configurations))
    install_recording(lake.root, SAMPLE_RECORDING)
    recorded = set(pq.read_table(SAMPLE_RECORDING, columns=["call_id"])["call_id"].to_pylist())
    killed = kill_during_llm_calls("sample", env, tmp / "killed", after_new_calls=5)

    # A notebook with the catalog open for writing, all through the rebuilds.
    holder = hold_catalog(lake.catalog_path, read_only=False, seconds=7200)
    try:
        started = [(start_peerify("build", "sample", env=env, logs=tmp / f"rebuild{i}"), tmp / f"rebuild{i}")
                   for i in range(2)]
        rebuild_pids = [process.pid for process, _ in started]
        rebuilds = [finish(process, logs, timeout=1800) for process, logs in started]
    finally:
        holder.kill()
        holder.wait()
    with dg.DagsterInstance.from_config(str(home)) as instance:
        runs = instance.get_runs()
        claimed = instance.event_log_storage.get_concurrency_info("llm").claimed_slots
    made = [row for row in ledger_rows(lake.root) if row["call_id"] not in recorded]
    return Scenario(lake, home, env, killed, rebuilds, rebuild_pids, made, recorded, runs, claimed)


# `make demo`'s hybrid-top3 but showing two passages: calls the recording cannot answer.
PREDICTIONS = "hybrid-top2|sample"
CONFIGURATIONS = "configurations:\n  hybrid-top2: {verifier: verifiers, mode: rag, retriever: hybrid, k: 2}\n"


def summary_rows(stdout: str, table: str) -> str:
    """The row count the build's closing summary prints for `table` (e.g. `predictions (hybrid-top3)`)."""
    [count] = [line.split()[-1] for line in stdout.splitlines() if line.split()[:-1] == table.split()]
    return count


def killed_run(scenario: Scenario) -> dg.DagsterRun:
    """The run the kill interrupted (the killed build's venue run had finished before it)."""
    [run] = [run for run in scenario.runs if run.tags.get(PID_TAG) == str(scenario.killed.pid)
             and run.status != dg.DagsterRunStatus.SUCCESS]
    return run


def successes(scenario: Scenario) -> list[dict]:
    return [row for row in scenario.ledger if row["error"] is None]


def test_the_kill_landed_in_the_middle_of_the_llm_calls(scenario):
    made = {row["call_id"] for row in successes(scenario)}
    assert len(scenario.made_before_kill()) >= 5
    assert scenario.made_before_kill() < made  # some calls were still to be made
    assert killed_run(scenario).job_name == "venue_predictions"


def test_nothing_of_the_killed_build_keeps_running(scenario):
    killed = scenario.killed
    assert killed.listening_ports  # the local model server was serving when the build was killed ...
    assert killed.open_ports() == []  # ... and died with it
    assert killed.surviving_children() == []
    # No child process at all while it ran: one would inherit the build's environment, API keys included
    # (Dagster's compute-log `tail -F` mirrors did, until `peerify build` stopped capturing step output).
    assert killed.children == {}


def test_two_rebuilds_at_once_both_succeed_while_the_catalog_is_held(scenario):
    assert [r.returncode for r in scenario.rebuilds] == [0, 0], [r.stderr[-3000:] for r in scenario.rebuilds]
    # One build of a venue at a time: one rebuild waited for the other's build lock (either may first have waited
    # for a step process of the killed build that had not yet died: it held the lock until it did; and either may
    # have waited for the other to finish setting up the Dagster home, a lock of its own, said in other words).
    other_pids = list(reversed(scenario.rebuild_pids))
    waited = [r for r, other in zip(scenario.rebuilds, other_pids)
              if f"waiting for the build of sample (pid {other}) to finish" in r.stderr.splitlines()]
    assert len(waited) == 1, [r.stderr[-1500:] for r in scenario.rebuilds]
    assert all("catalog not refreshed" in r.stderr for r in scenario.rebuilds)  # said, not failed
    verified = scenario.lake.read_table("predictions", PREDICTIONS).height
    assert [summary_rows(r.stdout, "predictions (hybrid-top2)") for r in scenario.rebuilds] == [str(verified)] * 2


def test_calls_recorded_before_the_kill_are_not_made_again(scenario):
    rows = successes(scenario)
    repeated = {call_id: n for call_id, n in Counter(row["call_id"] for row in rows).items() if n > 1}
    assert repeated == {}
    run_of = {row["call_id"]: row["run_id"] for row in rows}
    before = scenario.made_before_kill()
    assert {run_of[call_id] for call_id in before} == {killed_run(scenario).run_id}
    # The rest were made by one rebuild (its venue run and its predictions runs, one process); the build that came
    # second found every answer in the ledger.
    process_of = {run.run_id: run.tags.get(PID_TAG) for run in scenario.runs}
    rebuild_processes = {process_of[run_of[call_id]] for call_id in set(run_of) - before}
    assert len(rebuild_processes) == 1 and str(scenario.killed.pid) not in rebuild_processes


def test_the_dead_run_is_failed_and_its_pool_slot_freed(scenario):
    run = killed_run(scenario)
    assert run.status == dg.DagsterRunStatus.FAILURE
    partition = run.tags["dagster/partition"]
    recovered = [r for r in scenario.rebuilds if f"run {run.run_id} ({partition}): pid {scenario.killed.pid} is gone"
                 in r.stderr]
    assert len(recovered) == 1  # the first rebuild to open the home recovered it
    others = [r for r in scenario.runs if r.run_id != run.run_id]  # the killed build's venue run, then each
    assert {r.status for r in others} == {dg.DagsterRunStatus.SUCCESS}  # rebuild's venue, predictions, results runs
    rebuilt = [r for r in others if r.tags.get(PID_TAG) != str(scenario.killed.pid)]
    assert len({r.tags.get(PID_TAG) for r in rebuilt}) == 2 and len(rebuilt) % 2 == 0
    assert scenario.claimed_llm_slots == []


def test_every_claim_is_verified_once_and_the_catalog_reads_again(scenario):
    claims = scenario.lake.read_table("retrieval_queries", "sample")
    rows = scenario.lake.read_table("predictions", PREDICTIONS)
    assert sorted(rows["claim_id"]) == sorted(claims["claim_id"])  # one verifier: one row per claim
    verified = rows.filter(pl.col("status") == "ok")
    made = {row["call_id"] for row in successes(scenario)}
    assert verified.height > 0 and set(verified["call_id"]) <= made
    counts = peerify("sql", "select count(*) as n, count(distinct call_id) as ids from llm_calls where error is null",
                     env=scenario.env)
    assert counts.returncode == 0, counts.stderr
    assert counts.stdout.split()[-2:] == [str(len(made | scenario.recorded))] * 2  # no call twice

"""The cluster profile on real servers (tests/conftest.py: Redis, Postgres, SeaweedFS's S3 on loopback): a Dagster
home on Postgres storage (`peerify cluster init`), two Celery workers (`peerify worker`, each with a cache folder of
its own, as on two machines) and the lake in an S3 bucket. The sample venue is built on them once, answered by its LLM
recording: its graph through `peerify build`'s own `run_job`, one LLM step's process SIGKILLed (its run fails, and
`run_job` re-executes it from the failure, which completes; a real step error is never re-executed), then its
predictions and results by `peerify build sample --configuration ...`. Every partition object in the bucket equals
the default single-machine build's (the session's `sample_lake`; the predictions' shard reports, which hold seconds,
apart), no LLM call was made twice or live, the `llm` pool held, and `peerify recover` left the live runs alone.
The k8s run config validates against the code location's job."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from dagster._core.instance.ref import InstanceRef

from peerify_dagster.annotation.decisions import decisions_dir
from peerify_dagster.annotation.sessions import SECRET_FILE
from peerify_dagster.cluster import CLUSTER_INSTANCE, K8S_RUN_CONFIG, QUEUE_TAG, QUEUES, queue_tags
from peerify_dagster.domain.cpu_shares import worker_share
from peerify_dagster.paths import REPO_ROOT
from peerify_dagster.resources.lake import CATALOG_FILE, LEDGER_DIR, partition_slug
from peerify_dagster.resources.local_services import SeaweedS3Service
from peerify_dagster.resources.runs import lost_worker_failures, recover_dead_runs
from peerify_dagster.resources.shard_io import SHARDS_DIR
from tests.fakes.cli import (
    LEDGER_COLUMNS,
    SAMPLE_RECORDING,
    cli_env,
    descendants,
    peerify,
    sample_registry,
    start_peerify,
    stop_process,
    wait_for,
)

VENUE = "sample"
BUCKET, PREFIX = "cluster-lake", "sample-lake"
# Two LLM steps of one pool (the graph's PDF steps are manuscript_pdfs and parse_shard, its embedding step embed_shard).
KILLED_ASSET = "paper_claims"  # its LLM step is ready while review_claims's runs: only the pool keeps them apart
WORKERS = ("cluster-w1", "cluster-w2")
RUN_TIMEOUT_S = 600

# The orchestrating process of a run, as `peerify build` is: a run of the venue graph of the partition argv[1] through
# cli/home.py's run_job, with its re-executions after lost workers. Prints its runs' ids and its success.
ORCHESTRATOR = """
import json, sys
from peerify_dagster.cli.home import open_home, run_job
from peerify_dagster.partitions import add_venue_partitions

instance = open_home("the cluster test's orchestrator", capture_step_output=False)
add_venue_partitions(instance, sys.argv[1], [])
result = run_job(instance, "build_venue", sys.argv[1])
print(json.dumps({"run_ids": result.run_ids, "success": result.success}))
"""


def llm_pool_ops() -> set[str]:
    """The ops of the venue's graph that take a slot of the `llm` pool (an asset's own op, or an op of a
    graph-backed asset's)."""
    from peerify_dagster.definitions import defs

    return {op.name for op in defs.resolve_job_def("build_venue").graph.iterate_op_defs() if op.pool == "llm"}


def op_queues() -> dict[str, str]:
    """Each op of the venue's graph and the Celery queue its tag names."""
    from peerify_dagster.cluster import DEFAULT_QUEUE
    from peerify_dagster.definitions import defs

    return {op.name: op.tags.get(QUEUE_TAG, DEFAULT_QUEUE)
            for op in defs.resolve_job_def("build_venue").graph.iterate_op_defs()}


def op_of(step_key: str) -> str:
    """The op a step runs: `paper_claims` -> paper_claims, `claim_labels.label_shard[shard_0000]` -> label_shard."""
    return step_key.split("[")[0].rsplit(".", 1)[-1]


def asset_of(step_key: str) -> str:
    return step_key.split("[")[0].split(".")[0]


@dataclass
class Cluster:
    root: Path
    env: dict[str, str]
    postgres_url: str
    workers: dict[str, subprocess.Popen]
    s3: SeaweedS3Service

    @property
    def home(self) -> Path:
        return Path(self.env["DAGSTER_HOME"])

    @property
    def lake(self) -> str:
        return self.env["PEERIFY_LAKE"]

    def objects(self) -> dict[str, bytes]:
        """Every object under the lake's prefix, by its key below the prefix, read straight from the bucket."""
        fs = self.s3.filesystem()
        return {key[len(f"{BUCKET}/{PREFIX}/"):]: fs.cat_file(key) for key in fs.find(f"{BUCKET}/{PREFIX}")}

    def instance(self) -> dg.DagsterInstance:
        """The cluster's Dagster instance, opened here (the test's environment has no PEERIFY_* variables)."""
        return dg.DagsterInstance.from_ref(InstanceRef.from_dir(
            str(self.home), overrides={"storage": {"postgres": {"postgres_url": self.postgres_url}}}))

    def orchestrate(self, *args: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", ORCHESTRATOR, *args], env=self.env, cwd=REPO_ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def outcome(process: subprocess.Popen) -> tuple[dict, str]:
    """What the orchestrator printed (its runs' ids and success), and what it said on the console."""
    out, err = process.communicate(timeout=2 * RUN_TIMEOUT_S)
    assert process.returncode == 0, err[-4000:]
    return json.loads(out.strip().splitlines()[-1]), err


def failure_text(instance: dg.DagsterInstance, run_id: str) -> str:
    """What the run's failure and error events say, their errors included."""
    texts = []
    for record in instance.all_logs(run_id):
        event = record.dagster_event
        if event is None or event.event_type not in (dg.DagsterEventType.RUN_FAILURE, dg.DagsterEventType.STEP_FAILURE,
                                                     dg.DagsterEventType.ENGINE_EVENT):
            continue
        error = getattr(event.event_specific_data, "error", None)
        texts += [event.message or "", error.to_string() if error else ""]
    return " ".join(texts)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, redis_service, postgres_service, s3_service):
    root = tmp_path_factory.mktemp("cluster")
    postgres_url = postgres_service.create_database("cluster_test")
    registry = sample_registry(root, llm_recording=str(SAMPLE_RECORDING))
    lake = f"{s3_service.make_bucket(BUCKET)}/{PREFIX}"
    env = cli_env(lake, registry, root / "home", PEERIFY_EXECUTOR="celery", PEERIFY_REDIS_URL=redis_service.url_for(1),
                  PEERIFY_POSTGRES_URL=postgres_url, PEERIFY_LAKE_CACHE=str(root / "cache-orchestrator"),
                  PEERIFY_WORKER_REGISTRY=str(root / "workers"), **s3_service.env())
    # The workers need no Dagster home until a step comes: they start while it is made. Each has its own local cache
    # folder (catalog, staged uploads, downloaded PDFs), as on machines of their own: only the bucket is shared.
    workers = {name: start_peerify("worker", "--name", name, logs=root / name,
                                   env={**env, "PEERIFY_LAKE_CACHE": str(root / f"cache-{name}")}) for name in WORKERS}
    try:
        initialised = peerify("cluster", "init", str(root / "home"), env=env, timeout=120)
        assert initialised.returncode == 0, initialised.stderr
        assert "the Postgres storage is ready" in initialised.stderr and "missing" not in initialised.stderr
        for name in WORKERS:
            wait_for(f"worker {name} to be ready", lambda: " ready." in (root / f"{name}.err").read_text()
                     or workers[name].poll() is not None, timeout=180)
            assert workers[name].poll() is None, (root / f"{name}.err").read_text()[-3000:]
        yield Cluster(root, env, postgres_url, workers, s3_service)
    finally:
        for worker in workers.values():
            stop_process(worker)


@dataclass
class KilledAndRetried:
    run_ids: list[str]
    success: bool
    console: str
    killed_step: str
    killed_pid: int
    killed_in_worker: str
    recovered_while_running: list[str]
    seconds: dict[str, float]


@pytest.fixture(scope="module")
def killed_and_retried(cluster, sample_lake) -> KilledAndRetried:
    """The venue's graph run on the workers with the `llm` pool at one slot; the process running KILLED_ASSET's LLM
    step is SIGKILLed as the step starts; run_job then re-executes the failed run from its failure by itself."""
    # The venue's item id secret is drawn at random in each lake: the bucket gets the default build's, so both lakes
    # order the arbitration candidates alike and every object can be compared byte for byte.
    secret = (decisions_dir(sample_lake, VENUE) / SECRET_FILE).relative_to(sample_lake).as_posix()
    cluster.s3.filesystem().pipe_file(f"{BUCKET}/{PREFIX}/{secret}", (sample_lake / secret).read_bytes())
    instance = cluster.instance()
    instance.event_log_storage.set_concurrency_slots("llm", 1)
    llm_ops = llm_pool_ops()
    started = time.monotonic()
    orchestrator = cluster.orchestrate(VENUE)
    run_id = wait_for("the run to be created", lambda: [r.run_id for r in instance.get_runs(limit=1)],
                      RUN_TIMEOUT_S)[0]
    start = wait_for(f"an LLM step of {KILLED_ASSET} to start", lambda: [
        record for record in instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_START)
        if asset_of(record.step_key) == KILLED_ASSET and op_of(record.step_key) in llm_ops], RUN_TIMEOUT_S)[0]
    # `peerify recover` meanwhile: the run's orchestrator is alive, so the run is not its to fail.
    recovered = recover_dead_runs(instance)
    step_pid = start.dagster_event.pid
    worker = next(name for name, process in cluster.workers.items() if step_pid in descendants(process.pid))
    os.kill(step_pid, signal.SIGKILL)
    killed_at, killed_clock = time.monotonic(), time.time()
    done, console = outcome(orchestrator)
    finished = time.monotonic()
    # The step the process ran when it died: KILLED_ASSET's, or, when that ended just before the kill, the next
    # step the same process took up.
    [killed_step] = lost_worker_failures(instance, run_id) or [start.step_key]
    step_failed = [record.timestamp for record in instance.all_logs(
        run_id, of_type=dg.DagsterEventType.STEP_FAILURE) if record.step_key == killed_step]
    return KilledAndRetried(done["run_ids"], done["success"], console, killed_step, step_pid, worker, recovered,
                            {"until kill": killed_at - started,
                             "kill to step failure": step_failed[0] - killed_clock if step_failed else None,
                             "kill to the end of the re-execution": finished - killed_at,
                             "total": finished - started})


# -- the queue registry and the default path --------------------------------------------------------------------
def test_queue_tags_route_to_known_queues_only():
    assert queue_tags("pdf") == {QUEUE_TAG: "pdf"}
    assert set(QUEUES) == {"pdf", "embedding", "llm", "default"}
    with pytest.raises(ValueError, match="unknown Celery queue 'gpu'"):
        queue_tags("gpu")


def test_heavy_steps_carry_their_queue_and_the_default_path_never_loads_celery():
    probe = ("import sys, json\n"
             "from peerify_dagster.definitions import defs\n"
             "job = defs.resolve_job_def('build_venue')\n"
             "ops = {op.name: [op.tags.get('dagster-celery/queue'), op.pool] for op in job.graph.iterate_op_defs()}\n"
             "print(json.dumps({'ops': ops, 'executor': job.executor_def.name,\n"
             "                  'celery': sorted(m for m in ('celery', 'dagster_celery') if m in sys.modules)}))\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PEERIFY_")}
    done = subprocess.run([sys.executable, "-c", probe], env=env, cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["celery"] == [] and seen["executor"] == "multi_or_in_process_executor"
    queues = {name: queue for name, (queue, _) in seen["ops"].items()}
    assert queues["manuscript_pdfs"] == "pdf" and queues["resolve_cited_shard"] == "pdf"
    assert queues["rank_evidence_shard"] == "embedding"
    # Every LLM step (the extractor's, fact tagger's, labellers', citance tagger's, citation verifiers') on `llm`.
    llm_steps = {name for name, (_, pool) in seen["ops"].items() if pool == "llm"}
    assert len(llm_steps) >= 5 and {queues[name] for name in llm_steps} == {"llm"}, seen["ops"]


def test_the_step_task_is_defined_once_per_app():
    """dagster_celery defines its step task anew for every step submitted, and Celery warns from the second
    definition under the same name on (DuplicateTaskNameWarning); the executor's submit defines it once."""
    from celery import Celery

    from peerify_dagster.celery_steps import step_task

    app = Celery("step-task-test", broker="memory://")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        first = step_task(app)
        assert step_task(app) is first and first.name == "execute_plan"


# -- the Kubernetes run config ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def k8s_job():
    from dagster_k8s import k8s_job_executor

    from peerify_dagster.definitions import all_assets, build_resources
    from peerify_dagster.jobs import build_venue_job

    job = dg.define_asset_job(build_venue_job.name, selection=build_venue_job.selection, executor_def=k8s_job_executor)
    return dg.Definitions(assets=all_assets, jobs=[job], resources=build_resources()).resolve_job_def(job.name)


def test_the_k8s_run_config_validates_against_the_code_locations_job(k8s_job):
    config = yaml.safe_load(K8S_RUN_CONFIG.read_text())
    validated = dg.validate_run_config(k8s_job, config)
    executor = validated["execution"]["k8s"]  # resolved to the job's executor by name
    assert executor["job_namespace"] == "peerify" and executor["env_secrets"] == ["peerify-secrets"]
    assert set(executor["per_step_k8s_config"]) == {"parse_shard", "embed_shard", "resolve_cited_shard"}


def test_a_broken_k8s_run_config_fails_validation(k8s_job):
    config = yaml.safe_load(K8S_RUN_CONFIG.read_text())
    config["execution"]["config"]["max_concurrent"] = "sixteen"
    with pytest.raises(dg.DagsterInvalidConfigError, match="max_concurrent"):
        dg.validate_run_config(k8s_job, config)
    config = yaml.safe_load(K8S_RUN_CONFIG.read_text())
    config["execution"]["config"]["job_namesapce"] = "peerify"  # a misspelt key
    with pytest.raises(dg.DagsterInvalidConfigError, match="job_namesapce"):
        dg.validate_run_config(k8s_job, config)


# -- `peerify cluster init` -------------------------------------------------------------------------------------
def test_cluster_init_names_every_missing_variable_and_keeps_an_existing_home(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PEERIFY_", "DAGSTER_"))}
    made = peerify("cluster", "init", str(tmp_path / "home"), env=env)
    assert made.returncode == 2
    assert (tmp_path / "home" / "dagster.yaml").read_text() == CLUSTER_INSTANCE.read_text()
    for name in ("PEERIFY_POSTGRES_URL", "PEERIFY_REDIS_URL", "PEERIFY_EXECUTOR", "PEERIFY_LAKE"):
        assert f"missing: {name}" in made.stderr
    again = peerify("cluster", "init", str(tmp_path / "home"), env=env)
    assert again.returncode == 2 and "pass --force" in again.stderr


# -- a run on the workers -------------------------------------------------------------------------------------------
def test_the_killed_step_fails_its_run_and_the_automatic_re_execution_completes(cluster, killed_and_retried):
    instance = cluster.instance()
    assert len(killed_and_retried.run_ids) == 2  # the run and one re-execution (PEERIFY_LOST_WORKER_RETRIES: 1)
    first, second = (instance.get_run_by_id(run_id) for run_id in killed_and_retried.run_ids)
    assert first.status == dg.DagsterRunStatus.FAILURE
    failure = failure_text(instance, first.run_id)
    killed = killed_and_retried.killed_step
    assert f'running step "{killed}" died' in failure and "WorkerLostError" in failure, failure
    # The rest of the run went on: the assets independent of the killed step were built by the first run.
    succeeded_first = {record.step_key for record in instance.all_logs(
        first.run_id, of_type=dg.DagsterEventType.STEP_SUCCESS)}
    built_first = {record.dagster_event.asset_key.to_user_string() for record in instance.all_logs(
        first.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION)}
    assert {"raw_openreview_notes", "chunks", "review_claims"} <= built_first
    assert asset_of(killed) not in built_first
    assert killed_and_retried.success and second.status == dg.DagsterRunStatus.SUCCESS
    assert second.parent_run_id == first.run_id and second.tags["dagster/partition"] == VENUE
    assert (f'run {first.run_id} (build_venue {VENUE}): The Celery worker process running step "{killed}" died: '
            "the step failed; re-executing the run from its failure (1 of 1, PEERIFY_LOST_WORKER_RETRIES)") \
        in killed_and_retried.console
    assert "DuplicateTaskNameWarning" not in killed_and_retried.console  # the step task defined once per run
    # The re-execution ran the killed step and what the failure left undone, not what had succeeded.
    ran_second = {record.step_key for record in instance.all_logs(
        second.run_id, of_type=dg.DagsterEventType.STEP_START)}
    assert killed in ran_second and "raw_openreview_notes" in succeeded_first
    assert not succeeded_first & ran_second
    # The worker lived on: Celery replaced the killed process, so both workers still serve.
    assert all(worker.poll() is None for worker in cluster.workers.values())
    print(f"\ncluster run seconds: {killed_and_retried.seconds}")


def test_steps_ran_in_both_workers_and_several_processes(cluster, killed_and_retried):
    instance = cluster.instance()
    run_ids = killed_and_retried.run_ids
    starts = [record for run_id in run_ids
              for record in instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_START)]
    worker_processes = {pid for process in cluster.workers.values() for pid in descendants(process.pid)}
    pids = {record.dagster_event.pid for record in starts}
    assert len(pids) >= 2, pids
    assert killed_and_retried.killed_pid in pids
    assert pids - {killed_and_retried.killed_pid} <= worker_processes  # not the orchestrator
    engine_data = [record.dagster_event.engine_event_data for run_id in run_ids
                   for record in instance.all_logs(run_id, of_type=dg.DagsterEventType.ENGINE_EVENT)]
    hosts = {str(data.metadata["Celery worker"].value).split("@")[0]
             for data in engine_data if data and "Celery worker" in data.metadata}
    assert hosts == set(WORKERS), hosts
    # A step's queue tag decided where it was submitted.
    submitted = " ".join(record.dagster_event.message or "" for record in instance.all_logs(
        run_ids[1], of_type=dg.DagsterEventType.ENGINE_EVENT))
    killed = killed_and_retried.killed_step
    assert f'step "{killed}" to queue "{op_queues()[op_of(killed)]}"' in submitted


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="a split needs two cores")
def test_two_workers_of_one_machine_ran_their_steps_on_their_own_halves_of_its_cores(cluster, killed_and_retried):
    """Left to the default, the two workers of the machine split its cores: each step process of one pinned to
    the cores of its worker's share, the two shares apart."""
    available = sorted(os.sched_getaffinity(0))
    pinned = {name: {tuple(sorted(os.sched_getaffinity(pid))) for pid in descendants(process.pid)} - {tuple(available)}
              for name, process in cluster.workers.items()}
    assert sorted(share for shares in pinned.values() for share in shares) == \
        sorted(worker_share(available, slot, workers=2).cores for slot in range(2)), pinned


def test_the_llm_pool_held_across_workers(cluster, killed_and_retried):
    instance = cluster.instance()
    llm_ops = llm_pool_ops()
    intervals = []
    for run_id in killed_and_retried.run_ids:
        run_end = max(record.timestamp for record in instance.all_logs(run_id))
        llm_steps = {record.step_key for record in instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_START)
                     if op_of(record.step_key) in llm_ops}
        for step in llm_steps:
            begun = [r.timestamp for r in instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_START)
                     if r.step_key == step]
            ended = [r.timestamp for r in instance.all_logs(run_id) if r.step_key == step and r.dagster_event
                     and r.dagster_event.event_type in (dg.DagsterEventType.STEP_SUCCESS,
                                                        dg.DagsterEventType.STEP_FAILURE)]
            if begun:  # a step without an end (none expected: the killed one failed) held its slot to the run's end
                intervals.append((begun[0], ended[0] if ended else run_end, f"{step} of {run_id}"))
    assert len(intervals) >= 5  # every LLM stage of the graph
    intervals.sort()
    for (_, end, one), (start, _, other) in zip(intervals, intervals[1:]):
        assert start >= end, f"{other} started before {one} ended"


def test_recover_leaves_celery_runs_alone(cluster, killed_and_retried):
    assert killed_and_retried.recovered_while_running == []
    instance = cluster.instance()
    recover_dead_runs(instance)  # both runs ended: their statuses stand
    first, second = killed_and_retried.run_ids
    assert instance.get_run_by_id(first).status == dg.DagsterRunStatus.FAILURE
    assert instance.get_run_by_id(second).status == dg.DagsterRunStatus.SUCCESS


def test_a_real_step_error_is_never_re_executed(cluster, killed_and_retried):
    """A venue missing from the registry: its first step fails on a worker with its own error (dg.Failure), the
    worker alive; run_job makes no re-execution of it. After the kill scenario, so as not to be taken for its run."""
    done, console = outcome(cluster.orchestrate("unregistered"))
    assert not done["success"] and len(done["run_ids"]) == 1
    [run_id] = done["run_ids"]
    instance = cluster.instance()
    failure = failure_text(instance, run_id)
    assert "venue 'unregistered' is not in the registry" in failure and "WorkerLostError" not in failure, failure
    assert [run.run_id for run in instance.get_runs() if run.parent_run_id == run_id] == []
    assert "re-executing" not in console and "not re-executed" not in console


@pytest.fixture(scope="module")
def cluster_build(cluster, killed_and_retried, sample_lake):
    """The rest of `peerify build sample` on the workers once its graph is built (`killed_and_retried`): one run per
    configuration the default build ran, then the venue's results, as `peerify build --configuration` runs them."""
    configurations = sorted({path.stem.split("|")[0] for path in (sample_lake / "predictions").glob("*.parquet")})
    assert configurations
    started = time.monotonic()
    built = peerify("build", VENUE, *[f"--configuration={name}" for name in configurations], env=cluster.env,
                    timeout=RUN_TIMEOUT_S)
    assert built.returncode == 0, built.stderr[-4000:]
    killed_and_retried.seconds["predictions and results"] = time.monotonic() - started
    return built


def bucket_ledger_rows(objects: dict[str, bytes]) -> list[dict]:
    """The `llm_calls` rows (call_id, run_id, error, created_at) of the bucket's ledger segments."""
    segments = [data for key, data in sorted(objects.items())
                if key.startswith(f"{LEDGER_DIR}/") and key.endswith(".parquet")]
    return [row for data in segments
            for row in pq.read_table(pa.BufferReader(data), columns=LEDGER_COLUMNS).to_pylist()]


def test_nothing_lost_no_call_made_twice_and_none_made_live(cluster, killed_and_retried, cluster_build):
    recorded = set(pq.read_table(SAMPLE_RECORDING, columns=["call_id"])["call_id"].to_pylist())
    succeeded = [row["call_id"] for row in bucket_ledger_rows(cluster.objects()) if row["error"] is None]
    assert succeeded and len(succeeded) == len(set(succeeded))  # no call answered twice
    assert set(succeeded) <= recorded  # every answer came from the recording: no call was made live
    assert "LLM calls of this build: 0 made live" in cluster_build.stderr, cluster_build.stderr[-2000:]
    print(f"\ncluster build seconds: {killed_and_retried.seconds}")


# What the default build's lake folder holds that is the machine's own, never an object in the bucket: the DuckDB
# catalog (an S3 lake's is in each machine's cache folder, its views reading the bucket) and the lock files.
def local_only(key: str) -> bool:
    return key.rsplit("/", 1)[-1].startswith(".") or key in (CATALOG_FILE, f"{CATALOG_FILE}.wal")


EMBEDDING_CACHE = "embedding_cache/"  # parts named by a random id per write: compared by their rows
FIGURE_PATHS = f"venue_report/{partition_slug(VENUE)}.parquet"  # each figure's absolute location: compared relative


def embedding_rows(objects: dict[str, bytes]) -> list[tuple]:
    """(cache folder, model_id, text_sha256, embedding) of every row of the embedding cache's parts."""
    return sorted((key.rsplit("/", 1)[0], *row.values()) for key, data in objects.items()
                  if key.startswith(EMBEDDING_CACHE)
                  for row in pq.read_table(pa.BufferReader(data)).to_pylist())


def figure_rows(data: bytes, lake: str) -> list[dict]:
    return [{**row, "path": row["path"].removeprefix(f"{lake}/")} for row in pq.read_table(pa.BufferReader(data))
            .to_pylist()]


def test_every_object_of_the_default_build_is_in_the_bucket_with_the_same_bytes(cluster, cluster_build,
                                                                                 sample_lake):
    objects = cluster.objects()
    default = {path.relative_to(sample_lake).as_posix(): path.read_bytes() for path in sample_lake.rglob("*")
               if path.is_file()}
    local = {key for key in default if local_only(key)}
    assert CATALOG_FILE in local and not local & set(objects), sorted(local & set(objects))
    # The predictions' shard reports hold their steps' seconds: present in both, their bytes differ.
    timed = {key for key in set(default) | set(objects)
             if key.startswith(f"{SHARDS_DIR}/predictions.predict_shard.report/")}
    assert timed and {key for key in timed if key in objects} == {key for key in timed if key in default}
    apart = timed | {key for key in set(default) | set(objects)
                     if key.startswith(EMBEDDING_CACHE) or key == FIGURE_PATHS}
    compared = sorted(set(default) - local - apart)
    differing = [key for key in compared if key not in objects
                 or hashlib.sha256(objects[key]).hexdigest() != hashlib.sha256(default[key]).hexdigest()]
    assert differing == [], differing
    assert set(objects) - set(default) - apart == set()  # nothing the default build does not write
    partitions = [key for key in compared if key.endswith(".parquet") and not key.startswith(f"{LEDGER_DIR}/")]
    assert len(partitions) >= 60 and f"review_claims/{partition_slug(VENUE)}.parquet" in partitions
    # Compared on what they mean: the embedding cache's rows, whatever the names of the parts holding them ...
    assert embedding_rows(objects) == embedding_rows(default) != []
    # ... and the figures at the same place in each lake (the table names each by its absolute path or URL).
    figures = figure_rows(objects[FIGURE_PATHS], cluster.lake)
    assert figures == figure_rows(default[FIGURE_PATHS], sample_lake.resolve().as_posix())
    assert figures and all(row["path"].startswith(f"reports/{partition_slug(VENUE)}/") for row in figures)

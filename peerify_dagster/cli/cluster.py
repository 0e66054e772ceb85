"""`peerify cluster init HOME` (a Dagster home for the cluster profile), `peerify worker` (a Celery worker that runs
the code location's steps), and the cluster's preflight before a build or a worker starts (`check_cluster_services`):
README "Running on a cluster"."""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import urllib.parse
import uuid
from pathlib import Path

from peerify_dagster import deployment
from peerify_dagster.cli.common import EXIT_USAGE, ConfigError, one_line, say
from peerify_dagster.cluster import CLUSTER_INSTANCE, QUEUES

# What every machine of the cluster needs in its environment, and why.
CLUSTER_VARIABLES = {
    "PEERIFY_POSTGRES_URL": "the run, event and schedule storage (postgresql+psycopg2://user:password@host/db)",
    "PEERIFY_REDIS_URL": "the Celery broker and result backend (redis://host:6379/0)",
    "PEERIFY_EXECUTOR": "`celery`, so that `peerify build` sends its steps to the workers",
    "PEERIFY_LAKE": "a lake every machine reaches: s3://bucket/prefix (or one shared folder)",
}

CONNECT_TIMEOUT_S = 2  # a server on the cluster's network answers well within it; a closed port at once
WORKER_PING_TIMEOUT_S = 2.0


def missing_variables() -> list[str]:
    """The cluster variables unset (or, for PEERIFY_EXECUTOR, not `celery`) in this environment."""
    missing = [name for name in CLUSTER_VARIABLES if not os.environ.get(name)]
    if "PEERIFY_EXECUTOR" not in missing and deployment.executor() != "celery":
        missing.append("PEERIFY_EXECUTOR")
    return missing


def cmd_cluster_init(args: argparse.Namespace) -> int:
    return init_home(Path(args.home).resolve(), args.force)


def init_home(home: Path, force: bool) -> int:
    """The Dagster home of the cluster profile at `home`, its Postgres storage created; EXIT_USAGE when variables
    are missing."""
    target = home / "dagster.yaml"
    if target.exists() and not force:
        raise ConfigError(f"{target} exists: remove it, or pass --force to replace it with {CLUSTER_INSTANCE.name}")
    home.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(CLUSTER_INSTANCE, target)
    say(f"wrote the cluster profile's Dagster home {home} (storage in Postgres); use it with DAGSTER_HOME={home}")
    missing = missing_variables()
    for name in missing:
        say(f"missing: {name}: {CLUSTER_VARIABLES[name]}")
    if "PEERIFY_POSTGRES_URL" not in missing:
        from dagster import DagsterError
        from sqlalchemy.exc import SQLAlchemyError

        from peerify_dagster.resources import runs

        try:  # creates the storage's tables now, once, rather than in the first build or worker
            instance, _ = runs.open_instance(home, f"`peerify cluster init` (pid {os.getpid()})", on_wait=say)
            instance.dispose()
        except (DagsterError, SQLAlchemyError) as exc:
            raise ConfigError(f"Dagster home {home}: cannot open its Postgres storage (PEERIFY_POSTGRES_URL): "
                              f"{one_line(exc)}") from None
        say("the Postgres storage is ready")
    if missing:
        say(f"set {', '.join(missing)} on every machine of the cluster (README: Running on a cluster)")
        return EXIT_USAGE
    return 0


def cmd_cluster_up(args: argparse.Namespace) -> int:
    from peerify_dagster.resources.local_services import (
        ENV_FILE,
        ServiceFailed,
        loopback_cluster_up,
        recorded_services,
    )

    folder = Path(args.folder).resolve()
    if running := recorded_services(folder):
        raise ConfigError(f"{folder}: its services are up already ({', '.join(r['name'] for r in running)}): use "
                          f"`source {folder / ENV_FILE}`, or stop them with `peerify cluster down {folder}`")
    say(f"starting Redis, Postgres and SeaweedFS's S3 on 127.0.0.1, their data under {folder} ...")
    try:
        env = loopback_cluster_up(folder)
    except ServiceFailed as exc:
        raise ConfigError(f"`peerify cluster up`: {exc}") from None
    say(f"Redis {env['PEERIFY_REDIS_URL']}; Postgres {without_password(env['PEERIFY_POSTGRES_URL'])} (role peerify, "
        f"database dagster); S3 {env['AWS_ENDPOINT_URL']} (lake {env['PEERIFY_LAKE']})")
    os.environ.update(env)
    status = init_home(Path(env["DAGSTER_HOME"]), force=False)
    say(f"the cluster's variables: `source {folder / ENV_FILE}` in each shell (a worker's, the build's); then "
        "`peerify worker` and `peerify build sample`; `peerify cluster down` stops the servers")
    return status


def cmd_cluster_down(args: argparse.Namespace) -> int:
    from peerify_dagster.resources.local_services import loopback_cluster_down

    folder = Path(args.folder).resolve()
    lines = loopback_cluster_down(folder)
    if not lines:
        raise ConfigError(f"{folder}: `peerify cluster up` recorded no services there")
    for line in lines:
        say(line)
    return 0


def without_password(url: str) -> str:
    """`url` with its password (if any) shown as ***, fit to print."""
    parts = urllib.parse.urlsplit(url)
    userinfo, at, host = parts.netloc.rpartition("@")
    if not at or ":" not in userinfo:
        return url
    return parts._replace(netloc=f"{userinfo.split(':', 1)[0]}:***@{host}").geturl()


def check_cluster_services(command: str, *, workers: bool) -> None:
    """Before `command` starts: the cluster variables are valid, Redis (PEERIFY_REDIS_URL) and Postgres
    (PEERIFY_POSTGRES_URL) answer where set, and with PEERIFY_EXECUTOR=celery and `workers`, at least one Celery
    worker answers a ping. ConfigError in one line naming the variable and its URL (password hidden) otherwise: a
    build would otherwise wait on a broker or storage that is not there, or submit steps no worker takes."""
    try:
        executor = deployment.executor()
        deployment.lost_worker_retries()
    except ValueError as exc:
        raise ConfigError(f"{command}: {exc}") from None
    redis_url = deployment.redis_url()
    if executor == "celery" and redis_url is None:
        raise ConfigError(f"{command}: PEERIFY_EXECUTOR=celery needs PEERIFY_REDIS_URL (the Celery broker, e.g. "
                          "redis://host:6379/0)")
    if redis_url is not None:
        import redis

        try:
            redis.Redis.from_url(redis_url, socket_connect_timeout=CONNECT_TIMEOUT_S,
                                 socket_timeout=CONNECT_TIMEOUT_S).ping()
        except (redis.RedisError, ValueError) as exc:
            raise ConfigError(f"{command}: PEERIFY_REDIS_URL={without_password(redis_url)}: Redis does not answer: "
                              f"{one_line(exc)}") from None
    if (postgres_url := deployment.postgres_url()) is not None:
        import psycopg2

        from peerify_dagster.resources.locks import psycopg2_dsn

        try:
            psycopg2.connect(psycopg2_dsn(postgres_url), connect_timeout=CONNECT_TIMEOUT_S).close()
        except psycopg2.Error as exc:
            raise ConfigError(f"{command}: PEERIFY_POSTGRES_URL={without_password(postgres_url)}: Postgres does not "
                              f"answer: {one_line(exc)}") from None
    if workers and executor == "celery":
        from celery import Celery

        app = Celery("peerify-preflight", broker=redis_url)
        try:
            answered = app.control.inspect(timeout=WORKER_PING_TIMEOUT_S, limit=1).ping()
        finally:
            app.close()
        if not answered:
            raise ConfigError(f"{command}: PEERIFY_EXECUTOR=celery, but no Celery worker answered on "
                              f"PEERIFY_REDIS_URL={without_password(redis_url)} within {WORKER_PING_TIMEOUT_S:g} s: "
                              "start one with `peerify worker`")


def parse_queues(text: str) -> list[str]:
    queues = [name.strip() for name in text.split(",") if name.strip()]
    if unknown := [name for name in queues if name not in QUEUES]:
        raise ConfigError(f"--queues {text}: unknown queue(s) {', '.join(unknown)}; the queues are "
                          f"{', '.join(QUEUES)}")
    if not queues:
        raise ConfigError(f"--queues {text!r}: name at least one of {', '.join(QUEUES)}")
    return queues


def share_cores(cpus: int | None, processes: int):  # noqa: ANN201 - a WorkerSeat
    """Register the worker among the machine's workers and, in each step process at each step's start, put its CPU
    share in force (resources/cpu_shares.py); a step process keeps the model servers of its LLM steps between
    steps (one gateway's servers per process, not per step), and ends with the worker's main process (a kill -9 of
    the worker leaves no step running unseen: the build fails its steps as lost and runs them again)."""
    from celery import signals

    from peerify_dagster.resources.cpu_shares import apply_share, end_with_parent, join_machine
    from peerify_dagster.resources.llm_gateway import keep_local_servers

    seat = join_machine(cpus, processes)
    keep_local_servers()
    signals.worker_process_init.connect(lambda **_: end_with_parent(), weak=False)
    signals.task_prerun.connect(lambda **_: apply_share(seat.share()), weak=False)
    return seat


def cmd_worker(args: argparse.Namespace) -> int:
    queues = parse_queues(args.queues)
    if args.concurrency < 1:
        raise ConfigError(f"--concurrency {args.concurrency}: a worker runs at least one step at a time")
    if args.cpus is not None and args.cpus < 1:
        raise ConfigError(f"--cpus {args.cpus}: a worker needs at least one core")
    check_cluster_services("`peerify worker`", workers=False)
    from peerify_dagster import celery_steps
    from peerify_dagster.cluster import CELERY_CONFIG, require_redis_url

    try:
        require_redis_url("a Celery worker")
        app = celery_steps.worker_app(CELERY_CONFIG)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if deployment.postgres_url() is None:
        say("note: PEERIFY_POSTGRES_URL is unset: this worker can only run steps of runs whose Dagster home it "
            "shares on this machine")
    # Loaded once here, before the worker forks its processes: each then runs its first step without loading it,
    # and compares the fingerprint of the code loaded now, not of files changed since, with each build's.
    import peerify_dagster.definitions  # noqa: F401
    from peerify_dagster.step_fingerprint import loaded_code

    loaded_code()

    nodename = f"{args.name or f'peerify-{uuid.uuid4().hex[:6]}'}@{socket.gethostname()}"
    seat = share_cores(args.cpus, args.concurrency)
    celery_steps.start_heartbeat(nodename)
    say(f"worker {nodename}: queues {', '.join(queues)}, {args.concurrency} process(es), "
        f"broker {without_password(deployment.redis_url())}; now {seat.share().describe()}")
    app.worker_main(["worker", "--queues", ",".join(queues), "--concurrency", str(args.concurrency),
                     "--hostname", nodename, "--loglevel", args.loglevel, "--without-gossip", "--without-mingle"])
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    cluster = subparsers.add_parser("cluster", help="the cluster profile: Postgres storage, Celery workers")
    verbs = cluster.add_subparsers(dest="cluster_command", required=True)
    init = verbs.add_parser("init", help="write a Dagster home for the cluster profile (storage in Postgres) and "
                                         "say which of its environment variables are missing")
    init.add_argument("home", help="the folder to make the Dagster home (DAGSTER_HOME)")
    init.add_argument("--force", action="store_true", help="replace the folder's dagster.yaml")
    init.set_defaults(func=cmd_cluster_init)
    up = verbs.add_parser("up", help="try the profile on one machine: start Redis, Postgres (role and database) "
                                     "and an S3 server (bucket) on loopback, make the Dagster home, and write the "
                                     "variables to FOLDER/cluster.env (not for production)")
    up.add_argument("folder", help="where the servers keep their data, logs and records")
    up.set_defaults(func=cmd_cluster_up)
    down = verbs.add_parser("down", help="stop the servers `peerify cluster up` started in FOLDER (their data stays)")
    down.add_argument("folder", help="the folder given to `peerify cluster up`")
    down.set_defaults(func=cmd_cluster_down)

    worker = subparsers.add_parser("worker", help="a Celery worker running the code location's steps "
                                                  "(PEERIFY_REDIS_URL: its broker)")
    worker.add_argument("--queues", default=",".join(QUEUES),
                        help=f"comma-separated queues it serves (default all: {','.join(QUEUES)})")
    worker.add_argument("--concurrency", type=int, default=1, help="steps it runs at once (processes; default 1)")
    worker.add_argument("--cpus", type=int, default=None,
                        help="cores of its own, its steps' threads (torch, BLAS, tokenizers, the parser) limited to "
                             "them and pinned where the platform allows (default: the cores it may use divided "
                             "among the machine's live workers at each step; alone, all of them)")
    worker.add_argument("--name", help="its Celery name (default peerify-<random>)")
    worker.add_argument("--loglevel", default="INFO", help="Celery's log level (default INFO)")
    worker.set_defaults(func=cmd_worker)

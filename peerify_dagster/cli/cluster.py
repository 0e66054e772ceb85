"""`peerify cluster init HOME` (a Dagster home for the cluster profile) and `peerify worker` (a Celery worker that runs
the code location's steps): README "Running on a cluster"."""

from __future__ import annotations

import argparse
import os
import shutil
import socket
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


def missing_variables() -> list[str]:
    """The cluster variables unset (or, for PEERIFY_EXECUTOR, not `celery`) in this environment."""
    missing = [name for name in CLUSTER_VARIABLES if not os.environ.get(name)]
    if "PEERIFY_EXECUTOR" not in missing and deployment.executor() != "celery":
        missing.append("PEERIFY_EXECUTOR")
    return missing


def cmd_cluster_init(args: argparse.Namespace) -> int:
    home = Path(args.home).resolve()
    target = home / "dagster.yaml"
    if target.exists() and not args.force:
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


def parse_queues(text: str) -> list[str]:
    queues = [name.strip() for name in text.split(",") if name.strip()]
    if unknown := [name for name in queues if name not in QUEUES]:
        raise ConfigError(f"--queues {text}: unknown queue(s) {', '.join(unknown)}; the queues are "
                          f"{', '.join(QUEUES)}")
    if not queues:
        raise ConfigError(f"--queues {text!r}: name at least one of {', '.join(QUEUES)}")
    return queues


def cmd_worker(args: argparse.Namespace) -> int:
    queues = parse_queues(args.queues)
    if args.concurrency < 1:
        raise ConfigError(f"--concurrency {args.concurrency}: a worker runs at least one step at a time")
    from peerify_dagster import cluster

    try:
        app = cluster.worker_app()
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if deployment.postgres_url() is None:
        say("note: PEERIFY_POSTGRES_URL is unset: this worker can only run steps of runs whose Dagster home it "
            "shares on this machine")
    # Loaded once here, before the worker forks its processes: each then runs its first step without loading it.
    import peerify_dagster.definitions  # noqa: F401

    name = args.name or f"peerify-{uuid.uuid4().hex[:6]}"
    say(f"worker {name}@{socket.gethostname()}: queues {', '.join(queues)}, {args.concurrency} process(es), "
        f"broker {deployment.redis_url().split('@')[-1]}")
    app.worker_main(["worker", "--queues", ",".join(queues), "--concurrency", str(args.concurrency),
                     "--hostname", f"{name}@%h", "--loglevel", args.loglevel, "--without-gossip", "--without-mingle"])
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    cluster = subparsers.add_parser("cluster", help="the cluster profile: Postgres storage, Celery workers")
    verbs = cluster.add_subparsers(dest="cluster_command", required=True)
    init = verbs.add_parser("init", help="write a Dagster home for the cluster profile (storage in Postgres) and "
                                         "say which of its environment variables are missing")
    init.add_argument("home", help="the folder to make the Dagster home (DAGSTER_HOME)")
    init.add_argument("--force", action="store_true", help="replace the folder's dagster.yaml")
    init.set_defaults(func=cmd_cluster_init)

    worker = subparsers.add_parser("worker", help="a Celery worker running the code location's steps "
                                                  "(PEERIFY_REDIS_URL: its broker)")
    worker.add_argument("--queues", default=",".join(QUEUES),
                        help=f"comma-separated queues it serves (default all: {','.join(QUEUES)})")
    worker.add_argument("--concurrency", type=int, default=1, help="steps it runs at once (processes; default 1)")
    worker.add_argument("--name", help="its Celery name (default peerify-<random>)")
    worker.add_argument("--loglevel", default="INFO", help="Celery's log level (default INFO)")
    worker.set_defaults(func=cmd_worker)

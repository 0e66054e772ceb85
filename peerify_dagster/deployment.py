"""Where the single-machine default and the cluster profile differ, read from the environment when asked (never at
import time), so one `peerify build` works on either. Unset, every one of them means the single-machine default.

- `PEERIFY_LAKE`: a folder (default `data_lake/`) or `s3://bucket/prefix`; an S3 lake's endpoint and keys come from
  the standard `AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` (and `AWS_REGION`).
- `PEERIFY_LAKE_CACHE`: for an S3 lake, the local folder of this machine's DuckDB catalog (views reading the
  bucket), of tables staged before their one upload, and of PDFs copied down for the parser (default: a folder per
  lake under `~/.cache/peerify/lakes/`). A folder lake keeps all of that in the lake itself.
- `PEERIFY_EXECUTOR`: `in_process` (default: one process per run) or `celery` (steps on Celery workers).
- `PEERIFY_REDIS_URL`: the Celery broker and result backend, and the model limits shared by every worker.
- `PEERIFY_POSTGRES_URL`: Dagster's run, event and schedule storage (the cluster profile's dagster.yaml reads it),
  and the locks that must hold across machines (the ledger's per-call claims, the decisions ledger's appends).
- `PEERIFY_LOST_WORKER_RETRIES`: how many times `peerify build` re-executes a Celery run from its failure when every
  step that failed lost its worker process (killed, out of memory): default 1, 0 never. A step's own error is never
  retried.
"""

from __future__ import annotations

import os

EXECUTORS = ("in_process", "celery")
OBJECT_STORE_SCHEMES = ("s3://",)
LOST_WORKER_RETRIES = "PEERIFY_LOST_WORKER_RETRIES"
LOST_WORKER_ERROR = "WorkerLostError"  # the error class a step failure records when its worker (process) was lost
DEFAULT_LOST_WORKER_RETRIES = 1


def executor() -> str:
    """The executor runs use: PEERIFY_EXECUTOR, else `in_process`."""
    name = os.environ.get("PEERIFY_EXECUTOR") or "in_process"
    if name not in EXECUTORS:
        raise ValueError(f"PEERIFY_EXECUTOR={name!r}: must be one of {', '.join(EXECUTORS)}")
    return name


def redis_url() -> str | None:
    return os.environ.get("PEERIFY_REDIS_URL") or None


def postgres_url() -> str | None:
    return os.environ.get("PEERIFY_POSTGRES_URL") or None


def lost_worker_retries() -> int:
    """PEERIFY_LOST_WORKER_RETRIES (a whole number, 0 or more), else DEFAULT_LOST_WORKER_RETRIES."""
    text = os.environ.get(LOST_WORKER_RETRIES) or str(DEFAULT_LOST_WORKER_RETRIES)
    if not text.isdigit():
        raise ValueError(f"{LOST_WORKER_RETRIES}={text!r}: must be a whole number of re-executions, 0 or more")
    return int(text)


def is_object_store(root: str) -> bool:
    """Whether a lake root names an object store rather than a folder."""
    return root.startswith(OBJECT_STORE_SCHEMES)


def lake_cache_dir(lake_url: str) -> str:
    """This machine's local folder for an object-store lake (PEERIFY_LAKE_CACHE, else one per lake under the user's
    cache folder): what must be a local file (the catalog, staged uploads, the parser's input)."""
    if folder := os.environ.get("PEERIFY_LAKE_CACHE"):
        return folder
    cache_home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    slug = lake_url.split("://", 1)[-1].strip("/").replace("/", "__")
    return os.path.join(cache_home, "peerify", "lakes", slug)

"""The cluster profile in code: the Celery queues steps are routed to, the executor the code location's jobs use
(`deployment.executor()`), and the Celery app a worker (`peerify worker`) serves (the jobs a Celery run ships to
its workers: reconstruct.py).

The single-machine default never imports dagster_celery or celery: everything Celery is imported when asked.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from peerify_dagster import deployment
from peerify_dagster.paths import REPO_ROOT

if TYPE_CHECKING:
    import dagster as dg

# The Celery queues of the code location's steps: a worker serves the queues it is started with
# (`peerify worker --queues pdf,embedding`), so a machine takes only the work it is equipped for.
QUEUES = {
    "pdf": "PDF work: downloading manuscripts and cited papers, parsing them (memory and CPU)",
    "embedding": "embedding passages (CPU, or a GPU where the worker has one)",
    "llm": "LLM stages: waiting on model servers and APIs (little CPU; many may run at once)",
    "default": "everything else: forum tables, claims bookkeeping, retrieval, metrics, reports",
}
DEFAULT_QUEUE = "default"
QUEUE_TAG = "dagster-celery/queue"  # dagster_celery.tags.DAGSTER_CELERY_QUEUE_TAG, without importing it
CELERY_CONFIG = REPO_ROOT / "cluster" / "celery.yaml"
CLUSTER_INSTANCE = REPO_ROOT / "cluster" / "dagster.yaml"
K8S_RUN_CONFIG = REPO_ROOT / "cluster" / "k8s_job_executor.yaml"


def queue_tags(kind: str) -> dict[str, str]:
    """The op tags that route a step to the Celery queue `kind` (one of QUEUES); ignored by the default executor."""
    if kind not in QUEUES:
        raise ValueError(f"unknown Celery queue {kind!r}: must be one of {', '.join(QUEUES)}")
    return {QUEUE_TAG: kind}


def require_redis_url(what: str) -> str:
    """PEERIFY_REDIS_URL, which `what` cannot do without."""
    url = deployment.redis_url()
    if url is None:
        raise ValueError(f"{what} needs PEERIFY_REDIS_URL (the Celery broker and result backend, "
                         "e.g. redis://host:6379/0)")
    return url


def celery_config() -> dict:
    """The Celery executor's config (cluster/celery.yaml), broker and backend still naming PEERIFY_REDIS_URL: the
    executor and the workers read the same file, so they agree on the broker and the queues."""
    import yaml

    return yaml.safe_load(CELERY_CONFIG.read_text())["execution"]["config"]


def executor_def() -> dg.ExecutorDefinition | None:
    """The executor of the code location's jobs: None (Dagster's default, one process per run) unless
    PEERIFY_EXECUTOR=celery, then dagster_celery's (a lost worker failing its step: celery_steps.py), configured
    by cluster/celery.yaml."""
    if deployment.executor() != "celery":
        return None
    from peerify_dagster.celery_steps import celery_executor

    require_redis_url("PEERIFY_EXECUTOR=celery")
    return celery_executor.configured(celery_config(), name="celery")

"""The code location's jobs as a process other than the one that launched the run rebuilds them: a Celery run
ships each step to a worker with a pointer to `job_named` and the job's name (Dagster's public
`build_reconstructable_job`), and the worker imports this module and calls it. Above the code location in the house
(it imports the definitions; nothing the definitions import imports it)."""

import dagster as dg

from peerify_dagster.definitions import defs
from peerify_dagster.paths import REPO_ROOT


def reconstructable_job(job_name: str):  # noqa: ANN201 - Dagster's ReconstructableJob
    """A pointer to one job of the code location that a worker process can load by itself, as `dg.execute_job` needs
    to ship its steps to Celery workers."""
    return dg.build_reconstructable_job(__name__, job_named.__name__, reconstructable_args=(job_name,),
                                        reconstructor_working_directory=str(REPO_ROOT))


def job_named(job_name: str) -> dg.JobDefinition:
    """The code location's job of that name, resolved (what a worker rebuilds from `reconstructable_job`)."""
    return defs.resolve_job_def(job_name)

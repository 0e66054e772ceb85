"""Every use of Dagster's private modules (`dagster._...`), in one place: what the project needs and Dagster's
public API does not offer. tests/test_dagster_private.py pins the behaviour relied on, so an upgrade of dagster
that changes any of it fails there, by name, rather than somewhere in a build.

- the Celery executor's step submission and lost-worker failure (celery_steps.py): the step arguments, their
  packing and unpacking (a worker reads a step's run before it runs it), a step failure event built from an
  exception, the retry mode of the executor's config;
- opening a Dagster home with instance overrides (resources/runs.py: no step-output capture), and telling a
  single-machine run storage from a shared one;
- an op's compute function (lineage.py derives code versions from it);
- staleness as the UI computes it (lineage.py: `peerify stale`).
"""

from collections.abc import Callable, Iterator

import dagster as dg
from dagster._core.asset_graph_view.asset_graph_view import AssetGraphView, TemporalContext
from dagster._core.definitions.data_version import CachingStaleStatusResolver, StaleCauseCategory, StaleStatus
from dagster._core.execution.plan.objects import StepFailureData
from dagster._core.execution.retries import RetryMode
from dagster._core.instance.ref import InstanceRef
from dagster._core.storage.runs import SqliteRunStorage
from dagster._grpc.types import ExecuteStepArgs
from dagster._serdes import pack_value, unpack_value
from dagster._time import get_current_datetime
from dagster._utils.error import serializable_error_info_from_exc_info

__all__ = ["ExecuteStepArgs", "RetryMode", "StaleCauseCategory", "StaleStatus", "StepFailureData", "pack_value",
           "serializable_error_info_from_exc_info", "unpack_value"]

# The compute-log manager that captures nothing (resources/runs.py: a terminal build starts no capture process).
NO_STEP_OUTPUT_CAPTURE = {"compute_logs": {"module": "dagster._core.storage.noop_compute_log_manager",
                                           "class": "NoOpComputeLogManager"}}


def instance_with_overrides(home: str, overrides: dict) -> dg.DagsterInstance:
    """The instance of a Dagster home (its dagster.yaml) with some settings replaced."""
    return dg.DagsterInstance.from_ref(InstanceRef.from_dir(home, overrides=overrides))


def runs_stored_locally(instance: dg.DagsterInstance) -> bool:
    """Whether the instance keeps its runs in this machine's SQLite files (so a run's process is on this host)."""
    return isinstance(instance.run_storage, SqliteRunStorage)


def compute_functions(assets_def: dg.AssetsDefinition) -> Iterator[Callable]:
    """The Python functions an asset's op runs, each op's of a graph-backed asset."""
    node = assets_def.node_def
    ops = node.iterate_op_defs() if isinstance(node, dg.GraphDefinition) else [node]
    for op in ops:
        function = op.compute_fn
        yield getattr(function, "decorated_fn", function)  # a DecoratedOpFunction wraps the user's function


def stale_status_resolver(instance: dg.DagsterInstance, graph) -> CachingStaleStatusResolver:  # noqa: ANN001
    """Dagster's own staleness (the UI's "stale" and its causes) over `graph` (Definitions.resolve_asset_graph)."""
    view = AssetGraphView(temporal_context=TemporalContext(effective_dt=get_current_datetime(), last_event_id=None),
                          instance=instance, asset_graph=graph)
    return CachingStaleStatusResolver(instance, graph, view)

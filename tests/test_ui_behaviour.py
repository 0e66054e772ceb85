"""What a new user meets in the UI: an offline crawl fails at once in one sentence and writes nothing downstream,
the collapsed lineage view reads top to bottom (no loop between groups), every column is described, a venue's
predictions partitions are only the configurations it uses, a registered live venue is no partition (so no missing
work) until it is built, and the commands print no warnings."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
from graphlib import CycleError, TopologicalSorter

import dagster as dg

from peerify_dagster.definitions import defs
from peerify_dagster.domain.columns import column_description
from peerify_dagster.partitions import add_venue_partitions, prediction_partitions, venue_partitions
from peerify_dagster.resources.dagster_resources import (
    LakeResource,
    OpenReviewResource,
    PredictionConfigurationsResource,
    VenueRegistryResource,
)
from peerify_dagster.sensors import configurations_sensor, venue_registry_sensor
from tests.cli_support import cli_env, fresh_home, peerify
from tests.fakes.cli import REPO_ROOT
from tests.support import materialise, sample_registry, write_registry

INGESTION = dg.AssetSelection.groups("ingestion", "forum_tables")


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_unreachable_openreview_fails_at_once_in_one_sentence_and_nothing_downstream_is_written(tmp_path):
    url = f"http://127.0.0.1:{closed_port()}"
    registry = write_registry(tmp_path, "Offline.cc/2026/Conference", source="api", seed=1, api_url=url)
    started = time.monotonic()
    # The whole graph, with the production retry policy: without the up-front check this takes a minute of backoff.
    result = materialise("Offline.cc/2026/Conference", registry, tmp_path / "lake", dg.DagsterInstance.ephemeral(),
                         openreview=OpenReviewResource())
    assert time.monotonic() - started < 15
    assert not result.success
    [failure] = [e for e in result.all_events if e.is_step_failure]
    assert failure.step_key == "paper_sample"
    assert failure.step_failure_data.user_failure_data.description == (
        f"cannot reach OpenReview at {url}: the connection was refused")
    assert {e.step_key for e in result.all_events if e.is_step_start} == {"paper_sample"}
    assert not any(e.is_step_materialization for e in result.all_events)
    assert list((tmp_path / "lake").rglob("*.parquet")) == []  # no empty retrieval_queries or any other partition


def test_groups_read_top_to_bottom_in_the_collapsed_lineage_view():
    graph = defs.resolve_asset_graph()
    upstream_groups: dict[str, set[str]] = {}
    for key in graph.get_all_asset_keys():
        group = graph.get(key).group_name
        upstream_groups.setdefault(group, set()).update(
            graph.get(parent).group_name for parent in graph.get(key).parent_keys
            if graph.get(parent).group_name != group)
    try:
        order = list(TopologicalSorter(upstream_groups).static_order())
    except CycleError as loop:
        raise AssertionError(f"asset groups form a loop: {loop.args[1]}") from None
    assert order.index("ingestion") < order.index("forum_tables") < order.index("reports")


def test_ingestion_tables_describe_every_column(tmp_path):
    result = materialise("sample", sample_registry(tmp_path), tmp_path / "lake", dg.DagsterInstance.ephemeral(),
                         INGESTION)
    assert result.success
    columns = [(e.asset_key.to_user_string(), column)
               for e in result.all_events if e.is_step_materialization
               for column in e.event_specific_data.materialization.metadata["dagster/column_schema"].value.columns]
    assert len({table for table, _ in columns}) >= 15
    assert [f"{table}.{c.name}" for table, c in columns if not c.description] == []
    assert all(c.description == column_description(table, c.name) for table, c in columns)
    assert column_description("no_such_table", "no_such_column") is None


# A Python warning as printed on stderr (`path:line: BetaWarning: ...`), whatever its category.
PRINTED_WARNING = re.compile(r"\w*Warning: ")


def test_commands_that_load_dagster_print_no_warning(tmp_path):
    """With every warning shown (PYTHONWARNINGS=default, DeprecationWarnings too): the help, a catalog query and
    `peerify recover`, which opens the Dagster home and loads the code location."""
    env = cli_env(tmp_path / "lake", sample_registry(tmp_path), fresh_home(tmp_path / "home"),
                  PYTHONWARNINGS="default")
    for command in (["--help"], ["sql", "select 1"], ["recover"]):
        done = peerify(*command, env=env)
        assert done.returncode == 0, done.stderr[-2000:]
        assert not PRINTED_WARNING.search(done.stderr), f"peerify {' '.join(command)}: {done.stderr[-2000:]}"
    # The code location that `peerify build`, the UI and the daemon load.
    loaded = subprocess.run([sys.executable, "-c", "import peerify_dagster.definitions"], env=env, cwd=REPO_ROOT,
                            capture_output=True, text=True, timeout=300)
    assert loaded.returncode == 0 and not PRINTED_WARNING.search(loaded.stderr), loaded.stderr[-2000:]


def registry_tick(tmp_path, instance: dg.DagsterInstance):
    """One tick of the venue registry sensor over the sample (snapshot) and a live venue; the partitions it asks
    for are added, as the daemon does."""
    registry = sample_registry(tmp_path)
    with registry.open("a") as entries:
        entries.write('  Live.cc/2026/Conference:\n    source: "api"\n    seed: 1\n')
    context = dg.build_sensor_context(instance=instance,
                                      resources={"venue_registry": VenueRegistryResource(path=str(registry))})
    result = venue_registry_sensor(context)
    for request in getattr(result, "dynamic_partitions_requests", None) or []:
        instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
    return result


def test_a_registered_live_venue_is_shown_as_registered_not_as_missing_work(tmp_path):
    instance = dg.DagsterInstance.ephemeral()
    registry_tick(tmp_path, instance)  # the snapshot venue is added
    assert instance.get_dynamic_partitions(venue_partitions.name) == ["sample"]
    second = registry_tick(tmp_path, instance)  # the live venue is named by the tick, never added
    assert second.skip_message == ("registered, not built (`peerify build <venue>` builds one): "
                                   "Live.cc/2026/Conference")
    assert instance.get_dynamic_partitions(venue_partitions.name) == ["sample"]
    add_venue_partitions(instance, "Live.cc/2026/Conference", [])  # what its build does first
    assert registry_tick(tmp_path, instance).skip_message == "no new venues in the registry"


def test_a_venue_has_a_predictions_partition_for_each_configuration_it_uses_and_no_other():
    instance = dg.DagsterInstance.ephemeral()
    add_venue_partitions(instance, "sample", ["hybrid-top3", "oracle"])
    add_venue_partitions(instance, "other", ["nli-top3"])
    add_venue_partitions(instance, "sample", ["oracle"])  # a rebuild adds nothing twice
    assert sorted(instance.get_dynamic_partitions(prediction_partitions.name)) == [  # not 2 venues x 3 configurations
        "hybrid-top3|sample", "nli-top3|other", "oracle|sample"]


def test_the_sensor_gives_a_built_venue_a_partition_for_each_configuration_it_uses(tmp_path):
    """configurations.yaml lists the sample's configurations (`venues:`): the others are not its partitions. An upload
    venue of `peerify verify` (a partition its build added) gets none and no run: no slices for its results, and its
    verifiers run when a person asks."""
    instance = dg.DagsterInstance.ephemeral()
    upload = "upload-0123456789ab"
    instance.add_dynamic_partitions(venue_partitions.name, ["sample", "unbuilt", upload])
    for venue in ("sample", upload):
        instance.report_runless_asset_event(dg.AssetMaterialization("retrieval_runs", partition=venue))
    configurations = PredictionConfigurationsResource()
    context = dg.build_sensor_context(instance=instance, resources={
        "prediction_configurations": configurations, "lake": LakeResource(root=str(tmp_path / "lake")),
        "venue_registry": VenueRegistryResource(path=str(sample_registry(tmp_path)))})
    [request] = configurations_sensor(context).dynamic_partitions_requests
    uses = [c.name for c in configurations.load().for_venue("sample")]
    assert len(uses) < len(configurations.load().configurations)  # the file's grid is meant for other venues
    assert (request.partitions_def_name, sorted(request.partition_keys)) == (
        prediction_partitions.name, sorted(f"{name}|sample" for name in uses))
    instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))  # as the daemon does
    instance.add_dynamic_partitions(prediction_partitions.name, [f"hybrid-top3|{upload}"])  # as verify does
    requests = configurations_sensor(context)
    assert sorted(r.partition_key for r in requests) == sorted(f"{name}|sample" for name in uses)

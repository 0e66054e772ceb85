"""What a new user meets in the UI: an offline crawl fails at once in one sentence and writes nothing downstream,
the collapsed lineage view reads top to bottom (no loop between groups), and every column is described."""

from __future__ import annotations

import socket
import time
from graphlib import CycleError, TopologicalSorter

import dagster as dg

from peerify_dagster.definitions import defs
from peerify_dagster.domain.columns import column_description
from peerify_dagster.resources.dagster_resources import OpenReviewResource
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
            graph.get(parent).group_name for parent in graph.get(key).parent_keys if graph.get(parent).group_name != group)
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

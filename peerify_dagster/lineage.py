"""Code versions on the asset graph, derived from the code (domain/code_versions.py); the graph's committed
snapshot (asset_graph.json: `peerify graph snapshot`, compared by `peerify graph check` and the tests); and what
Dagster makes of the versions: which materialisations were computed by code that has changed since (`peerify
stale`)."""

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import dagster as dg

from peerify_dagster.dagster_private import StaleCauseCategory, compute_functions, stale_status_resolver
from peerify_dagster.domain.code_versions import VersionCache


def with_derived_code_versions(assets: Iterable) -> list:
    """The assets, each executable one with the code version of the functions its op(s) run (every asset of a
    multi-asset shares its function's), read from this machine's cache when these sources were analysed before."""
    versioned, cache = [], VersionCache()
    for assets_def in assets:
        if isinstance(assets_def, dg.AssetsDefinition) and assets_def.is_executable:
            version = cache.version(compute_functions(assets_def))
            [assets_def] = dg.map_asset_specs(lambda spec, v=version: spec.replace_attributes(code_version=v),
                                              [assets_def])
        versioned.append(assets_def)
    cache.save()
    return versioned


def _partitions(partitions_def: dg.PartitionsDefinition | None) -> str | None:
    if partitions_def is None:
        return None
    if isinstance(partitions_def, dg.MultiPartitionsDefinition):
        return " x ".join(_partitions(dimension.partitions_def) for dimension in partitions_def.partitions_defs)
    if isinstance(partitions_def, dg.DynamicPartitionsDefinition):
        return f"dynamic:{partitions_def.name}"
    return type(partitions_def).__name__


def _module(assets_def: dg.AssetsDefinition) -> str | None:
    """The module whose function computes the asset (None for an asset without a step of its own)."""
    if not assets_def.is_executable:
        return None
    return next((function.__module__ for function in compute_functions(assets_def)), None)


def graph_snapshot(defs: dg.Definitions) -> dict:
    """The asset graph as reviewers read it: per asset its group, the module defining it, upstream assets,
    partitioning, code version and checks (a blocking check marked), and the jobs."""
    graph = defs.resolve_asset_graph()
    assets = {}
    for key in sorted(graph.get_all_asset_keys(), key=lambda k: k.to_user_string()):
        node = graph.get(key)
        checks = sorted((graph.get_check_spec(check) for check in node.check_keys), key=lambda spec: spec.name)
        assets[key.to_user_string()] = {
            "group": node.group_name,
            "module": _module(node.assets_def),
            "deps": sorted(parent.to_user_string() for parent in node.parent_keys),
            "partitions": _partitions(node.partitions_def),
            "materializable": node.is_materializable,
            "code_version": node.code_version,
            "checks": {spec.name: "blocking" if spec.blocking else "warn" for spec in checks},
        }
    jobs = sorted(job.name for job in defs.jobs or [])
    return {"assets": assets, "jobs": jobs}


def snapshot_text(defs: dg.Definitions) -> str:
    return json.dumps(graph_snapshot(defs), indent=1, sort_keys=True) + "\n"


def snapshot_differences(committed: dict, current: dict) -> list[str]:
    """What changed from the committed snapshot to the current graph, a line per asset field or job."""
    lines = []
    before, after = committed.get("assets", {}), current["assets"]
    for name in sorted(set(before) | set(after)):
        if name not in after:
            lines.append(f"{name}: removed")
        elif name not in before:
            lines.append(f"{name}: added")
        else:
            lines += [f"{name}: {field} {json.dumps(before[name].get(field))} -> {json.dumps(value)}"
                      for field, value in after[name].items() if before[name].get(field) != value]
    for job in sorted(set(committed.get("jobs", [])) ^ set(current["jobs"])):
        lines.append(f"job {job}: {'added' if job in current['jobs'] else 'removed'}")
    return lines


def read_snapshot(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


@dataclass(frozen=True)
class StaleAsset:
    asset: str
    partition: str | None
    category: str  # CODE: its own code changed; DATA / DEPENDENCIES: something upstream did
    reason: str


def stale_assets(instance: dg.DagsterInstance, defs: dg.Definitions, partition: str | None) -> list[StaleAsset]:
    """Every materialised asset (of `partition`, for partitioned ones) that Dagster calls stale, with each cause."""
    graph = defs.resolve_asset_graph()
    resolver = stale_status_resolver(instance, graph)
    found = []
    for key in sorted(graph.get_all_asset_keys(), key=lambda k: k.to_user_string()):
        node = graph.get(key)
        if not node.is_materializable:
            continue
        key_partition = partition if node.partitions_def is not None else None
        if node.partitions_def is not None and (
                partition is None or not node.partitions_def.has_partition_key(partition,
                                                                              dynamic_partitions_store=instance)):
            continue
        for cause in resolver.get_stale_causes(key, key_partition):
            found.append(StaleAsset(key.to_user_string(), key_partition, cause.category.value,
                                    _reason(cause)))
    return found


def _reason(cause) -> str:  # noqa: ANN001 - a Dagster StaleCause
    if cause.category == StaleCauseCategory.CODE:
        return cause.reason  # "has a new code version"
    dependency = cause.dependency.asset_key.to_user_string() if cause.dependency else "?"
    return f"{cause.reason}: {dependency}"

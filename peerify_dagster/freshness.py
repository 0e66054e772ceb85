"""What is built and what is stale, read from a Dagster instance: shared by the CLI, the sensors and the release."""

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg

from peerify_dagster.annotation.decisions import DecisionLedger
from peerify_dagster.domain.label_release import sha256_hex
from peerify_dagster.domain.predictions import CONFIGURATION_HASH
from peerify_dagster.jobs import build_venue_job
from peerify_dagster.partitions import prediction_key, venue_partitions
from peerify_dagster.quality.slice_gates import GATES, SLICES_SHA256
from peerify_dagster.resources.lake import Lake

PREDICTION_INPUTS = dg.AssetKey("retrieval_runs")  # rebuilt by every venue build: predictions older than it are stale
SLICES_KEY = dg.AssetKey("benchmark_slices")
BLOCKING_GATES = [name for name, blocking, _ in GATES if blocking]
CHECK_HISTORY = 500  # evaluations searched per gate for the one of a venue's latest slices (all venues share them)
# The assets that read a human decisions ledger when they run, by the ledger they read.
LEDGER_READERS = {"arbitration": dg.AssetKey("canonical_labels"), "audit": dg.AssetKey("human_audit")}


def latest_materialisation(instance: dg.DagsterInstance, asset: str | dg.AssetKey, partition: str | None):
    """The latest materialisation record of the asset (of one partition, unless `partition` is None), or None."""
    key = dg.AssetKey(asset) if isinstance(asset, str) else asset
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=key, asset_partitions=[partition] if partition else None), limit=1).records
    return records[0] if records else None


@dataclass(frozen=True)
class LedgerAhead:
    """A decisions ledger with lines its reader's latest materialisation did not read."""

    kind: str  # arbitration | audit
    reader: dg.AssetKey
    path: Path
    lines: int  # in the ledger now
    read: int | None  # when the reader last ran (None: not recorded)


def ledgers_ahead(instance: dg.DagsterInstance, lake_root: str | Path, venue: str) -> list[LedgerAhead]:
    """The venue's decisions ledgers grown since their reader's latest materialisation (metadata `ledger_lines`);
    a reader never built is left to its build."""
    ahead = []
    for kind, reader in LEDGER_READERS.items():
        latest = latest_materialisation(instance, reader, venue)
        if latest is None:
            continue
        built_from = latest.asset_materialization.metadata.get("ledger_lines")
        ledger = DecisionLedger(lake_root, venue, kind)
        lines = ledger.line_count()
        if built_from is None or lines > built_from.value:
            ahead.append(LedgerAhead(kind, reader, ledger.path, lines, built_from.value if built_from else None))
    return ahead


def shipped_slices(lake: Lake, venue: str) -> bytes | None:
    """The bytes of the venue's benchmark_slices file as a release would ship them (None: not in the lake)."""
    path = lake.table_path(SLICES_KEY.path[-1], venue)
    return path.read_bytes() if path.exists() else None


def release_problems(instance: dg.DagsterInstance, lake: Lake, venue: str, shipped: bytes | None) -> list[str]:
    """Why the venue's slices file, `shipped` (its bytes), may not be released, one line each: not in the lake, never
    materialised, a blocking gate failed or was not evaluated on the latest materialisation, the file is not the
    one the gates judged (its sha256), or an input (a decisions ledger, canonical_labels, human_audit) is newer."""
    path = lake.table_path(SLICES_KEY.path[-1], venue)
    if shipped is None:
        return [f"{venue}: no benchmark_slices in the lake ({path})"]
    built = latest_materialisation(instance, SLICES_KEY, venue)
    if built is None:
        return [f"{venue}: benchmark_slices was never materialised in this Dagster instance (build it with "
                f"`peerify build {venue}` under the same DAGSTER_HOME)"]
    rebuild = f"rebuild first: peerify build {venue}"
    problems, judged = [], set()
    for name in BLOCKING_GATES:
        evaluation = _evaluation_of(instance, dg.AssetCheckKey(SLICES_KEY, name), built)
        if evaluation is None:
            problems.append(f"{venue}: blocking gate {name} was not evaluated on the latest benchmark_slices "
                            f"(run {built.run_id})")
        elif not evaluation.passed:
            failing = evaluation.metadata.get("failing_ids")
            problems.append(f"{venue}: blocking gate {name} failed (failing ids: "
                            f"{json.dumps(failing.value[:10]) if failing else 'see its metadata'})")
        else:
            recorded = evaluation.metadata.get(SLICES_SHA256)
            judged.add(recorded.value if recorded else "not recorded")
    shipping = sha256_hex(shipped)
    if judged and judged != {shipping}:
        problems.append(f"{venue}: benchmark_slices file {path} (sha256 {shipping}) is not the file its gates judged "
                        f"(sha256 {', '.join(sorted(judged))}, run {built.run_id}): it changed after they ran; "
                        f"{rebuild}")
    for reader in LEDGER_READERS.values():
        record = latest_materialisation(instance, reader, venue)
        if record is not None and record.storage_id > built.storage_id:
            problems.append(f"{venue}: {reader.to_user_string()} was materialised after the benchmark_slices it would "
                            f"ship (run {record.run_id}, {_when(record)}; slices {_when(built)}); {rebuild}")
    for ahead in ledgers_ahead(instance, lake.root, venue):
        read = f"read {ahead.read} of its {ahead.lines} lines" if ahead.read is not None else "recorded no count"
        problems.append(f"{venue}: the {ahead.kind} decisions ledger {ahead.path} is newer than the benchmark_slices "
                        f"it would ship ({ahead.reader.to_user_string()} {read}); {rebuild}")
    return problems


def _when(record) -> str:  # noqa: ANN001 - a dagster EventLogRecord
    return datetime.fromtimestamp(record.timestamp, UTC).isoformat(timespec="seconds")


def _evaluation_of(instance: dg.DagsterInstance, check: dg.AssetCheckKey, built) -> dg.AssetCheckEvaluation | None:
    """The latest evaluation of `check` on the materialisation `built` (checks of a venue-partitioned asset are
    recorded without a partition: the materialisation they judged tells the venue)."""
    for record in instance.event_log_storage.get_asset_check_execution_history(check, limit=CHECK_HISTORY):
        evaluation = record.evaluation
        target = evaluation.target_materialization_data if evaluation else None
        if evaluation is not None and (target.storage_id == built.storage_id if target
                                       else record.run_id == built.run_id):
            return evaluation
    return None


def stale_predictions(instance: dg.DagsterInstance, venue: str, configurations) -> list[str]:
    """The configurations of a built venue whose predictions partition is missing, was built from another
    definition (configuration hash), or is older than the venue's retrieval runs."""
    inputs = latest_materialisation(instance, PREDICTION_INPUTS, venue)
    if inputs is None:
        return []  # the venue is not built: its build runs its configurations
    stale = []
    for configuration in configurations:
        built = latest_materialisation(instance, "predictions", str(prediction_key(venue, configuration.name)))
        built_from = built and built.asset_materialization.metadata.get(CONFIGURATION_HASH)
        if built is None or built_from is None or built_from.value != configuration.content_hash() \
                or built.storage_id < inputs.storage_id:
            stale.append(configuration.name)
    return stale


def computed_from(defs: dg.Definitions, imported: Iterable[str]) -> list[dg.AssetKey]:
    """The assets of the venue graph that follow from the `imported` tables alone, in dependency order: what a venue
    imported from a release builds (the rest of the graph needs its forums and manuscripts)."""
    graph = defs.resolve_asset_graph()
    venue_graph = defs.resolve_job_def(build_venue_job.name).asset_layer.selected_asset_keys
    available, chosen = {dg.AssetKey(name) for name in imported}, []
    while added := [key for key in sorted(venue_graph - available)
                    if (parents := graph.get(key).parent_keys) and parents <= available]:
        available |= set(added)
        chosen += added
    return chosen


def upstream_of(assets: Iterable, asset: str) -> list[tuple[str, bool]]:
    """The materialisable assets upstream of `asset` that are partitioned by venue or not at all, by name, each with
    whether it is venue-partitioned (venue x configuration assets are left out: their partitions are per run)."""
    specs = {spec.key: spec for assets_def in assets
             if isinstance(assets_def, dg.AssetsDefinition) and assets_def.is_executable for spec in assets_def.specs}
    ancestors, pending = set(), [dg.AssetKey(asset)]
    while pending:
        spec = specs.get(pending.pop())
        for dep in spec.deps if spec else []:
            if dep.asset_key not in ancestors:
                ancestors.add(dep.asset_key)
                pending.append(dep.asset_key)
    return [(key.to_user_string(), specs[key].partitions_def is not None)
            for key in sorted(ancestors, key=lambda k: k.to_user_string())
            if key in specs and specs[key].partitions_def in (None, venue_partitions)]

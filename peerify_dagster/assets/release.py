"""Stage 12, label releases: a versioned, verifiable bundle of the benchmark slices of one or more venues, with the
LLM calls and human decisions behind every label, a manifest (hashes, lineage, models, prompts, seeds) and a
datasheet, written to `<lake>/releases/<version>/`. Not partitioned: one materialisation is one release, and its
lineage shows in the UI through `deps` on the slices (an unpartitioned asset cannot load a dynamic-partitioned one
as an input, so the slices are read through the lake)."""

import dataclasses
import io
from datetime import UTC, datetime

import dagster as dg
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from peerify_dagster.annotation import audit_sample
from peerify_dagster.annotation.decisions import Decision, DecisionLedger
from peerify_dagster.domain import audit
from peerify_dagster.domain import label_release as rel
from peerify_dagster.domain.labelling import SOURCE_THREAD
from peerify_dagster.domain.prompts import available_prompts, template_hash
from peerify_dagster.domain.slices import HUMAN_VERIFIED, SLICES
from peerify_dagster.freshness import SLICES_KEY, latest_materialisation, release_problems, shipped_slices
from peerify_dagster.lockfile import environment_record
from peerify_dagster.resources.dagster_resources import (
    UNPARTITIONED,
    LakeResource,
    ReleaseLineageResource,
    VenueRegistryResource,
)
from peerify_dagster.resources.lake import RELEASES_DIR
from peerify_dagster.resources.llm_gateway import LEDGER_SCHEMA, CallLedger, ModelRegistry
from peerify_dagster.resources.store import readable


class ReleaseConfig(dg.Config):
    version: str  # X.Y.Z
    venues: list[str]  # venue keys of venues.yaml, each built (its benchmark_slices) with its blocking gates passed


def upstream_versions(context: dg.AssetExecutionContext, lineage: ReleaseLineageResource,
                      venues: list[str]) -> list[dict]:
    """The latest materialisation of every asset upstream of the release, per venue partition: data version, code
    version, run and time (null when the instance has none)."""
    entries = []
    for asset in lineage.upstream:
        for partition in [None] if asset.partitioning == UNPARTITIONED else venues:
            key = dg.AssetKey.from_user_string(asset.asset)
            record = latest_materialisation(context.instance, key, partition)
            tags = record.asset_materialization.tags or {} if record else {}
            entries.append({
                "asset": key.to_user_string(), "partition": partition,
                "data_version": tags.get("dagster/data_version"), "code_version": tags.get("dagster/code_version"),
                "run_id": record.run_id if record else None,
                "materialized_at": datetime.fromtimestamp(record.timestamp, UTC).isoformat() if record else None,
            })
    return entries


def ledger_rows(lake_root, call_ids: list[str]) -> pa.Table:
    """Every ledger row (failed attempts included) of the given calls, in (call id, time) order."""
    wanted = pa.array(call_ids, pa.string())
    parts = [pq.read_table(readable(segment)).cast(LEDGER_SCHEMA) for segment in CallLedger(lake_root).segments()]
    table = pa.concat_tables([part.filter(pc.is_in(part["call_id"], wanted)) for part in parts]) if parts \
        else LEDGER_SCHEMA.empty_table()
    rows = {(r["call_id"], r["created_at"]): r for r in table.to_pylist()}  # a row compacted twice counts once
    return pa.Table.from_pylist([rows[k] for k in sorted(rows)], schema=LEDGER_SCHEMA)


def _audit_provenance(lake_root, venue: str, frame: pl.DataFrame) -> tuple[pl.DataFrame, list[Decision]]:
    """HumanVerified rows with the audit decisions behind their consensus label named in gold_decision_ids (the slices
    leave them empty), and those decisions."""
    sample = audit_sample.read_sample(lake_root, venue)
    if sample is None or frame.filter(pl.col("slice") == HUMAN_VERIFIED).is_empty():
        return frame, []
    state = audit_sample.read_audit_state(lake_root, venue, audit_sample.sample_version_of(sample))
    first, second = (state.annotators + [None, None])[:2]
    behind: dict[str, list[str]] = {}
    used: list[Decision] = []
    for claim_id in frame.filter(pl.col("slice") == HUMAN_VERIFIED)["claim_id"]:
        item_id = f"{claim_id}:{SOURCE_THREAD}"
        label_1, label_2 = state.labels.get((item_id, first)), state.labels.get((item_id, second))
        settled = state.consensus.get(item_id)
        how = audit.consensus(audit.AuditItem(item_id, None, label_1 and label_1.label, label_2 and label_2.label,
                                              settled and settled.label, None)).how
        behind[claim_id] = rel.audit_decision_ids(label_1, label_2, settled, how)
        used += [d for d in (label_1, label_2, settled) if d is not None and d.decision_id in behind[claim_id]]
    ids = [behind[claim] if name == HUMAN_VERIFIED else list(decided)
           for claim, name, decided in frame.select("claim_id", "slice", "gold_decision_ids").iter_rows()]
    return frame.with_columns(gold_decision_ids=pl.Series(ids, dtype=pl.List(pl.String))), used


def arbitration_decisions(lake_root, venue: str, frame: pl.DataFrame) -> list[Decision]:
    """The venue's arbitration decisions on the released items: every line, retracted ones and retractions too, in
    ledger order, so the rebuild picks the current one as canonical_labels did."""
    items = {f"{claim}:{source}" for claim, sources in frame.select("claim_id", "gold_source").iter_rows()
             for source in sources.split("+")}
    return [d for d in DecisionLedger(lake_root, venue).read().decisions
            if d.item_id in items and d.kind == "arbitration"]


def _models(calls: pa.Table) -> dict[str, dict]:
    registry = ModelRegistry.load()
    models: dict[str, dict] = {}
    for row in calls.select(["model", "model_id", "backend", "role"]).to_pylist():
        entry = models.setdefault(row["model"], {"backend": row["backend"], "model_id": row["model_id"], "roles": [],
                                                 "calls": 0})
        entry["calls"] += 1
        if row["role"] and row["role"] not in entry["roles"]:
            entry["roles"].append(row["role"])
    for name, entry in models.items():
        spec = registry.models.get(name)
        entry["decoding"] = dict(spec.decoding) if spec else None
        entry["context_window"] = spec.context_window if spec else None
    return dict(sorted(models.items()))


def _prompts(calls: pa.Table) -> dict[str, dict]:
    seen: dict[str, set] = {}
    for prompt_id, prompt_hash in zip(calls["prompt_id"].to_pylist(), calls["prompt_hash"].to_pylist()):
        seen.setdefault(prompt_id, set()).add(prompt_hash)
    known = set(available_prompts())
    return {prompt_id: {"hashes": sorted(hashes), "current": template_hash(prompt_id) if prompt_id in known else None}
            for prompt_id, hashes in sorted(seen.items())}


@dg.asset(group_name="release", kinds={"python", "parquet"}, deps=[SLICES_KEY])
def label_release(context: dg.AssetExecutionContext, config: ReleaseConfig, lake: LakeResource,
                  venue_registry: VenueRegistryResource,
                  release_lineage: ReleaseLineageResource) -> dg.MaterializeResult:
    """A versioned label release of the given venues' benchmark slices in `<lake>/releases/<version>/`: per slice a
    Parquet and a JSONL file (every venue's rows, each with its gold label, the labeller call ids and the human
    decision ids behind it), calls.parquet (those calls' ledger rows), decisions.jsonl (those decisions),
    manifest.json (every file's sha256, size and rows; venues, seeds, the Dagster data and code versions of every
    upstream asset partition, models, prompt hashes, arbitration statistics; the hash of its own body) and
    DATASHEET.md, README.md (the Hugging Face dataset card) and croissant.json (Croissant metadata). Refused, before
    any work, for a version that exists (a release is never overwritten) and for a
    venue whose blocking slice gates failed or were not evaluated, whose slice file is not the one they judged, or
    whose decisions or labels are newer than its slices (`release_problems`); written to a temporary folder renamed
    into place."""
    try:
        version = rel.check_version(config.version)
    except rel.ReleaseError as exc:
        raise dg.Failure(str(exc), allow_retries=False) from None
    root = lake.lake().root
    target = root / RELEASES_DIR / version
    if target.exists():
        raise dg.Failure(f"release {version} already exists at {target}; a release is never overwritten: "
                         "choose a new version", allow_retries=False)
    venues = list(dict.fromkeys(config.venues))
    if not venues:
        raise dg.Failure("a release needs at least one venue", allow_retries=False)
    registered = {key: venue_registry.venue(key) for key in venues}
    # Read once: the bytes hashed against what the gates judged are the bytes shipped.
    shipped = {venue: shipped_slices(lake.lake(), venue) for venue in venues}
    problems = [line for venue in venues
                for line in release_problems(context.instance, lake.lake(), venue, shipped[venue])]
    if problems:
        raise dg.Failure("release refused: " + "; ".join(problems), allow_retries=False)

    frames, decisions, arbitration, left_out = [], [], {}, {}
    for venue in venues:
        frame = pl.read_parquet(io.BytesIO(shipped[venue]))
        frame, audit_used = _audit_provenance(root, venue, frame)
        frames.append(frame)
        decisions += [dataclasses.asdict(d) for d in arbitration_decisions(root, venue, frame) + audit_used]
        canonical = lake.lake().read_table("canonical_labels", venue)
        arbitration[venue] = {f"{source}:{provenance}": n for source, provenance, n in
                              canonical.group_by("source", "provenance").len().sort("source", "provenance").rows()}
        built = latest_materialisation(context.instance, SLICES_KEY, venue)
        left = built.asset_materialization.metadata.get("left_out") if built else None
        left_out[venue] = left.value if left else {}
    rows = rel.slice_rows(pl.concat(frames))
    call_ids, _ = rel.provenance_links(rows)
    calls = ledger_rows(root, call_ids)

    files: dict[str, bytes] = {}
    counts: dict[str, int | None] = {}
    for name in SLICES:
        part = rows.filter(pl.col("slice") == name)
        parquet_name, jsonl_name = rel.slice_files(name)
        files[parquet_name], files[jsonl_name] = rel.slice_parquet(part), rel.slice_jsonl(part)
        counts[parquet_name] = counts[jsonl_name] = part.height
    files[rel.CALLS], counts[rel.CALLS] = rel.parquet_bytes(calls), calls.num_rows
    files[rel.DECISIONS], counts[rel.DECISIONS] = rel.jsonl_bytes(decisions), len(decisions)
    manifest = {
        "format": rel.FORMAT, "version": version, "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "dagster_run_id": context.run_id,
        "venues": [{"venue": v.key, "openreview_id": v.openreview_id, "source": v.source, "seed": v.seed,
                    "sample_size": v.sample_size, "sampling": v.sampling, "labelling": v.labelling,
                    "slices": v.slices, **v.terms,
                    "rows": {name: rows.filter((pl.col("venue") == v.key) & (pl.col("slice") == name)).height
                             for name in SLICES}} for v in registered.values()],
        "seeds": {v.key: v.seed for v in registered.values()},
        "slices": {name: {"rows": rows.filter(pl.col("slice") == name).height, "labels": labels}
                   for name, labels in rel.label_counts(rows).items()},
        "schema": {name: str(dtype) for name, dtype in rows.schema.items()},
        "upstream": upstream_versions(context, release_lineage, venues),
        "models": _models(calls), "prompts": _prompts(calls),
        "arbitration": arbitration, "left_out": left_out,
        "licence": {v.key: v.terms["licence"] for v in registered.values()},
        # the benchmark_slices file of each venue, as its blocking gates judged it
        "slices_sha256": {venue: rel.sha256_hex(data) for venue, data in shipped.items()},
        # the Python, every lock file's sha256 and the lock this environment was installed from
        "environment": environment_record(),
    }
    files = rel.release_files(manifest, files, counts)  # + datasheet, dataset card, Croissant and the sealed manifest
    sealed = files[rel.MANIFEST]
    try:
        lake.lake().store.create_folder(target, files)  # the manifest last
    except FileExistsError as exc:
        raise dg.Failure(f"release {version}: {exc}", allow_retries=False) from None
    context.log.info(f"release {version} written to {target} (manifest sha256 {rel.sha256_hex(sealed)})")
    return dg.MaterializeResult(metadata={
        "path": dg.MetadataValue.path(str(target)), "version": version, "venues": dg.MetadataValue.json(venues),
        "rows": rows.height, "calls": calls.num_rows, "decisions": len(decisions),
        "manifest_sha256": rel.sha256_hex(sealed),
        "slices": dg.MetadataValue.md("\n".join(["| slice | rows |", "|---|---|"] + [
            f"| {name} | {manifest['slices'][name]['rows']} |" for name in SLICES])),
    })

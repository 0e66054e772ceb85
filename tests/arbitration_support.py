"""A synthetic venue for the arbitration tests: claim_labels rows in the contract's schema (as the labellers write
them), claim types and review claims, written into a temporary lake, and the arbitration assets materialised on it."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import polars as pl

from peerify_dagster.assets.claims import CLAIM_TYPE_SCHEMA, REVIEW_CLAIM_SCHEMA
from peerify_dagster.assets.labels import CLAIM_LABEL_SCHEMA
from peerify_dagster.definitions import build_resources
from peerify_dagster.partitions import venue_partitions
from peerify_dagster.resources.dagster_resources import VenueRegistryResource
from peerify_dagster.resources.lake import Lake
from peerify_dagster.resources.llm_gateway import LEDGER_SCHEMA, CallLedger
from tests.support import ALL_ASSETS

# Distinctive names, so a test can prove they never reach the queue or an export.
MODELS = {"a": "zeta-model-for-a-7b", "b": "omega-model-for-b-3b"}
ROLES = {"a": "labeller_a", "b": "labeller_b"}
ARBITRATION = dg.AssetSelection.assets("arbitration_queue", "arbitration_key", "canonical_labels")
CANONICAL = dg.AssetSelection.assets("canonical_labels")


def label_row(venue: str, claim_id: str, source: str, labeller: str, label: str | None,
              evidence_mode: str | None = None, raw_label: str | None = None) -> dict:
    mode = evidence_mode or ("longest_author_reply" if source == "thread" else "whole_manuscript")
    no_material = mode == "no_manuscript"
    return {
        "venue": venue, "claim_id": claim_id, "paper_id": f"paper-{claim_id}", "review_id": f"review-{claim_id}",
        "source": source, "labeller": labeller, "role": ROLES[labeller], "model": MODELS[labeller],
        "raw_label": raw_label if raw_label is not None else label, "label": label,
        "parse_ok": label is not None and not no_material,
        "justification": None if no_material else f"{labeller}-justification for {claim_id}",
        "evidence_quotes": [] if no_material else [f"quote {labeller} {claim_id}"], "evidence_chunk_ids": [],
        "evidence_mode": mode, "evidence_text": "" if no_material else f"evidence text of {claim_id} ({source})",
        "evidence_tokens": 0 if no_material else 12, "prompt_id": "label_rebuttal", "prompt_hash": "h",
        "call_id": None if no_material else f"call-{labeller}-{claim_id}-{source}",
        "error": "no_manuscript" if no_material else None if label is not None else "unparsed",
    }


def pair(venue: str, claim_id: str, source: str, label_a: str | None, label_b: str | None, **extra) -> list[dict]:
    return [label_row(venue, claim_id, source, "a", label_a, **extra),
            label_row(venue, claim_id, source, "b", label_b, **extra)]


def standard_labels(venue: str) -> list[dict]:
    """c1 disagrees on the thread, c2 agrees, c3's b failed to parse, c4 has no manuscript, c5 disagrees on the
    manuscript."""
    return [
        *pair(venue, "c1", "thread", "Supported", "Not Supported"),
        *pair(venue, "c1", "manuscript", "Supported", "Supported"),
        *pair(venue, "c2", "thread", "Not Determined", "Not Determined", evidence_mode="no_author_response"),
        *pair(venue, "c2", "manuscript", "Partially Supported", "Partially Supported"),
        *pair(venue, "c3", "thread", "Partially Supported", None, raw_label="Mostly true"),
        *pair(venue, "c4", "manuscript", None, None, evidence_mode="no_manuscript"),
        *pair(venue, "c5", "manuscript", "Not Supported", "Partially Supported"),
    ]


def write_inputs(lake_root: Path, venue: str, rows: list[dict]) -> None:
    lake = Lake(lake_root)
    lake.write_table("claim_labels", venue, pl.DataFrame(rows, schema=CLAIM_LABEL_SCHEMA))
    claim_ids = sorted({row["claim_id"] for row in rows})
    claims = [{**dict.fromkeys(REVIEW_CLAIM_SCHEMA), "venue": venue, "claim_id": c, "paper_id": f"paper-{c}",
               "claim_text": f"The paper's claim {c} holds.", "absorbed_claim_ids": []} for c in claim_ids]
    lake.write_table("review_claims", venue, pl.DataFrame(claims, schema=REVIEW_CLAIM_SCHEMA))
    types = [{**dict.fromkeys(CLAIM_TYPE_SCHEMA), "venue": venue, "claim_id": c, "claim_type": "factual",
              "parse_ok": True} for c in claim_ids]
    lake.write_table("claim_types", venue, pl.DataFrame(types, schema=CLAIM_TYPE_SCHEMA))


def write_unparsed_calls(lake_root: Path, raw_responses: dict[str, str]) -> None:
    """llm_calls ledger rows for labeller calls whose answer did not parse (call id -> the model's raw answer)."""
    ledger = CallLedger(lake_root)
    for call_id, raw in raw_responses.items():
        labeller = call_id.split("-")[1]
        ledger.append({**dict.fromkeys(LEDGER_SCHEMA.names), "call_id": call_id, "role": ROLES[labeller],
                       "prompt_id": "label_rebuttal", "backend": "test", "model": MODELS[labeller],
                       "raw_response": raw, "parse_ok": False, "created_at": datetime.now(UTC)})


def build(venue: str, registry: Path, lake_root: Path, instance: dg.DagsterInstance,
          selection: dg.AssetSelection = ARBITRATION) -> dg.ExecuteInProcessResult:
    if not instance.has_dynamic_partition(venue_partitions.name, venue):
        instance.add_dynamic_partitions(venue_partitions.name, [venue])
    resources = build_resources(str(lake_root), venue_registry=VenueRegistryResource(path=str(registry)))
    result = dg.materialize(ALL_ASSETS, selection=selection, instance=instance, partition_key=venue,
                            resources=resources, raise_on_error=False)
    assert result.success, [e.message for e in result.all_events if e.is_failure]
    return result


def canonical(lake_root: Path, venue: str) -> dict[str, dict]:
    return {row["item_id"]: row for row in Lake(lake_root).read_table("canonical_labels", venue).to_dicts()}

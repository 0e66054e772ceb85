"""The audit sample of a venue and the audit decisions made on it, as the lake stores them.

The sample lives beside the venue's decision ledgers (`<lake>/human_decisions/<venue slug>/audit_sample.parquet`, every
row carrying the sample's version in `audit_sample_version`). It is written once; a redraw needs `force`, and is
refused whenever an audit or consensus decision answers the stored version, so no human decision ever loses the
sample it was made on. The check and the write hold the audit ledger's lock, so no decision can land in between.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from peerify_dagster import deployment
from peerify_dagster.annotation.decisions import (
    Decision,
    DecisionLedger,
    LedgerProblem,
    current_decisions,
    decisions_dir,
)
from peerify_dagster.domain.audit import audit_annotators
from peerify_dagster.resources.locks import exclusive
from peerify_dagster.resources.store import Location, readable

SAMPLE_FILE = "audit_sample.parquet"
AUDIT_LEDGER = "audit"
AUDIT_SAMPLE_SCHEMA = {
    "venue": pl.String, "audit_sample_version": pl.String, "item_id": pl.String, "claim_id": pl.String,
    "paper_id": pl.String, "review_id": pl.String, "source": pl.String, "claim_text": pl.String,
    "claim_type": pl.String, "source_material": pl.String, "evidence_mode": pl.String, "stratum": pl.String,
    "draw_order": pl.Int64, "seed": pl.Int64,
}


class AuditSampleRefused(RuntimeError):
    """The stored sample was kept; the message says why and what to do."""


def sample_path(lake_root: str | Location, venue: str) -> Location:
    return decisions_dir(lake_root, venue) / SAMPLE_FILE


def read_sample(lake_root: str | Path, venue: str) -> pl.DataFrame | None:
    """The venue's audit sample in draw order, or None when none was drawn."""
    path = sample_path(lake_root, venue)
    if not path.exists():
        return None
    return pl.read_parquet(readable(path)).sort("draw_order")


def sample_version_of(sample: pl.DataFrame) -> str | None:
    return sample["audit_sample_version"][0] if sample.height else None


def write_sample(lake_root: str | Location, venue: str, sample: pl.DataFrame, force: bool) -> Location:
    """Store `sample` as the venue's audit sample unless one exists (without `force`) or has decisions."""
    path = sample_path(lake_root, venue)
    ledger = DecisionLedger(lake_root, venue, AUDIT_LEDGER)
    contents = ledger.read()
    stored = read_sample(lake_root, venue)
    if stored is not None:
        version = sample_version_of(stored)
        answered = sum(1 for d in contents.decisions if d.queue_version == version)
        if answered:
            raise AuditSampleRefused(
                f"the audit sample of {venue} (version {version}, {stored.height} items) already has {answered} "
                f"audit decision(s) in {ledger.path}; it is never redrawn")
        if not force:
            raise AuditSampleRefused(
                f"an audit sample of {venue} already exists (version {version}, {stored.height} items, {path}); "
                "pass --force to draw it again (allowed only while nobody has labelled it)")
    if ledger.store.is_object_store and not deployment.postgres_url():
        raise AuditSampleRefused(f"an S3 lake's audit sample is checked against its decisions under a lock across "
                                 f"machines: set PEERIFY_POSTGRES_URL to draw the sample of {venue}")
    # DecisionLedger.append takes the same lock: no decision lands. An S3 lake has no file to lock: Postgres's only.
    lock_path = None if ledger.store.is_object_store else ledger.path
    if lock_path is not None:
        lock_path.parent.mkdir(parents=True, exist_ok=True)
    with exclusive(ledger.lock_name, lock_path):
        if ledger.line_count() != contents.line_count:
            raise AuditSampleRefused(f"audit decisions for {venue} arrived while the sample was checked; "
                                     "run the command again")
        with ledger.store.writing(path) as temporary:
            sample.write_parquet(temporary)
    return path


@dataclass
class AuditState:
    """The current audit and consensus decisions answering one sample version."""

    annotators: list[str]  # the audit's two annotators (first two to record a decision), fewer while starting
    others: list[str]  # anyone else who recorded audit decisions (two sessions started at once): not scored
    labels: dict[tuple[str, str], Decision]  # (item_id, annotator) -> current audit decision
    consensus: dict[str, Decision]  # item_id -> current consensus decision
    decisions: list[Decision] = field(default_factory=list)  # every audit/consensus decision for the version
    problems: list[LedgerProblem] = field(default_factory=list)  # unreadable ledger lines
    line_count: int = 0

    def label(self, item_id: str, position: int) -> str | None:
        """The label of annotator 1 or 2 (position 0 or 1) for the item, None when they have not labelled it."""
        if position >= len(self.annotators):
            return None
        decision = self.labels.get((item_id, self.annotators[position]))
        return decision.label if decision else None


def read_audit_state(lake_root: str | Path, venue: str, version: str | None) -> AuditState:
    contents = DecisionLedger(lake_root, venue, AUDIT_LEDGER).read()
    answering = [d for d in contents.decisions if version is not None and d.queue_version == version]
    audit = [d for d in answering if d.kind == "audit"]
    annotators = audit_annotators(d.annotator for d in audit if d.action == "decide")
    return AuditState(
        annotators=annotators,
        others=sorted({d.annotator for d in audit if d.action == "decide"} - set(annotators)),
        labels=current_decisions(audit, per_annotator=True),
        consensus=current_decisions([d for d in answering if d.kind == "consensus"]),
        decisions=answering, problems=contents.problems, line_count=contents.line_count,
    )

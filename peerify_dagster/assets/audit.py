"""Stage 8, the human audit (Human-Verified): two annotators label the audit sample blind, a consensus step settles
their disagreements, and the automated canonical labels are scored against the human consensus."""

import dagster as dg
import polars as pl

from peerify_dagster.annotation import audit_sample
from peerify_dagster.annotation.decisions import DecisionLedger
from peerify_dagster.domain import audit
from peerify_dagster.partitions import venue_partitions
from peerify_dagster.resources.dagster_resources import LakeResource

HUMAN_AUDIT_SCHEMA = {
    "venue": pl.String, "audit_sample_version": pl.String, "item_id": pl.String, "claim_id": pl.String,
    "claim_type": pl.String, "stratum": pl.String, "annotator_1": pl.String, "label_1": pl.String,
    "annotator_2": pl.String, "label_2": pl.String, "consensus_label": pl.String, "consensus_source": pl.String,
    "automated_label": pl.String, "automated_provenance": pl.String, "exact": pl.Boolean, "within_one": pl.Boolean,
    "polarity_flip": pl.Boolean,
}


@dg.asset(partitions_def=venue_partitions, group_name="audit", kinds={"python", "parquet"})
def human_audit(context: dg.AssetExecutionContext, canonical_labels: pl.DataFrame, lake: LakeResource) -> pl.DataFrame:
    """Per audit-sample item: both annotators' labels, the consensus (agreement, else the consensus decision, else
    pending), and the automated canonical label against it. Metadata: inter-annotator kappa and agreement, exact,
    within-one-step and polarity-flip rates with the human-vs-automated kappa and confusion matrix, overall and per
    claim type, beside the paper's audit. A venue without an audit sample gets an empty table."""
    venue, root = context.partition_key, lake.lake().root
    # Counted before reading: a decision appended meanwhile makes the ledger longer than this, so the sensor re-runs.
    ledger_lines = DecisionLedger(root, venue, "audit").line_count()
    sample = audit_sample.read_sample(root, venue)
    if sample is None:
        context.add_output_metadata({"audit_sample_items": 0, "ledger_lines": ledger_lines,
                                     "report": dg.MetadataValue.md(audit.report_markdown(venue, {}, 0, 0))})
        return pl.DataFrame(schema=HUMAN_AUDIT_SCHEMA)
    version = audit_sample.sample_version_of(sample)
    state = audit_sample.read_audit_state(root, venue, version)
    if state.others:
        context.log.warning(f"audit decisions of {state.others} are not scored: the audit's two annotators are "
                            f"{state.annotators} (the first two to record a decision)")
    for problem in state.problems:
        context.log.warning(f"{venue} audit ledger line {problem.line_number} left out: {problem.reason}")
    automated = {row["item_id"]: row for row in canonical_labels.iter_rows(named=True)}
    rows, items = [], []
    for entry in sample.iter_rows(named=True):
        item_id = entry["item_id"]
        canonical = automated.get(item_id) or {}
        settled = state.consensus.get(item_id)
        item = audit.AuditItem(item_id, entry["claim_type"], state.label(item_id, 0), state.label(item_id, 1),
                               settled.label if settled else None, canonical.get("label"))
        agreed = audit.consensus(item)
        compared = agreed.label is not None and item.automated is not None
        items.append(item)
        rows.append({
            "venue": venue, "audit_sample_version": version, "item_id": item_id, "claim_id": entry["claim_id"],
            "claim_type": entry["claim_type"], "stratum": entry["stratum"],
            "annotator_1": (state.annotators[:1] or [None])[0], "label_1": item.label_1,
            "annotator_2": (state.annotators[1:2] or [None])[0], "label_2": item.label_2,
            "consensus_label": agreed.label, "consensus_source": agreed.how, "automated_label": item.automated,
            "automated_provenance": canonical.get("provenance"),
            "exact": agreed.label == item.automated if compared else None,
            "within_one": audit.within_one_step(agreed.label, item.automated) if compared else None,
            "polarity_flip": audit.polarity_flip(agreed.label, item.automated) if compared else None,
        })
    scores = audit.score_by_claim_type(items)
    missing = [row["item_id"] for row in rows if row["automated_provenance"] is None]
    if missing:
        context.log.warning(f"{len(missing)} audit item(s) are no longer in canonical_labels: {missing[:20]}")
    context.add_output_metadata({
        "audit_sample_items": sample.height,
        "audit_sample_version": version,
        "annotators": dg.MetadataValue.json(state.annotators),
        "annotators_not_scored": dg.MetadataValue.json(state.others),
        "decisions": len(state.decisions),
        "ledger_lines": ledger_lines,
        "ledger_problems": len(state.problems),
        "items_without_canonical_label": len(missing),
        "scores": dg.MetadataValue.json({group: s.as_dict() for group, s in scores.items()}),
        "paper_audit": dg.MetadataValue.json(audit.PAPER_AUDIT),
        "report": dg.MetadataValue.md(audit.report_markdown(venue, scores, sample.height, len(state.decisions))),
    })
    return pl.DataFrame(rows, schema=HUMAN_AUDIT_SCHEMA)

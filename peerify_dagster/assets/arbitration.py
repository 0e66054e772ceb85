"""Stage 6, arbitration: the items where the two LLM labellers disagree (or failed) queued for a human with the
candidates anonymised, the key to that anonymisation kept apart, and the canonical label of every item: the
labellers' agreed label, else the applicable human decision from the decisions ledger, else pending.

The candidate order is keyed with the venue's item id secret, read (or made, the first time) through the same function
the annotators' sessions use to key the opaque ids (annotation/sessions.py item_id_secret), in the lake beside the
venue's decisions, on S3 too; it is never replaced, so a rebuild orders every item as before."""

import dagster as dg
import polars as pl

from peerify_dagster.annotation.decisions import (
    LEDGER_KINDS,
    ORPHANED_COLUMNS,
    ORPHANED_TABLE,
    DecisionLedger,
    current_decisions,
    orphaned_decision_rows,
)
from peerify_dagster.annotation.sessions import item_id_secret
from peerify_dagster.domain import arbitration as arb
from peerify_dagster.domain.columns import column_description
from peerify_dagster.partitions import venue_partitions
from peerify_dagster.quality.expectations import MAX_FAILING_IDS
from peerify_dagster.resources.dagster_resources import LakeResource
from peerify_dagster.resources.llm_gateway import CallLedger

_TEXT = pl.String
QUEUE_SCHEMA = {
    **{name: _TEXT for name in arb.QUEUE_COLUMNS},
    "passage_chunks": pl.List(_TEXT), "candidate_1_evidence": pl.List(_TEXT), "candidate_2_evidence": pl.List(_TEXT),
}
KEY_SCHEMA = {name: _TEXT for name in arb.KEY_COLUMNS}
CANONICAL_SCHEMA = {name: _TEXT for name in arb.CANONICAL_COLUMNS}
KEY_TABLE = "arbitration_key"
ORPHANED_SCHEMA = {name: _TEXT for name in ORPHANED_COLUMNS}
ORPHANED_CHECK = "every_decision_has_its_claim"


@dg.multi_asset(
    partitions_def=venue_partitions,
    group_name="arbitration",
    can_subset=False,  # the key is the queue's: they are always built together
    outs={
        "arbitration_queue": dg.AssetOut(
            kinds={"python", "parquet"},
            description="Every (claim, source) where labellers a and b disagree or either failed to parse, with the "
                        "claim, the source material the labellers saw and the two answers as candidate_1 / "
                        "candidate_2 in a per-item order keyed with the venue's item id secret (an answer that did "
                        "not parse with the model's raw answer from the llm_calls ledger); passages tagged P1, P2, "
                        "... (`passage_chunks` names their chunks); `queue_version` names the queue's content. Which "
                        "labeller is which is only in arbitration_key.",
        ),
        KEY_TABLE: dg.AssetOut(
            kinds={"python", "parquet"}, dagster_type=dg.Nothing,
            description="Which labeller (a or b) is candidate_1 and candidate_2 of each queue item. Written straight "
                        "to the lake, not through the IO manager, so no preview of it appears in the UI; no catalog "
                        "view exposes it.",
        ),
    },
)
def arbitration_queue(context: dg.AssetExecutionContext, claim_labels: pl.DataFrame, claim_types: pl.DataFrame,
                      review_claims: pl.DataFrame, lake: LakeResource):
    venue = context.partition_key
    ledger = CallLedger(lake.lake().root)
    raw_answers = {call_id: row["raw_response"] for call_id in arb.unparsed_call_ids(claim_labels.iter_rows(named=True))
                   if (row := ledger.lookup(call_id)) is not None and row["raw_response"]}
    for segment in ledger.quarantined:
        context.log.warning(segment.describe())
    queue = arb.build_queue(
        venue, arb.keyed_order(item_id_secret(lake.lake().root, venue), venue), claim_labels.iter_rows(named=True),
        dict(zip(review_claims["claim_id"], review_claims["claim_text"])),
        dict(zip(claim_types["claim_id"], claim_types["claim_type"])), raw_answers,
    )
    frame = pl.DataFrame(queue.rows, schema=QUEUE_SCHEMA)
    version = queue.key[0]["queue_version"] if queue.key else arb.queue_version([])
    yield dg.Output(frame, output_name="arbitration_queue", metadata={
        "items": frame.height,
        "by_reason": dg.MetadataValue.json(dict(frame.group_by("reason").len().iter_rows())),
        "by_source": dg.MetadataValue.json(dict(frame.group_by("source").len().iter_rows())),
        "queue_version": version,
    })
    key = pl.DataFrame(queue.key, schema=KEY_SCHEMA)
    path = lake.lake().write_table(KEY_TABLE, venue, key)
    yield dg.Output(None, output_name=KEY_TABLE, metadata={
        "dagster/row_count": key.height, "path": dg.MetadataValue.path(str(path)), "queue_version": version,
        "dagster/column_schema": dg.TableSchema(columns=[
            dg.TableColumn(name, str(dtype), description=column_description(KEY_TABLE, name))
            for name, dtype in key.schema.items()]),
    })


@dg.asset(partitions_def=venue_partitions, group_name="arbitration", kinds={"python", "parquet"}, deps=[KEY_TABLE])
def canonical_labels(context: dg.AssetExecutionContext, claim_labels: pl.DataFrame,
                     arbitration_queue: pl.DataFrame, lake: LakeResource) -> pl.DataFrame:
    """Per (claim, source) of claim_labels: the labellers' agreed label (`agreed`), else the latest live human
    decision from the ledger (`a_upheld`, `b_upheld`, `third_label`), else `pending` with a null label (never
    guessed); `unlabelled` when neither labeller had source material (no manuscript). The ledger is read when this
    runs (a sensor re-runs it after new decisions). Decisions that cannot be applied (the item left the queue, or
    what they chose is no longer on offer) stay in the ledger and are listed in the metadata."""
    venue = context.partition_key
    key = lake.lake().read_table(KEY_TABLE, venue)
    versions = set(arbitration_queue["queue_version"]) | set(key["queue_version"])
    if len(versions) > 1 or set(key["item_id"]) != set(arbitration_queue["item_id"]):
        raise dg.Failure(f"arbitration_key of {venue!r} does not match arbitration_queue (versions {sorted(versions)});"
                         " materialise both again (they are built from the same inputs)")
    ledger = DecisionLedger(lake.lake().root, venue)
    contents = ledger.read()
    for problem in contents.problems:
        context.log.warning(f"{ledger.path} line {problem.line_number}: {problem.reason}")
    current = current_decisions(d for d in contents.decisions if d.kind == "arbitration")
    result = arb.canonical_labels(venue, claim_labels.iter_rows(named=True), arbitration_queue.to_dicts(),
                                  key.to_dicts(), current)
    not_applied = [{"decision_id": d.decision_id, "item_id": d.item_id, "annotator": d.annotator, "reason": reason}
                   for d, reason in result.not_applied]
    for entry in not_applied:
        context.log.warning(f"decision {entry['decision_id']} ({entry['item_id']}, {entry['annotator']}) not "
                            f"applied: {entry['reason']}")
    counts = result.counts()
    context.add_output_metadata({
        **{f"provenance_{name}": counts.get(name, 0) for name in
           (arb.AGREED, *arb.UPHELD.values(), arb.THIRD_LABEL, arb.PENDING, arb.UNLABELLED)},
        "ledger_lines": contents.line_count,
        "ledger_problems": dg.MetadataValue.json([{"line": p.line_number, "reason": p.reason}
                                                  for p in contents.problems]),
        "decisions_not_applied": dg.MetadataValue.json(not_applied),
    })
    return pl.DataFrame(result.rows, schema=CANONICAL_SCHEMA)


@dg.asset(partitions_def=venue_partitions, group_name="arbitration", kinds={"python", "parquet"},
          check_specs=[dg.AssetCheckSpec(ORPHANED_CHECK, asset=ORPHANED_TABLE,
                                         description="every applicable human decision (arbitration, audit, consensus) "
                                                     "is on a claim that is among the venue's review claims")])
def orphaned_decisions(context: dg.AssetExecutionContext, review_claims: pl.DataFrame, lake: LakeResource):
    """The human decisions that no longer apply because their claim changed: a claim id hashes the review id and the
    claim's normalised text, so a claim extracted again with the same text (another prompt version or model) keeps
    its id and its decisions, while one whose text changed gets a new id. Every current decision of the venue's
    ledgers (arbitration, audit, consensus) whose claim id is none of `review_claims` is listed with who made it,
    when and why it no longer applies; the ledgers are read when this runs and never changed. The WARN check fails
    while any is listed; `peerify build` prints how many."""
    venue, root = context.partition_key, lake.lake().root
    decisions = []
    for kind in LEDGER_KINDS:
        ledger = DecisionLedger(root, venue, kind)
        contents = ledger.read()
        for problem in contents.problems:
            context.log.warning(f"{ledger.path} line {problem.line_number}: {problem.reason}")
        decisions += contents.decisions
    frame = pl.DataFrame(orphaned_decision_rows(venue, decisions, review_claims["claim_id"]), schema=ORPHANED_SCHEMA)
    for row in frame.iter_rows(named=True):
        context.log.warning(f"{row['kind']} decision {row['decision_id']} ({row['annotator']}, {row['decided_at']}) "
                            f"no longer applies: {row['reason']}")
    yield dg.Output(frame, metadata={
        "orphaned": frame.height,
        "by_kind": dg.MetadataValue.json(dict(frame.group_by("kind").len().sort("kind").iter_rows())),
    })
    yield dg.AssetCheckResult(
        check_name=ORPHANED_CHECK, passed=frame.is_empty(), severity=dg.AssetCheckSeverity.WARN,
        description=None if frame.is_empty() else f"{frame.height} human decision(s) no longer apply (their claims "
                                                  "changed): see the orphaned_decisions table",
        metadata={"failing_ids": dg.MetadataValue.json(frame["decision_id"].to_list()[:MAX_FAILING_IDS]),
                  "failing_count": frame.height})

"""The arbitration queue (anonymised, keyed order, mapping kept apart), canonical labels from the decisions ledger,
and the sensor that re-materialises only the venue whose ledger grew."""

from __future__ import annotations

import json

import dagster as dg
import polars as pl
import pytest
from dagster._core.storage.defs_state.base import set_defs_state_storage

from peerify_dagster.annotation.decisions import ORPHANED_TABLE, DecisionLedger, new_decision
from peerify_dagster.assets.arbitration import ORPHANED_CHECK
from peerify_dagster.assets.claims import REVIEW_CLAIM_SCHEMA
from peerify_dagster.cli.build import orphaned_decisions_line
from peerify_dagster.domain import arbitration as arb
from peerify_dagster.domain import claims as rules
from peerify_dagster.resources.dagster_resources import LakeResource
from peerify_dagster.resources.lake import Lake
from peerify_dagster.sensors import human_decisions_sensor
from tests.arbitration_support import (
    ARBITRATION,
    CANONICAL,
    MODELS,
    ROLES,
    build,
    canonical,
    pair,
    standard_labels,
    write_inputs,
    write_unparsed_calls,
)
from tests.support import materialization_metadata

VENUE, OTHER = "X.cc/2026", "Y.cc/2026"
SECRET = b"a test lake's item id secret"
ORDER = arb.keyed_order(SECRET, VENUE)


def opaque(queue: arb.Queue) -> dict[str, str]:
    return arb.opaque_item_ids(SECRET, VENUE, queue.rows[0]["queue_version"], [r["item_id"] for r in queue.rows])


@pytest.fixture
def registry(tmp_path):
    path = tmp_path / "venues.yaml"
    path.write_text(f"venues:\n  {VENUE}:\n    seed: 11\n  {OTHER}:\n    seed: 12\n")
    return path


def decide(item: dict, choice: str, label: str, annotator: str = "alice", **extra):
    return new_decision(venue=item["venue"], claim_id=item["claim_id"], source=item["source"], kind="arbitration",
                        action="decide", choice=choice, label=label, annotator=annotator,
                        queue_version=item["queue_version"], **extra)


def synthetic_labels(n: int) -> list[dict]:
    labels = ["Supported", "Not Supported", "Partially Supported", "Not Determined"]
    return [row for i in range(n) for row in pair(VENUE, f"claim{i:03d}", "thread", labels[i % 4], labels[(i + 1) % 4])]


def test_candidate_order_is_keyed_per_record_and_balanced():
    rows = synthetic_labels(200)
    texts, types = {}, {}
    first = arb.build_queue(VENUE, ORDER, rows, texts, types)
    again = arb.build_queue(VENUE, arb.keyed_order(SECRET, VENUE), rows[::-1], texts, types)
    assert first == again  # same record, same order, whatever the input order
    a_first = sum(k["candidate_1_labeller"] == "a" for k in first.key)
    assert len(first.key) == 200 and 70 <= a_first <= 130  # between 35% and 65%
    for row, key in zip(first.rows, first.key):
        labeller = key["candidate_1_labeller"]
        assert row["candidate_1_justification"].startswith(f"{labeller}-justification")
    rekeyed = arb.build_queue(VENUE, arb.keyed_order(b"another lake's secret", VENUE), rows, texts, types)
    assert rekeyed.key != first.key and rekeyed.rows[0]["queue_version"] != first.rows[0]["queue_version"]


def test_queue_holds_disagreements_and_parse_failures_only():
    queue = arb.build_queue(VENUE, ORDER, standard_labels(VENUE), {"c1": "claim one"}, {"c1": "factual"})
    assert {row["item_id"]: row["reason"] for row in queue.rows} == {
        "c1:thread": "disagree", "c3:thread": "parse_failed", "c5:manuscript": "disagree"}
    c3 = next(row for row in queue.rows if row["item_id"] == "c3:thread")
    assert {c3["candidate_1_label"], c3["candidate_2_label"]} == {"Partially Supported", None}
    c1 = next(row for row in queue.rows if row["item_id"] == "c1:thread")
    assert (c1["claim_text"], c1["claim_type"], c1["source_material"]) == (
        "claim one", "factual", "evidence text of c1 (thread)")
    assert len({row["queue_version"] for row in queue.rows}) == 1


def test_the_mapping_is_absent_from_the_queue_and_every_export():
    queue = arb.build_queue(VENUE, ORDER, synthetic_labels(20), {}, {})
    frame_text = pl.DataFrame(queue.rows).write_json()
    ids = opaque(queue)
    exports = [arb.to_jsonl(queue.rows, ids), arb.to_csv(queue.rows, ids),
               json.dumps(arb.to_labelstudio_tasks(queue.rows, ids)), arb.labelstudio_config()]
    secrets = [*MODELS.values(), *ROLES.values(), "labeller", "candidate_1_labeller"]
    for text in [frame_text, *exports]:
        assert [s for s in secrets if s.lower() in text.lower()] == []
    assert set(queue.rows[0]) == set(arb.QUEUE_COLUMNS)
    # nor can an export be joined to the labellers' rows: no claim, paper or review id in any field (the synthetic
    # texts quote the claim id, so the texts are left out of this look)
    joinable = {value for row in queue.rows for value in (row["claim_id"], row["paper_id"], row["review_id"])}
    texts = {"claim_text", "source_material", "candidate_1_justification", "candidate_2_justification",
             "candidate_1_evidence", "candidate_2_evidence", "candidate_1", "candidate_2"}
    records = [*arb.export_records(queue.rows, ids),
               *(task["data"] for task in arb.to_labelstudio_tasks(queue.rows, ids))]
    shown = [str(value) for record in records for name, value in record.items() if name not in texts]
    assert [value for value in shown if any(secret in value for secret in joinable)] == []
    assert all(arb.is_opaque_id(record["item_id"]) for record in records) and "claim_id" not in records[0]


def test_an_answer_that_did_not_parse_is_queued_with_its_raw_answer_and_exported_with_it():
    raw = '{"label": "Mostly true", "justification": "the table says so"}'
    queue = arb.build_queue(VENUE, ORDER, standard_labels(VENUE), {}, {}, {"call-b-c3-thread": raw})
    c3 = next(row for row in queue.rows if row["item_id"] == "c3:thread")
    unparsed = next(c for c in arb.CANDIDATES if c3[f"{c}_label"] is None)
    parsed = next(c for c in arb.CANDIDATES if c != unparsed)
    assert (c3[f"{unparsed}_raw_answer"], c3[f"{parsed}_raw_answer"]) == (raw, None)  # a parsed answer needs none
    ids = opaque(queue)
    [task] = [t for t in arb.to_labelstudio_tasks(queue.rows, ids) if t["data"]["item_id"] == ids["c3:thread"]]
    assert task["data"][unparsed].startswith(f"Label: (no label: the answer did not parse)\n\n"
                                             f"b-justification for c3\n\nRaw answer:\n{raw}")
    assert "Raw answer" not in task["data"][parsed]
    assert json.loads(arb.to_jsonl(queue.rows, ids).splitlines()[1])[f"{unparsed}_raw_answer"] == raw
    # the call gone from the ledger: the label as the model wrote it (claim_labels' raw_label)
    without_ledger = arb.build_queue(VENUE, ORDER, standard_labels(VENUE), {}, {})
    assert next(row for row in without_ledger.rows if row["item_id"] == "c3:thread")[f"{unparsed}_raw_answer"] \
        == "Mostly true"


def test_assets_build_queue_key_and_pending_canonical_labels(tmp_path, registry):
    lake_root = tmp_path / "lake"
    write_inputs(lake_root, VENUE, standard_labels(VENUE))
    write_unparsed_calls(lake_root, {"call-b-c3-thread": "I would call it mostly true."})
    result = build(VENUE, registry, lake_root, dg.DagsterInstance.ephemeral())
    lake = Lake(lake_root)
    queue, key = lake.read_table("arbitration_queue", VENUE), lake.read_table("arbitration_key", VENUE)
    assert sorted(queue["item_id"]) == sorted(key["item_id"]) == ["c1:thread", "c3:thread", "c5:manuscript"]
    c3 = queue.filter(pl.col("item_id") == "c3:thread").row(0, named=True)
    assert {c3["candidate_1_raw_answer"], c3["candidate_2_raw_answer"]} == {"I would call it mostly true.", None}
    assert not {"labeller", "model", "role", "candidate_1_labeller"} & set(queue.columns)
    rows = canonical(lake_root, VENUE)
    assert {item: (r["label"], r["provenance"]) for item, r in rows.items()} == {
        "c1:thread": (None, "pending"), "c1:manuscript": ("Supported", "agreed"),
        "c2:thread": ("Not Determined", "agreed"), "c2:manuscript": ("Partially Supported", "agreed"),
        "c3:thread": (None, "pending"), "c4:manuscript": (None, "unlabelled"), "c5:manuscript": (None, "pending")}
    assert rows["c1:thread"]["call_id_a"] == "call-a-c1-thread" and rows["c3:thread"]["label_b"] is None
    assert materialization_metadata(result, "canonical_labels", "provenance_pending") == [3]
    assert materialization_metadata(result, "canonical_labels", "ledger_lines") == [0]
    key_event = [e for e in result.all_events if e.is_step_materialization
                 and e.asset_key == dg.AssetKey("arbitration_key")][0]
    assert "preview" not in key_event.event_specific_data.materialization.metadata  # no mapping shown in the UI
    # The catalog has no view of the key, and `peerify sql` cannot read its file either.
    report = lake.refresh_catalog()
    assert "arbitration_queue" in report.views and "canonical_labels" in report.views
    assert "arbitration_key" not in report.views
    with pytest.raises(Exception, match="(?i)permission|not allowed|disabled"):
        lake.query(f"select * from read_parquet('{lake_root.resolve()}/arbitration_key/*.parquet')")


def test_canonical_provenance_after_decision_superseding_decision_and_retraction(tmp_path, registry):
    lake_root = tmp_path / "lake"
    write_inputs(lake_root, VENUE, standard_labels(VENUE))
    instance = dg.DagsterInstance.ephemeral()
    build(VENUE, registry, lake_root, instance)
    lake = Lake(lake_root)
    queue = {row["item_id"]: row for row in lake.read_table("arbitration_queue", VENUE).to_dicts()}
    key = {row["item_id"]: row for row in lake.read_table("arbitration_key", VENUE).to_dicts()}
    c1 = queue["c1:thread"]
    ledger = DecisionLedger(lake_root, VENUE)

    first = decide(c1, "candidate_1", c1["candidate_1_label"])
    ledger.append([first])
    build(VENUE, registry, lake_root, instance, CANONICAL)
    row = canonical(lake_root, VENUE)["c1:thread"]
    upheld = f"{key['c1:thread']['candidate_1_labeller']}_upheld"
    assert (row["label"], row["provenance"], row["decision_id"], row["annotator"]) == (
        c1["candidate_1_label"], upheld, first.decision_id, "alice")

    second = decide(c1, "third_label", "Partially Supported", annotator="bob", supersedes=first.decision_id)
    ledger.append([second])
    build(VENUE, registry, lake_root, instance, CANONICAL)
    row = canonical(lake_root, VENUE)["c1:thread"]
    assert (row["label"], row["provenance"], row["annotator"]) == ("Partially Supported", "third_label", "bob")

    undo = new_decision(venue=VENUE, claim_id="c1", source="thread", kind="arbitration", action="retract",
                        choice=None, label=None, annotator="bob", supersedes=second.decision_id)
    ledger.append([undo])
    result = build(VENUE, registry, lake_root, instance, CANONICAL)
    row = canonical(lake_root, VENUE)["c1:thread"]
    assert (row["provenance"], row["decision_id"]) == (upheld, first.decision_id)  # alice's decision again
    assert materialization_metadata(result, "canonical_labels", "ledger_lines") == [3]
    assert len(ledger.read().decisions) == 3  # nothing was rewritten


def test_decisions_that_no_longer_apply_are_kept_and_reported(tmp_path, registry):
    lake_root = tmp_path / "lake"
    write_inputs(lake_root, VENUE, standard_labels(VENUE))
    instance = dg.DagsterInstance.ephemeral()
    build(VENUE, registry, lake_root, instance)
    queue = {row["item_id"]: row for row in Lake(lake_root).read_table("arbitration_queue", VENUE).to_dicts()}
    c1, c5 = queue["c1:thread"], queue["c5:manuscript"]
    on_c1 = decide(c1, "candidate_2", c1["candidate_2_label"])
    on_c5 = decide(c5, "third_label", "Not Determined")
    DecisionLedger(lake_root, VENUE).append([on_c1, on_c5])
    # The labellers are re-run: c1 now agrees (leaves the queue), c5's candidates change but not to its third label.
    rows = [r for r in standard_labels(VENUE) if r["claim_id"] != "c1" or r["source"] != "thread"]
    rows += pair(VENUE, "c1", "thread", "Supported", "Supported")
    rows = [r if (r["claim_id"], r["source"]) != ("c5", "manuscript") else {**r, "label": "Supported",
            "raw_label": "Supported"} if r["labeller"] == "a" else r for r in rows]
    write_inputs(lake_root, VENUE, rows)
    result = build(VENUE, registry, lake_root, instance)
    labels = canonical(lake_root, VENUE)
    assert (labels["c1:thread"]["label"], labels["c1:thread"]["provenance"]) == ("Supported", "agreed")
    # an older queue version, but its third label is still not a candidate: applied
    assert (labels["c5:manuscript"]["label"], labels["c5:manuscript"]["provenance"]) == ("Not Determined",
                                                                                         "third_label")
    [not_applied] = materialization_metadata(result, "canonical_labels", "decisions_not_applied")
    assert [(d["decision_id"], d["reason"]) for d in not_applied] == [
        (on_c1.decision_id, "the item is no longer in the arbitration queue")]
    assert len(DecisionLedger(lake_root, VENUE).read().decisions) == 2


def test_stale_reason_for_an_older_queue_version():
    row = {"item_id": "c1:thread", "queue_version": "new", "candidate_1_label": "Supported",
           "candidate_2_label": "Not Supported"}
    item = {"venue": VENUE, "claim_id": "c1", "source": "thread", "queue_version": "old"}
    assert arb.stale_reason(decide(item, "candidate_1", "Supported"), row) is None
    assert "candidate_1 is now 'Supported'" in arb.stale_reason(decide(item, "candidate_1", "Not Determined"), row)
    assert "is now one of the candidates" in arb.stale_reason(decide(item, "third_label", "Not Supported"), row)
    current = decide({**item, "queue_version": "new"}, "candidate_2", "Not Supported")
    assert arb.open_items([row], {"c1:thread": current}) == []
    assert arb.open_items([row], {"c1:thread": decide(item, "candidate_1", "Not Determined")}) == [row]


def test_sensor_requests_canonical_labels_only_for_the_venue_whose_ledger_grew(tmp_path, registry):
    lake_root = tmp_path / "lake"
    # Evaluating a sensor opens a second instance from the test instance's ref that never closes and leaves its
    # state storage as the process-wide current one (see test_registry_and_cli.py); restore it afterwards.
    with dg.instance_for_test() as instance, set_defs_state_storage(None):
        for venue in (VENUE, OTHER):
            write_inputs(lake_root, venue, standard_labels(venue))
            build(venue, registry, lake_root, instance)
        resources = {"lake": LakeResource(root=str(lake_root))}
        quiet = human_decisions_sensor(dg.build_sensor_context(instance=instance, resources=resources))
        assert isinstance(quiet, dg.SkipReason)
        item = Lake(lake_root).read_table("arbitration_queue", OTHER).to_dicts()[0]
        DecisionLedger(lake_root, OTHER).append([decide(item, "candidate_1", item["candidate_1_label"])])
        requests = human_decisions_sensor(dg.build_sensor_context(instance=instance, resources=resources))
        assert [(r.partition_key, r.asset_selection, r.run_key) for r in requests] == [
            (OTHER, [dg.AssetKey("canonical_labels")], f"canonical_labels:{OTHER}:1")]
        build(OTHER, registry, lake_root, instance, CANONICAL)
        after = human_decisions_sensor(dg.build_sensor_context(instance=instance, resources=resources))
        assert isinstance(after, dg.SkipReason)
        # The audit ledger drives human_audit the same way, and only for its venue.
        build(VENUE, registry, lake_root, instance, dg.AssetSelection.assets("human_audit"))
        DecisionLedger(lake_root, VENUE, "audit").append([new_decision(
            venue=VENUE, claim_id=item["claim_id"], source="thread", kind="audit", action="decide", choice="label",
            label="Supported", annotator="alice", note=None, queue_version="v1", supersedes=None)])
        audit_requests = human_decisions_sensor(dg.build_sensor_context(instance=instance, resources=resources))
        assert [(r.partition_key, r.asset_selection, r.run_key) for r in audit_requests] == [
            (VENUE, [dg.AssetKey("human_audit")], f"human_audit:{VENUE}:1")]


# -- re-extraction ---------------------------------------------------------------------------------------------------

ORPHANED = ARBITRATION | dg.AssetSelection.assets(ORPHANED_TABLE)
REVIEW = "review-1"


def write_extraction(lake_root, texts: list[str], model: str, prompt_hash: str) -> list[str]:
    """review_claims as an extraction writes them (ids from the review id and the claim's text) and the labellers'
    rows for them (each claim disagreed on, so each is queued); the claim ids, in `texts` order."""
    ids = [rules.claim_id(REVIEW, text) for text in texts]
    write_inputs(lake_root, VENUE, [row for cid in ids for row in pair(VENUE, cid, "thread", "Supported",
                                                                        "Not Supported")])
    claims = [{**dict.fromkeys(REVIEW_CLAIM_SCHEMA), "venue": VENUE, "claim_id": cid, "paper_id": "paper-1",
               "review_id": REVIEW, "claim_order": order, "claim_text": text, "extractor_model": model,
               "prompt_id": "extract_claims", "prompt_hash": prompt_hash, "call_id": f"{model}-{order}",
               "absorbed_claim_ids": []}
              for order, (cid, text) in enumerate(zip(ids, texts))]
    Lake(lake_root).write_table("review_claims", VENUE, pl.DataFrame(claims, schema=REVIEW_CLAIM_SCHEMA))
    return ids


def orphan_check(result: dg.ExecuteInProcessResult) -> dg.AssetCheckEvaluation:
    [evaluation] = [e for e in result.get_asset_check_evaluations() if e.check_name == ORPHANED_CHECK]
    return evaluation


def test_decisions_survive_re_extraction_of_an_unchanged_claim_and_are_listed_when_it_changed(tmp_path, registry):
    lake_root = tmp_path / "lake"
    instance = dg.DagsterInstance.ephemeral()
    texts = ["The method is evaluated on a single dataset.", "The ablation removes the gating layer."]
    first_ids = write_extraction(lake_root, texts, "extractor-model-1", "prompt-v1")
    build(VENUE, registry, lake_root, instance, ORPHANED)
    queue = {row["claim_id"]: row for row in Lake(lake_root).read_table("arbitration_queue", VENUE).to_dicts()}
    item = queue[first_ids[0]]
    decision = decide(item, "candidate_1", item["candidate_1_label"])
    audited = new_decision(venue=VENUE, claim_id=first_ids[0], source="thread", kind="audit", action="decide",
                           choice="label", label="Not Supported", annotator="carol", queue_version="v1")
    DecisionLedger(lake_root, VENUE).append([decision])
    DecisionLedger(lake_root, VENUE, "audit").append([audited])

    # Extracted again by another model and prompt version, in another order and without the final period: the same
    # normalised text, so the same ids, and the decision still gives the label.
    again = write_extraction(lake_root, [texts[1], texts[0].rstrip(".")], "extractor-model-2", "prompt-v2")
    assert again[::-1] == first_ids
    result = build(VENUE, registry, lake_root, instance, ORPHANED)
    label = canonical(lake_root, VENUE)[item["item_id"]]
    assert (label["decision_id"], label["label"]) == (decision.decision_id, item["candidate_1_label"])
    assert Lake(lake_root).read_table(ORPHANED_TABLE, VENUE).is_empty() and orphan_check(result).passed
    assert orphaned_decisions_line(Lake(lake_root), VENUE) is None

    # The first claim's text changed: a new id, so neither decision applies; both are listed, the ledgers unchanged.
    changed = write_extraction(lake_root, ["The method is evaluated on two datasets.", texts[1]], "extractor-model-2",
                               "prompt-v3")
    assert changed[0] not in first_ids and changed[1] == first_ids[1]
    result = build(VENUE, registry, lake_root, instance, ORPHANED)
    assert item["item_id"] not in canonical(lake_root, VENUE)
    lake = Lake(lake_root)
    _, rows = lake.query(f"select kind, decision_id, claim_id, annotator, decided_at, reason from {ORPHANED_TABLE} "
                         "order by kind")
    assert [row[:5] for row in rows] == [
        ("arbitration", decision.decision_id, first_ids[0], "alice", decision.decided_at),
        ("audit", audited.decision_id, first_ids[0], "carol", audited.decided_at)]
    assert all("its text changed" in row[5] for row in rows)
    evaluation = orphan_check(result)
    assert not evaluation.passed and evaluation.severity == dg.AssetCheckSeverity.WARN
    assert orphaned_decisions_line(lake, VENUE) == (
        f'2 human decisions no longer apply (their claims changed): see `peerify sql "select * from {ORPHANED_TABLE}"`')
    assert DecisionLedger(lake_root, VENUE).read().decisions == [decision]
    assert DecisionLedger(lake_root, VENUE, "audit").read().decisions == [audited]

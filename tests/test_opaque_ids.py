"""Opaque item ids: what annotators see instead of claim ids (domain/arbitration.py), keyed by the lake's item id
secret (annotation/sessions.py), in `peerify queue export` and back through `peerify decisions import`, which still
reads files exported before them."""

from __future__ import annotations

import json
import os
import re

import pytest

from peerify_dagster import cli
from peerify_dagster.annotation import audit_sample
from peerify_dagster.annotation.decisions import decisions_dir
from peerify_dagster.annotation.sessions import SECRET_FILE, Session, item_id_secret, queue_opaque_ids
from peerify_dagster.domain import arbitration as arb
from peerify_dagster.domain.labels import NOT_DETERMINED, SUPPORTED
from peerify_dagster.resources.lake import Lake
from tests.arbitration_support import CANONICAL, build, pair, standard_labels, write_inputs
from tests.test_queue_import_export import VENUE, by_item, export, import_file, venue, write_jsonl  # noqa: F401

OPAQUE = re.compile(r"^q-[0-9a-f]{12}$")


# -- the ids ------------------------------------------------------------------------------------------------------
def test_an_opaque_id_depends_on_the_secret_the_venue_and_the_version_and_hides_the_claim():
    items = [f"claim{i:03d}:thread" for i in range(200)]
    ids = arb.opaque_item_ids(b"secret", VENUE, "v1", items)
    assert all(OPAQUE.match(value) for value in ids.values()) and len(set(ids.values())) == 200
    assert not any(item.split(":")[0][:5] in value for item, value in ids.items())
    assert arb.opaque_item_ids(b"secret", VENUE, "v1", items) == ids  # stable while the queue is
    for other in (arb.opaque_item_ids(b"secret", VENUE, "v2", items), arb.opaque_item_ids(b"other", VENUE, "v1", items),
                  arb.opaque_item_ids(b"secret", "Y.cc/2026", "v1", items)):
        assert set(other.values()).isdisjoint(ids.values())
    assert arb.is_opaque_id(ids[items[0]]) and not arb.is_opaque_id(items[0]) and not arb.is_opaque_id(None)


def test_two_items_with_one_id_are_refused(monkeypatch):
    monkeypatch.setattr(arb, "OPAQUE_ID_HEX", 1)  # 16 possible ids for 20 items: a clash is certain
    with pytest.raises(ValueError, match="got the same opaque id"):
        arb.opaque_item_ids(b"secret", VENUE, "v1", [f"c{i}:thread" for i in range(20)])


def test_the_secret_is_made_once_readable_by_its_owner_only_and_never_replaced(tmp_path):
    first = item_id_secret(tmp_path, VENUE)
    path = decisions_dir(tmp_path, VENUE) / SECRET_FILE
    assert len(first) == 64 and os.stat(path).st_mode & 0o777 == 0o600
    assert item_id_secret(tmp_path, VENUE) == first
    assert item_id_secret(tmp_path, "Y.cc/2026") != first  # each venue its own
    assert [p.name for p in path.parent.iterdir()] == [SECRET_FILE]  # no temporary left behind


def answer(record: dict, **fields) -> arb.Answer:
    return arb.Answer("line 1", {**record, **fields}, 1)


def test_answers_name_items_by_opaque_id_or_in_the_old_form():
    queue = arb.build_queue(VENUE, arb.keyed_order(b"secret", VENUE), standard_labels(VENUE), {}, {})
    version = queue.rows[0]["queue_version"]
    ids = arb.opaque_item_ids(b"secret", VENUE, version, [row["item_id"] for row in queue.rows])
    base = {"venue": VENUE, "queue_version": version}
    new, old = answer(base, item_id=ids["c1:thread"], label=NOT_DETERMINED), answer(
        base, item_id="c5:manuscript", claim_id="c5", source="manuscript", label=NOT_DETERMINED)
    valid, problems = arb.validate_answers([new, old], VENUE, queue.rows, {"c1", "c5"}, ids)
    assert problems == [] and [a.queue_row["item_id"] for a in valid] == ["c1:thread", "c5:manuscript"]
    # the same item twice, once in each form, is one item answered twice
    _, twice = arb.validate_answers([new, answer(base, item_id="c1:thread", label=SUPPORTED)], VENUE, queue.rows,
                                    {"c1"}, ids)
    assert [p.reason for p in twice] == [f"duplicate answer for {ids['c1:thread']} (also line 1)",
                                         "duplicate answer for c1:thread (also line 1)"]
    # an id of another queue version says to export again, nothing about an unknown item
    _, stale = arb.validate_answers([answer(new.fields, queue_version="0123456789abcdef",
                                            item_id="q-ffffffffffff")], VENUE, queue.rows, {"c1"}, ids)
    assert [p.reason for p in stale] == [f"answers queue version 0123456789abcdef, the current one is {version}; "
                                         "export the queue again"]


# -- the commands -------------------------------------------------------------------------------------------------
def test_every_export_shows_opaque_ids_only(tmp_path, venue):  # noqa: F811
    queue = Lake(venue["lake_root"]).read_table("arbitration_queue", VENUE).to_dicts()
    ids = queue_opaque_ids(venue["lake_root"], VENUE, queue)
    joinable = {value for row in queue for value in (row["claim_id"], row["paper_id"], row["review_id"],
                                                      row["item_id"])}
    for fmt in ("jsonl", "csv"):
        records = export(tmp_path, fmt)
        assert sorted(r["item_id"] for r in records) == sorted(ids.values()) and "claim_id" not in records[0]
        assert [v for r in records for name, v in r.items() if name == "item_id" and v in joinable] == []
    folder = tmp_path / "ls"
    assert cli.main(["queue", "export", "--venue", VENUE, "--format", "labelstudio", "--out", str(folder)]) == 0
    tasks = [task["data"] for task in json.loads((folder / "tasks.json").read_text())]
    assert sorted(t["item_id"] for t in tasks) == sorted(ids.values()) and "claim_id" not in tasks[0]


def test_an_answer_file_exported_before_opaque_ids_still_imports(tmp_path, venue, capsys):  # noqa: F811
    queue = {row["item_id"]: row for row in Lake(venue["lake_root"]).read_table("arbitration_queue", VENUE).to_dicts()}
    old_columns = ("venue", "item_id", "claim_id", "source", "claim_type", "claim_text", "queue_version")
    c1 = {**{name: queue["c1:thread"][name] for name in old_columns}, "choice": "candidate_2", "label": None,
          "note": "from an old export"}
    assert import_file(write_jsonl(tmp_path / "old.jsonl", [c1])) == 0, capsys.readouterr().err
    [decision] = venue["ledger"].read().decisions
    assert (decision.item_id, decision.choice, decision.note) == ("c1:thread", "candidate_2", "from an old export")


def test_ids_change_with_the_queue_version_and_an_old_id_says_to_export_again(tmp_path, venue, capsys):  # noqa: F811
    before = by_item(venue, export(tmp_path, "jsonl"))
    relabelled = [{**row, "label": NOT_DETERMINED} if (row["claim_id"], row["labeller"]) == ("c5", "a") else row
                  for row in standard_labels(VENUE)]
    write_inputs(venue["lake_root"], VENUE, relabelled)
    build(VENUE, venue["registry"], venue["lake_root"], venue["instance"])
    after = by_item(venue, export(tmp_path, "jsonl"))
    assert sorted(after) == sorted(before)  # the same items ...
    assert {r["item_id"] for r in after.values()}.isdisjoint(r["item_id"] for r in before.values())  # ... new ids
    capsys.readouterr()
    stale = write_jsonl(tmp_path / "stale.jsonl", [{**before["c1:thread"], "choice": "candidate_1"}])
    assert import_file(stale) == 2
    assert "answers queue version" in capsys.readouterr().err and not venue["ledger"].path.exists()


def test_audit_items_have_opaque_ids_of_their_own(tmp_path, venue):  # noqa: F811
    from peerify_dagster.cli.arbitrate import build_audit_sample

    rows = [*standard_labels(VENUE), *pair(VENUE, "c6", "thread", SUPPORTED, SUPPORTED)]
    write_inputs(venue["lake_root"], VENUE, rows)
    build(VENUE, venue["registry"], venue["lake_root"], venue["instance"])
    queue = Session(venue["lake_root"], VENUE, "arbitration", "alice")
    c1 = next(item for item in queue.items if item.item_id == "c1:thread")
    queue.decide(c1, NOT_DETERMINED, "third_label", None)  # c1 gets a canonical label: it can be audited too
    build(VENUE, venue["registry"], venue["lake_root"], venue["instance"], CANONICAL)
    sample, _ = build_audit_sample(Lake(venue["lake_root"]), VENUE, 10, 11)
    audit_sample.write_sample(venue["lake_root"], VENUE, sample, force=False)
    audit_items = {item.item_id: item for item in Session(venue["lake_root"], VENUE, "audit", "bob").items}
    assert sorted(audit_items) == ["c1:thread", "c6:thread"]
    assert all(OPAQUE.match(item.opaque_id) for item in audit_items.values())
    assert audit_items["c1:thread"].opaque_id != c1.opaque_id  # the sample's version keys it, not the queue's

"""The decisions ledger: append-only, durable, concurrent appends never lose a decision, damage is reported by line."""

from __future__ import annotations

import multiprocessing
from dataclasses import replace

import pytest

from peerify_dagster.annotation.decisions import (
    Decision,
    DecisionLedger,
    LedgerError,
    current_decisions,
    decisions_dir,
    new_decision,
)

VENUE = "X.cc/2026"


def arbitration(claim_id: str, label: str = "Supported", annotator: str = "ann", choice: str = "third_label",
                **extra) -> Decision:
    return new_decision(venue=VENUE, claim_id=claim_id, source="thread", kind="arbitration", action="decide",
                        choice=choice, label=label, annotator=annotator, queue_version="q1", **extra)


def retract(target: Decision) -> Decision:
    return new_decision(venue=target.venue, claim_id=target.claim_id, source=target.source, kind=target.kind,
                        action="retract", choice=None, label=None, annotator=target.annotator,
                        supersedes=target.decision_id)


def test_append_then_read_returns_the_decisions_in_order(tmp_path):
    ledger = DecisionLedger(tmp_path, VENUE)
    first, second = arbitration("c1", note="ünïcode note"), arbitration("c2", label="Not Determined")
    ledger.append([first])
    ledger.append([second])
    assert ledger.path == decisions_dir(tmp_path, VENUE) / "arbitration.jsonl"
    assert ledger.path.parent.name == "X.cc__2026"
    contents = ledger.read()
    assert contents.decisions == [first, second] and contents.problems == [] and contents.line_count == 2
    assert first.item_id == "c1:thread" and len(first.decision_id) == 32 and first.decided_at.endswith("+00:00")


def test_read_of_a_missing_ledger_is_empty(tmp_path):
    contents = DecisionLedger(tmp_path, VENUE, kind="audit").read()
    assert contents.decisions == [] and contents.problems == [] and contents.line_count == 0


@pytest.mark.parametrize("change, reason", [
    ({"label": "Mostly Supported"}, "label 'Mostly Supported'"),
    ({"choice": "candidate_3"}, "choice 'candidate_3'"),
    ({"item_id": "c9:thread"}, "item_id 'c9:thread'"),
    ({"source": "forum", "item_id": "c1:forum"}, "source 'forum'"),
    ({"kind": "vote"}, "kind 'vote'"),
    ({"annotator": " "}, "annotator"),
    ({"decided_at": "yesterday"}, "decided_at 'yesterday'"),
    ({"decided_at": "2026-01-01T10:00:00"}, "no time zone"),
])
def test_a_malformed_decision_is_refused_when_made(change, reason):
    with pytest.raises(ValueError, match=reason):
        replace(arbitration("c1"), **change)


def test_an_audit_decision_chooses_a_label_not_a_candidate():
    with pytest.raises(ValueError, match="choice 'candidate_1'"):
        new_decision(venue=VENUE, claim_id="c1", source="thread", kind="audit", action="decide",
                     choice="candidate_1", label="Supported", annotator="ann")


def test_refused_appends_write_nothing(tmp_path):
    ledger = DecisionLedger(tmp_path, VENUE)
    kept = arbitration("c1", annotator="alice")
    ledger.append([kept])
    before = ledger.path.read_bytes()
    other_venue = new_decision(venue="Y.cc/2026", claim_id="c2", source="thread", kind="arbitration",
                               action="decide", choice="candidate_1", label="Supported", annotator="alice")
    audit = new_decision(venue=VENUE, claim_id="c2", source="thread", kind="audit", action="decide",
                         choice="label", label="Supported", annotator="alice")
    cases = {
        "venue 'Y.cc/2026'": [arbitration("c2"), other_venue],  # the good first decision is not written either
        "already stored": [replace(arbitration("c3"), decision_id=kept.decision_id)],
        "does not belong in the arbitration ledger": [audit],
        "only one's own": [replace(retract(kept), annotator="bob")],
        "unknown decision": [replace(retract(kept), supersedes="f" * 32)],
        "a decision for another item": [replace(retract(kept), claim_id="c2", item_id="c2:thread")],
    }
    for reason, batch in cases.items():
        with pytest.raises(LedgerError, match=reason):
            ledger.append(batch)
        assert ledger.path.read_bytes() == before, reason
    undo = retract(kept)
    ledger.append([undo])
    with pytest.raises(LedgerError, match="already retracted"):
        ledger.append([retract(kept)])
    with pytest.raises(LedgerError, match="itself a retract"):
        ledger.append([retract(undo)])


def test_garbage_and_torn_lines_are_reported_by_number_and_the_rest_loads(tmp_path):
    ledger = DecisionLedger(tmp_path, VENUE)
    good = [arbitration(f"c{i}") for i in range(3)]
    ledger.append(good[:1])
    with open(ledger.path, "ab") as handle:
        handle.write(b"this is not json\n")
        handle.write(b'["a list"]\n')
        handle.write(b'{"decision_id": "x"}\n')
    ledger.append(good[1:2])
    with open(ledger.path, "ab") as handle:
        handle.write(b'{"decision_id": "torn mid-wri')  # a crash mid-write: no newline
    ledger.append(good[2:])  # starts on a fresh line: the torn one does not swallow it
    contents = ledger.read()
    assert contents.decisions == good
    assert [(p.line_number, p.reason.split(" (")[0]) for p in contents.problems] == [
        (2, "not a JSON object"), (3, "not a JSON object but a list"), (4, "missing field(s) venue, item_id, claim_id, "
         "source, kind, action, choice, label, annotator, decided_at, note, queue_version, supersedes, batch_id, "
         "batch_size"), (6, "not a JSON object")]
    assert contents.line_count == 7 == ledger.line_count()


def test_an_interrupted_append_is_ignored_whole(tmp_path):
    ledger = DecisionLedger(tmp_path, VENUE)
    kept = arbitration("c0")
    ledger.append([kept])
    ledger.append([arbitration("c1"), arbitration("c2"), arbitration("c3")])
    data = ledger.path.read_bytes()
    ledger.path.write_bytes(data[: len(data) - 40])  # the last line of the three is cut short
    contents = ledger.read()
    assert contents.decisions == [kept]
    assert [p.line_number for p in contents.problems] == [2, 3, 4]
    reason = contents.problems[0].reason
    assert "an interrupted write" in reason and "2 line(s) are readable" in reason


def test_a_line_of_another_venue_or_kind_is_reported(tmp_path):
    ledger = DecisionLedger(tmp_path, VENUE, kind="audit")
    audit = new_decision(venue=VENUE, claim_id="c1", source="thread", kind="audit", action="decide",
                         choice="label", label="Supported", annotator="ann")
    consensus = replace(audit, kind="consensus", decision_id="b" * 32)
    ledger.append([audit, consensus])  # consensus decisions live in the audit ledger
    foreign = DecisionLedger(tmp_path, "Y.cc/2026", kind="audit")
    foreign.append([replace(audit, venue="Y.cc/2026")])
    with open(ledger.path, "ab") as handle:
        handle.write(foreign.path.read_bytes())
    contents = ledger.read()
    assert contents.decisions == [audit, consensus]
    assert [(p.line_number, p.reason) for p in contents.problems] == [(3, "venue 'Y.cc/2026' is not this ledger's "
                                                                          "'X.cc/2026'")]


def test_current_decisions_supersede_and_retract():
    first = arbitration("c1", label="Supported", annotator="alice")
    second = arbitration("c1", label="Not Supported", annotator="alice", supersedes=first.decision_id)
    bob = arbitration("c1", label="Partially Supported", annotator="bob")
    other = arbitration("c2", label="Not Determined", annotator="bob")
    assert current_decisions([first, second]) == {"c1:thread": second}
    assert current_decisions([first, second, retract(second)]) == {"c1:thread": first}  # undo restores the earlier one
    assert current_decisions([first, retract(first), other]) == {"c2:thread": other}
    assert current_decisions([first, bob, second]) == {"c1:thread": second}  # the latest in ledger order wins
    assert current_decisions([first, bob, second, other], per_annotator=True) == {
        ("c1:thread", "alice"): second, ("c1:thread", "bob"): bob, ("c2:thread", "bob"): other}


def _append_many(lake_root: str, annotator: str, count: int) -> None:
    ledger = DecisionLedger(lake_root, VENUE)
    for number in range(count):
        ledger.append([arbitration(f"{annotator}-{number}-{part}", annotator=annotator) for part in range(2)])


def test_two_processes_appending_at_once_lose_nothing(tmp_path):
    # spawned, not forked: a fork of a test process whose other tests left threads running (DuckDB, torch) can crash
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_append_many, args=(str(tmp_path), name, 150)) for name in ("alice", "bob")]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
        assert worker.exitcode == 0
    contents = DecisionLedger(tmp_path, VENUE).read()
    assert contents.problems == []
    assert len(contents.decisions) == 600 == len({d.decision_id for d in contents.decisions})
    assert {d.annotator for d in contents.decisions} == {"alice", "bob"}
    assert len(current_decisions(contents.decisions)) == 600

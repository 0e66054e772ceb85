"""Leases on annotation items: the pure rules (domain/leases.py), and the lake's lease file shared by sessions in
several processes (annotation/sessions.py), the terminal (`peerify arbitrate`) included."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest

from peerify_dagster.annotation.decisions import DecisionLedger
from peerify_dagster.annotation.sessions import ItemUnavailable, LeaseStore, Session, now
from peerify_dagster.assets.arbitration import QUEUE_SCHEMA
from peerify_dagster.domain import arbitration as arb
from peerify_dagster.domain import leases
from peerify_dagster.domain.labels import NOT_SUPPORTED, SUPPORTED
from peerify_dagster.paths import REPO_ROOT
from peerify_dagster.resources.lake import Lake
from tests.arbitration_support import pair
from tests.cli_support import cli_env
from tests.support import sample_registry

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
VENUE = "sample"
ITEMS = ["i1", "i2", "i3", "i4"]


# -- the rules ----------------------------------------------------------------------------------------------------
def test_a_lease_is_taken_renewed_and_refused_to_others_until_it_expires():
    held = leases.take([], "arbitration", "i1", "alice", NOW)
    assert held == [leases.Lease("arbitration", "i1", "alice", NOW + leases.DEFAULT_LEASE)]
    renewed = leases.take(held, "arbitration", "i1", "alice", NOW + 10 * MINUTE)
    assert [lease.expires_at for lease in renewed] == [NOW + 10 * MINUTE + leases.DEFAULT_LEASE]
    with pytest.raises(leases.LeaseHeld) as refused:
        leases.take(renewed, "arbitration", "i1", "bob", NOW + 20 * MINUTE)
    assert refused.value.holder == "alice" and "leased to alice until 2026-03-01T12:25:00" in str(refused.value)
    # once alice's lease ran out (15 minutes after its last renewal) bob may take the item
    taken = leases.take(renewed, "arbitration", "i1", "bob", NOW + 25 * MINUTE)
    assert [(lease.item_id, lease.annotator) for lease in taken] == [("i1", "bob")]
    # the same item in another mode is another lease; the audit is never leased
    both = leases.take(held, "consensus", "i1", "bob", NOW)
    assert {(lease.mode, lease.annotator) for lease in both} == {("arbitration", "alice"), ("consensus", "bob")}
    with pytest.raises(ValueError, match="not leased"):
        leases.take([], "audit", "i1", "alice", NOW)


def test_one_lease_per_annotator_and_mode_and_release():
    first = leases.take([], "arbitration", "i1", "alice", NOW)
    moved = leases.take(first, "arbitration", "i2", "alice", NOW)  # moving on gives up the item left
    assert [lease.item_id for lease in moved] == ["i2"]
    with_bob = leases.take(moved, "arbitration", "i1", "bob", NOW)
    assert leases.held_by_others(with_bob, "arbitration", "alice", NOW) == {"i1"}
    released = leases.release(with_bob, "arbitration", "alice")
    assert [(lease.item_id, lease.annotator) for lease in released] == [("i1", "bob")]
    assert leases.holder(released, "arbitration", "i2", NOW) is None


def test_the_next_item_is_ones_own_lease_else_the_first_free_one():
    held = leases.take([], "arbitration", "i1", "alice", NOW)
    assert leases.next_free(ITEMS, held, "arbitration", "bob", NOW) == "i2"  # i1 is alice's
    held = leases.take(held, "arbitration", "i3", "bob", NOW)
    assert leases.next_free(ITEMS, held, "arbitration", "bob", NOW) == "i3"  # a reload: the same item again
    assert leases.next_free(ITEMS, held, "arbitration", "carol", NOW) == "i2"
    # skipping: the first free item after the one left, wrapping round, the one left last
    assert leases.next_free(ITEMS, held, "arbitration", "bob", NOW, after="i3") == "i4"
    assert leases.next_free(ITEMS, held, "arbitration", "carol", NOW, after="i4") == "i2"  # i1 is alice's
    assert leases.next_free(["i1", "i3"], held, "arbitration", "bob", NOW, after="i3") == "i3"  # nothing else free
    assert leases.next_free(ITEMS, held, "arbitration", "bob", NOW, exclude={"i3", "i2"}) == "i4"
    assert leases.next_free(["i1"], held, "arbitration", "bob", NOW) is None
    # an expired lease withholds nothing, and a lease on an item no longer open is not offered
    assert leases.next_free(ITEMS, held, "arbitration", "carol", NOW + 16 * MINUTE) == "i1"
    assert leases.next_free(["i2", "i4"], held, "arbitration", "bob", NOW) == "i2"


def test_stored_leases_round_trip_and_an_unreadable_record_is_no_lease():
    held = leases.take(leases.take([], "arbitration", "i1", "alice", NOW), "consensus", "i2", "bob", NOW)
    assert leases.from_records(leases.to_records(held)) == held
    garbled = [*leases.to_records(held), {"mode": "arbitration", "item_id": "i3"}, "not a record",
               {"mode": "audit", "item_id": "i4", "annotator": "x", "expires_at": NOW.isoformat()},
               {"mode": "arbitration", "item_id": "i5", "annotator": "x", "expires_at": "2026-03-01T12:00:00"}]
    assert leases.from_records(garbled) == held
    assert leases.from_records({"not": "a list"}) == []


# -- the lake's lease file, shared by sessions ----------------------------------------------------------------------
def write_queue(lake_root: Path, claims: int = 4) -> list[dict]:
    """An arbitration queue of `claims` thread items (labeller A Supported, B Not Supported), in the lake."""
    rows = [row for i in range(claims) for row in pair(VENUE, f"c{i}", "thread", SUPPORTED, NOT_SUPPORTED)]
    texts = {f"c{i}": f"claim {i}" for i in range(claims)}
    queue = arb.build_queue(VENUE, arb.keyed_order(b"secret", VENUE), rows, texts, {})
    Lake(lake_root).write_table("arbitration_queue", VENUE, pl.DataFrame(queue.rows, schema=QUEUE_SCHEMA))
    return queue.rows


def test_two_sessions_are_offered_different_items_and_decide_each_once(tmp_path):
    write_queue(tmp_path)
    alice, bob = Session(tmp_path, VENUE, "arbitration", "alice"), Session(tmp_path, VENUE, "arbitration", "bob")
    mine, theirs = alice.next_item(), bob.next_item()
    assert (mine.item_id, theirs.item_id) == ("c0:thread", "c1:thread")
    assert alice.next_item().item_id == "c0:thread"  # asked again (a reload): the same item
    assert bob.held_by_others() == 1
    with pytest.raises(ItemUnavailable, match=r"another annotator \(alice\) is deciding this item"):
        bob.hold(mine)
    alice.decide(mine, SUPPORTED, "candidate_1", None)
    with pytest.raises(ItemUnavailable, match="decided meanwhile"):
        bob.decide(mine, NOT_SUPPORTED, "third_label", None)  # e.g. a second window on a stale page
    bob.decide(theirs, SUPPORTED, "candidate_1", None)
    decisions = DecisionLedger(tmp_path, VENUE).read().decisions
    assert sorted((d.item_id, d.annotator) for d in decisions) == [("c0:thread", "alice"), ("c1:thread", "bob")]
    assert LeaseStore(tmp_path, VENUE).snapshot() == []  # deciding gives the lease up


def test_a_lease_that_ran_out_passes_to_another_and_the_first_answer_is_refused(tmp_path):
    write_queue(tmp_path, claims=1)
    alice = Session(tmp_path, VENUE, "arbitration", "alice")
    item = alice.next_item()
    # bob comes a second after alice's lease ran out (a moved clock: real time could step back between two calls)
    later = lambda: now() + leases.DEFAULT_LEASE + timedelta(seconds=1)  # noqa: E731
    bob = Session(tmp_path, VENUE, "arbitration", "bob", clock=later)
    assert bob.next_item().item_id == item.item_id  # alice's lease has run out: the item is offered again
    with pytest.raises(ItemUnavailable, match=r"another annotator \(bob\) took this item after your lease ran out"):
        alice.decide(item, SUPPORTED, "candidate_1", None)
    assert DecisionLedger(tmp_path, VENUE).read().decisions == []


# Each process opens its session, says so, waits for the go file, then takes its next item at the same moment.
TAKE_ONE = """
import sys, time
from pathlib import Path
from peerify_dagster.annotation.sessions import Session
session = Session(sys.argv[1], "sample", "arbitration", sys.argv[2])
print("ready", flush=True)
while not Path(sys.argv[3]).exists():
    time.sleep(0.005)
print(session.next_item().item_id, flush=True)
"""


def test_sessions_in_separate_processes_never_take_the_same_item(tmp_path):
    write_queue(tmp_path, claims=5)
    go = tmp_path / "go"
    workers = [subprocess.Popen([sys.executable, "-c", TAKE_ONE, str(tmp_path), f"annotator{n}", str(go)],
                                cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True) for n in range(5)]
    assert [worker.stdout.readline().strip() for worker in workers] == ["ready"] * 5
    go.touch()
    taken = {f"annotator{n}": worker.communicate(timeout=60)[0].strip() for n, worker in enumerate(workers)}
    assert sorted(taken.values()) == [f"c{i}:thread" for i in range(5)]  # five annotators, five different items
    stored = {(lease.annotator, lease.item_id) for lease in LeaseStore(tmp_path, VENUE).snapshot()}
    assert stored == set(taken.items())


def test_the_terminal_skips_an_item_another_annotator_holds_and_gives_up_its_own(tmp_path):
    lake, registry = tmp_path / "lake", sample_registry(tmp_path)
    write_queue(lake, claims=2)
    alice = Session(lake, VENUE, "arbitration", "alice")
    alice.next_item()  # alice holds c0 (in the browser, say)
    shown = {item.item_id: item.opaque_id for item in alice.items}  # the terminal names items as the browser does
    env = cli_env(lake, registry, None)
    done = subprocess.run([sys.executable, "-m", "peerify_dagster.cli", "arbitrate", "--venue", VENUE,
                           "--annotator", "bob"], env=env, cwd=REPO_ROOT, input="q\n", capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert f"2/2  (2 open)  {shown['c1:thread']}" in done.stdout and shown["c0:thread"] not in done.stdout
    # bob quit: his lease on c1 is given up, alice keeps hers
    held = [(lease.annotator, lease.item_id) for lease in LeaseStore(lake, VENUE).snapshot()]
    assert held == [("alice", "c0:thread")]
    decided = subprocess.run([sys.executable, "-m", "peerify_dagster.cli", "arbitrate", "--venue", VENUE,
                              "--annotator", "bob"], env=env, cwd=REPO_ROOT, input="1\n", capture_output=True,
                             text=True, timeout=60)
    assert "saved: " in decided.stdout and "no open item left in this session (0 skipped, 1 being decided by " \
                                            "other annotators); 1 decision(s) saved" in decided.stdout

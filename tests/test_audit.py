"""The human audit end to end: `peerify audit sample` (seeded, stratified, drawn once), two annotators and a
consensus through `peerify arbitrate` in a pseudo-terminal, and the `human_audit` asset's numbers."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import dagster as dg
import pexpect
import pytest

from peerify_dagster.annotation import audit_sample
from peerify_dagster.annotation.decisions import DecisionLedger, new_decision
from peerify_dagster.domain.labels import NOT_DETERMINED as D
from peerify_dagster.domain.labels import NOT_SUPPORTED as N
from peerify_dagster.domain.labels import PARTIALLY_SUPPORTED as P
from peerify_dagster.domain.labels import SUPPORTED as S
from peerify_dagster.paths import REPO_ROOT
from peerify_dagster.resources.lake import Lake
from tests.arbitration_support import build, pair, write_inputs
from tests.cli_support import cli_env, peerify
from tests.support import materialization_metadata, sample_registry

VENUE = "sample"
# Agreed thread labels: 12 Supported, 9 Partially, 6 Not Supported, 3 Not Determined
THREAD_LABELS = {f"c{i:02d}": label for i, label in enumerate([S] * 12 + [P] * 9 + [N] * 6 + [D] * 3)}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """Canonical labels built by the arbitration assets: the agreed claims above, two pending ones (the labellers
    disagree, nobody decided) and two whose review has no author response."""
    root = tmp_path_factory.mktemp("audit")
    rows = [row for claim_id, label in THREAD_LABELS.items() for row in pair(VENUE, claim_id, "thread", label, label)]
    rows += [*pair(VENUE, "p1", "thread", S, N), *pair(VENUE, "p2", "thread", P, D)]
    rows += [row for claim_id in ("r1", "r2")
             for row in pair(VENUE, claim_id, "thread", D, D, evidence_mode="no_author_response")]
    rows += pair(VENUE, "m1", "manuscript", S, S)  # manuscript items are never sampled
    write_inputs(root / "lake", VENUE, rows)
    build(VENUE, sample_registry(root), root / "lake", dg.DagsterInstance.ephemeral())
    return root


@pytest.fixture
def setup(built, tmp_path):
    shutil.copytree(built, tmp_path / "work")
    lake = tmp_path / "work" / "lake"
    return lake, cli_env(lake, tmp_path / "work" / "venues.yaml", None)


def materialise_audit(lake: Path) -> dg.ExecuteInProcessResult:
    """human_audit alone, its canonical_labels input read from the lake."""
    return build(VENUE, lake.parent / "venues.yaml", lake, dg.DagsterInstance.ephemeral(),
                 selection=dg.AssetSelection.assets("human_audit"))


def draw(env: dict, *args: str):
    return peerify("audit", "sample", "--venue", VENUE, *args, env=env, timeout=60)


def sampled_ids(lake) -> list[str]:
    return audit_sample.read_sample(lake, VENUE)["item_id"].to_list()


def audit_decision(lake, version: str, claim_id: str, annotator: str, label: str, kind: str = "audit"):
    DecisionLedger(lake, VENUE, "audit").append([new_decision(
        venue=VENUE, claim_id=claim_id, source="thread", kind=kind, action="decide", choice="label", label=label,
        annotator=annotator, note=None, queue_version=version, supersedes=None)])


def test_sample_is_seeded_stratified_and_never_redrawn_once_labelled(setup):
    lake, env = setup
    everything = draw(env, "--n", "1000")
    assert everything.returncode == 0, everything.stderr
    assert "left out 2 item(s) whose review has no author response" in everything.stdout
    # the population: never a pending item, a manuscript item or one without an author response
    assert sorted(audit_sample.read_sample(lake, VENUE)["claim_id"]) == sorted(THREAD_LABELS)

    first = draw(env, "--n", "10", "--seed", "5", "--force")
    assert first.returncode == 0, first.stderr
    assert "drew 10 items" in first.stdout
    sample = audit_sample.read_sample(lake, VENUE)
    # proportional to 12/9/6/3 of 30: 4, 3, 2, 1
    assert sample["stratum"].to_list() == [S] * 4 + [P] * 3 + [N] * 2 + [D]
    assert set(sample["source"]) == {"thread"}
    assert sample["audit_sample_version"].n_unique() == 1 and sample["claim_type"].null_count() == 0
    assert all(text == f"evidence text of {claim_id} (thread)"
               for claim_id, text in zip(sample["claim_id"], sample["source_material"]))
    ids = sampled_ids(lake)

    again = draw(env, "--n", "10", "--seed", "5")
    assert again.returncode == 2 and "already exists" in again.stderr and "--force" in again.stderr
    assert draw(env, "--n", "10", "--seed", "6", "--force").returncode == 0
    assert sampled_ids(lake) != ids  # another seed, other items
    assert draw(env, "--n", "10", "--seed", "5", "--force").returncode == 0
    assert sampled_ids(lake) == ids  # the same seed, the same items

    version = audit_sample.sample_version_of(audit_sample.read_sample(lake, VENUE))
    audit_decision(lake, version, ids[0].split(":")[0], "alice", S)
    refused = draw(env, "--n", "10", "--seed", "6", "--force")
    assert refused.returncode == 2 and "already has 1 audit decision(s)" in refused.stderr
    assert sampled_ids(lake) == ids

    too_small = draw(env, "--n", "3", "--seed", "1", "--force")
    assert too_small.returncode == 2 and "cannot hold one item of each of the 4" in too_small.stderr


def spawn(env: dict, annotator: str, mode: str) -> pexpect.spawn:
    return pexpect.spawn(sys.executable, ["-m", "peerify_dagster.cli", "arbitrate", "--venue", VENUE, "--annotator",
                                          annotator, "--mode", mode],
                         env=env, cwd=str(REPO_ROOT), encoding="utf-8", timeout=30, dimensions=(50, 100))


def label_in_terminal(env: dict, annotator: str, mode: str, keys: str, log) -> None:
    child = spawn(env, annotator, mode)
    child.logfile_read = log
    for key in keys:
        child.expect_exact("> ")
        child.send(key)
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_two_annotators_blind_then_consensus_then_human_audit(setup, tmp_path):
    lake, env = setup
    assert draw(env, "--n", "4", "--seed", "5").returncode == 0  # one item per label: S, P, N, D
    screen = tmp_path / "screen.txt"
    with open(screen, "w") as log:
        label_in_terminal(env, "alice", "audit", "spnd", log)
        label_in_terminal(env, "bob", "audit", "spsq", log)  # disagrees on the N item; quits before the D item
    shown = screen.read_text()
    assert "1/4  (4 open)" in shown and "evidence text of" in shown
    assert "candidate" not in shown and "1/2 choose" not in shown  # blind: no candidate labels, no automated label

    third = peerify("arbitrate", "--venue", VENUE, "--annotator", "carol", "--mode", "audit", env=env)
    assert third.returncode == 2 and "already has its two annotators (alice and bob)" in third.stderr

    child = spawn(env, "dave", "consensus")
    child.expect_exact("3/4  (1 open)")  # only the item they disagree on; the one bob has not labelled waits
    child.expect_exact(f"the annotators' labels: {N}  vs  {S}")
    child.send("p")
    child.expect_exact(f"saved: {P}")
    child.expect_exact("no open item left")
    child.expect(pexpect.EOF)
    nothing = peerify("arbitrate", "--venue", VENUE, "--annotator", "dave", "--mode", "consensus", env=env)
    assert nothing.returncode == 0 and "nothing to reconcile" in nothing.stdout

    result = materialise_audit(lake)
    rows = {r["stratum"]: r for r in Lake(lake).read_table("human_audit", VENUE).iter_rows(named=True)}
    assert [rows[label]["consensus_source"] for label in (S, P, N, D)] == [
        "agreement", "agreement", "consensus_decision", "pending"]
    assert (rows[N]["consensus_label"], rows[N]["automated_label"], rows[N]["within_one"]) == (P, N, True)
    assert rows[S]["exact"] is True and rows[D]["exact"] is None
    assert {(r["annotator_1"], r["annotator_2"]) for r in rows.values()} == {("alice", "bob")}
    scores = materialization_metadata(result, "human_audit", "scores")[0]["all"]
    assert (scores["both_labelled"], scores["compared"], scores["consensus_pending"]) == (3, 3, 1)
    assert scores["annotator_agreement"] == pytest.approx(2 / 3)
    assert scores["exact"] == pytest.approx(2 / 3) and scores["within_one"] == 1.0 and scores["polarity_flips"] == 0
    report = materialization_metadata(result, "human_audit", "report")[0]
    assert "| paper |" in report and "90.3%" in report


def test_human_audit_without_sample_or_decisions(setup):
    lake, env = setup
    result = materialise_audit(lake)
    assert materialization_metadata(result, "human_audit", "dagster/row_count") == [0]
    assert "No audit sample" in materialization_metadata(result, "human_audit", "report")[0]

    assert draw(env, "--n", "10", "--seed", "5").returncode == 0
    result = materialise_audit(lake)
    assert materialization_metadata(result, "human_audit", "dagster/row_count") == [10]
    assert materialization_metadata(result, "human_audit", "decisions") == [0]
    assert "no decisions yet" in materialization_metadata(result, "human_audit", "report")[0]
    scores = materialization_metadata(result, "human_audit", "scores")[0]["all"]
    assert (scores["both_labelled"], scores["compared"], scores["consensus_pending"]) == (0, 0, 10)

"""`peerify arbitrate` driven for real: the command in a pseudo-terminal (pexpect), single keys, the ledger on disk,
on a queue the arbitration assets built from claim labels, and the canonical labels they build from the decisions."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pexpect
import polars as pl
import pytest

from peerify_dagster.annotation.decisions import DecisionLedger, current_decisions
from peerify_dagster.annotation.sessions import Session
from peerify_dagster.assets.arbitration import QUEUE_SCHEMA
from peerify_dagster.domain.labels import NOT_DETERMINED as D
from peerify_dagster.domain.labels import NOT_SUPPORTED as N
from peerify_dagster.domain.labels import PARTIALLY_SUPPORTED as P
from peerify_dagster.domain.labels import SUPPORTED as S
from peerify_dagster.paths import REPO_ROOT
from peerify_dagster.resources.lake import Lake
from tests.arbitration_support import CANONICAL, MODELS, build, canonical, pair, write_inputs, write_unparsed_calls
from tests.cli_support import CliResult, cli_env
from tests.support import sample_registry

VENUE = "sample"
LONG_MATERIAL = " ".join(f"word{i}" for i in range(600)) + " THE-END-OF-THE-MATERIAL"


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """Claim labels of five claims (labeller a's label first); c5 agrees, so four items are queued."""
    root = tmp_path_factory.mktemp("queue")
    rows = [*pair(VENUE, "c1", "thread", S, N), *pair(VENUE, "c2", "thread", P, D), *pair(VENUE, "c3", "thread", N, P),
            *pair(VENUE, "c4", "thread", S, None), *pair(VENUE, "c5", "thread", S, S)]
    for row in rows:
        if row["claim_id"] == "c1":
            row["evidence_text"] = LONG_MATERIAL
    write_inputs(root / "lake", VENUE, rows)
    build(VENUE, sample_registry(root), root / "lake", dg.DagsterInstance.ephemeral())
    return root


@pytest.fixture
def work(built, tmp_path) -> Path:
    """A copy of the built lake and its registry for one test."""
    shutil.copytree(built, tmp_path / "work")
    return tmp_path / "work"


def env_of(work: Path) -> dict:
    return cli_env(work / "lake", work / "venues.yaml", None)


def candidates(work: Path) -> dict[str, tuple[str | None, str | None]]:
    """claim id -> (candidate 1's label, candidate 2's label), in the queue's keyed order."""
    queue = Lake(work / "lake").read_table("arbitration_queue", VENUE)
    return {row["claim_id"]: (row["candidate_1_label"], row["candidate_2_label"]) for row in queue.to_dicts()}


def shown_ids(lake: Path) -> dict[str, str]:
    """claim id -> the opaque id the terminal names its thread item by (never the claim id)."""
    return {item.claim_id: item.opaque_id for item in Session(lake, VENUE, "arbitration", "reader").items}


def spawn(work: Path, *args: str) -> pexpect.spawn:
    return pexpect.spawn(sys.executable, ["-m", "peerify_dagster.cli", "arbitrate", "--venue", VENUE, *args],
                         env=env_of(work), cwd=str(REPO_ROOT), encoding="utf-8", timeout=30, dimensions=(50, 100))


def arbitrate(env: dict, *args: str, input_text: str = "") -> CliResult:
    """The command with its answers piped in (no terminal): one line per answer."""
    done = subprocess.run([sys.executable, "-m", "peerify_dagster.cli", "arbitrate", *args], env=env, cwd=REPO_ROOT,
                          input=input_text, capture_output=True, text=True, timeout=60)
    return CliResult(done.returncode, done.stdout, done.stderr, 0.0)


def ledger(work: Path) -> DecisionLedger:
    return DecisionLedger(work / "lake", VENUE, "arbitration")


def finish(child: pexpect.spawn) -> int:
    child.expect(pexpect.EOF)
    child.close()
    return child.exitstatus


def test_choose_third_label_undo_note_skip_quit_and_the_canonical_labels(work):
    offered = candidates(work)
    p_candidate = offered["c3"].index(P) + 1
    unparsed = offered["c4"].index(None) + 1
    ids = shown_ids(work / "lake")
    child = spawn(work, "--annotator", "alice")
    child.expect_exact(f"1/4  (4 open)  {ids['c1']}")
    child.expect_exact("more lines")  # c1's long source material is trimmed, with a marker saying how much
    child.expect_exact("keys: 1/2 choose a candidate")
    child.send("m")
    child.expect_exact("THE-END-OF-THE-MATERIAL")
    child.send("x")
    child.expect_exact("unknown key 'x'")
    child.send("1")
    child.expect_exact(f"saved: {offered['c1'][0]} (candidate 1)")
    child.expect_exact(f"2/4  (3 open)  {ids['c2']}")
    child.send("o")
    child.expect_exact("note: ")
    child.sendline("claim quoted from the summary")
    child.expect_exact("note kept")
    child.send("2")
    child.expect_exact(f"saved: {offered['c2'][1]} (candidate 2)")
    child.expect_exact(f"3/4  (2 open)  {ids['c3']}")
    child.send("s")  # neither candidate says Supported: a third label
    child.expect_exact(f"saved: {S}\r\n")
    child.expect_exact(f"4/4  (1 open)  {ids['c4']}")
    child.send("u")  # undo: c3 is open again and shown at once
    child.expect_exact(f"undone: your decision {S} on {ids['c3']}")
    child.expect_exact(f"3/4  (2 open)  {ids['c3']}")
    child.send("p")  # a label key equal to a candidate's label upholds that candidate
    child.expect_exact(f"saved: {P} (candidate {p_candidate})")
    child.expect_exact(f"4/4  (1 open)  {ids['c4']}")
    child.send(str(unparsed))  # that candidate failed to parse: nothing to choose
    child.expect_exact(f"candidate {unparsed} has no label")
    child.send("k")
    child.expect_exact("no open item left in this session (1 skipped); 3 decision(s) saved")
    assert finish(child) == 0

    contents = ledger(work).read()
    assert contents.problems == []
    made = [(d.item_id, d.action, d.choice, d.label, d.note) for d in contents.decisions]
    assert made == [
        ("c1:thread", "decide", "candidate_1", offered["c1"][0], None),
        ("c2:thread", "decide", "candidate_2", offered["c2"][1], "claim quoted from the summary"),
        ("c3:thread", "decide", "third_label", S, None),
        ("c3:thread", "retract", None, None, None),
        ("c3:thread", "decide", f"candidate_{p_candidate}", P, None),
    ]
    assert contents.decisions[3].supersedes == contents.decisions[2].decision_id
    assert {d.annotator for d in contents.decisions} == {"alice"}
    assert sorted(current_decisions(contents.decisions)) == ["c1:thread", "c2:thread", "c3:thread"]

    # the canonical labels built from these decisions: P was labeller b's answer on c3, whatever its position
    build(VENUE, work / "venues.yaml", work / "lake", dg.DagsterInstance.ephemeral(), selection=CANONICAL)
    labels = {item: (row["label"], row["provenance"]) for item, row in canonical(work / "lake", VENUE).items()
              if row["source"] == "thread"}
    assert labels["c3:thread"] == (P, "b_upheld")
    assert labels["c1:thread"] == (offered["c1"][0], "a_upheld" if offered["c1"][0] == S else "b_upheld")
    assert labels["c4:thread"] == (None, "pending") and labels["c5:thread"] == (S, "agreed")

    # the skipped item is the only one open next time; q quits
    child = spawn(work, "--annotator", "bob")
    child.expect_exact(f"4/4  (1 open)  {ids['c4']}")
    child.send("q")
    child.expect_exact("quit; 0 decision(s) saved")
    assert finish(child) == 0


def test_a_candidate_that_did_not_parse_shows_its_raw_answer_and_is_never_offered(tmp_path):
    # c1: neither labeller's answer parsed; c2: labeller a's did not, b said Not Supported
    rows = [*pair(VENUE, "c1", "thread", None, None), *pair(VENUE, "c2", "thread", None, N)]
    write_inputs(tmp_path / "lake", VENUE, rows)
    write_unparsed_calls(tmp_path / "lake", {"call-a-c1-thread": "RAW-A1 I believe it is mostly right",
                                             "call-b-c1-thread": '{"label": "RAW-B1 true-ish"}',
                                             "call-a-c2-thread": "RAW-A2 cannot tell"})
    build(VENUE, sample_registry(tmp_path), tmp_path / "lake", dg.DagsterInstance.ephemeral())
    offered, ids = candidates(tmp_path), shown_ids(tmp_path / "lake")
    log = tmp_path / "screen.txt"
    child = spawn(tmp_path, "--annotator", "alice")
    child.logfile_read = open(log, "w")
    child.expect_exact(f"1/2  (2 open)  {ids['c1']}")
    child.expect_exact("keys: ")
    child.expect_exact("> ")
    child.send("1")  # not offered: neither candidate has a label to choose
    child.expect_exact("candidate 1 has no label")
    child.send("s")
    child.expect_exact(f"saved: {S}\r\n")
    child.expect_exact(f"2/2  (1 open)  {ids['c2']}")
    labelled = offered["c2"].index(N) + 1
    child.expect_exact(f"keys: {labelled} choose candidate {labelled}, s=")
    child.expect_exact("> ")
    child.send("q")
    assert finish(child) == 0
    child.logfile_read.close()
    screen = log.read_text().replace("\r\n", "\n")
    c1, c2 = screen.split(f"{ids['c2']} ===")
    # both raw answers of c1 under "(no label ...)", and no choice of a candidate offered for it
    assert c1.count("(no label: the answer did not parse)\n    its raw answer:\n    | ") == 2
    assert "| RAW-A1 I believe it is mostly right" in c1 and '| {"label": "RAW-B1 true-ish"}' in c1
    assert "keys: s=Supported p=Partially Supported" in c1 and "choose a candidate" not in c1 \
        and "choose candidate" not in c1
    assert "| RAW-A2 cannot tell" in c2 and "1/2 choose" not in c2
    for secret in (*MODELS.values(), "labeller", "Labeller"):
        assert secret not in screen
    assert [(d.item_id, d.choice, d.label) for d in ledger(tmp_path).read().decisions] == [
        ("c1:thread", "third_label", S)]


def test_the_labellers_are_never_shown(work):
    log = work / "screen.txt"
    child = spawn(work, "--annotator", "alice")
    child.logfile_read = open(log, "w")
    for key in ["1", "m", "2", "s", str(candidates(work)["c4"].index(S) + 1)]:
        child.expect_exact("> ")
        child.send(key)
    child.expect_exact("no open item left")
    assert finish(child) == 0
    child.logfile_read.close()
    screen = log.read_text()
    ids = shown_ids(work / "lake")
    for claim_id in ("c1", "c2", "c3", "c4"):  # named by opaque id: a claim id joins to the labellers' rows
        assert ids[claim_id] in screen and f"{claim_id}:thread" not in screen
        assert f"justification for {claim_id}" in screen
        assert f"quote a {claim_id}" in screen
    for secret in (*MODELS.values(), "labeller", "Labeller", "a_upheld", "b_upheld"):
        assert secret not in screen


def test_kill_9_loses_only_the_open_item(work):
    first, ids = candidates(work)["c1"][0], shown_ids(work / "lake")
    child = spawn(work, "--annotator", "alice")
    child.expect_exact("1/4")
    child.send("1")
    child.expect_exact("2/4")
    child.send("n")
    child.expect_exact("3/4")
    child.send("o")  # in the middle of typing a note for c3
    child.expect_exact("note: ")
    child.send("half a no")
    os.kill(child.pid, signal.SIGKILL)
    child.expect(pexpect.EOF)
    child.close()
    assert child.signalstatus == signal.SIGKILL

    contents = ledger(work).read()
    assert contents.problems == []
    assert [(d.item_id, d.label) for d in contents.decisions] == [("c1:thread", first), ("c2:thread", N)]
    child = spawn(work, "--annotator", "alice")
    child.expect_exact(f"3/4  (2 open)  {ids['c3']}")
    child.send("q")
    assert finish(child) == 0


def test_scripted_answers_without_a_terminal(work):
    result = arbitrate(env_of(work), "--venue", VENUE, "--annotator", "script", input_text="1\nk\nd\nq\n")
    assert result.returncode == 0, result.stderr
    assert "1/4  (4 open)" in result.stdout and "quit; 2 decision(s) saved" in result.stdout
    current = current_decisions(ledger(work).read().decisions)
    assert {item: d.label for item, d in current.items()} == {"c1:thread": candidates(work)["c1"][0], "c3:thread": D}


def test_clear_errors_and_an_empty_queue(work, tmp_path):
    env = env_of(work)
    unknown = arbitrate(env, "--venue", "nowhere", "--annotator", "a")
    assert unknown.returncode == 2 and "venue 'nowhere' is not registered" in unknown.stderr

    unbuilt = arbitrate({**env, "PEERIFY_LAKE": str(tmp_path / "empty")}, "--venue", VENUE, "--annotator", "a")
    assert unbuilt.returncode == 2
    assert "no arbitration_queue for sample yet" in unbuilt.stderr and "peerify build sample" in unbuilt.stderr

    no_sample = arbitrate(env, "--venue", VENUE, "--annotator", "a", "--mode", "audit")
    assert no_sample.returncode == 2 and "peerify audit sample --venue sample" in no_sample.stderr

    Lake(tmp_path / "none").write_table("arbitration_queue", VENUE, pl.DataFrame(schema=QUEUE_SCHEMA))
    empty = arbitrate({**env, "PEERIFY_LAKE": str(tmp_path / "none")}, "--venue", VENUE, "--annotator", "a")
    assert empty.returncode == 0 and "nothing to arbitrate for sample" in empty.stdout

    answers = "1\n1\n1\n" + f"{candidates(work)['c4'].index(S) + 1}\n"
    done = arbitrate(env, "--venue", VENUE, "--annotator", "a", input_text=answers)
    assert done.returncode == 0 and "4 decision(s) saved" in done.stdout
    again = arbitrate(env, "--venue", VENUE, "--annotator", "b")
    assert again.returncode == 0 and "nothing to arbitrate" in again.stdout

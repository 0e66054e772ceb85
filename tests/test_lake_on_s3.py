"""The parts of the lake that are not tables, on an S3 lake (SeaweedFS on loopback, tests/conftest.py `s3_service`):
the decisions ledger and the audit sample, the annotation leases and the item id secret, the LLM batch records, the
ledger's compaction lock, `peerify clean-lake`, and `peerify verify` / `peerify serve` refusing an S3 lake.

An S3 object cannot be appended to, so a decisions ledger is rewritten whole under the lock that holds across machines
(Postgres, `postgres_service`): several processes appending at once lose nothing, and an S3 lake without
PEERIFY_POSTGRES_URL refuses to append rather than risk losing a decision."""

from __future__ import annotations

import subprocess
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest

from peerify_dagster import cli
from peerify_dagster.annotation.audit_sample import AuditSampleRefused, read_sample, write_sample
from peerify_dagster.annotation.decisions import DecisionLedger, LedgerError, new_decision
from peerify_dagster.annotation.sessions import AnnotationError, LeaseStore, item_id_secret
from peerify_dagster.paths import REPO_ROOT
from peerify_dagster.resources.lake import Lake
from peerify_dagster.resources.llm_gateway.batches import BatchRecord, BatchRecords
from peerify_dagster.resources.llm_gateway.ledger import LEDGER_SCHEMA, CallLedger
from peerify_dagster.resources.locks import exclusive
from tests.fakes.cli import cli_env, peerify

VENUE = "X.cc/2026"
BUCKET = "lake-on-s3"


@pytest.fixture(scope="module")
def postgres_url(postgres_service) -> str:
    return postgres_service.create_database("lake_on_s3")


@pytest.fixture
def s3_lake(request, s3_service, tmp_path, monkeypatch) -> str:
    """A fresh prefix of the module's bucket as PEERIFY_LAKE, the server's keys in the AWS_* variables, this test's
    own cache folder."""
    for name, value in s3_service.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PEERIFY_LAKE_CACHE", str(tmp_path / "cache"))
    lake = f"{s3_service.make_bucket(BUCKET)}/{request.node.name}"
    monkeypatch.setenv("PEERIFY_LAKE", lake)
    return lake


@pytest.fixture
def with_postgres(postgres_url, monkeypatch) -> str:
    monkeypatch.setenv("PEERIFY_POSTGRES_URL", postgres_url)
    return postgres_url


def decision(claim_id: str, annotator: str = "alice", **fields):
    return new_decision(**{"venue": VENUE, "claim_id": claim_id, "source": "thread", "kind": "arbitration",
                           "action": "decide", "choice": "third_label", "label": "Supported",
                           "annotator": annotator, "queue_version": "q1", **fields})


def object_keys(s3_service, lake: str) -> list[str]:
    """The objects under the lake's prefix, read straight from the bucket (not the prefix's own folder marker, which
    SeaweedFS keeps once its last object is removed)."""
    prefix = lake.removeprefix("s3://")
    return sorted(key[len(prefix) + 1:] for key in s3_service.filesystem().find(prefix) if key != prefix)


# -- the decisions ledger -----------------------------------------------------------------------------------------
def test_an_s3_ledger_holds_the_folder_ledgers_bytes_and_checks_appends_alike(s3_lake, with_postgres, tmp_path,
                                                                              s3_service):
    first, second = decision("c1"), decision("c2")
    undo = new_decision(venue=VENUE, claim_id="c1", source="thread", kind="arbitration", action="retract",
                        choice=None, label=None, annotator="alice", supersedes=first.decision_id)
    on_s3, in_folder = DecisionLedger(s3_lake, VENUE), DecisionLedger(tmp_path / "lake", VENUE)
    for ledger in (on_s3, in_folder):
        ledger.append([first, second])
        ledger.append([undo])
    assert object_keys(s3_service, s3_lake) == ["human_decisions/X.cc__2026/arbitration.jsonl"]
    # The same lines, but for each append's own batch id.
    s3_lines = on_s3.path.read_bytes().splitlines()
    folder_lines = in_folder.path.read_bytes().splitlines()
    assert len(s3_lines) == len(folder_lines) == 3
    assert [line.split(b'"batch_id"')[0] for line in s3_lines] == [line.split(b'"batch_id"')[0]
                                                                    for line in folder_lines]
    assert [d.decision_id for d in on_s3.read().decisions] == [first.decision_id, second.decision_id,
                                                              undo.decision_id]
    # The same refusals: nothing of a refused append is written.
    before = on_s3.path.read_bytes()
    with pytest.raises(LedgerError, match=f"{first.decision_id} is already retracted"):
        on_s3.append([decision("c3"), undo.__class__(**{**undo.__dict__, "decision_id": "f" * 32})])
    assert on_s3.path.read_bytes() == before


def test_an_s3_ledger_refuses_appends_without_postgres_and_keeps_what_it_holds(s3_lake, postgres_url, monkeypatch):
    ledger = DecisionLedger(s3_lake, VENUE)
    monkeypatch.setenv("PEERIFY_POSTGRES_URL", postgres_url)
    ledger.append([decision("c1")])
    stored = ledger.path.read_bytes()
    monkeypatch.delenv("PEERIFY_POSTGRES_URL")
    with pytest.raises(LedgerError, match="set PEERIFY_POSTGRES_URL") as refused:
        ledger.append([decision("c2")])
    assert f"refused to append to {s3_lake}/human_decisions/X.cc__2026/arbitration.jsonl" in str(refused.value)
    assert ledger.path.read_bytes() == stored
    assert len(ledger.read().decisions) == 1  # reading needs no lock: an object is replaced whole


APPENDER = """
import sys
from peerify_dagster.annotation.decisions import DecisionLedger, new_decision
ledger = DecisionLedger(sys.argv[1], "X.cc/2026")
for number in range(int(sys.argv[3])):
    ledger.append([new_decision(venue="X.cc/2026", claim_id=f"{sys.argv[2]}-{number}", source="thread",
                                kind="arbitration", action="decide", choice="third_label", label="Supported",
                                annotator=sys.argv[2], queue_version="q1")])
"""


def test_processes_appending_to_one_s3_ledger_at_once_lose_no_decision(s3_lake, with_postgres, s3_service,
                                                                       tmp_path):
    appends = 8
    env = cli_env(Path(s3_lake), tmp_path / "venues.yaml", None, **s3_service.env(), PEERIFY_LAKE=s3_lake,
                  PEERIFY_POSTGRES_URL=with_postgres)
    annotators = ("alice", "bob", "carol")
    processes = [subprocess.Popen([sys.executable, "-c", APPENDER, s3_lake, name, str(appends)], env={
        **env, "PEERIFY_LAKE_CACHE": str(tmp_path / f"cache-{name}")}, cwd=REPO_ROOT, stderr=subprocess.PIPE,
        text=True) for name in annotators]
    # And threads of this process meanwhile.
    threads = [threading.Thread(target=DecisionLedger(s3_lake, VENUE).append, args=([decision(f"t{n}", "dave")],))
               for n in range(appends)]
    for thread in threads:
        thread.start()
    for process in processes:
        assert process.wait(timeout=120) == 0, process.stderr.read()[-3000:]
    for thread in threads:
        thread.join()
    contents = DecisionLedger(s3_lake, VENUE).read()
    assert contents.problems == []
    assert sorted(d.claim_id for d in contents.decisions) == sorted(
        [f"{name}-{n}" for name in annotators for n in range(appends)] + [f"t{n}" for n in range(appends)])


def test_the_audit_sample_on_s3_is_written_once_and_kept_once_answered(s3_lake, with_postgres, s3_service):
    sample = pl.DataFrame({"audit_sample_version": ["v1", "v1"], "item_id": ["c1:thread", "c2:thread"],
                           "draw_order": [1, 0]})
    write_sample(s3_lake, VENUE, sample, force=False)
    assert read_sample(s3_lake, VENUE)["item_id"].to_list() == ["c2:thread", "c1:thread"]
    with pytest.raises(AuditSampleRefused, match="pass --force"):
        write_sample(s3_lake, VENUE, sample, force=False)
    DecisionLedger(s3_lake, VENUE, "audit").append([decision("c1", kind="audit", choice="label",
                                                             queue_version="v1")])
    with pytest.raises(AuditSampleRefused, match="already has 1 audit decision"):
        write_sample(s3_lake, VENUE, sample.with_columns(pl.lit("v2").alias("audit_sample_version")), force=True)
    assert read_sample(s3_lake, VENUE)["audit_sample_version"].to_list() == ["v1", "v1"]
    assert "human_decisions/X.cc__2026/audit_sample.parquet" in object_keys(s3_service, s3_lake)


# -- leases and the item id secret -------------------------------------------------------------------------------
def test_leases_on_s3_need_postgres_and_are_stored_in_the_bucket(s3_lake, postgres_url, monkeypatch, s3_service):
    leases = LeaseStore(s3_lake, VENUE)
    with pytest.raises(AnnotationError, match="set PEERIFY_POSTGRES_URL"):
        leases.snapshot()
    monkeypatch.setenv("PEERIFY_POSTGRES_URL", postgres_url)
    assert leases.snapshot() == []
    assert object_keys(s3_service, s3_lake) == []  # unchanged leases are not written


def test_the_item_id_secret_on_s3_is_made_once(s3_lake, s3_service):
    made = item_id_secret(s3_lake, VENUE)
    assert len(made) == 64 and item_id_secret(s3_lake, VENUE) == made
    assert object_keys(s3_service, s3_lake) == ["human_decisions/X.cc__2026/item_id_secret"]


# -- LLM batch records and the ledger's compaction ----------------------------------------------------------------
def test_batch_records_on_s3(s3_lake, s3_service):
    records = BatchRecords(s3_lake)
    record = BatchRecord(key="k1", model="m", backend="openai", call_ids=["a"], calls={"a": {}},
                         submitted_at="2026-01-01T00:00:00+00:00")
    records.write(record)
    assert object_keys(s3_service, s3_lake) == ["llm_batches/k1.json"]
    assert records.read("k1") == record and records.all() == [record]
    with records.lock("m"):  # a local lock file in the cache folder without Postgres, never in the bucket
        pass
    records.remove(record)
    assert records.all() == [] and object_keys(s3_service, s3_lake) == []


def test_a_compaction_waits_for_nobody_and_leaves_the_merging_to_the_one_compacting(tmp_path):
    ledger = CallLedger(tmp_path / "lake")
    for number in range(2):
        ledger.append({**dict.fromkeys(LEDGER_SCHEMA.names), "call_id": f"c{number}", "parse_ok": True,
                       "created_at": datetime.now(UTC)})
    before = sorted(path.name for path in ledger.segments())
    with exclusive("llm ledger compaction", ledger.local_directory / ".compaction.lock"):
        assert ledger.compact() == []  # another holds it: no wait, nothing merged
    assert sorted(path.name for path in ledger.segments()) == before
    assert len(ledger.compact()) == 1 and len(ledger.segments()) == 1


# -- commands ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", [("verify", "--pdf", "paper.pdf", "--review", "review.txt"), ("serve",)])
def test_verify_and_serve_refuse_an_s3_lake_in_one_line(command, tmp_path):
    refused = peerify(*command, env=cli_env(Path("s3://bucket/lake"), tmp_path / "venues.yaml", None,
                                            PEERIFY_LAKE="s3://bucket/lake"), timeout=120)
    assert refused.returncode == 2
    assert refused.stderr.strip() == (f"`peerify {command[0]}` needs a folder lake on this machine, not "
                                      "s3://bucket/lake: its uploads, annotator secrets and verification jobs are "
                                      "local files; point PEERIFY_LAKE at a folder")


def test_clean_lake_on_s3_removes_what_a_build_makes_again_and_keeps_the_decisions(s3_lake, with_postgres,
                                                                                  s3_service, capsys):
    lake = Lake(s3_lake)
    lake.write_table("submissions", VENUE, pl.DataFrame({"paper_id": ["P1"]}))
    lake.refresh_catalog()
    DecisionLedger(s3_lake, VENUE).append([decision("c1")])
    assert cli.main(["clean-lake"]) == 0
    out = capsys.readouterr().out
    assert object_keys(s3_service, s3_lake) == ["human_decisions/X.cc__2026/arbitration.jsonl"]
    assert "kept human_decisions/" in out and "submissions/" in out and "peerify.duckdb" in out
    assert not lake.catalog_path.exists()

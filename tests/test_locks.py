"""resources/locks.py between real processes (spawned, not forked, not threads): a Postgres advisory lock when
PEERIFY_POSTGRES_URL is set (the cluster profile, against a real Postgres on loopback), else a local flock; and the
locks built on it: the LLM ledger's per-call claims and the decisions ledger's appends."""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from peerify_dagster.annotation.decisions import DecisionLedger, LedgerError, new_decision
from peerify_dagster.resources import locks
from peerify_dagster.resources.llm_gateway import LLMGateway
from tests.fakes.openai_server import ScriptedOpenAIServer

SPAWN = multiprocessing.get_context("spawn")
JOIN_TIMEOUT_S = 60
VENUE = "X.cc/2026"
MODELS_YAML = """
default_profile: test
models:
  scripted:
    backend: openai
    model: scripted-model
    base_url_env: TEST_OPENAI_URL
    api_key_required: false
    structured_output: json_schema
profiles:
  test:
    fact_tagger: scripted
"""


@pytest.fixture(scope="module")
def postgres_url(postgres_service) -> str:
    return postgres_service.create_database("test_locks")


@pytest.fixture(params=["postgres", "file"])
def backend(request, tmp_path: Path) -> tuple[dict[str, str], Path | None]:
    """(environment, local lock path) of each kind of lock. The Postgres kind gets no local path, so it fails
    (ValueError) unless the advisory lock is what holds."""
    if request.param == "postgres":
        return {"PEERIFY_POSTGRES_URL": request.getfixturevalue("postgres_url")}, None
    return {}, tmp_path / "shared.lock"


@pytest.fixture
def processes() -> Iterator[list[Any]]:
    """Processes a test starts; any still alive at its end are killed (by their PID, through the handle)."""
    started: list[Any] = []
    yield started
    for process in started:
        if process.is_alive():
            process.kill()
        process.join(JOIN_TIMEOUT_S)


def start(processes: list[Any], target: Any, *args: Any) -> Any:
    process = SPAWN.Process(target=target, args=args)
    process.start()
    processes.append(process)
    return process


def join_all(started: list[Any]) -> None:
    for process in started:
        process.join(JOIN_TIMEOUT_S)
        assert process.exitcode == 0, f"worker {process.pid} ended with {process.exitcode}"


# -- workers (run in spawned processes) ----------------------------------------------------------------------------
def _hold_in_turns(env: dict[str, str], name: str, local_path: Path | None, rounds: int, barrier: Any,
                   spans: Any) -> None:
    os.environ.update(env)
    barrier.wait()
    for _ in range(rounds):
        with locks.exclusive(name, local_path):
            entered = time.monotonic()  # one clock for every process of the machine
            time.sleep(0.02)
            spans.put((entered, time.monotonic()))


def _hold_until_killed(env: dict[str, str], name: str, local_path: Path | None, held: Any) -> None:
    os.environ.update(env)
    with locks.exclusive(name, local_path):
        held.set()
        time.sleep(600)


def _call_once(env: dict[str, str], lake: Path, models_file: Path, barrier: Any, outcomes: Any) -> None:
    os.environ.update(env)
    gateway = LLMGateway(lake, models_file=models_file, env=env, request_timeout_s=30)
    barrier.wait()  # both look the call up before either has recorded it
    outcomes.put(gateway.call("scripted", "tag_fact", {"claim": "One claim both workers need."}).cached)


def _append_decisions(env: dict[str, str], lake: Path, annotator: str, contested: list[Any], barrier: Any,
                      refusals: Any) -> None:
    os.environ.update(env)
    ledger = DecisionLedger(lake, VENUE)
    refused = 0
    for number, decision in enumerate(contested):
        ledger.append([arbitration(f"{annotator}-{number}", annotator)])
        barrier.wait()
        try:
            ledger.append([decision])  # the other worker appends this very decision at the same moment
        except LedgerError:
            refused += 1
    refusals.put(refused)


def arbitration(claim_id: str, annotator: str) -> Any:
    return new_decision(venue=VENUE, claim_id=claim_id, source="thread", kind="arbitration", action="decide",
                        choice="third_label", label="Supported", annotator=annotator, queue_version="q1")


# -- the lock itself -----------------------------------------------------------------------------------------------
def test_two_processes_are_never_inside_the_lock_together(backend, processes):
    env, local_path = backend
    barrier, spans = SPAWN.Barrier(2), SPAWN.Queue()
    for _ in range(2):
        start(processes, _hold_in_turns, env, "test one at a time", local_path, 12, barrier, spans)
    held = sorted(spans.get(timeout=JOIN_TIMEOUT_S) for _ in range(24))
    join_all(processes)
    overlaps = [(first, second) for first, second in zip(held, held[1:], strict=False) if second[0] < first[1]]
    assert overlaps == []


def test_a_killed_holder_releases_the_lock(backend, processes, monkeypatch):
    env, local_path = backend
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    held = SPAWN.Event()
    holder = start(processes, _hold_until_killed, env, "test killed holder", local_path, held)
    assert held.wait(JOIN_TIMEOUT_S)
    with pytest.raises(locks.LockTimeout, match="lock 'test killed holder'.*not acquired within 0.3 s"):
        with locks.exclusive("test killed holder", local_path, timeout_s=0.3):
            pass
    holder.kill()
    holder.join(JOIN_TIMEOUT_S)
    waiting_since = time.monotonic()
    with locks.exclusive("test killed holder", local_path, timeout_s=20):
        waited = time.monotonic() - waiting_since
    assert waited < 5


def test_threads_of_one_process_exclude_each_other_on_its_one_connection(postgres_url, monkeypatch):
    # Postgres advisory locks are re-entrant within a session, and a process's threads share its one session.
    import psycopg2

    monkeypatch.setenv("PEERIFY_POSTGRES_URL", postgres_url)
    spans: list[tuple[float, float]] = []
    inside_other_locks = threading.Barrier(3, timeout=JOIN_TIMEOUT_S)

    def take_turns() -> None:
        for _ in range(8):
            with locks.exclusive("test threads", None):
                entered = time.monotonic()
                time.sleep(0.005)
                spans.append((entered, time.monotonic()))

    def hold_another(number: int) -> None:
        with locks.exclusive(f"test threads {number}", None):
            inside_other_locks.wait()  # all three held at once
            inside_other_locks.wait()  # counted below

    threads = [threading.Thread(target=take_turns) for _ in range(3)]
    threads += [threading.Thread(target=hold_another, args=(number,)) for number in range(2)]
    for thread in threads:
        thread.start()
    inside_other_locks.wait()
    with psycopg2.connect(locks.psycopg2_dsn(postgres_url)) as probe, probe.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid <> pg_backend_pid()")
        advisory_locks = cursor.fetchone()[0]
        cursor.execute("SELECT count(DISTINCT pid) FROM pg_locks WHERE locktype = 'advisory'")
        sessions = cursor.fetchone()[0]
    inside_other_locks.wait()
    for thread in threads:
        thread.join(JOIN_TIMEOUT_S)
    ordered = sorted(spans)
    assert len(ordered) == 24
    assert [pair for pair in zip(ordered, ordered[1:], strict=False) if pair[1][0] < pair[0][1]] == []
    assert advisory_locks >= 2 and sessions == 1  # every lock of this process on its one connection


def test_without_postgres_a_lock_needs_its_local_file():
    with pytest.raises(ValueError, match="lock 'nowhere' has no local lock file, so it needs PEERIFY_POSTGRES_URL"):
        with locks.exclusive("nowhere", None):
            pass


def test_the_advisory_key_and_the_dsn_are_stable():
    # Every worker, whatever its Python, must compute the same key for a name.
    assert locks.advisory_key("llm call abc") == locks.advisory_key("llm call abc") == 7748497426078739228
    assert locks.advisory_key("llm call abd") != locks.advisory_key("llm call abc")
    assert locks.psycopg2_dsn("postgresql+psycopg2://u:p@h:5/db") == "postgresql://u:p@h:5/db"
    assert locks.psycopg2_dsn("postgresql://u:p@h:5/db") == "postgresql://u:p@h:5/db"


# -- what the lock guards ------------------------------------------------------------------------------------------
def test_two_workers_needing_one_call_make_it_once(postgres_url, processes, tmp_path):
    server = ScriptedOpenAIServer().start()
    plain_answer = server.responder
    server.responder = lambda request: (time.sleep(1.0), plain_answer(request))[1]  # long enough to overlap
    try:
        models_file = tmp_path / "models.yaml"
        models_file.write_text(MODELS_YAML, encoding="utf-8")
        env = {"PEERIFY_POSTGRES_URL": postgres_url, "TEST_OPENAI_URL": server.base_url}
        barrier, outcomes = SPAWN.Barrier(2), SPAWN.Queue()
        for _ in range(2):
            start(processes, _call_once, env, tmp_path / "lake", models_file, barrier, outcomes)
        cached = sorted(outcomes.get(timeout=JOIN_TIMEOUT_S) for _ in range(2))
        join_all(processes)
        assert server.request_count == 1
    finally:
        server.stop()
    assert cached == [False, True]  # one made the call, the other was answered from the ledger
    assert not (tmp_path / "lake" / "llm_calls" / ".claims").exists()  # the claim was Postgres's, not a file's


def test_decisions_appended_by_two_workers_are_each_kept_once(postgres_url, processes, tmp_path, monkeypatch):
    monkeypatch.setenv("PEERIFY_POSTGRES_URL", postgres_url)
    contested = [arbitration(f"contested-{number}", "carol") for number in range(15)]
    barrier, refusals = SPAWN.Barrier(2), SPAWN.Queue()
    for annotator in ("alice", "bob"):
        start(processes, _append_decisions, {"PEERIFY_POSTGRES_URL": postgres_url}, tmp_path, annotator, contested,
              barrier, refusals)
    refused = sum(refusals.get(timeout=JOIN_TIMEOUT_S) for _ in range(2))
    join_all(processes)
    contents = DecisionLedger(tmp_path, VENUE).read()
    assert contents.problems == []
    ids = [decision.decision_id for decision in contents.decisions]
    assert len(ids) == len(set(ids)) == 15 + 15 + 15  # each worker's own, and every contested decision once
    assert refused == 15  # the second append of each contested decision saw the first

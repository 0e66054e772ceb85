"""Verifying an input again: one forum of the sample (every call answered by its recording) verified by `peerify
verify`, then again by the command and by the web app's verify job (its worker's child process): both read the result
back from the lake, starting no Dagster run. A setting changed since rebuilds every table through the graph, the
manuscript answered from the parse cache (Docling converts nothing); and the record of a verification holds only
while every table it left is untouched, and never when the LLM cache is to be refreshed."""

from __future__ import annotations

import os
import time

import dagster as dg
import pytest

from peerify_dagster.cli.build import check_configurations
from peerify_dagster.cli.verification import READ_BACK_USAGE, Verified, prepare
from peerify_dagster.domain.uploads import VerificationRequest
from peerify_dagster.resources.lake import Lake
from peerify_dagster.verification_jobs import DONE, FAILED, JobStore, Worker
from tests.cli_support import fresh_home
from tests.test_parse_cache import conversions  # noqa: F401 - a fixture: Docling's conversions, counted
from tests.test_verify import REGISTRY, VERDICT_LINE, made_live, venue_of, verify

FORUM = ("--venue", "sample", "--forum", "Rk7bWq2NzA")
READ_BACK = "was verified before from the same input, code, models and settings"


@pytest.fixture(scope="module")
def lake(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("verify-again")
    env = {"PEERIFY_LAKE": str(folder / "lake"), "PEERIFY_VENUES": str(REGISTRY),
           "DAGSTER_HOME": str(fresh_home(folder / "home"))}
    first = verify(env, *FORUM)
    assert first.code == 0 and READ_BACK not in first.stderr, first.stderr[-3000:]
    return {"env": env, "root": folder / "lake", "home": folder / "home", "first": first}


def runs_in(home) -> int:  # noqa: ANN001 - a Path
    with dg.DagsterInstance.from_config(str(home)) as instance:
        return instance.get_runs_count()


def test_the_command_again_reads_the_result_back_without_a_run(lake):
    runs = runs_in(lake["home"])
    again = verify(lake["env"], *FORUM)
    assert again.code == 0 and READ_BACK in again.stderr, again.stderr[-3000:]
    assert READ_BACK_USAGE in again.stderr and made_live(again) == 0
    assert runs_in(lake["home"]) == runs  # no Dagster run started
    assert venue_of(again) == venue_of(lake["first"])
    assert VERDICT_LINE.findall(again.stdout) == VERDICT_LINE.findall(lake["first"].stdout)
    assert len(VERDICT_LINE.findall(again.stdout)) >= 10


def test_the_web_job_again_reads_the_result_back_in_its_child_process(lake, monkeypatch):
    for name, value in lake["env"].items():  # the worker's child inherits them (PEERIFY_LAKE is set by the worker)
        monkeypatch.setenv(name, value)
    runs, store = runs_in(lake["home"]), JobStore(lake["root"])
    worker = Worker(store, lake["root"], poll_s=0.1)
    worker.start()
    try:
        job = store.submit(VerificationRequest(venue="sample", forum="Rk7bWq2NzA"))
        worker.wake()
        deadline = time.monotonic() + 300
        while (done := store.get(job["id"]))["status"] not in (DONE, FAILED) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        worker.stop()
    assert (done["status"], done["usage"], done["venue"]) == (DONE, READ_BACK_USAGE, venue_of(lake["first"])), done
    assert done["claims"] == len(VERDICT_LINE.findall(lake["first"].stdout))
    assert runs_in(lake["home"]) == runs


def test_the_record_holds_while_the_tables_are_untouched_and_never_when_calls_are_refreshed(lake, monkeypatch):
    for name, value in lake["env"].items():
        monkeypatch.setenv(name, value)
    request = VerificationRequest(venue="sample", forum="Rk7bWq2NzA")
    prepared = prepare(request)
    key, the_lake = prepared.venue.key, Lake(lake["root"])
    verified = Verified.of(request, prepared, check_configurations(key, None))
    assert verified.holds(the_lake, key)
    claims = the_lake.table_path("review_claims", key)
    written = claims.stat()
    os.utime(claims, ns=(written.st_atime_ns, written.st_mtime_ns + 1))  # rewritten since, say by a failed run
    assert not verified.holds(the_lake, key)
    os.utime(claims, ns=(written.st_atime_ns, written.st_mtime_ns))
    assert verified.holds(the_lake, key)
    monkeypatch.setenv("PEERIFY_LLM_CACHE_MODE", "refresh")
    assert not verified.holds(the_lake, key)


def test_a_setting_changed_rebuilds_every_table_with_the_manuscript_from_the_parse_cache(lake, conversions):  # noqa: F811
    runs = runs_in(lake["home"])
    # The default cache mode named: nothing differs, but a setting the record did not see is one it cannot vouch for.
    rebuilt = verify({**lake["env"], "PEERIFY_LLM_CACHE_MODE": "use"}, *FORUM)
    assert rebuilt.code == 0 and READ_BACK not in rebuilt.stderr, rebuilt.stderr[-3000:]
    assert runs_in(lake["home"]) > runs and made_live(rebuilt) == 0
    assert conversions == []  # the forum's PDF was parsed by the first verification: answered from the parse cache
    assert VERDICT_LINE.findall(rebuilt.stdout) == VERDICT_LINE.findall(lake["first"].stdout)

"""The call ledger under real faults: rows durable per call, kill -9 mid-batch, two processes wanting the same
call, compaction next to a reader and after a crash, and a truncated segment quarantined and reported.

Model calls go over real HTTP to the loopback OpenAI-protocol server, which counts requests; other processes
are real subprocesses running the gateway on the same lake.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import pyarrow.parquet as pq
import pytest

from peerify_dagster.resources.lake import Lake
from peerify_dagster.resources.llm_gateway import CallLedger, LLMGateway
from tests.fakes.openai_server import ScriptedOpenAIServer

MODELS_YAML = """
default_profile: test
models:
  scripted-gpt:
    backend: openai
    model: scripted-model
    base_url_env: TEST_OPENAI_URL
    api_key_env: TEST_OPENAI_KEY
    max_concurrency: 2
profiles:
  test:
    fact_tagger: scripted-gpt
"""

# A gateway in another process: tags each claim of argv[3] (a JSON list), printing one JSON line per result.
# It touches argv[4] (when given) right before its first call, so the test knows it is about to call.
WORKER = """
import json, pathlib, sys
from peerify_dagster.resources.llm_gateway import LLMGateway
lake, models, claims = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
with LLMGateway(lake, models_file=models, request_timeout_s=60) as gateway:
    for claim in claims:
        if len(sys.argv) > 4:
            pathlib.Path(sys.argv[4]).touch()
        result = gateway.call("fact_tagger", "tag_fact", {"claim": claim})
        print(json.dumps({"call_id": result.call_id, "cached": result.cached}), flush=True)
"""


@pytest.fixture
def server() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer() as scripted:
        yield scripted


def env_for(server: ScriptedOpenAIServer) -> dict[str, str]:
    """Everything a worker needs, and nothing from the caller's environment."""
    return {"PATH": os.environ.get("PATH", ""), "TEST_OPENAI_URL": server.base_url, "TEST_OPENAI_KEY": "sk-test"}


def worker(lake: Path, models_file: Path, server: ScriptedOpenAIServer, claims: list[str],
           marker: Path | None = None) -> subprocess.Popen[str]:
    arguments = [sys.executable, "-c", WORKER, str(lake), str(models_file), json.dumps(claims)]
    return subprocess.Popen(arguments + ([str(marker)] if marker else []), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env_for(server))


def gateway(lake: Path, models_file: Path, server: ScriptedOpenAIServer) -> LLMGateway:
    return LLMGateway(lake, models_file=models_file, env=env_for(server), request_timeout_s=60)


def ledger_rows(lake: Path) -> list[tuple[str, datetime]]:
    """(call_id, created_at) of every row a DuckDB reader sees."""
    return duckdb.sql(f"select call_id, created_at from read_parquet('{lake / 'llm_calls' / '*.parquet'}')").fetchall()


def synthetic_row(index: int) -> dict[str, Any]:
    return {
        "call_id": f"{index:064x}", "role": "fact_tagger", "prompt_id": "tag_fact", "prompt_hash": "0" * 64,
        "backend": "openai", "model": "scripted-gpt", "model_id": "scripted-model", "request": "{}",
        "raw_response": '{"claim_kind": "factual"}', "parsed": '{"claim_kind": "factual"}',
        "parse_ok": True, "label": None, "tokens_in": 1, "tokens_out": 1, "latency_s": 0.1, "cost_usd": 0.0,
        "error": None, "attempts": 1, "created_at": datetime.now(UTC), "run_id": "test",
    }


# ---------------------------------------------------------------------------------------------
# Durable per call
# ---------------------------------------------------------------------------------------------
def test_a_calls_row_is_readable_from_another_process_as_soon_as_the_call_returns(
    tmp_path: Path, models_file: Path, server: ScriptedOpenAIServer
) -> None:
    lake = tmp_path / "lake"
    with gateway(lake, models_file, server) as open_gateway:
        result = open_gateway.call("fact_tagger", "tag_fact", {"claim": "The paper omits ImageNet."})
        reader = subprocess.run(
            [sys.executable, "-c", "import duckdb, sys; print(duckdb.sql(f\"select call_id from read_parquet("
             "'{sys.argv[1]}/llm_calls/*.parquet')\").fetchall())", str(lake)],
            capture_output=True, text=True, check=True, env={"PATH": os.environ.get("PATH", "")},
        )
        assert result.call_id in reader.stdout
        assert not list((lake / "llm_calls").glob(".*.tmp"))


def test_kill_9_mid_batch_loses_only_the_call_in_flight(
    tmp_path: Path, models_file: Path, server: ScriptedOpenAIServer
) -> None:
    lake = tmp_path / "lake"
    release = threading.Event()

    def answer_unless_stuck(request: dict[str, Any]) -> str:
        if "stuck" in json.dumps(request):
            release.wait(60)
        return server.default_answer(request)

    server.responder = answer_unless_stuck
    claims = ["Claim one.", "Claim two.", "Claim three.", "Claim stuck."]
    process = worker(lake, models_file, server, claims)
    try:
        finished = [json.loads(process.stdout.readline()) for _ in range(3)]
        deadline = time.monotonic() + 30
        while server.request_count < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.request_count == 4  # the fourth call is in flight
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        release.set()
        process.kill()
    assert {row[0] for row in ledger_rows(lake)} == {result["call_id"] for result in finished}

    with gateway(lake, models_file, server) as again:
        results = [again.call("fact_tagger", "tag_fact", {"claim": claim}) for claim in claims]
    assert [result.cached for result in results] == [True, True, True, False]
    assert server.request_count == 5  # only the killed call was made again; its claim did not block it


# ---------------------------------------------------------------------------------------------
# Two processes, one call
# ---------------------------------------------------------------------------------------------
def test_two_processes_wanting_the_same_call_make_it_once(
    tmp_path: Path, models_file: Path, server: ScriptedOpenAIServer
) -> None:
    lake = tmp_path / "lake"
    markers = [tmp_path / "first-is-calling", tmp_path / "second-is-calling"]

    def answer_once_both_are_calling(request: dict[str, Any]) -> str:
        deadline = time.monotonic() + 60
        while not all(marker.exists() for marker in markers) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # the second process is now waiting on the first one's claim
        return server.default_answer(request)

    server.responder = answer_once_both_are_calling
    processes = [worker(lake, models_file, server, ["The same claim."], marker) for marker in markers]
    outputs = [process.communicate(timeout=120) for process in processes]
    assert [process.returncode for process in processes] == [0, 0], [error for _, error in outputs]
    results = [json.loads(stdout) for stdout, _ in outputs]
    assert server.request_count == 1
    assert sorted(result["cached"] for result in results) == [False, True]
    assert results[0]["call_id"] == results[1]["call_id"]
    assert [row[0] for row in ledger_rows(lake)] == [results[0]["call_id"]]


# ---------------------------------------------------------------------------------------------
# Compaction
# ---------------------------------------------------------------------------------------------
def test_compaction_merges_per_call_segments_without_losing_or_repeating_rows(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    ledger = CallLedger(lake)
    sources = [ledger.append(synthetic_row(index)) for index in range(6)]
    copies = {path: path.read_bytes() for path in sources[:2]}
    before = sorted(ledger_rows(lake))
    [merged] = ledger.compact()
    assert sorted(ledger_rows(lake)) == before and not any(path.exists() for path in sources)
    assert merged.name.startswith("part-")

    # A crash after the merged segment was written but before its sources were removed leaves both.
    for path, content in copies.items():
        path.write_bytes(content)
    assert len(ledger_rows(lake)) == 8
    _, shown = Lake(lake).query("select call_id from llm_calls")  # the catalog's view shows each row once
    assert sorted(shown) == sorted((row[0],) for row in before)
    fresh = CallLedger(lake)
    assert sorted(fresh.successful_call_ids()) == sorted(row[0] for row in before)
    assert fresh.compact() == []  # the leftovers held nothing new
    assert sorted(ledger_rows(lake)) == before
    assert not list((lake / "llm_calls").glob("call-*.parquet"))


def test_a_reader_never_misses_a_row_while_segments_are_compacted(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    writer = CallLedger(lake, compact_every=3)  # compacts after every third append
    committed: list[str] = []
    misses: list[set[str]] = []
    stop = threading.Event()

    def read_repeatedly() -> None:
        while not stop.is_set():
            expected = set(committed)
            missing = expected - set(CallLedger(lake).successful_call_ids())
            if missing:
                misses.append(missing)

    reader = threading.Thread(target=read_repeatedly)
    reader.start()
    try:
        for index in range(60):
            row = synthetic_row(index)
            writer.append(row)
            committed.append(row["call_id"])
    finally:
        stop.set()
        reader.join(timeout=60)
    assert misses == []
    assert len(ledger_rows(lake)) == 60 and len(set(ledger_rows(lake))) == 60


# ---------------------------------------------------------------------------------------------
# Quarantine
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("keep_bytes", ["half", 3])
def test_truncated_segment_is_quarantined_and_its_calls_named(
    tmp_path: Path, models_file: Path, server: ScriptedOpenAIServer, keep_bytes: str | int,
    caplog: pytest.LogCaptureFixture,
) -> None:
    lake = tmp_path / "lake"
    claims = ["Claim one.", "Claim two.", "Claim three."]
    with gateway(lake, models_file, server) as recording:
        recorded = [recording.call("fact_tagger", "tag_fact", {"claim": claim}).call_id for claim in claims]
    [segment] = [path for path in (lake / "llm_calls").glob("part-*.parquet") if pq.read_metadata(path).num_rows]
    size = segment.stat().st_size
    with open(segment, "r+b") as handle:
        handle.truncate(size // 2 if keep_bytes == "half" else keep_bytes)

    with caplog.at_level(logging.WARNING), gateway(lake, models_file, server) as after:
        [record] = after.quarantined
        assert after.call("fact_tagger", "tag_fact", {"claim": claims[0]}).cached is False
    assert record.segment == segment and not segment.exists()
    assert record.moved_to == lake / "llm_calls" / "quarantine" / segment.name and record.moved_to.is_file()
    assert "\n" not in record.reason and "Traceback" not in record.reason
    line = record.describe()
    assert "\n" not in line and str(segment) in line
    if keep_bytes == "half":
        assert list(record.call_ids) == recorded
        assert f"it held 3 calls ({recorded[0]}" in line
    else:
        assert record.call_ids == () and "no call id could be read" in line
    assert line in caplog.text
    if keep_bytes == "half":  # re-making a call it held is said, not silent
        assert f"making call {recorded[0]}" in caplog.text
    assert server.request_count == 4
    assert {row[0] for row in ledger_rows(lake)} == {recorded[0]}  # the folder reads again


def test_compaction_quarantines_an_unreadable_per_call_segment(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    ledger = CallLedger(lake)
    ledger.append(synthetic_row(1))
    bad = ledger.append(synthetic_row(2))
    bad.write_bytes(bad.read_bytes()[: bad.stat().st_size // 2])
    [merged] = ledger.compact()
    [record] = ledger.quarantined
    assert record.segment == bad and record.call_ids == (synthetic_row(2)["call_id"],)
    assert [row[0] for row in ledger_rows(lake)] == [synthetic_row(1)["call_id"]] and merged.exists()

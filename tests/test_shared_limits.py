"""Model limits shared by every worker through Redis (resources/llm_gateway/shared_limits.py, a real Redis on
loopback), seen from the loopback OpenAI server's side across two spawned processes; and one base URL per vLLM
model (models.yaml's VLLM_BASE_URL_<MODEL>, the preflight refusing two models on one server)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from peerify_dagster.resources.llm_gateway import LLMGateway, ModelRegistry, PreflightError
from peerify_dagster.resources.llm_gateway.shared_limits import KEY_PREFIX, SharedConcurrencyLimit
from tests.cluster_support import JOIN_TIMEOUT_S, SPAWN, spawned_workers
from tests.fakes.openai_server import ScriptedOpenAIServer

REDIS_DB = 5  # this module's own database
MODELS_YAML = """
default_profile: test
models:
  one-at-a-time:
    backend: openai
    model: scripted-model
    base_url_env: TEST_SERIAL_URL
    api_key_required: false
    max_concurrency: 1
  spaced:
    backend: openai
    model: scripted-model
    base_url_env: TEST_SPACED_URL
    api_key_required: false
    max_concurrency: 4
    requests_per_minute: 60
profiles:
  test:
    fact_tagger: one-at-a-time
"""
SERIAL_CALLS, SPACED_CALLS = 4, 2  # per worker


@pytest.fixture(scope="module")
def redis_url(redis_service) -> Iterator[str]:
    url = redis_service.url_for(REDIS_DB)
    yield url
    redis.Redis.from_url(url).flushdb()


class TimedServer(ScriptedOpenAIServer):
    """Records when each request arrived and when its answer was ready, on this process's clock."""

    def __init__(self, answer_after_s: float):
        super().__init__()
        self.answer_after_s = answer_after_s
        self.spans: list[tuple[float, float]] = []

    def default_answer(self, request: Any) -> str:
        arrived = time.monotonic()
        time.sleep(self.answer_after_s)
        with self._lock:
            self.spans.append((arrived, time.monotonic()))
        return super().default_answer(request)


def _call_both_models(env: dict[str, str], lake: Path, models_file: Path, worker: str, barrier: Any) -> None:
    os.environ.update(env)
    gateway = LLMGateway(lake, models_file=models_file, env=env, request_timeout_s=30)
    for model, calls in (("one-at-a-time", SERIAL_CALLS), ("spaced", SPACED_CALLS)):
        barrier.wait()  # the two workers start each batch together
        results = gateway.map(model, "tag_fact", [{"claim": f"{model} {worker}.{number}."} for number in range(calls)])
        assert [result.error for result in results] == [None] * calls


def _hold_slot(url: str, model: str, max_concurrency: int, lease_s: float, held: Any) -> None:
    with SharedConcurrencyLimit(url, model, max_concurrency, lease_s=lease_s):
        held.set()
        time.sleep(600)


@pytest.fixture(scope="module")
def two_workers(redis_url, tmp_path_factory) -> dict[str, list[tuple[float, float]]]:
    """Two spawned workers sharing the Redis, each calling both models; the spans each model's server saw."""
    work = tmp_path_factory.mktemp("shared_limits")
    models_file = work / "models.yaml"
    models_file.write_text(MODELS_YAML, encoding="utf-8")
    with TimedServer(answer_after_s=0.15) as serial, TimedServer(answer_after_s=0.0) as spaced:
        env = {"PEERIFY_REDIS_URL": redis_url, "TEST_SERIAL_URL": serial.base_url, "TEST_SPACED_URL": spaced.base_url}
        barrier = SPAWN.Barrier(2)
        with spawned_workers(_call_both_models, [(env, work / "lake", models_file, name, barrier)
                                                 for name in ("a", "b")]):
            pass  # each worker makes its calls and ends
    return {"one-at-a-time": sorted(serial.spans), "spaced": sorted(spaced.spans)}


def test_max_concurrency_holds_across_two_workers(two_workers, redis_url):
    spans = two_workers["one-at-a-time"]
    assert len(spans) == 2 * SERIAL_CALLS
    overlapping = [(first, second) for first, second in zip(spans, spans[1:], strict=False) if second[0] < first[1]]
    assert overlapping == []
    assert redis.Redis.from_url(redis_url).zcard(f"{KEY_PREFIX}:one-at-a-time:slots") == 0  # every slot freed


def test_requests_per_minute_spaces_the_starts_of_two_workers(two_workers):
    starts = [arrived for arrived, _ in two_workers["spaced"]]
    assert len(starts) == 2 * SPACED_CALLS
    gaps = [later - earlier for earlier, later in zip(starts, starts[1:], strict=False)]
    # 60 a minute: one start a second, whichever worker makes it (less the HTTP client's own jitter on a busy machine)
    assert min(gaps) > 0.6


def test_a_killed_holders_slot_expires_and_a_live_one_is_kept(redis_url):
    lease_s, model = 1.0, "killed-holder"
    held = SPAWN.Event()
    holder = SPAWN.Process(target=_hold_slot, args=(redis_url, model, 2, lease_s, held))
    holder.start()
    limit = SharedConcurrencyLimit(redis_url, model, 2, lease_s=lease_s)
    entered = threading.Event()

    def wait_for_a_slot() -> None:
        with limit:
            entered.set()

    try:
        assert held.wait(JOIN_TIMEOUT_S)
        with limit:  # the other slot, held here (renewing, this keeps the slots' key alive)
            waiter = threading.Thread(target=wait_for_a_slot, daemon=True)
            waiter.start()
            assert not entered.wait(2.5 * lease_s)  # both holders renew their leases past their end
            holder.kill()
            holder.join(JOIN_TIMEOUT_S)
            killed_at = time.monotonic()
            assert entered.wait(10)
            assert time.monotonic() - killed_at < lease_s + 1.0  # free once the dead holder's lease ended
            waiter.join(10)
    finally:
        if holder.is_alive():
            holder.kill()
            holder.join(JOIN_TIMEOUT_S)


# -- one base URL per vLLM model -----------------------------------------------------------------------------------
def test_each_vllm_model_reads_its_own_base_url(tmp_path):
    registry = ModelRegistry.load()  # the shipped models.yaml
    qwen3_8b = registry.model("qwen3-8b")
    own, shared = "http://gpu-a:8000/v1", "http://gpu-b:8000/v1"
    assert qwen3_8b.resolved_base_url({"VLLM_BASE_URL_QWEN3_8B": own, "VLLM_BASE_URL": shared}) == own
    assert qwen3_8b.resolved_base_url({"VLLM_BASE_URL": shared}) == shared  # its own unset: the shared one
    defaults = {registry.model(name).resolved_base_url({}) for name in ("qwen3-4b", "qwen3-8b", "qwen2.5-7b")}
    assert len(defaults) == 3  # unset, each has its own port
    with ScriptedOpenAIServer() as server:
        env = {"VLLM_BASE_URL_QWEN3_8B": server.base_url, "VLLM_BASE_URL": "http://127.0.0.1:9/v1"}
        with LLMGateway(tmp_path / "lake", env=env, request_timeout_s=10) as gateway:
            gateway.call("qwen3-8b", "tag_fact", {"claim": "A claim."})
        assert [request["model"] for request in server.requests] == ["Qwen/Qwen3-8B"]


def test_the_preflight_refuses_two_vllm_models_on_one_server(tmp_path):
    keys = {"OPENAI_API_KEY": "sk-test", "ANTHROPIC_API_KEY": "sk-test"}
    shared = "http://gpu:8000/v1"

    def preflight(**env: str) -> dict[str, list[str]]:
        gateway = LLMGateway(tmp_path / "lake", profile="paper", env={**keys, **env})
        return gateway.preflight(roles=["verifiers"])  # qwen3-8b and qwen2.5-7b among them

    with pytest.raises(PreflightError) as refused:
        preflight(VLLM_BASE_URL=shared)
    [problem] = refused.value.problems
    assert problem.startswith("models 'qwen2.5-7b' (Qwen/Qwen2.5-7B-Instruct, from VLLM_BASE_URL) and 'qwen3-8b' "
                              f"(Qwen/Qwen3-8B, from VLLM_BASE_URL) resolve to the same base URL {shared}, but a vLLM "
                              "server serves one model")
    assert "VLLM_BASE_URL_QWEN2_5_7B, VLLM_BASE_URL_QWEN3_8B" in problem
    with pytest.raises(PreflightError, match="'qwen3-8b'.*from VLLM_BASE_URL_QWEN3_8B"):
        preflight(VLLM_BASE_URL=shared, VLLM_BASE_URL_QWEN3_8B=shared + "/")  # its own variable, the same server
    assert "verifiers" in preflight(VLLM_BASE_URL=shared, VLLM_BASE_URL_QWEN3_8B="http://gpu-2:8000/v1")


def test_the_same_weights_may_share_one_server(tmp_path):
    models_file = tmp_path / "models.yaml"
    models_file.write_text("""
models:
  greedy: {backend: openai, model: Qwen/Qwen3-4B, base_url: "http://gpu:8000/v1", one_model_per_server: true}
  sampled: {backend: openai, model: Qwen/Qwen3-4B, base_url: "http://gpu:8000/v1", one_model_per_server: true,
            decoding: {temperature: 0.7}}
  other: {backend: openai, model: Qwen/Qwen3-8B, base_url: "http://gpu:8001/v1", one_model_per_server: true}
profiles: {test: {verifiers: [greedy, sampled, other]}}
default_profile: test
""", encoding="utf-8")
    registry = ModelRegistry.load(models_file, env={})
    assert registry.shared_server_problems(["greedy", "sampled", "other"], {}) == []

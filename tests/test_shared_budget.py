"""A run's budget holds across every process of the run (limits.Budget with shared_limits.SharedRunSpend, a real
Redis on loopback): two spawned processes of one run id, each within the budget alone but not together, against the
loopback OpenAI server; without Redis (the control) they overshoot it. And the run's counter is seeded from the
ledger when the run spent before the counter existed."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from peerify_dagster.resources.llm_gateway import BudgetExceeded, LLMGateway
from peerify_dagster.resources.llm_gateway.shared_limits import RUN_SPEND_PREFIX
from tests.cluster_support import JOIN_TIMEOUT_S, SPAWN, spawned_workers
from tests.fakes.openai_server import ScriptedOpenAIServer

REDIS_DB = 6  # this module's own database
MODEL = "scripted"
MODELS_YAML = f"""
default_profile: test
models:
  {MODEL}:
    backend: openai
    model: scripted-model
    base_url_env: TEST_BUDGET_URL
    api_key_required: false
    max_concurrency: 4
profiles:
  test:
    fact_tagger: {MODEL}
"""
CALLS_PER_WORKER = 3


def _claim(worker: str, number: int) -> dict[str, str]:
    return {"claim": f"Claim {worker} {number}."}  # the same word count, so every call spends the same tokens


@pytest.fixture(scope="module")
def redis_url(redis_service) -> Iterator[str]:
    url = redis_service.url_for(REDIS_DB)
    yield url
    redis.Redis.from_url(url).flushdb()


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer() as running:
        yield running


@pytest.fixture(scope="module")
def models_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("shared_budget") / "models.yaml"
    path.write_text(MODELS_YAML, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def tokens_per_call(server, models_file, tmp_path_factory) -> int:
    lake = tmp_path_factory.mktemp("calibration")
    with LLMGateway(lake, models_file=models_file, env={"TEST_BUDGET_URL": server.base_url}) as gateway:
        result = gateway.call(MODEL, "tag_fact", _claim("calibration", 0))
    return result.tokens_in + result.tokens_out


def _spend_in_one_run(env: dict[str, str], lake: Path, models_file: Path, run_id: str, max_tokens: int, worker: str,
                      opened: Any, first_done: Any, outcomes: Any) -> None:
    """Open the run's budget (both workers before either calls), then call: worker "a" first, "b" once it is done."""
    os.environ.update(env)
    gateway = LLMGateway(lake, models_file=models_file, env=env, run_id=run_id, max_tokens=max_tokens,
                         request_timeout_s=30)
    opened.wait()
    if worker == "b":
        assert first_done.wait(JOIN_TIMEOUT_S)
    calls, refusal = 0, None
    try:
        for number in range(CALLS_PER_WORKER):
            gateway.call(MODEL, "tag_fact", _claim(worker, number))
            calls += 1
    except BudgetExceeded as error:
        refusal = str(error)
    finally:
        outcomes.put((worker, calls, refusal))
        first_done.set()


def _two_workers(env: dict[str, str], lake: Path, models_file: Path, run_id: str,
                 max_tokens: int) -> dict[str, tuple[int, str | None]]:
    """Each worker's live calls and refusal (None when it made all of its calls)."""
    opened, first_done, outcomes = SPAWN.Barrier(2), SPAWN.Event(), SPAWN.Queue()
    with spawned_workers(_spend_in_one_run, [(env, lake, models_file, run_id, max_tokens, name, opened, first_done,
                                              outcomes) for name in ("a", "b")]) as workers:
        results = [outcomes.get(timeout=JOIN_TIMEOUT_S) for _ in workers]
    return {name: (calls, refusal) for name, calls, refusal in results}


def test_two_workers_of_one_run_share_its_budget(server, models_file, tokens_per_call, redis_url, tmp_path):
    # One worker's calls stay under it; both workers' together would pass it.
    max_tokens = CALLS_PER_WORKER * tokens_per_call + 1
    before = len(server.requests)
    outcomes = _two_workers({"PEERIFY_REDIS_URL": redis_url, "TEST_BUDGET_URL": server.base_url}, tmp_path / "lake",
                            models_file, "shared-run", max_tokens)
    assert outcomes["a"] == (CALLS_PER_WORKER, None)
    calls_b, refusal = outcomes["b"]
    # Calls start while the run is under its budget: the one that passes it is the last, ceil(max/per call) in all.
    assert calls_b == 1
    assert refusal is not None and f"reached the run budget of {max_tokens} tokens" in refusal
    assert refusal.startswith("run shared-run stopped:")
    assert len(server.requests) - before == -(-max_tokens // tokens_per_call) == CALLS_PER_WORKER + 1
    counter = redis.Redis.from_url(redis_url).hgetall(f"{RUN_SPEND_PREFIX}:shared-run")
    assert int(counter[b"tokens"]) == (CALLS_PER_WORKER + 1) * tokens_per_call


def test_without_redis_each_worker_counts_only_its_own_spend(server, models_file, tokens_per_call, tmp_path):
    """The control: the same two workers without a shared counter overshoot the run's budget together."""
    max_tokens = CALLS_PER_WORKER * tokens_per_call + 1
    before = len(server.requests)
    outcomes = _two_workers({"TEST_BUDGET_URL": server.base_url}, tmp_path / "lake", models_file, "local-run",
                            max_tokens)
    assert outcomes == {"a": (CALLS_PER_WORKER, None), "b": (CALLS_PER_WORKER, None)}
    assert (len(server.requests) - before) * tokens_per_call > max_tokens


def test_the_counter_starts_from_what_the_ledger_holds_for_the_run(server, models_file, tokens_per_call, redis_url,
                                                                   tmp_path, monkeypatch):
    lake, run_id = tmp_path / "lake", "reexecuted-run"
    env = {"TEST_BUDGET_URL": server.base_url}
    with LLMGateway(lake, models_file=models_file, env=env, run_id=run_id) as before_redis:
        for number in range(CALLS_PER_WORKER):  # steps of the run that spent before Redis was consulted
            before_redis.call(MODEL, "tag_fact", _claim("early", number))
    monkeypatch.setenv("PEERIFY_REDIS_URL", redis_url)
    counter_key = f"{RUN_SPEND_PREFIX}:{run_id}"
    client = redis.Redis.from_url(redis_url)
    max_tokens = CALLS_PER_WORKER * tokens_per_call + 1
    with LLMGateway(lake, models_file=models_file, env=env, run_id=run_id, max_tokens=max_tokens) as gateway:
        assert int(client.hget(counter_key, "tokens") or 0) == CALLS_PER_WORKER * tokens_per_call
        gateway.call(MODEL, "tag_fact", _claim("late", 0))  # under the budget by one token: allowed
        with pytest.raises(BudgetExceeded, match=f"reached the run budget of {max_tokens} tokens"):
            gateway.call(MODEL, "tag_fact", _claim("late", 1))
    # Reopening (another step of the run) raises the counter to the ledger's spend, never adds it a second time.
    spent = (CALLS_PER_WORKER + 1) * tokens_per_call
    with LLMGateway(lake, models_file=models_file, env=env, run_id=run_id, max_tokens=max_tokens):
        pass
    assert int(client.hget(counter_key, "tokens") or 0) == spent
    assert 0 < client.ttl(counter_key) <= 3 * 24 * 3600

"""Models with `batch: true`: `LLMGateway.map` through the OpenAI and Anthropic batch APIs, with the real SDKs over
HTTP against the loopback batch server (tests/fakes/batch_server.py), compared with the same calls made
one by one against the synchronous fakes. Polling waits go through a recorder that does not sleep."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from peerify_dagster.cli import main
from peerify_dagster.resources.dagster_resources import LakeResource, LLMGatewayResource
from peerify_dagster.resources.llm_gateway import (
    BatchPendingError,
    BudgetExceeded,
    ConfigurationError,
    LLMGateway,
    LLMGatewayError,
    ModelRegistry,
)
from peerify_dagster.resources.llm_gateway.batches import BATCHES_DIR, COLLECTED, SUBMITTING
from tests.fakes.anthropic_server import ScriptedAnthropicServer
from tests.fakes.batch_server import BatchServer
from tests.fakes.loopback import FaultRule
from tests.fakes.openai_server import ScriptedOpenAIServer
from tests.test_llm_gateway import SleepRecorder, ledger_rows

# One model per provider called one by one and its twin through the batch API: the same backend, model id and decoding,
# so the same calls have the same call ids.
COMMON = {
    "gpt": "backend: openai\n    model: scripted-model\n    api_key_env: TEST_OPENAI_KEY\n"
           "    price_in_per_million: 1000.0\n    price_out_per_million: 2000.0\n    structured_output: json_schema",
    "claude": "backend: anthropic\n    model: claude-scripted\n    api_key_env: TEST_ANTHROPIC_KEY\n"
              "    price_in_per_million: 3000.0\n    price_out_per_million: 15000.0\n    structured_output: tool\n"
              "    decoding: {temperature: 0.0, max_tokens: 300}",
}
MODELS_YAML = f"""
default_profile: test
models:
  sync-gpt:
    {COMMON["gpt"]}
    base_url_env: TEST_OPENAI_URL
  batch-gpt:
    {COMMON["gpt"]}
    base_url_env: TEST_OPENAI_BATCH_URL
    batch: true
  sync-claude:
    {COMMON["claude"]}
    base_url_env: TEST_ANTHROPIC_URL
  batch-claude:
    {COMMON["claude"]}
    base_url_env: TEST_ANTHROPIC_BATCH_URL
    batch: true
profiles:
  test:
    labeller_a: batch-gpt
"""
ITEMS = [{"claim": f"The paper lacks ablation number {i}.", "author_response": "We added it in Table 5."}
         for i in range(4)]
PROVIDERS = ["gpt", "claude"]


@pytest.fixture
def batch_server() -> Iterator[BatchServer]:
    with BatchServer() as server:
        yield server


@pytest.fixture
def env(batch_server: BatchServer) -> dict[str, str]:
    return {"TEST_OPENAI_KEY": "sk-test-openai", "TEST_ANTHROPIC_KEY": "sk-test-anthropic",
            "TEST_OPENAI_BATCH_URL": batch_server.openai_base_url,
            "TEST_ANTHROPIC_BATCH_URL": batch_server.anthropic_base_url}


def make_gateway(lake: Path, models_file: Path, env: dict[str, str], **options: Any) -> LLMGateway:
    options.setdefault("sleep", SleepRecorder())
    options.setdefault("request_timeout_s", 5.0)
    return LLMGateway(lake, models_file=models_file, env=env, **options)


def batch_records(lake: Path) -> list[dict[str, Any]]:
    return [json.loads(path.read_text()) for path in sorted((lake / BATCHES_DIR).glob("*.json"))]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_batch_map_records_the_same_calls_as_a_synchronous_run_at_half_the_cost(
    tmp_path: Path, models_file: Path, env: dict[str, str], batch_server: BatchServer, provider: str
) -> None:
    fake = ScriptedOpenAIServer() if provider == "gpt" else ScriptedAnthropicServer()
    with fake:
        sync_env = {**env, "TEST_OPENAI_URL": fake.base_url, "TEST_ANTHROPIC_URL": fake.base_url}
        with make_gateway(tmp_path / "sync", models_file, sync_env) as gateway:
            synchronous = gateway.map(f"sync-{provider}", "label_rebuttal", ITEMS, role="labeller_a")
    assert fake.request_count == len(ITEMS) and all(result.ok for result in synchronous)

    lake, sleep = tmp_path / "batch", SleepRecorder()
    progress: list[tuple[int, int]] = []
    with make_gateway(lake, models_file, env, sleep=sleep, batch_poll_s=30, batch_wait_s=60) as gateway:
        batched = gateway.map(f"batch-{provider}", "label_rebuttal", ITEMS + ITEMS[:1], role="labeller_a",
                              progress=lambda done, total, result: progress.append((done, total)))
        usage = gateway.usage()["by_model"][f"batch-{provider}"]
    assert batch_server.submissions == 1 and sleep.delays == [30]  # in progress at the first poll, ended at the next
    [batch] = batch_server.batches.values()
    assert [custom_id for custom_id, _ in batch.requests] == [result.call_id for result in synchronous]
    assert [body for _, body in batch.requests] == fake.requests  # each request as the synchronous call sent it
    assert [r.call_id for r in batched] == [r.call_id for r in synchronous] + [synchronous[0].call_id]
    assert [r.raw_response for r in batched[:4]] == [r.raw_response for r in synchronous]
    assert [(r.tokens_in, r.tokens_out) for r in batched[:4]] == [(r.tokens_in, r.tokens_out) for r in synchronous]
    assert [r.cost_usd for r in batched[:4]] == pytest.approx([r.cost_usd / 2 for r in synchronous])
    assert all(r.ok and r.parse_ok and r.label == synchronous[0].label for r in batched)
    assert batched[4].cached and usage["calls"] == 4 and usage["cache_hits"] == 1 and progress[-1] == (5, 5)
    rows = ledger_rows(lake)
    assert sorted(row["call_id"] for row in rows) == sorted(r.call_id for r in synchronous)
    sync_rows = {row["call_id"]: row for row in ledger_rows(tmp_path / "sync")}
    for row in rows:  # every column a synchronous call fills, filled alike
        expected = sync_rows[row["call_id"]]
        assert {key: row[key] for key in ("role", "prompt_id", "prompt_hash", "backend", "model_id", "request",
                                          "parsed", "label", "error")} == \
               {key: expected[key] for key in ("role", "prompt_id", "prompt_hash", "backend", "model_id", "request",
                                               "parsed", "label", "error")}
        assert row["model"] == f"batch-{provider}" and row["cost_usd"] == pytest.approx(expected["cost_usd"] / 2)
    [record] = batch_records(lake)
    assert record["status"] == COLLECTED and record["batch_id"] == batch.id
    assert record["counts"] == {"succeeded": 4, "failed": 0} and sorted(record["call_ids"]) == sorted(sync_rows)

    with make_gateway(lake, models_file, env) as again:  # answered from the ledger: nothing submitted or polled
        assert all(r.cached for r in again.map(f"batch-{provider}", "label_rebuttal", ITEMS, role="labeller_a"))
    assert batch_server.submissions == 1 and batch.polls == 3  # two polls, then once more to read its results


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_step_that_gives_up_waiting_raises_and_its_rerun_collects_without_submitting_again(
    tmp_path: Path, models_file: Path, env: dict[str, str], batch_server: BatchServer, provider: str,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    batch_server.polls_before_end = 2
    lake, model = tmp_path / "lake", f"batch-{provider}"
    with make_gateway(lake, models_file, env) as first:
        with pytest.raises(BatchPendingError) as raised:
            first.map(model, "label_rebuttal", ITEMS, role="labeller_a")
    [batch] = batch_server.batches.values()
    message = str(raised.value)
    assert batch.id in message and "re-run the step to collect" in message and "\n" not in message
    assert str(lake / BATCHES_DIR) in message and raised.value.batch_id == batch.id
    assert not ledger_rows(lake) and batch_records(lake)[0]["status"] == "submitted"
    monkeypatch.setenv("PEERIFY_LAKE", str(lake))
    assert main(["llm", "batches"]) == 0
    listed = capsys.readouterr().out.splitlines()[-1].split()
    assert listed[:5] == [model, batch.id, "submitted", "in_progress", "4"]
    # A re-run (with items in another order and one more): the pending calls are polled, not submitted again; the new
    # one goes into a batch of its own.
    more = [*reversed(ITEMS), {"claim": "A new claim.", "author_response": "Noted."}]
    with make_gateway(lake, models_file, env) as second:
        with pytest.raises(BatchPendingError):
            second.map(model, "label_rebuttal", more, role="labeller_a")
    assert batch_server.submissions == 2
    assert [len(b.requests) for b in batch_server.batches.values()] == [4, 1]
    with make_gateway(lake, models_file, env, batch_poll_s=1, batch_wait_s=5) as third:
        results = third.map(model, "label_rebuttal", more, role="labeller_a")
    assert batch_server.submissions == 2 and all(r.ok and not r.cached for r in results)
    assert len(ledger_rows(lake)) == 5 and all(record["status"] == COLLECTED for record in batch_records(lake))


@pytest.mark.parametrize("provider", PROVIDERS)
def test_failed_and_expired_requests_become_failed_rows_and_are_submitted_again_later(
    tmp_path: Path, models_file: Path, env: dict[str, str], batch_server: BatchServer, provider: str
) -> None:
    def error_for(body: dict[str, Any]) -> str | None:
        return "prompt is too long" if "number 1." in json.dumps(body) else None

    batch_server.error_for, batch_server.expire_after, batch_server.polls_before_end = error_for, 3, 0
    lake, model = tmp_path / "lake", f"batch-{provider}"
    with make_gateway(lake, models_file, env) as gateway:
        results = gateway.map(model, "label_rebuttal", ITEMS, role="labeller_a")
        assert gateway.usage()["by_model"][model]["errors"] == 2
    assert [r.ok for r in results] == [True, False, True, False]
    assert "prompt is too long" in results[1].error and results[1].call_id
    assert "expire" in results[3].error
    rows = {row["call_id"]: row for row in ledger_rows(lake)}
    assert len(rows) == 4 and rows[results[1].call_id]["error"] == results[1].error
    assert rows[results[3].call_id]["label"] is None and rows[results[3].call_id]["cost_usd"] == 0
    assert batch_records(lake)[0]["counts"] == {"succeeded": 2, "failed": 2}
    batch_server.error_for = batch_server.expire_after = None
    with make_gateway(lake, models_file, env) as again:  # as a failed synchronous call: made again by a later run
        retried = again.map(model, "label_rebuttal", ITEMS, role="labeller_a")
    assert all(r.ok for r in retried) and [r.cached for r in retried] == [True, False, True, False]
    assert [len(b.requests) for b in batch_server.batches.values()] == [4, 2]


def test_the_budget_refuses_a_batch_before_anything_is_submitted(
    tmp_path: Path, models_file: Path, env: dict[str, str], batch_server: BatchServer
) -> None:
    lake = tmp_path / "lake"
    # Four calls of up to 1024 answer tokens at $2000 a million (half in a batch) may cost about $4.
    with make_gateway(lake, models_file, env, max_cost_usd=1.0) as gateway:
        with pytest.raises(BudgetExceeded, match=r"not submitting a batch of 4 calls .*'batch-gpt'.*run budget \$1\.0"):
            gateway.map("labeller_a", "label_rebuttal", ITEMS)
    assert batch_server.submissions == 0 and not batch_server.requests and not batch_records(lake)
    with make_gateway(lake, models_file, env, max_cost_usd=10.0, batch_poll_s=1, batch_wait_s=1) as gateway:
        assert all(r.ok for r in gateway.map("labeller_a", "label_rebuttal", ITEMS))
    assert batch_server.submissions == 1


def test_a_submission_without_an_answer_is_never_repeated_and_a_refused_one_leaves_nothing(
    tmp_path: Path, models_file: Path, env: dict[str, str], batch_server: BatchServer
) -> None:
    lake = tmp_path / "lake"
    batch_server.add_fault(FaultRule("/v1/batches", "status", status=400))
    with make_gateway(lake, models_file, env) as gateway:
        with pytest.raises(LLMGatewayError, match=r"refused a batch of 4 calls \(HTTP 400.*nothing was submitted"):
            gateway.map("labeller_a", "label_rebuttal", ITEMS)
    assert not batch_records(lake)
    batch_server.add_fault(FaultRule("/v1/batches", "drop"))
    for _ in range(2):
        with make_gateway(lake, models_file, env) as gateway:
            with pytest.raises(BatchPendingError, match="the provider may hold it") as raised:
                gateway.map("labeller_a", "label_rebuttal", ITEMS)
        assert raised.value.record == lake / BATCHES_DIR / f"{batch_records(lake)[0]['key']}.json"
    assert [record["status"] for record in batch_records(lake)] == [SUBMITTING]
    assert [r.path for r in batch_server.requests].count("/v1/batches") == 2  # the refused and the unanswered one
    raised.value.record.unlink()  # what the message says to do once the provider's batch list shows none
    with make_gateway(lake, models_file, env, batch_poll_s=1, batch_wait_s=1) as gateway:
        assert all(r.ok for r in gateway.map("labeller_a", "label_rebuttal", ITEMS))


def test_batch_is_only_for_the_openai_and_anthropic_backends(tmp_path: Path) -> None:
    path = tmp_path / "models.yaml"
    path.write_text("models:\n  engine:\n    backend: vllm\n    model: Qwen/Qwen3-4B\n    batch: true\n"
                    "profiles:\n  offline: {}\n", encoding="utf-8")
    with pytest.raises(ConfigurationError, match=r"models\.engine: .*batch: true needs backend openai or anthropic"):
        ModelRegistry.load(path, env={})


def test_the_llm_resource_fails_a_step_whose_batch_has_not_ended_naming_the_batch_and_its_record(
    tmp_path: Path, models_file: Path, env: dict[str, str], batch_server: BatchServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in {**env, "PEERIFY_MODELS_FILE": str(models_file)}.items():
        monkeypatch.setenv(name, value)
    batch_server.polls_before_end = 3
    lake = LakeResource(root=str(tmp_path / "lake")).lake()
    resource = LLMGatewayResource(batch_poll_s=0.01, batch_wait_s=0.01)  # two polls, 10 ms apart
    with pytest.raises(dg.Failure) as raised:
        with resource.gateway(lake, run_id="first") as gateway:
            gateway.map("labeller_a", "label_rebuttal", ITEMS)
    [batch] = batch_server.batches.values()
    assert raised.value.description.startswith("LLM batch not collected yet, step stopped before writing anything")
    assert "re-run the step to collect" in raised.value.description and batch.polls == 2
    assert raised.value.metadata["batch_id"].text == batch.id
    with resource.gateway(lake, run_id="second") as gateway:
        assert all(r.ok for r in gateway.map("labeller_a", "label_rebuttal", ITEMS))
    assert batch_server.submissions == 1


def test_results_that_cannot_be_read_are_collected_by_the_next_run(
    tmp_path: Path, models_file: Path, env: dict[str, str], batch_server: BatchServer
) -> None:
    batch_server.polls_before_end = 0
    batch_server.add_fault(FaultRule("/v1/messages/batches/msgbatch_1/results", "status", status=500))
    lake = tmp_path / "lake"
    with make_gateway(lake, models_file, env) as gateway:
        with pytest.raises(BatchPendingError, match=r"batch msgbatch_1 ended, but its results could not be read "
                                                    r"\(HTTP 500.*re-run the step to collect"):
            gateway.map("batch-claude", "label_rebuttal", ITEMS, role="labeller_a")
    assert not ledger_rows(lake) and batch_records(lake)[0]["status"] == "submitted"
    with make_gateway(lake, models_file, env) as gateway:
        assert all(r.ok for r in gateway.map("batch-claude", "label_rebuttal", ITEMS, role="labeller_a"))
    assert batch_server.submissions == 1 and len(ledger_rows(lake)) == len(ITEMS)

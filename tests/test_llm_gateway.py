"""The LLM gateway against loopback OpenAI and Anthropic servers, plus its pure helpers.

Every request crosses real HTTP on 127.0.0.1 through the real openai/anthropic SDKs; the
servers count requests so cache tests can assert that no request was made. Retry waits go
through an injected `sleep` that records the delays instead of sleeping.
"""

from __future__ import annotations

import importlib.util
import json
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest

from peerify_dagster.domain.labels import LABELS
from peerify_dagster.domain.llm_calls import (
    JsonExtractionError,
    backoff_delay,
    compute_call_id,
    estimate_cost_usd,
    extract_json_object,
    parse_answer,
    parse_retry_after,
    strict_json_schema,
    validate_against_schema,
)
from peerify_dagster.domain.prompts import OUTPUT_SCHEMAS
from peerify_dagster.resources.llm_gateway import (
    BackendUnavailableError,
    BudgetExceeded,
    CallFailedError,
    CallLedger,
    ConfigurationError,
    LLMGateway,
    ModelRegistry,
    PreflightError,
    RateLimiter,
    ReplayMissError,
)
from tests.fakes.anthropic_server import ScriptedAnthropicServer
from tests.fakes.openai_server import Fault, ScriptedOpenAIServer

REPO_ROOT = Path(__file__).resolve().parents[1]

MODELS_YAML = """
default_profile: test
models:
  scripted-gpt:
    backend: openai
    model: scripted-model
    base_url_env: TEST_OPENAI_URL
    api_key_env: TEST_OPENAI_KEY
    price_in_per_million: 1000.0
    price_out_per_million: 2000.0
    max_concurrency: 2
    structured_output: json_schema
  scripted-gpt-stream:
    backend: openai
    model: scripted-model
    base_url_env: TEST_OPENAI_URL
    api_key_env: TEST_OPENAI_KEY
    structured_output: json_object_schema
    stream: true
  scripted-claude:
    backend: anthropic
    model: claude-scripted
    base_url_env: TEST_ANTHROPIC_URL
    api_key_env: TEST_ANTHROPIC_KEY
    structured_output: tool
    decoding: {temperature: 0.0, max_tokens: 300}
  scripted-claude-stream:
    backend: anthropic
    model: claude-scripted
    base_url_env: TEST_ANTHROPIC_URL
    api_key_env: TEST_ANTHROPIC_KEY
    structured_output: tool
    stream: true
  scripted-gpt-limited:
    backend: openai
    model: scripted-model
    base_url_env: TEST_OPENAI_URL
    api_key_env: TEST_OPENAI_KEY
    requests_per_minute: 6
  gpu-engine:
    backend: vllm
    model: Qwen/Qwen3-4B
profiles:
  test:
    labeller_a: scripted-gpt
    labeller_b: scripted-claude
    verifiers: [scripted-gpt, scripted-claude]
  other:
    labeller_a: scripted-claude
    extractor: gpu-engine
"""

CLAIM = {"claim": "The paper lacks an ablation of the filter.", "author_response": "We added it in Table 5."}


def json_answer(payload: dict[str, Any]):
    return lambda request: json.dumps(payload)


@pytest.fixture
def openai_server() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(retry_after_s=1) as server:
        yield server


@pytest.fixture
def anthropic_server() -> Iterator[ScriptedAnthropicServer]:
    with ScriptedAnthropicServer(retry_after_s=2) as server:
        yield server


@pytest.fixture
def env(openai_server: ScriptedOpenAIServer, anthropic_server: ScriptedAnthropicServer) -> dict[str, str]:
    return {
        "TEST_OPENAI_URL": openai_server.base_url,
        "TEST_OPENAI_KEY": "sk-test-openai",
        "TEST_ANTHROPIC_URL": anthropic_server.base_url,
        "TEST_ANTHROPIC_KEY": "sk-test-anthropic",
    }


class SleepRecorder:
    """Stands in for time.sleep: records the requested waits and returns at once."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def make_gateway(lake: Path, models_file: Path, env: dict[str, str], **options: Any) -> LLMGateway:
    options.setdefault("sleep", SleepRecorder())
    options.setdefault("backoff_base_s", 0.01)
    options.setdefault("request_timeout_s", 5.0)
    return LLMGateway(lake, models_file=models_file, env=env, **options)


def ledger_rows(lake: Path) -> list[dict[str, Any]]:
    query = f"select * from read_parquet('{lake / 'llm_calls' / '*.parquet'}') order by created_at"
    connection = duckdb.connect()
    cursor = connection.execute(query)
    names = [column[0] for column in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


# ---------------------------------------------------------------------------------------------
# Pure helpers (domain/llm_calls.py)
# ---------------------------------------------------------------------------------------------
def test_call_id_changes_with_every_component() -> None:
    base = dict(backend="openai", model="m", template_hash="h", messages=[{"role": "user", "content": "x"}],
                decoding={"temperature": 0, "schema": {"type": "object"}})
    reference = compute_call_id(**base)
    assert compute_call_id(**base) == reference
    variants = [
        {"backend": "anthropic"}, {"model": "m2"}, {"template_hash": "h2"},
        {"messages": [{"role": "user", "content": "y"}]},
        {"decoding": {"temperature": 0.5, "schema": {"type": "object"}}},
        {"decoding": {"temperature": 0, "schema": {"type": "array"}}},
    ]
    for change in variants:
        assert compute_call_id(**{**base, **change}) != reference, change


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"label": "Supported"}', {"label": "Supported"}),
        ('Sure! ```json\n{"label": "Supported", "n": 1}\n``` done', {"label": "Supported", "n": 1}),
        ('The answer is {"a": {"b": [1, 2]}} as asked.', {"a": {"b": [1, 2]}}),
        ('{broken {"ok": true}', {"ok": True}),
    ],
)
def test_extract_json_object_finds_the_object(text: str, expected: dict[str, Any]) -> None:
    assert extract_json_object(text) == expected


@pytest.mark.parametrize("text", ["", "no json here", '{"label": "Supported"', "[1, 2]"])
def test_extract_json_object_rejects_answers_without_an_object(text: str) -> None:
    with pytest.raises(JsonExtractionError):
        extract_json_object(text)


def test_schema_validation_reports_type_required_enum_and_items() -> None:
    schema = OUTPUT_SCHEMAS["manuscript_label"]
    assert validate_against_schema({"label": "Supported", "evidence_quotes": ["q"], "justification": "j"}, schema) == []
    problems = validate_against_schema({"label": "Maybe", "evidence_quotes": ["q", 3]}, schema)
    assert any("missing required key 'justification'" in p for p in problems)
    assert any("'Maybe' is not one of" in p for p in problems)
    assert any("$.evidence_quotes[1]: expected string" in p for p in problems)
    claims_problems = validate_against_schema({"claims": "x"}, OUTPUT_SCHEMAS["claim_list"])
    assert claims_problems == ["$.claims: expected array, got str"]


@pytest.mark.parametrize(
    ("raw", "label", "parse_ok"),
    [
        ('{"label": "Contradicted", "evidence_quotes": [], "justification": "x"}', "Not Supported", True),
        ('{"label": "undetermined", "evidence_quotes": [], "justification": "x"}', "Not Determined", True),
        ('{"label": "Partially_Supported", "evidence_quotes": [], "justification": "x"}', "Partially Supported", True),
        ('{"label": "Maybe", "evidence_quotes": [], "justification": "x"}', None, False),
        ('{"label": "Supported"}', None, False),
        ("It is supported.", None, False),
    ],
)
def test_parse_answer_normalises_labels_and_never_invents_one(raw: str, label: str | None, parse_ok: bool) -> None:
    answer = parse_answer(raw, OUTPUT_SCHEMAS["rebuttal_label"])
    assert answer.label == label
    assert answer.parse_ok is parse_ok
    assert (answer.problem is None) is parse_ok


def test_strict_schema_closes_objects_for_openai() -> None:
    strict = strict_json_schema(OUTPUT_SCHEMAS["manuscript_label"])
    assert strict["additionalProperties"] is False
    assert set(strict["required"]) == {"label", "evidence_quotes", "justification"}
    assert "additionalProperties" not in OUTPUT_SCHEMAS["manuscript_label"]


def test_retry_after_and_backoff() -> None:
    assert parse_retry_after({"Retry-After": "3"}) == 3.0
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert parse_retry_after({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0
    assert parse_retry_after({}) is None
    rng = random.Random(0)
    assert backoff_delay(3, 1.0, 60.0, 7.5, rng) == 7.5
    for attempt in range(1, 10):
        ceiling = min(8.0, 0.5 * 2 ** (attempt - 1))
        assert ceiling / 2 <= backoff_delay(attempt, 0.5, 8.0, None, rng) <= ceiling


def test_cost_estimate_uses_prices_per_million() -> None:
    assert estimate_cost_usd(1_000_000, 500_000, 0.25, 2.0) == pytest.approx(1.25)


def test_rate_limiter_spaces_requests_evenly() -> None:
    now = [100.0]
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        now[0] += seconds

    limiter = RateLimiter(120, clock=lambda: now[0], sleep=sleep)
    for _ in range(3):
        limiter.acquire()
    assert waits == [pytest.approx(0.5), pytest.approx(0.5)]
    now[0] += 10
    limiter.acquire()
    assert len(waits) == 2


def test_gateway_applies_the_models_requests_per_minute(
    tmp_path: Path, models_file: Path, env: dict[str, str], openai_server: ScriptedOpenAIServer
) -> None:
    sleep = SleepRecorder()
    with make_gateway(tmp_path / "lake", models_file, env, sleep=sleep) as gateway:
        for i in range(3):
            gateway.call("scripted-gpt-limited", "tag_fact", {"claim": f"Claim {i}."})
    # 6 requests a minute: slots 10 s apart. The recorder does not really sleep, so the waits
    # reach the 10 s and 20 s slots from (almost) the same moment.
    first, second = sleep.delays
    assert 5 < first <= 10 and 15 < second <= 20
    assert openai_server.request_count == 3


# ---------------------------------------------------------------------------------------------
# Registry and preflight
# ---------------------------------------------------------------------------------------------
def test_shipped_registry_has_offline_default_and_paper_profile() -> None:
    offline = ModelRegistry.load(REPO_ROOT / "models.yaml", env={})
    assert offline.profile == "offline"
    assert all(offline.model(name).backend == "local" for names in offline.roles.values() for name in names)
    paper = ModelRegistry.load(REPO_ROOT / "models.yaml", env={"PEERIFY_LLM_PROFILE": "paper"})
    assert {"extractor", "labeller_a", "labeller_b", "fact_tagger", "verifiers"} <= set(paper.roles)
    assert paper.model(paper.roles["labeller_b"][0]).backend == "anthropic"
    assert len(paper.roles["verifiers"]) == 5


def test_env_switches_profile_and_overrides_roles(models_file: Path) -> None:
    registry = ModelRegistry.load(models_file, env={
        "PEERIFY_LLM_PROFILE": "other",
        "PEERIFY_ROLE_LABELLER_A": "scripted-gpt",
        "PEERIFY_ROLE_VERIFIERS": "scripted-claude, scripted-gpt-stream",
    })
    assert registry.profile == "other"
    assert registry.models_for_role("labeller_a") == ["scripted-gpt"]
    assert registry.models_for_role("verifiers") == ["scripted-claude", "scripted-gpt-stream"]
    with pytest.raises(ConfigurationError, match=r"PEERIFY_ROLE_LABELLER_A='nope' names unknown models \['nope'\]"):
        ModelRegistry.load(models_file, env={"PEERIFY_ROLE_LABELLER_A": "nope"})


def test_preflight_names_each_model_and_missing_key_before_any_request(
    tmp_path: Path, models_file: Path, env: dict[str, str], openai_server: ScriptedOpenAIServer
) -> None:
    no_keys = {k: v for k, v in env.items() if not k.endswith("_KEY")}
    gateway = make_gateway(tmp_path / "lake", models_file, no_keys)
    with pytest.raises(PreflightError) as raised:
        gateway.preflight(["labeller_a", "labeller_b"])
    message = str(raised.value)
    assert "\n" not in message
    assert "'scripted-gpt'" in message and "TEST_OPENAI_KEY" in message
    assert "'scripted-claude'" in message and "TEST_ANTHROPIC_KEY" in message
    with pytest.raises(PreflightError, match="TEST_OPENAI_KEY"):
        gateway.call("labeller_a", "label_rebuttal", CLAIM)
    assert openai_server.request_count == 0
    with_keys = make_gateway(tmp_path / "lake", models_file, env)
    assert with_keys.preflight(["labeller_a"]) == {"labeller_a": ["scripted-gpt"]}


# Each mistake, the environment or files that make it, and what its one-line message must name.
CONFIGURATION_MISTAKES = {
    "unknown profile (environment)": (
        {"PEERIFY_LLM_PROFILE": "nope"}, None,
        ["PEERIFY_LLM_PROFILE='nope'", "models.yaml", "(profiles: other, test)"]),
    "unknown default profile (file)": (
        {}, MODELS_YAML.replace("default_profile: test", "default_profile: ghost"),
        ["models.yaml: default_profile 'ghost'", "(profiles: other, test)"]),
    "role naming an unknown model (environment)": (
        {"PEERIFY_ROLE_VERIFIERS": "scripted-gpt, nope"}, None,
        ["PEERIFY_ROLE_VERIFIERS='scripted-gpt, nope'", "['nope']"]),
    "role naming an unknown model (file)": (
        {}, MODELS_YAML.replace("labeller_a: scripted-gpt", "labeller_a: ghost-model"),
        ["models.yaml: profiles.test.labeller_a", "['ghost-model']"]),
    "unknown cache mode": (
        {"PEERIFY_LLM_CACHE_MODE": "sometimes"}, None,
        ["PEERIFY_LLM_CACHE_MODE='sometimes'", "use, refresh, replay-only"]),
    "models.yaml syntax": (
        {}, MODELS_YAML.replace("  test:\n", "  test: [\n"), ["models.yaml line ", "not valid YAML"]),
    "missing local model file": (
        {"PEERIFY_LOCAL_GGUF": "/nonexistent/model.gguf"}, "shipped",
        ["PEERIFY_LOCAL_GGUF='/nonexistent/model.gguf'", "GGUF model file not found"]),
    "replay-only with an empty ledger": (
        {"PEERIFY_LLM_CACHE_MODE": "replay-only"}, None,
        ["replay-only", "model 'scripted-gpt' (role 'labeller_a')", "prompt 'label_rebuttal'"]),
}


@pytest.mark.parametrize("mistake", CONFIGURATION_MISTAKES)
def test_each_configuration_mistake_fails_preflight_fast_in_one_line(
    tmp_path: Path, models_file: Path, env: dict[str, str], openai_server: ScriptedOpenAIServer, mistake: str
) -> None:
    extra_env, registry, expected = CONFIGURATION_MISTAKES[mistake]
    if registry == "shipped":
        models_file = REPO_ROOT / "models.yaml"
    elif registry is not None:
        models_file.write_text(registry, encoding="utf-8")
    started = time.monotonic()
    with pytest.raises(ConfigurationError) as raised:
        LLMGateway(tmp_path / "lake", models_file=models_file, env={**env, **extra_env}).preflight(
            ["labeller_a"] if registry != "shipped" else None, prompts={"labeller_a": ["label_rebuttal"]})
    elapsed = time.monotonic() - started
    message = str(raised.value)
    assert "\n" not in message and elapsed < 1.0, (message, elapsed)
    for fragment in expected:
        assert fragment in message, (fragment, message)
    assert openai_server.request_count == 0


def test_replay_only_preflight_passes_once_the_ledger_holds_each_model_and_prompt(
    tmp_path: Path, models_file: Path, env: dict[str, str], openai_server: ScriptedOpenAIServer
) -> None:
    lake = tmp_path / "lake"
    with make_gateway(lake, models_file, env) as recording:
        recording.call("labeller_a", "label_rebuttal", CLAIM)
    no_key = {k: v for k, v in env.items() if k != "TEST_OPENAI_KEY"}  # replaying needs no key: no call is made
    replay = make_gateway(lake, models_file, no_key, cache_mode="replay-only")
    assert replay.preflight(["labeller_a"], prompts={"labeller_a": ["label_rebuttal"]}) == {
        "labeller_a": ["scripted-gpt"]}
    with pytest.raises(PreflightError, match="prompt 'tag_fact'"):
        replay.preflight(["labeller_a"], prompts={"labeller_a": ["label_rebuttal", "tag_fact"]})


def test_vllm_engine_backend_fails_clearly_without_vllm(tmp_path: Path, models_file: Path, env: dict[str, str]) -> None:
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here; this test covers hosts without it")
    gateway = make_gateway(tmp_path / "lake", models_file, env, profile="other")
    with pytest.raises(PreflightError, match=r"'gpu-engine'.*vllm"):
        gateway.preflight(["extractor"])
    with pytest.raises(BackendUnavailableError, match=r"'gpu-engine'.*vllm"):
        gateway.call("extractor", "extract_claims", {"review_text": "x"})


# ---------------------------------------------------------------------------------------------
# Calls, ledger and cache
# ---------------------------------------------------------------------------------------------
def test_openai_call_is_recorded_and_repeat_is_served_from_the_ledger(
    tmp_path: Path, models_file: Path, env: dict[str, str], openai_server: ScriptedOpenAIServer
) -> None:
    lake = tmp_path / "lake"
    with make_gateway(lake, models_file, env, run_id="run-1") as gateway:
        result = gateway.call("labeller_a", "label_rebuttal", CLAIM)
    assert result.ok and result.parse_ok and not result.cached
    assert result.label in LABELS
    sent = openai_server.requests[0]
    assert sent["response_format"]["type"] == "json_schema"
    assert sent["response_format"]["json_schema"]["schema"]["properties"]["label"]["enum"] == list(LABELS)
    assert openai_server.request_headers[0]["authorization"] == "Bearer sk-test-openai"

    rows = ledger_rows(lake)
    assert len(rows) == 1
    row = rows[0]
    assert row["call_id"] == result.call_id and row["run_id"] == "run-1"
    assert row["role"] == "labeller_a" and row["prompt_id"] == "label_rebuttal" and row["model"] == "scripted-gpt"
    assert row["parse_ok"] and row["label"] == result.label and row["error"] is None
    assert json.loads(row["request"])["messages"][1]["content"].endswith("We added it in Table 5.")
    assert row["tokens_in"] > 0 and row["cost_usd"] == pytest.approx(
        (row["tokens_in"] * 1000 + row["tokens_out"] * 2000) / 1e6)

    with make_gateway(lake, models_file, env) as again:
        repeat = again.call("labeller_a", "label_rebuttal", CLAIM)
        assert again.usage()["by_model"]["scripted-gpt"]["cache_hits"] == 1
    assert repeat.cached and repeat.call_id == result.call_id and repeat.label == result.label
    assert openai_server.request_count == 1
    assert len(ledger_rows(lake)) == 1


def test_empty_ledger_is_readable_as_a_table_with_every_column(
    tmp_path: Path, models_file: Path, env: dict[str, str]
) -> None:
    with make_gateway(tmp_path / "lake", models_file, env):
        pass
    query = f"select * from read_parquet('{tmp_path / 'lake' / 'llm_calls' / '*.parquet'}')"
    relation = duckdb.sql(query)
    assert relation.fetchall() == []
    assert relation.columns[:3] == ["call_id", "role", "prompt_id"] and "run_id" in relation.columns


def test_anthropic_structured_output_uses_a_forced_tool(
    tmp_path: Path, models_file: Path, env: dict[str, str], anthropic_server: ScriptedAnthropicServer
) -> None:
    anthropic_server.responder = json_answer({"label": "contradicted", "evidence_quotes": [], "justification": "Table "
                                              "5 exists."})
    with make_gateway(tmp_path / "lake", models_file, env) as gateway:
        result = gateway.call("labeller_b", "label_rebuttal", CLAIM)
    sent = anthropic_server.requests[0]
    assert sent["tool_choice"] == {"type": "tool", "name": sent["tools"][0]["name"]}
    assert sent["system"].startswith("You check a claim")
    assert [m["role"] for m in sent["messages"]] == ["user"]
    assert sent["max_tokens"] == 300 and sent["temperature"] == 0.0
    headers = anthropic_server.request_headers[0]
    # Older SDK releases send the key as x-api-key, newer ones as a bearer token.
    sent_keys = (headers.get("x-api-key", ""), headers.get("authorization", "").removeprefix("Bearer "))
    assert "sk-test-anthropic" in sent_keys
    assert result.label == "Not Supported" and result.parsed["label"] == "Not Supported"


def test_unparseable_answer_is_kept_raw_counted_and_never_labelled(
    tmp_path: Path, models_file: Path, env: dict[str, str], openai_server: ScriptedOpenAIServer
) -> None:
    openai_server.responder = lambda request: "I think the claim is supported."
    lake = tmp_path / "lake"
    with make_gateway(lake, models_file, env) as gateway:
        result = gateway.call("labeller_a", "label_rebuttal", CLAIM)
        usage = gateway.usage()
    assert result.ok and not result.parse_ok and result.label is None
    assert result.raw_response == "I think the claim is supported."
    assert usage["by_model"]["scripted-gpt"]["parse_failures"] == 1
    assert usage["by_role"]["labeller_a"]["parse_failures"] == 1
    row = ledger_rows(lake)[0]
    assert row["parse_ok"] is False and row["label"] is None and row["raw_response"].startswith("I think")


def test_role_with_several_models_is_called_by_model_name(
    tmp_path: Path, models_file: Path, env: dict[str, str]
) -> None:
    with make_gateway(tmp_path / "lake", models_file, env) as gateway:
        with pytest.raises(ConfigurationError, match="role 'verifiers' maps to 2 models"):
            gateway.call("verifiers", "verify", {"claim": "c", "evidence": "[p1] e"})
        results = [gateway.call(name, "verify", {"claim": "c", "evidence": "[p1] e"}, role="verifiers")
                   for name in gateway.models_for_role("verifiers")]
        usage = gateway.usage()
    assert [r.model for r in results] == ["scripted-gpt", "scripted-claude"]
    assert all(r.role == "verifiers" and r.parse_ok for r in results)
    assert usage["by_role"]["verifiers"]["calls"] == 2


# ---------------------------------------------------------------------------------------------
# Faults, retries, give-up
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("model", ["scripted-gpt", "scripted-gpt-stream", "scripted-claude", "scripted-claude-stream"])
@pytest.mark.parametrize("fault", [Fault.RATE_LIMIT, Fault.SERVER_ERROR, Fault.TRUNCATED])
def test_transient_fault_is_retried_then_succeeds(
    tmp_path: Path, models_file: Path, env: dict[str, str], openai_server: ScriptedOpenAIServer,
    anthropic_server: ScriptedAnthropicServer, model: str, fault: Fault,
) -> None:
    server = anthropic_server if "claude" in model else openai_server
    server.fail_next(fault)
    sleep = SleepRecorder()
    lake = tmp_path / "lake"
    with make_gateway(lake, models_file, env, sleep=sleep) as gateway:
        result = gateway.call(model, "tag_fact", {"claim": "The paper reports no ImageNet results."})
    assert result.ok and result.parse_ok and result.attempts == 2
    assert server.request_count == 2
    assert len(sleep.delays) == 1
    if fault is Fault.RATE_LIMIT:
        assert sleep.delays == [server.retry_after_s]
    assert [row["attempts"] for row in ledger_rows(lake)] == [2]


def test_hanging_server_times_out_and_is_retried(
    tmp_path: Path, models_file: Path, env: dict[str, str], openai_server: ScriptedOpenAIServer
) -> None:
    openai_server.fail_next(Fault.HANG)
    with make_gateway(tmp_path / "lake", models_file, env, request_timeout_s=0.5) as gateway:
        result = gateway.call("labeller_a", "label_rebuttal", CLAIM)
    assert result.ok and result.attempts == 2 and openai_server.request_count == 2


def test_give_up_names_model_and_call_and_failure_is_never_served(
    tmp_path: Path, models_file: Path, env: dict[str, str], openai_server: ScriptedOpenAIServer
) -> None:
    lake = tmp_path / "lake"
    openai_server.fail_next(Fault.SERVER_ERROR, times=3)
    with make_gateway(lake, models_file, env, max_attempts=3) as gateway:
        with pytest.raises(CallFailedError) as raised:
            gateway.call("labeller_a", "label_rebuttal", CLAIM)
        assert gateway.usage()["by_model"]["scripted-gpt"]["errors"] == 1
    failed = raised.value.result
    assert "'scripted-gpt'" in str(raised.value) and failed.call_id in str(raised.value)
    assert "gave up after 3 attempts" in str(raised.value) and "HTTP 500" in str(raised.value)
    [row] = ledger_rows(lake)
    assert row["call_id"] == failed.call_id and row["attempts"] == 3 and "HTTP 500" in row["error"]
    assert row["label"] is None and row["parse_ok"] is False
    assert openai_server.request_count == 3

    with make_gateway(lake, models_file, env) as again:
        retried = again.call("labeller_a", "label_rebuttal", CLAIM)
    assert retried.ok and not retried.cached and retried.call_id == failed.call_id
    assert openai_server.request_count == 4
    assert [row["error"] is None for row in ledger_rows(lake)] == [False, True]


def test_malformed_response_is_recorded_without_retry(
    tmp_path: Path, models_file: Path, env: dict[str, str], openai_server: ScriptedOpenAIServer
) -> None:
    openai_server.fail_next(Fault.MALFORMED)
    lake = tmp_path / "lake"
    with make_gateway(lake, models_file, env) as gateway:
        with pytest.raises(CallFailedError, match="malformed response body"):
            gateway.call("labeller_a", "label_rebuttal", CLAIM)
    assert openai_server.request_count == 1
    assert "malformed" in ledger_rows(lake)[0]["error"]


# ---------------------------------------------------------------------------------------------
# Cache modes, budget, batches
# ---------------------------------------------------------------------------------------------
def test_replay_only_miss_fails_loudly_and_hit_needs_no_server(
    tmp_path: Path, models_file: Path, env: dict[str, str], openai_server: ScriptedOpenAIServer
) -> None:
    lake = tmp_path / "lake"
    with make_gateway(lake, models_file, env, cache_mode="replay-only") as replay:
        with pytest.raises(ReplayMissError, match=r"model 'scripted-gpt'.*call_id [0-9a-f]{64}"):
            replay.call("labeller_a", "label_rebuttal", CLAIM)
    assert openai_server.request_count == 0
    with make_gateway(lake, models_file, env) as recording:
        recorded = recording.call("labeller_a", "label_rebuttal", CLAIM)
    offline_env = {**env, "TEST_OPENAI_URL": "http://127.0.0.1:9/v1"}
    with make_gateway(lake, models_file, offline_env, cache_mode="replay-only") as replay:
        assert replay.call("labeller_a", "label_rebuttal", CLAIM).raw_response == recorded.raw_response
    assert openai_server.request_count == 1


def test_replay_only_batch_fails_before_any_call_naming_the_missing_ones(
    tmp_path: Path, models_file: Path, env: dict[str, str], openai_server: ScriptedOpenAIServer
) -> None:
    lake = tmp_path / "lake"
    items = [dict(CLAIM, claim=f"Claim {i}.") for i in range(4)]
    with make_gateway(lake, models_file, env) as recording:
        recorded = recording.map("labeller_a", "label_rebuttal", items[:2])
    with make_gateway(lake, models_file, env, cache_mode="replay-only") as replay:
        progress: list[int] = []
        with pytest.raises(ReplayMissError) as raised:
            replay.map("labeller_a", "label_rebuttal", items,
                       progress=lambda done, total, result: progress.append(done))
        assert "2 of 4 calls of 'labeller_a' with prompt 'label_rebuttal'" in str(raised.value)
        assert "\n" not in str(raised.value) and progress == []
        replayed = replay.map("labeller_a", "label_rebuttal", items[:2])
    assert [r.raw_response for r in replayed] == [r.raw_response for r in recorded] and all(r.cached for r in replayed)
    assert openai_server.request_count == 2


def test_refresh_calls_again_and_appends_a_new_segment(
    tmp_path: Path, models_file: Path, env: dict[str, str], openai_server: ScriptedOpenAIServer
) -> None:
    lake = tmp_path / "lake"
    with make_gateway(lake, models_file, env) as gateway:
        gateway.call("labeller_a", "label_rebuttal", CLAIM)
    before = {path: path.read_bytes() for path in (lake / "llm_calls").glob("*.parquet")}
    openai_server.responder = json_answer({"label": "Supported", "evidence_quotes": [], "justification": "second "
                                           "opinion"})
    with make_gateway(lake, models_file, env, cache_mode="refresh") as gateway:
        refreshed = gateway.call("labeller_a", "label_rebuttal", CLAIM)
    assert not refreshed.cached and openai_server.request_count == 2
    after = set((lake / "llm_calls").glob("*.parquet"))
    assert len(after - set(before)) == 1
    assert all(path.read_bytes() == content for path, content in before.items())
    assert not list((lake / "llm_calls").glob("*.tmp"))
    with make_gateway(lake, models_file, env) as gateway:
        assert gateway.call("labeller_a", "label_rebuttal", CLAIM).parsed["justification"] == "second opinion"
    assert openai_server.request_count == 2


def test_budget_stops_the_batch_cleanly_and_keeps_recorded_calls(
    tmp_path: Path, models_file: Path, env: dict[str, str], openai_server: ScriptedOpenAIServer
) -> None:
    lake = tmp_path / "lake"
    items = [{"claim": f"Claim number {i}.", "author_response": "We disagree."} for i in range(6)]
    # At the test prices one scripted call costs more than a cent, so the budget allows one.
    with make_gateway(lake, models_file, env, max_cost_usd=0.01) as gateway:
        with pytest.raises(BudgetExceeded, match=r"run budget \$0\.0100") as raised:
            gateway.map("labeller_a", "label_rebuttal", items)
    made = openai_server.request_count
    assert 1 <= made < len(items)
    assert len(ledger_rows(lake)) == made
    assert sum(result is not None for result in raised.value.results) == made


def test_token_budget_stops_the_batch_cleanly_and_keeps_recorded_calls(
    tmp_path: Path, models_file: Path, env: dict[str, str], openai_server: ScriptedOpenAIServer
) -> None:
    lake = tmp_path / "lake"
    items = [{"claim": f"Claim number {i}.", "author_response": "We disagree."} for i in range(6)]
    with make_gateway(lake, models_file, env) as unlimited:
        per_call = unlimited.call("labeller_a", "label_rebuttal", items[0])
    tokens_per_call = per_call.tokens_in + per_call.tokens_out
    assert tokens_per_call > 0
    # Room for two new calls (the cached first one costs nothing); with two calls in flight at once (the model's
    # max_concurrency) one more may start before the second finishes, and no further one.
    with make_gateway(lake, models_file, env, max_tokens=2 * tokens_per_call) as gateway:
        with pytest.raises(BudgetExceeded, match=rf"tokens reached the run budget of {2 * tokens_per_call} "
                           rf"tokens") as raised:
            gateway.map("labeller_a", "label_rebuttal", items[1:])
    made = openai_server.request_count - 1
    assert 2 <= made <= 3 < len(items) - 1
    assert len(ledger_rows(lake)) == 1 + made  # every call made is recorded, none half-written
    assert sum(result is not None for result in raised.value.results) == made


def test_a_build_budget_counts_every_step_and_run_of_the_build_from_the_ledger(
    tmp_path: Path, models_file: Path, env: dict[str, str], openai_server: ScriptedOpenAIServer
) -> None:
    """Each step opens its own gateway: a later step of the same run, and a later run given the build's earlier run
    ids, find the budget already spent in the ledger and call nothing; another run's spend does not count."""
    lake = tmp_path / "lake"
    items = [{"claim": f"Claim number {i}.", "author_response": "We disagree."} for i in range(3)]
    with make_gateway(lake, models_file, env, run_id="other") as other:  # spend of a run outside the build
        other.call("labeller_a", "label_rebuttal", items[2])
    with make_gateway(lake, models_file, env, run_id="first", max_cost_usd=0.01, budget_run_ids=[]) as first_step:
        first_step.call("labeller_a", "label_rebuttal", items[0])  # one call at the test prices costs over a cent
    assert CallLedger(lake).spent_by_runs(["first"])[0] == 1
    made = openai_server.request_count
    for run_id, earlier in (("first", []), ("second", ["first"])):
        with make_gateway(lake, models_file, env, run_id=run_id, max_cost_usd=0.01, budget_run_ids=earlier) as step:
            with pytest.raises(BudgetExceeded, match=r"reached the build budget \$0\.0100"):
                step.call("labeller_a", "label_rebuttal", items[1])
    assert openai_server.request_count == made
    with make_gateway(lake, models_file, env, run_id="third", max_cost_usd=0.01, budget_run_ids=["other2"]) as fresh:
        fresh.call("labeller_a", "label_rebuttal", items[1])  # a build whose runs spent nothing yet
    assert openai_server.request_count == made + 1


def test_map_keeps_order_isolates_bad_items_and_reports_progress(
    tmp_path: Path, models_file: Path, env: dict[str, str], openai_server: ScriptedOpenAIServer
) -> None:
    openai_server.responder = lambda request: json.dumps(
        {"label": "Supported", "evidence_quotes": [], "justification": request["messages"][1]["content"].split("\n")[1]}
    )
    items = [dict(CLAIM, claim=f"Claim {i}.") for i in range(5)]
    items[2] = {"claim": "no author response"}
    progress: list[tuple[int, int]] = []
    with make_gateway(tmp_path / "lake", models_file, env) as gateway:
        results = gateway.map("labeller_a", "label_rebuttal", items,
                              progress=lambda done, total, result: progress.append((done, total)))
    assert [r.parsed["justification"] if r.ok else None for r in results] == [
        "Claim 0.", "Claim 1.", None, "Claim 3.", "Claim 4."]
    assert "item 2" in results[2].error and "author_response" in results[2].error
    assert sorted(progress) == [(n, 5) for n in range(1, 6)]
    assert openai_server.request_count == 4


def test_map_runs_up_to_max_concurrency_and_no_more(
    tmp_path: Path, models_file: Path, env: dict[str, str], openai_server: ScriptedOpenAIServer
) -> None:
    both_in_flight = threading.Barrier(2, timeout=10)
    lock = threading.Lock()
    in_flight = [0, 0]  # current, maximum

    def responder(request: dict[str, Any]) -> str:
        with lock:
            in_flight[0] += 1
            in_flight[1] = max(in_flight[1], in_flight[0])
        both_in_flight.wait()  # raises BrokenBarrierError unless a second request runs alongside
        with lock:
            in_flight[0] -= 1
        return json.dumps({"label": "Supported", "evidence_quotes": [], "justification": "ok"})

    openai_server.responder = responder
    items = [dict(CLAIM, claim=f"Claim {i}.") for i in range(6)]
    with make_gateway(tmp_path / "lake", models_file, env) as gateway:
        results = gateway.map("labeller_a", "label_rebuttal", items)
    assert all(r.ok for r in results)
    assert in_flight[1] == 2

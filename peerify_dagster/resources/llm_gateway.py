"""One way to call every model: recorded, cached, replayable, and able to run offline.

`LLMGateway.call(role_or_model, prompt_id, variables)` renders a versioned prompt, answers
from the call ledger when the same call (same call id) already succeeded, and otherwise asks
the model through its backend with per-model concurrency, a requests-per-minute limiter,
retries with backoff that honour Retry-After, and a per-run token/cost budget. Every model
call, failed ones included, becomes one row of the append-only ledger `<lake>/llm_calls/`
(Parquet segments, each written once via a temporary file and os.replace), which DuckDB reads
as `read_parquet('<lake>/llm_calls/*.parquet')`.

Backends: `openai` (OpenAI API or any compatible server: vLLM serve, llama.cpp, Ollama),
`anthropic` (native messages API), `vllm` (in-process offline engine, optional), and
`local` (a GGUF model shipped in a pip package, served by llama-cpp-python on loopback and
called through the same openai-client path). Models and role profiles come from models.yaml.
The SDKs' own retries are off (max_retries=0) so the gateway's retry loop is the only one.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from peerify_dagster.domain.llm_calls import (
    Message,
    backoff_delay,
    canonical_json,
    compute_call_id,
    estimate_cost_usd,
    estimate_tokens,
    parse_answer,
    parse_retry_after,
    strict_json_schema,
)
from peerify_dagster.domain.prompts import PromptError, load_prompt
from peerify_dagster.resources.files import atomic_path
from peerify_dagster.resources.local_llm import (
    LocalLlamaServer,
    LocalModelError,
    llama_server_available,
    resolve_packaged_gguf,
)

DEFAULT_MODELS_FILE = Path(__file__).resolve().parents[2] / "models.yaml"
CACHE_MODES = ("use", "refresh", "replay-only")
BACKENDS = ("openai", "anthropic", "vllm", "local")
STRUCTURED_OUTPUT_MODES = ("json_schema", "json_object_schema", "json_object", "tool", "none")
DECODING_KEYS = frozenset(
    {"temperature", "top_p", "max_tokens", "seed", "stop", "presence_penalty", "frequency_penalty", "reasoning_effort"}
)
DEFAULT_MAX_TOKENS = 1024
TOOL_NAME = "record_answer"


# ----------------------------------------------------------------------------------------------
# Errors
# ----------------------------------------------------------------------------------------------
class LLMGatewayError(RuntimeError):
    """Base of the gateway's errors."""


class ConfigurationError(LLMGatewayError):
    """models.yaml, a role, a model name or a decoding parameter is wrong."""


class PreflightError(ConfigurationError):
    """Something a configured model needs (an API key, a package, a model file) is missing."""

    def __init__(self, problems: Sequence[str]):
        self.problems = list(problems)
        super().__init__("LLM preflight failed:\n- " + "\n- ".join(self.problems))


class BackendUnavailableError(LLMGatewayError):
    """A backend's package or server cannot be used here."""


class ReplayMissError(LLMGatewayError):
    """cache_mode='replay-only' and the ledger holds no successful call with this id."""


class BudgetExceeded(LLMGatewayError):
    """The run's token or cost budget is spent; calls already made stay recorded."""

    def __init__(self, message: str, results: Sequence[CallResult | None] = ()):
        super().__init__(message)
        self.results = list(results)


class CallFailedError(LLMGatewayError):
    """A model call failed for good (gave up after retries, or a non-retryable error)."""

    def __init__(self, message: str, result: CallResult):
        super().__init__(message)
        self.result = result


class _TransientError(Exception):
    """Worth retrying: 429, 5xx, timeouts, dropped connections, truncated streams."""

    def __init__(self, message: str, retry_after_s: float | None = None):
        super().__init__(message)
        self.retry_after_s = retry_after_s


class _PermanentError(Exception):
    """Retrying would not help: 4xx other than 429, malformed responses."""


# ----------------------------------------------------------------------------------------------
# Registry: models.yaml
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ModelSpec:
    """One named model of models.yaml."""

    name: str
    backend: str
    model: str
    base_url: str | None = None
    base_url_env: str | None = None
    api_key_env: str | None = None
    api_key_required: bool = True
    context_window: int = 8192
    price_in_per_million: float = 0.0
    price_out_per_million: float = 0.0
    max_concurrency: int = 1
    requests_per_minute: float | None = None
    structured_output: str = "json_schema"
    max_tokens_param: str = "max_tokens"
    stream: bool = False
    decoding: Mapping[str, Any] = field(default_factory=dict)
    gguf_package: str | None = None
    gguf_file: str | None = None
    gguf_path_env: str | None = None

    @classmethod
    def from_mapping(cls, name: str, raw: Mapping[str, Any]) -> ModelSpec:
        known = {f.name for f in fields(cls)} - {"name"}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ConfigurationError(f"model {name!r}: unknown settings {unknown}")
        spec = cls(name=name, **{**raw, "decoding": dict(raw.get("decoding") or {})})
        if spec.backend not in BACKENDS:
            raise ConfigurationError(f"model {name!r}: backend {spec.backend!r} is not one of {BACKENDS}")
        if spec.structured_output not in STRUCTURED_OUTPUT_MODES:
            raise ConfigurationError(
                f"model {name!r}: structured_output {spec.structured_output!r} is not one of {STRUCTURED_OUTPUT_MODES}"
            )
        bad_decoding = sorted(set(spec.decoding) - DECODING_KEYS)
        if bad_decoding:
            raise ConfigurationError(f"model {name!r}: unknown decoding parameters {bad_decoding}")
        if spec.max_concurrency < 1:
            raise ConfigurationError(f"model {name!r}: max_concurrency must be at least 1")
        return spec

    @property
    def is_remote(self) -> bool:
        return self.backend in ("openai", "anthropic")

    def resolved_base_url(self, env: Mapping[str, str]) -> str | None:
        return (env.get(self.base_url_env) if self.base_url_env else None) or self.base_url

    def api_key(self, env: Mapping[str, str]) -> str | None:
        return env.get(self.api_key_env) if self.api_key_env else None

    def missing_key_problem(self, env: Mapping[str, str]) -> str | None:
        """Why this model cannot authenticate, or None."""
        if not self.is_remote or not self.api_key_required or self.api_key(env):
            return None
        if not self.api_key_env:
            return f"model {self.name!r} needs an API key but models.yaml names no api_key_env for it"
        return f"model {self.name!r} needs environment variable {self.api_key_env} (its API key), which is not set"


@dataclass(frozen=True)
class ModelRegistry:
    """Named models plus the active profile's role -> model(s) map, env overrides applied."""

    models: Mapping[str, ModelSpec]
    profile: str
    roles: Mapping[str, tuple[str, ...]]

    @classmethod
    def load(
        cls, path: Path | None = None, env: Mapping[str, str] | None = None, profile: str | None = None
    ) -> ModelRegistry:
        env = os.environ if env is None else env
        path = Path(path or env.get("PEERIFY_MODELS_FILE") or DEFAULT_MODELS_FILE)
        if not path.is_file():
            raise ConfigurationError(f"model registry {path} not found")
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        models = {name: ModelSpec.from_mapping(name, entry) for name, entry in (raw.get("models") or {}).items()}
        profiles = raw.get("profiles") or {}
        chosen = profile or env.get("PEERIFY_LLM_PROFILE") or raw.get("default_profile") or "offline"
        if chosen not in profiles:
            raise ConfigurationError(f"LLM profile {chosen!r} not in {path.name}; known profiles: {sorted(profiles)}")
        roles: dict[str, tuple[str, ...]] = {role: _as_names(value) for role, value in profiles[chosen].items()}
        for key, value in env.items():
            if key.startswith("PEERIFY_ROLE_") and value.strip():
                roles[key.removeprefix("PEERIFY_ROLE_").lower()] = _as_names(value)
        for role, names in roles.items():
            unknown = [name for name in names if name not in models]
            if unknown:
                raise ConfigurationError(f"role {role!r} (profile {chosen!r}) names unknown models {unknown}")
        return cls(models=models, profile=chosen, roles=roles)

    def model(self, name: str) -> ModelSpec:
        if name not in self.models:
            raise ConfigurationError(f"unknown model {name!r}; known models: {sorted(self.models)}")
        return self.models[name]

    def models_for_role(self, role: str) -> list[str]:
        if role not in self.roles:
            raise ConfigurationError(f"unknown role {role!r} in profile {self.profile!r}; roles: {sorted(self.roles)}")
        return list(self.roles[role])

    def resolve(self, target: str) -> tuple[str | None, ModelSpec]:
        """(role, model) for a role name or a model name; a role must map to exactly one model."""
        if target in self.roles:
            names = self.roles[target]
            if len(names) != 1:
                raise ConfigurationError(
                    f"role {target!r} maps to {len(names)} models {list(names)}; "
                    f"call each by model name with role={target!r}"
                )
            return target, self.models[names[0]]
        if target in self.models:
            return None, self.models[target]
        raise ConfigurationError(
            f"{target!r} is neither a role of profile {self.profile!r} ({sorted(self.roles)}) "
            f"nor a model ({sorted(self.models)})"
        )


def _as_names(value: str | Sequence[str]) -> tuple[str, ...]:
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    return tuple(value)


# ----------------------------------------------------------------------------------------------
# Ledger: append-only Parquet segments
# ----------------------------------------------------------------------------------------------
LEDGER_SCHEMA = pa.schema([
    ("call_id", pa.string()),
    ("role", pa.string()),
    ("prompt_id", pa.string()),
    ("prompt_hash", pa.string()),
    ("backend", pa.string()),
    ("model", pa.string()),
    ("model_id", pa.string()),
    ("request", pa.string()),
    ("raw_response", pa.string()),
    ("parsed", pa.string()),
    ("parse_ok", pa.bool_()),
    ("label", pa.string()),
    ("tokens_in", pa.int64()),
    ("tokens_out", pa.int64()),
    ("latency_s", pa.float64()),
    ("cost_usd", pa.float64()),
    ("error", pa.string()),
    ("attempts", pa.int32()),
    ("created_at", pa.timestamp("us", tz="UTC")),
    ("run_id", pa.string()),
])


_INDEX_COLUMNS = [name for name in LEDGER_SCHEMA.names if name != "request"]


class CallLedger:
    """The `llm_calls` table: buffered appends, each flush one new immutable segment file."""

    def __init__(self, lake_root: Path, flush_every: int = 32):
        self.directory = Path(lake_root) / "llm_calls"
        self.flush_every = flush_every
        self._pending: list[dict[str, Any]] = []
        self._successes: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._load_index()

    def _load_index(self) -> None:
        # Segments sort by creation time (their names start with a UTC timestamp), so a later
        # success for the same call id (a `refresh` run) replaces an earlier one.
        for segment in self.segments():
            # The request column (rendered prompts) is the bulk of a row and not needed to answer.
            for row in pq.read_table(segment, columns=_INDEX_COLUMNS).to_pylist():
                if row["error"] is None:
                    self._successes[row["call_id"]] = row

    def ensure_exists(self) -> None:
        """Write an empty segment when there is none, so `read_parquet` over the folder always works."""
        if not self.segments():
            self.directory.mkdir(parents=True, exist_ok=True)
            self._write_segment([])

    def segments(self) -> list[Path]:
        return sorted(self.directory.glob("*.parquet"))

    def lookup(self, call_id: str) -> dict[str, Any] | None:
        """The latest successful row with this call id, or None."""
        return self._successes.get(call_id)

    def successful_call_ids(self) -> list[str]:
        """Ids of every call the ledger can answer."""
        return list(self._successes)

    def append(self, row: Mapping[str, Any]) -> None:
        with self._lock:
            self._pending.append(dict(row))
            if row["error"] is None:
                self._successes[row["call_id"]] = {key: row[key] for key in _INDEX_COLUMNS}
            should_flush = len(self._pending) >= self.flush_every
        if should_flush:
            self.flush()

    def flush(self) -> Path | None:
        """Write pending rows as a new segment (tmp file + os.replace); None when nothing is pending."""
        with self._lock:
            rows, self._pending = self._pending, []
            if not rows:
                return None
            self.directory.mkdir(parents=True, exist_ok=True)
            return self._write_segment(rows)

    def _write_segment(self, rows: list[dict[str, Any]]) -> Path:
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
        final = self.directory / f"part-{stamp}-{uuid.uuid4().hex[:8]}.parquet"
        with atomic_path(final) as temporary:
            pq.write_table(pa.Table.from_pylist(rows, schema=LEDGER_SCHEMA), temporary)
        return final


# ----------------------------------------------------------------------------------------------
# Results, usage, limits
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CallResult:
    """What one `call` returns (a fresh model answer or one served from the ledger)."""

    call_id: str
    role: str | None
    prompt_id: str
    model: str
    backend: str
    raw_response: str | None
    parsed: dict[str, Any] | None
    parse_ok: bool
    label: str | None
    tokens_in: int
    tokens_out: int
    latency_s: float
    cost_usd: float
    attempts: int
    error: str | None
    cached: bool

    @property
    def ok(self) -> bool:
        return self.error is None

    @classmethod
    def from_row(cls, row: Mapping[str, Any], cached: bool) -> CallResult:
        return cls(
            call_id=row["call_id"], role=row["role"], prompt_id=row["prompt_id"], model=row["model"],
            backend=row["backend"], raw_response=row["raw_response"],
            parsed=json.loads(row["parsed"]) if row["parsed"] else None, parse_ok=bool(row["parse_ok"]),
            label=row["label"], tokens_in=int(row["tokens_in"]), tokens_out=int(row["tokens_out"]),
            latency_s=float(row["latency_s"]), cost_usd=float(row["cost_usd"]), attempts=int(row["attempts"]),
            error=row["error"], cached=cached,
        )


@dataclass
class UsageCounters:
    calls: int = 0
    cache_hits: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    parse_failures: int = 0
    errors: int = 0

    def add(self, result: CallResult) -> None:
        if result.cached:
            self.cache_hits += 1
            return
        self.calls += 1
        self.tokens_in += result.tokens_in
        self.tokens_out += result.tokens_out
        self.cost_usd += result.cost_usd
        self.errors += int(result.error is not None)
        self.parse_failures += int(result.error is None and not result.parse_ok)


class RateLimiter:
    """Spaces request starts evenly so a model never sees more than `requests_per_minute`."""

    def __init__(
        self, requests_per_minute: float,
        clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
    ):
        self.interval_s = 60.0 / requests_per_minute
        self._clock = clock
        self._sleep = sleep
        self._next_start = 0.0
        self._lock = threading.Lock()

    def acquire(self) -> None:
        with self._lock:
            now = self._clock()
            start = max(now, self._next_start)
            self._next_start = start + self.interval_s
        if start > now:
            self._sleep(start - now)


class _Budget:
    def __init__(self, max_cost_usd: float | None, max_tokens: int | None):
        self.max_cost_usd = max_cost_usd
        self.max_tokens = max_tokens
        self.cost_usd = 0.0
        self.tokens = 0
        self._lock = threading.Lock()

    def exhausted_reason(self) -> str | None:
        with self._lock:
            if self.max_cost_usd is not None and self.cost_usd >= self.max_cost_usd:
                return f"cost ${self.cost_usd:.4f} reached the run budget ${self.max_cost_usd:.4f}"
            if self.max_tokens is not None and self.tokens >= self.max_tokens:
                return f"{self.tokens} tokens reached the run budget of {self.max_tokens} tokens"
            return None

    def spend(self, tokens: int, cost_usd: float) -> None:
        with self._lock:
            self.tokens += tokens
            self.cost_usd += cost_usd


# ----------------------------------------------------------------------------------------------
# Backends
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Completion:
    text: str
    tokens_in: int
    tokens_out: int


class Backend(Protocol):
    def complete(
        self, messages: list[Message], decoding: Mapping[str, Any], schema: Mapping[str, Any] | None
    ) -> Completion:
        ...


def _classify_sdk_error(error: Exception) -> Exception:
    """Map an openai/anthropic SDK exception (both share one design) to transient or permanent."""
    if isinstance(error, (_TransientError, _PermanentError)):
        return error
    status = getattr(error, "status_code", None)
    response = getattr(error, "response", None)
    name = type(error).__name__
    if isinstance(error, json.JSONDecodeError):
        return _PermanentError(f"malformed response body (not JSON): {error}")
    if isinstance(status, int):
        retry_after = parse_retry_after(dict(response.headers)) if response is not None else None
        message = f"HTTP {status}: {str(error)[:300]}"
        if status == 429 or status >= 500:
            return _TransientError(message, retry_after)
        return _PermanentError(message)
    if name in ("APITimeoutError", "APIConnectionError"):
        return _TransientError(f"{name}: {error}")
    return _PermanentError(f"{name}: {str(error)[:300]}")


class OpenAIChatBackend:
    """Chat completions through the openai SDK: OpenAI, vLLM serve, llama.cpp server, Ollama."""

    def __init__(self, spec: ModelSpec, base_url: str | None, api_key: str, timeout_s: float):
        import openai

        self.spec = spec
        self.client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=timeout_s)

    def _response_format(self, schema: Mapping[str, Any] | None) -> dict[str, Any] | None:
        mode = self.spec.structured_output
        if schema is None or mode in ("none", "tool"):
            return None
        if mode == "json_schema":
            json_schema = {"name": "answer", "schema": strict_json_schema(schema), "strict": True}
            return {"type": "json_schema", "json_schema": json_schema}
        if mode == "json_object_schema":
            # llama.cpp's server constrains decoding with this form and rejects "json_schema".
            return {"type": "json_object", "schema": dict(schema)}
        return {"type": "json_object"}

    def complete(
        self, messages: list[Message], decoding: Mapping[str, Any], schema: Mapping[str, Any] | None
    ) -> Completion:
        params = dict(decoding)
        params[self.spec.max_tokens_param] = params.pop("max_tokens", DEFAULT_MAX_TOKENS)
        response_format = self._response_format(schema)
        if response_format is not None:
            params["response_format"] = response_format
        try:
            if self.spec.stream:
                return self._complete_streaming(messages, params)
            response = self.client.chat.completions.create(model=self.spec.model, messages=messages, **params)
        except Exception as error:  # noqa: BLE001 - every SDK failure is classified, none swallowed
            raise _classify_sdk_error(error) from error
        if not response.choices:
            raise _PermanentError("response has no choices")
        text = response.choices[0].message.content or ""
        usage = response.usage
        return Completion(
            text=text,
            tokens_in=usage.prompt_tokens if usage else estimate_tokens(canonical_json(messages)),
            tokens_out=usage.completion_tokens if usage else estimate_tokens(text),
        )

    def _complete_streaming(self, messages: list[Message], params: dict[str, Any]) -> Completion:
        pieces: list[str] = []
        finished = False
        usage = None
        stream = self.client.chat.completions.create(
            model=self.spec.model, messages=messages, stream=True, stream_options={"include_usage": True}, **params
        )
        for chunk in stream:
            usage = chunk.usage or usage
            for choice in chunk.choices:
                pieces.append(choice.delta.content or "")
                finished = finished or choice.finish_reason is not None
        text = "".join(pieces)
        if not finished:
            raise _TransientError(f"stream ended before the answer was complete ({len(text)} characters received)")
        return Completion(
            text=text,
            tokens_in=usage.prompt_tokens if usage else estimate_tokens(canonical_json(messages)),
            tokens_out=usage.completion_tokens if usage else estimate_tokens(text),
        )


class AnthropicBackend:
    """Claude through the native messages API; structured output by a forced tool call."""

    def __init__(self, spec: ModelSpec, base_url: str | None, api_key: str, timeout_s: float):
        import anthropic

        self.spec = spec
        self.client = anthropic.Anthropic(base_url=base_url, api_key=api_key, max_retries=0, timeout=timeout_s)

    def complete(
        self, messages: list[Message], decoding: Mapping[str, Any], schema: Mapping[str, Any] | None
    ) -> Completion:
        system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
        params: dict[str, Any] = {
            "model": self.spec.model,
            "max_tokens": decoding.get("max_tokens", DEFAULT_MAX_TOKENS),
            "messages": [m for m in messages if m["role"] != "system"],
        }
        if system:
            params["system"] = system
        # Recent SDK releases dropped the sampling arguments; the API still reads them from the
        # body for models that accept them, so they travel there when configured.
        sampling = {key: decoding[key] for key in ("temperature", "top_p") if key in decoding}
        if sampling:
            params["extra_body"] = sampling
        if "stop" in decoding:
            params["stop_sequences"] = list(decoding["stop"])
        if schema is not None and self.spec.structured_output == "tool":
            params["tools"] = [{"name": TOOL_NAME, "description": "Record the answer.", "input_schema": dict(schema)}]
            params["tool_choice"] = {"type": "tool", "name": TOOL_NAME}
        try:
            if self.spec.stream:
                with self.client.messages.stream(**params) as stream:
                    message = stream.get_final_message()
                if message.stop_reason is None:
                    raise _TransientError("stream ended before the message was complete")
            else:
                message = self.client.messages.create(**params)
        except Exception as error:  # noqa: BLE001 - every SDK failure is classified, none swallowed
            raise _classify_sdk_error(error) from error
        tool_inputs = [block.input for block in message.content if block.type == "tool_use"]
        text = json.dumps(tool_inputs[0]) if tool_inputs else "".join(
            block.text for block in message.content if block.type == "text"
        )
        return Completion(text=text, tokens_in=message.usage.input_tokens, tokens_out=message.usage.output_tokens)


class VllmEngineBackend:
    """vLLM's offline engine in this process (GPU hosts with vllm installed)."""

    def __init__(self, spec: ModelSpec):
        try:
            import vllm
        except ImportError as error:
            raise BackendUnavailableError(_vllm_missing_message(spec)) from error
        self.spec = spec
        self._vllm = vllm
        self.engine = vllm.LLM(model=spec.model, max_model_len=spec.context_window)

    def _structured(self, schema: Mapping[str, Any] | None) -> dict[str, Any]:
        if schema is None:
            return {}
        try:  # vLLM >= 0.10 names it structured_outputs; older releases guided_decoding.
            from vllm.sampling_params import StructuredOutputsParams

            return {"structured_outputs": StructuredOutputsParams(json=dict(schema))}
        except ImportError:
            from vllm.sampling_params import GuidedDecodingParams

            return {"guided_decoding": GuidedDecodingParams(json=dict(schema))}

    def complete(
        self, messages: list[Message], decoding: Mapping[str, Any], schema: Mapping[str, Any] | None
    ) -> Completion:
        sampling = {key: decoding[key] for key in ("temperature", "top_p", "seed", "stop", "presence_penalty",
                                                    "frequency_penalty") if key in decoding}
        params = self._vllm.SamplingParams(
            max_tokens=decoding.get("max_tokens", DEFAULT_MAX_TOKENS), **sampling, **self._structured(schema)
        )
        output = self.engine.chat(messages, params, use_tqdm=False)[0]
        return Completion(
            text=output.outputs[0].text,
            tokens_in=len(output.prompt_token_ids or []),
            tokens_out=len(output.outputs[0].token_ids),
        )


def _vllm_missing_message(spec: ModelSpec) -> str:
    return (
        f"model {spec.name!r} uses backend 'vllm' (in-process engine), which needs the vllm package and a CUDA GPU: "
        "install vllm on a GPU host, or run `vllm serve` there and use backend 'openai' with VLLM_BASE_URL"
    )


def _local_model_path(spec: ModelSpec, env: Mapping[str, str]) -> Path:
    override = env.get(spec.gguf_path_env) if spec.gguf_path_env else None
    if override:
        return Path(override)
    if not (spec.gguf_package and spec.gguf_file):
        raise ConfigurationError(
            f"local model {spec.name!r} needs gguf_package and gguf_file (or {spec.gguf_path_env})"
        )
    return resolve_packaged_gguf(spec.gguf_package, spec.gguf_file)


# ----------------------------------------------------------------------------------------------
# The gateway
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _PreparedCall:
    call_id: str
    role: str | None
    prompt_id: str
    prompt_hash: str
    spec: ModelSpec
    messages: list[Message]
    decoding: dict[str, Any]
    schema: dict[str, Any] | None
    request_json: str


ProgressCallback = Callable[[int, int, CallResult], None]


class LLMGateway:
    """Calls models by role or name; records every call in the ledger under `lake_root`."""

    def __init__(
        self,
        lake_root: str | Path,
        models_file: str | Path | None = None,
        profile: str | None = None,
        cache_mode: str | None = None,
        run_id: str | None = None,
        max_cost_usd: float | None = None,
        max_tokens: int | None = None,
        max_attempts: int = 5,
        backoff_base_s: float = 1.0,
        backoff_max_s: float = 60.0,
        request_timeout_s: float = 120.0,
        env: Mapping[str, str] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.env: Mapping[str, str] = os.environ if env is None else env
        self.registry = ModelRegistry.load(Path(models_file) if models_file else None, self.env, profile)
        self.cache_mode = cache_mode or self.env.get("PEERIFY_LLM_CACHE_MODE") or "use"
        if self.cache_mode not in CACHE_MODES:
            raise ConfigurationError(f"cache_mode {self.cache_mode!r} is not one of {CACHE_MODES}")
        self.run_id = run_id or uuid.uuid4().hex
        self.max_attempts = max_attempts
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self.request_timeout_s = request_timeout_s
        self.ledger = CallLedger(Path(lake_root))
        self.ledger.ensure_exists()
        self._sleep = sleep
        self._rng = random.Random()
        self._budget = _Budget(max_cost_usd, max_tokens)
        self._backends: dict[str, Backend] = {}
        self._backend_locks: dict[str, threading.Lock] = defaultdict(threading.Lock)
        self._local_servers: dict[Path, LocalLlamaServer] = {}
        self._local_servers_lock = threading.Lock()
        self._semaphores = {name: threading.BoundedSemaphore(spec.max_concurrency)
                            for name, spec in self.registry.models.items()}
        self._limiters = {name: RateLimiter(spec.requests_per_minute, sleep=sleep)
                          for name, spec in self.registry.models.items() if spec.requests_per_minute}
        self._usage_by_model: dict[str, UsageCounters] = defaultdict(UsageCounters)
        self._usage_by_role: dict[str, UsageCounters] = defaultdict(UsageCounters)
        self._usage_lock = threading.Lock()

    # -- configuration ---------------------------------------------------------------------------
    def models_for_role(self, role: str) -> list[str]:
        return self.registry.models_for_role(role)

    def preflight(self, roles: Sequence[str] | None = None) -> dict[str, list[str]]:
        """Check keys, packages and model files of every model the roles use, before any work.

        Returns role -> model names; raises PreflightError naming each model and what it lacks.
        """
        chosen = list(roles) if roles is not None else sorted(self.registry.roles)
        plan = {role: self.registry.models_for_role(role) for role in chosen}
        problems: list[str] = []
        for name in sorted({name for names in plan.values() for name in names}):
            spec = self.registry.model(name)
            problem = spec.missing_key_problem(self.env) or self._availability_problem(spec)
            if problem:
                problems.append(problem)
        if problems:
            raise PreflightError(problems)
        return plan

    def _availability_problem(self, spec: ModelSpec) -> str | None:
        if spec.backend in ("openai", "anthropic") and importlib.util.find_spec(spec.backend) is None:
            return f"model {spec.name!r} needs the {spec.backend} package (pip install {spec.backend})"
        if spec.backend == "vllm" and importlib.util.find_spec("vllm") is None:
            return _vllm_missing_message(spec)
        if spec.backend == "local":
            if not llama_server_available():
                return (f"model {spec.name!r} needs llama-cpp-python[server] "
                        "(pip install 'llama-cpp-python[server]==0.3.36')")
            try:
                _local_model_path(spec, self.env)
            except (LocalModelError, ConfigurationError) as error:
                return f"model {spec.name!r}: {error}"
        return None

    # -- calling ---------------------------------------------------------------------------------
    def call(
        self,
        target: str,
        prompt_id: str,
        variables: Mapping[str, Any],
        schema: Mapping[str, Any] | None = None,
        *,
        role: str | None = None,
        **decoding: Any,
    ) -> CallResult:
        """One call by role or model name. `schema` defaults to the prompt's output schema.

        Raises CallFailedError (recorded in the ledger), ReplayMissError, BudgetExceeded,
        PromptError or ConfigurationError.
        """
        return self._execute(self._prepare(target, prompt_id, variables, schema, role, decoding))

    def map(
        self,
        target: str,
        prompt_id: str,
        items: Sequence[Mapping[str, Any]],
        schema: Mapping[str, Any] | None = None,
        *,
        role: str | None = None,
        progress: ProgressCallback | None = None,
        **decoding: Any,
    ) -> list[CallResult]:
        """`call` for each variables mapping in `items`, in parallel up to the model's max_concurrency.

        Results keep the order of `items`. An item that fails (bad variables, a model error)
        yields a result with `error` set and the rest still run; a spent budget or a replay
        miss stops the batch and raises.
        """
        _, spec = self.registry.resolve(target)
        total = len(items)
        results: list[CallResult | None] = [None] * total
        done = 0

        def run(index: int) -> CallResult:
            try:
                return self.call(target, prompt_id, items[index], schema, role=role, **decoding)
            except CallFailedError as error:
                return error.result
            except PromptError as error:
                return self._input_error_result(target, prompt_id, role, spec, index, error)

        stop_error: BaseException | None = None
        with ThreadPoolExecutor(max_workers=spec.max_concurrency, thread_name_prefix=f"llm-{spec.name}") as pool:
            futures: dict[Future[CallResult], int] = {pool.submit(run, index): index for index in range(total)}
            pending = set(futures)
            try:
                while pending and stop_error is None:
                    finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                    for future in finished:
                        if future.exception() is not None:
                            stop_error = stop_error or future.exception()
                            continue
                        results[futures[future]] = future.result()
                        done += 1
                        if progress is not None:
                            progress(done, total, future.result())
            finally:
                for future in pending:
                    future.cancel()
        # Calls already running when the batch stopped finish during the pool's shutdown; they were made
        # and recorded, so their results are returned too.
        for future, index in futures.items():
            if results[index] is None and not future.cancelled() and future.exception() is None:
                results[index] = future.result()
        self.ledger.flush()
        if isinstance(stop_error, BudgetExceeded):
            raise BudgetExceeded(str(stop_error), results) from stop_error
        if stop_error is not None:
            raise stop_error
        return [result for result in results if result is not None]

    def _input_error_result(
        self, target: str, prompt_id: str, role: str | None, spec: ModelSpec, index: int, error: Exception
    ) -> CallResult:
        return CallResult(
            call_id="", role=role or (target if target != spec.name else None), prompt_id=prompt_id,
            model=spec.name, backend=spec.backend, raw_response=None, parsed=None, parse_ok=False, label=None,
            tokens_in=0, tokens_out=0, latency_s=0.0, cost_usd=0.0, attempts=0,
            error=f"item {index}: {error}", cached=False,
        )

    def _prepare(
        self, target: str, prompt_id: str, variables: Mapping[str, Any], schema: Mapping[str, Any] | None,
        role: str | None, decoding: Mapping[str, Any],
    ) -> _PreparedCall:
        resolved_role, spec = self.registry.resolve(target)
        unknown = sorted(set(decoding) - DECODING_KEYS)
        if unknown:
            raise ConfigurationError(f"unknown decoding parameters {unknown}; allowed: {sorted(DECODING_KEYS)}")
        template = load_prompt(prompt_id)
        messages = template.render(variables)
        effective_schema = dict(schema) if schema is not None else template.output_schema
        merged = {**spec.decoding, **decoding}
        identity = {"params": merged, "schema": effective_schema, "structured_output": spec.structured_output}
        call_id = compute_call_id(spec.backend, spec.model, template.content_hash, messages, identity)
        request = {"model_id": spec.model, "messages": messages, **identity}
        return _PreparedCall(
            call_id=call_id, role=role or resolved_role, prompt_id=prompt_id, prompt_hash=template.content_hash,
            spec=spec, messages=messages, decoding=merged, schema=effective_schema,
            request_json=canonical_json(request),
        )

    def _execute(self, call: _PreparedCall) -> CallResult:
        if self.cache_mode != "refresh":
            row = self.ledger.lookup(call.call_id)
            if row is not None:
                return self._count(CallResult.from_row(row, cached=True))
            if self.cache_mode == "replay-only":
                raise ReplayMissError(
                    f"replay-only: the ledger has no successful call for model {call.spec.name!r}, "
                    f"prompt {call.prompt_id!r}, call_id {call.call_id}"
                )
        reason = self._budget.exhausted_reason()
        if reason:
            self.ledger.flush()
            raise BudgetExceeded(f"run {self.run_id} stopped: {reason}; not calling model {call.spec.name!r} "
                                 f"for call_id {call.call_id}")
        backend = self._backend(call.spec)
        started = time.monotonic()
        completion, error, attempts = self._attempt(backend, call)
        latency = time.monotonic() - started
        row = self._row(call, completion, error, attempts, latency)
        self.ledger.append(row)
        result = self._count(CallResult.from_row(row, cached=False))
        self._budget.spend(result.tokens_in + result.tokens_out, result.cost_usd)
        if error is not None:
            raise CallFailedError(f"model {call.spec.name!r} call_id {call.call_id}: {error}", result)
        return result

    def _attempt(self, backend: Backend, call: _PreparedCall) -> tuple[Completion | None, str | None, int]:
        limiter = self._limiters.get(call.spec.name)
        with self._semaphores[call.spec.name]:
            for attempt in range(1, self.max_attempts + 1):
                if limiter is not None:
                    limiter.acquire()
                try:
                    return backend.complete(call.messages, call.decoding, call.schema), None, attempt
                except _PermanentError as error:
                    return None, str(error), attempt
                except _TransientError as error:
                    if attempt == self.max_attempts:
                        return None, f"gave up after {attempt} attempts; last error: {error}", attempt
                    self._sleep(backoff_delay(attempt, self.backoff_base_s, self.backoff_max_s,
                                              error.retry_after_s, self._rng))
        raise AssertionError("unreachable: the loop returns on its last attempt")

    def _row(
        self, call: _PreparedCall, completion: Completion | None, error: str | None, attempts: int, latency: float
    ) -> dict[str, Any]:
        parsed = parse_answer(completion.text, call.schema) if completion else None
        tokens_in = completion.tokens_in if completion else 0
        tokens_out = completion.tokens_out if completion else 0
        return {
            "call_id": call.call_id, "role": call.role, "prompt_id": call.prompt_id, "prompt_hash": call.prompt_hash,
            "backend": call.spec.backend, "model": call.spec.name, "model_id": call.spec.model,
            "request": call.request_json,
            "raw_response": completion.text if completion else None,
            "parsed": canonical_json(parsed.parsed) if parsed and parsed.parsed is not None else None,
            "parse_ok": bool(parsed and parsed.parse_ok),
            "label": parsed.label if parsed else None,
            "tokens_in": tokens_in, "tokens_out": tokens_out, "latency_s": latency,
            "cost_usd": estimate_cost_usd(tokens_in, tokens_out, call.spec.price_in_per_million,
                                          call.spec.price_out_per_million),
            "error": error, "attempts": attempts,
            "created_at": datetime.now(UTC), "run_id": self.run_id,
        }

    def _backend(self, spec: ModelSpec) -> Backend:
        with self._backend_locks[spec.name]:
            if spec.name not in self._backends:
                self._backends[spec.name] = self._create_backend(spec)
            return self._backends[spec.name]

    def _create_backend(self, spec: ModelSpec) -> Backend:
        problem = spec.missing_key_problem(self.env)
        if problem:
            raise PreflightError([problem])
        if spec.backend == "vllm":
            return VllmEngineBackend(spec)
        if spec.backend == "local":
            return OpenAIChatBackend(spec, self._local_server(spec).base_url, "sk-local-no-key", self.request_timeout_s)
        api_key = spec.api_key(self.env) or "not-needed"
        backend_class = AnthropicBackend if spec.backend == "anthropic" else OpenAIChatBackend
        return backend_class(spec, spec.resolved_base_url(self.env), api_key, self.request_timeout_s)

    def _local_server(self, spec: ModelSpec) -> LocalLlamaServer:
        model_path = _local_model_path(spec, self.env)
        with self._local_servers_lock:
            server = self._local_servers.get(model_path)
            if server is None:
                # Models that share a GGUF file (different decoding only) share one server.
                server = LocalLlamaServer(model_path, model_alias=spec.model, n_ctx=spec.context_window)
                self._local_servers[model_path] = server
            try:
                server.start()
            except LocalModelError as error:
                raise BackendUnavailableError(f"model {spec.name!r}: {error}") from error
        return server

    @property
    def local_servers(self) -> list[LocalLlamaServer]:
        return list(self._local_servers.values())

    # -- accounting ------------------------------------------------------------------------------
    def _count(self, result: CallResult) -> CallResult:
        with self._usage_lock:
            self._usage_by_model[result.model].add(result)
            self._usage_by_role[result.role or "(no role)"].add(result)
        return result

    def usage(self) -> dict[str, dict[str, dict[str, float | int]]]:
        """Counters per model and per role (calls, cache_hits, tokens, cost, parse_failures, errors)."""
        with self._usage_lock:
            return {
                "by_model": {name: vars(counters).copy() for name, counters in self._usage_by_model.items()},
                "by_role": {name: vars(counters).copy() for name, counters in self._usage_by_role.items()},
            }

    # -- lifecycle -------------------------------------------------------------------------------
    def close(self) -> None:
        """Write pending ledger rows and stop local model servers."""
        self.ledger.flush()
        for server in self._local_servers.values():
            server.stop()

    def __enter__(self) -> LLMGateway:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

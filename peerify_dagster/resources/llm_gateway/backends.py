"""How the gateway talks to models: one backend class per wire protocol or engine.

`openai` (OpenAI API or any compatible server: vLLM serve, llama.cpp, Ollama), `anthropic` (native
messages API), `vllm` (in-process offline engine, optional) and `local` (a GGUF model served by llama.cpp
inside this process, called through the same openai-client path as `openai`). The SDKs' own retries are
off (max_retries=0) so the gateway's retry loop is the only one; SDK failures are classified as transient
(worth retrying) or permanent.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from peerify_dagster.domain.llm_calls import (
    Message,
    canonical_json,
    estimate_tokens,
    parse_retry_after,
    strict_json_schema,
)
from peerify_dagster.resources.llm_gateway.errors import BackendUnavailableError, PermanentError, TransientError
from peerify_dagster.resources.llm_gateway.registry import ModelSpec
from peerify_dagster.resources.local_llm import LocalLlamaServer, LocalModelError

DEFAULT_MAX_TOKENS = 1024
TOOL_NAME = "record_answer"


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


def classify_sdk_error(error: Exception) -> Exception:
    """Map an openai/anthropic SDK exception (both share one design) to transient or permanent."""
    if isinstance(error, (TransientError, PermanentError)):
        return error
    status = getattr(error, "status_code", None)
    response = getattr(error, "response", None)
    name = type(error).__name__
    if isinstance(error, json.JSONDecodeError):
        return PermanentError(f"malformed response body (not JSON): {error}")
    if isinstance(status, int):
        retry_after = parse_retry_after(dict(response.headers)) if response is not None else None
        message = f"HTTP {status}: {str(error)[:300]}"
        if status == 429 or status >= 500:
            return TransientError(message, retry_after)
        return PermanentError(message)
    if name in ("APITimeoutError", "APIConnectionError"):
        return TransientError(f"{name}: {error}")
    return PermanentError(f"{name}: {str(error)[:300]}")


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
            # llama-cpp-python's server constrains decoding with this form and rejects "json_schema".
            return {"type": "json_object", "schema": dict(schema)}
        return {"type": "json_object"}

    def request_params(
        self, messages: list[Message], decoding: Mapping[str, Any], schema: Mapping[str, Any] | None
    ) -> dict[str, Any]:
        """The chat-completions request body (a batch request's body too), without streaming."""
        params = dict(decoding)
        params[self.spec.max_tokens_param] = params.pop("max_tokens", DEFAULT_MAX_TOKENS)
        response_format = self._response_format(schema)
        if response_format is not None:
            params["response_format"] = response_format
        return {"model": self.spec.model, "messages": messages, **params}

    def complete(
        self, messages: list[Message], decoding: Mapping[str, Any], schema: Mapping[str, Any] | None
    ) -> Completion:
        params = self.request_params(messages, decoding, schema)
        try:
            if self.spec.stream:
                return self._complete_streaming(messages, params)
            response = self.client.chat.completions.create(**params)
        except Exception as error:  # noqa: BLE001 - every SDK failure is classified, none swallowed
            raise classify_sdk_error(error) from error
        return chat_completion(response, messages)

    def _complete_streaming(self, messages: list[Message], params: dict[str, Any]) -> Completion:
        pieces: list[str] = []
        finished = False
        usage = None
        stream = self.client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **params)
        for chunk in stream:
            usage = chunk.usage or usage
            for choice in chunk.choices:
                pieces.append(choice.delta.content or "")
                finished = finished or choice.finish_reason is not None
        text = "".join(pieces)
        if not finished:
            raise TransientError(f"stream ended before the answer was complete ({len(text)} characters received)")
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

    def request_params(
        self, messages: list[Message], decoding: Mapping[str, Any], schema: Mapping[str, Any] | None
    ) -> dict[str, Any]:
        """The SDK arguments of `messages.create` (a batch request's params, with `extra_body` merged in)."""
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
        return params

    def complete(
        self, messages: list[Message], decoding: Mapping[str, Any], schema: Mapping[str, Any] | None
    ) -> Completion:
        params = self.request_params(messages, decoding, schema)
        try:
            if self.spec.stream:
                with self.client.messages.stream(**params) as stream:
                    message = stream.get_final_message()
                if message.stop_reason is None:
                    raise TransientError("stream ended before the message was complete")
            else:
                message = self.client.messages.create(**params)
        except Exception as error:  # noqa: BLE001 - every SDK failure is classified, none swallowed
            raise classify_sdk_error(error) from error
        return message_completion(message)


def chat_completion(response: Any, messages: list[Message]) -> Completion:
    """The answer of an openai `ChatCompletion` (a synchronous response or a batch result's body)."""
    if not response.choices:
        raise PermanentError("response has no choices")
    text = response.choices[0].message.content or ""
    usage = response.usage
    return Completion(
        text=text,
        tokens_in=usage.prompt_tokens if usage else estimate_tokens(canonical_json(messages)),
        tokens_out=usage.completion_tokens if usage else estimate_tokens(text),
    )


def message_completion(message: Any) -> Completion:
    """The answer of an anthropic `Message` (a synchronous response or a batch result): the forced tool's input as
    JSON, else the text blocks."""
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
            raise BackendUnavailableError(vllm_missing_message(spec)) from error
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


def vllm_missing_message(spec: ModelSpec) -> str:
    return (
        f"model {spec.name!r} uses backend 'vllm' (in-process engine), which needs the vllm package and a CUDA GPU: "
        "install vllm on a GPU host, or run `vllm serve` there and use backend 'openai' with VLLM_BASE_URL"
    )


class LocalServers:
    """The in-process llama.cpp servers of local models, one per GGUF file, started on first use."""

    def __init__(self, timeout_s: float):
        self.timeout_s = timeout_s
        self._servers: dict[Path, LocalLlamaServer] = {}
        self._lock = threading.Lock()

    def backend(self, spec: ModelSpec, model_path: Path) -> OpenAIChatBackend:
        """An openai-client backend for `spec` against its (started) local server."""
        with self._lock:
            server = self._servers.get(model_path)
            if server is None:
                # Models that share a GGUF file (different decoding only) share one server.
                server = LocalLlamaServer(model_path, model_alias=spec.model, n_ctx=spec.context_window)
                self._servers[model_path] = server
            try:
                server.start()
            except LocalModelError as error:
                raise BackendUnavailableError(f"model {spec.name!r}: {error}") from error
        return OpenAIChatBackend(spec, server.base_url, server.api_key, self.timeout_s)

    @property
    def servers(self) -> list[LocalLlamaServer]:
        return list(self._servers.values())

    def stop(self) -> None:
        with self._lock:
            for server in self._servers.values():
                server.stop()


# A Celery worker's step process runs many LLM steps, each with a gateway of its own: there the local servers live as
# long as the process (`keep_local_servers`, called by `peerify worker` before it forks), so a worker loads a model
# once, not once per shard. Elsewhere a gateway's servers stop with it, freeing their memory at the step's end.
_process_servers: LocalServers | None = None
_keep_servers = False


def keep_local_servers() -> None:
    """Keep this process's (and its forked children's) local model servers between gateways."""
    global _keep_servers
    _keep_servers = True


def gateway_local_servers(timeout_s: float) -> tuple[LocalServers, bool]:
    """The local servers a new gateway uses, and whether it owns them (stops them when it closes)."""
    global _process_servers
    if not _keep_servers:
        return LocalServers(timeout_s), True
    if _process_servers is None:
        _process_servers = LocalServers(timeout_s)
    return _process_servers, False

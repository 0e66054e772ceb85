"""A loopback server speaking Anthropic's messages wire protocol, for tests and benchmarks.

POST /v1/messages answers with a deterministic message: a `tool_use` block when the request
forces a tool (how the gateway asks Claude for structured output) and the answer is JSON,
otherwise a `text` block. `stream=True` is answered with the messages event stream
(message_start, content_block_*, message_delta, message_stop). Faults and request counting
come from `ScriptedServer`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from tests.fakes.openai_server import (
    Responder,
    ScriptedServer,
    count_words,
    example_from_schema,
)


def _forced_tool(request: Mapping[str, Any]) -> Mapping[str, Any] | None:
    choice = request.get("tool_choice") or {}
    if choice.get("type") != "tool":
        return None
    return next((tool for tool in request.get("tools", []) if tool.get("name") == choice.get("name")), None)


def _prompt_text(request: Mapping[str, Any]) -> str:
    system = request.get("system") or ""
    if isinstance(system, list):
        system = " ".join(block.get("text", "") for block in system)
    parts = [system]
    for message in request.get("messages", []):
        content = message.get("content", "")
        parts.append(content if isinstance(content, str) else " ".join(b.get("text", "") for b in content))
    return " ".join(parts)


def _event(name: str, payload: Mapping[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(payload)}\n\n".encode()


class ScriptedAnthropicServer(ScriptedServer):
    """Anthropic messages API on loopback; `base_url` is what the anthropic SDK wants."""

    generate_path = "/v1/messages"

    def __init__(self, responder: Responder | None = None, retry_after_s: float = 1.0, hang_s: float = 30.0):
        super().__init__(responder, retry_after_s, hang_s)

    @property
    def base_url(self) -> str:
        return self.root_url

    def default_answer(self, request: Mapping[str, Any]) -> str:
        tool = _forced_tool(request)
        return json.dumps(example_from_schema(tool["input_schema"])) if tool else "OK"

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        kind = "rate_limit_error" if status == 429 else "api_error"
        return {"type": "error", "error": {"type": kind, "message": message}}

    def _content_block(self, request: Mapping[str, Any], answer: str) -> dict[str, Any]:
        tool = _forced_tool(request)
        if tool is not None:
            try:
                tool_input = json.loads(answer)
            except json.JSONDecodeError:
                tool_input = None
            if isinstance(tool_input, dict):
                return {"type": "tool_use", "id": f"toolu_{self.next_id()}", "name": tool["name"], "input": tool_input}
        return {"type": "text", "text": answer}

    def success_body(self, request: Mapping[str, Any], answer: str) -> dict[str, Any]:
        block = self._content_block(request, answer)
        return {
            "id": f"msg_{self.next_id()}",
            "type": "message",
            "role": "assistant",
            "model": request.get("model", ""),
            "content": [block],
            "stop_reason": "tool_use" if block["type"] == "tool_use" else "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": count_words(_prompt_text(request)), "output_tokens": count_words(answer)},
        }

    def stream_events(self, request: Mapping[str, Any], answer: str) -> Iterator[bytes]:
        message = self.success_body(request, answer)
        block = message["content"][0]
        yield _event("message_start", {"type": "message_start", "message": {
            **message, "content": [], "stop_reason": None,
            "usage": {"input_tokens": message["usage"]["input_tokens"], "output_tokens": 0}}})
        if block["type"] == "tool_use":
            start_block = {**block, "input": {}}
            text, delta_type, delta_key = json.dumps(block["input"]), "input_json_delta", "partial_json"
        else:
            start_block = {"type": "text", "text": ""}
            text, delta_type, delta_key = block["text"], "text_delta", "text"
        yield _event("content_block_start", {"type": "content_block_start", "index": 0, "content_block": start_block})
        for i in range(0, len(text), 8):
            yield _event("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                 "delta": {"type": delta_type, delta_key: text[i: i + 8]}})
        yield _event("content_block_stop", {"type": "content_block_stop", "index": 0})
        yield _event("message_delta", {"type": "message_delta",
                                       "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                                       "usage": {"output_tokens": message["usage"]["output_tokens"]}})
        yield _event("message_stop", {"type": "message_stop"})

"""A loopback server speaking OpenAI's chat-completions wire protocol, for tests and benchmarks.

It answers POST /v1/chat/completions (plain JSON or `stream=True` server-sent events) and
GET /v1/models with a deterministic answer, counts the requests it receives, and can be told
to misbehave for the next N requests: 429 with Retry-After, 500, a malformed JSON body, a
truncated body or stream, or a hang. `ScriptedServer` is the protocol-neutral part that the
Anthropic server (anthropic_server.py) shares.
"""

from __future__ import annotations

import enum
import itertools
import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

Responder = Callable[[Mapping[str, Any]], str]


class Fault(enum.Enum):
    """Ways the server can be told to misbehave."""

    RATE_LIMIT = "rate_limit"  # 429 with a Retry-After header
    SERVER_ERROR = "server_error"  # 500
    MALFORMED = "malformed"  # 200 whose body is not valid JSON
    TRUNCATED = "truncated"  # body or event stream cut off mid-way
    HANG = "hang"  # never answers (until the server stops or hang_s passes)


def example_from_schema(schema: Mapping[str, Any]) -> Any:
    """The simplest value that conforms to a JSON schema (first enum value, "ok", 0, ...)."""
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type")
    if kind == "object":
        return {key: example_from_schema(sub) for key, sub in schema.get("properties", {}).items()}
    if kind == "array":
        items = schema.get("items")
        return [example_from_schema(items)] if isinstance(items, Mapping) else []
    return {"string": "ok", "integer": 0, "number": 0.0, "boolean": True}.get(str(kind))


def count_words(text: str) -> int:
    """The fake servers' token count: whitespace-separated words."""
    return len(text.split())


class ScriptedServer:
    """A ThreadingHTTPServer on 127.0.0.1 with a fault queue and request counters."""

    generate_path = ""

    def __init__(self, responder: Responder | None = None, retry_after_s: float = 1.0, hang_s: float = 30.0):
        self.responder: Responder = responder or self.default_answer
        self.retry_after_s = retry_after_s
        self.hang_s = hang_s
        self.requests: list[dict[str, Any]] = []
        self.request_headers: list[dict[str, str]] = []
        self._faults: deque[Fault] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._ids = itertools.count(1)
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> ScriptedServer:
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = True
        # A short poll interval keeps stop() quick; shutdown waits for the next poll.
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=type(self).__name__, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> ScriptedServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def root_url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("server not started")
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    # -- scripting ---------------------------------------------------------------------------
    @property
    def request_count(self) -> int:
        """Generation requests received (faulty ones included)."""
        with self._lock:
            return len(self.requests)

    def fail_next(self, fault: Fault, times: int = 1) -> None:
        """Answer the next `times` generation requests with `fault`."""
        with self._lock:
            self._faults.extend([fault] * times)

    def _take_fault(self) -> Fault | None:
        with self._lock:
            return self._faults.popleft() if self._faults else None

    def next_id(self) -> int:
        return next(self._ids)

    # -- protocol hooks (subclasses) ----------------------------------------------------------
    def default_answer(self, request: Mapping[str, Any]) -> str:
        raise NotImplementedError

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        raise NotImplementedError

    def success_body(self, request: Mapping[str, Any], answer: str) -> dict[str, Any]:
        raise NotImplementedError

    def stream_events(self, request: Mapping[str, Any], answer: str) -> Iterator[bytes]:
        raise NotImplementedError

    def handle_get(self, handler: BaseHTTPRequestHandler) -> None:
        handler.send_error(404)

    # -- HTTP plumbing -------------------------------------------------------------------------
    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
                return

            def do_GET(self) -> None:
                server.handle_get(self)

            def do_POST(self) -> None:
                server._handle_post(self)

        return Handler

    def _handle_post(self, handler: BaseHTTPRequestHandler) -> None:
        if handler.path.rstrip("/") != self.generate_path:
            handler.send_error(404)
            return
        length = int(handler.headers.get("Content-Length", "0"))
        request = json.loads(handler.rfile.read(length) or b"{}")
        with self._lock:
            self.requests.append(request)
            self.request_headers.append({key.lower(): value for key, value in handler.headers.items()})
        fault = self._take_fault()
        if fault is Fault.HANG:
            self._stopping.wait(self.hang_s)
            handler.close_connection = True
            return
        if fault is Fault.RATE_LIMIT:
            self.send_json(handler, 429, self.error_body(429, "rate limit reached"),
                           {"Retry-After": f"{self.retry_after_s:g}"})
            return
        if fault is Fault.SERVER_ERROR:
            self.send_json(handler, 500, self.error_body(500, "internal server error"))
            return
        if fault is Fault.MALFORMED:
            self.send_raw(handler, 200, b'{"id": "broken", "choices": [', "application/json")
            return
        answer = self.responder(request)
        if request.get("stream"):
            events = list(self.stream_events(request, answer))
            if fault is Fault.TRUNCATED:
                events = events[: max(1, len(events) // 3)]
            self.send_stream(handler, events)
            return
        body = json.dumps(self.success_body(request, answer)).encode()
        if fault is Fault.TRUNCATED:
            # Promise the whole body, send half of it, then hang up.
            handler.send_response(200)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(body)))
            handler.end_headers()
            handler.wfile.write(body[: len(body) // 2])
            handler.wfile.flush()
            handler.close_connection = True
            return
        self.send_raw(handler, 200, body, "application/json")

    @staticmethod
    def send_raw(
        handler: BaseHTTPRequestHandler, status: int, body: bytes, content_type: str,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", content_type)
        handler.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            handler.send_header(key, value)
        handler.end_headers()
        handler.wfile.write(body)

    def send_json(
        self, handler: BaseHTTPRequestHandler, status: int, payload: Any, headers: Mapping[str, str] | None = None
    ) -> None:
        self.send_raw(handler, status, json.dumps(payload).encode(), "application/json", headers)

    @staticmethod
    def send_stream(handler: BaseHTTPRequestHandler, events: list[bytes]) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Cache-Control", "no-cache")
        handler.end_headers()
        for event in events:
            handler.wfile.write(event)
            handler.wfile.flush()
        # HTTP/1.0 without Content-Length: the body ends when we close.
        handler.close_connection = True


def _response_format_schema(request: Mapping[str, Any]) -> Mapping[str, Any] | None:
    response_format = request.get("response_format") or {}
    if response_format.get("type") == "json_schema":
        return response_format.get("json_schema", {}).get("schema")
    return response_format.get("schema")


def _prompt_words(request: Mapping[str, Any]) -> int:
    return sum(count_words(str(message.get("content", ""))) for message in request.get("messages", []))


def _sse(payload: Any) -> bytes:
    return f"data: {json.dumps(payload)}\n\n".encode()


class ScriptedOpenAIServer(ScriptedServer):
    """OpenAI chat-completions on loopback; `base_url` is what the openai SDK wants."""

    generate_path = "/v1/chat/completions"

    def __init__(self, responder: Responder | None = None, retry_after_s: float = 1.0, hang_s: float = 30.0,
                 model_ids: tuple[str, ...] = ("scripted-model",)):
        super().__init__(responder, retry_after_s, hang_s)
        self.model_ids = model_ids

    @property
    def base_url(self) -> str:
        return f"{self.root_url}/v1"

    def default_answer(self, request: Mapping[str, Any]) -> str:
        schema = _response_format_schema(request)
        return json.dumps(example_from_schema(schema)) if schema else "OK"

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        kind = "rate_limit_exceeded" if status == 429 else "server_error"
        return {"error": {"message": message, "type": kind, "param": None, "code": kind}}

    def handle_get(self, handler: BaseHTTPRequestHandler) -> None:
        if handler.path.rstrip("/") != "/v1/models":
            handler.send_error(404)
            return
        data = [{"id": model_id, "object": "model", "owned_by": "scripted"} for model_id in self.model_ids]
        self.send_json(handler, 200, {"object": "list", "data": data})

    def _usage(self, request: Mapping[str, Any], answer: str) -> dict[str, int]:
        prompt, completion = _prompt_words(request), count_words(answer)
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

    def success_body(self, request: Mapping[str, Any], answer: str) -> dict[str, Any]:
        return {
            "id": f"chatcmpl-{self.next_id()}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.get("model", ""),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}],
            "usage": self._usage(request, answer),
        }

    def stream_events(self, request: Mapping[str, Any], answer: str) -> Iterator[bytes]:
        common = {"id": f"chatcmpl-{self.next_id()}", "object": "chat.completion.chunk",
                  "created": int(time.time()), "model": request.get("model", "")}
        pieces = [answer[i: i + 8] for i in range(0, len(answer), 8)] or [""]
        for index, piece in enumerate(pieces):
            delta = {"role": "assistant", "content": piece} if index == 0 else {"content": piece}
            yield _sse({**common, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
        yield _sse({**common, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        if (request.get("stream_options") or {}).get("include_usage"):
            yield _sse({**common, "choices": [], "usage": self._usage(request, answer)})
        yield b"data: [DONE]\n\n"

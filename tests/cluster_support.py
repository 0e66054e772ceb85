"""What the tests of the limits shared across workers have in common: worker processes spawned (a fresh
interpreter each, as on machines of their own), started together and joined, none left running."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

SPAWN = multiprocessing.get_context("spawn")
JOIN_TIMEOUT_S = 60


@contextmanager
def spawned_workers(target: Callable[..., None], args_of_each: list[tuple[Any, ...]]) -> Iterator[list]:
    """One spawned process per tuple of `args_of_each`, each running `target(*args)`, started on entry; on a clean
    exit of the block each must end with exit code 0 within JOIN_TIMEOUT_S; any still alive after is killed."""
    workers = [SPAWN.Process(target=target, args=args) for args in args_of_each]
    try:
        for worker in workers:
            worker.start()
        yield workers
        for worker in workers:
            worker.join(JOIN_TIMEOUT_S)
            assert worker.exitcode == 0, f"worker process {worker.name} ended with exit code {worker.exitcode}"
    finally:
        for worker in workers:
            if worker.is_alive():
                worker.kill()
                worker.join(JOIN_TIMEOUT_S)

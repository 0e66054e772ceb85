"""Locks on data that every worker shares (the LLM ledger's per-call claims, the decisions ledger, the arbitration
leases): one lock per name, held by one process at a time, wherever the processes run.

With `PEERIFY_POSTGRES_URL` set (the cluster profile) a lock is a Postgres session advisory lock keyed by its name,
held on the process's one connection to it: it holds across machines, and it is released when the block ends or when
the holder dies (its connection closes; server-side TCP keepalives notice a vanished machine within about a minute);
the threads of one process exclude each other by name in the process. Otherwise
it is an `fcntl.flock` on a local file, released by the kernel when the holder dies (the single-machine default).

Names should not contain machine-specific paths: two machines may mount the same lake at different paths, and the
lock must be the same one on both. Two lakes sharing one Postgres then share their locks too, which only serialises
them more than needed.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from peerify_dagster import deployment

logger = logging.getLogger(__name__)
T = TypeVar("T")

# Longer than anything a holder does under one of these locks (an LLM call of 5 attempts of 120 s with backoff is
# about 15 minutes), so running out of time means something is stuck, not busy.
DEFAULT_TIMEOUT_S = 30 * 60.0
_POLL_FIRST_S, _POLL_MAX_S = 0.005, 0.1
# The Postgres server drops (and so unlocks) a connection whose machine stopped answering after about a minute.
_SERVER_KEEPALIVES = "-c tcp_keepalives_idle=30 -c tcp_keepalives_interval=10 -c tcp_keepalives_count=3"
_CONNECT_TIMEOUT_S = 10


class LockTimeout(TimeoutError):
    """A lock was not acquired in time; the message names it and where it lives."""


class LockUnavailable(RuntimeError):
    """The Postgres that holds the cross-machine locks cannot be reached."""


@contextmanager
def exclusive(name: str, local_path: Path | None, *, timeout_s: float = DEFAULT_TIMEOUT_S,
              remove_when_released: bool = False) -> Iterator[None]:
    """Hold the lock `name` alone while the block runs, waiting up to `timeout_s` (LockTimeout).

    `local_path` is the lock file of the single-machine default (unused when PEERIFY_POSTGRES_URL is set);
    `remove_when_released` removes it at the end, for one-off locks that would otherwise pile up (a waiter that
    then holds the removed file notices and locks the new one)."""
    with _held(name, local_path, shared=False, timeout_s=timeout_s, remove_when_released=remove_when_released):
        yield


@contextmanager
def shared(name: str, local_path: Path | None, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> Iterator[None]:
    """Hold the lock `name` together with other readers, while nobody holds it `exclusive` (a reader that must not
    see an append half done)."""
    with _held(name, local_path, shared=True, timeout_s=timeout_s, remove_when_released=False):
        yield


def advisory_key(name: str) -> int:
    """The Postgres advisory lock key of `name`: the first 8 bytes of its SHA-256, as the signed 64-bit integer
    Postgres takes (stable across processes and Python versions, unlike `hash`)."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


def psycopg2_dsn(url: str) -> str:
    """The psycopg2 form of a Postgres URL given in SQLAlchemy's `postgresql+psycopg2://` form (or already plain)."""
    scheme, separator, rest = url.partition("://")
    return f"{scheme.split('+', 1)[0]}{separator}{rest}"


@contextmanager
def _held(name: str, local_path: Path | None, *, shared: bool, timeout_s: float,
          remove_when_released: bool) -> Iterator[None]:
    url = deployment.postgres_url()
    if url:
        with _advisory_lock(name, psycopg2_dsn(url), shared, timeout_s):
            yield
    elif local_path is None:
        raise ValueError(f"lock {name!r} has no local lock file, so it needs PEERIFY_POSTGRES_URL")
    else:
        with _file_lock(name, Path(local_path), shared, timeout_s, remove_when_released):
            yield


@contextmanager
def _advisory_lock(name: str, dsn: str, shared: bool, timeout_s: float) -> Iterator[None]:
    key = advisory_key(name)
    deadline = time.monotonic() + timeout_s
    session = _session(dsn)
    # Advisory locks are re-entrant within a Postgres session, and this process's threads share one: they exclude
    # each other by name here first.
    with _in_process(name, deadline, timeout_s), session.in_use():
        generation = _wait_for(lambda: session.try_lock(name, key, shared), name,
                               f"Postgres advisory lock {key}: see pg_locks", deadline, timeout_s)
        try:
            yield
        finally:
            session.unlock(name, key, shared, generation)


class _AdvisorySession:
    """This process's one Postgres connection, holding every advisory lock the process holds: a connection per lock
    would take one per LLM call in flight, and a few workers of 16 calls each would exhaust Postgres's connections.
    Its statements are quick (try-lock, unlock), one at a time; waiting is polling, so no thread blocks the others.
    It is closed whenever no thread holds or waits for a lock, so an idle process keeps no connection open."""

    def __init__(self, dsn: str):
        self.dsn = dsn
        self._connection: Any = None
        self._generation = 0  # counts connections: a lock taken on an earlier one was released when it was lost
        self._users = 0  # threads holding or waiting for a lock
        self._mutex = threading.Lock()

    @contextmanager
    def in_use(self) -> Iterator[None]:
        with self._mutex:
            self._users += 1
        try:
            yield
        finally:
            with self._mutex:
                self._users -= 1
                if not self._users:
                    self._drop()

    def try_lock(self, name: str, key: int, shared: bool) -> int | None:
        """The generation of the connection now holding the lock, or None when another session holds it."""
        import psycopg2  # the `cluster` extra's, absent from a single-machine install

        with self._mutex:
            try:
                if self._connection is None or self._connection.closed:
                    self._connection = psycopg2.connect(self.dsn, connect_timeout=_CONNECT_TIMEOUT_S,
                                                        options=_SERVER_KEEPALIVES)
                    self._connection.autocommit = True  # session locks, outside any transaction
                    self._generation += 1
                with self._connection.cursor() as cursor:
                    cursor.execute(f"SELECT pg_try_advisory_lock{'_shared' if shared else ''}(%s)", (key,))
                    return self._generation if cursor.fetchone()[0] else None
            except psycopg2.Error as error:
                self._drop()
                raise LockUnavailable(f"lock {name!r}: the Postgres of PEERIFY_POSTGRES_URL cannot be used "
                                      f"({' '.join(str(error).split())})") from error

    def unlock(self, name: str, key: int, shared: bool, generation: int) -> None:
        import psycopg2

        with self._mutex:
            if generation != self._generation or self._connection is None:
                reason = "the connection holding it was lost while it was held (the server released it then)"
            else:
                try:
                    with self._connection.cursor() as cursor:
                        cursor.execute(f"SELECT pg_advisory_unlock{'_shared' if shared else ''}(%s)", (key,))
                        reason = None if cursor.fetchone()[0] else "it was no longer held"
                except psycopg2.Error as error:
                    self._drop()  # closing releases whatever the connection held
                    reason = f"the connection failed ({' '.join(str(error).split())})"
            if reason:
                logger.warning("lock %r (Postgres advisory lock %d) at its release: %s", name, key, reason)

    def _drop(self) -> None:
        if self._connection is not None:
            self._connection.close()
        self._connection = None


_sessions: dict[tuple[int, str], _AdvisorySession] = {}
_sessions_mutex = threading.Lock()


def _session(dsn: str) -> _AdvisorySession:
    """The advisory session of this process (a forked child opens its own) for `dsn`."""
    with _sessions_mutex:
        return _sessions.setdefault((os.getpid(), dsn), _AdvisorySession(dsn))


_names: dict[str, list[Any]] = {}  # name -> [its lock, how many threads use it]
_names_mutex = threading.Lock()


@contextmanager
def _in_process(name: str, deadline: float, timeout_s: float) -> Iterator[None]:
    """One thread of this process at a time under `name` (readers too: their reads are short)."""
    with _names_mutex:
        entry = _names.setdefault(name, [threading.Lock(), 0])
        entry[1] += 1
    try:
        if not entry[0].acquire(timeout=max(0.0, deadline - time.monotonic())):
            raise LockTimeout(f"lock {name!r} was not acquired within {timeout_s:g} s: another thread of this "
                              "process holds it")
        try:
            yield
        finally:
            entry[0].release()
    finally:
        with _names_mutex:
            entry[1] -= 1
            if not entry[1]:
                del _names[name]  # one entry per call id would otherwise pile up


@contextmanager
def _file_lock(name: str, path: Path, shared: bool, timeout_s: float, remove_when_released: bool) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout_s
    mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
    while True:
        descriptor = os.open(path, os.O_CREAT | os.O_RDONLY, 0o644)  # flock needs no write access
        try:
            _wait_for(lambda: _flock(descriptor, mode), name, str(path), deadline, timeout_s)
            # A holder that removes the file does so before unlocking: a lock on a removed file locks nothing.
            if os.fstat(descriptor).st_ino == os.stat(path).st_ino:
                break
        except FileNotFoundError:
            pass
        except BaseException:
            os.close(descriptor)
            raise
        os.close(descriptor)
    try:
        yield
    finally:
        if remove_when_released:
            path.unlink(missing_ok=True)
        os.close(descriptor)  # closing releases the lock


def _flock(descriptor: int, mode: int) -> bool | None:
    try:
        fcntl.flock(descriptor, mode | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return None


def _wait_for(attempt: Callable[[], T | None], name: str, where: str, deadline: float, timeout_s: float) -> T:
    """What `attempt()` gives once it gives something (the lock taken), trying again with growing pauses until
    `deadline`; LockTimeout naming the lock and `where` it lives after that."""
    pause = _POLL_FIRST_S
    logged = False
    while (taken := attempt()) is None:
        if not logged:
            logger.info("waiting for lock %r (%s), held by another process", name, where)
            logged = True
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise LockTimeout(f"lock {name!r} ({where}) was not acquired within {timeout_s:g} s: another process "
                              "holds it")
        time.sleep(min(pause, remaining))
        pause = min(pause * 2, _POLL_MAX_S)
    return taken

"""Model limits that hold across every worker sharing one Redis (`PEERIFY_REDIS_URL`): a model's `max_concurrency`
and `requests_per_minute` count every process's calls, not each process's own (limits.py picks these or the
in-process ones).

Keys (`peerify:model-limits:<model>:...`), all read and changed only by the Lua scripts below, which Redis runs
atomically and on its own clock (so the workers' clocks need not agree):
- `slots`: a sorted set of the calls in flight, each a random token scored with the end of its lease (ms). A holder
  renews its leases every third of a lease from a background thread; a holder that dies (SIGKILL, a lost machine)
  stops renewing, and its slot is free once its lease ends, so no slot is kept forever;
- `next-start`: when the next request may start (ms); each start reserves the one after it, one interval later, as
  the in-process `RateLimiter` does.
A run's spend (`peerify:run-spend:<run id>`, a hash of `tokens` and `cost_usd`) is shared the same way, so every
step of the run, on any worker, checks the run's budget against what all of them spent (limits.Budget).
"""

from __future__ import annotations

import functools
import logging
import random
import threading
import time
import uuid
from collections.abc import Callable
from types import TracebackType
from typing import Any

from peerify_dagster.resources.llm_gateway.errors import BackendUnavailableError

logger = logging.getLogger(__name__)
# `redis` is imported where it is used: it comes with the `cluster` extra, absent from a single-machine install.

KEY_PREFIX = "peerify:model-limits"
RUN_SPEND_PREFIX = "peerify:run-spend"
RUN_SPEND_TTL_S = 3 * 24 * 3600  # renewed on each spend: only a run idle for days loses its count (then reseeded)
DEFAULT_LEASE_S = 30.0
_POLL_FIRST_S, _POLL_MAX_S = 0.01, 0.25

_NOW_MS = "local clock = redis.call('TIME') local now = clock[1] * 1000 + math.floor(clock[2] / 1000)"

# KEYS[1] slots; ARGV: token, max_concurrency, lease ms. 1 when the slot is taken, else 0.
_TAKE_SLOT = _NOW_MS + """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], string.format('%d', now + tonumber(ARGV[3])), ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
"""

# KEYS[1] slots; ARGV: lease ms, then the tokens to renew. How many of them were still held (a lease that ended
# before its renewal is gone: that slot may have been taken by another call meanwhile).
_RENEW_SLOTS = _NOW_MS + """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local renewed = 0
for i = 2, #ARGV do
  if redis.call('ZSCORE', KEYS[1], ARGV[i]) then
    redis.call('ZADD', KEYS[1], 'XX', string.format('%d', now + tonumber(ARGV[1])), ARGV[i])
    renewed = renewed + 1
  end
end
if renewed > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return renewed
"""

# KEYS[1] a run's spend; ARGV: tokens, cost_usd, ttl s. Raises each field to at least the given spend.
_SEED_SPEND = """
if tonumber(redis.call('HGET', KEYS[1], 'tokens') or '0') < tonumber(ARGV[1]) then
  redis.call('HSET', KEYS[1], 'tokens', ARGV[1])
end
if tonumber(redis.call('HGET', KEYS[1], 'cost_usd') or '0') < tonumber(ARGV[2]) then
  redis.call('HSET', KEYS[1], 'cost_usd', ARGV[2])
end
redis.call('EXPIRE', KEYS[1], ARGV[3])
"""

# KEYS[1] next-start; ARGV: interval ms. How long (ms) the caller waits before its request starts.
_RESERVE_START = _NOW_MS + """
local start = math.max(now, tonumber(redis.call('GET', KEYS[1]) or '0'))
local following = start + tonumber(ARGV[1])
redis.call('SET', KEYS[1], string.format('%d', following), 'PX', string.format('%d', following - now + 60000))
return start - now
"""


@functools.cache
def _client(url: str) -> Any:
    """One client (a connection pool, safe across threads and forks) per Redis URL and process."""
    import redis

    return redis.Redis.from_url(url, socket_timeout=10, socket_connect_timeout=10, health_check_interval=30)


def _unreachable(what: str, error: Exception) -> BackendUnavailableError:
    return BackendUnavailableError(f"{what}: the shared limits in the Redis of PEERIFY_REDIS_URL cannot be used "
                                   f"({' '.join(str(error).split())})")


class SharedConcurrencyLimit:
    """At most `max_concurrency` calls of `model` at once across every process sharing the Redis at `url`; used as
    `threading.BoundedSemaphore` is (`with limit:`), by any number of threads."""

    def __init__(self, url: str, model: str, max_concurrency: int, lease_s: float = DEFAULT_LEASE_S):
        self.model, self.max_concurrency = model, max_concurrency
        self.key = f"{KEY_PREFIX}:{model}:slots"
        self.lease_ms = max(1, round(lease_s * 1000))
        self._redis = _client(url)
        self._take = self._redis.register_script(_TAKE_SLOT)
        self._renew = self._redis.register_script(_RENEW_SLOTS)
        self._held: set[str] = set()
        self._held_lock = threading.Lock()
        self._renewer: threading.Thread | None = None
        self._entered = threading.local()  # each thread's tokens, innermost last, for __exit__

    def __enter__(self) -> SharedConcurrencyLimit:
        import redis

        token = uuid.uuid4().hex
        pause = _POLL_FIRST_S
        try:
            while not self._take(keys=[self.key], args=[token, self.max_concurrency, self.lease_ms]):
                time.sleep(pause * random.uniform(0.5, 1.0))  # jittered: waiting workers do not poll in step
                pause = min(pause * 2, _POLL_MAX_S)
        except redis.RedisError as error:
            raise _unreachable(f"model {self.model!r}", error) from error
        with self._held_lock:
            self._held.add(token)
            if self._renewer is None:
                self._renewer = threading.Thread(target=self._renew_while_held, name=f"lease-{self.model}",
                                                 daemon=True)
                self._renewer.start()
        self._entered.__dict__.setdefault("tokens", []).append(token)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        import redis

        token = self._entered.tokens.pop()
        with self._held_lock:
            self._held.discard(token)
        try:
            self._redis.zrem(self.key, token)
        except redis.RedisError as error:  # the lease ends by itself; the call's own outcome matters more
            logger.warning("model %r: could not free its shared slot (%s); it frees itself within %.0f s",
                           self.model, error, self.lease_ms / 1000)

    def _renew_while_held(self) -> None:
        import redis

        while True:
            time.sleep(self.lease_ms / 3000)
            with self._held_lock:
                tokens = sorted(self._held)
                if not tokens:
                    self._renewer = None  # under the lock: the next __enter__ starts a new renewer
                    return
            try:
                renewed = self._renew(keys=[self.key], args=[self.lease_ms, *tokens])
            except redis.RedisError as error:
                logger.warning("model %r: could not renew its shared slots (%s)", self.model, error)
                continue
            if renewed < len(tokens):
                logger.warning("model %r: %d shared slot lease(s) ended before renewal (this process stalled "
                               "for over %.0f s); other workers may have taken them", self.model,
                               len(tokens) - renewed, self.lease_ms / 1000)


class SharedRateLimiter:
    """Spaces the starts of `model`'s requests across every process sharing the Redis at `url`, so together they
    never exceed `requests_per_minute` (the shared form of limits.RateLimiter)."""

    def __init__(self, url: str, model: str, requests_per_minute: float,
                 sleep: Callable[[float], None] = time.sleep):
        self.model = model
        self.key = f"{KEY_PREFIX}:{model}:next-start"
        self.interval_ms = max(1, round(60_000 / requests_per_minute))
        self._sleep = sleep
        self._reserve = _client(url).register_script(_RESERVE_START)

    def acquire(self) -> None:
        import redis

        try:
            wait_ms = self._reserve(keys=[self.key], args=[self.interval_ms])
        except redis.RedisError as error:
            raise _unreachable(f"model {self.model!r}", error) from error
        if wait_ms > 0:
            self._sleep(wait_ms / 1000)


class SharedRunSpend:
    """What one run has spent (tokens, cost), counted by every process of the run sharing the Redis at `url`.

    Seeded at open with what the ledger already holds for the run (`tokens`, `cost_usd`: steps that ran before the
    counter existed, a re-executed run, a count lost to its expiry): each field is raised to at least that, never
    lowered. A call's row reaches the ledger before its spend reaches the counter, so a process opening while another
    is between the two counts that call twice: the run stops early by at most the calls in flight, never late."""

    def __init__(self, url: str, run_id: str, tokens: int, cost_usd: float):
        import redis

        self.run_id = run_id
        self.key = f"{RUN_SPEND_PREFIX}:{run_id}"
        self._redis = _client(url)
        try:
            self._redis.register_script(_SEED_SPEND)(keys=[self.key], args=[tokens, repr(cost_usd), RUN_SPEND_TTL_S])
        except redis.RedisError as error:
            raise _unreachable(f"run {run_id}'s budget", error) from error

    def spent(self) -> tuple[int, float]:
        """Tokens and cost the run's processes have spent so far."""
        import redis

        try:
            tokens, cost = self._redis.hmget(self.key, ["tokens", "cost_usd"])
        except redis.RedisError as error:
            raise _unreachable(f"run {self.run_id}'s budget", error) from error
        return int(tokens or 0), float(cost or 0.0)

    def add(self, tokens: int, cost_usd: float) -> None:
        import redis

        try:
            with self._redis.pipeline(transaction=True) as pipe:  # MULTI: both fields and the expiry at once
                pipe.hincrby(self.key, "tokens", tokens).hincrbyfloat(self.key, "cost_usd", cost_usd)
                pipe.expire(self.key, RUN_SPEND_TTL_S).execute()
        except redis.RedisError as error:
            raise _unreachable(f"run {self.run_id}'s budget", error) from error

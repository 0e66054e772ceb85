"""Rate limits and the budget (of a run, or of a whole `peerify build`): how fast and how much the gateway may call.

A model's limits and a run's spend are this process's own on one machine; with `PEERIFY_REDIS_URL` set they are shared
by every worker (shared_limits.py), so N workers together keep to them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

from peerify_dagster import deployment
from peerify_dagster.resources.llm_gateway.shared_limits import (
    SharedConcurrencyLimit,
    SharedRateLimiter,
    SharedRunSpend,
)


def concurrency_limit(model: str, max_concurrency: int) -> AbstractContextManager[Any]:
    """How many calls of `model` may be in flight at once (`with limit:` around each): across every worker sharing
    PEERIFY_REDIS_URL when it is set, else in this process."""
    url = deployment.redis_url()
    if url:
        return SharedConcurrencyLimit(url, model, max_concurrency)
    return threading.BoundedSemaphore(max_concurrency)


def request_rate_limit(model: str, requests_per_minute: float,
                       sleep: Callable[[float], None] = time.sleep) -> RateLimiter | SharedRateLimiter:
    """The spacing of `model`'s request starts (`acquire()` before each): across every worker sharing
    PEERIFY_REDIS_URL when it is set, else in this process."""
    url = deployment.redis_url()
    if url:
        return SharedRateLimiter(url, model, requests_per_minute, sleep=sleep)
    return RateLimiter(requests_per_minute, sleep=sleep)


def open_budget(max_cost_usd: float | None, max_tokens: int | None, scope: str, run_id: str,
                earlier_run_ids: Sequence[str],
                spent_by_runs: Callable[[Sequence[str]], tuple[int, int, float]]) -> Budget:
    """The budget of run `run_id` (and of `earlier_run_ids`, the build's earlier runs), opened from the ledger's
    `spent_by_runs`. With PEERIFY_REDIS_URL set the run's own spend is the counter every worker of the run shares,
    seeded from the ledger; else what the ledger held at open plus this process's own spend."""
    url = deployment.redis_url()
    if not url:
        _, tokens, cost = spent_by_runs([*earlier_run_ids, run_id])
        return Budget(max_cost_usd, max_tokens, scope, tokens, cost)
    _, tokens, cost = spent_by_runs(earlier_run_ids) if earlier_run_ids else (0, 0, 0.0)
    _, run_tokens, run_cost = spent_by_runs([run_id])
    return Budget(max_cost_usd, max_tokens, scope, tokens, cost,
                  shared_run_spend=SharedRunSpend(url, run_id, run_tokens, run_cost))


class RateLimiter:
    """Spaces request starts evenly so a model never sees more than `requests_per_minute`."""

    def __init__(
        self, requests_per_minute: float,
        clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
    ):
        self.interval_s = 60.0 / requests_per_minute
        self._clock = clock
        self._sleep = sleep
        self._next_start = 0.0
        self._lock = threading.Lock()

    def acquire(self) -> None:
        with self._lock:
            now = self._clock()
            start = max(now, self._next_start)
            self._next_start = start + self.interval_s
        if start > now:
            self._sleep(start - now)


class Budget:
    """A token and cost budget; calls already made are counted even when they overshoot it. `scope` names what it
    covers in its messages ("run", or "build" for `peerify build --max-cost-usd`); `spent_tokens` and
    `spent_cost_usd`: what that scope spent before this gateway (earlier steps and runs, from the ledger), or with
    `shared_run_spend` only the earlier runs', the run's own being that counter (read at each check)."""

    def __init__(self, max_cost_usd: float | None, max_tokens: int | None, scope: str = "run",
                 spent_tokens: int = 0, spent_cost_usd: float = 0.0, shared_run_spend: SharedRunSpend | None = None):
        self.max_cost_usd = max_cost_usd
        self.max_tokens = max_tokens
        self.scope = scope
        self._cost_usd = spent_cost_usd
        self._tokens = spent_tokens
        self._shared = shared_run_spend
        self._lock = threading.Lock()

    def spent(self) -> tuple[int, float]:
        """Tokens and cost spent in the budget's scope so far."""
        with self._lock:
            tokens, cost = self._tokens, self._cost_usd
        if self._shared is None:
            return tokens, cost
        run_tokens, run_cost = self._shared.spent()
        return tokens + run_tokens, cost + run_cost

    @property
    def tokens(self) -> int:
        return self.spent()[0]

    @property
    def cost_usd(self) -> float:
        return self.spent()[1]

    def exhausted_reason(self) -> str | None:
        tokens, cost_usd = self.spent()
        if self.max_cost_usd is not None and cost_usd >= self.max_cost_usd:
            return f"cost ${cost_usd:.4f} reached the {self.scope} budget ${self.max_cost_usd:.4f}"
        if self.max_tokens is not None and tokens >= self.max_tokens:
            return f"{tokens} tokens reached the {self.scope} budget of {self.max_tokens} tokens"
        return None

    def spend(self, tokens: int, cost_usd: float) -> None:
        if self._shared is not None:
            self._shared.add(tokens, cost_usd)
            return
        with self._lock:
            self._tokens += tokens
            self._cost_usd += cost_usd

"""Rate limits and the per-run budget: how fast and how much the gateway may call."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


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
    """The run's token and cost budget; calls already made are counted even when they overshoot it."""

    def __init__(self, max_cost_usd: float | None, max_tokens: int | None):
        self.max_cost_usd = max_cost_usd
        self.max_tokens = max_tokens
        self.cost_usd = 0.0
        self.tokens = 0
        self._lock = threading.Lock()

    def exhausted_reason(self) -> str | None:
        with self._lock:
            if self.max_cost_usd is not None and self.cost_usd >= self.max_cost_usd:
                return f"cost ${self.cost_usd:.4f} reached the run budget ${self.max_cost_usd:.4f}"
            if self.max_tokens is not None and self.tokens >= self.max_tokens:
                return f"{self.tokens} tokens reached the run budget of {self.max_tokens} tokens"
            return None

    def spend(self, tokens: int, cost_usd: float) -> None:
        with self._lock:
            self.tokens += tokens
            self.cost_usd += cost_usd

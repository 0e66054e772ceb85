"""What a call returns, and the per-model / per-role usage counters built from those results."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CallResult:
    """What one `call` returns (a fresh model answer or one served from the ledger)."""

    call_id: str
    role: str | None
    prompt_id: str
    model: str
    backend: str
    raw_response: str | None
    parsed: dict[str, Any] | None
    parse_ok: bool
    label: str | None
    tokens_in: int
    tokens_out: int
    latency_s: float
    cost_usd: float
    attempts: int
    error: str | None
    cached: bool

    @property
    def ok(self) -> bool:
        return self.error is None

    @classmethod
    def from_row(cls, row: Mapping[str, Any], cached: bool) -> CallResult:
        return cls(
            call_id=row["call_id"], role=row["role"], prompt_id=row["prompt_id"], model=row["model"],
            backend=row["backend"], raw_response=row["raw_response"],
            parsed=json.loads(row["parsed"]) if row["parsed"] else None, parse_ok=bool(row["parse_ok"]),
            label=row["label"], tokens_in=int(row["tokens_in"]), tokens_out=int(row["tokens_out"]),
            latency_s=float(row["latency_s"]), cost_usd=float(row["cost_usd"]), attempts=int(row["attempts"]),
            error=row["error"], cached=cached,
        )


@dataclass
class UsageCounters:
    calls: int = 0
    cache_hits: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    parse_failures: int = 0
    errors: int = 0

    def add(self, result: CallResult) -> None:
        if result.cached:
            self.cache_hits += 1
            return
        self.calls += 1
        self.tokens_in += result.tokens_in
        self.tokens_out += result.tokens_out
        self.cost_usd += result.cost_usd
        self.errors += int(result.error is not None)
        self.parse_failures += int(result.error is None and not result.parse_ok)

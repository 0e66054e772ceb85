"""The gateway's errors. Every message is one line naming what is wrong and where (file, key, value)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from peerify_dagster.resources.llm_gateway.results import CallResult


class LLMGatewayError(RuntimeError):
    """Base of the gateway's errors."""


class ConfigurationError(LLMGatewayError):
    """models.yaml, a role, a model name, a cache mode or a decoding parameter is wrong."""


class PreflightError(ConfigurationError):
    """Something the configured models need (an API key, a package, a model file, recorded calls) is missing."""

    def __init__(self, problems: Sequence[str]):
        self.problems = list(problems)
        super().__init__("LLM preflight failed: " + "; ".join(self.problems))


class BackendUnavailableError(LLMGatewayError):
    """A backend's package or server cannot be used here."""


class ReplayMissError(LLMGatewayError):
    """cache_mode='replay-only' and the ledger holds no successful call with this id."""


class BudgetExceeded(LLMGatewayError):
    """The run's token or cost budget is spent; calls already made stay recorded."""

    def __init__(self, message: str, results: Sequence[CallResult | None] = ()):
        super().__init__(message)
        self.results = list(results)


class CallFailedError(LLMGatewayError):
    """A model call failed for good (gave up after retries, or a non-retryable error)."""

    def __init__(self, message: str, result: CallResult):
        super().__init__(message)
        self.result = result


class TransientError(Exception):
    """Worth retrying: 429, 5xx, timeouts, dropped connections, truncated streams."""

    def __init__(self, message: str, retry_after_s: float | None = None):
        super().__init__(message)
        self.retry_after_s = retry_after_s


class PermanentError(Exception):
    """Retrying would not help: 4xx other than 429, malformed responses."""


class BatchPendingError(LLMGatewayError):
    """A provider batch has not ended within the wait (or its submission's outcome is unknown); re-running the step
    resumes from its record in `<lake>/llm_batches/` and never submits its calls again."""

    def __init__(self, message: str, batch_id: str | None, record: Path):
        super().__init__(message)
        self.batch_id = batch_id
        self.record = record

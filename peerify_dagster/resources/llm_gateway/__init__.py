"""One way to call every model: recorded, cached, replayable, crash-safe, and able to run offline.

`LLMGateway.call(role_or_model, prompt_id, variables)` renders a versioned prompt, answers from the call
ledger when the same call (same call id) already succeeded, and otherwise asks the model through its
backend. Every model call, failed ones included, becomes one row of the ledger `<lake>/llm_calls/`, which
DuckDB reads as `read_parquet('<lake>/llm_calls/*.parquet')`. Models and role profiles come from models.yaml.

One module per concern:
- registry.py: models.yaml (ModelSpec, ModelRegistry) and its environment overrides;
- ledger.py: the durable, compacted, multi-process ledger (CallLedger) and its quarantine;
- limits.py: the requests-per-minute limiter and the per-run budget;
- backends.py: openai, anthropic, vllm and local (llama.cpp in this process) backends;
- batches.py: the OpenAI and Anthropic batch APIs for models with `batch: true`, and their records;
- results.py: CallResult and the usage counters;
- gateway.py: LLMGateway itself; errors.py: the errors, each a one-line message.
"""

from peerify_dagster.resources.llm_gateway.backends import (
    DEFAULT_MAX_TOKENS,
    TOOL_NAME,
    AnthropicBackend,
    Backend,
    Completion,
    OpenAIChatBackend,
    VllmEngineBackend,
    keep_local_servers,
)
from peerify_dagster.resources.llm_gateway.errors import (
    BackendUnavailableError,
    BatchPendingError,
    BudgetExceeded,
    CallFailedError,
    ConfigurationError,
    LLMGatewayError,
    PreflightError,
    ReplayMissError,
)
from peerify_dagster.resources.llm_gateway.gateway import CACHE_MODES, LLMGateway, ProgressCallback
from peerify_dagster.resources.llm_gateway.ledger import LEDGER_SCHEMA, CallLedger, QuarantinedSegment
from peerify_dagster.resources.llm_gateway.limits import Budget, RateLimiter
from peerify_dagster.resources.llm_gateway.registry import (
    BACKENDS,
    DECODING_KEYS,
    DEFAULT_MODELS_FILE,
    STRUCTURED_OUTPUT_MODES,
    ModelRegistry,
    ModelSpec,
)
from peerify_dagster.resources.llm_gateway.results import CallResult, UsageCounters

__all__ = [
    "BACKENDS", "CACHE_MODES", "DECODING_KEYS", "DEFAULT_MAX_TOKENS", "DEFAULT_MODELS_FILE", "LEDGER_SCHEMA",
    "STRUCTURED_OUTPUT_MODES", "TOOL_NAME",
    "AnthropicBackend", "Backend", "BackendUnavailableError", "BatchPendingError", "Budget", "BudgetExceeded",
    "CallFailedError",
    "CallLedger", "CallResult", "Completion", "ConfigurationError", "LLMGateway", "LLMGatewayError", "ModelRegistry",
    "ModelSpec", "OpenAIChatBackend", "PreflightError", "ProgressCallback", "QuarantinedSegment", "RateLimiter",
    "ReplayMissError", "UsageCounters", "VllmEngineBackend", "keep_local_servers",
]

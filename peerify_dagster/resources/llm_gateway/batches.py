"""The providers' batch APIs (OpenAI, Anthropic) behind `LLMGateway.map` for models with `batch: true` in models.yaml:
half the list price, results within a day.

A batch is submitted once, and recorded before anything waits on it, in `<lake>/llm_batches/<key>.json` (written
whole, atomically; key: a hash of the model and its sorted call ids): the provider's batch id, every call (role,
prompt, and the request as the ledger stores it, so the results can be collected by any later run), when it was
submitted, and its status:
- `submitting`: written before the provider is asked. A record left in this state (the process died, or the request's
  answer was lost) means the provider may hold the batch; it is never submitted again on its own;
- `submitted`: the provider accepted it; runs poll it until it ends;
- `collected`: every result is a ledger row (one per call, failed ones included) at the batch price.
Requests carry `custom_id = call_id`, the id the same synchronous call has, so the ledger, replay and the accounting
of `peerify build` see a batched call as any other.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from peerify_dagster.domain.llm_calls import Message, canonical_json, estimate_cost_usd
from peerify_dagster.domain.predictions import estimated_tokens
from peerify_dagster.resources.files import fsync_path
from peerify_dagster.resources.llm_gateway.backends import (
    DEFAULT_MAX_TOKENS,
    AnthropicBackend,
    Completion,
    OpenAIChatBackend,
    chat_completion,
    message_completion,
)
from peerify_dagster.resources.llm_gateway.errors import LLMGatewayError
from peerify_dagster.resources.llm_gateway.limits import Budget
from peerify_dagster.resources.llm_gateway.registry import ModelSpec
from peerify_dagster.resources.locks import exclusive
from peerify_dagster.resources.store import LakeStore, Location

BATCHES_DIR = "llm_batches"
BATCH_PRICE_FACTOR = 0.5  # both providers bill batched requests at half their list prices
SUBMITTING, SUBMITTED, COLLECTED = "submitting", "submitted", "collected"
OPENAI_ENDPOINT = "/v1/chat/completions"
OPENAI_ENDED = frozenset({"completed", "failed", "expired", "cancelled"})

Outcome = Completion | str  # a request's answer, or why it has none


class BatchCall(Protocol):
    """What a batch request is built from (the gateway's prepared call)."""

    call_id: str
    messages: list[Message]
    decoding: Mapping[str, Any]
    schema: Mapping[str, Any] | None


@dataclass
class BatchRecord:
    """One provider batch, as `<lake>/llm_batches/<key>.json` holds it."""

    key: str
    model: str
    backend: str
    call_ids: list[str]
    calls: dict[str, dict[str, Any]]  # call id -> role, prompt_id, prompt_hash, request (the ledger's columns)
    submitted_at: str  # ISO 8601, UTC
    status: str = SUBMITTING
    batch_id: str | None = None  # the provider's
    provider_status: str | None = None  # the provider's word for it when last polled
    counts: dict[str, int] = field(default_factory=dict)  # succeeded / failed, once collected


@dataclass(frozen=True)
class BatchProgress:
    ended: bool
    status: str  # the provider's word
    done: int
    total: int


def batch_key(model: str, call_ids: Sequence[str]) -> str:
    return hashlib.sha256(canonical_json([model, sorted(call_ids)]).encode()).hexdigest()[:32]


class BatchRecords:
    """The batch records of a lake, and the lock (per model) under which they are read, submitted and collected."""

    def __init__(self, lake_root: str | Location):
        self.store = LakeStore(lake_root)
        self.directory = self.store.root / BATCHES_DIR
        # The lock files are local: in the records' folder of a folder lake, in this machine's cache folder for an
        # S3 lake (whose locks across machines are Postgres's, resources/locks.py).
        self.lock_directory = self.store.cache_dir / BATCHES_DIR

    def path(self, key: str) -> Location:
        return self.directory / f"{key}.json"

    def write(self, record: BatchRecord) -> None:
        """Replace the record whole, durable when this returns (fsynced locally; one PUT on S3): it names a batch
        being paid for."""
        with self.store.writing(self.path(record.key)) as temporary:
            temporary.write_text(json.dumps(asdict(record), ensure_ascii=False, indent=1), encoding="utf-8")
            fsync_path(temporary)
        if not self.store.is_object_store:
            fsync_path(self.directory)

    def remove(self, record: BatchRecord) -> None:
        self.store.delete(self.path(record.key))

    def read(self, key: str) -> BatchRecord | None:
        path = self.path(key)
        try:
            return BatchRecord(**json.loads(path.read_text(encoding="utf-8")))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, TypeError) as error:
            raise LLMGatewayError(f"batch record {path} is unreadable ({' '.join(str(error).split())[:200]}); "
                                  "it names a batch the provider may hold: repair it, or move it aside to submit "
                                  "its calls again") from error

    def all(self) -> list[BatchRecord]:
        """Every record, oldest submission first."""
        records = [record for path in sorted(self.directory.glob("*.json")) if (record := self.read(path.stem))]
        return sorted(records, key=lambda record: record.submitted_at)

    def open_for(self, model: str, call_ids: Mapping[str, Any]) -> list[BatchRecord]:
        """The records of `model` not yet collected that hold any of `call_ids`."""
        return [record for record in self.all() if record.model == model and record.status != COLLECTED
                and not call_ids.keys().isdisjoint(record.call_ids)]

    @contextmanager
    def lock(self, model: str) -> Iterator[None]:
        """Held while a model's records are read and submitted, and while one is collected: two workers mapping the
        same calls never submit them twice, nor collect one batch twice."""
        digest = hashlib.sha256(model.encode()).hexdigest()[:16]
        with exclusive(f"llm batches of model {model}", self.lock_directory / f".{digest}.lock"):
            yield


def estimated_spend(spec: ModelSpec, calls: Sequence[BatchCall]) -> tuple[int, float]:
    """Tokens and cost a batch of `calls` may take, as `peerify build --estimate` counts a planned call (input at
    predictions.CHARS_PER_TOKEN characters a token, output at the call's max_tokens), at the batch price."""
    tokens_in = sum(estimated_tokens("\n".join(str(m.get("content", "")) for m in call.messages)) for call in calls)
    tokens_out = sum(int(call.decoding.get("max_tokens") or DEFAULT_MAX_TOKENS) for call in calls)
    cost = estimate_cost_usd(tokens_in, tokens_out, spec.price_in_per_million, spec.price_out_per_million)
    return tokens_in + tokens_out, cost * BATCH_PRICE_FACTOR


def over_budget(budget: Budget, tokens: int, cost_usd: float) -> str | None:
    """Why spending `tokens` and `cost_usd` more would pass the budget, or None."""
    if budget.max_cost_usd is not None and budget.cost_usd + cost_usd > budget.max_cost_usd:
        return (f"its estimated cost ${cost_usd:.4f} on top of ${budget.cost_usd:.4f} spent would pass the "
                f"{budget.scope} budget ${budget.max_cost_usd:.4f}")
    if budget.max_tokens is not None and budget.tokens + tokens > budget.max_tokens:
        return (f"its estimated {tokens} tokens on top of {budget.tokens} spent would pass the {budget.scope} "
                f"budget of {budget.max_tokens} tokens")
    return None


class BatchClient(Protocol):
    def submit(self, calls: Sequence[BatchCall]) -> str:
        """Submit one batch of `calls`; returns the provider's batch id."""
        ...

    def progress(self, batch_id: str) -> BatchProgress:
        ...

    def results(self, batch_id: str, messages: Mapping[str, list[Message]]) -> dict[str, Outcome]:
        """Each request's outcome by call id (`messages`: each call's rendered prompt, for a result without usage)."""
        ...


class OpenAIBatches:
    """OpenAI's Batch API: the requests uploaded as a JSONL file, a batch over it, results in output / error files."""

    def __init__(self, backend: OpenAIChatBackend):
        self.backend = backend
        self.client = backend.client

    def submit(self, calls: Sequence[BatchCall]) -> str:
        lines = [json.dumps({"custom_id": call.call_id, "method": "POST", "url": OPENAI_ENDPOINT,
                             "body": self.backend.request_params(call.messages, call.decoding, call.schema)})
                 for call in calls]
        upload = self.client.files.create(file=("batch.jsonl", "\n".join(lines).encode() + b"\n"), purpose="batch")
        return self.client.batches.create(input_file_id=upload.id, endpoint=OPENAI_ENDPOINT,
                                          completion_window="24h").id

    def progress(self, batch_id: str) -> BatchProgress:
        batch = self.client.batches.retrieve(batch_id)
        counts = batch.request_counts
        return BatchProgress(batch.status in OPENAI_ENDED, batch.status,
                             counts.completed + counts.failed if counts else 0, counts.total if counts else 0)

    def results(self, batch_id: str, messages: Mapping[str, list[Message]]) -> dict[str, Outcome]:
        import openai

        batch = self.client.batches.retrieve(batch_id)
        outcomes: dict[str, Outcome] = {}
        for file_id in (batch.output_file_id, batch.error_file_id):
            for line in self.client.files.content(file_id).text.splitlines() if file_id else ():
                if line.strip():
                    entry = json.loads(line)
                    outcomes[entry["custom_id"]] = _openai_outcome(entry, messages.get(entry["custom_id"], []), openai)
        if batch.status == "failed" and batch.errors and batch.errors.data:  # refused as a whole: no request ran
            reason = "; ".join(f"{error.code}: {error.message}" for error in batch.errors.data)
            outcomes.update({call_id: f"the batch failed ({reason})"
                             for call_id in messages if call_id not in outcomes})
        return outcomes


def _openai_outcome(entry: Mapping[str, Any], messages: list[Message], openai: Any) -> Outcome:
    response = entry.get("response") or {}
    if entry.get("error"):
        return f"{entry['error'].get('code')}: {entry['error'].get('message')}"
    body = response.get("body") or {}
    if response.get("status_code") != 200:
        message = (body.get("error") or {}).get("message") if isinstance(body, dict) else None
        return f"HTTP {response.get('status_code')}: {message or str(body)[:300]}"
    try:
        return chat_completion(openai.types.chat.ChatCompletion.model_validate(body), messages)
    except Exception as error:  # noqa: BLE001 - a malformed result is that call's failure, not the batch's
        return f"malformed result: {' '.join(str(error).split())[:300]}"


class AnthropicBatches:
    """Anthropic's Message Batches API: the requests in one call, results as JSONL once the batch ended."""

    def __init__(self, backend: AnthropicBackend):
        self.backend = backend
        self.client = backend.client

    def submit(self, calls: Sequence[BatchCall]) -> str:
        requests = []
        for call in calls:
            params = self.backend.request_params(call.messages, call.decoding, call.schema)
            params.update(params.pop("extra_body", {}))  # a batch request's params are the request body itself
            requests.append({"custom_id": call.call_id, "params": params})
        return self.client.messages.batches.create(requests=requests).id

    def progress(self, batch_id: str) -> BatchProgress:
        batch = self.client.messages.batches.retrieve(batch_id)
        counts = batch.request_counts
        done = counts.succeeded + counts.errored + counts.canceled + counts.expired
        return BatchProgress(batch.processing_status == "ended", batch.processing_status, done,
                             done + counts.processing)

    def results(self, batch_id: str, messages: Mapping[str, list[Message]]) -> dict[str, Outcome]:
        outcomes: dict[str, Outcome] = {}
        for entry in self.client.messages.batches.results(batch_id):
            result = entry.result
            if result.type == "succeeded":
                outcomes[entry.custom_id] = message_completion(result.message)
            elif result.type == "errored":
                error = getattr(result.error, "error", None)
                kind, message = getattr(error, "type", "error"), getattr(error, "message", result.error)
                outcomes[entry.custom_id] = f"{kind}: {message}"
            else:  # expired or canceled before it was processed
                outcomes[entry.custom_id] = f"the batch {result.type} before this request was processed"
        return outcomes


def batch_client(backend: OpenAIChatBackend | AnthropicBackend) -> BatchClient:
    return AnthropicBatches(backend) if isinstance(backend, AnthropicBackend) else OpenAIBatches(backend)

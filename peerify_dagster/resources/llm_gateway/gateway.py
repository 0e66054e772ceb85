"""The gateway: calls models by role or name, answers repeats from the ledger, and records every call.

A call is prepared (prompt rendered, call id computed), answered from the ledger when the same call
already succeeded, and otherwise made under the lake-wide claim on its call id (so two processes never make
it at the same time) with per-model concurrency, a requests-per-minute limiter, retries with backoff that
honour Retry-After, and a token/cost budget shared by every step of a run
(or of a whole `peerify build`), counted from the ledger. Its row is on disk before its result is returned.
A model with `batch: true` has `map`'s calls made through its provider's batch API instead (batches.py).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import random
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from peerify_dagster.domain.llm_calls import (
    Message,
    backoff_delay,
    canonical_json,
    compute_call_id,
    estimate_cost_usd,
    parse_answer,
)
from peerify_dagster.domain.prompts import PromptError, PromptTemplate, load_prompt
from peerify_dagster.resources.llm_gateway.backends import (
    AnthropicBackend,
    Backend,
    Completion,
    OpenAIChatBackend,
    VllmEngineBackend,
    classify_sdk_error,
    gateway_local_servers,
    vllm_missing_message,
)
from peerify_dagster.resources.llm_gateway.batches import (
    BATCH_PRICE_FACTOR,
    COLLECTED,
    SUBMITTED,
    SUBMITTING,
    BatchRecord,
    BatchRecords,
    batch_client,
    batch_key,
    estimated_spend,
    over_budget,
)
from peerify_dagster.resources.llm_gateway.errors import (
    BatchPendingError,
    BudgetExceeded,
    CallFailedError,
    ConfigurationError,
    LLMGatewayError,
    PermanentError,
    PreflightError,
    ReplayMissError,
    TransientError,
)
from peerify_dagster.resources.llm_gateway.ledger import CallLedger, QuarantinedSegment
from peerify_dagster.resources.llm_gateway.limits import Budget, concurrency_limit, open_budget, request_rate_limit
from peerify_dagster.resources.llm_gateway.registry import DECODING_KEYS, ModelRegistry, ModelSpec, chosen_setting
from peerify_dagster.resources.llm_gateway.results import CallResult, UsageCounters
from peerify_dagster.resources.local_llm import LocalLlamaServer, local_server_available

logger = logging.getLogger(__name__)

CACHE_MODES = ("use", "refresh", "replay-only")
ProgressCallback = Callable[[int, int, CallResult], None]


@dataclass(frozen=True)
class _PreparedCall:
    call_id: str
    role: str | None
    prompt_id: str
    prompt_hash: str
    spec: ModelSpec
    messages: list[Message]
    decoding: dict[str, Any]
    schema: dict[str, Any] | None
    request_json: str


@dataclass(frozen=True)
class PlannedCall:
    """A call `map` would make, known without making it (what `peerify build --estimate` counts)."""

    call_id: str
    model: str
    role: str | None
    prompt_id: str
    prompt_text: str  # every rendered message, concatenated
    max_tokens: int | None  # the answer's bound from the model's decoding settings
    in_ledger: bool  # a successful answer is recorded: the call would be served from the ledger, free


class LLMGateway:
    """Calls models by role or name; records every call in the ledger under `lake_root`."""

    def __init__(
        self,
        lake_root: str | Path,
        models_file: str | Path | None = None,
        profile: str | None = None,
        cache_mode: str | None = None,
        run_id: str | None = None,
        max_cost_usd: float | None = None,
        max_tokens: int | None = None,
        budget_run_ids: Sequence[str] | None = None,
        max_attempts: int = 5,
        backoff_base_s: float = 1.0,
        backoff_max_s: float = 60.0,
        request_timeout_s: float = 120.0,
        env: Mapping[str, str] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        batch_poll_s: float = 60.0,
        batch_wait_s: float = 0.0,
    ):
        self.env: Mapping[str, str] = os.environ if env is None else env
        self.registry = ModelRegistry.load(Path(models_file) if models_file else None, self.env, profile)
        self.cache_mode = _cache_mode(cache_mode, self.env)
        self.run_id = run_id or uuid.uuid4().hex
        self.max_attempts = max_attempts
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self.request_timeout_s = request_timeout_s
        self.ledger = CallLedger(lake_root)  # reads only: a preflight leaves the lake as it was
        # A batch model's `map` polls its provider batch every batch_poll_s for up to batch_wait_s (0: once).
        self.batch_poll_s = batch_poll_s
        self.batch_wait_s = batch_wait_s
        self.batches = BatchRecords(lake_root)
        self._started_at = datetime.now(UTC)
        self._sleep = sleep
        self._rng = random.Random()
        self._budget = self._open_budget(max_cost_usd, max_tokens, budget_run_ids)
        self._backends: dict[str, Backend] = {}
        self._backend_locks: dict[str, threading.Lock] = defaultdict(threading.Lock)
        self._local, self._owns_local_servers = gateway_local_servers(request_timeout_s)
        self._semaphores = {name: concurrency_limit(name, spec.max_concurrency)
                            for name, spec in self.registry.models.items()}
        self._limiters = {name: request_rate_limit(name, spec.requests_per_minute, sleep=sleep)
                          for name, spec in self.registry.models.items() if spec.requests_per_minute}
        self._usage_by_model: dict[str, UsageCounters] = defaultdict(UsageCounters)
        self._usage_by_role: dict[str, UsageCounters] = defaultdict(UsageCounters)
        self._usage_lock = threading.Lock()

    def _open_budget(self, max_cost_usd: float | None, max_tokens: int | None,
                     budget_run_ids: Sequence[str] | None) -> Budget:
        """The budget of this run (every step of it shares one, counted from the ledger), or given `budget_run_ids`
        (the earlier runs of a `peerify build`, none for its first) of the whole build."""
        if max_cost_usd is None and max_tokens is None:
            return Budget(None, None)
        return open_budget(max_cost_usd, max_tokens, "run" if budget_run_ids is None else "build", self.run_id,
                           budget_run_ids or (), self.ledger.spent_by_runs)

    # -- configuration ---------------------------------------------------------------------------
    def models_for_role(self, role: str) -> list[str]:
        return self.registry.models_for_role(role)

    def preflight(
        self, roles: Sequence[str] | None = None, prompts: Mapping[str, Sequence[str]] | None = None
    ) -> dict[str, list[str]]:
        """Check, before any work, what the roles' models need; returns role -> model names.

        Normally that is API keys, packages and model files, and one server per vLLM model. In cache mode
        `replay-only` no model is called; instead the ledger must hold a successful call of each role's models with
        each of its prompts (`prompts`: role -> prompt ids the build uses, e.g. {"verifiers": ["verify"]}).
        Raises PreflightError (one line naming each problem) or ConfigurationError.
        """
        chosen = list(roles) if roles is not None else sorted(self.registry.roles)
        plan = {role: self.registry.models_for_role(role) for role in chosen}
        if self.cache_mode == "replay-only":
            problems = self._replay_problems(prompts or {})
        else:
            names = sorted({name for names in plan.values() for name in names})
            problems = [problem for name in names if (problem := self._availability_problem(self.registry.model(name)))]
            problems += self.registry.shared_server_problems(names, self.env)
        if problems:
            raise PreflightError(list(dict.fromkeys(problems)))  # models sharing a file share its problem
        return plan

    def _availability_problem(self, spec: ModelSpec) -> str | None:
        problem = spec.missing_key_problem(self.env)
        if problem:
            return problem
        if spec.is_remote and importlib.util.find_spec(spec.backend) is None:
            return f"model {spec.name!r} needs the {spec.backend} package (pip install {spec.backend})"
        if spec.backend == "vllm" and importlib.util.find_spec("vllm") is None:
            return vllm_missing_message(spec)
        if spec.backend == "local":
            if not local_server_available():
                return f"model {spec.name!r} needs xllamacpp (pip install 'xllamacpp==2026.10.11549')"
            try:
                spec.local_model_path(self.env)
            except ConfigurationError as error:
                return str(error)
        return None

    def _replay_problems(self, prompts: Mapping[str, Sequence[str]]) -> list[str]:
        problems = []
        for role, prompt_ids in prompts.items():
            for name in self.registry.models_for_role(role):
                spec = self.registry.model(name)
                for prompt_id in prompt_ids:
                    template = _template(prompt_id)
                    if not self.ledger.has_success(spec.name, spec.model, prompt_id, template.content_hash):
                        problems.append(
                            f"cache mode replay-only, but the ledger {self.ledger.directory} holds no successful "
                            f"call of model {name!r} (role {role!r}) with prompt {prompt_id!r} "
                            f"(version {template.content_hash[:12]}); record it first with cache mode 'use'"
                        )
        return problems

    # -- calling ---------------------------------------------------------------------------------
    def call(
        self,
        target: str,
        prompt_id: str,
        variables: Mapping[str, Any],
        schema: Mapping[str, Any] | None = None,
        *,
        role: str | None = None,
        **decoding: Any,
    ) -> CallResult:
        """One call by role or model name. `schema` defaults to the prompt's output schema.

        Raises CallFailedError (recorded in the ledger), ReplayMissError, BudgetExceeded,
        PromptError or ConfigurationError.
        """
        return self._execute(self._prepare(target, prompt_id, variables, schema, role, decoding))

    def map(
        self,
        target: str,
        prompt_id: str,
        items: Sequence[Mapping[str, Any]],
        schema: Mapping[str, Any] | None = None,
        *,
        role: str | None = None,
        progress: ProgressCallback | None = None,
        **decoding: Any,
    ) -> list[CallResult]:
        """`call` for each variables mapping in `items`, in parallel up to the model's max_concurrency.

        Results keep the order of `items`. An item that fails (bad variables, a model error)
        yields a result with `error` set and the rest still run; a spent budget stops the batch and
        raises. In cache mode replay-only every call is checked against the ledger first, and the batch
        raises ReplayMissError before answering any when one is missing. For a model with `batch: true` the calls
        the ledger does not answer go to the provider as one batch (see `_map_as_batch`).
        """
        _, spec = self.registry.resolve(target)
        if self.cache_mode == "replay-only":
            self._check_replayable(target, prompt_id, items, schema, role, decoding)
        elif spec.batch:
            return self._map_as_batch(target, prompt_id, items, schema, role, decoding, progress)
        total = len(items)
        results: list[CallResult | None] = [None] * total
        done = 0

        def run(index: int) -> CallResult:
            try:
                return self.call(target, prompt_id, items[index], schema, role=role, **decoding)
            except CallFailedError as error:
                return error.result
            except PromptError as error:
                return self._input_error_result(target, prompt_id, role, spec, index, error)

        stop_error: BaseException | None = None
        with ThreadPoolExecutor(max_workers=spec.max_concurrency, thread_name_prefix=f"llm-{spec.name}") as pool:
            futures: dict[Future[CallResult], int] = {pool.submit(run, index): index for index in range(total)}
            pending = set(futures)
            try:
                while pending and stop_error is None:
                    finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                    for future in finished:
                        if future.exception() is not None:
                            stop_error = stop_error or future.exception()
                            continue
                        results[futures[future]] = future.result()
                        done += 1
                        if progress is not None:
                            progress(done, total, future.result())
            finally:
                for future in pending:
                    future.cancel()
        # Calls already running when the batch stopped finish during the pool's shutdown; they were made
        # and recorded, so their results are returned too.
        for future, index in futures.items():
            if results[index] is None and not future.cancelled() and future.exception() is None:
                results[index] = future.result()
        if isinstance(stop_error, BudgetExceeded):
            raise BudgetExceeded(str(stop_error), results) from stop_error
        if stop_error is not None:
            raise stop_error
        return [result for result in results if result is not None]

    def call_recorded(self, recorded: Mapping[str, Any]) -> CallResult:
        """Issue again a call the ledger recorded (a ledger row: backend, model, role, prompt id and hash, and the
        `request` as sent: model id, rendered messages, decoding parameters, output schema). Its call id is computed
        afresh from that request, so an altered request is another call: in `replay-only` a miss (ReplayMissError)
        rather than the recorded answer. Outside `replay-only` a miss calls the model named in models.yaml. Raises
        as `call`, and ConfigurationError for a request it cannot read."""
        try:
            request = json.loads(recorded["request"])
            messages, params = request["messages"], request["params"]
            schema, structured_output, model_id = request["schema"], request["structured_output"], request["model_id"]
        except (TypeError, KeyError, json.JSONDecodeError) as error:
            raise ConfigurationError(f"call {recorded.get('call_id')}: unreadable recorded request ({error})") from None
        known = self.registry.models.get(recorded["model"])
        if known is None and self.cache_mode != "replay-only":
            raise ConfigurationError(f"call {recorded.get('call_id')}: model {recorded['model']!r} is not in "
                                     "models.yaml, so it can only be replayed (cache mode replay-only)")
        spec = replace(known or ModelSpec(name=recorded["model"], backend=recorded["backend"], model=model_id),
                       backend=recorded["backend"], model=model_id, structured_output=structured_output)
        identity = {"params": params, "schema": schema, "structured_output": structured_output}
        return self._execute(_PreparedCall(
            call_id=compute_call_id(spec.backend, spec.model, recorded["prompt_hash"], messages, identity),
            role=recorded["role"], prompt_id=recorded["prompt_id"], prompt_hash=recorded["prompt_hash"], spec=spec,
            messages=messages, decoding=params, schema=schema,
            request_json=canonical_json({"model_id": model_id, "messages": messages, **identity}),
        ))

    def plan_calls(
        self, target: str, prompt_id: str, items: Sequence[Mapping[str, Any]], schema: Mapping[str, Any] | None = None,
        *, role: str | None = None, **decoding: Any,
    ) -> list[PlannedCall]:
        """The calls `map` would make for `items`, without calling any model: call ids, rendered prompts and whether
        the ledger already answers each. Raises PromptError for an item the prompt cannot render."""
        planned = []
        for variables in items:
            call = self._prepare(target, prompt_id, variables, schema, role, decoding)
            planned.append(PlannedCall(
                call_id=call.call_id, model=call.spec.name, role=call.role, prompt_id=prompt_id,
                prompt_text="\n".join(str(message.get("content", "")) for message in call.messages),
                max_tokens=call.decoding.get("max_tokens"), in_ledger=self.ledger.lookup(call.call_id) is not None))
        return planned

    def _check_replayable(
        self, target: str, prompt_id: str, items: Sequence[Mapping[str, Any]], schema: Mapping[str, Any] | None,
        role: str | None, decoding: Mapping[str, Any],
    ) -> None:
        prepared = []
        for variables in items:
            try:
                prepared.append(self._prepare(target, prompt_id, variables, schema, role, decoding))
            except PromptError:
                continue  # an input error, reported as that item's result
        missing = [call.call_id for call in prepared if self.ledger.lookup(call.call_id) is None]
        if missing:
            raise ReplayMissError(
                f"cache mode replay-only: {len(missing)} of {len(prepared)} calls of {target!r} with prompt "
                f"{prompt_id!r} are not in the ledger {self.ledger.directory} (first: {', '.join(missing[:3])}); "
                "no call was made"
            )

    def _input_error_result(
        self, target: str, prompt_id: str, role: str | None, spec: ModelSpec, index: int, error: Exception
    ) -> CallResult:
        return CallResult(
            call_id="", role=role or (target if target != spec.name else None), prompt_id=prompt_id,
            model=spec.name, backend=spec.backend, raw_response=None, parsed=None, parse_ok=False, label=None,
            tokens_in=0, tokens_out=0, latency_s=0.0, cost_usd=0.0, attempts=0,
            error=f"item {index}: {error}", cached=False,
        )

    def _prepare(
        self, target: str, prompt_id: str, variables: Mapping[str, Any], schema: Mapping[str, Any] | None,
        role: str | None, decoding: Mapping[str, Any],
    ) -> _PreparedCall:
        resolved_role, spec = self.registry.resolve(target)
        unknown = sorted(set(decoding) - DECODING_KEYS)
        if unknown:
            raise ConfigurationError(f"unknown decoding parameters {unknown}; allowed: {sorted(DECODING_KEYS)}")
        template = load_prompt(prompt_id)
        messages = template.render(variables)
        effective_schema = dict(schema) if schema is not None else template.output_schema
        merged = {**spec.decoding, **decoding}
        identity = {"params": merged, "schema": effective_schema, "structured_output": spec.structured_output}
        call_id = compute_call_id(spec.backend, spec.model, template.content_hash, messages, identity)
        request = {"model_id": spec.model, "messages": messages, **identity}
        return _PreparedCall(
            call_id=call_id, role=role or resolved_role, prompt_id=prompt_id, prompt_hash=template.content_hash,
            spec=spec, messages=messages, decoding=merged, schema=effective_schema,
            request_json=canonical_json(request),
        )

    def _execute(self, call: _PreparedCall) -> CallResult:
        # In refresh mode only answers recorded during this run count (another process's, or a repeat).
        since = self._started_at if self.cache_mode == "refresh" else None
        if since is None:
            row = self.ledger.lookup(call.call_id)
            if row is not None:
                return self._count(CallResult.from_row(row, cached=True))
            if self.cache_mode == "replay-only":
                raise ReplayMissError(
                    f"replay-only: the ledger has no successful call for model {call.spec.name!r}, "
                    f"prompt {call.prompt_id!r}, call_id {call.call_id}"
                )
        with self.ledger.claim(call.call_id):
            # Whoever held the claim before us may have made this very call: serve its answer.
            row = self.ledger.lookup(call.call_id, since=since)
            if row is not None:
                return self._count(CallResult.from_row(row, cached=True))
            reason = self._budget.exhausted_reason()
            if reason:
                raise BudgetExceeded(f"run {self.run_id} stopped: {reason}; not calling model {call.spec.name!r} "
                                     f"for call_id {call.call_id}")
            if call.call_id in self.ledger.quarantined_call_ids:
                logger.warning("making call %s (model %r) again: its recorded row was in a quarantined ledger "
                               "segment", call.call_id, call.spec.name)
            backend = self._backend(call.spec)
            started = time.monotonic()
            completion, error, attempts = self._attempt(backend, call)
            row = self._row(call, completion, error, attempts, time.monotonic() - started)
            self.ledger.append(row)  # durable before the result is used
        result = self._count(CallResult.from_row(row, cached=False))
        self._budget.spend(result.tokens_in + result.tokens_out, result.cost_usd)
        if error is not None:
            raise CallFailedError(f"model {call.spec.name!r} call_id {call.call_id}: {error}", result)
        return result

    def _attempt(self, backend: Backend, call: _PreparedCall) -> tuple[Completion | None, str | None, int]:
        limiter = self._limiters.get(call.spec.name)
        with self._semaphores[call.spec.name]:
            for attempt in range(1, self.max_attempts + 1):
                if limiter is not None:
                    limiter.acquire()
                try:
                    return backend.complete(call.messages, call.decoding, call.schema), None, attempt
                except PermanentError as error:
                    return None, str(error), attempt
                except TransientError as error:
                    if attempt == self.max_attempts:
                        return None, f"gave up after {attempt} attempts; last error: {error}", attempt
                    self._sleep(backoff_delay(attempt, self.backoff_base_s, self.backoff_max_s,
                                              error.retry_after_s, self._rng))
        raise AssertionError("unreachable: the loop returns on its last attempt")

    def _row(
        self, call: _PreparedCall, completion: Completion | None, error: str | None, attempts: int, latency: float,
        price_factor: float = 1.0,
    ) -> dict[str, Any]:
        parsed = parse_answer(completion.text, call.schema) if completion else None
        tokens_in = completion.tokens_in if completion else 0
        tokens_out = completion.tokens_out if completion else 0
        return {
            "call_id": call.call_id, "role": call.role, "prompt_id": call.prompt_id, "prompt_hash": call.prompt_hash,
            "backend": call.spec.backend, "model": call.spec.name, "model_id": call.spec.model,
            "request": call.request_json,
            "raw_response": completion.text if completion else None,
            "parsed": canonical_json(parsed.parsed) if parsed and parsed.parsed is not None else None,
            "parse_ok": bool(parsed and parsed.parse_ok),
            "label": parsed.label if parsed else None,
            "tokens_in": tokens_in, "tokens_out": tokens_out, "latency_s": latency,
            "cost_usd": price_factor * estimate_cost_usd(tokens_in, tokens_out, call.spec.price_in_per_million,
                                                         call.spec.price_out_per_million),
            "error": error, "attempts": attempts,
            "created_at": datetime.now(UTC), "run_id": self.run_id,
        }

    # -- provider batches (batches.py) -------------------------------------------------------------
    def _map_as_batch(
        self, target: str, prompt_id: str, items: Sequence[Mapping[str, Any]], schema: Mapping[str, Any] | None,
        role: str | None, decoding: Mapping[str, Any], progress: ProgressCallback | None,
    ) -> list[CallResult]:
        """`map` for a model with `batch: true`: the items the ledger answers are answered from it; the other calls go
        to the provider as one batch, recorded (`<lake>/llm_batches/`) before anything waits, polled for up to
        `batch_wait_s`, and collected into the ledger at the batch price. A batch that has not ended raises
        BatchPendingError; the next `map` of these calls resumes it and never submits them again."""
        _, spec = self.registry.resolve(target)
        since = self._started_at if self.cache_mode == "refresh" else None
        results: list[CallResult | None] = [None] * len(items)
        calls: dict[str, _PreparedCall] = {}
        asked_by: dict[str, list[int]] = defaultdict(list)  # call id -> the items asking for it
        for index, variables in enumerate(items):
            try:
                call = self._prepare(target, prompt_id, variables, schema, role, decoding)
            except PromptError as error:
                results[index] = self._input_error_result(target, prompt_id, role, spec, index, error)
                continue
            row = self.ledger.lookup(call.call_id, since=since)
            if row is not None:
                results[index] = self._count(CallResult.from_row(row, cached=True))
            else:
                calls.setdefault(call.call_id, call)
                asked_by[call.call_id].append(index)
        rows = self._run_batches(spec, calls) if calls else {}
        for call_id, indices in asked_by.items():
            row = rows.get(call_id) or self.ledger.lookup(call_id)  # or collected by another worker meanwhile
            for repeat, index in enumerate(indices):
                if row is not None:
                    results[index] = self._count(CallResult.from_row(row, cached=repeat > 0))
                else:
                    failure = LLMGatewayError(f"call {call_id}: another worker collected its batch result, a failure; "
                                              "the next run submits it again")
                    results[index] = replace(self._input_error_result(target, prompt_id, role, spec, index, failure),
                                             call_id=call_id)
        finished = [result for result in results if result is not None]
        for done, result in enumerate(finished, start=1):
            if progress is not None:
                progress(done, len(finished), result)
        return finished

    def _run_batches(self, spec: ModelSpec, calls: Mapping[str, _PreparedCall]) -> dict[str, dict[str, Any]]:
        """The ledger rows of `calls`, from the batches that hold them (those a run submitted before, then one new
        batch of the rest), each collected when it ended. Raises BatchPendingError when one has not ended in time."""
        with self.batches.lock(spec.name):
            records = self.batches.open_for(spec.name, calls)
            for record in records:
                if record.status == SUBMITTING:
                    raise BatchPendingError(
                        f"model {spec.name!r}: the submission of the batch recorded in {self.batches.path(record.key)} "
                        f"({len(record.call_ids)} calls) did not complete, so the provider may hold it; find it in "
                        "the provider's batch list, or remove the record to submit its calls again (never done on "
                        "its own)", None, self.batches.path(record.key))
            held = {call_id for record in records for call_id in record.call_ids}
            new = [call for call_id, call in calls.items() if call_id not in held]
            if new:
                records.append(self._submit_batch(spec, new))
        rows: dict[str, dict[str, Any]] = {}
        polls = 1 + (int(self.batch_wait_s // self.batch_poll_s) if self.batch_poll_s > 0 else 0)
        for poll in range(polls):
            if poll:
                self._sleep(self.batch_poll_s)
            waiting = []
            for record in records:
                try:
                    status = batch_client(self._backend(spec)).progress(record.batch_id)
                except Exception as error:  # noqa: BLE001 - a failed poll leaves the batch to the next run
                    waiting.append((record, f"could not be polled ({classify_sdk_error(error)})"))
                    continue
                if status.ended:
                    rows.update(self._collect_batch(spec, record, status.status))
                else:
                    self._note_provider_status(spec, record, status.status)
                    waiting.append((record, f"is {status.status} ({status.done} of {status.total} requests done)"))
            records = [record for record, _ in waiting]
            if not waiting:
                return rows
        record, state = waiting[0]
        raise BatchPendingError(
            f"model {spec.name!r}: batch {record.batch_id} ({len(record.call_ids)} calls, submitted "
            f"{record.submitted_at}) {state} after waiting {self.batch_wait_s:g} s"
            + (f", and {len(waiting) - 1} more batches" if len(waiting) > 1 else "")
            + f"; its record is {self.batches.path(record.key)}: re-run the step to collect", record.batch_id,
            self.batches.path(record.key))

    def _submit_batch(self, spec: ModelSpec, calls: Sequence[_PreparedCall]) -> BatchRecord:
        """Submit `calls` as one batch, recorded first (status submitting) so a lost answer never leads to a second
        submission; the budget is checked against the batch's estimated cost before anything is sent."""
        reason = self._budget.exhausted_reason()
        tokens, cost = estimated_spend(spec, calls)
        reason = reason or over_budget(self._budget, tokens, cost)
        if reason:
            raise BudgetExceeded(f"run {self.run_id} stopped: not submitting a batch of {len(calls)} calls of model "
                                 f"{spec.name!r}: {reason}")
        client = batch_client(self._backend(spec))
        record = BatchRecord(
            key=batch_key(spec.name, [call.call_id for call in calls]), model=spec.name, backend=spec.backend,
            call_ids=[call.call_id for call in calls],
            calls={call.call_id: {"role": call.role, "prompt_id": call.prompt_id, "prompt_hash": call.prompt_hash,
                                  "request": call.request_json} for call in calls},
            submitted_at=datetime.now(UTC).isoformat())
        self.batches.write(record)
        try:
            record.batch_id = client.submit(calls)
        except Exception as error:  # noqa: BLE001 - classified: refused, or an outcome that is not known
            problem = classify_sdk_error(error)
            if getattr(error, "status_code", None) is None:  # no answer: the provider may have created it
                raise BatchPendingError(
                    f"model {spec.name!r}: submitting a batch of {len(calls)} calls got no answer ({problem}); the "
                    f"provider may hold it: find it in the provider's batch list, or remove "
                    f"{self.batches.path(record.key)} to submit its calls again", None,
                    self.batches.path(record.key)) from error
            self.batches.remove(record)
            raise LLMGatewayError(f"model {spec.name!r}: the provider refused a batch of {len(calls)} calls "
                                  f"({problem}); nothing was submitted") from error
        record.status = SUBMITTED
        self.batches.write(record)
        logger.info("model %r: submitted batch %s of %d calls (record %s)", spec.name, record.batch_id, len(calls),
                    self.batches.path(record.key))
        return record

    def _note_provider_status(self, spec: ModelSpec, record: BatchRecord, provider_status: str) -> None:
        """Keep the provider's word for a batch in progress in its record (what `peerify llm batches` shows)."""
        with self.batches.lock(spec.name):
            current = self.batches.read(record.key)
            if current is not None and current.status == SUBMITTED and current.provider_status != provider_status:
                current.provider_status = provider_status
                self.batches.write(current)

    def _collect_batch(self, spec: ModelSpec, record: BatchRecord, provider_status: str) -> dict[str, dict[str, Any]]:
        """Write one ledger row per call of an ended batch (its answer, or why it has none, as a failed row) at the
        batch price, then mark the record collected; {} when another worker collected it first."""
        with self.batches.lock(spec.name):
            current = self.batches.read(record.key)
            if current is None or current.status == COLLECTED:
                return {}
            submitted_at = datetime.fromisoformat(current.submitted_at)
            requests = {call_id: json.loads(entry["request"]) for call_id, entry in current.calls.items()}
            try:
                outcomes = batch_client(self._backend(spec)).results(
                    current.batch_id, {call_id: request["messages"] for call_id, request in requests.items()})
            except Exception as error:  # noqa: BLE001 - the batch stays to be collected by the next run
                raise BatchPendingError(
                    f"model {spec.name!r}: batch {current.batch_id} ended, but its results could not be read "
                    f"({classify_sdk_error(error)}); its record is {self.batches.path(current.key)}: re-run the step "
                    "to collect", current.batch_id, self.batches.path(current.key)) from error
            latency = (datetime.now(UTC) - submitted_at).total_seconds()
            rows: dict[str, dict[str, Any]] = {}
            for call_id in current.call_ids:
                # A collection cut short by a crash wrote some rows already: those are not written twice.
                found = self.ledger.lookup(call_id, since=submitted_at)
                if found is not None:
                    rows[call_id] = found
                    continue
                entry, request = current.calls[call_id], requests[call_id]
                call = _PreparedCall(
                    call_id=call_id, role=entry["role"], prompt_id=entry["prompt_id"], prompt_hash=entry["prompt_hash"],
                    spec=spec, messages=request["messages"], decoding=request["params"], schema=request["schema"],
                    request_json=entry["request"])
                outcome = outcomes.get(call_id, f"no result for this request (batch {provider_status})")
                completion, error = (outcome, None) if isinstance(outcome, Completion) else (
                    None, f"batch {current.batch_id}: {outcome}")
                row = self._row(call, completion, error, 1, latency, price_factor=BATCH_PRICE_FACTOR)
                self.ledger.append(row)  # durable before the record says collected
                self._budget.spend(row["tokens_in"] + row["tokens_out"], row["cost_usd"])
                rows[call_id] = row
            failed = sum(row["error"] is not None for row in rows.values())
            current.status, current.provider_status = COLLECTED, provider_status
            current.counts = {"succeeded": len(rows) - failed, "failed": failed}
            self.batches.write(current)
            return rows

    def _backend(self, spec: ModelSpec) -> Backend:
        with self._backend_locks[spec.name]:
            if spec.name not in self._backends:
                self._backends[spec.name] = self._create_backend(spec)
            return self._backends[spec.name]

    def _create_backend(self, spec: ModelSpec) -> Backend:
        problem = spec.missing_key_problem(self.env)
        if problem:
            raise PreflightError([problem])
        if spec.backend == "vllm":
            return VllmEngineBackend(spec)
        if spec.backend == "local":
            return self._local.backend(spec, spec.local_model_path(self.env))
        api_key = spec.api_key(self.env) or "not-needed"
        backend_class = AnthropicBackend if spec.backend == "anthropic" else OpenAIChatBackend
        return backend_class(spec, spec.resolved_base_url(self.env), api_key, self.request_timeout_s)

    @property
    def local_servers(self) -> list[LocalLlamaServer]:
        return self._local.servers

    @property
    def quarantined(self) -> list[QuarantinedSegment]:
        """Ledger segments found unreadable (moved to `<lake>/llm_calls/quarantine/`), each with its call ids."""
        return list(self.ledger.quarantined)

    # -- accounting ------------------------------------------------------------------------------
    def _count(self, result: CallResult) -> CallResult:
        with self._usage_lock:
            self._usage_by_model[result.model].add(result)
            self._usage_by_role[result.role or "(no role)"].add(result)
        return result

    def usage(self) -> dict[str, dict[str, dict[str, float | int]]]:
        """Counters per model and per role (calls, cache_hits, tokens, cost, parse_failures, errors)."""
        with self._usage_lock:
            return {
                "by_model": {name: vars(counters).copy() for name, counters in self._usage_by_model.items()},
                "by_role": {name: vars(counters).copy() for name, counters in self._usage_by_role.items()},
            }

    # -- lifecycle -------------------------------------------------------------------------------
    def close(self) -> None:
        """Compact the ledger's per-call segments (the folder then reads as a table even with no call) and stop
        local model servers, freeing their memory and port."""
        try:
            self.ledger.compact()
            self.ledger.ensure_exists()
        except OSError as error:  # the per-call segments stay valid; the next close compacts them
            logger.warning("ledger compaction skipped: %s", error)
        finally:
            if self._owns_local_servers:
                self._local.stop()

    def __enter__(self) -> LLMGateway:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _cache_mode(argument: str | None, env: Mapping[str, str]) -> str:
    picked = chosen_setting(argument, env, "PEERIFY_LLM_CACHE_MODE", "cache_mode")
    if picked is None:
        return "use"
    mode, source = picked
    if mode not in CACHE_MODES:
        raise ConfigurationError(f"{source} is not a cache mode; use one of: {', '.join(CACHE_MODES)}")
    return mode


def _template(prompt_id: str) -> PromptTemplate:
    try:
        return load_prompt(prompt_id)
    except PromptError as error:
        raise ConfigurationError(f"prompt {prompt_id!r}: {' '.join(str(error).split())}") from error

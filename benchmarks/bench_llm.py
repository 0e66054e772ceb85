"""Speed of the LLM gateway: local-model throughput, ledger lookup cost, cached re-run speed-up.

1. Local model (SmolLM2-135M via llama.cpp's server): prompt tokens/s (a long prompt,
   one generated token) and generated tokens/s (end-of-turn suppressed, fixed length).
2. Ledger: time to index N recorded calls from Parquet, and the cost per call of a cache
   hit through `gateway.call` (render, hash, lookup) next to a bare index lookup, in µs.
3. Cold run vs fully cached re-run of the same calls, for the loopback OpenAI server and for
   the local model.

    .venv/bin/python benchmarks/bench_llm.py [--ledger-calls 2000] [--local-calls 6]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import openai  # noqa: E402

from peerify_dagster.resources.llm_gateway import CallLedger, LLMGateway, ModelRegistry  # noqa: E402
from peerify_dagster.resources.local_llm import LocalLlamaServer, resolve_packaged_gguf  # noqa: E402
from tests.fakes.openai_server import ScriptedOpenAIServer  # noqa: E402

SMOLLM_END_OF_TURN_TOKEN = "2"  # <|im_end|> in SmolLM2's vocabulary
SCRIPTED_MODELS_YAML = """
default_profile: bench
models:
  scripted:
    backend: openai
    model: scripted-model
    base_url_env: BENCH_OPENAI_URL
    api_key_env: BENCH_OPENAI_KEY
    max_concurrency: 4
profiles:
  bench:
    labeller_a: scripted
"""


def claim_items(count: int) -> list[dict[str, str]]:
    return [{"claim": f"Claim {i}: the paper omits an ablation of component {i}.",
             "author_response": f"We added the ablation of component {i} to Table {i % 9 + 1}."}
            for i in range(count)]


def local_throughput(repeats: int, n_threads: int | None = None) -> dict[str, float]:
    spec = ModelRegistry.load(env={}).model("smollm2-135m")
    path = resolve_packaged_gguf(spec.gguf_package or "", spec.gguf_file or "")
    long_prompt = " ".join(f"Sentence {i} describes one more experiment of the paper." for i in range(120))
    prompt_rates, generation_rates = [], []
    with LocalLlamaServer(path, model_alias=spec.model, n_ctx=spec.context_window, n_threads=n_threads) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key=server.api_key, max_retries=0, timeout=300)
        for repeat in range(repeats):
            # A different prefix each time so llama.cpp's prompt cache cannot skip the work.
            messages = [{"role": "user", "content": f"Run {repeat}. {long_prompt}"}]
            started = time.perf_counter()
            response = client.chat.completions.create(model=spec.model, messages=messages, max_tokens=1)
            prompt_seconds = time.perf_counter() - started
            prompt_rates.append(response.usage.prompt_tokens / prompt_seconds)

            short = [{"role": "user", "content": f"Run {repeat}. Count upwards from one."}]
            started = time.perf_counter()
            response = client.chat.completions.create(
                model=spec.model, messages=short, max_tokens=128, temperature=0,
                logit_bias={SMOLLM_END_OF_TURN_TOKEN: -100},
            )
            generation_rates.append(response.usage.completion_tokens / (time.perf_counter() - started))
    return {"prompt_tokens_per_s": statistics.median(prompt_rates),
            "generated_tokens_per_s": statistics.median(generation_rates)}


def timed_run(gateway: LLMGateway, target: str, items: list[dict[str, Any]]) -> float:
    started = time.perf_counter()
    gateway.map(target, "label_rebuttal", items)
    return time.perf_counter() - started


def ledger_costs(calls: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as workdir, ScriptedOpenAIServer() as server:
        models_file = Path(workdir) / "models.yaml"
        models_file.write_text(SCRIPTED_MODELS_YAML, encoding="utf-8")
        env = {"BENCH_OPENAI_URL": server.base_url, "BENCH_OPENAI_KEY": "sk-bench"}
        lake = Path(workdir) / "lake"
        items = claim_items(calls)
        with LLMGateway(lake, models_file=models_file, env=env) as cold:
            cold_seconds = timed_run(cold, "labeller_a", items)

        started = time.perf_counter()
        ledger = CallLedger(lake)
        index_seconds = time.perf_counter() - started
        call_ids = ledger.successful_call_ids()
        started = time.perf_counter()
        for call_id in call_ids:
            ledger.lookup(call_id)
        bare_lookup_us = (time.perf_counter() - started) / len(call_ids) * 1e6

        requests_before = server.request_count
        with LLMGateway(lake, models_file=models_file, env=env) as warm:
            started = time.perf_counter()
            for item in items:
                warm.call("labeller_a", "label_rebuttal", item)
            cached_call_us = (time.perf_counter() - started) / calls * 1e6
            cached_seconds = timed_run(warm, "labeller_a", items)
        assert server.request_count == requests_before, "a cached re-run must not reach the server"
    return {"calls": calls, "index_load_ms": index_seconds * 1e3, "bare_lookup_us": bare_lookup_us,
            "cached_call_us": cached_call_us, "cold_s": cold_seconds, "cached_s": cached_seconds}


def local_speedup(calls: int) -> dict[str, float]:
    items = claim_items(calls)
    with tempfile.TemporaryDirectory() as lake:
        with LLMGateway(lake, env={}) as cold:
            cold.preflight(["labeller_a"])
            started = time.perf_counter()
            cold.call("labeller_a", "tag_fact", {"claim": "Warm-up: the server starts here."})
            startup_and_first = time.perf_counter() - started
            cold_seconds = timed_run(cold, "labeller_a", items)
        with LLMGateway(lake, env={}) as warm:
            cached_seconds = timed_run(warm, "labeller_a", items)
            assert warm.local_servers == [], "a cached re-run must not start the local model"
    return {"calls": calls, "server_start_and_first_call_s": startup_and_first,
            "cold_s": cold_seconds, "cached_s": cached_seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ledger-calls", type=int, default=2000)
    parser.add_argument("--local-calls", type=int, default=6)
    parser.add_argument("--throughput-repeats", type=int, default=3)
    args = parser.parse_args()

    throughput = local_throughput(args.throughput_repeats)
    print(f"local SmolLM2-135M (llama.cpp server, {os.cpu_count()} CPUs): "
          f"prompt {throughput['prompt_tokens_per_s']:.0f} tokens/s, "
          f"generation {throughput['generated_tokens_per_s']:.1f} tokens/s")

    ledger = ledger_costs(args.ledger_calls)
    print(f"ledger with {ledger['calls']} calls: index load {ledger['index_load_ms']:.1f} ms, "
          f"bare lookup {ledger['bare_lookup_us']:.2f} µs/call, "
          f"cache hit through gateway.call {ledger['cached_call_us']:.0f} µs/call")
    print(f"loopback OpenAI server, {ledger['calls']} calls: cold {ledger['cold_s']:.2f} s, "
          f"cached {ledger['cached_s']:.3f} s, speed-up x{ledger['cold_s'] / ledger['cached_s']:.0f}")

    local = local_speedup(args.local_calls)
    print(f"local model, {local['calls']} label_rebuttal calls: server start + first call "
          f"{local['server_start_and_first_call_s']:.1f} s, cold {local['cold_s']:.1f} s, "
          f"cached {local['cached_s']:.3f} s, speed-up x{local['cold_s'] / local['cached_s']:.0f}")


if __name__ == "__main__":
    main()

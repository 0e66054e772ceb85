"""The local model server (xllamacpp: llama.cpp's own server inside this process), measured for issue 7.

1. Start: seconds from `LocalLlamaServer.start()` to a server that answers (model loaded), median of 3.
2. Throughput on `--threads` threads with SmolLM2-135M: prompt and generated tokens/s (bench_llm's method).
3. Structured output: `response_format` json_schema (what OpenAI and vLLM take) on `verify` prompts: the
   share of answers that parse and conform to the schema, and whether the server rejected the request.
4. Crash behaviour: a subprocess starts the server and is killed with SIGKILL; is the port still answering?
5. With --install: seconds for `python3 -m venv <tmp> && <tmp>/bin/pip install xllamacpp==<version>`
   (the package index must be reachable; pip's cache is off, so the wheel is downloaded).

    .venv/bin/python benchmarks/bench_local_server.py [--threads 2] [--install]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]

import openai  # noqa: E402
from bench_llm import local_throughput  # noqa: E402

from peerify_dagster.domain.llm_calls import parse_answer, strict_json_schema  # noqa: E402
from peerify_dagster.domain.prompts import load_prompt  # noqa: E402
from peerify_dagster.resources.llm_gateway import ModelRegistry  # noqa: E402
from peerify_dagster.resources.local_llm import LocalLlamaServer  # noqa: E402

XLLAMACPP_REQUIREMENT = "xllamacpp==2026.10.11549"
CLAIMS = [
    "The paper reports no ImageNet results.", "The ablation of the filter is missing.",
    "Training takes 3 days on 8 GPUs.", "The method beats all baselines on CIFAR-10.",
    "The code is not released.", "The proof of Theorem 2 assumes convexity.",
]
SERVE_AND_WAIT = (
    "import sys, time\n"
    "from pathlib import Path\n"
    "from peerify_dagster.resources.local_llm import LocalLlamaServer\n"
    "server = LocalLlamaServer(Path(sys.argv[1]), 'crash-test', n_ctx=512).start()\n"
    "print(server.base_url, flush=True)\n"
    "time.sleep(600)\n"
)


def smollm_path() -> Path:
    return ModelRegistry.load(env={}).model("smollm2-135m").local_model_path({})


def start_seconds(repeats: int, threads: int) -> float:
    timings = []
    for _ in range(repeats):
        server = LocalLlamaServer(smollm_path(), model_alias="bench", n_ctx=8192, n_threads=threads)
        started = time.perf_counter()
        server.start()
        timings.append(time.perf_counter() - started)
        server.stop()
    return statistics.median(timings)


def structured_output(threads: int) -> dict[str, object]:
    template = load_prompt("verify")
    schema = template.output_schema
    response_format = {"type": "json_schema",
                       "json_schema": {"name": "answer", "schema": strict_json_schema(schema), "strict": True}}
    conforming, rejected = 0, []
    with LocalLlamaServer(smollm_path(), model_alias="bench", n_ctx=8192, n_threads=threads) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key=server.api_key, max_retries=0, timeout=300)
        for claim in CLAIMS:
            messages = template.render({"claim": claim, "evidence": f"[p1] {claim}"})
            try:
                response = client.chat.completions.create(model="bench", messages=messages, max_tokens=256,
                                                          temperature=0, response_format=response_format)
            except openai.APIStatusError as error:
                rejected.append(f"HTTP {error.status_code}")
                continue
            conforming += parse_answer(response.choices[0].message.content or "", schema).parse_ok
    return {"requests": len(CLAIMS), "conforming": conforming, "rejected": rejected}


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5):
            return True
    except urllib.error.HTTPError:
        return True
    except (urllib.error.URLError, ConnectionError):
        return False


def crash_behaviour() -> dict[str, object]:
    process = subprocess.Popen([sys.executable, "-c", SERVE_AND_WAIT, str(smollm_path())], stdout=subprocess.PIPE,
                               text=True, env={"PATH": os.environ.get("PATH", "")}, cwd=REPO_ROOT)
    health = process.stdout.readline().strip().removesuffix("/v1") + "/health"
    answered_before = answers(health)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=60)
    return {"answered_before_kill": answered_before, "answers_after_kill": answers(health),
            "process_alive_after_kill": Path(f"/proc/{process.pid}").exists()}


def install_seconds() -> float:
    with tempfile.TemporaryDirectory() as folder:
        started = time.perf_counter()
        subprocess.run(["python3", "-m", "venv", folder], check=True)
        subprocess.run([f"{folder}/bin/pip", "install", "--no-cache-dir", "-q", XLLAMACPP_REQUIREMENT], check=True)
        return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--install", action="store_true", help="also time a fresh venv + pip install of xllamacpp")
    args = parser.parse_args()

    print(f"server start (model load), median of 3: {start_seconds(3, args.threads):.2f} s")
    rates = local_throughput(args.repeats, n_threads=args.threads)
    print(f"SmolLM2-135M on {args.threads} threads: prompt {rates['prompt_tokens_per_s']:.0f} tokens/s, "
          f"generation {rates['generated_tokens_per_s']:.1f} tokens/s")
    print(f"response_format json_schema: {json.dumps(structured_output(args.threads))}")
    print(f"SIGKILL of the serving process: {json.dumps(crash_behaviour())}")
    if args.install:
        print(f"fresh venv + pip install {XLLAMACPP_REQUIREMENT}: {install_seconds():.1f} s")


if __name__ == "__main__":
    main()

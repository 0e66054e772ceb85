"""Throughput of the retrievers on one synthetic manuscript (~40 and ~150 chunks) and of passage embedding.

The text is synthetic: templated sentences with Zipf-distributed filler words. Queries/s is
measured for search alone with precomputed query vectors (query embedding has its own row), so
the retriever rows compare the ranking work. Peak RSS is the process maximum so far
(resource.getrusage), read after each measurement. Prints a Markdown table.

    .venv/bin/python benchmarks/bench_retrieval.py [--queries 200] [--reranker MODEL_DIR]
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import time
from collections.abc import Callable
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from peerify_dagster.domain.retrieval import RETRIEVER_CONFIGS, PaperIndex, build_retrievers  # noqa: E402
from peerify_dagster.domain.retrieval_metrics import markdown_table  # noqa: E402
from peerify_dagster.resources.embedder import Embedder  # noqa: E402

CHUNK_COUNTS = (40, 150)
COLUMNS = ["chunks", "what", "items", "seconds", "per_second", "peak_rss_mib"]
SUBJECTS = ["the proposed method", "our encoder", "the baseline", "the cross-encoder", "GPT-4", "BERT-base"]
VERBS = ["improves", "reduces", "matches", "outperforms", "stabilises", "degrades"]
OBJECTS = ["top-1 accuracy on ImageNet-1k", "recall@10 on MS-MARCO", "training time on 8 A100 GPUs",
           "calibration error", "memory use during inference", "the F1 score on SQuAD"]


SYLLABLES = ["ka", "ro", "mi", "te", "su", "la", "ven", "dor", "pi", "qua", "nel", "tri"]


def synthetic_vocabulary(rng: random.Random, size: int = 3000) -> list[str]:
    return ["".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4))) for _ in range(size)]


def synthetic_sentence(rng: random.Random, vocabulary: list[str]) -> str:
    # Zipf-like filler words give BM25 a realistic spread of document frequencies.
    filler = " ".join(vocabulary[min(int(rng.paretovariate(1.0)) - 1, len(vocabulary) - 1)] for _ in range(10))
    return (f"{rng.choice(SUBJECTS).capitalize()} {rng.choice(VERBS)} {rng.choice(OBJECTS)} "
            f"by {rng.uniform(0.1, 20):.1f}% in setting {rng.randint(1, 40)}, {filler}.")


def synthetic_chunk(rng: random.Random, vocabulary: list[str]) -> str:
    # Manuscript chunks are a paragraph of roughly 150-250 words.
    return " ".join(synthetic_sentence(rng, vocabulary) for _ in range(rng.randint(6, 10)))


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def measure(chunks: int, what: str, items: int, run: Callable[[], object]) -> dict:
    started = time.perf_counter()
    run()
    seconds = time.perf_counter() - started
    return {"chunks": chunks, "what": what, "items": items, "seconds": seconds,
            "per_second": items / seconds if seconds else None, "peak_rss_mib": peak_rss_mib()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--reranker", type=Path, default=None, help="local cross-encoder folder (optional)")
    args = parser.parse_args()

    rng = random.Random(13)
    vocabulary = synthetic_vocabulary(rng)
    embedder = Embedder()
    # Warm-up, so the first timed batch does not pay for lazy initialisation.
    embedder.embed([synthetic_chunk(rng, vocabulary) for _ in range(embedder.batch_size)])
    reranker = None
    if args.reranker is not None:
        from peerify_dagster.resources.reranker import CrossEncoderReranker

        reranker = CrossEncoderReranker(args.reranker)
    retrievers, unavailable = build_retrievers(RETRIEVER_CONFIGS, reranker=reranker)
    queries = [synthetic_sentence(rng, vocabulary) for _ in range(args.queries)]

    results = []
    for chunk_count in CHUNK_COUNTS:
        texts = [synthetic_chunk(rng, vocabulary) for _ in range(chunk_count)]
        holder: dict[str, object] = {}
        results.append(measure(chunk_count, "embed passages", chunk_count,
                               lambda: holder.update(matrix=embedder.embed(texts))))
        results.append(measure(chunk_count, "embed queries", len(queries),
                               lambda: holder.update(query_matrix=embedder.embed(queries))))
        index = PaperIndex("synthetic", [f"c{i}" for i in range(chunk_count)], texts, holder["matrix"])
        results.append(measure(chunk_count, "build bm25", 1, lambda: index.bm25))
        query_matrix = holder["query_matrix"]
        for name, retriever in retrievers.items():
            def search_all() -> None:
                for query, vector in zip(queries, query_matrix):
                    retriever.search(index, query, vector, 10)

            results.append(measure(chunk_count, f"search {name}", len(queries), search_all))

    print(f"Model {embedder.model_id}, {os.cpu_count()} CPUs, {args.queries} queries, k=10.")
    for name, reason in unavailable.items():
        print(f"Not run: {name} ({reason})")
    print()
    print(markdown_table(results, COLUMNS, digits=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

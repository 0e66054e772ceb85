"""Retrieval evaluation 4 of the Peerify release README: each B1 claim should retrieve its gold paragraph.

The pool is the B1 gold paragraphs plus the B3 evidence quotes as distractors. Two settings:
per paper (retrieval restricted to the claim's manuscript, as in the pipeline) and one global
pool. Queries are the rephrased `claim` and the `original_claim`. Prints a Markdown table.

    .venv/bin/python benchmarks/eval_release_retrieval.py [--release PATH] [--reranker MODEL_DIR]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from peerify_dagster.domain.release import build_pooled_passages, load_release  # noqa: E402
from peerify_dagster.domain.retrieval import RETRIEVER_CONFIGS, build_retrievers, retrieve_claims  # noqa: E402
from peerify_dagster.domain.retrieval_metrics import evaluate_runs, markdown_table  # noqa: E402
from peerify_dagster.resources.embedder import Embedder, EmbeddingCache  # noqa: E402

QUERY_FIELDS = ["claim", "original_claim"]
COLUMNS = ["pool", "query", "retriever", "n_claims", "recall@1", "recall@5", "recall@10", "mrr@10", "ndcg@10"]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--release", type=Path, default=REPO_ROOT.parent / "shared" / "peerify-release")
    parser.add_argument("--reranker", type=Path, default=None, help="local cross-encoder folder (optional)")
    parser.add_argument("--cache", type=Path, default=None, help="embedding cache folder (optional)")
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    if not args.release.is_dir():
        print(f"Release folder {args.release} not found; pass --release PATH to the Peerify JSONL files.")
        return 2
    release = load_release(args.release)
    for error in release["errors"]:
        print(f"skipped: {error['message']}", file=sys.stderr)
    pool = build_pooled_passages(release)

    started = time.perf_counter()
    embedder = Embedder()
    passages = pool.all_passages()
    passage_texts = [passage["text"] for passage in passages]
    if args.cache is not None:
        matrix, _, _ = EmbeddingCache(args.cache, embedder).embed_with_cache(passage_texts)
    else:
        matrix = embedder.embed(passage_texts)
    vectors = {passage["passage_id"]: vector for passage, vector in zip(passages, matrix)}
    embed_seconds = time.perf_counter() - started

    reranker = None
    if args.reranker is not None:
        from peerify_dagster.resources.reranker import CrossEncoderReranker

        reranker = CrossEncoderReranker(args.reranker)
    retrievers, unavailable = build_retrievers(RETRIEVER_CONFIGS, reranker=reranker)

    global_index = pool.global_index(vectors)
    settings = {
        "per-paper": lambda paper_id: pool.paper_index(paper_id, vectors),
        "global": lambda paper_id: global_index,
    }
    results = []
    for pool_name, load_index in settings.items():
        for query_field in QUERY_FIELDS:
            rows = retrieve_claims(pool.claim_queries(query_field), load_index, retrievers, embedder.embed, k=10)
            for result in evaluate_runs(rows, pool.gold, ks=(1, 5, 10)):
                results.append({"pool": pool_name, "query": query_field, **result})

    per_paper_sizes = sorted(len(ids) for ids in pool.by_paper.values())
    distractors = sum(passage["roles"] == ["distractor"] for passage in passages)
    print(f"Release: {args.release.name}; B1 claims {len(pool.claims)}, papers {len(pool.by_paper)}, "
          f"passages {len(passages)} ({len(passages) - distractors} gold paragraphs, {distractors} distractor quotes); "
          f"per-paper pool size min/median/max {per_paper_sizes[0]}/{per_paper_sizes[len(per_paper_sizes) // 2]}/"
          f"{per_paper_sizes[-1]}; embedding {len(passages)} passages took {embed_seconds:.1f}s "
          f"({embedder.model_id}).")
    for name, reason in unavailable.items():
        print(f"Not run: {name} ({reason})")
    print()
    print(markdown_table(results, COLUMNS))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Tests of domain/retrieval.py: tokenizer, retrievers with real MiniLM embeddings, per-paper restriction."""

from __future__ import annotations

import numpy as np
import pytest

from peerify_dagster.domain.retrieval import (
    RETRIEVER_CONFIGS,
    STATUS_ERROR,
    STATUS_NO_CHUNKS,
    STATUS_NO_HITS,
    STATUS_OK,
    Bm25Retriever,
    DenseRetriever,
    HybridRetriever,
    PaperIndex,
    Reranked,
    build_retrievers,
    retrieve_claims,
    tokenize,
)
from peerify_dagster.resources.embedder import Embedder

PAPER_A = {
    "a-results": "We evaluate on ImageNet-1k and report 93.4% top-1 accuracy with a ViT-B/16 backbone.",
    "a-reranker": "A cross-encoder reranker rescores the top 20 passages that BM25 retrieves for each query.",
    "a-training": "Training took three days on eight A100 GPUs with a batch size of 256 and the AdamW optimizer.",
    "a-related": "Related work on contrastive learning includes SimCLR and MoCo, which rely on data augmentation.",
}
CLAIM_A = "The cross-encoder reranker rescores the top 20 BM25 passages of every query."
# Paper B holds the claim word for word: a perfect match that must never leak into paper A's results.
PAPER_B = {"b-copy": CLAIM_A, "b-other": "Our dataset contains 12,000 annotated molecules from PubChem."}


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return Embedder()


def make_index(paper_id: str, chunks: dict[str, str], embedder: Embedder | None) -> PaperIndex:
    texts = list(chunks.values())
    return PaperIndex(paper_id, list(chunks), texts, embedder.embed(texts) if embedder else None)


@pytest.mark.parametrize(
    ("text", "expected_present", "expected_absent"),
    [
        ("Recall stayed below 0.55 and reached 93.4% accuracy", ["0.55", "93.4", "recall"], ["93.4%", "93", "below"]),
        ("A cross-encoder reranker", ["cross-encoder", "cross", "encoder", "reranker"], ["a"]),
        ("MS-MARCO and ImageNet-1k", ["ms-marco", "ms", "marco", "imagenet-1k", "imagenet", "1k"], ["and"]),
        ("GPT-4 beats BERT-base", ["gpt-4", "gpt", "4", "bert-base", "bert", "base", "beats"], ["GPT-4"]),
        ("The model's state-of-the-art results",
         ["model", "state-of-the-art", "state", "art", "results"], ["the", "of", "s"]),
    ],
)
def test_tokenize_keeps_numbers_names_and_compounds(
    text: str, expected_present: list[str], expected_absent: list[str]
) -> None:
    tokens = tokenize(text)
    for token in expected_present:
        assert token in tokens
    for token in expected_absent:
        assert token not in tokens


def test_tokenize_order_and_sentence_end() -> None:
    assert tokenize("Results in 2023. Then GPT-4.") == ["results", "2023", "gpt-4", "gpt", "4"]
    assert tokenize("") == []


@pytest.mark.parametrize("retriever", [Bm25Retriever(), DenseRetriever(), HybridRetriever()], ids=lambda r: r.name)
def test_gold_chunk_ranks_first(retriever, embedder: Embedder) -> None:
    index = make_index("A", PAPER_A, embedder)
    hits = retriever.search(index, CLAIM_A, embedder.embed([CLAIM_A])[0], k=3)
    assert hits[0].chunk_id == "a-reranker"
    assert [hit.rank for hit in hits] == list(range(1, len(hits) + 1))
    assert all(earlier.score >= later.score for earlier, later in zip(hits, hits[1:]))


def test_hybrid_score_is_reciprocal_rank_fusion(embedder: Embedder) -> None:
    index = make_index("A", PAPER_A, embedder)
    query_vector = embedder.embed([CLAIM_A])[0]
    lexical = {hit.chunk_id: hit.rank for hit in Bm25Retriever().search(index, CLAIM_A, None, len(index))}
    dense = {hit.chunk_id: hit.rank for hit in DenseRetriever().search(index, CLAIM_A, query_vector, len(index))}
    for hit in HybridRetriever(rrf_k=60).search(index, CLAIM_A, query_vector, len(index)):
        expected = sum(1 / (60 + ranks[hit.chunk_id]) for ranks in (lexical, dense) if hit.chunk_id in ranks)
        assert hit.score == pytest.approx(expected)


def test_bm25_returns_only_chunks_sharing_a_term() -> None:
    index = make_index("A", PAPER_A, None)
    hits = Bm25Retriever().search(index, "AdamW optimizer", None, k=10)
    assert [hit.chunk_id for hit in hits] == ["a-training"]
    assert Bm25Retriever().search(index, "zebra giraffe", None, k=10) == []


def test_bm25_separates_chunks_of_a_two_chunk_paper() -> None:
    # rank_bm25's Okapi idf is 0 for a term in one of two documents; the index must still rank.
    index = PaperIndex("tiny", ["x", "y"], ["graph neural networks", "protein folding"])
    hits = Bm25Retriever().search(index, "protein structure", None, k=2)
    assert [hit.chunk_id for hit in hits] == ["y"]
    assert hits[0].score > 0


def test_reranked_keeps_pool_and_orders_by_scorer(embedder: Embedder) -> None:
    index = make_index("A", PAPER_A, embedder)
    seen_pools: list[int] = []

    def longest_first(query: str, passages: list[str]) -> list[float]:
        seen_pools.append(len(passages))
        return [float(len(passage)) for passage in passages]

    reranked = Reranked(DenseRetriever(), longest_first, pool=3, keep=2)
    hits = reranked.search(index, CLAIM_A, embedder.embed([CLAIM_A])[0], k=10)
    assert reranked.name == "dense+rerank"
    assert seen_pools == [3]
    assert len(hits) == 2
    pool_ids = {hit.chunk_id for hit in DenseRetriever().search(index, CLAIM_A, embedder.embed([CLAIM_A])[0], 3)}
    expected = sorted(pool_ids, key=lambda chunk_id: -len(PAPER_A[chunk_id]))[:2]
    assert [hit.chunk_id for hit in hits] == expected
    assert [hit.score for hit in hits] == [float(len(PAPER_A[chunk_id])) for chunk_id in expected]


def test_build_retrievers_reports_what_cannot_run() -> None:
    available, unavailable = build_retrievers(["bm25", "dense+rerank", "hybrid+rerank", "splade"])
    assert set(available) == {"bm25"}
    assert set(unavailable) == {"dense+rerank", "hybrid+rerank", "splade"}
    assert "reranker" in unavailable["dense+rerank"]
    assert "unknown" in unavailable["splade"]

    available, unavailable = build_retrievers(RETRIEVER_CONFIGS, reranker=lambda query, passages: [0.0] * len(passages))
    assert unavailable == {}
    assert {name: retriever.name for name, retriever in available.items()} == {name: name for name in RETRIEVER_CONFIGS}


def test_retrieve_claims_stays_inside_the_claims_paper(embedder: Embedder) -> None:
    indexes = {"A": make_index("A", PAPER_A, embedder), "B": make_index("B", PAPER_B, embedder)}
    retrievers, _ = build_retrievers(["bm25", "dense", "hybrid"])
    embed_calls: list[int] = []

    def embed_queries(texts: list[str]) -> np.ndarray:
        embed_calls.append(len(texts))
        return embedder.embed(texts)

    claims = [("c1", "A", CLAIM_A), ("c2", "B", "PubChem molecules"), ("c3", "A", "AdamW with batch size 256")]
    rows = retrieve_claims(claims, indexes, retrievers, embed_queries, k=10)

    # Claims are grouped per paper and their query embeddings batched: one call per paper.
    assert sorted(embed_calls) == [1, 2]
    for row in rows:
        assert row["status"] == STATUS_OK
        assert row["chunk_id"].startswith(row["paper_id"].lower() + "-")
    top = {(row["claim_id"], row["retriever"]): row["chunk_id"] for row in rows if row["rank"] == 1}
    assert {top[("c1", name)] for name in retrievers} == {"a-reranker"}
    assert "b-copy" not in {row["chunk_id"] for row in rows if row["claim_id"] == "c1"}


def test_paper_without_chunks_gets_one_explicit_row_per_retriever(embedder: Embedder) -> None:
    loaded: list[str] = []

    def load(paper_id: str) -> PaperIndex | None:
        loaded.append(paper_id)
        return {"A": make_index("A", PAPER_A, embedder), "empty": PaperIndex("empty", [], [])}.get(paper_id)

    retrievers, _ = build_retrievers(["bm25", "dense"])
    claims = [("c1", "A", CLAIM_A), ("c2", "missing", "anything"), ("c3", "empty", "anything")]
    rows = retrieve_claims(claims, load, retrievers, embedder.embed)

    assert sorted(loaded) == ["A", "empty", "missing"]
    for claim_id in ("c2", "c3"):
        claim_rows = [row for row in rows if row["claim_id"] == claim_id]
        assert sorted(row["retriever"] for row in claim_rows) == ["bm25", "dense"]
        assert all(row["status"] == STATUS_NO_CHUNKS for row in claim_rows)
        assert all(row["chunk_id"] is None and row["rank"] is None for row in claim_rows)
    assert {row["status"] for row in rows if row["claim_id"] == "c1"} == {STATUS_OK}


def test_failures_are_reported_per_claim_and_the_batch_completes() -> None:
    def load(paper_id: str) -> PaperIndex:
        if paper_id == "broken":
            raise OSError("chunk file is truncated")
        return make_index(paper_id, PAPER_A, None)  # no embeddings: dense must fail, bm25 must run

    retrievers, _ = build_retrievers(["bm25", "dense"])
    claims = [("c1", "A", "AdamW optimizer"), ("c2", "broken", "AdamW"), ("c3", "A", "zebra")]
    rows = retrieve_claims(claims, load, retrievers, lambda texts: np.ones((len(texts), 384), np.float32))
    by_key = {}
    for row in rows:
        by_key.setdefault((row["claim_id"], row["retriever"]), []).append(row)

    assert by_key[("c1", "bm25")][0]["chunk_id"] == "a-training"
    assert by_key[("c1", "dense")][0]["status"] == STATUS_ERROR
    assert "embeddings" in by_key[("c1", "dense")][0]["error"]
    assert all(row["status"] == STATUS_ERROR and "truncated" in row["error"] for row in by_key[("c2", "bm25")])
    assert [row["status"] for row in by_key[("c3", "bm25")]] == [STATUS_NO_HITS]


def test_dense_without_query_embedder_is_refused_up_front() -> None:
    retrievers, _ = build_retrievers(["dense"])
    with pytest.raises(ValueError, match="query vectors"):
        retrieve_claims([("c1", "A", "x")], {}, retrievers, None)


def test_degenerate_inputs_give_empty_results_or_clear_errors() -> None:
    punctuation_only = PaperIndex("P", ["a", "b"], ["...", "--"])
    assert Bm25Retriever().search(punctuation_only, "anything at all", None, 5) == []
    index = PaperIndex("P", ["a"], ["text"], np.ones((1, 4), np.float32) / 2)
    with pytest.raises(ValueError, match="paper P: query vector of shape"):
        DenseRetriever().search(index, "text", np.ones(3, np.float32), 5)


def test_paper_index_rejects_mismatched_inputs() -> None:
    with pytest.raises(ValueError, match="paper P"):
        PaperIndex("P", ["a", "b"], ["only one text"])
    with pytest.raises(ValueError, match="embeddings"):
        PaperIndex("P", ["a"], ["text"], np.zeros((2, 4), np.float32))

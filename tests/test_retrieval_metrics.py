"""Tests of domain/retrieval_metrics.py against hand-computed values."""

from __future__ import annotations

import math

import pytest

from peerify_dagster.domain.retrieval_metrics import (
    evaluate_runs,
    hit_at_k,
    markdown_table,
    mrr_at_k,
    ndcg_at_k,
)

LOG2_3 = math.log2(3)


@pytest.mark.parametrize(
    ("ranked", "relevant", "k", "expected"),
    [
        (["a", "b", "c"], {"b", "d"}, 1, 0.0),
        # Evidence split over (or duplicated in) chunks b and d: finding either finds the claim's evidence.
        (["a", "b", "c"], {"b", "d"}, 2, 1.0),
        (["a", "b", "c"], {"b", "d"}, 10, 1.0),
        (["b", "d"], {"b", "d"}, 2, 1.0),
        (["b", "b"], {"b", "d"}, 2, 1.0),
        ([], {"a"}, 10, 0.0),
    ],
)
def test_recall_at_k_is_hit_at_k(ranked: list[str], relevant: set[str], k: int, expected: float) -> None:
    assert hit_at_k(ranked, relevant, k) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("ranked", "relevant", "k", "expected"),
    [
        (["a"], {"a"}, 10, 1.0),
        (["x", "a"], {"a"}, 10, 1 / LOG2_3),
        (["x", "a"], {"a"}, 1, 0.0),
        (["x", "a", "b"], {"a", "b"}, 10, (1 / LOG2_3 + 1 / 2) / (1 + 1 / LOG2_3)),
        # More relevant items than k: the ideal DCG stops at k, so a perfect top-2 scores 1.
        (["a", "b"], {"a", "b", "c", "d", "e"}, 2, 1.0),
        (["a", "a"], {"a", "b"}, 2, 1 / (1 + 1 / LOG2_3)),
    ],
)
def test_ndcg_at_k(ranked: list[str], relevant: set[str], k: int, expected: float) -> None:
    value = ndcg_at_k(ranked, relevant, k)
    assert value == pytest.approx(expected)
    assert 0.0 <= value <= 1.0


@pytest.mark.parametrize(
    ("ranked", "relevant", "k", "expected"),
    [
        (["a", "b"], {"a"}, 10, 1.0),
        (["x", "y", "a"], {"a"}, 10, 1 / 3),
        (["x", "y", "a"], {"a"}, 2, 0.0),
        (["x", "b", "a"], {"a", "b"}, 10, 0.5),
    ],
)
def test_mrr_at_k(ranked: list[str], relevant: set[str], k: int, expected: float) -> None:
    assert mrr_at_k(ranked, relevant, k) == pytest.approx(expected)


@pytest.mark.parametrize("metric", [hit_at_k, ndcg_at_k, mrr_at_k])
def test_metrics_refuse_undefined_inputs(metric) -> None:
    with pytest.raises(ValueError, match="no relevant"):
        metric(["a"], set(), 10)
    with pytest.raises(ValueError, match="k must"):
        metric(["a"], {"a"}, 0)


def run_row(claim_id: str, retriever: str, rank: int | None, chunk_id: str | None) -> dict:
    return {"claim_id": claim_id, "retriever": retriever, "rank": rank, "chunk_id": chunk_id}


def test_evaluate_runs_aggregates_per_retriever() -> None:
    rows = [
        # bm25: c1 gold at rank 2 (given out of order), c2 gold missed, c3 has no gold.
        run_row("c1", "bm25", 2, "g1"),
        run_row("c1", "bm25", 1, "x"),
        run_row("c2", "bm25", 1, "y"),
        run_row("c3", "bm25", 1, "z"),
        # dense: c1 gold first, c2 was never run (counts as a miss), c3 has no chunks.
        run_row("c1", "dense", 1, "g1"),
        run_row("c3", "dense", None, None),
    ]
    gold = {"c1": {"g1"}, "c2": {"g2"}, "c3": set()}
    results = {row["retriever"]: row for row in evaluate_runs(rows, gold, ks=(1, 5, 10))}

    assert set(results) == {"bm25", "dense"}
    bm25, dense = results["bm25"], results["dense"]
    assert bm25["n_claims"] == dense["n_claims"] == bm25["n_claims_scored"] == 2
    assert bm25["n_claims_without_manuscript"] == 0
    assert bm25["n_claims_without_gold"] == 1
    assert bm25["recall@1"] == pytest.approx(0.0)
    assert bm25["recall@5"] == pytest.approx(0.5)
    assert bm25["mrr@10"] == pytest.approx(0.25)
    assert bm25["ndcg@10"] == pytest.approx((1 / LOG2_3) / 2)
    assert dense["recall@1"] == pytest.approx(0.5)
    assert dense["mrr@10"] == pytest.approx(0.5)
    assert dense["ndcg@10"] == pytest.approx(0.5)


def test_evaluate_runs_without_any_gold_reports_none() -> None:
    results = evaluate_runs([run_row("c1", "bm25", 1, "x")], {}, ks=(1,))
    assert results == [
        {"retriever": "bm25", "n_claims": 0, "n_claims_scored": 0, "n_claims_without_manuscript": 0,
         "n_claims_without_gold": 1, "n_claims_gold_unlocatable": 0, "recall@1": None, "ndcg@1": None, "mrr@1": None}
    ]


def test_claims_without_manuscript_are_misses_in_the_denominator() -> None:
    # c1: gold first; c2: gold at rank 2; c3 and c4: known evidence in a paper that yielded no chunks
    # (their run rows say no_chunks); c5: no gold (a Not Determined claim).
    rows = [
        run_row("c1", "bm25", 1, "g1"),
        run_row("c2", "bm25", 1, "x"), run_row("c2", "bm25", 2, "g2"),
        run_row("c3", "bm25", None, None),
        run_row("c4", "bm25", None, None),
        run_row("c5", "bm25", 1, "y"),
    ]
    gold = {"c1": {"g1"}, "c2": {"g2"}}
    [row] = evaluate_runs(rows, gold, ks=(1, 5), without_manuscript={"c3", "c4"})
    assert (row["n_claims"], row["n_claims_scored"], row["n_claims_without_manuscript"],
            row["n_claims_without_gold"]) == (4, 2, 2, 1)
    assert row["recall@1"] == pytest.approx(1 / 4)  # not 1/2: the two lost claims count as misses
    assert row["recall@5"] == pytest.approx(2 / 4)
    assert row["mrr@5"] == pytest.approx((1 + 1 / 2) / 4)
    assert row["ndcg@5"] == pytest.approx((1 + 1 / LOG2_3) / 4)
    # Losing a manuscript never raises a metric: the same run without the loss scores higher per claim.
    [intact] = evaluate_runs(rows[:3] + [run_row("c3", "bm25", 1, "g3"), run_row("c4", "bm25", 1, "g4")],
                             gold | {"c3": {"g3"}, "c4": {"g4"}}, ks=(1, 5))
    assert intact["n_claims"] == row["n_claims"] and intact["recall@1"] == pytest.approx(3 / 4)


def test_only_claims_without_manuscript_score_zero_not_none() -> None:
    [row] = evaluate_runs([run_row("c1", "dense", None, None)], {}, ks=(10,), without_manuscript=["c1"])
    assert (row["n_claims"], row["n_claims_scored"], row["n_claims_without_manuscript"]) == (1, 0, 1)
    assert row["recall@10"] == row["mrr@10"] == row["ndcg@10"] == 0.0


def test_markdown_table_renders_rows() -> None:
    rows = [{"name": "bm25", "recall@10": 0.51234, "n": 3, "missing": None}]
    table = markdown_table(rows, ["name", "recall@10", "n", "missing"])
    assert table.splitlines() == ["| name | recall@10 | n | missing |", "|---|---|---|---|", "| bm25 | 0.512 | 3 | - |"]

"""Ranking metrics for evidence retrieval (binary relevance) and their aggregation over a run.

A run is the row table written by `retrieval.retrieve_claims` (claim_id, retriever, rank,
chunk_id, ...). A claim's gold evidence is one item even when it lies in several chunks (split
over two chunks, or duplicated): a claim is found at k when any relevant chunk is in the top k,
so recall@k is hit@k and a split never counts as half a hit. Claims with no gold evidence, and
claims whose gold cannot be located in their manuscript's chunks, cannot be scored; they are
counted, not averaged. Claims whose gold evidence is known to exist in a manuscript that yielded
no chunks are misses.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any


def _check(relevant: set[str], k: int) -> None:
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    if not relevant:
        raise ValueError("no relevant items: the metric is undefined")


def _first_occurrences(ranked_ids: Sequence[str | None], k: int) -> list[str | None]:
    # A chunk listed twice must not earn credit twice.
    seen: set[str] = set()
    top: list[str | None] = []
    for chunk_id in ranked_ids[:k]:
        top.append(None if chunk_id in seen else chunk_id)
        if chunk_id is not None:
            seen.add(chunk_id)
    return top


def hit_at_k(ranked_ids: Sequence[str | None], relevant: set[str], k: int) -> float:
    """1 when any relevant item is in the top k, else 0: the claim's recall@k, its evidence being one item."""
    _check(relevant, k)
    return 1.0 if relevant.intersection(ranked_ids[:k]) else 0.0


def ndcg_at_k(ranked_ids: Sequence[str | None], relevant: set[str], k: int) -> float:
    """Binary-relevance nDCG; the ideal ranking has min(k, |relevant|) hits, so the value is at most 1."""
    _check(relevant, k)
    dcg = sum(
        1.0 / math.log2(position + 2)
        for position, chunk_id in enumerate(_first_occurrences(ranked_ids, k))
        if chunk_id in relevant
    )
    ideal = sum(1.0 / math.log2(position + 2) for position in range(min(k, len(relevant))))
    return dcg / ideal


def mrr_at_k(ranked_ids: Sequence[str | None], relevant: set[str], k: int) -> float:
    """Reciprocal rank of the first relevant item in the top k, 0 when there is none."""
    _check(relevant, k)
    for position, chunk_id in enumerate(ranked_ids[:k]):
        if chunk_id in relevant:
            return 1.0 / (position + 1)
    return 0.0


def rankings_by_retriever(run_rows: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, list[str]]]:
    """retriever -> claim_id -> chunk ids in rank order; rows without a hit keep the claim with an empty list."""
    ranked: dict[str, dict[str, list[tuple[int, str]]]] = {}
    for row in run_rows:
        claim_hits = ranked.setdefault(row["retriever"], {}).setdefault(row["claim_id"], [])
        if row.get("chunk_id") is not None and row.get("rank") is not None:
            claim_hits.append((int(row["rank"]), str(row["chunk_id"])))
    return {
        retriever: {claim_id: [chunk_id for _, chunk_id in sorted(hits)] for claim_id, hits in claims.items()}
        for retriever, claims in ranked.items()
    }


def evaluate_runs(
    run_rows: Iterable[Mapping[str, Any]],
    gold: Mapping[str, set[str]],
    ks: Sequence[int] = (1, 5, 10),
    without_manuscript: Collection[str] = (),
    gold_unlocatable: Collection[str] = (),
) -> list[dict[str, Any]]:
    """One row per retriever: recall@k (hit@k) for each k, ndcg@K and mrr@K at K = max(ks), claim counts.

    The claims scored are those present in the run (under any retriever) that have gold
    evidence; a claim a retriever has no rows for scores 0 for it, so a retriever that failed
    on some claims is not flattered. Claims in `without_manuscript` (known evidence, but their
    paper yielded no chunks) score 0 on every metric as well: they stay in the denominator, so a
    lost manuscript lowers the averages instead of raising them by shrinking the set. Counts:
    n_claims (the denominator) = n_claims_scored + n_claims_without_manuscript; claims in the
    run in `gold_unlocatable` (gold evidence that no chunk of their manuscript holds: no chunk
    can be judged relevant) are counted in n_claims_gold_unlocatable, the other claims in the
    run without gold in n_claims_without_gold, neither averaged.
    """
    if not ks:
        raise ValueError("ks must name at least one cutoff")
    depth = max(ks)
    rankings = rankings_by_retriever(run_rows)
    missing = set(without_manuscript)
    claims_in_run = {claim_id for claims in rankings.values() for claim_id in claims}
    unlocatable = (claims_in_run & set(gold_unlocatable)) - missing
    scored = sorted(claim_id for claim_id in claims_in_run - missing - unlocatable if gold.get(claim_id))
    without_gold = len(claims_in_run - missing - unlocatable) - len(scored)
    n_claims = len(scored) + len(missing)

    results: list[dict[str, Any]] = []
    for retriever in sorted(rankings):
        ranked_for = rankings[retriever]
        row: dict[str, Any] = {"retriever": retriever, "n_claims": n_claims, "n_claims_scored": len(scored),
                               "n_claims_without_manuscript": len(missing), "n_claims_without_gold": without_gold,
                               "n_claims_gold_unlocatable": len(unlocatable)}
        metrics = {f"recall@{k}": (hit_at_k, k) for k in ks}
        metrics |= {f"ndcg@{depth}": (ndcg_at_k, depth), f"mrr@{depth}": (mrr_at_k, depth)}
        for metric_name, (metric, k) in metrics.items():
            total = sum(metric(ranked_for.get(claim_id, []), gold[claim_id], k) for claim_id in scored)
            row[metric_name] = total / n_claims if n_claims else None  # the missing claims add 0
        results.append(row)
    return results


def markdown_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str], digits: int = 3) -> str:
    """Render rows as a GitHub Markdown table; floats are rounded, None shows as a dash."""

    def cell(value: Any) -> str:
        if value is None:
            return "-"
        if isinstance(value, float):
            return f"{value:.{digits}f}"
        return str(value)

    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    lines.extend("| " + " | ".join(cell(row.get(column)) for column in columns) + " |" for row in rows)
    return "\n".join(lines)

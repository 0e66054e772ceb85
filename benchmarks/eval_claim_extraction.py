"""Claim extraction on the published release (B3): extracted vs reference claims of each distinct review.

Each review text is split into its sections, each section goes to the `extractor` role through the LLM gateway
with the project's prompt, and the claims pass the project's cleaning rules, exactly as in the `review_claims`
asset. They are matched one to one with the review's reference claims by embedding cosine (all-MiniLM-L6-v2,
threshold MATCH_COSINE, chosen by `--calibrate`), giving precision, recall and F1, claims per review, the
drop reasons, and seconds per review (the paper: 8.2 s/review with Qwen3-4B on one GPU). Reviews are taken in
a fixed order (sha256 of the review id), so `--limit 3` is a prefix of `--limit 20`.

    .venv/bin/python benchmarks/eval_claim_extraction.py [--release PATH] [--limit N] [--lake DIR]
    .venv/bin/python benchmarks/eval_claim_extraction.py --calibrate      # the two similarity thresholds
    PEERIFY_LLM_PROFILE=paper VLLM_BASE_URL=... .venv/bin/python benchmarks/eval_claim_extraction.py   # the paper's

Calls are recorded in the ledger under `--lake` (default: a fresh temporary folder, so every call is made and
timed); with `--lake` kept, a re-run is answered from the ledger.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402

from peerify_dagster.domain import claims as rules  # noqa: E402
from peerify_dagster.domain.extraction_eval import (  # noqa: E402
    Scores,
    balanced_threshold,
    match_claims,
    threshold_for_false_rate,
)
from peerify_dagster.domain.forum_tables import REVIEW_TEXT_FIELDS  # noqa: E402
from peerify_dagster.domain.release import load_release  # noqa: E402

EXTRACT_PROMPT = "extract_claims"
SECTION_FIELDS = (*REVIEW_TEXT_FIELDS, "comment")  # the release's follow-up comments start with "Comment:"
# Cosine at or above which an extracted claim and a reference claim are the same claim (see --calibrate and
# BENCHMARKS.md): the best separation of B1 rewordings from distinct reference claims of one B3 review.
MATCH_COSINE = 0.46
PAPER_SECONDS_PER_REVIEW = 8.2


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--release", type=Path, default=REPO_ROOT.parent / "shared" / "peerify-release")
    parser.add_argument("--limit", type=int, default=20, help="number of distinct reviews (default 20)")
    parser.add_argument("--lake", type=Path, default=None, help="ledger folder to keep (default: temporary)")
    parser.add_argument("--threshold", type=float, default=MATCH_COSINE, help="matching cosine")
    parser.add_argument("--calibrate", action="store_true", help="print the similarity distributions and thresholds")
    parser.add_argument("--json", type=Path, default=None, help="also write the results as JSON here")
    return parser.parse_args(argv)


def reviews_of(b3: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Distinct reviews with their reference claims, in the fixed evaluation order."""
    by_review: dict[str, dict[str, Any]] = {}
    for row in b3:
        review = by_review.setdefault(row["review_id"], {"review_id": row["review_id"], "paper_id": row["paper_id"],
                                                         "review_text": row["review_text"], "reference": []})
        review["reference"].append(row["claim"])
    return sorted(by_review.values(), key=lambda r: hashlib.sha256(r["review_id"].encode()).hexdigest())


def calibrate(release: dict[str, list[dict[str, Any]]], embed) -> dict[str, Any]:
    """Positives: B1 claims and their rewordings (`claim` vs `original_claim`); negatives: pairs of distinct
    reference claims of one B3 review (different points a reviewer made)."""
    pairs = [(row["claim"], row["original_claim"]) for row in release["B1"] if row.get("original_claim")]
    left = embed([a for a, _ in pairs])
    right = embed([b for _, b in pairs])
    positives = (left * right).sum(axis=1).tolist()
    negatives: list[float] = []
    for review in reviews_of(release["B3"]):
        texts = list(dict.fromkeys(review["reference"]))
        if len(texts) > 1:
            vectors = embed(texts)
            similarity = vectors @ vectors.T
            negatives += similarity[np.triu_indices(len(texts), k=1)].tolist()
    match, accuracy = balanced_threshold(positives, negatives)
    near_duplicate = threshold_for_false_rate(negatives, 0.01)
    quantiles = [0.05, 0.25, 0.5, 0.75, 0.95, 0.99]
    return {
        "positive_pairs": len(positives), "negative_pairs": len(negatives),
        "positive_quantiles": dict(zip(quantiles, np.quantile(positives, quantiles).round(3).tolist())),
        "negative_quantiles": dict(zip(quantiles, np.quantile(negatives, quantiles).round(3).tolist())),
        "match_threshold": match, "match_balanced_accuracy": round(accuracy, 3),
        "near_duplicate_threshold_1pct": near_duplicate,
        "positives_merged_at_near_duplicate": round(float((np.asarray(positives) >= near_duplicate).mean()), 3),
        "negatives_merged_at_project_threshold": round(
            float((np.asarray(negatives) >= rules.NEAR_DUPLICATE_COSINE).mean()), 4),
        "positives_merged_at_project_threshold": round(
            float((np.asarray(positives) >= rules.NEAR_DUPLICATE_COSINE).mean()), 3),
    }


def evaluate(reviews: list[dict[str, Any]], gateway, embed, threshold: float) -> dict[str, Any]:
    """Extract, clean and score; returns the summary and one row per review."""
    plans = []
    for review in reviews:
        sections = rules.split_review_text(review["review_text"], SECTION_FIELDS)
        plans.append((review, sections, rules.review_problem(sections, has_scores=False)))
    work = [(review, section) for review, sections, problem in plans if problem is None for section in sections]
    model = gateway.models_for_role("extractor")[0]
    started = time.perf_counter()
    results = gateway.map("extractor", EXTRACT_PROMPT, [{"review_text": rules.section_prompt_text(s)} for _, s in work],
                          role="extractor")
    extraction_seconds = time.perf_counter() - started
    candidates, unusable = [], Counter()
    for (review, section), result in zip(work, results):
        texts = rules.claims_from_answer(result.parsed) if result.parse_ok and result.error is None else None
        if texts is None:
            unusable[review["review_id"]] += 1
            continue
        candidates += [rules.Candidate(review["review_id"], rules.SOURCE_REVIEW, review["review_id"], section.name,
                                       section.text, section.start, text, result.call_id) for text in texts]
    kept, dropped = rules.clean_claims(candidates, embed)
    kept_by_review: dict[str, list[str]] = defaultdict(list)
    for claim in kept:
        kept_by_review[claim.candidate.review_id].append(claim.candidate.text)
    total = Scores(0, 0, 0)
    rows = []
    for review, sections, problem in plans:
        extracted = kept_by_review.get(review["review_id"], [])
        reference = review["reference"]
        matched = []
        if extracted:
            similarity = embed(extracted) @ embed(reference).T
            matched = match_claims(similarity, threshold)
        scores = Scores(len(matched), len(extracted), len(reference))
        total += scores
        rows.append({"review_id": review["review_id"], "sections": len(sections), "problem": problem,
                     "sections_unusable": unusable[review["review_id"]], "extracted": len(extracted),
                     "reference": len(reference), "matched": len(matched), "precision": round(scores.precision, 3),
                     "recall": round(scores.recall, 3)})
    fresh = [r for r in results if not r.cached]
    return {
        "model": model, "reviews": len(reviews), "sections": len(work), "calls": len(fresh),
        "cache_hits": len(results) - len(fresh), "claims_written": len(candidates), "claims_kept": len(kept),
        "reference_claims": total.reference, "matched": total.matched,
        "claims_per_review": round(len(kept) / len(reviews), 2) if reviews else 0.0,
        "reference_per_review": round(total.reference / len(reviews), 2) if reviews else 0.0,
        "precision": round(total.precision, 3), "recall": round(total.recall, 3), "f1": round(total.f1, 3),
        "threshold": threshold, "seconds_per_review": round(extraction_seconds / len(reviews), 2) if reviews else 0.0,
        "tokens_out_per_review": round(sum(r.tokens_out for r in fresh) / len(reviews), 1) if reviews else 0.0,
        "sections_unusable": sum(unusable.values()),
        "drop_reasons": dict(Counter(d.rule for d in dropped).most_common()),
        "reviews_without_claims": sum(1 for row in rows if row["extracted"] == 0),
        "per_review": rows,
    }


def markdown(summary: dict[str, Any]) -> str:
    columns = ["model", "reviews", "sections", "calls", "claims_per_review", "reference_per_review", "precision",
               "recall", "f1", "seconds_per_review", "sections_unusable", "reviews_without_claims"]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns),
             "| " + " | ".join(str(summary[c]) for c in columns) + " |"]
    drops = ", ".join(f"{rule} {count}" for rule, count in summary["drop_reasons"].items()) or "none"
    lines.append(f"\nDropped by the cleaning rules ({summary['claims_written']} written, "
                 f"{summary['claims_kept']} kept): {drops}. Matching cosine {summary['threshold']}; "
                 f"the paper: {PAPER_SECONDS_PER_REVIEW} s/review.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not (args.release / "B3_reviewer_paper.jsonl").is_file():
        print(f"release folder {args.release} has no B3_reviewer_paper.jsonl; pass --release PATH", file=sys.stderr)
        return 2
    release = load_release(args.release)
    from peerify_dagster.resources.embedder import Embedder

    embedder = Embedder()
    if args.calibrate:
        print(json.dumps(calibrate(release, embedder.embed), indent=1))
        return 0
    from peerify_dagster.resources.llm_gateway import LLMGateway

    reviews = reviews_of(release["B3"])[: args.limit]
    with tempfile.TemporaryDirectory(prefix="peerify-eval-") as scratch:
        with LLMGateway(args.lake or Path(scratch), run_id="eval-claim-extraction") as gateway:
            gateway.preflight(["extractor"])
            summary = evaluate(reviews, gateway, embedder.embed, args.threshold)
    print(markdown(summary))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

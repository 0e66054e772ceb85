"""Scoring extracted against reference claims: one-to-one matching, precision / recall / F1, and the threshold
choices, on hand-computed examples; and the release evaluation on three reviews with the local model."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from peerify_dagster.domain.extraction_eval import Scores, balanced_threshold, match_claims, threshold_for_false_rate
from tests.benchmark_scripts import load_benchmark

RELEASE = Path(__file__).resolve().parents[2] / "shared" / "peerify-release"


def test_matching_is_one_to_one_greedy_by_cosine():
    similarity = np.array([[0.9, 0.8, 0.1],
                           [0.85, 0.3, 0.2],
                           [0.2, 0.75, 0.4]])
    # 0.9 takes (0, 0); (1, 0) and (0, 1) are then blocked; 0.75 takes (2, 1); row 1 has nothing free above 0.5.
    assert match_claims(similarity, 0.5) == [(0, 0, 0.9), (2, 1, 0.75)]
    assert match_claims(similarity, 0.95) == []
    assert match_claims(np.zeros((0, 3)), 0.5) == []


def test_scores_add_up_over_reviews():
    total = Scores(2, 4, 5) + Scores(1, 1, 3)
    assert (total.matched, total.extracted, total.reference) == (3, 5, 8)
    assert total.precision == pytest.approx(0.6) and total.recall == pytest.approx(0.375)
    assert total.f1 == pytest.approx(2 * 0.6 * 0.375 / 0.975)
    assert Scores(0, 0, 4).precision == 0.0 and Scores(0, 0, 4).f1 == 0.0


def test_threshold_for_a_false_rate():
    negatives = [0.1] * 90 + [0.5] * 9 + [0.9]
    assert threshold_for_false_rate(negatives, 0.01) == 0.51  # only the 0.9 pair (1%) reaches it
    assert threshold_for_false_rate(negatives, 0.10) == 0.11


def test_balanced_threshold_separates_the_two_sets():
    threshold, accuracy = balanced_threshold([0.8, 0.7, 0.6], [0.2, 0.3, 0.65])
    # 0.60 and 0.66-0.70 all score (3/3 + 2/3) / 2 or (2/3 + 3/3) / 2; ties go to the higher threshold.
    assert threshold == 0.7 and accuracy == pytest.approx((1.0 + 2 / 3) / 2)
    assert balanced_threshold([0.9, 0.8], [0.1, 0.2]) == (0.8, 1.0)


@pytest.mark.skipif(not (RELEASE / "B3_reviewer_paper.jsonl").is_file(),
                    reason=f"published release not found at {RELEASE} (../shared/peerify-release)")
def test_release_evaluation_on_three_reviews_with_the_local_model(tmp_path, monkeypatch):
    eval_claim_extraction = load_benchmark("eval_claim_extraction")
    monkeypatch.delenv("PEERIFY_LLM_PROFILE", raising=False)
    output = tmp_path / "result.json"
    assert eval_claim_extraction.main(["--release", str(RELEASE), "--limit", "3", "--lake", str(tmp_path / "lake"),
                                       "--json", str(output)]) == 0
    summary = json.loads(output.read_text())
    assert summary["model"] == "smollm2-135m-extractor" and summary["reviews"] == 3
    assert summary["calls"] == summary["sections"] > 3  # every section of every review went to the model
    rows = summary["per_review"]
    assert len(rows) == 3 and all(r["reference"] > 0 for r in rows)
    assert sum(r["extracted"] for r in rows) == summary["claims_kept"]
    for key in ("precision", "recall", "f1"):
        assert 0.0 <= summary[key] <= 1.0
    assert summary["matched"] <= min(summary["claims_kept"], summary["reference_claims"])
    assert summary["seconds_per_review"] > 0
    # Every written claim is kept or dropped with a rule.
    assert summary["claims_written"] == summary["claims_kept"] + sum(summary["drop_reasons"].values())
    # A re-run answers from the ledger: no call is made.
    assert eval_claim_extraction.main(["--release", str(RELEASE), "--limit", "3", "--lake", str(tmp_path / "lake"),
                                       "--json", str(output)]) == 0
    again = json.loads(output.read_text())
    assert again["calls"] == 0 and again["cache_hits"] == summary["sections"]
    assert again["per_review"] == rows

"""Scoring extracted claims against reference claims, and choosing the similarity thresholds from data.

Extracted and reference claims of one review are matched one to one: pairs are taken in decreasing cosine
order while both sides are free and the cosine is at least the threshold (greedy matching, which equals the
optimal assignment whenever the matrix has no ties that cross). Precision = matched / extracted, recall =
matched / reference, summed over reviews (micro averages).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


def match_claims(similarity: np.ndarray, threshold: float) -> list[tuple[int, int, float]]:
    """(extracted index, reference index, cosine) of the one-to-one matches at or above `threshold`."""
    if similarity.size == 0:
        return []
    order = np.argsort(-similarity, axis=None, kind="stable")
    used_rows: set[int] = set()
    used_cols: set[int] = set()
    matches = []
    for flat in order:
        row, col = divmod(int(flat), similarity.shape[1])
        score = float(similarity[row, col])
        if score < threshold:
            break
        if row in used_rows or col in used_cols:
            continue
        used_rows.add(row)
        used_cols.add(col)
        matches.append((row, col, score))
    return matches


@dataclass(frozen=True)
class Scores:
    matched: int
    extracted: int
    reference: int

    @property
    def precision(self) -> float:
        return self.matched / self.extracted if self.extracted else 0.0

    @property
    def recall(self) -> float:
        return self.matched / self.reference if self.reference else 0.0

    @property
    def f1(self) -> float:
        total = self.precision + self.recall
        return 2 * self.precision * self.recall / total if total else 0.0

    def __add__(self, other: Scores) -> Scores:
        return Scores(self.matched + other.matched, self.extracted + other.extracted, self.reference + other.reference)


def threshold_for_false_rate(negatives: Sequence[float], rate: float) -> float:
    """The smallest threshold (two decimals) at which at most `rate` of the negative pairs reach it."""
    values = np.asarray(negatives, dtype=float)
    for threshold in np.round(np.arange(0.0, 1.0001, 0.01), 2):
        if (values >= threshold).mean() <= rate:
            return float(threshold)
    return 1.0


def balanced_threshold(positives: Sequence[float], negatives: Sequence[float]) -> tuple[float, float]:
    """(threshold, balanced accuracy): the two-decimal threshold that best separates positive pairs (at or above)
    from negative pairs (below), by the mean of the two rates; ties go to the higher threshold."""
    pos = np.asarray(positives, dtype=float)
    neg = np.asarray(negatives, dtype=float)
    best = (0.0, -1.0)
    for threshold in np.round(np.arange(0.0, 1.0001, 0.01), 2):
        accuracy = ((pos >= threshold).mean() + (neg < threshold).mean()) / 2
        if accuracy >= best[1]:
            best = (float(threshold), float(accuracy))
    return best

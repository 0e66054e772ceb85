"""Scores over the four verification labels: confusion matrices, accuracy, per-class and macro F1, Cohen's kappa.

One implementation for every place that compares labels (verifiers against gold, labeller A against labeller B,
annotators against each other). A missing prediction (None: the answer did not parse, or no call was made for a
reason the caller counts as a miss) is an error, never dropped: it lands in the confusion matrix's `unparsed`
column and lowers accuracy and recall. Macro-F1 always averages over the fixed four classes, so a class never
predicted scores 0 instead of disappearing from the average.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from peerify_dagster.domain.labels import LABELS

UNPARSED = "unparsed"


def _paired(gold: Sequence[str], predicted: Sequence[str | None]) -> list[tuple[str, str | None]]:
    if len(gold) != len(predicted):
        raise ValueError(f"{len(gold)} gold labels but {len(predicted)} predictions")
    unknown = sorted({g for g in gold if g not in LABELS})
    if unknown:
        raise ValueError(f"gold labels outside the vocabulary {LABELS}: {unknown}")
    wrong = sorted({p for p in predicted if p is not None and p not in LABELS})
    if wrong:
        raise ValueError(f"predictions outside the vocabulary (normalise them first, or pass None): {wrong}")
    return list(zip(gold, predicted))


def confusion_matrix(gold: Sequence[str], predicted: Sequence[str | None]) -> dict[str, dict[str, int]]:
    """gold label -> predicted label (the four labels and `unparsed`) -> count; every cell present."""
    matrix = {g: {p: 0 for p in (*LABELS, UNPARSED)} for g in LABELS}
    for g, p in _paired(gold, predicted):
        matrix[g][p if p is not None else UNPARSED] += 1
    return matrix


def accuracy(gold: Sequence[str], predicted: Sequence[str | None]) -> float | None:
    """Share of items predicted exactly right; None for an empty set."""
    pairs = _paired(gold, predicted)
    return sum(g == p for g, p in pairs) / len(pairs) if pairs else None


@dataclass(frozen=True)
class ClassScore:
    label: str
    precision: float
    recall: float
    f1: float
    support: int  # gold items of this class
    predicted: int  # items predicted as this class


def per_class(gold: Sequence[str], predicted: Sequence[str | None]) -> list[ClassScore]:
    """Precision, recall and F1 for each of the four labels (0 where undefined: no prediction or no gold item)."""
    pairs = _paired(gold, predicted)
    scores = []
    for label in LABELS:
        hits = sum(g == label and p == label for g, p in pairs)
        support = sum(g == label for g, _ in pairs)
        guessed = sum(p == label for _, p in pairs)
        precision = hits / guessed if guessed else 0.0
        recall = hits / support if support else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        scores.append(ClassScore(label, precision, recall, f1, support, guessed))
    return scores


def macro_f1(gold: Sequence[str], predicted: Sequence[str | None]) -> float | None:
    """Unweighted mean F1 over the four labels; None for an empty set."""
    if not gold:
        return None
    return sum(score.f1 for score in per_class(gold, predicted)) / len(LABELS)


def cohen_kappa(first: Sequence[str], second: Sequence[str]) -> float | None:
    """Cohen's kappa of two raters over the same items (both sides labels). None when it is undefined: no items,
    or chance agreement is 1 (both raters used one and the same label throughout), where kappa is 0/0."""
    if any(label is None for label in second):
        raise ValueError("kappa needs a label from both raters for every item: leave out the unparsed ones")
    pairs = _paired(first, second)
    if not pairs:
        return None
    n = len(pairs)
    observed = sum(a == b for a, b in pairs) / n
    expected = sum((sum(a == label for a, _ in pairs) / n) * (sum(b == label for _, b in pairs) / n)
                   for label in LABELS)
    if expected == 1.0:
        return None
    return (observed - expected) / (1.0 - expected)

"""Scores over the four verification labels: confusion matrices, accuracy, per-class and macro F1, Cohen's kappa.

One implementation for every place that compares labels (verifiers against gold, labeller A against labeller B,
annotators against each other). A missing prediction (None: the answer did not parse, or no call was made for a
reason the caller counts as a miss) is an error, never dropped: it lands in the confusion matrix's `unparsed`
column and lowers accuracy and recall. Macro-F1 always averages over the fixed four classes, so a class never
predicted scores 0 instead of disappearing from the average.

Numbers that cannot mislead: beside a score goes the majority-class baseline of the same items (always answering
their most frequent gold label), and a rater (verifier or labeller) who gives one label for ONE_LABEL_PERCENT or
more of its answers is named (`dominant_label`), since its accuracy or agreement then mostly reflects how common
that label is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from peerify_dagster.domain.labels import LABELS

UNPARSED = "unparsed"
ONE_LABEL_PERCENT = 90  # one label making up this share of a rater's answers, or more, earns a warning


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


@dataclass(frozen=True)
class MajorityBaseline:
    """Always answering the items' most frequent gold label (ties: the first in LABELS order)."""

    label: str
    accuracy: float
    macro_f1: float


def majority_baseline(gold: Sequence[str]) -> MajorityBaseline | None:
    """The majority-class baseline of these gold labels; None for an empty set."""
    if not gold:
        return None
    label = max(LABELS, key=lambda candidate: sum(g == candidate for g in gold))
    always = [label] * len(gold)
    return MajorityBaseline(label, accuracy(gold, always), macro_f1(gold, always))


@dataclass(frozen=True)
class DominantLabel:
    """One label making up ONE_LABEL_PERCENT or more of a rater's answers."""

    label: str
    count: int  # answers with this label
    answered: int  # answers with any of the four labels (no usable label is no answer)

    @property
    def share(self) -> str:
        return f"{self.count / self.answered:.0%}"


def dominant_label(counts: Mapping[str, int]) -> DominantLabel | None:
    """The label that makes up ONE_LABEL_PERCENT or more of the answers (`counts`: label -> answers; keys other than
    the four labels, such as `unparsed`, are not answers), or None. Compared in integers: exactly 90% warns."""
    answered = sum(counts.get(label, 0) for label in LABELS)
    if not answered:
        return None
    label = max(LABELS, key=lambda candidate: counts.get(candidate, 0))
    count = counts.get(label, 0)
    return DominantLabel(label, count, answered) if count * 100 >= ONE_LABEL_PERCENT * answered else None


def distribution_text(counts: Mapping[str, int]) -> str:
    """Answers per label in one cell, zero counts left out: 'Supported 46, unparsed 1' ('none' without answers)."""
    shown = [f"{label} {counts[label]}" for label in (*LABELS, UNPARSED) if counts.get(label)]
    return ", ".join(shown) or "none"

"""Label scores against tables computed by hand."""

from __future__ import annotations

import pytest

from peerify_dagster.domain.label_metrics import (
    UNPARSED,
    accuracy,
    cohen_kappa,
    confusion_matrix,
    distribution_text,
    dominant_label,
    macro_f1,
    majority_baseline,
    per_class,
)

S, P, N, D = "Supported", "Partially Supported", "Not Supported", "Not Determined"


def test_parse_failures_count_as_errors_and_land_in_their_own_column():
    gold = [S, S, S, N, N, D]
    predicted = [S, S, None, N, S, None]
    assert accuracy(gold, predicted) == pytest.approx(3 / 6)  # not 3/4: the two unparsed answers are misses
    matrix = confusion_matrix(gold, predicted)
    assert matrix[S] == {S: 2, P: 0, N: 0, D: 0, UNPARSED: 1}
    assert matrix[N] == {S: 1, P: 0, N: 1, D: 0, UNPARSED: 0}
    assert matrix[D][UNPARSED] == 1
    assert sum(sum(row.values()) for row in matrix.values()) == len(gold)


def test_macro_f1_averages_over_all_four_classes_including_one_never_predicted():
    gold = [S, S, S, N, N, D]
    predicted = [S, S, None, N, S, None]
    by_label = {score.label: score for score in per_class(gold, predicted)}
    # Supported: 2 hits of 3 predicted, 3 gold -> P 2/3, R 2/3, F1 2/3. Not Supported: P 1/1, R 1/2, F1 2/3.
    assert by_label[S].precision == pytest.approx(2 / 3) and by_label[S].recall == pytest.approx(2 / 3)
    assert by_label[N].f1 == pytest.approx(2 / 3)
    assert by_label[D].f1 == 0.0 and by_label[D].support == 1 and by_label[D].predicted == 0
    assert by_label[P].f1 == 0.0 and by_label[P].support == 0
    assert macro_f1(gold, predicted) == pytest.approx((2 / 3 + 0 + 2 / 3 + 0) / 4)


def test_single_class_slice():
    gold = [S, S, S, S]
    assert accuracy(gold, [S, S, S, P]) == pytest.approx(0.75)
    # Supported: P 3/3, R 3/4 -> F1 6/7; the other three classes 0.
    assert macro_f1(gold, [S, S, S, P]) == pytest.approx((6 / 7) / 4)


def test_cohen_kappa_against_a_hand_computed_table():
    # 10 items: both S on 4, both N on 3, A=S/B=N on 2, A=N/B=S on 1. p_o = 0.7;
    # A: S 6, N 4; B: S 5, N 5 -> p_e = 0.6*0.5 + 0.4*0.5 = 0.5; kappa = (0.7-0.5)/(1-0.5) = 0.4.
    a = [S] * 4 + [N] * 3 + [S] * 2 + [N]
    b = [S] * 4 + [N] * 3 + [N] * 2 + [S]
    assert cohen_kappa(a, b) == pytest.approx(0.4)
    assert cohen_kappa(a, a) == pytest.approx(1.0)


def test_kappa_is_undefined_when_both_raters_use_one_label_throughout():
    assert cohen_kappa([S, S, S], [S, S, S]) is None
    assert cohen_kappa([], []) is None


def test_inputs_outside_the_vocabulary_are_refused_not_scored():
    with pytest.raises(ValueError, match="outside the vocabulary"):
        accuracy([S], ["Contradicted"])
    with pytest.raises(ValueError, match="gold labels outside"):
        accuracy(["supported"], [S])
    with pytest.raises(ValueError, match="2 gold labels but 1"):
        accuracy([S, S], [S])
    with pytest.raises(ValueError, match="both raters"):
        cohen_kappa([S], [None])


def test_majority_baseline_of_a_one_class_and_a_two_class_set():
    one = majority_baseline([S, S, S])
    # always Supported: every claim right; F1 1 for Supported, 0 for the three absent labels
    assert (one.label, one.accuracy, one.macro_f1) == (S, 1.0, pytest.approx(1 / 4))
    two = majority_baseline([N, S, N, N])
    # always Not Supported: 3 of 4 right; its F1 = 2 * 3/4 * 1 / (3/4 + 1) = 6/7, Supported's 0
    assert (two.label, two.accuracy, two.macro_f1) == (N, 0.75, pytest.approx((6 / 7) / 4))
    tie = majority_baseline([N, S])  # a tie goes to the first label in the vocabulary's order
    assert (tie.label, tie.accuracy) == (S, 0.5)
    assert majority_baseline([]) is None


def test_one_label_warns_from_exactly_ninety_percent_of_the_answers():
    ninety = dominant_label({S: 9, N: 1})
    assert (ninety.label, ninety.count, ninety.answered, ninety.share) == (S, 9, 10, "90%")
    assert dominant_label({S: 89, N: 11}) is None  # 89%: no warning
    assert dominant_label({S: 8, P: 1}) is None  # 88.9%
    # no usable label is no answer: 9 Supported of 9 answers, whatever the parse failures
    assert dominant_label({S: 9, UNPARSED: 5}).share == "100%"
    assert dominant_label({UNPARSED: 4}) is None and dominant_label({}) is None
    assert distribution_text({S: 46, P: 0, N: 1, UNPARSED: 0}) == "Supported 46, Not Supported 1"
    assert distribution_text({UNPARSED: 0}) == "none"

"""The human audit's statistics and sample allocation, against tables computed by hand."""

from __future__ import annotations

import pytest

from peerify_dagster.domain import audit
from peerify_dagster.domain.audit import AuditItem, AuditSampleError
from peerify_dagster.domain.labels import NOT_DETERMINED as D
from peerify_dagster.domain.labels import NOT_SUPPORTED as N
from peerify_dagster.domain.labels import PARTIALLY_SUPPORTED as P
from peerify_dagster.domain.labels import SUPPORTED as S

# (claim type, annotator 1, annotator 2, consensus decision, automated label)
TABLE = [
    ("factual", S, S, None, S),  # agreed, exact
    ("factual", S, S, None, P),  # agreed, within one
    ("factual", P, P, None, P),  # agreed, exact
    ("factual", N, N, None, S),  # agreed, polarity flip
    ("factual", D, D, None, D),  # agreed, exact
    ("subjective", D, D, None, N),  # agreed; Not Determined is within one step of itself only
    ("subjective", S, N, P, N),  # settled by the consensus decision: P vs N, within one
    ("subjective", S, P, None, S),  # disagree, not settled: pending
    ("subjective", S, None, None, S),  # one annotator so far: pending
    ("subjective", N, N, None, None),  # agreed, but no automated label: not compared
]
ITEMS = [AuditItem(f"c{i}:thread", *row) for i, row in enumerate(TABLE)]


def test_ordinal_rules():
    assert audit.within_one_step(S, P) and audit.within_one_step(P, N) and audit.within_one_step(D, D)
    assert not audit.within_one_step(S, N) and not audit.within_one_step(D, P) and not audit.within_one_step(S, D)
    assert audit.polarity_flip(S, N) and audit.polarity_flip(N, S)
    assert not audit.polarity_flip(S, S) and not audit.polarity_flip(S, P) and not audit.polarity_flip(D, N)


def test_consensus_rule():
    assert audit.consensus(ITEMS[0]) == audit.Consensus(S, audit.CONSENSUS_AGREED)
    assert audit.consensus(ITEMS[6]) == audit.Consensus(P, audit.CONSENSUS_DECIDED)
    assert audit.consensus(ITEMS[7]) == audit.Consensus(None, audit.CONSENSUS_PENDING)
    assert audit.consensus(ITEMS[8]) == audit.Consensus(None, audit.CONSENSUS_PENDING)
    # a consensus decision left over on an item the annotators now agree on: their agreement wins
    assert audit.consensus(AuditItem("x:thread", None, S, S, N, S)).label == S
    assert [audit.needs_consensus(item) for item in ITEMS] == [False] * 7 + [True, False, False]


def test_scores_against_hand_computed_tables():
    scores = audit.score(ITEMS)
    # annotators: 9 items labelled by both, 7 agree; marginals 1: S4 P1 N2 D2, 2: S2 P2 N3 D2 -> pe = 20/81
    assert (scores.items, scores.both_labelled) == (10, 9)
    assert scores.annotator_agreement == pytest.approx(7 / 9)
    assert scores.annotator_kappa == pytest.approx(43 / 61)
    assert (scores.consensus_agreed, scores.consensus_decided, scores.consensus_pending) == (7, 1, 2)
    # consensus vs automated over 7 items: (S,S) (S,P) (P,P) (N,S) (D,D) (D,N) (P,N)
    assert scores.compared == 7
    assert scores.exact == pytest.approx(3 / 7)
    assert scores.within_one == pytest.approx(5 / 7)
    assert scores.polarity_flips == pytest.approx(1 / 7)
    assert scores.automated_kappa == pytest.approx(9 / 37)  # pe = (2*2 + 2*2 + 1*2 + 2*1) / 49
    nonzero = {(h, a): n for h, row in scores.confusion.items() for a, n in row.items() if n}
    assert nonzero == {(S, S): 1, (S, P): 1, (P, P): 1, (P, N): 1, (N, S): 1, (D, D): 1, (D, N): 1}


def test_scores_per_claim_type():
    groups = audit.score_by_claim_type(ITEMS)
    assert set(groups) == {"all", "factual", "subjective"}
    factual, subjective = groups["factual"], groups["subjective"]
    assert (factual.compared, factual.exact, factual.within_one, factual.polarity_flips) == (5, 3 / 5, 4 / 5, 1 / 5)
    assert (subjective.compared, subjective.exact, subjective.within_one, subjective.polarity_flips) == (2, 0, 1 / 2, 0)
    assert subjective.consensus_pending == 2


def test_no_decisions_scores_zero_and_says_so():
    blank = [AuditItem(f"c{i}:thread", "factual", None, None, None, S) for i in range(3)]
    scores = audit.score(blank)
    assert (scores.both_labelled, scores.compared, scores.consensus_pending) == (0, 0, 3)
    assert scores.exact is None and scores.annotator_kappa is None
    report = audit.report_markdown("v", {"all": scores}, sample_size=3, decisions=0)
    assert "no decisions yet" in report and "| paper |" in report and "90.3%" in report
    assert "No audit sample" in audit.report_markdown("v", {}, 0, 0)


def test_report_puts_the_paper_beside_the_venue():
    report = audit.report_markdown("v", audit.score_by_claim_type(ITEMS), sample_size=10, decisions=20)
    assert "| all | 10 | 9 | 77.8% | 0.70 |" in report
    assert "| paper |" in report and "97.0%" in report and "1.0%" in report and "0.87" in report
    assert "| Supported | 1 | 1 | 0 | 0 |" in report  # the confusion matrix's first row


@pytest.mark.parametrize("sizes, n, expected", [
    ({S: 50, P: 30, N: 15, D: 5}, 10, {S: 5, P: 3, N: 1, D: 1}),  # D's share 0.5 is raised to the minimum of one
    ({S: 97, P: 1, N: 1, D: 1}, 4, {S: 1, P: 1, N: 1, D: 1}),  # the minimums take seats back from S
    ({S: 7, P: 7, N: 6}, 10, {S: 3, P: 4, N: 3}),  # largest remainder; the tie goes to the first name
    ({S: 3, P: 2, D: 0}, 10, {S: 3, P: 2}),  # n covers the population: all of it; empty strata absent
])
def test_allocation(sizes, n, expected):
    assert audit.allocate(sizes, n) == expected


def test_allocation_refusals():
    with pytest.raises(AuditSampleError, match="one item of each of the 3"):
        audit.allocate({S: 10, P: 10, N: 10}, 2)
    with pytest.raises(AuditSampleError, match="at least 1"):
        audit.allocate({S: 10}, 0)


def test_draw_is_seeded_stratified_and_order_free():
    population = [{"item_id": f"c{i}:thread", "label": label}
                  for i, label in enumerate([S] * 40 + [P] * 30 + [N] * 20 + [D] * 10)]
    first = audit.draw_stratified(population, 20, seed=7)
    again = audit.draw_stratified(list(reversed(population)), 20, seed=7)
    other = audit.draw_stratified(population, 20, seed=8)
    ids = [row["item_id"] for row in first]
    assert ids == [row["item_id"] for row in again]  # same seed, any listing order: the same items
    assert set(ids) != {row["item_id"] for row in other}
    assert [row["stratum"] for row in first] == [S] * 8 + [P] * 6 + [N] * 4 + [D] * 2
    assert [row["draw_order"] for row in first] == list(range(20))
    with pytest.raises(AuditSampleError, match="appears twice"):
        audit.draw_stratified(population + population[:1], 5, seed=7)

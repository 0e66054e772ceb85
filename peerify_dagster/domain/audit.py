"""The human audit (the paper's Human-Verified slice): drawing the audit sample, and scoring two annotators against
each other and their consensus against the automated canonical labels.

Sampling. The population is the venue's RebuttalSourced items (thread-source canonical labels that are not
pending), stratified by that label. Allocation is proportional with the largest-remainder method, and every
non-empty stratum gets at least one item (so a rare label is never left out); the seats a minimum takes are given
back by the strata whose allocation exceeds their exact share the most. Within a stratum the items with the smallest
sha256(seed, item id) are drawn, so the same seed and population always give the same items, and the draw does not
depend on the order the items were listed in.

Ordinal scale. Supported > Partially Supported > Not Supported are ordinal (positions 0, 1, 2); two labels are
within one step when both are on that scale and at most one position apart. Not Determined is off the scale: it is
within one step of itself only. A hard polarity flip is Supported against Not Supported.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from peerify_dagster.domain.label_metrics import cohen_kappa, confusion_matrix
from peerify_dagster.domain.labels import LABELS, NOT_SUPPORTED, PARTIALLY_SUPPORTED, SUPPORTED

ORDINAL = {SUPPORTED: 0, PARTIALLY_SUPPORTED: 1, NOT_SUPPORTED: 2}
POLARITY_FLIP = frozenset({SUPPORTED, NOT_SUPPORTED})
# The paper's audit of its automated labels against the human consensus (Human-Verified slice).
PAPER_AUDIT = {"exact": 0.903, "kappa": 0.87, "within_one": 0.970, "polarity_flips": 0.010}

CONSENSUS_AGREED = "agreement"  # both annotators gave the same label
CONSENSUS_DECIDED = "consensus_decision"  # they disagreed and a consensus decision settled it
CONSENSUS_PENDING = "pending"  # not both have labelled yet, or they disagree and nobody has settled it


class AuditSampleError(ValueError):
    """The sample cannot be drawn as asked; the message says why."""


def within_one_step(first: str, second: str) -> bool:
    if first == second:
        return True
    return first in ORDINAL and second in ORDINAL and abs(ORDINAL[first] - ORDINAL[second]) <= 1


def polarity_flip(first: str, second: str) -> bool:
    return first != second and {first, second} <= POLARITY_FLIP


# -- the sample -------------------------------------------------------------------------------------------------------
def allocate(stratum_sizes: Mapping[str, int], n: int) -> dict[str, int]:
    """How many items to draw from each non-empty stratum: proportional to its size (largest remainder), at least one
    each. All of every stratum when n covers the population."""
    sizes = {stratum: size for stratum, size in stratum_sizes.items() if size > 0}
    total = sum(sizes.values())
    if n < 1:
        raise AuditSampleError(f"the sample size must be at least 1, got {n}")
    if n >= total:
        return dict(sizes)
    if n < len(sizes):
        raise AuditSampleError(f"a sample of {n} cannot hold one item of each of the {len(sizes)} non-empty label "
                               f"strata {sorted(sizes)}; ask for at least {len(sizes)}")
    share = {stratum: n * size / total for stratum, size in sizes.items()}
    seats = {stratum: max(1, math.floor(share[stratum])) for stratum in sizes}
    order = sorted(sizes)  # ties are broken by stratum name, so the allocation never depends on dict order
    while sum(seats.values()) > n:  # the minimum of one took seats: the most over-served stratum gives one back
        giver = max((s for s in order if seats[s] > 1), key=lambda s: seats[s] - share[s])
        seats[giver] -= 1
    while sum(seats.values()) < n:
        taker = max((s for s in order if seats[s] < sizes[s]), key=lambda s: share[s] - seats[s])
        seats[taker] += 1
    return seats


def draw_key(seed: int, item_id: str) -> str:
    return hashlib.sha256(f"{seed}\n{item_id}".encode("utf-8")).hexdigest()


def draw_stratified(items: Sequence[Mapping], n: int, seed: int, stratum_key: str = "label") -> list[dict]:
    """The drawn items (each a copy with `stratum` and `draw_order`), ordered by stratum in LABELS order, then by
    draw key. `items` need `item_id` and the stratum column; duplicate item ids are refused."""
    seen: set[str] = set()
    for item in items:
        if item["item_id"] in seen:
            raise AuditSampleError(f"item {item['item_id']!r} appears twice in the population")
        seen.add(item["item_id"])
    strata: dict[str, list[Mapping]] = {}
    for item in items:
        strata.setdefault(item[stratum_key], []).append(item)
    seats = allocate({label: len(members) for label, members in strata.items()}, n)
    rank = {label: position for position, label in enumerate(LABELS)}
    drawn = []
    for label in sorted(seats, key=lambda label: (rank.get(label, len(rank)), label)):
        members = sorted(strata[label], key=lambda item: draw_key(seed, item["item_id"]))
        drawn += [{**item, "stratum": label} for item in members[:seats[label]]]
    return [{**item, "draw_order": position} for position, item in enumerate(drawn)]


def sample_version(venue: str, seed: int, item_ids: Iterable[str]) -> str:
    """sha256[:16] of the venue, the seed and the sorted item ids: the version audit decisions answer."""
    content = "\n".join([venue, str(seed), *sorted(item_ids)])
    return hashlib.sha256(content.encode("utf-8")).hexdigest()[:16]


# -- the two annotators and their consensus ---------------------------------------------------------------------------
def audit_annotators(annotators_in_ledger_order: Iterable[str]) -> list[str]:
    """The audit's two annotators: the first two distinct names to record an audit decision."""
    found: list[str] = []
    for name in annotators_in_ledger_order:
        if name not in found:
            found.append(name)
    return found[:2]


@dataclass(frozen=True)
class AuditItem:
    item_id: str
    claim_type: str | None
    label_1: str | None  # the first annotator's current label
    label_2: str | None
    consensus_decision: str | None  # the current consensus decision's label, if any
    automated: str | None  # the canonical label


@dataclass(frozen=True)
class Consensus:
    label: str | None
    how: str  # CONSENSUS_AGREED | CONSENSUS_DECIDED | CONSENSUS_PENDING


def consensus(item: AuditItem) -> Consensus:
    """Agreement wins, else the consensus decision, else pending (never guessed). A consensus decision recorded for
    an item the annotators now agree on is not used: their agreement is the consensus."""
    if item.label_1 is not None and item.label_1 == item.label_2:
        return Consensus(item.label_1, CONSENSUS_AGREED)
    if item.label_1 is not None and item.label_2 is not None and item.consensus_decision is not None:
        return Consensus(item.consensus_decision, CONSENSUS_DECIDED)
    return Consensus(None, CONSENSUS_PENDING)


def needs_consensus(item: AuditItem) -> bool:
    return item.label_1 is not None and item.label_2 is not None and item.label_1 != item.label_2 \
        and item.consensus_decision is None


@dataclass
class AuditScores:
    """Inter-annotator agreement over items both annotators labelled; automated-vs-consensus scores over items with
    a consensus and an automated label."""

    items: int = 0
    both_labelled: int = 0
    annotator_agreement: float | None = None
    annotator_kappa: float | None = None
    consensus_agreed: int = 0
    consensus_decided: int = 0
    consensus_pending: int = 0
    compared: int = 0  # items with a consensus and an automated label
    exact: float | None = None
    within_one: float | None = None
    polarity_flips: float | None = None
    automated_kappa: float | None = None
    confusion: dict[str, dict[str, int]] = field(default_factory=dict)  # human consensus -> automated label -> n

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def score(items: Sequence[AuditItem]) -> AuditScores:
    scores = AuditScores(items=len(items))
    both = [(i.label_1, i.label_2) for i in items if i.label_1 is not None and i.label_2 is not None]
    scores.both_labelled = len(both)
    if both:
        scores.annotator_agreement = sum(a == b for a, b in both) / len(both)
        scores.annotator_kappa = cohen_kappa([a for a, _ in both], [b for _, b in both])
    agreed = [consensus(item) for item in items]
    scores.consensus_agreed = sum(c.how == CONSENSUS_AGREED for c in agreed)
    scores.consensus_decided = sum(c.how == CONSENSUS_DECIDED for c in agreed)
    scores.consensus_pending = sum(c.how == CONSENSUS_PENDING for c in agreed)
    pairs = [(c.label, item.automated) for c, item in zip(agreed, items)
             if c.label is not None and item.automated is not None]
    scores.compared = len(pairs)
    scores.confusion = confusion_matrix([h for h, _ in pairs], [a for _, a in pairs])
    if pairs:
        scores.exact = sum(h == a for h, a in pairs) / len(pairs)
        scores.within_one = sum(within_one_step(h, a) for h, a in pairs) / len(pairs)
        scores.polarity_flips = sum(polarity_flip(h, a) for h, a in pairs) / len(pairs)
        scores.automated_kappa = cohen_kappa([h for h, _ in pairs], [a for _, a in pairs])
    return scores


def score_by_claim_type(items: Sequence[AuditItem]) -> dict[str, AuditScores]:
    """`score` over all items (key "all") and per claim type (an item without one under "unknown")."""
    groups: dict[str, list[AuditItem]] = {"all": list(items)}
    for item in items:
        groups.setdefault(item.claim_type or "unknown", []).append(item)
    return {group: score(members) for group, members in groups.items()}


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def _number(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def report_markdown(venue: str, scores: Mapping[str, AuditScores], sample_size: int, decisions: int) -> str:
    """The audit's numbers per claim-type group beside the paper's, and the counts behind them."""
    if not sample_size:
        return f"No audit sample for {venue}: draw one with `peerify audit sample --venue {venue} --n 300`."
    lines = []
    if not decisions:
        lines.append(f"The audit sample of {venue} ({sample_size} items) has no decisions yet: every count is zero.\n")
    lines += ["| group | items | both labelled | annotator agreement | annotator kappa | consensus (agreed / decided "
              "/ pending) | compared | exact | kappa | within one step | polarity flips |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for group, s in scores.items():
        lines.append(
            f"| {group} | {s.items} | {s.both_labelled} | {_percent(s.annotator_agreement)} | "
            f"{_number(s.annotator_kappa)} | {s.consensus_agreed} / {s.consensus_decided} / {s.consensus_pending} | "
            f"{s.compared} | {_percent(s.exact)} | {_number(s.automated_kappa)} | {_percent(s.within_one)} | "
            f"{_percent(s.polarity_flips)} |")
    lines.append(f"| paper | | | | | | | {_percent(PAPER_AUDIT['exact'])} | {_number(PAPER_AUDIT['kappa'])} | "
                 f"{_percent(PAPER_AUDIT['within_one'])} | {_percent(PAPER_AUDIT['polarity_flips'])} |")
    overall = scores.get("all")
    if overall and overall.compared:
        columns = list(LABELS)  # `compared` items all have an automated label: the unparsed column is empty
        lines += ["", "Human consensus (rows) vs automated canonical label (columns):", "",
                  "| consensus | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
        lines += [f"| {human} | " + " | ".join(str(row[c]) for c in columns) + " |"
                  for human, row in overall.confusion.items()]
    return "\n".join(lines)

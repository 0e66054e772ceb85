"""The six benchmark slices: which claims each holds and the gold label it carries, with where that label came from.

- PaperSourced: the PaperSourced claims (`paper_claims`), Supported by construction, gold = the paragraph's chunks.
- RebuttalSourced / LLMJudged: the canonical labels of source `thread` / `manuscript`; `pending` (no human decision
  yet) and `unlabelled` (no source material) items are left out and counted, never guessed.
- HighAgreement: claims in both RebuttalSourced and LLMJudged with the same label.
- VerifiableOnly: the factual claims (`claim_types`) of a base slice, LLMJudged unless the venue says otherwise.
- HumanVerified: the human audit's consensus labels (items without consensus left out and counted).

Every slice has the same columns (SLICE_COLUMNS), so what reads one reads them all. Pure logic on polars frames; the
venue's `slices:` options (size minimums, label-share bound, VerifiableOnly's base) are parsed here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from peerify_dagster.domain.labels import LABELS
from peerify_dagster.domain.options import checked_options

PAPER_SOURCED, REBUTTAL_SOURCED, LLM_JUDGED = "PaperSourced", "RebuttalSourced", "LLMJudged"
HIGH_AGREEMENT, VERIFIABLE_ONLY, HUMAN_VERIFIED = "HighAgreement", "VerifiableOnly", "HumanVerified"
SLICES = (PAPER_SOURCED, REBUTTAL_SOURCED, LLM_JUDGED, HIGH_AGREEMENT, VERIFIABLE_ONLY, HUMAN_VERIFIED)
# The slices VerifiableOnly may filter, by the name used in venues.yaml.
VERIFIABLE_BASES = {"rebuttal_sourced": REBUTTAL_SOURCED, "llm_judged": LLM_JUDGED, "high_agreement": HIGH_AGREEMENT}
FACTUAL = "factual"
# canonical_labels sources and the provenances that carry no label
THREAD, MANUSCRIPT = "thread", "manuscript"
UNSETTLED_PROVENANCES = ("pending", "unlabelled")

_TEXT = pl.String
SLICE_SCHEMA: dict[str, pl.DataType] = {
    "venue": _TEXT, "slice": _TEXT, "claim_id": _TEXT, "paper_id": _TEXT, "review_id": _TEXT, "claim_text": _TEXT,
    "claim_type": _TEXT, "gold_label": _TEXT, "gold_source": _TEXT, "gold_provenance": _TEXT,
    "gold_chunk_ids": pl.List(_TEXT), "gold_call_ids": pl.List(_TEXT), "gold_decision_ids": pl.List(_TEXT),
}
SLICE_COLUMNS = tuple(SLICE_SCHEMA)


class SliceConfigError(ValueError):
    """A `slices:` option that cannot be used; the message names the option."""


def _default_min_size() -> dict[str, int]:
    # A release needs the paper-grounded and both canonical-label slices; HighAgreement and VerifiableOnly may be
    # empty on a small venue whose humans have not arbitrated yet, HumanVerified exists only after an audit.
    return {PAPER_SOURCED: 1, REBUTTAL_SOURCED: 1, LLM_JUDGED: 1, HIGH_AGREEMENT: 0, VERIFIABLE_ONLY: 0,
            HUMAN_VERIFIED: 0}


@dataclass(frozen=True)
class SliceConfig:
    verifiable_only_base: str = "llm_judged"  # a key of VERIFIABLE_BASES
    min_size: dict[str, int] = field(default_factory=_default_min_size)  # slice -> fewest rows a release accepts
    max_label_share: float = 0.95  # no label may hold more of a review-claim slice than this ...
    distribution_min_items: int = 50  # ... once the slice has this many rows (a small slice's shares say little)

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any] | None) -> SliceConfig:
        options = checked_options(cls, raw, SliceConfigError)
        base = options.get("verifiable_only_base", cls.verifiable_only_base)
        if base not in VERIFIABLE_BASES:
            raise SliceConfigError(f"verifiable_only_base must be one of {list(VERIFIABLE_BASES)}, got {base!r}")
        sizes = options.get("min_size") or {}
        if not isinstance(sizes, Mapping):
            raise SliceConfigError(f"min_size must map slice names to integers, got {sizes!r}")
        for name, value in sizes.items():
            if name not in SLICES:
                raise SliceConfigError(f"min_size: unknown slice {name!r}; slices: {list(SLICES)}")
            if not _is_count(value):
                raise SliceConfigError(f"min_size.{name} must be a non-negative integer, got {value!r}")
        share = options.get("max_label_share", cls.max_label_share)
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share <= 1:
            raise SliceConfigError(f"max_label_share must be a number in (0, 1], got {share!r}")
        items = options.get("distribution_min_items", cls.distribution_min_items)
        if not _is_count(items):
            raise SliceConfigError(f"distribution_min_items must be a non-negative integer, got {items!r}")
        return cls(verifiable_only_base=base, min_size={**_default_min_size(), **sizes},
                   max_label_share=float(share), distribution_min_items=items)


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


@dataclass(frozen=True)
class Slices:
    frame: pl.DataFrame  # SLICE_SCHEMA, every slice's rows
    excluded: dict[str, dict[str, int]]  # slice -> reason -> claims left out


def _empty_list() -> pl.Expr:
    return pl.lit([], dtype=pl.List(_TEXT))


def _paper_sourced(venue: str, paper_claims: pl.DataFrame) -> pl.DataFrame:
    return paper_claims.select(
        pl.lit(venue).alias("venue"), pl.lit(PAPER_SOURCED).alias("slice"), "claim_id", "paper_id",
        pl.lit(None, _TEXT).alias("review_id"), "claim_text", pl.lit(None, _TEXT).alias("claim_type"),
        pl.col("label").alias("gold_label"), pl.lit("paper").alias("gold_source"),
        pl.lit("paper_construction").alias("gold_provenance"), "gold_chunk_ids",
        pl.concat_list(pl.col("claim_call_id"), pl.col("rephrase_call_id")).list.drop_nulls().alias("gold_call_ids"),
        _empty_list().alias("gold_decision_ids"),
    )


def _canonical_slice(venue: str, name: str, source: str, canonical: pl.DataFrame,
                     claims: pl.DataFrame) -> tuple[pl.DataFrame, dict[str, int]]:
    rows = canonical.filter(pl.col("source") == source)
    unsettled = rows.filter(pl.col("provenance").is_in(UNSETTLED_PROVENANCES) | pl.col("label").is_null())
    excluded = dict(unsettled.group_by("provenance").len().iter_rows())
    frame = rows.join(unsettled.select("claim_id"), on="claim_id", how="anti").join(claims, on="claim_id", how="left")
    return frame.select(
        pl.lit(venue).alias("venue"), pl.lit(name).alias("slice"), "claim_id", "paper_id", "review_id", "claim_text",
        "claim_type", pl.col("label").alias("gold_label"), pl.lit(source).alias("gold_source"),
        pl.col("provenance").alias("gold_provenance"), _empty_list().alias("gold_chunk_ids"),
        pl.concat_list("call_id_a", "call_id_b").list.drop_nulls().alias("gold_call_ids"),
        pl.concat_list("decision_id").list.drop_nulls().alias("gold_decision_ids"),
    ), excluded


def _high_agreement(rebuttal: pl.DataFrame, judged: pl.DataFrame) -> pl.DataFrame:
    both = rebuttal.join(judged.select("claim_id", "gold_label", "gold_provenance", "gold_call_ids",
                                       "gold_decision_ids"), on="claim_id", suffix="_manuscript")
    return both.filter(pl.col("gold_label") == pl.col("gold_label_manuscript")).select(
        "venue", pl.lit(HIGH_AGREEMENT).alias("slice"), "claim_id", "paper_id", "review_id", "claim_text",
        "claim_type", "gold_label", pl.lit(f"{THREAD}+{MANUSCRIPT}").alias("gold_source"),
        pl.format("{}={};{}={}", pl.lit(THREAD), "gold_provenance", pl.lit(MANUSCRIPT),
                  "gold_provenance_manuscript").alias("gold_provenance"),
        "gold_chunk_ids",
        pl.concat_list("gold_call_ids", "gold_call_ids_manuscript").alias("gold_call_ids"),
        pl.concat_list("gold_decision_ids", "gold_decision_ids_manuscript").alias("gold_decision_ids"),
    )


def _human_verified(venue: str, human_audit: pl.DataFrame,
                    claims: pl.DataFrame) -> tuple[pl.DataFrame, dict[str, int]]:
    settled = human_audit.filter(pl.col("consensus_label").is_not_null())
    excluded = {"no_consensus": human_audit.height - settled.height} if human_audit.height > settled.height else {}
    frame = settled.join(claims.drop("claim_type"), on="claim_id", how="left")
    return frame.select(
        pl.lit(venue).alias("venue"), pl.lit(HUMAN_VERIFIED).alias("slice"), "claim_id", "paper_id", "review_id",
        "claim_text", "claim_type", pl.col("consensus_label").alias("gold_label"),
        pl.lit("human_audit").alias("gold_source"), pl.col("consensus_source").alias("gold_provenance"),
        _empty_list().alias("gold_chunk_ids"), _empty_list().alias("gold_call_ids"),
        _empty_list().alias("gold_decision_ids"),
    ), excluded


def build_slices(venue: str, config: SliceConfig, paper_claims: pl.DataFrame, canonical_labels: pl.DataFrame,
                 review_claims: pl.DataFrame, claim_types: pl.DataFrame, human_audit: pl.DataFrame) -> Slices:
    """Every slice's rows for one venue (see the module docstring for the membership rules)."""
    claims = (review_claims.select("claim_id", "paper_id", "review_id", "claim_text")
              .join(claim_types.select("claim_id", "claim_type"), on="claim_id", how="left"))
    # canonical_labels carries paper and review ids itself; the claim table adds text and type
    claim_info = claims.select("claim_id", "claim_text", "claim_type")
    rebuttal, rebuttal_out = _canonical_slice(venue, REBUTTAL_SOURCED, THREAD, canonical_labels, claim_info)
    judged, judged_out = _canonical_slice(venue, LLM_JUDGED, MANUSCRIPT, canonical_labels, claim_info)
    agreement = _high_agreement(rebuttal, judged)
    base = {REBUTTAL_SOURCED: rebuttal, LLM_JUDGED: judged, HIGH_AGREEMENT: agreement}[
        VERIFIABLE_BASES[config.verifiable_only_base]]
    verifiable = base.filter(pl.col("claim_type") == FACTUAL).with_columns(pl.lit(VERIFIABLE_ONLY).alias("slice"))
    not_factual = base.filter(pl.col("claim_type").is_null() | (pl.col("claim_type") != FACTUAL))
    human, human_out = _human_verified(venue, human_audit, claims)
    parts = [_paper_sourced(venue, paper_claims), rebuttal, judged, agreement, verifiable, human]
    frame = pl.concat([part.select(SLICE_COLUMNS).cast(SLICE_SCHEMA) for part in parts])
    excluded = {
        REBUTTAL_SOURCED: rebuttal_out, LLM_JUDGED: judged_out, HUMAN_VERIFIED: human_out,
        VERIFIABLE_ONLY: dict(not_factual.group_by(pl.col("claim_type").fill_null("untyped")).len().iter_rows()),
    }
    return Slices(frame=frame, excluded={name: counts for name, counts in excluded.items() if counts})


# -- what the gates and the UI read ---------------------------------------------------------------------------------

def label_distribution(frame: pl.DataFrame) -> pl.DataFrame:
    """One row per slice (all six, empty ones included): its size and the count of each label; `other` counts
    labels outside the vocabulary and missing ones."""
    rows = []
    for name in SLICES:
        labels = frame.filter(pl.col("slice") == name)["gold_label"]
        counts = {label: int((labels == label).sum()) for label in LABELS}
        rows.append({"slice": name, "size": labels.len(), **counts, "other": labels.len() - sum(counts.values())})
    return pl.DataFrame(rows)


def distribution_markdown(distribution: pl.DataFrame, excluded: Mapping[str, Mapping[str, int]]) -> str:
    header = ["slice", "size", *LABELS, "other", "left out"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in distribution.iter_rows(named=True):
        out = ", ".join(f"{reason} {n}" for reason, n in sorted(excluded.get(row["slice"], {}).items())) or "-"
        counts = [str(row[column]) for column in ("size", *LABELS, "other")]
        lines.append("| " + " | ".join([row["slice"], *counts, out]) + " |")
    return "\n".join(lines)


def size_table(distribution: pl.DataFrame, config: SliceConfig) -> pl.DataFrame:
    """slice, size, minimum: the frame the size gate validates (one row per slice)."""
    return distribution.select("slice", "size").with_columns(
        pl.col("slice").replace_strict(config.min_size, return_dtype=pl.Int64).alias("minimum"))


def label_shares(distribution: pl.DataFrame, config: SliceConfig) -> pl.DataFrame:
    """slice, gold_label, share for every review-claim slice with at least `distribution_min_items` rows: the frame
    the distribution gate validates. PaperSourced is single-class by construction (its own gate covers it)."""
    judged = distribution.filter((pl.col("slice") != PAPER_SOURCED) & (pl.col("size") > 0)
                                 & (pl.col("size") >= config.distribution_min_items))
    return judged.unpivot(index=["slice", "size"], on=list(LABELS), variable_name="gold_label", value_name="n").select(
        "slice", "gold_label", (pl.col("n") / pl.col("size")).alias("share"))


def high_agreement_against_sources(frame: pl.DataFrame) -> pl.DataFrame:
    """Each HighAgreement row with the label of the same claim in RebuttalSourced and in LLMJudged (null when the
    claim is missing there): the frame the subset gate validates."""
    def labels_of(name: str, alias: str) -> pl.DataFrame:
        return frame.filter(pl.col("slice") == name).select("claim_id", pl.col("gold_label").alias(alias))

    return (frame.filter(pl.col("slice") == HIGH_AGREEMENT).select("slice", "claim_id", "gold_label")
            .join(labels_of(REBUTTAL_SOURCED, "rebuttal_label"), on="claim_id", how="left")
            .join(labels_of(LLM_JUDGED, "llm_judged_label"), on="claim_id", how="left"))

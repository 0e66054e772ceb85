"""The great-expectations gates of the benchmark slices: which gates there are (blocking or not), the expectations of
each on a slices table, and the metadata every gate evaluation records. The slices asset runs them on every
materialisation; `peerify import-release` and `peerify release verify` run them on imported or released slices."""

import polars as pl

from peerify_dagster.domain import slices as rules
from peerify_dagster.domain.labels import LABELS, SUPPORTED
from peerify_dagster.quality.expectations import Expect

SLICE_IDS = ("slice", "claim_id")
# Metadata of every gate: the sha256 of the slice Parquet file it judged, so a release ships only that file.
SLICES_SHA256 = "slices_sha256"
# (check name, blocking, description): the gates run on every materialisation, in this order
GATES = (
    ("gold_labels_in_vocabulary", True,
     "Every claim has a gold label, and it is one of the four labels. A failure means a slice row has no label or "
     "an unknown one: the labelling or arbitration of that claim went wrong (failing_slice, failing_claim_id)."),
    ("one_row_per_claim_per_slice", True,
     "No claim appears twice in a slice. A failure means the same claim would be scored twice: a duplicate in "
     "the labels or paper claims of that slice."),
    ("paper_sourced_all_supported", True,
     "Claims taken from the paper itself (PaperSourced) are Supported. A failure means a paper claim got another "
     "label: the slice logic or its input is wrong."),
    ("high_agreement_in_both_sources", True,
     "Every HighAgreement claim got the same label from the author thread (RebuttalSourced) and from the "
     "manuscript (LLMJudged). A failure means the agreement slice holds a claim the two sources disagree on."),
    ("paper_sourced_gold_chunks_present", True,
     "Every paper claim points at the manuscript passage it came from (a gold chunk). A failure means retrieval "
     "cannot be scored for that claim: its paragraph was not found among the manuscript's chunks."),
    ("slice_sizes_at_least_minimum", True,
     "Every slice has at least as many claims as the venue asks for (slices.min_size in venues.yaml). A failure "
     "means the slice is too small to report on: failing_slice has `size` claims, fewer than its `minimum`."),
    ("label_distribution_within_bounds", False,
     "No label dominates a review-claim slice: in a slice of at least slices.distribution_min_items claims, no "
     "label holds more than slices.max_label_share of them. A warning only: failing_slice has `share` of "
     "failing_gold_label, above `bound`; scores on that slice say little beyond that label."),
)


def gate_expectations(frame: pl.DataFrame, distribution: pl.DataFrame,
                      config: rules.SliceConfig) -> dict[str, list[Expect]]:
    """The expectations of each gate (GATES) on the built slices."""
    paper = frame.filter(pl.col("slice") == rules.PAPER_SOURCED)
    against_sources = rules.high_agreement_against_sources(frame)
    return {
        "gold_labels_in_vocabulary": [
            Expect(frame, "ExpectColumnValuesToNotBeNull", SLICE_IDS, {"column": "gold_label"}),
            Expect(frame, "ExpectColumnValuesToBeInSet", SLICE_IDS,
                   {"column": "gold_label", "value_set": list(LABELS)}),
        ],
        "one_row_per_claim_per_slice": [
            Expect(frame, "ExpectCompoundColumnsToBeUnique", SLICE_IDS, {"column_list": list(SLICE_IDS)})],
        "paper_sourced_all_supported": [
            Expect(paper, "ExpectColumnValuesToBeInSet", SLICE_IDS,
                   {"column": "gold_label", "value_set": [SUPPORTED]})],
        "high_agreement_in_both_sources": [
            Expect(against_sources, "ExpectColumnPairValuesToBeEqual", SLICE_IDS,
                   {"column_A": "gold_label", "column_B": source, "ignore_row_if": "neither"})
            for source in ("rebuttal_label", "llm_judged_label")],
        "paper_sourced_gold_chunks_present": [
            Expect(paper.with_columns(pl.col("gold_chunk_ids").list.len().alias("gold_chunks")),
                   "ExpectColumnValuesToBeBetween", SLICE_IDS, {"column": "gold_chunks", "min_value": 1})],
        "slice_sizes_at_least_minimum": [
            Expect(rules.size_table(distribution, config), "ExpectColumnPairValuesAToBeGreaterThanB", ("slice",),
                   {"column_A": "size", "column_B": "minimum", "or_equal": True})],
        "label_distribution_within_bounds": [
            Expect(rules.label_shares(distribution, config), "ExpectColumnValuesToBeBetween", ("slice", "gold_label"),
                   {"column": "share", "max_value": config.max_label_share})],
    }

"""Stage 9, benchmark slices: the six slices of the benchmark in one table (one row per slice and claim, with the gold
label and where it came from), behind great-expectations gates that block what reads it when a release would be
wrong."""

import dagster as dg
import polars as pl

from peerify_dagster.domain import slices as rules
from peerify_dagster.domain.labels import LABELS, SUPPORTED
from peerify_dagster.partitions import venue_partitions
from peerify_dagster.resources.dagster_resources import VenueRegistryResource
from peerify_dagster.resources.expectations import Expect, gate

SLICE_IDS = ("slice", "claim_id")
# (check name, blocking, description): the gates run on every materialisation, in this order
GATES = (
    ("gold_labels_in_vocabulary", True, "every gold label is one of the four labels (none missing)"),
    ("one_row_per_claim_per_slice", True, "no claim twice in a slice"),
    ("paper_sourced_all_supported", True, "every PaperSourced gold label is Supported"),
    ("high_agreement_in_both_sources", True,
     "every HighAgreement claim is in RebuttalSourced and LLMJudged with the same label"),
    ("paper_sourced_gold_chunks_present", True, "every PaperSourced claim names at least one gold chunk"),
    ("slice_sizes_at_least_minimum", True, "every slice has at least its configured minimum of rows (slices.min_size)"),
    ("label_distribution_within_bounds", False,
     "no label holds more than slices.max_label_share of a review-claim slice of slices.distribution_min_items rows"),
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


@dg.asset(
    partitions_def=venue_partitions,
    group_name="slices",
    kinds={"python", "parquet"},
    code_version="benchmark-slices-v1",
    check_specs=[dg.AssetCheckSpec(name, asset="benchmark_slices", blocking=blocking, description=description)
                 for name, blocking, description in GATES],
)
def benchmark_slices(context: dg.AssetExecutionContext, paper_claims: pl.DataFrame, canonical_labels: pl.DataFrame,
                     review_claims: pl.DataFrame, claim_types: pl.DataFrame, human_audit: pl.DataFrame,
                     venue_registry: VenueRegistryResource):
    """The six benchmark slices, one row per (slice, claim): PaperSourced (paper claims, Supported by construction,
    gold chunks), RebuttalSourced and LLMJudged (canonical labels of the thread / manuscript source; pending and
    unlabelled items left out and counted), HighAgreement (both canonical labels present and equal), VerifiableOnly
    (factual claims of the venue's `slices.verifiable_only_base`, LLMJudged by default) and HumanVerified (audit
    consensus labels). The same columns in every slice, with the call and decision ids behind each gold label.
    Gates (great-expectations) run on every materialisation; the blocking ones stop what reads the slices."""
    venue = context.partition_key
    config = rules.SliceConfig.from_mapping(venue_registry.venue(venue).slices)
    built = rules.build_slices(venue, config, paper_claims, canonical_labels, review_claims, claim_types, human_audit)
    distribution = rules.label_distribution(built.frame)
    sizes = dict(distribution.select("slice", "size").iter_rows())
    yield dg.Output(built.frame, metadata={
        "slices": dg.MetadataValue.md(rules.distribution_markdown(distribution, built.excluded)),
        **{f"size_{name}": sizes[name] for name in rules.SLICES},
        "left_out": dg.MetadataValue.json(built.excluded),
        "verifiable_only_base": config.verifiable_only_base,
    })
    expects = gate_expectations(built.frame, distribution, config)
    for name, blocking, _ in GATES:
        yield gate(name, expects[name], blocking)

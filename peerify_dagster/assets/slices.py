"""Stage 9, benchmark slices: the six slices of the benchmark in one table (one row per slice and claim, with the gold
label and where it came from), behind great-expectations gates that block what reads it when a release would be
wrong."""

import dagster as dg
import polars as pl

from peerify_dagster.domain import slices as rules
from peerify_dagster.domain.label_release import sha256_hex
from peerify_dagster.partitions import venue_partitions
from peerify_dagster.quality.expectations import gate
from peerify_dagster.quality.slice_gates import GATES, SLICES_SHA256, gate_expectations
from peerify_dagster.resources.dagster_resources import LakeResource, VenueRegistryResource


@dg.asset(
    partitions_def=venue_partitions,
    group_name="slices",
    kinds={"python", "parquet"},
    check_specs=[dg.AssetCheckSpec(name, asset="benchmark_slices", blocking=blocking, description=description)
                 for name, blocking, description in GATES],
)
def benchmark_slices(context: dg.AssetExecutionContext, paper_claims: pl.DataFrame, canonical_labels: pl.DataFrame,
                     review_claims: pl.DataFrame, claim_types: pl.DataFrame, human_audit: pl.DataFrame,
                     venue_registry: VenueRegistryResource, lake: LakeResource):
    """The six benchmark slices, one row per (slice, claim): PaperSourced (paper claims, Supported by construction,
    gold chunks), RebuttalSourced and LLMJudged (canonical labels of the thread / manuscript source; pending and
    unlabelled items left out and counted), HighAgreement (both canonical labels present and equal), VerifiableOnly
    (factual claims of the venue's `slices.verifiable_only_base`, LLMJudged by default) and HumanVerified (audit
    consensus labels). The same columns in every slice, with the call and decision ids behind each gold label.
    Gates (great-expectations) run on every materialisation; the blocking ones stop what reads the slices. Each
    gate records the sha256 of the slice file it judged (`slices_sha256`)."""
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
    # The IO manager wrote the file when the Output was yielded: the gates name the exact bytes they judged.
    judged = {SLICES_SHA256: sha256_hex(lake.lake().table_path("benchmark_slices", venue).read_bytes())}
    expects = gate_expectations(built.frame, distribution, config)
    for name, blocking, _ in GATES:
        yield gate(name, expects[name], blocking, metadata=judged)

"""The LLM usage behind the venue's tables (every call recorded in the `llm_calls` ledger). The verifiers' predictions
are the `predictions` asset (assets/predictions.py), one partition per configuration a venue uses; their calls,
tokens and cost are in its rows and metadata."""

from collections.abc import Mapping

import dagster as dg
import polars as pl

from peerify_dagster.domain.llm_stages import VENUE_CALL_ID_COLUMNS
from peerify_dagster.partitions import venue_partitions
from peerify_dagster.resources.dagster_resources import LakeResource
from peerify_dagster.resources.lake import LEDGER_DIR
from peerify_dagster.resources.llm_gateway.ledger import segments_in
from peerify_dagster.resources.store import readable

USAGE_SCHEMA = {
    "venue": pl.String, "model": pl.String, "role": pl.String, "prompt_id": pl.String, "calls": pl.Int64,
    "tokens_in": pl.Int64, "tokens_out": pl.Int64, "cost_usd": pl.Float64, "parse_failures": pl.Int64,
    "errors": pl.Int64, "mean_latency_s": pl.Float64,
}


def referenced_call_ids(tables: Mapping[str, pl.DataFrame]) -> pl.DataFrame:
    """The distinct call ids (column `call_id`) the venue's tables reference."""
    ids = [tables[table].select(pl.col(column).alias("call_id")) for table, columns in VENUE_CALL_ID_COLUMNS.items()
           for column in columns]
    return pl.concat(ids).drop_nulls().unique()


@dg.asset(partitions_def=venue_partitions, group_name="verification", kinds={"python", "parquet", "duckdb"})
def llm_usage(context: dg.AssetExecutionContext, review_claims: pl.DataFrame, claims_dropped: pl.DataFrame,
              claim_types: pl.DataFrame, paper_claims: pl.DataFrame, paper_claims_dropped: pl.DataFrame,
              claim_labels: pl.DataFrame, citance_enrichment: pl.DataFrame, citation_verdicts: pl.DataFrame,
              review_citation_verdicts: pl.DataFrame, lake: LakeResource) -> pl.DataFrame:
    """LLM usage behind this venue's tables, per model, role and prompt: calls, tokens, cost, parse failures and
    errors, read from the `llm_calls` ledger for the call ids the tables reference (every role: extractor, fact
    tagger, labellers, citance tagger, citation verifiers, for the manuscript's citations and the reviews'; the
    claim verifiers' are in `predictions`)."""
    call_ids = referenced_call_ids({
        "review_claims": review_claims, "claims_dropped": claims_dropped, "claim_types": claim_types,
        "paper_claims": paper_claims, "paper_claims_dropped": paper_claims_dropped, "claim_labels": claim_labels,
        "citance_enrichment": citance_enrichment, "citation_verdicts": citation_verdicts,
        "review_citation_verdicts": review_citation_verdicts})
    if call_ids.is_empty():  # no claim needed a call (e.g. no manuscript): there may be no ledger at all
        return pl.DataFrame(schema=USAGE_SCHEMA)
    # Segment by segment through the store (a folder or an S3 lake), in the order a glob gives them.
    segments = segments_in(lake.lake().root / LEDGER_DIR)
    ledger = pl.concat([pl.read_parquet(readable(path)) for path in segments]).unique("call_id", keep="last")
    calls = ledger.join(call_ids, on="call_id", how="inner")
    return (
        calls.group_by("model", "role", "prompt_id")
        .agg(pl.len().alias("calls"), pl.col("tokens_in").sum(), pl.col("tokens_out").sum(),
             pl.col("cost_usd").sum(), (~pl.col("parse_ok") & pl.col("error").is_null()).sum().alias("parse_failures"),
             pl.col("error").is_not_null().sum().alias("errors"), pl.col("latency_s").mean().alias("mean_latency_s"))
        .with_columns(pl.lit(context.partition_key).alias("venue"))
        .select(list(USAGE_SCHEMA)).cast(USAGE_SCHEMA).sort("model", "role", "prompt_id")
    )

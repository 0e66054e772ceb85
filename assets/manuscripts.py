"""Stage 3, manuscripts to evidence units: parse the stored PDFs with Docling and cut section-aware chunks."""

from dataclasses import asdict
from pathlib import Path

import dagster as dg
import polars as pl

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
from peerify_dagster.domain.layout.blocks import LAYOUT_VERSION, Block
from peerify_dagster.domain.shards import shard_count
from peerify_dagster.partitions import venue_partitions
from peerify_dagster.resources.dagster_resources import DocumentParserResource, LakeResource, VenueRegistryResource
from peerify_dagster.resources.document_parser import ManuscriptParseError
from peerify_dagster.resources.expectations import Expect, gate
from peerify_dagster.resources.openreview import SnapshotReader
from peerify_dagster.resources.parsed_tables import PARSE_ERROR_SCHEMA, PARSED_SCHEMA, parsed_row
from peerify_dagster.resources.shard_io import (
    POSITION,
    SHARD,
    SHARD_IO_MANAGER,
    SHARD_SCHEMA,
    assemble_shards,
    split_into_shards,
)

PARSING_CODE_VERSION = f"parsing-v1-layout-{LAYOUT_VERSION}"
CHUNKING_CODE_VERSION = "chunking-v3"


@dg.op(out=dg.DynamicOut(pl.DataFrame, io_manager_key=SHARD_IO_MANAGER))
def split_manuscripts(context: dg.OpExecutionContext, manuscript_pdfs: pl.DataFrame,
                      venue_registry: VenueRegistryResource):
    """The venue's manuscripts (its `manuscript_pdfs` rows) in shards of its papers (domain/shards.py)."""
    venue = venue_registry.venue(context.partition_key)
    shards = shard_count(manuscript_pdfs.height, venue.shards)
    context.log.info(f"{manuscript_pdfs.height} manuscripts in {shards} shard(s)")
    yield from split_into_shards(manuscript_pdfs, manuscript_pdfs["paper_id"].to_list(), shards)


@dg.op(out={"parsed": dg.Out(pl.DataFrame, io_manager_key=SHARD_IO_MANAGER),
            "errors": dg.Out(pl.DataFrame, io_manager_key=SHARD_IO_MANAGER)},
       tags=queue_tags("pdf"))
def parse_shard(context: dg.OpExecutionContext, shard: pl.DataFrame, lake: LakeResource,
                venue_registry: VenueRegistryResource, document_parser: DocumentParserResource):
    """Parse one shard's manuscripts: each stored PDF, and, for papers without one, an HTML / Markdown / text
    manuscript the venue provides (`manuscripts/<forum>.<ext>` in its snapshot); a manuscript that fails is recorded
    as a parse error and the others complete."""
    parser = document_parser.parser()
    the_lake = lake.lake()
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
        try:
            document = parser.parse(path, source_name=f"{paper_id}{path.suffix}", paper_id=paper_id)
        except ManuscriptParseError as exc:
            context.log.warning(str(exc))
            errors.append({"venue": context.partition_key, "paper_id": paper_id, "reason": exc.reason,
                           "message": str(exc), **placed})
            continue
        parsed.append({**parsed_row(context.partition_key, pdf_sha256, document), **placed})
        context.log.info(f"parsed {done}/{len(sources)}: {paper_id} ({document.pages} pages, {document.parser})")
    yield dg.Output(pl.DataFrame(parsed, schema={**PARSED_SCHEMA, **SHARD_SCHEMA}), output_name="parsed")
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
            kinds={"python", "parquet"}, code_version=PARSING_CODE_VERSION,
            description="Per paper: the manuscript's logical blocks in reading order (headings, paragraphs, captions, "
                        "tables, references) and which parser, version and options produced them.",
        ),
        "parse_errors": dg.AssetOut(
            kinds={"python", "parquet"}, code_version=PARSING_CODE_VERSION,
            description="Manuscripts that could not be parsed (encrypted, image-only, truncated, zero pages, ...).",
        ),
    },
)
def parsed_manuscripts(manuscript_pdfs: pl.DataFrame):
    """Parse every stored PDF (or text manuscript), one step per shard of the venue's papers, so many workers share
    a venue and a failed shard re-runs alone; the venue tables are assembled from the shards."""
    parsed, errors = split_manuscripts(manuscript_pdfs).map(parse_shard)
    return assemble_parsed(parsed.collect(), errors.collect())


def _chunking_config(venue_registry: VenueRegistryResource, venue: str) -> ChunkingConfig:
    # The registry validates `chunking:` when it loads, so a bad option fails there, naming the venue.
    return ChunkingConfig.from_mapping(venue_registry.venue(venue).chunking)


@dg.asset(
    partitions_def=venue_partitions,
    group_name="manuscripts",
    kinds={"python", "parquet"},
    code_version=CHUNKING_CODE_VERSION,
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
def chunks(context: dg.AssetExecutionContext, parsed_manuscripts: pl.DataFrame,
           venue_registry: VenueRegistryResource):
    """The retrieval units: consecutive blocks of a section packed up to 256 WordPiece tokens (the venue's
    `chunking:` options choose another strategy or limit), captions never in prose, the section path as the
    first line of each chunk, references and paper checklists left out; stable ids (paper id + order + text
    hash) and section paths."""
    config = _chunking_config(venue_registry, context.partition_key)
    rows, tokens = [], []
    for paper in parsed_manuscripts.iter_rows(named=True):
        blocks = [Block.from_record(b) for b in paper["blocks"]]
        for chunk in chunk_document(paper["paper_id"], blocks, config):
            rows.append({"venue": context.partition_key, **asdict(chunk)})
            tokens.append(estimate_tokens(chunk.text))
    frame = pl.DataFrame(rows, schema=CHUNK_SCHEMA)
    yield dg.Output(frame, metadata={"chunking": dg.MetadataValue.json(vars(config))})
    papers = parsed_manuscripts.select("paper_id").join(frame.group_by("paper_id").len("chunks"), on="paper_id",
                                                        how="left").with_columns(pl.col("chunks").fill_null(0))
    yield gate("no_empty_chunks", [Expect(frame, "ExpectColumnValuesToBeBetween", ("chunk_id",),
                                          {"column": "word_count", "min_value": 1})], blocking=True)
    yield gate("no_runaway_chunks", [Expect(frame.with_columns(pl.Series("tokens", tokens, dtype=pl.Int64)),
                                            "ExpectColumnValuesToBeBetween", ("chunk_id",),
                                            {"column": "tokens", "max_value": RUNAWAY_FACTOR * config.max_tokens})],
               blocking=False)
    yield gate("every_paper_has_chunks", [Expect(papers, "ExpectColumnValuesToBeBetween", ("paper_id",),
                                                 {"column": "chunks", "min_value": 1})], blocking=False)


@dg.asset(partitions_def=venue_partitions, group_name="manuscripts", kinds={"python", "parquet"},
          code_version=CHUNKING_CODE_VERSION)
def chunk_stats(context: dg.AssetExecutionContext, chunks: pl.DataFrame, parsed_manuscripts: pl.DataFrame,
                venue_registry: VenueRegistryResource) -> pl.DataFrame:
    """Chunk size distribution per venue (the paper's chunker: median / mean / p90 = 133 / 132 / 188 words)."""
    config = _chunking_config(venue_registry, context.partition_key)
    stats = compute_chunk_stats([Chunk.from_record(row) for row in chunks.iter_rows(named=True)],
                                max_tokens=config.max_tokens)
    row = {"venue": context.partition_key, "n_papers": parsed_manuscripts.height,
           "papers_without_chunks": len(set(parsed_manuscripts["paper_id"]) - set(chunks["paper_id"])), **stats}
    context.add_output_metadata({k: v for k, v in row.items() if isinstance(v, (int, float))})
    return pl.DataFrame([row])

"""Stage 3, manuscripts to evidence units: parse the stored PDFs with Docling and cut section-aware chunks."""

from dataclasses import asdict
from pathlib import Path

import dagster as dg
import polars as pl

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
from peerify_dagster.partitions import venue_partitions
from peerify_dagster.resources.dagster_resources import DocumentParserResource, LakeResource, VenueRegistryResource
from peerify_dagster.resources.document_parser import ManuscriptParseError
from peerify_dagster.resources.expectations import Expect, gate
from peerify_dagster.resources.openreview import SnapshotReader
from peerify_dagster.resources.parsed_tables import PARSE_ERROR_SCHEMA, PARSED_SCHEMA, parsed_row

PARSING_CODE_VERSION = f"parsing-v1-layout-{LAYOUT_VERSION}"
CHUNKING_CODE_VERSION = "chunking-v3"

@dg.multi_asset(
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
def parsed_manuscripts(context: dg.AssetExecutionContext, manuscript_pdfs: pl.DataFrame, lake: LakeResource,
                       venue_registry: VenueRegistryResource, document_parser: DocumentParserResource):
    """Parse every stored PDF, and, for papers without one, an HTML / Markdown / text manuscript the venue provides
    (`manuscripts/<forum>.<ext>` in its snapshot); a manuscript that fails is recorded in `parse_errors` and the
    others complete."""
    parser = document_parser.parser()
    root = lake.lake().root
    reader = SnapshotReader(venue_registry.snapshot_dir(venue_registry.venue(context.partition_key), lake.lake()))
    sources: list[tuple[str, Path, str | None]] = []  # (paper id, file, pdf sha256)
    for row in manuscript_pdfs.iter_rows(named=True):
        if row["status"] == "ok":
            sources.append((row["paper_id"], root / row["lake_path"], row["sha256"]))
        elif (text := reader.text_manuscript(row["paper_id"])) is not None:
            sources.append((row["paper_id"], text, None))
    parsed, errors = [], []
    for done, (paper_id, path, pdf_sha256) in enumerate(sources, start=1):
        try:
            document = parser.parse(path, source_name=f"{paper_id}{path.suffix}", paper_id=paper_id)
        except ManuscriptParseError as exc:
            context.log.warning(str(exc))
            errors.append({"venue": context.partition_key, "paper_id": paper_id, "reason": exc.reason,
                           "message": str(exc)})
            continue
        parsed.append(parsed_row(context.partition_key, pdf_sha256, document))
        context.log.info(f"parsed {done}/{len(sources)}: {paper_id} ({document.pages} pages, {document.parser})")
    frame = pl.DataFrame(parsed, schema=PARSED_SCHEMA)
    yield dg.Output(frame, output_name="parsed_manuscripts",
                    metadata={"pages_parsed": int(frame["pages"].sum() or 0), "failed": len(errors)})
    yield dg.Output(pl.DataFrame(errors, schema=PARSE_ERROR_SCHEMA), output_name="parse_errors")


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

"""The lake's rows of a parsed manuscript (`parsed_manuscripts`, and the cited papers' `cited_manuscripts`): one
schema and one way to turn a ParsedDocument into a row, whoever parsed it."""

import json
from dataclasses import asdict
from typing import Any

import polars as pl

from peerify_dagster.domain.chunking import REGION_TYPE
from peerify_dagster.resources.document_parser import ParsedDocument

# A line of a block: where its text starts in the block's text (non-whitespace characters before it) and its box.
LINE_REGION_TYPE = pl.Struct({"start": pl.Int64, **REGION_TYPE.to_schema()})
BLOCK_TYPE = pl.Struct({
    "kind": pl.String, "text": pl.String, "page": pl.Int64, "section_path": pl.List(pl.String),
    "in_appendix": pl.Boolean, "order": pl.Int64, "regions": pl.List(REGION_TYPE),
    "line_regions": pl.List(LINE_REGION_TYPE),
})
PAGE_SIZE_TYPE = pl.Struct({"page": pl.Int64, "width": pl.Float64, "height": pl.Float64})
PARSED_SCHEMA = {
    "venue": pl.String, "paper_id": pl.String, "pdf_sha256": pl.String, "parser": pl.String,
    "parser_version": pl.String, "options_json": pl.String, "pages": pl.Int64, "n_blocks": pl.Int64,
    "blocks": pl.List(BLOCK_TYPE), "page_sizes": pl.List(PAGE_SIZE_TYPE),
}
PARSE_ERROR_SCHEMA = {"venue": pl.String, "paper_id": pl.String, "reason": pl.String, "message": pl.String}


def parsed_row(venue: str, pdf_sha256: str | None, document: ParsedDocument) -> dict[str, Any]:
    """One row of `parsed_manuscripts` (PARSED_SCHEMA)."""
    return {
        "venue": venue, "paper_id": document.paper_id, "pdf_sha256": pdf_sha256,
        "parser": document.parser, "parser_version": document.parser_version,
        "options_json": json.dumps(document.options, sort_keys=True, default=str),
        "pages": document.pages, "n_blocks": len(document.blocks),
        "blocks": [asdict(block) for block in document.blocks],
        "page_sizes": [{"page": page, "width": width, "height": height}
                       for page, (width, height) in sorted(document.page_sizes.items())],
    }

"""Stage 6, the citation half (RefVerifier): every citing sentence of a venue's manuscripts checked against the paper
it cites. Bibliography entries parsed, citances detected and their markers resolved, entries checked against
scholarly metadata, cited papers found and parsed by the manuscript path, evidence windows ranked, verdicts given
through the gateway, and the figures beside RefVerifier's. The logic is in domain/citations/."""

import json
from dataclasses import asdict, dataclass, replace
from typing import NamedTuple

import dagster as dg
import polars as pl
import pyarrow.parquet as pq

from peerify_dagster.assets.steps.citations import (
    CITED_PAPER_SCHEMA,
    GROUP,
    NO_REFERENCES,
    PROMPT_VARIABLES,
    CitedPapers,
    WindowRanker,
    answered_rows,
    citation_library,
    citation_options,
    cited_key,
    entries_of,
    entry_id,
    manuscript_titles,
    metadata_index,
    paper_blocks,
    verdict_fields,
    why_not_cited,
)
from peerify_dagster.assets.steps.llm import (
    shard_usage_metadata,
)
from peerify_dagster.assets.steps.parsed_tables import BLOCK_TYPE, PAGE_SIZE_TYPE, PARSED_SCHEMA, parsed_row
from peerify_dagster.cluster import queue_tags
from peerify_dagster.domain.chunking import REGION_TYPE
from peerify_dagster.domain.citations import detection, evidence, verdicts
from peerify_dagster.domain.citations.bibliography import read_bibliography
from peerify_dagster.domain.citations.entries import ParsedEntry
from peerify_dagster.domain.citations.gold import load_citation_gold
from peerify_dagster.domain.citations.metrics import CITATION_METRICS_SCHEMA, citation_report_markdown
from peerify_dagster.domain.citations.metrics import citation_metrics as citation_figures
from peerify_dagster.domain.citations.options import MODE_MERGED, MODE_WINDOWS
from peerify_dagster.domain.citations.resolution import RESOLVED
from peerify_dagster.domain.citations.vocabulary import NOT_FOUND, SUSPICIOUS
from peerify_dagster.domain.layout.blocks import Block
from peerify_dagster.domain.layout.regions import regions_of_span
from peerify_dagster.domain.prompts import load_prompt
from peerify_dagster.partitions import venue_partitions
from peerify_dagster.quality.expectations import Expect, gate
from peerify_dagster.resources.cited_papers import CitedPaperResolver, CitedPaperStore
from peerify_dagster.resources.dagster_resources import (
    DocumentParserResource,
    EmbeddingResource,
    LakeResource,
    LLMGatewayResource,
    RetrievalResource,
    VenueRegistryResource,
)
from peerify_dagster.resources.llm_gateway.registry import ModelRegistry
from peerify_dagster.resources.scholarly import CACHE_DIR as SCHOLARLY_CACHE_DIR
from peerify_dagster.resources.scholarly import ScholarlyClient
from peerify_dagster.resources.shard_io import (
    POSITION,
    SHARD,
    SHARD_IO_MANAGER,
    SHARD_SCHEMA,
    assemble_shards,
    split_by_paper,
)

FIELD_SOURCE_TYPE = pl.Struct({"field": pl.String, "method": pl.String})
BIBLIOGRAPHY_SCHEMA = {
    "venue": pl.String, "paper_id": pl.String, "entry_id": pl.String, "entry_index": pl.Int64, "label": pl.String,
    "raw_text": pl.String, "authors": pl.List(pl.String), "surnames": pl.List(pl.String), "title": pl.String,
    "year": pl.Int64, "year_suffix": pl.String, "published_in": pl.String, "doi": pl.String, "arxiv_id": pl.String,
    "url": pl.String, "field_sources": pl.List(FIELD_SOURCE_TYPE), "parse_status": pl.String,
    "parse_reason": pl.String, "page": pl.Int64, "regions": pl.List(REGION_TYPE),
}
MARKER_TYPE = pl.Struct({"text": pl.String, "style": pl.String, "start": pl.Int64, "end": pl.Int64,
                         "entry_ids": pl.List(pl.String), "unresolved_keys": pl.List(pl.String)})
CITANCE_SCHEMA = {
    "venue": pl.String, "paper_id": pl.String, "citance_id": pl.String, "text": pl.String, "block_order": pl.Int64,
    "char_start": pl.Int64, "char_end": pl.Int64, "page": pl.Int64, "regions": pl.List(REGION_TYPE),
    "section_path": pl.List(pl.String), "markers": pl.List(MARKER_TYPE), "entry_ids": pl.List(pl.String),
    "style": pl.String, "claim_type": pl.String, "hedged": pl.Boolean, "resolution": pl.String,
}


def _bibliography_rows(venue: str, paper_id: str, blocks: list[Block]) -> list[dict]:
    placed = read_bibliography(blocks)
    if not placed:
        return [{"venue": venue, "paper_id": paper_id, "entry_id": f"{paper_id}:none", "parse_status": NO_REFERENCES,
                 "parse_reason": "no references section was found in the manuscript", "field_sources": [],
                 "authors": [], "surnames": [], "regions": []}]
    rows = []
    for found in placed:
        entry = found.entry
        rows.append({
            "venue": venue, "paper_id": paper_id, "entry_id": entry_id(paper_id, entry.index),
            "entry_index": entry.index, "label": entry.label, "raw_text": entry.raw_text,
            "authors": list(entry.authors), "surnames": list(entry.surnames), "title": entry.title,
            "year": entry.year, "year_suffix": entry.year_suffix, "published_in": entry.venue, "doi": entry.doi,
            "arxiv_id": entry.arxiv_id, "url": entry.url,
            "field_sources": [{"field": name, "method": method}
                              for name, method in sorted(entry.field_sources.items())],
            "parse_status": entry.status, "parse_reason": entry.reason, "page": found.page,
            "regions": [vars(region) for region in found.regions],
        })
    return rows


@dg.asset(
    partitions_def=venue_partitions, group_name=GROUP, kinds={"python", "parquet"},
    check_specs=[dg.AssetCheckSpec(
        "every_entry_parsed", asset="bibliography",
        description="Every reference entry gives at least a title, authors or a year: an unparsed entry cannot be "
                    "checked or resolved. A warning: the row says why.")],
)
def bibliography(context: dg.AssetExecutionContext, parsed_manuscripts: pl.DataFrame):
    """One row per reference entry of each manuscript: the raw text, authors, title, year, venue, DOI, arXiv id and
    URL with how each field was found, and where the entry lies on the page; an entry in an unknown style keeps its
    row as `partial` or `unparsed` with the reason, and a manuscript without a references section one row
    `no_references`."""
    rows = []
    for paper_id, blocks in paper_blocks(parsed_manuscripts).items():
        rows += _bibliography_rows(context.partition_key, paper_id, blocks)
    frame = pl.DataFrame(rows, schema=BIBLIOGRAPHY_SCHEMA)
    statuses = dict(frame.group_by("parse_status").len().iter_rows())
    yield dg.Output(frame, metadata={"entries": frame.filter(pl.col("parse_status") != NO_REFERENCES).height,
                                     "by_status": dg.MetadataValue.json(statuses)})
    entries = frame.filter(pl.col("parse_status") != NO_REFERENCES)
    yield gate("every_entry_parsed", [Expect(entries, "ExpectColumnValuesToNotBeInSet", ("entry_id",),
                                             {"column": "parse_status", "value_set": ["unparsed"]})], blocking=False)


# Blocks whose sentences can be citances: the manuscript's body prose (never the references themselves, captions or
# tables, whose numbers and brackets are not citations in the running text's sense).
CITING_KINDS = ("paragraph", "abstract")


def _citance_rows(venue: str, paper_id: str, blocks: list[Block], entries: list[ParsedEntry]) -> list[dict]:
    rows = []
    prose = [block for block in blocks if block.kind in CITING_KINDS]
    found_per_block = detection.detect_paper_citances([block.text for block in prose], entries)
    for block, found_in_block in zip(prose, found_per_block):
        for found in found_in_block:
            resolved = detection.resolve_markers(found.markers, entries)
            markers = [{"text": r.marker.text, "style": r.marker.style, "start": r.marker.start, "end": r.marker.end,
                        "entry_ids": [entry_id(paper_id, index) for index in r.entry_indexes],
                        "unresolved_keys": list(r.unresolved_keys)} for r in resolved]
            cited = list(dict.fromkeys(e for marker in markers for e in marker["entry_ids"]))
            keys = sum(len(r.marker.keys) for r in resolved)
            unresolved = sum(len(r.unresolved_keys) for r in resolved)
            styles = {r.marker.style for r in resolved}
            sentence = block.text[found.start:found.end]
            regions = regions_of_span(block.text, block.line_regions, found.start, found.end, block.regions)
            rows.append({
                "venue": venue, "paper_id": paper_id, "citance_id": f"{paper_id}:c{len(rows) + 1}", "text": sentence,
                "block_order": block.order, "char_start": found.start, "char_end": found.end,
                "page": regions[0].page if regions else block.page, "regions": [vars(r) for r in regions],
                "section_path": block.section_path, "markers": markers, "entry_ids": cited,
                "style": styles.pop() if len(styles) == 1 else "mixed",
                "claim_type": detection.claim_type(sentence), "hedged": detection.is_hedged(sentence),
                "resolution": "none" if unresolved == keys else "all" if unresolved == 0 else "some",
            })
    return rows


@dg.asset(
    partitions_def=venue_partitions, group_name=GROUP, kinds={"python", "parquet"},
    check_specs=[dg.AssetCheckSpec(
        "markers_resolve", asset="citances",
        description="Every citation marker names an entry of the manuscript's bibliography: an unresolved one cannot "
                    "be checked against its paper. A warning: the marker keeps its unresolved keys.")],
)
def citances(context: dg.AssetExecutionContext, parsed_manuscripts: pl.DataFrame, bibliography: pl.DataFrame):
    """Every citation-bearing sentence of each manuscript's body (abstract and paragraphs, never the references):
    its text, span in its block, page and boxes, section, its markers (numeric, author-year, narrative,
    superscript) each resolved to bibliography entries or kept with the keys that match none, the rule-based claim
    type and whether it is hedged."""
    entries = entries_of(bibliography)
    rows = []
    for paper_id, blocks in paper_blocks(parsed_manuscripts).items():
        rows += _citance_rows(context.partition_key, paper_id, blocks, entries.get(paper_id, []))
    frame = pl.DataFrame(rows, schema=CITANCE_SCHEMA)
    yield dg.Output(frame, metadata={
        "citances": frame.height, "papers_with_citances": frame["paper_id"].n_unique(),
        "by_resolution": dg.MetadataValue.json(dict(frame.group_by("resolution").len().iter_rows())),
        "by_style": dg.MetadataValue.json(dict(frame.group_by("style").len().iter_rows()))})
    yield gate("markers_resolve", [Expect(frame, "ExpectColumnValuesToBeInSet", ("citance_id",),
                                          {"column": "resolution", "value_set": ["all"]})], blocking=False)


REFERENCE_CHECK_SCHEMA = {
    "venue": pl.String, "paper_id": pl.String, "entry_id": pl.String, "status": pl.String,
    "reasons": pl.List(pl.String), "services": pl.List(pl.String), "matched_service": pl.String,
    "matched_title": pl.String, "matched_authors": pl.List(pl.String), "matched_year": pl.Int64,
    "matched_doi": pl.String, "matched_arxiv_id": pl.String, "title_similarity": pl.Float64,
    "author_overlap": pl.Float64, "year_delta": pl.Int64, "retracted": pl.Boolean,
    "open_access_urls": pl.List(pl.String), "errors": pl.List(pl.String), "evidence_json": pl.String,
}


@dg.asset(
    partitions_def=venue_partitions, group_name=GROUP, kinds={"python", "parquet"},
    check_specs=[dg.AssetCheckSpec(
        "no_suspicious_references", asset="reference_checks",
        description="No entry contradicts the scholarly record of its DOI or title (another title or authors, a year "
                    "off, a retracted work) or is unknown to every source asked (not_found: possibly fabricated). A "
                    "warning: the row gives the evidence.")],
)
def reference_checks(context: dg.AssetExecutionContext, bibliography: pl.DataFrame, lake: LakeResource,
                     venue_registry: VenueRegistryResource):
    """Each parsed entry against the metadata services the venue configures (`citations.metadata`: Crossref,
    OpenAlex, Semantic Scholar; none by default, so nothing leaves the machine): `validated` (a record agrees on
    title, first author and year), `suspicious` (a record found by the entry's DOI or arXiv id contradicts it, its
    year is off, the work is retracted), `not_found` (every service answered, none holds the work: possibly
    fabricated) or `unvalidatable` (nothing could be asked, or a service failed and the rest found nothing), with
    the evidence and each service's error. Answers are cached under <lake>/scholarly_cache/, so a rebuild asks
    nothing again; retries honour Retry-After."""
    venue = context.partition_key
    options = citation_options(venue_registry, venue)
    client = ScholarlyClient.from_options(options, lake.lake().root / SCHOLARLY_CACHE_DIR,
                                          index=metadata_index(options, venue_registry))
    rows = []
    for paper_id, entries in entries_of(bibliography).items():
        for entry, check in zip(entries, client.check_all(entries)):
            rows.append({"venue": venue, "paper_id": paper_id, "entry_id": entry_id(paper_id, entry.index),
                         **asdict(check)})
        context.log.info(f"{paper_id}: {len(entries)} entries checked against {list(options.metadata) or 'no service'}")
    frame = pl.DataFrame(rows, schema=REFERENCE_CHECK_SCHEMA)
    yield dg.Output(frame, metadata={"services": dg.MetadataValue.json(list(options.metadata)),
                                     "by_status": dg.MetadataValue.json(
                                         dict(frame.group_by("status").len().iter_rows()))})
    yield gate("no_suspicious_references", [Expect(frame, "ExpectColumnValuesToNotBeInSet", ("entry_id",),
                                                   {"column": "status", "value_set": [SUSPICIOUS, NOT_FOUND]})],
               blocking=False)


CITED_MANUSCRIPT_SCHEMA = {
    "venue": pl.String, "cited_key": pl.String, "pdf_sha256": pl.String, "lake_path": pl.String, "parser": pl.String,
    "parser_version": pl.String, "pages": pl.Int64, "n_blocks": pl.Int64, "blocks": pl.List(BLOCK_TYPE),
    "page_sizes": pl.List(PAGE_SIZE_TYPE),
}


# Parsed manuscripts read at a time when a shard gathers the venue's titles (a few MB of blocks each).
MANUSCRIPTS_PER_READ = 64


def venue_manuscripts(parsed_manuscripts: pq.ParquetFile) -> tuple[dict[str, str], dict[str, str | None]]:
    """The venue's manuscript titles (manuscript_titles) and each manuscript's PDF sha256, read batch by batch: every
    shard needs every title, never every manuscript's blocks in memory at once."""
    titles: dict[str, str] = {}
    pdfs: dict[str, str | None] = {}
    for batch in parsed_manuscripts.iter_batches(batch_size=MANUSCRIPTS_PER_READ,
                                                 columns=["paper_id", "pdf_sha256", "blocks"]):
        frame = pl.from_arrow(batch)
        titles.update(manuscript_titles(frame))
        pdfs.update(frame.select("paper_id", "pdf_sha256").rows())
    return titles, pdfs


OPEN_ACCESS_URLS = "open_access_urls"  # an entry's PDF locations from its reference check, carried to its shard


@dg.op(out=dg.DynamicOut(pl.DataFrame, io_manager_key=SHARD_IO_MANAGER))
def split_entries_to_resolve(context: dg.OpExecutionContext, bibliography: pl.DataFrame,
                             reference_checks: pl.DataFrame, venue_registry: VenueRegistryResource):
    """The venue's parsed bibliography entries, each with the open-access locations its reference check found, in
    shards of the citing papers."""
    entries = bibliography.filter(pl.col("parse_status") != NO_REFERENCES)
    open_access = dict(reference_checks.select("entry_id", OPEN_ACCESS_URLS).rows())
    entries = entries.with_columns(pl.Series(OPEN_ACCESS_URLS, [open_access.get(key) or [] for key in
                                                                entries["entry_id"]], dtype=pl.List(pl.String)))
    yield from split_by_paper(entries, venue_registry.venue(context.partition_key).shards, context.log)


@dg.op(out={"resolutions": dg.Out(pl.DataFrame, io_manager_key=SHARD_IO_MANAGER),
            "parsed": dg.Out(pl.DataFrame, io_manager_key=SHARD_IO_MANAGER)},
       tags=queue_tags("pdf"))
def resolve_cited_shard(context: dg.OpExecutionContext, shard: pl.DataFrame, parsed_manuscripts: pq.ParquetFile,
                        lake: LakeResource, venue_registry: VenueRegistryResource,
                        document_parser: DocumentParserResource):
    """Resolve the shard's entries, and parse the cited PDFs they resolved to (each once in the shard: the store
    keeps a parse by content hash)."""
    venue = context.partition_key
    options = citation_options(venue_registry, venue)
    library = citation_library(context, venue_registry, options)
    store = CitedPaperStore(lake.lake().root, document_parser.parser(lake.lake()))
    resolver = CitedPaperResolver(store)
    titles, own_pdfs = venue_manuscripts(parsed_manuscripts)
    placed = {row["entry_id"]: row for row in shard.select("entry_id", OPEN_ACCESS_URLS, SHARD, POSITION)
              .iter_rows(named=True)}
    rows = []
    for paper_id, entries in entries_of(shard).items():
        # A paper never cites itself: its own PDF (in the library too, say) and its own title are no candidates.
        others = {other: title for other, title in titles.items() if other != paper_id}
        shelf = replace(library, files=[f for f in library.files if f.sha256 != own_pdfs.get(paper_id)]) \
            if library else None
        for entry in entries:
            key = entry_id(paper_id, entry.index)
            resolution = resolver.resolve_entry(entry, options, shelf, others, placed[key][OPEN_ACCESS_URLS] or ())
            rows.append({"venue": venue, "paper_id": paper_id, "entry_id": key, **resolution.row(),
                         SHARD: placed[key][SHARD], POSITION: placed[key][POSITION]})
            context.log.info(f"{key}: {resolution.status}" + (f" ({resolution.source})" if resolution.source else ""))
    frame = pl.DataFrame(rows, schema={**CITED_PAPER_SCHEMA, **SHARD_SCHEMA})
    parsed = []
    for sha256 in sorted(set(frame.filter(pl.col("status") == RESOLVED)["pdf_sha256"].drop_nulls())):
        document = store.parse(sha256)
        parsed.append({**parsed_row(venue, sha256, document), "cited_key": f"sha256:{sha256}",
                       "lake_path": store.lake_path(sha256)})
    yield dg.Output(frame, output_name="resolutions")
    yield dg.Output(pl.DataFrame(parsed, schema={**PARSED_SCHEMA, **CITED_MANUSCRIPT_SCHEMA}).select(
        list(CITED_MANUSCRIPT_SCHEMA)), output_name="parsed")


@dg.op(out={"cited_papers": dg.Out(pl.DataFrame), "cited_manuscripts": dg.Out(pl.DataFrame),
            "cited_papers_found": dg.Out()})
def assemble_cited_papers(resolutions: list[pl.DataFrame], parsed: list[pl.DataFrame]):
    """The venue's resolutions from its shards', in the bibliography's order, and its cited manuscripts: a PDF two
    shards' entries resolved to is parsed in both (the same blocks) and kept once, in sha256 order."""
    frame, sharding = assemble_shards(resolutions)
    manuscripts = pl.concat(parsed).unique("pdf_sha256", keep="first").sort("pdf_sha256").rechunk()
    by_status = dict(frame.group_by("status").len().iter_rows())
    yield dg.Output(frame, output_name="cited_papers", metadata={
        "entries": frame.height, "by_status": dg.MetadataValue.json(by_status),
        "by_source": dg.MetadataValue.json(dict(frame.drop_nulls("source").group_by("source").len().iter_rows())),
        **sharding})
    yield dg.Output(manuscripts, output_name="cited_manuscripts", metadata={"pdfs_parsed": manuscripts.height})
    found = frame.group_by("paper_id").agg((pl.col("status") == RESOLVED).sum().alias("resolved"))
    yield gate("cited_papers_found", [Expect(found, "ExpectColumnValuesToBeBetween", ("paper_id",),
                                             {"column": "resolved", "min_value": 1})], blocking=False,
               asset_key="cited_papers")


@dg.graph_multi_asset(
    partitions_def=venue_partitions, group_name=GROUP,
    outs={
        "cited_papers": dg.AssetOut(
            kinds={"python", "parquet"},
            description="Each bibliography entry resolved to a full text (the venue's library folder, the venue's "
                        "own manuscripts, arXiv, the open-access locations its metadata names) that passed the "
                        "right-paper check, or the reason it was not, with every source tried."),
        "cited_manuscripts": dg.AssetOut(
            kinds={"python", "parquet"},
            description="The cited papers' PDFs (content-addressed under <lake>/cited_pdfs/) parsed by the "
                        "manuscript parser: the same blocks and positions as the venue's manuscripts."),
    },
    check_specs=[dg.AssetCheckSpec(
        "cited_papers_found", asset="cited_papers",
        description="Share of entries resolved to a full text; a warning when none of a manuscript's entries could "
                    "be had (its citances can then only be Not Enough Information).")],
)
def cited_papers(bibliography: pl.DataFrame, reference_checks: pl.DataFrame, parsed_manuscripts: pl.DataFrame):
    """Resolve every parsed entry, in the venue's `citations.resolve` order (default: its library folder, then the
    venue's own manuscripts; arXiv and open-access downloads only when the venue lists them). A full text is
    taken only when the entry's title is on its first page; a refused one (the wrong paper, encrypted, image-only)
    leaves the entry `rejected` with the reason, and the next source is tried. Taken PDFs are stored once by
    content hash and parsed by the manuscript parser. One step per shard of the venue's citing papers."""
    resolutions, parsed = split_entries_to_resolve(bibliography, reference_checks).map(
        lambda shard: resolve_cited_shard(shard, parsed_manuscripts))
    papers, manuscripts, found = assemble_cited_papers(resolutions.collect(), parsed.collect())
    return {"cited_papers": papers, "cited_manuscripts": manuscripts, "cited_papers_cited_papers_found": found}


ENRICHMENT_SCHEMA = {
    "venue": pl.String, "paper_id": pl.String, "citance_id": pl.String, "status": pl.String, "claim_type": pl.String,
    "hedge_level": pl.String, "supported_text": pl.String, "reason": pl.String, "call_id": pl.String,
    "prompt_id": pl.String,
}
PLANNED_ENRICHMENT_SCHEMA = {**ENRICHMENT_SCHEMA, "text": pl.String, PROMPT_VARIABLES: pl.String}


@dg.op(out=dg.DynamicOut(pl.DataFrame, io_manager_key=SHARD_IO_MANAGER))
def plan_citance_tags(context: dg.OpExecutionContext, citances: pl.DataFrame, venue_registry: VenueRegistryResource):
    """Every citance's enrichment row in shards of the citing papers: with the tagger's prompt when the venue turns
    `citations.enrichment` on, else complete (`off`)."""
    enrichment = citation_options(venue_registry, context.partition_key).enrichment
    rows = [{"venue": venue, "paper_id": paper_id, "citance_id": citance_id, "text": text,
             **({PROMPT_VARIABLES: json.dumps(verdicts.tag_variables(text))} if enrichment
                else {"status": verdicts.STATUS_OFF})}
            for venue, paper_id, citance_id, text in citances.select("venue", "paper_id", "citance_id", "text").rows()]
    yield from split_by_paper(pl.DataFrame(rows, schema=PLANNED_ENRICHMENT_SCHEMA),
                              venue_registry.venue(context.partition_key).shards, context.log)


@dg.op(out={"tags": dg.Out(pl.DataFrame, io_manager_key=SHARD_IO_MANAGER),
            "usage": dg.Out(pl.DataFrame, io_manager_key=SHARD_IO_MANAGER)},
       pool="llm", tags=queue_tags("llm"))
def tag_citance_shard(context: dg.OpExecutionContext, shard: pl.DataFrame, lake: LakeResource,
                      llm: LLMGatewayResource, venue_registry: VenueRegistryResource):
    """The `citance_tagger`'s reading of each citance of the shard that asks for one."""
    def tagged(row: dict, result) -> dict:  # noqa: ANN001
        tag = verdicts.parse_citance_tag(result.error, result.raw_response, row["text"])
        return {"status": tag.status, "claim_type": tag.claim_type, "hedge_level": tag.hedge_level,
                "supported_text": tag.supported_text, "reason": tag.reason, "call_id": result.call_id or None,
                "prompt_id": verdicts.TAG_CITANCE_PROMPT}

    rows, usage = answered_rows(context, shard, verdicts.CITANCE_TAGGER_ROLE, verdicts.TAG_CITANCE_PROMPT, tagged,
                                lake, llm, venue_registry)
    yield dg.Output(pl.DataFrame(rows, schema={**PLANNED_ENRICHMENT_SCHEMA, **SHARD_SCHEMA}), output_name="tags")
    yield dg.Output(usage, output_name="usage")


@dg.op
def assemble_citance_enrichment(context: dg.OpExecutionContext, tags: list[pl.DataFrame],
                                usage: list[pl.DataFrame]) -> pl.DataFrame:
    """The venue's citance readings from its shards', in the order of `citances`."""
    frame, sharding = assemble_shards(tags)
    context.add_output_metadata({**shard_usage_metadata(usage), **sharding})
    return frame.select(list(ENRICHMENT_SCHEMA))


@dg.graph_asset(partitions_def=venue_partitions, group_name=GROUP, kinds={"python", "parquet"})
def citance_enrichment(citances: pl.DataFrame) -> pl.DataFrame:
    """The `citance_tagger` role's reading of each citance (claim type, hedge level, the part of the sentence the
    citation supports), when the venue turns `citations.enrichment` on; otherwise every row is `off` and no model is
    called. An unusable answer keeps status parse_failed with the reason: the rule-based claim type is used then.
    The tagger's calls run one step per shard of the venue's citing papers."""
    tags, usage = plan_citance_tags(citances).map(tag_citance_shard)
    return assemble_citance_enrichment(tags.collect(), usage.collect())


EVIDENCE_SCHEMA = {
    "venue": pl.String, "paper_id": pl.String, "citance_id": pl.String, "entry_id": pl.String, "cited_key": pl.String,
    "mode": pl.String, "retriever": pl.String, "status": pl.String, "rank": pl.Int64, "passage_id": pl.String,
    "text": pl.String, "score": pl.Float64, "page": pl.Int64, "regions": pl.List(REGION_TYPE),
    "window_sentences": pl.Int64, "reason": pl.String,
}


def _own_spans(citance: dict, entry: str) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Every marker's span in the sentence, and those of the markers citing `entry`."""
    offset = citance["char_start"]
    spans = [(marker["start"] - offset, marker["end"] - offset) for marker in citance["markers"]]
    own = [span for span, marker in zip(spans, citance["markers"]) if entry in marker["entry_ids"]]
    return spans, own


class Reading(NamedTuple):
    """What a citance claims, as its evidence and verdicts are chosen and asked for."""

    claim_type: str
    hedged: bool


def citance_readings(citances: pl.DataFrame, citance_enrichment: pl.DataFrame) -> dict[str, Reading]:
    """citance id -> its claim type and whether it is hedged: the tagger's reading when it answered (hedged unless
    its hedge level is none), else the rule-based one."""
    tagged = {row["citance_id"]: Reading(row["claim_type"], row["hedge_level"] != "none")
              for row in citance_enrichment.iter_rows(named=True)
              if row["status"] == verdicts.STATUS_OK and row["claim_type"]}
    return {cid: tagged.get(cid, Reading(rule, hedged))
            for cid, rule, hedged in zip(citances["citance_id"], citances["claim_type"], citances["hedged"])}


# One row per (citance, cited entry) to rank evidence for: the query (the citance without its markers) and window
# length are read for the whole venue; the cited key, or why there is none, says which paper's windows to rank.
EVIDENCE_REQUEST_SCHEMA = {
    "venue": pl.String, "paper_id": pl.String, "citance_id": pl.String, "entry_id": pl.String, "query": pl.String,
    "window_sentences": pl.Int64, "cited_key": pl.String, "reason": pl.String,
}


def parsed_keys(cited_manuscripts: pq.ParquetFile, parsed_manuscripts: pq.ParquetFile) -> set[str]:
    """The cited keys whose full text is parsed: the stored cited PDFs' and the venue's own manuscripts'."""
    cited = cited_manuscripts.read(columns=["cited_key"]).column("cited_key").to_pylist()
    own = parsed_manuscripts.read(columns=["paper_id"]).column("paper_id").to_pylist()
    return set(cited) | {f"forum:{paper_id}" for paper_id in own}


@dg.op(out=dg.DynamicOut(pl.DataFrame, io_manager_key=SHARD_IO_MANAGER))
def plan_citation_evidence(context: dg.OpExecutionContext, citances: pl.DataFrame, citance_enrichment: pl.DataFrame,
                           cited_papers: pl.DataFrame, cited_manuscripts: pq.ParquetFile,
                           parsed_manuscripts: pq.ParquetFile, venue_registry: VenueRegistryResource):
    """Every (citance, cited entry) pair of the venue in its final order, with its query and window length, in
    shards of the citing papers; no full text is read here."""
    venue = context.partition_key
    resolutions = {row["entry_id"]: row for row in cited_papers.iter_rows(named=True)}
    parsed = parsed_keys(cited_manuscripts, parsed_manuscripts)
    readings = citance_readings(citances, citance_enrichment)
    rows = []
    for citance in citances.iter_rows(named=True):
        for entry in citance["entry_ids"]:
            key = cited_key(resolutions, entry, parsed)
            spans, own = _own_spans(citance, entry)
            rows.append({"venue": venue, "paper_id": citance["paper_id"], "citance_id": citance["citance_id"],
                         "entry_id": entry, "query": evidence.query_of(citance["text"], spans, own),
                         "window_sentences": evidence.window_length(readings[citance["citance_id"]].claim_type),
                         "cited_key": key, "reason": None if key else why_not_cited(resolutions, entry)})
    yield from split_by_paper(pl.DataFrame(rows, schema=EVIDENCE_REQUEST_SCHEMA),
                              venue_registry.venue(context.partition_key).shards, context.log, what="citation pairs")


def cited_blocks(keys: set[str], cited_manuscripts: pq.ParquetFile,
                 parsed_manuscripts: pq.ParquetFile) -> dict[str, list[Block]]:
    """The blocks of the papers `keys` names, read batch by batch: a shard holds only the papers its citances cite."""
    blocks: dict[str, list[Block]] = {}
    for source, column, prefix in ((cited_manuscripts, "cited_key", ""), (parsed_manuscripts, "paper_id", "forum:")):
        for batch in source.iter_batches(batch_size=MANUSCRIPTS_PER_READ, columns=[column, "blocks"]):
            for name, records in zip(batch.column(column).to_pylist(), batch.column("blocks").to_pylist()):
                if f"{prefix}{name}" in keys:
                    blocks[f"{prefix}{name}"] = [Block.from_record(record) for record in records]
    return blocks


@dg.op(out=dg.Out(pl.DataFrame, io_manager_key=SHARD_IO_MANAGER), tags=queue_tags("embedding"))
def rank_evidence_shard(context: dg.OpExecutionContext, shard: pl.DataFrame, cited_manuscripts: pq.ParquetFile,
                        parsed_manuscripts: pq.ParquetFile, lake: LakeResource, venue_registry: VenueRegistryResource,
                        embedding_model: EmbeddingResource, retrieval: RetrievalResource) -> pl.DataFrame:
    """The shard's pairs with their ranked windows: each cited paper cut (and embedded) once in the shard."""
    options = citation_options(venue_registry, context.partition_key)
    blocks = cited_blocks(set(shard["cited_key"].drop_nulls()), cited_manuscripts, parsed_manuscripts)
    ranker = WindowRanker(options, lake, embedding_model, retrieval)
    rows = []
    for pair in shard.iter_rows(named=True):
        base = {"venue": pair["venue"], "paper_id": pair["paper_id"], "citance_id": pair["citance_id"],
                "entry_id": pair["entry_id"], "mode": MODE_WINDOWS, "retriever": options.retriever,
                SHARD: pair[SHARD], POSITION: pair[POSITION]}
        key = pair["cited_key"]
        if key is None:
            rows.append({**base, "status": verdicts.STATUS_NO_CITED_PAPER, "reason": pair["reason"]})
            continue
        ranked, none_shown = ranker.rank(key, blocks[key], pair["query"], pair["window_sentences"])
        if none_shown is not None:
            status, reason = none_shown
            rows.append({**base, "cited_key": key, "status": status, "reason": reason})
        for rank, (window, score) in enumerate(ranked, start=1):
            rows.append({**base, "cited_key": key, "status": verdicts.STATUS_OK, "rank": rank,
                         "passage_id": window.passage_id, "text": window.text, "score": float(score),
                         "page": window.page, "regions": [vars(region) for region in window.regions],
                         "window_sentences": window.window_sentences})
    return pl.DataFrame(rows, schema={**EVIDENCE_SCHEMA, **SHARD_SCHEMA})


@dg.op
def assemble_citation_evidence(context: dg.OpExecutionContext, ranked: list[pl.DataFrame]) -> pl.DataFrame:
    """The venue's evidence rows from its shards', in the venue's pair order and, inside a pair, by rank."""
    frame, sharding = assemble_shards(ranked)
    pairs = frame.unique(["citance_id", "entry_id"])
    context.add_output_metadata({"pairs": pairs.height, **sharding,
                                 "by_status": dg.MetadataValue.json(dict(pairs.group_by("status").len().iter_rows()))})
    return frame


@dg.graph_asset(partitions_def=venue_partitions, group_name=GROUP, kinds={"python", "parquet", "pytorch"})
def citation_evidence(citances: pl.DataFrame, citance_enrichment: pl.DataFrame, cited_papers: pl.DataFrame,
                      cited_manuscripts: pl.DataFrame, parsed_manuscripts: pl.DataFrame) -> pl.DataFrame:
    """Per citance and cited entry, the top `citations.k` windows of consecutive sentences of the cited paper (3
    sentences, 5 for a causal or predictive claim) ranked for the citance with its markers removed by the venue's
    retriever (bm25, dense, hybrid; +rerank with the local reranker), each with its page and boxes. An entry whose
    full text could not be had keeps one row `no_cited_paper` with the reason. The ranking runs one step per shard
    of the venue's citing papers (queue `embedding`), each reading only the papers its citances cite."""
    ranked = plan_citation_evidence(citances, citance_enrichment, cited_papers, cited_manuscripts,
                                    parsed_manuscripts).map(
        lambda shard: rank_evidence_shard(shard, cited_manuscripts, parsed_manuscripts))
    return assemble_citation_evidence(ranked.collect())


VERDICT_SCHEMA = {
    "venue": pl.String, "paper_id": pl.String, "citance_id": pl.String, "entry_id": pl.String, "cited_key": pl.String,
    "verifier": pl.String, "mode": pl.String, "status": pl.String, "label": pl.String, "explanation": pl.String,
    "reason": pl.String, "passage_ids": pl.List(pl.String), "call_id": pl.String, "prompt_id": pl.String,
    "tokens_in": pl.Int64, "tokens_out": pl.Int64,
}


@dataclass
class _Pair:
    citance: dict
    entry: str
    key: str | None
    passages: list[tuple[str, str]]
    reason: str | None = None
    no_call: verdicts.Verdict | None = None  # the verdict given without a call (no relevant passage)


def _pairs(citances: pl.DataFrame, citation_evidence: pl.DataFrame, papers: CitedPapers, mode: str) -> list[_Pair]:
    """Every (citance, cited entry) with what the verifier is shown in `mode`: the ranked windows, or the cited
    paper whole."""
    shown: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for row in citation_evidence.filter(pl.col("status") == verdicts.STATUS_OK).sort("rank").iter_rows(named=True):
        shown.setdefault((row["citance_id"], row["entry_id"]), []).append((row["passage_id"], row["text"]))
    irrelevant = citation_evidence.filter(pl.col("status") == verdicts.STATUS_NO_RELEVANT_PASSAGE)
    no_call = {(row["citance_id"], row["entry_id"]): verdicts.no_relevant_passage(row["reason"])
               for row in irrelevant.iter_rows(named=True)}
    pairs = []
    for citance in citances.iter_rows(named=True):
        for entry in citance["entry_ids"]:
            key = papers.cited_key(entry)
            if key is None:
                pairs.append(_Pair(citance, entry, None, [], papers.why_not(entry)))
            elif mode == MODE_MERGED:
                pairs.append(_Pair(citance, entry, key, evidence.merged_passages(key, papers.blocks[key])))
            else:
                ids = (citance["citance_id"], entry)
                pairs.append(_Pair(citance, entry, key, shown.get(ids, []), no_call=no_call.get(ids)))
    return pairs


def _no_call_row(venue: str, pair: _Pair, verifier: str, mode: str, verdict: verdicts.Verdict | None = None) -> dict:
    verdict = verdict or pair.no_call or (verdicts.no_cited_paper(pair.reason or "the cited paper could not be had")
                          if pair.key is None else verdicts.Verdict(verdicts.STATUS_NO_PASSAGES, None, None,
                                                                    "no passage of the cited paper to show"))
    return {"venue": venue, "paper_id": pair.citance["paper_id"], "citance_id": pair.citance["citance_id"],
            "entry_id": pair.entry, "cited_key": pair.key, "verifier": verifier, "mode": mode,
            "status": verdict.status, "label": verdict.label, "explanation": verdict.explanation,
            "reason": verdict.reason, "passage_ids": [], "call_id": None, "prompt_id": None, "tokens_in": 0,
            "tokens_out": 0}


def _planned_verdict_rows(venue: str, verifier: str, spec, mode: str, pairs: list[_Pair],  # noqa: ANN001
                          readings: dict[str, Reading], papers: CitedPapers, template) -> list[dict]:  # noqa: ANN001
    """One verifier's rows of one mode in the table's order: the pairs it is not asked about (no passage; in merged
    mode, a paper too long for its window) complete, then the pairs it is asked about with their prompt's
    variables (their verdict fields are the call's)."""
    rows, asked = [], []
    for pair in pairs:
        if not pair.passages:
            rows.append(_no_call_row(venue, pair, verifier, mode))
            continue
        reading = readings[pair.citance["citance_id"]]
        variables = verdicts.verdict_variables(pair.citance["text"], reading.claim_type, reading.hedged,
                                               papers.title(pair.key) or None, pair.passages)
        if mode == MODE_MERGED:
            fit = evidence.fits_window(pair.passages, spec.context_window, spec.decoding.get("max_tokens"),
                                       template.system + template.user.format(**{**variables, "passages": ""}))
            if not fit:
                rows.append(_no_call_row(venue, pair, verifier, mode, verdicts.too_long(fit.reason)))
                continue
        asked.append({**_no_call_row(venue, pair, verifier, mode), "status": None, "reason": None,
                      "passage_ids": [passage_id for passage_id, _ in pair.passages],
                      "prompt_id": verdicts.VERIFY_CITATION_PROMPT, PROMPT_VARIABLES: json.dumps(variables)})
    return rows + asked


PLANNED_VERDICT_SCHEMA = {**VERDICT_SCHEMA, PROMPT_VARIABLES: pl.String}


@dg.op(out=dg.DynamicOut(pl.DataFrame, io_manager_key=SHARD_IO_MANAGER))
def plan_citation_verdicts(context: dg.OpExecutionContext, citances: pl.DataFrame, citance_enrichment: pl.DataFrame,
                           citation_evidence: pl.DataFrame, cited_papers: pl.DataFrame,
                           cited_manuscripts: pl.DataFrame, parsed_manuscripts: pl.DataFrame,
                           llm: LLMGatewayResource, venue_registry: VenueRegistryResource):
    """Every (citance, cited entry, verifier, mode) row of the venue in its final order, in shards of the citing
    papers: the rows that need a call carry their prompt's variables, the others are complete. What each verifier
    is shown is chosen here for the whole venue (no model is called), so only the verifiers' calls run per shard."""
    venue = context.partition_key
    options = citation_options(venue_registry, venue)
    papers = CitedPapers(cited_papers, cited_manuscripts, parsed_manuscripts)
    readings = citance_readings(citances, citance_enrichment)
    template = load_prompt(verdicts.VERIFY_CITATION_PROMPT)
    plans = {mode: _pairs(citances, citation_evidence, papers, mode) for mode in options.modes}
    # The role is read only when there is something to ask it: a venue whose citations resolve to nothing needs no
    # citation verifier configured.
    role = verdicts.CITATION_VERIFIERS_ROLE
    models = ModelRegistry.load(profile=llm.profile)
    verifiers = models.models_for_role(role) if any(pair.passages for pairs in plans.values() for pair in pairs) \
        else []
    rows = [row for verifier in verifiers for mode, pairs in plans.items()
            for row in _planned_verdict_rows(venue, verifier, models.model(verifier), mode, pairs, readings, papers,
                                             template)]
    if not verifiers:  # nothing to call: every pair keeps its no-call verdict under the role's name
        rows = [_no_call_row(venue, pair, role, mode) for mode, pairs in plans.items() for pair in pairs]
    yield from split_by_paper(pl.DataFrame(rows, schema=PLANNED_VERDICT_SCHEMA),
                              venue_registry.venue(context.partition_key).shards, context.log)


@dg.op(out={"judged": dg.Out(pl.DataFrame, io_manager_key=SHARD_IO_MANAGER),
            "usage": dg.Out(pl.DataFrame, io_manager_key=SHARD_IO_MANAGER)},
       pool="llm", tags=queue_tags("llm"))
def judge_citation_shard(context: dg.OpExecutionContext, shard: pl.DataFrame, lake: LakeResource,
                         llm: LLMGatewayResource, venue_registry: VenueRegistryResource):
    """Each verifier's verdict on the shard's rows that ask for one, per verifier and mode in the venue's order."""
    def judged(_row: dict, result) -> dict:  # noqa: ANN001
        return {**verdict_fields(verdicts.call_verdict(result.error, result.raw_response)),
                "call_id": result.call_id or None, "tokens_in": result.tokens_in, "tokens_out": result.tokens_out}

    rows, usage = answered_rows(context, shard, verdicts.CITATION_VERIFIERS_ROLE, verdicts.VERIFY_CITATION_PROMPT,
                                judged, lake, llm, venue_registry, by=("verifier", "mode"))
    yield dg.Output(pl.DataFrame(rows, schema={**PLANNED_VERDICT_SCHEMA, **SHARD_SCHEMA}), output_name="judged")
    yield dg.Output(usage, output_name="usage")


@dg.op
def assemble_citation_verdicts(context: dg.OpExecutionContext, judged: list[pl.DataFrame],
                               usage: list[pl.DataFrame]) -> pl.DataFrame:
    """The venue's citation verdicts from its shards', in the planned order."""
    frame, sharding = assemble_shards(judged)
    frame = frame.select(list(VERDICT_SCHEMA))
    context.add_output_metadata({**shard_usage_metadata(usage), "by_label": dg.MetadataValue.json(
        {str(k): v for k, v in frame.group_by("label").len().iter_rows()}),
        "by_status": dg.MetadataValue.json(dict(frame.group_by("status").len().iter_rows())), **sharding})
    return frame


@dg.graph_asset(partitions_def=venue_partitions, group_name=GROUP, kinds={"python", "parquet"})
def citation_verdicts(citances: pl.DataFrame, citance_enrichment: pl.DataFrame, citation_evidence: pl.DataFrame,
                      cited_papers: pl.DataFrame, cited_manuscripts: pl.DataFrame,
                      parsed_manuscripts: pl.DataFrame) -> pl.DataFrame:
    """Per citance, cited entry, verifier (the `citation_verifiers` role) and evidence mode (`citations.modes`:
    windows, the ranked passages; merged, the cited paper whole when it fits the model's window): Supported,
    Partially Supported, Not Supported or Not Enough Information with the model's explanation and the passages shown.
    An entry whose paper could not be had is Not Enough Information with the reason and no call (never a guess); a
    paper too long for the window is `too_long`, never truncated; an unusable answer keeps status parse_failed. The
    verifiers' calls run one step per shard of the venue's citing papers."""
    judged, usage = plan_citation_verdicts(citances, citance_enrichment, citation_evidence, cited_papers,
                                           cited_manuscripts, parsed_manuscripts).map(judge_citation_shard)
    return assemble_citation_verdicts(judged.collect(), usage.collect())


@dg.asset(partitions_def=venue_partitions, group_name=GROUP, kinds={"python", "parquet"})
def citation_metrics(context: dg.AssetExecutionContext, citances: pl.DataFrame, bibliography: pl.DataFrame,
                     reference_checks: pl.DataFrame, cited_papers: pl.DataFrame, citation_evidence: pl.DataFrame,
                     citation_verdicts: pl.DataFrame, venue_registry: VenueRegistryResource) -> pl.DataFrame:
    """The citation half's figures per stage (detection, parsing, reference checks, resolution, localisation,
    verdicts), each beside RefVerifier's published figure where one is comparable (else the note says why); scored
    against the venue's citation answer key (`gold_citations`) when it has one, with the majority-verdict baseline
    and a plain warning when a verifier answers one verdict to everything."""
    venue = venue_registry.venue(context.partition_key)
    gold = load_citation_gold(venue_registry.registry_file().parent / venue.gold_citations,
                              citances.iter_rows(named=True)) \
        if venue.gold_citations else None
    rows = citation_figures(citances, bibliography, reference_checks, cited_papers, citation_evidence,
                            citation_verdicts, gold)
    frame = pl.DataFrame([{"venue": venue.key, **row} for row in rows],
                         schema={"venue": pl.String, **CITATION_METRICS_SCHEMA})
    context.add_output_metadata({"figures": dg.MetadataValue.md(citation_report_markdown(rows)),
                                 "scored_against_key": gold is not None})
    return frame

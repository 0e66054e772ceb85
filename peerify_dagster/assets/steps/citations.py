"""What the citation half's asset modules share (assets/citations.py, review_citations.py, citation_integrity.py
read the same tables the same way; asset modules never import each other): the group, the venue's citation options
and metadata index, bibliography rows as ParsedEntry, the cited papers' full texts, and the planned-row LLM step."""

import json
from collections.abc import Callable, Container
from pathlib import Path

import dagster as dg
import polars as pl

from peerify_dagster.assets.steps.llm import USAGE_SCHEMA, progress_logger, usage_frame, venue_gateway
from peerify_dagster.domain.citations import evidence, verdicts
from peerify_dagster.domain.citations.entries import ParsedEntry
from peerify_dagster.domain.citations.evidence import Window
from peerify_dagster.domain.citations.options import METADATA_INDEX, CitationOptions
from peerify_dagster.domain.citations.resolution import RESOLVED
from peerify_dagster.domain.layout.blocks import Block
from peerify_dagster.domain.retrieval import RETRIEVER_CONFIGS
from peerify_dagster.resources.cited_papers import LibraryIndex, index_library
from peerify_dagster.resources.dagster_resources import (
    EmbeddingResource,
    LakeResource,
    LLMGatewayResource,
    RetrievalResource,
    VenueRegistryResource,
)
from peerify_dagster.resources.metadata_index import MetadataIndex, MetadataIndexError, default_index_path
from peerify_dagster.resources.shard_io import POSITION

GROUP = "citations"


NO_REFERENCES = "no_references"


def citation_options(venue_registry: VenueRegistryResource, venue: str) -> CitationOptions:
    # The registry validates `citations:` when it loads, so a bad option fails there, naming the venue.
    return CitationOptions.from_mapping(venue_registry.venue(venue).citations)


def paper_blocks(parsed_manuscripts: pl.DataFrame) -> dict[str, list[Block]]:
    return {row["paper_id"]: [Block.from_record(block) for block in row["blocks"]]
            for row in parsed_manuscripts.iter_rows(named=True)}


def entry_id(paper_id: str, index: int) -> str:
    return f"{paper_id}:r{index}"


def entries_of(bibliography: pl.DataFrame) -> dict[str, list[ParsedEntry]]:
    """paper id -> its parsed entries (as ParsedEntry, for marker resolution and the lookups)."""
    entries: dict[str, list[ParsedEntry]] = {}
    for row in bibliography.filter(pl.col("parse_status") != NO_REFERENCES).iter_rows(named=True):
        entries.setdefault(row["paper_id"], []).append(ParsedEntry(
            index=row["entry_index"], raw_text=row["raw_text"], label=row["label"], authors=tuple(row["authors"]),
            surnames=tuple(row["surnames"]), title=row["title"], year=row["year"], year_suffix=row["year_suffix"],
            venue=row["published_in"], doi=row["doi"], arxiv_id=row["arxiv_id"], url=row["url"],
            field_sources={item["field"]: item["method"] for item in row["field_sources"]},
            status=row["parse_status"], reason=row["parse_reason"]))
    return entries


def metadata_index(options: CitationOptions, venue_registry: VenueRegistryResource) -> MetadataIndex | None:
    """The offline metadata index when the venue lists it among its sources: `citations.index` (relative to the
    registry file) or the lake's own (`peerify refs index` builds it)."""
    if METADATA_INDEX not in options.metadata:
        return None
    if options.index:
        return MetadataIndex(venue_registry.registry_file().parent / Path(options.index).expanduser())
    try:
        return MetadataIndex(default_index_path())
    except MetadataIndexError as error:  # an s3:// lake: the index is a local file, named by citations.index
        raise dg.Failure(f"citations.metadata lists the index: {error} in the venue's citations.index") from None


CITED_PAPER_SCHEMA = {
    "venue": pl.String, "paper_id": pl.String, "entry_id": pl.String, "status": pl.String, "source": pl.String,
    "locator": pl.String, "cited_key": pl.String, "pdf_sha256": pl.String, "right_paper_score": pl.Float64,
    "reason": pl.String,
    "attempts": pl.List(pl.Struct({"source": pl.String, "outcome": pl.String, "locator": pl.String,
                                   "detail": pl.String})),
}


def manuscript_titles(parsed_manuscripts: pl.DataFrame) -> dict[str, str]:
    """paper id -> the title its parse found (what a citing entry of the same venue names)."""
    titles = {}
    for paper_id, blocks in paper_blocks(parsed_manuscripts).items():
        if title := next((block.text for block in blocks if block.kind == "title"), None):
            titles[paper_id] = title
    return titles


def citation_library(context: dg.OpExecutionContext, venue_registry: VenueRegistryResource,
                     options: CitationOptions) -> LibraryIndex | None:
    """The venue's library folder indexed (`citations.library`, relative to the registry file), None without one."""
    if not options.library:
        return None
    folder = venue_registry.registry_file().parent / Path(options.library).expanduser()
    library = index_library(folder)
    for skipped in library.skipped:
        context.log.warning(f"library {folder}: skipped {skipped}")
    return library


# A planned row of an LLM stage carries its prompt's variables (JSON) to its shard's step, which asks the model;
# null on a row that needs no call. The assembly drops it.
PROMPT_VARIABLES = "prompt_variables"


def answered_rows(context: dg.OpExecutionContext, shard: pl.DataFrame, role: str, prompt: str,
                  fill: Callable[[dict, object], dict], lake: LakeResource, llm: LLMGatewayResource,
                  venue_registry: VenueRegistryResource, by: tuple[str, ...] = ()) -> tuple[list[dict], pl.DataFrame]:
    """The shard's planned rows, each one with prompt variables completed by `fill(row, answer)` from its call, and
    the shard's usage. The calls go to `role`, or, grouped `by` columns whose first names the model, to each group's
    model. No gateway is opened when nothing is to be asked (a venue without enrichment needs no citance tagger)."""
    todo = shard.filter(pl.col(PROMPT_VARIABLES).is_not_null())
    if todo.is_empty():
        return shard.to_dicts(), pl.DataFrame(schema=USAGE_SCHEMA)
    answers = {}
    with venue_gateway(context, llm, lake, venue_registry) as gateway:
        gateway.preflight([role])
        for key, rows in (todo.group_by(*by, maintain_order=True) if by else [((role,), todo)]):
            results = gateway.map(key[0], prompt, [json.loads(variables) for variables in rows[PROMPT_VARIABLES]],
                                  role=role, progress=progress_logger(context, f"{prompt} ({', '.join(key)})"))
            answers.update(zip(rows[POSITION], results))
        usage = usage_frame(gateway)
    return [{**row, **fill(row, answers[row[POSITION]])} if row[POSITION] in answers else row
            for row in shard.iter_rows(named=True)], usage


class CitedPapers:
    """The cited papers' blocks and titles by cited key: a stored PDF's parse (cited_manuscripts) or the venue's own
    manuscript (parsed_manuscripts), and each entry's resolution."""

    def __init__(self, cited_papers: pl.DataFrame, cited_manuscripts: pl.DataFrame,
                 parsed_manuscripts: pl.DataFrame) -> None:
        self.resolutions = {row["entry_id"]: row for row in cited_papers.iter_rows(named=True)}
        own = paper_blocks(parsed_manuscripts)
        self.blocks = {f"forum:{paper_id}": blocks for paper_id, blocks in own.items()}
        for row in cited_manuscripts.iter_rows(named=True):
            self.blocks[row["cited_key"]] = [Block.from_record(block) for block in row["blocks"]]

    def cited_key(self, entry: str) -> str | None:
        """The entry's full text key, None when it could not be had (or its parse is gone)."""
        return cited_key(self.resolutions, entry, self.blocks)

    def why_not(self, entry: str) -> str:
        return why_not_cited(self.resolutions, entry)

    def title(self, key: str) -> str | None:
        return next((block.text for block in self.blocks[key] if block.kind == "title"), None)


def cited_key(resolutions: dict[str, dict], entry: str, parsed: Container[str]) -> str | None:
    """The full text key of `entry` (resolutions: cited_papers' rows by entry id), None when it could not be had or
    its parse is not among `parsed`."""
    row = resolutions.get(entry)
    key = row["cited_key"] if row and row["status"] == RESOLVED else None
    return key if key in parsed else None


def why_not_cited(resolutions: dict[str, dict], entry: str) -> str:
    """Why `entry` has no full text: its resolution's reason."""
    row = resolutions.get(entry)
    return (row["reason"] if row else None) or "the entry was not resolved to a full text"


def verdict_fields(verdict: verdicts.Verdict) -> dict:
    """A verdict's columns of a verdict row."""
    return {"status": verdict.status, "label": verdict.label, "explanation": verdict.explanation,
            "reason": verdict.reason}


NO_PROSE = "the cited paper has no prose to cut into windows"


class WindowRanker:
    """The venue's retriever over cited papers' sentence windows, each paper cut (and embedded, for a dense
    retriever) once per window length: what a citance's evidence and a reviewer's cited work are ranked with.
    `unavailable`: why nothing can be ranked (a reranked retriever without its cross-encoder), else None."""

    def __init__(self, options: CitationOptions, lake: LakeResource, embedding_model: EmbeddingResource,
                 retrieval: RetrievalResource) -> None:
        config = RETRIEVER_CONFIGS[options.retriever]
        self.options = options
        self.cache = embedding_model.cache(lake.lake()) if config.base().needs_query_vector else None
        self.reranker = retrieval.reranker() if config.rerank else None
        self.unavailable = (f"retriever {options.retriever!r} needs a local cross-encoder (PEERIFY_RERANKER_PATH) "
                            "and none is configured") if config.rerank and self.reranker is None else None
        self._windows: dict[tuple[str, int], tuple[list, object]] = {}  # (cited key, length) -> windows, vectors

    def rank(self, key: str, blocks: list[Block], query: str,
             length: int) -> tuple[list[tuple[Window, float]], tuple[str, str] | None]:
        """The top `citations.k` windows of `length` sentences of the paper `key` for `query`, or, when none is
        shown, why: (status, reason)."""
        if self.unavailable:
            return [], (verdicts.STATUS_NO_PASSAGES, self.unavailable)
        if (key, length) not in self._windows:
            cut = evidence.sentence_windows(key, blocks, length)
            vectors = self.cache.embed_with_cache([w.text for w in cut])[0] if self.cache is not None and cut \
                else None
            self._windows[key, length] = (cut, vectors)
        cut, vectors = self._windows[key, length]
        query_vector = self.cache.embedder.embed([query])[0] if self.cache is not None else None
        ranked = evidence.rank_windows(cut, query, self.options.retriever, vectors, query_vector, self.options.k,
                                       self.reranker, self.options.relevance_floor)
        if ranked:
            return ranked, None
        if cut:
            return [], (verdicts.STATUS_NO_RELEVANT_PASSAGE,
                        evidence.no_relevant_passage_reason(self.options.retriever, self.options.relevance_floor))
        return [], (verdicts.STATUS_NO_PASSAGES, NO_PROSE)

"""Stage 6, the citation half: reviewers' own citations. The works each review cites (author-year mentions, arXiv
ids, DOIs, quoted titles: domain/citations/review_citations.py) are matched to the submission's own reference
entries, checked against the venue's metadata sources and resolved to a full text as bibliography entries are; where
the venue turns `citations.review_citations` on, the reviewer's sentence is judged against the cited paper by the
`citation_verifiers` role with the `verify_citation` prompt, through the gateway and its ledger.

A work the submission's bibliography holds takes that entry's reference check and cited paper (nothing is asked
twice); any other is checked by the same ScholarlyClient (same cache) and resolved by the same CitedPaperResolver, in
the venue's `citations.resolve` order, the reviewed paper itself never a candidate."""

import json
from dataclasses import replace

import dagster as dg
import polars as pl

from peerify_dagster.assets.steps.citations import (
    CITED_PAPER_SCHEMA,
    GROUP,
    PROMPT_VARIABLES,
    CitedPapers,
    WindowRanker,
    answered_rows,
    citation_library,
    citation_options,
    entries_of,
    entry_id,
    manuscript_titles,
    metadata_index,
    verdict_fields,
)
from peerify_dagster.assets.steps.llm import shard_usage_metadata
from peerify_dagster.cluster import queue_tags
from peerify_dagster.domain.citations import detection, evidence, verdicts
from peerify_dagster.domain.citations.entries import ParsedEntry
from peerify_dagster.domain.citations.options import MODE_WINDOWS, CitationOptions
from peerify_dagster.domain.citations.resolution import RESOLVED
from peerify_dagster.domain.citations.review_citations import (
    ReviewCitation,
    find_review_citations,
    match_paper_entry,
)
from peerify_dagster.partitions import venue_partitions
from peerify_dagster.resources.cited_papers import CitedPaperResolver, CitedPaperStore
from peerify_dagster.resources.dagster_resources import (
    DocumentParserResource,
    EmbeddingResource,
    LakeResource,
    LLMGatewayResource,
    RetrievalResource,
    VenueRegistryResource,
)
from peerify_dagster.resources.document_parser import ManuscriptParseError
from peerify_dagster.resources.llm_gateway.registry import ModelRegistry
from peerify_dagster.resources.scholarly import CACHE_DIR as SCHOLARLY_CACHE_DIR
from peerify_dagster.resources.scholarly import ScholarlyClient
from peerify_dagster.resources.shard_io import POSITION

REVIEW_CITATION_SCHEMA = {
    "venue": pl.String, "paper_id": pl.String, "review_id": pl.String, "reviewer_id": pl.String,
    "citation_id": pl.String, "kind": pl.String, "key": pl.String, "text": pl.String, "char_start": pl.Int64,
    "char_end": pl.Int64, "sentence": pl.String, "sentence_start": pl.Int64, "query": pl.String,
    "entry_id": pl.String, "entry_text": pl.String, "entry_reason": pl.String, "check_status": pl.String,
    "check_reasons": pl.List(pl.String), "resolution_status": pl.String, "source": pl.String, "locator": pl.String,
    "cited_key": pl.String, "pdf_sha256": pl.String, "resolution_reason": pl.String,
}
PASSAGE_TYPE = pl.Struct({"passage_id": pl.String, "text": pl.String, "score": pl.Float64, "page": pl.Int64})
REVIEW_VERDICT_SCHEMA = {
    "venue": pl.String, "paper_id": pl.String, "review_id": pl.String, "citation_id": pl.String,
    "cited_key": pl.String, "cited_title": pl.String, "verifier": pl.String, "mode": pl.String,
    "retriever": pl.String, "status": pl.String, "label": pl.String, "explanation": pl.String, "reason": pl.String,
    "passages": pl.List(PASSAGE_TYPE), "call_id": pl.String, "prompt_id": pl.String, "tokens_in": pl.Int64,
    "tokens_out": pl.Int64,
}
NOT_RESOLVED = "the cited work was not resolved to a full text"
OFF_REASON = "the venue does not turn citations.review_citations on: no model is asked"


# -- the works each review cites -------------------------------------------------------------------------------------
def _found_in_reviews(venue: str, reviews: pl.DataFrame,
                      entries: dict[str, list[ParsedEntry]]) -> list[tuple[dict, ReviewCitation]]:
    """Every review's cited works as rows (what was found, and the paper's entry it is or why none is) with the work
    itself."""
    found = []
    for review in reviews.sort("paper_id", "review_id").iter_rows(named=True):
        text = review["review_text"] or ""
        citations = find_review_citations(text)
        own = entries.get(review["paper_id"], [])
        for number, citation in enumerate(citations, start=1):
            index, why_not = match_paper_entry(citation, own)
            entry = next((item for item in own if item.index == index), None)
            found.append(({
                "venue": venue, "paper_id": review["paper_id"], "review_id": review["review_id"],
                "reviewer_id": review.get("reviewer_id"), "citation_id": f"{review['review_id']}:w{number}",
                "kind": citation.kind, "key": citation.key, "text": citation.text, "char_start": citation.start,
                "char_end": citation.end, "sentence": text[citation.sentence_start:citation.sentence_end],
                "sentence_start": citation.sentence_start, "query": citation.query,
                "entry_id": entry_id(review["paper_id"], index) if entry else None,
                "entry_text": entry.raw_text if entry else None, "entry_reason": why_not,
            }, citation))
    return found


def _checked(rows: list[tuple[dict, ReviewCitation]], reference_checks: pl.DataFrame, client: ScholarlyClient,
             options: CitationOptions) -> dict[tuple[str, str], list[str]]:
    """Each row's check fields filled in place (a matched entry's reference check, else the client's for the work;
    none when the venue lists no metadata source); the open-access locations found per (kind, key)."""
    if not options.metadata:
        return {}
    by_entry = {row["entry_id"]: row for row in reference_checks.iter_rows(named=True)}
    unmatched = {(row["kind"], row["key"]): citation.record for row, citation in rows if row["entry_id"] is None}
    checks = dict(zip(unmatched, client.check_all(list(unmatched.values()))))
    open_access = {}
    for row, _ in rows:
        check = by_entry.get(row["entry_id"]) if row["entry_id"] else None
        if row["entry_id"] is None:
            found = checks[row["kind"], row["key"]]
            check = {"status": found.status, "reasons": found.reasons}
            open_access[row["kind"], row["key"]] = found.open_access_urls
        if check is not None:
            row.update(check_status=check["status"], check_reasons=check["reasons"])
    return open_access


@dg.asset(partitions_def=venue_partitions, group_name=GROUP, kinds={"python", "parquet"}, op_tags=queue_tags("pdf"))
def review_citations(context: dg.AssetExecutionContext, reviews: pl.DataFrame, bibliography: pl.DataFrame,
                     reference_checks: pl.DataFrame, cited_papers: pl.DataFrame, parsed_manuscripts: pl.DataFrame,
                     lake: LakeResource, venue_registry: VenueRegistryResource,
                     document_parser: DocumentParserResource) -> pl.DataFrame:
    """One row per work a review cites, per sentence of the review that cites it: author-year mentions ("Smith et
    al. 2020", "(Smith and Lee, 2019)"), arXiv ids, DOIs and quoted titles of four words or more, with the sentence
    and the span. A work the submission's bibliography holds (the reviewer cites what the paper cites) names that
    entry and takes its reference check and cited paper; any other is checked against the venue's metadata sources
    (`citations.metadata`, the same cache) and resolved to a full text in the venue's `citations.resolve` order, the
    reviewed paper never a candidate. Rows say why a work matched no entry or could not be had."""
    venue = context.partition_key
    options = citation_options(venue_registry, venue)
    rows = _found_in_reviews(venue, reviews, entries_of(bibliography))
    client = ScholarlyClient.from_options(options, lake.lake().root / SCHOLARLY_CACHE_DIR,
                                          index=metadata_index(options, venue_registry))
    open_access = _checked(rows, reference_checks, client, options)
    resolutions = {row["entry_id"]: row for row in cited_papers.iter_rows(named=True)}
    unmatched = [(row, citation) for row, citation in rows if row["entry_id"] is None]
    resolved_works: dict[tuple[str, str, str], dict] = {}
    if unmatched:
        titles = manuscript_titles(parsed_manuscripts)
        own_pdfs = dict(parsed_manuscripts.select("paper_id", "pdf_sha256").rows())
        library = citation_library(context, venue_registry, options)
        resolver = CitedPaperResolver(CitedPaperStore(lake.lake().root, document_parser.parser(lake.lake())))
        for row, citation in unmatched:
            work = (row["paper_id"], row["kind"], row["key"])
            if work in resolved_works:
                continue
            # A review never cites the paper it reviews as another work: its title and its PDF are no candidates.
            others = {paper: title for paper, title in titles.items() if paper != row["paper_id"]}
            shelf = replace(library, files=[item for item in library.files
                                            if item.sha256 != own_pdfs.get(row["paper_id"])]) if library else None
            resolution = resolver.resolve_entry(citation.record, options, shelf, others,
                                                open_access.get((row["kind"], row["key"])) or ())
            resolved_works[work] = resolution.row()
            context.log.info(f"{row['citation_id']} ({row['kind']} {row['key']}): {resolution.status}")
    for row, _ in rows:
        resolution = resolutions.get(row["entry_id"]) if row["entry_id"] else \
            resolved_works[row["paper_id"], row["kind"], row["key"]]
        if resolution is not None:
            row.update(resolution_status=resolution["status"], source=resolution["source"],
                       locator=resolution["locator"], cited_key=resolution["cited_key"],
                       pdf_sha256=resolution["pdf_sha256"], resolution_reason=resolution["reason"])
    frame = pl.DataFrame([row for row, _ in rows], schema=REVIEW_CITATION_SCHEMA)
    context.add_output_metadata({
        "works": frame.height, "reviews_citing": frame["review_id"].n_unique(),
        "by_kind": dg.MetadataValue.json(dict(frame.group_by("kind").len().iter_rows())),
        "matched_entries": frame["entry_id"].drop_nulls().len(),
        "by_resolution": dg.MetadataValue.json({str(key): count for key, count in
                                                frame.group_by("resolution_status").len().iter_rows()})})
    return frame


# -- the reviewer's sentence against the cited paper ------------------------------------------------------------------
def _passages(ranker: WindowRanker, key: str, blocks: list, query: str) -> tuple[list[dict], verdicts.Verdict | None]:
    """The ranked windows of the paper `key` for `query` as passages, or the verdict given without a call."""
    ranked, none_shown = ranker.rank(key, blocks, query, evidence.window_length(detection.claim_type(query)))
    if none_shown is None:
        return [{"passage_id": window.passage_id, "text": window.text, "score": float(score), "page": window.page}
                for window, score in ranked], None
    status, reason = none_shown
    return [], (verdicts.no_relevant_passage(reason) if status == verdicts.STATUS_NO_RELEVANT_PASSAGE
                else verdicts.Verdict(verdicts.STATUS_NO_PASSAGES, None, None, reason))


def _paper_blocks(review_citations: pl.DataFrame, papers: CitedPapers, lake: LakeResource,
                  document_parser: DocumentParserResource) -> dict[str, str]:
    """Parse the stored PDFs only reviews cite (the bibliography's are in cited_manuscripts) into `papers.blocks`;
    cited key -> why a stored PDF could not be read."""
    keys = {key for key in review_citations.filter(pl.col("resolution_status") == RESOLVED)["cited_key"].drop_nulls()
            if key not in papers.blocks and key.startswith("sha256:")}
    unreadable = {}
    store = CitedPaperStore(lake.lake().root, document_parser.parser(lake.lake())) if keys else None
    for key in sorted(keys):
        try:
            papers.blocks[key] = store.parse(key.removeprefix("sha256:")).blocks
        except (ManuscriptParseError, OSError) as error:
            unreadable[key] = f"the stored PDF {key} could not be parsed: {error}"
    return unreadable


@dg.asset(partitions_def=venue_partitions, group_name=GROUP, kinds={"python", "parquet"}, pool="llm",
          op_tags=queue_tags("llm"))
def review_citation_verdicts(context: dg.AssetExecutionContext, review_citations: pl.DataFrame,
                             cited_manuscripts: pl.DataFrame, parsed_manuscripts: pl.DataFrame, lake: LakeResource,
                             llm: LLMGatewayResource, venue_registry: VenueRegistryResource,
                             embedding_model: EmbeddingResource, retrieval: RetrievalResource,
                             document_parser: DocumentParserResource) -> pl.DataFrame:
    """Per work a review cites and `citation_verifiers` model: the reviewer's sentence judged against the cited paper
    (Supported, Partially Supported, Not Supported, Not Enough Information) with the explanation and the passages
    shown, the top `citations.k` windows of the cited paper ranked for the sentence (its cited works cut out) by the
    venue's retriever, as a citance's are. Only where the venue turns `citations.review_citations` on; otherwise
    every row is `off` and no model is called. A work whose paper could not be had, or none of whose windows is
    relevant, is Not Enough Information with the reason and no call. Windows mode only."""
    venue = context.partition_key
    options = citation_options(venue_registry, venue)
    role = verdicts.CITATION_VERIFIERS_ROLE
    base = [{"venue": venue, "paper_id": row["paper_id"], "review_id": row["review_id"],
             "citation_id": row["citation_id"], "cited_key": row["cited_key"], "verifier": role, "mode": MODE_WINDOWS,
             "passages": [], "tokens_in": 0, "tokens_out": 0} for row in review_citations.iter_rows(named=True)]
    if not options.review_citations:
        frame = pl.DataFrame([{**row, "status": verdicts.STATUS_OFF, "reason": OFF_REASON} for row in base],
                             schema=REVIEW_VERDICT_SCHEMA)
        context.add_output_metadata({"calls_made": 0, "review_citations": False})
        return frame
    papers = CitedPapers(pl.DataFrame(schema=CITED_PAPER_SCHEMA), cited_manuscripts, parsed_manuscripts)
    unreadable = _paper_blocks(review_citations, papers, lake, document_parser)
    ranker = None  # built for the first paper had: a dense retriever loads its embedding model
    planned = []  # (row, its review_citations row, the passages to show, the verdict given without a call)
    for row, work in zip(base, review_citations.iter_rows(named=True)):
        key = work["cited_key"]
        if work["resolution_status"] != RESOLVED or key not in papers.blocks:
            reason = unreadable.get(key) or work["resolution_reason"] or NOT_RESOLVED
            planned.append((row, work, [], verdicts.no_cited_paper(reason)))
            continue
        row.update(cited_title=papers.title(key), retriever=options.retriever)
        ranker = ranker or WindowRanker(options, lake, embedding_model, retrieval)
        planned.append((row, work, *_passages(ranker, key, papers.blocks[key], work["query"])))
    # The role is read only when there is something to ask it (a venue whose reviews cite nothing resolvable needs no
    # citation verifier configured).
    asked = any(passages for _, _, passages, _ in planned)
    verifiers = ModelRegistry.load(profile=llm.profile).models_for_role(role) if asked else [role]
    rows = []
    for verifier in verifiers:
        for row, work, passages, no_call in planned:
            if no_call is not None:
                rows.append({**row, "verifier": verifier, **verdict_fields(no_call)})
                continue
            variables = verdicts.verdict_variables(
                work["sentence"], detection.claim_type(work["query"]), detection.is_hedged(work["query"]),
                row["cited_title"], [(passage["passage_id"], passage["text"]) for passage in passages])
            rows.append({**row, "verifier": verifier, "passages": passages,
                         "prompt_id": verdicts.VERIFY_CITATION_PROMPT, PROMPT_VARIABLES: json.dumps(variables)})
    planned_frame = pl.DataFrame(rows, schema={**REVIEW_VERDICT_SCHEMA, PROMPT_VARIABLES: pl.String}) \
        .with_columns(pl.int_range(pl.len(), dtype=pl.Int64).alias(POSITION))

    def judged(_row: dict, result) -> dict:  # noqa: ANN001 - a gateway CallResult
        return {**verdict_fields(verdicts.call_verdict(result.error, result.raw_response)),
                "call_id": result.call_id or None, "tokens_in": result.tokens_in, "tokens_out": result.tokens_out}

    answered, usage = answered_rows(context, planned_frame, role, verdicts.VERIFY_CITATION_PROMPT, judged, lake, llm,
                                    venue_registry, by=("verifier",))
    frame = pl.DataFrame(answered, schema={**REVIEW_VERDICT_SCHEMA, PROMPT_VARIABLES: pl.String,
                                           POSITION: pl.Int64}).select(list(REVIEW_VERDICT_SCHEMA))
    context.add_output_metadata({**shard_usage_metadata([usage]), "review_citations": True,
                                 "by_status": dg.MetadataValue.json(dict(frame.group_by("status").len().iter_rows()))})
    return frame

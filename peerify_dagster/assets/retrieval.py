"""Stage 4, retrieval: evidence retrieval for claims, restricted to each claim's own manuscript, and its metrics."""

import dagster as dg
import polars as pl

from peerify_dagster.domain.gold_evidence import (
    RELEVANCE_MODES,
    PaperChunk,
    claims_gold_unlocatable,
    claims_without_manuscript,
    gold_chunk_ids,
    has_gold,
    load_claim_key,
)
from peerify_dagster.domain.predictions import SOURCE_ANSWER_KEY, SOURCE_PAPER, SOURCE_REVIEW
from peerify_dagster.domain.retrieval import (
    QUERY_SCHEMA,
    RUN_COLUMNS,
    build_retrievers,
    paper_index_loader,
    retrieve_claims,
)
from peerify_dagster.domain.retrieval_metrics import evaluate_runs
from peerify_dagster.partitions import venue_partitions
from peerify_dagster.resources.dagster_resources import (
    EmbeddingResource,
    LakeResource,
    RetrievalResource,
    VenueRegistryResource,
)

RUN_SCHEMA = {
    "venue": pl.String, "claim_id": pl.String, "paper_id": pl.String, "retriever": pl.String, "rank": pl.Int64,
    "chunk_id": pl.String, "score": pl.Float64, "status": pl.String, "error": pl.String,
}
METRIC_SCHEMA = {
    "venue": pl.String, "retriever": pl.String, "relevance": pl.String, "status": pl.String, "reason": pl.String,
    "n_claims": pl.Int64, "n_claims_scored": pl.Int64, "n_claims_without_manuscript": pl.Int64,
    "n_claims_without_gold": pl.Int64, "n_claims_gold_unlocatable": pl.Int64,
    "recall@1": pl.Float64, "recall@5": pl.Float64, "recall@10": pl.Float64,
    "ndcg@10": pl.Float64, "mrr@10": pl.Float64,
}


@dg.asset(partitions_def=venue_partitions, group_name="retrieval", kinds={"python", "parquet"})
def retrieval_queries(context: dg.AssetExecutionContext, paper_sample: pl.DataFrame, paper_claims: pl.DataFrame,
                      review_claims: pl.DataFrame, claim_types: pl.DataFrame,
                      venue_registry: VenueRegistryResource) -> pl.DataFrame:
    """Claims to retrieve evidence for: (claim id, paper id, claim text) and where their gold evidence is.
    Every venue: its PaperSourced claims (`source` paper_sourced; the rephrased claim is the query, gold = the
    chunks holding its paragraph, label Supported) and its review claims (`source` review, `kind` their claim type;
    no gold chunks: the slices and predictions need their evidence). Venues with an answer key (`gold_claims` in
    venues.yaml) add
    its claims (`source` answer_key; gold = the chunks containing the evidence sentence), limited to the venue's
    chosen papers (`paper_sample`); the key's other claims are counted in the metadata."""
    venue = venue_registry.venue(context.partition_key)
    key_file = venue_registry.registry_file().parent / venue.gold_claims if venue.gold_claims else None
    key_rows = load_claim_key(key_file) if key_file else []
    papers = set(paper_sample["forum_id"])
    rows = [{**r, "source": SOURCE_ANSWER_KEY, "gold_chunk_ids": None} for r in key_rows if r["paper_id"] in papers]
    key_claims_in_venue = len(rows)
    outside = sorted({r["paper_id"] for r in key_rows} - papers)
    if outside:
        context.log.warning(f"{len(key_rows) - len(rows)} answer-key claims are about papers not in the venue's "
                            f"sample and are left out: {outside}")
    rows += [{"claim_id": c["claim_id"], "paper_id": c["paper_id"], "review_id": None, "claim_text": c["claim_text"],
              "kind": "factual", "manuscript_label": c["label"], "rebuttal_label": None,
              "evidence_section": c["section"], "evidence_sentence": None, "source": SOURCE_PAPER,
              "gold_chunk_ids": c["gold_chunk_ids"]}
             for c in paper_claims.iter_rows(named=True)]
    kind_of = dict(zip(claim_types["claim_id"], claim_types["claim_type"]))
    rows += [{"claim_id": c["claim_id"], "paper_id": c["paper_id"], "review_id": c["review_id"],
              "claim_text": c["claim_text"], "kind": kind_of.get(c["claim_id"]), "manuscript_label": None,
              "rebuttal_label": None, "evidence_section": None, "evidence_sentence": None, "source": SOURCE_REVIEW,
              "gold_chunk_ids": None}
             for c in review_claims.iter_rows(named=True)]
    context.add_output_metadata({"claims_in_key": len(key_rows),
                                 "claims_not_in_venue": len(key_rows) - key_claims_in_venue,
                                 "paper_sourced_claims": paper_claims.height,
                                 "review_claims": review_claims.height,
                                 "papers_not_in_venue": dg.MetadataValue.json(outside)})
    return pl.DataFrame([{"venue": venue.key, **r} for r in rows], schema=QUERY_SCHEMA)


@dg.asset(partitions_def=venue_partitions, group_name="retrieval", kinds={"python", "parquet"})
def retrieval_runs(context: dg.AssetExecutionContext, retrieval_queries: pl.DataFrame, chunks: pl.DataFrame,
                   chunk_embeddings: pl.DataFrame, lake: LakeResource, embedding_model: EmbeddingResource,
                   retrieval: RetrievalResource) -> pl.DataFrame:
    """For every claim and every available retrieval configuration: the top-k chunk ids of the claim's own
    manuscript with scores. A claim whose paper has no chunks gets an explicit `no_chunks` row."""
    retrievers, unavailable = build_retrievers(retrieval.retrievers, reranker=retrieval.reranker())
    for name, reason in unavailable.items():
        context.log.warning(f"retriever {name} unavailable: {reason}")
    cache = embedding_model.cache(lake.lake())
    claims = retrieval_queries.select("claim_id", "paper_id", "claim_text").iter_rows()
    rows = retrieve_claims(claims, paper_index_loader(chunks, chunk_embeddings), retrievers,
                           lambda texts: cache.embed_with_cache(texts)[0],
                           k=retrieval.k)
    rows += [{"retriever": name, "status": "unavailable", "error": reason} for name, reason in unavailable.items()]
    frame = pl.DataFrame([{"venue": context.partition_key, **{c: r.get(c) for c in RUN_COLUMNS}} for r in rows],
                         schema=RUN_SCHEMA)
    context.add_output_metadata({"retrievers": dg.MetadataValue.json(sorted(retrievers)),
                                 "unavailable": dg.MetadataValue.json(unavailable),
                                 "no_chunks_rows": int((frame["status"] == "no_chunks").sum())})
    return frame


@dg.asset(partitions_def=venue_partitions, group_name="retrieval", kinds={"python", "parquet"})
def retrieval_metrics(context: dg.AssetExecutionContext, retrieval_runs: pl.DataFrame,
                      retrieval_queries: pl.DataFrame, chunks: pl.DataFrame) -> pl.DataFrame:
    """Recall@1/5/10 (a claim is found at k when any of its relevant chunks is in the top k), nDCG@10 and MRR@10 per
    retriever and relevance mode, over the claims with gold evidence (answer-key claims: their evidence sentence;
    PaperSourced claims: the chunks holding their paragraph). `strict`: relevant = the chunks holding the gold
    evidence; `section` (as the Peerify reference code scores): any chunk of the gold evidence's section too. Gold
    text is matched after Unicode (NFKC, ligatures), whitespace and hyphenation normalisation; claims whose gold no
    chunk holds are counted in `n_claims_gold_unlocatable`, apart from `n_claims_without_gold` (no gold by design:
    review claims, undecidable answer-key claims), and not averaged. Claims with gold whose paper has no chunks (no
    usable manuscript) count as misses: `n_claims` = `n_claims_scored` + `n_claims_without_manuscript`, so a lost
    manuscript lowers recall instead of shrinking the denominator. Configurations that could not run are listed as
    unavailable."""
    chunks_by_paper: dict[str, list[PaperChunk]] = {}
    for paper_id, chunk_id, text, path in chunks.select("paper_id", "chunk_id", "text", "section_path").iter_rows():
        chunks_by_paper.setdefault(paper_id, []).append(PaperChunk(chunk_id, text, tuple(path or ())))
    claims = retrieval_queries.to_dicts()
    without_manuscript = claims_without_manuscript(claims, chunks_by_paper)
    ran = retrieval_runs.filter(pl.col("status") != "unavailable")
    unavailable = retrieval_runs.filter(pl.col("status") == "unavailable")
    rows, unlocatable_by_mode = [], {}
    for relevance in RELEVANCE_MODES:
        gold = gold_chunk_ids(claims, chunks_by_paper, relevance)
        unlocatable = claims_gold_unlocatable(claims, chunks_by_paper, gold)
        if unlocatable:
            context.log.warning(f"{relevance}: {len(unlocatable)} claims have gold evidence that no chunk of their "
                                f"manuscript holds (counted in n_claims_gold_unlocatable): {sorted(unlocatable)}")
        unlocatable_by_mode[relevance] = sorted(unlocatable)
        rows += [{"venue": context.partition_key, "relevance": relevance, "status": "ok", "reason": None, **r}
                 for r in evaluate_runs(ran.iter_rows(named=True), gold, without_manuscript=without_manuscript,
                                        gold_unlocatable=unlocatable)]
        rows += [{"venue": context.partition_key, "retriever": r["retriever"], "relevance": relevance,
                  "status": "unavailable", "reason": r["error"]} for r in unavailable.iter_rows(named=True)]
    frame = pl.DataFrame(rows, schema=METRIC_SCHEMA)
    context.add_output_metadata({"claims_with_gold": sum(map(has_gold, claims)),
                                 "claims_without_manuscript": len(without_manuscript),
                                 "claims_gold_unlocatable": dg.MetadataValue.json(unlocatable_by_mode)})
    return frame

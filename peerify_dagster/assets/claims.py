"""Stage 4a, claims: review claims extracted section by section (and from reviewer follow-ups), cleaned by recorded
rules, typed factual / subjective, and PaperSourced claims written from manuscript paragraphs with known gold
chunks. Every model call goes through the LLM gateway and its `llm_calls` ledger."""

from collections import defaultdict
from collections.abc import Mapping

import dagster as dg
import polars as pl

from peerify_dagster.assets.steps.llm import progress_logger, shard_usage_metadata, usage_frame, venue_gateway
from peerify_dagster.cluster import queue_tags
from peerify_dagster.domain import claims as rules
from peerify_dagster.domain.claims import Candidate, ReviewSection
from peerify_dagster.domain.forum_tables import REVIEW_TEXT_FIELDS, SCORE_FIELDS
from peerify_dagster.domain.layout.blocks import Block
from peerify_dagster.domain.paper_claims import (
    CLAIM_UNUSABLE,
    DUPLICATE_CLAIM,
    GOLD_NOT_FOUND,
    NO_BODY_PARAGRAPHS,
    NO_CHUNKS,
    body_paragraphs,
    draw_paragraphs,
    gold_chunk_ids,
    paper_claim_id,
    rephrasing_problem,
    written_claim_problem,
)
from peerify_dagster.domain.prompts import template_hash
from peerify_dagster.domain.quality import with_found
from peerify_dagster.partitions import venue_partitions
from peerify_dagster.quality.expectations import Expect, gate
from peerify_dagster.resources.dagster_resources import (
    EmbeddingResource,
    LakeResource,
    LLMGatewayResource,
    VenueRegistryResource,
)
from peerify_dagster.resources.shard_io import (
    POSITION,
    SHARD,
    SHARD_IO_MANAGER,
    SHARD_SCHEMA,
    assemble_shards,
    split_by_paper,
)

EXTRACT_PROMPT = "extract_claims"
TAG_PROMPT = "tag_fact"
PAPER_CLAIM_PROMPT = "extract_paper_claim"
REPHRASE_PROMPT = "rephrase_claim"

_TEXT = pl.String
REVIEW_CLAIM_SCHEMA = {
    "venue": _TEXT, "claim_id": _TEXT, "paper_id": _TEXT, "review_id": _TEXT, "reviewer_id": _TEXT, "source": _TEXT,
    "source_id": _TEXT, "section": _TEXT, "claim_order": pl.Int64, "claim_text": _TEXT, "raw_text": _TEXT,
    "span_start": pl.Int64, "span_end": pl.Int64, "span_kind": _TEXT, "span_reason": _TEXT,
    "absorbed_claim_ids": pl.List(_TEXT), "extractor_model": _TEXT, "prompt_id": _TEXT, "prompt_hash": _TEXT,
    "call_id": _TEXT,
}
DROPPED_SCHEMA = {
    "venue": _TEXT, "paper_id": _TEXT, "review_id": _TEXT, "reviewer_id": _TEXT, "source": _TEXT, "source_id": _TEXT,
    "section": _TEXT, "level": _TEXT, "claim_id": _TEXT, "claim_text": _TEXT, "raw_text": _TEXT, "rule": _TEXT,
    "detail": _TEXT, "call_id": _TEXT,
}
CLAIM_TYPE_SCHEMA = {
    "venue": _TEXT, "claim_id": _TEXT, "paper_id": _TEXT, "review_id": _TEXT, "claim_type": _TEXT,
    "rationale": _TEXT, "parse_ok": pl.Boolean, "error": _TEXT, "model": _TEXT, "prompt_hash": _TEXT, "call_id": _TEXT,
}
PAPER_CLAIM_SCHEMA = {
    "venue": _TEXT, "claim_id": _TEXT, "paper_id": _TEXT, "claim_text": _TEXT, "original_claim": _TEXT,
    "label": _TEXT, "paragraph": _TEXT, "section": _TEXT, "section_path": pl.List(_TEXT),
    "gold_chunk_ids": pl.List(_TEXT), "paragraph_order": pl.Int64, "seed": pl.Int64, "draw_order": pl.Int64,
    "extractor_model": _TEXT, "claim_call_id": _TEXT, "rephrase_call_id": _TEXT,
}
PAPER_CLAIM_GAP_SCHEMA = {
    "venue": _TEXT, "paper_id": _TEXT, "paragraph_order": pl.Int64, "reason": _TEXT, "detail": _TEXT, "call_id": _TEXT,
}


class _Unit:
    """One review or reviewer follow-up: the text units sent to the extractor, or why there are none."""

    def __init__(self, row: Mapping, source: str, source_id: str, review_id: str | None,
                 sections: list[ReviewSection], problem: str | None):
        self.row, self.source, self.source_id, self.review_id = row, source, source_id, review_id
        self.sections, self.problem = sections, problem

    def drop_row(self, venue: str, rule: str, detail: str | None = None, section: str | None = None,
                 call_id: str | None = None, level: str = "source") -> dict:
        return {"venue": venue, "paper_id": self.row["paper_id"], "review_id": self.review_id,
                "reviewer_id": self.row.get("reviewer_id"), "source": self.source, "source_id": self.source_id,
                "section": section, "level": level, "claim_id": None, "claim_text": None, "raw_text": None,
                "rule": rule, "detail": detail, "call_id": call_id}


def _review_scope(paper_sample: pl.DataFrame) -> dict[str, set[str] | None]:
    """paper id -> the review ids claims are extracted from (None: every review), per the venue's sampling."""
    scope: dict[str, set[str] | None] = {}
    for row in paper_sample.iter_rows(named=True):
        if row.get("review_scope") == "replied":
            scope[row["forum_id"]] = set(row["replied_review_ids"] or [])
        elif row.get("review_scope") == "one_pair":
            scope[row["forum_id"]] = {row["paired_review_id"]} if row["paired_review_id"] else set()
        else:
            scope[row["forum_id"]] = None
    return scope


def _plan_units(reviews: pl.DataFrame, followups: pl.DataFrame, scope: Mapping[str, set[str] | None]) -> list[_Unit]:
    units = []
    in_scope: set[str] = set()
    for row in reviews.sort("paper_id", "review_id").iter_rows(named=True):
        allowed = scope.get(row["paper_id"])
        sections = rules.review_sections(row, REVIEW_TEXT_FIELDS)
        has_scores = any(row.get(f"{name}_score") is not None for name in SCORE_FIELDS)
        problem = rules.review_problem(sections, has_scores)
        if allowed is not None and row["review_id"] not in allowed:
            problem = rules.UNIT_NOT_SAMPLED
        else:
            in_scope.add(row["review_id"])
        units.append(_Unit(row, rules.SOURCE_REVIEW, row["review_id"], row["review_id"], sections, problem))
    for row in followups.sort("paper_id", "cdate", "comment_id", nulls_last=True).iter_rows(named=True):
        text = (row.get("text") or "").strip()
        sections = [ReviewSection(rules.FOLLOWUP_SECTION, text, (row.get("text") or "").find(text))] if text else []
        problem = rules.review_problem(sections, has_scores=False)
        if row.get("review_id") is None:
            problem = rules.UNIT_NO_REVIEW
        elif row["review_id"] not in in_scope and problem is None:
            problem = rules.UNIT_NOT_SAMPLED
        units.append(_Unit(row, rules.SOURCE_FOLLOWUP, row["comment_id"], row.get("review_id"), sections, problem))
    return units


def _extraction_work(reviews: pl.DataFrame, followups: pl.DataFrame,
                     paper_sample: pl.DataFrame) -> tuple[list[_Unit], list[tuple[_Unit, ReviewSection]]]:
    """The venue's reviews and follow-ups, and the (unit, section) pairs sent to the extractor, in the venue's order
    (the split and the assembly of review_claims plan the same work from the same tables)."""
    units = _plan_units(reviews, followups, _review_scope(paper_sample))
    return units, [(unit, section) for unit in units if unit.problem is None for section in unit.sections]


@dg.op(out=dg.DynamicOut(pl.DataFrame, io_manager_key=SHARD_IO_MANAGER))
def split_review_sections(context: dg.OpExecutionContext, reviews: pl.DataFrame, reviewer_followups: pl.DataFrame,
                          paper_sample: pl.DataFrame, venue_registry: VenueRegistryResource):
    """The review sections and follow-ups to send to the extractor, in shards of the venue's papers."""
    _, work = _extraction_work(reviews, reviewer_followups, paper_sample)
    sections = pl.DataFrame({"paper_id": [unit.row["paper_id"] for unit, _ in work],
                             "review_text": [rules.section_prompt_text(section) for _, section in work]},
                            schema={"paper_id": pl.String, "review_text": pl.String})
    yield from split_by_paper(sections, venue_registry.venue(context.partition_key).shards, context.log)


# What the extractor answered for one section: the claims it wrote (null: the answer is unusable), the error.
EXTRACTION_SCHEMA = {"claims": pl.List(pl.String), "error": _TEXT, "call_id": _TEXT, "model": _TEXT, **SHARD_SCHEMA}


@dg.op(out={"answers": dg.Out(pl.DataFrame, io_manager_key=SHARD_IO_MANAGER),
            "usage": dg.Out(pl.DataFrame, io_manager_key=SHARD_IO_MANAGER)},
       pool="llm", tags=queue_tags("llm"))
def extract_shard(context: dg.OpExecutionContext, shard: pl.DataFrame, lake: LakeResource, llm: LLMGatewayResource,
                  venue_registry: VenueRegistryResource):
    """The `extractor`'s claims for each section of the shard."""
    with venue_gateway(context, llm, lake, venue_registry) as gateway:
        gateway.preflight(["extractor"])
        results = gateway.map("extractor", EXTRACT_PROMPT, [{"review_text": text} for text in shard["review_text"]],
                              role="extractor", progress=progress_logger(context, "review sections"))
        usage = usage_frame(gateway)
    answers = [{"claims": rules.claims_from_answer(result.parsed) if result.parse_ok and result.error is None
                else None, "error": result.error, "call_id": result.call_id, "model": result.model,
                SHARD: section[SHARD], POSITION: section[POSITION]}
               for section, result in zip(shard.iter_rows(named=True), results)]
    yield dg.Output(pl.DataFrame(answers, schema=EXTRACTION_SCHEMA), output_name="answers")
    yield dg.Output(usage, output_name="usage")


@dg.op(out={"review_claims": dg.Out(pl.DataFrame), "claims_dropped": dg.Out(pl.DataFrame)})
def assemble_review_claims(context: dg.OpExecutionContext, reviews: pl.DataFrame, reviewer_followups: pl.DataFrame,
                           paper_sample: pl.DataFrame, answers: list[pl.DataFrame], usage: list[pl.DataFrame],
                           lake: LakeResource, embedding_model: EmbeddingResource):
    """The venue's claims from its shards' answers, cleaned over the venue as before sharding: the cleaning rules,
    the near-duplicate merge (embeddings, no model call) and the claim order are venue-level."""
    venue = context.partition_key
    units, work = _extraction_work(reviews, reviewer_followups, paper_sample)
    extracted, sharding = assemble_shards(answers)
    dropped: list[dict] = [unit.drop_row(venue, unit.problem) for unit in units if unit.problem is not None]
    candidates: list[Candidate] = []
    unusable: dict[int, int] = defaultdict(int)
    for (unit, section), answer in zip(work, extracted.iter_rows(named=True)):
        if answer["claims"] is None:
            unusable[id(unit)] += 1
            dropped.append(unit.drop_row(venue, rules.SECTION_UNUSABLE, answer["error"] or "the answer is not a JSON "
                                         "object with a list of claims", section.name, answer["call_id"] or None,
                                         level="section"))
            continue
        candidates += [Candidate(unit.review_id, unit.source, unit.source_id, section.name, section.text,
                                 section.start, text, answer["call_id"]) for text in answer["claims"]]
    cache = embedding_model.cache(lake.lake())
    kept, claim_drops = rules.clean_claims(candidates, lambda texts: cache.embed_with_cache(texts)[0])
    unit_of = {(unit.source, unit.source_id): unit for unit in units}
    model = extracted["model"][0] if extracted.height else None
    prompt_hash = template_hash(EXTRACT_PROMPT)
    rows = []
    for order, claim in enumerate(kept):
        c = claim.candidate
        start, end, kind, reason = rules.find_span(c.text, c.section_text, c.section_start)
        unit = unit_of[(c.source, c.source_id)]
        rows.append({"venue": venue, "claim_id": claim.claim_id, "paper_id": unit.row["paper_id"],
                     "review_id": c.review_id, "reviewer_id": unit.row.get("reviewer_id"), "source": c.source,
                     "source_id": c.source_id, "section": c.section, "claim_order": order, "claim_text": c.text,
                     "raw_text": c.raw_text, "span_start": start, "span_end": end, "span_kind": kind,
                     "span_reason": reason, "absorbed_claim_ids": claim.absorbed, "extractor_model": model,
                     "prompt_id": EXTRACT_PROMPT, "prompt_hash": prompt_hash, "call_id": c.call_id})
    for drop in claim_drops:
        c = drop.candidate
        unit = unit_of[(c.source, c.source_id)]
        dropped.append({**unit.drop_row(venue, drop.rule, drop.detail, c.section, c.call_id, level="claim"),
                        "claim_id": rules.claim_id(c.review_id, c.text), "claim_text": c.text, "raw_text": c.raw_text})
    yielding = {(c.candidate.source, c.candidate.source_id) for c in kept}
    for unit in units:
        if unit.problem is None and (unit.source, unit.source_id) not in yielding:
            every_section_failed = unusable[id(unit)] == len(unit.sections)
            dropped.append(unit.drop_row(venue, rules.UNIT_UNUSABLE if every_section_failed else rules.UNIT_NO_CLAIMS))
    claims = pl.DataFrame(rows, schema=REVIEW_CLAIM_SCHEMA)
    drops = pl.DataFrame(dropped, schema=DROPPED_SCHEMA)
    counts = drops.group_by("level", "rule").len().sort("level", "rule")
    yield dg.Output(claims, output_name="review_claims", metadata={
        **shard_usage_metadata(usage), "reviews": reviews.height, "followups": reviewer_followups.height,
        "sections_sent": len(work),
        "claims_written": len(candidates), "claims_kept": len(kept),
        "dropped_by_rule": dg.MetadataValue.json({f"{r['level']}:{r['rule']}": r["len"] for r in counts.to_dicts()}),
        "span_kinds": dg.MetadataValue.json(dict(claims.group_by("span_kind").len().iter_rows())),
        "near_duplicate_cosine": rules.NEAR_DUPLICATE_COSINE, **sharding,
    })
    yield dg.Output(drops, output_name="claims_dropped", metadata={
        "sources_without_claims": drops.filter(pl.col("level") == "source").height,
        "sections_unusable": drops.filter(pl.col("level") == "section").height,
        "claims_dropped": drops.filter(pl.col("level") == "claim").height,
    })


@dg.graph_multi_asset(
    partitions_def=venue_partitions,
    group_name="claims",
    outs={
        "review_claims": dg.AssetOut(
            kinds={"python", "parquet"},
            description="Atomic claims from each review section and reviewer follow-up (`source`), with a stable id "
                        "(review id + normalised text), the span in the source text or why there is none, the "
                        "duplicates it absorbed, the extractor model, prompt hash and ledger call id.",
        ),
        "claims_dropped": dg.AssetOut(
            kinds={"python", "parquet"},
            description="Every claim the cleaning rules dropped (`level` claim, with its rule), every section whose "
                        "extractor answer was unusable (`level` section) and every review or follow-up (`source`) "
                        "that yielded no claim (`level` source, with the reason).",
        ),
    },
)
def review_claims(reviews: pl.DataFrame, reviewer_followups: pl.DataFrame, paper_sample: pl.DataFrame):
    """The `extractor` role decomposes each free-text section of every review, and each reviewer follow-up, into
    atomic claims (JSON schema `claim_list`), one step per shard of the venue's papers. Whitespace and quotes are
    normalised; questions, requests, speculation, meta-commentary, fragments, over-long claims and claims longer
    than their section are dropped; exact and near-duplicates within a review (cosine >= NEAR_DUPLICATE_COSINE) are
    merged into the first. Every review and follow-up is in `review_claims` or has a `claims_dropped` row saying
    why not."""
    answers, usage = split_review_sections(reviews, reviewer_followups, paper_sample).map(extract_shard)
    return assemble_review_claims(reviews, reviewer_followups, paper_sample, answers.collect(), usage.collect())


@dg.op(out=dg.DynamicOut(pl.DataFrame, io_manager_key=SHARD_IO_MANAGER))
def split_claims_to_type(context: dg.OpExecutionContext, review_claims: pl.DataFrame,
                         venue_registry: VenueRegistryResource):
    """The venue's review claims in shards of its papers (a paper's claims in the shard of its forum id)."""
    yield from split_by_paper(review_claims.select("claim_id", "paper_id", "review_id", "claim_text"),
                              venue_registry.venue(context.partition_key).shards, context.log)


@dg.op(out={"types": dg.Out(pl.DataFrame, io_manager_key=SHARD_IO_MANAGER),
            "usage": dg.Out(pl.DataFrame, io_manager_key=SHARD_IO_MANAGER)},
       pool="llm", tags=queue_tags("llm"))
def type_shard(context: dg.OpExecutionContext, shard: pl.DataFrame, lake: LakeResource, llm: LLMGatewayResource,
               venue_registry: VenueRegistryResource):
    """The `fact_tagger`'s answer for each claim of the shard."""
    items = [{"claim": text} for text in shard["claim_text"]]
    with venue_gateway(context, llm, lake, venue_registry) as gateway:
        gateway.preflight(["fact_tagger"])
        results = gateway.map("fact_tagger", TAG_PROMPT, items, role="fact_tagger",
                              progress=progress_logger(context, "claims tagged"))
        usage = usage_frame(gateway)
    yield dg.Output(usage, output_name="usage")
    prompt_hash = template_hash(TAG_PROMPT)
    rows = []
    for claim, result in zip(shard.iter_rows(named=True), results):
        usable = result.parse_ok and result.error is None
        rows.append({"venue": context.partition_key, "claim_id": claim["claim_id"], "paper_id": claim["paper_id"],
                     "review_id": claim["review_id"],
                     "claim_type": result.parsed.get("claim_kind") if usable else None,
                     "rationale": result.parsed.get("reason") if usable else None, "parse_ok": usable,
                     "error": result.error, "model": result.model, "prompt_hash": prompt_hash,
                     "call_id": result.call_id or None, SHARD: claim[SHARD], POSITION: claim[POSITION]})
    yield dg.Output(pl.DataFrame(rows, schema={**CLAIM_TYPE_SCHEMA, **SHARD_SCHEMA}), output_name="types")


@dg.op
def assemble_claim_types(context: dg.OpExecutionContext, types: list[pl.DataFrame],
                         usage: list[pl.DataFrame]) -> pl.DataFrame:
    """The venue's claim types from its shards', in the order of `review_claims`."""
    frame, sharding = assemble_shards(types)
    context.add_output_metadata({**shard_usage_metadata(usage), "types": dg.MetadataValue.json(
        {str(k): v for k, v in frame.group_by("claim_type").len().iter_rows()}), **sharding})
    return frame


@dg.graph_asset(partitions_def=venue_partitions, group_name="claims", kinds={"python", "parquet"})
def claim_types(review_claims: pl.DataFrame) -> pl.DataFrame:
    """The `fact_tagger` role tags each review claim `factual` (checkable against the manuscript) or `subjective`
    (judgements, recommendations, forward-looking statements), with its rationale and the ledger call id. An
    unusable answer leaves claim_type null with parse_ok false: it is never guessed. One step per shard of the
    venue's papers."""
    types, usage = split_claims_to_type(review_claims).map(type_shard)
    return assemble_claim_types(types.collect(), usage.collect())


def _paper_blocks(parsed_manuscripts: pl.DataFrame) -> dict[str, list[Block]]:
    return {row["paper_id"]: [Block.from_record(block) for block in row["blocks"]]
            for row in parsed_manuscripts.iter_rows(named=True)}


class PaperClaimsConfig(dg.Config):
    paragraphs_per_paper: int = 5  # the paper's B1: 295 claims over 59 papers
    include_appendix: bool = False  # appendix paragraphs may be drawn too


def _single_claim(result) -> str | None:
    text = result.parsed.get("claim") if result.parse_ok and result.error is None and result.parsed else None
    return rules.normalise_claim(text) if isinstance(text, str) and rules.normalise_claim(text) else None


def _paragraph_draws(venue, config: PaperClaimsConfig, parsed_manuscripts: pl.DataFrame, chunks: pl.DataFrame,
                     paper_sample: pl.DataFrame) -> tuple[list[dict], list[tuple[str, int, Block, list[str]]]]:
    """The seeded draw of each sampled paper's body paragraphs with their gold chunk ids, and the gaps (papers and
    paragraphs that give no claim) found before any call, in the venue's order (the split and the assembly of
    paper_claims draw the same paragraphs from the same tables)."""
    blocks_by_paper = _paper_blocks(parsed_manuscripts)
    chunks_by_paper: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for paper_id, chunk_id, text in chunks.sort("order").select("paper_id", "chunk_id", "text").iter_rows():
        chunks_by_paper[paper_id].append((chunk_id, text))
    gaps: list[dict] = []
    drawn: list[tuple[str, int, Block, list[str]]] = []  # paper, draw order, paragraph, gold chunk ids
    for paper_id in paper_sample["forum_id"]:
        if not chunks_by_paper.get(paper_id):
            gaps.append({"venue": venue.key, "paper_id": paper_id, "reason": NO_CHUNKS,
                         "detail": "no usable manuscript (see manuscript_pdfs / parse_errors)"})
            continue
        candidates = body_paragraphs(blocks_by_paper.get(paper_id, []), config.include_appendix)
        if not candidates:
            gaps.append({"venue": venue.key, "paper_id": paper_id, "reason": NO_BODY_PARAGRAPHS,
                         "detail": "every paragraph is in an excluded section or too short"})
        for draw_order, block in enumerate(draw_paragraphs(paper_id, candidates, config.paragraphs_per_paper,
                                                           venue.seed)):
            gold = gold_chunk_ids(block.text, chunks_by_paper[paper_id])
            if not gold:
                gaps.append({"venue": venue.key, "paper_id": paper_id, "paragraph_order": block.order,
                             "reason": GOLD_NOT_FOUND, "detail": block.text[:200]})
                continue
            drawn.append((paper_id, draw_order, block, gold))
    return gaps, drawn


@dg.op(out=dg.DynamicOut(pl.DataFrame, io_manager_key=SHARD_IO_MANAGER))
def split_paragraph_draws(context: dg.OpExecutionContext, config: PaperClaimsConfig,
                          parsed_manuscripts: pl.DataFrame, chunks: pl.DataFrame, paper_sample: pl.DataFrame,
                          venue_registry: VenueRegistryResource):
    """The drawn paragraphs to write claims from, in shards of the venue's papers (the draw is seeded per paper, so
    drawing over the venue here gives each shard the paragraphs an unsharded run draws)."""
    venue = venue_registry.venue(context.partition_key)
    _, drawn = _paragraph_draws(venue, config, parsed_manuscripts, chunks, paper_sample)
    paragraphs = pl.DataFrame([{"paper_id": paper_id, "section": " > ".join(block.section_path),
                                "paragraph": block.text} for paper_id, _, block, _ in drawn],
                              schema={"paper_id": pl.String, "section": pl.String, "paragraph": pl.String})
    yield from split_by_paper(paragraphs, venue_registry.venue(context.partition_key).shards, context.log)


# What the extractor made of one drawn paragraph: the claim it wrote (or why it is unusable) and its rephrasing.
PAPER_CLAIM_ANSWER_SCHEMA = {
    "original_claim": _TEXT, "problem": _TEXT, "problem_detail": _TEXT, "claim_call_id": _TEXT,
    "extractor_model": _TEXT, "rephrased": _TEXT, "rephrase_call_id": _TEXT, **SHARD_SCHEMA,
}


@dg.op(out={"answers": dg.Out(pl.DataFrame, io_manager_key=SHARD_IO_MANAGER),
            "usage": dg.Out(pl.DataFrame, io_manager_key=SHARD_IO_MANAGER)},
       pool="llm", tags=queue_tags("llm"))
def write_paper_claims_shard(context: dg.OpExecutionContext, shard: pl.DataFrame, lake: LakeResource,
                             llm: LLMGatewayResource, venue_registry: VenueRegistryResource):
    """The `extractor` writes one claim from each drawn paragraph of the shard, then rephrases the usable ones."""
    with venue_gateway(context, llm, lake, venue_registry) as gateway:
        gateway.preflight(["extractor"])
        written = gateway.map("extractor", PAPER_CLAIM_PROMPT,
                              [{"section": section, "paragraph": paragraph}
                               for section, paragraph in shard.select("section", "paragraph").iter_rows()],
                              role="extractor", progress=progress_logger(context, "paragraphs"))
        originals = [_single_claim(result) for result in written]
        problems = [written_claim_problem(original, paragraph) if original
                    else (CLAIM_UNUSABLE, first.error or "no claim in the answer")
                    for original, first, paragraph in zip(originals, written, shard["paragraph"])]
        to_rephrase = [original for original, problem in zip(originals, problems) if problem is None]
        rephrased = iter(gateway.map("extractor", REPHRASE_PROMPT, [{"claim": text} for text in to_rephrase],
                                     role="extractor", progress=progress_logger(context, "rephrasings")))
        usage = usage_frame(gateway)
    answers = []
    for paragraph, first, original, problem in zip(shard.iter_rows(named=True), written, originals, problems):
        second = None if problem else next(rephrased)
        answers.append({"original_claim": original, "problem": problem[0] if problem else None,
                        "problem_detail": problem[1] if problem else None, "claim_call_id": first.call_id,
                        "extractor_model": first.model,
                        "rephrased": _single_claim(second) if second is not None else None,
                        "rephrase_call_id": second.call_id if second is not None else None,
                        SHARD: paragraph[SHARD], POSITION: paragraph[POSITION]})
    yield dg.Output(pl.DataFrame(answers, schema=PAPER_CLAIM_ANSWER_SCHEMA), output_name="answers")
    yield dg.Output(usage, output_name="usage")


@dg.op(out={"paper_claims": dg.Out(pl.DataFrame), "paper_claims_dropped": dg.Out(pl.DataFrame),
            "gold_chunks_exist": dg.Out()})
def assemble_paper_claims(context: dg.OpExecutionContext, config: PaperClaimsConfig,
                          parsed_manuscripts: pl.DataFrame, chunks: pl.DataFrame, paper_sample: pl.DataFrame,
                          answers: list[pl.DataFrame], usage: list[pl.DataFrame],
                          venue_registry: VenueRegistryResource):
    """The venue's PaperSourced claims and gaps from its shards' answers, in the order of the draw; a claim two
    paragraphs of a paper both gave is kept once."""
    venue = venue_registry.venue(context.partition_key)
    gaps, drawn = _paragraph_draws(venue, config, parsed_manuscripts, chunks, paper_sample)
    written, sharding = assemble_shards(answers)
    rows, seen = [], set()
    for (paper_id, draw_order, block, gold), answer in zip(drawn, written.iter_rows(named=True)):
        where = {"venue": venue.key, "paper_id": paper_id, "paragraph_order": block.order}
        if answer["problem"]:
            gaps.append({**where, "reason": answer["problem"], "detail": answer["problem_detail"],
                         "call_id": answer["claim_call_id"] or None})
            continue
        original, claim = answer["original_claim"], answer["rephrased"]
        if problem := rephrasing_problem(original, claim):
            gaps.append({**where, "reason": problem[0], "detail": problem[1],
                         "call_id": answer["rephrase_call_id"] or None})
            continue
        identity = paper_claim_id(paper_id, claim)
        if identity in seen:  # two paragraphs gave the same claim: one gold set would be wrong for it
            gaps.append({**where, "reason": DUPLICATE_CLAIM, "detail": claim, "call_id": answer["rephrase_call_id"]})
            continue
        seen.add(identity)
        rows.append({**where, "claim_id": identity, "claim_text": claim,
                     "original_claim": original, "label": "Supported", "paragraph": block.text,
                     "section": block.section_path[-1] if block.section_path else "",
                     "section_path": list(block.section_path), "gold_chunk_ids": gold, "seed": venue.seed,
                     "draw_order": draw_order, "extractor_model": answer["extractor_model"],
                     "claim_call_id": answer["claim_call_id"], "rephrase_call_id": answer["rephrase_call_id"]})
    frame = pl.DataFrame(rows, schema=PAPER_CLAIM_SCHEMA)
    gap_frame = pl.DataFrame(gaps, schema=PAPER_CLAIM_GAP_SCHEMA)
    yield dg.Output(frame, output_name="paper_claims", metadata={
        **shard_usage_metadata(usage), "paragraphs_drawn": len(drawn), "claims": frame.height, "seed": venue.seed,
        "paragraphs_per_paper": config.paragraphs_per_paper, "include_appendix": config.include_appendix,
        **sharding,
    })
    yield dg.Output(gap_frame, output_name="paper_claims_dropped", metadata={
        "dropped_by_reason": dg.MetadataValue.json(dict(gap_frame.group_by("reason").len().iter_rows())),
    })
    yield gold_chunks_gate(frame, chunks)


def _paper_claims_config(values: dict) -> dict:
    """The asset's PaperClaimsConfig (`ops: paper_claims: config:`, as before it had steps) for its steps that
    draw the paragraphs."""
    return {"split_paragraph_draws": {"config": values}, "assemble_paper_claims": {"config": values}}


@dg.graph_multi_asset(
    partitions_def=venue_partitions,
    group_name="claims",
    config=dg.ConfigMapping(config_fn=_paper_claims_config, config_schema=PaperClaimsConfig.to_config_schema()),
    outs={
        "paper_claims": dg.AssetOut(
            kinds={"python", "parquet"},
            description="PaperSourced claims (label Supported by construction): the claim written from a drawn body "
                        "paragraph (`original_claim`), its rephrasing (`claim_text`, the query), the paragraph, its "
                        "section path, the gold chunk id(s) holding it, the seed and the ledger call ids.",
        ),
        "paper_claims_dropped": dg.AssetOut(
            kinds={"python", "parquet"},
            description="Papers and drawn paragraphs that yielded no PaperSourced claim, with the reason: no chunks, "
                        "no body paragraph, gold chunk not found, unusable or identical model answers, duplicates.",
        ),
    },
    check_specs=[dg.AssetCheckSpec("gold_chunks_exist", asset="paper_claims", blocking=True,
                                   description="Every PaperSourced claim's gold passage exists in `chunks`: "
                                               "otherwise its retrieval can never be scored a hit.")],
)
def paper_claims(parsed_manuscripts: pl.DataFrame, chunks: pl.DataFrame, paper_sample: pl.DataFrame):
    """PaperSourced claims, Supported by construction: per paper, a seeded draw of body paragraphs (never
    abstract, introduction, related work, conclusion, references, checklists or, unless configured, appendices);
    the `extractor` writes one claim each paragraph fully supports, then rephrases it in other words, one step per
    shard of the venue's papers. Both are kept, the rephrasing as `claim_text` (the query), with the gold chunk
    id(s) holding the paragraph, its section path and the seed. Papers without chunks or body paragraphs, and
    unusable answers, are in `paper_claims_dropped` with the reason."""
    answers, usage = split_paragraph_draws(parsed_manuscripts, chunks, paper_sample).map(write_paper_claims_shard)
    claims, dropped, gold_check = assemble_paper_claims(parsed_manuscripts, chunks, paper_sample, answers.collect(),
                                                        usage.collect())
    return {"paper_claims": claims, "paper_claims_dropped": dropped, "paper_claims_gold_chunks_exist": gold_check}


def gold_chunks_gate(claims: pl.DataFrame, chunks: pl.DataFrame) -> dg.AssetCheckResult:
    """`gold_chunks_exist` of `paper_claims`: every gold chunk id of every claim is in `chunks`; fails naming the
    missing chunk ids."""
    gold = claims.select("claim_id", pl.col("gold_chunk_ids").alias("gold_chunk_id")).explode("gold_chunk_id")
    gold = with_found(gold.drop_nulls("gold_chunk_id"), "gold_chunk_id", chunks["chunk_id"], "chunk_id")
    return gate("gold_chunks_exist", [Expect(gold, "ExpectColumnValuesToNotBeNull", ("gold_chunk_id",),
                                             {"column": "chunk_id"})], blocking=True, asset_key="paper_claims")

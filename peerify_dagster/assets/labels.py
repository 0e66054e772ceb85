"""Stage 4b, labels: every review claim labelled by two LLM labellers (roles `labeller_a`, `labeller_b`) against two
disjoint sources, the review's thread (RebuttalSourced) and the manuscript (LLMJudged), and how far the two labellers
agree. Every call goes through the LLM gateway and its `llm_calls` ledger; what each labeller saw is kept per row."""

from collections import defaultdict

import dagster as dg
import polars as pl

from peerify_dagster.assets.steps.llm import progress_logger, shard_usage_metadata, usage_frame, venue_gateway
from peerify_dagster.cluster import queue_tags
from peerify_dagster.domain import labelling as lab
from peerify_dagster.domain.labels import LABELS, NOT_DETERMINED
from peerify_dagster.domain.llm_calls import estimate_tokens
from peerify_dagster.domain.prompts import template_hash
from peerify_dagster.domain.retrieval import STATUS_OK, build_retrievers, paper_index_loader, retrieve_claims
from peerify_dagster.partitions import venue_partitions
from peerify_dagster.resources.dagster_resources import (
    EmbeddingResource,
    LakeResource,
    LLMGatewayResource,
    VenueRegistryResource,
    markdown_preview,
)
from peerify_dagster.resources.llm_gateway.registry import ModelRegistry
from peerify_dagster.resources.shard_io import (
    POSITION,
    SHARD_IO_MANAGER,
    SHARD_SCHEMA,
    assemble_shards,
    split_by_paper,
)

DEFAULT_ANSWER_TOKENS = 1024  # the answer budget assumed for a model whose decoding sets no max_tokens

_TEXT = pl.String
CLAIM_LABEL_SCHEMA = {
    "venue": _TEXT, "claim_id": _TEXT, "paper_id": _TEXT, "review_id": _TEXT, "source": _TEXT, "labeller": _TEXT,
    "role": _TEXT, "model": _TEXT, "raw_label": _TEXT, "label": _TEXT, "parse_ok": pl.Boolean, "justification": _TEXT,
    "evidence_quotes": pl.List(_TEXT), "evidence_chunk_ids": pl.List(_TEXT), "evidence_mode": _TEXT,
    "evidence_text": _TEXT, "evidence_tokens": pl.Int64, "prompt_id": _TEXT, "prompt_hash": _TEXT, "call_id": _TEXT,
    "error": _TEXT,
}
AGREEMENT_SCHEMA = {
    "venue": _TEXT, "source": _TEXT, "claim_type": _TEXT, "n_items": pl.Int64, "n_without_call": pl.Int64,
    "n_parse_failed": pl.Int64, "n_pairs": pl.Int64, "agreed": pl.Int64, "raw_agreement": pl.Float64,
    "kappa": pl.Float64, "kappa_status": _TEXT, "confusion": pl.List(pl.List(pl.Int64)),
}


def _by_review(frame: pl.DataFrame, id_column: str) -> dict[str, list[dict]]:
    grouped: dict[str, list[dict]] = defaultdict(list)
    for row in frame.filter(pl.col("review_id").is_not_null()).iter_rows(named=True):
        grouped[row["review_id"]].append({**row, "id": row[id_column]})
    return grouped


def _threads(claims: pl.DataFrame, author_responses: pl.DataFrame, reviewer_followups: pl.DataFrame,
             config: lab.LabellingConfig) -> dict[str, lab.ThreadEvidence]:
    """claim id -> the author text of its review's thread, as the venue's `labelling: thread_evidence` assembles it
    (the thread labeller's evidence, and the `thread` prediction mode's through claim_threads)."""
    responses = _by_review(author_responses, "response_id")
    followups = _by_review(reviewer_followups, "comment_id")
    return {row["claim_id"]: lab.thread_evidence(row["review_id"], responses.get(row["review_id"], []),
                                                 followups.get(row["review_id"], []), config.thread_evidence)
            for row in claims.iter_rows(named=True)}


def _rankings(claims: pl.DataFrame, chunks: pl.DataFrame, chunk_embeddings: pl.DataFrame,
              config: lab.LabellingConfig, embed) -> tuple[dict[str, list[str]], dict[str, str]]:
    """claim id -> chunk ids of its own manuscript ranked by the configured retriever; claim id -> retrieval error."""
    retrievers, unavailable = build_retrievers([config.retriever])
    if unavailable:
        raise dg.Failure(f"labelling retriever {config.retriever}: {unavailable[config.retriever]}")
    with_chunks = claims.filter(pl.col("paper_id").is_in(chunks["paper_id"].unique().to_list()))
    rows = retrieve_claims(with_chunks.select("claim_id", "paper_id", "claim_text").iter_rows(),
                           paper_index_loader(chunks, chunk_embeddings), retrievers, embed, k=config.top_k)
    ranked: dict[str, list[tuple[int, str]]] = defaultdict(list)
    problems = {}
    for row in rows:
        if row["status"] == STATUS_OK:
            ranked[row["claim_id"]].append((row["rank"], row["chunk_id"]))
        else:
            problems[row["claim_id"]] = f"{row['status']}: {row.get('error')}"
    return {claim: [chunk for _, chunk in sorted(hits)] for claim, hits in ranked.items()}, problems


def _answer_fields(result) -> dict:
    """The row fields an answer fills: labels, quotes, justification, call id, and why it is unusable."""
    raw = lab.raw_label(result.raw_response)
    usable = result.error is None and result.parse_ok
    if result.error is not None:
        error = result.error
    elif not result.parse_ok:
        error = (f"parse_failed: label {raw!r} is not one of {list(LABELS)}" if raw is not None and result.label is None
                 else "parse_failed: the answer is not a JSON object with label, evidence_quotes and justification")
    else:
        error = None
    parsed = result.parsed or {}
    justification = parsed.get("justification")
    return {"model": result.model, "raw_label": raw, "label": result.label if usable else None, "parse_ok": usable,
            "justification": justification if isinstance(justification, str) else None,
            "evidence_quotes": lab.answer_quotes(parsed), "call_id": result.call_id or None, "error": error}


# The planned rows of claim_labels carry the claim a called row's prompt asks about; the assembly drops it.
PLANNED_LABEL_SCHEMA = {**CLAIM_LABEL_SCHEMA, "claim_text": _TEXT}
# Each labelling prompt and the variable its evidence fills.
PROMPT_EVIDENCE = ((lab.THREAD_PROMPT, "author_response"), (lab.MANUSCRIPT_PROMPT, "evidence"))


@dg.op(out=dg.DynamicOut(pl.DataFrame, io_manager_key=SHARD_IO_MANAGER))
def plan_claim_labels(context: dg.OpExecutionContext, review_claims: pl.DataFrame, author_responses: pl.DataFrame,
                      reviewer_followups: pl.DataFrame, chunks: pl.DataFrame, chunk_embeddings: pl.DataFrame,
                      lake: LakeResource, llm: LLMGatewayResource, embedding_model: EmbeddingResource,
                      venue_registry: VenueRegistryResource):
    """Every (claim, source, labeller) row of the venue in its final order, with the evidence the labeller sees,
    in shards of the venue's papers: the rows that need a call carry their prompt, the others are complete. The
    evidence is chosen here for the whole venue (the retrieval ranks each claim's own manuscript's chunks; no model
    is called), so only the labellers' calls run per shard."""
    venue = venue_registry.venue(context.partition_key)
    config = lab.LabellingConfig.from_mapping(venue.labelling)
    claims = review_claims.sort("claim_order")
    chunks_by_paper: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for paper_id, chunk_id, text in chunks.sort("order").select("paper_id", "chunk_id", "text").iter_rows():
        chunks_by_paper[paper_id].append((chunk_id, text))
    rankings: dict[str, list[str]] = {}
    if config.needs_retrieval and claims.height:
        cache = embedding_model.cache(lake.lake())
        rankings, problems = _rankings(claims, chunks, chunk_embeddings, config,
                                       lambda texts: cache.embed_with_cache(texts)[0])
        if problems:
            context.log.warning(f"{len(problems)} claims got no ranking from {config.retriever}: {problems}")
    threads = _threads(claims, author_responses, reviewer_followups, config)
    hashes = {prompt: template_hash(prompt) for prompt in (lab.THREAD_PROMPT, lab.MANUSCRIPT_PROMPT)}
    models = ModelRegistry.load(profile=llm.profile)
    rows: list[dict] = []
    for labeller, role in lab.LABELLER_ROLES.items():
        _, spec = models.resolve(role)
        budget = lab.ContextBudget(spec.name, spec.context_window,
                                   int(spec.decoding.get("max_tokens") or DEFAULT_ANSWER_TOKENS))
        evidence = {row["claim_id"]: lab.manuscript_evidence(config, row["claim_text"],
                                                             chunks_by_paper.get(row["paper_id"], []),
                                                             rankings.get(row["claim_id"], []), budget)
                    for row in claims.iter_rows(named=True)}
        plan = [(row, lab.SOURCE_THREAD, lab.THREAD_PROMPT, threads[row["claim_id"]].text, [],
                 threads[row["claim_id"]].mode) for row in claims.iter_rows(named=True)]
        plan += [(row, lab.SOURCE_MANUSCRIPT, lab.MANUSCRIPT_PROMPT, evidence[row["claim_id"]].text,
                  evidence[row["claim_id"]].chunk_ids, evidence[row["claim_id"]].mode)
                 for row in claims.iter_rows(named=True)]
        for row, source, prompt, text, chunk_ids, mode in plan:
            base = {"venue": venue.key, "claim_id": row["claim_id"], "paper_id": row["paper_id"],
                    "review_id": row["review_id"], "source": source, "labeller": labeller, "role": role,
                    "evidence_chunk_ids": chunk_ids, "evidence_mode": mode, "evidence_text": text,
                    "evidence_tokens": estimate_tokens(text) if text is not None else None}
            if text is not None:
                rows.append({**base, "prompt_id": prompt, "prompt_hash": hashes[prompt],
                             "claim_text": row["claim_text"]})
            elif mode == lab.MODE_NO_AUTHOR_RESPONSE:
                rows.append({**base, "label": NOT_DETERMINED, "parse_ok": True, "evidence_quotes": [],
                             "justification": "rule: the review has no author response, so no call is made"})
            else:
                rows.append({**base, "model": spec.name, "parse_ok": False, "evidence_quotes": [],
                             "error": evidence[row["claim_id"]].error})
    planned = pl.DataFrame(rows, schema=PLANNED_LABEL_SCHEMA)
    yield from split_by_paper(planned, venue.shards, context.log, "label rows")


@dg.op(out={"labels": dg.Out(pl.DataFrame, io_manager_key=SHARD_IO_MANAGER),
            "usage": dg.Out(pl.DataFrame, io_manager_key=SHARD_IO_MANAGER)},
       pool="llm", tags=queue_tags("llm"))
def label_shard(context: dg.OpExecutionContext, shard: pl.DataFrame, lake: LakeResource, llm: LLMGatewayResource,
                venue_registry: VenueRegistryResource):
    """Each labeller's answer for the shard's rows that need a call, per labeller and prompt in the venue's order."""
    answers = {}  # position -> the labeller's answer
    with venue_gateway(context, llm, lake, venue_registry) as gateway:
        gateway.preflight(list(lab.LABELLER_ROLES.values()))
        for role in lab.LABELLER_ROLES.values():
            for prompt, variable in PROMPT_EVIDENCE:
                todo = shard.filter((pl.col("role") == role) & (pl.col("prompt_id") == prompt))
                results = gateway.map(role, prompt, [{"claim": claim, variable: text} for claim, text in
                                                     todo.select("claim_text", "evidence_text").iter_rows()],
                                      role=role, progress=progress_logger(context, f"{role} {prompt}"))
                answers.update(zip(todo[POSITION], results))
        usage = usage_frame(gateway)
    rows = [{**row, **_answer_fields(answers[row[POSITION]])} if row[POSITION] in answers else row
            for row in shard.iter_rows(named=True)]
    yield dg.Output(pl.DataFrame(rows, schema={**PLANNED_LABEL_SCHEMA, **SHARD_SCHEMA}), output_name="labels")
    yield dg.Output(usage, output_name="usage")


@dg.op(out={"claim_labels": dg.Out(pl.DataFrame), "four_rows_per_claim": dg.Out()})
def assemble_claim_labels(context: dg.OpExecutionContext, review_claims: pl.DataFrame, labels: list[pl.DataFrame],
                          usage: list[pl.DataFrame], venue_registry: VenueRegistryResource):
    """The venue's label rows from its shards', in the planned order, and the `four_rows_per_claim` check."""
    config = lab.LabellingConfig.from_mapping(venue_registry.venue(context.partition_key).labelling)
    frame, sharding = assemble_shards(labels)
    frame = frame.select(list(CLAIM_LABEL_SCHEMA))
    yield dg.Output(frame, output_name="claim_labels",
                    metadata={**shard_usage_metadata(usage), **_labels_metadata(frame, config), **sharding})
    failing = lab.incomplete_claims(review_claims["claim_id"],
                                    frame.select("claim_id", "source", "labeller", "label").rows())
    yield dg.AssetCheckResult(asset_key="claim_labels", check_name="four_rows_per_claim", passed=not failing,
                              metadata={"failing_ids": dg.MetadataValue.json(sorted(failing)[:200])})


@dg.graph_asset(partitions_def=venue_partitions, group_name="labels", kinds={"python", "parquet"},
                check_specs=[dg.AssetCheckSpec("four_rows_per_claim", asset="claim_labels", blocking=True,
                                               description="Every review claim was labelled once by each labeller "
                                                           "against each source, and every label is one of the four "
                                                           "(or none when the answer did not parse).")])
def claim_labels(review_claims: pl.DataFrame, author_responses: pl.DataFrame, reviewer_followups: pl.DataFrame,
                 chunks: pl.DataFrame, chunk_embeddings: pl.DataFrame):
    """One row per (claim, source, labeller): roles `labeller_a` and `labeller_b` label every review claim against
    its review thread (`source` thread, prompt `label_rebuttal`: author text only, never the manuscript) and against
    the manuscript (`source` manuscript, prompt `label_manuscript`: chunks only, never the thread). The venue's
    `labelling:` options choose the evidence (see peerify_dagster/domain/labelling.py); `evidence_mode`,
    `evidence_text` and `evidence_tokens` record exactly what each labeller saw. A review without author response
    gives thread rows `Not Determined` without a call; a paper without chunks gives `no_manuscript` rows; evidence
    that does not fit the model's context window is an error row, never truncated. An answer whose label is not one
    of the four is kept (`raw_label`) with `label` null and `parse_ok` false. The labellers' calls run one step per
    shard of the venue's papers."""
    labels, usage = plan_claim_labels(review_claims, author_responses, reviewer_followups, chunks,
                                      chunk_embeddings).map(label_shard)
    frame, check = assemble_claim_labels(review_claims, labels.collect(), usage.collect())
    return {"result": frame, "claim_labels_four_rows_per_claim": check}


@dg.asset(partitions_def=venue_partitions, group_name="labels", kinds={"python", "parquet"})
def claim_threads(context: dg.AssetExecutionContext, review_claims: pl.DataFrame, author_responses: pl.DataFrame,
                  reviewer_followups: pl.DataFrame, venue_registry: VenueRegistryResource) -> pl.DataFrame:
    """One row per review claim: the thread text its verifier sees in the `thread` prediction mode, assembled as the
    thread labeller's evidence is (the venue's `labelling: thread_evidence`): `thread_mode` longest_author_reply or
    thread_with_followups, or no_author_response with thread_text null. A venue imported from a release writes this
    table itself (thread_mode `release`: the release's author response)."""
    config = lab.LabellingConfig.from_mapping(venue_registry.venue(context.partition_key).labelling)
    claims = review_claims.sort("claim_order")
    threads = _threads(claims, author_responses, reviewer_followups, config)
    rows = []
    for row in claims.iter_rows(named=True):
        thread = threads[row["claim_id"]]
        rows.append({"venue": context.partition_key, "claim_id": row["claim_id"], "paper_id": row["paper_id"],
                     "review_id": row["review_id"], "thread_mode": thread.mode, "thread_text": thread.text,
                     "thread_tokens": estimate_tokens(thread.text) if thread.text is not None else None})
    frame = pl.DataFrame(rows, schema=lab.CLAIM_THREAD_SCHEMA)
    modes = frame.group_by("thread_mode").len().sort("thread_mode")
    context.add_output_metadata({"claims": frame.height, "thread_evidence": config.thread_evidence,
                                 "claims_by_thread_mode": dg.MetadataValue.json(dict(modes.iter_rows())),
                                 "thread_tokens_median": frame["thread_tokens"].median()})
    return frame


def _labels_metadata(frame: pl.DataFrame, config: lab.LabellingConfig) -> dict:
    called = frame.filter(pl.col("call_id").is_not_null())
    quotes = [(quotes, text) for quotes, text in called.select("evidence_quotes", "evidence_text").iter_rows()]
    n_quotes = sum(len(q) for q, _ in quotes)
    distribution = (frame.group_by("source", "labeller", "label").len()
                    .sort("source", "labeller", "label", nulls_last=True))
    manuscript = frame.filter(pl.col("source") == lab.SOURCE_MANUSCRIPT)
    return {
        "labelling": dg.MetadataValue.json(vars(config)),
        "claims": frame["claim_id"].n_unique(),
        "rows_by_evidence_mode": dg.MetadataValue.json(
            {f"{s}:{m}": n for s, m, n in frame.group_by("source", "evidence_mode").len().sort("source",
                                                                                                "evidence_mode").rows()}),
        "claims_without_manuscript": manuscript.filter(
            pl.col("evidence_mode") == lab.MODE_NO_MANUSCRIPT)["claim_id"].n_unique(),
        "manuscript_rows_not_fitting": manuscript.filter(pl.col("error").str.contains("does not fit")).height,
        "parse_failures": called.filter(~pl.col("parse_ok")).height,
        "quotes_verbatim_share": round(sum(lab.verbatim_quotes(q, t) for q, t in quotes) / n_quotes, 3)
        if n_quotes else None,
        "labels_by_source": dg.MetadataValue.md(markdown_preview(distribution, rows=distribution.height)),
    }


_SOURCE_ORDER = {"all": 0, lab.SOURCE_THREAD: 1, lab.SOURCE_MANUSCRIPT: 2}


@dg.asset(partitions_def=venue_partitions, group_name="labels", kinds={"python", "parquet"})
def labeller_agreement(context: dg.AssetExecutionContext, claim_labels: pl.DataFrame,
                       claim_types: pl.DataFrame) -> pl.DataFrame:
    """How far labeller A and labeller B agree, per source (`thread`, `manuscript`, `all` pooled) and claim type
    (`factual`, `subjective`, `untyped`, `all`): raw agreement, Cohen's kappa and the 4x4 table (`confusion[i][j]`:
    items A labelled LABELS[i] and B labelled LABELS[j], in the order Supported, Partially Supported, Not
    Supported, Not Determined). Items where either labeller made no call (rule label, no manuscript, evidence too
    long) and parse failures are counted apart. Kappa is null with `kappa_status` `undefined_single_class` when
    both labellers gave every item one and the same label (chance agreement 1: kappa is 0/0), said in words in the
    metadata; its `warnings` also name a labeller that gave one label to 90% or more of a source's pairs."""
    types = dict(zip(claim_types["claim_id"], claim_types["claim_type"]))
    grouped = lab.groups(lab.paired_items(claim_labels.iter_rows(named=True), types))
    rows, markdown = [], {}
    for (source, kind), items in sorted(grouped.items(), key=lambda g: (_SOURCE_ORDER[g[0][0]], g[0][1] != "all",
                                                                        g[0][1])):
        summary = lab.summarise(items)
        result = summary.agreement
        rows.append({"venue": context.partition_key, "source": source, "claim_type": kind,
                     "n_items": summary.n_items, "n_without_call": summary.n_without_call,
                     "n_parse_failed": summary.n_parse_failed, "n_pairs": result.n_pairs, "agreed": result.agreed,
                     "raw_agreement": result.raw_agreement, "kappa": result.kappa,
                     "kappa_status": result.kappa_status, "confusion": result.table})
        section = f"**claim type {kind}**: {lab.describe(summary)}\n\n{lab.markdown_table(result.table)}"
        markdown[source] = f"{markdown[source]}\n\n{section}" if source in markdown else section
    context.add_output_metadata({
        **{f"agreement_{source}": dg.MetadataValue.md(text) for source, text in markdown.items()},
        "warnings": dg.MetadataValue.json(lab.agreement_warnings(rows)),
    })
    return pl.DataFrame(rows, schema=AGREEMENT_SCHEMA)

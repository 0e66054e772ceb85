"""Stage 5, verification: each claim's retrieved evidence judged by every configured verifier model through
the LLM gateway (every call recorded in the `llm_calls` ledger), and the LLM usage behind the venue's tables."""

import dagster as dg
import polars as pl

from peerify_dagster.domain import label_metrics
from peerify_dagster.domain.prompts import format_passages, prompts_code_version
from peerify_dagster.domain.verification import STATUS_NO_EVIDENCE, STATUS_NO_MANUSCRIPT, STATUS_OK, plan_verifications
from peerify_dagster.partitions import venue_partitions
from peerify_dagster.resources.dagster_resources import LakeResource, LLMGatewayResource

VERIFY_PROMPT = "verify"
VERIFICATION_CODE_VERSION = f"verification-v2-{prompts_code_version([VERIFY_PROMPT])}"

VERIFICATION_SCHEMA = {
    "venue": pl.String, "claim_id": pl.String, "paper_id": pl.String, "verifier": pl.String, "status": pl.String,
    "retriever": pl.String, "evidence_chunk_ids": pl.List(pl.String), "label": pl.String, "parse_ok": pl.Boolean,
    "error": pl.String, "call_id": pl.String, "prompt_id": pl.String, "gold_label": pl.String,
}
USAGE_SCHEMA = {
    "venue": pl.String, "model": pl.String, "role": pl.String, "prompt_id": pl.String, "calls": pl.Int64,
    "tokens_in": pl.Int64, "tokens_out": pl.Int64, "cost_usd": pl.Float64, "parse_failures": pl.Int64,
    "errors": pl.Int64, "mean_latency_s": pl.Float64,
}


class VerificationConfig(dg.Config):
    retriever: str = "hybrid"  # whose ranking supplies the evidence
    evidence_k: int = 3  # passages shown to the verifier


@dg.asset(partitions_def=venue_partitions, group_name="verification", kinds={"python", "parquet"},
          code_version=VERIFICATION_CODE_VERSION, pool="llm")
def evidence_verifications(context: dg.AssetExecutionContext, config: VerificationConfig,
                           retrieval_queries: pl.DataFrame, retrieval_runs: pl.DataFrame, chunks: pl.DataFrame,
                           lake: LakeResource, llm: LLMGatewayResource) -> pl.DataFrame:
    """Per claim and verifier model (role `verifiers`): the label given the claim's top retrieved passages,
    with the ledger call id. Unparseable answers keep label null and parse_ok false; they are never guessed.
    Every claim keeps its rows: a claim whose paper has no usable manuscript has status `no_manuscript`, one
    whose retrieval gave no passage `no_evidence`; neither makes a call (label, parse_ok and call_id null,
    `error` says why)."""
    text_of = dict(zip(chunks["chunk_id"], chunks["text"]))
    planned = plan_verifications(retrieval_queries.iter_rows(named=True), retrieval_runs.iter_rows(named=True),
                                 set(chunks["paper_id"]), config.retriever, config.evidence_k)
    to_verify = [p for p in planned if p.status == STATUS_OK]
    items = [{"claim": p.claim["claim_text"],
              "evidence": format_passages([(i, text_of[i]) for i in p.evidence_chunk_ids])} for p in to_verify]
    for problem in (STATUS_NO_MANUSCRIPT, STATUS_NO_EVIDENCE):
        if skipped := [p.claim["claim_id"] for p in planned if p.status == problem]:
            context.log.warning(f"{len(skipped)} claims get no verifier call ({problem}): {skipped}")
    rows = []
    with llm.gateway(lake.lake(), run_id=context.run_id) as gateway:
        verifiers = gateway.preflight(["verifiers"])["verifiers"]
        for verifier in verifiers:
            def progress(done: int, total: int, _result) -> None:
                if done == total or done % 10 == 0:
                    context.log.info(f"{verifier}: {done}/{total} claims verified")

            results = iter(gateway.map(verifier, VERIFY_PROMPT, items, role="verifiers", progress=progress))
            for plan in planned:
                if plan.status == STATUS_OK:
                    result = next(results)
                    call = {"label": result.label, "parse_ok": result.parse_ok, "error": result.error,
                            "call_id": result.call_id}
                else:
                    call = {"label": None, "parse_ok": None, "error": plan.reason, "call_id": None}
                rows.append({
                    "venue": context.partition_key, "claim_id": plan.claim["claim_id"],
                    "paper_id": plan.claim["paper_id"], "verifier": verifier, "status": plan.status,
                    "retriever": config.retriever, "evidence_chunk_ids": plan.evidence_chunk_ids, **call,
                    "prompt_id": VERIFY_PROMPT, "gold_label": plan.claim["manuscript_label"],
                })
        usage = gateway.usage()
    # Unreadable ledger segments met while reading or compacting the ledger (up to the gateway's close): their calls
    # were made again where needed, so say which.
    for record in gateway.quarantined:
        context.log.warning(record.describe())
    frame = pl.DataFrame(rows, schema=VERIFICATION_SCHEMA)
    # Every claim with an answer-key label is scored; no answer (unparsed, no manuscript, no evidence) is an error.
    keyed = frame.filter(pl.col("gold_label").is_not_null())
    gold, predicted = keyed["gold_label"].to_list(), keyed["label"].to_list()
    context.add_output_metadata({
        "claims_without_manuscript": sum(p.status == STATUS_NO_MANUSCRIPT for p in planned),
        "claims_without_evidence": sum(p.status == STATUS_NO_EVIDENCE for p in planned),
        "verifiers": dg.MetadataValue.json(verifiers),
        "usage_by_model": dg.MetadataValue.json(usage["by_model"]),
        "calls_made": sum(u["calls"] for u in usage["by_model"].values()),
        "cache_hits": sum(u["cache_hits"] for u in usage["by_model"].values()),
        "parse_failures": int((~frame["parse_ok"]).sum()),  # null (no call made) is not counted
        "ledger_segments_quarantined": dg.MetadataValue.json([
            {"segment": str(r.segment), "moved_to": str(r.moved_to) if r.moved_to else None, "reason": r.reason,
             "call_ids": list(r.call_ids)} for r in gateway.quarantined]),
        "answer_key_claims": len(gold),
        "accuracy_vs_answer_key": label_metrics.accuracy(gold, predicted),
        "macro_f1_vs_answer_key": label_metrics.macro_f1(gold, predicted),
    })
    return frame


@dg.asset(partitions_def=venue_partitions, group_name="verification", kinds={"python", "parquet", "duckdb"},
          code_version="llm-usage-v1")
def llm_usage(context: dg.AssetExecutionContext, evidence_verifications: pl.DataFrame,
              lake: LakeResource) -> pl.DataFrame:
    """LLM usage behind this venue's tables, per model, role and prompt: calls, tokens, cost, parse failures and
    errors, read from the `llm_calls` ledger for the call ids the tables reference."""
    call_ids = evidence_verifications.select("call_id").drop_nulls().unique()
    if call_ids.is_empty():  # no claim needed a call (e.g. no manuscript): there may be no ledger at all
        return pl.DataFrame(schema=USAGE_SCHEMA)
    ledger = pl.read_parquet(lake.lake().root / "llm_calls" / "*.parquet").unique("call_id", keep="last")
    calls = ledger.join(call_ids, on="call_id", how="inner")
    return (
        calls.group_by("model", "role", "prompt_id")
        .agg(pl.len().alias("calls"), pl.col("tokens_in").sum(), pl.col("tokens_out").sum(),
             pl.col("cost_usd").sum(), (~pl.col("parse_ok") & pl.col("error").is_null()).sum().alias("parse_failures"),
             pl.col("error").is_not_null().sum().alias("errors"), pl.col("latency_s").mean().alias("mean_latency_s"))
        .with_columns(pl.lit(context.partition_key).alias("venue"))
        .select(list(USAGE_SCHEMA)).cast(USAGE_SCHEMA).sort("model", "role", "prompt_id")
    )

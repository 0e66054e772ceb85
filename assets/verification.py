"""Stage 5, verification: each claim's retrieved evidence judged by every configured verifier model through
the LLM gateway (every call recorded in the `llm_calls` ledger), and the LLM usage behind the venue's tables."""

import dagster as dg
import polars as pl

from peerify_dagster.domain.prompts import format_passages, prompts_code_version
from peerify_dagster.partitions import venue_partitions
from peerify_dagster.resources.dagster_resources import LakeResource, LLMGatewayResource

VERIFY_PROMPT = "verify"
VERIFICATION_CODE_VERSION = f"verification-v1-{prompts_code_version([VERIFY_PROMPT])}"

VERIFICATION_SCHEMA = {
    "venue": pl.String, "claim_id": pl.String, "paper_id": pl.String, "verifier": pl.String,
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
    with the ledger call id. Unparseable answers keep label null and parse_ok false; they are never guessed."""
    text_of = dict(zip(chunks["chunk_id"], chunks["text"]))
    top = (retrieval_runs.filter((pl.col("retriever") == config.retriever) & (pl.col("status") == "ok")
                                 & (pl.col("rank") <= config.evidence_k))
           .sort("claim_id", "rank").group_by("claim_id", maintain_order=True).agg("chunk_id"))
    evidence = dict(zip(top["claim_id"], top["chunk_id"].to_list()))
    claims = [c for c in retrieval_queries.iter_rows(named=True) if evidence.get(c["claim_id"])]
    items = [{"claim": c["claim_text"], "evidence": format_passages([(i, text_of[i]) for i in evidence[c["claim_id"]]])}
             for c in claims]
    rows = []
    with llm.gateway(lake.lake(), run_id=context.run_id) as gateway:
        verifiers = gateway.preflight(["verifiers"])["verifiers"]
        for verifier in verifiers:
            def progress(done: int, total: int, _result) -> None:
                if done == total or done % 10 == 0:
                    context.log.info(f"{verifier}: {done}/{total} claims verified")

            results = gateway.map(verifier, VERIFY_PROMPT, items, role="verifiers", progress=progress)
            for claim, result in zip(claims, results):
                rows.append({
                    "venue": context.partition_key, "claim_id": claim["claim_id"], "paper_id": claim["paper_id"],
                    "verifier": verifier, "retriever": config.retriever,
                    "evidence_chunk_ids": evidence[claim["claim_id"]], "label": result.label,
                    "parse_ok": result.parse_ok, "error": result.error, "call_id": result.call_id,
                    "prompt_id": VERIFY_PROMPT, "gold_label": claim["manuscript_label"],
                })
        usage = gateway.usage()
    frame = pl.DataFrame(rows, schema=VERIFICATION_SCHEMA)
    judged = frame.filter(pl.col("gold_label").is_not_null())
    context.add_output_metadata({
        "verifiers": dg.MetadataValue.json(verifiers),
        "usage_by_model": dg.MetadataValue.json(usage["by_model"]),
        "calls_made": sum(u["calls"] for u in usage["by_model"].values()),
        "cache_hits": sum(u["cache_hits"] for u in usage["by_model"].values()),
        "parse_failures": int((~frame["parse_ok"]).sum()),
        "agreement_with_answer_key": float((judged["label"] == judged["gold_label"]).mean() or 0.0)
        if judged.height else 0.0,
    })
    return frame


@dg.asset(partitions_def=venue_partitions, group_name="verification", kinds={"python", "parquet", "duckdb"},
          code_version="llm-usage-v1")
def llm_usage(context: dg.AssetExecutionContext, evidence_verifications: pl.DataFrame,
              lake: LakeResource) -> pl.DataFrame:
    """LLM usage behind this venue's tables, per model, role and prompt: calls, tokens, cost, parse failures and
    errors, read from the `llm_calls` ledger for the call ids the tables reference."""
    call_ids = evidence_verifications.select("call_id").drop_nulls().unique()
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

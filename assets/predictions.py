"""Stage 5, predictions: every claim of a venue judged under one configuration (verifier x retriever x mode x claims,
configurations.yaml) through the LLM gateway; one partition per configuration a venue uses (`<configuration>|<venue>`,
see partitions.py), so adding a configuration computes only that one."""

import time

import dagster as dg
import polars as pl

from peerify_dagster.cluster import queue_tags
from peerify_dagster.domain import label_metrics
from peerify_dagster.domain import metrics as scores
from peerify_dagster.domain import predictions as pred
from peerify_dagster.domain.labelling import raw_label
from peerify_dagster.domain.predictions import venue_and_configuration
from peerify_dagster.domain.prompts import load_prompt, prompts_code_version
from peerify_dagster.partitions import EVERY_PARTITION, prediction_partitions
from peerify_dagster.resources.dagster_resources import (
    LakeResource,
    LLMGatewayResource,
    PredictionConfigurationsResource,
    RetrievalResource,
)

VERIFY_PROMPT = pred.VERIFY_PROMPT
PREDICTIONS_CODE_VERSION = f"predictions-v1-{prompts_code_version([VERIFY_PROMPT, pred.THREAD_PROMPT])}"

PREDICTION_SCHEMA = {
    "venue": pl.String, "configuration": pl.String, "verifier": pl.String, "mode": pl.String,
    "retriever": pl.String, "k": pl.Int64, "claim_id": pl.String, "paper_id": pl.String, "claim_source": pl.String,
    "status": pl.String, "evidence_chunk_ids": pl.List(pl.String), "label": pl.String, "raw_label": pl.String,
    "parse_ok": pl.Boolean, "tokens_in": pl.Int64, "tokens_out": pl.Int64, "call_id": pl.String, "error": pl.String,
    "prompt_id": pl.String, "gold_label": pl.String,
}


@dg.asset(partitions_def=prediction_partitions, group_name="predictions", kinds={"python", "parquet"},
          code_version=PREDICTIONS_CODE_VERSION, pool="llm", op_tags=queue_tags("llm"),
          # Venue-partitioned inputs of a `<configuration>|<venue>` partition: read from the lake for its venue
          # (Dagster cannot map a pair key to its venue, see partitions.py). claim_threads is read by mode thread
          # only, so the other modes run without it (a venue predicted before claim_threads existed).
          deps=[dg.AssetDep(name, partition_mapping=EVERY_PARTITION)
                for name in (*pred.INPUT_TABLES, pred.THREAD_TABLE)])
def predictions(context: dg.AssetExecutionContext, lake: LakeResource, llm: LLMGatewayResource,
                prediction_configurations: PredictionConfigurationsResource,
                retrieval: RetrievalResource) -> pl.DataFrame:
    """Per claim the configuration covers and verifier model: the label given what the configuration shows it
    (`rag`: the retriever's top-k passages; `full_context`: every chunk of the manuscript; `oracle`: the gold
    chunks; `thread`: the claim's thread text from claim_threads, with the thread labeller's prompt
    `label_rebuttal`), the raw label, parse status, the chunk ids shown, tokens and the ledger call id. Unparseable
    answers keep label null and parse_ok false. A claim that gets no call keeps its row with the status saying why
    (`no_manuscript`, `no_evidence`, `too_long`: a manuscript or thread that does not fit the model's window is
    never truncated; `no_thread`). An NLI configuration (`verifier: nli:<folder>`, the paper's non-LLM baseline)
    classifies each shown chunk against the claim instead: entailment -> Supported, contradiction -> Not Supported,
    neutral -> Not Determined (raw_label: the chunks' classes in order; no call id)."""
    venue, name = venue_and_configuration(context.partition_key)
    retrieval_queries, retrieval_runs, chunks = (lake.read_input(table, venue) for table in pred.INPUT_TABLES)
    try:
        configuration = prediction_configurations.load().get(name)
    except pred.ConfigurationError as error:
        raise dg.Failure(str(error), allow_retries=False) from None
    if configuration.mode == pred.MODE_RAG and configuration.k > retrieval.k:
        raise dg.Failure(f"configuration {name!r} shows k={configuration.k} passages, but retrieval keeps the top "
                         f"{retrieval.k} only; lower k or raise the retrieval resource's k", allow_retries=False)
    paper_chunks, text_of = pred.chunks_by_paper(chunks)
    if configuration.nli_model is not None:
        return _nli_predictions(context, configuration, venue, retrieval_queries, retrieval_runs, paper_chunks, text_of)
    prompt_id = configuration.prompt_id
    template = load_prompt(prompt_id)
    threads = _thread_texts(lake, venue) if configuration.mode == pred.MODE_THREAD else None
    rows, started = [], time.monotonic()
    with llm.gateway(lake.lake(), run_id=context.run_id) as gateway:
        verifiers = verifier_models(configuration, gateway)
        for verifier in verifiers:
            spec = gateway.registry.model(verifier)
            window = pred.prompt_window(spec.context_window, spec.decoding.get("max_tokens"),
                                        template.system + template.user)
            planned = pred.plan_predictions(configuration, retrieval_queries.iter_rows(named=True),
                                            retrieval_runs.iter_rows(named=True), paper_chunks, window, threads)
            _warn_uncalled(context, verifier, planned)
            items = pred.verifier_items(planned, text_of)

            def progress(done: int, total: int, _result, verifier: str = verifier) -> None:
                if done == total or done % 10 == 0:
                    context.log.info(f"{name} / {verifier}: {done}/{total} claims predicted")

            results = iter(gateway.map(verifier, prompt_id, items, role=pred.VERIFIERS_ROLE, progress=progress))
            rows += [_row(venue, configuration, verifier, plan,
                          _answer(next(results)) if plan.status == pred.STATUS_OK else {"error": plan.reason},
                          prompt_id) for plan in planned]
        usage = gateway.usage()
    for record in gateway.quarantined:
        context.log.warning(record.describe())
    frame = pl.DataFrame(rows, schema=PREDICTION_SCHEMA)
    context.add_output_metadata({
        **_metadata(frame, configuration, verifiers, time.monotonic() - started),
        "usage_by_model": dg.MetadataValue.json(usage["by_model"]),
        "calls_made": sum(u["calls"] for u in usage["by_model"].values()),
        "cache_hits": sum(u["cache_hits"] for u in usage["by_model"].values()),
        "ledger_segments_quarantined": dg.MetadataValue.json([
            {"segment": str(r.segment), "moved_to": str(r.moved_to) if r.moved_to else None, "reason": r.reason,
             "call_ids": list(r.call_ids)} for r in gateway.quarantined]),
    })
    return frame


def _thread_texts(lake: LakeResource, venue: str) -> dict[str, str | None]:
    """claim id -> its thread text (claim_threads of the venue)."""
    try:
        threads = lake.lake().read_table(pred.THREAD_TABLE, venue)
    except FileNotFoundError:
        raise dg.Failure(f"mode thread needs claim_threads of {venue}: build the venue first (`peerify build "
                         f"{venue}`), or import its release", allow_retries=False) from None
    return dict(zip(threads["claim_id"], threads["thread_text"]))


def verifier_models(configuration: pred.Configuration, gateway) -> list[str]:  # noqa: ANN001 - an LLMGateway
    """The models a configuration's verifier names: the model itself, or each model of the role (checked)."""
    if configuration.verifier in gateway.registry.models:
        return [configuration.verifier]
    return gateway.preflight([configuration.verifier])[configuration.verifier]


def _nli_predictions(context: dg.AssetExecutionContext, configuration: pred.Configuration, venue: str,
                     retrieval_queries: pl.DataFrame, retrieval_runs: pl.DataFrame,
                     paper_chunks: dict[str, list[tuple[str, str]]], text_of: dict[str, str]) -> pl.DataFrame:
    """The NLI baseline: each shown chunk (premise) against the claim (hypothesis); no LLM call, no ledger row."""
    from peerify_dagster.resources.nli import NliClassifier

    started = time.monotonic()
    try:
        classifier = NliClassifier(configuration.nli_model)
    except (OSError, ValueError) as error:
        raise dg.Failure(f"configuration {configuration.name!r}: NLI model {configuration.nli_model}: {error}",
                         allow_retries=False) from None
    planned = pred.plan_predictions(configuration, retrieval_queries.iter_rows(named=True),
                                    retrieval_runs.iter_rows(named=True), paper_chunks)
    _warn_uncalled(context, configuration.verifier, planned)
    rows = []
    for plan in planned:
        if plan.status != pred.STATUS_OK:
            rows.append(_row(venue, configuration, configuration.verifier, plan, {"error": plan.reason}, None))
            continue
        answers = classifier.classify([(text_of[chunk], plan.claim["claim_text"]) for chunk in plan.evidence_chunk_ids])
        classes = [nli for nli, _ in answers]
        rows.append(_row(venue, configuration, configuration.verifier, plan, {
            "label": pred.nli_verdict(classes), "raw_label": ",".join(classes), "parse_ok": True,
            "tokens_in": sum(tokens for _, tokens in answers), "tokens_out": 0}, None))
    frame = pl.DataFrame(rows, schema=PREDICTION_SCHEMA)
    context.add_output_metadata({**_metadata(frame, configuration, [classifier.model_id], time.monotonic() - started),
                                 "calls_made": 0})
    return frame


def _warn_uncalled(context: dg.AssetExecutionContext, verifier: str, planned: list[pred.PlannedPrediction]) -> None:
    for status in pred.STATUSES[1:]:
        if skipped := [p.claim["claim_id"] for p in planned if p.status == status]:
            context.log.warning(f"{verifier}: {len(skipped)} claims get no prediction ({status}): {skipped}")


def _row(venue: str, configuration: pred.Configuration, verifier: str, plan: pred.PlannedPrediction, answer: dict,
         prompt_id: str | None) -> dict:
    return {"venue": venue, "configuration": configuration.name, "verifier": verifier, "mode": configuration.mode,
            "retriever": configuration.retriever, "k": configuration.k or None, "claim_id": plan.claim["claim_id"],
            "paper_id": plan.claim["paper_id"], "claim_source": plan.claim["source"], "status": plan.status,
            "evidence_chunk_ids": plan.evidence_chunk_ids, "prompt_id": prompt_id,
            "gold_label": plan.claim["manuscript_label"], **answer}


def _answer(result) -> dict:
    """The row fields one verifier answer fills; a label only from a parsed answer without error."""
    usable = result.error is None and result.parse_ok
    return {"label": result.label if usable else None, "raw_label": raw_label(result.raw_response),
            "parse_ok": usable, "tokens_in": result.tokens_in, "tokens_out": result.tokens_out,
            "call_id": result.call_id or None,
            "error": result.error or (None if usable else "parse_failed: no verification label in the answer")}


def _metadata(frame: pl.DataFrame, configuration: pred.Configuration, verifiers: list[str], seconds: float) -> dict:
    # Answer-key claims carry a label in retrieval_queries: scored here with every one of them that got no answer
    # (unparsed, no manuscript, no evidence, too long) counted as an error.
    keyed = frame.filter(pl.col("gold_label").is_not_null() & (pl.col("claim_source") == pred.SOURCE_ANSWER_KEY))
    statuses = frame.group_by("status").len().sort("status")
    return {
        pred.CONFIGURATION_HASH: configuration.content_hash(),
        "configuration": dg.MetadataValue.json(configuration.describe()),
        "verifiers": dg.MetadataValue.json(verifiers),
        "claims": frame["claim_id"].n_unique(),
        "rows_by_status": dg.MetadataValue.json(dict(zip(statuses["status"], statuses["len"]))),
        "tokens_in": int(frame["tokens_in"].sum()), "tokens_out": int(frame["tokens_out"].sum()),
        "parse_failures": int((frame["status"] == pred.STATUS_OK).sum() - frame["parse_ok"].sum()),
        "seconds": round(seconds, 2),
        "answer_key_claims": keyed.height,
        "accuracy_vs_answer_key": label_metrics.accuracy(keyed["gold_label"].to_list(), keyed["label"].to_list()),
        "macro_f1_vs_answer_key": label_metrics.macro_f1(keyed["gold_label"].to_list(), keyed["label"].to_list()),
        # per verifier, beside the key's majority-class baseline and the labels answered, with any one-label warning
        **({"answer_key_scores": dg.MetadataValue.md(scores.metrics_markdown(scores.answer_key_metrics(keyed)))}
           if keyed.height else {}),
    }

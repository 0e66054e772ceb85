"""Stage 5, predictions: every claim of a venue judged under one configuration (verifier x retriever x mode x claims,
configurations.yaml) through the LLM gateway; one partition per configuration a venue uses (`<configuration>|<venue>`,
see partitions.py), so adding a configuration computes only that one. The verifier's calls run one step per shard of
the claims' papers (domain/shards.py), so many workers share a configuration and a failed shard re-runs alone."""

import time

import dagster as dg
import polars as pl

from peerify_dagster.assets.steps.llm import USAGE_SCHEMA, shard_usage_metadata, usage_frame
from peerify_dagster.cluster import queue_tags
from peerify_dagster.domain import label_metrics
from peerify_dagster.domain import metrics as scores
from peerify_dagster.domain import predictions as pred
from peerify_dagster.domain.labelling import raw_label
from peerify_dagster.domain.predictions import venue_and_configuration
from peerify_dagster.domain.prompts import load_prompt
from peerify_dagster.partitions import EVERY_PARTITION, prediction_partitions
from peerify_dagster.resources.dagster_resources import (
    LakeResource,
    LLMGatewayResource,
    PredictionConfigurationsResource,
    RetrievalResource,
    VenueRegistryResource,
)
from peerify_dagster.resources.llm_gateway.registry import ModelRegistry
from peerify_dagster.resources.shard_io import (
    POSITION,
    SHARD_IO_MANAGER,
    SHARD_SCHEMA,
    assemble_shards,
    split_by_paper,
)

VERIFY_PROMPT = pred.VERIFY_PROMPT

PREDICTION_SCHEMA = {
    "venue": pl.String, "configuration": pl.String, "verifier": pl.String, "mode": pl.String,
    "retriever": pl.String, "k": pl.Int64, "claim_id": pl.String, "paper_id": pl.String, "claim_source": pl.String,
    "status": pl.String, "evidence_chunk_ids": pl.List(pl.String), "label": pl.String, "raw_label": pl.String,
    "parse_ok": pl.Boolean, "tokens_in": pl.Int64, "tokens_out": pl.Int64, "call_id": pl.String, "error": pl.String,
    "prompt_id": pl.String, "gold_label": pl.String,
}


# The planned rows of a configuration: a row that makes a call carries what its verifier is shown (the claim, the
# shown chunks' texts or the thread text), which the assembly drops.
PLANNED_SCHEMA = {**PREDICTION_SCHEMA, "claim_text": pl.String, "evidence_texts": pl.List(pl.String),
                  "thread_text": pl.String}
# What each shard's step reports beside its rows, gathered into the predictions' metadata: the verifier models it ran
# (an NLI model's id), its seconds, and the ledger segments it found unreadable and moved to quarantine.
QUARANTINED_TYPE = pl.Struct({"segment": pl.String, "moved_to": pl.String, "reason": pl.String,
                              "call_ids": pl.List(pl.String)})
SHARD_REPORT_SCHEMA = {"verifiers": pl.List(pl.String), "seconds": pl.Float64,
                       "quarantined": pl.List(QUARANTINED_TYPE)}


def _configuration(context: dg.OpExecutionContext,
                   prediction_configurations: PredictionConfigurationsResource) -> pred.Configuration:
    """The configuration of the `<configuration>|<venue>` partition; an unknown one fails the step, never retried."""
    try:
        return prediction_configurations.load().get(venue_and_configuration(context.partition_key)[1])
    except pred.ConfigurationError as error:
        raise dg.Failure(str(error), allow_retries=False) from None


def _configured_shards(venue_registry: VenueRegistryResource, venue: str) -> int | None:
    # The predictions read the lake only: a venue the registry does not name (its tables in the lake alone) is
    # sharded automatically.
    venues = venue_registry.venues()
    return venues[venue].shards if venue in venues else None


@dg.op(ins={"inputs": dg.In(dg.Nothing)}, out=dg.DynamicOut(pl.DataFrame, io_manager_key=SHARD_IO_MANAGER))
def plan_prediction_shards(context: dg.OpExecutionContext, lake: LakeResource, llm: LLMGatewayResource,
                           prediction_configurations: PredictionConfigurationsResource, retrieval: RetrievalResource,
                           venue_registry: VenueRegistryResource):
    """Every row of the partition's predictions in their final order (per verifier model, then claim), in shards of
    the claims' papers: the rows that make a call carry what the verifier is shown, the others are complete. The
    evidence is chosen here for the whole venue (no model is called), so only the verifier's calls run per shard."""
    venue, name = venue_and_configuration(context.partition_key)
    configuration = _configuration(context, prediction_configurations)
    if configuration.mode == pred.MODE_RAG and configuration.k > retrieval.k:
        raise dg.Failure(f"configuration {name!r} shows k={configuration.k} passages, but retrieval keeps the top "
                         f"{retrieval.k} only; lower k or raise the retrieval resource's k", allow_retries=False)
    retrieval_queries, retrieval_runs, chunks = (lake.read_input(table, venue) for table in pred.INPUT_TABLES)
    paper_chunks, text_of = pred.chunks_by_paper(chunks)
    if configuration.nli_model is not None:  # the chunks' classes, whatever their length: no window, no prompt
        windows, prompt_id, threads = {configuration.verifier: None}, None, None
    else:
        prompt_id = configuration.prompt_id
        template = load_prompt(prompt_id)
        models = ModelRegistry.load(profile=llm.profile)
        specs = {verifier: models.model(verifier) for verifier in verifier_models(configuration, models)}
        windows = {verifier: pred.prompt_window(spec.context_window, spec.decoding.get("max_tokens"),
                                                template.system + template.user) for verifier, spec in specs.items()}
        threads = _thread_texts(lake, venue) if configuration.mode == pred.MODE_THREAD else None
    rows = []
    for verifier, window in windows.items():
        planned = pred.plan_predictions(configuration, retrieval_queries.iter_rows(named=True),
                                        retrieval_runs.iter_rows(named=True), paper_chunks, window, threads)
        _warn_uncalled(context, verifier, planned)
        rows += [_row(venue, configuration, verifier, plan, {
            "claim_text": plan.claim["claim_text"], "thread_text": plan.thread_text,
            "evidence_texts": [text_of[chunk_id] for chunk_id in plan.evidence_chunk_ids],
        } if plan.status == pred.STATUS_OK else {"error": plan.reason}, prompt_id) for plan in planned]
    planned_rows = pl.DataFrame(rows, schema=PLANNED_SCHEMA)
    yield from split_by_paper(planned_rows, _configured_shards(venue_registry, venue), context.log, "prediction rows")


@dg.op(out={"rows": dg.Out(pl.DataFrame, io_manager_key=SHARD_IO_MANAGER),
            "usage": dg.Out(pl.DataFrame, io_manager_key=SHARD_IO_MANAGER),
            "report": dg.Out(pl.DataFrame, io_manager_key=SHARD_IO_MANAGER)},
       pool="llm", tags=queue_tags("llm"))
def predict_shard(context: dg.OpExecutionContext, shard: pl.DataFrame, lake: LakeResource, llm: LLMGatewayResource,
                  prediction_configurations: PredictionConfigurationsResource):
    """The verifier's answer for each of the shard's rows that make a call, per verifier model in the plan's order
    (an NLI verifier: the chunks' classes, no LLM call)."""
    configuration = _configuration(context, prediction_configurations)
    started = time.monotonic()
    calls = shard.filter(pl.col("status") == pred.STATUS_OK)
    if configuration.nli_model is not None:
        verifiers, answers = _nli_answers(configuration, calls)
        usage, quarantined = pl.DataFrame(schema=USAGE_SCHEMA), []
    else:
        verifiers, answers, usage, quarantined = _verifier_answers(context, configuration, calls, lake, llm)
    rows = [{**row, **answers[row[POSITION]]} if row[POSITION] in answers else row
            for row in shard.iter_rows(named=True)]
    yield dg.Output(pl.DataFrame(rows, schema={**PLANNED_SCHEMA, **SHARD_SCHEMA}), output_name="rows")
    yield dg.Output(usage, output_name="usage")
    yield dg.Output(pl.DataFrame([{"verifiers": verifiers, "seconds": time.monotonic() - started,
                                   "quarantined": quarantined}], schema=SHARD_REPORT_SCHEMA), output_name="report")


@dg.op
def assemble_predictions(context: dg.OpExecutionContext, rows: list[pl.DataFrame], usage: list[pl.DataFrame],
                         reports: list[pl.DataFrame],
                         prediction_configurations: PredictionConfigurationsResource) -> pl.DataFrame:
    """The partition's predictions from its shards', in the planned order; the shards' usage summed."""
    configuration = _configuration(context, prediction_configurations)
    frame, sharding = assemble_shards(rows)
    frame = frame.select(list(PREDICTION_SCHEMA))
    report = pl.concat(reports)
    # Every shard runs the configuration's verifiers; the seconds are the shards' own, summed (not the wall clock).
    metadata = {**_metadata(frame, configuration, report["verifiers"][0].to_list(), report["seconds"].sum()),
                **sharding}
    if configuration.nli_model is not None:
        metadata["calls_made"] = 0
    else:
        metadata.update(shard_usage_metadata(usage))
        metadata["ledger_segments_quarantined"] = dg.MetadataValue.json(
            report.select(pl.col("quarantined").explode(empty_as_null=False))["quarantined"].to_list())
    context.add_output_metadata(metadata)
    return frame


@dg.graph_asset(partitions_def=prediction_partitions, group_name="predictions", kinds={"python", "parquet"},
                # Venue-partitioned inputs of a `<configuration>|<venue>` partition: read from the lake for its venue
                # (Dagster cannot map a pair key to its venue, see partitions.py). claim_threads is read by mode
                # thread only, so the other modes run without it (a venue predicted before claim_threads existed).
                ins={name: dg.AssetIn(partition_mapping=EVERY_PARTITION, dagster_type=dg.Nothing)
                     for name in (*pred.INPUT_TABLES, pred.THREAD_TABLE)})
def predictions(retrieval_queries, retrieval_runs, chunks, claim_threads):
    """Per claim the configuration covers and verifier model: the label given what the configuration shows it
    (`rag`: the retriever's top-k passages; `full_context`: every chunk of the manuscript; `oracle`: the gold
    chunks; `thread`: the claim's thread text from claim_threads, with the thread labeller's prompt
    `label_rebuttal`), the raw label, parse status, the chunk ids shown, tokens and the ledger call id. Unparseable
    answers keep label null and parse_ok false. A claim that gets no call keeps its row with the status saying why
    (`no_manuscript`, `no_evidence`, `too_long`: a manuscript or thread that does not fit the model's window is
    never truncated; `no_thread`). An NLI configuration (`verifier: nli:<folder>`, the paper's non-LLM baseline)
    classifies each shown chunk against the claim instead: entailment -> Supported, contradiction -> Not Supported,
    neutral -> Not Determined (raw_label: the chunks' classes in order; no call id). The verifier's calls run one
    step per shard of the claims' papers."""
    rows, usage, reports = plan_prediction_shards(
        inputs=[retrieval_queries, retrieval_runs, chunks, claim_threads]).map(predict_shard)
    return assemble_predictions(rows.collect(), usage.collect(), reports.collect())


def _thread_texts(lake: LakeResource, venue: str) -> dict[str, str | None]:
    """claim id -> its thread text (claim_threads of the venue)."""
    try:
        threads = lake.lake().read_table(pred.THREAD_TABLE, venue)
    except FileNotFoundError:
        raise dg.Failure(f"mode thread needs claim_threads of {venue}: build the venue first (`peerify build "
                         f"{venue}`), or import its release", allow_retries=False) from None
    return dict(zip(threads["claim_id"], threads["thread_text"]))


def verifier_models(configuration: pred.Configuration, registry: ModelRegistry) -> list[str]:
    """The models a configuration's verifier names: the model itself, or each model of the role."""
    if configuration.verifier in registry.models:
        return [configuration.verifier]
    return registry.models_for_role(configuration.verifier)


def _verifier_answers(context: dg.OpExecutionContext, configuration: pred.Configuration, calls: pl.DataFrame,
                      lake: LakeResource, llm: LLMGatewayResource) -> tuple[list[str], dict[int, dict], pl.DataFrame,
                                                                            list[dict]]:
    """The LLM verifier's answers to the planned calls, per verifier model: the models, position -> the row fields
    its answer fills, the usage counters and the ledger segments found unreadable (moved to quarantine)."""
    answers = {}
    with llm.gateway(lake.lake(), run_id=context.run_id) as gateway:
        verifiers = verifier_models(configuration, gateway.registry)
        if configuration.verifier not in verifiers:  # a role: its models are checked before any call
            gateway.preflight([configuration.verifier])
        for verifier in verifiers:
            todo = calls.filter(pl.col("verifier") == verifier)
            items = [pred.verifier_item(claim, zip(chunk_ids, texts), thread) for claim, chunk_ids, texts, thread
                     in todo.select("claim_text", "evidence_chunk_ids", "evidence_texts", "thread_text").iter_rows()]

            def progress(done: int, total: int, _result, verifier: str = verifier) -> None:
                if done == total or done % 10 == 0:
                    context.log.info(f"{configuration.name} / {verifier}: {done}/{total} claims predicted")

            results = gateway.map(verifier, configuration.prompt_id, items, role=pred.VERIFIERS_ROLE,
                                  progress=progress)
            answers.update(zip(todo[POSITION], map(_answer, results)))
        usage = usage_frame(gateway)
    for record in gateway.quarantined:
        context.log.warning(record.describe())
    quarantined = [{"segment": str(r.segment), "moved_to": str(r.moved_to) if r.moved_to else None,
                    "reason": r.reason, "call_ids": list(r.call_ids)} for r in gateway.quarantined]
    return verifiers, answers, usage, quarantined


def _nli_answers(configuration: pred.Configuration, calls: pl.DataFrame) -> tuple[list[str], dict[int, dict]]:
    """The NLI baseline: each shown chunk (premise) against the claim (hypothesis); no LLM call, no ledger row. The
    classifier's id, and position -> the row fields its answer fills."""
    from peerify_dagster.resources.nli import NliClassifier

    try:
        classifier = NliClassifier(configuration.nli_model)
    except (OSError, ValueError) as error:
        raise dg.Failure(f"configuration {configuration.name!r}: NLI model {configuration.nli_model}: {error}",
                         allow_retries=False) from None
    answers = {}
    for position, claim, texts in calls.select(POSITION, "claim_text", "evidence_texts").iter_rows():
        classified = classifier.classify([(text, claim) for text in texts])
        classes = [nli for nli, _ in classified]
        answers[position] = {"label": pred.nli_verdict(classes), "raw_label": ",".join(classes), "parse_ok": True,
                             "tokens_in": sum(tokens for _, tokens in classified), "tokens_out": 0}
    return [classifier.model_id], answers


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

"""`peerify build <venue> --estimate`: the LLM calls a build of the venue would make, per stage (each prediction
configuration is one), role and model, with input/output tokens and cost (prices from models.yaml), without calling
any model; calls the ledger already answers are left out (they are free).

Only stages whose requests can be known before running are estimated: the predictions of each configuration, from
the venue's retrieval tables in the lake. Every other LLM stage is listed apart as not yet known, with the reason,
never guessed: its inputs are made by an earlier LLM stage of the same build, or it plans its calls inside its step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import polars as pl

from peerify_dagster.domain import predictions as pred
from peerify_dagster.domain.prompts import load_prompt
from peerify_dagster.resources.lake import Lake

# LLM stages whose requests are not estimated, and the roles they call.
OTHER_LLM_STAGES = {
    "review_claims, claim_types": ("extractor", "fact_tagger"),
    "paper_claims": ("extractor",),
    "claim_labels": ("labeller_a", "labeller_b"),
}
PREDICTION_INPUTS = ("retrieval_queries", "retrieval_runs", "chunks")
THREAD_INPUT = "claim_threads"  # read by mode thread only


@dataclass
class EstimateRow:
    stage: str
    role: str
    model: str
    calls: int = 0  # calls to make (distinct call ids the ledger does not answer)
    ledger_hits: int = 0  # calls the ledger answers: free, not counted in tokens or cost
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    output_basis: str = ""  # where tokens_out comes from


@dataclass
class Estimate:
    rows: list[EstimateRow] = field(default_factory=list)
    not_known: list[tuple[str, str]] = field(default_factory=list)  # (stage, why its calls are not estimated)


def estimate_build(lake: Lake, venue: str, configurations: Sequence[pred.Configuration],
                   gateway) -> Estimate:  # noqa: ANN001 - an LLMGateway
    """The calls the venue's build would make under `configurations`; `gateway` is an LLMGateway that is never asked
    to call a model."""
    from assets.predictions import chunks_by_paper

    estimate = Estimate()
    estimate.not_known += [(stage, f"roles {', '.join(roles)}: their requests are planned inside the stage's step "
                                   "(from inputs an earlier step of the build makes); not estimated")
                           for stage, roles in OTHER_LLM_STAGES.items()]
    llm_configurations = [c for c in configurations if c.nli_model is None]
    threaded = any(c.mode == pred.MODE_THREAD for c in llm_configurations)
    missing = [table for table in PREDICTION_INPUTS + (THREAD_INPUT,) * threaded
               if not lake.table_path(table, venue).exists()]
    if missing and llm_configurations:
        estimate.not_known.append((
            "predictions", f"{len(llm_configurations)} configuration(s): {', '.join(missing)} of {venue} are not in "
                           "the lake yet (build the venue first: its retrieval decides each request)"))
        return estimate
    if not llm_configurations:
        return estimate
    queries, runs = (lake.read_table(t, venue).to_dicts() for t in PREDICTION_INPUTS[:2])
    paper_chunks, text_of = chunks_by_paper(lake.read_table("chunks", venue))
    threads = dict(lake.read_table(THREAD_INPUT, venue).select("claim_id", "thread_text").iter_rows()) \
        if threaded else None
    answers = _mean_answer_tokens(lake)
    rows: dict[tuple[str, str], EstimateRow] = {}  # (stage, model) -> its row; one stage per configuration
    seen: set[str] = set()  # a call made once is served from the ledger the next time (another configuration)
    for configuration in llm_configurations:
        names = ([configuration.verifier] if configuration.verifier in gateway.registry.models
                 else gateway.models_for_role(configuration.verifier))
        prompt_id = configuration.prompt_id
        template = load_prompt(prompt_id)
        for name in names:
            spec = gateway.registry.model(name)
            window = pred.prompt_window(spec.context_window, spec.decoding.get("max_tokens"),
                                        template.system + template.user)
            planned = pred.plan_predictions(configuration, queries, runs, paper_chunks, window, threads)
            calls = gateway.plan_calls(name, prompt_id, pred.verifier_items(planned, text_of),
                                       role=pred.VERIFIERS_ROLE)
            stage = f"predictions:{configuration.name}"
            row = rows.setdefault((stage, name), EstimateRow(stage, pred.VERIFIERS_ROLE, name))
            for call in calls:
                if call.in_ledger or call.call_id in seen:
                    row.ledger_hits += 1
                    continue
                seen.add(call.call_id)
                known = answers.get((name, prompt_id))
                row.calls += 1
                row.tokens_in += pred.estimated_tokens(call.prompt_text)
                row.tokens_out += round(known) if known is not None else int(call.max_tokens or 0)
                row.output_basis = ("mean of the ledger's answers" if known is not None
                                    else "max_tokens (no answer of this model and prompt in the ledger)")
            row.cost_usd = (row.tokens_in * spec.price_in_per_million
                            + row.tokens_out * spec.price_out_per_million) / 1e6
    estimate.rows = list(rows.values())
    return estimate


def _mean_answer_tokens(lake: Lake) -> dict[tuple[str, str], float]:
    """(model, prompt id) -> mean output tokens of its successful calls in the ledger."""
    files = sorted((lake.root / "llm_calls").glob("*.parquet"))
    if not files:
        return {}
    ledger = pl.read_parquet(files, columns=["model", "prompt_id", "tokens_out", "error"])
    means = ledger.filter(pl.col("error").is_null()).group_by("model", "prompt_id").agg(pl.col("tokens_out").mean())
    return {(m, p): float(t) for m, p, t in means.iter_rows()}


def format_estimate(estimate: Estimate, venue: str) -> str:
    lines = [f"Estimate for {venue}: no model was called; calls the ledger answers are free and left out.", ""]
    header = ("stage", "role", "model", "calls", "ledger_hits", "tokens_in", "tokens_out", "cost_usd", "output tokens")
    cells = [header] + [(r.stage, r.role, r.model, str(r.calls), str(r.ledger_hits), str(r.tokens_in),
                         str(r.tokens_out), f"{r.cost_usd:.4f}", r.output_basis) for r in estimate.rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines += ["  ".join(value.ljust(width) for value, width in zip(row, widths)).rstrip() for row in cells]
    total = sum(r.cost_usd for r in estimate.rows)
    lines += ["", f"total: {sum(r.calls for r in estimate.rows)} calls, ${total:.4f} (input tokens estimated at "
                  f"{pred.CHARS_PER_TOKEN} characters per token, an over-count)"]
    lines += [f"not yet known: {stage}: {why}" for stage, why in estimate.not_known]
    return "\n".join(lines)

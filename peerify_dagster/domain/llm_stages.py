"""The LLM stages of the asset graph, declared once: the asset that makes the calls, the tables that reference them
(and by which columns), the roles and prompts it calls, and how its calls are counted. `peerify build` preflights
these roles and prompts, `--estimate` estimates every stage, and `llm_usage` counts the calls the venue's tables
reference.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from peerify_dagster.domain.citations.verdicts import (
    CITANCE_TAGGER_ROLE,
    CITATION_VERIFIERS_ROLE,
    TAG_CITANCE_PROMPT,
    VERIFY_CITATION_PROMPT,
)
from peerify_dagster.domain.labelling import LABELLER_ROLES, MANUSCRIPT_PROMPT, THREAD_PROMPT
from peerify_dagster.domain.predictions import VERIFIERS_ROLE, VERIFY_PROMPT

EXTRACTION, TAGGING, PAPER_CLAIMS, LABELLING, PREDICTIONS = (
    "review_claims", "claim_types", "paper_claims", "claim_labels", "predictions")
CITANCE_TAGGING, CITATION_VERDICTS, REVIEW_CITATION_VERDICTS = (
    "citance_enrichment", "citation_verdicts", "review_citation_verdicts")


@dataclass(frozen=True)
class LLMStage:
    name: str  # the asset whose step makes the calls
    call_id_columns: Mapping[str, tuple[str, ...]]  # table -> its columns holding ledger call ids
    roles: tuple[str, ...]
    prompts: tuple[str, ...]
    counted: str  # how many calls the stage makes (what `--estimate` multiplies)
    typical_input_chars: int  # the variable text of one call, assumed while nothing of the venue is known
    per_configuration: bool = False  # one partition per venue x configuration (not a venue table)


LLM_STAGES: tuple[LLMStage, ...] = (
    LLMStage(EXTRACTION, {"review_claims": ("call_id",), "claims_dropped": ("call_id",)}, ("extractor",),
             ("extract_claims",), "one call per review section and reviewer follow-up", 1500),
    LLMStage(TAGGING, {"claim_types": ("call_id",)}, ("fact_tagger",), ("tag_fact",),
             "one call per review claim", 200),
    LLMStage(PAPER_CLAIMS, {"paper_claims": ("claim_call_id", "rephrase_call_id"),
                            "paper_claims_dropped": ("call_id",)},
             ("extractor",), ("extract_paper_claim", "rephrase_claim"),
             "per drawn paragraph (5 a paper): one claim, then one rephrasing of a usable claim", 1000),
    LLMStage(LABELLING, {"claim_labels": ("call_id",)}, tuple(LABELLER_ROLES.values()), (THREAD_PROMPT,
                                                                                         MANUSCRIPT_PROMPT),
             "one call per review claim x source (thread, manuscript) x labeller; none for a thread without author "
             "response", 3000),
    LLMStage(PREDICTIONS, {"predictions": ("call_id",)}, (VERIFIERS_ROLE,), (VERIFY_PROMPT, THREAD_PROMPT),
             "per configuration: one call per claim it covers x verifier model", 3000, per_configuration=True),
    LLMStage(CITANCE_TAGGING, {"citance_enrichment": ("call_id",)}, (CITANCE_TAGGER_ROLE,), (TAG_CITANCE_PROMPT,),
             "one call per citance, only where the venue turns citations.enrichment on", 300),
    LLMStage(CITATION_VERDICTS, {"citation_verdicts": ("call_id",)}, (CITATION_VERIFIERS_ROLE,),
             (VERIFY_CITATION_PROMPT,),
             "one call per citance x cited entry whose paper was found (with retrieval: and has a passage above the "
             "relevance floor) x citation verifier x evidence mode", 2500),
    LLMStage(REVIEW_CITATION_VERDICTS, {"review_citation_verdicts": ("call_id",)}, (CITATION_VERIFIERS_ROLE,),
             (VERIFY_CITATION_PROMPT,),
             "one call per review sentence x work it cites whose paper was found (and has a passage above the "
             "relevance floor) x citation verifier, only where the venue turns citations.review_citations on", 2500),
)
STAGES_BY_NAME = {stage.name: stage for stage in LLM_STAGES}

# The venue tables that reference ledger calls, and their call-id columns: what llm_usage counts and what the sample's
# recording keeps (scripts/record_sample_llm_calls.py). The predictions' calls are counted in their own rows.
VENUE_CALL_ID_COLUMNS: dict[str, tuple[str, ...]] = {
    table: columns for stage in LLM_STAGES if not stage.per_configuration
    for table, columns in stage.call_id_columns.items()}


def prompts_by_role(prediction_prompts: Iterable[str] | None = None) -> dict[str, list[str]]:
    """role -> the prompts the graph calls it with, for every role of every stage. `prediction_prompts`: the prompts
    of the configurations a build runs (only those need a recorded answer in cache mode replay-only)."""
    chosen: dict[str, list[str]] = {}
    for stage in LLM_STAGES:
        prompts = list(prediction_prompts) if stage.per_configuration and prediction_prompts is not None \
            else list(stage.prompts)
        for role in stage.roles:
            chosen.setdefault(role, [])
            chosen[role] += [prompt for prompt in prompts if prompt not in chosen[role]]
    return chosen

"""Tests of domain/citations/verdicts.py and its two prompts: the prompts render with the gateway's loader, their
schemas accept every verdict, claim type and hedge level, answers are read tolerantly but never guessed, a missing
cited paper is Not Enough Information without a call, and a real gateway call through a loopback OpenAI server
comes back as a verdict."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from peerify_dagster.domain.citations.evidence import no_relevant_passage_reason
from peerify_dagster.domain.citations.verdicts import (
    CITATION_LABELS,
    NOT_ENOUGH_INFORMATION,
    STATUS_ERROR,
    STATUS_NO_CITED_PAPER,
    STATUS_NO_RELEVANT_PASSAGE,
    STATUS_OK,
    STATUS_PARSE_FAILED,
    STATUS_TOO_LONG,
    TAG_CITANCE_PROMPT,
    VERIFY_CITATION_PROMPT,
    call_verdict,
    no_cited_paper,
    no_relevant_passage,
    normalise_citation_label,
    parse_citance_tag,
    parse_verdict,
    tag_variables,
    too_long,
    verdict_variables,
)
from peerify_dagster.domain.citations.vocabulary import CLAIM_TYPES, HEDGE_LEVELS
from peerify_dagster.domain.llm_calls import parse_answer, validate_against_schema
from peerify_dagster.domain.prompts import load_prompt
from peerify_dagster.resources.lake import Lake
from peerify_dagster.resources.llm_gateway import LLMGateway
from tests import fixtures_pdf
from tests.citation_support import run_citation_job, write_citation_venue
from tests.fakes.openai_server import ScriptedOpenAIServer
from tests.test_citation_assets import CITED_PDF, CITED_TITLE
from tests.test_verification_assets import models_file

CITANCE = "Dropout may reduce overfitting in deep networks [12]."
PASSAGES = [("sha256:ab:w3.0-2", "We show that dropout reduces overfitting. It improves test error on MNIST."),
            ("sha256:ab:w5.1-3", "Training took two days on one GPU.")]


def test_verify_citation_renders_every_variable_with_the_passages_and_their_ids() -> None:
    template = load_prompt(VERIFY_CITATION_PROMPT)
    variables = verdict_variables(CITANCE, "causal", True, "Dropout: a simple way", PASSAGES)

    assert template.fields == set(variables)
    system, user = template.render(variables)
    assert "Not Enough Information" in system["content"] and "causal" in system["content"]
    assert CITANCE in user["content"] and "Dropout: a simple way" in user["content"]
    assert "[sha256:ab:w3.0-2] We show that dropout" in user["content"]
    assert "Hedged: yes" in user["content"] and "Kind of claim: causal" in user["content"]
    unknown = verdict_variables(CITANCE, None, None, None, PASSAGES)
    assert (unknown["claim_type"], unknown["hedge"], unknown["cited_title"]) == ("unknown", "unknown", "unknown")
    assert verdict_variables(CITANCE, "descriptive", False, "T", PASSAGES)["hedge"] == "no"


def test_verdict_variables_refuse_an_unknown_claim_type_and_a_call_without_passages() -> None:
    with pytest.raises(ValueError, match="'speculative' is not one of"):
        verdict_variables(CITANCE, "speculative", False, "T", PASSAGES)
    with pytest.raises(ValueError, match="at least one passage"):
        verdict_variables(CITANCE, "causal", False, "T", [])


@pytest.mark.parametrize("label", CITATION_LABELS)
def test_the_verdict_schema_accepts_each_verdict_and_the_gateway_parse_keeps_it(label: str) -> None:
    schema = load_prompt(VERIFY_CITATION_PROMPT).output_schema
    answer = {"verdict": label, "explanation": "Passage w3.0-2 says so."}

    assert validate_against_schema(answer, schema) == []
    # The gateway's own parse (its ledger's parse_ok): Not Enough Information is no parse failure.
    assert parse_answer(json.dumps(answer), schema).parse_ok
    assert parse_verdict(json.dumps(answer)) == parse_verdict(answer)
    assert parse_verdict(answer).label == label


def test_the_verdict_schema_refuses_peerify_labels_it_does_not_have() -> None:
    schema = load_prompt(VERIFY_CITATION_PROMPT).output_schema
    assert validate_against_schema({"verdict": "Not Determined", "explanation": "x"}, schema)
    assert validate_against_schema({"verdict": "Supported"}, schema)  # explanation required


@pytest.mark.parametrize(("answer", "label", "explanation"), [
    ('Here you go:\n```json\n{"verdict": "Partially Supported", "explanation": "Only on MNIST."}\n```',
     "Partially Supported", "Only on MNIST."),
    ('{"verdict": "not enough information", "explanation": " "}', NOT_ENOUGH_INFORMATION, None),
    ('{"verdict": "NEI", "explanation": "Nothing on dropout."}', NOT_ENOUGH_INFORMATION, "Nothing on dropout."),
    ('{"verdict": "Not Determined", "explanation": "x"}', NOT_ENOUGH_INFORMATION, "x"),
    ('{"verdict": "Unsupported", "explanation": "It says the opposite."}', "Not Supported", "It says the opposite."),
    ('{"label": "SUPPORTED.", "justification": "w3 says it."}', "Supported", "w3 says it."),
    ('{"verdict": "Supported"}', "Supported", None),
])
def test_parse_verdict_reads_what_models_write(answer: str, label: str, explanation: str | None) -> None:
    verdict = parse_verdict(answer)
    assert (verdict.status, verdict.label, verdict.explanation) == (STATUS_OK, label, explanation)


@pytest.mark.parametrize(("answer", "reason"), [
    (None, "empty answer"),
    ("", "empty answer"),
    ("Supported. The paper shows it.", "no JSON object"),  # prose is never read as a verdict
    ('{"verdict": "Mostly true", "explanation": "x"}', "'Mostly true' is not one of"),
    ('{"verdict": 1, "explanation": "x"}', "1 is not one of"),
    ('{"explanation": "x"}', "None is not one of"),
    ('{"verdict": "Supported"', "no JSON object"),
])
def test_parse_verdict_never_guesses(answer: str | None, reason: str) -> None:
    verdict = parse_verdict(answer)
    assert (verdict.status, verdict.label) == (STATUS_PARSE_FAILED, None)
    assert reason in verdict.reason


def test_normalise_citation_label_maps_onto_the_four_verdicts_only() -> None:
    assert [normalise_citation_label(label) for label in CITATION_LABELS] == list(CITATION_LABELS)
    assert normalise_citation_label("partially_supported") == "Partially Supported"
    assert normalise_citation_label("insufficient evidence") == NOT_ENOUGH_INFORMATION
    assert normalise_citation_label("Mostly") is None and normalise_citation_label(None) is None


def test_verdicts_without_a_model_answer() -> None:
    missing = no_cited_paper("no full text: arXiv and the library have no match")
    assert (missing.status, missing.label) == (STATUS_NO_CITED_PAPER, NOT_ENOUGH_INFORMATION)
    assert "arXiv and the library have no match" in missing.explanation and "No model was asked" in missing.explanation

    long = too_long("the cited paper (about 40000 tokens) does not fit")
    assert (long.status, long.label, long.explanation) == (STATUS_TOO_LONG, None, None)
    assert "40000" in long.reason

    failed = call_verdict("gave up after 5 attempts; last error: 500", None)
    assert (failed.status, failed.label) == (STATUS_ERROR, None)
    assert failed.reason == "gave up after 5 attempts; last error: 500"
    assert call_verdict(None, '{"verdict": "Supported", "explanation": "w3"}').label == "Supported"



def test_no_relevant_passage_is_not_enough_information_without_a_call() -> None:
    reason = "no window of the cited paper clears the hybrid relevance floor (bm25 0.07 or dense 0.4)"

    verdict = no_relevant_passage(reason)

    assert (verdict.status, verdict.label, verdict.reason) == (
        STATUS_NO_RELEVANT_PASSAGE, NOT_ENOUGH_INFORMATION, reason)
    assert verdict.explanation.startswith("No model was asked") and reason in verdict.explanation

def test_tag_citance_renders_and_its_schema_accepts_every_value() -> None:
    template = load_prompt(TAG_CITANCE_PROMPT)
    variables = tag_variables(f"  {CITANCE} ")
    assert template.fields == set(variables)
    assert CITANCE in template.render(variables)[-1]["content"]
    for claim_type in CLAIM_TYPES:
        for hedge_level in HEDGE_LEVELS:
            answer = {"claim_type": claim_type, "hedge_level": hedge_level, "supported_text": "Dropout helps"}
            assert validate_against_schema(answer, template.output_schema) == []
    assert validate_against_schema({"claim_type": "causal", "hedge_level": "medium", "supported_text": "x"},
                                   template.output_schema)


def test_parse_citance_tag() -> None:
    ok = parse_citance_tag(None, '{"claim_type": "Causal", "hedge_level": "weak", '
                                 '"supported_text": "Dropout may reduce overfitting"}', CITANCE)
    assert (ok.status, ok.claim_type, ok.hedge_level, ok.supported_text) == (
        STATUS_OK, "causal", "weak", "Dropout may reduce overfitting")
    # The model dropped a marker from the middle of the sentence: the words are still the sentence's, in order.
    middle = "Dropout [12] and batch norm [13] reduce overfitting."
    assert parse_citance_tag(None, '{"claim_type": "causal", "hedge_level": "none", '
                                   '"supported_text": "Dropout and batch norm"}', middle).supported_text \
        == "Dropout and batch norm"
    paraphrase = parse_citance_tag(None, '{"claim_type": "causal", "hedge_level": "weak", '
                                         '"supported_text": "regularisation lowers variance"}', CITANCE)
    assert (paraphrase.status, paraphrase.claim_type, paraphrase.supported_text) == (STATUS_OK, "causal", None)
    assert "not part of the sentence" in paraphrase.reason
    shuffled = parse_citance_tag(None, '{"claim_type": "causal", "hedge_level": "weak", '
                                       '"supported_text": "overfitting may reduce Dropout"}', CITANCE)
    assert shuffled.supported_text is None  # the sentence's words, but not in its order
    bad = parse_citance_tag(None, '{"claim_type": "speculative", "hedge_level": "weak", "supported_text": "x"}',
                            CITANCE)
    assert (bad.status, bad.claim_type) == (STATUS_PARSE_FAILED, None) and "'speculative'" in bad.reason
    assert parse_citance_tag(None, "no json", CITANCE).status == STATUS_PARSE_FAILED
    assert parse_citance_tag("timed out", None, CITANCE).status == STATUS_ERROR


MODELS = """
default_profile: test
models:
  scripted:
    backend: openai
    model: scripted-model
    base_url_env: TEST_OPENAI_URL
    api_key_env: TEST_OPENAI_KEY
    structured_output: json_schema
profiles:
  test:
    citation_verifiers: [scripted]
"""


def test_a_gateway_call_of_verify_citation_comes_back_as_each_verdict(tmp_path: Path) -> None:
    (tmp_path / "models.yaml").write_text(MODELS, encoding="utf-8")

    def answer(request) -> str:
        # The item's number, written into its citing sentence, picks its verdict (calls may run in parallel).
        index = next(int(n) for n in "0123" if f"[12]. ({n})" in request["messages"][-1]["content"])
        return json.dumps({"verdict": CITATION_LABELS[index], "explanation": "From [sha256:ab:w3.0-2]."})

    with ScriptedOpenAIServer(answer) as server, LLMGateway(
            tmp_path / "lake", models_file=tmp_path / "models.yaml",
            env={"TEST_OPENAI_URL": server.base_url, "TEST_OPENAI_KEY": "sk-test"}) as gateway:
        items = [verdict_variables(f"{CITANCE} ({index})", "causal", True, "Dropout", PASSAGES)
                 for index in range(len(CITATION_LABELS))]
        results = gateway.map("scripted", VERIFY_CITATION_PROMPT, items)
        sent = server.requests[0]

    assert [call_verdict(r.error, r.raw_response).label for r in results] == list(CITATION_LABELS)
    assert all(r.parse_ok for r in results)  # the ledger records no parse failure, Not Enough Information included
    assert sent["response_format"]["json_schema"]["schema"]["properties"]["verdict"]["enum"] == list(CITATION_LABELS)


def test_a_claim_its_cited_paper_does_not_address_is_not_enough_information_without_a_call(tmp_path: Path,
                                                                                            monkeypatch) -> None:
    """Through the real `verify_citations` job: paper A cites paper B of the venue twice, once for what B says and
    once for a claim B never addresses; only the first is asked of the verifier."""
    citing = fixtures_pdf.citing_paper("Citation-Aware Retrieval for Scientific Claim Checking", (
        "Contrastive pretraining of citation graph encoders improves the retrieval of cited passages [1]. "
        # Shares "trained for three epochs" with paper B, nothing of its content.
        "Protein structure predictors are trained for three epochs on amino-acid sequences [1].",), (
        f"[1] Bea Baker and Carl Chen. {CITED_TITLE}. In Proceedings of the Test Workshop, 2026.",))
    with ScriptedOpenAIServer(responder=lambda request: json.dumps(
            {"verdict": "Supported", "explanation": "The passage says so."})) as verifier:
        monkeypatch.setenv("PEERIFY_MODELS_FILE", str(models_file(tmp_path, verifier.base_url)))
        monkeypatch.setenv("LOOPBACK_API_KEY", "test-key")
        registry = write_citation_venue(tmp_path, "floor", {"CitingPapA": citing, "CitedPaprB": CITED_PDF},
                                        {"resolve": ["venue"], "retriever": "bm25", "k": 2})
        result, _ = run_citation_job("floor", registry, tmp_path / "lake")
        requests = verifier.request_count
    assert result.success
    lake = Lake(tmp_path / "lake")
    evidence = {row["citance_id"]: row for row in lake.read_table("citation_evidence", "floor").to_dicts()}
    verdicts = {row["citance_id"]: row for row in lake.read_table("citation_verdicts", "floor").to_dicts()}
    on_topic, off_topic = "CitingPapA:c1", "CitingPapA:c2"

    assert evidence[on_topic]["status"] == STATUS_OK and "eleven points of recall" in evidence[on_topic]["text"]
    assert evidence[off_topic]["status"] == STATUS_NO_RELEVANT_PASSAGE
    assert evidence[off_topic]["reason"] == no_relevant_passage_reason("bm25")
    assert (verdicts[on_topic]["status"], verdicts[on_topic]["label"]) == (STATUS_OK, "Supported")
    off = verdicts[off_topic]
    assert (off["status"], off["label"], off["call_id"], off["tokens_in"], off["passage_ids"]) == (
        STATUS_NO_RELEVANT_PASSAGE, NOT_ENOUGH_INFORMATION, None, 0, [])
    assert requests == 1  # the verifier was asked about the on-topic claim only

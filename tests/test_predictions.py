"""Prediction configurations: the file and its checks, and what each mode shows the verifier for each claim."""

from __future__ import annotations

from pathlib import Path

import pytest

from peerify_dagster.domain import predictions as pred
from peerify_dagster.paths import REPO_ROOT
from peerify_dagster.resources.llm_gateway.registry import ModelRegistry

MODELS = ("smollm2-135m", "gpt-5-mini")


def write(folder: Path, text: str) -> Path:
    path = folder / "configurations.yaml"
    path.write_text(text)
    return path


def test_the_shipped_file_holds_the_papers_grid_and_a_small_sample_default():
    configurations = pred.load_configurations(REPO_ROOT / "configurations.yaml", ModelRegistry.load(env={}).models)
    rag = {(c.retriever, c.k) for c in configurations.configurations.values() if c.mode == pred.MODE_RAG}
    assert {("bm25", 10), ("dense", 10), ("bm25+rerank", 10), ("dense+rerank", 10), ("hybrid", 10)} <= rag
    modes = {c.mode for c in configurations.configurations.values()}
    assert modes == set(pred.MODES)
    sample = configurations.for_venue("sample")
    assert 1 <= len(sample) < len(configurations.configurations)
    # a venue the file does not list gets the paper's grid, never the sample's demo configurations
    unlisted = {c.name for c in configurations.for_venue("ICLR.cc/2024/Conference")}
    assert unlisted == set(configurations.other_defaults) and not unlisted & {"hybrid-top3",
                                                                              "full-context-paper-sourced"}


@pytest.mark.parametrize(("entry", "message"), [
    ("{verifier: gpt-6, mode: rag, retriever: bm25}", "unknown verifier 'gpt-6'"),
    ("{verifier: gpt-5-mini, mode: rag, retriever: colbert}", "unknown retriever 'colbert'"),
    ("{verifier: gpt-5-mini, mode: rag}", "unknown retriever None"),
    ("{verifier: gpt-5-mini, mode: summary}", "unknown mode 'summary'"),
    ("{verifier: gpt-5-mini, mode: oracle, retriever: bm25}", "mode oracle uses no retriever"),
    ("{verifier: gpt-5-mini, mode: rag, retriever: bm25, k: 0}", "k must be a positive integer"),
    ("{verifier: gpt-5-mini, mode: rag, retriever: bm25, claims: [Everything]}", "claims must be a list"),
    ("{verifier: gpt-5-mini, mode: rag, retriever: bm25, top_k: 3}", "unknown settings ['top_k']"),
])
def test_a_bad_configuration_is_refused_naming_it_and_the_reason(tmp_path, entry, message):
    path = write(tmp_path, f"configurations:\n  fine: {{verifier: verifiers, mode: full_context}}\n  broken: {entry}\n")
    with pytest.raises(pred.ConfigurationError) as error:
        pred.load_configurations(path, MODELS)
    assert "configuration 'broken'" in str(error.value) and message in str(error.value)
    assert str(path) in str(error.value)


@pytest.mark.parametrize(("text", "message"), [
    ("configurations:\n  a|b: {verifier: verifiers, mode: full_context}\n", "it is a partition key"),
    ("configurations: {}\n", "one or more named configurations"),
    ("configurations:\n  a: {verifier: verifiers, mode: full_context}\nvenues:\n  sample: [a, b]\n",
     "venues.sample names unknown configurations ['b']"),
    ("configurations: [\n", "not valid YAML"),
])
def test_a_bad_file_is_refused_with_the_reason(tmp_path, text, message):
    with pytest.raises(pred.ConfigurationError, match=None) as error:
        pred.load_configurations(write(tmp_path, text), MODELS)
    assert message in str(error.value)


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(pred.ConfigurationError, match="cannot be read"):
        pred.load_configurations(tmp_path / "nope.yaml", MODELS)


def test_the_configuration_hash_follows_the_definition():
    base = pred.Configuration("x", "verifiers", pred.MODE_RAG, "bm25", 10)
    assert base.content_hash() == pred.Configuration("x", "verifiers", pred.MODE_RAG, "bm25", 10).content_hash()
    assert base.content_hash() != pred.Configuration("x", "verifiers", pred.MODE_RAG, "bm25", 5).content_hash()


CLAIMS = [
    {"claim_id": "r1", "paper_id": "A", "claim_text": "review claim", "source": pred.SOURCE_REVIEW,
     "gold_chunk_ids": None},
    {"claim_id": "p1", "paper_id": "A", "claim_text": "paper claim", "source": pred.SOURCE_PAPER,
     "gold_chunk_ids": ["A-2", "A-gone"]},
    {"claim_id": "k1", "paper_id": "A", "claim_text": "key claim", "source": pred.SOURCE_ANSWER_KEY,
     "gold_chunk_ids": None},
    {"claim_id": "r2", "paper_id": "B", "claim_text": "claim on a paper without chunks", "source": pred.SOURCE_REVIEW,
     "gold_chunk_ids": None},
]
CHUNKS = {"A": [("A-1", "x" * 30), ("A-2", "y" * 30), ("A-3", "z" * 30)]}
RUNS = [
    {"claim_id": "r1", "retriever": "bm25", "rank": 2, "chunk_id": "A-3", "status": "ok"},
    {"claim_id": "r1", "retriever": "bm25", "rank": 1, "chunk_id": "A-2", "status": "ok"},
    {"claim_id": "r1", "retriever": "bm25", "rank": 3, "chunk_id": "A-1", "status": "ok"},
    {"claim_id": "r1", "retriever": "dense", "rank": 1, "chunk_id": "A-1", "status": "ok"},
    {"claim_id": "p1", "retriever": "bm25", "rank": 1, "chunk_id": "A-1", "status": "ok"},
    {"claim_id": "r2", "retriever": "bm25", "rank": None, "chunk_id": None, "status": "no_chunks"},
    {"claim_id": None, "retriever": "bm25+rerank", "rank": None, "chunk_id": None, "status": "unavailable",
     "error": "needs a cross-encoder reranker"},
]


def plan(configuration: pred.Configuration, window: int | None = 1000) -> dict[str, pred.PlannedPrediction]:
    return {p.claim["claim_id"]: p for p in pred.plan_predictions(configuration, CLAIMS, RUNS, CHUNKS, window)}


def test_rag_shows_the_top_k_in_rank_order_and_every_claim_keeps_a_row():
    planned = plan(pred.Configuration("c", "verifiers", pred.MODE_RAG, "bm25", 2))
    assert list(planned) == ["r1", "p1", "k1", "r2"]  # all claim sets by default, in claim order
    assert (planned["r1"].status, planned["r1"].evidence_chunk_ids) == (pred.STATUS_OK, ["A-2", "A-3"])
    assert planned["k1"].status == pred.STATUS_NO_EVIDENCE and "no rows for this claim" in planned["k1"].reason
    assert planned["r2"].status == pred.STATUS_NO_MANUSCRIPT and planned["r2"].evidence_chunk_ids == []


def test_an_unavailable_retriever_leaves_every_claim_without_evidence_and_says_why():
    planned = plan(pred.Configuration("c", "verifiers", pred.MODE_RAG, "bm25+rerank", 10))
    assert {p.status for cid, p in planned.items() if cid != "r2"} == {pred.STATUS_NO_EVIDENCE}
    assert "needs a cross-encoder reranker" in planned["r1"].reason


def test_oracle_shows_the_gold_chunks_of_paper_sourced_claims_only():
    planned = plan(pred.Configuration("o", "verifiers", pred.MODE_ORACLE, claims=tuple(pred.CLAIM_SETS)))
    assert list(planned) == ["p1"]
    assert planned["p1"].evidence_chunk_ids == ["A-2"]  # a gold chunk the manuscript no longer has is not shown


def test_full_context_shows_every_chunk_when_it_fits_and_is_never_truncated_when_not():
    configuration = pred.Configuration("f", "verifiers", pred.MODE_FULL_CONTEXT, claims=("RebuttalSourced",))
    fits = plan(configuration, window=1000)
    assert list(fits) == ["r1", "r2"] and fits["r1"].evidence_chunk_ids == ["A-1", "A-2", "A-3"]
    needed = pred.estimated_tokens("review claim" + "x" * 30 + "y" * 30 + "z" * 30)
    assert plan(configuration, window=needed)["r1"].status == pred.STATUS_OK
    too_long = plan(configuration, window=needed - 1)["r1"]
    assert (too_long.status, too_long.evidence_chunk_ids) == (pred.STATUS_TOO_LONG, [])
    assert f"about {needed} tokens" in too_long.reason


def test_claim_sets_choose_the_claims():
    claims = ("PaperSourced", "AnswerKey")
    planned = plan(pred.Configuration("c", "verifiers", pred.MODE_RAG, "bm25", 10, claims=claims))
    assert list(planned) == ["p1", "k1"]

"""The citation half's two optional paths, through the real `verify_citations` job: the citance tagger
(`citations.enrichment`), whose claim type picks the evidence window length and whose claim type and hedge the
verifier is told, and the merged evidence mode (`citations.modes: [windows, merged]`), the cited paper whole in one
call when it fits the verifier's window.

One small snapshot venue: paper A cites paper B of the same venue by its exact title with a numeric marker, in a
sentence the rule-based detector reads as descriptive and unhedged; the loopback model tags it causal and weakly
hedged (so its windows are five sentences, not three) and judges it. A second verifier with a small context window
judges the windows but cannot be shown B whole: its merged row is `too_long` with the reason, and no call."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
import polars as pl
import pytest
import yaml

from peerify_dagster.domain.citations.evidence import MERGED_KINDS
from peerify_dagster.domain.citations.sentences import split_sentences
from peerify_dagster.domain.frames import rows_where
from peerify_dagster.domain.predictions import estimated_tokens
from peerify_dagster.resources.lake import Lake
from tests import fixtures_pdf
from tests.citation_support import run_citation_job, write_citation_venue
from tests.fakes.openai_server import ScriptedOpenAIServer
from tests.support import materialization_metadata
from tests.test_verification_assets import models_file

KEY = "citeoptions"
CITING, CITED = "CitingPapA", "CitedPaprB"
CITED_TITLE = "Contrastive Pretraining of Citation Graph Encoders"
# Descriptive to the rules (no causal or predictive cue word), causal to the tagger.
CITANCE = "Contrastive pretraining of citation graph encoders was studied for scholarly retrieval [1]."
SUPPORTED_TEXT = "Contrastive pretraining of citation graph encoders"
CITING_PDF = fixtures_pdf.citing_paper("Citation-Aware Retrieval for Scientific Claim Checking", (
    f"{CITANCE} We build on this line of work and evaluate on three benchmarks of scientific claims.",), (
    f"[1] Bea Baker and Carl Chen. {CITED_TITLE}. In Proceedings of the Test Workshop, 2026.",))
CITED_PARAGRAPHS = (
    "We pretrain a graph encoder on citation links with a contrastive objective. Each citing paper is paired with "
    "the papers it cites. Negative pairs are drawn from the same field. The encoder has six layers. Training runs "
    "for three epochs on one machine. Pretraining raises the recall of cited passages by eleven points.",
    "Without the contrastive objective the gain disappears. Random negatives give half of the gain. Field negatives "
    "matter most for long papers. The effect holds for all three benchmarks. We release the encoder and its data.",
    "The benchmarks cover biology, physics and computer science. Each holds about two thousand citing sentences. "
    "Annotators marked the cited passage of every sentence. Agreement between annotators was high. Sentences whose "
    "cited paper had no full text were left out.",
    "Long papers remain the hardest case for the encoder. Their cited passages often lie in an appendix. Tables and "
    "figures are not encoded at all. We leave both to future work. A larger encoder did not help in our tests.",
)
CITED_PDF = fixtures_pdf.citing_paper(CITED_TITLE, CITED_PARAGRAPHS)
TAG = {"claim_type": "causal", "hedge_level": "weak", "supported_text": SUPPORTED_TEXT}
VERDICT = {"verdict": "Supported", "explanation": "The passages report the gain from contrastive pretraining."}
# Enough for the prompt and the top windows, not for the cited paper whole (checked below by the estimate the merged
# mode's fit uses).
SMALL, SMALL_WINDOW = "small", 1400
TABLES = ("citances", "citance_enrichment", "cited_papers", "citation_evidence", "citation_verdicts",
          "parsed_manuscripts")


def answer(request: dict) -> str:
    """The tagger's answer to `tag_citance` (its output schema asks for a hedge level), else a verdict."""
    return json.dumps(TAG if "hedge_level" in json.dumps(request.get("response_format")) else VERDICT)


def options_models_file(folder: Path, base_url: str) -> Path:
    """The verification tests' loopback profile, with the loopback model as citance tagger, and it and a model with
    a small context window on the same server as the citation verifiers (another model id: the ledger keys a call
    by it, so the same id would answer the small model's calls from the loopback's)."""
    path = models_file(folder, base_url)
    config = yaml.safe_load(path.read_text())
    config["models"][SMALL] = {**config["models"]["loopback"], "model": "scripted-small",
                               "context_window": SMALL_WINDOW}
    config["profiles"]["test"].update(citance_tagger="loopback", citation_verifiers=["loopback", SMALL])
    path.write_text(yaml.safe_dump(config))
    return path


@dataclass
class Built:
    result: dg.ExecuteInProcessResult
    tables: dict[str, pl.DataFrame]
    ledger: pl.DataFrame
    requests: list[dict]  # what the loopback model was asked, in order

    def rows(self, table: str, **where: Any) -> list[dict]:
        return rows_where(self.tables[table], **where)

    def one(self, table: str, **where: Any) -> dict:
        [row] = self.rows(table, **where)
        return row


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    folder = tmp_path_factory.mktemp("citation_options")
    with ScriptedOpenAIServer(responder=answer) as model, pytest.MonkeyPatch.context() as env:
        env.setenv("PEERIFY_MODELS_FILE", str(options_models_file(folder, model.base_url)))
        env.setenv("LOOPBACK_API_KEY", "test-key")
        registry = write_citation_venue(folder, KEY, {CITING: CITING_PDF, CITED: CITED_PDF}, {
            "resolve": ["venue"], "retriever": "bm25", "k": 2, "enrichment": True, "modes": ["windows", "merged"],
            "relevance_floor": {"bm25": 0.0}})  # two windows shown whatever their score: these tests count them
        result, _ = run_citation_job(KEY, registry, folder / "lake")
        lake = Lake(folder / "lake")
        yield Built(result, {name: lake.read_table(name, KEY) for name in TABLES},
                    pl.read_parquet(folder / "lake" / "llm_calls" / "*.parquet"), list(model.requests))


def citance_id(built: Built) -> str:
    [row] = built.rows("citances", paper_id=CITING)
    return row["citance_id"]


def test_the_run_completes_and_the_citance_resolves_to_the_venue_manuscript(built):
    assert built.result.success, [event.step_key for event in built.result.all_events if event.is_step_failure]
    citance = built.one("citances", paper_id=CITING)
    assert (citance["text"], citance["claim_type"], citance["hedged"]) == (CITANCE, "descriptive", False)
    assert built.one("cited_papers", entry_id=f"{CITING}:r1")["cited_key"] == f"forum:{CITED}"


# -- enrichment -------------------------------------------------------------------------------------------------------
def test_the_tagger_reads_every_citance_and_its_row_keeps_the_call(built):
    row = built.one("citance_enrichment", citance_id=citance_id(built))
    assert (row["status"], row["claim_type"], row["hedge_level"], row["supported_text"], row["reason"]) == (
        "ok", "causal", "weak", SUPPORTED_TEXT, None)
    assert row["prompt_id"] == "tag_citance"
    call = built.ledger.filter(pl.col("call_id") == row["call_id"]).to_dicts()
    assert [(c["role"], c["prompt_id"], c["model"]) for c in call] == [("citance_tagger", "tag_citance", "loopback")]
    assert materialization_metadata(built.result, "citance_enrichment", "calls_made") == [1]


def test_the_taggers_causal_claim_type_makes_the_windows_five_sentences(built):
    windows = built.rows("citation_evidence", citance_id=citance_id(built))
    assert [(w["status"], w["mode"], w["rank"]) for w in windows] == [("ok", "windows", 1), ("ok", "windows", 2)]
    assert {w["window_sentences"] for w in windows} == {5}  # the rules' descriptive would give 3
    for window in windows:
        assert window["passage_id"].startswith(f"forum:{CITED}:w")
        assert len(split_sentences(window["text"])) == 5


def test_the_verifier_is_told_the_taggers_claim_type_and_hedge(built):
    asked = [request["messages"][-1]["content"] for request in built.requests
             if "verdict" in json.dumps(request.get("response_format"))]
    assert len(asked) == 3
    for prompt in asked:  # the rules read the sentence as descriptive and unhedged
        assert "Kind of claim: causal\nHedged: yes: judge the hedged statement\n" in prompt


# -- merged mode ------------------------------------------------------------------------------------------------------
def test_each_verifier_judges_the_windows_and_the_one_whose_window_holds_the_paper_judges_it_whole(built):
    verdicts = {(row["verifier"], row["mode"]): row for row in built.rows("citation_verdicts")}
    assert set(verdicts) == {("loopback", "windows"), ("loopback", "merged"), (SMALL, "windows"), (SMALL, "merged")}
    shown = [w["passage_id"] for w in built.rows("citation_evidence", citance_id=citance_id(built))]
    for verifier in ("loopback", SMALL):
        row = verdicts[verifier, "windows"]
        assert (row["status"], row["label"], row["explanation"]) == ("ok", "Supported", VERDICT["explanation"])
        assert row["passage_ids"] == shown and row["call_id"]
    merged = verdicts["loopback", "merged"]
    assert (merged["status"], merged["label"], merged["entry_id"], merged["cited_key"]) == (
        "ok", "Supported", f"{CITING}:r1", f"forum:{CITED}")
    assert merged["call_id"] and merged["call_id"] != verdicts["loopback", "windows"]["call_id"]


def test_the_merged_passages_are_the_cited_papers_body_blocks_in_order(built):
    merged = built.one("citation_verdicts", verifier="loopback", mode="merged")
    [cited] = built.rows("parsed_manuscripts", paper_id=CITED)
    body = [block for block in cited["blocks"] if block["kind"] in MERGED_KINDS]
    assert merged["passage_ids"] == [f"forum:{CITED}:b{block['order']}" for block in body]
    assert all(re.fullmatch(rf"forum:{CITED}:b\d+", passage) for passage in merged["passage_ids"])
    # The call showed every one of them, and every sentence of B's body with them (its title and heading left out).
    [asked] = [request for request in built.requests if merged["passage_ids"][0] in json.dumps(request)]
    prompt = " ".join(message["content"] for message in asked["messages"])
    assert all(f"[{passage}]" in prompt for passage in merged["passage_ids"])
    for paragraph in CITED_PARAGRAPHS:
        assert all(sentence in prompt for sentence in re.split(r"(?<=\.) ", paragraph))
    assert [block["kind"] for block in cited["blocks"] if block["kind"] not in MERGED_KINDS] == ["title", "heading"]


def test_a_verifier_whose_window_cannot_hold_the_paper_is_too_long_without_a_call(built):
    row = built.one("citation_verdicts", verifier=SMALL, mode="merged")
    assert (row["status"], row["label"], row["call_id"], row["passage_ids"], row["tokens_in"]) == (
        "too_long", None, None, [], 0)
    needed, available = map(int, re.fullmatch(
        r"the cited paper \(about (\d+) tokens\) does not fit the (-?\d+) tokens the verifier's window leaves after "
        r"the prompt and the answer", row["reason"]).groups())
    assert 0 < available < needed
    # Its windows call, the only one it was sent, fitted its window.
    [asked] = [request for request in built.requests if request["model"] == "scripted-small"]
    assert estimated_tokens(" ".join(message["content"] for message in asked["messages"])) <= SMALL_WINDOW
    assert built.ledger.filter(pl.col("model") == SMALL).height == 1


# -- the ledger -------------------------------------------------------------------------------------------------------
def test_every_call_is_in_the_ledger_with_its_prompt_and_role(built):
    assert built.ledger.height == len(built.requests) == 4  # one tag, three verdicts (the too_long one makes none)
    assert sorted(built.ledger.select("role", "prompt_id", "model").rows()) == [
        ("citance_tagger", "tag_citance", "loopback"), ("citation_verifiers", "verify_citation", "loopback"),
        ("citation_verifiers", "verify_citation", "loopback"), ("citation_verifiers", "verify_citation", SMALL)]
    verdicts = built.tables["citation_verdicts"].drop_nulls("call_id")
    by_call = dict(built.ledger.select("call_id", "prompt_id").rows())
    assert [by_call[call] for call in verdicts["call_id"]] == verdicts["prompt_id"].to_list() == ["verify_citation"] * 3
    tokens = dict(built.ledger.select("call_id", "tokens_in").rows())
    assert verdicts["tokens_in"].to_list() == [tokens[call] for call in verdicts["call_id"]]
    assert materialization_metadata(built.result, "citation_verdicts", "calls_made") == [3]


def test_a_reranked_retriever_without_a_reranker_is_a_named_row_not_a_failed_build(tmp_path):
    registry = write_citation_venue(tmp_path, KEY, {CITING: CITING_PDF, CITED: CITED_PDF}, {
        "resolve": ["venue"], "retriever": "bm25+rerank"})
    result, _ = run_citation_job(KEY, registry, tmp_path / "lake")
    assert result.success, [event.step_key for event in result.all_events if event.is_step_failure]
    [row] = Lake(tmp_path / "lake").read_table("citation_evidence", KEY).to_dicts()
    assert row["status"] == "no_passages" and "PEERIFY_RERANKER_PATH" in row["reason"]
    [verdict] = Lake(tmp_path / "lake").read_table("citation_verdicts", KEY).to_dicts()
    assert verdict["status"] == "no_passages" and verdict["call_id"] is None

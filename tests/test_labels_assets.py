"""`claim_labels` and `labeller_agreement` on the sample venue, the two labellers being two scripted models on a
loopback OpenAI-protocol server (the client path of every remote model), so each decision is known:

- labeller A has a large context window (the whole manuscript fits), labeller B a small one (`auto` falls back to
  the retrieved chunks; `whole` makes an error row instead of truncating);
- one review's author reply is removed from the snapshot: its claims get `Not Determined` without a call;
- paper Tc9vPe5XmS has no manuscript: `no_manuscript` rows;
- a claim carrying a marker is answered with a label outside the vocabulary: kept raw, `parse_ok` false.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import dagster as dg
import polars as pl
import pytest

from peerify_dagster.definitions import build_resources
from peerify_dagster.domain.labels import LABELS, NOT_DETERMINED, NOT_SUPPORTED, SUPPORTED
from peerify_dagster.resources.dagster_resources import VenueRegistryResource
from peerify_dagster.resources.lake import Lake
from tests.fakes.openai_server import ScriptedOpenAIServer
from tests.support import ALL_ASSETS, SAMPLE, materialise, materialization_metadata, sample_registry
from tests.test_claims_assets import scripted_answer as claim_stage_answer

SELECTION = dg.AssetSelection.assets("claim_labels", "labeller_agreement").upstream().required_multi_asset_neighbors()
NO_REPLY_REVIEW, REMOVED_REPLY, NO_MANUSCRIPT_PAPER = "h8hx8baCDg", "car1YJE0DY", "Tc9vPe5XmS"
BAD_LABEL_MARKER = "baseline"  # claims whose text holds it get the label "Mostly true"


def _claim_of(user: str) -> str:
    return user.split("Reviewer claim:\n", 1)[1].split("\n\n", 1)[0]


def _evidence_of(user: str) -> str:
    return re.split(r"Authors' reply:\n|Manuscript passages:\n", user, maxsplit=1)[1]


def answer(request) -> str:
    """Labellers: A says Supported; B says Not Supported for claims whose hash is odd; a quote = the evidence's first
    words (verbatim). Every other prompt as in the claim-stage tests."""
    system, user = request["messages"][0]["content"], request["messages"][-1]["content"]
    if not system.startswith("You check a claim"):
        return claim_stage_answer(request)
    claim = _claim_of(user)
    if BAD_LABEL_MARKER in claim.lower():
        label = "Mostly true"
    elif request["model"] == "model-b" and int(hashlib.sha256(claim.encode()).hexdigest(), 16) % 2:
        label = NOT_SUPPORTED
    else:
        label = SUPPORTED
    quote = " ".join(re.sub(r"^\[[^\]]+\]\s*", "", _evidence_of(user)).split()[:6])
    return json.dumps({"label": label, "evidence_quotes": [quote], "justification": f"scripted {request['model']}"})


def models_file(folder: Path, base_url: str, window_b: int) -> Path:
    def model(name: str, window: int) -> str:
        return (f"  {name}:\n    backend: openai\n    model: model-{name[-1]}\n    base_url: {base_url}\n"
                f"    api_key_required: false\n    max_concurrency: 2\n    context_window: {window}\n"
                "    structured_output: json_schema\n    decoding: {max_tokens: 256}\n")
    path = folder / "models.yaml"
    path.write_text("default_profile: test\nmodels:\n" + model("scripted-a", 32768) + model("scripted-b", window_b)
                    + "profiles:\n  test:\n    extractor: scripted-a\n    labeller_a: scripted-a\n"
                      "    labeller_b: scripted-b\n    fact_tagger: scripted-a\n    verifiers: [scripted-a]\n")
    return path


def snapshot_without_reply(folder: Path) -> Path:
    snapshot = folder / "snapshot"
    shutil.copytree(SAMPLE, snapshot)
    forum = snapshot / "forums" / "Zd2fGm8KrE.json"
    data = json.loads(forum.read_text())
    data["notes"] = [note for note in data["notes"] if note["id"] != REMOVED_REPLY]
    forum.write_text(json.dumps(data))
    return snapshot


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("labels")
    snapshot = snapshot_without_reply(tmp)
    (tmp / "auto").mkdir()
    (tmp / "whole").mkdir()
    auto = sample_registry(tmp / "auto", snapshot, labelling={
        "thread_evidence": "thread_with_followups", "manuscript_evidence": "auto", "retriever": "bm25", "top_k": 4})
    whole = sample_registry(tmp / "whole", snapshot, labelling={"manuscript_evidence": "whole"})
    instance = dg.DagsterInstance.ephemeral()
    lake = Lake(tmp / "lake")
    with ScriptedOpenAIServer(responder=answer) as server, pytest.MonkeyPatch.context() as env:
        env.setenv("PEERIFY_MODELS_FILE", str(models_file(tmp, server.base_url, window_b=2200)))
        first = materialise("sample", auto, lake.root, instance, SELECTION)
        tables = {t: lake.read_table(t, "sample") for t in (
            "claim_labels", "labeller_agreement", "review_claims", "claim_types", "author_responses", "chunks")}
        # only claim_labels again, from the same upstream tables, with other labelling options
        second = dg.materialize(ALL_ASSETS, selection=["claim_labels"], instance=instance, partition_key="sample",
                                resources=build_resources(str(lake.root),
                                                          venue_registry=VenueRegistryResource(path=str(whole))),
                                raise_on_error=False)
        tables["claim_labels_whole"] = lake.read_table("claim_labels", "sample")
    return first, second, tables, lake


def test_every_claim_has_four_rows_and_the_build_succeeds(built):
    first, second, tables, _ = built
    assert first.success and second.success
    labels, claims = tables["claim_labels"], tables["review_claims"]
    assert claims.height > 0 and labels.height == 4 * claims.height
    assert set(labels.group_by("claim_id", "source", "labeller").len()["len"]) == {1}
    assert labels.select("claim_id", "paper_id", "review_id").unique().sort("claim_id").equals(
        claims.select("claim_id", "paper_id", "review_id").sort("claim_id"))
    checks = {e.check_name: e.passed for e in first.get_asset_check_evaluations()}
    assert checks["four_rows_per_claim"] is True
    assert set(labels["role"]) == {"labeller_a", "labeller_b"} and set(labels["model"].drop_nulls()) == {
        "scripted-a", "scripted-b"}


def test_a_review_without_author_response_is_not_determined_without_a_call(built):
    _, _, tables, _ = built
    thread = tables["claim_labels"].filter(pl.col("source") == "thread")
    no_reply = thread.filter(pl.col("review_id") == NO_REPLY_REVIEW)
    assert no_reply.height > 0
    assert set(no_reply["evidence_mode"]) == {"no_author_response"} and set(no_reply["label"]) == {NOT_DETERMINED}
    assert no_reply["parse_ok"].all() and no_reply["call_id"].null_count() == no_reply.height
    assert no_reply["evidence_text"].null_count() == no_reply.height
    answered = set(tables["author_responses"]["review_id"].drop_nulls())
    without = thread.filter(pl.col("evidence_mode") == "no_author_response")
    assert NO_REPLY_REVIEW not in answered and not set(without["review_id"]) & answered
    others = thread.filter(pl.col("evidence_mode") != "no_author_response")
    assert set(others["review_id"]) <= answered and others["call_id"].null_count() == 0
    assert set(others["evidence_mode"]) == {"thread_with_followups"}


def test_the_thread_labeller_sees_author_text_and_follow_ups_never_the_manuscript(built):
    _, _, tables, _ = built
    thread = tables["claim_labels"].filter((pl.col("source") == "thread") & pl.col("call_id").is_not_null())
    chunk_texts = tables["chunks"]["text"].to_list()
    for text in thread["evidence_text"]:
        assert text.startswith("[Authors]\n") or text.startswith("[Reviewer]\n")
        assert not any(chunk.strip()[:80] in text for chunk in chunk_texts)
    with_followup = thread.filter(pl.col("evidence_text").str.contains(r"\[Reviewer\]"))
    assert with_followup.height > 0  # the sample's follow-ups are interleaved
    # the other mode: the single longest direct author reply, as the release's B6 `author_response`
    responses = tables["author_responses"]
    longest = thread_mode_rows = tables["claim_labels_whole"].filter(
        (pl.col("source") == "thread") & pl.col("call_id").is_not_null())
    assert set(thread_mode_rows["evidence_mode"]) == {"longest_author_reply"}
    direct = responses.filter(pl.col("replyto") == pl.col("review_id"))
    expected = {r: max(t, key=lambda text: len(text.split())).strip()
                for r, t in direct.group_by("review_id").agg("text").iter_rows()}
    assert all(text == expected[review] for review, text in longest.select("review_id", "evidence_text").iter_rows())


def test_manuscript_evidence_is_whole_when_it_fits_retrieved_when_not_and_never_truncated(built):
    first, _, tables, _ = built
    manuscript = tables["claim_labels"].filter(pl.col("source") == "manuscript")
    chunks = tables["chunks"].sort("order")
    a = manuscript.filter((pl.col("labeller") == "a") & (pl.col("paper_id") != NO_MANUSCRIPT_PAPER))
    assert set(a["evidence_mode"]) == {"whole_manuscript"}
    for paper, ids in a.select("paper_id", "evidence_chunk_ids").iter_rows():
        assert ids == chunks.filter(pl.col("paper_id") == paper)["chunk_id"].to_list()
    b = manuscript.filter((pl.col("labeller") == "b") & (pl.col("paper_id") != NO_MANUSCRIPT_PAPER))
    assert set(b["evidence_mode"]) == {"retrieved"} and max(len(ids) for ids in b["evidence_chunk_ids"]) == 4
    shown = b.filter(pl.col("call_id").is_not_null())
    assert shown.height > 0 and (shown["evidence_tokens"] < a["evidence_tokens"].min()).all()
    # BM25 ranks only chunks sharing a term with the claim: a claim with none is reported, never sent without evidence
    unranked = b.filter(pl.col("call_id").is_null())
    assert all(error.startswith("no_evidence: retriever "
                                "bm25") for error in unranked["error"]), unranked["error"].to_list()
    assert unranked["evidence_text"].null_count() == unranked.height
    # manuscript_evidence: whole -> labeller B's window is too small: an error row, no call, nothing shown
    whole_b = tables["claim_labels_whole"].filter(
        (pl.col("source") == "manuscript") & (pl.col("labeller") == "b") & (pl.col("paper_id") != NO_MANUSCRIPT_PAPER))
    assert whole_b.height == b.height > 0 and whole_b["call_id"].null_count() == whole_b.height
    assert whole_b["label"].null_count() == whole_b.height and not whole_b["parse_ok"].any()
    assert all("does not fit" in error and "2200" in error for error in whole_b["error"])
    assert set(whole_b["evidence_mode"]) == {"whole_manuscript"} and whole_b["evidence_text"].null_count() == b.height
    [not_fitting] = materialization_metadata(built[1], "claim_labels", "manuscript_rows_not_fitting")
    assert not_fitting == whole_b.height


def test_a_paper_without_manuscript_gets_no_manuscript_rows(built):
    first, _, tables, _ = built
    rows = tables["claim_labels"].filter((pl.col("source") == "manuscript")
                                         & (pl.col("paper_id") == NO_MANUSCRIPT_PAPER))
    assert rows.height > 0 and set(rows["evidence_mode"]) == {"no_manuscript"}
    assert set(rows["error"]) == {"no_manuscript"}
    assert rows["label"].null_count() == rows.height and not rows["parse_ok"].any()
    assert rows["call_id"].null_count() == rows.height
    [count] = materialization_metadata(first, "claim_labels", "claims_without_manuscript")
    assert count == rows["claim_id"].n_unique()


def test_a_label_outside_the_vocabulary_is_kept_raw_and_never_coerced(built):
    _, _, tables, lake = built
    bad = tables["claim_labels"].filter(pl.col("raw_label") == "Mostly true")
    assert bad.height > 0
    assert bad["label"].null_count() == bad.height and not bad["parse_ok"].any()
    assert all(error.startswith("parse_failed: label 'Mostly true'") for error in bad["error"])
    call_id = bad["call_id"][0]
    _, ledger = lake.query(f"select parse_ok, raw_response from llm_calls where call_id = '{call_id}'")
    assert ledger[0][0] is False and "Mostly true" in ledger[0][1]
    good = tables["claim_labels"].filter(pl.col("call_id").is_not_null() & pl.col("parse_ok"))
    assert set(good["label"]) <= set(LABELS) and (good["raw_label"] == good["label"]).all()
    assert all(len(q) == 1 for q in good["evidence_quotes"]) and good["prompt_hash"].null_count() == 0


def test_agreement_matches_the_labels_it_summarises(built):
    first, _, tables, _ = built
    labels, agreement = tables["claim_labels"], tables["labeller_agreement"]
    wide = labels.pivot(on="labeller", index=["claim_id", "source"], values=["label", "call_id"])
    called = wide.filter(pl.col("call_id_a").is_not_null() & pl.col("call_id_b").is_not_null())
    pairs = called.filter(pl.col("label_a").is_not_null() & pl.col("label_b").is_not_null())
    overall = agreement.filter((pl.col("source") == "all") & (pl.col("claim_type") == "all")).row(0, named=True)
    assert overall["n_items"] == wide.height and overall["n_pairs"] == pairs.height > 0
    assert overall["n_without_call"] == wide.height - called.height > 0
    assert overall["n_parse_failed"] == called.height - pairs.height > 0
    assert overall["agreed"] == pairs.filter(pl.col("label_a") == pl.col("label_b")).height
    assert sum(map(sum, overall["confusion"])) == pairs.height
    assert 0 < overall["raw_agreement"] < 1 and overall["kappa_status"] == "ok"
    # scripted A only says Supported: every pair is in the Supported row
    assert sum(overall["confusion"][0]) == pairs.height
    sources = {(s, t) for s, t in agreement.select("source", "claim_type").iter_rows()}
    assert {("thread", "all"), ("manuscript", "all"), ("thread", "factual")} <= sources
    md = first.asset_materializations_for_node("labeller_agreement")[0].metadata["agreement_thread"].value
    assert "| A \\ B | Supported | Partially Supported | Not Supported | Not Determined |" in md
    # ... which the metadata says in words, for each source with pairs
    warnings = first.asset_materializations_for_node("labeller_agreement")[0].metadata["warnings"].value
    sources = [w.split(" items")[0].rsplit(" ", 1)[-1] for w in warnings
               if w.startswith("Labeller a answered Supported")]
    assert sources == ["thread", "manuscript"]

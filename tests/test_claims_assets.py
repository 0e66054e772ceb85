"""The claim assets on the sample venue.

1. Bad input, decided by a scripted model on a loopback OpenAI-protocol server (the client path of every remote
   model): an empty review, a rating-only review, a German review, answers that are not JSON or not a list, a
   claim longer than its section, and a paper whose only manuscript is a Markdown file with long introduction,
   related-work, conclusion, reference and appendix sections. Each is recorded with its reason; the rest completes.
2. The real local model (SmolLM2) on the sample, one review/response pair per paper: every review and follow-up
   yields claims or recorded reasons, ids and spans hold, and a rebuild calls no model.
3. A changed extraction prompt changes the code version of exactly the review-claim assets.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg
import polars as pl
import pytest

from peerify_dagster.domain import claims as rules
from peerify_dagster.domain.paper_claims import excluded_section
from peerify_dagster.resources.lake import Lake
from tests.fakes.openai_server import ScriptedOpenAIServer
from tests.support import SAMPLE, materialise, materialization_metadata, sample_registry

CLAIM_ASSETS = ["review_claims", "claim_types", "paper_claims", "retrieval_metrics"]
SELECTION = dg.AssetSelection.assets(*CLAIM_ASSETS).upstream().required_multi_asset_neighbors()
NOT_JSON, NOT_A_LIST, TOO_LONG = "[[not-json]]", "[[not-a-list]]", "[[too-long]]"
TEXT_FIELDS = ("summary", "strengths", "weaknesses", "questions", "limitations")
GERMAN = {"summary": "Die Arbeit schlägt ein kleines Zustandsraummodell für die Schlüsselworterkennung vor, das auf "
                     "Mikrocontrollern läuft und mit jedem neuen Rahmen seinen Zustand aktualisiert.",
          "weaknesses": "Die Experimente verwenden nur einen einzigen Datensatz, und es fehlt ein Vergleich mit den "
                        "neuesten Verfahren, die in den letzten Jahren veröffentlicht wurden."}
LONG = ("This paragraph is long on purpose, with enough words to be drawn if its section were allowed, and it "
        "states that the benchmark has {i} keywords, which is a number the reader could check.")


def edit_review(snapshot: Path, forum: str, review_id: str, edit) -> None:
    path = snapshot / "forums" / f"{forum}.json"
    data = json.loads(path.read_text())
    for note in data["notes"]:
        if note["id"] == review_id:
            note["content"] = edit(dict(note["content"]))
    path.write_text(json.dumps(data))


def without(content: dict, *fields: str) -> dict:
    return {k: v for k, v in content.items() if k not in fields}


def with_marker(content: dict, marker: str, *fields: str) -> dict:
    return {k: ({"value": f"{v['value']} {marker}"} if k in fields else v) for k, v in content.items()}


def markdown_manuscript() -> str:
    parts = ["# Streaming keyword spotting with tiny state-space models", "## Abstract", LONG.format(i=0)]

    def section(heading: str, count: int) -> list[str]:
        return [f"## {heading}"] + [LONG.format(i=i) + f" ({heading}, paragraph {i}.)" for i in range(count)]

    parts += section("1 Introduction", 8) + section("2 Related Work", 8) + [
        "## 3 Method", "Our model stacks 4 layers, each a diagonal state-space block with 64 channels and a state "
        "size of 16 per channel, followed by a gated linear unit and a residual connection.",
        "### 3.1 State update", "Every 10 ms frame updates the fixed-size state of each layer once, and a linear "
        "classifier reads the state of the last layer to score 12 keywords, silence and unknown words."]
    parts += section("4 Conclusion", 5) + ["## References", "- [1] A. Author. A paper. 2020."]
    parts += section("A Additional experiments", 8)
    return "\n\n".join(parts)


def bad_input_snapshot(folder: Path) -> Path:
    snapshot = folder / "snapshot"
    shutil.copytree(SAMPLE, snapshot)
    edit_review(snapshot, "Tc9vPe5XmS", "wujxwdvdo2", lambda c: without(c, *TEXT_FIELDS))  # scores only
    edit_review(snapshot, "Tc9vPe5XmS", "PbaBZczHzx", lambda c: without(  # nothing at all
        c, *TEXT_FIELDS, "rating", "confidence", "soundness", "presentation", "contribution"))
    edit_review(snapshot, "Tc9vPe5XmS", "Bv6dudLkGz",
                lambda c: {**without(c, *TEXT_FIELDS), **{k: {"value": v} for k, v in GERMAN.items()}})
    edit_review(snapshot, "Wn6yBq3JhU", "NBLs4moUsY", lambda c: with_marker(c, NOT_A_LIST, "weaknesses"))
    edit_review(snapshot, "Wn6yBq3JhU", "W4QFoCYUkr", lambda c: with_marker(c, NOT_JSON, *TEXT_FIELDS))
    edit_review(snapshot, "Wn6yBq3JhU", "Cb6oNU6wjL", lambda c: with_marker(c, TOO_LONG, "questions"))
    (snapshot / "manuscripts").mkdir()
    (snapshot / "manuscripts" / "Tc9vPe5XmS.md").write_text(markdown_manuscript())
    return snapshot


def scripted_answer(request) -> str:
    """A deterministic stand-in for each prompt of the claim stage (and the verifier)."""
    system = request["messages"][0]["content"]
    user = request["messages"][-1]["content"]
    if system.startswith("You extract the claims"):
        section = user.split(":", 2)[-1].strip()  # "Review section:\n<Label>: <text>"
        if NOT_JSON in section:
            return "I would rather not."
        if NOT_A_LIST in section:
            return json.dumps({"claims": "The paper has problems."})
        if TOO_LONG in section:
            return json.dumps({"claims": ["The paper does not explain how annotators were trained, recruited, paid "
                                          "or checked, nor how their disagreements were resolved."]})
        sentences = [s.strip(" -") for s in re.split(r"(?<=[.?!])\s+|\n", section) if len(s.split()) > 1]
        return json.dumps({"claims": sentences})
    if system.startswith("You sort claims"):
        claim = user.split("Claim:", 1)[1]
        kind = "subjective" if "writing" in claim.lower() else "opinion" if "ablation" in claim.lower() else "factual"
        return json.dumps({"claim_kind": kind, "reason": "scripted"})
    if system.startswith("You write one claim"):
        paragraph = user.split("Paragraph:", 1)[1].strip()
        return json.dumps({"claim": re.split(r"(?<=[.])\s+", paragraph)[0]})
    if system.startswith("You rephrase"):
        return json.dumps({"claim": "Put differently: " + user.split("Claim:", 1)[1].strip()})
    return json.dumps({"label": "Supported", "justification": "scripted"})


def models_file(folder: Path, base_url: str) -> Path:
    path = folder / "models.yaml"
    path.write_text(
        "default_profile: test\nmodels:\n  scripted:\n    backend: openai\n    model: scripted-model\n"
        f"    base_url: {base_url}\n    api_key_required: false\n    max_concurrency: 2\n"
        "    structured_output: json_schema\nprofiles:\n  test:\n    extractor: scripted\n    labeller_a: scripted\n"
        "    labeller_b: scripted\n    fact_tagger: scripted\n    verifiers: [scripted]\n")
    return path


@pytest.fixture(scope="module")
def scripted(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("claims-bad-input")
    registry = sample_registry(tmp, bad_input_snapshot(tmp))
    with ScriptedOpenAIServer(responder=scripted_answer) as server, pytest.MonkeyPatch.context() as env:
        env.setenv("PEERIFY_MODELS_FILE", str(models_file(tmp, server.base_url)))
        result = materialise("sample", registry, tmp / "lake", dg.DagsterInstance.ephemeral(), SELECTION)
    lake = Lake(tmp / "lake")
    tables = {t: lake.read_table(t, "sample") for t in (
        "reviews", "reviewer_followups", "review_claims", "claims_dropped", "claim_types", "paper_claims",
        "paper_claims_dropped", "chunks", "retrieval_queries", "retrieval_metrics")}
    return result, tables, lake


def source_reasons(drops: pl.DataFrame) -> dict[str, str]:
    rows = drops.filter(pl.col("level") == "source")
    return dict(zip(rows["source_id"], rows["rule"]))


def test_every_review_and_follow_up_has_claims_or_a_recorded_reason(scripted):
    result, tables, _ = scripted
    assert result.success
    claims, drops = tables["review_claims"], tables["claims_dropped"]
    for table, column, source in (("reviews", "review_id", "review"), ("reviewer_followups", "comment_id", "followup")):
        ids = set(tables[table][column])
        with_claims = set(claims.filter(pl.col("source") == source)["source_id"])
        without_claims = set(drops.filter((pl.col("level") == "source") & (pl.col("source") == source))["source_id"])
        assert ids == with_claims | without_claims and not with_claims & without_claims, table
    reasons = source_reasons(drops)
    assert {k: reasons[k] for k in ("wujxwdvdo2", "PbaBZczHzx", "Bv6dudLkGz", "W4QFoCYUkr")} == {
        "wujxwdvdo2": rules.UNIT_RATING_ONLY, "PbaBZczHzx": rules.UNIT_EMPTY, "Bv6dudLkGz": rules.UNIT_NON_ENGLISH,
        "W4QFoCYUkr": rules.UNIT_UNUSABLE}
    assert set(drops["rule"]) <= set(rules.UNIT_REASONS) | set(rules.CLAIM_RULES) | {rules.SECTION_UNUSABLE}


def test_unusable_answers_and_a_claim_longer_than_its_section_are_recorded(scripted):
    _, tables, lake = scripted
    drops = tables["claims_dropped"]
    sections = drops.filter(pl.col("level") == "section")
    not_a_list = sections.filter(pl.col("review_id") == "NBLs4moUsY").row(0, named=True)
    assert (not_a_list["section"], not_a_list["rule"]) == ("weaknesses", rules.SECTION_UNUSABLE)
    _, ledger = lake.query(f"select parse_ok, raw_response from llm_calls where call_id = '{not_a_list['call_id']}'")
    assert ledger[0][0] is False and "The paper has problems." in ledger[0][1]  # the answer is kept, never used
    assert len(sections.filter(pl.col("review_id") == "W4QFoCYUkr")) == 4  # every section: not JSON
    # The review with one unusable section still yields claims from its other sections.
    assert tables["review_claims"].filter(pl.col("review_id") == "NBLs4moUsY").height > 0
    too_long = drops.filter((pl.col("review_id") == "Cb6oNU6wjL") & (pl.col("section") == "questions"))
    assert too_long["rule"].to_list() == [rules.RULE_LONGER_THAN_SOURCE]


def test_rules_drop_questions_and_the_split_sentences_stay_separate_claims(scripted):
    _, tables, _ = scripted
    claims, drops = tables["review_claims"], tables["claims_dropped"]
    questions = drops.filter(pl.col("rule") == rules.RULE_QUESTION)
    assert questions.height > 0 and all(text.endswith("?") for text in questions["claim_text"])
    # "- The test splits were not audited, ...\n- The writing is repetitive; ..." -> two claims, each spanned exactly.
    split = claims.filter((pl.col("review_id") == "Cb6oNU6wjL") & (pl.col("section") == "weaknesses"))
    assert split.height == 2 and set(split["span_kind"]) == {rules.SPAN_EXACT}


def test_claim_ids_are_stable_and_spans_point_into_the_review_text(scripted):
    _, tables, _ = scripted
    claims = tables["review_claims"]
    assert claims["claim_id"].n_unique() == claims.height
    assert all(cid == rules.claim_id(rid, text) for cid, rid, text in claims.select("claim_id", "review_id",
                                                                                    "claim_text").iter_rows())
    texts = dict(zip(tables["reviews"]["review_id"], tables["reviews"]["review_text"]))
    texts |= dict(zip(tables["reviewer_followups"]["comment_id"], tables["reviewer_followups"]["text"]))
    squash = lambda s: " ".join(s.lower().split()).rstrip(" .")  # noqa: E731
    for row in claims.iter_rows(named=True):
        if row["span_kind"] is None:
            assert row["span_start"] is None and row["span_reason"] in (rules.SPAN_PARAPHRASED,
                                                                        rules.SPAN_NO_SOURCE_OFFSET)
            continue
        quoted = texts[row["source_id"]][row["span_start"]:row["span_end"]]
        if row["span_kind"] == rules.SPAN_EXACT:
            assert squash(quoted) == squash(row["claim_text"]), row
        else:
            assert quoted.strip() and quoted in texts[row["source_id"]]


def test_claim_types_record_unusable_tags_without_guessing(scripted):
    _, tables, _ = scripted
    types = tables["claim_types"]
    assert types["claim_id"].to_list() == tables["review_claims"]["claim_id"].to_list()
    assert set(types["claim_type"].drop_nulls()) == {"factual", "subjective"}
    bad = types.filter(~pl.col("parse_ok"))
    assert bad.height > 0 and bad["claim_type"].null_count() == bad.height  # "opinion" is not a kind: no coercion


def test_paper_claims_come_from_body_paragraphs_with_existing_gold_chunks(scripted):
    result, tables, _ = scripted
    papers, chunks = tables["paper_claims"], tables["chunks"]
    assert papers.height > 0 and set(papers["label"]) == {"Supported"}
    assert all(excluded_section(path) is None for path in papers["section_path"])
    # The Markdown-only paper: 8 paragraphs each of introduction, related work, conclusion and appendix, 2 of method.
    markdown_paper = papers.filter(pl.col("paper_id") == "Tc9vPe5XmS")
    assert markdown_paper.height == 2 and {p[0] for p in markdown_paper["section_path"]} == {"3 Method"}
    assert {c for ids in papers["gold_chunk_ids"] for c in ids} <= set(chunks["chunk_id"])
    text_of = dict(zip(chunks["chunk_id"], chunks["text"]))
    for paragraph, gold in papers.select("paragraph", "gold_chunk_ids").iter_rows():
        assert any(" ".join(paragraph.split())[:80] in " ".join(text_of[c].split()) for c in gold)
    checks = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    assert checks["gold_chunks_exist"] is True


def test_retrieval_queries_and_metrics_include_paper_sourced_claims(scripted):
    result, tables, _ = scripted
    queries = tables["retrieval_queries"]
    paper = queries.filter(pl.col("source") == "paper_sourced")
    assert sorted(paper["claim_id"]) == sorted(tables["paper_claims"]["claim_id"])
    assert queries.filter(pl.col("source") == "answer_key").height > 0  # the answer key stays a source
    key_only = queries.filter((pl.col("source") == "answer_key") & pl.col("evidence_sentence").is_not_null()).height
    [with_gold] = materialization_metadata(result, "retrieval_metrics", "claims_with_gold")
    assert with_gold > key_only  # PaperSourced claims are scored
    metrics = tables["retrieval_metrics"].filter(pl.col("status") == "ok")
    assert (metrics["n_claims_scored"] >= paper.height).all()


# -- the real local model ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def local(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("claims-local")
    registry = sample_registry(tmp, sampling={"reviews": "one_pair"})
    instance = dg.DagsterInstance.ephemeral()
    selection = dg.AssetSelection.assets("review_claims", "claim_types").upstream().required_multi_asset_neighbors()
    first = materialise("sample", registry, tmp / "lake", instance, selection)
    lake = Lake(tmp / "lake")
    tables = {t: lake.read_table(t, "sample") for t in ("reviews", "paper_sample", "review_claims", "claims_dropped",
                                                        "claim_types")}
    second = materialise("sample", registry, tmp / "lake", instance, selection)
    return first, second, tables, lake


def test_local_model_claims_or_reasons_for_every_review(local):
    first, _, tables, lake = local
    assert first.success
    claims, drops, sample = tables["review_claims"], tables["claims_dropped"], tables["paper_sample"]
    paired = set(sample["paired_review_id"].drop_nulls())
    assert len(paired) == 5  # one review/response pair per paper of the sample
    reasons = source_reasons(drops.filter(pl.col("source") == "review"))
    for review_id in tables["reviews"]["review_id"]:
        has_claims = review_id in set(claims.filter(pl.col("source") == "review")["review_id"])
        assert has_claims != (review_id in reasons), review_id
        if review_id not in paired:
            assert reasons[review_id] == rules.UNIT_NOT_SAMPLED
    assert claims.height > 0 and set(claims["extractor_model"]) == {"smollm2-135m-extractor"}
    assert all(cid == rules.claim_id(rid, text) for cid, rid, text in claims.select("claim_id", "review_id",
                                                                                    "claim_text").iter_rows())
    # Whatever the small model wrote, every claim it wrote is kept or dropped with a rule.
    [written] = materialization_metadata(first, "review_claims", "claims_written")
    assert written == claims.height + drops.filter(pl.col("level") == "claim").height
    _, ledger = lake.query("select count(*) from llm_calls where role = 'extractor' and prompt_id = 'extract_claims' "
                           f"and call_id in ({', '.join(repr(c) for c in set(claims['call_id']))})")
    assert ledger[0][0] == claims["call_id"].n_unique()
    types = tables["claim_types"]
    assert types.height == claims.height and types.filter(pl.col("parse_ok"))["claim_type"].is_in(
        ["factual", "subjective"]).all()


def test_local_model_rebuild_calls_no_model_and_keeps_ids(local):
    _, second, tables, lake = local
    assert second.success
    assert materialization_metadata(second, "review_claims", "calls_made") == [0]
    assert materialization_metadata(second, "claim_types", "calls_made") == [0]
    assert lake.read_table("review_claims", "sample").equals(tables["review_claims"])


# -- staleness --------------------------------------------------------------------------------------------------------

CODE_VERSIONS = """
import json, sys
from pathlib import Path
import peerify_dagster.domain.prompts as prompts
prompts.PROMPTS_DIR = Path(sys.argv[1])
from peerify_dagster.definitions import defs
graph = defs.resolve_asset_graph()
print(json.dumps({key.to_user_string(): graph.get(key).code_version for key in graph.get_all_asset_keys()}))
"""


def code_versions(prompts_dir: Path) -> dict[str, str]:
    output = subprocess.run([sys.executable, "-c", CODE_VERSIONS, str(prompts_dir)], check=True, capture_output=True,
                            text=True, cwd=Path(__file__).resolve().parents[1]).stdout
    return json.loads(output.strip().splitlines()[-1])


def test_a_changed_extraction_prompt_changes_exactly_the_review_claim_assets(tmp_path):
    from peerify_dagster.domain.prompts import PROMPTS_DIR

    edited = tmp_path / "prompts"
    shutil.copytree(PROMPTS_DIR, edited)
    before = code_versions(edited)
    extract = edited / "extract_claims.md"
    extract.write_text(extract.read_text().replace("in the order they appear", "in the order they are written"))
    after = code_versions(edited)
    # llm_usage names every stage's prompt (the LLM stage registry), so it follows each of them
    assert {key for key in before if before[key] != after[key]} == {"review_claims", "claims_dropped", "llm_usage"}
    tag = edited / "tag_fact.md"
    tag.write_text(tag.read_text() + "\n")
    tagged = code_versions(edited)
    assert {key for key in after if after[key] != tagged[key]} == {"claim_types", "llm_usage"}

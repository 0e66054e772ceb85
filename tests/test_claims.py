"""The review-claim rules on hand-written examples: sections and their offsets, normalisation, each drop rule, the
merging of duplicates (with what the first absorbed), claim ids, spans, and what makes a review unusable."""

from __future__ import annotations

import json

import numpy as np
import pytest

from peerify_dagster.domain import claims as c
from peerify_dagster.domain.forum_tables import REVIEW_TEXT_FIELDS

SUMMARY = "The paper proposes ASR, a sparse retriever with anchor sentences."
WEAKNESSES = ("- The paper does not report variance across runs, so gains may be noise.\n"
              "- There is no ablation of anchors.")
REVIEW = {
    "review_id": "r1", "summary": SUMMARY, "strengths": None, "weaknesses": WEAKNESSES, "questions": "  ",
    "rating": "6: marginally above", "rating_score": 6,
    "extra_fields_json": json.dumps({"clarity_comments": "Section 3 uses two symbols for the anchor set.",
                                     "first_time_reviewer": "Yes", "ethics_flag": "No"}),
    "review_text": f"Summary: {SUMMARY}\n\nWeaknesses: {WEAKNESSES}",
}


def candidate(text: str, section_text: str = WEAKNESSES, review_id: str = "r1") -> c.Candidate:
    return c.Candidate(review_id, c.SOURCE_REVIEW, review_id, "weaknesses", section_text, 0, text, "call")


def test_review_sections_keep_review_text_order_offsets_and_the_venues_other_prose_fields():
    sections = c.review_sections(REVIEW, REVIEW_TEXT_FIELDS)
    assert [s.name for s in sections] == ["summary", "weaknesses", "clarity_comments"]
    for section in sections[:2]:
        assert REVIEW["review_text"][section.start:section.start + len(section.text)] == section.text
    # A venue field outside the assembled text is extracted too, with no offset to give; yes/no flags are not prose.
    assert sections[2].start is None


@pytest.mark.parametrize(("sections", "has_scores", "problem"), [
    ([], False, c.UNIT_EMPTY),
    ([], True, c.UNIT_RATING_ONLY),
    ([c.ReviewSection("weaknesses", "Die Arbeit vergleicht nicht mit den neuesten Verfahren und die Experimente sind "
                      "zu klein, um die Behauptungen zu stützen; außerdem fehlt eine Ablation der Anker, was ich "
                      "für wichtig halte.", 0)], True, c.UNIT_NON_ENGLISH),
    ([c.ReviewSection("weaknesses", "论文没有报告多次运行的方差，实验规模太小。", 0)], True, c.UNIT_NON_ENGLISH),
    ([c.ReviewSection("weaknesses", "The paper does not report variance.", 0)], True, None),
    # Short or mixed text is never called non-English on a guess.
    ([c.ReviewSection("weaknesses", "Sehr gut. Accept.", 0)], True, None),
])
def test_review_problem(sections, has_scores, problem):
    assert c.review_problem(sections, has_scores) == problem


@pytest.mark.parametrize(("raw", "normalised"), [
    ("  The paper\n does   not report\tvariance. ", "The paper does not report variance."),
    ("\u201cThe results are \u2018robust\u2019.\u201d", "The results are 'robust'."),
    ("Weaknesses: - 2. The paper has no ablation.", "The paper has no ablation."),
    ("(b) Table 2 omits BM25.", "Table 2 omits BM25."),
    ("\u2022 Figure 3 is unreadable.", "Figure 3 is unreadable."),
])
def test_normalise_claim(raw, normalised):
    assert c.normalise_claim(raw, "weaknesses") == normalised


@pytest.mark.parametrize(("text", "rule"), [
    ("", c.RULE_EMPTY),
    ("...", c.RULE_EMPTY),
    ("Good paper.", c.RULE_FRAGMENT),
    ("five node classification datasets with varying homophily", c.RULE_FRAGMENT),
    ("kNN retrieval is not compared against.", None),
    ("Why is ColBERT not among the baselines?", c.RULE_QUESTION),
    ("Does the anchor selector ever pick appendix sentences?", c.RULE_QUESTION),
    ("Please add a runtime comparison with ColBERT.", c.RULE_REQUEST),
    ("The authors should release the code.", c.RULE_REQUEST),
    ("It would be helpful to report MRR as well.", c.RULE_REQUEST),
    ("Perhaps the gains come from the larger index.", c.RULE_SPECULATION),
    ("The margins look small and I wonder whether they survive another benchmark.", c.RULE_SPECULATION),
    ("I am not an expert in sparse retrieval.", c.RULE_META),
    ("I will raise my score if the variance is reported.", c.RULE_META),
    ("This claim is about the anchor selection.", c.RULE_META),
    ("The " + " ".join(["word"] * c.MAX_CLAIM_WORDS), c.RULE_TOO_LONG),
    # Kept: assertions about the paper, whatever their wording.
    ("The paper does not report variance across runs.", None),
    ("The paper claims a 6.7 point gain on LongSci-QA.", None),
    ("Table 2 does not include ColBERT.", None),
])
def test_drop_rule(text, rule):
    assert c.drop_rule(text, "x" * 1000) == rule


def test_a_claim_longer_than_its_source_section_is_dropped():
    assert c.drop_rule("The paper does not report variance across five runs.", "No variance.") == \
        c.RULE_LONGER_THAN_SOURCE
    assert c.drop_rule("The paper does not report variance.", "The paper does not report variance.") is None


def test_apply_rules_keeps_order_and_records_each_rule():
    kept, dropped = c.apply_rules([candidate("The paper has no ablation of anchors."),
                                   candidate("Why no ablation?"), candidate("Please add an ablation of anchors.")])
    assert [k.raw_text for k in kept] == ["The paper has no ablation of anchors."]
    assert [(d.candidate.raw_text, d.rule) for d in dropped] == [("Why no ablation?", c.RULE_QUESTION),
                                                                ("Please add an ablation of anchors.", c.RULE_REQUEST)]


def unit(*components: float) -> np.ndarray:
    vector = np.asarray(components, dtype=np.float32)
    return vector / np.linalg.norm(vector)


def test_exact_and_near_duplicates_are_merged_into_the_first_which_records_them():
    items = [candidate("The paper does not report variance across runs."),
             candidate("The paper does NOT report  variance across runs"),  # exact once normalised
             candidate("Variance across runs is not reported."),  # near-duplicate
             candidate("There is no ablation of anchors.")]
    vectors = np.stack([unit(1, 0, 0), unit(1, 0, 0), unit(1, 0.3, 0), unit(0, 0, 1)])  # cosine(0, 2) = 0.958
    kept, dropped = c.merge_duplicates(items, vectors, threshold=0.9)
    assert [k.candidate.raw_text for k in kept] == [items[0].raw_text, items[3].raw_text]
    first = kept[0]
    assert first.claim_id == c.claim_id("r1", items[0].raw_text)
    assert first.absorbed == [c.claim_id("r1", items[1].raw_text), c.claim_id("r1", items[2].raw_text)]
    assert [(d.rule, d.detail) for d in dropped] == [
        (c.RULE_DUPLICATE, f"absorbed by {first.claim_id}"),
        (c.RULE_NEAR_DUPLICATE, f"absorbed by {first.claim_id} (cosine 0.958)")]


@pytest.fixture(scope="module")
def minilm():
    from peerify_dagster.resources.embedder import Embedder

    return Embedder()


def test_with_the_projects_embedder_a_split_compound_stays_two_claims_and_a_rewording_merges(minilm):
    """'No variance and no ablation', split by the model into two claims: related, not the same claim, so both
    stay at the default threshold; the same point reworded is merged."""
    items = [candidate("The paper does not report variance across runs."),
             candidate("The paper has no ablation of the number of anchors."),
             candidate("Variance across runs is not reported in the paper.")]
    kept, dropped = c.merge_duplicates(items, minilm.embed([i.text for i in items]))
    assert [k.candidate.raw_text for k in kept] == [items[0].raw_text, items[1].raw_text]
    assert [d.rule for d in dropped] == [c.RULE_NEAR_DUPLICATE]
    assert kept[0].absorbed == [c.claim_id("r1", items[2].raw_text)]


def test_merge_needs_one_vector_per_candidate():
    with pytest.raises(ValueError, match="2 candidates but 1 vectors"):
        c.merge_duplicates([candidate("A claim about the paper."), candidate("Another claim about it.")],
                           np.stack([unit(1, 0)]))


def test_claim_ids_are_stable_and_depend_on_review_and_normalised_text():
    identity = c.claim_id("r1", "The paper does not report variance.")
    assert identity == c.claim_id("r1", "  the paper does NOT report\nvariance ")
    assert len(identity) == 16 and identity != c.claim_id("r2", "The paper does not report variance.")


def test_a_claim_extracted_again_with_the_same_text_keeps_its_id():
    """Another model or prompt version (other call ids), another order and other formatting of the same claims: the
    same ids, so the human decisions made on them still apply."""
    def extraction(raws: list[str], call_id: str) -> list[c.Candidate]:
        return [c.Candidate("r1", c.SOURCE_REVIEW, "r1", "weaknesses", WEAKNESSES, 0, raw, call_id) for raw in raws]

    def embed(texts: list[str]) -> np.ndarray:
        return np.stack([unit(1, 0) if "variance" in text else unit(0, 1) for text in texts])

    first, _ = c.clean_claims(extraction(["The paper does not report variance across runs.",
                                          "There is no ablation of anchors."], "call-of-model-1"), embed)
    again, _ = c.clean_claims(extraction(["- There is no ablation of anchors",
                                          "Weaknesses: \u201cThe paper does not report variance across runs.\u201d"],
                                         "call-of-model-2"), embed)
    assert sorted(k.claim_id for k in again) == sorted(k.claim_id for k in first)
    assert {k.claim_id for k in first} == {c.claim_id("r1", "The paper does not report variance across runs."),
                                           c.claim_id("r1", "There is no ablation of anchors.")}


def test_exact_span_maps_back_to_the_original_text():
    text = "Weaknesses: - The paper does NOT report  variance across runs, so gains may be noise."
    start, end, kind, reason = c.find_span("The paper does not report variance across runs.", text[12:], 12)
    assert (kind, reason) == (c.SPAN_EXACT, None)
    assert text[start:end] == "The paper does NOT report  variance across runs"


def test_sentence_span_when_the_claim_restates_one_sentence():
    start, end, kind, _ = c.find_span("Variance across runs is not reported by the paper.", WEAKNESSES, 100)
    assert kind == c.SPAN_SENTENCE
    assert WEAKNESSES[start - 100:end - 100] == "The paper does not report variance across runs, so gains may be noise."


def test_paraphrase_has_no_span_and_says_why():
    assert c.find_span("Reliability of the improvements is unclear.", WEAKNESSES, 0) == \
        (None, None, None, c.SPAN_PARAPHRASED)
    assert c.find_span("There is no ablation of anchors.", WEAKNESSES, None) == \
        (None, None, None, c.SPAN_NO_SOURCE_OFFSET)


@pytest.mark.parametrize(("parsed", "claims"), [
    ({"claims": ["A.", "B."]}, ["A.", "B."]),
    ({"claims": []}, []),
    ({"claims": "The paper has no ablation."}, None),
    ({"claims": ["A.", {"text": "B."}]}, None),
    ({"label": "Supported"}, None),
    (None, None),
])
def test_claims_from_answer_accepts_only_a_list_of_strings(parsed, claims):
    assert c.claims_from_answer(parsed) == claims


def test_split_review_text_finds_the_assembled_sections_and_their_offsets():
    text = "Summary: A sparse retriever.\n\nWeaknesses: 1. No variance.\n2. No ablation.\n\nQuestions: Why?"
    sections = c.split_review_text(text, REVIEW_TEXT_FIELDS)
    assert [(s.name, s.text) for s in sections] == [("summary", "A sparse retriever."),
                                                    ("weaknesses", "1. No variance.\n2. No ablation."),
                                                    ("questions", "Why?")]
    assert all(text[s.start:s.start + len(s.text)] == s.text for s in sections)
    assert [(s.name, s.start) for s in c.split_review_text("Comment: Thanks, this helps.", REVIEW_TEXT_FIELDS)] == [
        ("review", 0)]


def test_clean_claims_applies_the_rules_then_merges_within_each_review_only():
    items = [candidate("The paper does not report variance across runs."),
             candidate("Why is there no variance?"),
             candidate("The paper does not report variance across runs.", review_id="r2"),
             candidate("The  paper does NOT report variance across runs")]
    kept, dropped = c.clean_claims(items, lambda texts: np.stack([unit(1, 0)] * len(texts)))
    assert [(k.candidate.review_id, k.candidate.raw_text) for k in kept] == [("r1", items[0].raw_text),
                                                                             ("r2", items[2].raw_text)]
    assert sorted(d.rule for d in dropped) == [c.RULE_DUPLICATE, c.RULE_QUESTION]

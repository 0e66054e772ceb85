"""The web app's page shaping (peerify_dagster/domain/claim_view.py) on small hand-made frames: the claim's span in
the review text, a passage's pages and boxes, the claim browser's filters and pages, the claim page's joins, and the
venue overview's metrics with their baselines and warnings."""

from __future__ import annotations

import json

import polars as pl
import pytest

from peerify_dagster.domain.claim_view import (
    ANSWER_KEY,
    LABELLERS_DISAGREE,
    NO_POSITIONS,
    PREDICTION_WRONG,
    SPAN_BEST_MATCH,
    ClaimFilter,
    ClaimTables,
    claim_call_ids,
    claim_detail,
    claim_index,
    filter_claims,
    mark_claim,
    metric_rows,
    page_view,
    slice_rows,
)
from peerify_dagster.domain.llm_calls import answer_justification
from peerify_dagster.domain.regions import pages_of

REVIEW = "Summary: A method.\n\nWeaknesses: - The experiments stop at 100k nodes. - The paper is long."


# -- the claim's span ----------------------------------------------------------------------------------------------
def test_the_extractors_offsets_mark_exactly_their_span():
    start = REVIEW.index("The experiments")
    end = REVIEW.index(" - The paper")
    marked = mark_claim(REVIEW, "The experiments stop at 100k nodes.", start, end, "exact")
    assert (marked.before, marked.marked, marked.after) == (REVIEW[:start], REVIEW[start:end], REVIEW[end:])
    assert marked.how == "exact" and "as extracted" in marked.how_text


def test_a_paraphrased_claim_marks_the_sentence_sharing_most_of_its_words():
    marked = mark_claim(REVIEW, "Experiments never go beyond 100k nodes", None, None, None)
    assert marked.marked == "The experiments stop at 100k nodes."
    assert marked.how == SPAN_BEST_MATCH
    assert marked.before + marked.marked + marked.after == REVIEW


@pytest.mark.parametrize("start, end", [(None, None), (5, 2), (0, len(REVIEW) + 1)])
def test_a_claim_sharing_no_word_with_the_text_marks_nothing(start, end):
    marked = mark_claim(REVIEW, "Graphs zebra quantum", start, end, "exact")
    assert (marked.before, marked.marked, marked.how) == (REVIEW, "", None)


# -- a passage's pages (its boxes: tests/test_positions.py) -----------------------------------------------------------
def test_a_chunks_pages_are_those_of_its_regions_else_its_first_page():
    assert pages_of({"page": 1, "regions": [{"page": 3}, {"page": 2}, {"page": 3}]}) == [2, 3]
    assert pages_of({"page": 4, "regions": []}) == [4]
    assert pages_of({"page": None}) == []


@pytest.mark.parametrize("parsed, expected", [
    (json.dumps({"label": "Supported", "justification": " Table 2 shows it. "}), "Table 2 shows it."),
    (json.dumps({"label": "Supported"}), None),
    (json.dumps(["Supported"]), None),
    ("{not json", None),
    (None, None),
])
def test_the_justification_comes_from_the_ledgers_parsed_answer(parsed, expected):
    assert answer_justification(parsed) == expected


# -- the claim browser ---------------------------------------------------------------------------------------------
def _queries() -> pl.DataFrame:
    return pl.DataFrame({
        "claim_id": ["c1", "c2", "c3", "k1"], "paper_id": ["p1", "p1", "p2", "p1"],
        "review_id": ["r1", "r1", "r2", "r1"], "claim_text": ["one", "two", "three", "key"],
        "kind": ["factual", "factual", "subjective", "factual"],
        "source": ["review", "review", "review", "answer_key"],
        "manuscript_label": [None, None, None, "Not Supported"],
    })


def _index():
    slices = pl.DataFrame({"slice": ["RebuttalSourced", "RebuttalSourced", "LLMJudged", "LLMJudged"],
                           "claim_id": ["c1", "c2", "c1", "c3"],
                           "gold_label": ["Supported", "Not Supported", "Supported", "Not Determined"]})
    canonical = pl.DataFrame({"claim_id": ["c1", "c1", "c2", "c3"],
                              "provenance": ["agreed", "pending", "agreed", "unlabelled"]})
    predictions = pl.DataFrame({"claim_id": ["c1", "c2", "c3", "c1", "k1", "k1"],
                                "configuration": ["rag", "rag", "rag", "full", "rag", "thread"],
                                "label": ["Supported", "Supported", None, "Not Supported", "Not Supported", None],
                                "status": ["ok", "ok", "ok", "ok", "ok", "no_thread"]})
    review_claims = pl.DataFrame({"claim_id": ["c2", "c1", "c3"], "section": ["weaknesses"] * 3,
                                  "claim_order": [1, 0, 2]})
    return claim_index(_queries(), review_claims, slices, canonical, predictions)


def _ids(wanted: ClaimFilter, per_page: int = 50) -> list[str]:
    return [row["claim_id"] for row in filter_claims(_index(), wanted, per_page).rows]


def test_the_index_lists_review_claims_in_review_order_then_the_answer_key():
    index = _index()
    assert index.claims["claim_id"].to_list() == ["c1", "c2", "c3", "k1"]
    assert index.slices == ["RebuttalSourced", "LLMJudged", ANSWER_KEY]
    assert index.configurations == ["full", "rag", "thread"]
    assert index.labellers_disagree == {"c1"}  # pending counts; unlabelled (no call) does not


def test_no_filter_keeps_every_claim_with_its_memberships_and_verdicts():
    page = filter_claims(_index(), ClaimFilter())
    assert page.total == 4 and page.pages == 1
    first = page.rows[0]
    assert [(m["slice"], m["gold_label"]) for m in first["memberships"]] == [
        ("RebuttalSourced", "Supported"), ("LLMJudged", "Supported")]
    assert [(v["configuration"], v["label"]) for v in first["verdicts"]] == [("full", "Not Supported"),
                                                                            ("rag", "Supported")]
    assert first["labellers_disagree"] and first["kind_name"] == "review claim"


@pytest.mark.parametrize("wanted, expected", [
    (ClaimFilter(slice="LLMJudged"), ["c1", "c3"]),
    (ClaimFilter(gold_label="Not Supported"), ["c2", "k1"]),  # any slice, the answer key too
    (ClaimFilter(slice="LLMJudged", gold_label="Not Supported"), []),  # c2 is Not Supported only in another slice
    (ClaimFilter(configuration="full"), ["c1"]),
    (ClaimFilter(predicted_label="Supported"), ["c1", "c2"]),
    (ClaimFilter(configuration="full", predicted_label="Supported"), []),
    (ClaimFilter(disagreement=LABELLERS_DISAGREE), ["c1"]),
    # c1: full says Not Supported against Supported; c2: rag Supported vs Not Supported; c3: rag's answer had no
    # label; k1: thread was not called (no thread), which is no wrong answer
    (ClaimFilter(disagreement=PREDICTION_WRONG), ["c1", "c2", "c3"]),
    (ClaimFilter(configuration="thread"), ["k1"]),
    (ClaimFilter(disagreement=PREDICTION_WRONG, configuration="rag"), ["c2", "c3"]),
    (ClaimFilter(disagreement=PREDICTION_WRONG, configuration="rag", slice="RebuttalSourced"), ["c2"]),
    (ClaimFilter(disagreement="no such filter"), []),
    (ClaimFilter(slice="no such slice"), []),
])
def test_each_filter_keeps_exactly_the_claims_it_names(wanted, expected):
    assert _ids(wanted) == expected


def test_pages_split_the_matches_and_a_page_past_the_end_shows_the_last():
    index = _index()
    second = filter_claims(index, ClaimFilter(page=2), per_page=3)
    assert (second.total, second.page, second.pages) == (4, 2, 2)
    assert [row["claim_id"] for row in second.rows] == ["k1"]
    assert filter_claims(index, ClaimFilter(page=9), per_page=3).page == 2


def test_the_filter_reads_its_query_string_and_writes_it_back():
    wanted = ClaimFilter.from_query({"slice": "LLMJudged", "gold_label": "", "page": "x"})
    assert wanted == ClaimFilter(slice="LLMJudged", page=1)
    assert wanted.query(page=3) == {"slice": "LLMJudged", "page": "3"}
    assert ClaimFilter.from_query({"page": "0"}).page == 1


# -- one claim -----------------------------------------------------------------------------------------------------
def _tables(with_positions: bool = True) -> ClaimTables:
    start = REVIEW.index("The experiments")
    chunks = pl.DataFrame({
        "chunk_id": ["p1:1", "p1:2"], "paper_id": ["p1", "p1"], "section": ["5 Results", "6 Limits"],
        "page": [1, 2], "text": ["We use graphs of 31k nodes.", "Larger graphs are future work."],
        "regions": [[{"page": 1, "x0": 60.0, "y0": 80.0, "x1": 360.0, "y1": 480.0}],
                    [{"page": 2, "x0": 0.0, "y0": 0.0, "x1": 300.0, "y1": 80.0},
                     {"page": 3, "x0": 0.0, "y0": 0.0, "x1": 300.0, "y1": 80.0}]],
    })
    if not with_positions:
        chunks = chunks.drop("regions")
    labels = pl.DataFrame({
        "claim_id": ["c1"] * 4, "source": ["thread", "thread", "manuscript", "manuscript"],
        "labeller": ["b", "a", "a", "b"], "model": ["m"] * 4,
        "label": ["Supported", "Supported", "Supported", None], "raw_label": ["Supported"] * 3 + ["maybe"],
        "parse_ok": [True, True, True, False], "justification": [None, "the reply agrees", None, None],
        "evidence_quotes": [[], ["agrees"], [], []], "evidence_chunk_ids": [[], [], ["p1:1"], ["p1:1"]],
        "evidence_mode": ["longest_author_reply"] * 2 + ["retrieved"] * 2,
        "evidence_text": ["reply", "reply", "passage one", "passage one"], "evidence_tokens": [3, 3, 5, 5],
        "call_id": ["tb", "ta", "ma", "mb"], "error": [None, None, None, "parse_failed"],
    })
    return ClaimTables(
        queries=_queries(),
        review_claims=pl.DataFrame({
            "claim_id": ["c1"], "review_id": ["r1"], "source": ["review"], "source_id": ["r1"],
            "section": ["weaknesses"], "claim_text": ["The experiments stop at 100k nodes."],
            "span_start": [start], "span_end": [start + len("The experiments stop at 100k nodes")],
            "span_kind": ["exact"], "span_reason": [None], "call_id": ["x1"]}),
        reviews=pl.DataFrame({"review_id": ["r1"], "review_text": [REVIEW]}),
        claim_labels=labels,
        canonical=pl.DataFrame({"claim_id": ["c1", "c1"], "source": ["thread", "manuscript"],
                                "label": ["Supported", None], "provenance": ["agreed", "pending"],
                                "decision_id": [None, None], "call_id_a": ["ta", "ma"], "call_id_b": ["tb", "mb"]}),
        slices=pl.DataFrame({"slice": ["LLMJudged", "RebuttalSourced"], "claim_id": ["c1", "c1"],
                             "gold_label": ["Supported", "Supported"], "gold_provenance": ["agreed", "agreed"]}),
        predictions=pl.DataFrame({
            "claim_id": ["c1", "c1"], "configuration": ["rag", "full"], "verifier": ["v", "v"],
            "mode": ["rag", "full_context"], "retriever": ["hybrid", None], "k": [2, None],
            "status": ["ok", "ok"], "label": ["Supported", None], "raw_label": ["Supported", None],
            "parse_ok": [True, False], "error": [None, None], "call_id": ["vr", "vf"],
            "evidence_chunk_ids": [["p1:2", "p1:1"], ["p1:1", "p1:2"]]}),
        retrieval_runs=pl.DataFrame({"claim_id": ["c1", "c1", "c1"], "retriever": ["hybrid", "hybrid", "bm25"],
                                     "rank": [1, 2, 1], "chunk_id": ["p1:2", "p1:1", "p1:1"],
                                     "score": [0.9, 0.5, 7.0]}),
        chunks=chunks,
        manuscript_pdfs=pl.DataFrame({"paper_id": ["p1"], "status": ["ok"], "sha256": ["ab" * 32], "pages": [3]}),
        parsed_manuscripts=pl.DataFrame({"paper_id": ["p1"], "page_sizes": [[
            {"page": 1, "width": 600.0, "height": 800.0}, {"page": 2, "width": 600.0, "height": 800.0},
            {"page": 3, "width": 600.0, "height": 800.0}]]}),
    )


def test_the_claim_page_joins_everything_known_about_the_claim():
    tables = _tables()
    assert claim_call_ids(tables, "c1") == ["ma", "mb", "ta", "tb", "vf", "vr"]
    detail = claim_detail(tables, "c1", {"vr": json.dumps({"label": "Supported", "justification": "Section 6."}),
                                         "mb": json.dumps({"justification": "from the ledger"})})
    assert detail.source_text.marked == "The experiments stop at 100k nodes"
    assert detail.source_title == "Review r1"
    assert [s.source for s in detail.sources] == ["manuscript", "thread"]
    thread = detail.sources[1]
    assert [label.labeller for label in thread.labellers] == ["a", "b"] and thread.canonical["provenance"] == "agreed"
    assert thread.labellers[0].justification == "the reply agrees" and thread.same_evidence
    manuscript = detail.sources[0]
    assert manuscript.labellers[1].justification == "from the ledger" and manuscript.labellers[1].parse_ok is False
    assert [m["slice"] for m in detail.memberships] == ["RebuttalSourced", "LLMJudged"]
    full, rag = detail.configurations
    assert (rag.configuration, rag.justification) == ("rag", "Section 6.")
    assert [(p.chunk_id, p.rank, p.score, p.pages) for p in rag.passages] == [("p1:2", 1, 0.9, [2, 3]),
                                                                           ("p1:1", 2, 0.5, [1])]
    assert full.label is None and [p.score for p in full.passages] == [None, None]
    assert [(p.chunk_id, p.score) for p in detail.rankings["bm25"]] == [("p1:1", 7.0)]
    assert detail.notes == []
    assert detail.default_chunk_id == "p1:2"  # the first passage the first configuration was shown


def test_the_page_view_shows_the_passages_page_and_its_box():
    detail = claim_detail(_tables(), "c1", {})
    view = page_view(detail, "p1:2")
    assert (view["page"], view["pages"]) == (2, [2, 3])
    assert view["boxes"] == [{"left": 0.0, "top": 0.0, "width": 50.0, "height": 10.0}]
    assert page_view(detail, "p1:2", page=3)["page"] == 3
    assert page_view(detail, "p1:2", page=1)["page"] == 2  # not one of the passage's pages
    assert page_view(detail, "p1:1")["boxes"] == [{"left": 10.0, "top": 10.0, "width": 50.0, "height": 50.0}]
    assert page_view(detail, "no such chunk") is None


def test_a_lake_without_positions_shows_the_page_without_boxes_and_says_why():
    detail = claim_detail(_tables(with_positions=False), "c1", {})
    assert NO_POSITIONS in detail.notes
    view = page_view(detail, detail.default_chunk_id)
    assert view["page"] == 2 and view["boxes"] == []


def test_an_unknown_claim_has_no_page():
    assert claim_detail(_tables(), "nope", {}) is None


# -- the venue overview --------------------------------------------------------------------------------------------
def _metrics() -> pl.DataFrame:
    distribution = pl.List(pl.Struct({"label": pl.String, "count": pl.Int64}))
    return pl.DataFrame({
        "configuration": ["rag", "rag"], "verifier": ["v", "v"], "slice": ["LLMJudged", "PaperSourced"],
        "status": ["ok", "ok"], "n_claims": [10, 4], "accuracy": [0.8, 0.5], "macro_f1": [0.3, 0.5],
        "majority_label": ["Supported", "Supported"], "majority_accuracy": [0.8, 0.5],
        "majority_macro_f1": [0.22, 0.33],
        "predicted_distribution": pl.Series([[{"label": "Supported", "count": 10}],
                                             [{"label": "Supported", "count": 2},
                                              {"label": "Not Supported", "count": 2}]], dtype=distribution),
    })


def test_metric_rows_carry_the_baseline_and_the_one_label_warning():
    rows = metric_rows(_metrics())
    assert [row["slice"] for row in rows] == ["PaperSourced", "LLMJudged"]  # the slices' own order
    paper, judged = rows
    assert judged["majority_accuracy"] == 0.8 and judged["majority_label"] == "Supported"
    assert judged["warning"].startswith("Verifier v (rag) answered Supported to 10 of 10 claims")
    assert "majority baseline 0.80" in judged["warning"]
    assert paper["warning"] is None and paper["predicted"] == "Supported 2, Not Supported 2"
    assert metric_rows(None) == []


def test_slice_rows_count_every_slice_and_label():
    rows = slice_rows(pl.DataFrame({"slice": ["LLMJudged", "LLMJudged"], "paper_id": ["p1", "p2"],
                                    "gold_label": ["Supported", "Not Supported"]}))
    judged = next(row for row in rows if row["slice"] == "LLMJudged")
    assert (judged["claims"], judged["papers"], judged["Supported"], judged["Not Supported"]) == (2, 2, 1, 1)
    assert len(rows) == 6 and slice_rows(None) == []

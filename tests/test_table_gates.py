"""The great-expectations gates of the typed forum tables and `gold_chunks_exist` of paper_claims, on constructed
frames: each seen failing with the bad rows' ids in its metadata, and passing. The forum tables' checks are fed one
batch of forums at a time, as the streamed build feeds them, and judge the whole venue across batches. (The same
checks failing inside a real build of the sample: tests/test_check_failures.py.)"""

from __future__ import annotations

import dagster as dg
import polars as pl
import pytest

from peerify_dagster.assets.claims import gold_chunks_gate
from peerify_dagster.assets.forum_tables import CHECK_SPECS, TABLE_SCHEMAS, streamed_checks, table_gates
from peerify_dagster.domain.forum_tables import placed_notes

PDF = "/pdf/" + "0" * 40 + ".pdf"
HAND_CODED = {"every_note_accounted_for", "raw_notes_typed"}


def submission(paper_id: str, **change) -> dict:
    return {"venue": "V", "paper_id": paper_id, "number": 1, "title": "A title", "pdf_url": PDF, "cdate": 1,
            "decision": "accept", "decision_text": "Accept", **change}


def review(review_id: str, paper_id: str, **change) -> dict:
    return {"venue": "V", "paper_id": paper_id, "review_id": review_id, "reviewer_id": "~Reviewer_One1",
            "rating": "6: marginally above", "rating_score": 6, "review_text": "Sound work.", **change}


def response(response_id: str, paper_id: str, **change) -> dict:
    return {"venue": "V", "paper_id": paper_id, "response_id": response_id, "text": "Thank you.", **change}


def batch(**rows: list[dict]) -> dict[str, pl.DataFrame]:
    """One batch of forums: every typed table, empty unless given."""
    return {table: pl.DataFrame(rows.get(table, []), schema=schema) for table, schema in TABLE_SCHEMAS.items()}


def judge(*batches: dict[str, pl.DataFrame]) -> dict[tuple[str, str], dg.AssetCheckResult]:
    """The gates over `batches` fed one at a time; the raw notes are exactly the rows placed (all accounted for)."""
    checks = streamed_checks()
    for frames in batches:
        checks.add(placed_notes(frames).select("forum_id", "note_id"), frames, superseded_versions=0)
    return {(r.asset_key.to_user_string(), r.check_name): r for r in table_gates(checks)}


def clean() -> list[dict[str, pl.DataFrame]]:
    """Two batches of a well-formed venue; the first batch's response belongs to a paper of the second."""
    return [batch(submissions=[submission("P1")], reviews=[review("R1", "P1")],
                  author_responses=[response("A1", "P2")]),
            batch(submissions=[submission("P2", pdf_url=None, decision=None, decision_text=None)],
                  reviews=[review("R2", "P2", rating=None, rating_score=None)])]


def test_a_well_formed_venue_passes_every_gate_and_each_gate_reports_once():
    results = judge(*clean())
    expected = {(s.asset_key.to_user_string(), s.name) for s in CHECK_SPECS if s.name not in HAND_CODED}
    assert set(results) == expected
    assert [key for key, result in results.items() if not result.passed] == []
    assert all(r.metadata["failing_count"].value == 0 for r in results.values())


def with_rows(**extra: list[dict]) -> list[dict[str, pl.DataFrame]]:
    """The clean venue with a third batch of `extra` rows."""
    return [*clean(), batch(**extra)]


# (table, check) -> (the venue's batches with bad rows, the ids the gate must name)
FAILING = {
    "a review id repeated in a later batch": (("reviews", "unique_ids"),
                                               with_rows(reviews=[review("R1", "P1", review_text="Again.")]), ["R1"]),
    "a submission twice": (("submissions", "unique_ids"), with_rows(submissions=[submission("P2")]), ["P2"]),
    "responses to no submission": (("author_responses", "belongs_to_submission"),
                                   with_rows(author_responses=[response("A2", "P9"), response("A3", None)]),
                                   ["A2", "A3"]),
    "a review of no submission": (("reviews", "belongs_to_submission"), with_rows(reviews=[review("R3", "P9")]),
                                  ["R3"]),
    "blank and missing review texts": (("reviews", "non_empty_text"), with_rows(
        reviews=[review("R3", "P1", review_text=" \n"), review("R4", "P1", review_text=None)]), ["R3", "R4"]),
    "an empty response": (("author_responses", "non_empty_text"),
                          with_rows(author_responses=[response("A2", "P1", text="")]), ["A2"]),
    "malformed submissions": (("submissions", "well_formed"), with_rows(submissions=[
        submission("S1", title=" "), submission("S2", title=None), submission("S3", pdf_url="ftp://x/paper.pdf"),
        submission("S4", cdate=0), submission("S5", cdate=None),
        submission("S6", decision=None, decision_text="Invite to Workshop Track")]),
        ["S1", "S2", "S3", "S4", "S5", "S6"]),
    "malformed reviews": (("reviews", "well_formed"), with_rows(reviews=[
        review("R3", "P1", reviewer_id=None), review("R4", "P1", rating="fair", rating_score=None)]), ["R3", "R4"]),
}


@pytest.mark.parametrize("case", list(FAILING))
def test_each_gate_fails_naming_the_bad_rows_and_only_that_gate_fails(case):
    (table, check), batches, failing_ids = FAILING[case]
    results = judge(*batches)
    result = results[table, check]
    assert not result.passed
    assert result.metadata["failing_ids"].value == failing_ids
    assert result.metadata["failing_count"].value == len(failing_ids)
    blocking = check in ("unique_ids", "belongs_to_submission")
    assert result.severity == (dg.AssetCheckSeverity.ERROR if blocking else dg.AssetCheckSeverity.WARN)
    assert [key for key, r in results.items() if not r.passed] == [(table, check)]


def test_a_failing_gate_lists_each_expectation_with_what_it_observed():
    result = judge(*FAILING["malformed submissions"][1])["submissions", "well_formed"]
    expectations = result.metadata["expectations"].value
    failed = [e for e in expectations if not e["success"]]
    assert len(expectations) == 6 and len(failed) == 6  # each rule caught its own row
    assert {e["kwargs"]["column"] for e in failed} == {"title", "pdf_url", "cdate", "decision"}
    assert all(e["unexpected_count"] == 1 for e in failed)


def test_a_venue_without_rows_passes_every_gate():
    results = judge()
    assert results and all(r.passed for r in results.values())


CHUNKS = pl.DataFrame({"chunk_id": ["c1", "c2", "c3"]})


def claims(*gold: list[str] | None) -> pl.DataFrame:
    return pl.DataFrame({"claim_id": [f"k{i}" for i in range(len(gold))], "gold_chunk_ids": list(gold)},
                        schema={"claim_id": pl.String, "gold_chunk_ids": pl.List(pl.String)})


def test_gold_chunks_exist_names_the_missing_chunk_ids():
    result = gold_chunks_gate(claims(["c1", "gone"], ["c2"], ["lost", "gone"]), CHUNKS)
    assert not result.passed and result.severity == dg.AssetCheckSeverity.ERROR
    assert result.metadata["failing_ids"].value == ["gone", "lost"]
    assert result.asset_key == dg.AssetKey("paper_claims") and result.check_name == "gold_chunks_exist"


def test_gold_chunks_exist_passes_when_every_gold_chunk_is_a_chunk():
    # a claim without gold chunks names none that could be missing (benchmark_slices gates on having some)
    result = gold_chunks_gate(claims(["c1", "c3"], ["c2"], [], None), CHUNKS)
    assert result.passed and result.metadata["failing_ids"].value == []
    assert gold_chunks_gate(claims(), CHUNKS).passed

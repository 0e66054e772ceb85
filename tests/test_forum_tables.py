"""Unit tests of note parsing, classification and threading (pure domain code)."""

from __future__ import annotations


import pytest

from peerify_dagster.domain import notes as n
from peerify_dagster.domain.forum_tables import ForumNotes, build_tables, leading_score
from peerify_dagster.domain.sampling import choose_papers
from tests.notes_factory import VENUE, neurips_style_forum, note


def _tables(forum_notes: list, forum_id: str = "P1"):
    return build_tables(VENUE, [ForumNotes(forum_id, forum_notes)]).rows


@pytest.mark.parametrize(
    ("suffix", "signer", "kind"),
    [
        ("Official_Review", "Reviewer_x", "review"),
        ("Official_Comment", "Authors", "comment"),
        ("Rebuttal", "Authors", "rebuttal"),
        ("Meta_Review", "Area_Chair_y", "meta_review"),
        ("Decision", f"{VENUE}/Program_Chairs", "decision"),
        ("Withdrawal", "Authors", "withdrawal"),
        ("Ethics_Review_Flag_Something", "Reviewer_x", None),
    ],
)
def test_classify_by_invitation(suffix, signer, kind):
    assert n.classify(note("X", "P1", suffix, signer, "P1", 1)) == kind


def test_submission_with_state_invitations_is_a_submission():
    sub = note("P1", "P1", "Submission", "Authors", None, 1)
    sub["invitations"].append(f"{VENUE}/-/Withdrawn_Submission")
    assert n.classify(sub) == "submission"


def test_signer_reads_every_signature_not_the_first():
    comment = note("X", "P1", "Official_Comment", "Area_Chair_q", "P1", 1)
    comment["signatures"] = [f"{VENUE}/Submission1/Area_Chair_q", f"{VENUE}/Submission1/Authors"]
    assert n.signer(comment).role == "authors"
    reviewer = note("Y", "P1", "Official_Comment", "Reviewer_zz", "P1", 1)
    reviewer["signatures"].insert(0, "~Some_Person1")
    assert n.signer(reviewer) == n.Signer("reviewer", "Reviewer_zz")


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        ("not a note", "not a JSON object"),
        ({"id": "x", "forum": "P1", "invitations": [], "signatures": ["a"], "content": {}}, "invitations"),
        ({"id": "x", "forum": "P1", "invitations": ["a/-/B"], "signatures": ["s"], "content": {"t": "raw"}}, "not wrapped"),
        ({"id": "x", "forum": "P1", "invitations": ["a/-/B"], "content": {}}, r"missing field\(s\) signatures"),
    ],
)
def test_validate_note_names_the_problem(bad, reason):
    with pytest.raises(n.MalformedNote, match=reason):
        n.validate_note(bad)


def test_neurips_forum_tables():
    rows = _tables(neurips_style_forum())
    assert [r["review_id"] for r in rows["reviews"]] == ["R1", "R2"]
    r1 = rows["reviews"][0]
    assert r1["reviewer_id"] == "Reviewer_aaaa"
    assert r1["limitations"] == "Few datasets."
    assert r1["rating_score"] == 6 and r1["confidence_score"] == 4
    assert r1["review_text"].startswith("Summary: Sum one.") and "Limitations: Few datasets." in r1["review_text"]
    # Follow-ups are never reviews; rebuttals (field `rebuttal`) are author responses.
    responses = {r["response_id"]: r for r in rows["author_responses"]}
    assert set(responses) == {"B1", "B2", "G1", "C1"}
    assert responses["B1"]["kind"] == "rebuttal" and responses["B1"]["text"] == "We added the ablation in Appendix A."
    assert responses["G1"]["is_global"] and responses["G1"]["review_id"] is None
    assert responses["C1"]["review_id"] == "R1"  # depth 4: R1 <- B1 <- F1 <- C1
    followups = {r["comment_id"]: r for r in rows["reviewer_followups"]}
    assert followups["F1"]["own_review"] and not followups["F2"]["own_review"]
    assert followups["F2"]["review_id"] == "R1"
    assert rows["submissions"][0]["decision"] == "Accept (poster)"
    assert rows["meta_reviews"][0]["area_chair_id"] == "Area_Chair_cccc"
    assert rows["note_errors"] == []


def test_review_threads_in_time_order_with_combined_response():
    rows = _tables(neurips_style_forum())
    threads = {t["review_id"]: t for t in rows["review_threads"]}
    assert threads["R1"]["author_response_ids"] == ["B1", "C1"]
    assert threads["R1"]["followup_ids"] == ["F1", "F2"]
    assert threads["R2"]["author_response_ids"] == ["B2"]
    combined = threads["R1"]["combined_author_response"]
    # time order: B1 (300), G1 (305), B2 (310), C1 (500)
    assert combined.index("ablation") < combined.index("Global") < combined.index("standard") < combined.index("Glad")
    assert threads["R1"]["combined_response_words"] == len(combined.split())


def test_bad_notes_are_recorded_and_the_rest_completes():
    forum = neurips_style_forum()
    forum.append("garbage")
    forum.append(note("U1", "P1", "Mystery_Stage", "Authors", "P1", 800))
    forum.append({**note("W1", "P2", "Official_Comment", "Authors", "P2", 900)})
    rows = _tables(forum)
    reasons = sorted((e["reason"], e["note_id"]) for e in rows["note_errors"])
    assert reasons == [("malformed_note", None), ("unknown_invitation", "U1"), ("wrong_forum", "W1")]
    assert all("P1" == e["forum_id"] for e in rows["note_errors"])
    assert len(rows["reviews"]) == 2


def test_forum_without_submission_is_reported():
    forum = [x for x in neurips_style_forum() if x["id"] != "P1"]
    rows = _tables(forum)
    assert rows["submissions"] == [] and rows["reviews"] == []
    assert [e["reason"] for e in rows["note_errors"]] == ["missing_submission"]


def test_withdrawn_submission_flag_and_decision():
    sub = note("P9", "P9", "Submission", "Authors", None, 1, 9, title="W", pdf="/pdf/" + "b" * 40 + ".pdf",
               venueid=f"{VENUE}/Withdrawn_Submission")
    sub["invitations"].append(f"{VENUE}/-/Withdrawn_Submission")
    withdrawal = note("WD", "P9", "Withdrawal", "Authors", "P9", 5, 9, withdrawal_confirmation="I have read...")
    rows = _tables([sub, withdrawal], "P9")
    assert rows["submissions"][0]["withdrawn"] is True
    assert rows["submissions"][0]["decision"] == "Withdrawn"


@pytest.mark.parametrize(("text", "score"), [("6: marginally above", 6), ("10", 10), ("none", None), (None, None)])
def test_leading_score(text, score):
    assert leading_score(text) == score


def test_sampling_is_seeded_and_order_independent():
    ids = [f"f{i:03d}" for i in range(50)]
    first = choose_papers(ids, seed=7, sample_size=10)
    assert first == choose_papers(list(reversed(ids)), seed=7, sample_size=10)
    assert first != choose_papers(ids, seed=8, sample_size=10)
    assert len(set(first)) == 10
    assert choose_papers(ids, seed=1, sample_size=None) == sorted(ids)

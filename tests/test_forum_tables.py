"""Unit tests of note parsing, classification, threading, outcomes, versions and scores (pure domain code)."""

from __future__ import annotations

import polars as pl
import pytest

from peerify_dagster.domain import notes as n
from peerify_dagster.domain import quality
from peerify_dagster.domain.forum_tables import (
    NOTE_TABLES,
    ForumNotes,
    build_tables,
    likely_cause_of_empty_tables,
)
from peerify_dagster.domain.sampling import choose_papers
from tests.notes_factory import VENUE, neurips_style_forum, note, v1_forum, v1_note


def _tables(forum_notes: list, forum_id: str = "P1", api_version: int = 2):
    return build_tables(VENUE, [ForumNotes(forum_id, forum_notes)], api_version).rows


def _placement(rows: dict[str, list[dict]]) -> dict[str, str]:
    """note id -> the one table holding it (fails the test when a note is in two)."""
    placed: dict[str, str] = {}
    for table, column in NOTE_TABLES.items():
        for row in rows[table]:
            assert row[column] not in placed, f"{row[column]} in {placed.get(row[column])} and {table}"
            placed[row[column]] = table
    return placed


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
        ({"id": "x", "forum": "P1", "invitations": ["a/-/B"], "signatures": ["s"], "content": {"t": "raw"}}, "not "
         "wrapped"),
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
    submission = rows["submissions"][0]
    assert (submission["decision"], submission["decision_text"], submission["decision_source"]) == (
        "poster", "Accept (poster)", "decision_note")
    assert rows["decisions"][0]["outcome"] == "poster"
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


def test_forum_without_submission_names_each_of_its_notes():
    forum = [x for x in neurips_style_forum() if x["id"] != "P1"]
    rows = _tables(forum)
    assert rows["submissions"] == [] and rows["reviews"] == []
    assert {e["note_id"]: e["reason"] for e in rows["note_errors"]} == {x["id"]: "missing_submission" for x in forum}


# --- every note accounted for ----------------------------------------------------------------------------


def _every_kind_forum() -> list[dict]:
    """The NeurIPS-style forum plus chair and public comments, a withdrawal note and one note of each bad kind."""
    forum = neurips_style_forum()
    forum += [
        note("AC1", "P1", "Official_Comment", "Area_Chair_cccc", "R2", 510, title="AC", comment="Please respond."),
        note("SAC1", "P1", "Official_Comment", "Senior_Area_Chairs", "P1", 520, comment="Noted."),
        note("PC1", "P1", "Official_Comment", f"{VENUE}/Program_Chairs", "AC1", 530, comment="Extended deadline."),
        note("PUB1", "P1", "Public_Comment", "~Jane_Doe1", "P1", 540, title="Q", comment="Is code released?"),
        note("PUB2", "P1", "Public_Comment", "~John_Roe1", "PUB1", 550, comment="Yes, see the abstract."),
        note("WD1", "P1", "Withdrawal", "Authors", "P1", 800, withdrawal_confirmation="I have read the policy."),
        note("ORPHAN", "P1", "Official_Comment", "Authors", "DELETED", 560, comment="Reply to a hidden note."),
        note("ORPHAN2", "P1", "Official_Comment", "Reviewer_aaaa", "ORPHAN", 570, comment="Under the orphan."),
        note("STRANGER", "P1", "Official_Comment", "~Random_Person1", "R1", 580, comment="Signed by nobody we know."),
        note("REBUT", "P1", "Rebuttal", "Reviewer_bbbb", "R2", 590, rebuttal="A reviewer's 'rebuttal'."),
        v1_note("OLD1", "P1", "Official_Comment", "Authors", "P1", 600, comment="An API v1 note."),
    ]
    return forum


def test_every_note_lands_in_exactly_one_table_or_in_note_errors():
    forum = _every_kind_forum()
    rows = _tables(forum)
    placed = _placement(rows)
    assert set(placed) == {x["id"] for x in forum}
    assert {i: t for i, t in placed.items() if t not in ("reviews", "author_responses", "reviewer_followups")} == {
        "P1": "submissions", "AC1": "chair_comments", "SAC1": "chair_comments", "PC1": "chair_comments",
        "PUB1": "public_comments", "PUB2": "public_comments", "M1": "meta_reviews", "D1": "decisions",
        "WD1": "status_notes", "ORPHAN": "note_errors", "ORPHAN2": "note_errors", "STRANGER": "note_errors",
        "REBUT": "note_errors", "OLD1": "note_errors"}
    raw = pl.DataFrame({"forum_id": ["P1"] * len(forum), "note_id": [x["id"] for x in forum]})
    placed_frame = pl.DataFrame([{"forum_id": "P1", "note_id": i, "table": t} for i, t in placed.items()])
    assert quality.unaccounted_notes(raw, placed_frame) == {}


def test_chair_and_public_comments_keep_their_reply_target_and_thread():
    rows = _tables(_every_kind_forum())
    chairs = {r["comment_id"]: r for r in rows["chair_comments"]}
    assert {i: (r["role"], r["signer_id"]) for i, r in chairs.items()} == {
        "AC1": ("area_chair", "Area_Chair_cccc"), "SAC1": ("senior_area_chair", "Senior_Area_Chairs"),
        "PC1": ("program_chairs", "Program_Chairs")}
    assert (chairs["AC1"]["replyto"], chairs["AC1"]["review_id"], chairs["AC1"]["thread_id"]) == ("R2", "R2", "R2")
    assert (chairs["PC1"]["replyto"], chairs["PC1"]["review_id"], chairs["PC1"]["thread_id"]) == ("AC1", "R2", "R2")
    assert (chairs["SAC1"]["review_id"], chairs["SAC1"]["thread_id"]) == (None, "SAC1")
    assert chairs["AC1"]["text"] == "Please respond." and chairs["AC1"]["title"] == "AC"
    public = {r["comment_id"]: r for r in rows["public_comments"]}
    pub2 = public["PUB2"]
    assert (pub2["replyto"], pub2["thread_id"], pub2["review_id"]) == ("PUB1", "PUB1", None)
    assert public["PUB1"]["signatures"] == ["~Jane_Doe1"] and public["PUB1"]["text"] == "Is code released?"
    [status] = rows["status_notes"]
    assert (status["note_id"], status["kind"]) == ("WD1", "withdrawal")
    assert "I have read the policy." in status["content_json"]


def test_bad_input_gets_named_rows_and_the_rest_of_the_forum_completes():
    rows = _tables(_every_kind_forum())
    errors = {e["note_id"]: e for e in rows["note_errors"]}
    assert {i: e["reason"] for i, e in errors.items()} == {
        "ORPHAN": "missing_parent", "ORPHAN2": "missing_parent", "STRANGER": "unknown_signer",
        "REBUT": "unknown_signer", "OLD1": "api_v1_note_in_v2_venue"}
    assert errors["ORPHAN"]["message"] == ("note ORPHAN (forum P1): it replies to DELETED, not a readable note of "
                                           "this forum; note skipped")
    assert errors["ORPHAN2"]["message"] == ("note ORPHAN2 (forum P1): its reply chain breaks at ORPHAN, which replies "
                                            "to DELETED, not a readable note of this forum; note skipped")
    assert "~Random_Person1" in errors["STRANGER"]["message"]
    assert "API v1 note" in errors["OLD1"]["message"] and "api_version: 1" in errors["OLD1"]["message"]
    # The good notes are all there, threads included.
    assert [r["review_id"] for r in rows["reviews"]] == ["R1", "R2"]
    assert {r["response_id"] for r in rows["author_responses"]} == {"B1", "B2", "G1", "C1"}
    assert {t["review_id"]: t["author_response_ids"] for t in rows["review_threads"]} == {"R1": ["B1", "C1"],
                                                                                          "R2": ["B2"]}


def test_unaccounted_notes_names_the_forum_and_the_notes():
    raw = pl.DataFrame({"forum_id": ["F1", "F1", "F1", "F2", "F2", "F3"],
                        "note_id": ["F1", "a", "a", "F2", None, "F3"]},
                       schema={"forum_id": pl.String, "note_id": pl.String})
    placed = pl.DataFrame({"forum_id": ["F1", "F1", "F2", "F3", "F3", "F3"],
                           "note_id": ["F1", "a", "F2", "F3", "F3", "ghost"],
                           "table": ["submissions", "reviews", "submissions", "submissions", "note_errors", "reviews"]})
    assert quality.unaccounted_notes(raw, placed) == {
        "F2": ["<no id> x 1"], "F3": ["F3 (placed 2 times)", "ghost (not among the forum's raw notes)"]}
    dropped = placed.filter(pl.col("note_id") != "a")
    assert quality.unaccounted_notes(raw, dropped)["F1"] == ["a"]
    with_id_less_error = pl.concat([placed.filter(pl.col("forum_id") != "F3"), pl.DataFrame(
        {"forum_id": ["F2"], "note_id": [None], "table": ["note_errors"]}, schema=placed.schema)])
    assert quality.unaccounted_notes(raw.filter(pl.col("forum_id") != "F3"), with_id_less_error) == {}


# --- note versions ---------------------------------------------------------------------------------------


def test_latest_version_by_tmdate_wins_and_older_versions_are_counted():
    forum = neurips_style_forum()
    newer = {**note("R1", "P1", "Official_Review", "Reviewer_aaaa", "P1", 200, summary="Edited summary.",
                    rating="8: accept", confidence="4: confident"), "tmdate": 900, "mdate": 900}
    older = {**note("R1", "P1", "Official_Review", "Reviewer_aaaa", "P1", 200, summary="First summary.",
                    rating="3: reject", confidence="4: confident"), "tmdate": 250, "mdate": 250}
    forum = [x for x in forum if x["id"] != "R1"] + [newer, older]  # list order must not decide
    built = build_tables(VENUE, [ForumNotes("P1", forum)])
    [r1] = [r for r in built.rows["reviews"] if r["review_id"] == "R1"]
    assert (r1["summary"], r1["rating_score"]) == ("Edited summary.", 8)
    assert built.superseded_versions == 1
    assert n.superseded_positions([newer, older, "junk", {**older, "id": "X"}]) == {1}
    same_time = [{**older, "content": {"v": {"value": 1}}}, {**older, "content": {"v": {"value": 2}}}]
    assert n.superseded_positions(same_time) == {0}  # a tie goes to the later entry


# --- outcomes --------------------------------------------------------------------------------------------


def _submission(venueid: str | None = None, venue: str | None = None, *states: str) -> dict:
    content = {k: v for k, v in (("venueid", venueid), ("venue", venue)) if v is not None}
    sub = note("P9", "P9", "Submission", "Authors", None, 1, 9, title="T", pdf="/pdf/" + "b" * 40 + ".pdf", **content)
    sub["invitations"] += [f"{VENUE}/-/{state}" for state in states]
    return sub


@pytest.mark.parametrize(
    ("submission", "replies", "expected"),
    [
        # The current venueid outranks stale invitations (accepted poster once withdrawn; rejected once desk-rejected).
        (_submission(VENUE, "Test 2026 Poster", "Withdrawn_Submission"), [], ("poster", "venueid", False, False)),
        (_submission(f"{VENUE}/Rejected_Submission", "Submitted to Test 2026", "Desk_Rejected_Submission"), [],
         ("reject", "venueid", False, False)),
        (_submission(f"{VENUE}/Withdrawn_Submission", "Test 2026 Withdrawn Submission", "Withdrawn_Submission"),
         [note("WD", "P9", "Withdrawal", "Authors", "P9", 5, 9, withdrawal_confirmation="yes")],
         ("withdrawn", "venueid", True, False)),
        (_submission(f"{VENUE}/Desk_Rejected_Submission", "Test 2026 Desk Rejected Submission"), [],
         ("desk_rejected", "venueid", False, True)),
        (_submission(VENUE, "Test 2026 Oral"), [], ("oral", "venueid", False, False)),
        (_submission(VENUE, "Test 2026 ConditionalPoster"), [], ("poster", "venueid", False, False)),
        (_submission(VENUE), [], ("accept", "venueid", False, False)),
        (_submission(f"{VENUE}/Submission", "Test 2026 Conference Submission"), [], (None, None, False, False)),
        # Without venueid, the venue label; ICLR labels a rejected paper "Submitted to ...".
        (_submission(None, "Submitted to Test 2026"), [], ("reject", "venue", False, False)),
        (_submission(None, "Test 2026 Conference Withdrawn Submission"), [], ("withdrawn", "venue", True, False)),
        # A Decision note wins for the decision; the flags still follow the venueid.
        (_submission(f"{VENUE}/Withdrawn_Submission"),
         [note("D", "P9", "Decision", f"{VENUE}/Program_Chairs", "P9", 5, 9, decision="Accept (Spotlight)")],
         ("spotlight", "decision_note", True, False)),
        # No venue at all (API v1): invitations and status notes, a reversal undoing a withdrawal.
        (_submission(None, None, "Withdrawn_Submission"), [], ("withdrawn", "invitation", True, False)),
        (_submission(), [note("W", "P9", "Withdrawal", "Authors", "P9", 5, 9, withdrawal_confirmation="y"),
                         note("WR", "P9", "Withdrawal_Reversal", f"{VENUE}/Program_Chairs", "P9", 6, 9, comment="r")],
         (None, None, False, False)),
        (_submission(), [note("DR", "P9", "Desk_Rejection", f"{VENUE}/Program_Chairs", "P9", 5, 9, comment="format")],
         ("desk_rejected", "status_note", False, True)),
    ],
)
def test_submission_outcome(submission, replies, expected):
    [row] = _tables([submission, *replies], "P9")["submissions"]
    assert (row["decision"], row["decision_source"], row["withdrawn"], row["desk_rejected"]) == expected


@pytest.mark.parametrize(
    ("label", "outcome"),
    [
        ("Accept (Oral)", "oral"), ("Accept (Talk)", "oral"), ("ICLR 2023 notable top 5%", "oral"),
        ("ICLR 2023 notable top 25%", "spotlight"), ("NeurIPS 2024 spotlight", "spotlight"),
        ("ICML 2024 Spotlightposter", "spotlight"), ("Accept (poster)", "poster"),
        ("NeurIPS 2024 Datasets and Benchmarks Track poster", "poster"), ("Accept", "accept"),
        ("Reject", "reject"), ("Desk Rejected", "desk_rejected"), ("Withdrawn Submission", "withdrawn"),
        ("Invite to Workshop Track", None), ("", None), (None, None),
    ],
)
def test_normalise_outcome(label, outcome):
    assert n.normalise_outcome(label) == outcome


def test_unreadable_decision_text_is_kept():  # and flagged by submissions' well_formed (tests/test_table_gates.py)
    rows = _tables([_submission(), note("D", "P9", "Decision", f"{VENUE}/Program_Chairs", "P9", 5, 9,
                                         decision="Invite to Workshop Track")], "P9")
    [row] = rows["submissions"]
    assert (row["decision"], row["decision_text"], row["decision_source"]) == (None, "Invite to Workshop Track",
                                                                               "decision_note")


# --- scores and list fields ------------------------------------------------------------------------------


@pytest.mark.parametrize(("raw", "score"), [
    (4, 4), (0, 0), (3.0, 3), ("3", 3), ("3: good", 3), ("3 good", 3), ("6: marginally above", 6), ("10", 10),
    ("-1: x", -1), (2.5, None), ("2.5", None), ("none", None), (None, None), (True, None), (["3"], None)])
def test_score(raw, score):
    assert n.score(raw) == score


def test_every_numeric_review_field_gets_an_integer_and_ethics_flags_a_list():
    iclr = note("R1", "P1", "Official_Review", "Reviewer_a", "P1", 2, soundness=3, presentation=2, contribution=4,
                rating=6, confidence=5, flag_for_ethics_review=["No ethics review needed."], summary="s")
    neurips = note("R2", "P1", "Official_Review", "Reviewer_b", "P1", 3, soundness="3: good", presentation="2: fair",
                   contribution="4: excellent", rating="7: Accept: Technically solid paper", confidence="4: You are "
                   "confident", flag_for_ethics_review="Yes, Privacy", summary="s")
    rows = _tables([neurips_style_forum()[0], iclr, neurips])
    scores = {r["review_id"]: tuple(r[f"{f}_score"] for f in ("rating", "confidence", "soundness", "presentation",
                                                               "contribution")) for r in rows["reviews"]}
    assert scores == {"R1": (6, 5, 3, 2, 4), "R2": (7, 4, 3, 2, 4)}
    by_id = {r["review_id"]: r for r in rows["reviews"]}
    assert by_id["R1"]["flag_for_ethics_review"] == ["No ethics review needed."]
    assert by_id["R2"]["flag_for_ethics_review"] == ["Yes, Privacy"]
    assert (by_id["R1"]["soundness"], by_id["R2"]["soundness"]) == ("3", "3: good")  # the text as received stays


# --- API v1 ----------------------------------------------------------------------------------------------


def test_v1_notes_map_onto_the_same_tables():
    forum = v1_forum()
    rows = build_tables(VENUE, [ForumNotes("V1", forum)], api_version=1).rows
    assert set(_placement(rows)) == {x["id"] for x in forum} and rows["note_errors"] == []
    [submission] = rows["submissions"]
    assert (submission["title"], submission["keywords"]) == ("An old paper", ["optimisation"])
    assert (submission["decision"], submission["decision_text"]) == ("oral", "Accept (Talk)")
    reviews = {r["review_id"]: r for r in rows["reviews"]}
    assert {i: (r["reviewer_id"], r["rating_score"]) for i, r in reviews.items()} == {
        "VR1": ("AnonReviewer1", 6), "VR2": ("AnonReviewer2", 8)}
    assert reviews["VR1"]["review_text"] == "Review: The method is unclear."
    assert '"experience_assessment": "I read it."' in reviews["VR1"]["extra_fields_json"]
    [response] = rows["author_responses"]
    assert (response["response_id"], response["review_id"], response["invitation"]) == (
        "VC1", "VR1", "Test.cc/2020/Conference/Paper1/-/Official_Comment")
    [followup] = rows["reviewer_followups"]
    assert (followup["comment_id"], followup["own_review"]) == ("VC2", True)


def test_v2_notes_in_a_v1_venue_are_refused_by_name():
    forum = v1_forum() + [note("NEW", "V1", "Official_Comment", "Authors", "V1", 900, comment="v2 shaped")]
    errors = build_tables(VENUE, [ForumNotes("V1", forum)], api_version=1).rows["note_errors"]
    assert [(e["note_id"], e["reason"]) for e in errors] == [("NEW", "api_v2_note_in_v1_venue")]


def test_a_v1_forum_read_as_v2_names_the_likely_cause():
    rows = build_tables(VENUE, [ForumNotes("V1", v1_forum())], api_version=2).rows
    assert rows["submissions"] == [] and {e["reason"] for e in rows["note_errors"]} == {"api_v1_note_in_v2_venue"}
    cause = likely_cause_of_empty_tables(rows["note_errors"])
    assert cause.startswith("API v1 notes in a v2 venue") and "6 of 6" in cause


@pytest.mark.parametrize(("venue_id", "version"), [
    ("ICLR.cc/2020/Conference", 1), ("NeurIPS.cc/2022/Conference", 1), ("ICLR.cc/2023/Conference", 2),
    ("ICLR.cc/2026/Conference", 2), ("TMLR", None), ("NeurIPS.cc/2024/Datasets_and_Benchmarks_Track", 2)])
def test_api_version_from_year(venue_id, version):
    assert n.api_version_from_year(venue_id) == version


def test_sampling_is_seeded_and_order_independent():
    ids = [f"f{i:03d}" for i in range(50)]
    first = choose_papers(ids, seed=7, sample_size=10)
    assert first == choose_papers(list(reversed(ids)), seed=7, sample_size=10)
    assert first != choose_papers(ids, seed=8, sample_size=10)
    assert len(set(first)) == 10
    assert choose_papers(ids, seed=1, sample_size=None) == sorted(ids)

"""Paper sampling: a draw that stays put when the listed population changes, and the paper's pairing filters
(withdrawn / desk-rejected papers, a substantive direct author reply, one review/response pair per paper)."""

from __future__ import annotations

import pytest

from peerify_dagster.domain import sampling as s
from peerify_dagster.domain.venues import RegistryError, load_registry

IDS = [f"forum{i:03d}" for i in range(200)]
SUBSTANTIVE = ("We respectfully disagree: Table 2 already reports the standard deviation over five seeds, and the gap "
               "to the dense baseline is three times larger than it. Section 4.3 also ablates the number of anchors.")
PROMISE = ("Thank you for the review. We will add the variance in the revised version. We will also include the "
           "ablation in the camera-ready version and discuss it in the final version of the paper, as suggested.")


def note(note_id: str, invitation: str, signature: str, replyto: str | None = "f1", **content: str) -> dict:
    return {"id": note_id, "forum": "f1", "replyto": replyto, "invitations": [f"Venue/Submission1/-/{invitation}"],
            "signatures": [f"Venue/Submission1/{signature}"], "content": {k: {"value": v} for k, v in content.items()},
            "cdate": 1, "tcdate": 1, "mdate": 1, "tmdate": 1}


def submission(forum_id: str, venueid: str = "Venue") -> dict:
    return {"id": forum_id, "forum": forum_id, "invitations": ["Venue/-/Submission"], "signatures": ["Venue/Authors"],
            "content": {"title": {"value": forum_id}, "venueid": {"value": venueid}}}


def test_draw_is_seeded_and_order_independent():
    first = s.choose_papers(IDS, seed=7, sample_size=20)
    assert first == s.choose_papers(list(reversed(IDS)), seed=7, sample_size=20)
    assert first != s.choose_papers(IDS, seed=8, sample_size=20)
    assert len(set(first)) == 20 and s.choose_papers(IDS, seed=1, sample_size=None) == sorted(IDS)


def test_new_forums_only_displace_and_removed_unchosen_forums_change_nothing():
    before = s.choose_papers(IDS, seed=7, sample_size=20)
    grown = s.choose_papers(IDS + [f"late{i:03d}" for i in range(50)], seed=7, sample_size=20)
    newcomers = [f for f in grown if f.startswith("late")]
    kept = [f for f in grown if not f.startswith("late")]
    assert kept == before[:len(kept)] and len(kept) == 20 - len(newcomers)
    unchosen = sorted(set(IDS) - set(before))
    assert s.choose_papers([f for f in IDS if f not in unchosen[:100]], seed=7, sample_size=20) == before
    # One more listed forum moves at most one forum out (drawing by position in the sorted list reshuffled all).
    assert len(set(before) & set(s.choose_papers(IDS + ["forum000a"], seed=7, sample_size=20))) >= 19


@pytest.mark.parametrize(("text", "substantive"), [
    (SUBSTANTIVE, True),
    (PROMISE, False),
    ("Thank you very much for your positive and encouraging review of our paper, we truly appreciate it a lot "
     "and thank you again for the time you spent on it.", False),
    ("We agree; Table 2 shows it.", False),  # under min_reply_words
    (PROMISE + " The variance is in Table 2 of the submitted version, with five seeds per setting.", True),
])
def test_substantive_reply(text, substantive):
    assert s.is_substantive_reply(text, 30) == substantive


def forum_notes() -> list[dict]:
    return [
        submission("f1"),
        note("r1", "Official_Review", "Reviewer_A", summary="A review."),
        note("r2", "Official_Review", "Reviewer_B", summary="A review."),
        note("r3", "Official_Review", "Reviewer_C", summary="A review."),
        note("a1", "Official_Comment", "Authors", replyto="r1", comment=SUBSTANTIVE),
        note("a2", "Rebuttal", "Authors", replyto="r2", rebuttal=SUBSTANTIVE + " " + SUBSTANTIVE),
        note("a3", "Official_Comment", "Authors", replyto="r3", comment=PROMISE),  # promise only
        note("c1", "Official_Comment", "Reviewer_C", replyto="r3", comment=SUBSTANTIVE),  # not the authors
        note("a4", "Official_Comment", "Authors", replyto="c1", comment=SUBSTANTIVE),  # not a direct reply
    ]


def test_direct_replies_and_the_pair_the_paper_takes():
    replies = s.forum_replies(forum_notes(), api_version=2, config=s.SamplingConfig())
    assert replies.replied_review_ids == ["r1", "r2"]
    assert replies.paired_review_id == "r2"  # the longest substantive direct reply


def test_malformed_and_superseded_notes_are_left_out_of_the_replies():
    newer = {**forum_notes()[4], "content": {"comment": {"value": PROMISE}}, "tmdate": 5}  # a1 edited to a promise
    replies = s.forum_replies(forum_notes() + [newer, {"id": "bad"}], api_version=2, config=s.SamplingConfig())
    assert replies.replied_review_ids == ["r2"]


@pytest.mark.parametrize(("venueid", "options", "reason"), [
    ("Venue/Withdrawn_Submission", {"exclude_withdrawn": True}, s.SKIP_WITHDRAWN),
    ("Venue/Desk_Rejected_Submission", {"exclude_desk_rejected": True}, s.SKIP_DESK_REJECTED),
    ("Venue/Withdrawn_Submission", {}, None),
    ("Venue/Rejected_Submission", {"exclude_withdrawn": True, "exclude_desk_rejected": True}, None),
])
def test_submission_filters(venueid, options, reason):
    assert s.submission_skip_reason(submission("f1", venueid), s.SamplingConfig(**options)) == reason


def test_draw_walks_the_ranking_until_enough_papers_pass_the_filters():
    forums = [f"f{i}" for i in range(12)]
    subs = [submission(f, "Venue/Withdrawn_Submission" if f == "f3" else "Venue") for f in forums]
    with_reply = {"f1", "f2", "f5", "f7", "f8", "f9", "f11"}
    unreadable = {"f7"}
    asked = []

    def notes_of(forum_id: str):
        asked.append(forum_id)
        if forum_id in unreadable:
            return None
        notes = [{**n, "forum": forum_id} for n in forum_notes()[:2]]
        if forum_id in with_reply:
            notes.append({**note("a1", "Official_Comment", "Authors", replyto="r1", comment=SUBSTANTIVE),
                          "forum": forum_id})
        return notes

    config = s.SamplingConfig(exclude_withdrawn=True, require_author_reply=True, reviews="one_pair")
    draw = s.draw_sample(subs, seed=3, sample_size=4, config=config, forum_notes=notes_of, api_version=2)
    ranking = s.ranked(forums, seed=3)
    expected = [f for f in ranking if f in with_reply - unreadable and f != "f3"][:4]
    assert [p.forum_id for p in draw.papers] == expected
    assert all(p.paired_review_id == "r1" and p.replied_review_ids == ["r1"] for p in draw.papers)
    # Forums after the fourth kept one are never read (a live venue would fetch them for nothing).
    reached = ranking[:ranking.index(expected[-1]) + 1]
    assert asked == [f for f in reached if f != "f3"]
    assert sorted(f for ids in draw.skipped.values() for f in ids) == sorted(set(reached) - set(expected))
    assert draw.skipped.get(s.SKIP_WITHDRAWN, []) == [f for f in reached if f == "f3"]
    assert draw.skipped.get(s.SKIP_UNREADABLE, []) == [f for f in reached if f in unreadable]


def test_without_reply_options_no_forum_is_read():
    draw = s.draw_sample([submission(f) for f in IDS], 7, 5, s.SamplingConfig(), lambda f: pytest.fail(f), 2)
    assert [p.forum_id for p in draw.papers] == s.choose_papers(IDS, 7, 5)
    assert all(p.replied_review_ids is None for p in draw.papers)


@pytest.mark.parametrize(("options", "message"), [
    ({"exclude_withdrawn": "yes"}, "exclude_withdrawn must be a bool"),
    ({"reviews": "best"}, "reviews must be one of"),
    ({"min_reply_words": True}, "min_reply_words must be a int"),
    ({"balance": True}, "unknown option(s) ['balance']"),
])
def test_bad_sampling_options_are_named_with_the_venue(tmp_path, options, message):
    registry = tmp_path / "venues.yaml"
    registry.write_text(f"venues:\n  v:\n    seed: 1\n    sampling: {options!r}\n".replace("'", '"')
                        .replace("True", "true"))
    with pytest.raises(RegistryError, match="venue 'v': sampling: ") as error:
        load_registry(registry)
    assert message in str(error.value)

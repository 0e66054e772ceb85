"""Builders of API v2 note JSON for tests, in the exact wire shape (content fields wrapped in {"value": ...})."""

from __future__ import annotations

VENUE = "Test.cc/2026/Conference"


def wrap(**fields) -> dict:
    return {k: {"value": v} for k, v in fields.items()}


def note(note_id: str, forum: str, invitation_suffix: str, signer: str, replyto: str | None, cdate: int,
         number: int = 1, **content) -> dict:
    paper = f"{VENUE}/Submission{number}"
    owner = VENUE if invitation_suffix == "Submission" else paper
    invitation = f"{owner}/-/{invitation_suffix}"
    signature = signer if signer.startswith((VENUE, "~")) else f"{paper}/{signer}"
    return {
        "id": note_id, "forum": forum, "replyto": replyto, "number": number, "invitations": [invitation],
        "signatures": [signature], "readers": ["everyone"], "writers": [VENUE], "domain": VENUE,
        "cdate": cdate, "tcdate": cdate, "mdate": cdate, "tmdate": cdate, "content": wrap(**content),
    }


def neurips_style_forum(forum: str = "P1", number: int = 1) -> list[dict]:
    """A forum with two reviews, per-review rebuttals, a global rebuttal, nested author comments and follow-ups."""
    return [
        note(forum, forum, "Submission", "Authors", None, 100, number, title="A paper", abstract="Abstract.",
             keywords=["retrieval"], pdf="/pdf/" + "a" * 40 + ".pdf", venueid=VENUE, venue="Test 2026 Poster"),
        note("R1", forum, "Official_Review", "Reviewer_aaaa", forum, 200, number, summary="Sum one.",
             strengths="Good.", weaknesses="No ablation.", questions="Why?", limitations="Few datasets.",
             rating="6: marginally above the acceptance threshold", confidence="4: confident"),
        note("R2", forum, "Official_Review", "Reviewer_bbbb", forum, 210, number, summary="Sum two.",
             strengths="Clear.", weaknesses="Weak baselines.", questions="", rating="3: reject",
             confidence="2: unsure"),
        note("B1", forum, "Rebuttal", "Authors", "R1", 300, number, rebuttal="We added the ablation in Appendix A."),
        note("B2", forum, "Rebuttal", "Authors", "R2", 310, number, rebuttal="Baselines are standard."),
        note("G1", forum, "Rebuttal", "Authors", forum, 305, number, rebuttal="Global answer to all reviewers."),
        note("F1", forum, "Official_Comment", "Reviewer_aaaa", "B1", 400, number, title="Thanks", comment="Convinced."),
        note("C1", forum, "Official_Comment", "Authors", "F1", 500, number, title="Re", comment="Glad to hear."),
        note("F2", forum, "Official_Comment", "Reviewer_bbbb", "B1", 450, number, title="Side", comment="Also read "
             "it."),
        note("M1", forum, "Meta_Review", "Area_Chair_cccc", forum, 600, number, metareview="Accept.",
             recommendation="Accept (poster)"),
        note("D1", forum, "Decision", f"{VENUE}/Program_Chairs", forum, 700, number, title="Paper Decision",
             decision="Accept (poster)", comment=""),
    ]


V1_VENUE = "Test.cc/2020/Conference"


def v1_note(note_id: str, forum: str, invitation_suffix: str, signer: str, replyto: str | None, cdate: int,
            number: int = 1, **content) -> dict:
    """An API v1 note: one `invitation` string, unwrapped content, `PaperN` paths, `AnonReviewerN` signatures."""
    paper = f"{V1_VENUE}/Paper{number}"
    is_submission = invitation_suffix in ("Blind_Submission", "Submission")
    invitation = f"{V1_VENUE}/-/{invitation_suffix}" if is_submission else f"{paper}/-/{invitation_suffix}"
    signature = signer if signer.startswith(V1_VENUE) else f"{paper}/{signer}"
    return {
        "id": note_id, "original": None, "number": number, "cdate": cdate, "tcdate": cdate, "tmdate": cdate,
        "ddate": None, "forum": forum, "replyto": replyto, "invitation": invitation, "content": dict(content),
        "signatures": [signature], "readers": ["everyone"], "nonreaders": [], "writers": [signature],
    }


def v1_forum(forum: str = "V1", number: int = 1) -> list[dict]:
    """A v1 forum as ICLR 2020 had them: blind submission, two reviews, nested author comments, a decision."""
    return [
        v1_note(forum, forum, "Blind_Submission", f"{V1_VENUE}", None, 100, number, title="An old paper",
                abstract="Old abstract.", keywords=["optimisation"], pdf="/pdf/" + "c" * 40 + ".pdf"),
        v1_note("VR1", forum, "Official_Review", "AnonReviewer1", forum, 200, number, title="Official Blind Review #1",
                review="The method is unclear.", rating="6: Weak Accept", experience_assessment="I read it."),
        v1_note("VR2", forum, "Official_Review", "AnonReviewer2", forum, 210, number, title="Official Blind Review #2",
                review="Strong results.", rating="8: Accept"),
        v1_note("VC1", forum, "Official_Comment", "Authors", "VR1", 300, number, title="Response",
                comment="We clarified Section 3."),
        v1_note("VC2", forum, "Official_Comment", "AnonReviewer1", "VC1", 310, number, title="Thanks",
                comment="Clear now."),
        v1_note("VD1", forum, "Decision", f"{V1_VENUE}/Program_Chairs", forum, 400, number, title="Paper Decision",
                decision="Accept (Talk)", comment="Good paper."),
    ]

"""Which PDF a crawl stores: the version reviewers read (the last edit carrying a PDF made before the first review),
else the latest. The loopback server serves a distinct PDF per edit id, so the stored bytes say which was taken."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from fpdf import FPDF

from peerify_dagster.resources.openreview import HttpPolicy, OpenReviewCrawler, make_client
from tests.fakes.openreview_server import FakeOpenReviewServer

VENUE = "PdfChoice.cc/2026/Conference"
T0 = 1_700_000_000_000
REVIEWED, NO_EDITS, UNREVIEWED = "ReviewedF1", "NoEditsF02", "NoReviewF3"


def one_page_pdf(text: str) -> bytes:
    pdf = FPDF()
    pdf.add_page()
    pdf.set_font("Helvetica", size=12)
    pdf.cell(text=text)
    return bytes(pdf.output())


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def note(note_id: str, forum: str, invitation: str, cdate: int) -> dict:
    return {"id": note_id, "forum": forum, "replyto": None if note_id == forum else forum, "invitations": [invitation],
            "signatures": [f"{VENUE}/Authors"], "readers": ["everyone"], "writers": [VENUE], "cdate": cdate,
            "tcdate": cdate, "mdate": cdate, "tmdate": cdate, "content": {"title": {"value": note_id}}}


def edit(edit_id: str, forum: str, cdate: int, with_pdf: bool) -> dict:
    content = {"pdf": {"value": f"/pdf/{edit_id}.pdf"}} if with_pdf else {"title": {"value": "New title"}}
    return {"id": edit_id, "invitation": f"{VENUE}/-/Submission", "cdate": cdate, "tcdate": cdate,
            "note": {"id": forum, "content": content}}


def write_snapshot(root: Path) -> dict[str, bytes]:
    """Three forums. REVIEWED: PDF edits before the review (E1, E2; E3 changes only the title, at the same time as
    E2 and with a larger id) and a camera-ready E4 after it. NO_EDITS: no edits at all. UNREVIEWED: edits, no review.
    Returns every PDF by name."""
    pdfs = {name: one_page_pdf(f"version {name}")
            for name in ("E1", "E2", "E4", "U1", f"{REVIEWED}-latest", f"{NO_EDITS}-latest", f"{UNREVIEWED}-latest")}
    (root / "forums").mkdir(parents=True)
    (root / "pdfs" / "edits").mkdir(parents=True)
    forums = {
        REVIEWED: ([note(REVIEWED, REVIEWED, f"{VENUE}/-/Submission", T0),
                    note("Rev1", REVIEWED, f"{VENUE}/Submission1/-/Official_Review", T0 + 100),
                    note("Rev2", REVIEWED, f"{VENUE}/Submission1/-/Official_Review", T0 + 150)],
                   [edit("E1", REVIEWED, T0 + 1, True), edit("E2", REVIEWED, T0 + 50, True),
                    edit("E3", REVIEWED, T0 + 50, False), edit("E4", REVIEWED, T0 + 200, True)]),
        NO_EDITS: ([note(NO_EDITS, NO_EDITS, f"{VENUE}/-/Submission", T0),
                    note("Rev3", NO_EDITS, f"{VENUE}/Submission2/-/Official_Review", T0 + 100)], []),
        UNREVIEWED: ([note(UNREVIEWED, UNREVIEWED, f"{VENUE}/-/Submission", T0)],
                     [edit("U1", UNREVIEWED, T0 + 1, True)]),
    }
    for forum_id, (notes, edits) in forums.items():
        (root / "forums" / f"{forum_id}.json").write_text(
            json.dumps({"forum_id": forum_id, "fetched_at": T0, "notes": notes, "edits": edits}))
        (root / "pdfs" / f"{forum_id}.pdf").write_bytes(pdfs[f"{forum_id}-latest"])
    for edit_id in ("E1", "E2", "E4", "U1"):
        (root / "pdfs" / "edits" / f"{edit_id}.pdf").write_bytes(pdfs[edit_id])
    (root / "venue.json").write_text(json.dumps({"venue_id": VENUE, "api_version": 2,
                                                 "submission_invitation": f"{VENUE}/-/Submission",
                                                 "group": {"id": VENUE, "content": {}}}))
    (root / "submissions.json").write_text(json.dumps(
        {"fetched_at": T0, "notes": [notes[0] for notes, _ in forums.values()]}))
    return pdfs


def test_crawl_stores_the_pdf_reviewers_read_else_the_latest(tmp_path):
    pdfs = write_snapshot(tmp_path / "served")
    assert len({sha(data) for data in pdfs.values()}) == len(pdfs)  # every version is told apart by its hash
    landed = tmp_path / "landed"
    with FakeOpenReviewServer(tmp_path / "served") as server:
        crawler = OpenReviewCrawler(make_client(server.url, HttpPolicy(timeout_s=5, retries=0)), VENUE, landed,
                                    log=lambda line: None)
        for forum_id in (REVIEWED, NO_EDITS, UNREVIEWED):
            assert crawler.land_forum(forum_id).status == "fetched"
            assert crawler.land_pdf(forum_id).status == "fetched"

    def stored(forum_id: str) -> tuple[str, dict]:
        meta = json.loads((landed / "pdfs" / f"{forum_id}.json").read_text())
        return sha((landed / "pdfs" / f"{forum_id}.pdf").read_bytes()), meta

    digest, meta = stored(REVIEWED)
    assert digest == sha(pdfs["E2"])  # not E1 (older), not E3 (no PDF), not E4 (after the first review)
    assert (meta["version"], meta["edit_id"], meta["source_url"]) == ("under_review", "E2", "/references/pdf?id=E2")
    for forum_id in (NO_EDITS, UNREVIEWED):
        digest, meta = stored(forum_id)
        assert digest == sha(pdfs[f"{forum_id}-latest"])
        assert (meta["version"], meta["edit_id"], meta["source_url"]) == ("latest", None, f"/pdf?id={forum_id}")

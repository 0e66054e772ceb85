"""Tests of the bundled sample venue: snapshot format, thread structure, PDFs, determinism and the
claim answer key. They read the generated snapshot that lives in the repository and rebuild it
into a temporary folder to prove that the sources and the generator still agree with it.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from pypdf import PdfReader

from peerify_dagster.domain.labels import LABELS, NOT_DETERMINED, NOT_SUPPORTED, PARTIALLY_SUPPORTED, SUPPORTED
from peerify_dagster.sample_venue import (
    CLAIM_KEY_PATH,
    MANUSCRIPTS_DIR,
    SAMPLE_VENUE_ID,
    SNAPSHOT_DIR,
    THREADS_PATH,
)
from peerify_dagster.sample_venue.markup import (
    Figure,
    ManuscriptSyntaxError,
    ReferenceList,
    Table,
    load_manuscript,
    parse_manuscript,
)
from peerify_dagster.sample_venue.render import RUNNING_HEADER, render_manuscript
from peerify_dagster.sample_venue.snapshot import SampleVenueError, build_snapshot_files, write_snapshot

REPO_ROOT = Path(__file__).resolve().parents[1]
FORUM_ID = re.compile(r"^[A-Za-z0-9]{10}$")
NOTE_KEYS = {
    "id", "forum", "replyto", "number", "invitations", "domain", "signatures", "readers", "writers",
    "nonreaders", "cdate", "tcdate", "mdate", "tmdate", "odate", "pdate", "license", "content",
}
ACCEPTED_PAPER, NEURIPS_PAPER, REJECTED_PAPER, WITHDRAWN_PAPER, MISSING_PDF_PAPER = (
    "Rk7bWq2NzA", "Hp4sLx9TcV", "Zd2fGm8KrE", "Wn6yBq3JhU", "Tc9vPe5XmS",
)


def _read_json(relative_path: str) -> Any:
    return json.loads((SNAPSHOT_DIR / relative_path).read_text(encoding="ascii"))


def _forum_ids() -> list[str]:
    return [note["id"] for note in _read_json("submissions.json")["notes"]]


def _forum(forum_id: str) -> dict[str, Any]:
    return _read_json(f"forums/{forum_id}.json")


def _invitation_kind(note: dict[str, Any]) -> str:
    return note["invitations"][0].rsplit("/-/", 1)[1]


def _notes_of_kind(forum_id: str, kind: str) -> list[dict[str, Any]]:
    return [note for note in _forum(forum_id)["notes"][1:] if _invitation_kind(note) == kind]


def normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


@cache
def pdf_text(forum_id: str) -> str:
    """Whitespace-normalised text of the PDF without the running header and page numbers."""
    pages = []
    for page in PdfReader(SNAPSHOT_DIR / "pdfs" / f"{forum_id}.pdf").pages:
        lines = page.extract_text().splitlines()
        assert lines[0].strip() == RUNNING_HEADER and lines[-1].strip().isdigit(), forum_id
        pages.append(" ".join(lines[1:-1]))
    return normalise(" ".join(pages))


def _claims() -> list[dict[str, Any]]:
    return yaml.safe_load(CLAIM_KEY_PATH.read_text(encoding="utf-8"))["claims"]


def test_venue_and_submission_files_follow_the_snapshot_format() -> None:
    venue = _read_json("venue.json")
    assert set(venue) == {"venue_id", "api_version", "submission_invitation", "group", "created_by", "created_at"}
    assert venue["venue_id"] == SAMPLE_VENUE_ID and venue["api_version"] == 2
    assert venue["submission_invitation"] == f"{SAMPLE_VENUE_ID}/-/Submission"
    assert venue["created_by"] == "authored sample"
    assert venue["group"]["id"] == SAMPLE_VENUE_ID
    assert venue["group"]["content"]["submission_name"] == {"value": "Submission"}

    submissions = _read_json("submissions.json")
    assert set(submissions) == {"fetched_at", "notes"}
    assert len(submissions["notes"]) == 5
    for submission in submissions["notes"]:
        assert FORUM_ID.match(submission["id"]) and submission["forum"] == submission["id"]
        assert submission["replyto"] is None
        assert f"{SAMPLE_VENUE_ID}/-/Submission" in submission["invitations"]
        assert re.fullmatch(r"/pdf/[0-9a-f]{40}\.pdf", submission["content"]["pdf"]["value"])
        # The submission in submissions.json is the same note the forum file starts with.
        assert _forum(submission["id"])["notes"][0] == submission


def test_forum_files_hold_wrapped_api_v2_notes_and_edits() -> None:
    expected_files = {f"{forum_id}.json" for forum_id in _forum_ids()}
    assert {path.name for path in (SNAPSHOT_DIR / "forums").iterdir()} == expected_files
    for forum_id in _forum_ids():
        forum = _forum(forum_id)
        assert set(forum) == {"forum_id", "fetched_at", "notes", "edits"} and forum["forum_id"] == forum_id
        for note in forum["notes"]:
            assert set(note) == NOTE_KEYS, note["id"]
            assert FORUM_ID.match(note["id"]) and note["forum"] == forum_id
            assert isinstance(note["invitations"], list) and note["invitations"]
            assert note["content"] and all(set(field) == {"value"} for field in note["content"].values()), note["id"]
        note_ids = [note["id"] for note in forum["notes"]]
        assert len(note_ids) == len(set(note_ids))
        assert [edit["note"]["id"] for edit in forum["edits"]] == [forum_id]


def test_every_reply_resolves_inside_its_forum_and_follows_its_parent() -> None:
    for forum_id in _forum_ids():
        notes = _forum(forum_id)["notes"]
        created = {note["id"]: note["cdate"] for note in notes}
        for note in notes[1:]:
            assert note["replyto"] in created, f"{forum_id}/{note['id']}"
            assert note["cdate"] > created[note["replyto"]]


def test_every_forum_has_three_official_reviews_with_the_style_fields() -> None:
    for forum_id in _forum_ids():
        reviews = _notes_of_kind(forum_id, "Official_Review")
        assert len(reviews) == 3, forum_id
        for review in reviews:
            assert review["replyto"] == forum_id
            assert "/Reviewer_" in review["signatures"][0]
            assert re.match(r"^\d+: ", review["content"]["rating"]["value"])
            assert ("limitations" in review["content"]) == (forum_id == NEURIPS_PAPER)


def test_paper_roles_match_their_openreview_conventions() -> None:
    # ICLR-style discussion: a reviewer follow-up at depth 3 or more, and an area chair comment.
    comments = _notes_of_kind(ACCEPTED_PAPER, "Official_Comment")
    parents = {note["id"]: note["replyto"] for note in _forum(ACCEPTED_PAPER)["notes"]}

    def depth(note_id: str) -> int:
        return 0 if parents[note_id] is None else 1 + depth(parents[note_id])

    assert any("/Reviewer_" in note["signatures"][0] and depth(note["id"]) >= 3 for note in comments)
    assert any("/Area_Chair_" in note["signatures"][0] for note in comments)

    # NeurIPS-style rebuttals: one per review plus one global rebuttal on the forum.
    rebuttals = _notes_of_kind(NEURIPS_PAPER, "Rebuttal")
    review_ids = {note["id"] for note in _notes_of_kind(NEURIPS_PAPER, "Official_Review")}
    assert sorted(note["replyto"] for note in rebuttals) == sorted([*review_ids, NEURIPS_PAPER])
    assert all(set(note["content"]) == {"rebuttal"} for note in rebuttals)

    rejected = _forum(REJECTED_PAPER)["notes"]
    assert rejected[0]["content"]["venueid"]["value"] == f"{SAMPLE_VENUE_ID}/Rejected_Submission"
    assert _notes_of_kind(REJECTED_PAPER, "Meta_Review")[0]["content"]["recommendation"]["value"] == "Reject"
    assert _notes_of_kind(REJECTED_PAPER, "Decision")[0]["content"]["decision"]["value"] == "Reject"

    withdrawn = _forum(WITHDRAWN_PAPER)["notes"][0]
    assert f"{SAMPLE_VENUE_ID}/-/Withdrawn_Submission" in withdrawn["invitations"]
    assert withdrawn["content"]["venueid"]["value"] == f"{SAMPLE_VENUE_ID}/Withdrawn_Submission"
    assert withdrawn["content"]["venue"]["value"].endswith("Withdrawn Submission")
    assert len(_notes_of_kind(WITHDRAWN_PAPER, "Withdrawal")) == 1
    assert not _notes_of_kind(WITHDRAWN_PAPER, "Decision")

    for forum_id in (ACCEPTED_PAPER, NEURIPS_PAPER, REJECTED_PAPER, MISSING_PDF_PAPER):
        assert len(_notes_of_kind(forum_id, "Meta_Review")) == 1
        assert len(_notes_of_kind(forum_id, "Decision")) == 1


def test_pdf_records_point_at_the_submission_edit_made_before_the_reviews() -> None:
    for forum_id in _forum_ids():
        forum = _forum(forum_id)
        (edit,) = forum["edits"]
        first_review = min(note["cdate"] for note in _notes_of_kind(forum_id, "Official_Review"))
        assert edit["cdate"] < first_review
        pdf_path = SNAPSHOT_DIR / "pdfs" / f"{forum_id}.pdf"
        if forum_id == MISSING_PDF_PAPER:
            continue
        record = _read_json(f"pdfs/{forum_id}.json")
        assert record == {
            "forum_id": forum_id,
            "version": "under_review",
            "edit_id": edit["id"],
            "source_url": f"/references/pdf?id={edit['id']}",
            "fetched_at": forum["fetched_at"],
        }
        sha1 = hashlib.sha1(pdf_path.read_bytes()).hexdigest()
        assert edit["note"]["content"]["pdf"]["value"] == f"/pdf/{sha1}.pdf"


def test_missing_pdf_paper_announces_a_pdf_that_the_snapshot_lacks() -> None:
    submission = _forum(MISSING_PDF_PAPER)["notes"][0]
    assert submission["content"]["pdf"]["value"].startswith("/pdf/")
    assert not (SNAPSHOT_DIR / "pdfs" / f"{MISSING_PDF_PAPER}.pdf").exists()
    assert not (SNAPSHOT_DIR / "pdfs" / f"{MISSING_PDF_PAPER}.json").exists()
    fetched = {path.stem for path in (SNAPSHOT_DIR / "pdfs").glob("*.pdf")}
    assert fetched == set(_forum_ids()) - {MISSING_PDF_PAPER}


@pytest.mark.parametrize("forum_id", [ACCEPTED_PAPER, NEURIPS_PAPER, REJECTED_PAPER, WITHDRAWN_PAPER])
def test_pdf_has_three_to_six_pages_and_every_heading_of_its_source(forum_id: str) -> None:
    manuscript = load_manuscript(MANUSCRIPTS_DIR / f"{forum_id}.md")
    assert 3 <= len(PdfReader(SNAPSHOT_DIR / "pdfs" / f"{forum_id}.pdf").pages) <= 6
    text = pdf_text(forum_id)
    assert normalise(manuscript.title) in text
    for heading in manuscript.headings:
        assert normalise(heading) in text, heading


@pytest.mark.parametrize("forum_id", [ACCEPTED_PAPER, NEURIPS_PAPER, REJECTED_PAPER, WITHDRAWN_PAPER])
def test_manuscript_has_the_required_structure(forum_id: str) -> None:
    manuscript = load_manuscript(MANUSCRIPTS_DIR / f"{forum_id}.md")
    numbered_sections = [h for h in manuscript.headings if re.match(r"^\d+ ", h)]
    assert 5 <= len(numbered_sections) <= 8
    assert any(re.match(r"^\d+\.\d+ ", h) for h in manuscript.headings)
    assert any(re.match(r"^[A-Z] ", h) for h in manuscript.headings), "appendix section"
    assert "Acknowledgments" in manuscript.headings and "References" in manuscript.headings
    assert any(isinstance(b, Table) and b.caption.startswith("Table 1:") for b in manuscript.blocks)
    assert any(isinstance(b, Figure) and b.caption.startswith("Figure 1:") for b in manuscript.blocks)
    assert any(isinstance(b, ReferenceList) for b in manuscript.blocks)
    # Body paragraphs are 60-200 words; acknowledgments are short in real papers too.
    word_counts = {
        (section, len(paragraph.split()))
        for section, paragraphs in manuscript.paragraphs_by_section().items()
        if section != "Acknowledgments"
        for paragraph in paragraphs
    }
    assert [(section, count) for section, count in word_counts if not 60 <= count <= 200] == []
    assert manuscript.two_column == (forum_id == NEURIPS_PAPER)
    assert render_manuscript(manuscript, forum_id).paragraphs_across_pages, "a paragraph must cross a page break"


def test_regenerating_reproduces_the_snapshot_byte_for_byte(tmp_path: Path) -> None:
    output = tmp_path / "snapshot"
    completed = subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "build_sample_venue.py"), "--output", str(output)],
        capture_output=True, text=True, check=False,
    )
    assert completed.returncode == 0, completed.stderr
    rebuilt = {path.relative_to(output): path.read_bytes() for path in output.rglob("*") if path.is_file()}
    committed = {path.relative_to(SNAPSHOT_DIR): path.read_bytes() for path in SNAPSHOT_DIR.rglob("*")
                 if path.is_file()}
    assert rebuilt.keys() == committed.keys()
    assert [path for path in rebuilt if rebuilt[path] != committed[path]] == []
    pdf_bytes = sum(len(payload) for path, payload in committed.items() if path.suffix == ".pdf")
    assert pdf_bytes < 1_000_000


def test_claim_key_covers_every_label_and_kind() -> None:
    claims = _claims()
    assert len(claims) >= 30
    assert len({claim["id"] for claim in claims}) == len(claims)
    factual_labels = {claim["manuscript_label"] for claim in claims if claim["kind"] == "factual"}
    assert factual_labels == {SUPPORTED, PARTIALLY_SUPPORTED, NOT_SUPPORTED, NOT_DETERMINED}
    for claim in claims:
        assert claim["kind"] in ("factual", "subjective"), claim["id"]
        assert claim["manuscript_label"] in LABELS and claim["rebuttal_label"] in (*LABELS, None), claim["id"]
        if claim["kind"] == "subjective":
            assert claim["manuscript_label"] == NOT_DETERMINED and claim["evidence"] is None, claim["id"]
        # Exactly the claims the manuscript can decide carry manuscript evidence.
        assert (claim["evidence"] is None) == (claim["manuscript_label"] == NOT_DETERMINED), claim["id"]


def test_claim_key_claims_come_from_the_reviews_they_name() -> None:
    for claim in _claims():
        reviews = {note["id"]: note for note in _notes_of_kind(claim["forum"], "Official_Review")}
        assert claim["review_note_id"] in reviews, claim["id"]
        review = reviews[claim["review_note_id"]]
        assert review["signatures"][0].endswith(claim["review_key"].removeprefix("review_")), claim["id"]
        review_text = " ".join(str(field["value"]) for field in review["content"].values())
        assert claim["review_text"] in review_text, claim["id"]


def test_claim_key_evidence_is_verbatim_in_the_source_section_and_the_pdf() -> None:
    grounded = [claim for claim in _claims() if claim["evidence"]]
    assert grounded
    for claim in grounded:
        manuscript = load_manuscript(MANUSCRIPTS_DIR / f"{claim['forum']}.md")
        section_paragraphs = manuscript.paragraphs_by_section().get(claim["evidence"]["section"])
        assert section_paragraphs, f"{claim['id']}: no section {claim['evidence']['section']!r}"
        sentence = claim["evidence"]["sentence"]
        assert any(sentence in paragraph for paragraph in section_paragraphs), claim["id"]
        assert normalise(sentence) in pdf_text(claim["forum"]), claim["id"]


def test_markup_errors_name_the_source_and_the_line() -> None:
    unclosed = "title: T\n\nabstract:\nText.\n\n# 1 Introduction\n\ntable: Table 1: Numbers.\n| a | b |\n"
    with pytest.raises(ManuscriptSyntaxError, match=r"broken\.md, line 10: block is not closed"):
        parse_manuscript(unclosed, "broken.md")
    with pytest.raises(ManuscriptSyntaxError, match=r"accents\.md: non-ASCII"):
        parse_manuscript("title: Caf\u00e9\n\nabstract:\nText.\n", "accents.md")


def test_generator_rejects_a_reply_to_an_unknown_note(tmp_path: Path) -> None:
    threads = yaml.safe_load(THREADS_PATH.read_text(encoding="utf-8"))
    comment = next(note for note in threads["papers"][0]["notes"] if note["kind"] == "comment")
    comment["replyto"] = "no_such_note"
    broken = tmp_path / "threads.yaml"
    broken.write_text(yaml.safe_dump(threads), encoding="utf-8")
    with pytest.raises(SampleVenueError, match=rf"paper {ACCEPTED_PAPER}, note '{comment['key']}': replyto "
                       rf"'no_such_note'"):
        build_snapshot_files(broken, MANUSCRIPTS_DIR)


def test_writer_refuses_to_overwrite_a_folder_that_is_not_a_snapshot(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("keep me", encoding="utf-8")
    with pytest.raises(SampleVenueError, match="neither empty nor a snapshot"):
        write_snapshot(tmp_path, {"venue.json": b"{}\n"})
    assert (tmp_path / "notes.txt").read_text(encoding="utf-8") == "keep me"

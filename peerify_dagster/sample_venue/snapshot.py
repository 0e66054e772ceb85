"""Generate the sample venue's OpenReview API v2 snapshot from threads.yaml and the manuscripts.

Everything is derived deterministically: note ids are hashes of (forum id, note key), every
timestamp comes from threads.yaml, JSON is written with a fixed layout and PDFs with a fixed
creation date, so rebuilding reproduces the snapshot byte for byte.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import string
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

from peerify_dagster.sample_venue import MANUSCRIPTS_DIR, SAMPLE_VENUE_ID, THREADS_PATH
from peerify_dagster.sample_venue.markup import load_manuscript
from peerify_dagster.sample_venue.render import render_manuscript

_ID_ALPHABET = string.digits + string.ascii_letters
_VENUE_NAME = "PeerifySample 2026 Workshop"
_LICENSE = "CC BY 4.0"

_INVITATION_NAMES = {
    "review": "Official_Review",
    "comment": "Official_Comment",
    "rebuttal": "Rebuttal",
    "meta_review": "Meta_Review",
    "decision": "Decision",
    "withdrawal": "Withdrawal",
}
# Kinds that always answer the submission itself; the others must say what they reply to.
_TOP_LEVEL_KINDS = {"review", "meta_review", "decision", "withdrawal"}

_REVIEW_FIELDS = {
    "iclr2024": (
        "summary", "soundness", "presentation", "contribution", "strengths", "weaknesses", "questions",
        "flag_for_ethics_review", "rating", "confidence", "code_of_conduct",
    ),
    "neurips2024": (
        "summary", "soundness", "presentation", "contribution", "strengths", "weaknesses", "questions",
        "limitations", "flag_for_ethics_review", "rating", "confidence", "code_of_conduct",
    ),
}
_REVIEW_DEFAULTS = {"flag_for_ethics_review": ["No ethics review needed."], "code_of_conduct": "Yes"}
_QUALITY_SCALE = {1: "1 poor", 2: "2 fair", 3: "3 good", 4: "4 excellent"}
_RATING_SCALES = {
    "iclr2024": {
        1: "1: strong reject",
        3: "3: reject, not good enough",
        5: "5: marginally below the acceptance threshold",
        6: "6: marginally above the acceptance threshold",
        8: "8: accept, good paper",
        10: "10: strong accept, should be highlighted at the conference",
    },
    "neurips2024": {
        3: "3: Reject: For instance, a paper with technical flaws, weak evaluation, inadequate reproducibility.",
        4: "4: Borderline reject: Technically solid paper where reasons to reject outweigh reasons to accept.",
        5: "5: Borderline accept: Technically solid paper where reasons to accept outweigh reasons to reject.",
        6: "6: Weak Accept: Technically solid, moderate-to-high impact paper with no major concerns.",
        7: "7: Accept: Technically solid paper, with high impact on at least one sub-area of AI.",
        8: "8: Strong Accept: Technically strong paper with novel ideas and excellent impact.",
    },
}
_CONFIDENCE_SCALE = {
    2: "2: You are willing to defend your assessment, but it is quite likely that you did not understand central "
       "parts of the submission.",
    3: "3: You are fairly confident in your assessment. It is possible that you did not understand some parts of "
       "the submission.",
    4: "4: You are confident in your assessment, but not absolutely certain.",
    5: "5: You are absolutely certain about your assessment and very familiar with the related work.",
}


class SampleVenueError(ValueError):
    """threads.yaml or a manuscript does not describe a valid venue; the message names the item."""


@dataclass(frozen=True)
class PaperIds:
    forum_id: str
    number: int


def derived_id(*parts: str) -> str:
    """A 10-character alphanumeric id, like OpenReview's, that depends only on `parts`."""
    value = int.from_bytes(hashlib.sha256("/".join(parts).encode("utf-8")).digest(), "big")
    characters = []
    for _ in range(10):
        value, remainder = divmod(value, len(_ID_ALPHABET))
        characters.append(_ID_ALPHABET[remainder])
    return "".join(characters)


def epoch_ms(timestamp: str) -> int:
    """'2026-02-15 10:12' (UTC) as OpenReview's epoch milliseconds."""
    moment = datetime.strptime(timestamp, "%Y-%m-%d %H:%M").replace(tzinfo=timezone.utc)
    return int(moment.timestamp() * 1000)


def _wrap(content: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: {"value": value} for name, value in content.items()}


def _json_bytes(document: Any) -> bytes:
    return (json.dumps(document, indent=2, ensure_ascii=True) + "\n").encode("ascii")


def _venue_group(venue: dict[str, Any]) -> dict[str, Any]:
    created = epoch_ms(venue["created"])
    return {
        "id": SAMPLE_VENUE_ID,
        "cdate": created,
        "tcdate": created,
        "mdate": created,
        "tmdate": created,
        "domain": SAMPLE_VENUE_ID,
        "signatures": ["~Super_User1"],
        "signatories": [SAMPLE_VENUE_ID],
        "readers": ["everyone"],
        "writers": [SAMPLE_VENUE_ID],
        "members": [f"{SAMPLE_VENUE_ID}/Program_Chairs"],
        "web": "// Project-authored sample venue of the Peerify DAG.",
        "content": _wrap({
            "title": venue["title"],
            "subtitle": venue["subtitle"],
            "website": venue["website"],
            "start_date": venue["start_date"],
            "submission_id": f"{SAMPLE_VENUE_ID}/-/Submission",
            "submission_name": "Submission",
            "submission_venue_id": f"{SAMPLE_VENUE_ID}/Submission",
            "withdrawn_venue_id": f"{SAMPLE_VENUE_ID}/Withdrawn_Submission",
            "rejected_venue_id": f"{SAMPLE_VENUE_ID}/Rejected_Submission",
            "review_name": "Official_Review",
            "rebuttal_name": "Rebuttal",
            "meta_review_name": "Meta_Review",
            "decision_name": "Decision",
        }),
    }


def _placement(paper: dict[str, Any], replies: list[tuple[str, dict[str, Any]]]) -> tuple[str, str]:
    """(content.venue, content.venueid) as OpenReview sets them after the decision or withdrawal."""
    kinds = dict(replies)
    if "withdrawal" in kinds:
        if "decision" in kinds:
            raise SampleVenueError(f"paper {paper['forum']}: a withdrawn paper has no decision note")
        return f"{_VENUE_NAME} Withdrawn Submission", f"{SAMPLE_VENUE_ID}/Withdrawn_Submission"
    if "decision" not in kinds:
        raise SampleVenueError(f"paper {paper['forum']}: needs a decision or a withdrawal note")
    decision = kinds["decision"]["content"]["decision"]["value"]
    if decision == "Reject":
        return f"Submitted to {_VENUE_NAME}", f"{SAMPLE_VENUE_ID}/Rejected_Submission"
    if decision.startswith("Accept (") and decision.endswith(")"):
        return f"{_VENUE_NAME} {decision[len('Accept ('):-1].title()}", SAMPLE_VENUE_ID
    raise SampleVenueError(f"paper {paper['forum']}: unknown decision {decision!r}")


def _review_content(style: str, raw: dict[str, Any], where: str) -> dict[str, Any]:
    content = {**_REVIEW_DEFAULTS, **raw}
    missing = [name for name in _REVIEW_FIELDS[style] if name not in content]
    extra = [name for name in content if name not in _REVIEW_FIELDS[style]]
    if missing or extra:
        raise SampleVenueError(f"{where}: review fields missing {missing}, unexpected {extra}")
    try:
        content["rating"] = _RATING_SCALES[style][content["rating"]]
        content["confidence"] = _CONFIDENCE_SCALE[content["confidence"]]
        for name in ("soundness", "presentation", "contribution"):
            content[name] = _QUALITY_SCALE[content[name]]
    except KeyError as error:
        raise SampleVenueError(f"{where}: score {error} is not on the {style} scale") from error
    return {name: content[name] for name in _REVIEW_FIELDS[style]}


def _signature(paper: PaperIds, signer: str) -> str:
    if signer == "Program_Chairs":
        return f"{SAMPLE_VENUE_ID}/Program_Chairs"
    return f"{SAMPLE_VENUE_ID}/Submission{paper.number}/{signer}"


def _reply_notes(paper: dict[str, Any], ids: PaperIds, submitted_ms: int) -> list[tuple[str, dict[str, Any]]]:
    """(kind, note JSON) for every note of the forum after the submission, in thread order."""
    notes: list[tuple[str, dict[str, Any]]] = []
    id_of_key: dict[str, str] = {"forum": ids.forum_id}
    date_of_id: dict[str, int] = {ids.forum_id: submitted_ms}
    numbers: dict[str, int] = {}
    rebutted: set[str] = set()
    for entry in paper["notes"]:
        where = f"paper {ids.forum_id}, note {entry.get('key')!r}"
        kind = entry.get("kind")
        if kind not in _INVITATION_NAMES:
            raise SampleVenueError(f"{where}: unknown kind {kind!r}")
        if entry["key"] in id_of_key:
            raise SampleVenueError(f"{where}: duplicate key")
        parent_key = "forum" if kind in _TOP_LEVEL_KINDS else entry.get("replyto")
        if parent_key not in id_of_key:
            raise SampleVenueError(f"{where}: replyto {parent_key!r} is not an earlier note of this forum")
        if kind == "rebuttal":
            # OpenReview allows one rebuttal per review (and one global rebuttal on the forum).
            if parent_key in rebutted:
                raise SampleVenueError(f"{where}: a second rebuttal to {parent_key!r}")
            rebutted.add(parent_key)
        created = epoch_ms(entry["date"])
        parent_id = id_of_key[parent_key]
        if created <= date_of_id[parent_id]:
            raise SampleVenueError(f"{where}: dated before the note it replies to")
        note_id = derived_id(ids.forum_id, entry["key"])
        id_of_key[entry["key"]] = note_id
        date_of_id[note_id] = created
        invitation_name = _INVITATION_NAMES[kind]
        numbers[invitation_name] = numbers.get(invitation_name, 0) + 1
        content = _review_content(paper["style"], entry["content"], where) if kind == "review" else entry["content"]
        signature = _signature(ids, entry["signer"])
        notes.append((kind, {
            "id": note_id,
            "forum": ids.forum_id,
            "replyto": parent_id,
            "number": numbers[invitation_name],
            "invitations": [f"{SAMPLE_VENUE_ID}/Submission{ids.number}/-/{invitation_name}"],
            "domain": SAMPLE_VENUE_ID,
            "signatures": [signature],
            "readers": ["everyone"],
            "writers": [SAMPLE_VENUE_ID, signature],
            "nonreaders": [],
            "cdate": created,
            "tcdate": created,
            "mdate": created,
            "tmdate": created,
            "odate": created,
            "pdate": None,
            "license": _LICENSE,
            "content": _wrap(content),
        }))
    return notes


def _submission_note(paper: dict[str, Any], ids: PaperIds, manuscript_title: str, abstract: str,
                     pdf_path: str, placement: tuple[str, str], published_ms: int | None,
                     last_modified_ms: int) -> dict[str, Any]:
    submitted = epoch_ms(paper["submitted"])
    venue, venue_id = placement
    invitations = [f"{SAMPLE_VENUE_ID}/-/Submission", f"{SAMPLE_VENUE_ID}/-/Post_Submission"]
    if venue_id.endswith("/Withdrawn_Submission"):
        invitations.append(f"{SAMPLE_VENUE_ID}/-/Withdrawn_Submission")
    return {
        "id": ids.forum_id,
        "forum": ids.forum_id,
        "replyto": None,
        "number": ids.number,
        "invitations": invitations,
        "domain": SAMPLE_VENUE_ID,
        "signatures": [f"{SAMPLE_VENUE_ID}/Submission{ids.number}/Authors"],
        "readers": ["everyone"],
        "writers": [SAMPLE_VENUE_ID],
        "nonreaders": [],
        "cdate": submitted,
        "tcdate": submitted,
        "mdate": last_modified_ms,
        "tmdate": last_modified_ms,
        "odate": submitted,
        "pdate": published_ms,
        "license": _LICENSE,
        "content": _wrap({
            "title": manuscript_title,
            "abstract": abstract,
            "keywords": paper["keywords"],
            "TLDR": paper["tldr"],
            "primary_area": paper["primary_area"],
            "pdf": pdf_path,
            "venue": venue,
            "venueid": venue_id,
        }),
    }


def _paper_files(paper: dict[str, Any], fetched_ms: int, manuscripts_dir: Path) -> tuple[dict[str, Any], dict[str,
                                                                                                              bytes]]:
    ids = PaperIds(paper["forum"], paper["number"])
    if paper.get("style") not in _REVIEW_FIELDS:
        raise SampleVenueError(f"paper {ids.forum_id}: unknown style {paper.get('style')!r}")
    manuscript_path = manuscripts_dir / f"{ids.forum_id}.md"
    if not manuscript_path.is_file():
        raise SampleVenueError(f"paper {ids.forum_id}: no manuscript source {manuscript_path.name}")
    manuscript = load_manuscript(manuscript_path)
    rendered = render_manuscript(manuscript, ids.forum_id)
    pdf_path = f"/pdf/{hashlib.sha1(rendered.pdf_bytes).hexdigest()}.pdf"

    submitted_ms = epoch_ms(paper["submitted"])
    replies = _reply_notes(paper, ids, submitted_ms)
    reviews = [note for kind, note in replies if kind == "review"]
    if len(reviews) != 3:
        raise SampleVenueError(f"paper {ids.forum_id}: needs 3 reviews, has {len(reviews)}")
    placement = _placement(paper, replies)
    decision_ms = next((note["cdate"] for kind, note in replies if kind == "decision"), None)
    closing_ms = max(note["cdate"] for _, note in replies)
    published_ms = decision_ms if placement[1] == SAMPLE_VENUE_ID else None
    submission = _submission_note(paper, ids, manuscript.title, manuscript.abstract, pdf_path,
                                  placement, published_ms, closing_ms)

    edit_id = derived_id(ids.forum_id, "submission-edit")
    edit = {
        "id": edit_id,
        "invitation": f"{SAMPLE_VENUE_ID}/-/Submission",
        "domain": SAMPLE_VENUE_ID,
        "signatures": [f"{SAMPLE_VENUE_ID}/Submission{ids.number}/Authors"],
        "readers": ["everyone"],
        "writers": [SAMPLE_VENUE_ID],
        "cdate": submitted_ms,
        "tcdate": submitted_ms,
        "tmdate": submitted_ms,
        "note": {"id": ids.forum_id, "content": {"pdf": {"value": pdf_path}}},
    }
    files = {
        f"forums/{ids.forum_id}.json": _json_bytes({
            "forum_id": ids.forum_id,
            "fetched_at": fetched_ms,
            "notes": [submission, *(note for _, note in replies)],
            "edits": [edit],
        })
    }
    if paper["pdf_fetched"]:
        files[f"pdfs/{ids.forum_id}.pdf"] = rendered.pdf_bytes
        files[f"pdfs/{ids.forum_id}.json"] = _json_bytes({
            "forum_id": ids.forum_id,
            "version": "under_review",
            "edit_id": edit_id,
            "source_url": f"/references/pdf?id={edit_id}",
            "fetched_at": fetched_ms,
        })
    return submission, files


def build_snapshot_files(threads_path: Path = THREADS_PATH, manuscripts_dir: Path = MANUSCRIPTS_DIR) -> dict[str,
                                                                                                             bytes]:
    """Every snapshot file as {relative path: bytes}."""
    threads = yaml.safe_load(threads_path.read_text(encoding="utf-8"))
    venue = threads["venue"]
    fetched_ms = epoch_ms(venue["fetched"])
    files: dict[str, bytes] = {}
    submissions = []
    for paper in threads["papers"]:
        submission, paper_files = _paper_files(paper, fetched_ms, manuscripts_dir)
        submissions.append(submission)
        files.update(paper_files)
    if len({note["number"] for note in submissions}) != len(submissions):
        raise SampleVenueError("threads.yaml: two papers share a submission number")
    files["venue.json"] = _json_bytes({
        "venue_id": SAMPLE_VENUE_ID,
        "api_version": 2,
        "submission_invitation": f"{SAMPLE_VENUE_ID}/-/Submission",
        "group": _venue_group(venue),
        "created_by": "authored sample",
        "created_at": epoch_ms(venue["fetched"]),
    })
    files["submissions.json"] = _json_bytes({
        "fetched_at": fetched_ms,
        "notes": sorted(submissions, key=lambda note: note["number"]),
    })
    return files


def write_snapshot(output_dir: Path, files: dict[str, bytes]) -> None:
    """Replace the snapshot in `output_dir` (empty, absent, or an earlier snapshot) with `files`."""
    if output_dir.exists() and any(output_dir.iterdir()) and not (output_dir / "venue.json").is_file():
        raise SampleVenueError(f"{output_dir} is neither empty nor a snapshot; refusing to overwrite it")
    # Removing the old tree first keeps files of renamed papers from lingering.
    for stale in ("forums", "pdfs"):
        shutil.rmtree(output_dir / stale, ignore_errors=True)
    for relative_path, payload in sorted(files.items()):
        target = output_dir / relative_path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(payload)

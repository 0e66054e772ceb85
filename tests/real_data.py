"""The shared real OpenReview data (`../shared/real-data`, never copied into the project), converted at test time
into snapshot venues in the crawler's format. Tests using it skip cleanly when the folder is absent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

REAL_DATA = Path(__file__).resolve().parents[2] / "shared" / "real-data"
V2_DIR = REAL_DATA / "openreview-v2"
V1_DIR = REAL_DATA / "openreview-v1" / "iclr2020_ryxz8CVYDH"
ICLR_2026 = "ICLR.cc/2026/Conference"
ICLR_2020 = "ICLR.cc/2020/Conference"
FETCHED_AT = 1_764_000_000_000


def needs(folder: Path) -> pytest.MarkDecorator:
    return pytest.mark.skipif(not folder.is_dir(), reason=f"real data not found at {folder} (../shared/real-data)")


def read_json(path: Path):
    return json.loads(path.read_text())


def tracker_forums() -> dict[str, dict]:
    """The ICLR 2026 review-tracker forums: {id, number, cdate, mdate, content (flattened), replies, withdrawn}."""
    return {p.stem: read_json(p) for p in sorted((V2_DIR / "forums").glob("*.json"))}


def tracker_submission(forum: dict) -> dict:
    """The tracker's flattened submission as the API v2 submission note it was made from (the tracker kept
    neither invitations, signatures nor the `{"value": ...}` wrapping of the submission's content)."""
    return {
        "id": forum["id"], "forum": forum["id"], "replyto": None, "number": forum["number"],
        "cdate": forum["cdate"], "tcdate": forum["cdate"], "mdate": forum["mdate"], "tmdate": forum["mdate"],
        "invitations": [f"{ICLR_2026}/-/Submission"],
        "signatures": [f"{ICLR_2026}/Submission{forum['number']}/Authors"], "readers": ["everyone"],
        "domain": ICLR_2026, "content": {k: {"value": v} for k, v in forum["content"].items()},
    }


def write_snapshot(folder: Path, venue_id: str, api_version: int | None, forums: dict[str, list[dict]],
                   submissions: list[dict]) -> Path:
    """A snapshot venue in the crawler's layout; `api_version` goes into venue.json only when given."""
    (folder / "forums").mkdir(parents=True)
    venue = {"venue_id": venue_id, "group": {"id": venue_id}, "created_by": "test conversion of shared real data"}
    if api_version is not None:
        venue["api_version"] = api_version
    (folder / "venue.json").write_text(json.dumps(venue))
    (folder / "submissions.json").write_text(json.dumps({"fetched_at": FETCHED_AT, "notes": submissions}))
    for forum_id, notes in forums.items():
        (folder / "forums" / f"{forum_id}.json").write_text(
            json.dumps({"forum_id": forum_id, "fetched_at": FETCHED_AT, "notes": notes, "edits": []}))
    return folder


def raw_submissions() -> dict[str, dict]:
    """The 500 raw API v2 submission notes by id."""
    return {note["id"]: note for note in read_json(V2_DIR / "submissions-500.json")}


def write_v2_snapshot(folder: Path) -> Path:
    """ICLR 2026: the 500 submissions and the 10 tracker forums (every reply version). Three tracker forums are
    among the 500: their submission note is the raw one from the 500 (final state), the others the tracker's."""
    raw = raw_submissions()
    forums = {note_id: [note] for note_id, note in raw.items()}
    for forum_id, forum in tracker_forums().items():
        forums[forum_id] = [raw.get(forum_id) or tracker_submission(forum), *forum["replies"]]
    return write_snapshot(folder, ICLR_2026, 2, forums, [notes[0] for notes in forums.values()])


def v1_submission() -> dict:
    """The ICLR 2020 Blind_Submission note, without the direct replies the notebook asked for in `details`."""
    return {k: v for k, v in read_json(V1_DIR / "submission_with_directReplies.json").items() if k != "details"}


def v1_replies() -> list[dict]:
    return read_json(V1_DIR / "replies.json")


def write_v1_snapshot(folder: Path, api_version: int | None = None) -> Path:
    """ICLR 2020's forum ryxz8CVYDH as an API v1 crawl would land it; `api_version` in venue.json only if given."""
    submission = v1_submission()
    return write_snapshot(folder, ICLR_2020, api_version, {submission["id"]: [submission, *v1_replies()]},
                           [submission])

"""OpenReview API v2 notes: validation, role detection and classification.

Classification reads every invitation and every signature of a note. The reference crawler
looked at the first signature only and at `invitation` (always empty in API v2), so it lost
NeurIPS rebuttals and took reviewer follow-ups for reviews; both mistakes are avoided here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

# Note kinds the typed tables understand, keyed by the invitation's last part.
_KIND_BY_INVITATION_SUFFIX: dict[str, str] = {
    "Submission": "submission",
    "Official_Review": "review",
    "Official_Comment": "comment",
    "Rebuttal": "rebuttal",
    "Author_Rebuttal": "rebuttal",
    "Meta_Review": "meta_review",
    "Decision": "decision",
    "Withdrawal": "withdrawal",
    "Desk_Rejection": "desk_rejection",
    "Public_Comment": "public_comment",
}
# Invitations that mark a state of the submission rather than a note of their own.
_SUBMISSION_STATE_SUFFIXES = {
    "Post_Submission",
    "Withdrawn_Submission",
    "Desk_Rejected_Submission",
    "Camera_Ready_Revision",
    "Revision",
    "Edit",
}

REQUIRED_NOTE_KEYS = ("id", "forum", "invitations", "signatures", "content")


class MalformedNote(ValueError):
    """A note that cannot be read as an API v2 note; the message names the note and the reason."""


@dataclass(frozen=True)
class Signer:
    """Who signed a note, from all of its signatures."""

    role: str  # "authors" | "reviewer" | "area_chair" | "program_chairs" | "other"
    member_id: str | None  # e.g. "Reviewer_GzWz", "Area_Chair_x1y2", None for authors


def invitation_suffix(invitation: str) -> str:
    return invitation.rsplit("/-/", 1)[-1] if "/-/" in invitation else invitation.rsplit("/", 1)[-1]


def note_label(note: Any) -> str:
    """A short identifier for messages, robust to notes that are not even dicts."""
    if isinstance(note, dict):
        return f"note {note.get('id', '?')} (forum {note.get('forum', '?')})"
    return f"non-object note {str(note)[:60]!r}"


def validate_note(note: Any) -> dict:
    """Return the note if it has the API v2 shape the parsers rely on, else raise MalformedNote."""
    if not isinstance(note, dict):
        raise MalformedNote(f"{note_label(note)}: not a JSON object")
    missing = [k for k in REQUIRED_NOTE_KEYS if k not in note]
    if missing:
        raise MalformedNote(f"{note_label(note)}: missing field(s) {', '.join(missing)}")
    if not isinstance(note["invitations"], list) or not note["invitations"]:
        raise MalformedNote(f"{note_label(note)}: 'invitations' must be a non-empty list")
    if not isinstance(note["signatures"], list) or not note["signatures"]:
        raise MalformedNote(f"{note_label(note)}: 'signatures' must be a non-empty list")
    if not isinstance(note["content"], dict):
        raise MalformedNote(f"{note_label(note)}: 'content' must be an object")
    for field, wrapped in note["content"].items():
        if not isinstance(wrapped, dict) or "value" not in wrapped:
            raise MalformedNote(f"{note_label(note)}: content field {field!r} is not wrapped as {{'value': ...}}")
    return note


def classify(note: dict) -> str | None:
    """The note's kind from its invitations, or None when no invitation is one we know."""
    kinds = set()
    for invitation in note["invitations"]:
        suffix = invitation_suffix(invitation)
        if suffix in _KIND_BY_INVITATION_SUFFIX:
            kinds.add(_KIND_BY_INVITATION_SUFFIX[suffix])
        elif suffix in _SUBMISSION_STATE_SUFFIXES and note.get("replyto") is None:
            kinds.add("submission")
    # A submission carries state invitations too; any reply invitation wins over them.
    reply_kinds = kinds - {"submission"}
    if len(reply_kinds) == 1:
        return reply_kinds.pop()
    if not reply_kinds and "submission" in kinds and note.get("id") == note.get("forum"):
        return "submission"
    return None


def signer(note: dict) -> Signer:
    """Role of the note's signer, considering every signature (authors first: they never review their paper)."""
    parts = [sig.rsplit("/", 1)[-1] for sig in note["signatures"]]
    if any(p == "Authors" for p in parts):
        return Signer("authors", None)
    for p in parts:
        if p.startswith("Reviewer_") or p == "Reviewers":
            return Signer("reviewer", p)
    for p in parts:
        if p.startswith("Area_Chair") or p in ("Area_Chairs", "Senior_Area_Chairs"):
            return Signer("area_chair", p)
    if any(p == "Program_Chairs" for p in parts):
        return Signer("program_chairs", None)
    return Signer("other", parts[0] if parts else None)


def value(note: dict, field: str) -> Any:
    """The unwrapped value of a content field, or None."""
    wrapped = note["content"].get(field)
    return wrapped.get("value") if isinstance(wrapped, dict) else None


def text_value(note: dict, field: str) -> str | None:
    raw = value(note, field)
    if raw is None:
        return None
    return raw if isinstance(raw, str) else json.dumps(raw, ensure_ascii=False)

"""OpenReview notes (API v1 and v2): reading, versions, role detection, classification and outcomes.

Classification reads every invitation and every signature of a note. The reference crawler
looked at the first signature only and at `invitation` (always empty in API v2), so it lost
NeurIPS rebuttals and took reviewer follow-ups for reviews; both mistakes are avoided here.

API v1 notes (venues before 2023) carry one `invitation` and unwrapped content; `read_note`
maps them onto the v2 shape so every later step reads one format. A note of the other API
version than its venue's is refused with a reason that says so.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

API_VERSIONS = (1, 2)
FIRST_API_V2_YEAR = 2023  # OpenReview moved venues to API v2 from 2023 on

# Note kinds the typed tables understand, keyed by the invitation's last part.
_KIND_BY_INVITATION_SUFFIX: dict[str, str] = {
    "Submission": "submission",
    "Blind_Submission": "submission",  # API v1 double-blind venues
    "Official_Review": "review",
    "Official_Comment": "comment",
    "Public_Comment": "public_comment",
    "Rebuttal": "rebuttal",
    "Author_Rebuttal": "rebuttal",
    "Meta_Review": "meta_review",
    "Decision": "decision",
    "Acceptance_Decision": "decision",  # ICLR 2018 (API v1)
    "Withdrawal": "withdrawal",
    "Withdrawal_Reversal": "withdrawal_reversal",
    "Desk_Rejection": "desk_rejection",
    "Desk_Reject": "desk_rejection",
    "Desk_Rejection_Reversal": "desk_rejection_reversal",
}
STATUS_KINDS = ("withdrawal", "withdrawal_reversal", "desk_rejection", "desk_rejection_reversal")
# Invitations that mark a state or an edit of the submission rather than a note of their own.
_SUBMISSION_STATE_SUFFIXES = {
    "Post_Submission",
    "Full_Submission",
    "Withdrawn_Submission",
    "Desk_Rejected_Submission",
    "Camera_Ready_Revision",
    "Rebuttal_Revision",
    "Revision",
    "Edit",
    "Deletion",
}

REQUIRED_NOTE_KEYS = ("id", "forum", "invitations", "signatures", "content")

# Who may sign each kind of note; a note signed otherwise lands in `note_errors` (reason `unknown_signer`).
ANY_SIGNER = None
SIGNERS_BY_KIND: dict[str, tuple[str, ...] | None] = {
    "submission": ANY_SIGNER,
    "review": ("reviewer",),
    "rebuttal": ("authors",),
    "comment": ("authors", "reviewer", "area_chair", "senior_area_chair", "program_chairs"),
    "public_comment": ANY_SIGNER,
    "meta_review": ("area_chair", "senior_area_chair", "program_chairs"),
    "decision": ANY_SIGNER,
    **{kind: ANY_SIGNER for kind in STATUS_KINDS},
}


class MalformedNote(ValueError):
    """A note that cannot be read; the message names the note and the problem, `reason` is its code."""

    reason = "malformed_note"


class WrongApiVersion(MalformedNote):
    """A note of the other API version than its venue's (e.g. an API v1 note in a v2 venue)."""

    def __init__(self, message: str, note_version: int, venue_version: int):
        super().__init__(message)
        self.reason = f"api_v{note_version}_note_in_v{venue_version}_venue"


@dataclass(frozen=True)
class Signer:
    """Who signed a note, from all of its signatures."""

    # "authors" | "reviewer" | "area_chair" | "senior_area_chair" | "program_chairs" | "other"
    role: str
    member_id: str | None  # e.g. "Reviewer_GzWz", "AnonReviewer3", "Area_Chair_x1y2"; None for authors


def invitation_suffix(invitation: str) -> str:
    """The invitation's last part: `V/Submission1/-/Official_Review` and v1's `V/-/Paper1/Official_Review` alike."""
    return invitation.rsplit("/", 1)[-1]


def note_label(note: Any) -> str:
    """A short identifier for messages, robust to notes that are not even dicts."""
    if isinstance(note, dict):
        return f"note {note.get('id', '?')} (forum {note.get('forum', '?')})"
    return f"non-object note {str(note)[:60]!r}"


def api_version_from_year(openreview_id: str) -> int | None:
    """1 for venues before 2023, 2 from 2023 on, None when the id names no year (e.g. `TMLR`)."""
    match = re.search(r"(?:^|/)((?:19|20)\d\d)(?:/|$)", openreview_id)
    if not match:
        return None
    return 1 if int(match.group(1)) < FIRST_API_V2_YEAR else 2


def note_api_version(note: Any) -> int | None:
    """The API version a note's shape belongs to: v2 has an `invitations` list, v1 a single `invitation` string."""
    if not isinstance(note, dict):
        return None
    if "invitations" in note:
        return 2
    if isinstance(note.get("invitation"), str) and note["invitation"]:
        return 1
    return None


def _from_v1(note: dict) -> dict:
    """An API v1 note in the v2 shape: `invitations` list, content fields wrapped as {"value": ...}."""
    content = note.get("content")
    wrapped = {k: {"value": v} for k, v in content.items()} if isinstance(content, dict) else content
    converted = {k: v for k, v in note.items() if k != "invitation"}
    converted.update(invitations=[note["invitation"]], content=wrapped)
    return converted


def validate_note(note: Any) -> dict:
    """Return the note if it has the API v2 shape the parsers rely on, else raise MalformedNote."""
    if not isinstance(note, dict):
        raise MalformedNote(f"{note_label(note)}: not a JSON object")
    missing = [k for k in REQUIRED_NOTE_KEYS if k not in note]
    if missing:
        raise MalformedNote(f"{note_label(note)}: missing field(s) {', '.join(missing)}")
    for key in ("id", "forum"):
        if not isinstance(note[key], str) or not note[key]:
            raise MalformedNote(f"{note_label(note)}: '{key}' must be a non-empty string")
    if note.get("replyto") is not None and not isinstance(note["replyto"], str):
        raise MalformedNote(f"{note_label(note)}: 'replyto' must be a note id or null")
    for key in ("invitations", "signatures"):
        if not isinstance(note[key], list) or not note[key] or not all(isinstance(x, str) for x in note[key]):
            raise MalformedNote(f"{note_label(note)}: '{key}' must be a non-empty list of strings")
    if not isinstance(note["content"], dict):
        raise MalformedNote(f"{note_label(note)}: 'content' must be an object")
    for field, wrapped in note["content"].items():
        if not isinstance(wrapped, dict) or "value" not in wrapped:
            raise MalformedNote(f"{note_label(note)}: content field {field!r} is not wrapped as {{'value': ...}}")
    return note


def read_note(note: Any, venue_api_version: int) -> dict:
    """The note in the v2 shape, checked; raises MalformedNote (or WrongApiVersion) naming the problem."""
    version = note_api_version(note)
    if version is not None and version != venue_api_version:
        shape = ("a single 'invitation' and unwrapped content" if version == 1
                 else "an 'invitations' list and content wrapped as {'value': ...}")
        raise WrongApiVersion(
            f"{note_label(note)}: an API v{version} note ({shape}) in an API v{venue_api_version} venue; "
            f"set `api_version: {version}` in the venue registry if the whole venue is API v{version}",
            version, venue_api_version,
        )
    return validate_note(_from_v1(note) if version == 1 else note)


def _version_time(note: Any) -> tuple[int, int, int]:
    if not isinstance(note, dict):
        return (0, 0, 0)
    return tuple(x if isinstance(x, int) else 0 for x in (note.get("tmdate"), note.get("mdate"), note.get("cdate")))


def superseded_positions(notes: list[Any]) -> set[int]:
    """Positions of note versions replaced by a later version of the same id (latest `tmdate` wins, then
    `mdate`, `cdate`, then the later position in the list). Entries without a string id are never superseded."""
    latest: dict[str, int] = {}
    superseded: set[int] = set()
    for position, note in enumerate(notes):
        note_id = note.get("id") if isinstance(note, dict) else None
        if not isinstance(note_id, str):
            continue
        if note_id not in latest:
            latest[note_id] = position
        elif _version_time(note) >= _version_time(notes[latest[note_id]]):
            superseded.add(latest[note_id])
            latest[note_id] = position
        else:
            superseded.add(position)
    return superseded


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
        if p.startswith("Reviewer_") or p == "Reviewers" or re.fullmatch(r"AnonReviewer\d*", p):
            return Signer("reviewer", p)
    for p in parts:
        if p.startswith("Senior_Area_Chair"):
            return Signer("senior_area_chair", p)
    for p in parts:
        if p.startswith("Area_Chair"):
            return Signer("area_chair", p)
    if any(p == "Program_Chairs" for p in parts):
        return Signer("program_chairs", "Program_Chairs")
    return Signer("other", parts[0] if parts else None)


def signer_allowed(kind: str, role: str) -> bool:
    allowed = SIGNERS_BY_KIND.get(kind, ANY_SIGNER)
    return allowed is ANY_SIGNER or role in allowed


def value(note: dict, field: str) -> Any:
    """The unwrapped value of a content field, or None."""
    wrapped = note["content"].get(field)
    return wrapped.get("value") if isinstance(wrapped, dict) else None


def text_value(note: dict, field: str) -> str | None:
    raw = value(note, field)
    if raw is None:
        return None
    return raw if isinstance(raw, str) else json.dumps(raw, ensure_ascii=False)


def list_value(note: dict, field: str) -> list[str] | None:
    """A list field (e.g. ethics flags) as a list of strings; a lone string becomes a one-item list."""
    raw = value(note, field)
    if raw is None:
        return None
    items = raw if isinstance(raw, list) else [raw]
    return [x if isinstance(x, str) else json.dumps(x, ensure_ascii=False) for x in items]


def score(raw: Any) -> int | None:
    """An integer score from a review field: `4`, `4.0`, `"4"`, `"3: good"`, `"6: marginally above"`, `"3 good"`."""
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int):
        return raw
    if isinstance(raw, float):
        return int(raw) if raw.is_integer() else None
    if isinstance(raw, str):
        match = re.match(r"\s*(-?\d+)(?![\d.])", raw)
        return int(match.group(1)) if match else None
    return None


# --- outcomes -------------------------------------------------------------------------------------------

OUTCOMES = ("oral", "spotlight", "poster", "accept", "reject", "withdrawn", "desk_rejected")
ACCEPTED = ("oral", "spotlight", "poster", "accept")
# First match wins, so specific labels come before general ones ("Desk Rejected" before "Rejected",
# ICML's "Spotlightposter" before "poster"). ICLR 2023 named orals and spotlights "notable top 5%/25%".
_OUTCOME_PATTERNS: tuple[tuple[str, re.Pattern], ...] = tuple(
    (outcome, re.compile(pattern, re.IGNORECASE)) for outcome, pattern in (
        ("desk_rejected", r"desk[\s_-]*reject"),
        ("withdrawn", r"withdr[ae]w"),
        ("oral", r"\boral|\btalk\b|notable[\s-]*top[\s-]*5%"),
        ("spotlight", r"spotlight|notable[\s-]*top[\s-]*25%"),
        ("poster", r"poster"),
        ("reject", r"reject"),
        ("accept", r"accept"),
    )
)


def normalise_outcome(text: str | None) -> str | None:
    """`"Accept (Poster)"`, `"ICLR 2026 Oral"`, `"NeurIPS 2024 spotlight"`, `"Reject"` -> one of OUTCOMES, else None."""
    if not text:
        return None
    return next((outcome for outcome, pattern in _OUTCOME_PATTERNS if pattern.search(text)), None)


def outcome_from_venueid(venueid: str, venue_label: str | None) -> str | None:
    """The outcome a submission's current `venueid` states: `.../Rejected_Submission`, `.../Withdrawn_Submission`,
    `.../Desk_Rejected_Submission`, the venue itself (accepted; the `venue` label says oral/spotlight/poster) or
    `.../Submission` (under review: None)."""
    last = venueid.rstrip("/").rsplit("/", 1)[-1]
    if "Submission" not in last:
        accepted = normalise_outcome(venue_label)
        return accepted if accepted in ACCEPTED else "accept"
    return normalise_outcome(last.replace("_", " ")) if last != "Submission" else None


def outcome_from_venue_label(venue_label: str) -> str | None:
    """The outcome in a `venue` label alone: "ICLR 2026 Poster", "... Withdrawn Submission"; "Submitted to ICLR
    2026" is ICLR's label for a rejected paper; "ICLR 2026 Conference Submission" means under review (None)."""
    if re.match(r"\s*submitted to\b", venue_label, re.IGNORECASE):
        return "reject"
    return normalise_outcome(venue_label)


@dataclass(frozen=True)
class Outcome:
    decision: str | None  # one of OUTCOMES, or None (under review, or a decision text we cannot read)
    decision_text: str | None  # the text it was read from
    decision_source: str | None  # "decision_note" | "venueid" | "venue" | "status_note" | "invitation"
    withdrawn: bool
    desk_rejected: bool


def submission_outcome(submission: dict, decision_texts: list[str], status_kinds: list[str]) -> Outcome:
    """Decision and withdrawn / desk-rejected flags of a submission (v2 shape).

    `decision_texts`: the decision of each Decision note, oldest first; `status_kinds`: the kinds of its
    withdrawal / desk-rejection notes and their reversals, oldest first. The decision comes from the latest
    Decision note, else from `venueid` / `venue`. The current `venueid` (else `venue`) is the truth for the
    flags: invitations stay on a note after its state changes (a withdrawal invitation on a paper later
    accepted), so they and the status notes are used only when the note states no venue at all (API v1)."""
    venueid = text_value(submission, "venueid")
    venue_label = text_value(submission, "venue")
    if venueid:
        current, current_source, current_text = outcome_from_venueid(venueid, venue_label), "venueid", venueid
        if current in ACCEPTED and venue_label:
            current_text = venue_label
    elif venue_label:
        current, current_source, current_text = outcome_from_venue_label(venue_label), "venue", venue_label
    else:
        current, current_source, current_text = None, None, None

    if venueid or venue_label:
        withdrawn, desk_rejected = current == "withdrawn", current == "desk_rejected"
    else:
        suffixes = {invitation_suffix(i) for i in submission["invitations"]}
        by_note = {"withdrawal": False, "desk_rejection": False}
        for kind in status_kinds:
            by_note[kind.removesuffix("_reversal")] = not kind.endswith("_reversal")
        withdrawn = by_note["withdrawal"] or "Withdrawn_Submission" in suffixes
        desk_rejected = by_note["desk_rejection"] or "Desk_Rejected_Submission" in suffixes
        if withdrawn or desk_rejected:
            current = "withdrawn" if withdrawn else "desk_rejected"
            from_notes = by_note["withdrawal" if withdrawn else "desk_rejection"]
            current_source = "status_note" if from_notes else "invitation"
            current_text = current

    if decision_texts:
        return Outcome(normalise_outcome(decision_texts[-1]), decision_texts[-1], "decision_note", withdrawn,
                       desk_rejected)
    if current_source is None:
        return Outcome(None, None, None, withdrawn, desk_rejected)
    return Outcome(current, current_text if current else None, current_source if current else None, withdrawn,
                   desk_rejected)

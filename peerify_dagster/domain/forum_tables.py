"""Turn the notes of crawled forums into the typed ingestion tables.

Input is one `ForumNotes` per paper (every note of the forum as received). Output rows are plain
dicts per table, plus `note_errors` for notes that could not be used; a bad note never stops the
rest of its forum or venue. Everything here is deterministic: same notes in, same rows out.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable

from peerify_dagster.domain import notes as n

# Review content fields kept as their own columns (ICLR 2024 plus NeurIPS 2024's `limitations`).
REVIEW_FIELDS: tuple[str, ...] = (
    "summary",
    "soundness",
    "presentation",
    "contribution",
    "strengths",
    "weaknesses",
    "questions",
    "limitations",
    "flag_for_ethics_review",
    "rating",
    "confidence",
    "code_of_conduct",
)
# Free-text fields assembled, in this order, into one review text for claim extraction.
REVIEW_TEXT_FIELDS: tuple[str, ...] = (
    "summary",
    "review",
    "strengths_and_weaknesses",
    "strengths",
    "weaknesses",
    "questions",
    "limitations",
)

TABLES: tuple[str, ...] = (
    "submissions",
    "reviews",
    "author_responses",
    "reviewer_followups",
    "decisions",
    "meta_reviews",
    "review_threads",
    "note_errors",
)


@dataclass(frozen=True)
class ForumNotes:
    forum_id: str
    notes: list[Any]  # as received: normally dicts, but malformed entries are possible
    fetched_at: int | None = None


@dataclass
class VenueTables:
    rows: dict[str, list[dict]] = field(default_factory=lambda: {t: [] for t in TABLES})

    def add(self, table: str, row: dict) -> None:
        self.rows[table].append(row)


def leading_score(text: str | None) -> int | None:
    """`"6: marginally above..."` -> 6; scores are written as a number followed by a description."""
    if not text:
        return None
    match = re.match(r"\s*(-?\d+)", text)
    return int(match.group(1)) if match else None


def assemble_review_text(note: dict) -> str:
    parts = []
    for field_name in REVIEW_TEXT_FIELDS:
        text = n.text_value(note, field_name)
        if text and text.strip():
            parts.append(f"{field_name.replace('_', ' ').capitalize()}: {text.strip()}")
    return "\n\n".join(parts)


def _time_key(note: dict) -> tuple:
    return (note.get("cdate") or note.get("tcdate") or 0, note["id"])


def _note_error(venue: str, forum_id: str, note_id: str | None, reason: str, message: str, severity: str) -> dict:
    return {
        "venue": venue,
        "forum_id": forum_id,
        "note_id": note_id,
        "stage": "note",
        "severity": severity,
        "reason": reason,
        "message": message,
    }


def _word_count(text: str) -> int:
    return len(text.split())


class _Forum:
    """One forum's valid notes with the reply tree, for threading."""

    def __init__(self, venue: str, forum: ForumNotes, out: VenueTables):
        self.venue = venue
        self.forum_id = forum.forum_id
        self.by_id: dict[str, dict] = {}
        self.kind: dict[str, str] = {}
        for raw in forum.notes:
            try:
                note = n.validate_note(raw)
            except n.MalformedNote as exc:
                note_id = raw.get("id") if isinstance(raw, dict) else None
                out.add("note_errors", _note_error(venue, forum.forum_id, note_id, "malformed_note", str(exc), "error"))
                continue
            if note["forum"] != forum.forum_id:
                out.add(
                    "note_errors",
                    _note_error(
                        venue, forum.forum_id, note["id"], "wrong_forum",
                        f"{n.note_label(note)}: listed under forum {forum.forum_id}", "error",
                    ),
                )
                continue
            kind = n.classify(note)
            if kind is None:
                out.add(
                    "note_errors",
                    _note_error(
                        venue, forum.forum_id, note["id"], "unknown_invitation",
                        f"{n.note_label(note)}: unknown invitation(s) {', '.join(note['invitations'])}; note skipped",
                        "warning",
                    ),
                )
                continue
            self.by_id[note["id"]] = note
            self.kind[note["id"]] = kind

    def notes_of(self, *kinds: str) -> list[dict]:
        return sorted((x for i, x in self.by_id.items() if self.kind[i] in kinds), key=_time_key)

    def root_review(self, note: dict) -> str | None:
        """The review at the top of this note's reply chain, if it hangs under one (any depth)."""
        seen = set()
        current = note.get("replyto")
        while current and current not in seen and current in self.by_id:
            seen.add(current)
            if self.kind[current] == "review":
                return current
            current = self.by_id[current].get("replyto")
        return None


def _is_author_response(forum: _Forum, note: dict) -> bool:
    kind = forum.kind[note["id"]]
    return kind in ("rebuttal", "comment") and n.signer(note).role == "authors"


def _submission_row(venue: str, note: dict, forum: _Forum) -> dict:
    venueid = n.text_value(note, "venueid") or ""
    venue_label = n.text_value(note, "venue") or ""
    invitation_suffixes = {n.invitation_suffix(i) for i in note["invitations"]}
    withdrawn = (
        "Withdrawn_Submission" in invitation_suffixes
        or venueid.endswith("Withdrawn_Submission")
        or bool(forum.notes_of("withdrawal"))
    )
    desk_rejected = "Desk_Rejected_Submission" in invitation_suffixes or venueid.endswith("Desk_Rejected_Submission")
    decisions = forum.notes_of("decision")
    decision = n.text_value(decisions[-1], "decision") if decisions else None
    if decision is None and withdrawn:
        decision = "Withdrawn"
    elif decision is None and desk_rejected:
        decision = "Desk Rejected"
    keywords = n.value(note, "keywords")
    return {
        "venue": venue,
        "paper_id": note["id"],
        "number": note.get("number"),
        "title": n.text_value(note, "title"),
        "abstract": n.text_value(note, "abstract"),
        "keywords": [str(k) for k in keywords] if isinstance(keywords, list) else [],
        "primary_area": n.text_value(note, "primary_area"),
        "tldr": n.text_value(note, "TLDR") or n.text_value(note, "tldr"),
        "venue_label": venue_label or None,
        "decision": decision,
        "withdrawn": withdrawn,
        "desk_rejected": desk_rejected,
        "pdf_url": n.text_value(note, "pdf"),
        "cdate": note.get("cdate"),
        "mdate": note.get("mdate"),
    }


def _review_row(venue: str, note: dict) -> dict:
    row = {
        "venue": venue,
        "paper_id": note["forum"],
        "review_id": note["id"],
        "reviewer_id": n.signer(note).member_id,
        "signatures": list(note["signatures"]),
        "cdate": note.get("cdate"),
        "mdate": note.get("mdate"),
    }
    for field_name in REVIEW_FIELDS:
        row[field_name] = n.text_value(note, field_name)
    row["rating_score"] = leading_score(row["rating"])
    row["confidence_score"] = leading_score(row["confidence"])
    extra = {k: v.get("value") for k, v in note["content"].items() if k not in REVIEW_FIELDS}
    row["extra_fields_json"] = json.dumps(extra, ensure_ascii=False, sort_keys=True) if extra else None
    row["review_text"] = assemble_review_text(note)
    return row


def _response_text(note: dict) -> str:
    return (n.text_value(note, "rebuttal") or n.text_value(note, "comment") or "").strip()


def build_tables(venue: str, forums: Iterable[ForumNotes]) -> VenueTables:
    """Build every typed ingestion table for a venue from its forums' raw notes."""
    out = VenueTables()
    for forum_notes in sorted(forums, key=lambda f: f.forum_id):
        forum = _Forum(venue, forum_notes, out)
        submission = forum.by_id.get(forum.forum_id)
        if submission is None or forum.kind[forum.forum_id] != "submission":
            out.add(
                "note_errors",
                _note_error(
                    venue, forum.forum_id, forum.forum_id, "missing_submission",
                    f"forum {forum.forum_id}: no valid submission note; forum skipped", "error",
                ),
            )
            continue
        out.add("submissions", _submission_row(venue, submission, forum))

        reviews = forum.notes_of("review")
        for review in reviews:
            out.add("reviews", _review_row(venue, review))

        author_notes = [x for x in forum.notes_of("rebuttal", "comment") if _is_author_response(forum, x)]
        for note in author_notes:
            out.add(
                "author_responses",
                {
                    "venue": venue,
                    "paper_id": forum.forum_id,
                    "response_id": note["id"],
                    "kind": "rebuttal" if forum.kind[note["id"]] == "rebuttal" else "official_comment",
                    "invitation": next(i for i in note["invitations"] if "/-/" in i),
                    "replyto": note.get("replyto"),
                    "review_id": forum.root_review(note),
                    "is_global": note.get("replyto") == forum.forum_id,
                    "title": n.text_value(note, "title"),
                    "text": _response_text(note),
                    "signatures": list(note["signatures"]),
                    "cdate": note.get("cdate"),
                    "mdate": note.get("mdate"),
                },
            )

        reviewer_of = {r["id"]: n.signer(r).member_id for r in reviews}
        followups = [
            x for x in forum.notes_of("comment", "rebuttal")
            if n.signer(x).role == "reviewer" and forum.kind[x["id"]] == "comment"
        ]
        for note in followups:
            review_id = forum.root_review(note)
            reviewer_id = n.signer(note).member_id
            out.add(
                "reviewer_followups",
                {
                    "venue": venue,
                    "paper_id": forum.forum_id,
                    "comment_id": note["id"],
                    "reviewer_id": reviewer_id,
                    "replyto": note.get("replyto"),
                    "review_id": review_id,
                    "own_review": review_id is not None and reviewer_of.get(review_id) == reviewer_id,
                    "title": n.text_value(note, "title"),
                    "text": _response_text(note),
                    "cdate": note.get("cdate"),
                },
            )

        for note in forum.notes_of("decision"):
            out.add(
                "decisions",
                {
                    "venue": venue,
                    "paper_id": forum.forum_id,
                    "decision_id": note["id"],
                    "decision": n.text_value(note, "decision"),
                    "comment": n.text_value(note, "comment"),
                    "signatures": list(note["signatures"]),
                    "cdate": note.get("cdate"),
                },
            )
        for note in forum.notes_of("meta_review"):
            out.add(
                "meta_reviews",
                {
                    "venue": venue,
                    "paper_id": forum.forum_id,
                    "meta_review_id": note["id"],
                    "area_chair_id": n.signer(note).member_id,
                    "metareview": n.text_value(note, "metareview"),
                    "recommendation": n.text_value(note, "recommendation"),
                    "confidence": n.text_value(note, "confidence"),
                    "cdate": note.get("cdate"),
                },
            )

        combined = "\n\n".join(t for t in (_response_text(x) for x in author_notes) if t)
        responses_by_review: dict[str, list[dict]] = defaultdict(list)
        for note in author_notes:
            review_id = forum.root_review(note)
            if review_id:
                responses_by_review[review_id].append(note)
        followups_by_review: dict[str, list[str]] = defaultdict(list)
        for note in followups:
            review_id = forum.root_review(note)
            if review_id:
                followups_by_review[review_id].append(note["id"])
        for review in reviews:
            thread = responses_by_review.get(review["id"], [])
            thread_text = "\n\n".join(t for t in (_response_text(x) for x in thread) if t)
            out.add(
                "review_threads",
                {
                    "venue": venue,
                    "paper_id": forum.forum_id,
                    "review_id": review["id"],
                    "reviewer_id": n.signer(review).member_id,
                    "review_text": assemble_review_text(review),
                    "author_response_ids": [x["id"] for x in thread],
                    "n_author_responses": len(thread),
                    "thread_author_response": thread_text,
                    "followup_ids": followups_by_review.get(review["id"], []),
                    "combined_author_response": combined,
                    "combined_response_words": _word_count(combined),
                },
            )
    return out

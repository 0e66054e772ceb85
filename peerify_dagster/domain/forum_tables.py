"""Turn the notes of crawled forums into the typed ingestion tables.

Input is one `ForumNotes` per paper (every note of the forum as received, older versions of a note
included). Output rows are plain dicts per table. A venue is built a batch of forums at a time (`forum_batches`),
and `StreamedChecks` keeps what the tables' data-quality checks read (ids, short fields) batch by batch, so no step
holds the venue. Every note of a forum ends up in exactly one place: one typed table, `note_errors` with a reason, or
(an older version of a note) superseded by its latest version; `NOTE_TABLES` names the id column of each. A bad note
never stops the rest of its forum or venue. Everything here is deterministic: same notes in, same rows out.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

import polars as pl

from peerify_dagster.domain import notes as n
from peerify_dagster.domain import quality

# Review content fields kept as their own columns (ICLR 2024-2026 plus NeurIPS 2024's `limitations`).
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
# Numeric review fields: each also gets an integer column `<field>_score` ("3: good" -> 3, 4 -> 4).
SCORE_FIELDS: tuple[str, ...] = ("rating", "confidence", "soundness", "presentation", "contribution")
# Review fields whose value is a list (kept as a list column, not a JSON string).
LIST_FIELDS: tuple[str, ...] = ("flag_for_ethics_review",)
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

# The tables that hold notes, with the column holding the note id: every note of a forum is in one of them.
NOTE_TABLES: dict[str, str] = {
    "submissions": "paper_id",
    "reviews": "review_id",
    "author_responses": "response_id",
    "reviewer_followups": "comment_id",
    "chair_comments": "comment_id",
    "public_comments": "comment_id",
    "decisions": "decision_id",
    "meta_reviews": "meta_review_id",
    "status_notes": "note_id",
    "note_errors": "note_id",
}
TABLES: tuple[str, ...] = (*NOTE_TABLES, "review_threads")
CHAIR_ROLES = ("area_chair", "senior_area_chair", "program_chairs")


@dataclass(frozen=True)
class ForumNotes:
    forum_id: str
    notes: list[Any]  # as received: normally dicts, but malformed entries are possible
    fetched_at: int | None = None


@dataclass
class VenueTables:
    rows: dict[str, list[dict]] = field(default_factory=lambda: {t: [] for t in TABLES})
    superseded_versions: int = 0  # older versions of notes, replaced by their latest version

    def add(self, table: str, row: dict) -> None:
        self.rows[table].append(row)


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
    """One forum's notes: the readable ones (latest versions) with the reply tree, and those placed in typed
    tables. Every other note gets its `note_errors` row here."""

    def __init__(self, venue: str, forum: ForumNotes, api_version: int, out: VenueTables):
        self.venue = venue
        self.forum_id = forum.forum_id
        self.out = out
        self.readable: dict[str, dict] = {}  # every readable note of the forum, for reply chains
        self.kind: dict[str, str] = {}  # the notes placed in typed tables, by id
        superseded = n.superseded_positions(forum.notes)
        out.superseded_versions += len(superseded)
        classified: list[tuple[dict, str]] = []
        for raw in (x for position, x in enumerate(forum.notes) if position not in superseded):
            try:
                note = n.read_note(raw, api_version)
            except n.MalformedNote as exc:
                note_id = raw.get("id") if isinstance(raw, dict) and isinstance(raw.get("id"), str) else None
                self.error(note_id, exc.reason, str(exc), "error")
                continue
            if note["forum"] != forum.forum_id:
                self.error(note["id"], "wrong_forum", f"{n.note_label(note)}: listed under forum {forum.forum_id}")
                continue
            self.readable[note["id"]] = note
            kind = n.classify(note)
            if kind is None:
                invitations = ", ".join(note["invitations"])
                self.error(note["id"], "unknown_invitation",
                           f"{n.note_label(note)}: unknown invitation(s) {invitations}; note skipped", "warning")
                continue
            classified.append((note, kind))

        submission = self.readable.get(self.forum_id)
        has_submission = submission is not None and any(x is submission and k == "submission" for x, k in classified)
        for note, kind in classified:
            if not has_submission:
                self.error(note["id"], "missing_submission",
                           f"{n.note_label(note)}: forum {self.forum_id} has no valid submission note; note skipped")
            elif kind != "submission" and (problem := self._broken_chain(note)):
                self.error(note["id"], "missing_parent", f"{n.note_label(note)}: {problem}; note skipped")
            elif not n.signer_allowed(kind, n.signer(note).role):
                signed, expected = ", ".join(note["signatures"]), ", ".join(n.SIGNERS_BY_KIND[kind] or ())
                self.error(note["id"], "unknown_signer",
                           f"{n.note_label(note)}: a {kind.replace('_', ' ')} signed by {signed}, no group that posts "
                           f"these here ({expected}); note skipped")
            else:
                self.kind[note["id"]] = kind

    def error(self, note_id: str | None, reason: str, message: str, severity: str = "error") -> None:
        self.out.add("note_errors", _note_error(self.venue, self.forum_id, note_id, reason, message, severity))

    def _broken_chain(self, note: dict) -> str | None:
        """Why the note's reply chain does not lead to the submission, or None when it does."""
        child, current, seen = note, note.get("replyto"), {note["id"]}
        while current != self.forum_id:
            where = "it" if child is note else f"its reply chain breaks at {child['id']}, which"
            if current is None:
                return f"{where} replies to no note (replyto is null)"
            if current in seen:
                return f"its reply chain loops at {current}"
            if current not in self.readable:
                return f"{where} replies to {current}, not a readable note of this forum"
            seen.add(current)
            child, current = self.readable[current], self.readable[current].get("replyto")
        return None

    def notes_of(self, *kinds: str) -> list[dict]:
        return sorted((self.readable[i] for i, k in self.kind.items() if k in kinds), key=_time_key)

    def chain(self, note: dict) -> list[str]:
        """The ids from the note's parent up to (not including) the submission."""
        ids, current = [], note.get("replyto")
        while current and current != self.forum_id and current in self.readable and current not in ids:
            ids.append(current)
            current = self.readable[current].get("replyto")
        return ids

    def root_review(self, note: dict) -> str | None:
        """The review at the top of this note's reply chain, if it hangs under one (any depth)."""
        return next((i for i in self.chain(note) if self.kind.get(i) == "review"), None)

    def thread_id(self, note: dict) -> str:
        """The note directly under the submission that starts this note's thread (the note itself if it does)."""
        ancestors = self.chain(note)
        return ancestors[-1] if ancestors else note["id"]


def _submission_row(venue: str, note: dict, forum: _Forum) -> dict:
    outcome = n.submission_outcome(
        note,
        [n.text_value(d, "decision") or "" for d in forum.notes_of("decision")],
        [forum.kind[s["id"]] for s in forum.notes_of(*n.STATUS_KINDS)],
    )
    keywords = n.value(note, "keywords")
    return {
        "venue": venue,
        "paper_id": note["id"],
        "number": note.get("number") if isinstance(note.get("number"), int) else None,
        "title": n.text_value(note, "title"),
        "abstract": n.text_value(note, "abstract"),
        "keywords": [str(k) for k in keywords] if isinstance(keywords, list) else [],
        "primary_area": n.text_value(note, "primary_area"),
        "tldr": n.text_value(note, "TLDR") or n.text_value(note, "tldr") or n.text_value(note, "TL;DR"),
        "venue_label": n.text_value(note, "venue") or None,
        "venueid": n.text_value(note, "venueid") or None,
        "decision": outcome.decision,
        "decision_text": outcome.decision_text,
        "decision_source": outcome.decision_source,
        "withdrawn": outcome.withdrawn,
        "desk_rejected": outcome.desk_rejected,
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
        read = n.list_value if field_name in LIST_FIELDS else n.text_value
        row[field_name] = read(note, field_name)
    for field_name in SCORE_FIELDS:
        row[f"{field_name}_score"] = n.score(n.value(note, field_name))
    extra = {k: v.get("value") for k, v in note["content"].items() if k not in REVIEW_FIELDS}
    row["extra_fields_json"] = json.dumps(extra, ensure_ascii=False, sort_keys=True) if extra else None
    row["review_text"] = assemble_review_text(note)
    return row


def _response_text(note: dict) -> str:
    return (n.text_value(note, "rebuttal") or n.text_value(note, "comment") or "").strip()


def _comment_row(venue: str, forum: _Forum, note: dict) -> dict:
    """The columns every comment table shares: where the comment sits in the forum and what it says."""
    return {
        "venue": venue,
        "paper_id": forum.forum_id,
        "comment_id": note["id"],
        "replyto": note.get("replyto"),
        "review_id": forum.root_review(note),
        "thread_id": forum.thread_id(note),
        "title": n.text_value(note, "title"),
        "text": _response_text(note),
        "signatures": list(note["signatures"]),
        "cdate": note.get("cdate"),
        "mdate": note.get("mdate"),
    }


def build_tables(venue: str, forums: Iterable[ForumNotes], api_version: int = 2) -> VenueTables:
    """Build every typed ingestion table for a venue from its forums' raw notes (of API `api_version`)."""
    out = VenueTables()
    for forum_notes in sorted(forums, key=lambda f: f.forum_id):
        forum = _Forum(venue, forum_notes, api_version, out)
        if forum.kind.get(forum.forum_id) != "submission":
            continue  # each of its notes already has its `note_errors` row
        out.add("submissions", _submission_row(venue, forum.readable[forum.forum_id], forum))

        reviews = forum.notes_of("review")
        for review in reviews:
            out.add("reviews", _review_row(venue, review))

        comments = forum.notes_of("comment")
        role_of = {c["id"]: n.signer(c) for c in comments}
        author_notes = forum.notes_of("rebuttal") + [c for c in comments if role_of[c["id"]].role == "authors"]
        author_notes.sort(key=_time_key)
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
        followups = [c for c in comments if role_of[c["id"]].role == "reviewer"]
        for note in followups:
            review_id = forum.root_review(note)
            reviewer_id = role_of[note["id"]].member_id
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

        for note in (c for c in comments if role_of[c["id"]].role in CHAIR_ROLES):
            signer = role_of[note["id"]]
            out.add("chair_comments", {**_comment_row(venue, forum, note), "role": signer.role,
                                       "signer_id": signer.member_id})
        for note in forum.notes_of("public_comment"):
            out.add("public_comments", _comment_row(venue, forum, note))

        for note in forum.notes_of("decision"):
            out.add(
                "decisions",
                {
                    "venue": venue,
                    "paper_id": forum.forum_id,
                    "decision_id": note["id"],
                    "decision": n.text_value(note, "decision"),
                    "outcome": n.normalise_outcome(n.text_value(note, "decision")),
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
        for note in forum.notes_of(*n.STATUS_KINDS):
            content = {k: v.get("value") for k, v in note["content"].items()}
            out.add(
                "status_notes",
                {
                    "venue": venue,
                    "paper_id": forum.forum_id,
                    "note_id": note["id"],
                    "kind": forum.kind[note["id"]],
                    "invitation": next(i for i in note["invitations"] if "/-/" in i),
                    "signatures": list(note["signatures"]),
                    "content_json": json.dumps(content, ensure_ascii=False, sort_keys=True),
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


# Reasons whose share of a venue's note errors points at the likely cause of a venue with no typed rows.
_EMPTY_VENUE_CAUSES = {
    "api_v1_note_in_v2_venue": "API v1 notes in a v2 venue: set `api_version: 1` for the venue in the registry",
    "api_v2_note_in_v1_venue": "API v2 notes in a v1 venue: set `api_version: 2` for the venue in the registry",
    "unknown_invitation": "no invitation of these notes is one the project knows (another venue's format?)",
    "malformed_note": "the notes are malformed (not the OpenReview note shape)",
    "missing_submission": "no forum has a valid submission note",
    "wrong_forum": "the notes belong to other forums than the ones they are filed under",
}


def likely_cause_of_empty_tables(note_errors: Iterable[dict]) -> str:
    """The most frequent note error's explanation, for a venue whose raw notes gave no typed rows."""
    return likely_cause_from_reasons(Counter(row["reason"] for row in note_errors))


def likely_cause_from_reasons(reasons: Counter[str]) -> str:
    """As `likely_cause_of_empty_tables`, from the count of note errors per reason."""
    if not reasons:
        return "no note was classified (no note errors either)"
    reason, count = reasons.most_common(1)[0]
    explanation = _EMPTY_VENUE_CAUSES.get(reason, reason)
    return f"{explanation} ({count} of {sum(reasons.values())} note errors are `{reason}`)"


def forum_batches(frames: Iterable[pl.DataFrame], forums_per_batch: int) -> Iterator[pl.DataFrame]:
    """Regroup raw-note rows read in arbitrary slices into batches of `forums_per_batch` whole forums (a forum's rows
    are contiguous in the raw table; one that runs past a slice waits for the next). At most one batch plus one
    slice is held."""
    pending: pl.DataFrame | None = None
    for frame in frames:
        pending = frame if pending is None else pl.concat([pending, frame])
        forums = pending["forum_id"].unique(maintain_order=True)
        while len(forums) > forums_per_batch:  # a later forum has begun, so the first ones are complete
            done = pending["forum_id"].is_in(forums[:forums_per_batch].implode())
            yield pending.filter(done)
            pending, forums = pending.filter(~done), forums[forums_per_batch:]
    if pending is not None and pending.height:
        yield pending


def forums_of(raw: pl.DataFrame) -> list[ForumNotes]:
    """The forums of raw-note rows (forum_id, note_json, fetched_at), notes parsed, in order."""
    grouped: dict[str, list] = defaultdict(list)
    fetched: dict[str, int | None] = {}
    for forum_id, note_json, fetched_at in raw.select("forum_id", "note_json", "fetched_at").iter_rows():
        grouped[forum_id].append(json.loads(note_json))
        fetched[forum_id] = fetched_at
    return [ForumNotes(forum_id=f, notes=notes, fetched_at=fetched[f]) for f, notes in grouped.items()]


def placed_notes(frames: dict[str, pl.DataFrame]) -> pl.DataFrame:
    """(forum_id, note_id, table) for every row of every table that holds notes."""
    return pl.concat([
        frames[table].select(pl.col("forum_id" if table == "note_errors" else "paper_id").alias("forum_id"),
                             pl.col(column).alias("note_id"), pl.lit(table).alias("table"))
        for table, column in NOTE_TABLES.items()
    ])


class StreamedChecks:
    """What the typed tables' data-quality checks read over a whole venue, fed one batch of whole forums at a time.
    It keeps, per table, the columns its great-expectations checks judge (`quality.checked_columns`: ids and short
    fields, never texts or note JSON), and what the hand-coded checks need: the notes not accounted for, per forum,
    and the reasons of note errors (for the likely cause of a venue without typed rows)."""

    def __init__(self, schemas: dict[str, dict[str, pl.DataType]], id_columns: dict[str, str],
                 text_columns: dict[str, str]):
        self.columns = {table: quality.checked_columns(table, column, text_columns.get(table), SCORE_FIELDS)
                        for table, column in id_columns.items()}
        self.batches: dict[str, list[pl.DataFrame]] = {  # an empty frame first: the schema of a venue without rows
            table: [pl.DataFrame(schema=schemas[table]).select(columns)] for table, columns in self.columns.items()}
        self.raw_forums: set[str] = set()
        self.unaccounted: dict[str, list[str]] = {}
        self.error_reasons: Counter[str] = Counter()
        self.notes_received = 0
        self.superseded_versions = 0

    def add(self, raw_ids: pl.DataFrame, frames: dict[str, pl.DataFrame], superseded_versions: int) -> None:
        """One batch: the raw (forum_id, note_id) of its forums and the typed tables built from them."""
        self.notes_received += raw_ids.height
        self.superseded_versions += superseded_versions
        self.raw_forums.update(raw_ids["forum_id"].to_list())
        for table, columns in self.columns.items():
            self.batches[table].append(frames[table].select(columns))
        self.unaccounted.update(quality.unaccounted_notes(raw_ids, placed_notes(frames)))
        self.error_reasons.update(frames["note_errors"]["reason"].to_list())

    def checked_rows(self, table: str) -> pl.DataFrame:
        """Every row of `table` so far, in the columns its checks read."""
        return pl.concat(self.batches[table])

    def unaccounted_notes(self) -> dict[str, list[str]]:
        return dict(sorted(self.unaccounted.items()))

    def likely_cause_of_empty_tables(self) -> str | None:
        """Why a venue with raw notes has no submission at all, or None when it has submissions (or no notes)."""
        if not self.notes_received or self.checked_rows("submissions").height:
            return None
        return likely_cause_from_reasons(self.error_reasons)

"""Deterministic, recorded paper sampling, with the Peerify paper's pairing filters as options.

Each forum gets a rank key, the sha256 of the seed and its id; a sample is the forums with the smallest keys.
The draw therefore depends only on the seed and the ids, never on the order the API listed them in, and a
change in the listed population moves the sample only where it must: a new forum enters only if its key is
below the cutoff (displacing the last one), and a forum that disappears leaves the others in place. (Drawing by
position in the sorted list, as before, reshuffled the whole sample when one forum was added.)

Options (`sampling:` in the venue registry, `SamplingConfig`), off by default:
- `exclude_withdrawn`, `exclude_desk_rejected`: skip forums whose current venueid says so;
- `require_author_reply`: the paper's pairing keeps papers where the authors replied directly to a review with
  a substantive answer; replies made only of promises ("we will add ...") or thanks do not count;
- `reviews`: which reviews claims come from: `all`, `replied` (those with a substantive direct author reply),
  or `one_pair` (one review/response pair per paper: the review with the longest such reply, as the paper does).
Balancing venues, the paper's other step, is giving each venue the same `sample_size`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

from peerify_dagster.domain import notes as n
from peerify_dagster.domain.options import checked_options

REVIEW_SCOPES = ("all", "replied", "one_pair")
SKIP_WITHDRAWN = "withdrawn"
SKIP_DESK_REJECTED = "desk_rejected"
SKIP_NO_REPLY = "no_substantive_author_reply"
SKIP_UNREADABLE = "forum_unavailable"

_PROMISE = re.compile(
    r"\b(?:we will|we'll|we plan to|we intend to|we are going to|will be (?:added|included|fixed|clarified|updated"
    r"|discussed|released|corrected)|in the (?:revised|final|updated|camera[- ]ready) (?:version|manuscript|paper)"
    r"|in the revision|future (?:work|version))\b",
    re.IGNORECASE)
_THANKS = re.compile(r"^\s*(?:we\s+)?(?:thank|thanks|many thanks|we appreciate|we are grateful)\b", re.IGNORECASE)
_SENTENCE = re.compile(r"[^.!?\n]+[.!?]*")


class SamplingConfigError(ValueError):
    """A sampling option that cannot be used; the message names the option."""


@dataclass(frozen=True)
class SamplingConfig:
    exclude_withdrawn: bool = False
    exclude_desk_rejected: bool = False
    require_author_reply: bool = False
    min_reply_words: int = 30  # a direct reply shorter than this is not a substantive answer
    reviews: str = "all"  # one of REVIEW_SCOPES

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any] | None) -> SamplingConfig:
        options = checked_options(cls, raw, SamplingConfigError)
        known = {f.name: f for f in fields(cls)}
        for name, value in options.items():
            expected = bool if known[name].type == "bool" else int if known[name].type == "int" else str
            if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
                raise SamplingConfigError(f"{name} must be a {expected.__name__}, got {value!r}")
        config = cls(**options)
        if config.reviews not in REVIEW_SCOPES:
            raise SamplingConfigError(f"reviews must be one of {REVIEW_SCOPES}, got {config.reviews!r}")
        if config.min_reply_words < 0:
            raise SamplingConfigError(f"min_reply_words must be >= 0, got {config.min_reply_words}")
        return config

    @property
    def needs_forums(self) -> bool:
        """Whether the draw reads each forum's replies (so the forums are landed while sampling)."""
        return self.require_author_reply or self.reviews != "all"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def rank_key(seed: int, forum_id: str) -> str:
    """The forum's place in the seeded order: sha256 of the seed and the forum id."""
    return hashlib.sha256(f"{seed}\n{forum_id}".encode("utf-8")).hexdigest()


def ranked(forum_ids: Iterable[str], seed: int) -> list[str]:
    """The distinct forum ids in seeded rank order."""
    return sorted(set(forum_ids), key=lambda forum_id: rank_key(seed, forum_id))


def choose_papers(forum_ids: Iterable[str], seed: int, sample_size: int | None) -> list[str]:
    """The chosen forum ids in draw order (rank order); all of them, sorted, when sample_size is None."""
    if sample_size is not None and sample_size < 0:
        raise ValueError(f"sample_size must be >= 0, got {sample_size}")
    if sample_size is None:
        return sorted(set(forum_ids))
    return ranked(forum_ids, seed)[:sample_size]


def is_substantive_reply(text: str, min_words: int) -> bool:
    """A reply that answers: at least `min_words` words, and some sentence that is neither thanks nor a promise."""
    if len(text.split()) < min_words:
        return False
    sentences = [s for s in _SENTENCE.findall(text) if len(s.split()) >= 4]
    return any(not _PROMISE.search(s) and not _THANKS.match(s) for s in sentences)


def submission_skip_reason(submission: Mapping[str, Any], config: SamplingConfig) -> str | None:
    """SKIP_WITHDRAWN / SKIP_DESK_REJECTED when the options exclude the submission's current state, else None."""
    venueid = n.text_value(submission, "venueid") if isinstance(submission.get("content"), dict) else None
    outcome = n.outcome_from_venueid(venueid, n.text_value(submission, "venue")) if venueid else None
    if config.exclude_withdrawn and outcome == "withdrawn":
        return SKIP_WITHDRAWN
    if config.exclude_desk_rejected and outcome == "desk_rejected":
        return SKIP_DESK_REJECTED
    return None


@dataclass(frozen=True)
class ForumReplies:
    """The reviews of a forum that the authors answered directly and substantively, and the longest answer's."""

    replied_review_ids: list[str]
    paired_review_id: str | None


def direct_replies(notes: Sequence[Mapping[str, Any]], config: SamplingConfig) -> ForumReplies:
    """Reviews with a substantive author reply that answers them directly (`replyto` = the review); the pair
    the paper would take is the review whose such reply is longest (ties: the smaller review id)."""
    reviews = {note["id"] for note in notes if n.classify(note) == "review"}
    longest: dict[str, int] = {}
    for note in notes:
        if n.classify(note) not in ("comment", "rebuttal") or note.get("replyto") not in reviews:
            continue
        if n.signer(note).role != "authors":
            continue
        text = n.text_value(note, "rebuttal") or n.text_value(note, "comment") or ""
        if is_substantive_reply(text, config.min_reply_words):
            review_id = note["replyto"]
            longest[review_id] = max(longest.get(review_id, 0), len(text.split()))
    paired = min(longest, key=lambda review_id: (-longest[review_id], review_id)) if longest else None
    return ForumReplies(sorted(longest), paired)


def forum_replies(raw_notes: Sequence[Any], api_version: int, config: SamplingConfig) -> ForumReplies:
    """`direct_replies` over a forum's notes as received: malformed notes and older versions are left out here
    (the forum tables record them)."""
    superseded = n.superseded_positions(list(raw_notes))
    readable = []
    for position, note in enumerate(raw_notes):
        if position in superseded:
            continue
        try:
            readable.append(n.read_note(note, api_version))
        except n.MalformedNote:
            continue
    return direct_replies(readable, config)


@dataclass(frozen=True)
class DrawnPaper:
    forum_id: str
    rank_key: str
    replied_review_ids: list[str] | None  # None when the draw did not read the forum (no reply option set)
    paired_review_id: str | None


@dataclass(frozen=True)
class Draw:
    papers: list[DrawnPaper]
    skipped: dict[str, list[str]]  # reason -> forum ids passed over, in rank order


def draw_sample(submissions: Sequence[Mapping[str, Any]], seed: int, sample_size: int | None, config: SamplingConfig,
                forum_notes: Callable[[str], Sequence[Any] | None], api_version: int) -> Draw:
    """Walk the forums in rank order and keep those the options allow until `sample_size` are kept.

    `forum_notes(forum_id)` returns the forum's notes as received (landing it if need be), or None when it
    cannot be had; it is called only when an option reads replies, and only for forums the walk reaches.
    """
    by_id = {s["id"]: s for s in submissions if isinstance(s, Mapping) and isinstance(s.get("id"), str)}
    order = ranked(by_id, seed) if sample_size is not None else sorted(by_id)
    papers: list[DrawnPaper] = []
    skipped: dict[str, list[str]] = {}
    for forum_id in order:
        if sample_size is not None and len(papers) >= sample_size:
            break
        reason = submission_skip_reason(by_id[forum_id], config)
        replies = None
        if reason is None and config.needs_forums:
            notes = forum_notes(forum_id)
            if notes is None:
                reason = SKIP_UNREADABLE
            else:
                replies = forum_replies(notes, api_version, config)
                if config.require_author_reply and not replies.replied_review_ids:
                    reason = SKIP_NO_REPLY
        if reason is not None:
            skipped.setdefault(reason, []).append(forum_id)
            continue
        papers.append(DrawnPaper(forum_id, rank_key(seed, forum_id),
                                 replies.replied_review_ids if replies else None,
                                 replies.paired_review_id if replies else None))
    return Draw(papers, skipped)

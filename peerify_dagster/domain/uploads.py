"""What `peerify verify` is given, checked and written as the snapshot a crawl writes, and the verification result's
shape; no Dagster, no lake.

An upload is one paper (PDF bytes), its review(s) and optional author responses, or one forum of a built venue. It
becomes an ad-hoc venue of source `upload` whose snapshot folder has the crawler's layout (sample_venue/README.md):
`venue.json`, `submissions.json`, `forums/<paper>.json` (the notes as OpenReview API v2 returns them),
`pdfs/<paper>.pdf` and `pdfs/<paper>.json`. The venue key is content-addressed (`upload-<sha12>` of the PDF, the
reviews and the responses), so the same input is the same venue, built once and answered from the LLM ledger after.

Review files: `.json` is an OpenReview-like review note (content fields wrapped as `{"value": ...}` or not), a list
of them, or `{"reviews": [...], "responses": [...]}`; any other file is the text of one review. A text laid out as
OpenReview's fields (`Summary: ...` paragraphs, as `reviews.review_text` assembles them) keeps those fields, so the
extractor sees each section on its own as for a crawled review (the same calls, answered by the same ledger rows);
any other text is the review's one `review` field.

Limits, the same for `peerify verify` and the web form, checked before anything is registered: the upload limit
(`max_pdf_bytes`, PEERIFY_MAX_PDF_MB; the web app's request cap is `max_request_bytes` of it) and a review section's
length (`ReviewLimit`: what the configured extractor's context window leaves for it); a review with no letter or digit
is empty.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import PurePath
from typing import Any

from pypdf import PdfReader
from pypdf.errors import PdfReadError

from peerify_dagster.domain.citations.options import CitationOptions
from peerify_dagster.domain.claims import NON_TEXT_FIELDS, ReviewSection, section_prompt_text, split_review_text
from peerify_dagster.domain.forum_tables import REVIEW_TEXT_FIELDS
from peerify_dagster.domain.llm_stages import EXTRACTION, STAGES_BY_NAME
from peerify_dagster.domain.pdfs import PdfInfo, PdfProblem, inspect_pdf
from peerify_dagster.domain.predictions import CHARS_PER_TOKEN, estimated_tokens, prompt_window
from peerify_dagster.domain.prompts import load_prompt
from peerify_dagster.domain.venues import UPLOAD_KEY_PREFIX

DEFAULT_MAX_PDF_MB = 50
MAX_PDF_MB_ENV = "PEERIFY_MAX_PDF_MB"  # the one upload limit: the web app's request limit is derived from it
TEXT_FIELDS_BYTES = 4 * 2**20  # what the web form may carry beside the PDF: the review and the response
EXTRACTOR_ROLE = "extractor"
# The phases of a verification, and the progress percent at which each starts (the predictions share their span).
REGISTERING, PARSING, EXTRACTING, RETRIEVAL, PREDICTING, WRITING = (
    "registering", "parsing the manuscript", "extracting claims", "retrieval", "predicting", "writing the result")
PHASES = (REGISTERING, PARSING, EXTRACTING, RETRIEVAL, PREDICTING, WRITING)  # predicting: one per configuration
# `peerify verify --citations` adds one phase, the citation half, after the predictions (or alone, after
# registering, when no review is given); the web app's verify jobs run the review half only (PHASES).
CITING = "verifying citations"
PHASE_START = {REGISTERING: 0.0, PARSING: 5.0, EXTRACTING: 30.0, RETRIEVAL: 55.0, PREDICTING: 65.0, CITING: 80.0,
               WRITING: 95.0}
UPLOAD_VENUE_ROOT = "Peerify/Upload"  # an uploaded paper's venue id: `Peerify/Upload/<key>`
REVIEW_FIELD = "review"  # the one field of a review given as plain text without OpenReview's field labels
RESPONSE_FIELD = "comment"  # an author response's text, as in an OpenReview Official_Comment
REBUTTAL_FIELD = "rebuttal"  # a NeurIPS-style `-/Rebuttal` note's text
# Ids that may name a file or a note: an OpenReview forum or note id (letters, digits, `_`, `-`).
NOTE_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
# A letter or a digit: a text without one (spaces, NULs, control characters, punctuation) gives the extractor nothing.
_WORD_CHARACTER = re.compile(r"[^\W_]")
_REVIEWER = re.compile(r"^Reviewer_[A-Za-z0-9_]+$")
_SCHEMA_VERSION = 1  # part of every key: a change of what the snapshot holds makes new venues, never a mixed one
PAPER = "@paper"  # a response's replyto when it answers the paper itself (never a note id: NOTE_ID has no "@")


class UploadError(ValueError):
    """An input `peerify verify` refuses; the message is one line naming the file (or forum) and the reason."""


class UploadTooLarge(UploadError):
    """An input over the upload limit (the web app answers it 413)."""


@dataclass(frozen=True)
class UploadedText:
    """One review or author response: its content fields in order, and what its note said about itself."""

    fields: dict[str, Any]  # content fields, unwrapped: prose, and (reviews) scores as given
    note_id: str | None = None  # the note's own id, when it had a usable one
    replyto: str | None = None  # a response: the uploaded review it answers (its note id), PAPER, or None: unsaid
    reviewer: str | None = None  # a review: its signer's handle (`Reviewer_x`), when it had one


@dataclass(frozen=True)
class Upload:
    """One paper and what was said about it, as given."""

    pdf: bytes
    pdf_name: str
    reviews: tuple[UploadedText, ...]
    responses: tuple[UploadedText, ...] = ()

    def key(self, library: str | None = None) -> str:
        """The upload venue's key: the same PDF, reviews and responses are the same venue; a citation library
        (`--library`) is part of it, so the same paper resolved against another folder is another venue."""
        return content_key({"pdf_sha256": hashlib.sha256(self.pdf).hexdigest(),
                            "reviews": [asdict(text) for text in self.reviews],
                            "responses": [asdict(text) for text in self.responses]}, library)


def content_key(content: Mapping[str, Any], library: str | None = None) -> str:
    # Without a library the content is what it always was: the keys of uploads made before stay the same.
    extra = {"citation_library": library} if library is not None else {}
    canonical = json.dumps({"schema": _SCHEMA_VERSION, **content, **extra}, sort_keys=True, ensure_ascii=False)
    return UPLOAD_KEY_PREFIX + hashlib.sha256(canonical.encode()).hexdigest()[:12]


def citation_options(source: Mapping[str, Any] | None, library: str | None,
                     source_root: PurePath | None = None) -> dict[str, Any] | None:
    """The `citations:` entry of an upload venue: the source venue's options (a forum upload; None: a file upload,
    the defaults) with `library`, when given, as the folder searched first. A library is written as an absolute
    folder: the upload registry lives in the lake, not beside the registry whose folder (`source_root`) a source
    venue's relative library is read from. None when there is nothing to write."""
    entry = dict(source or {})
    if entry.get("library") and source_root is not None:
        entry["library"] = os.path.abspath(os.path.join(source_root, entry["library"]))
    if library is not None:
        entry["library"] = library
        if "resolve" in entry:  # a source venue that resolves without its library searches this one first
            entry["resolve"] = list(CitationOptions.from_mapping(entry).with_library(library).resolve)
    return entry or None


# -- reading what was given ------------------------------------------------------------------------------------------

def check_pdf(name: str, data: bytes, max_bytes: int) -> PdfInfo:
    """The PDF's facts, or UploadError when it is over the size limit, not a PDF (magic bytes, a whole file pypdf
    opens), encrypted or without a page: nothing runs on a file that cannot be parsed."""
    if len(data) > max_bytes:
        raise UploadTooLarge(over_upload_limit(f"{name}: {size_text(len(data))}", max_bytes))
    try:
        info = inspect_pdf(data, name)
    except PdfProblem as problem:
        raise UploadError(str(problem)) from None
    if info.encrypted:
        raise UploadError(f"{name}: the PDF is encrypted; its text cannot be read")
    if not info.pages:
        raise UploadError(f"{name}: the PDF has no pages")
    return info


def size_text(size: int) -> str:
    """A file size as people read it: MB from one megabyte on, else KB."""
    return f"{size / 2**20:.1f} MB" if size >= 2**20 else f"{max(1, round(size / 2**10))} KB"


def over_upload_limit(what: str, max_pdf_bytes: int) -> str:
    """The refusal of anything over the upload limit (a PDF, a request to the web app), worded once."""
    return f"{what} is over the upload limit of {size_text(max_pdf_bytes)} ({MAX_PDF_MB_ENV})"


def max_request_bytes(max_pdf_bytes: int) -> int:
    """The web app's limit on a request body: one PDF at the upload limit and the review and response beside it."""
    return max_pdf_bytes + TEXT_FIELDS_BYTES


def pdf_title(data: bytes) -> str | None:
    """The title the PDF's metadata gives, if any."""
    try:
        title = (PdfReader(io.BytesIO(data), strict=False).metadata or {}).get("/Title")
    except (PdfReadError, ValueError, KeyError, TypeError):
        return None
    return " ".join(str(title).split()) or None if title else None


def upload_title(pdf: bytes, pdf_name: str) -> str | None:
    """An uploaded paper's title: its PDF's metadata title, else its file name's stem."""
    return pdf_title(pdf) or PurePath(pdf_name).stem or None


def _text(name: str, data: bytes) -> str:
    """The text of a file, its line ends made `\n` (a browser sends a pasted text with `\r\n`)."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise UploadError(f"{name}: not UTF-8 text (byte {error.start})") from None
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _json(name: str, data: bytes) -> Any:
    try:
        return json.loads(_text(name, data))
    except json.JSONDecodeError as error:
        raise UploadError(f"{name}: unreadable JSON (line {error.lineno}, column {error.colno}: {error.msg})") from None


def review_fields(text: str) -> dict[str, str]:
    """A plain-text review's content fields: OpenReview's labelled sections when the text is laid out as they are
    assembled (`Summary: ...`), else the whole text as its one `review` field."""
    sections = split_review_text(text.strip(), REVIEW_TEXT_FIELDS)
    if len(sections) > 1 or (sections and sections[0].name != REVIEW_FIELD and sections[0].start > 0):
        return {section.name: section.text for section in sections}
    return {REVIEW_FIELD: text.strip()}


def _unwrapped(content: Mapping[str, Any]) -> dict[str, Any]:
    return {str(name): value.get("value") if isinstance(value, Mapping) else value for name, value in content.items()}


def _has_words(text: str) -> bool:
    return _WORD_CHARACTER.search(text) is not None


def _prose(fields: Mapping[str, Any]) -> bool:
    return any(isinstance(value, str) and _has_words(value) for name, value in fields.items()
               if name not in NON_TEXT_FIELDS)


def _note_text(where: str, note: Any, response: bool) -> UploadedText:
    """One OpenReview-like note (or, for a response, a bare string) as an UploadedText."""
    if response and isinstance(note, str):
        note = {"content": {RESPONSE_FIELD: note}}
    if not isinstance(note, Mapping) or not isinstance(note.get("content"), Mapping):
        raise UploadError(f"{where}: expected a note with a `content` mapping of its fields")
    fields = _unwrapped(note["content"])
    if not _prose(fields):
        raise UploadError(f"{where}: the {'response' if response else 'review'} is empty (no letter or digit in any "
                          "field)")
    note_id = note.get("id") if isinstance(note.get("id"), str) and NOTE_ID.match(note["id"]) else None
    signer = next((str(s).rsplit("/", 1)[-1] for s in note.get("signatures") or [] if isinstance(s, str)), None)
    replyto = note.get("replyto") if response and isinstance(note.get("replyto"), str) else None
    if replyto is not None and replyto == note.get("forum"):  # a reply to the forum: the paper, as a global rebuttal
        replyto = PAPER
    return UploadedText(fields=fields, note_id=note_id, replyto=replyto,
                        reviewer=signer if not response and signer and _REVIEWER.match(signer) else None)


def read_reviews(name: str, data: bytes) -> tuple[list[UploadedText], list[UploadedText]]:
    """The reviews (and, from a `{"reviews", "responses"}` file, the responses) of one review file."""
    if PurePath(name).suffix.lower() != ".json":
        text = _text(name, data)
        if not _has_words(text):
            raise UploadError(f"{name}: the review is empty (no letter or digit)")
        return [UploadedText(fields=review_fields(text))], []
    value = _json(name, data)
    responses: list[Any] = []
    if isinstance(value, Mapping) and "reviews" in value:
        reviews, responses = value.get("reviews"), value.get("responses") or []
        if not isinstance(reviews, list) or not isinstance(responses, list):
            raise UploadError(f"{name}: `reviews` and `responses` must be lists of notes")
    else:
        reviews = value if isinstance(value, list) else [value]
    if not reviews:
        raise UploadError(f"{name}: no review in the file")
    return ([_note_text(f"{name}: review {i + 1}", note, False) for i, note in enumerate(reviews)],
            [_note_text(f"{name}: response {i + 1}", note, True) for i, note in enumerate(responses)])


def read_responses(name: str, data: bytes) -> list[UploadedText]:
    """The author responses of one response file: JSON notes (one or a list), else the text of one response."""
    if PurePath(name).suffix.lower() != ".json":
        text = _text(name, data)
        if not _has_words(text):
            raise UploadError(f"{name}: the response is empty (no letter or digit)")
        return [UploadedText(fields={RESPONSE_FIELD: text.strip()})]
    value = _json(name, data)
    notes = value if isinstance(value, list) else [value]
    if not notes:
        raise UploadError(f"{name}: no response in the file")
    return [_note_text(f"{name}: response {i + 1}", note, True) for i, note in enumerate(notes)]


@dataclass(frozen=True)
class ReviewLimit:
    """How long one review section may be: the extractor reads each section in one call, so a section must fit the
    configured extractor's context window beside the prompt and the answer. Counted without the model's tokenizer
    (no served model exposes it) at CHARS_PER_TOKEN characters a token, as a manuscript's fit is: an over-count for
    English text, so a section that passes fits."""

    model: str
    max_tokens: int

    @property
    def max_characters(self) -> int:
        return self.max_tokens * CHARS_PER_TOKEN

    def describe(self) -> str:
        return (f"{self.max_tokens:,} tokens (about {self.max_characters:,} characters) per review section for "
                f"extractor {self.model}")


def extractor_review_limit(registry: Any) -> ReviewLimit:
    """The review limit of the `extractor` role's model(s) in a ModelRegistry (the strictest, when it has several)."""
    template = load_prompt(STAGES_BY_NAME[EXTRACTION].prompts[0])
    limits = []
    for name in registry.models_for_role(EXTRACTOR_ROLE):
        spec = registry.model(name)
        limits.append(ReviewLimit(name, prompt_window(spec.context_window, spec.decoding.get("max_tokens"),
                                                      template.system + template.user)))
    return min(limits, key=lambda limit: limit.max_tokens)


def check_review_length(name: str, reviews: Sequence[UploadedText], limit: ReviewLimit) -> None:
    """UploadError naming the review and its section when a section is longer than the extractor can read: its call
    would fail only after the manuscript is parsed, and the review give no claim."""
    for number, review in enumerate(reviews, start=1):
        for field_name, value in review.fields.items():
            if field_name in NON_TEXT_FIELDS or not isinstance(value, str):
                continue
            tokens = estimated_tokens(section_prompt_text(ReviewSection(field_name, value.strip(), None)))
            if tokens > limit.max_tokens:
                where = f"{name}: review {number}" if len(reviews) > 1 else name
                raise UploadError(f"{where}: section {field_name!r} is about {tokens:,} tokens ({len(value):,} "
                                  f"characters), over the limit of {limit.describe()}; shorten it, or split it into "
                                  "OpenReview's labelled sections (Summary:, Weaknesses:, ...), each read on its own")


def check_forum_id(forum_id: str) -> str:
    if not NOTE_ID.match(forum_id):
        raise UploadError(f"forum {forum_id!r}: not an OpenReview forum id (letters, digits, '_' and '-')")
    return forum_id


# -- the snapshot ----------------------------------------------------------------------------------------------------

def _minted_id(key: str, role: str, index: int) -> str:
    return hashlib.sha256(f"{key}:{role}:{index}".encode()).hexdigest()[:10]


def _note(venue_id: str, note_id: str, forum_id: str, replyto: str | None, number: int, invitation: str,
          signature: str, created_ms: int, content: Mapping[str, Any]) -> dict:
    """A note as OpenReview API v2 returns it (the fields the crawler lands)."""
    return {"id": note_id, "forum": forum_id, "replyto": replyto, "number": number,
            "invitations": [invitation], "domain": venue_id, "signatures": [signature], "readers": ["everyone"],
            "writers": [venue_id], "nonreaders": [], "cdate": created_ms, "tcdate": created_ms, "mdate": created_ms,
            "tmdate": created_ms, "odate": created_ms, "pdate": None,
            "content": {name: {"value": value} for name, value in content.items() if value is not None}}


def upload_snapshot(key: str, upload: Upload, created_ms: int, paper_id: str | None = None) -> dict[str, bytes]:
    """The snapshot files of an upload (path relative to the snapshot folder -> bytes): one forum holding the
    submission, the reviews (`Official_Review`, signed `Reviewer_<n>` unless the note named its reviewer) and the
    author responses (`Official_Comment`, or `Rebuttal` for a note with a `rebuttal` field, signed by the Authors,
    answering the review they name, the only review, or the paper). `created_ms`: when the upload was first
    registered, the notes' dates (one millisecond apart, so their order is the upload's). `paper_id`: the forum id
    the same PDF has in a built venue (its chunk ids, and so the verifier's prompts, are then that venue's); else one
    from the PDF's hash."""
    venue_id = f"{UPLOAD_VENUE_ROOT}/{key}"
    paper = "Submission1"
    forum_id = check_forum_id(paper_id) if paper_id else hashlib.sha256(upload.pdf).hexdigest()[:10]
    pdf_name = PurePath(upload.pdf_name).name
    submission = _note(venue_id, forum_id, forum_id, None, 1, f"{venue_id}/-/Submission", f"{venue_id}/{paper}/Authors",
                       created_ms, {"title": upload_title(upload.pdf, pdf_name) or forum_id,
                                    "pdf": f"/pdf/{hashlib.sha1(upload.pdf).hexdigest()}.pdf",  # noqa: S324 - a name
                                    "venueid": f"{venue_id}/Submission"})
    review_ids = _note_ids(key, "review", upload.reviews)
    notes = [submission]
    for number, (review, note_id) in enumerate(zip(upload.reviews, review_ids), start=1):
        reviewer = review.reviewer or f"Reviewer_{number}"
        notes.append(_note(venue_id, note_id, forum_id, forum_id, number, f"{venue_id}/{paper}/-/Official_Review",
                           f"{venue_id}/{paper}/{reviewer}", created_ms + number, review.fields))
    response_ids = _note_ids(key, "response", upload.responses, taken=set(review_ids) | {forum_id})
    by_given_id = {review.note_id: note_id for review, note_id in zip(upload.reviews, review_ids) if review.note_id}
    check_replies("the upload", upload.responses, upload.reviews)
    for number, (response, note_id) in enumerate(zip(upload.responses, response_ids), start=1):
        unsaid_single = response.replyto is None and len(review_ids) == 1
        replyto = by_given_id.get(response.replyto) or (review_ids[0] if unsaid_single else forum_id)
        kind = "Rebuttal" if REBUTTAL_FIELD in response.fields else "Official_Comment"
        notes.append(_note(venue_id, note_id, forum_id, replyto, number, f"{venue_id}/{paper}/-/{kind}",
                           f"{venue_id}/{paper}/Authors", created_ms + len(review_ids) + number, response.fields))
    venue = {"venue_id": venue_id, "api_version": 2, "created_by": "peerify verify", "created_at": created_ms}
    pdf_meta = {"forum_id": forum_id, "version": "latest", "edit_id": None, "source_url": f"upload:{pdf_name}",
                "fetched_at": created_ms}
    return _files(venue, submission, {"forum_id": forum_id, "fetched_at": created_ms, "notes": notes, "edits": []},
                  upload.pdf, pdf_meta)


def check_replies(name: str, responses: Sequence[UploadedText], reviews: Sequence[UploadedText]) -> None:
    """Every response of `name` that names the note it answers names one of the uploaded reviews (or the paper)."""
    known = [review.note_id for review in reviews if review.note_id]
    for number, response in enumerate(responses, start=1):
        if response.replyto not in (None, PAPER, *known):
            raise UploadError(f"{name}: response {number} answers note {response.replyto!r}, which is none of the "
                              f"uploaded reviews ({', '.join(known) or 'they name no ids'})")


def _note_ids(key: str, role: str, texts: Sequence[UploadedText], taken: Iterable[str] = ()) -> list[str]:
    """Each text's own note id where it has a unique one, else one minted from the key."""
    seen, ids = set(taken), []
    for index, text in enumerate(texts):
        note_id = text.note_id if text.note_id and text.note_id not in seen else _minted_id(key, role, index)
        seen.add(note_id)
        ids.append(note_id)
    return ids


def forum_key(venue_key: str, forum_id: str, forum_file: bytes, pdf: bytes, library: str | None = None) -> str:
    """The key of an upload made from one forum of a built venue: a re-crawled forum (new replies) is a new venue,
    and so is the forum resolved against another citation library."""
    return content_key({"venue": venue_key, "forum": forum_id, "forum_sha256": hashlib.sha256(forum_file).hexdigest(),
                        "pdf_sha256": hashlib.sha256(pdf).hexdigest()}, library)


def forum_snapshot(venue_json: Mapping[str, Any], submission: Mapping[str, Any], forum: Mapping[str, Any],
                   pdf: bytes, pdf_meta: Mapping[str, Any]) -> dict[str, bytes]:
    """The snapshot files of an upload made from one forum of a built venue: its venue record, submission, forum
    file (every note and edit as landed) and PDF, unchanged, so its paper, review and chunk ids, and with them its
    LLM calls, are the venue's own."""
    return _files(venue_json, submission, forum, pdf, pdf_meta)


def _files(venue: Mapping[str, Any], submission: Mapping[str, Any], forum: Mapping[str, Any], pdf: bytes,
           pdf_meta: Mapping[str, Any]) -> dict[str, bytes]:
    forum_id = forum["forum_id"]
    as_json = lambda value: json.dumps(value, ensure_ascii=False, indent=2).encode()  # noqa: E731
    return {"venue.json": as_json(venue),
            "submissions.json": as_json({"fetched_at": forum.get("fetched_at"), "notes": [submission]}),
            f"forums/{forum_id}.json": as_json(forum), f"pdfs/{forum_id}.pdf": pdf,
            f"pdfs/{forum_id}.json": as_json(pdf_meta)}


# -- the result ------------------------------------------------------------------------------------------------------

MAX_PASSAGES_SHOWN = 5  # a full-context verdict saw the whole manuscript: its first passages stand for it


@dataclass(frozen=True)
class Passage:
    chunk_id: str
    rank: int  # its place among the passages the verifier was shown
    page: int | None
    section: str
    text: str
    score: float | None  # the retriever's score (rag), None otherwise
    regions: tuple[dict, ...] = ()  # page boxes (page, x0, y0, x1, y1 in PDF points), once chunks carry them


@dataclass(frozen=True)
class Verdict:
    configuration: str
    verifier: str
    status: str  # predictions.status: ok, or why no call was made
    label: str | None
    justification: str | None
    call_id: str | None
    error: str | None
    passages: tuple[Passage, ...]

    @property
    def outcome(self) -> str:
        """The label, else why there is none: the status of a claim that got no call, or an unparsed answer."""
        return self.label or ("unparsed answer" if self.status == "ok" else self.status)


@dataclass(frozen=True)
class ClaimResult:
    claim_id: str
    review_id: str
    reviewer: str | None
    section: str | None
    claim_text: str
    claim_type: str | None  # factual / subjective (claim_types), None when the tagger's answer was unusable
    verdicts: tuple[Verdict, ...]


@dataclass(frozen=True)
class UnusedSource:
    """A review or response the extractor gave no claim for, and why (claims_dropped, level source)."""

    review_id: str | None
    source: str
    rule: str
    detail: str | None


@dataclass(frozen=True)
class ResultSummary:
    venue: str
    title: str
    origin: str  # what was verified: the files given, or the forum of a built venue
    pages: int | None
    configurations: tuple[str, ...]
    claims: tuple[ClaimResult, ...]
    unused: tuple[UnusedSource, ...] = ()
    problems: tuple[str, ...] = field(default_factory=tuple)  # the manuscript's parse errors, and the like

    def verdict_counts(self) -> dict[str, dict[str, int]]:
        """configuration -> label (or status, for claims with no label) -> claims."""
        counts: dict[str, dict[str, int]] = {name: {} for name in self.configurations}
        for claim in self.claims:
            for verdict in claim.verdicts:
                tally = counts.setdefault(verdict.configuration, {})
                tally[verdict.outcome] = tally.get(verdict.outcome, 0) + 1
        return counts

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ResultSummary:
        """The summary `as_dict` gave (result.json); KeyError or TypeError when the data is not one."""
        def verdict(row: Mapping[str, Any]) -> Verdict:
            return Verdict(**{**row, "passages": tuple(Passage(**{**passage, "regions": tuple(passage["regions"])})
                                                       for passage in row["passages"])})

        claims = tuple(ClaimResult(**{**claim, "verdicts": tuple(verdict(row) for row in claim["verdicts"])})
                       for claim in data["claims"])
        return cls(**{**data, "configurations": tuple(data["configurations"]), "claims": claims,
                      "unused": tuple(UnusedSource(**row) for row in data["unused"]),
                      "problems": tuple(data["problems"])})


def claim_results(claims: Iterable[Mapping[str, Any]], claim_types: Iterable[Mapping[str, Any]],
                  predictions: Iterable[Mapping[str, Any]], chunks: Iterable[Mapping[str, Any]],
                  retrieval_runs: Iterable[Mapping[str, Any]], justifications: Mapping[str, str | None],
                  configurations: Sequence[str]) -> list[ClaimResult]:
    """Each review claim (rows of review_claims, in claim order) with its type and, per configuration in the order
    given, each verifier's verdict and the passages it was shown (chunks: page, section path, text; retrieval_runs:
    the score); `justifications`: call id -> the verifier's reason."""
    kind = {row["claim_id"]: row["claim_type"] for row in claim_types}
    chunk_of = {row["chunk_id"]: row for row in chunks}
    score = {(row["claim_id"], row["retriever"], row["chunk_id"]): row["score"] for row in retrieval_runs
             if row.get("status") == "ok"}
    verdicts: dict[str, list[Verdict]] = {}
    order = {name: index for index, name in enumerate(configurations)}
    for row in sorted(predictions, key=lambda r: (order.get(r["configuration"], len(order)), r["verifier"])):
        passages = tuple(_passage(chunk_of[chunk_id], rank, score.get((row["claim_id"], row["retriever"], chunk_id)))
                         for rank, chunk_id in enumerate((row["evidence_chunk_ids"] or [])[:MAX_PASSAGES_SHOWN], 1)
                         if chunk_id in chunk_of)
        verdicts.setdefault(row["claim_id"], []).append(Verdict(
            configuration=row["configuration"], verifier=row["verifier"], status=row["status"], label=row["label"],
            justification=justifications.get(row["call_id"]) if row["call_id"] else None, call_id=row["call_id"],
            error=row["error"], passages=passages))
    return [ClaimResult(claim_id=row["claim_id"], review_id=row["review_id"], reviewer=row.get("reviewer_id"),
                        section=row.get("section"), claim_text=row["claim_text"], claim_type=kind.get(row["claim_id"]),
                        verdicts=tuple(verdicts.get(row["claim_id"], ())))
            for row in sorted(claims, key=lambda r: r["claim_order"])]


def _passage(chunk: Mapping[str, Any], rank: int, score: float | None) -> Passage:
    path = chunk.get("section_path") or []
    return Passage(chunk_id=chunk["chunk_id"], rank=rank, page=chunk.get("page"),
                   section=" > ".join(path) or (chunk.get("section") or ""), text=chunk["text"], score=score,
                   regions=tuple(chunk.get("regions") or ()))


def format_result(result: ResultSummary, passages_per_verdict: int = 3, width: int = 200) -> str:
    """The result as the terminal shows it: each claim, its verdict per configuration with the reason, and the top
    passages with page and section."""
    lines = [f"{result.title} ({result.origin}; {result.pages or '?'} pages): {len(result.claims)} claims, "
             f"venue {result.venue}"]
    lines += [f"  note: {problem}" for problem in result.problems]
    lines += [f"  no claims from {unused.source} {unused.review_id or ''}: {unused.rule}"
              + (f" ({unused.detail})" if unused.detail else "") for unused in result.unused]
    for number, claim in enumerate(result.claims, start=1):
        lines.append("")
        lines.append(f"{number}. [{claim.claim_type or 'untyped'}] {claim.claim_text}")
        lines.append(f"   review {claim.review_id}, {claim.section or 'review'}")
        for verdict in claim.verdicts:
            lines.append(f"   {verdict.configuration} / {verdict.verifier}: {verdict.outcome}"
                         + (f": {verdict.justification[:width]}" if verdict.justification else "")
                         + (f" ({verdict.error[:width]})" if verdict.error and not verdict.label else ""))
            for passage in verdict.passages[:passages_per_verdict]:
                score = f", score {passage.score:.3f}" if passage.score is not None else ""
                text = " ".join(passage.text.split())
                lines.append(f"      p.{passage.page or '?'} {passage.section}{score}: "
                             f"{text[:width]}{'...' if len(text) > width else ''}")
    return "\n".join(lines)


def forum_choices(built: Mapping[str, tuple[Iterable[Mapping[str, Any]], Iterable[Mapping[str, Any]]]]
                  ) -> list[tuple[str, str, str]]:
    """(venue, forum id, title) of every paper with a usable PDF in the built venues given (venue -> its submissions
    and manuscript_pdfs rows), by venue then title: the forums the verify page offers."""
    choices = []
    for venue, (submissions, pdfs) in sorted(built.items()):
        usable = {row["paper_id"] for row in pdfs if row["status"] == "ok"}
        choices += sorted(((venue, row["paper_id"], row["title"] or row["paper_id"]) for row in submissions
                           if row["paper_id"] in usable and NOTE_ID.match(row["paper_id"])), key=lambda c: c[2])
    return choices


def max_pdf_bytes(environ: Mapping[str, str] = os.environ) -> int:
    """The upload limit of a PDF: PEERIFY_MAX_PDF_MB, else 50 MB."""
    raw = environ.get(MAX_PDF_MB_ENV)
    try:
        megabytes = float(raw) if raw else DEFAULT_MAX_PDF_MB
    except ValueError:
        raise UploadError(f"{MAX_PDF_MB_ENV}={raw!r}: a number of megabytes") from None
    return int(megabytes * 2**20)


@dataclass(frozen=True)
class VerificationRequest:
    """What to verify: `upload` (a paper and its reviews), or `venue` + `forum` (one forum of a built venue); the
    configurations to predict with (none: configurations.yaml `upload_venues:`) and the LLM budget of the build.
    `citations`: the manuscript's citing sentences are checked against the papers they cite too (an upload may then
    have no review: the review half is skipped); `library`: the absolute folder of PDFs searched first for them."""

    upload: Upload | None = None
    venue: str | None = None
    forum: str | None = None
    configurations: tuple[str, ...] = ()
    max_cost_usd: float | None = None
    max_tokens: int | None = None
    citations: bool = False
    library: str | None = None

    @property
    def reviews_given(self) -> bool:
        """Whether the review half runs: a forum has its reviews, an upload those given."""
        return self.upload is None or bool(self.upload.reviews)

    def describe(self) -> str:
        cited = " and its citations" if self.citations else ""
        if self.upload is not None:
            name = PurePath(self.upload.pdf_name).name
            reviews, responses = len(self.upload.reviews), len(self.upload.responses)
            if not reviews:
                return f"{name}: its citations" if self.citations else name
            return (f"{name} with {reviews} review{'s' * (reviews != 1)}"
                    + (f" and {responses} author response{'s' * (responses != 1)}" if responses else "") + cited)
        return f"forum {self.forum} of venue {self.venue}{cited}"

"""Review claims: the review's sections, the rules that clean what the extractor wrote, claim ids and spans.

An extractor model turns each free-text section of a review (and each reviewer follow-up) into a list of
claims. Everything after the model is here, deterministic and testable by hand:

1. `review_sections` finds each free-text field of a review and its offset in the assembled `review_text`;
   `review_problem` says why a review yields nothing to extract (empty, scores only, not English).
2. `normalise_claim` cleans whitespace, quotes, list markers and a copied section label.
3. `drop_rule` names the first rule a claim breaks: empty or fragment, question, request, speculation,
   meta-commentary about the review, too long, longer than its source section.
4. `merge_duplicates` merges exact duplicates and near-duplicates (embedding cosine >= threshold) within a
   review; the first claim is kept and records what it absorbed.
5. `claim_id` hashes the review id and the claim's normalised text; `find_span` locates a claim in its
   source text, or says it was paraphrased.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

SOURCE_REVIEW = "review"
SOURCE_FOLLOWUP = "followup"
FOLLOWUP_SECTION = "followup"

# Why a whole review (or follow-up) yields no claim; one `claims_dropped` row each, claim_id null.
UNIT_EMPTY = "empty_review"
UNIT_RATING_ONLY = "rating_only"
UNIT_NON_ENGLISH = "non_english"
UNIT_UNUSABLE = "model_output_unusable"  # every extractor answer of the review was unusable
UNIT_NO_CLAIMS = "no_claims"  # the extractor found none, or every claim it wrote was dropped
UNIT_NOT_SAMPLED = "review_not_sampled"  # the venue's sampling pairs another review of the paper
UNIT_NO_REVIEW = "followup_without_review"  # a follow-up outside every review thread
UNIT_REASONS = (UNIT_EMPTY, UNIT_RATING_ONLY, UNIT_NON_ENGLISH, UNIT_UNUSABLE, UNIT_NO_CLAIMS, UNIT_NOT_SAMPLED,
                UNIT_NO_REVIEW)
# A section whose extractor answer was unusable (not JSON, not a list of strings, a failed call).
SECTION_UNUSABLE = "section_output_unusable"

# Claim-level rules, checked in this order; the first one that matches is recorded.
RULE_EMPTY = "empty"
RULE_FRAGMENT = "fragment"
RULE_QUESTION = "question"
RULE_REQUEST = "request"
RULE_SPECULATION = "speculation"
RULE_META = "meta_commentary"
RULE_TOO_LONG = "too_long"
RULE_LONGER_THAN_SOURCE = "longer_than_source"
RULE_DUPLICATE = "duplicate"
RULE_NEAR_DUPLICATE = "near_duplicate"
CLAIM_RULES = (RULE_EMPTY, RULE_FRAGMENT, RULE_QUESTION, RULE_REQUEST, RULE_SPECULATION, RULE_META, RULE_TOO_LONG,
               RULE_LONGER_THAN_SOURCE, RULE_DUPLICATE, RULE_NEAR_DUPLICATE)

MIN_CLAIM_WORDS = 3  # "Good paper." asserts nothing checkable
MAX_CLAIM_WORDS = 60  # the paper's extractor asks for 10-50 words; beyond 60 a "claim" carries several points
# Cosine of all-MiniLM-L6-v2 vectors at or above which two claims of one review say the same thing; calibrated
# on the published release (BENCHMARKS.md, "Claim extraction"): distinct reference claims of one review rarely
# reach it, rewordings of one claim mostly do.
NEAR_DUPLICATE_COSINE = 0.85

SPAN_EXACT = "exact"  # the claim occurs verbatim (whitespace, quotes and case aside)
SPAN_SENTENCE = "sentence"  # the claim restates one sentence of the source: the span is that sentence
SPAN_PARAPHRASED = "paraphrased"  # no single sentence of the source holds the claim's words: no span
SPAN_NO_SOURCE_OFFSET = "section_not_in_review_text"  # the section is not part of the assembled review text

# Review content fields that are never free text to extract from.
NON_TEXT_FIELDS = frozenset({"code_of_conduct", "flag_for_ethics_review", "title", "rating", "confidence",
                             "soundness", "presentation", "contribution", "first_time_reviewer"})

_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201b": "'", "\u2032": "'",
                         "\u201c": '"', "\u201d": '"', "\u201e": '"', "\u201f": '"', "\u2033": '"',
                         "\u00ab": '"', "\u00bb": '"'})
_LIST_MARKER = re.compile(r"^(?:[-*\u2022\u2013\u2014]+|\(?\d{1,2}[.)]|\(?[a-hA-H][.)]|\(?[ivxIVX]{1,4}[.)])\s+")
_SCORE_TEXT = re.compile(r"^\s*\d+(?:\.\d+)?\s*(?::|\s|$)")
_WORD = re.compile(r"[^\W_]+(?:['-][^\W_]+)*")

_REQUEST = re.compile(
    r"^(?:please|kindly|consider|i (?:would )?(?:suggest|recommend|encourage|request|ask)|i would like|i'd like"
    r"|we (?:suggest|recommend|encourage)|it would be (?:nice|good|great|helpful|better|interesting|useful|beneficial)"
    r"|the authors? (?:should|could|need to|must|may want to|might want to|are encouraged to|are asked to)"
    r"|(?:can|could|would|will) the authors?|(?:add|include|provide|clarify|discuss|explain|elaborate|justify"
    r"|report|show|cite|compare|release)\b)",
    re.IGNORECASE)
_SPECULATION = re.compile(
    r"^(?:maybe|perhaps|possibly|presumably|probably|i (?:guess|suspect|wonder|am not sure|'m not sure|doubt)"
    r"|it (?:might|may|could) (?:be|have)|one (?:might|may|could) (?:argue|think|expect))\b"
    r"|\bi (?:wonder|suspect|guess)\b",
    re.IGNORECASE)
_META = re.compile(
    r"\b(?:this review|my review|my (?:score|rating|confidence|assessment|evaluation|recommendation)"
    r"|i (?:will|would|can|could|might|may) (?:raise|increase|lower|decrease|keep|change|update|reconsider|adjust)"
    r"|i (?:am|'m) not (?:an expert|familiar|confident)|i did not (?:check|verify|read)|i have not (?:checked|verified)"
    r"|i have read the (?:rebuttal|response|other reviews)|the reviewers?\b|as a reviewer"
    # a "claim" about the claims or the sentence itself describes the extraction, not the paper
    r"|(?:the|this|that|these|first|second|third|each|a) (?:claims?|sentence)\b)",
    re.IGNORECASE)
# Function words that make up a large share of any English prose (non-English detection).
_ENGLISH_FUNCTION_WORDS = frozenset(
    "the a an of and to in is are was were be been this that these those it its for on with as by not no or but "
    "from at which can has have had do does paper method results we authors would should".split())


@dataclass(frozen=True)
class ReviewSection:
    """One free-text field of a review: its name, text, and where that text starts in the source's full text."""

    name: str
    text: str
    start: int | None  # offset in the assembled review text; None when the field is not part of it


@dataclass(frozen=True)
class Candidate:
    """One claim as the extractor wrote it, with where it came from."""

    review_id: str
    source: str  # SOURCE_REVIEW or SOURCE_FOLLOWUP
    source_id: str  # review id, or the follow-up's comment id
    section: str
    section_text: str
    section_start: int | None  # offset of section_text in the source's full text
    raw_text: str
    call_id: str | None

    @property
    def text(self) -> str:
        return normalise_claim(self.raw_text, self.section)


@dataclass
class KeptClaim:
    candidate: Candidate
    claim_id: str
    absorbed: list[str] = field(default_factory=list)  # ids of the duplicates merged into this claim


@dataclass(frozen=True)
class DroppedClaim:
    candidate: Candidate
    rule: str
    detail: str | None = None  # e.g. the absorbing claim's id and the cosine


# -- review sections ------------------------------------------------------------------------------

def _is_prose(value: object) -> bool:
    """A venue-specific field that holds text rather than a score ("3: good") or a yes/no flag."""
    return isinstance(value, str) and len(_WORD.findall(value)) >= MIN_CLAIM_WORDS and not _SCORE_TEXT.match(value)


def review_sections(review: Mapping, text_fields: Sequence[str]) -> list[ReviewSection]:
    """The review's free-text sections in the order of `review_text`, each with its offset there.

    `text_fields` names the review columns that hold prose (the forum tables' review-text fields); the venue's
    other fields (`extra_fields_json`) count too when they read as prose, not a score or a flag. Sections not
    found in `review_text` come last with offset None.
    """
    review_text = review.get("review_text") or ""
    extra = review.get("extra_fields_json")
    extra_fields = json.loads(extra) if isinstance(extra, str) and extra else {}
    values = {**{name: value for name, value in extra_fields.items() if name not in NON_TEXT_FIELDS
                 and _is_prose(value)},
              **{name: review.get(name) for name in text_fields if name not in NON_TEXT_FIELDS}}
    found: list[ReviewSection] = []
    for name, value in values.items():
        text = value.strip() if isinstance(value, str) else ""
        if not _WORD.search(text):
            continue
        position = review_text.find(text)
        found.append(ReviewSection(name, text, position if position >= 0 else None))
    return sorted(found, key=lambda s: (s.start is None, s.start or 0, s.name))


def split_review_text(review_text: str, text_fields: Sequence[str]) -> list[ReviewSection]:
    """Sections of an assembled review text ("Summary: ...\n\nWeaknesses: ..."), for reviews known only by that text
    (the published release): a paragraph opening with a known field's label starts a section; text before the
    first label, or a text with none, is one section named `review`."""
    labels = "|".join(re.escape(section_label(name)) for name in sorted(text_fields, key=len, reverse=True))
    starts = [(m.start(), m.end(), m.group(1)) for m in re.finditer(rf"(?:^|\n\n)({labels}):[ \t]*", review_text)]
    bounds = [(0, 0, "Review")] if not starts or review_text[:starts[0][0]].strip() else []
    bounds += starts
    sections = []
    for index, (_, body_start, label) in enumerate(bounds):
        end = bounds[index + 1][0] if index + 1 < len(bounds) else len(review_text)
        body = review_text[body_start:end]
        text = body.strip()
        if _WORD.search(text):
            name = label.lower().replace(" ", "_")
            sections.append(ReviewSection(name, text, body_start + len(body) - len(body.lstrip())))
    return sections


def looks_non_english(text: str) -> bool:
    """True for prose that is clearly not English: mostly non-Latin letters, or (20+ words) almost none of the
    commonest English function words. Short or mixed texts count as English: nothing is dropped on a guess."""
    letters = [c for c in text if c.isalpha()]
    if not letters:
        return False
    latin = sum(1 for c in letters if "LATIN" in unicodedata.name(c, ""))
    if latin / len(letters) < 0.5:
        return True
    words = [w.lower() for w in _WORD.findall(text)]
    if len(words) < 20:
        return False
    return sum(1 for w in words if w in _ENGLISH_FUNCTION_WORDS) / len(words) < 0.05


def review_problem(sections: Sequence[ReviewSection], has_scores: bool) -> str | None:
    """Why a review has nothing to extract from, or None: no text at all, only scores, or not English."""
    if not sections:
        return UNIT_RATING_ONLY if has_scores else UNIT_EMPTY
    if looks_non_english(" ".join(section.text for section in sections)):
        return UNIT_NON_ENGLISH
    return None


def section_prompt_text(section: ReviewSection) -> str:
    """What the extractor sees for one section: its name, then its text."""
    return f"{section_label(section.name)}: {section.text}"


def section_label(name: str) -> str:
    return name.replace("_", " ").strip().capitalize()


# -- normalisation and rules ----------------------------------------------------------------------

def normalise_claim(text: str, section: str | None = None) -> str:
    """Whitespace collapsed, curly quotes straightened, a list marker or a copied `<Section>:` label and
    wrapping quotes removed."""
    cleaned = " ".join(unicodedata.normalize("NFKC", text).translate(_QUOTES).split())
    for _ in range(3):  # "Weaknesses: - 1. ..." carries several prefixes
        before = cleaned
        if section and cleaned.lower().startswith(section_label(section).lower() + ":"):
            cleaned = cleaned[len(section) + 1:].lstrip()
        cleaned = _LIST_MARKER.sub("", cleaned)
        if len(cleaned) >= 2 and cleaned[0] == cleaned[-1] and cleaned[0] in "\"'":
            cleaned = cleaned[1:-1].strip()
        if cleaned == before:
            break
    return cleaned


def claim_key(text: str) -> str:
    """The form two claims share when they are the same claim: normalised, case-folded, end punctuation off."""
    return normalise_claim(text).casefold().rstrip(" .;:!")


def claim_id(review_id: str, text: str) -> str:
    """Stable id: sha256 of the review id and the claim's key, 16 hex digits."""
    return hashlib.sha256(f"{review_id}\n{claim_key(text)}".encode("utf-8")).hexdigest()[:16]


def drop_rule(text: str, source_text: str | None) -> str | None:
    """The first rule a normalised claim breaks (see CLAIM_RULES), or None when it is kept; without a
    `source_text` the claim is not compared with its source's length."""
    words = _WORD.findall(text)
    if not words:
        return RULE_EMPTY
    # Too short, or a phrase copied from the review rather than a sentence ("message passing layer"); a name
    # written in lower case with capitals inside ("kNN", "t-SNE") may open a sentence.
    if len(words) < MIN_CLAIM_WORDS or words[0].islower():
        return RULE_FRAGMENT
    if text.rstrip(" \"')").endswith("?"):
        return RULE_QUESTION
    if _REQUEST.match(text):
        return RULE_REQUEST
    if _SPECULATION.search(text):
        return RULE_SPECULATION
    if _META.search(text):
        return RULE_META
    if len(words) > MAX_CLAIM_WORDS:
        return RULE_TOO_LONG
    if source_text is not None and len(text) > len(" ".join(source_text.split())):
        return RULE_LONGER_THAN_SOURCE
    return None


def apply_rules(candidates: Iterable[Candidate]) -> tuple[list[Candidate], list[DroppedClaim]]:
    """Candidates that pass every rule, and the others with their rule."""
    kept, dropped = [], []
    for candidate in candidates:
        rule = drop_rule(candidate.text, candidate.section_text)
        if rule is None:
            kept.append(candidate)
        else:
            dropped.append(DroppedClaim(candidate, rule))
    return kept, dropped


def clean_claims(candidates: Sequence[Candidate], embed: Callable[[list[str]], np.ndarray],
                 threshold: float = NEAR_DUPLICATE_COSINE) -> tuple[list[KeptClaim], list[DroppedClaim]]:
    """The whole cleaning: rules first, then duplicates merged within each review (one `embed` call for every
    claim that passed the rules). Kept claims come in the candidates' order."""
    passed, dropped = apply_rules(candidates)
    if not passed:
        return [], dropped
    vectors = embed([candidate.text for candidate in passed])
    rows_by_review: dict[str, list[int]] = {}
    for index, candidate in enumerate(passed):
        rows_by_review.setdefault(candidate.review_id, []).append(index)
    kept: list[KeptClaim] = []
    for rows in rows_by_review.values():
        review_kept, review_dropped = merge_duplicates([passed[i] for i in rows], vectors[rows], threshold)
        kept += review_kept
        dropped += review_dropped
    order = {id(candidate): index for index, candidate in enumerate(candidates)}
    return sorted(kept, key=lambda claim: order[id(claim.candidate)]), dropped


def merge_duplicates(candidates: Sequence[Candidate], vectors: np.ndarray,
                     threshold: float = NEAR_DUPLICATE_COSINE) -> tuple[list[KeptClaim], list[DroppedClaim]]:
    """Within one review: the first of each group of exact or near-duplicate claims is kept and records the ids
    of those it absorbed; the others are dropped naming their absorber. `vectors` holds one L2-normalised
    embedding per candidate (same order)."""
    if len(candidates) != len(vectors):
        raise ValueError(f"{len(candidates)} candidates but {len(vectors)} vectors")
    kept: list[KeptClaim] = []
    kept_rows: list[int] = []
    dropped: list[DroppedClaim] = []
    by_key: dict[str, KeptClaim] = {}
    for index, candidate in enumerate(candidates):
        identity = claim_id(candidate.review_id, candidate.text)
        key = claim_key(candidate.text)
        if key in by_key:
            absorber = by_key[key]
            absorber.absorbed.append(identity)
            dropped.append(DroppedClaim(candidate, RULE_DUPLICATE, f"absorbed by {absorber.claim_id}"))
            continue
        if kept_rows:
            similarities = vectors[kept_rows] @ vectors[index]
            best = int(np.argmax(similarities))
            if float(similarities[best]) >= threshold:
                absorber = kept[best]
                absorber.absorbed.append(identity)
                detail = f"absorbed by {absorber.claim_id} (cosine {float(similarities[best]):.3f})"
                dropped.append(DroppedClaim(candidate, RULE_NEAR_DUPLICATE, detail))
                continue
        claim = KeptClaim(candidate, identity)
        kept.append(claim)
        kept_rows.append(index)
        by_key[key] = claim
    return kept, dropped


# -- spans ------------------------------------------------------------------------------------------

def _normalised_with_offsets(text: str) -> tuple[str, list[int]]:
    """`text` with quotes straightened, whitespace runs collapsed and case folded, plus each character's
    offset in `text` (case folding that changes the length is avoided by folding per character)."""
    out: list[str] = []
    offsets: list[int] = []
    in_space = False
    for position, char in enumerate(text.translate(_QUOTES)):
        if char.isspace():
            if not in_space and out:
                out.append(" ")
                offsets.append(position)
            in_space = True
            continue
        in_space = False
        folded = char.lower()
        out.append(folded if len(folded) == 1 else char)
        offsets.append(position)
    return "".join(out), offsets


def _sentence_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of each sentence or list item of a review section."""
    spans = []
    for match in re.finditer(r"[^\n.!?]+(?:[.!?]+(?=\s|$)|$)|[^\n]+", text):
        start, end = match.start(), match.end()
        piece = text[start:end]
        stripped_start = start + len(piece) - len(piece.lstrip())
        stripped_end = start + len(piece.rstrip())
        if stripped_end > stripped_start and _WORD.search(text[stripped_start:stripped_end]):
            marker = _LIST_MARKER.match(text[stripped_start:stripped_end])
            spans.append((stripped_start + (marker.end() if marker else 0), stripped_end))
    return spans


def _content_words(text: str) -> set[str]:
    return {w.lower() for w in _WORD.findall(text) if len(w) > 3}


def find_span(claim: str, section_text: str, section_start: int | None) -> tuple[int | None, int | None, str | None,
                                                                               str | None]:
    """(start, end, kind, reason): where the claim sits in the source's full text.

    `exact` when the claim (end punctuation aside) occurs in the section, whitespace, quotes and case aside;
    `sentence` when at least 80% of its content words lie in one sentence of the section (the span is that
    sentence); otherwise no span and the reason `paraphrased`. A section not found in the review text has no
    offsets to give (`section_not_in_review_text`).
    """
    if section_start is None:
        return None, None, None, SPAN_NO_SOURCE_OFFSET
    haystack, offsets = _normalised_with_offsets(section_text)
    needle, _ = _normalised_with_offsets(claim.rstrip(" ."))
    position = haystack.find(needle) if needle else -1
    if position >= 0:
        start = offsets[position]
        end = offsets[position + len(needle) - 1] + 1
        return section_start + start, section_start + end, SPAN_EXACT, None
    words = _content_words(claim)
    if words:
        best, best_share = None, 0.0
        for start, end in _sentence_spans(section_text):
            share = len(words & _content_words(section_text[start:end])) / len(words)
            if share > best_share:
                best, best_share = (start, end), share
        if best is not None and best_share >= 0.8:
            return section_start + best[0], section_start + best[1], SPAN_SENTENCE, None
    return None, None, None, SPAN_PARAPHRASED


def claims_from_answer(parsed: Mapping | None) -> list[str] | None:
    """The claim strings of an extractor answer, or None when the answer is not a list of strings."""
    claims = parsed.get("claims") if isinstance(parsed, Mapping) else None
    if not isinstance(claims, list) or not all(isinstance(item, str) for item in claims):
        return None
    return claims

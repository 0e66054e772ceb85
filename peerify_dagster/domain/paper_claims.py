"""PaperSourced claims: which manuscript paragraphs to write claims from, and where their gold evidence is.

The paper writes claims from body paragraphs only: a claim from the introduction, related work or the
conclusion restates what the paper says elsewhere (or what other papers did), and references, checklists and
appendices are not where a reader checks a claim. Paragraphs are drawn per paper by a seeded hash of their
text, so the draw does not change when other paragraphs are added or re-parsed. A drawn paragraph's gold
evidence is the chunk (or, for a paragraph split between chunks, every chunk) that holds its text.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence

from peerify_dagster.domain.chunking import split_sentences
from peerify_dagster.domain.claims import claim_key, drop_rule
from peerify_dagster.domain.layout.blocks import Block

# Why a drawn paper or paragraph yields no PaperSourced claim (one `paper_claims_dropped` row each); a written claim
# or rephrasing that breaks a review-claim rule is dropped as `claim_<rule>` / `rephrasing_<rule>`.
NO_CHUNKS = "no_chunks"
NO_BODY_PARAGRAPHS = "no_body_paragraphs"
GOLD_NOT_FOUND = "gold_chunk_not_found"
CLAIM_UNUSABLE = "claim_output_unusable"
CLAIM_NOT_GROUNDED = "claim_not_grounded"  # the paragraph lacks most of the claim's terms (see MIN_GROUNDING)
REPHRASE_UNUSABLE = "rephrase_output_unusable"
REPHRASE_IDENTICAL = "rephrasing_identical"
DUPLICATE_CLAIM = "duplicate_claim"

MIN_PARAGRAPH_WORDS = 25  # a shorter paragraph rarely holds a full, checkable statement
# Top-level and nested headings whose paragraphs are never drawn (numbering such as "2", "2.1", "A.", "IV." off).
EXCLUDED_SECTION = re.compile(
    r"^(?:abstract|introduction|related works?|prior work|previous work|literature review|background and related work"
    r"|related work and background|conclusions?|concluding remarks|conclusions? and (?:future work|outlook|discussion"
    r"|limitations)|discussion and conclusions?|summary and conclusions?|summary|references|bibliography"
    r"|acknowledge?ments?|funding|.*checklist|limitations|broader impacts?|impact statement|ethics statement"
    r"|reproducibility statement|appendix|appendices|supplementary materials?)$",
    re.IGNORECASE,
)
_NUMBERING = re.compile(r"^(?:[A-Z]|\d+|[IVXLC]+)(?:\.\d+)*\.?\s+|^(?:appendix\s+[A-Z0-9]+[.:]?\s*)", re.IGNORECASE)


def heading_name(heading: str) -> str:
    """A heading without its numbering: "2.1 Setup" -> "Setup", "B. Proofs" -> "Proofs"."""
    return _NUMBERING.sub("", heading.strip()).strip(" .:")


def excluded_section(section_path: Sequence[str]) -> str | None:
    """The heading of `section_path` that puts its paragraphs out of the draw, or None."""
    for heading in section_path:
        if EXCLUDED_SECTION.match(heading_name(heading)):
            return heading
    return None


def body_paragraphs(blocks: Iterable[Block], include_appendix: bool = False) -> list[Block]:
    """Paragraphs that may be drawn: body prose of at least MIN_PARAGRAPH_WORDS words, outside excluded
    sections, and outside the appendix unless `include_appendix`."""
    return [block for block in blocks
            if block.kind == "paragraph" and (include_appendix or not block.in_appendix)
            and excluded_section(block.section_path) is None and len(block.text.split()) >= MIN_PARAGRAPH_WORDS]


def _rank(seed: int, paper_id: str, text: str) -> str:
    return hashlib.sha256(f"{seed}\n{paper_id}\n{' '.join(text.split())}".encode("utf-8")).hexdigest()


def draw_paragraphs(paper_id: str, paragraphs: Sequence[Block], n: int, seed: int) -> list[Block]:
    """`n` paragraphs chosen by the seeded hash of their text (all of them when there are fewer), in draw order."""
    if n < 0:
        raise ValueError(f"paragraphs per paper must be >= 0, got {n}")
    return sorted(paragraphs, key=lambda block: _rank(seed, paper_id, block.text))[:n]


def _squash(text: str) -> str:
    return " ".join(text.split())


def gold_chunk_ids(paragraph: str, chunks: Sequence[tuple[str, str]]) -> list[str]:
    """Ids of the chunks holding the paragraph: the one containing all of it, else every chunk containing one
    of its sentences in full (a paragraph split between chunks); [] when no chunk holds it."""
    needle = _squash(paragraph)
    whole = [chunk_id for chunk_id, text in chunks if needle in _squash(text)]
    if whole:
        return whole
    sentences = [_squash(s) for s in split_sentences(paragraph) if len(s.split()) >= 4]
    return [chunk_id for chunk_id, text in chunks if any(sentence in _squash(text) for sentence in sentences)]


def paper_claim_id(paper_id: str, text: str) -> str:
    """Stable id of a PaperSourced claim: sha256 of the paper id and the claim's key, 16 hex digits, prefixed."""
    return "pc-" + hashlib.sha256(f"{paper_id}\n{claim_key(text)}".encode("utf-8")).hexdigest()[:16]


MIN_GROUNDING = 0.5  # share of a claim's content words its paragraph must contain


def _content_words(text: str) -> set[str]:
    return {word.lower() for word in re.findall(r"[^\W_]+(?:[.,'-][^\W_]+)*", text) if len(word) > 3 or word.isdigit()}


def grounding(claim: str, paragraph: str) -> float:
    """Share of the claim's content words (longer than three letters, or numbers) found in the paragraph: a cheap
    guard against a claim the paragraph cannot support, since a claim written from a paragraph reuses its terms."""
    words = _content_words(claim)
    return len(words & _content_words(paragraph)) / len(words) if words else 0.0


def written_claim_problem(original: str, paragraph: str) -> tuple[str, str] | None:
    """(reason, detail) when a claim written from a paragraph cannot be kept: it breaks a review-claim rule
    (`claim_<rule>`), or the paragraph lacks most of its terms."""
    if rule := drop_rule(original, paragraph):
        return f"claim_{rule}", original
    if (share := grounding(original, paragraph)) < MIN_GROUNDING:
        return CLAIM_NOT_GROUNDED, f"{share:.0%} of its content words are in the paragraph: {original}"
    return None


def rephrasing_problem(original: str, rephrased: str | None) -> tuple[str, str] | None:
    """(reason, detail) when a rephrasing cannot be kept: missing, breaking a rule (`rephrasing_<rule>`), or the
    original in the same words."""
    if rephrased is None:
        return REPHRASE_UNUSABLE, original
    if rule := drop_rule(rephrased, None):  # other words may take more of them than the paragraph did
        return f"rephrasing_{rule}", rephrased
    if claim_key(rephrased) == claim_key(original):
        return REPHRASE_IDENTICAL, original
    return None

"""Section-aware chunking of parsed manuscript blocks into retrieval units.

One chunk per paragraph, caption, table or appendix passage, as in the Peerify paper (its
chunker gives median/mean/p90 of 133/132/188 words). Paragraphs longer than `max_words` are
split between sentences into pieces near `target_words`; only a single sentence longer than
`max_words` is cut between words. Fragments shorter than `min_words` join a neighbour of the
same section when the result stays within `max_words`. Headings and the title are not chunks;
they give the section path. Chunk ids are stable: `{paper_id}:{order:04d}:{sha256(text)[:12]}`.
"""

from __future__ import annotations

import hashlib
import math
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from peerify_dagster.domain.layout import Block

CHUNK_KINDS = ("paragraph", "caption", "table", "appendix", "reference", "abstract")

# Tokens ending in a period that do not end a sentence.
_ABBREVIATIONS = {
    "e.g.", "i.e.", "al.", "etc.", "fig.", "figs.", "eq.", "eqs.", "sec.", "secs.", "tab.", "cf.", "vs.",
    "approx.", "resp.", "no.", "nos.", "ref.", "refs.", "ch.", "app.", "dr.", "prof.", "mr.", "ms.", "st.",
    "thm.", "lem.", "def.", "alg.", "ca.", "viz.", "w.r.t.", "incl.", "avg.", "max.", "min.", "std.",
}
_BOUNDARY = re.compile(r"[.!?][\"')\]]*\s+")


def split_sentences(text: str) -> list[str]:
    """Split prose into sentences without breaking at "e.g.", "et al.", "Fig. 3", "Sec. 3" or "3.5"."""
    sentences: list[str] = []
    start = 0
    for match in _BOUNDARY.finditer(text):
        end = match.end()
        following = text[end:end + 1]
        raw_token = text[:match.start() + 1].rsplit(None, 1)[-1].lstrip("(\"'[")
        token = raw_token.lower()
        if token in _ABBREVIATIONS and not (token == "etc." and not following.islower()):
            continue
        # A lone capital is an initial ("J. Smith"), not a sentence end.
        if re.fullmatch(r"[A-Z]\.", raw_token):
            continue
        if following and following.islower():
            continue
        sentences.append(text[start:end].strip())
        start = end
    tail = text[start:].strip()
    if tail:
        sentences.append(tail)
    return sentences


@dataclass(frozen=True)
class Chunk:
    """One retrieval unit of a manuscript."""

    chunk_id: str
    paper_id: str
    section_path: list[str]
    section: str
    kind: str
    page: int
    order: int
    word_count: int
    text: str
    text_sha256: str


@dataclass
class _Piece:
    kind: str
    text: str
    page: int
    section_path: list[str]

    @property
    def words(self) -> int:
        return len(self.text.split())


def _chunk_kind(block: Block) -> str:
    if block.kind == "paragraph" and block.in_appendix:
        return "appendix"
    return block.kind


def _pack(units: list[str], target_words: int, max_words: int, separator: str) -> list[str]:
    """Group consecutive units into pieces of about equal size near `target_words`."""
    total = sum(len(unit.split()) for unit in units)
    pieces_needed = max(1, math.ceil(total / target_words))
    goal = total / pieces_needed
    pieces: list[list[str]] = [[]]
    size = 0
    for unit in units:
        words = len(unit.split())
        if pieces[-1] and (size + words > max_words or size >= goal or size + words / 2 > goal):
            pieces.append([])
            size = 0
        pieces[-1].append(unit)
        size += words
    return [separator.join(piece) for piece in pieces]


def _split_long_sentence(sentence: str, target_words: int) -> list[str]:
    words = sentence.split()
    pieces_needed = math.ceil(len(words) / target_words)
    step = math.ceil(len(words) / pieces_needed)
    return [" ".join(words[index:index + step]) for index in range(0, len(words), step)]


def _split_block(block: Block, target_words: int, max_words: int) -> list[str]:
    if len(block.text.split()) <= max_words:
        return [block.text]
    if block.kind == "table":
        return _pack(block.text.split("\n"), target_words, max_words, "\n")
    units: list[str] = []
    for sentence in split_sentences(block.text):
        if len(sentence.split()) > max_words:
            units.extend(_split_long_sentence(sentence, target_words))
        else:
            units.append(sentence)
    return _pack(units, target_words, max_words, " ")


def _merge_fragments(pieces: list[_Piece], min_words: int, max_words: int) -> list[_Piece]:
    merged: list[_Piece] = []
    for piece in pieces:
        previous = merged[-1] if merged else None
        if (
            previous is not None
            and previous.section_path == piece.section_path
            and (piece.words < min_words or previous.words < min_words)
            and previous.words + piece.words <= max_words
        ):
            kind = previous.kind if previous.words >= piece.words else piece.kind
            merged[-1] = _Piece(kind, f"{previous.text} {piece.text}", previous.page, previous.section_path)
        else:
            merged.append(piece)
    return merged


def chunk_document(
    paper_id: str,
    blocks: Sequence[Block],
    target_words: int = 130,
    max_words: int = 220,
    min_words: int = 25,
) -> list[Chunk]:
    """Cut a parsed manuscript's blocks into chunks in reading order."""
    if not 0 < min_words <= target_words <= max_words:
        raise ValueError(f"need 0 < min_words <= target_words <= max_words, got {min_words}, {target_words}, {max_words}")
    pieces = [
        _Piece(_chunk_kind(block), text, block.page, list(block.section_path))
        for block in sorted(blocks, key=lambda item: item.order)
        if block.kind not in ("heading", "title") and block.text.strip()
        for text in _split_block(block, target_words, max_words)
    ]
    chunks = []
    for order, piece in enumerate(_merge_fragments(pieces, min_words, max_words)):
        digest = hashlib.sha256(piece.text.encode("utf-8")).hexdigest()
        chunks.append(
            Chunk(
                chunk_id=f"{paper_id}:{order:04d}:{digest[:12]}",
                paper_id=paper_id,
                section_path=piece.section_path,
                section=piece.section_path[-1] if piece.section_path else "",
                kind=piece.kind,
                page=piece.page,
                order=order,
                word_count=piece.words,
                text=piece.text,
                text_sha256=digest,
            )
        )
    return chunks


def _percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    position = (len(ordered) - 1) * fraction
    lower, upper = math.floor(position), math.ceil(position)
    return ordered[lower] + (ordered[upper] - ordered[lower]) * (position - lower)


def chunk_stats(chunks: Sequence[Chunk], max_words: int = 220) -> dict[str, float | int]:
    """Size distribution of chunks; runaway chunks exceed 1.5 x `max_words`."""
    sizes = [chunk.word_count for chunk in chunks]
    if not sizes:
        return {"n_chunks": 0, "median_words": 0.0, "mean_words": 0.0, "p90_words": 0.0, "n_empty": 0, "n_runaway": 0}
    return {
        "n_chunks": len(sizes),
        "median_words": float(statistics.median(sizes)),
        "mean_words": float(statistics.fmean(sizes)),
        "p90_words": float(_percentile(sizes, 0.9)),
        "n_empty": sum(1 for chunk in chunks if not chunk.text.strip()),
        "n_runaway": sum(1 for size in sizes if size > max_words * 1.5),
    }

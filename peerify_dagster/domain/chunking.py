"""Section-aware chunking of parsed manuscript blocks into retrieval units.

Two strategies, chosen per venue (`chunking:` in the venue registry, see `ChunkingConfig`):

* `pack` (default), the Peerify paper's reference chunker: consecutive blocks of one section are
  packed greedily until the next would pass `max_tokens` (256 WordPiece tokens, what
  all-MiniLM-L6-v2 embeds without truncation). A chunk never crosses a section boundary, and a
  caption never joins prose: a figure caption is a chunk of its own, followed by the text drawn in
  its figure; a table shares a chunk only with its own caption.
* `paragraph`: one chunk per paragraph / caption / table, fragments under `min_words` merged with
  a neighbour of the same section (the project's earlier rule; medians near 80 words).

With either, a block longer than `max_tokens` is split between sentences into pieces of about
equal size; only a single sentence longer than the limit is cut between words. The section path
is carried into each chunk's text as its first line ("2 Method > 2.1 Setup"), since retrievers
index the text and a heading is strong lexical evidence. Reference-list and paper-checklist
blocks are left out by default (`exclude_kinds`): a checklist's "[Yes] we report error bars"
answers are distractors, and reference entries crowd out evidence. Chunk ids are stable:
`{paper_id}:{order:04d}:{sha256(text)[:12]}`.

Each chunk keeps where its text lies (`regions`): the union of its blocks' regions, boxes of one page and column
that touch merged into one. A part of a block split into several chunks keeps the boxes of the lines its text
came from, when the parser placed the block line by line (the model-free PDF path); otherwise, the whole block's.
"""

from __future__ import annotations

import hashlib
import math
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import polars as pl

from peerify_dagster.domain.layout.blocks import Block
from peerify_dagster.domain.layout.regions import Region, merge_regions, regions_of_lines, text_offset
from peerify_dagster.domain.options import checked_options

# A box on a page in points from its top-left corner (`peerify_dagster.domain.layout.regions.Region`).
REGION_TYPE = pl.Struct({"page": pl.Int64, "x0": pl.Float64, "y0": pl.Float64, "x1": pl.Float64, "y1": pl.Float64})
# chunks: the chunk table every later stage reads.
CHUNK_SCHEMA = {
    "venue": pl.String, "chunk_id": pl.String, "paper_id": pl.String, "section_path": pl.List(pl.String),
    "section": pl.String, "kind": pl.String, "page": pl.Int64, "order": pl.Int64, "word_count": pl.Int64,
    "text": pl.String, "text_sha256": pl.String, "regions": pl.List(REGION_TYPE),
}

CHUNK_KINDS = ("paragraph", "caption", "table", "figure", "appendix", "reference", "abstract", "checklist")
STRATEGIES = ("pack", "paragraph")
# Blocks that are structure or front matter, never retrieval units.
_NOT_CHUNKED = {"heading", "title", "authors", "front_matter"}
# Kinds that never share a chunk with a different kind: a caption or table in prose would be a wrong sentence.
_STANDALONE = {"caption", "table"}

# Tokens ending in a period that do not end a sentence.
_ABBREVIATIONS = {
    "e.g.", "i.e.", "al.", "etc.", "fig.", "figs.", "eq.", "eqs.", "sec.", "secs.", "tab.", "cf.", "vs.",
    "approx.", "resp.", "no.", "nos.", "ref.", "refs.", "ch.", "app.", "dr.", "prof.", "mr.", "ms.", "st.",
    "thm.", "lem.", "def.", "alg.", "ca.", "viz.", "w.r.t.", "incl.", "avg.", "max.", "min.", "std.",
}
_BOUNDARY = re.compile(r"[.!?][\"')\]]*\s+")
_TOKEN_PIECES = re.compile(r"[^\W\d_]+|\d+|[^\w\s]")


class ChunkingConfigError(ValueError):
    """A chunking configuration that cannot be used; the message names the option."""


@dataclass(frozen=True)
class ChunkingConfig:
    """How manuscripts are cut into retrieval units (see the module docstring)."""

    strategy: str = "pack"
    max_tokens: int = 256
    min_words: int = 25  # `paragraph` strategy: fragments shorter than this merge with a neighbour
    heading_in_text: bool = True
    exclude_kinds: tuple[str, ...] = ("reference", "checklist")

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ChunkingConfigError(f"strategy must be one of {STRATEGIES}, got {self.strategy!r}")
        if not isinstance(self.heading_in_text, bool):
            raise ChunkingConfigError(f"heading_in_text must be true or false, got {self.heading_in_text!r}")
        if not isinstance(self.max_tokens, int) or isinstance(self.max_tokens, bool) or self.max_tokens < 32:
            raise ChunkingConfigError(f"max_tokens must be an integer >= 32, got {self.max_tokens!r}")
        if not isinstance(self.min_words, int) or self.min_words < 0:
            raise ChunkingConfigError(f"min_words must be a non-negative integer, got {self.min_words!r}")
        unknown = set(self.exclude_kinds) - set(CHUNK_KINDS)
        if unknown:
            raise ChunkingConfigError(f"exclude_kinds: unknown kind(s) {sorted(unknown)}; known: {CHUNK_KINDS}")

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any] | None) -> ChunkingConfig:
        """Build from a registry entry such as `{strategy: pack, max_tokens: 200, exclude_kinds: [checklist]}`."""
        options = checked_options(cls, options, ChunkingConfigError)
        if "exclude_kinds" in options:
            if not isinstance(options["exclude_kinds"], (list, tuple)):
                raise ChunkingConfigError("exclude_kinds must be a list of chunk kinds")
            options["exclude_kinds"] = tuple(options["exclude_kinds"])
        return cls(**options)


def estimate_tokens(text: str) -> int:
    """WordPiece tokens of `text`, estimated without a vocabulary: one per punctuation mark and number, one per
    word of up to six letters and one more per further six letters (within ~5% of all-MiniLM-L6-v2's tokenizer
    on scientific prose)."""
    count = 0
    for piece in _TOKEN_PIECES.findall(text):
        count += 1 + max(0, len(piece) - 3) // 6 if piece.isalpha() and len(piece) > 6 else 1
    return count


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
    regions: list[Region] = field(default_factory=list)

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Chunk:
        """A chunk as the lake stores it (a row of `chunks`)."""
        values = {item.name: record[item.name] for item in fields(cls) if item.name != "regions"}
        return cls(**values, regions=[Region.from_record(region) for region in record.get("regions") or ()])


@dataclass
class _Piece:
    kind: str
    text: str
    page: int
    section_path: list[str]
    in_appendix: bool
    regions: list[Region]
    captioned: bool = False  # a table holding its caption, or a caption holding its figure's text

    @property
    def words(self) -> int:
        return len(self.text.split())

    @property
    def tokens(self) -> int:
        return estimate_tokens(self.text)


def _chunk_kind(block: Block) -> str:
    if block.kind == "paragraph" and block.in_appendix:
        return "appendix"
    return block.kind


def _pack_evenly(units: list[str], budget: int, separator: str) -> list[str]:
    """Group consecutive units into the fewest pieces within `budget` tokens, of about equal size."""
    sizes = [estimate_tokens(unit) for unit in units]
    pieces_needed = max(1, math.ceil(sum(sizes) / budget))
    while True:
        pieces: list[list[str]] = [[]]
        size, remaining = 0, sum(sizes)
        goal = remaining / pieces_needed
        for unit, unit_size in zip(units, sizes):
            if pieces[-1] and (size + unit_size > budget or size + unit_size / 2 > goal):
                # Re-aim at an equal share of what is left, so the last piece is not a stub.
                remaining -= size
                goal = remaining / max(pieces_needed - len(pieces), 1)
                pieces.append([])
                size = 0
            pieces[-1].append(unit)
            size += unit_size
        if len(pieces) <= pieces_needed or pieces_needed >= len(units):
            return [separator.join(piece) for piece in pieces]
        pieces_needed += 1


def _split_long_sentence(sentence: str, budget: int) -> list[str]:
    words = sentence.split()
    pieces_needed = math.ceil(estimate_tokens(sentence) / budget)
    while True:
        step = math.ceil(len(words) / pieces_needed)
        pieces = [" ".join(words[index:index + step]) for index in range(0, len(words), step)]
        if all(estimate_tokens(piece) <= budget for piece in pieces) or step == 1:
            return pieces
        pieces_needed += 1


def _split_block(text: str, kind: str, budget: int) -> list[str]:
    if estimate_tokens(text) <= budget:
        return [text]
    if kind == "table":
        rows = [row for line in text.split("\n") for row in _split_long_sentence(line, budget)]
        return _pack_evenly(rows, budget, "\n")
    units: list[str] = []
    for sentence in split_sentences(text):
        units.extend(_split_long_sentence(sentence, budget) if estimate_tokens(sentence) > budget else [sentence])
    return _pack_evenly(units, budget, " ")


def _part_regions(block: Block, parts: Sequence[str]) -> list[list[Region]]:
    """Where each part of a block lies: the lines its text came from, when the block was placed line by line and
    the parts hold exactly its text (in order, whatever the spacing); otherwise the whole block's regions."""
    if len(parts) == 1 or not block.line_regions:
        return [block.regions] * len(parts)
    lengths = [text_offset(part) for part in parts]
    if sum(lengths) != text_offset(block.text):
        return [block.regions] * len(parts)
    placed, start = [], 0
    for length in lengths:
        placed.append(regions_of_lines(block.line_regions, start, start + length) or block.regions)
        start += length
    return placed


def _heading_line(section_path: Sequence[str]) -> str:
    return " > ".join(section_path)


def _is_table_caption(piece: _Piece) -> bool:
    return piece.kind == "caption" and bool(re.match(r"(?:Table|Tab\.)\s*\S", piece.text))


def _joined_kind(previous: _Piece, piece: _Piece) -> str | None:
    """The kind of previous + piece as one chunk, or None when they must stay apart."""
    if previous.section_path != piece.section_path or previous.in_appendix != piece.in_appendix:
        return None
    # A table and its own caption are one float; a caption never joins prose.
    table_and_caption = {previous.kind, piece.kind} == {"table", "caption"} and not previous.captioned \
        and not piece.captioned and (_is_table_caption(previous) or _is_table_caption(piece))
    if table_and_caption:
        return "table"
    if previous.kind in _STANDALONE or piece.kind in _STANDALONE:
        return None
    return previous.kind


def _attach_figure_text(pieces: list[_Piece], budget_of) -> list[_Piece]:
    """Text drawn inside a figure (labels, legends, screenshots) joins the figure's caption, below the caption's
    own words; figure text with no caption next to it, or too long to share its chunk, is no retrieval unit."""
    attached: list[_Piece] = []
    waiting: _Piece | None = None  # figure text whose caption comes next (figures are captioned below)

    def joins(figure: _Piece, caption: _Piece) -> bool:
        return (caption.kind == "caption" and not _is_table_caption(caption)
                and caption.section_path == figure.section_path
                and estimate_tokens(f"{caption.text}\n{figure.text}") <= budget_of(caption))

    for piece in pieces:
        if piece.kind == "figure":
            previous = attached[-1] if attached else None
            if (previous is not None and previous.kind == "caption" and not previous.captioned
                    and joins(piece, previous)):
                previous.text, previous.captioned = f"{previous.text}\n{piece.text}", True
                previous.regions = merge_regions([*previous.regions, *piece.regions])
            else:
                waiting = piece
            continue
        if waiting is not None and joins(waiting, piece):
            piece = _Piece(piece.kind, f"{piece.text}\n{waiting.text}", piece.page, piece.section_path,
                           piece.in_appendix, merge_regions([*piece.regions, *waiting.regions]), captioned=True)
        waiting = None
        attached.append(piece)
    return attached


def _pack_greedily(pieces: list[_Piece], budget_of) -> list[_Piece]:
    packed: list[_Piece] = []
    for piece in pieces:
        previous = packed[-1] if packed else None
        kind = _joined_kind(previous, piece) if previous is not None else None
        if kind is not None and estimate_tokens(f"{previous.text} {piece.text}") <= budget_of(piece):
            separator = "\n" if kind == "table" else " "
            packed[-1] = _Piece(kind, f"{previous.text}{separator}{piece.text}", previous.page, previous.section_path,
                                previous.in_appendix, merge_regions([*previous.regions, *piece.regions]),
                                captioned=kind == "table")
        else:
            packed.append(piece)
    return packed


def _merge_fragments(pieces: list[_Piece], min_words: int, budget_of) -> list[_Piece]:
    merged: list[_Piece] = []
    for piece in pieces:
        previous = merged[-1] if merged else None
        if (
            previous is not None
            and previous.section_path == piece.section_path
            and (piece.words < min_words or previous.words < min_words)
            and estimate_tokens(f"{previous.text} {piece.text}") <= budget_of(piece)
        ):
            kind = previous.kind if previous.words >= piece.words else piece.kind
            merged[-1] = _Piece(kind, f"{previous.text} {piece.text}", previous.page, previous.section_path,
                                previous.in_appendix, merge_regions([*previous.regions, *piece.regions]))
        else:
            merged.append(piece)
    return merged


def chunk_document(paper_id: str, blocks: Sequence[Block], config: ChunkingConfig = ChunkingConfig()) -> list[Chunk]:
    """Cut a parsed manuscript's blocks into chunks in reading order."""

    def budget_of(piece: _Piece) -> int:
        # The heading line shares the token budget, so the whole chunk text fits the embedder.
        heading = estimate_tokens(_heading_line(piece.section_path)) if config.heading_in_text else 0
        return max(config.max_tokens - heading, config.max_tokens // 2)

    pieces: list[_Piece] = []
    for block in sorted(blocks, key=lambda item: item.order):
        kind = _chunk_kind(block)
        if block.kind in _NOT_CHUNKED or kind in config.exclude_kinds or block.kind in config.exclude_kinds:
            continue
        if not block.text.strip():
            continue
        template = _Piece(kind, "", block.page, list(block.section_path), block.in_appendix, [])
        texts = [block.text] if kind == "figure" else _split_block(block.text, kind, budget_of(template))
        for text, regions in zip(texts, _part_regions(block, texts)):
            pieces.append(_Piece(kind, text, block.page, list(block.section_path), block.in_appendix,
                                 merge_regions(regions)))
    pieces = _attach_figure_text(pieces, budget_of)
    if config.strategy == "pack":
        pieces = _pack_greedily(pieces, budget_of)
    else:
        pieces = _merge_fragments(pieces, config.min_words, budget_of)
    chunks = []
    for order, piece in enumerate(pieces):
        heading = _heading_line(piece.section_path)
        text = f"{heading}\n{piece.text}" if config.heading_in_text and heading else piece.text
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
        chunks.append(
            Chunk(
                chunk_id=f"{paper_id}:{order:04d}:{digest[:12]}",
                paper_id=paper_id,
                section_path=piece.section_path,
                section=piece.section_path[-1] if piece.section_path else "",
                kind=piece.kind,
                page=piece.page,
                order=order,
                word_count=len(text.split()),
                text=text,
                text_sha256=digest,
                regions=piece.regions,
            )
        )
    return chunks


def _percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    position = (len(ordered) - 1) * fraction
    lower, upper = math.floor(position), math.ceil(position)
    return ordered[lower] + (ordered[upper] - ordered[lower]) * (position - lower)


def chunk_stats(chunks: Sequence[Chunk], max_tokens: int = ChunkingConfig.max_tokens) -> dict[str, float | int]:
    """Size distribution of chunks; runaway chunks exceed 1.5 x `max_tokens` (estimated tokens)."""
    sizes = [chunk.word_count for chunk in chunks]
    if not sizes:
        return {"n_chunks": 0, "median_words": 0.0, "mean_words": 0.0, "p90_words": 0.0, "n_empty": 0, "n_runaway": 0}
    return {
        "n_chunks": len(sizes),
        "median_words": float(statistics.median(sizes)),
        "mean_words": float(statistics.fmean(sizes)),
        "p90_words": float(_percentile(sizes, 0.9)),
        "n_empty": sum(1 for chunk in chunks if not chunk.text.strip()),
        "n_runaway": sum(1 for chunk in chunks if is_runaway(chunk, max_tokens)),
    }


RUNAWAY_FACTOR = 1.5  # a chunk beyond this many times max_tokens means a packing bug, not a long sentence


def is_runaway(chunk: Chunk, max_tokens: int) -> bool:
    return estimate_tokens(chunk.text) > RUNAWAY_FACTOR * max_tokens

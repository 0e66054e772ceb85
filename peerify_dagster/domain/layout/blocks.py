"""Blocks, the logical units of a manuscript, and the assembly that every input format shares.

`assemble_blocks` serves the parsers that already know the element kinds (Docling's HTML/Markdown backends
and its layout model) as well as the layout rules: it assigns section paths and the
abstract/reference/appendix/checklist roles the same way for every input format. The appendix starts at an
appendix heading after the main text, or at a lettered section after the references or after a section that
closes the main text (Conclusion, Acknowledgments, ...), never mid-paper; the references section never
counts as appendix; a paper checklist is marked so that chunking can leave it out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from peerify_dagster.domain.code_versions import package_version
from peerify_dagster.domain.layout.floats import is_caption
from peerify_dagster.domain.layout.headings import closes_main_text, describe_heading, looks_like_plain_heading
from peerify_dagster.domain.layout.lines import (
    SENTENCE_END,
    SUPERSCRIPT_FOOTNOTE,
    Vocabulary,
    join_lines,
    normalise_whitespace,
)
from peerify_dagster.domain.layout.regions import LineRegion, Region, text_offset

# The layout rules' identity in a parse's `parser` column: derived from this package's code, so any change of a
# rule names a new one (the parsing assets' code versions follow the same code).
LAYOUT_VERSION = package_version(__package__)

# "front_matter": a journal's notices (licence, dates, correspondence, DOI), wherever the page sets them (a first
# page's foot, the last page), never retrieval units.
BLOCK_KINDS = (
    "title", "authors", "front_matter", "abstract", "heading", "paragraph", "caption", "table", "figure", "reference",
    "checklist",
)

# How a notice block opens; a body paragraph does not open so ("Copyright law ...", "Received signals ...").
_FRONT_MATTER_NOTICE = re.compile(
    r"^(?:Copyright\s*(?:©|\(c\)|\d{4})|©|\(c\)\s*\d{4}|This is an open[- ]access article"
    r"|\*?\s*Correspond(?:ence|ing author)\b|Academic Editor\s*:|DOI\s*:?\s*10\.\d|https?://(?:dx\.)?doi\.org/"
    r"|(?:Received|Accepted|Revised|Published(?: online)?)\s*:?\s*"
    r"(?:\d|Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec))",
    re.IGNORECASE,
)


@dataclass
class Block:
    """A logical unit of the manuscript in reading order.

    `page` is the page it starts on; `regions` are where it lies (one box per page and column it runs through;
    empty for a format without positions); `line_regions` are its lines, when the parser read lines, so that a
    part of the block can be placed too (see `peerify_dagster.domain.layout.regions`).
    """

    kind: str
    text: str
    page: int
    section_path: list[str]
    in_appendix: bool
    order: int
    regions: list[Region] = field(default_factory=list)
    line_regions: list[LineRegion] = field(default_factory=list)

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Block:
        """A block as the lake stores it (`parsed_manuscripts.blocks`)."""
        return cls(
            record["kind"], record["text"], record["page"], list(record["section_path"]), record["in_appendix"],
            record["order"], [Region.from_record(region) for region in record.get("regions") or ()],
            [LineRegion.from_record(line) for line in record.get("line_regions") or ()],
        )


@dataclass(frozen=True)
class LayoutElement:
    """A typed element before section assignment; `level_hint` is a heading level a parser knew; `regions` and
    `line_regions` as in `Block`."""

    # One of BLOCK_KINDS except "checklist" (from the section) and "front_matter" (assembly); "reference" only for
    # the entries of a list no heading names (a references section makes its paragraphs entries).
    kind: str
    text: str
    page: int
    level_hint: int | None = None
    regions: tuple[Region, ...] = ()
    line_regions: tuple[LineRegion, ...] = ()
    # The main text starts here without a heading (an introduction printed straight after the abstract): the
    # abstract, labelled or not, ends at this paragraph.
    opens_unheaded_body: bool = False


# --- Assembly shared by every input format ---------------------------------------------------


@dataclass
class _SectionState:
    path: list[str] = field(default_factory=list)
    role: str = "front"
    in_appendix: bool = False
    seen_sections: bool = False
    seen_references: bool = False
    seen_end_of_main_text: bool = False
    numbered_depth: int = 0
    min_level_hint: int | None = None

    def enter(self, text: str, level_hint: int | None) -> None:
        # Letters number sections only where an appendix may start: after the references, an appendix heading
        # or a section that closes the main text (Conclusion, Acknowledgments, ...), never mid-paper.
        info = describe_heading(
            text, letters_are_numbers=self.seen_references or self.in_appendix or self.seen_end_of_main_text
        )
        depth = info.depth
        if depth is None:
            if level_hint is not None and self.min_level_hint is not None:
                depth = level_hint - self.min_level_hint + 1
            else:
                # An unnumbered heading inside a numbered section is that section's subsection.
                depth = self.numbered_depth + 1
        if info.number is not None:
            self.numbered_depth = depth
        elif depth == 1:
            self.numbered_depth = 0
        depth = max(1, min(depth, len(self.path) + 1))
        self.path = self.path[: depth - 1] + [text]
        # An appendix heading opening the paper (a supplement-only PDF) still marks what follows.
        if info.starts_appendix and (self.seen_sections or self.seen_references or info.role == "appendix"):
            self.in_appendix = True
        if info.role == "references" and depth == 1:
            # The reference list is not appendix, even after one; a lettered section after it starts one again.
            self.seen_references, self.in_appendix = True, False
        if closes_main_text(text):
            self.seen_end_of_main_text = True
        if depth == 1:
            self.role = info.role
        self.seen_sections = self.seen_sections or info.role == "section"


def assemble_blocks(elements: Iterable[LayoutElement]) -> list[Block]:
    """Assign section paths, appendix flags and abstract/reference/checklist kinds to typed elements."""
    elements = [element for element in elements if normalise_whitespace(element.text)]
    state = _SectionState()
    hints = [element.level_hint for element in elements if element.kind == "heading" and element.level_hint]
    state.min_level_hint = min(hints) if hints else None
    blocks: list[Block] = []
    for element in elements:
        text = normalise_whitespace(element.text) if element.kind != "table" else element.text.strip()
        kind = element.kind
        if element.opens_unheaded_body:
            state.path, state.role = [], "section"
        if kind == "heading":
            state.enter(text, element.level_hint)
        elif kind in ("paragraph", "abstract") and state.role != "references" and _FRONT_MATTER_NOTICE.match(text):
            kind = "front_matter"  # in a reference list, "doi:10..." is an entry's own line
        elif kind == "paragraph":
            if is_caption(text):
                kind = "caption"
            elif state.role == "references":
                # A footnote the reading order put among the entries opens with its raised marker ("¹⁹ The ...").
                kind = "paragraph" if SUPERSCRIPT_FOOTNOTE.match(text) else "reference"
            elif state.role == "abstract":
                kind = "abstract"
            elif state.role == "checklist":
                kind = "checklist"
        elif kind in ("table", "figure") and state.role == "checklist":
            kind = "checklist"
        # Line offsets count only non-whitespace characters, so re-spacing the text keeps them; anything else
        # changing the text would move them.
        lines = list(element.line_regions) if text_offset(text) == text_offset(element.text) else []
        blocks.append(Block(kind, text, element.page, list(state.path), state.in_appendix, len(blocks),
                            list(element.regions), lines))
    return blocks


# --- Plain text ------------------------------------------------------------------------------


def elements_from_plain_text(text: str) -> list[LayoutElement]:
    """Blank-line separated paragraphs; one-line numbered or standard-name paragraphs are headings,
    and a first one-line paragraph that is not a heading is the title."""
    elements: list[LayoutElement] = []
    paragraphs = [
        [line.strip() for line in chunk.split("\n") if line.strip()]
        for chunk in re.split(r"\n\s*\n", text.replace("\r\n", "\n"))
    ]
    vocabulary = Vocabulary.of(line for paragraph in paragraphs for line in paragraph)
    for paragraph_lines in paragraphs:
        if not paragraph_lines:
            continue
        if looks_like_plain_heading(paragraph_lines):
            elements.append(LayoutElement("heading", paragraph_lines[0].lstrip("#").strip(), 1))
        elif not elements and len(paragraph_lines) == 1 and not SENTENCE_END.search(paragraph_lines[0]):
            elements.append(LayoutElement("title", paragraph_lines[0], 1))
        else:
            joined = ""
            for line in paragraph_lines:
                joined = join_lines(joined, line, vocabulary)
            elements.append(LayoutElement("paragraph", joined, 1))
    return elements

"""Recover a manuscript's logical structure from positioned text lines.

The model-free PDF path (see `peerify_dagster.resources.document_parser`) yields text lines
with a box, a font size and a bold flag, but no headings, tables or reading order. This module
rebuilds them with rules a reader would use:

* running headers, footers and page numbers: short lines in the top/bottom margin bands that
  repeat across pages (digits ignored) or are bare page numbers;
* reading order: a page is two-column when both halves hold several wide lines; full-width
  lines (title, abstract, wide floats) split the page into bands, and each band is read left
  column first, then right;
* tables: runs of rows made of widely separated cells (or, where the PDF parser merged narrow
  cells into one line, of mostly numbers), kept as one block with cells joined by " | " and
  rows by newlines;
* figure labels: runs of small-font text directly above a "Figure" caption are dropped;
* headings: bold or larger-than-body short lines, numbered ("3", "3.2", "A.1") or not, plus the
  standard unnumbered names (Abstract, References, Appendix, ...) in any style;
* paragraphs: lines joined until a vertical gap, a short line ending a sentence, or a style
  change; words hyphenated at a line end are re-joined, and a paragraph whose last line does not
  end a sentence continues in the next column or page;
* captions ("Figure 2:", "Fig. 3.", "Table 1:"), references (everything under References) and
  appendix sections (after an Appendix heading, or letter-numbered sections once the paper has
  shown digit-numbered ones or its references) are marked.

`assemble_blocks` is shared with the parsers that already know the element kinds (Docling's
HTML/Markdown backends and its layout model): it assigns section paths and the
abstract/reference/appendix roles the same way for every input format.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

# Bumped whenever a rule here changes the blocks produced, so dependent assets go stale.
LAYOUT_VERSION = "1"

BLOCK_KINDS = ("heading", "paragraph", "caption", "table", "reference", "title", "abstract")


@dataclass(frozen=True)
class TextLine:
    """One line of text on a page; coordinates in points, origin at the page's top-left."""

    page: int
    x0: float
    y0: float
    x1: float
    y1: float
    font_size: float
    bold: bool
    text: str

    @property
    def height(self) -> float:
        return self.y1 - self.y0

    @property
    def width(self) -> float:
        return self.x1 - self.x0


@dataclass
class Block:
    """A logical unit of the manuscript in reading order."""

    kind: str
    text: str
    page: int
    section_path: list[str]
    in_appendix: bool
    order: int


@dataclass(frozen=True)
class LayoutElement:
    """A typed element before section assignment; `level_hint` is a heading level a parser knew."""

    kind: str  # "title" | "heading" | "paragraph" | "caption" | "table"
    text: str
    page: int
    level_hint: int | None = None


# --- Headings -------------------------------------------------------------------------------

_SECTION_NUMBER = re.compile(
    r"^(?:(?P<appendix>Appendix)\s+)?(?P<number>(?:\d{1,2}|[A-Z])(?:\.\d{1,2})*)\.?(?::\s*|\s+)(?P<title>\S.*)$"
)
_ABSTRACT_NAMES = {"abstract"}
_REFERENCE_NAMES = {"references", "bibliography", "literature cited", "references and notes"}
_APPENDIX_NAMES = {
    "appendix", "appendices", "supplementary material", "supplementary materials",
    "supplemental material", "technical appendices", "technical appendix",
}
_OTHER_TOP_LEVEL_NAMES = {
    "introduction", "related work", "background", "conclusion", "conclusions", "discussion",
    "limitations", "acknowledgments", "acknowledgements", "acknowledgment", "acknowledgement",
    "broader impact", "broader impacts", "impact statement", "ethics statement",
    "reproducibility statement", "future work", "conclusion and future work",
}
_TOP_LEVEL_NAMES = _ABSTRACT_NAMES | _REFERENCE_NAMES | _APPENDIX_NAMES | _OTHER_TOP_LEVEL_NAMES

_CAPTION = re.compile(r"^(?:Figure|Fig\.|Table|Tab\.)\s*(?:\d+|[A-Z]\.?\d+)\s*[:.]")
_SENTENCE_END = re.compile(r"[.!?:][\"')\]]*$")
_REFERENCE_ENTRY_START = re.compile(r"^\[\d{1,3}\]")
_NUMERIC_TOKEN = re.compile(r"^[(\[]?[-+\u2212\u00b1]?\d+(?:[.,]\d+)*%?[)\]]?$")
_RUN_IN_ABSTRACT = re.compile(r"^Abstract\s*[.:\u2014\u2013-]\s*(?=\S)")


@dataclass(frozen=True)
class HeadingInfo:
    """What a heading's text says about its place: numbering depth and role."""

    number: str | None
    depth: int | None  # None when the text alone does not fix the depth
    role: str  # "abstract" | "references" | "appendix" | "section"
    starts_appendix: bool


def _plain_name(text: str) -> str:
    return re.sub(r"\s+", " ", text.strip().rstrip(".:").lower())


def is_known_section_name(text: str) -> bool:
    """True for the standard unnumbered section names (Abstract, References, Appendix, ...)."""
    return _plain_name(text) in _TOP_LEVEL_NAMES


def describe_heading(text: str, letters_are_numbers: bool) -> HeadingInfo:
    """Classify a heading; letter numbering ("A Proofs") only counts where appendices may start,
    since otherwise "A Simple Baseline" would read as appendix A."""
    name = _plain_name(text)
    if name in _ABSTRACT_NAMES:
        return HeadingInfo(None, 1, "abstract", False)
    if name in _REFERENCE_NAMES:
        return HeadingInfo(None, 1, "references", False)
    if name in _APPENDIX_NAMES:
        return HeadingInfo(None, 1, "appendix", True)
    match = _SECTION_NUMBER.match(text.strip())
    if match:
        number = match["number"]
        is_letter = number[0].isalpha()
        if not is_letter or letters_are_numbers or match["appendix"] or "." in number:
            return HeadingInfo(number, number.count(".") + 1, "section", is_letter)
    if name in _OTHER_TOP_LEVEL_NAMES:
        return HeadingInfo(None, 1, "section", False)
    return HeadingInfo(None, None, "section", False)


# --- Assembly shared by every input format ---------------------------------------------------


def normalise_whitespace(text: str) -> str:
    return re.sub(r"[ \t\r\f\v]+", " ", text.replace("\u00ad", "")).strip()


def is_caption(text: str) -> bool:
    return bool(_CAPTION.match(text))


@dataclass
class _SectionState:
    path: list[str] = field(default_factory=list)
    role: str = "front"
    in_appendix: bool = False
    seen_references: bool = False
    seen_digit_sections: bool = False
    numbered_depth: int = 0
    min_level_hint: int | None = None

    def enter(self, text: str, level_hint: int | None) -> None:
        # In a paper whose sections are numbered 1, 2, ..., a section lettered A starts the appendix.
        info = describe_heading(
            text, letters_are_numbers=self.seen_references or self.in_appendix or self.seen_digit_sections
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
            self.seen_digit_sections = self.seen_digit_sections or info.number[0].isdigit()
        elif depth == 1:
            self.numbered_depth = 0
        depth = max(1, min(depth, len(self.path) + 1))
        self.path = self.path[: depth - 1] + [text]
        self.in_appendix = self.in_appendix or info.starts_appendix
        if info.role == "references":
            self.seen_references = True
        if depth == 1:
            self.role = info.role


def assemble_blocks(elements: Iterable[LayoutElement]) -> list[Block]:
    """Assign section paths, appendix flags and abstract/reference kinds to typed elements."""
    elements = [element for element in elements if normalise_whitespace(element.text)]
    state = _SectionState()
    hints = [element.level_hint for element in elements if element.kind == "heading" and element.level_hint]
    state.min_level_hint = min(hints) if hints else None
    blocks: list[Block] = []
    for element in elements:
        text = normalise_whitespace(element.text) if element.kind != "table" else element.text.strip()
        kind = element.kind
        if kind == "heading":
            state.enter(text, element.level_hint)
        elif kind == "paragraph":
            if is_caption(text):
                kind = "caption"
            elif state.role == "references":
                kind = "reference"
            elif state.role == "abstract":
                kind = "abstract"
        blocks.append(Block(kind, text, element.page, list(state.path), state.in_appendix, len(blocks)))
    return blocks


# --- Lines to rows ---------------------------------------------------------------------------

_BOLD_FONT = re.compile(r"bold|black|heavy|semibold|demi|medi(?:um)?\b|-medi|cmbx|\bbx\b|,b\b", re.IGNORECASE)


def is_bold_font(font_name: str) -> bool:
    """Infer weight from a PDF font name (Helvetica-Bold, NimbusRomNo9L-Medi, CMBX10, ...)."""
    return bool(_BOLD_FONT.search(font_name.split("+")[-1]))


@dataclass
class _Row:
    """Lines sharing a baseline within one column; `cells` are the widely separated runs."""

    page: int
    column: int  # 0: full width or single column, 1: left, 2: right
    lines: list[TextLine]
    cells: list[str]

    @property
    def text(self) -> str:
        return " ".join(self.cells)

    @property
    def x0(self) -> float:
        return min(line.x0 for line in self.lines)

    @property
    def x1(self) -> float:
        return max(line.x1 for line in self.lines)

    @property
    def y0(self) -> float:
        return min(line.y0 for line in self.lines)

    @property
    def y1(self) -> float:
        return max(line.y1 for line in self.lines)

    @property
    def height(self) -> float:
        return self.y1 - self.y0

    @property
    def font_size(self) -> float:
        weights = [max(len(line.text), 1) for line in self.lines]
        return sum(line.font_size * weight for line, weight in zip(self.lines, weights)) / sum(weights)

    @property
    def bold(self) -> bool:
        total = sum(len(line.text) for line in self.lines) or 1
        return sum(len(line.text) for line in self.lines if line.bold) / total >= 0.8


def _dominant_font_size(lines: Sequence[TextLine]) -> float:
    weights: Counter[float] = Counter()
    for line in lines:
        weights[round(line.font_size * 2) / 2] += len(line.text)
    return weights.most_common(1)[0][0] if weights else 10.0


_PAGE_NUMBER = re.compile(r"^(?:page\s*)?(?:\d{1,4}|[ivxlc]{1,6})(?:\s*(?:of|/)\s*\d{1,4})?$", re.IGNORECASE)
_MARGIN_BAND = 0.08


def _drop_page_furniture(
    lines: Sequence[TextLine], page_sizes: Mapping[int, tuple[float, float]], body_size: float
) -> list[TextLine]:
    def in_margin(line: TextLine) -> bool:
        height = page_sizes[line.page][1]
        return line.y1 <= height * _MARGIN_BAND or line.y0 >= height * (1 - _MARGIN_BAND)

    def signature(line: TextLine) -> str:
        return re.sub(r"\d+", "#", normalise_whitespace(line.text).lower())

    # Running heads are set no larger than body text; the larger title on page 1 must survive.
    candidates = [line for line in lines if in_margin(line) and line.font_size <= body_size * 1.05]
    pages_per_signature: dict[str, set[int]] = defaultdict(set)
    for line in candidates:
        pages_per_signature[signature(line)].add(line.page)
    n_pages = len(page_sizes)
    repeated = {
        text for text, pages in pages_per_signature.items() if len(pages) >= 2 and len(pages) >= 0.4 * n_pages
    }
    candidate_ids = {id(line) for line in candidates}

    def is_furniture(line: TextLine) -> bool:
        if line.height > 2 * line.width and len(line.text) > 3:
            return True  # vertical margin stamps (arXiv identifiers, line numbers)
        if id(line) not in candidate_ids:
            return False
        return signature(line) in repeated or bool(_PAGE_NUMBER.match(line.text.strip()))

    return [line for line in lines if not is_furniture(line)]


def _column_of(line: TextLine, page_width: float) -> int:
    middle, tolerance = page_width / 2, page_width * 0.02
    if line.x1 <= middle + tolerance:
        return 1
    if line.x0 >= middle - tolerance:
        return 2
    return 0


def _is_two_column(lines: Sequence[TextLine], page_width: float) -> bool:
    wide = page_width * 0.25
    counts = Counter(_column_of(line, page_width) for line in lines if line.width >= wide)
    return counts[1] >= 3 and counts[2] >= 3


def _rows_of(lines: list[TextLine], column: int, page: int) -> list[_Row]:
    rows: list[list[TextLine]] = []
    for line in sorted(lines, key=lambda item: (item.y0, item.x0)):
        if rows:
            current = rows[-1]
            centre = (line.y0 + line.y1) / 2
            row_centre = sum((member.y0 + member.y1) / 2 for member in current) / len(current)
            if abs(centre - row_centre) <= 0.5 * min(line.height, min(member.height for member in current)):
                current.append(line)
                continue
        rows.append([line])
    return [_Row(page, column, members, _cells_of(members)) for members in rows]


def _cells_of(members: list[TextLine]) -> list[str]:
    # Runs closer than a font size are one line split by a font change; wider gaps separate cells.
    ordered = sorted(members, key=lambda line: line.x0)
    cells = [[ordered[0]]]
    for line in ordered[1:]:
        previous = cells[-1][-1]
        if line.x0 - previous.x1 <= max(line.font_size, previous.font_size):
            cells[-1].append(line)
        else:
            cells.append([line])
    return [normalise_whitespace(" ".join(line.text for line in cell)) for cell in cells]


def _order_page(lines: list[TextLine], page: int, page_width: float) -> list[_Row]:
    if not _is_two_column(lines, page_width):
        return _rows_of(lines, 0, page)
    groups: list[tuple[int, list[TextLine]]] = []
    full_width: list[TextLine] = []
    band: dict[int, list[TextLine]] = {1: [], 2: []}
    for line in sorted(lines, key=lambda item: (item.y0, item.x0)):
        column = _column_of(line, page_width)
        if column == 0:
            if band[1] or band[2]:
                groups += [(1, band[1]), (2, band[2])]
                band = {1: [], 2: []}
            full_width.append(line)
        else:
            if full_width:
                groups.append((0, full_width))
                full_width = []
            band[column].append(line)
    groups += [(0, full_width), (1, band[1]), (2, band[2])]
    return [row for column, members in groups if members for row in _rows_of(members, column, page)]


# --- Rows to elements ------------------------------------------------------------------------


def _join_lines(left: str, right: str) -> str:
    """Join two wrapped lines, undoing a hyphen that only split a word at the line end."""
    if not left:
        return right
    hyphenated = re.search(r"(\S*)([A-Za-z])-$", left)
    if hyphenated and right[:1].islower() and "-" not in hyphenated.group(1):
        return left[:-1] + right
    return f"{left} {right}"


@dataclass
class _OpenBlock:
    """A paragraph or caption still collecting lines."""

    kind: str
    text: str
    rows: list[_Row]

    @property
    def last_row(self) -> _Row:
        return self.rows[-1]

    @property
    def right_edge(self) -> float:
        return max(row.x1 for row in self.rows)

    def append(self, row: _Row) -> None:
        self.text = _join_lines(self.text, row.text)
        self.rows.append(row)


class _ElementBuilder:
    """Walks rows in reading order and emits typed elements."""

    def __init__(self, rows: list[_Row], body_size: float) -> None:
        self.rows = rows
        self.body_size = body_size
        self.line_gap = self._typical_line_gap()
        self.elements: list[LayoutElement] = []
        self.open: _OpenBlock | None = None
        self.seen_heading = False
        self.title_emitted = False

    def _typical_line_gap(self) -> float:
        gaps = [
            below.y0 - above.y1
            for above, below in zip(self.rows, self.rows[1:])
            if (above.page, above.column) == (below.page, below.column)
            and 0 <= below.y0 - above.y1 <= 2 * above.height
        ]
        return statistics.median(gaps) if gaps else 0.4 * self.body_size

    def _is_styled(self, row: _Row) -> bool:
        return row.bold or row.font_size >= self.body_size * 1.12

    def _is_heading(self, row: _Row) -> bool:
        text = row.text
        words = text.split()
        if not words or len(words) > 14 or len(text) > 120 or is_caption(text):
            return False
        if is_known_section_name(text):
            return True
        if not self._is_styled(row) or not (text[0].isupper() or text[0].isdigit()):
            return False
        numbered_split = len(row.cells) == 2 and re.fullmatch(r"(?:\d{1,2}|[A-Z])(?:\.\d{1,2})*\.?", row.cells[0])
        if len(row.cells) > 1 and not numbered_split:
            return False
        return not re.search(r"[.,;]$", text) or bool(_SECTION_NUMBER.match(text) and len(words) <= 2)

    def _continues_heading(self, heading: _Row, row: _Row) -> bool:
        return (
            (heading.page, heading.column) == (row.page, row.column)
            and row.bold == heading.bold
            and abs(row.font_size - heading.font_size) < 0.5
            and len(row.cells) == 1
            and 0 <= row.y0 - heading.y1 <= heading.height
            and not _SECTION_NUMBER.match(row.text)
            and not is_known_section_name(row.text)
            and not is_caption(row.text)
        )

    @staticmethod
    def _next_word_would_fit(block: _OpenBlock, row: _Row) -> bool:
        """True when the line broke early: the next line's first word had room on it."""
        # The paragraph's own widest line is its measure; an indented abstract is narrower than the page.
        previous, right = block.last_row, max(block.right_edge, row.x1)
        char_width = (previous.x1 - previous.x0) / max(len(previous.text), 1)
        first_word = row.text.split(" ", 1)[0]
        # Generous margin: character widths vary and ragged-right lines stop short of the edge.
        return right - previous.x1 > 1.5 * (len(first_word) + 1) * char_width

    def _continues_paragraph(self, block: _OpenBlock, row: _Row) -> bool:
        previous = block.last_row
        if abs(row.font_size - previous.font_size) > 0.15 * previous.font_size:
            return False
        ends_sentence = bool(_SENTENCE_END.search(block.text))
        is_short = self._next_word_would_fit(block, row)
        if (row.page, row.column) != (previous.page, previous.column):
            # A paragraph ends on a short line; a full last line runs on in the next column or page.
            return not ends_sentence or not is_short
        gap = row.y0 - previous.y1
        if gap < -0.5 * previous.height or gap > self.line_gap + 0.5 * previous.height:
            return False
        if ends_sentence and (is_short or _REFERENCE_ENTRY_START.match(row.text)):
            return False
        return True

    def _emit(self, kind: str, text: str, page: int, level_hint: int | None = None) -> None:
        self.elements.append(LayoutElement(kind, text, page, level_hint))

    def _close(self) -> None:
        if self.open:
            self._emit(self.open.kind, self.open.text, self.open.rows[0].page)
            self.open = None

    def build(self) -> list[LayoutElement]:
        index = 0
        title_size = self._title_size()
        while index < len(self.rows):
            row = self.rows[index]
            figure_end = self._figure_text_end(index)
            if figure_end > index:
                index = figure_end
                continue
            table_end = self._table_end(index)
            if table_end > index:
                self._close()
                table_rows = self.rows[index:table_end]
                self._emit("table", "\n".join(" | ".join(table_row.cells) for table_row in table_rows), row.page)
                index = table_end
                continue
            if title_size and not self.seen_heading and not self.title_emitted \
                    and row.page == self.rows[0].page and row.font_size >= title_size - 0.25:
                self._close()
                self.title_emitted = True
                index = self._emit_merged("title", index)
                continue
            run_in = _RUN_IN_ABSTRACT.match(row.text)
            if run_in and not self.seen_heading:
                self._close()
                self._emit("heading", "Abstract", row.page)
                self.seen_heading = True
                self.open = _OpenBlock("paragraph", row.text[run_in.end():], [row])
                index += 1
                continue
            if self._is_heading(row):
                self._close()
                self.seen_heading = True
                index = self._emit_merged("heading", index)
                continue
            if is_caption(row.text):
                self._close()
                self.open = _OpenBlock("caption", row.text, [row])
            elif self.open and self._continues_paragraph(self.open, row):
                self.open.append(row)
            else:
                self._close()
                self.open = _OpenBlock("paragraph", row.text, [row])
            index += 1
        self._close()
        return self.elements

    def _title_size(self) -> float | None:
        first_page = [row for row in self.rows if row.page == self.rows[0].page] if self.rows else []
        largest = max((row.font_size for row in first_page), default=0.0)
        return largest if largest >= self.body_size * 1.3 else None

    def _emit_merged(self, kind: str, index: int) -> int:
        first = self.rows[index]
        text, last = first.text, first
        index += 1
        while index < len(self.rows) and self._continues_heading(last, self.rows[index]):
            text, last = f"{text} {self.rows[index].text}", self.rows[index]
            index += 1
        self._emit(kind, text, first.page)
        return index

    @staticmethod
    def _is_table_row(row: _Row) -> bool:
        # Narrow cells are merged into one line by the PDF parser; rows of numbers still read as a grid.
        if len(row.cells) >= 2:
            return True
        tokens = row.text.split()
        numeric = sum(1 for token in tokens if _NUMERIC_TOKEN.match(token))
        return numeric >= 2 and numeric >= 0.4 * len(tokens)

    def _figure_text_end(self, start: int) -> int:
        """End of a run of small-font rows that a figure caption follows: labels drawn in a figure."""
        end = start
        while end < len(self.rows) and self.rows[end].font_size < 0.8 * self.body_size \
                and not is_caption(self.rows[end].text):
            end += 1
        if end > start and end < len(self.rows) and re.match(r"^Fig(?:ure|\.)", self.rows[end].text):
            return end
        return start

    def _table_end(self, start: int) -> int:
        """End of the grid-like run of rows starting at `start`, or `start` when there is none."""
        end = start
        while end < len(self.rows) and self._is_table_row(self.rows[end]):
            row = self.rows[end]
            if end > start:
                above = self.rows[end - 1]
                if (above.page, above.column) != (row.page, row.column) or row.y0 - above.y1 > 2.5 * above.height:
                    break
            end += 1
        run = self.rows[start:end]
        # Two rows make a table only when one has separate cells; rows of numbers alone need three.
        if len(run) >= 3 or (len(run) == 2 and any(len(row.cells) >= 2 for row in run)):
            return end
        return start


def recover_blocks(
    lines: Sequence[TextLine], page_sizes: Mapping[int, tuple[float, float]] | None = None
) -> list[Block]:
    """Turn positioned text lines into blocks in reading order with section paths.

    `page_sizes` maps page number to (width, height) in points; when missing, each page's
    extent is taken from its lines.
    """
    lines = [line for line in lines if normalise_whitespace(line.text)]
    if not lines:
        return []
    sizes = dict(page_sizes or {})
    for line in lines:
        if line.page not in sizes:
            page_lines = [other for other in lines if other.page == line.page]
            sizes[line.page] = (max(other.x1 for other in page_lines), max(other.y1 for other in page_lines))
    body_size = _dominant_font_size(lines)
    kept = _drop_page_furniture(lines, sizes, body_size)
    by_page: dict[int, list[TextLine]] = defaultdict(list)
    for line in kept:
        by_page[line.page].append(line)
    rows = [row for page in sorted(by_page) for row in _order_page(by_page[page], page, sizes[page][0])]
    return assemble_blocks(_ElementBuilder(rows, body_size).build())


# --- Plain text ------------------------------------------------------------------------------


def _looks_like_plain_heading(paragraph_lines: list[str]) -> bool:
    if len(paragraph_lines) != 1:
        return False
    text = paragraph_lines[0]
    if text.startswith("#") or is_known_section_name(text):
        return True
    return bool(_SECTION_NUMBER.match(text)) and len(text.split()) <= 12 and not _SENTENCE_END.search(text)


def elements_from_plain_text(text: str) -> list[LayoutElement]:
    """Blank-line separated paragraphs; one-line numbered or standard-name paragraphs are headings,
    and a first one-line paragraph that is not a heading is the title."""
    elements: list[LayoutElement] = []
    for chunk in re.split(r"\n\s*\n", text.replace("\r\n", "\n")):
        paragraph_lines = [line.strip() for line in chunk.split("\n") if line.strip()]
        if not paragraph_lines:
            continue
        if _looks_like_plain_heading(paragraph_lines):
            elements.append(LayoutElement("heading", paragraph_lines[0].lstrip("#").strip(), 1))
        elif not elements and len(paragraph_lines) == 1 and not _SENTENCE_END.search(paragraph_lines[0]):
            elements.append(LayoutElement("title", paragraph_lines[0], 1))
        else:
            joined = ""
            for line in paragraph_lines:
                joined = _join_lines(joined, line)
            elements.append(LayoutElement("paragraph", joined, 1))
    return elements

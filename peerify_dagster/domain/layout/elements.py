"""Rows to elements: the walk that types each row in reading order, and `recover_blocks`, the whole path.

The cues a reader uses, always several together, never one alone:

* title and author block: the largest lines opening page 1, then the short lines up to the abstract or
  first section; an unlabelled abstract is the prose between them and that section, and an abstract, labelled
  or not, ends where running text starts in the body's face, when the abstract is set in another (an
  introduction printed without a heading);
* headings: a short line at a block start, set bold, larger or in capitals, whose text reads like a title
  (letters, no formula or number grid), and which is numbered in sequence, is a standard section name, or
  stands alone with space around it; a line that opens in bold or italic and continues in the regular face
  is a run-in heading and stays the first words of its paragraph;
* floats: a paragraph interrupted by a float or a footnote at a column end continues after it;
* paragraphs: lines join until vertical space, a short line ending a sentence, a first-line indent, a list
  marker or a run-in heading; the font size is the words' typical height, so a superscript footnote marker
  never breaks a paragraph; reference entries split at their hanging indents.
"""

from __future__ import annotations

import functools
import itertools
import re
import statistics
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from peerify_dagster.domain.layout.blocks import Block, LayoutElement, assemble_blocks
from peerify_dagster.domain.layout.floats import (
    CAPTION,
    UNMARKED_CAPTION,
    caption_kind,
    in_image,
    is_caption,
    is_table_row,
    table_end,
)
from peerify_dagster.domain.layout.furniture import FOOTNOTE_MARKER, dominant_font_size, percentile, split_furniture
from peerify_dagster.domain.layout.headings import (
    SECTION_NUMBER,
    describe_heading,
    is_all_caps,
    is_capitalised,
    is_known_section_name,
    is_main_text_section_name,
    number_in_sequence,
    reads_like_title,
    split_number,
    unglue_heading,
)
from peerify_dagster.domain.layout.lines import (
    MATH,
    SENTENCE_END,
    Box,
    TextLine,
    Vocabulary,
    join_lines,
    normalise_whitespace,
)
from peerify_dagster.domain.layout.reading_order import Row, order_page
from peerify_dagster.domain.layout.references import (
    ENTRY_AUTHOR,
    continues_reference_entry,
    in_references_after,
    numbered_entry,
)
from peerify_dagster.domain.layout.regions import LineRegion, Region, merge_regions, text_offset

_RUN_IN_ABSTRACT = re.compile(r"^Abstract\s*[.:\u2014\u2013-]\s*(?=\S)")
_LIST_MARKER = re.compile(
    r"^(?:[•●◦▪‣∙·\-–]\s|\(?(?:[a-z]|[ivx]{1,4}|\d{1,2})\)\s|(?:\d{1,2}|[IVX]{1,4}|[A-Za-z])[.)]\s)"
)
# A journal's article-type label, set at title size above the title: front matter, never part of the title.
_ARTICLE_TYPE_LABEL = re.compile(
    r"^(?:(?:Original|Research|Review|Clinical|Brief|Short|Technical|Case|Systematic)\s+)?"
    r"(?:Research\s+)?(?:Article|Paper|Report|Review|Communication|Note|Research|Study|Letter)s?$",
    re.IGNORECASE,
)
# Front matter set like a heading (besides an article-type label): the history line, a keywords label.
_FRONT_MATTER_LINE = re.compile(
    r"^(?:(?:Received|Accepted|Published|Revised)\b\s*:?\s*(?:\d|[A-Z][a-z]+\.?\s+\d)"
    r"|(?:Keywords|Key ?words|Article history|Article info)\b\s*:?\s*$)",
    re.IGNORECASE,
)
# A byline: names with affiliation marks ("Anyi Hu,¹,² Nianzhi Jiao,¹ * ...", "Kate Griffiths¹, Rong Hou²").
_AFFILIATION_MARK = re.compile(r"[¹²³⁴⁵⁶⁷⁸⁹⁰*†‡§]")
TITLE_SEARCH_ROWS = 12  # page 1's first rows, among which a title set below a banner or a sidebar is sought
_FRONT_MATTER_LABEL = re.compile(
    r"^(?:CCS Concepts|Keywords|Key ?words|Index Terms|Additional Key Words|ACM Reference Format)\b", re.IGNORECASE
)


@dataclass
class _OpenBlock:
    """A paragraph or caption still collecting lines; `starts[i]`: where row i starts in `text` (a
    `LineRegion.start`)."""

    kind: str
    text: str
    rows: list[Row]
    slot: int | None = None  # the element index it fills when a float interrupted it
    footnote: bool = False
    opens_unheaded_body: bool = False
    starts: list[int] = field(default_factory=lambda: [0])

    @property
    def last_row(self) -> Row:
        return self.rows[-1]

    @property
    def right_edge(self) -> float:
        return max(row.x1 for row in self.rows)


@dataclass
class _TitleBlock:
    """Page 1's title: its rows (indices in reading order) and its type size; `lines` the parts of those rows in that
    size, `beside` the other lines they share a baseline with (a badge, a box's line beside the title), each part
    with its row's index."""

    rows: list[int]
    size: float
    lines: list[tuple[int, Row]]
    beside: list[tuple[int, Row]]

    @property
    def words(self) -> int:
        return sum(len(row.text.split()) for _, row in self.lines)


def _title_block(rows: Sequence[Row], indices: list[int], size: float) -> _TitleBlock:
    """The title block of `rows[indices]` in type `size`, each row parted into its lines in that size and the rest."""
    title: list[tuple[int, Row]] = []
    beside: list[tuple[int, Row]] = []
    for index in indices:
        row = rows[index]
        for part, lines in ((title, [line for line in row.lines if line.font_size >= 0.97 * size]),
                            (beside, [line for line in row.lines if line.font_size < 0.97 * size])):
            if lines:
                ordered = sorted(lines, key=lambda line: line.x0)
                text = normalise_whitespace(" ".join(line.text for line in ordered))
                part.append((index, Row(row.page, row.column, ordered, [text])))
    return _TitleBlock(indices, size, title, beside)


def _is_byline(text: str) -> bool:
    """Names with affiliation marks: two marks or more, and a comma or "and" between names."""
    return len(_AFFILIATION_MARK.findall(text)) >= 2 and re.search(r",|\band\b", text) is not None


def _largest_line(row: Row) -> float:
    """A row's largest type among its lines of two characters or more (a badge or a marker beside a title line
    in other type does not lower it)."""
    return max((line.font_size for line in row.lines if len(line.text.strip()) >= 2), default=row.font_size)


@dataclass
class _Column:
    """The text edges of one column band of a page, from its body-size rows."""

    left: float
    right: float


def _face(row: Row) -> tuple[str, bool, float]:
    return row.font, row.bold, row.font_size


class _ElementBuilder:
    """Walks rows in reading order and emits typed elements."""

    def __init__(
        self, rows: list[Row], body_size: float, vocabulary: Vocabulary, image_boxes: Mapping[int, Sequence[Box]]
    ) -> None:
        self.rows = rows
        self.position = {id(row): index for index, row in enumerate(rows)}  # rows are unhashable dataclasses
        self.body_size = body_size
        self.vocabulary = vocabulary
        self.image_boxes = image_boxes
        self.line_gap = self._typical_line_gap()
        self.columns = self._column_edges()
        self.elements: list[LayoutElement] = []
        self.open: _OpenBlock | None = None
        # A paragraph that a float or footnote interrupted before its sentence ended, waiting for its next line.
        self.pending: _OpenBlock | None = None
        self.seen_heading = False
        # Whether the text below an Abstract heading is read, and the face (font, weight, size) of the abstract's
        # first line, labelled or not: the main text may start in its own face with no heading (Nature's and
        # PNAS's introductions), and that ends the abstract.
        self.in_abstract = False
        self.abstract_face: tuple[str, bool, float] | None = None
        self.in_references = False
        # A reference list that no heading names, found by its entries' shape: its blocks are entries all the same.
        # It pauses at body text in other type (the main text running on in the next column) and resumes at the
        # next numbered entry in the entries' type (`unnamed_entry_size`).
        self.unnamed_references = False
        self.unnamed_entry_size: float | None = None
        # Whether the reference list has shown an indented further line: then its entries hang, and a line at the
        # margin starts a new entry even where the entry above ends without a full stop ("... 1: 154-158").
        self.references_hang = False
        self._heading_answers: dict[tuple[int, bool, tuple[int, ...] | None, bool], bool] = {}
        self.last_number: tuple[int, ...] | None = None
        # The row after the last heading: a subheading set right below its section's heading needs no space above.
        self.after_heading: int | None = None
        self.numbered_paper = self._count_numbered_candidates() >= 2
        self.body_fonts = self._body_fonts()
        self.heading_faces = self._heading_faces()

    # Measurements -------------------------------------------------------------------------

    def _typical_line_gap(self) -> float:
        gaps = [
            below.y0 - above.y1
            for above, below in zip(self.rows, self.rows[1:])
            if (above.page, above.column) == (below.page, below.column)
            and 0 <= below.y0 - above.y1 <= 2 * above.height
            and abs(above.font_size - self.body_size) < 0.1 * self.body_size
        ]
        return statistics.median(gaps) if gaps else 0.4 * self.body_size

    def _body_fonts(self) -> set[str]:
        """The faces that set running text: those holding >= 5% of the body-size characters. A row in another
        upright face stands out as a heading would in bold; unnamed faces ("") never count as distinct."""
        faces: Counter[str] = Counter()
        for row in self.rows:
            if abs(row.font_size - self.body_size) < 0.1 * self.body_size:
                faces[row.font] += len(row.text)
        total = sum(faces.values()) or 1
        return {face for face, count in faces.items() if count >= 0.05 * total} | {""}

    def _heading_faces(self) -> set[tuple[str, bool, float]]:
        """The faces (name, weight, size) that set the name of a body section standing alone on its line
        ("Introduction", "Discussion"), outside running text's faces: the paper's heading face, learnt before its
        first heading, so that its other headings count as styled from the start, in type smaller than the body
        too (a journal's small bold sans-serif heads)."""
        return {
            (row.font, row.bold, round(row.font_size, 1)) for row in self.rows
            if row.font not in self.body_fonts and len(row.cells) == 1 and not row.italic
            and is_main_text_section_name(split_number(row.text)[1])
        }

    def _column_edges(self) -> dict[tuple[int, int], _Column]:
        groups: dict[tuple[int, int], list[Row]] = defaultdict(list)
        for row in self.rows:
            groups[(row.page, row.column)].append(row)
        edges = {}
        for key, rows in groups.items():
            body = [row for row in rows if abs(row.font_size - self.body_size) < 0.15 * self.body_size] or rows
            widest = max(row.x1 - row.x0 for row in body)
            wide = [row for row in body if row.x1 - row.x0 >= 0.6 * widest] or body
            edges[key] = _Column(
                percentile([row.x0 for row in wide], 0.05), percentile([row.x1 for row in wide], 0.8)
            )
        return edges

    def _column(self, row: Row) -> _Column:
        return self.columns[(row.page, row.column)]

    def _count_numbered_candidates(self) -> int:
        return sum(
            1 for row in self.rows
            if (row.bold or row.font_size >= 1.1 * self.body_size)
            and re.match(r"^\d{1,2}(?:\.\d{1,2})*\.?\s+[A-Z]", row.text) and len(row.text.split()) <= 12
        )

    def _gap_above(self, index: int) -> float | None:
        """Vertical space above the row; None when it opens its column (nothing above it in reading order)."""
        row = self.rows[index]
        if index == 0:
            return None
        above = self.rows[index - 1]
        if (above.page, above.column) != (row.page, row.column) or above.y1 > row.y0 + 1:
            return None
        return row.y0 - above.y1

    def _spaced_above(self, index: int) -> bool:
        gap = self._gap_above(index)
        return gap is None or gap > self.line_gap + 0.35 * self.body_size

    def _spaced_below(self, index: int) -> bool:
        if index + 1 >= len(self.rows):
            return True
        gap = self._gap_above(index + 1)
        return gap is None or gap > self.line_gap + 0.2 * self.body_size

    # Row classification -----------------------------------------------------------------

    def _is_styled(self, row: Row) -> bool:
        return row.bold or row.font_size >= self.body_size * 1.1 or self._in_heading_face(row)

    def _in_learnt_face(self, row: Row) -> bool:
        return (row.font, row.bold, round(row.font_size, 1)) in self.heading_faces

    def _in_heading_face(self, row: Row) -> bool:
        # Not in the front matter, whose author and affiliation lines have faces of their own, unless in the face
        # the paper's standard section names are set in; italic only with bold (PeerJ's subheads), since italic
        # alone sets quotations and names.
        return self._in_learnt_face(row) or self.seen_heading and (row.bold or not row.italic) \
            and row.font not in self.body_fonts

    def _heading_at(self, index: int) -> bool:
        # Asked several times per row (floats look ahead for headings); the answer depends only on the row, on
        # whether the references have started, on the last section number and on whether a heading is just above.
        key = (index, self.in_references, self.last_number, index == self.after_heading)
        if key not in self._heading_answers:
            self._heading_answers[key] = self._is_heading(index)
        return self._heading_answers[key]

    def _is_heading(self, index: int) -> bool:
        row = self.rows[index]
        if row.lead_emphasis or len(row.text) > 150 or len(row.text.split()) > 16 or is_caption(row.text) \
                or _is_byline(row.text) or _ARTICLE_TYPE_LABEL.match(row.text.strip()) \
                or _FRONT_MATTER_LINE.match(row.text.strip()):
            return False
        learnt_face = self._in_learnt_face(row)
        number_ahead = split_number(row.text)[0]
        if row.font_size < 0.93 * self.body_size and not (
                learnt_face or self._in_heading_face(row) and is_known_section_name(row.text.strip())
                or row.bold and number_ahead is not None and number_ahead[0].isdigit()
                and number_in_sequence(number_ahead, self.last_number, self.in_references)):
            # Headings are not set smaller than the body text, but back matter may be, in its own face, and a
            # bold section numbered next in sequence may be (a journal's small bold heads).
            return False
        text = unglue_heading(row.text, self.vocabulary)
        words = text.split()
        number, title = split_number(text)
        numbered_split = len(row.cells) == 2 and re.fullmatch(r"(?:\d{1,2}|[A-Z])(?:\.\d{1,2})*\.?", row.cells[0])
        if len(row.cells) > 1 and not numbered_split:
            return False
        if not reads_like_title(title):
            return False
        known = is_known_section_name(title) or is_known_section_name(text)
        # A line in the face the body's sections are named in needs no space to stand apart.
        spaced = self._spaced_above(index) or learnt_face or index == self.after_heading
        styled = self._is_styled(row) or is_all_caps(title) or (row.italic and number is not None)
        if self.in_references and not known:
            # Entries of a reference list are never headings; an appendix after them is styled and numbered. A
            # numbered entry set in bold ("1. Agogué, H., M. Brink, ... 2008.") names authors by their initials.
            return styled and spaced and number is not None and is_capitalised(title) \
                and not ENTRY_AUTHOR.search(title)
        if known:
            return styled or spaced or number is not None
        if not is_capitalised(title) or (text.endswith(".") and number is None) or not spaced:
            return False
        if number is not None:
            return (styled or (is_all_caps(title) and len(words) <= 10)) \
                and number_in_sequence(number, self.last_number, self.in_references)
        # An unnumbered heading must stand out on every count: style, space around it, a short title.
        display = (row.bold and row.font_size >= 1.02 * self.body_size) or row.font_size >= 1.15 * self.body_size
        return (
            len(words) <= 10 and not SENTENCE_END.search(text)
            # In an unnumbered paper a heading in its own face may sit as close to its paragraph as the line gap.
            and (self._spaced_below(index) or (not self.numbered_paper and self._in_heading_face(row)))
            and (display if self.numbered_paper else self._is_styled(row) or self._italic_subheading(index))
            and not is_table_row(self.rows[index + 1] if index + 1 < len(self.rows) else row)
        )

    def _opens_unnamed_references(self, index: int) -> bool:
        """A reference list that no heading names (PNAS, BMJ): in the paper's second half, a line opening entry 1
        (a number, then authors by surname and initials) in type no larger than the body, and below it, in the
        same type, lines opening entries numbered on from it."""
        row = self.rows[index]
        if self.in_references or index < len(self.rows) // 2 or row.font_size > 1.02 * self.body_size:
            return False
        if self.unnamed_entry_size is not None:
            return numbered_entry(row.text) is not None \
                and abs(row.font_size - self.unnamed_entry_size) < 0.1 * self.unnamed_entry_size
        if numbered_entry(row.text) != 1:
            return False
        numbers = [number for below in self.rows[index + 1:index + 40]
                   if abs(below.font_size - row.font_size) < 0.1 * row.font_size
                   and (number := numbered_entry(below.text)) is not None]
        return len(numbers) >= 3 and numbers[:3] == sorted(set(numbers[:3])) and numbers[2] <= 8

    def _italic_subheading(self, index: int) -> bool:
        """An unnumbered paper's italic subheading: a short italic line standing apart, over upright text (an
        italic block quote goes on in italic)."""
        row, below = self.rows[index], self.rows[index + 1] if index + 1 < len(self.rows) else None
        return (row.italic and len(row.text.split()) <= 8 and below is not None and not below.italic
                and self._spaced_below(index))

    def _register_heading(self, text: str) -> None:
        number, _ = split_number(text)
        if number and number[0].isdigit():
            self.last_number = tuple(int(part) for part in number.split("."))
        # Any heading ends a reference list that none named.
        self.in_references = in_references_after(text, self.in_references and not self.unnamed_references)
        self.unnamed_references = False
        self.seen_heading = True
        self.in_abstract, self.abstract_face = describe_heading(text, False).role == "abstract", None

    def _leaves_abstract(self, row: Row) -> bool:
        """The row opens running text in another face than the abstract's, in type no smaller: an introduction
        printed without a heading (a journal sets its abstract in bold, sans-serif or smaller type)."""
        if self.abstract_face is None or row.bold or row.italic or row.font not in self.body_fonts:
            return False
        font, bold, size = self.abstract_face
        return row.font_size >= 0.97 * size and row.font_size >= 0.9 * self.body_size \
            and (row.font != font or bold or row.font_size > 1.05 * size)

    def _opens_prose(self, index: int) -> bool:
        """Two full lines of running text in one column: the start of the body, not an author or address line."""
        pair = self.rows[index:index + 2]
        if len(pair) < 2 or (pair[0].page, pair[0].column) != (pair[1].page, pair[1].column):
            return False
        column = self._column(pair[0])
        for row in pair:
            words = re.findall(r"[^\W\d_]+", row.text)
            if row.x1 - row.x0 < 0.8 * (column.right - column.left) or len(words) < 6:
                return False
            if sum(word.islower() for word in words) < 0.5 * len(words):
                return False
        return True

    # Floats -------------------------------------------------------------------------------

    def _float_at(self, start: int) -> tuple[str, int]:
        """A float starting at `start`: ("figure", end) for text inside an image, or a run of non-prose rows
        that a "Figure" caption directly follows or precedes; ("table", end) likewise next to a "Table"
        caption, or for a grid of cells or numbers; ("", start) otherwise."""
        end = start
        while end < len(self.rows) and in_image(self.rows[end], self.image_boxes):
            end += 1
        if end > start:
            return "figure", end
        grid_end = table_end(self.rows, start)
        row = self.rows[start]
        # A float starts a block: a paragraph's own next line (same column, ordinary spacing) is not one.
        if self.open is not None and self.open.kind != "caption" and not self._spaced_above(start) \
                and (self.open.last_row.page, self.open.last_row.column) == (row.page, row.column):
            return ("table", grid_end) if grid_end > start else ("", start)
        while end < len(self.rows) and self._is_float_row(self.rows[end], row) and not self._heading_at(end):
            end += 1
        end = max(end, grid_end)
        if end == start:
            return "", start
        # A caption set above claims the float below it (tables usually); otherwise the caption below does.
        if self.open is not None and self.open.kind == "caption" \
                and (self.open.last_row.page, self.open.last_row.column) == (row.page, row.column):
            return caption_kind(self.open.text), end
        if end < len(self.rows) and self._starts_caption(end) and self.rows[end].page == row.page:
            return caption_kind(self.rows[end].text), end
        return ("table", grid_end) if grid_end > start else ("", start)

    def _is_float_row(self, row: Row, first: Row) -> bool:
        """Rows of a figure or table: not a caption, not a heading, not prose, on the float's page and column."""
        if (row.page, row.column) != (first.page, first.column) or self._is_caption_row(row):
            return False
        column = self._column(row)
        words = row.text.split()
        # Running text may be set smaller than the body (a journal's methods or notes in small type): then it reads
        # as sentences, mostly words in lower case.
        body_type = abs(row.font_size - self.body_size) <= 0.15 * self.body_size or (
            row.font_size >= 0.75 * self.body_size and len(words) >= 8
            and sum(word.islower() for word in words) >= 0.6 * len(words))
        prose = (
            body_type and row.x1 - row.x0 >= 0.75 * (column.right - column.left)
            and len(words) >= 6 and not is_table_row(row)
        )
        return not prose

    def _is_footnote_start(self, index: int) -> bool:
        row = self.rows[index]
        if row.font_size >= 0.93 * self.body_size or not FOOTNOTE_MARKER.match(row.text):
            return False
        # Footnotes sit at the foot of a column: only footnote-size rows follow in this column.
        for below in self.rows[index + 1:]:
            if (below.page, below.column) != (row.page, row.column):
                return True
            if below.font_size >= 0.93 * self.body_size:
                return False
        return True

    # Paragraphs ---------------------------------------------------------------------------

    @staticmethod
    def _line_ended_early(block: _OpenBlock, row: Row, column_right: float) -> bool:
        """True when the line broke early: the next line's first word had room on it."""
        previous = block.last_row
        right = max(block.right_edge, column_right, row.x1)
        char_width = (previous.x1 - previous.x0) / max(len(previous.text), 1)
        first_word = row.text.split(" ", 1)[0]
        # Generous margin: character widths vary and ragged-right lines stop short of the edge.
        return right - previous.x1 > 1.5 * (len(first_word) + 1) * char_width

    def _starts_paragraph(self, row: Row, ends_sentence: bool) -> bool:
        """First-line cues: an indent, a list marker or a run-in heading after a finished sentence."""
        if not ends_sentence:
            return False
        column = self._column(row)
        indent = row.x0 - column.left
        if 0.6 * self.body_size <= indent <= 4 * self.body_size:
            return True
        if row.lead_emphasis or _LIST_MARKER.match(row.text):
            return True
        return False

    def _continues_paragraph(self, block: _OpenBlock, row: Row) -> bool:
        previous = block.last_row
        if abs(row.font_size - previous.font_size) > 0.1 * max(previous.font_size, row.font_size):
            return False
        same_column = (row.page, row.column) == (previous.page, previous.column)
        if block.footnote and not same_column:
            return False
        gap = row.y0 - previous.y1
        if same_column and (gap < -0.5 * previous.height
                            or gap > self.line_gap + 0.5 * max(previous.height, self.body_size)):
            return False
        if block.footnote and not FOOTNOTE_MARKER.match(row.text):
            return True  # a footnote's lines run on until the next footnote's marker, whatever section it sits in
        ends_sentence = bool(SENTENCE_END.search(block.text))
        indent = row.x0 - self._column(row).left
        if self.in_references:
            # Reference lists hang: an entry's further lines are indented, a new entry starts at the margin.
            entry = continues_reference_entry(row.text, indent, self.body_size, ends_sentence, self.references_hang)
            self.references_hang |= bool(entry) and indent >= 0.5 * self.body_size
            if entry is not None:
                return entry
        is_short = self._line_ended_early(block, row, self._column(previous).right)
        if not same_column:
            # A paragraph ends on a short line; a full last line runs on in the next column or page.
            return (not ends_sentence or not is_short) and not self._starts_paragraph(row, ends_sentence) \
                and not _LIST_MARKER.match(row.text)
        if ends_sentence and is_short or self._is_display(row) or self._is_display(previous):
            return False
        return not self._starts_paragraph(row, ends_sentence)

    def _is_display(self, row: Row) -> bool:
        """A line set centred on its own, such as a display equation: a block of its own."""
        column = self._column(row)
        left, right = row.x0 - column.left, column.right - row.x1
        centred = min(left, right) > 1.5 * self.body_size and abs(left - right) < 0.35 * max(left, right)
        narrow = row.x1 - row.x0 < 0.7 * (column.right - column.left)
        return centred and narrow and (bool(MATH.search(row.text)) or len(row.text.split()) <= 6)

    def _resumes_pending(self, row: Row) -> bool:
        pending = self.pending
        if pending is None or (self.open is not None and self.open.kind != "caption" and not self.open.footnote):
            return False
        if abs(row.font_size - pending.last_row.font_size) > 0.15 * pending.last_row.font_size:
            return False
        if _LIST_MARKER.match(row.text) or row.lead_emphasis:
            return False
        # The continuation starts at the column's left edge (no indent) and in lower case or mid-sentence.
        return row.x0 - self._column(row).left < 0.6 * self.body_size

    # Emission -----------------------------------------------------------------------------

    def _element(self, kind: str, text: str, rows: Sequence[Row], starts: Sequence[int] | None) -> LayoutElement:
        """An element placed where its rows are: one box per run of rows that follow each other in reading order
        on one page and column (a paragraph interrupted by a float in its column keeps two), runs that touch merged
        (a short last line of a full-width abstract counts as the left column's); with `starts` (where each row
        starts in `text`), line by line too."""
        runs: list[list[Row]] = []
        for row in rows:
            previous = runs[-1][-1] if runs else None
            if previous is not None and (previous.page, previous.column) == (row.page, row.column) \
                    and self.position[id(row)] == self.position[id(previous)] + 1:
                runs[-1].append(row)
            else:
                runs.append([row])
        regions = tuple(merge_regions(functools.reduce(Region.union, (row.region for row in run)) for run in runs))
        lines = () if starts is None else tuple(LineRegion.of(start, row.region) for start, row in zip(starts, rows))
        return LayoutElement(kind, text, rows[0].page, regions=regions, line_regions=lines)

    def _emit(self, kind: str, text: str, rows: Sequence[Row], starts: Sequence[int] | None = None) -> None:
        self.elements.append(self._element(kind, text, rows, starts))

    def _close(self) -> None:
        if self.open is None:
            return
        block, self.open = self.open, None
        kind = "reference" if self.unnamed_references and block.kind == "paragraph" else block.kind
        element = replace(self._element(kind, block.text, block.rows, block.starts),
                          opens_unheaded_body=block.opens_unheaded_body)
        if block.slot is None:
            self.elements.append(element)
        else:
            self.elements[block.slot] = element

    def _interrupt(self) -> None:
        """A float or footnote starts: a paragraph whose sentence runs on past it waits, holding its place."""
        block = self.open
        if block is None or block.kind not in ("paragraph", "abstract") or block.footnote \
                or SENTENCE_END.search(block.text):
            self._close()
            return
        self._flush_pending()
        self.open = None
        if block.slot is None:
            block.slot = len(self.elements)
            self.elements.append(LayoutElement(block.kind, "", block.rows[0].page))
        self.pending = block

    def _flush_pending(self) -> None:
        if self.pending is not None:
            self.open, self.pending = self.pending, None
            self._close()

    def _append(self, block: _OpenBlock, row: Row) -> None:
        block.text = join_lines(block.text, row.text, self.vocabulary)
        block.rows.append(row)
        # However the lines were joined (a space, a closed hyphen), the joined text ends with the new line.
        block.starts.append(text_offset(block.text) - text_offset(row.text))

    def _continues_heading(self, heading: Row, row: Row) -> bool:
        return (
            (heading.page, heading.column) == (row.page, row.column)
            and (row.bold, row.italic, row.font) == (heading.bold, heading.italic, heading.font)
            and abs(row.font_size - heading.font_size) < 0.06 * heading.font_size
            and len(row.cells) == 1
            and not row.lead_emphasis
            and 0 <= row.y0 - heading.y1 <= 0.8 * heading.height
            and not SECTION_NUMBER.match(row.text)
            and not is_known_section_name(row.text)
            and not is_caption(row.text)
            and reads_like_title(row.text)
        )

    def _emit_heading(self, index: int) -> int:
        start = index
        first = self.rows[index]
        text, last = unglue_heading(first.text, self.vocabulary), first
        index += 1
        while index < len(self.rows) and self._continues_heading(last, self.rows[index]):
            text, last = f"{text} {unglue_heading(self.rows[index].text, self.vocabulary)}", self.rows[index]
            index += 1
        self._emit("heading", text, self.rows[start:index])
        self._register_heading(text)
        self.after_heading = index
        return index

    def _continues_caption(self, caption: _OpenBlock, row: Row) -> bool:
        previous = caption.last_row
        # A row of separate cells is the table a caption set above it names, not more of the caption.
        if (row.page, row.column) != (previous.page, previous.column) or self._is_caption_row(row) \
                or len(row.cells) > 1:
            return False
        if abs(row.font_size - previous.font_size) > 0.15 * previous.font_size:
            return False
        gap = row.y0 - previous.y1
        if gap < -0.5 * previous.height or gap > self.line_gap + 0.5 * previous.height:
            return False
        ends_sentence = bool(SENTENCE_END.search(caption.text))
        return not (ends_sentence and self._line_ended_early(caption, row, self._column(previous).right))

    def _unmarked_caption(self, row: Row) -> bool:
        return bool(UNMARKED_CAPTION.match(row.text)) and (
            row.lead_emphasis > 0 or row.bold or row.font_size < 0.95 * self.body_size)

    def _is_caption_row(self, row: Row) -> bool:
        return is_caption(row.text) or self._unmarked_caption(row)

    def _starts_caption(self, index: int) -> bool:
        row = self.rows[index]
        match = CAPTION.match(row.text)
        if not match:
            return self._unmarked_caption(row)
        if match["mark"] != ".":
            return True
        # "Table 2. Results ..." opens a caption when its label is set apart (bold, italic, smaller type) or it
        # starts after space with no sentence waiting; "... as shown in / Table 2. The ..." mid-paragraph does not.
        if row.lead_emphasis or row.bold or row.italic or row.font_size < 0.95 * self.body_size:
            return True
        waiting = [block for block in (self.open, self.pending) if block is not None and block.kind != "caption"]
        return self._spaced_above(index) and not any(not SENTENCE_END.search(block.text) for block in waiting)

    # The walk -----------------------------------------------------------------------------

    def _title_from(self, start: int) -> _TitleBlock:
        """The title block a large row opens: the rows below it in its type size whose lines overlap its own, one
        line's leading apart. Rows beside it (a journal's box to its right) are passed over and left to the front
        matter; lines in other type within its rows (an "OPEN" badge) are left out of its text."""
        first = self.rows[start]
        size = _largest_line(first)
        rows, index, last = [start], start + 1, first
        while index < len(self.rows) and index - rows[-1] <= 6 and self.rows[index].page == first.page:
            row = self.rows[index]
            if row.x1 < first.x0 or row.x0 > first.x1:
                index += 1
                continue
            if abs(_largest_line(row) - size) > 0.03 * size or not 0 <= row.y0 - last.y1 <= 1.5 * last.height:
                break
            rows.append(index)
            last = row
            index += 1
        return _title_block(self.rows, rows, size)

    def _title(self) -> _TitleBlock | None:
        """Page 1's title: the block of the largest type among the first TITLE_SEARCH_ROWS rows of each of page 1's
        columns (a sidebar may come first) that reads like a title of three words or more. A banner in larger
        type (a journal's name or logo, a section label) gives way: among blocks within 7% of the largest size,
        the one of the most words is the title; one or two words are a title only when no block has more."""
        first_page = self.rows[0].page
        rank: Counter[int] = Counter()
        blocks: list[_TitleBlock] = []
        taken: set[int] = set()
        for index, row in enumerate(self.rows):
            if row.page != first_page:
                break
            rank[row.column] += 1
            if rank[row.column] > TITLE_SEARCH_ROWS or index in taken \
                    or _largest_line(row) < 1.25 * self.body_size or _ARTICLE_TYPE_LABEL.match(row.text.strip()):
                continue
            block = self._title_from(index)
            taken.update(block.rows)
            # Judged by its first line: a title may go on past a comma, or end in a version tag with a link.
            if self._is_title_like(row.text.rstrip(",;")):
                blocks.append(block)
        wordy = [block for block in blocks if block.words >= 3] or blocks
        if not wordy:
            return None
        largest = max(block.size for block in wordy)
        return max((block for block in wordy if block.size >= 0.93 * largest),
                   key=lambda block: (block.words, -block.rows[0]))

    def _is_title_like(self, text: str) -> bool:
        text = text.strip()
        number = SECTION_NUMBER.match(text)
        # A title may open with the article "A"; only a numeral marks a section.
        return reads_like_title(text) and not is_known_section_name(text) and _ARTICLE_TYPE_LABEL.match(text) is None \
            and not (number and number["number"][0].isdigit())

    def _front_matter(self) -> int:
        """Emit the title and author block opening page 1; returns the index of the first other row.

        The title is the largest type among the first rows of page 1 (`_title`); the rows above it (a banner, a
        sidebar, a venue notice that is not repeated on other pages) and beside it join the author block as front
        matter.
        """
        if not self.rows:
            return 0
        title = self._title()
        if title is None:
            return 0
        title_rows, beside = title.lines, title.beside
        for index, row in title_rows + beside:
            self.position[id(row)] = index  # a part of a row stands where the row stood
        self._emit("title", " ".join(row.text for _, row in title_rows), [row for _, row in title_rows])
        first_page, index = self.rows[0].page, title.rows[-1] + 1
        front = [row for position, row in enumerate(self.rows[:index]) if position not in title.rows]
        front += [row for _, row in beside]
        while index < len(self.rows) and self.rows[index].page == first_page and len(front) < 30:
            row = self.rows[index]
            if _RUN_IN_ABSTRACT.match(row.text) or is_caption(row.text) or self._opens_prose(index) \
                    or _FRONT_MATTER_LABEL.match(row.text) or self._heading_at(index):
                break
            front.append(row)
            index += 1
        if front:
            self._emit("authors", "\n".join(row.text for row in front), front)
        return index

    def build(self) -> list[LayoutElement]:
        index = self._front_matter()
        # Prose between the author block and the first heading is an abstract that carries no heading.
        in_front = bool(self.elements)
        while index < len(self.rows):
            row = self.rows[index]
            if self.open is not None and self.open.kind == "caption" and self._continues_caption(self.open, row):
                self._append(self.open, row)
                index += 1
                continue
            float_kind, float_end = self._float_at(index)
            if float_kind:
                self._interrupt()
                float_rows = self.rows[index:float_end]
                if float_kind == "table":
                    cells = [" | ".join(r.cells) for r in float_rows]
                    starts = itertools.accumulate((text_offset(line) for line in cells[:-1]), initial=0)
                    self._emit("table", "\n".join(cells), float_rows, list(starts))
                else:
                    self._emit("figure", "\n".join(r.text for r in float_rows), float_rows)
                index = float_end
                continue
            run_in = _RUN_IN_ABSTRACT.match(row.text)
            if run_in and not self.seen_heading:
                self._close()
                self._flush_pending()
                self._emit("heading", "Abstract", [row])
                self.seen_heading, in_front = True, False
                self.in_abstract, self.abstract_face = True, _face(row)
                self.open = _OpenBlock("paragraph", row.text[run_in.end():], [row])
                index += 1
                continue
            if self._opens_unnamed_references(index):
                self._close()
                self._flush_pending()
                self.in_references = self.unnamed_references = True
                self.unnamed_entry_size = row.font_size
            elif self.unnamed_references and self.unnamed_entry_size is not None \
                    and abs(row.font_size - self.unnamed_entry_size) >= 0.1 * self.unnamed_entry_size:
                self._close()
                self.in_references = self.unnamed_references = False
            if self._heading_at(index):
                self._close()
                self._flush_pending()
                index = self._emit_heading(index)
                in_front = False
                continue
            if self._starts_caption(index):
                self._interrupt()
                self.open = _OpenBlock("caption", row.text, [row])
            elif self.open is not None and self.open.kind != "caption" and self._continues_paragraph(self.open, row):
                self._append(self.open, row)
            elif self.pending is not None and self._resumes_pending(row):
                self._close()
                self.open, self.pending = self.pending, None
                self._append(self.open, row)
            else:
                footnote = self._is_footnote_start(index)
                if footnote:
                    self._interrupt()
                else:
                    self._close()
                    self._flush_pending()
                body_block = not footnote and not _FRONT_MATTER_LABEL.match(row.text)
                opens_body = False
                if (in_front or self.in_abstract) and body_block:
                    opens_body = self._leaves_abstract(row)
                    if opens_body:
                        in_front = self.in_abstract = False
                    elif self.abstract_face is None and self._opens_prose(index):
                        self.abstract_face = _face(row)  # not a label's or an address's that may stand above
                kind = "abstract" if in_front and body_block else "paragraph"
                self.open = _OpenBlock(kind, row.text, [row], footnote=footnote, opens_unheaded_body=opens_body)
            index += 1
        self._close()
        self._flush_pending()
        return [element for element in self.elements if element.text]


def recover_blocks(
    lines: Sequence[TextLine],
    page_sizes: Mapping[int, tuple[float, float]] | None = None,
    image_boxes: Mapping[int, Sequence[Box]] | None = None,
) -> list[Block]:
    """Turn positioned text lines into blocks in reading order with section paths.

    `page_sizes` maps page number to (width, height) in points; when missing, each page's extent
    is taken from its lines. `image_boxes` are the raster images per page, whose text is figure text.
    """
    lines = [line for line in lines if normalise_whitespace(line.text)]
    if not lines:
        return []
    sizes = dict(page_sizes or {})
    extents: dict[int, list[TextLine]] = defaultdict(list)
    for line in lines:
        extents[line.page].append(line)
    for page, page_lines in extents.items():
        sizes.setdefault(page, (max(line.x1 for line in page_lines), max(line.y1 for line in page_lines)))
    kept, _ = split_furniture(lines, sizes)
    body_size = dominant_font_size(kept)
    by_page: dict[int, list[TextLine]] = defaultdict(list)
    for line in kept:
        by_page[line.page].append(line)
    rows = [row for page in sorted(by_page) for row in order_page(by_page[page], page, sizes[page][0])]
    # Running text only: a heading's glued words must not vouch for themselves.
    vocabulary = Vocabulary.of(
        line.text for line in kept
        if (line.lead_emphasis or not line.bold) and line.font_size <= body_size * 1.25
    )
    return assemble_blocks(_ElementBuilder(rows, body_size, vocabulary, image_boxes or {}).build())

"""Render a parsed manuscript to PDF bytes with fpdf2, deterministically.

The layout engine places text line by line so that paragraphs flow across columns and pages
the way real papers do (parsers downstream must stitch them back together), while tables and
figures move whole to the next column when they do not fit. Creation date and file id are
fixed, so the same source always yields the same bytes.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import datetime, timezone

from fpdf import FPDF
from fpdf.enums import MethodReturnValue

from peerify_dagster.sample_venue.markup import Figure, Heading, Manuscript, Paragraph, ReferenceList, Table

RUNNING_HEADER = "Under review as a workshop paper at PeerifySample 2026"
_CREATION_DATE = datetime(2026, 1, 9, 12, 0, 0, tzinfo=timezone.utc)

_PAGE_WIDTH = 210.0
_PAGE_HEIGHT = 297.0
_SIDE_MARGIN = 25.0
_TOP = 25.0
_BOTTOM = _PAGE_HEIGHT - 22.0
_COLUMN_GAP = 7.0
_FIGURE_HEIGHT = 42.0
_HANGING_INDENT = 5.0
_NUMBERED_ENTRY = re.compile(r"^\[\d+\] ")


@dataclass(frozen=True)
class RenderedManuscript:
    pdf_bytes: bytes
    # Paragraphs whose lines were split over two pages: the sample must contain some.
    paragraphs_across_pages: tuple[str, ...]


class _SamplePaper(FPDF):
    def __init__(self, file_identifier: str) -> None:
        super().__init__(format="A4", unit="mm")
        self._file_identifier = file_identifier
        self.set_auto_page_break(False)
        self.set_creation_date(_CREATION_DATE)
        self.set_producer("peerify sample venue builder")

    def file_id(self) -> str:
        return f"<{self._file_identifier}><{self._file_identifier}>"

    def header(self) -> None:
        self.set_font("Helvetica", "I", 8)
        self.set_xy(_SIDE_MARGIN, 12)
        self.cell(_PAGE_WIDTH - 2 * _SIDE_MARGIN, 4, RUNNING_HEADER, align="C")

    def footer(self) -> None:
        self.set_font("Helvetica", "", 9)
        self.set_xy(_SIDE_MARGIN, _PAGE_HEIGHT - 15)
        self.cell(_PAGE_WIDTH - 2 * _SIDE_MARGIN, 4, str(self.page_no()), align="C")


class _Layout:
    """A cursor over columns and pages: every placement asks for vertical space first."""

    def __init__(self, pdf: _SamplePaper, columns: int) -> None:
        self.pdf = pdf
        self.columns = columns
        usable = _PAGE_WIDTH - 2 * _SIDE_MARGIN
        self.width = (usable - _COLUMN_GAP * (columns - 1)) / columns
        self.column = 0
        self.column_top = _TOP
        self.y = _TOP
        self.body_size = 10.0 if columns == 2 else 10.5
        self.line_height = 4.6 if columns == 2 else 5.0

    @property
    def x(self) -> float:
        return _SIDE_MARGIN + self.column * (self.width + _COLUMN_GAP)

    def fits(self, height: float) -> bool:
        return self.y + height <= _BOTTOM

    def advance(self) -> None:
        if self.column + 1 < self.columns:
            self.column += 1
        else:
            self.pdf.add_page()
            self.column = 0
            self.column_top = _TOP
        self.y = self.column_top

    def reserve(self, height: float) -> None:
        if not self.fits(height):
            self.advance()

    def wrap(self, text: str, indent: float = 0.0) -> list[str]:
        return self.pdf.multi_cell(self.width - indent, self.line_height, text, dry_run=True,
                                   output=MethodReturnValue.LINES)

    def write_lines(self, lines: list[str], indent: float = 0.0) -> bool:
        """Place lines one by one, `indent` mm from the column's left edge; returns True when they were split over
        two pages."""
        pages = set()
        for line in lines:
            self.reserve(self.line_height)
            self.pdf.set_xy(self.x + indent, self.y)
            self.pdf.cell(self.width - indent, self.line_height, line)
            self.y += self.line_height
            pages.add(self.pdf.page_no())
        return len(pages) > 1


def _render_front_matter(layout: _Layout, manuscript: Manuscript) -> None:
    pdf = layout.pdf
    full_width = _PAGE_WIDTH - 2 * _SIDE_MARGIN
    pdf.set_font("Helvetica", "B", 15)
    pdf.set_xy(_SIDE_MARGIN, layout.y)
    pdf.multi_cell(full_width, 7, manuscript.title, align="C")
    pdf.set_font("Helvetica", "", 10)
    pdf.set_x(_SIDE_MARGIN)
    pdf.multi_cell(full_width, 6, "Anonymous authors. Paper under double-blind review.", align="C")
    pdf.set_font("Helvetica", "B", 11)
    pdf.set_xy(_SIDE_MARGIN, pdf.get_y() + 4)
    pdf.cell(full_width, 6, "Abstract", align="C")
    pdf.set_font("Helvetica", "", 10)
    pdf.set_xy(_SIDE_MARGIN + 10, pdf.get_y() + 7)
    pdf.multi_cell(full_width - 20, 4.8, manuscript.abstract)
    # Columns start below the abstract on the first page only.
    layout.column_top = layout.y = pdf.get_y() + 6


def _render_heading(layout: _Layout, heading: Heading) -> None:
    size = {1: 12.0, 2: 11.0}.get(heading.level, 10.5)
    layout.pdf.set_font("Helvetica", "B", size)
    lines = layout.wrap(heading.text)
    # Keep a heading with the first two lines of what follows it.
    layout.reserve(2.5 + len(lines) * layout.line_height + 2 * layout.line_height)
    layout.y += 2.5
    layout.write_lines(lines)
    layout.y += 1.0


def _render_paragraph(layout: _Layout, paragraph: Paragraph) -> bool:
    layout.pdf.set_font("Helvetica", "", layout.body_size)
    crossed = layout.write_lines(layout.wrap(paragraph.text))
    layout.y += 2.5
    return crossed


def _render_caption(layout: _Layout, caption: str) -> None:
    layout.pdf.set_font("Helvetica", "I", layout.body_size - 1)
    layout.write_lines(layout.wrap(caption))


def _render_table(layout: _Layout, table: Table) -> None:
    pdf = layout.pdf
    row_height = layout.line_height + 0.8
    pdf.set_font("Helvetica", "I", layout.body_size - 1)
    caption_lines = layout.wrap(table.caption)
    layout.reserve(len(caption_lines) * layout.line_height + len(table.rows) * row_height + 5)
    layout.y += 1.5
    _render_caption(layout, table.caption)
    layout.y += 1.0
    # Columns get the width their widest cell needs; the font shrinks until the grid fits.
    padding = 2.0
    font_size = layout.body_size - 1.5
    pdf.set_font("Helvetica", "B", font_size)
    natural = [max(pdf.get_string_width(row[column]) for row in table.rows) for column in range(len(table.rows[0]))]
    scale = min(1.0, (layout.width - padding * len(natural)) / sum(natural))
    font_size *= scale
    spare = layout.width - sum(width * scale + padding for width in natural)
    widths = [width * scale + padding + spare / len(natural) for width in natural]
    for row_index, row in enumerate(table.rows):
        pdf.set_font("Helvetica", "B" if row_index == 0 else "", font_size)
        pdf.set_xy(layout.x, layout.y)
        for cell_index, (cell, width) in enumerate(zip(row, widths)):
            pdf.cell(width, row_height, cell, border=1, align="L" if cell_index == 0 else "C")
        layout.y += row_height
    layout.y += 4.0


def _render_flow(pdf: FPDF, x: float, y: float, width: float, labels: list[str]) -> None:
    gap = 6.0
    box_width = (width - gap * (len(labels) - 1)) / len(labels)
    box_top, box_height = y + _FIGURE_HEIGHT / 2 - 8, 16.0
    # Shrink the labels until their longest word fits a box, so no word is split.
    pdf.set_font("Helvetica", "", 7)
    longest_word = max(pdf.get_string_width(word) for label in labels for word in label.split())
    pdf.set_font("Helvetica", "", 7 * min(1.0, (box_width - 5) / longest_word))
    for position, label in enumerate(labels):
        box_x = x + position * (box_width + gap)
        pdf.rect(box_x, box_top, box_width, box_height)
        pdf.set_xy(box_x + 1, box_top + 3)
        pdf.multi_cell(box_width - 2, 3.2, label, align="C")
        if position:
            arrow_y = box_top + box_height / 2
            pdf.line(box_x - gap, arrow_y, box_x, arrow_y)
            pdf.line(box_x - 1.8, arrow_y - 1.2, box_x, arrow_y)
            pdf.line(box_x - 1.8, arrow_y + 1.2, box_x, arrow_y)


def _render_bars(pdf: FPDF, x: float, y: float, width: float, bars: list[tuple[str, float]]) -> None:
    axis_left, axis_bottom, plot_height = x + 8, y + _FIGURE_HEIGHT - 9, _FIGURE_HEIGHT - 14
    pdf.line(axis_left, y + 3, axis_left, axis_bottom)
    pdf.line(axis_left, axis_bottom, x + width, axis_bottom)
    largest = max(value for _, value in bars)
    slot = (x + width - axis_left) / len(bars)
    pdf.set_font("Helvetica", "", 6.5)
    for position, (label, value) in enumerate(bars):
        bar_height = plot_height * value / largest
        bar_x = axis_left + position * slot + slot * 0.2
        pdf.set_fill_color(170 if position % 2 else 90)
        pdf.rect(bar_x, axis_bottom - bar_height, slot * 0.6, bar_height, style="DF")
        pdf.set_xy(bar_x - slot * 0.2, axis_bottom - bar_height - 3.5)
        pdf.cell(slot, 3, f"{value:g}", align="C")
        pdf.set_xy(bar_x - slot * 0.2, axis_bottom + 1)
        pdf.cell(slot, 3, label, align="C")


def _render_figure(layout: _Layout, figure: Figure) -> None:
    layout.pdf.set_font("Helvetica", "I", layout.body_size - 1)
    caption_lines = layout.wrap(figure.caption)
    layout.reserve(_FIGURE_HEIGHT + len(caption_lines) * layout.line_height + 4)
    labels = [label for label, _ in figure.items]
    if figure.kind == "flow":
        _render_flow(layout.pdf, layout.x, layout.y, layout.width, labels)
    else:
        bars = [(label, value) for label, value in figure.items if value is not None]
        _render_bars(layout.pdf, layout.x, layout.y, layout.width, bars)
    layout.y += _FIGURE_HEIGHT
    _render_caption(layout, figure.caption)
    layout.y += 4.0


def _render_references(layout: _Layout, references: ReferenceList) -> None:
    layout.pdf.set_font("Helvetica", "", layout.body_size - 1.5)
    for entry in references.entries:
        lines = layout.wrap(entry)
        if _NUMBERED_ENTRY.match(entry) or len(lines) == 1:
            layout.write_lines(lines)
        else:
            # An author-year entry has no label to start it; its further lines hang, as such lists are set, so a
            # reader (and a parser) sees where the next entry begins.
            layout.write_lines(lines[:1])
            layout.write_lines(layout.wrap(entry[len(lines[0]):].strip(), _HANGING_INDENT), _HANGING_INDENT)
        layout.y += 1.0


def render_manuscript(manuscript: Manuscript, identity: str) -> RenderedManuscript:
    """Render `manuscript`; `identity` (the forum id) seeds the fixed PDF file id."""
    pdf = _SamplePaper(hashlib.md5(identity.encode("ascii")).hexdigest().upper())
    pdf.set_title(manuscript.title)
    pdf.add_page()
    layout = _Layout(pdf, columns=2 if manuscript.two_column else 1)
    _render_front_matter(layout, manuscript)
    crossed: list[str] = []
    for block in manuscript.blocks:
        if isinstance(block, Heading):
            _render_heading(layout, block)
        elif isinstance(block, Paragraph):
            if _render_paragraph(layout, block):
                crossed.append(block.text)
        elif isinstance(block, Table):
            _render_table(layout, block)
        elif isinstance(block, Figure):
            _render_figure(layout, block)
        else:
            _render_references(layout, block)
    return RenderedManuscript(bytes(pdf.output()), tuple(crossed))

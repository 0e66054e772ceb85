"""Reading order: lines grouped into rows, rows into columns, columns read in order.

A page is two-column when both halves hold several wide lines; a page whose columns are not its halves (a
sidebar beside the main column, three columns, a reference list set in three under one-column text) is split
at its gutters. Full-width lines (title, abstract, wide floats) split the page into bands, read left column
first. A row is the lines sharing a baseline within one column; its cells are the runs separated by more than
a font size.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from peerify_dagster.domain.layout.lines import TextLine, normalise_whitespace
from peerify_dagster.domain.layout.regions import Region


@dataclass
class Row:
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
    def region(self) -> Region:
        return Region(self.page, self.x0, self.y0, self.x1, self.y1)

    @property
    def font_size(self) -> float:
        weights = [max(len(line.text), 1) for line in self.lines]
        return sum(line.font_size * weight for line, weight in zip(self.lines, weights)) / sum(weights)

    def _share(self, attribute: str) -> float:
        total = sum(len(line.text) for line in self.lines) or 1
        return sum(len(line.text) for line in self.lines if getattr(line, attribute)) / total

    @property
    def bold(self) -> bool:
        return self._share("bold") >= 0.8

    @property
    def italic(self) -> bool:
        return self._share("italic") >= 0.8

    @property
    def font(self) -> str:
        faces: dict[str, int] = {}
        for line in self.lines:
            faces[line.font] = faces.get(line.font, 0) + len(line.text)
        return max(faces, key=faces.__getitem__)

    @property
    def lead_emphasis(self) -> int:
        first = min(self.lines, key=lambda line: line.x0)
        return first.lead_emphasis if len(self.lines) == 1 else (
            len(first.text.split()) if (first.bold or first.italic) and not self.bold else first.lead_emphasis
        )


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


def _rows_of(lines: list[TextLine], column: int, page: int) -> list[Row]:
    rows: list[list[TextLine]] = []
    for line in sorted(lines, key=lambda item: (item.y0, item.x0)):
        if rows:
            current = rows[-1]
            centre = (line.y0 + line.y1) / 2
            row_centre = sum((member.y0 + member.y1) / 2 for member in current) / len(current)
            same_baseline = abs(centre - row_centre) <= 0.5 * min(line.height, min(m.height for m in current))
            # A raised or lowered marker set apart by the PDF ("word", "2") belongs to the row it touches.
            marker = len(line.text) <= 3 and line.font_size < 0.85 * max(m.font_size for m in current) and any(
                line.y0 < member.y1 and line.y1 > member.y0 for member in current
            )
            if same_baseline or marker:
                current.append(line)
                continue
        rows.append([line])
    return [Row(page, column, members, _cells_of(members)) for members in rows]


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


def _gutters(lines: Sequence[TextLine]) -> list[tuple[float, float]]:
    """Vertical strips of white space that part a page's columns of text, left to right.

    Lines narrower than most of the text block (a column's lines, a sidebar's) mark where text runs; a strip
    that none of them crosses but a few (one in twenty, two at least), wider than most of a font size, is a
    gutter when the columns on both sides each hold five or more lines of running text (three words or more,
    half the column's width or wider), so a ragged paragraph end, a centred equation or a figure's labels make
    none. A line across a gutter is read as full width (`_order_bands`).
    """
    left, right = min(line.x0 for line in lines), max(line.x1 for line in lines)
    size = statistics.median(line.font_size for line in lines)
    narrow = [line for line in lines if line.x1 - line.x0 < 0.7 * (right - left) and len(line.text) >= 2]
    # A few narrow lines may cross (a byline, a title's last line above a sidebar): they are read as full width.
    crossing_allowed = max(2, len(narrow) // 20)
    edges = sorted([(line.x0, 1) for line in narrow] + [(line.x1, -1) for line in narrow])
    gutters: list[tuple[float, float]] = []
    covering, opened = 0, None
    for x, step in edges:
        if covering <= crossing_allowed and opened is not None and x - opened >= 0.8 * size and opened > left:
            if gutters and opened - gutters[-1][1] < 0.8 * size:
                gutters[-1] = (gutters[-1][0], x)
            else:
                gutters.append((opened, x))
        covering += step
        opened = x if covering <= crossing_allowed else None

    def running_lines(start: float, end: float) -> int:
        return sum(1 for line in lines if line.x0 >= start - 1 and line.x1 <= end + 1
                   and len(line.text.split()) >= 3 and line.x1 - line.x0 >= 0.5 * (end - start))

    while gutters:
        edges = [left, *(edge for gutter in gutters for edge in gutter), right]
        thin = next((index for index in range(len(gutters) + 1)
                     if running_lines(edges[2 * index], edges[2 * index + 1]) < 5), None)
        if thin is None:
            break
        gutters.pop(min(thin, len(gutters) - 1))  # the column merges with its right neighbour (the last, its left)
    return gutters


def _order_bands(lines: Sequence[TextLine], page: int, column_of: Callable[[TextLine], int]) -> list[Row]:
    """Columns read top to bottom, left to right, within bands that full-width lines (column 0) separate."""
    groups: list[tuple[int, list[TextLine]]] = []
    full_width: list[TextLine] = []
    band: dict[int, list[TextLine]] = defaultdict(list)
    for line in sorted(lines, key=lambda item: (item.y0, item.x0)):
        column = column_of(line)
        if column == 0:
            if band:
                groups += sorted(band.items())
                band = defaultdict(list)
            full_width.append(line)
        else:
            if full_width:
                groups.append((0, full_width))
                full_width = []
            band[column].append(line)
    groups += [(0, full_width), *sorted(band.items())]
    return [row for column, members in groups if members for row in _rows_of(members, column, page)]


def order_page(lines: list[TextLine], page: int, page_width: float) -> list[Row]:
    gutters = _gutters(lines) if lines else []
    if len(gutters) < 2 and _is_two_column(lines, page_width):
        return _order_bands(lines, page, lambda line: _column_of(line, page_width))
    if not gutters:
        return _rows_of(lines, 0, page)
    # A sidebar beside the main column, or three columns or more: column k runs between gutters k - 1 and k.
    bounds = [gutter[0] for gutter in gutters] + [float("inf")]
    starts = [float("-inf")] + [gutter[1] for gutter in gutters]

    def column_of(line: TextLine) -> int:
        return next((index + 1 for index, (start, end) in enumerate(zip(starts, bounds))
                     if line.x0 >= start - 1 and line.x1 <= end + 1), 0)

    return _order_bands(lines, page, column_of)

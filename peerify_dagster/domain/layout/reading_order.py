"""Reading order: lines grouped into rows, rows into columns, columns read in order.

A page is two-column when both halves hold several wide lines; full-width lines (title, abstract, wide
floats) split the page into bands, read left column first. A row is the lines sharing a baseline within
one column; its cells are the runs separated by more than a font size.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
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


def order_page(lines: list[TextLine], page: int, page_width: float) -> list[Row]:
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

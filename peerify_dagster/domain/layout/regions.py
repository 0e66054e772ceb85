"""Where a block's text lies on its pages: boxes in PDF points, origin at the page's top-left (as `TextLine`).

* `Region`: one box on one page;
* `merge_regions`: boxes of one page and one column that touch become one box, so a paragraph that runs on into
  the next column or page keeps one box per column (never one box spanning two columns), and text above and below
  a float in one column keeps two boxes rather than one covering the float;
* `LineRegion`: one line of a block, with where its text starts in the block's text, so that a part of a block
  (a chunk cut from a long paragraph) can name the lines it came from. Offsets count non-whitespace characters
  only (`text_offset`): re-spacing a text (collapsing spaces, joining sentences with one space, closing a line-end
  hyphen's space) moves no line.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# Boxes of one column further apart vertically than this (about a blank line of body text) stay apart: what lies
# between them (a figure, a table, a display) is not the text's.
_MAX_MERGE_GAP = 12.0
# Two boxes are in one column when their horizontal overlap is at least this share of the narrower box.
_MIN_COLUMN_OVERLAP = 0.5


@dataclass(frozen=True)
class Region:
    """A box on a page, in points from the page's top-left corner; `page` is 1-based."""

    page: int
    x0: float
    y0: float
    x1: float
    y1: float

    @property
    def area(self) -> float:
        return max(self.x1 - self.x0, 0.0) * max(self.y1 - self.y0, 0.0)

    def union(self, other: Region) -> Region:
        return Region(self.page, min(self.x0, other.x0), min(self.y0, other.y0), max(self.x1, other.x1),
                      max(self.y1, other.y1))

    def joins(self, other: Region) -> bool:
        """Same page, same column (overlapping horizontally) and touching vertically (within a blank line)."""
        if self.page != other.page:
            return False
        overlap = min(self.x1, other.x1) - max(self.x0, other.x0)
        narrower = min(self.x1 - self.x0, other.x1 - other.x0)
        if overlap <= 0 or overlap < _MIN_COLUMN_OVERLAP * narrower:
            return False
        gap = max(self.y0, other.y0) - min(self.y1, other.y1)
        return gap <= _MAX_MERGE_GAP

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Region:
        """A region as the lake stores it (a struct of page, x0, y0, x1, y1)."""
        return cls(int(record["page"]), float(record["x0"]), float(record["y0"]), float(record["x1"]),
                   float(record["y1"]))


@dataclass(frozen=True)
class LineRegion:
    """One line of a block: its box, and `start`, the non-whitespace characters of the block's text before it."""

    start: int
    page: int
    x0: float
    y0: float
    x1: float
    y1: float

    @property
    def region(self) -> Region:
        return Region(self.page, self.x0, self.y0, self.x1, self.y1)

    @classmethod
    def of(cls, start: int, region: Region) -> LineRegion:
        return cls(start, region.page, region.x0, region.y0, region.x1, region.y1)

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> LineRegion:
        return cls.of(int(record["start"]), Region.from_record(record))


def text_offset(text: str) -> int:
    """The unit of `LineRegion.start`: how many non-whitespace characters `text` holds."""
    return len("".join(text.split()))


def merge_regions(regions: Iterable[Region]) -> list[Region]:
    """Boxes that join (`Region.joins`) merged into one, in the order each merged box first appears."""
    merged: list[Region] = []
    for region in regions:
        # A box can bridge two earlier ones (the line between two runs): it absorbs every box it joins.
        position = len(merged)
        while (index := next((i for i, kept in enumerate(merged) if kept.joins(region)), None)) is not None:
            region = merged.pop(index).union(region)
            position = min(position, index)
        merged.insert(position, region)
    return merged


def regions_of_lines(lines: Iterable[LineRegion], start: int, end: int) -> list[Region]:
    """The merged boxes of the lines holding the non-whitespace characters [start, end) of their block's text."""
    ordered = sorted(lines, key=lambda line: line.start)
    covered = [
        line.region for line, following in zip(ordered, [*ordered[1:], None])
        if line.start < end and (following is None or following.start > start)
    ]
    return merge_regions(covered)


def regions_of_span(text: str, lines: Iterable[LineRegion], start: int, end: int,
                    whole: Iterable[Region] = ()) -> list[Region]:
    """The boxes of the characters [start, end) of a block's `text` (a sentence of a paragraph), from the block's
    line regions; the block's own boxes (`whole`) when it has no line regions."""
    placed = regions_of_lines(lines, text_offset(text[:start]), text_offset(text[:end]))
    return placed or list(whole)

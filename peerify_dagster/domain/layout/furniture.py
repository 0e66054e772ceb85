"""Page furniture: what a page carries besides the manuscript's text.

Lines repeated at the same height on many pages (running headers and footers, digits ignored), bare page
numbers alone on their row in the top/bottom band, small print outside the text block that the body text
of all pages defines (conference footers), and vertical margin stamps; it is removed everywhere.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence

from peerify_dagster.domain.layout.lines import TextLine

_PAGE_NUMBER = re.compile(r"^(?:page\s*)?(?:\d{1,4}|[ivxlc]{1,6})(?:\s*(?:of|/)\s*\d{1,4})?$", re.IGNORECASE)
_FURNITURE_BAND = 0.15  # running heads and page numbers live in the top and bottom 15% of a page
FOOTNOTE_MARKER = re.compile(r"^(?:\d{1,2}|[⁰¹²³⁴⁵⁶⁷⁸⁹]{1,2}|[*†‡§¶]+|[a-z])\s?\S")


def dominant_font_size(lines: Sequence[TextLine]) -> float:
    """The font size (to half a point) that sets most characters: the body text's."""
    weights: Counter[float] = Counter()
    for line in lines:
        weights[round(line.font_size * 2) / 2] += len(line.text)
    return weights.most_common(1)[0][0] if weights else 10.0


def percentile(values: Sequence[float], fraction: float) -> float:
    """The value `fraction` of the way through the sorted values, interpolated linearly."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * fraction
    lower = int(position)
    upper = min(lower + 1, len(ordered) - 1)
    return ordered[lower] + (ordered[upper] - ordered[lower]) * (position - lower)


def _signature(text: str) -> str:
    return re.sub(r"\d+", "#", re.sub(r"\s+", "", text.lower()))


def split_furniture(
    lines: Sequence[TextLine], page_sizes: Mapping[int, tuple[float, float]]
) -> tuple[list[TextLine], list[TextLine]]:
    """Split lines into (content, page furniture): running headers/footers, page numbers, margin stamps and
    small print outside the text block. Every page's lines take part, so the rules need no page count."""
    body_size = dominant_font_size(lines)
    n_pages = len({line.page for line in lines})

    def in_band(line: TextLine) -> bool:
        height = page_sizes[line.page][1]
        return line.y1 <= height * _FURNITURE_BAND or line.y0 >= height * (1 - _FURNITURE_BAND)

    furniture: set[int] = set()
    for index, line in enumerate(lines):
        if line.height > 2 * line.width and len(line.text) > 3:
            furniture.add(index)  # vertical margin stamps (arXiv identifiers, line numbers)
    # Running headers and footers: the same text (digits aside) at the same height on many pages.
    positions: dict[str, list[tuple[int, float, int]]] = defaultdict(list)
    for index, line in enumerate(lines):
        if in_band(line) and index not in furniture:
            positions[_signature(line.text)].append((line.page, (line.y0 + line.y1) / 2, index))
    for occurrences in positions.values():
        if len({page for page, _, _ in occurrences}) < 2:
            continue
        centre = statistics.median(y for _, y, _ in occurrences)
        tolerance = 0.015 * max(size[1] for size in page_sizes.values())
        aligned = [(page, index) for page, y, index in occurrences if abs(y - centre) <= tolerance]
        if len({page for page, _ in aligned}) >= max(2, 0.25 * n_pages):
            furniture.update(index for _, index in aligned)
    # Page numbers: a bare number alone on its row, in the top or bottom band or, where the numbers found there
    # keep a constant offset from the page index, anywhere in the outer quarter of the page (a first page
    # numbered lower than the rest).
    by_page: dict[int, list[int]] = defaultdict(list)
    for index, line in enumerate(lines):
        by_page[line.page].append(index)

    def alone(index: int) -> bool:
        line = lines[index]
        return not any(
            other != index and lines[other].y0 < line.y1 and lines[other].y1 > line.y0 for other in by_page[line.page]
        )

    offsets = Counter(
        int(line.text) - line.page for line in lines if re.fullmatch(r"\d{1,4}", line.text.strip()) and in_band(line)
    )
    for index, line in enumerate(lines):
        if index in furniture or not _PAGE_NUMBER.match(line.text.strip()) or not alone(index):
            continue
        height = page_sizes[line.page][1]
        outer = line.y1 <= 0.25 * height or line.y0 >= 0.75 * height
        numbered_in_sequence = line.text.strip().isdigit() and offsets[int(line.text) - line.page] >= 2 and outer
        if in_band(line) or numbered_in_sequence:
            furniture.add(index)
    # Small print beyond the text block that body lines span on most pages (first-page venue footers).
    tops, bottoms = [], []
    for page, indexes in by_page.items():
        width = page_sizes[page][0]
        body = [
            lines[index] for index in indexes
            if index not in furniture and abs(lines[index].font_size - body_size) <= 0.12 * body_size
            and lines[index].width >= 0.2 * width
        ]
        if len(body) >= 3:
            tops.append(min(line.y0 for line in body))
            bottoms.append(max(line.y1 for line in body))
    if bottoms:
        block_top, block_bottom = percentile(tops, 0.1), percentile(bottoms, 0.9)

        def isolated(index: int) -> bool:
            """Nothing but furniture within a line and a half above (a footnote's second line is not isolated)."""
            line = lines[index]
            above = [lines[other] for other in by_page[line.page] if other != index and other not in furniture
                     and lines[other].y1 <= line.y0 + 1 and lines[other].x0 < line.x1 and lines[other].x1 > line.x0]
            return not above or line.y0 - max(other.y1 for other in above) > 1.5 * line.height

        for index in sorted(range(len(lines)), key=lambda item: (lines[item].page, lines[item].y0)):
            line = lines[index]
            if index in furniture or not in_band(line) or line.font_size > body_size * 1.05:
                continue
            below = line.y0 > block_bottom + 0.8 * body_size and line.font_size < body_size * 0.95 \
                and not FOOTNOTE_MARKER.match(line.text) and isolated(index)
            above = line.y1 < block_top - 0.8 * body_size
            if below or above:
                furniture.add(index)
    content = [line for index, line in enumerate(lines) if index not in furniture]
    return content, [lines[index] for index in sorted(furniture)]

"""Floats: tables, figures and their captions.

Tables are runs of rows made of separated cells or of numbers; figure text is text inside an image (or, as
`elements` decides, a run of non-prose rows next to a figure caption); captions ("Figure 2:", "Table 1.")
are always their own blocks.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from peerify_dagster.domain.layout.lines import NUMERIC_TOKEN, Box
from peerify_dagster.domain.layout.reading_order import Row

_FLOAT_LABEL = r"(?:Figure|Fig\.|Table|Tab\.)"
CAPTION = re.compile(
    rf"^(?:{_FLOAT_LABEL}|Algorithm|Listing)\s*(?:\d+|[A-Z]\.?\d+)(?:\s*\([a-z]\))?\s*(?P<mark>[:.|])"
)

# Journal styles set the label apart by its face or the caption's smaller type, with no mark after the number:
# "Fig. 2 M-waves during ...", or alone on its line above the caption's text (Elsevier's "Table 1"). Only a label
# set apart opens such a caption ("Figure 1 shows ..." is prose).
UNMARKED_CAPTION = re.compile(rf"^(?:{_FLOAT_LABEL}|Algorithm)\s*\d+(?:\s+(?=[A-Z(])|\s*$)")


def is_caption(text: str) -> bool:
    return bool(CAPTION.match(text))


def caption_kind(caption: str) -> str:
    return "table" if re.match(r"^(?:Table|Tab\.)", caption) else "figure"


def is_table_row(row: Row) -> bool:
    # Narrow cells are merged into one line by the PDF parser; rows of numbers still read as a grid.
    if len(row.cells) >= 2:
        return True
    tokens = row.text.split()
    numeric = sum(1 for token in tokens if NUMERIC_TOKEN.match(token))
    return numeric >= 2 and numeric >= 0.4 * len(tokens)


def table_end(rows: Sequence[Row], start: int) -> int:
    """End of the grid-like run of rows starting at `start`, or `start` when there is none."""
    end = start
    while end < len(rows) and is_table_row(rows[end]):
        row = rows[end]
        if end > start:
            above = rows[end - 1]
            if (above.page, above.column) != (row.page, row.column) or row.y0 - above.y1 > 2.5 * above.height:
                break
        end += 1
    run = rows[start:end]
    # Two rows make a table only when one has separate cells; rows of numbers alone need three.
    if len(run) >= 3 or (len(run) == 2 and any(len(row.cells) >= 2 for row in run)):
        return end
    return start


def in_image(row: Row, image_boxes: Mapping[int, Sequence[Box]]) -> bool:
    return any(
        x0 - 2 <= row.x0 and row.x1 <= x1 + 2 and y0 - 2 <= row.y0 and row.y1 <= y1 + 2
        for x0, y0, x1, y1 in image_boxes.get(row.page, ())
    )

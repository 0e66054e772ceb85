"""Recover a manuscript's logical structure from positioned text lines.

The model-free PDF path (see `peerify_dagster.resources.document_parser`) yields text lines with a box,
a font size, bold/italic flags and no structure. This package rebuilds the structure with the cues a
reader uses, always several together, never one alone, one module per concern, each using only those
above it:

* `lines`: the text lines, text clean-up, fonts, de-hyphenation;
* `regions`: where a block lies on its pages (boxes per page and column, line by line);
* `headings`: what a heading's text says (number, role, glued words); `references`: reference entries;
* `furniture`: running heads and footers, page numbers, margin stamps, removed everywhere;
* `reading_order`: rows, columns and the order a page is read in;
* `floats`: tables, figures and captions;
* `blocks`: blocks and `assemble_blocks`, which assigns section paths and roles for every input format;
* `elements`: the walk over rows that types them, and `recover_blocks`, the whole path.

The names below are those the rest of the code uses; importers may also name the module.
"""

from peerify_dagster.domain.layout.blocks import (
    BLOCK_KINDS,
    LAYOUT_VERSION,
    Block,
    LayoutElement,
    assemble_blocks,
    elements_from_plain_text,
)
from peerify_dagster.domain.layout.elements import recover_blocks
from peerify_dagster.domain.layout.floats import is_caption
from peerify_dagster.domain.layout.furniture import split_furniture
from peerify_dagster.domain.layout.headings import HeadingInfo, describe_heading, is_known_section_name, unglue_heading
from peerify_dagster.domain.layout.lines import (
    Box,
    TextLine,
    Vocabulary,
    clean_line_text,
    is_bold_font,
    is_italic_font,
    join_lines,
    normalise_whitespace,
    unreadable_share,
)
from peerify_dagster.domain.layout.regions import LineRegion, Region, merge_regions

__all__ = [
    "BLOCK_KINDS",
    "LAYOUT_VERSION",
    "Block",
    "Box",
    "HeadingInfo",
    "LayoutElement",
    "LineRegion",
    "Region",
    "TextLine",
    "Vocabulary",
    "assemble_blocks",
    "clean_line_text",
    "describe_heading",
    "elements_from_plain_text",
    "is_bold_font",
    "is_caption",
    "is_italic_font",
    "is_known_section_name",
    "join_lines",
    "merge_regions",
    "normalise_whitespace",
    "recover_blocks",
    "split_furniture",
    "unglue_heading",
    "unreadable_share",
]

"""Positions: every block keeps where it lies on its pages, every chunk the union of its blocks' boxes.

Offline: box merging, blocks of a hand-made two-column page, chunk unions and split blocks placed by their lines,
Docling's bottom-left provenance boxes, a turned page, the stored columns. With `../shared/real-data/pdfs`
present, the boxes of real papers' chunks are checked against the PDF's own text positions (pypdfium2): the
chunk's words lie inside its boxes, what lies inside is the chunk's, and the boxes are far from the whole page.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import polars as pl
import pypdfium2 as pdfium
import pytest

from peerify_dagster.assets.steps.parsed_tables import PARSED_SCHEMA, parsed_row
from peerify_dagster.domain.chunking import CHUNK_SCHEMA, ChunkingConfig, chunk_document
from peerify_dagster.domain.layout import Block, LineRegion, Region, TextLine, merge_regions, recover_blocks
from peerify_dagster.domain.layout.regions import regions_of_lines, text_offset
from peerify_dagster.domain.regions import boxes_on_page, page_sizes_of, regions_on_page
from peerify_dagster.resources.document_parser import DocumentParser, ParsedDocument, _elements_from_docling
from tests import fixtures_pdf

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLE_PDFS = REPO_ROOT / "peerify_dagster" / "sample_venue" / "snapshot" / "pdfs"
REAL_PDFS = REPO_ROOT.parent / "shared" / "real-data" / "pdfs"
needs_real_pdfs = pytest.mark.skipif(not REAL_PDFS.is_dir(), reason="../shared/real-data/pdfs is not present")
# Two-column ACL, single-column NeurIPS with long paragraphs, ACM with running headers.
REAL_PAPERS = ("N18-3011.pdf", "2206.10883v3.pdf", "2203.00130v1.pdf")
_LIGATURES = str.maketrans({"\ufb00": "ff", "\ufb01": "fi", "\ufb02": "fl", "\ufb03": "ffi", "\ufb04": "ffl"})


@pytest.fixture(scope="module")
def parser() -> DocumentParser:
    return DocumentParser()


def _area(regions: list[Region]) -> float:
    return sum(region.area for region in regions)


# --- Boxes ---------------------------------------------------------------------------------------


def test_boxes_of_one_column_that_touch_merge_and_columns_pages_and_floats_stay_apart() -> None:
    left_top, left_below = Region(1, 72, 100, 288, 200), Region(1, 72, 206, 250, 260)
    right = Region(1, 324, 100, 540, 200)
    after_a_float = Region(1, 72, 400, 288, 500)  # 140 pt below: a figure lies between
    next_page = Region(2, 72, 100, 288, 200)
    assert merge_regions([left_top, left_below]) == [Region(1, 72, 100, 288, 260)]
    assert merge_regions([left_top, right, next_page]) == [left_top, right, next_page]
    assert merge_regions([left_top, after_a_float]) == [left_top, after_a_float]
    # A box between two others bridges them: one box, where the first of them was.
    bridge = Region(1, 72, 205, 288, 395)
    assert merge_regions([right, left_top, after_a_float, bridge]) == [right, Region(1, 72, 100, 288, 500)]
    # A short last line (left half of a full-width abstract) is in the abstract's column.
    assert merge_regions([Region(1, 100, 160, 500, 250), Region(1, 100, 255, 150, 265)]) == [
        Region(1, 100, 160, 500, 265)]


def test_lines_holding_a_range_of_a_blocks_text() -> None:
    lines = [LineRegion.of(0, Region(1, 72, 100, 288, 110)), LineRegion.of(30, Region(1, 72, 111, 288, 121)),
             LineRegion.of(60, Region(1, 324, 100, 540, 110))]
    assert regions_of_lines(lines, 0, 30) == [Region(1, 72, 100, 288, 110)]
    assert regions_of_lines(lines, 25, 40) == [Region(1, 72, 100, 288, 121)]
    assert regions_of_lines(lines, 50, 90) == [Region(1, 72, 111, 288, 121), Region(1, 324, 100, 540, 110)]
    assert text_offset("re-\n spaced  text") == text_offset("re- spaced text") == 13


def test_regions_become_percent_boxes_of_their_page_only() -> None:
    stored = [{"page": 1, "x0": 61.2, "y0": 79.2, "x1": 306.0, "y1": 158.4},
              {"page": 2, "x0": 0.0, "y0": 0.0, "x1": 612.0, "y1": 396.0}]
    assert regions_on_page(stored, 1) == [Region(1, 61.2, 79.2, 306.0, 158.4)]
    sizes = page_sizes_of({"page_sizes": [{"page": 1, "width": 612.0, "height": 792.0},
                                          {"page": 2, "width": 612.0, "height": 792.0},
                                          {"page": 3, "width": 0.0, "height": 0.0}]})
    assert sizes == {1: (612.0, 792.0), 2: (612.0, 792.0)}  # a page of no size places nothing
    assert boxes_on_page(stored, 1, sizes) == [{"left": 10.0, "top": 10.0, "width": 40.0, "height": 10.0}]
    assert boxes_on_page([Region(2, 0.0, 0.0, 612.0, 396.0)], 2, sizes) == [
        {"left": 0.0, "top": 0.0, "width": 100.0, "height": 50.0}]
    assert boxes_on_page(stored, 3, sizes) == []
    assert regions_on_page(stored, 3) == []


def test_a_box_past_the_page_edge_is_clipped_one_off_the_page_dropped_and_none_drawn_without_sizes() -> None:
    regions = [{"page": 1, "x0": -10.0, "y0": 90.0, "x1": 50.0, "y1": 130.0},
               {"page": 1, "x0": 120.0, "y0": 10.0, "x1": 150.0, "y1": 20.0}]
    assert boxes_on_page(regions, 1, {1: (100.0, 100.0)}) == [
        {"left": 0.0, "top": 90.0, "width": 50.0, "height": 10.0}]
    assert boxes_on_page(regions, 1, page_sizes_of(None)) == []
    assert boxes_on_page(None, 1, {1: (100.0, 100.0)}) == []


# --- Blocks of a hand-made two-column page -----------------------------------------------------

_WORDS = ("the gate reads every edge and decides whether its message helps the node or hurts it when the two "
          "labels differ").split()


def _prose(count: int, first: int) -> list[str]:
    return [" ".join(_WORDS[(7 * line + word) % len(_WORDS)] for word in range(9))
            for line in range(first, first + count)]


def _column(x0: float, top: float, texts: list[str], indent: bool, last_width: float | None) -> list[TextLine]:
    """Lines of 9 pt type, 11 pt apart, across a 216 pt column; the first indented, the last `last_width` wide."""
    lines = []
    for index, text in enumerate(texts):
        left = x0 + (12 if indent and index == 0 else 0)
        right = x0 + (last_width if last_width and index == len(texts) - 1 else 216)
        lines.append(TextLine(1, left, top + 11 * index, right, top + 11 * index + 9, 9.0, False, text))
    return lines


@pytest.fixture(scope="module")
def two_column_blocks() -> list[Block]:
    first = _prose(6, 0)
    first[-1] += "."
    crossing = _prose(10, 6)
    crossing[-1] += "."
    last = _prose(5, 20)
    last[-1] += "."
    lines = (_column(72, 72, first, True, 100) + _column(72, 142, crossing[:6], True, None)
             + _column(324, 72, crossing[6:], False, 90) + _column(324, 120, last, True, 80))
    return recover_blocks(lines, {1: (612.0, 792.0)})


def test_a_paragraph_running_on_into_the_next_column_keeps_one_box_per_column(two_column_blocks) -> None:
    assert [block.kind for block in two_column_blocks] == ["paragraph"] * 3
    first, crossing, last = two_column_blocks
    assert first.regions == [Region(1, 72, 72, 288, 136)]
    # Left column from its indented first line to the column foot, then the top of the right column.
    assert crossing.regions == [Region(1, 72, 142, 288, 206), Region(1, 324, 72, 540, 114)]
    assert last.regions == [Region(1, 324, 120, 540, 173)]
    # Line by line: ten lines, each starting where its words start in the block's text.
    assert len(crossing.line_regions) == 10
    second_line = crossing.line_regions[1]
    assert second_line.region == Region(1, 72, 153, 288, 162)
    assert crossing.text.replace(" ", "")[second_line.start:].startswith(_prose(1, 7)[0].replace(" ", ""))


# --- Chunks --------------------------------------------------------------------------------------


def _block(text: str, order: int, regions: list[Region], lines: list[LineRegion] | None = None,
           kind: str = "paragraph") -> Block:
    return Block(kind, text, regions[0].page, ["2 Method"], False, order, regions, lines or [])


def test_a_chunk_holds_the_union_of_its_blocks_boxes() -> None:
    above = _block("First paragraph of the method.", 0, [Region(1, 72, 100, 288, 150)])
    below = _block("Second paragraph, which runs on into the next column.", 1,
                   [Region(1, 72, 156, 288, 700), Region(1, 324, 72, 540, 120)])
    caption = _block("Figure 1: The gate.", 2, [Region(1, 324, 300, 540, 320)], kind="caption")
    figure = _block("gate MLP tanh", 3, [Region(1, 330, 130, 530, 290)], kind="figure")
    chunks = chunk_document("P", [above, below, figure, caption])
    assert [chunk.kind for chunk in chunks] == ["paragraph", "caption"]
    assert chunks[0].regions == [Region(1, 72, 100, 288, 700), Region(1, 324, 72, 540, 120)]
    # A caption carries the text drawn in its figure, and so the figure's box (set just above it: one box).
    assert chunks[1].regions == [Region(1, 324, 130, 540, 320)]
    apart = replace(figure, regions=[Region(1, 330, 130, 530, 250)])
    assert chunk_document("P", [apart, caption])[0].regions == [Region(1, 324, 300, 540, 320), apart.regions[0]]


def test_parts_of_a_split_block_keep_the_boxes_of_their_own_lines() -> None:
    sentences = [f"Sentence {index} of the long method paragraph describes one step of the pipeline in detail."
                 for index in range(40)]
    text = " ".join(sentences)
    # Two sentences per line, 20 lines down a column.
    lines = [LineRegion.of(text_offset(" ".join(sentences[:2 * row])),
                           Region(1, 72, 100 + 12 * row, 288, 110 + 12 * row)) for row in range(20)]
    block = _block(text, 0, [Region(1, 72, 100, 288, 338)], lines)
    parts = chunk_document("P", [block], ChunkingConfig(heading_in_text=False))
    assert len(parts) >= 2
    assert " ".join(part.text for part in parts) == text
    for part in parts:
        numbers = [int(number) for number in re.findall(r"Sentence (\d+)", part.text)]
        first, last = numbers[0], numbers[-1]
        assert part.regions == [Region(1, 72, 100 + 12 * (first // 2), 288, 110 + 12 * (last // 2))]
    # Without lines, each part can only be placed where the whole block is.
    unplaced = chunk_document("P", [replace(block, line_regions=[])], ChunkingConfig(heading_in_text=False))
    assert [part.text for part in unplaced] == [part.text for part in parts]
    assert all(part.regions == block.regions for part in unplaced)


# --- Parsers -------------------------------------------------------------------------------------


def test_docling_provenance_boxes_are_turned_to_the_top_left_origin() -> None:
    from docling_core.types.doc import BoundingBox, CoordOrigin, DocItemLabel, DoclingDocument, ProvenanceItem, Size

    document = DoclingDocument(name="layout")
    document.add_page(page_no=1, size=Size(width=612, height=792))
    document.add_page(page_no=2, size=Size(width=612, height=792))
    bottom_left = BoundingBox(l=72, t=700, r=300, b=640, coord_origin=CoordOrigin.BOTTOMLEFT)
    top_left = BoundingBox(l=324, t=72, r=540, b=120, coord_origin=CoordOrigin.TOPLEFT)
    document.add_text(DocItemLabel.TEXT, "A paragraph the layout model found near the top.",
                      prov=ProvenanceItem(page_no=1, bbox=bottom_left, charspan=(0, 10)))
    document.add_text(DocItemLabel.TEXT, "A paragraph on the second page.",
                      prov=ProvenanceItem(page_no=2, bbox=top_left, charspan=(0, 10)))
    elements = _elements_from_docling(document)
    assert [element.regions for element in elements] == [
        (Region(1, 72, 92, 300, 152),), (Region(2, 324, 72, 540, 120),)]
    assert [element.page for element in elements] == [1, 2]


def test_formats_without_positions_have_no_regions_and_no_page_sizes(parser: DocumentParser) -> None:
    document = parser.parse(b"# Title\n\n## 1 Introduction\n\nReviewers make claims about baselines.\n", "paper.md")
    assert document.blocks and all(block.regions == [] and block.line_regions == [] for block in document.blocks)
    assert document.page_sizes == {}
    text = parser.parse(b"1 Introduction\n\nReviewers make claims about baselines.\n", "paper.txt")
    assert all(block.regions == [] for block in text.blocks) and text.page_sizes == {}


def test_regions_on_a_turned_page_are_on_the_page_as_displayed(parser: DocumentParser) -> None:
    data = fixtures_pdf.rotated_paper()
    document = parser.parse(data, "rotated.pdf")
    assert document.options["rotated_pages"] == [1]
    assert document.page_sizes == {1: (792.0, 612.0), 2: (612.0, 792.0)}
    title = next(block for block in document.blocks if block.kind == "title")
    pdf = pdfium.PdfDocument(data)
    page = pdf[0]
    assert page.get_size() == (792.0, 612.0)
    # pdfium places characters on the unrotated page (bottom-left origin); the page is displayed turned by 90°
    # clockwise, so an unrotated (x, y) is displayed at (y, x) from the top-left.
    textpage = page.get_textpage()
    start = textpage.get_text_range().index(title.text[:20])

    def displayed(loose: bool) -> Region:
        boxes = [textpage.get_charbox(index, loose=loose) for index in range(start, start + len(title.text))]
        return Region(1, min(b[1] for b in boxes), min(b[0] for b in boxes), max(b[3] for b in boxes),
                      max(b[2] for b in boxes))

    def within(inner: Region, outer: Region, padding: float = 1.0) -> bool:
        return outer.x0 - padding <= inner.x0 and outer.y0 - padding <= inner.y0 \
            and inner.x1 <= outer.x1 + padding and inner.y1 <= outer.y1 + padding

    (region,) = title.regions
    assert region.y1 - region.y0 > 5 * (region.x1 - region.x0)  # the title runs down the displayed page
    # Between the glyphs' own outlines and their font boxes.
    assert within(displayed(loose=False), region) and within(region, displayed(loose=True))


# --- Storage -------------------------------------------------------------------------------------


def test_blocks_page_sizes_and_chunk_regions_are_stored_and_read_back(tmp_path: Path, parser: DocumentParser) -> None:
    from peerify_dagster.assets.manuscripts import paper_chunk_rows

    document = parser.parse(SAMPLE_PDFS / "Hp4sLx9TcV.pdf")
    path = tmp_path / "parsed.parquet"
    pl.DataFrame([parsed_row("tiny", None, document)], schema=PARSED_SCHEMA).write_parquet(path)
    stored = pl.read_parquet(path)
    assert stored.schema == pl.Schema(PARSED_SCHEMA)
    row = stored.row(0, named=True)
    assert [Block.from_record(record) for record in row["blocks"]] == document.blocks
    pdf = pdfium.PdfDocument(SAMPLE_PDFS / "Hp4sLx9TcV.pdf")
    assert [size["page"] for size in row["page_sizes"]] == list(range(1, len(pdf) + 1))
    for size, page in zip(row["page_sizes"], pdf):
        assert (size["width"], size["height"]) == pytest.approx(page.get_size(), abs=0.01)

    rows = paper_chunk_rows("tiny", row, ChunkingConfig())  # what the chunks step makes of the stored row
    assert rows and all(list(chunk) == list(CHUNK_SCHEMA) for chunk in rows)
    frame = pl.DataFrame(rows, schema=CHUNK_SCHEMA)
    expected = chunk_document(document.paper_id, document.blocks)
    assert frame["text"].to_list() == [chunk.text for chunk in expected]
    assert frame["regions"].to_list() == [[vars(region) for region in chunk.regions] for chunk in expected]
    assert all(frame["regions"].list.len() >= 1)


# --- The sample venue's two-column paper -------------------------------------------------------


def test_sample_paragraphs_crossing_a_column_or_a_page_keep_a_box_on_each(parser: DocumentParser) -> None:
    document = parser.parse(SAMPLE_PDFS / "Hp4sLx9TcV.pdf")
    paragraphs = [block for block in document.blocks if block.kind == "paragraph"]
    across_columns = [block for block in paragraphs if len(block.regions) >= 2
                      and block.regions[0].page == block.regions[1].page]
    assert across_columns, "no paragraph of the two-column sample paper runs on into the next column"
    for block in across_columns:
        left, right = block.regions[:2]
        assert left.x1 < 306 < right.x0  # one box per column, never one across the gutter
    across_pages = [block for block in paragraphs if len({region.page for region in block.regions}) == 2]
    assert across_pages and all(block.page == block.regions[0].page for block in across_pages)
    assert all(region.x1 - region.x0 < 306 for block in paragraphs for region in block.regions)


# --- Real papers, checked against the PDF's own text positions ---------------------------------


def _normalised(text: str) -> str:
    # pdfium marks a line-end hyphen with \x02 and ends lines with \r\n; the chunk's words are de-hyphenated.
    return re.sub(r"[-\x02]\s*\n\s*|\x02", "", text.replace("\r", "")).translate(_LIGATURES).lower()


def _words(text: str) -> list[str]:
    return [word.lower() for word in re.findall(r"[^\W\d_]{4,}", text)]


@pytest.fixture(scope="module")
def real_papers(parser: DocumentParser) -> dict[str, tuple[ParsedDocument, pdfium.PdfDocument]]:
    return {name: (parser.parse(REAL_PDFS / name), pdfium.PdfDocument(str(REAL_PDFS / name))) for name in REAL_PAPERS}


def _text_inside(pdf: pdfium.PdfDocument, regions: list[Region], padding: float = 2.0) -> str:
    parts = []
    for region in regions:
        page = pdf[region.page - 1]
        height = page.get_size()[1]
        # pdfium's origin is the page's bottom-left.
        parts.append(page.get_textpage().get_text_bounded(
            region.x0 - padding, height - region.y1 - padding, region.x1 + padding, height - region.y0 + padding))
    return _normalised("\n".join(parts))


@needs_real_pdfs
@pytest.mark.parametrize("name", REAL_PAPERS)
def test_real_chunks_words_lie_inside_their_boxes_and_the_boxes_hold_little_else(real_papers, name: str) -> None:
    document, pdf = real_papers[name]
    for page in range(len(pdf)):
        assert pdf[page].get_size() == pytest.approx(document.page_sizes[page + 1], abs=0.5)
    chunks = chunk_document(document.paper_id, document.blocks)
    recall, precision = [], []
    for chunk in chunks:
        body = chunk.text.split("\n", 1)[1] if chunk.section_path else chunk.text  # the heading line is elsewhere
        inside = _text_inside(pdf, chunk.regions)
        words = _words(body)
        if len(words) >= 10:
            share = sum(word in inside for word in words) / len(words)
            assert share >= 0.9, (chunk.chunk_id, share, [word for word in words if word not in inside][:10])
            recall.append(share)
        found = _words(inside)
        if len(found) >= 10:
            precision.append(sum(word in body.lower() for word in found) / len(found))
        page_width, page_height = document.page_sizes[chunk.page]
        if chunk.kind in ("paragraph", "abstract", "appendix") and len(chunk.regions) == 1:
            assert chunk.regions[0].area < 0.6 * page_width * page_height, chunk.chunk_id
    assert len(recall) >= 0.8 * len(chunks)
    assert sum(recall) / len(recall) >= 0.98
    # What the boxes hold is the chunk's own text (a box of the whole column would hold its neighbours).
    assert sum(precision) / len(precision) >= 0.95 and min(precision) >= 0.6


@needs_real_pdfs
def test_real_long_paragraph_split_into_chunks_places_each_part_on_its_own_lines(real_papers) -> None:
    document, pdf = real_papers["2203.00130v1.pdf"]
    split = 0
    for block in document.blocks:
        parts = chunk_document(document.paper_id, [block], ChunkingConfig(heading_in_text=False))
        if block.kind != "paragraph" or len(parts) < 2:
            continue
        split += 1
        assert len({tuple(part.regions) for part in parts}) == len(parts)
        assert all(_area(part.regions) < _area(block.regions) for part in parts)
        for part in parts:
            inside = _text_inside(pdf, part.regions)
            words = _words(part.text)
            assert sum(word in inside for word in words) >= 0.9 * len(words), part.text[:60]
    assert split >= 5


@needs_real_pdfs
def test_regions_never_change_a_chunk_text(real_papers) -> None:
    for document, _ in real_papers.values():
        unplaced = [replace(block, regions=[], line_regions=[]) for block in document.blocks]
        assert [(c.chunk_id, c.text) for c in chunk_document(document.paper_id, document.blocks)] == [
            (c.chunk_id, c.text) for c in chunk_document(document.paper_id, unplaced)]

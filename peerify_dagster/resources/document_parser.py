"""Parse manuscripts (PDF, HTML, Markdown, plain text) into ordered, section-aware blocks.

Which Docling path runs, and why:

* With `artifacts_path` (a local copy of Docling's layout/table models) PDFs go through
  Docling's full `StandardPdfPipeline`; headings, captions and tables come from its
  `DoclingDocument` (parser "docling-layout"). OCR stays off: a manuscript without a text layer
  is reported, not guessed at.
* Without it, PDFs go through docling-slim's model-free `NativePdfPipeline` (parser
  "docling-native"). Its `DoclingDocument` holds only unordered text items, but the
  `ConversionResult` keeps each page's docling-parse `SegmentedPdfPage`, whose text-line and
  word cells carry a box and a font name. Those are all that structure recovery needs: a line's
  size is the box height most of its words share (docling-parse reports no point size, and a
  raised footnote marker stretches a line's box), its weight and slant come from its words' font
  names (`Helvetica-Bold`, `NimbusRomNo9L-Medi`, `CMBX10`, `LinLibertineTI`), and a line that
  opens in bold or italic records it (a run-in heading). A page whose text runs sideways
  (a landscape page) is turned upright first. Calling docling-parse directly would give the same
  cells, so the Docling pipeline is used and its version recorded.
  `peerify_dagster.domain.layout` rebuilds headings, paragraphs, tables and reading order.
* HTML and Markdown go through Docling's own backends ("docling-html", "docling-markdown");
  plain text is split on blank lines ("plain-text").

Before Docling sees a PDF, a pypdf pre-flight turns the common unusable inputs into
`ManuscriptParseError`s with a machine-readable reason: "not_a_pdf", "truncated", "damaged",
"encrypted" (a user password is needed; owner-only restrictions are read normally) and
"zero_pages"; after reading the text layer, "no_text_layer" when no page holds any text (scanned)
and "broken_font_encoding" when most characters are glyphs without a Unicode mapping. Scanned
pages among text pages and rotated pages are named in the options (`pages_without_text`,
`rotated_pages`); the rest of the paper parses.

Every block keeps where it lies (`Block.regions`, points from the top-left of the page as displayed, see
`peerify_dagster.domain.layout.regions`): on the model-free path from the boxes of its lines (turned back on a
page whose text was turned to be read), on the layout-model path from its items' provenance boxes (whose origin
is the page's bottom-left); HTML, Markdown and plain text have no positions, and their blocks no regions.
`ParsedDocument.page_sizes` gives the frame.

A parser given a lake (`cache_root`) parses a PDF once per lake: what a parse gave (the document, or a parse error its
content causes) is kept in the lake's parse cache (`parse_cache.py`) by the PDF's sha256 and the parser's identity, and
the same bytes again are answered from there without Docling being loaded.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from io import BytesIO
from pathlib import Path
from typing import Any, Literal

from peerify_dagster.domain.code_versions import code_version
from peerify_dagster.domain.layout.blocks import (
    LAYOUT_VERSION,
    Block,
    LayoutElement,
    assemble_blocks,
    elements_from_plain_text,
)
from peerify_dagster.domain.layout.elements import recover_blocks
from peerify_dagster.domain.layout.lines import (
    TextLine,
    clean_line_text,
    is_bold_font,
    is_italic_font,
    is_superscript_word,
    unreadable_share,
    with_superscripts,
)
from peerify_dagster.domain.layout.regions import LineRegion, Region, merge_regions
from peerify_dagster.resources.parse_cache import ParseCache
from peerify_dagster.resources.store import Location

ParserName = Literal[
    "docling-layout", "docling-native", "docling-html", "docling-markdown", "plain-text"
]
SourceFormat = Literal["pdf", "html", "markdown", "text"]
# "3 Method", "3.2 Setup": a numbered section, never a document title ("A ..." is ambiguous: an appendix
# letter or an article, so lettered headings are told apart by position instead).
_NUMBERED_HEADING = re.compile(r"^\d+(\.\d+)*\.?\s+\S")

_FORMAT_BY_HINT: dict[str, SourceFormat] = {
    "application/pdf": "pdf",
    "pdf": "pdf",
    "text/html": "html",
    "application/xhtml+xml": "html",
    "html": "html",
    "htm": "html",
    "xhtml": "html",
    "text/markdown": "markdown",
    "text/x-markdown": "markdown",
    "md": "markdown",
    "markdown": "markdown",
    "text/plain": "text",
    "txt": "text",
    "text": "text",
}

_log = logging.getLogger(__name__)


class ManuscriptParseError(Exception):
    """A manuscript that cannot be parsed; `reason` is a short machine-readable code."""

    # Reasons that say more about the machine than about the PDF (a model missing, a backend crashing): never cached.
    TRANSIENT_REASONS = frozenset({"layout_model_unavailable", "conversion_failed"})

    def __init__(self, paper_id: str, reason: str, detail: str) -> None:
        self.paper_id = paper_id
        self.reason = reason
        self.detail = detail
        super().__init__(f"manuscript {paper_id!r} could not be parsed [{reason}]: {detail}")


@dataclass
class ParsedDocument:
    """One parsed manuscript and the provenance of how it was parsed; `page_sizes`: page -> (width, height) in
    points as the page is displayed (the frame of the blocks' regions), empty for a format without pages."""

    paper_id: str
    parser: ParserName
    parser_version: str
    options: dict[str, Any]
    pages: int
    blocks: list[Block] = field(default_factory=list)
    page_sizes: dict[int, tuple[float, float]] = field(default_factory=dict)

    def to_record(self) -> dict[str, Any]:
        """The document as JSON holds it (the parse cache's entries), without its paper id: the same PDF is the same
        document under any id."""
        return {"parser": self.parser, "parser_version": self.parser_version, "options": self.options,
                "pages": self.pages, "blocks": [asdict(block) for block in self.blocks],
                "page_sizes": [[page, width, height] for page, (width, height) in sorted(self.page_sizes.items())]}

    @classmethod
    def from_record(cls, paper_id: str, record: Mapping[str, Any]) -> ParsedDocument:
        """The document of `to_record`'s record, named `paper_id`; KeyError, TypeError or ValueError for a record
        that is not one."""
        return cls(paper_id, record["parser"], record["parser_version"], dict(record["options"]), int(record["pages"]),
                   [Block.from_record(block) for block in record["blocks"]],
                   {int(page): (float(width), float(height)) for page, width, height in record["page_sizes"]})


@dataclass
class BatchResult:
    """Documents that parsed, and one error per manuscript that did not."""

    documents: list[ParsedDocument]
    failures: list[ManuscriptParseError]


def _package_version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "absent"


def parser_version() -> str:
    """Versions of everything that shapes the blocks, for provenance and asset code versions."""
    packages = ("docling-slim", "docling-core", "docling-parse", "pypdf")
    return "; ".join([f"{name} {_package_version(name)}" for name in packages] + [f"peerify-layout {LAYOUT_VERSION}"])


def _detect_format(data: bytes, source_name: str | None, mime: str | None, paper_id: str) -> SourceFormat:
    for hint in (mime, Path(source_name).suffix if source_name else None):
        if hint:
            key = hint.lower().split(";")[0].strip().lstrip(".")
            if key in _FORMAT_BY_HINT:
                return _FORMAT_BY_HINT[key]
    head = data[:1024].lstrip()
    if b"%PDF-" in head:
        return "pdf"
    if head[:1] == b"<" and any(tag in head.lower() for tag in (b"<html", b"<!doctype html", b"<body", b"<p")):
        return "html"
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        raise ManuscriptParseError(paper_id, "unsupported_format", "binary input that is neither PDF nor "
                                   "text") from None
    return "text"


def _check_pdf(paper_id: str, data: bytes) -> None:
    """Reject PDFs that Docling would fail on with a vague message, naming the actual problem."""
    from pypdf import PasswordType, PdfReader

    if b"%PDF-" not in data[:1024]:
        raise ManuscriptParseError(paper_id, "not_a_pdf", f"no %PDF- header; starts with {data[:16]!r}")
    if b"%%EOF" not in data[-2048:]:
        raise ManuscriptParseError(paper_id, "truncated", f"no %%EOF marker at the end of {len(data)} bytes")
    try:
        reader = PdfReader(BytesIO(data))
        if reader.is_encrypted and reader.decrypt("") == PasswordType.NOT_DECRYPTED:
            raise ManuscriptParseError(paper_id, "encrypted", "the PDF needs a password to open")
        page_count = len(reader.pages)
    except ManuscriptParseError:
        raise
    except Exception as error:  # pypdf raises many types for broken files; all mean the same here
        raise ManuscriptParseError(paper_id, "damaged", f"pypdf cannot read it: {error}") from error
    if page_count == 0:
        raise ManuscriptParseError(paper_id, "zero_pages", "the PDF has no pages")


def _table_text(table: Any) -> str:
    rows = [" | ".join(cell.text.strip() for cell in row) for row in table.data.grid]
    return "\n".join(row for row in rows if row.strip(" |"))


def _page_sizes(document: Any) -> dict[int, tuple[float, float]]:
    """Page -> (width, height) of a DoclingDocument's pages (none for HTML and Markdown)."""
    return {number: (page.size.width, page.size.height) for number, page in document.pages.items()}


def _elements_from_docling(document: Any) -> list[LayoutElement]:
    """Typed elements from a DoclingDocument (HTML, Markdown or layout-model output), each placed where its
    provenance boxes are (none for HTML and Markdown)."""
    from docling_core.types.doc import (
        DocItemLabel,
        GroupItem,
        GroupLabel,
        PictureItem,
        SectionHeaderItem,
        TableItem,
        TextItem,
        TitleItem,
    )

    elements: list[LayoutElement] = []
    already_emitted: set[str] = set()

    sizes = _page_sizes(document)

    def page_of(item: Any) -> int:
        return item.prov[0].page_no if getattr(item, "prov", None) else 1

    def regions_of(*items: Any) -> tuple[Region, ...]:
        boxes = []
        for item in items:
            for prov in getattr(item, "prov", None) or ():
                if prov.page_no not in sizes:
                    continue  # a box on a page the document does not describe cannot be placed
                # Layout-model boxes have their origin at the page's bottom-left; the regions', at its top-left.
                box = prov.bbox.to_top_left_origin(page_height=sizes[prov.page_no][1])
                boxes.append(Region(prov.page_no, box.l, box.t, box.r, box.b))
        return tuple(merge_regions(boxes))

    def element(kind: str, text: str, *items: Any, level_hint: int | None = None) -> LayoutElement:
        page = page_of(items[0]) if items else 1
        return LayoutElement(kind, text, page, level_hint=level_hint, regions=regions_of(*items))

    def emit_captions(item: Any) -> None:
        for reference in item.captions:
            caption = reference.resolve(document)
            already_emitted.add(caption.self_ref)
            elements.append(element("caption", caption.text, caption))

    for item, _depth in document.iterate_items(with_groups=True):
        if item.self_ref in already_emitted:
            continue
        if isinstance(item, GroupItem):
            if item.label == GroupLabel.INLINE:
                # HTML splits a paragraph at every <b>/<i>; its parts are one paragraph.
                parts = [reference.resolve(document) for reference in item.children]
                already_emitted.update(part.self_ref for part in parts)
                text = " ".join(part.text for part in parts if isinstance(part, TextItem))
                elements.append(element("paragraph", text, *parts))
            continue
        if isinstance(item, TitleItem):
            # Markdown makes every `#` line a title; the document's title is the first unnumbered one,
            # every other is a top-level section.
            is_title = not _NUMBERED_HEADING.match(item.text) and not any(e.kind == "title" for e in elements)
            elements.append(element("title", item.text, item) if is_title
                            else element("heading", item.text, item, level_hint=1))
        elif isinstance(item, SectionHeaderItem):
            elements.append(element("heading", item.text, item, level_hint=item.level))
        elif isinstance(item, TableItem):
            emit_captions(item)
            elements.append(element("table", _table_text(item), item))
        elif isinstance(item, PictureItem):
            emit_captions(item)
        elif isinstance(item, TextItem):
            if item.label in (DocItemLabel.PAGE_HEADER, DocItemLabel.PAGE_FOOTER):
                continue
            kind = "caption" if item.label == DocItemLabel.CAPTION else "paragraph"
            elements.append(element(kind, item.text, item))
    return elements


@dataclass
class PdfText:
    """What the model-free path reads from a PDF: positioned lines, page sizes and raster-image boxes,
    every page turned so that its text runs left to right (`text_angles`: the pages that needed it, and how far
    their text was turned clockwise)."""

    lines: list[TextLine]
    page_sizes: dict[int, tuple[float, float]]
    image_boxes: dict[int, list[tuple[float, float, float, float]]]
    pages: int
    text_angles: dict[int, int] = field(default_factory=dict)

    @property
    def rotated_pages(self) -> list[int]:
        return sorted(self.text_angles)


@dataclass(frozen=True)
class _Box:
    l: float  # noqa: E741 - Docling's name for the left edge
    t: float
    r: float
    b: float


def _text_angle(cells: Iterable[Any]) -> int:
    """How far a page's text is turned clockwise (0, 90, 180, 270), from the baselines of its line cells."""
    from docling_core.types.doc import CoordOrigin

    weights: Counter[int] = Counter()
    for cell in cells:
        rect = cell.rect
        dx, dy = rect.r_x1 - rect.r_x0, rect.r_y1 - rect.r_y0
        if rect.coord_origin == CoordOrigin.BOTTOMLEFT:
            dy = -dy
        angle = (0 if dx >= 0 else 180) if abs(dx) >= abs(dy) else (90 if dy > 0 else 270)
        weights[angle] += len(cell.text)
    return weights.most_common(1)[0][0] if weights else 0


def _upright(box: Any, angle: int, width: float, height: float) -> _Box:
    """A top-left-origin box on a page whose text is turned by `angle`, in the frame where the text is upright."""
    if angle == 90:
        return _Box(box.t, width - box.r, box.b, width - box.l)
    if angle == 270:
        return _Box(height - box.b, box.l, height - box.t, box.r)
    if angle == 180:
        return _Box(width - box.r, height - box.b, width - box.l, height - box.t)
    return _Box(box.l, box.t, box.r, box.b)


def _displayed(region: Region, angle: int, width: float, height: float) -> Region:
    """The inverse of `_upright`: a region of the upright frame on the page as displayed (`width` x `height`)."""
    page, left, top, right, bottom = region.page, region.x0, region.y0, region.x1, region.y1
    if angle == 90:
        return Region(page, width - bottom, left, width - top, right)
    if angle == 270:
        return Region(page, top, height - right, bottom, height - left)
    if angle == 180:
        return Region(page, width - right, height - bottom, width - left, height - top)
    return region


def _on_displayed_pages(block: Block, text_angles: dict[int, int],
                        page_sizes: dict[int, tuple[float, float]]) -> Block:
    """The block with its regions on the pages as displayed (`page_sizes`), where the layout rules read them on
    pages turned so that their text runs left to right: a page image shows the page as displayed."""
    if not any(region.page in text_angles for region in block.regions):
        return block

    def turn_back(region: Region) -> Region:
        if region.page not in text_angles:
            return region
        return _displayed(region, text_angles[region.page], *page_sizes[region.page])

    return replace(block, regions=[turn_back(region) for region in block.regions],
                   line_regions=[LineRegion.of(line.start, turn_back(line.region)) for line in block.line_regions])


def _top_left_box(rect: Any, page_height: float) -> _Box:
    """The axis-aligned box of a cell's rectangle with the origin at the top-left (read from its corners:
    converting through Docling's pydantic models costs more than the rest of the parse)."""
    from docling_core.types.doc import CoordOrigin

    xs = (rect.r_x0, rect.r_x1, rect.r_x2, rect.r_x3)
    ys = (rect.r_y0, rect.r_y1, rect.r_y2, rect.r_y3)
    if rect.coord_origin == CoordOrigin.BOTTOMLEFT:
        ys = tuple(page_height - y for y in ys)
    return _Box(min(xs), min(ys), max(xs), max(ys))


def _line_from_words(page_no: int, cell: Any, box: Any, words: list[tuple[Any, Any]]) -> TextLine:
    """One text line, styled from its words. A footnote marker or a subscript stretches the line's box (and
    its word's box), so the size is the height most of the line's words share; the weight is the share of
    bold characters, not the first glyph's font."""
    font_name = getattr(cell, "font_name", "")
    if not words:
        return TextLine(page_no, box.l, box.t, box.r, box.b, box.b - box.t, is_bold_font(font_name), cell.text,
                        italic=is_italic_font(font_name))
    words.sort(key=lambda item: item[1].l)
    heights = Counter(round((word_box.b - word_box.t) * 4) / 4 for _, word_box in words)
    size = max(heights.items(), key=lambda item: (item[1], item[0]))[0]
    styles = [(is_bold_font(word.font_name), is_italic_font(word.font_name), len(word.text)) for word, _ in words]
    total = sum(length for _, _, length in styles) or 1
    bold = sum(length for is_bold, _, length in styles if is_bold) / total >= 0.6
    italic = sum(length for _, is_italic, length in styles if is_italic) / total >= 0.6
    lead = 0
    while lead < len(styles) and (styles[lead][0] or styles[lead][1]):
        lead += 1
    # A run-in heading: the line opens with emphasised words and goes on in the regular face.
    lead_words = sum(len(word.text.split()) for word, _ in words[:lead]) if 0 < lead < len(styles) else 0
    faces = Counter()
    for word, _ in words:
        faces[word.font_name.split("+")[-1]] += len(word.text)
    baselines = Counter(round(word_box.b * 4) / 4 for _, word_box in words)
    baseline = max(baselines.items(), key=lambda item: (item[1], item[0]))[0]
    raised = [(word.text, is_superscript_word(word.text, word_box.b - word_box.t, word_box.b, size, baseline))
              for word, word_box in words]
    text = with_superscripts(cell.text, raised) if any(flag for _, flag in raised) else cell.text
    return TextLine(page_no, box.l, box.t, box.r, box.b, size, bold, text, italic=italic, lead_emphasis=lead_words,
                    font=faces.most_common(1)[0][0])


def read_native_pages(pages: Iterable[Any]) -> PdfText:
    """Positioned lines from docling-parse's segmented pages (text-line cells styled by their word cells)."""
    text = PdfText([], {}, {}, 0)
    for page in pages:
        text.pages += 1
        width, height = page.size.width, page.size.height
        parsed = page.parsed_page
        angle = _text_angle(parsed.textline_cells) if parsed is not None else 0
        if angle:
            text.text_angles[page.page_no] = angle
        # A page displayed turned (a landscape table, a page scanned sideways) is read in the frame of its text.
        text.page_sizes[page.page_no] = (height, width) if angle in (90, 270) else (width, height)

        def upright(rect: Any) -> _Box:
            return _upright(_top_left_box(rect, height), angle, width, height)

        if parsed is None:
            continue
        text.image_boxes[page.page_no] = [
            (box.l, box.t, box.r, box.b) for box in (upright(bitmap.rect) for bitmap in parsed.bitmap_resources)
        ]
        # Words are bucketed by height band so that each line looks only at its neighbours.
        buckets: dict[int, list[tuple[Any, _Box]]] = {}
        for word in parsed.word_cells:
            word_box = upright(word.rect)
            buckets.setdefault(int((word_box.t + word_box.b) / 2 // 8), []).append((word, word_box))
        for cell in parsed.textline_cells:
            box = upright(cell.rect)
            members = [
                (word, word_box)
                for bucket in range(int(box.t // 8) - 1, int(box.b // 8) + 2)
                for word, word_box in buckets.get(bucket, ())
                if box.l - 1 <= (word_box.l + word_box.r) / 2 <= box.r + 1
                and box.t - 1 <= (word_box.t + word_box.b) / 2 <= box.b + 1
            ]
            text.lines.append(_line_from_words(page.page_no, cell, box, members))
    return text


# Beyond this share of glyphs without a Unicode mapping, the text is not the paper's words.
MAX_UNREADABLE_SHARE = 0.3


def _text_layer_report(paper_id: str, text: PdfText) -> dict[str, Any]:
    """Check the text layer before structure recovery: scanned pages and broken font encodings.

    Image-only pages among text pages are reported in the options (their text is missing, the rest
    parses); a document whose text is mostly unmapped glyphs fails with a named reason.
    """
    text_pages = {line.page for line in text.lines if line.text.strip()}
    if not text_pages:
        raise ManuscriptParseError(paper_id, "no_text_layer", f"none of its {text.pages} page(s) holds text (scanned?)")
    joined = "".join(line.text for line in text.lines)
    share = unreadable_share(joined)
    if share > MAX_UNREADABLE_SHARE:
        raise ManuscriptParseError(
            paper_id, "broken_font_encoding",
            f"{share:.0%} of its characters are glyphs without a Unicode mapping (fonts lack a ToUnicode map)",
        )
    report: dict[str, Any] = {}
    if text.rotated_pages:
        report["rotated_pages"] = text.rotated_pages
    missing = sorted(set(text.page_sizes) - text_pages)
    if missing:
        report["pages_without_text"] = missing
    if share > 0:
        report["unreadable_glyph_share"] = round(share, 4)
    return report


@cache
def _parser_code_version() -> str:
    """The code version of the parser's own code and all it reaches (the layout rules included)."""
    return code_version([DocumentParser])


class DocumentParser:
    """Parses manuscripts with Docling; one instance keeps its converters warm across calls. With `cache_root` (a
    lake's root), PDFs are parsed once per lake (the parse cache, `self.cache`)."""

    def __init__(self, artifacts_path: str | None = None, parser_threads: int = 1,
                 cache_root: str | Location | None = None) -> None:
        self.artifacts_path = artifacts_path
        self.parser_threads = parser_threads
        self._converters: dict[str, Any] = {}
        self.cache = ParseCache(cache_root, self.identity()) if cache_root is not None else None

    def identity(self) -> str:
        """Everything that decides what a PDF parses into: the packages and layout rules (`parser_version`), the
        parser's code, and the pipeline with its options."""
        pipeline = {"pipeline": "StandardPdfPipeline", "artifacts_path": self.artifacts_path} if self.artifacts_path \
            else {"pipeline": "NativePdfPipeline", "parser_threads": self.parser_threads}
        return json.dumps({"parser_version": parser_version(), "code_version": _parser_code_version(), **pipeline},
                          sort_keys=True)

    def _converter(self, kind: str) -> Any:
        if kind not in self._converters:
            self._converters[kind] = self._build_converter(kind)
        return self._converters[kind]

    def _build_converter(self, kind: str) -> Any:
        from docling.datamodel.base_models import InputFormat
        from docling.document_converter import DocumentConverter, NativePdfFormatOption, PdfFormatOption

        if kind == "layout":
            from docling.datamodel.pipeline_options import PdfPipelineOptions

            options = PdfPipelineOptions(artifacts_path=self.artifacts_path, do_ocr=False, do_table_structure=True)
            return DocumentConverter(format_options={InputFormat.PDF: PdfFormatOption(pipeline_options=options)})
        if kind == "native":
            from docling.datamodel.pipeline_options import NativePdfPipelineOptions

            options = NativePdfPipelineOptions(
                generate_page_images=False, generate_picture_images=False, parser_threads=self.parser_threads
            )
            return DocumentConverter(format_options={InputFormat.PDF: NativePdfFormatOption(pipeline_options=options)})
        return DocumentConverter(allowed_formats=[InputFormat.HTML, InputFormat.MD])

    def parse(
        self,
        source: str | os.PathLike[str] | bytes,
        source_name: str | None = None,
        mime: str | None = None,
        paper_id: str | None = None,
    ) -> ParsedDocument:
        """Parse one manuscript given as a path or bytes.

        `source_name` (a file name) and `mime` (a MIME type or extension) say what the bytes
        are; without them the content is sniffed. `paper_id` defaults to the name's stem.
        """
        if isinstance(source, bytes):
            data = source
            name = source_name or "manuscript"
        else:
            path = Path(source)
            name = source_name or path.name
            data = path.read_bytes()
        paper_id = paper_id or Path(name).stem
        source_format = _detect_format(data, name, mime, paper_id)
        if source_format == "pdf":
            return self._parse_pdf_once(paper_id, name, data)
        if source_format == "text":
            blocks = assemble_blocks(elements_from_plain_text(data.decode("utf-8", errors="replace")))
            return self._finish(paper_id, "plain-text", {"split": "blank lines"}, 1, blocks)
        return self._parse_markup(paper_id, name, data, source_format)

    def parse_batch(
        self, sources: Iterable[tuple[str | os.PathLike[str] | bytes, str]]
    ) -> BatchResult:
        """Parse (source, source_name) pairs; a bad manuscript is recorded and the rest go on."""
        result = BatchResult([], [])
        for source, source_name in sources:
            try:
                result.documents.append(self.parse(source, source_name))
            except ManuscriptParseError as error:
                _log.warning("%s", error)
                result.failures.append(error)
        return result

    def _convert(self, kind: str, paper_id: str, name: str, data: bytes) -> Any:
        from docling_core.types.io import DocumentStream

        try:
            return self._converter(kind).convert(DocumentStream(name=name, stream=BytesIO(data)), raises_on_error=False)
        except Exception as error:  # model loading and backend crashes surface as many types
            reason = "layout_model_unavailable" if kind == "layout" else "conversion_failed"
            raise ManuscriptParseError(paper_id, reason, f"{type(error).__name__}: {error}") from error

    def _convert_pdf(self, kind: str, paper_id: str, name: str, data: bytes) -> Any:
        from docling.datamodel.base_models import ConversionStatus

        _check_pdf(paper_id, data)
        result = self._convert(kind, paper_id, name, data)
        if result.status == ConversionStatus.FAILURE:
            messages = "; ".join(error.error_message for error in result.errors) or "no detail"
            reason = "truncated" if "truncated" in messages else "conversion_failed"
            raise ManuscriptParseError(paper_id, reason, f"Docling failed: {messages}")
        return result

    def read_pdf_text(self, source: str | os.PathLike[str] | bytes, source_name: str | None = None) -> PdfText:
        """The positioned text lines the model-free path recovers structure from (for inspection and benchmarks)."""
        data = source if isinstance(source, bytes) else Path(source).read_bytes()
        name = source_name or (Path(source).name if not isinstance(source, bytes) else "manuscript.pdf")
        return read_native_pages(self._convert_pdf("native", Path(name).stem, name, data).pages)

    def _parse_pdf_once(self, paper_id: str, name: str, data: bytes) -> ParsedDocument:
        """The PDF parsed, or answered from the parse cache when it holds these bytes parsed by this parser."""
        if self.cache is None:
            return self._parse_pdf(paper_id, name, data)
        sha256 = hashlib.sha256(data).hexdigest()

        def decode(result: Mapping[str, Any]) -> ParsedDocument | ManuscriptParseError:
            if "failure" in result:
                failure = result["failure"]
                return ManuscriptParseError(paper_id, str(failure["reason"]), str(failure["detail"]))
            return ParsedDocument.from_record(paper_id, result["document"])

        cached = self.cache.get(sha256, decode)
        if isinstance(cached, ManuscriptParseError):
            raise cached
        if cached is not None:
            return cached
        try:
            document = self._parse_pdf(paper_id, name, data)
        except ManuscriptParseError as error:
            if error.reason not in ManuscriptParseError.TRANSIENT_REASONS:
                self.cache.put(sha256, {"failure": {"reason": error.reason, "detail": error.detail}})
            raise
        self.cache.put(sha256, {"document": document.to_record()})
        return document

    def _parse_pdf(self, paper_id: str, name: str, data: bytes) -> ParsedDocument:
        kind = "layout" if self.artifacts_path else "native"
        result = self._convert_pdf(kind, paper_id, name, data)
        page_count = len(result.pages)
        if kind == "layout":
            blocks = assemble_blocks(_elements_from_docling(result.document))
            options = {"pipeline": "StandardPdfPipeline", "artifacts_path": self.artifacts_path, "do_ocr": False,
                       "do_table_structure": True}
            return self._finish(paper_id, "docling-layout", options, page_count, blocks, _page_sizes(result.document))
        text = read_native_pages(result.pages)
        page_sizes = _page_sizes(result.document)
        # Free Docling's page objects (tens of thousands of pydantic cells) before structure recovery, so the
        # garbage collector does not walk them again and again while the layout rules allocate.
        del result
        options = {"pipeline": "NativePdfPipeline", "text_cell_unit": "line", "parser_threads": self.parser_threads,
                   "structure": f"peerify layout rules {LAYOUT_VERSION}", **_text_layer_report(paper_id, text)}
        lines = [line for line in (replace(line, text=clean_line_text(line.text)) for line in text.lines) if line.text]
        blocks = [_on_displayed_pages(block, text.text_angles, page_sizes)
                  for block in recover_blocks(lines, text.page_sizes, text.image_boxes)]
        if not blocks:
            raise ManuscriptParseError(paper_id, "no_text_layer", f"none of its {page_count} page(s) holds text")
        return self._finish(paper_id, "docling-native", options, page_count, blocks, page_sizes)

    def _parse_markup(self, paper_id: str, name: str, data: bytes, source_format: SourceFormat) -> ParsedDocument:
        suffix = {"html": ".html", "markdown": ".md"}[source_format]
        # Docling picks the backend from the file extension.
        stream_name = name if Path(name).suffix.lower() in (suffix, ".htm",
                                                            ".markdown") else f"{Path(name).stem}{suffix}"
        result = self._convert("markup", paper_id, stream_name, data)
        if result.document is None or not result.document.texts and not result.document.tables:
            raise ManuscriptParseError(paper_id, "empty_document", f"no text found in the {source_format} source")
        blocks = assemble_blocks(_elements_from_docling(result.document))
        parser: ParserName = "docling-html" if source_format == "html" else "docling-markdown"
        return self._finish(paper_id, parser, {"backend": parser}, 1, blocks, _page_sizes(result.document))

    @staticmethod
    def _finish(
        paper_id: str, parser: ParserName, options: dict[str, Any], pages: int, blocks: list[Block],
        page_sizes: dict[int, tuple[float, float]] | None = None,
    ) -> ParsedDocument:
        if not blocks:
            raise ManuscriptParseError(paper_id, "empty_document", "the manuscript holds no text")
        return ParsedDocument(paper_id, parser, parser_version(), options, pages, blocks, page_sizes or {})

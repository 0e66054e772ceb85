"""Structure recovery on layouts real papers have.

Offline, `fixtures_pdf.layout_defects_paper()` reproduces each defect found on real PDFs (superscript
markers, run-in headings, running headers, a venue footer, a caption interrupting a paragraph across
columns, a display equation, a table header in bold, a lettered list, hyphenated compounds, a
checklist), and the hard inputs (rotated, partly scanned, broken font encoding, one-page abstract,
60-page paper) must parse or fail with a named reason. With `../shared/real-data/pdfs` present, the
same rules are checked on pages cut from real papers at test time.
"""

from __future__ import annotations

import json
import re
from io import BytesIO
from pathlib import Path

import pytest
from pypdf import PdfReader, PdfWriter

from peerify_dagster.domain.chunking import ChunkingConfig, chunk_document
from peerify_dagster.domain.layout.blocks import Block, LayoutElement, assemble_blocks
from peerify_dagster.domain.layout.headings import unglue_heading
from peerify_dagster.domain.layout.lines import Vocabulary, join_lines
from peerify_dagster.resources.document_parser import DocumentParser, ManuscriptParseError, ParsedDocument
from tests import fixtures_pdf as fx

REAL_PDFS = Path(__file__).resolve().parents[1].parent / "shared" / "real-data" / "pdfs"
needs_real_pdfs = pytest.mark.skipif(not REAL_PDFS.is_dir(), reason="../shared/real-data/pdfs is not present")


@pytest.fixture(scope="module")
def parser() -> DocumentParser:
    return DocumentParser()


@pytest.fixture(scope="module")
def defects(parser: DocumentParser) -> ParsedDocument:
    return parser.parse(fx.layout_defects_paper(), "defects.pdf")


def _kind(document: ParsedDocument, kind: str) -> list[str]:
    return [block.text for block in document.blocks if block.kind == kind]


def _holder(document: ParsedDocument, text: str) -> Block:
    holders = [block for block in document.blocks if text in block.text]
    assert len(holders) == 1, f"{text[:50]!r} is in {len(holders)} blocks"
    return holders[0]


# --- Generated pages with each defect --------------------------------------------------------


def test_title_author_block_and_headings(defects: ParsedDocument) -> None:
    assert _kind(defects, "title") == [fx.DEFECTS_TITLE]
    assert _kind(defects, "authors") == ["\n".join(fx.DEFECTS_AUTHORS)]
    assert _kind(defects, "heading") == list(fx.DEFECTS_HEADINGS)


def test_running_headers_page_numbers_and_first_page_footer_are_removed(defects: ParsedDocument) -> None:
    texts = [block.text for block in defects.blocks]
    assert not any(fx.DEFECTS_VENUE_FOOTER[:30] in text for text in texts)
    assert not any(text.startswith(fx.DEFECTS_RUNNING_HEADER) for text in texts if text != fx.DEFECTS_TITLE)
    assert sum(fx.DEFECTS_RUNNING_HEADER in text for text in texts) == 1  # the title itself
    assert not any(re.fullmatch(r"\d+", text) for text in texts)


def test_superscript_marker_does_not_break_its_paragraph(defects: ParsedDocument) -> None:
    block = _holder(defects, fx.SUPERSCRIPT_PARAGRAPH)
    assert block.kind == "paragraph" and block.text.endswith(fx.SUPERSCRIPT_PARAGRAPH_END)
    footnote = _holder(defects, fx.FOOTNOTE_TEXT)
    assert footnote is not block


def test_run_in_heading_stays_the_start_of_its_paragraph(defects: ParsedDocument) -> None:
    assert _holder(defects, fx.RUN_IN_LEAD).text == fx.RUN_IN_PARAGRAPH
    assert not any(text.startswith(fx.RUN_IN_LEAD) for text in _kind(defects, "heading"))


def test_line_end_hyphens_close_words_and_keep_compounds(defects: ParsedDocument) -> None:
    assert _holder(defects, "We introduce").text == fx.HYPHEN_COMPOUND_TEXT


@pytest.mark.parametrize(
    ("left", "right", "joined"),
    [
        ("we in-", "troduce it", "we introduce it"),
        ("a self-", "supervised loss", "a self-supervised loss"),
        ("the state-of-the-", "art model", "the state-of-the-art model"),
        ("end-to-", "end training", "end-to-end training"),
        ("pre-", "and post-training", "pre- and post-training"),
        ("GPT-", "4 answers", "GPT-4 answers"),
        ("multi-docu-", "ment summaries", "multi-document summaries"),
    ],
)
def test_join_lines(left: str, right: str, joined: str) -> None:
    assert join_lines(left, right, Vocabulary.of(["the multi-document task is hard"])) == joined


def test_join_lines_follows_how_the_paper_writes_the_word() -> None:
    hyphenated = Vocabulary.of(["a truly open-source tool here"])
    closed = Vocabulary.of(["a truly opensource tool here"])
    assert join_lines("an open-", "source tool", hyphenated) == "an open-source tool"
    assert join_lines("an open-", "source tool", closed) == "an opensource tool"


def test_glued_heading_words_are_split_only_when_the_paper_writes_them_apart() -> None:
    vocabulary = Vocabulary.of(["we extract metadata with papermage and extracting is fast here"])
    assert unglue_heading("2 RelatedWork") == "2 Related Work"
    assert unglue_heading("2 BACKGROUNDANDRELATEDWORK") == "2 BACKGROUND AND RELATED WORK"
    assert unglue_heading("3 ExtractingMetadata", vocabulary) == "3 Extracting Metadata"
    assert unglue_heading("3 Design of PaperMage", vocabulary) == "3 Design of PaperMage"
    assert unglue_heading("3.2 Interfacing with models", vocabulary) == "3.2 Interfacing with models"


def test_caption_interrupting_a_paragraph_across_columns(defects: ParsedDocument) -> None:
    assert _holder(defects, fx.INTERRUPTED_START[0]).text == fx.INTERRUPTED_PARAGRAPH
    assert _holder(defects, "Figure 1:").text == fx.FIGURE_CAPTION_TEXT
    assert _holder(defects, "Figure 1:").kind == "caption"
    assert _kind(defects, "figure") == ["\n".join(fx.FIGURE_LABELS)]
    labels = next(block for block in defects.blocks if block.kind == "figure")
    # Reading order keeps the paragraph where it starts, before the float that interrupted it.
    assert _holder(defects, fx.INTERRUPTED_START[0]).order < labels.order


def test_equations_table_rows_figure_text_and_lists_are_never_headings(defects: ParsedDocument) -> None:
    headings = _kind(defects, "heading")
    for text in (fx.EQUATION.split()[0], fx.TABLE_HEADER, fx.FIGURE_LABELS[0], "I. Statistical", "II. Hybrid"):
        assert not any(heading.startswith(text) for heading in headings), text
    assert _holder(defects, "J = |A n B|").text == " ".join(fx.EQUATION.split())
    assert _holder(defects, fx.TABLE_HEADER).text == "\n".join((fx.TABLE_HEADER, *fx.TABLE_BODY))
    assert _holder(defects, fx.TABLE_HEADER).kind == "table"
    assert _holder(defects, "Table 1:").text == fx.TABLE_CAPTION_TEXT
    for item in fx.LETTERED_LIST:
        assert _holder(defects, item).text == item


def test_appendix_starts_at_the_lettered_section_after_the_references(defects: ParsedDocument) -> None:
    references_at = next(block.order for block in defects.blocks if block.text == "References")
    assert not any(block.in_appendix for block in defects.blocks if block.order <= references_at)
    assert _kind(defects, "reference") == list(fx.DEFECTS_REFERENCES)
    assert _holder(defects, "A Proofs").in_appendix
    assert all(block.in_appendix for block in defects.blocks if block.order > references_at + 3)


@pytest.mark.parametrize(
    ("headings", "appendix_from"),
    [
        # A lettered heading mid-paper is a section ("A Simple Baseline"), not appendix A.
        (["1 Introduction", "A Simple Baseline", "2 Method", "3 Conclusion", "A Proofs", "B Data"], "A Proofs"),
        (["1 Introduction", "2 Method", "References", "A Proofs", "A.1 Lemma"], "A Proofs"),
        (["1 Introduction", "Appendix", "More details"], "Appendix"),
        (["1 Introduction", "A Simple Baseline", "2 Method", "References"], None),
    ],
)
def test_appendix_starts_only_after_the_main_text(headings: list[str], appendix_from: str | None) -> None:
    elements = [element for heading in headings
                for element in (LayoutElement("heading", heading, 1), LayoutElement("paragraph", f"Text of {heading}.",
                                                                                    1))]
    blocks = assemble_blocks(elements)
    first = next((block.order for block in blocks if block.in_appendix), None)
    assert first == (next(block.order for block in blocks if block.text == appendix_from) if appendix_from else None)
    assert all(block.in_appendix for block in blocks if first is not None and block.order >= first
               and block.section_path[0] != "References")


def test_checklist_is_marked_and_left_out_of_the_chunks(defects: ParsedDocument) -> None:
    assert _holder(defects, "[Yes] we report error bars").kind == "checklist"
    chunks = chunk_document(defects.paper_id, defects.blocks)
    assert not any("[Yes]" in chunk.text for chunk in chunks)
    assert not any(chunk.kind in ("reference", "checklist") for chunk in chunks)
    everything = chunk_document(defects.paper_id, defects.blocks, ChunkingConfig(exclude_kinds=()))
    assert any("[Yes] we report error bars" in chunk.text for chunk in everything if chunk.kind == "checklist")


def test_chunks_keep_captions_out_of_prose_and_carry_their_heading(defects: ParsedDocument) -> None:
    chunks = chunk_document(defects.paper_id, defects.blocks)
    prose = [chunk for chunk in chunks if chunk.kind in ("paragraph", "abstract", "appendix")]
    assert not any("Figure 1:" in chunk.text or "Table 1:" in chunk.text for chunk in prose)
    holder = next(chunk for chunk in chunks if fx.INTERRUPTED_PARAGRAPH in chunk.text)
    assert holder.text.startswith("1 Introduction\n")
    assert not any(fx.FOOTNOTE_TEXT in chunk.text and chunk.section != "1 Introduction" for chunk in chunks)


# --- Hard inputs -----------------------------------------------------------------------------


def test_rotated_page_is_read_upright(parser: DocumentParser) -> None:
    document = parser.parse(fx.rotated_paper(), "rotated.pdf")
    assert document.options["rotated_pages"] == [1]
    assert _kind(document, "title") == [fx.TITLE]
    assert _kind(document, "heading") == list(fx.HEADINGS)


def test_partly_scanned_paper_parses_and_names_the_pages_without_text(parser: DocumentParser) -> None:
    document = parser.parse(fx.partly_scanned_paper(), "scanned.pdf")
    assert document.pages == 3 and document.options["pages_without_text"] == [3]
    assert _kind(document, "heading") == list(fx.HEADINGS)


def test_broken_font_encoding_is_a_named_parse_error(parser: DocumentParser) -> None:
    with pytest.raises(ManuscriptParseError) as raised:
        parser.parse(fx.broken_encoding_paper(), "garbled.pdf")
    assert raised.value.reason == "broken_font_encoding" and raised.value.paper_id == "garbled"
    batch = parser.parse_batch([(fx.broken_encoding_paper(), "garbled.pdf"), (fx.one_page_abstract(), "short.pdf")])
    assert [document.paper_id for document in batch.documents] == ["short"]
    assert [(error.paper_id, error.reason) for error in batch.failures] == [("garbled", "broken_font_encoding")]


def test_one_page_abstract(parser: DocumentParser) -> None:
    document = parser.parse(fx.one_page_abstract(), "abstract.pdf")
    assert _kind(document, "title") == [fx.TITLE]
    assert _kind(document, "abstract") == [fx.ONE_PAGE_ABSTRACT]
    chunks = chunk_document(document.paper_id, document.blocks)
    assert [chunk.kind for chunk in chunks] == ["abstract"]


def test_sixty_page_paper_with_a_long_appendix(parser: DocumentParser) -> None:
    document = parser.parse(fx.long_paper(60), "long.pdf")
    assert document.pages == 60
    headings = [block for block in document.blocks if block.kind == "heading"]
    main = [block for block in headings if block.text[0].isdigit()]
    assert [block.text for block in main] == [f"{n} Main section {n}" for n in range(1, fx.LONG_PAPER_SECTIONS + 1)]
    references_at = next(block.order for block in headings if block.text == "References")
    assert not any(block.in_appendix for block in document.blocks if block.order < references_at)
    lettered = [block for block in headings if block.order > references_at]
    assert len(lettered) >= fx.LONG_APPENDIX_SECTIONS
    assert all(block.in_appendix and re.match(r"[A-Z] Appendix section", block.text) for block in lettered)


# --- Pages cut from real papers ---------------------------------------------------------------


def _pages(name: str, first: int, last: int) -> bytes:
    reader = PdfReader(str(REAL_PDFS / name))
    writer = PdfWriter()
    for index in range(first - 1, last):
        writer.add_page(reader.pages[index])
    buffer = BytesIO()
    writer.write(buffer)
    return buffer.getvalue()


def _normal(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


@needs_real_pdfs
def test_real_acl_paper_headings_match_the_s2orc_ground_truth(parser: DocumentParser) -> None:
    document = parser.parse(REAL_PDFS / "N18-3011.pdf")
    truth = json.loads((REAL_PDFS / "N18-3011.json").read_text())["pdf_parse"]["body_text"]
    sections = list(dict.fromkeys(f"{p['sec_num']} {p['section']}" for p in truth if p["section"]))
    headings = _kind(document, "heading")
    assert [_normal(text) for text in headings] == ["abstract"] + [_normal(text) for text in sections] + ["references"]
    assert _kind(document, "title") == ["Construction of the Literature Graph in Semantic Scholar"]
    assert "Waleed Ammar" in _kind(document, "authors")[0]


@needs_real_pdfs
def test_real_acl_first_pages_lose_footer_and_page_numbers_but_no_run_in_text(parser: DocumentParser) -> None:
    document = parser.parse(_pages("N18-3011.pdf", 1, 3), "n18-first-pages.pdf")
    texts = [block.text for block in document.blocks]
    assert not any("Proceedings of NAACL-HLT" in text or "Association for Computational" in text for text in texts)
    assert not any(re.fullmatch(r"\d+", text) for text in texts)
    papers = _holder(document, "We obtain metadata and PDF files")
    assert papers.kind == "paragraph" and papers.text.startswith("Papers. We obtain metadata")
    assert "3 Extracting Metadata" in _kind(document, "heading")


@needs_real_pdfs
def test_real_acm_running_headers_are_removed(parser: DocumentParser) -> None:
    document = parser.parse(_pages("2203.00130v1.pdf", 2, 5), "acm-pages.pdf")
    texts = [block.text for block in document.blocks]
    assert not any("Approachable to Healthcare Consumers with Natural Language" in text for text in texts)
    assert not any(re.fullmatch(r"\d+", text) for text in texts)
    assert "2 BACKGROUND AND RELATED WORK" in _kind(document, "heading")


@needs_real_pdfs
def test_real_superscript_lines_stay_in_their_paragraph(parser: DocumentParser) -> None:
    document = parser.parse(_pages("papermage.pdf", 1, 2), "papermage-pages.pdf")
    block = _holder(document, "corpora is difficult because the documents come")
    assert "in difficult-to-use formats like PDF" in block.text and "tools for working with the documents" in block.text
    assert "2 Related Work" in _kind(document, "heading")
    caption = _holder(document, "Figure 1: papermage's document creation")
    assert caption.kind == "caption"
    chunks = chunk_document(document.paper_id, document.blocks)
    assert not any("Figure 1:" in chunk.text for chunk in chunks if chunk.kind == "paragraph")


@needs_real_pdfs
def test_real_neurips_first_page(parser: DocumentParser) -> None:
    document = parser.parse(_pages("2206.10883v3.pdf", 1, 3), "neurips-pages.pdf")
    assert not any("Preprint. Under review" in block.text for block in document.blocks)
    assert _kind(document, "title") == ["Multi-LexSum: Real-World Summaries of Civil Rights Lawsuits at Multiple "
                                        "Granularities"]
    assert _kind(document, "heading")[:4] == ["Abstract", "1 Introduction", "2 Related work",
                                              "2.1 Natural language processing for legal documents"]
    assert _kind(document, "abstract")[0].startswith("With the advent of large language models")


@needs_real_pdfs
def test_real_single_page_matches_doclings_ground_truth(parser: DocumentParser) -> None:
    document = parser.parse(REAL_PDFS / "2305.03393v1-pg9.pdf")
    truth = (REAL_PDFS / "2305.03393v1-pg9.groundtruth.md").read_text().splitlines()
    assert _kind(document, "heading") == [line.lstrip("# ").strip() for line in truth if line.startswith("#")]
    for paragraph in (line for line in truth if line.strip() and not line.startswith(("#", "|"))):
        assert any(_normal(paragraph) in _normal(block.text) for block in document.blocks), paragraph[:60]


@needs_real_pdfs
def test_real_appendix_starts_after_the_references(parser: DocumentParser) -> None:
    document = parser.parse(REAL_PDFS / "2020.acl-main.447.pdf")
    references_at = next(block.order for block in document.blocks if block.text == "References")
    assert not any(block.in_appendix for block in document.blocks if block.order < references_at)
    appendix = _holder(document, "A Background")
    assert appendix.kind == "heading" and appendix.in_appendix
    between = [block for block in document.blocks
               if references_at < block.order < appendix.order and block.kind != "heading"]
    # Only the page's footnote that the reading order put among the entries ("¹⁹ The Kaggle ...") is no entry.
    assert [block.text[:20] for block in between if block.kind != "reference"] == ["¹⁹ The Kaggle CORD-1"]

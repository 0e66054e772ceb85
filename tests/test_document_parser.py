"""Parse real PDFs built with fpdf2 (and Markdown/HTML/text) through Docling and the layout rules."""

from __future__ import annotations

import re
from io import BytesIO
from pathlib import Path

import pytest
import yaml
from pypdf import PdfReader

from peerify_dagster.domain.chunking import chunk_document
from peerify_dagster.resources.document_parser import DocumentParser, ManuscriptParseError, ParsedDocument
from tests import fixtures_pdf

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLE_VENUE = REPO_ROOT / "peerify_dagster" / "sample_venue"


@pytest.fixture(scope="module")
def parser() -> DocumentParser:
    return DocumentParser()


@pytest.fixture(scope="module")
def structured(parser: DocumentParser) -> ParsedDocument:
    return parser.parse(fixtures_pdf.structured_paper(), "structured.pdf")


def _blocks_of_kind(document: ParsedDocument, kind: str) -> list[str]:
    return [block.text for block in document.blocks if block.kind == kind]


def _block_containing(document: ParsedDocument, text: str):
    matches = [block for block in document.blocks if text in block.text]
    assert len(matches) == 1, f"{text[:60]!r} found in {len(matches)} blocks"
    return matches[0]


def test_provenance_names_the_native_pipeline(structured: ParsedDocument) -> None:
    assert structured.paper_id == "structured"
    assert structured.parser == "docling-native"
    assert structured.options["pipeline"] == "NativePdfPipeline"
    assert "docling-slim 2." in structured.parser_version and "peerify-layout" in structured.parser_version
    assert structured.pages == len(PdfReader(BytesIO(fixtures_pdf.structured_paper())).pages)


def test_numbered_and_unnumbered_headings_are_recovered_in_order(structured: ParsedDocument) -> None:
    assert _blocks_of_kind(structured, "heading") == list(fixtures_pdf.HEADINGS)
    assert _blocks_of_kind(structured, "title") == [fixtures_pdf.TITLE]


def test_section_paths_follow_the_numbering(structured: ParsedDocument) -> None:
    subsection = _block_containing(structured, fixtures_pdf.SUBSECTION_PARAGRAPH)
    assert subsection.section_path == ["2 Method", "2.1 Training setup"]
    results = _block_containing(structured, fixtures_pdf.RESULTS_PARAGRAPH)
    assert results.section_path == ["3 Results"]


def test_abstract_and_appendix_are_marked(structured: ParsedDocument) -> None:
    assert _block_containing(structured, fixtures_pdf.ABSTRACT).kind == "abstract"
    appendix = _block_containing(structured, fixtures_pdf.APPENDIX_PARAGRAPH)
    assert appendix.in_appendix
    assert appendix.section_path == ["A Additional experiments", "A.1 Hyperparameters"]
    before_appendix = [block for block in structured.blocks if block.order < appendix.order - 2]
    assert before_appendix and not any(block.in_appendix for block in before_appendix)


def test_paragraph_crossing_a_page_break_is_one_block(structured: ParsedDocument) -> None:
    reader = PdfReader(BytesIO(fixtures_pdf.structured_paper()))
    first, last = fixtures_pdf.CROSS_PAGE_SENTENCES[0], fixtures_pdf.CROSS_PAGE_SENTENCES[-1]
    # The fixture must really split the paragraph over pages 1 and 2 for this test to mean anything.
    assert first in reader.pages[0].extract_text().replace("\n", " ")
    assert last in reader.pages[1].extract_text().replace("\n", " ")
    block = _block_containing(structured, first)
    assert block.text == fixtures_pdf.CROSS_PAGE_PARAGRAPH
    assert block.page == 1


def test_hyphenated_line_break_is_rejoined(structured: ParsedDocument) -> None:
    assert _block_containing(structured, "verification tooling").text == fixtures_pdf.HYPHEN_JOINED
    assert not any("verifi-" in block.text for block in structured.blocks)


def test_running_header_and_page_numbers_are_dropped(structured: ParsedDocument) -> None:
    assert not any(fixtures_pdf.RUNNING_HEADER in block.text for block in structured.blocks)
    assert not any(re.fullmatch(r"\d+", block.text) for block in structured.blocks)


def test_table_is_one_block_with_cells_joined(structured: ParsedDocument) -> None:
    expected = "\n".join(" | ".join(row) for row in fixtures_pdf.TABLE_ROWS)
    assert _blocks_of_kind(structured, "table") == [expected]


def test_captions_are_recognised(structured: ParsedDocument) -> None:
    assert _blocks_of_kind(structured, "caption") == [fixtures_pdf.TABLE_CAPTION, fixtures_pdf.FIGURE_CAPTION]


def test_references_are_kept_and_marked(structured: ParsedDocument) -> None:
    assert _blocks_of_kind(structured, "reference") == list(fixtures_pdf.REFERENCES)


def test_two_column_page_reads_left_column_then_right(parser: DocumentParser) -> None:
    document = parser.parse(fixtures_pdf.two_column_paper(), "two-column.pdf")
    texts = [block.text for block in document.blocks]
    title_at = texts.index(fixtures_pdf.TITLE)
    left_at = texts.index(fixtures_pdf.LEFT_COLUMN_TEXT)
    right_at = texts.index(fixtures_pdf.RIGHT_COLUMN_TEXT)
    assert title_at < left_at < right_at


@pytest.mark.parametrize(
    ("builder", "reason"),
    [
        (fixtures_pdf.encrypted_paper, "encrypted"),
        (fixtures_pdf.image_only_paper, "no_text_layer"),
        (fixtures_pdf.truncated_paper, "truncated"),
        (fixtures_pdf.zero_page_pdf, "zero_pages"),
        (fixtures_pdf.not_a_pdf, "not_a_pdf"),
    ],
)
def test_unusable_pdfs_raise_a_reason_code(parser: DocumentParser, builder, reason: str) -> None:
    with pytest.raises(ManuscriptParseError) as raised:
        parser.parse(builder(), "paper-xyz.pdf")
    assert raised.value.reason == reason
    assert raised.value.paper_id == "paper-xyz"
    assert "paper-xyz" in str(raised.value) and reason in str(raised.value)


def test_batch_reports_bad_manuscripts_and_parses_the_rest(parser: DocumentParser) -> None:
    result = parser.parse_batch([
        (fixtures_pdf.encrypted_paper(), "locked.pdf"),
        (fixtures_pdf.two_column_paper(), "good.pdf"),
        (fixtures_pdf.not_a_pdf(), "html-error.pdf"),
    ])
    assert [document.paper_id for document in result.documents] == ["good"]
    assert [(error.paper_id, error.reason) for error in result.failures] == [
        ("locked", "encrypted"), ("html-error", "not_a_pdf")
    ]


def test_configured_artifacts_path_uses_the_layout_pipeline(tmp_path: Path) -> None:
    # No layout model can be downloaded here: an empty artifacts folder proves the full
    # pipeline was chosen and that its failure is reported clearly instead of falling back.
    with pytest.raises(ManuscriptParseError) as raised:
        DocumentParser(artifacts_path=str(tmp_path)).parse(fixtures_pdf.two_column_paper(), "layout.pdf")
    assert raised.value.reason == "layout_model_unavailable"
    assert str(tmp_path) in raised.value.detail


MARKDOWN_SOURCE = """# Grounded Verification

## Abstract

We verify reviewer claims against manuscripts.

## 1 Introduction

Reviewers make claims, e.g. about missing baselines.

### 1.1 Motivation

Claims can be wrong.

Table 1: Recall of two retrievers.

| Model | Recall |
|---|---|
| BM25 | 41.2 |

## References

[1] S. Robertson. The probabilistic relevance framework. 2009.

## A Hyperparameters

We list every hyperparameter here.
"""


def test_markdown_manuscript_keeps_structure(parser: DocumentParser) -> None:
    document = parser.parse(MARKDOWN_SOURCE.encode(), "paper.md")
    assert document.parser == "docling-markdown"
    assert _blocks_of_kind(document, "title") == ["Grounded Verification"]
    assert _blocks_of_kind(document, "heading") == [
        "Abstract", "1 Introduction", "1.1 Motivation", "References", "A Hyperparameters"
    ]
    assert _block_containing(document, "Claims can be wrong.").section_path == ["1 Introduction", "1.1 Motivation"]
    assert _blocks_of_kind(document, "table") == ["Model | Recall\nBM25 | 41.2"]
    assert _blocks_of_kind(document, "caption") == ["Table 1: Recall of two retrievers."]
    assert _blocks_of_kind(document, "abstract") == ["We verify reviewer claims against manuscripts."]
    assert _blocks_of_kind(document, "reference") == ["[1] S. Robertson. The probabilistic relevance framework. 2009."]
    assert _block_containing(document, "every hyperparameter").in_appendix


HTML_SOURCE = """<html><body><h1>Grounded Verification</h1>
<h2>2 Method</h2><p>Our verifier is <b>fast</b> and small.</p>
<figure><img src="overview.png"><figcaption>Figure 1: The pipeline.</figcaption></figure>
<h3>2.1 Training</h3><p>We train for three epochs.</p>
<table><tr><th>Model</th><th>F1</th></tr><tr><td>Ours</td><td>83.1</td></tr></table>
</body></html>"""


def test_html_manuscript_keeps_structure(parser: DocumentParser) -> None:
    document = parser.parse(HTML_SOURCE.encode(), "paper.html")
    assert document.parser == "docling-html"
    assert _blocks_of_kind(document, "heading") == ["2 Method", "2.1 Training"]
    # Inline markup must not split a paragraph.
    assert _block_containing(document, "Our verifier").text == "Our verifier is fast and small."
    assert _blocks_of_kind(document, "caption") == ["Figure 1: The pipeline."]
    assert _block_containing(document, "83.1").kind == "table"
    assert _block_containing(document, "three epochs").section_path == ["2 Method", "2.1 Training"]


def test_plain_text_manuscript(parser: DocumentParser) -> None:
    text = ("Grounded Verification\n\n1 Introduction\n\nWe verify claims. The verifier is fast-\ner than before."
            "\n\nReferences\n\n[1] A. Author. A paper. 2020.\n")
    document = parser.parse(text.encode(), "paper.txt")
    assert document.parser == "plain-text"
    assert _blocks_of_kind(document, "heading") == ["1 Introduction", "References"]
    assert _blocks_of_kind(document, "paragraph") == ["We verify claims. The verifier is faster than before."]
    assert _blocks_of_kind(document, "reference") == ["[1] A. Author. A paper. 2020."]


def _sample_pdfs() -> list[Path]:
    pdfs = sorted((SAMPLE_VENUE / "snapshot" / "pdfs").glob("*.pdf"))
    return [pdf for pdf in pdfs if (SAMPLE_VENUE / "manuscripts" / f"{pdf.stem}.md").exists()]


def _squash(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


@pytest.mark.skipif(not _sample_pdfs(), reason="sample venue PDFs have not been built")
def test_sample_venue_headings_and_evidence_survive_parsing_and_chunking(parser: DocumentParser) -> None:
    claim_key_path = SAMPLE_VENUE / "claim_key.yaml"
    claims = yaml.safe_load(claim_key_path.read_text())["claims"] if claim_key_path.exists() else []
    checked_evidence = 0
    for pdf in _sample_pdfs():
        source = (SAMPLE_VENUE / "manuscripts" / f"{pdf.stem}.md").read_text()
        source_headings = re.findall(r"^# (.+?)\s*$", source, flags=re.MULTILINE)
        document = parser.parse(pdf)
        recovered = {block.text for block in document.blocks if block.kind == "heading"}
        missing = [heading for heading in source_headings if heading not in recovered]
        assert not missing, f"{pdf.name}: headings not recovered: {missing}"
        chunks = chunk_document(document.paper_id, document.blocks)
        for claim in claims:
            evidence = claim.get("evidence")
            if claim["forum"] != pdf.stem or not evidence:
                continue
            sentence = _squash(evidence["sentence"])
            holders = [chunk for chunk in chunks if sentence in _squash(chunk.text)]
            assert holders, f"{claim['id']}: evidence sentence not whole in any chunk of {pdf.name}"
            assert evidence["section"] in holders[0].section_path, \
                f"{claim['id']}: wrong section {holders[0].section_path}"
            checked_evidence += 1
    assert checked_evidence or not claims


def test_markdown_top_level_sections_are_headings_not_titles():
    markdown = (
        b"# A Study of Things\n\n# 1 Introduction\n\nWe study things in depth here.\n\n"
        b"# 2 Method\n\nOur method counts the things.\n\n## 2.1 Counting\n\nCounting is done twice.\n"
    )
    document = DocumentParser().parse(markdown, source_name="paper.md", paper_id="p1")
    kinds = [(b.kind, b.text) for b in document.blocks if b.kind in ("title", "heading")]
    assert kinds == [("title", "A Study of Things"), ("heading", "1 Introduction"), ("heading", "2 Method"),
                     ("heading", "2.1 Counting")]
    counting = [b for b in document.blocks if b.text == "Counting is done twice."][0]
    assert counting.section_path == ["2 Method", "2.1 Counting"]

"""Structure recovery on journal layouts (issue 23).

Synthetic pages built from positioned lines pin each new rule: a subheading set at body size in a face of its
own (a font whose name tells no weight), directly above its paragraph; a back-matter "References" heading set
smaller than the body in that face; an italic subheading of an unnumbered paper; an article-type label at title
size kept out of the title; a caption whose label carries no mark ("Fig. 2 M-waves ...") told by its small type,
and the paragraph it interrupts joined across it; a table's rows kept from the caption above it and a heading
beside a table kept a heading; a journal's notices (licence, dates, correspondence) kept as front matter. With
`../shared/real-data/pdfs-journals` present, the same failures are checked on
the real journal papers they were found on.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from peerify_dagster.domain.chunking import ChunkingConfig, chunk_document
from peerify_dagster.domain.layout.blocks import LayoutElement, assemble_blocks
from peerify_dagster.domain.layout.elements import recover_blocks
from peerify_dagster.domain.layout.lines import TextLine, clean_line_text
from peerify_dagster.resources.document_parser import DocumentParser

JOURNALS = Path(__file__).resolve().parents[1].parent / "shared" / "real-data" / "pdfs-journals"
needs_journals = pytest.mark.skipif(not JOURNALS.is_dir(), reason="../shared/real-data/pdfs-journals is not present")

BODY_FACE, HEADING_FACE = "Rrnyjg-Regular", "NptcdsAdvTT99c4c969"
PROSE = ("the subjects sat comfortably in a chair with the forearm kept relaxed while the wrist moved freely and "
         "each stimulation pattern was delivered twice in random order before the next block began").split()


class _Page:
    """Lines of one single-column page, laid out top to bottom with the body's line gap unless told."""

    def __init__(self) -> None:
        self.lines: list[TextLine] = []
        self.y = 60.0

    def line(self, text: str, size: float = 10.0, face: str = BODY_FACE, gap: float = 3.0, **style) -> None:
        width = min(500.0, 5.2 * size * len(text) / 10)
        self.y += gap
        self.lines.append(TextLine(1, 50.0, self.y, 50.0 + width, self.y + size, size, style.pop("bold", False),
                                   text, font=face, **style))
        self.y += size

    def paragraph(self, opening: str, rows: int = 4, gap: float = 3.0) -> None:
        self.line(f"{opening} {' '.join(PROSE[:14])}", gap=gap)
        for row in range(1, rows):
            words = PROSE[(row * 5) % 20:(row * 5) % 20 + 14]
            self.line(" ".join(words) + ("." if row == rows - 1 else ""))


def _journal_page(subheading_face: str = HEADING_FACE, italic: bool = False) -> list[TextLine]:
    page = _Page()
    page.line("Hand opening driven by electrical stimulation of the forearm", size=18.0, bold=True)
    page.line("Anna Rossi, Bruno Bianchi", gap=12.0)
    page.line("Background", face=HEADING_FACE, gap=18.0)
    page.paragraph("Functional stimulation restores grasp:", rows=6)
    page.line("Participants", face=subheading_face, gap=12.0, italic=italic)
    # An italic subheading stands apart from its paragraph; one in a heading face may sit at the line gap.
    page.paragraph("Eight young healthy subjects took part;", rows=5, gap=8.0 if italic else 3.0)
    page.line("References", size=8.0, face=HEADING_FACE, gap=14.0)
    page.line("1. Quandt F, Hummel FC. The influence of functional electrical stimulation. Exp Med. 2014;6:9.",
              size=8.0)
    page.line("2. Gallego JA, Rocon E. A neuroprosthesis for tremor management. J Neuroeng Rehabil. 2013;10:36.",
              size=8.0)
    return page.lines


def _blocks(lines: list[TextLine]):
    return recover_blocks(lines, {1: (600.0, 800.0)})


def test_subheading_in_its_own_face_at_body_size_is_a_heading_over_its_paragraph() -> None:
    blocks = _blocks(_journal_page())
    assert [b.text for b in blocks if b.kind == "heading"][:2] == ["Background", "Participants"]
    paragraph = next(b for b in blocks if "Eight young" in b.text)
    assert paragraph.kind == "paragraph" and paragraph.text.startswith("Eight young")
    assert paragraph.section_path == ["Participants"]


def test_subheading_in_the_body_face_stays_text() -> None:
    blocks = _blocks(_journal_page(subheading_face=BODY_FACE))
    assert "Participants" not in [b.text for b in blocks if b.kind == "heading"]


def test_small_references_heading_in_the_heading_face_opens_the_reference_list() -> None:
    blocks = _blocks(_journal_page())
    references = [b.text for b in blocks if b.kind == "reference"]
    assert len(references) == 2 and references[0].startswith("1. Quandt") and references[1].startswith("2. Gallego")


def test_italic_subheading_over_upright_text_is_a_heading() -> None:
    blocks = _blocks(_journal_page(subheading_face="Rrnyjg-Italic", italic=True))
    assert "Participants" in [b.text for b in blocks if b.kind == "heading"]


def test_article_type_label_is_kept_out_of_the_title() -> None:
    page = _Page()
    page.line("Research Article", size=16.0, bold=True)
    page.line("Patient Experiences of Structured Heart Failure Programmes", size=16.0, bold=True, gap=8.0)
    page.line("Nuala E. Tully, Karen M. Morgan", gap=12.0)
    page.line("Introduction", face=HEADING_FACE, gap=18.0)
    page.paragraph("Heart failure is common:", rows=6)
    blocks = _blocks(page.lines)
    assert [b.text for b in blocks if b.kind == "title"] == ["Patient Experiences of Structured Heart Failure "
                                                             "Programmes"]
    assert "Research Article" in next(b.text for b in blocks if b.kind == "authors")


def test_a_hanging_author_year_entry_ending_without_a_full_stop_does_not_swallow_the_next() -> None:
    page = _Page()
    page.line("Methods", face=HEADING_FACE, gap=18.0)
    page.paragraph("The rats were fasted overnight:", rows=5)
    page.line("References", face=HEADING_FACE, gap=14.0)
    page.line("Lichtenberger, L. M., Wang, Z-M. et al. (1995) Non-steroidal anti-inflammatory drugs associate")
    page.lines.append(TextLine(1, 62.0, page.y + 3.0, 400.0, page.y + 13.0, 10.0, False,
                               "with zwitterionic phospholipids. Nat Med 1: 154-158", font=BODY_FACE))
    page.y += 13.0
    page.line("Menconi, M. J., Unno, N., Smith, M. et al. (1998). Nitric oxide donor-induced hyperpermeability.")
    references = [b.text for b in _blocks(page.lines) if b.kind == "reference"]
    assert len(references) == 2 and references[1].startswith("Menconi"), references


def _row_of_cells(page: _Page, cells: list[str], size: float = 8.0, bold: bool = False) -> None:
    page.y += 3.0
    for column, cell in enumerate(cells):
        x = 50.0 + 120.0 * column
        page.lines.append(TextLine(1, x, page.y, x + 5.0 * len(cell), page.y + size, size, bold, cell, font=BODY_FACE))
    page.y += size


def test_a_caption_without_a_mark_in_small_type_interrupts_the_paragraph_it_sits_in() -> None:
    page = _Page()
    page.line("Methods", face=HEADING_FACE, gap=18.0)
    page.line(f"In order to evaluate the method {' '.join(PROSE[:12])}")
    page.line(" ".join(PROSE[4:18]))  # no full stop: the sentence runs on past the float
    page.line("Fig. 2 M-waves during the scanning procedure for one representative subject", size=7.0, gap=14.0)
    page.line("across the eight subjects and the stimulation patterns tested", size=7.0)
    page.line(f"when the optimal patterns were applied {' '.join(PROSE[:10])}.", gap=14.0)
    page.line("Figure 1 shows that the subjects kept the forearm relaxed during every block of the session.",
              gap=14.0)
    blocks = _blocks(page.lines)
    captions = [b.text for b in blocks if b.kind == "caption"]
    assert captions == ["Fig. 2 M-waves during the scanning procedure for one representative subject across the eight "
                        "subjects and the stimulation patterns tested"]
    paragraph = next(b.text for b in blocks if b.text.startswith("In order to evaluate"))
    assert "when the optimal patterns were applied" in paragraph, "the paragraph broke at the float"
    # At body size and without a face of its own, "Figure 1 shows ..." is prose.
    assert any(b.kind == "paragraph" and b.text.startswith("Figure 1 shows") for b in blocks)


def test_a_caption_set_above_a_table_leaves_the_tables_rows_to_the_table() -> None:
    page = _Page()
    page.line("Methods", face=HEADING_FACE, gap=18.0)
    page.paragraph("Eight subjects took part:", rows=4)
    page.line("Table 1 Characteristics of the subjects", size=8.0, gap=12.0)
    _row_of_cells(page, ["Subject", "Age", "Sex"], bold=True)
    _row_of_cells(page, ["S1", "24", "F"])
    _row_of_cells(page, ["S2", "31", "M"])
    page.line("3 Results", face=HEADING_FACE, gap=14.0)
    page.paragraph("All subjects completed the protocol:", rows=4)
    blocks = _blocks(page.lines)
    assert [b.text for b in blocks if b.kind == "caption"] == ["Table 1 Characteristics of the subjects"]
    assert [b.text for b in blocks if b.kind == "table"] == ["Subject | Age | Sex\nS1 | 24 | F\nS2 | 31 | M"]
    # Neither the bold column header nor the heading below the table is folded into another block.
    assert [b.text for b in blocks if b.kind == "heading"] == ["Methods", "3 Results"]
    assert next(b for b in blocks if b.text.startswith("All subjects")).section_path == ["3 Results"]


def test_a_numbered_heading_beside_a_table_in_the_other_column_stays_a_heading() -> None:
    lines: list[TextLine] = []

    def line(x: float, y: float, text: str, size: float = 10.0, face: str = BODY_FACE, bold: bool = False) -> None:
        lines.append(TextLine(1, x, y, x + 235.0, y + size, size, bold, text, font=face))

    for row in range(20):  # both columns: prose down to y 320
        words = PROSE[row % 10:row % 10 + 9]
        line(50.0, 60.0 + 13 * row, " ".join(words) + ("." if row == 19 else ""))
        line(310.0, 60.0 + 13 * row, " ".join(words[::-1]) + ("." if row == 19 else ""))
    line(50.0, 330.0, "Table 2 Outcomes per group", size=8.0)
    for row, cells in enumerate([["Group", "Mean", "SD"], ["Control", "4.1", "0.9"], ["Active", "5.3", "1.1"]]):
        for column, cell in enumerate(cells):
            x = 50.0 + 80.0 * column
            lines.append(TextLine(1, x, 350.0 + 11 * row, x + 5.0 * len(cell), 358.0 + 11 * row, 8.0, row == 0, cell,
                                  font=BODY_FACE))
    line(310.0, 345.0, "3. Results", face=HEADING_FACE, bold=True)  # level with the table's rows
    for row in range(5):
        line(310.0, 365.0 + 13 * row, ("All groups improved " if row == 0 else "") + " ".join(PROSE[row:row + 9])
             + ("." if row == 4 else ""))
    blocks = _blocks(lines)
    assert [b.text for b in blocks if b.kind == "heading"] == ["3. Results"]
    tables = [b.text for b in blocks if b.kind == "table"]
    assert tables == ["Group | Mean | SD\nControl | 4.1 | 0.9\nActive | 5.3 | 1.1"]
    assert next(b for b in blocks if b.text.startswith("All groups improved")).section_path == ["3. Results"]


def test_licence_dates_and_correspondence_are_front_matter_and_never_chunked() -> None:
    prose = " ".join(PROSE)
    elements = [LayoutElement(kind, text, 1) for kind, text in [
        ("title", "Patient experiences of structured heart failure programmes"),
        ("authors", "Anna Rossi, Bruno Bianchi"),
        ("abstract", "Copyright © 2010 Anna Rossi et al. This is an open access article distributed under the "
                     "Creative Commons Attribution License, which permits unrestricted use."),
        ("abstract", f"Objectives. {prose}."),
        ("heading", "Introduction"),
        ("paragraph", f"Copyright law does not reach the data of this study: {prose}."),
        ("paragraph", "* Correspondence: anna.rossi@example.org"),
        ("paragraph", f"Received signals were filtered: {prose}."),
        ("paragraph", "Received: 11 November 2015 Accepted: 24 February 2016"),
        ("heading", "References"),
        ("paragraph", "doi:10.5555/windows.2020"),  # an entry's line of its own stays in the reference list
    ]]
    blocks = assemble_blocks(elements)
    assert [b.text[:12] for b in blocks if b.kind == "front_matter"] == ["Copyright © ", "* Correspond",
                                                                          "Received: 11"]
    assert [b.kind for b in blocks if b.text.startswith(("Objectives", "Copyright law", "Received signals"))] == [
        "abstract", "paragraph", "paragraph"]
    assert blocks[-1].kind == "reference"
    chunks = chunk_document("p1", blocks, ChunkingConfig())
    assert chunks and not any("open access article" in c.text or "Correspondence" in c.text or "Accepted:" in c.text
                              for c in chunks)


@pytest.mark.parametrize(("layer", "text"), [
    ("signifi cantly higher", "significantly higher"), ("anti-infl ammatory drugs", "anti-inflammatory drugs"),
    ("the fl ow rate", "the flow rate"), ("Rafi , S., Jacob, M.", "Rafi, S., Jacob, M."),
    ("a sci-fi film", "a sci-fi film"), ("the staff members", "the staff members"), ("if it is", "if it is"),
])
def test_a_ligature_set_as_a_word_of_its_own_is_closed_up(layer: str, text: str) -> None:
    assert clean_line_text(layer) == text


# --- The real journal papers the failures were found on ------------------------------------------


@pytest.fixture(scope="module")
def parsed() -> dict:
    parser = DocumentParser()
    return {pdf.stem.split("-")[0].split("_")[0]: parser.parse(pdf) for pdf in sorted(JOURNALS.glob("*.pdf"))}


def _texts(document, kind: str) -> list[str]:
    return [block.text for block in document.blocks if block.kind == kind]


@needs_journals
def test_bmc_unnumbered_subheadings_stand_alone(parsed) -> None:
    headings = _texts(parsed["0046d83a"], "heading")
    for heading in ("Participants", "Experimental setup", "Kinematics recording", "Data analysis"):
        assert heading in headings
    assert all(len(heading.split()) <= 10 for heading in headings), "a heading swallowed its paragraph"


@needs_journals
def test_bmc_small_references_heading_gives_one_block_per_entry(parsed) -> None:
    references = _texts(parsed["0046d83a"], "reference")
    assert len(references) >= 45
    assert references[0].startswith("1. Quandt F, Hummel FC.")


@needs_journals
def test_springer_italic_subheadings(parsed) -> None:
    headings = _texts(parsed["academic"], "heading")
    assert headings.count("Intestinal Permeability") == 2 and "Animals" in headings


@needs_journals
@pytest.mark.parametrize(("paper", "title"), [
    ("cermine", "Patient Experiences of Structured Heart Failure Programmes"),
    ("academic", "The effects of AZD3582"),
])
def test_research_article_label_not_in_title(parsed, paper: str, title: str) -> None:
    titles = _texts(parsed[paper], "title")
    assert len(titles) == 1 and titles[0].startswith(title)


@needs_journals
def test_springer_ligatures_and_author_year_entries(parsed) -> None:
    document = parsed["academic"]
    text = " ".join(block.text for block in document.blocks)
    assert "infl ammatory" not in text and "anti-inflammatory" in text
    references = _texts(document, "reference")
    lichtenberger = next(entry for entry in references if entry.startswith("Lichtenberger"))
    assert "Menconi" not in lichtenberger and any(entry.startswith("Menconi") for entry in references)


@needs_journals
def test_bmc_paragraph_runs_on_past_a_figure_caption_at_the_page_break(parsed) -> None:
    # BMC sets a caption's "Fig. 2" without a mark, in small type; the paragraph it interrupts goes on overleaf.
    document = parsed["0046d83a"]
    caption = next(b for b in document.blocks if b.text.startswith("Fig. 2 M-waves"))
    assert caption.kind == "caption"
    paragraph = next(b.text for b in document.blocks if b.text.startswith("In order to evaluate the effectiveness"))
    assert "statistically significant for values of p < 0.05." in paragraph


@needs_journals
def test_springer_figure_captions_are_captions(parsed) -> None:
    # Springer's bold "Fig. 1" label, no mark after it; Fig. 3's caption sits right under its plot's axis labels.
    captions = _texts(parsed["academic"], "caption")
    assert [caption[:6] for caption in captions] == ["Fig. 1", "Fig. 2", "Fig. 3"]
    assert captions[0].startswith("Fig. 1 Urinary excretion")
    assert not any("Fig. " in text for text in _texts(parsed["academic"], "figure") + _texts(parsed["academic"],
                                                                                              "paragraph"))


@needs_journals
@pytest.mark.parametrize(("paper", "notices"), [
    ("0046d83a", ["* Correspondence:", "© 2016 De Marchis", "Received: 11 November 2015"]),
    ("academic", ["* Corresponding author"]),
    ("cermine", ["Copyright © 2010"]),
])
def test_journal_notices_are_front_matter_not_abstract_or_body(parsed, paper: str, notices: list[str]) -> None:
    document = parsed[paper]
    front = _texts(document, "front_matter")
    assert [text[:len(notice)] for text, notice in zip(front, notices)] == notices and len(front) == len(notices)
    assert not any(text.startswith(("Copyright ©", "©", "* Correspond")) for text in
                   _texts(document, "abstract") + _texts(document, "paragraph"))

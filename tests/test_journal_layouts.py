"""Structure recovery on journal layouts (issue 23).

Synthetic pages built from positioned lines pin each new rule: a subheading set at body size in a face of its
own (a font whose name tells no weight), directly above its paragraph; a back-matter "References" heading set
smaller than the body in that face; an italic subheading of an unnumbered paper; an article-type label at title
size kept out of the title. With `../shared/real-data/pdfs-journals` present, the same failures are checked on
the real journal papers they were found on.
"""

from __future__ import annotations

from pathlib import Path

import pytest

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
    assert [b.text for b in blocks if b.kind == "title"] == ["Patient Experiences of Structured Heart Failure Programmes"]
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

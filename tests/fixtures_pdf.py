"""Build small test manuscripts as real PDF bytes with fpdf2 (and broken ones on purpose).

`structured_paper()` lays out one paper that exercises every structure rule the parser has:
numbered and unnumbered headings, a paragraph crossing a page break, a word hyphenated at a
line end, a table, a figure caption, a running header and page numbers, references and an
appendix. `two_column_paper()` puts distinct text in two columns under a full-width title.
The texts the tests look for are module constants, so a test never restates them.
"""

from __future__ import annotations

from io import BytesIO

from fpdf import FPDF
from pypdf import PdfWriter

RUNNING_HEADER = "Preprint. Under review at the Test Workshop."
TITLE = "Grounded Verification of Reviewer Claims"
ABSTRACT = (
    "We study whether claims made by peer reviewers can be checked against the reviewed manuscript. "
    "Our verifier retrieves evidence passages and assigns one of four labels to every claim."
)
INTRO_PARAGRAPH = (
    "Peer review is the main quality filter of science, yet reviewers sometimes misread a paper. "
    "We build a benchmark of reviewer claims paired with manuscript evidence, e.g. passages that "
    "support or contradict a claim, and we compare retrievers such as BM25 (Robertson et al. 2009) "
    "with dense encoders. The accuracy rose from 81.2 to 84.5 points in Sec. 4 of our study."
)
# Laid out by hand so that the word "verification" is split "verifi-" / "cation" at a line end.
HYPHEN_LINES = (
    "The second paragraph checks that a word split at the end of a line by verifi-",
    "cation tooling is joined again, and that the sentence stays whole.",
)
HYPHEN_JOINED = (
    "The second paragraph checks that a word split at the end of a line by verification tooling is "
    "joined again, and that the sentence stays whole."
)
SUBSECTION_PARAGRAPH = "We train the verifier for three epochs with a learning rate of 0.0002 on one GPU."
# Long enough to run past the bottom of page 1; its last line there does not end a sentence.
CROSS_PAGE_SENTENCES = [
    f"Sentence number {index} of the long method paragraph describes step {index} of the retrieval pipeline in detail."
    for index in range(1, 40)
]
CROSS_PAGE_PARAGRAPH = " ".join(CROSS_PAGE_SENTENCES)
TABLE_ROWS = (("Model", "Recall", "F1"), ("BM25", "41.2", "38.0"), ("Dense", "55.7", "51.3"))
TABLE_CAPTION = "Table 1: Retrieval quality of the two retrievers on the test split."
FIGURE_CAPTION = "Figure 2: Overview of the verification pipeline."
RESULTS_PARAGRAPH = "The dense retriever finds more evidence than BM25 on every venue we tested."
REFERENCES = (
    "[1] S. Robertson and H. Zaragoza. The probabilistic relevance framework: BM25 and beyond. 2009.",
    "[2] N. Reimers and I. Gurevych. Sentence-BERT: sentence embeddings using siamese networks. 2019.",
)
APPENDIX_PARAGRAPH = "The appendix lists every hyperparameter that the main text leaves out for space reasons."
HEADINGS = (
    "Abstract",
    "1 Introduction",
    "2 Method",
    "2.1 Training setup",
    "3 Results",
    "Limitations",
    "References",
    "A Additional experiments",
    "A.1 Hyperparameters",
)

LEFT_COLUMN_TEXT = " ".join(f"Left column sentence {index} reads first." for index in range(1, 25))
RIGHT_COLUMN_TEXT = " ".join(f"Right column sentence {index} reads second." for index in range(1, 25))

_BODY = ("Times", "", 10)
_LINE = 5.0


class _Paper(FPDF):
    def __init__(self) -> None:
        super().__init__(format="letter", unit="mm")
        self.set_auto_page_break(True, margin=25)
        self.set_margins(25, 25, 25)

    def header(self) -> None:
        self.set_font("Helvetica", "I", 8)
        self.set_xy(25, 10)
        self.cell(0, 4, RUNNING_HEADER, align="C")
        self.set_xy(25, 25)

    def footer(self) -> None:
        self.set_font("Helvetica", "", 9)
        self.set_xy(25, -15)
        self.cell(0, 4, str(self.page_no()), align="C")

    def heading(self, text: str, size: float = 12) -> None:
        self.ln(3)
        self.set_font("Helvetica", "B", size)
        self.cell(0, 7, text, new_x="LMARGIN", new_y="NEXT")

    def paragraph(self, text: str) -> None:
        self.set_font(*_BODY)
        self.multi_cell(0, _LINE, text, new_x="LMARGIN", new_y="NEXT")
        self.ln(3)

    def lines(self, lines: tuple[str, ...]) -> None:
        self.set_font(*_BODY)
        for line in lines:
            self.cell(0, _LINE, line, new_x="LMARGIN", new_y="NEXT")
        self.ln(3)

    def table(self, rows: tuple[tuple[str, ...], ...]) -> None:
        for index, row in enumerate(rows):
            self.set_font("Times", "B" if index == 0 else "", 10)
            for cell in row:
                self.cell(40, 6, cell, border=1, align="C")
            self.ln(6)
        self.ln(3)

    def figure(self, caption: str) -> None:
        self.set_fill_color(200)
        self.rect(60, self.get_y(), 90, 30, style="DF")
        self.set_y(self.get_y() + 33)
        self.set_font("Times", "I", 9)
        self.multi_cell(0, _LINE, caption, new_x="LMARGIN", new_y="NEXT")
        self.ln(3)


def structured_paper() -> bytes:
    """A one-column paper with every structure the layout rules recover."""
    pdf = _Paper()
    pdf.add_page()
    pdf.set_font("Helvetica", "B", 16)
    pdf.multi_cell(0, 8, TITLE, align="C", new_x="LMARGIN", new_y="NEXT")
    pdf.ln(2)
    pdf.heading(HEADINGS[0])
    pdf.paragraph(ABSTRACT)
    pdf.heading(HEADINGS[1])
    pdf.paragraph(INTRO_PARAGRAPH)
    pdf.lines(HYPHEN_LINES)
    pdf.heading(HEADINGS[2])
    pdf.paragraph(CROSS_PAGE_PARAGRAPH)
    pdf.heading(HEADINGS[3], size=11)
    pdf.paragraph(SUBSECTION_PARAGRAPH)
    pdf.heading(HEADINGS[4])
    pdf.set_font("Times", "I", 9)
    pdf.multi_cell(0, _LINE, TABLE_CAPTION, new_x="LMARGIN", new_y="NEXT")
    pdf.table(TABLE_ROWS)
    pdf.figure(FIGURE_CAPTION)
    pdf.paragraph(RESULTS_PARAGRAPH)
    pdf.heading(HEADINGS[5])
    pdf.paragraph("Our benchmark covers two venues only, so results may not transfer to other fields.")
    pdf.heading(HEADINGS[6])
    for entry in REFERENCES:
        pdf.set_font("Times", "", 9)
        pdf.multi_cell(0, 4.5, entry, new_x="LMARGIN", new_y="NEXT")
        pdf.ln(1)
    pdf.heading(HEADINGS[7])
    pdf.heading(HEADINGS[8], size=11)
    pdf.paragraph(APPENDIX_PARAGRAPH)
    return bytes(pdf.output())


def two_column_paper() -> bytes:
    """A full-width title over two columns whose texts must be read left column first."""
    pdf = _Paper()
    pdf.add_page()
    pdf.set_font("Helvetica", "B", 16)
    pdf.multi_cell(0, 8, TITLE, align="C", new_x="LMARGIN", new_y="NEXT")
    pdf.ln(4)
    top = pdf.get_y()
    column_width = (pdf.w - 50 - 8) / 2
    pdf.set_font(*_BODY)
    pdf.set_xy(25, top)
    pdf.multi_cell(column_width, _LINE, LEFT_COLUMN_TEXT)
    pdf.set_xy(25 + column_width + 8, top)
    pdf.multi_cell(column_width, _LINE, RIGHT_COLUMN_TEXT)
    return bytes(pdf.output())


def encrypted_paper() -> bytes:
    """A PDF that needs a user password to open."""
    pdf = FPDF()
    pdf.set_encryption(owner_password="owner-secret", user_password="reader-secret")
    pdf.add_page()
    pdf.set_font(*_BODY)
    pdf.cell(0, _LINE, "Nobody can read this without the password.")
    return bytes(pdf.output())


def image_only_paper() -> bytes:
    """A scanned-looking page: drawn shapes and a raster image, no text layer."""
    from PIL import Image

    pdf = FPDF()
    pdf.add_page()
    pdf.set_fill_color(120)
    pdf.rect(20, 20, 170, 40, style="F")
    buffer = BytesIO()
    Image.new("L", (64, 64), color=180).save(buffer, format="PNG")
    pdf.image(buffer, x=20, y=80, w=60)
    return bytes(pdf.output())


def truncated_paper() -> bytes:
    """The first half of a valid PDF, as an interrupted download leaves it."""
    whole = structured_paper()
    return whole[: len(whole) // 2]


def zero_page_pdf() -> bytes:
    """A well-formed PDF with an empty page tree (fpdf2 always adds a page, pypdf does not)."""
    buffer = BytesIO()
    PdfWriter().write(buffer)
    return buffer.getvalue()


def not_a_pdf() -> bytes:
    """An HTML error page saved under a .pdf name, as failed downloads often are."""
    return b"<html><body><h1>502 Bad Gateway</h1></body></html>"

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
from pypdf import PdfReader, PdfWriter

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


# --- A paper with the layouts real papers have ------------------------------------------------
# `layout_defects_paper()` reproduces, in a two-column letter page set with Times like ACL's, each
# defect structure recovery must survive: a title and author block, a venue footer on page 1 only,
# running headers with page numbers, a superscript footnote marker mid-paragraph and its footnote,
# run-in headings, hyphenated line ends (real compounds among them), a paragraph interrupted at a
# column end by a figure with labels and its caption, a display equation, a table whose bold header
# row reads like a title, a lettered list, references with hanging indents, an appendix after them
# and a NeurIPS-style paper checklist.

DEFECTS_TITLE = "Verifying Reviewer Claims Against Manuscripts"
DEFECTS_AUTHORS = ("Ada Lovelace and Alan Turing", "Analytical Engines Laboratory, London", "ada@example.org")
DEFECTS_RUNNING_HEADER = "Verifying Reviewer Claims Against Manuscripts"
DEFECTS_VENUE_FOOTER = "Proceedings of the Workshop on Testing Parsers, pages 1-3, 2024."
DEFECTS_ABSTRACT = (
    "We check reviewer claims against the manuscript they discuss. A retriever finds evidence passages "
    "and a verifier labels every claim with one of four labels."
)
# A paragraph whose second line carries a raised footnote marker after "pipelines".
SUPERSCRIPT_LINES = (
    ("Peer review decides what science gets published, yet", ""),
    ("reviewers misread papers. We study retrieval pipelines", "1"),
    ("and verifiers that check each claim against the paper", ""),
    ("itself, and we release every component for reuse.", ""),
)
SUPERSCRIPT_PARAGRAPH = (
    "Peer review decides what science gets published, yet reviewers misread papers. We study retrieval "
    "pipelines"
)
SUPERSCRIPT_PARAGRAPH_END = ("and verifiers that check each claim against the paper itself, and we release every "
                             "component for reuse.")
FOOTNOTE_TEXT = "Our code is public at example.org/verify."
# A run-in heading without a period: its words stay the start of the paragraph.
RUN_IN_LEAD = "Document Representation"
RUN_IN_LINES = (
    "Our goal is to repre-",
    "sent each document as a set of passages that a",
    "retriever can rank against every claim a reviewer makes.",
)
RUN_IN_PARAGRAPH = (
    "Document Representation Our goal is to represent each document as a set of passages that a retriever "
    "can rank against every claim a reviewer makes."
)
# Line ends that must keep their hyphen (compounds), keep a space ("pre- and"), or close up ("in- troduce").
HYPHEN_COMPOUND_LINES = (
    "We in-",
    "troduce a self-",
    "supervised, state-of-the-",
    "art verifier with pre-",
    "and post-training stages; the self-supervised",
    "objective and state-of-the-art results are new.",
)
HYPHEN_COMPOUND_TEXT = (
    "We introduce a self-supervised, state-of-the-art verifier with pre- and post-training stages; the "
    "self-supervised objective and state-of-the-art results are new."
)
# The left column's last paragraph stops mid-sentence; the right column opens with a figure and its caption.
INTERRUPTED_START = (
    "The verifier reads the top passages for a claim and",
    "returns a label with its rationale, which we then",
)
INTERRUPTED_END = ("compare against the human label to measure agreement on every venue.",)
INTERRUPTED_PARAGRAPH = (
    "The verifier reads the top passages for a claim and returns a label with its rationale, which we then "
    "compare against the human label to measure agreement on every venue."
)
FIGURE_LABELS = ("4 5", "Recall")
FIGURE_CAPTION_LINES = ("Figure 1: Recall of the retriever as the number of", "passages grows.")
FIGURE_CAPTION_TEXT = " ".join(FIGURE_CAPTION_LINES)
EQUATION = "J = |A n B| / |A u B|   (1)"
TABLE_CAPTION_TEXT = "Table 1: Precision, recall and F1 on two venues."
TABLE_HEADER = "Model P R F1 P R F1"
TABLE_BODY = ("BM25 41.2 38.0 39.5 40.1 37.7 38.9", "Dense 55.7 51.3 53.4 54.0 50.2 52.0")
LETTERED_LIST = (
    "I. Statistical: uses one or more statistical models to predict spans and links them to a knowledge base.",
    "II. Hybrid: defines a small number of rules and falls back to the statistical models elsewhere.",
)
DEFECTS_HEADINGS = ("Abstract", "1 Introduction", "2 Method", "3 Conclusion", "References", "A Proofs",
                    "NeurIPS Paper Checklist")
DEFECTS_REFERENCES = (
    "Ada Lovelace. 1843. Notes on the analytical engine. Scientific Memoirs, 3:666-731.",
    "Alan Turing. 1950. Computing machinery and intelligence. Mind, 59(236):433-460.",
)
APPENDIX_TEXT = "The proof of the bound follows from the union bound over all claims of a venue."
CHECKLIST_ITEM = "1. Claims: do the main claims reflect the contributions? Answer: [Yes] we report error bars."

_COLUMN_WIDTH = 243.0
_GUTTER = 18.0
_LEFT = 54.0
_TOP = 72.0
_BOTTOM = 720.0
_LEADING = 12.0


class _TwoColumnPaper(FPDF):
    """Letter pages in points; text placed line by line so every line break is the test's choice."""

    def __init__(self) -> None:
        super().__init__(format="letter", unit="pt")
        self.set_auto_page_break(False)
        self.column = 0
        self.y_cursor = _TOP

    def new_page(self) -> None:
        self.add_page()
        number = self.page_no()
        if number > 1:
            self.set_font("Times", "", 10)
            self.text(_LEFT, 44, DEFECTS_RUNNING_HEADER)
            self.text(612 - _LEFT - self.get_string_width(str(number)), 44, str(number))
        self.set_font("Times", "", 10)
        self.text(306 - self.get_string_width(str(number)) / 2, 760, str(number))
        self.column, self.y_cursor = 0, _TOP

    def next_column(self, top: float = _TOP) -> None:
        self.column, self.y_cursor = 1, top

    @property
    def x_left(self) -> float:
        return _LEFT + self.column * (_COLUMN_WIDTH + _GUTTER)

    def line(self, text: str, style: str = "", size: float = 10, indent: float = 0, centre: bool = False) -> None:
        self.set_font("Times", style, size)
        x = self.x_left + indent
        if centre:
            x = self.x_left + (_COLUMN_WIDTH - self.get_string_width(text)) / 2
        self.y_cursor += size * 1.2
        self.text(x, self.y_cursor, text)

    def wrapped(self, text: str, style: str = "", size: float = 10, indent: float = 0, hanging: float = 0) -> None:
        self.set_font("Times", style, size)
        words, current, first = text.split(), "", True
        for word in words:
            trial = f"{current} {word}".strip()
            width = _COLUMN_WIDTH - (indent if first else hanging)
            if current and self.get_string_width(trial) > width:
                self.line(current, style, size, indent if first else hanging)
                current, first = word, False
            else:
                current = trial
        if current:
            self.line(current, style, size, indent if first else hanging)

    def space(self, points: float = 6) -> None:
        self.y_cursor += points

    def heading(self, text: str, size: float = 12, centre: bool = False) -> None:
        self.space(8)
        self.line(text, "B", size, centre=centre)
        self.space(3)


def layout_defects_paper() -> bytes:
    pdf = _TwoColumnPaper()
    pdf.new_page()
    # Title and author block, full width.
    pdf.set_font("Times", "B", 16)
    pdf.text(306 - pdf.get_string_width(DEFECTS_TITLE) / 2, 90, DEFECTS_TITLE)
    for offset, text in enumerate(DEFECTS_AUTHORS):
        pdf.set_font("Times", "B" if offset == 0 else "", 11)
        pdf.text(306 - pdf.get_string_width(text) / 2, 112 + 13 * offset, text)
    pdf.set_font("Times", "", 8)
    pdf.text(306 - pdf.get_string_width(DEFECTS_VENUE_FOOTER) / 2, 745, DEFECTS_VENUE_FOOTER)
    pdf.y_cursor = 150
    pdf.heading("Abstract", centre=True)
    pdf.wrapped(DEFECTS_ABSTRACT, indent=0)
    pdf.heading("1 Introduction")
    for text, marker in SUPERSCRIPT_LINES:
        pdf.line(text, indent=10 if text == SUPERSCRIPT_LINES[0][0] else 0)
        if marker:
            pdf.set_font("Times", "", 10)
            end = pdf.x_left + pdf.get_string_width(text) + 0.5
            pdf.set_font("Times", "", 7)
            pdf.text(end, pdf.y_cursor - 4, marker)
    # Run-in heading: bold lead, regular text on the same line.
    pdf.space(2)
    pdf.set_font("Times", "B", 10)
    lead_width = pdf.get_string_width(RUN_IN_LEAD + " ")
    pdf.y_cursor += 12
    pdf.text(pdf.x_left, pdf.y_cursor, RUN_IN_LEAD)
    pdf.set_font("Times", "", 10)
    pdf.text(pdf.x_left + lead_width, pdf.y_cursor, RUN_IN_LINES[0])
    for text in RUN_IN_LINES[1:]:
        pdf.line(text)
    pdf.space(2)
    pdf.line(HYPHEN_COMPOUND_LINES[0], indent=10)
    for text in HYPHEN_COMPOUND_LINES[1:]:
        pdf.line(text)
    pdf.space(2)
    pdf.line(INTERRUPTED_START[0], indent=10)
    pdf.line(INTERRUPTED_START[1])
    pdf.set_font("Times", "", 8)
    pdf.text(pdf.x_left + 8, 706, f"1 {FOOTNOTE_TEXT}")
    pdf.next_column(top=150)
    # The right column opens with a figure: a frame, labels drawn inside it, then its caption.
    pdf.rect(pdf.x_left + 40, 156, 160, 70)
    pdf.set_font("Helvetica", "", 7)
    pdf.text(pdf.x_left + 60, 190, FIGURE_LABELS[0])
    pdf.text(pdf.x_left + 110, 220, FIGURE_LABELS[1])
    pdf.y_cursor = 234
    for text in FIGURE_CAPTION_LINES:
        pdf.line(text, size=9)
    pdf.space(10)
    pdf.line(INTERRUPTED_END[0])
    pdf.heading("2 Method")
    pdf.wrapped("We score overlap between the evidence sets of two retrievers with the Jaccard index "
                "of their passage sets:")
    pdf.space(6)
    pdf.line(EQUATION, centre=True)
    pdf.space(6)
    pdf.wrapped("We experiment with two approaches for entity linking:")
    for item in LETTERED_LIST:
        pdf.wrapped(item, indent=0, hanging=10)
    pdf.space(8)
    pdf.line(TABLE_CAPTION_TEXT, size=9)
    pdf.space(4)
    pdf.line(TABLE_HEADER, "B", 10, indent=20)
    for row in TABLE_BODY:
        pdf.line(row, indent=20)
    pdf.space(6)
    pdf.heading("3 Conclusion")
    pdf.wrapped("Checking reviewer claims against the paper is feasible with retrieval and a careful verifier.")
    pdf.heading("References")
    for entry in DEFECTS_REFERENCES:
        pdf.wrapped(entry, size=9, hanging=10)
    pdf.new_page()
    pdf.heading("A Proofs")
    for _ in range(6):
        pdf.wrapped(APPENDIX_TEXT)
        pdf.space(4)
    pdf.new_page()
    pdf.heading("NeurIPS Paper Checklist")
    pdf.wrapped(CHECKLIST_ITEM, hanging=10)
    pdf.wrapped("2. Limitations: does the paper discuss its limitations? Answer: [Yes] in Section 3.", hanging=10)
    return bytes(pdf.output())


# --- Inputs that are hard in other ways ---------------------------------------------------------


def _rewrite(data: bytes, change) -> bytes:
    """Copy a PDF through pypdf, letting `change(writer)` alter it."""
    writer = PdfWriter()
    for page in PdfReader(BytesIO(data)).pages:
        writer.add_page(page)
    change(writer)
    buffer = BytesIO()
    writer.write(buffer)
    return buffer.getvalue()


def rotated_paper() -> bytes:
    """`structured_paper` with its first page displayed turned a quarter (as landscape pages are)."""
    return _rewrite(structured_paper(), lambda writer: writer.pages[0].rotate(90))


def partly_scanned_paper() -> bytes:
    """`structured_paper` followed by an image-only page, as a scanned appendix is."""
    scanned = PdfReader(BytesIO(image_only_paper())).pages[0]
    return _rewrite(structured_paper(), lambda writer: writer.add_page(scanned))


def broken_encoding_paper() -> bytes:
    """`structured_paper` whose fonts map every code to a glyph name without Unicode meaning (no ToUnicode),
    so the text layer holds only unmapped glyphs, as some old LaTeX Type 3 fonts do."""
    from pypdf.generic import ArrayObject, DictionaryObject, NameObject, NumberObject

    def scramble(writer: PdfWriter) -> None:
        encoding = DictionaryObject({
            NameObject("/Type"): NameObject("/Encoding"),
            NameObject("/Differences"): ArrayObject([NumberObject(32)]
                                                    + [NameObject(f"/g{code}") for code in range(32, 256)]),
        })
        for page in writer.pages:
            fonts = page["/Resources"]["/Font"]
            for name in fonts:
                fonts[name].get_object()[NameObject("/Encoding")] = encoding

    return _rewrite(structured_paper(), scramble)


ONE_PAGE_ABSTRACT = (
    "We describe a benchmark of reviewer claims and the manuscript passages that support or refute them. "
    "This one-page abstract summarises the dataset, the retrievers we compare and the verifier we train."
)


def one_page_abstract() -> bytes:
    """A workshop submission that is only a title, authors and an abstract."""
    pdf = _Paper()
    pdf.add_page()
    pdf.set_font("Helvetica", "B", 16)
    pdf.multi_cell(0, 8, TITLE, align="C", new_x="LMARGIN", new_y="NEXT")
    pdf.set_font("Helvetica", "", 11)
    pdf.multi_cell(0, 6, "Ada Lovelace, Analytical Engines Laboratory", align="C", new_x="LMARGIN", new_y="NEXT")
    pdf.heading("Abstract")
    pdf.paragraph(ONE_PAGE_ABSTRACT)
    return bytes(pdf.output())


LONG_PAPER_SECTIONS = 8
LONG_APPENDIX_SECTIONS = 10


def long_paper(pages: int = 60) -> bytes:
    """A paper of `pages` pages: numbered sections, references, then lettered appendix sections to the end."""
    pdf = _Paper()
    pdf.add_page()
    pdf.set_font("Helvetica", "B", 16)
    pdf.multi_cell(0, 8, TITLE, align="C", new_x="LMARGIN", new_y="NEXT")
    paragraph = " ".join(CROSS_PAGE_SENTENCES[:8])
    for number in range(1, LONG_PAPER_SECTIONS + 1):
        pdf.heading(f"{number} Main section {number}")
        for _ in range(3):
            pdf.paragraph(paragraph)
    pdf.heading("References")
    for entry in REFERENCES:
        pdf.set_font("Times", "", 9)
        pdf.multi_cell(0, 4.5, entry, new_x="LMARGIN", new_y="NEXT")
    letter = 0
    while pdf.page_no() < pages:
        pdf.heading(f"{chr(ord('A') + letter % 26)} Appendix section {letter + 1}")
        for _ in range(6):
            pdf.paragraph(APPENDIX_PARAGRAPH + " " + paragraph)
            if pdf.page_no() >= pages:
                break
        letter += 1
    return bytes(pdf.output())


def citing_paper(title: str, paragraphs: tuple[str, ...], references: tuple[str, ...] | None = None) -> bytes:
    """A one-column paper: `title`, an introduction of `paragraphs` (which may carry citation markers) and, unless
    `references` is None, a "References" section of one block per entry, as written."""
    pdf = _Paper()
    pdf.add_page()
    pdf.set_font("Helvetica", "B", 16)
    pdf.multi_cell(0, 8, title, align="C", new_x="LMARGIN", new_y="NEXT")
    pdf.heading("1 Introduction")
    for text in paragraphs:
        pdf.paragraph(text)
    if references is not None:
        pdf.heading("References")
        for entry in references:
            pdf.set_font("Times", "", 9)
            pdf.multi_cell(0, 4.5, entry, new_x="LMARGIN", new_y="NEXT")
            pdf.ln(1)
    return bytes(pdf.output())

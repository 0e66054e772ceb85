"""Citation marker styles and reference lists of journal papers (issue 34): round-bracket numeric markers counted
only where a numbered list resolves them, superscript digits told by the text layer's font size and position, a
paper's own numbering form preferred, "et al." choosing between entries of one surname and year, and reference
entries kept whole (a slip inside an author list, a glued initial, a lower-case subtitle after "?", a page number
or a publisher's line among the entries, an entry ending on its pages, a footnote read into the list)."""

from __future__ import annotations

import time

import pytest
from fpdf import FPDF

from peerify_dagster.domain.citations.bibliography import entries_from_blocks, parse_entry
from peerify_dagster.domain.citations.detection import (
    NUMERIC,
    ROUND_NUMERIC,
    SUPERSCRIPT,
    detect_citances,
    detect_paper_citances,
    find_markers,
    paper_style,
    resolve_markers,
)
from peerify_dagster.domain.citations.entries import PARSED, ParsedEntry
from peerify_dagster.domain.layout.blocks import Block, LayoutElement, assemble_blocks
from peerify_dagster.domain.layout.elements import recover_blocks
from peerify_dagster.domain.layout.lines import TextLine, is_superscript_word, with_superscripts


def labelled(index: int, surname: str, year: int) -> ParsedEntry:
    return ParsedEntry(index=index, raw_text=f"{index}. {surname}, A. A paper. {year}.", label=str(index),
                       authors=(surname,), surnames=(surname,), title="A paper", year=year, status=PARSED)


NUMBERED = [labelled(1, "Agogué", 2008), labelled(2, "Baker", 2003), labelled(3, "Cunliffe", 2011)]
AUTHOR_YEAR_LIST = [ParsedEntry(index=1, raw_text="Smith, A. (2020). A paper.", authors=("Smith, A.",),
                                surnames=("Smith",), title="A paper", year=2020, status=PARSED)]


def kept_markers(texts: list[str], entries: list[ParsedEntry]) -> list[list[str]]:
    return [[marker.text for citance in citances for marker in citance.markers]
            for citances in detect_paper_citances(texts, entries)]


# ---- round-bracket numeric markers ------------------------------------------------------------------------------

def test_round_bracket_numbers_cite_in_a_paper_whose_numbered_list_they_resolve_to():
    texts = ["The microlayer hosts distinct communities (1, 3). Acid drainage was studied before (2).",
             "Samples were taken at two sites (1) (2) (3).", "Ranges were pooled (1-3)."]
    assert kept_markers(texts, NUMBERED) == [["(1, 3)", "(2)"], ["(1)", "(2)", "(3)"], ["(1-3)"]]
    assert paper_style(NUMBERED, find_markers(" ".join(texts))) == ROUND_NUMERIC
    resolved = resolve_markers(find_markers("before (1, 3)."), NUMBERED)
    assert resolved[0].entry_indexes == (1, 3)


@pytest.mark.parametrize("text", [
    "We (1) filter the water and (2) count the cells.",  # an enumeration: each label opens its item
    "As Eq. (2) shows, the loss falls.",
    "Substituting equation (3) gives the bound.",
    "The value f(1) is positive.",
    "The point x = (1, 2) lies outside.",
    "The vector (1, 2) is normalised.",
    "Weights were 0.5 (0) and 1.0 (1) respectively.",
])
def test_round_bracket_numbers_that_count_items_or_name_equations_cite_nothing(text):
    assert kept_markers([text], NUMBERED) == [[]]


def test_round_bracket_numbers_need_the_paper_context():
    text = "The microlayer hosts distinct communities (1, 3)."
    assert detect_citances(text) == []  # alone, "(1, 3)" may be an equation's number
    assert kept_markers([text], []) == [[]]  # no numbered list to resolve it
    assert kept_markers([text, "It is known (Smith, 2020)."], AUTHOR_YEAR_LIST) == [[], ["(Smith, 2020)"]]


def test_a_paper_numbered_in_square_brackets_drops_its_round_and_superscript_numbers():
    texts = ["As shown before [1], the loss falls (2).", "Footnotes mark asides.¹ Others agree [2, 3]."]
    assert kept_markers(texts, NUMBERED) == [["[1]"], ["[2, 3]"]]
    assert paper_style(NUMBERED, find_markers(" ".join(texts))) == NUMERIC


def test_a_superscript_paper_drops_round_equation_numbers_that_happen_to_resolve():
    texts = ["Surface films hold bacteria.¹,³ Acid drainage was studied.² Its rate follows from (1) directly."]
    assert kept_markers(texts, NUMBERED) == [["¹,³", "²"]]
    assert paper_style(NUMBERED, find_markers(texts[0])) == SUPERSCRIPT


# ---- superscript digits from the text layer -----------------------------------------------------------------------

def test_small_raised_digits_are_superscripts_and_level_or_full_size_digits_are_not():
    line_height, baseline = 9.6, 134.6
    assert is_superscript_word("1,3", 6.7, 129.5, line_height, baseline)
    assert is_superscript_word("4-6", 6.7, 129.5, line_height, baseline)
    assert not is_superscript_word("12", 9.6, 134.6, line_height, baseline)  # body-size digits
    assert not is_superscript_word("2", 6.7, 136.0, line_height, baseline)  # small but lowered: a subscript
    assert not is_superscript_word("a", 6.7, 129.5, line_height, baseline)


def test_superscript_words_are_rewritten_glued_to_their_word_and_punctuation():
    words = [("bacteria", False), ("1,3", True), (".", False), ("Acid", False), ("4-6", True), ("The", False)]
    assert with_superscripts("bacteria 1,3 . Acid 4-6 The", words) == "bacteria¹,³. Acid⁴⁻⁶ The"


def _superscript_paper() -> bytes:
    pdf = FPDF()
    pdf.add_page()
    pdf.set_font("Times", "", 11)

    def raised(text: str) -> None:
        pdf.char_vpos = "SUP"
        pdf.write(5, text)
        pdf.char_vpos = "LINE"

    pdf.write(5, "Surface films hold distinct bacteria")
    raised("1,3")
    pdf.write(5, ". Acid drainage was studied before")
    raised("2")
    pdf.write(5, " and again in later work. The area is 10 m")
    raised("2")
    pdf.write(5, " in all samples.")
    pdf.ln(12)
    pdf.set_font("Times", "B", 11)
    pdf.cell(0, 6, "References", new_x="LMARGIN", new_y="NEXT")
    pdf.set_font("Times", "", 9)
    for entry in ("1. Agogue H, Casamayor EO. Comparison of samples. Appl Environ Microbiol. 2008;74:1234-1240.",
                  "2. Baker BJ, Banfield JF. Microbial communities in acid mine drainage. FEMS Microbiol Ecol. 2003.",
                  "3. Cunliffe M, Murrell JC. Microbiology of aquatic surface microlayers. FEMS Microbiol Rev. 2011."):
        pdf.multi_cell(0, 4.5, entry, new_x="LMARGIN", new_y="NEXT")
    return bytes(pdf.output())


def test_a_pdf_with_superscript_citations_gives_them_resolved_and_no_power_of_ten():
    from peerify_dagster.resources.document_parser import DocumentParser

    parsed = DocumentParser().parse(_superscript_paper(), source_name="superscript.pdf")
    prose = [block for block in parsed.blocks if block.kind == "paragraph"]
    entries = entries_from_blocks(parsed.blocks)
    assert [entry.label for entry in entries] == ["1", "2", "3"]
    found = [(resolved.marker.text, resolved.entry_indexes)
             for block, citances in zip(prose, detect_paper_citances([b.text for b in prose], entries))
             for citance in citances for resolved in resolve_markers(citance.markers, entries)]
    assert found == [("¹,³", (1, 3)), ("²", (2,))]  # "10 m²" is a unit, not a citation


# ---- "et al." between entries of one surname and year -----------------------------------------------------------

WALLACE = [parse_entry("Wallace, J. L. and Miller, M. J. S. (2000). Nitric oxide in mucosal defense: A little goes a "
                       "long way. Gastroenterology 119: 512-520.", 1),
           parse_entry("Wallace, J. L., McKnight, W., Reuter B. K. et al. (2000). NSAID-induced gastric damage in "
                       "rats. Gastroenterology 119: 706-714.", 2)]


@pytest.mark.parametrize("text, expected", [
    ("Damage needs both enzymes (Wallace et al., 2000).", (2,)),
    ("Nitric oxide defends the mucosa (Wallace and Miller, 2000).", (1,)),
    ("As Wallace et al. (2000) found, damage needs both.", (2,)),
])
def test_et_al_chooses_the_entry_with_more_authors(text, expected):
    (resolved,) = resolve_markers(find_markers(text), WALLACE)
    assert resolved.entry_indexes == expected


# ---- reference entries kept whole --------------------------------------------------------------------------------

@pytest.mark.parametrize("raw, first_surname, title", [
    # A period for a comma inside the author list: the year still bounds the names.
    ("Lichtenberger, L. M., Wang, Z-M., Romero. J. J. et al. (1995) Non-steroidal anti-inflammatory drugs "
     "associate with zwitterionic phospholipids. Nature Med. 1: 154-158.", "Lichtenberger",
     "Non-steroidal anti-inflammatory drugs associate with zwitterionic phospholipids"),
    ("Wilder-Smith CH, J. B., Fornstedt-Wallin, B., Hedman, A. et al. (2006). Dose-effect comparisons of the CINOD "
     "AZD3582 and naproxen. Gut 55: 1-8.", "Wilder-Smith", "Dose-effect comparisons of the CINOD AZD3582 and naproxen"),
    # An initial glued to the given name by the text layer.
    ("Kenneth Ward Church and DonaldW. Hindle. 1990. Word association norms, mutual information, and lexicography. "
     "Computational Linguistics, 16(1):22-29.", "Church",
     "Word association norms, mutual information, and lexicography"),
    # A lower-case subtitle after a question.
    ("Ana Marasović and Anette Frank. 2018. SRL4ORL: Improving opinion role labeling? using multi-task learning "
     "with semantic role labeling. In Proceedings of NAACL, pages 583-594.", "Marasović",
     "SRL4ORL: Improving opinion role labeling? using multi-task learning with semantic role labeling"),
])
def test_entries_keep_their_title_past_a_slip_in_the_names_or_a_question(raw, first_surname, title):
    entry = parse_entry(raw, 1)
    assert entry.status == PARSED
    assert entry.surnames[0] == first_surname
    assert entry.title == title


def _reference_blocks(*texts: str) -> list[Block]:
    return [Block("reference", text, 9, ["References"], False, 10 + offset) for offset, text in enumerate(texts)]


def test_page_numbers_and_a_publishers_line_among_the_entries_are_no_entries():
    entries = entries_from_blocks(_reference_blocks(
        "Baker, B. J. and Banfield, J. F. (2003). Microbial communities in acid mine drainage. FEMS 44: 139-152.",
        "12",
        "Cunliffe, M. and Murrell, J. C. (2011). Microbiology of aquatic surface microlayers. FEMS 35: 233-246.",
        "To access this journal online: http://www.birkhauser.ch/IPh"))
    assert [entry.surnames[0] for entry in entries] == ["Baker", "Cunliffe"]
    assert all("birkhauser" not in entry.raw_text and not entry.raw_text.endswith(" 12") for entry in entries)


def test_an_entry_ending_on_its_pages_is_not_merged_with_the_next():
    entries = entries_from_blocks(_reference_blocks(
        "Reinhard Rapp. 1999. Automatic identification of word translations from unrelated English and German "
        "corpora. In Proceedings of ACL, pages 519-526 Richard Socher, Jeffrey Pennington, Eric H. Huang, Andrew Y. "
        "Ng, and Christopher D. Manning. 2011. Semi-supervised recursive autoencoders for predicting sentiment "
        "distributions. In Proceedings of EMNLP, pages 151-161."))
    assert [(entry.surnames[0], entry.year) for entry in entries] == [("Rapp", 1999), ("Socher", 2011)]


def test_a_footnote_read_into_the_reference_list_is_not_an_entry():
    elements = [LayoutElement("heading", "References", 9),
                LayoutElement("paragraph", "Baker, B. J. (2003). Microbial communities. FEMS 44: 139-152.", 9),
                LayoutElement("paragraph", "¹⁹ The Kaggle CORD-19 and TREC-COVID competitions.", 9)]
    blocks = assemble_blocks(elements)
    assert [block.kind for block in blocks] == ["heading", "reference", "paragraph"]
    assert len(entries_from_blocks(blocks)) == 1


def test_a_title_in_title_case_is_never_read_as_names_and_capitals_cost_no_backtracking():
    entry = parse_entry("Smith, J. Deep Learning For Graphs. Journal of Graphs 2020.", 1)
    assert (entry.surnames, entry.title) == (("Smith",), "Deep Learning For Graphs")
    shouting = "WALLACE JL MCKNIGHT W " + "ABCDEFGHIJKLMNOPQRSTUVWXYZ " * 8 + "ACL 2009."
    started = time.perf_counter()
    parse_entry(shouting, 1)
    assert time.perf_counter() - started < 1.0  # exponential backtracking took minutes here


def test_markers_with_accents_split_off_by_the_text_layer_name_their_entries():
    entries = [parse_entry("Radim ˇReh˚uˇrek and Petr Sojka. 2010. Software framework for topic modelling with large "
                           "corpora. In Proceedings of LREC.", 1),
               parse_entry("Wojciech Kry´sci ´nski and Jan M¨uller. 2019. Neural text summarization. In Proceedings of "
                           "EMNLP.", 2)]
    assert [entry.surnames for entry in entries] == [("Řehůřek", "Sojka"), ("Kryściński", "Müller")]
    markers = find_markers("We use gensim (ˇReh˚uˇrek and Sojka, 2010), as Kry´sci´nski and M¨uller (2019) show.")
    assert [resolved.entry_indexes for resolved in resolve_markers(markers, entries)] == [(1,), (2,)]


def test_an_author_list_cut_at_a_column_break_is_one_entry():
    entries = entries_from_blocks(_reference_blocks(
        "Waleed Ammar, Dirk Groeneveld, Chandra Bhagavatula, Iz Beltagy, Sebastian Kohlmeier,",
        "Kyle Lo, Tyler Murray, and Oren Etzioni. 2018. Construction of the literature graph in semantic scholar. "
        "In Proceedings of NAACL, pages 84-91.",
        "Kimitaka Asatani and Ichiro Sakata. 2018. Detecting trends in academic research. In PloS one."))
    assert [(entry.surnames[0], entry.year) for entry in entries] == [("Ammar", 2018), ("Asatani", 2018)]
    assert entries[0].title == "Construction of the literature graph in semantic scholar"


def _line(page: int, y: float, text: str, size: float = 10.0, x: float = 72.0) -> TextLine:
    return TextLine(page, x, y, x + 5.2 * len(text) * size / 10, y + size, size, False, text)


def test_a_footnotes_lines_stay_together_inside_a_reference_list():
    body = [_line(1, 80 + 12 * row, "Prose of the paper that sets the body size of the page and runs on to the "
                                    "margin.") for row in range(6)]
    lines = [*body, _line(1, 170, "References", 11.0),
             _line(1, 190, "Waleed Ammar, Dirk Groeneveld, Chandra Bhagavatula, Iz Beltagy, Miles", 8.5),
             _line(1, 201, "Crawford, Doug Downey, Sebastian Kohlmeier,", 8.5, x=83.0),
             _line(1, 745, "¹⁹ The Kaggle CORD-19 and TREC-COVID competitions.", 7.75, x=82.0),
             _line(1, 757, "See Wang et al. (2020) for details.", 7.75),
             _line(2, 67, "Kyle Lo, Tyler Murray, and Oren Etzioni. 2018. Construction of the literature", 8.5),
             _line(2, 78, "graph in semantic scholar. In Proceedings of NAACL.", 8.5, x=83.0)]
    blocks = recover_blocks(lines, {1: (612.0, 792.0), 2: (612.0, 792.0)})
    footnotes = [block.text for block in blocks if block.text.startswith("¹⁹")]
    assert footnotes == ["¹⁹ The Kaggle CORD-19 and TREC-COVID competitions. See Wang et al. (2020) for details."]
    (entry,) = entries_from_blocks(blocks)
    assert (entry.surnames[0], entry.year, "Wang" in entry.raw_text) == ("Ammar", 2018, False)

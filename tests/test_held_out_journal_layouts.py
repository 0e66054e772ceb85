"""Layout rules that hold across journal publishers (issue 37, measured on benchmarks/journal_layouts.json's held-out
half): a title set below a journal's banner or a section label in larger type, and a numbered reference entry set in
bold, which names its authors by their initials, never read as a heading."""

from __future__ import annotations

from dataclasses import replace

import pytest

from peerify_dagster.domain.layout.elements import recover_blocks
from peerify_dagster.domain.layout.lines import TextLine

PAGE = {1: (612.0, 792.0)}
PROSE = "Prose of the paper that sets the body size of the page and runs on to the right margin of its column."


def line(y: float, text: str, size: float = 10.0, bold: bool = False, x: float = 72.0) -> TextLine:
    return TextLine(1, x, y, x + 5.0 * len(text) * size / 10, y + size, size, bold, text)


def prose(y: float, rows: int) -> list[TextLine]:
    return [line(y + 12 * row, PROSE) for row in range(rows)]


def test_a_title_below_a_banner_in_larger_type_is_the_title():
    lines = [line(40, "Heliyon", 22.0), line(70, "journal homepage: www.example.org/heliyon", 8.0),
             line(84, "Research article", 9.0),
             line(104, "Gas engine system optimisation for a district heating network", 15.0),
             line(128, "Ada Author, Ben Writer", 10.0), *prose(150, 8)]
    blocks = recover_blocks(lines, PAGE)
    assert [block.text for block in blocks if block.kind == "title"] == [
        "Gas engine system optimisation for a district heating network"]


def test_a_title_that_is_the_largest_type_stays_the_title():
    lines = [line(60, "Attention Is All You Need", 17.0), line(90, "Ada Author, Ben Writer", 10.0), *prose(120, 8)]
    assert [block.text for block in recover_blocks(lines, PAGE) if block.kind == "title"] == [
        "Attention Is All You Need"]


def test_a_bold_numbered_reference_entry_is_no_heading():
    lines = [*prose(60, 8), line(170, "REFERENCES", 10.0, bold=True),
             line(190, "1. Agogué, H., M. Brink, J. Dinasquet, and G. J. Herndl. 2008. Major gradients", 9.5,
                  bold=True),
             line(201, "in putatively nitrifying Archaea in the deep North Atlantic. Nature 456:788-791.", 9.5,
                  x=80.0),
             line(218, "2. Agogué, H., D. Lamy, P. R. Neal, and G. J. Herndl. 2011. Water mass specificity", 9.5,
                  bold=True),
             line(229, "of bacterial communities in the North Atlantic. Mol. Ecol. 20:258-274.", 9.5, x=80.0)]
    blocks = recover_blocks(lines, PAGE)
    assert [block.text for block in blocks if block.kind == "heading"] == ["REFERENCES"]
    entries = [block.text for block in blocks if block.kind == "reference"]
    assert len(entries) == 2 and entries[0].startswith("1. Agogué") and entries[1].startswith("2. Agogué")


def sidebar(y: float, text: str) -> TextLine:
    return TextLine(1, 40.0, y, 40.0 + 3.0 * len(text), y + 7.0, 7.0, False, text)


SIDEBAR = [f"Note {index}: the journal's sidebar line of metadata" for index in range(30)]


def test_a_sidebar_beside_the_main_column_is_read_apart_and_the_title_is_found_past_it():
    main = [line(90, "RESEARCH ARTICLE", 7.0, x=200.0),
            line(104, "A Novel Reproductive Mode in Frogs: A New", 18.0, x=200.0),
            line(126, "Species of Fanged Frog", 18.0, x=200.0),
            line(152, "Ada Author, Ben Writer", 9.0, x=200.0),
            *(TextLine(1, 200.0, 180 + 12 * row, 560.0, 190 + 12 * row, 10.0, False,
                       f"Main column prose line {row} that runs across the whole of the main column here.")
              for row in range(30))]
    side = [sidebar(90 + 14 * index, text) for index, text in enumerate(SIDEBAR)]
    # A line above both that crosses the gutter (a byline set from the left margin) is read as full width.
    byline = [TextLine(1, 40.0, 60.0, 300.0, 69.0, 9.0, True, "Kai Vahldiek, Bernd Rueger and Frank Klawonn")]
    blocks = recover_blocks(sorted(byline + main + side, key=lambda item: (item.y0, item.x0)), PAGE)
    assert [block.text for block in blocks if block.kind == "title"] == [
        "A Novel Reproductive Mode in Frogs: A New Species of Fanged Frog"]
    # No row mixes the sidebar's words with the main column's.
    assert not any("sidebar" in block.text and "Main column" in block.text for block in blocks)
    body = " ".join(block.text for block in blocks if block.kind in ("paragraph", "abstract"))
    assert "line 0 that runs" in body and "line 29 that runs" in body


def test_a_reference_list_in_three_columns_under_one_column_text_is_read_column_by_column():
    entries = [f"{index}. Author{index} AB, Writer CD. 2015 A study number {index}. J. Biol. {index}, 1-9."
               for index in range(1, 19)]
    lines = [*prose(60, 6), line(150, "References", 14.0)]
    for index, entry in enumerate(entries):
        column, position = divmod(index, 6)
        first, rest = entry.split(" 2015 ")
        first += " 2015"
        x, y = 72.0 + 160.0 * column, 176.0 + 22.0 * position
        lines += [TextLine(1, x, y, x + 145.0, y + 6.5, 6.5, False, first),
                  TextLine(1, x + 8, y + 9.5, x + 8 + 3.2 * len(rest), y + 16.0, 6.5, False, rest)]
    blocks = recover_blocks(sorted(lines, key=lambda item: (item.y0, item.x0)), PAGE)
    assert [block.text for block in blocks if block.kind == "reference"] == entries


def test_a_title_beside_a_journal_box_under_a_longer_banner_leaves_both_out():
    lines = [line(40, "Journal of Alloys and Compounds", 13.0, x=180.0),
             line(70, "journal homepage: www.example.org/jalcom", 7.0, x=180.0),
             TextLine(1, 72.0, 101.0, 100.0, 110.0, 9.0, True, "OPEN"),
             TextLine(1, 110.0, 98.0, 330.0, 110.5, 12.5, False, "Characterization of severely deformed"),
             TextLine(1, 400.0, 100.0, 520.0, 106.0, 6.0, False, "Article reuse guidelines"),
             TextLine(1, 110.0, 114.0, 320.0, 126.5, 12.5, False, "composites made by powder metallurgy"),
             TextLine(1, 400.0, 116.0, 520.0, 122.0, 6.0, False, "DOI: 10.1000/example"),
             line(140, "Ada Author, Ben Writer", 10.0), *prose(160, 8)]
    blocks = recover_blocks(lines, PAGE)
    assert [block.text for block in blocks if block.kind == "title"] == [
        "Characterization of severely deformed composites made by powder metallurgy"]
    front = " ".join(block.text for block in blocks if block.kind in ("authors", "front_matter"))
    assert "DOI: 10.1000/example" in front and "Journal of Alloys and Compounds" in front


def face(y: float, text: str, size: float, font: str, bold: bool = False, x: float = 72.0) -> TextLine:
    return TextLine(1, x, y, x + 5.0 * len(text) * size / 10, y + size, size, bold, text, font=font)


def test_a_heading_face_smaller_than_the_body_is_learnt_from_a_body_section_name():
    body = "Body prose of the paper set in the serif face that runs across the column and goes on."
    lines = []
    y = 60.0
    for heading in ("The Model", "Discussion"):
        lines.append(face(y, heading, 8.0, "Frutiger-BlackCn", bold=True))
        y += 11
        for _ in range(6):
            lines.append(face(y, body, 10.75, "Dutch801BT-Roman"))
            y += 11
    blocks = recover_blocks(lines, PAGE)
    assert [block.text for block in blocks if block.kind == "heading"] == ["The Model", "Discussion"]
    # Without a body section's name, nothing teaches the face: a small bold line stays text.
    lines[len(lines) // 2] = face(lines[len(lines) // 2].y0, "Another Section", 8.0, "Frutiger-BlackCn", bold=True)
    assert [block.text for block in recover_blocks(lines[:len(lines) // 2 + 1], PAGE)
            if block.kind == "heading"] == []


def entry(y: float, text: str, x: float = 72.0, size: float = 7.25) -> TextLine:
    return TextLine(1, x, y, x + 3.3 * len(text), y + size, size, False, text)


def test_a_reference_list_no_heading_names_is_found_by_its_entries_shape_and_pauses_for_body_text():
    body = [line(60 + 12 * row, PROSE) for row in range(20)]
    entries = [entry(310, "1. Weiss, H. A. & Hawkes, S. (2001) Leprosy Rev. 72, 92-98."),
               entry(320, "2. Taha, T. E., Dallabetta, G. A. & Hoover, D. R. (1998)"),
               entry(329, "AIDS 12, 197-203.", x=80.0),
               entry(339, "3. D'Souza, M. P. & Harden, V. A. (1996) Nat. Med. 2, 1293-1300.")]
    more_body = [line(360 + 12 * row, PROSE) for row in range(3)]
    resumed = [entry(410, "4. Martinson, J. J. & Clegg, J. B. (1997) Nat. Genet. 16, 100-103."),
               entry(420, "5. Roos, M. T. L. & Lange, J. M. A. (1992) J. Infect. Dis. 165, 427-432.")]
    blocks = recover_blocks(body + entries + more_body + resumed, PAGE)
    references = [block.text for block in blocks if block.kind == "reference"]
    assert [text[:3] for text in references] == ["1. ", "2. ", "3. ", "4. ", "5. "]
    assert references[1].endswith("AIDS 12, 197-203.")
    assert sum(1 for block in blocks if block.kind != "reference" and PROSE[:20] in block.text) >= 2
    # A numbered list in the body that names no authors is no reference list.
    steps = [entry(310 + 10 * index, f"{index}. We run step {index} of the method on every paper.")
             for index in range(1, 5)]
    assert not any(block.kind == "reference" for block in recover_blocks(body + steps, PAGE))


@pytest.mark.parametrize("front", [
    "Kate Griffiths¹, Rong Hou², Hairui Wang² and Zhihe Zhang²",  # a byline with affiliation marks
    "Research Article",  # an article-type label
    "Received: February 27, 2024 Revised: March 20, 2024",  # the history line
    "Ri + Ras + Rc + Rs",  # a fraction's denominator on its own line
])
def test_front_matter_and_formulas_set_like_headings_are_no_headings(front):
    lines = [*prose(60, 4), line(120, front, 12.0, bold=True), *prose(140, 4),
             line(200, "Discussion", 12.0, bold=True), *prose(220, 4)]
    assert [block.text for block in recover_blocks(lines, PAGE) if block.kind == "heading"] == ["Discussion"]


def test_materials_and_methods_is_a_standard_section_in_body_type():
    lines = [*prose(60, 4), line(120, "MATERIALS AND METHODS", 10.0, bold=True), *prose(136, 4),
             line(200, "1. A numbered line that makes the paper count as numbered", 10.0, bold=True),
             line(216, "2. Another numbered line of the paper", 10.0, bold=True), *prose(232, 2)]
    assert "MATERIALS AND METHODS" in [block.text for block in recover_blocks(lines, PAGE) if block.kind == "heading"]


@pytest.mark.parametrize("methods", ["Methods", "STAR★Methods", "Online Methods"])
def test_a_methods_section_after_the_references_ends_them(methods):
    lines = [*prose(60, 4), line(120, "References", 12.0, bold=True),
             line(140, "1. Agogué H, Brink M. Major gradients in Archaea. Nature 456, 788-791 (2008).", 8.0),
             line(152, "2. Herndl GJ, Reinthaler T. Microbial control. Nat. Geosci. 6, 718-724 (2013).", 8.0),
             line(180, methods, 12.0, bold=True), *prose(200, 4),
             line(260, "Key resources table", 12.0, bold=True), *prose(280, 4)]
    blocks = recover_blocks(lines, PAGE)
    assert len([block for block in blocks if block.kind == "reference"]) == 2
    # Its subsections are read as in the body, not as a reference list's numbered appendix headings.
    assert [block.text for block in blocks if block.kind == "heading"] == ["References", methods, "Key resources table"]


def small(y: float, text: str, bold: bool = False, x: float = 72.0) -> TextLine:
    return TextLine(1, x, y, x + 488.0 if len(text) > 40 else x + 4.0 * len(text), y + 8.0, 8.0, bold, text)


def test_a_section_set_in_small_type_keeps_its_numbered_heading_and_its_prose_beside_a_table():
    small_prose = [small(190 + 10 * row, f"the samples were milled for {row} hours and then compacted at high pressure "
                                        "in the die") for row in range(12)]
    lines = [line(60, "1. Introduction", 10.0, bold=True), *prose(76, 8),
             small(176, "2. Experimental procedures", bold=True), *small_prose,
             small(310, "Table 1", bold=True), small(318, "Powder specifications of the mixtures."),
             TextLine(1, 72.0, 330.0, 120.0, 336.0, 6.0, False, "Powder"),
             TextLine(1, 200.0, 330.0, 240.0, 336.0, 6.0, False, "Size"),
             TextLine(1, 72.0, 340.0, 120.0, 346.0, 6.0, False, "Al"),
             TextLine(1, 200.0, 340.0, 240.0, 346.0, 6.0, False, "45 um"),
             line(370, "3. Results", 10.0, bold=True), *prose(386, 12)]
    blocks = recover_blocks(lines, PAGE)
    assert [block.text for block in blocks if block.kind == "heading"] == [
        "1. Introduction", "2. Experimental procedures", "3. Results"]
    assert all("hours" not in block.text for block in blocks if block.kind == "table")
    assert any(block.kind == "paragraph" and "for 11 hours" in block.text for block in blocks)
    assert [block.text for block in blocks if block.kind == "caption"] == [
        "Table 1 Powder specifications of the mixtures."]


def test_a_subheading_set_right_below_its_sections_heading_needs_no_space_above():
    lines = [*prose(60, 6), line(150, "Materials and methods", 12.0, bold=True),
             line(164, "Study area", 10.0, bold=True), *prose(182, 6)]
    assert [block.text for block in recover_blocks(lines, PAGE) if block.kind == "heading"] == [
        "Materials and methods", "Study area"]


def test_a_paragraph_ending_on_a_raised_citation_number_ends_there():
    lines = [*prose(60, 3), line(96, "with the environment.⁴"),
             line(108, "Shortly, the fall in energy demand is expected to continue in the coming decades as", x=84.0),
             *prose(120, 3)]
    paragraphs = [block.text for block in recover_blocks(lines, PAGE) if block.kind in ("paragraph", "abstract")]
    assert len(paragraphs) == 2 and paragraphs[0].endswith("environment.⁴") and paragraphs[1].startswith("Shortly")


ABSTRACT_LINE = "Abstract prose set in the journal's own face that runs across the full width of the column."
BODY_LINE = "Introduction prose set in the serif face of the body that runs across the full column width."


def front_page(abstract: list[TextLine], y: float) -> list[TextLine]:
    """A title, a byline, the abstract given, then an introduction in the body's face with no heading above it,
    and a headed section further on (the body's face is set by the lines after the abstract)."""
    lines = [face(100, "Toward explainable heat load patterns", 18.0, "Corbel-Bold", bold=True),
             face(124, "Ada Author, Ben Writer", 9.0, "Corbel"), *abstract]
    for row in range(8):
        lines.append(face(y + 11 * row, BODY_LINE, 10.0, "MinionPro-Regular"))
    lines.append(face(y + 100, "Methods", 12.0, "Corbel-Bold", bold=True))
    lines += [face(y + 116 + 11 * row, BODY_LINE, 10.0, "MinionPro-Regular") for row in range(8)]
    return lines


@pytest.mark.parametrize("labelled", [False, True])
def test_an_introduction_without_a_heading_ends_the_abstract_set_in_another_face(labelled):
    label = [face(144, "Abstract", 10.0, "Corbel-Bold", bold=True)] if labelled else []
    abstract = [face(160 + 10 * row, ABSTRACT_LINE, 8.5, "Corbel-Bold", bold=True) for row in range(4)]
    blocks = recover_blocks(front_page(label + abstract, 210), PAGE)
    abstract_text = " ".join(block.text for block in blocks if block.kind == "abstract")
    assert "Abstract prose" in abstract_text and "Introduction prose" not in abstract_text
    introduction = next(block for block in blocks if block.text.startswith("Introduction prose"))
    assert (introduction.kind, introduction.section_path) == ("paragraph", [])
    assert [block.text for block in blocks if block.kind == "heading"] == ["Abstract"] * labelled + ["Methods"]


def test_an_abstract_in_the_bodys_face_runs_on_to_the_first_heading():
    # Nothing marks where such an abstract ends but the heading, and a label above it in its own type teaches no
    # face: here page 1 holds only the title and byline (Cell Press's graphical abstract page), and page 2 opens
    # with the article-type label.
    abstract = [face(144, "Article", 7.0, "Corbel"),
                *(face(160 + 11 * row, BODY_LINE.replace("Introduction", "Abstract"), 10.0, "MinionPro-Regular")
                  for row in range(4))]
    lines = front_page(abstract, 210)
    lines = lines[:2] + [replace(line, page=2) for line in lines[2:]]
    blocks = recover_blocks(lines, {1: PAGE[1], 2: PAGE[1]})
    abstract_text = " ".join(block.text for block in blocks if block.kind == "abstract")
    assert "Abstract prose" in abstract_text and "Introduction prose" in abstract_text


def test_a_bold_italic_subheading_in_its_own_face_is_a_heading_close_above_its_paragraph():
    # PeerJ: bold italic sans-serif subheads sit a line gap above their paragraph, which an italic line in the body's
    # face (a quotation, a species name) never makes a heading.
    body = "Body prose of the paper set in the serif face that runs across the column and goes on."
    lines = [face(60, "Methods", 12.0, "TeXGyreHeros-Bold", bold=True)]
    lines += [face(76 + 12 * row, body, 10.0, "Mini-Regular") for row in range(6)]
    lines.append(replace(face(160, "Household socioeconomic and attitudinal response", 10.25,
                              "TeXGyreHeros-BoldItalic", bold=True), italic=True))
    lines.append(replace(face(172, "Loxodonta africana in the buffer zone", 10.0, "Mini-Italic"), italic=True))
    lines += [face(184 + 12 * row, body, 10.0, "Mini-Regular") for row in range(6)]
    headings = [block.text for block in recover_blocks(lines, PAGE) if block.kind == "heading"]
    assert headings == ["Methods", "Household socioeconomic and attitudinal response"]

"""Layout rules that hold across journal publishers (issue 37, measured on benchmarks/journal_layouts.json's held-out
half): a title set below a journal's banner or a section label in larger type, and a numbered reference entry set in
bold, which names its authors by their initials, never read as a heading."""

from __future__ import annotations

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
    blocks = recover_blocks(sorted(main + side, key=lambda item: (item.y0, item.x0)), PAGE)
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

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
